"""A split brain of the lease store, done for real: the holder lists the store's hosts as
`host=P,Q`, the claimer as `host=Q,P`; the primary P is frozen (SIGSTOP of every process, as a paused machine), the standby
Q promoted, and the servers move to Q; then P resumes, still a primary on its old timeline
(nothing fenced it), and a server that connects again finds P first in its list. A server that
saw Q's newer timeline must never take P for its store again: it remembers the latest timeline
it saw (in its data directory, across a restart) and passes P over. Without that, the holder,
restarted, claims its machine id again on P while the other server took it on Q: two stores,
one machine id. The scenario adds a row to the fault tier's table (helpers/failover.py).

    python3 run.py faults.test_split_brain
"""

import os
import signal
import unittest

from helpers.failover import (LONG_SAFE_GUARD_S, LONG_TIMINGS, STOPPED, FailoverScenario,
                              print_results)
from helpers.faults import full_fault_tier
from helpers.fleet import start_store
from helpers.leases import status
from helpers.pgcluster import wait_for
from helpers.replication import start_standby

RESULTS = []


def signal_all(cluster, signum):
    for pid in cluster.processes():
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


@full_fault_tier
class SplitBrain(FailoverScenario, unittest.TestCase):
    tests_may_run_apart = True
    prefix = "split"
    results = RESULTS

    @classmethod
    def tearDownClass(cls):
        print_results(RESULTS)

    def setUp(self):
        self.primary = start_store("split-primary", 25480)
        self.addCleanup(self.primary.stop, mode="immediate", check=False)
        self.standby = start_standby(self.primary, "split-standby", 25490)
        self.addCleanup(self.standby.stop, mode="immediate", check=False)

    def store_ports(self):
        # The claimer lists the hosts the other way round: once the standby is promoted it
        # stays there, whatever the holder does.
        ports = [self.primary.port, self.standby.port]
        return ports[::-1] if self.making == "claimer" else ports

    def cosid_server(self, name, port, timings=None):
        self.making = name.rsplit("-", 1)[-1]
        return super().cosid_server(name, port, timings)

    def test_a_server_that_saw_the_promotion_never_goes_back_to_the_old_primary(self):
        primary, standby = self.primary, self.standby
        # Whatever happens, the frozen primary is woken up before its cleanup.
        self.addCleanup(lambda: primary.is_running() and signal_all(primary, signal.SIGCONT))

        servers = {}

        def promote_past_a_frozen_primary(holder, claimer):
            servers.update(holder=holder, claimer=claimer)
            signal_all(primary, signal.SIGSTOP)
            standby.query("SELECT pg_promote(true, 60)")
            promoted_at = standby.query("SELECT extract(epoch FROM clock_timestamp())")
            # The holder renewed on the promoted standby: it saw the new timeline. (A 12 s safe
            # guard, so that it does so before its deadline however long the frozen primary
            # takes to time out.)
            wait_for(lambda: float(holder.query(
                "SELECT coalesce(extract(epoch FROM last_renewed_at), 0) FROM cosid.status"))
                > float(promoted_at), LONG_SAFE_GUARD_S * 2,
                f"the holder to renew on the promoted standby: {status(holder)}")

        def old_primary_resumes_and_the_holder_restarts():
            signal_all(primary, signal.SIGCONT)
            self.assertEqual(primary.query("SELECT pg_is_in_recovery()"), "f")
            # Restarted, the holder releases its machine id on the promoted standby, where the
            # claimer takes it, and then connects to the first host of its list again: P.
            servers["holder"].stop()
            self.wait_state(servers["claimer"], "UP", timeout=LONG_SAFE_GUARD_S * 3 + 30)
            servers["holder"].start()

        (holder, claimer), _ = self.run_scenario(
            "split brain: old primary resumed", promote_past_a_frozen_primary,
            old_primary_resumes_and_the_holder_restarts, LONG_SAFE_GUARD_S + 8,
            expected=STOPPED, timings=LONG_TIMINGS)
        # The holder passed the old primary over and says so in its log; it waits on the
        # promoted one, where the claimer holds the machine id.
        self.assertEqual(status(claimer)["state"], "UP")
        self.assertNotEqual(status(holder)["state"], "UP")
        self.assertTrue("older than timeline 2 this server saw it on" in holder.log(),
                        "the holder's log does not say it passed the old primary over")
        self.assertEqual(primary.query("SELECT count(*) FROM cosid.machine_lease "
                                       "WHERE renewed_at > now() - interval '2 s'"), "0")


if __name__ == "__main__":
    unittest.main()
