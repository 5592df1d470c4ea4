"""The lease store's identity, through its protocol as holders call it: a store restored into
another cluster, lease rows restored into a store installed afresh, and an identity record
deleted by hand each make the store settle for a whole safe guard, during which no machine id is
handed out as released, new or expired, a live holder keeps renewing, a stopped one does not,
and after which every claim waits past the time it settled. Against a holder's credential:
durations and timestamps out of range are refused before anything is computed or recorded (one
used to make every call fail with "timestamp out of range" after the next identity change), and
a holder's open transaction that saw the change first does not stall the fleet's renewals. (The
failovers themselves are in tests/faults/test_failover.py.)"""

import os
import signal
import subprocess
import time

from helpers.fleet import (FLEET_PASSWORD, FLEET_ROLE, fleet_server, restore_store_copy,
                           start_store)
from helpers.leases import DEADLINE_S, FAST_LEASES, status, try_next, wait_up
from helpers.pgcluster import (PG_BIN, Cluster, ClusterTest, SqlError, as_postgres, free_port,
                               query_as, wait_for)

SAFE_GUARD_MS = 3000
LAYOUT = "epoch 0 ms, millisecond, 41/4/12 bits"


# Whether the store has recorded a change to wait out.
SETTLES = "SELECT bool_or(settles) FROM cosid.store_identity"
# What a failover looks like to the store: its identity now is none it recorded.
IDENTITY_CHANGE = "UPDATE cosid.store_identity SET identity = 'system 1, timeline 1, database 1'"


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


