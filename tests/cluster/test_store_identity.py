"""The lease store's identity, through its protocol as holders call it: a store restored into
another cluster, lease rows restored into a store installed afresh, and an identity row deleted
by hand each make the store settle for a whole safe guard, during which no machine id is handed
out as released, new or expired, a live holder keeps renewing, a stopped one does not, and after
which every claim waits past the time it settled. (The failovers themselves are in
tests/faults/test_failover.py.)"""

import time

from helpers.fleet import restore_store_copy, start_store
from helpers.pgcluster import ClusterTest

SAFE_GUARD_MS = 3000
LAYOUT = "epoch 0 ms, millisecond, 41/4/12 bits"


def now_ms():
    return int(time.time() * 1000)


def claim(store, instance, knows_settling=True):
    """(outcome, machine id, previous watermark, expires_at_ms) of a claim by `instance`, whose
    clock is right: as a server does, it claims with its clock plus its safe guard as the bound."""
    return store.rows(
        "SELECT outcome, machine_id, previous_watermark_ms, expires_at_ms FROM cosid.lease_claim("
        f"'n', 4, '{instance}', false, {SAFE_GUARD_MS}, 't-{instance}', "
        f"{now_ms() + SAFE_GUARD_MS}, "
        f"'{LAYOUT}', {str(knows_settling).lower()})")[0]


def renew(store, instance, machine_id, live):
    return store.query(
        f"SELECT count(*) FROM cosid.lease_renew('n', {machine_id}, '{instance}', "
        f"'t-{instance}', {SAFE_GUARD_MS}, {now_ms()}, {str(live).lower()})")


class StoreIdentity(ClusterTest):
    def assert_settles(self, store, holder, machine_id):
        """The store settles now: a new claim is refused until a safe guard has passed, then
        answered with a floor at or past the end of the settling."""
        outcome, _, _, settles_at_ms = claim(store, "newcomer")
        self.assertEqual(outcome, "settling")
        self.assertGreater(int(settles_at_ms), now_ms())
        self.assertEqual(claim(store, "old-server", knows_settling=False)[0], "contended")
        # A holder that still generates keeps its lease; one that stopped does not get it back.
        self.assertEqual(renew(store, holder, machine_id, live=True), "1")
        self.assertEqual(renew(store, "stopped", 1, live=False), "0")
        time.sleep((int(settles_at_ms) - now_ms()) / 1000 + 0.2)
        outcome, taken, floor_ms, _ = claim(store, "newcomer")
        self.assertIn(outcome, ("new", "expired"))
        self.assertNotEqual(taken, machine_id)
        self.assertGreaterEqual(int(floor_ms), int(settles_at_ms))

    def test_a_store_restored_into_another_cluster_settles(self):
        store = self.track(start_store("identity-store", 25940))
        self.assertEqual(claim(store, "holder")[:2], ["new", "0"])
        self.assertEqual(claim(store, "stopped")[:2], ["new", "1"])
        # The store before the restore answers at once.
        self.assertEqual(claim(store, "third")[:2], ["new", "2"])
        copy = self.track(restore_store_copy(store, "identity-store-copy", 25945))
        self.assertEqual(copy.query("SELECT settles FROM cosid.store_identity"), "f")
        time.sleep(SAFE_GUARD_MS / 1000 + 0.2)
        # "stopped" and "third" are expired now, and would be taken at once by the copy.
        self.assert_settles(copy, "holder", 0)
        self.assertEqual(copy.query("SELECT settles FROM cosid.store_identity"), "t")

    def test_rows_restored_into_a_store_installed_afresh_settle(self):
        store = self.track(start_store("identity-rows", 25950))
        self.assertEqual(claim(store, "holder")[:2], ["new", "0"])
        self.assertEqual(claim(store, "stopped")[:2], ["new", "1"])
        # As pg_restore brings rows a store elsewhere wrote (the protocol always writes its own
        # identity).
        store.query("UPDATE cosid.machine_lease "
                    "SET written_in = 'system 1, timeline 1, database 1'")
        time.sleep(SAFE_GUARD_MS / 1000 + 0.2)
        self.assert_settles(store, "holder", 0)

    def test_an_identity_row_deleted_by_hand_settles(self):
        store = self.track(start_store("identity-deleted", 25955))
        self.assertEqual(claim(store, "holder")[:2], ["new", "0"])
        self.assertEqual(claim(store, "stopped")[:2], ["new", "1"])
        store.query("DELETE FROM cosid.store_identity")
        time.sleep(SAFE_GUARD_MS / 1000 + 0.2)
        self.assert_settles(store, "holder", 0)
