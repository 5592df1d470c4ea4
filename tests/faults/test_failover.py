"""Failovers of a shared lease store with a streaming standby, done for real: servers reach the
store as `host=primary,standby ... target_session_attrs=read-write`, replication is held back
(the primary's walsender paused) while a server claims or renews, then the primary is killed
(-9) and the standby promoted, so that the store forgets writes it acknowledged. Two cosid
servers share one machine id (0 machine bits): one holds it, the other keeps claiming. Clients
generate through both servers for the whole run.

Oracles, over every id either server returned: no duplicates, no (machine id, millisecond)
pair issued by both servers, ids increasing per connection, only the expected SQLSTATEs. Each
scenario prints a row: ids, duplicates, shared (machine id, ms) pairs, and the longest time no
server issued an id from the failover on.

    python3 run.py faults.test_failover
"""

import time
import unittest
from collections import Counter

from helpers.clients import LoopingClients, duplicates, sessions_not_increasing
from helpers.faults import decode
from helpers.fleet import fleet_server, start_store
from helpers.leases import status
from helpers.pgcluster import wait_for
from helpers.replication import HeldBack, fail_over, start_standby

# A 6 s safe guard, renewed every 2 s: a holder whose renewals fail keeps generating for up to
# 5.4 s, long enough for a claimer to overlap it if the promoted store let it.
SAFE_GUARD_S = 6.0
TIMINGS = {"cosid.safe_guard_duration": "'6s'", "cosid.guarder_delay": "'2s'",
           "cosid.guarder_initial_delay": "'2s'"}
ONE_MACHINE_ID = {"cosid.timestamp_bits": 41, "cosid.machine_bits": 0,
                  "cosid.sequence_bits": 12}
EXPECTED = {"55P03", "53400"}
RESULTS = []


def machine_ms(value):
    return decode(value, machine_bits=0)


class Failover(unittest.TestCase):
    tests_may_run_apart = True

    @classmethod
    def tearDownClass(cls):
        if RESULTS:
            print(f"\n{'scenario':<44}{'ids':>9}{'dups':>6}{'shared ms':>10}{'stopped s':>10}"
                  "  errors by SQLSTATE")
            for row in RESULTS:
                print(row)

    def setUp(self):
        self.primary = start_store("failover-primary", 25400)
        self.addCleanup(self.primary.stop, mode="immediate", check=False)
        self.standby = start_standby(self.primary, "failover-standby", 25410,
                                     synchronous=self.synchronous())
        self.addCleanup(self.standby.stop, mode="immediate", check=False)
        self.servers = []

    def synchronous(self):
        return "synchronous" in self._testMethodName

    def server(self, name, port):
        """A cosid server reaching the store's primary, or its standby once promoted."""
        server = fleet_server(name, port, f"{self.primary.port},{self.standby.port}",
                              extra={**TIMINGS, **ONE_MACHINE_ID},
                              host="127.0.0.1,127.0.0.1", password_from="environment",
                              conninfo_extra="target_session_attrs=read-write")
        server.start()
        self.addCleanup(server.stop, mode="immediate", check=False)
        server.query("CREATE EXTENSION cosid")
        self.servers.append(server)
        return server

    def wait_state(self, server, state, timeout=30):
        wait_for(lambda: status(server)["state"] == state, timeout,
                 f"{server.name} to be {state}:\n{server.log()[-1500:]}")

    def run_scenario(self, label, before_failover, after_s, expected=EXPECTED):
        """Clients on both servers; `before_failover()` (with replication held back, unless the
        standby is synchronous), the failover, `after_s` seconds of generation; the oracles."""
        holder = self.server("failover-a", 25420)
        self.wait_state(holder, "UP")
        claimer = self.server("failover-b", 25430)
        self.wait_state(claimer, "CLAIMING")
        loads = {s.name: LoopingClients(s, clients=2, batch=200, batches_per_session=5)
                 for s in self.servers}
        for load in loads.values():
            load.__enter__()
        try:
            time.sleep(1.0)
            held = None if self.synchronous() else HeldBack(self.primary)
            before_failover(holder, claimer)
            failover_ms = time.time() * 1000
            fail_over(self.primary, self.standby)
            if held:
                held.release()
            time.sleep(after_s)
        finally:
            for load in loads.values():
                load.__exit__()
        sessions = {name: load.sessions for name, load in loads.items()}
        everything = [s for group in sessions.values() for s in group]
        errors = Counter(s.sqlstate for s in everything if s.error)
        dups = duplicates(everything)
        pairs = [{machine_ms(v) for s in group for v in s.ids} for group in sessions.values()]
        shared = len(pairs[0] & pairs[1])
        stamps = sorted(ts for group in pairs for _, ts in group if ts >= failover_ms)
        points = [failover_ms] + stamps
        stopped_s = max(b - a for a, b in zip(points, points[1:])) / 1000 if stamps else after_s
        total = sum(len(s.ids) for s in everything)
        error_text = ", ".join(f"{k} {v}" for k, v in sorted(errors.items())) or "none"
        RESULTS.append(f"{label:<44}{total:>9}{dups:>6}{shared:>10}{stopped_s:>10.1f}"
                       f"  {error_text}")
        self.assertGreater(total, 0, label)
        self.assertEqual(dups, 0, f"{label}: duplicate ids")
        self.assertEqual(shared, 0, f"{label}: one machine id used by both servers in one ms")
        self.assertEqual(sessions_not_increasing(everything), [],
                         f"{label}: ids not increasing on a connection")
        self.assertLessEqual(set(errors), expected, f"{label}: unexpected errors {errors}")
        # Generation came back on the promoted store.
        self.assertTrue(stamps, f"{label}: no id after the failover")
        return stopped_s

    def test_a_claim_the_promoted_standby_never_saw(self):
        # The holder renews for longer than its safe guard, then stops (its release reaches the
        # primary only), and the claimer takes the machine id there: the promoted standby shows
        # the holder's lease expired, and neither the release nor the claim. The holder, started
        # again, claims at once on the promoted store while the claimer still generates, if the
        # store let it.
        def claim_on_the_primary_only(holder, claimer):
            time.sleep(SAFE_GUARD_S + 1)
            holder.stop()
            self.wait_state(claimer, "UP")
            time.sleep(1.0)
            holder.start()
        # The stopped holder's clients see it shut down.
        self.run_scenario("lost release and claim (async)", claim_on_the_primary_only,
                          SAFE_GUARD_S * 2 + 4, EXPECTED | {"57P01", "connection"})

    def test_renewals_the_promoted_standby_never_saw(self):
        # The holder renews for longer than its safe guard while replication is held back: the
        # promoted standby shows its lease expired, and the claimer would take it.
        def renew_on_the_primary_only(holder, claimer):
            time.sleep(SAFE_GUARD_S + 1)
        stopped_s = self.run_scenario("lost renewals (async)", renew_on_the_primary_only,
                                      SAFE_GUARD_S + 4)
        # The holder kept its lease: it renewed on the promoted store, since it was still
        # generating, and the claimer still has none.
        self.assertEqual(status(self.servers[0])["state"], "UP")
        self.assertNotEqual(status(self.servers[1])["state"], "UP")
        self.assertLess(stopped_s, SAFE_GUARD_S, "the holder stopped for a whole safe guard")

    def test_a_synchronous_standby_loses_nothing(self):
        def renew_and_claim(holder, claimer):
            time.sleep(1.0)
        self.run_scenario("failover to a synchronous standby", renew_and_claim,
                          SAFE_GUARD_S + 4)
        self.assertEqual(status(self.servers[0])["state"], "UP")


if __name__ == "__main__":
    unittest.main()