def claim_once_settled(store, instance):
    """The answers to a claim by `instance`, tried again every 0.2 s while the store answers
    `settling` (at most 50 times): the last one is the store's answer once it settled."""
    answers = [claim(store, instance)]
    while answers[-1][0] == "settling" and len(answers) < 50:
        time.sleep(0.2)
        answers.append(claim(store, instance))
    return answers


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
        # Then until the claimer's clock passes the end of the settling plus the clock lead the
        # store allows (1 s by default).
        answers = claim_once_settled(store, "newcomer")
        outcome, taken, floor_ms, _ = answers[-1]
        self.assertIn(outcome, ("new", "expired"), answers)
        self.assertNotEqual(taken, machine_id)
        self.assertGreaterEqual(int(floor_ms), int(settles_at_ms) + 1000)

    def test_a_store_restored_into_another_cluster_settles(self):
        store = self.track(start_store("identity-store", 25940))
        self.assertEqual(claim(store, "holder")[:2], ["new", "0"])
        self.assertEqual(claim(store, "stopped")[:2], ["new", "1"])
        # The store before the restore answers at once.
        self.assertEqual(claim(store, "third")[:2], ["new", "2"])
        copy = self.track(restore_store_copy(store, "identity-store-copy", 25945))
        self.assertEqual(copy.query(SETTLES), "f")
        time.sleep(SAFE_GUARD_MS / 1000 + 0.2)
        # "stopped" and "third" are expired now, and would be taken at once by the copy.
        self.assert_settles(copy, "holder", 0)
        self.assertEqual(copy.query(SETTLES), "t")

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

    def test_a_restart_of_the_store_settles(self):
        # A start of the store's server cannot be told from an older copy of its data
        # directory started in its place: it settles, while a live holder keeps renewing.
        # It settles a safe guard after the start: the start came before anything the
        # restarted server was told.
        store = self.track(start_store("identity-restart", 25935))
        self.assertEqual(claim(store, "holder")[:2], ["new", "0"])
        store.restart()
        started_ms = int(store.query(
            "SELECT (extract(epoch FROM pg_postmaster_start_time()) * 1000)::bigint"))
        outcome, _, _, settles_at_ms = claim(store, "newcomer")
        self.assertEqual(outcome, "settling")
        self.assertEqual(int(settles_at_ms), started_ms + SAFE_GUARD_MS)
        self.assertEqual(renew(store, "holder", 0, live=True), "1")
        restarts = store.rows("SELECT restart, shared FROM cosid.store_identity WHERE settles")
        self.assertEqual(restarts, [["t", "f"]])
        answers = claim_once_settled(store, "newcomer")
        outcome, taken, floor_ms, _ = answers[-1]
        self.assertEqual([outcome, taken], ["new", "1"], answers)
        self.assertGreaterEqual(int(floor_ms), int(settles_at_ms) + 1000)

    def test_an_older_dump_restored_over_the_store_settles(self):
        # pg_restore --clean into the store's own database: the lease table is made again (a
        # new oid), with the rows of the dump; the merge trigger comes only after them.
        store = self.track(start_store("identity-clean", 25938))
        dump = store.base / "store.dump"
        connect = ["-h", "127.0.0.1", "-p", str(store.port), "-U", "postgres"]
        subprocess.run(as_postgres([PG_BIN / "pg_dump", *connect, "-Fc", "-f", dump,
                                    "postgres"]), check=True)
        self.assertEqual(claim(store, "holder")[:2], ["new", "0"])
        self.assertEqual(claim(store, "lost")[:2], ["new", "1"])
        subprocess.run(as_postgres([PG_BIN / "pg_restore", *connect, "-d", "postgres",
                                    "--clean", "--if-exists", dump]), check=True)
        self.assertEqual(store.query("SELECT count(*) FROM cosid.machine_lease"), "0")
        # Machine id 1 was claimed after the dump: a forgotten holder may still generate on it.
        outcome, _, _, settles_at_ms = claim(store, "newcomer")
        self.assertEqual(outcome, "settling")
        self.assertGreater(int(settles_at_ms), now_ms())

    def test_a_clock_too_far_ahead_of_the_store_is_refused(self):
        store = self.track(start_store("identity-lead", 25932))
        self.assertEqual(claim(store, "holder")[:2], ["new", "0"])

        def claim_ahead(instance, lead_ms):
            return store.rows(
                "SELECT outcome, previous_watermark_ms FROM cosid.lease_claim('n', 4, "
                f"'{instance}', false, {SAFE_GUARD_MS}, 't-{instance}', "
                f"{now_ms() + lead_ms + SAFE_GUARD_MS}, '{LAYOUT}', true)")[0]

        def renew_ahead(lead_ms):
            return store.query(
                "SELECT count(*) FROM cosid.lease_renew('n', 0, 'holder', 't-holder', "
                f"{SAFE_GUARD_MS}, {now_ms() + lead_ms + SAFE_GUARD_MS}, true)")
        # 1 s by default: a claimer 3 s ahead gets nothing and is told the limit; a holder
        # 3 s ahead renews nothing; servers of 0.2.0 to 0.4.0 are told to try again.
        self.assertEqual(claim_ahead("ahead", 3000), ["clock_ahead", "1000"])
        self.assertEqual(renew_ahead(3000), "0")
        self.assertEqual(renew_ahead(0), "1")
        self.assertEqual(store.query(
            "SELECT outcome FROM cosid.lease_claim('n', 4, 'old', false, "
            f"{SAFE_GUARD_MS}, 't-old', {now_ms() + 3000 + SAFE_GUARD_MS}, '{LAYOUT}')"),
            "contended")
        # A superuser raises it; nobody else can.
        with self.assertRaises(SqlError) as refused:
            query_as(store, FLEET_ROLE, "UPDATE cosid.store_settings "
                     "SET max_clock_lead = '1 hour'", FLEET_PASSWORD)
        self.assertEqual(refused.exception.sqlstate, "42501", refused.exception.stderr)
        with self.assertRaises(SqlError) as refused:
            store.query("UPDATE cosid.store_settings SET max_clock_lead = '2 hours'")
        self.assertEqual(refused.exception.sqlstate, "23514", refused.exception.stderr)
        store.query("UPDATE cosid.store_settings SET max_clock_lead = '5 s'")
        self.assertEqual(claim_ahead("ahead", 3000)[0], "new")
        self.assertEqual(renew_ahead(3000), "1")


