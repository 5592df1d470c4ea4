"""Failovers of a lease store made highly available by Patroni with etcd, on loopback: a planned
`patronictl failover` and a killed leader (kill -9 of Patroni and its PostgreSQL), with
synchronous_mode off and on. Before the killed leader goes, replication is held back (its
walsender paused) while the holder renews, so that the new leader has forgotten renewals the
old one acknowledged. The scenario and its oracles are in helpers/failover.py: 0 duplicates, 0
(machine id, millisecond) pairs from both servers, and how long generation stopped.

Patroni's behaviour does not depend on the PostgreSQL version under test: the module runs on
PostgreSQL 15 only.

    python3 run.py faults.test_patroni
"""

import time
import unittest

from helpers import patroni
from helpers.failover import SAFE_GUARD_S, FailoverScenario, print_results
from helpers.fleet import install_store
from helpers.pgcluster import PG_MAJOR
from helpers.replication import HeldBack

RESULTS = []


@unittest.skipIf(PG_MAJOR != 15, "Patroni's failovers are tested on PostgreSQL 15 only")
@unittest.skipIf(patroni.available(), patroni.available() or "")
class Patroni(FailoverScenario, unittest.TestCase):
    tests_may_run_apart = True
    prefix = "patroni"
    results = RESULTS

    @classmethod
    def tearDownClass(cls):
        print_results(RESULTS)

    def setUp(self):
        synchronous = "synchronous_mode_on" in self._testMethodName
        self.etcd, self.nodes = patroni.start_ha_store("patroni", 25900, self.addCleanup,
                                                       synchronous)
        install_store(self.nodes[0].sql)

    def store_ports(self):
        return [node.port for node in self.nodes]

    def killed_leader(self):
        """kill -9 of the leader; returns once the other node leads."""
        leader = self.nodes[0]
        leader.kill()
        _, took = patroni.wait_for_leader(self.nodes, other_than=leader)
        self.failover_s = took

    def planned_failover(self):
        self.nodes[0].patronictl("failover", "--candidate", self.nodes[1].name, "--force")
        _, took = patroni.wait_for_leader(self.nodes, other_than=self.nodes[0])
        self.failover_s = took

    def hold_back_renewals(self, holder, claimer):
        # Released when the leader dies, with it.
        HeldBack(self.nodes[0].sql)
        time.sleep(SAFE_GUARD_S + 1)

    def test_killed_leader_synchronous_mode_off(self):
        self.run_scenario("Patroni, leader killed, sync off", self.hold_back_renewals,
                          self.killed_leader, SAFE_GUARD_S + 4)

    def test_patronictl_failover_synchronous_mode_off(self):
        self.run_scenario("Patroni, patronictl failover, sync off",
                          lambda holder, claimer: time.sleep(1.0), self.planned_failover,
                          SAFE_GUARD_S + 4)

    def test_killed_leader_synchronous_mode_on(self):
        self.run_scenario("Patroni, leader killed, sync on",
                          lambda holder, claimer: time.sleep(1.0), self.killed_leader,
                          SAFE_GUARD_S + 4)

    def test_patronictl_failover_synchronous_mode_on(self):
        self.run_scenario("Patroni, patronictl failover, sync on",
                          lambda holder, claimer: time.sleep(1.0), self.planned_failover,
                          SAFE_GUARD_S + 4)


if __name__ == "__main__":
    unittest.main()
