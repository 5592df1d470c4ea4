"""Failovers of a shared lease store with a streaming standby, done for real: servers reach the
store as `host=primary,standby ... target_session_attrs=read-write`, replication is held back
(the primary's walsender paused) while a server claims or renews, then the primary is killed
(-9) and the standby promoted, so that the store forgets writes it acknowledged; and the same
with a synchronous standby. The scenario and its oracles are in helpers/failover.py.

    python3 run.py faults.test_failover
"""

import time
import unittest

from helpers.failover import (LONG_SAFE_GUARD_S, LONG_TIMINGS, SAFE_GUARD_S, STOPPED,
                              FailoverScenario, print_results)
from helpers.faults import full_fault_tier
from helpers.fleet import start_store
from helpers.leases import status
from helpers.replication import HeldBack, fail_over, start_standby

RESULTS = []


@full_fault_tier
class Failover(FailoverScenario, unittest.TestCase):
    tests_may_run_apart = True
    prefix = "failover"
    results = RESULTS

    @classmethod
    def tearDownClass(cls):
        print_results(RESULTS)

    def setUp(self):
        self.primary = start_store("failover-primary", 25400)
        self.addCleanup(self.primary.stop, mode="immediate", check=False)
        self.standby = start_standby(self.primary, "failover-standby", 25410,
                                     synchronous="synchronous" in self._testMethodName)
        self.addCleanup(self.standby.stop, mode="immediate", check=False)

    def store_ports(self):
        return [self.primary.port, self.standby.port]

    def held_back_failover(self, label, before_failover, after_s, **options):
        """Replication is held back from just before `before_failover` until the primary has
        died: what the primary acknowledged meanwhile never reaches the standby."""
        held = []

        def hold_then(holder, claimer):
            held.append(HeldBack(self.primary))
            before_failover(holder, claimer)

        def failover():
            fail_over(self.primary, self.standby)
            held[0].release()
        return self.run_scenario(label, hold_then, failover, after_s, **options)

    def standby_row(self):
        """The lease row as the standby has it: (instance id, whether it is expired)."""
        rows = self.standby.rows("SELECT instance_id, state = 'claimed' AND "
                                 "expires_at < clock_timestamp() FROM cosid.machine_lease")
        self.assertEqual(len(rows), 1, rows)
        return tuple(rows[0])

    def test_a_claim_the_promoted_standby_never_saw(self):
        # The holder renews for longer than its safe guard, then stops (its release reaches the
        # primary only), and the claimer takes the machine id there: the promoted standby shows
        # the holder's lease expired, and neither the release nor the claim. The holder, started
        # again, claims at once on the promoted store while the claimer still generates, if the
        # store let it.
        def claim_on_the_primary_only(holder, claimer):
            time.sleep(SAFE_GUARD_S + 1)
            holder_id = status(holder)["instance_id"]
            holder.stop()
            self.wait_state(claimer, "UP")
            time.sleep(1.0)
            holder.start()
            # The hold-back worked: the standby knows neither the release nor the claim.
            self.assertEqual(self.standby_row(), (holder_id, "t"))
        self.held_back_failover("lost release and claim (async)", claim_on_the_primary_only,
                                SAFE_GUARD_S * 2 + 4, expected=STOPPED)

    def test_renewals_the_promoted_standby_never_saw(self):
        # The holder renews for longer than its safe guard while replication is held back: the
        # promoted standby shows its lease expired, and the claimer would take it.
        def renew_on_the_primary_only(holder, claimer):
            time.sleep(LONG_SAFE_GUARD_S + 1)
            # The hold-back worked: the standby has the holder's lease expired.
            self.assertEqual(self.standby_row(), (status(holder)["instance_id"], "t"))
        (holder, claimer), stopped_s = self.held_back_failover(
            "lost renewals (async)", renew_on_the_primary_only, LONG_SAFE_GUARD_S + 4,
            timings=LONG_TIMINGS)
        # The holder kept its lease: it renewed on the promoted store, since it was still
        # generating, and the claimer still has none.
        self.assertEqual(status(holder)["state"], "UP")
        self.assertNotEqual(status(claimer)["state"], "UP")
        self.assertLess(stopped_s, LONG_SAFE_GUARD_S,
                        "the holder stopped for a whole safe guard")

    def test_a_synchronous_standby_loses_nothing(self):
        # The holder keeps its lease only if it renews on the promoted store before its own
        # deadline. With a 6 s safe guard that leaves 3.4 to 5.4 s, and a loaded suite once
        # took longer: the holder stopped, rightly, and was still claiming at the end. The long
        # safe guard leaves at least 8.8 s.
        (holder, claimer), stopped_s = self.run_scenario(
            "failover to a synchronous standby", lambda holder, claimer: time.sleep(1.0),
            lambda: fail_over(self.primary, self.standby), LONG_SAFE_GUARD_S + 4,
            timings=LONG_TIMINGS)
        self.assertEqual(status(holder)["state"], "UP")
        self.assertNotEqual(status(claimer)["state"], "UP")
        self.assertLess(stopped_s, LONG_SAFE_GUARD_S,
                        "the holder stopped for a whole safe guard")


if __name__ == "__main__":
    unittest.main()