class OwnStore(ClusterTest):
    """A server whose lease table is in its own cosid.database: its own lease worker cannot
    have a forgotten holder of the store's, since every process of its earlier start ended
    with the server; other servers' holders can."""

    def test_a_restart_settles_for_the_servers_own_worker_only_once_others_lease_here(self):
        # A safe guard of 60 s: a restart that settled would keep the server CLAIMING for it.
        server = self.track(Cluster("identity-own", free_port(25985),
                                    {**FAST_LEASES, "cosid.safe_guard_duration": "'60s'",
                                     "cosid.guarder_delay": "'2s'"}).init())
        server.start()
        server.query("CREATE EXTENSION cosid")
        wait_up(server, timeout=30)
        server.restart()
        # Up again at once, with nothing but its own workers writing there.
        wait_up(server, timeout=30)
        self.assertEqual(server.query("SELECT bool_or(shared) FROM cosid.store_identity"), "f")
        # Another holder (here through psql, as a server of a fleet would) claims there: for
        # it, the restart settles.
        self.assertEqual(server.rows(
            "SELECT outcome FROM cosid.lease_claim('others', 4, 'remote', false, 4000, "
            f"'t-remote', {now_ms() + 4000}, '{LAYOUT}', true)")[0], ["settling"])
        self.assertEqual(server.query("SELECT bool_or(shared) FROM cosid.store_identity"), "t")
        server.restart()
        wait_for(lambda: status(server)["state"] == "CLAIMING"
                 and "identity changed" in (status(server)["last_error"] or ""), 30,
                 "the server to wait for its store to settle")
        self.assertIsNotNone(try_next(server)[1])


class AgainstAHolder(ClusterTest):
    """The protocol under a holder's credential (a role with only cosid_lease_holder), with a
    server of the fleet generating."""

    def fleet(self, name, port):
        store = self.track(start_store(f"{name}-store", port))
        server = self.server(f"{name}-server", port + 3, store)
        return store, server, wait_up(server)["machine_id"]

    def server(self, name, port, store):
        server = self.track(fleet_server(name, port, store.port, FAST_LEASES))
        server.start()
        server.query("CREATE EXTENSION cosid")
        return server

    def as_holder(self, store, sql):
        return query_as(store, FLEET_ROLE, sql, FLEET_PASSWORD)

    def test_out_of_range_durations_are_refused_and_the_next_change_settles(self):
        store, server, _ = self.fleet("identity-bounds", 25960)
        recorded = store.query("SELECT max(max_safe_guard) FROM cosid.store_identity")
        layout = store.query("SELECT cosid.lease_namespace_layout('cosid')")
        # Safe guards beyond a day (the one that made every call fail after the next change:
        # its settle time overflowed; 10^15 ms blocked claims until 33715), none, and watermarks
        # below 0 or far ahead: no renewal, no claim, nothing recorded.
        for guard, watermark in (("9223372036854000", "0"), ("1000000000000000", "0"),
                                 ("86400001", "0"), ("0", "0"), ("-1", "0"), ("NULL", "0"),
                                 ("4000", "-1"), ("4000", "(-9223372036854775807)"),
                                 ("4000", "9223372036854775807"),
                                 ("9223372036854775807", "9223372036854775807")):
            with self.subTest(guard=guard, watermark=watermark):
                self.assertEqual(self.as_holder(
                    store, "SELECT count(*) FROM cosid.lease_renew('nope', 0, 'nope', 'nope', "
                    f"{guard}, {watermark}, true)"), "0")
                with self.assertRaises(SqlError) as refused:
                    self.as_holder(store, "SELECT cosid.lease_claim('nope', 4, 'nope', false, "
                                   f"{guard}, 'nope', {watermark}, '{layout}', true)")
                self.assertEqual(refused.exception.sqlstate, "22023", refused.exception.stderr)
        self.assertEqual(self.as_holder(
            store, "SELECT cosid.lease_release('nope', 0, 'nope', 'nope', "
            "9223372036854775807)"), "f")
        with self.subTest("nothing recorded"):
            self.assertEqual(store.query("SELECT max(max_safe_guard) FROM cosid.store_identity"),
                             recorded)
            self.assertEqual(store.query(SETTLES), "f")
        # After the next change the store settles for the longest safe guard its holders gave
        # (4 s, not a day), the server keeps renewing, and a new server claims once it settled.
        store.query(IDENTITY_CHANGE)
        outcome, settles_at_ms, store_now_ms = self.as_holder(
            store, "SELECT outcome, expires_at_ms, store_now_ms FROM cosid.lease_claim('cosid', "
            f"10, 'newcomer', false, 1000, 't-newcomer', {now_ms()}, '{layout}', true)"
        ).split("|")
        self.assertEqual(outcome, "settling")
        self.assertLessEqual(int(settles_at_ms) - int(store_now_ms), 4000)
        renewed = store.query("SELECT max(renewed_at) FROM cosid.machine_lease")
        wait_for(lambda: store.query("SELECT max(renewed_at) > "
                                     f"'{renewed}' FROM cosid.machine_lease") == "t",
                 15, f"a renewal after the change:\n{status(server)}")
        second = self.server("identity-bounds-second", 25966, store)
        wait_up(second, timeout=30)
        self.assertEqual(status(server)["state"], "UP")
        self.assertIsNone(try_next(server)[1])

    def test_a_holders_open_transaction_does_not_stall_renewals_after_a_change(self):
        store, server, machine_id = self.fleet("identity-locks", 25970)
        layout = store.query("SELECT cosid.lease_namespace_layout('cosid')")
        # The server's worker is held while the store changes, so that the holder is the first
        # to see the change, inside a transaction it keeps open.
        worker = server.worker_pid()
        os.kill(worker, signal.SIGSTOP)
        self.addCleanup(os.kill, worker, signal.SIGCONT)
        wait_for(lambda: store.query(
            "SELECT count(*) FROM pg_stat_activity "
            f"WHERE usename = '{FLEET_ROLE}' AND state <> 'idle'") == "0", 10,
            "the server's store call in flight to end")
        store.query(IDENTITY_CHANGE)
        changed_at = store.query("SELECT clock_timestamp()")
        holder = subprocess.Popen(
            [str(PG_BIN / "psql"), "-X", "-q", "-At", "-h", "127.0.0.1", "-p", str(store.port),
             "-U", FLEET_ROLE, "-d", "postgres"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, env=dict(os.environ, PGPASSWORD=FLEET_PASSWORD))
        self.addCleanup(holder.stdout.close)
        self.addCleanup(holder.kill)
        holder.stdin.write("BEGIN; SELECT cosid.lease_release('x', 0, 'x', 'x', 0);\n")
        holder.stdin.flush()
        self.assertEqual(holder.stdout.readline().strip(), "f")
        os.kill(worker, signal.SIGCONT)

        def renewed_for(seconds, timeout):
            """Waits until the server renewed `seconds` after the change."""
            try:
                wait_for(lambda: store.query(
                    f"SELECT renewed_at > '{changed_at}'::timestamptz + interval '{seconds} s' "
                    f"FROM cosid.machine_lease WHERE machine_id = {machine_id}") == "t",
                    timeout, f"a renewal {seconds} s after the change")
            except AssertionError as timed_out:
                raise AssertionError(f"{timed_out}; the server: {status(server)}") from None

        # The server renews at once (every 0.5 s)...
        renewed_for(0, 10)
        # ...nothing is handed out meanwhile, whoever recorded the change (a claimer's own safe
        # guard counts: 60 s keeps the store settling for this check however slow the
        # machine)...
        self.assertEqual(self.as_holder(
            store, "SET lock_timeout = '5s'; "
            "SELECT outcome FROM cosid.lease_claim('cosid', 10, 'newcomer', false, "
            f"60000, 't-newcomer', {now_ms() + 60000}, '{layout}', true)"), "settling")
        # ...and it keeps renewing past a deadline's worth of time while the holder's
        # transaction stays open.
        renewed_for(DEADLINE_S + 0.5, 30)
        self.assertIsNone(holder.poll())
        self.assertEqual(status(server)["state"], "UP")
        self.assertIsNone(try_next(server)[1])
        holder.stdin.write("COMMIT;\n")
        holder.stdin.close()
        self.assertEqual(holder.wait(timeout=30), 0)
