"""Four faults in a row on one fleet under load, the run the picture in docs/reliability.md shows:
a lease store with a streaming standby, three cosid servers each reaching it through a TCP proxy
of its own (the fleet of test_faults.py: 1 machine bit, a 4 s safe guard, 0.5 s renewals, every
server on the clock faker), two clients per server generating for the whole run. One after the
other, each once the fleet has two holders again: a holder cut off from the store for longer than
its safe guard, a holder killed (-9) and started again, a holder's clock stepped 2 s ahead and
back, and a store failover (the primary killed, the standby promoted, the proxies then leading
to it, as a managed service's address moves).

Oracles over every id, as in test_faults.py: no duplicates, no ownership conflict, ids increasing
per connection, only the expected SQLSTATEs.

    python3 run.py faults.test_timeline
    COSID_TIMELINE=../docs/images/fault-run.json python3 run.py faults.test_timeline
        also writes the run's timeline (helpers/timeline.py), which scripts/plot-fault-run.py
        draws
"""

import os
import time
import unittest
from collections import Counter

from helpers.clients import LoopingClients, duplicates, sessions_not_increasing
from helpers.faults import FAST, LAYOUT, decode, fake_clock, ownership_conflicts, set_clock_offset
from helpers.fleet import Proxy, fleet_server, set_max_clock_lead, start_store
from helpers.leases import SAFE_GUARD_S, status
from helpers.pgcluster import PG_MAJOR, wait_for
from helpers.replication import start_standby
from helpers.timeline import FaultWindows, now_ms, timeline_path, write_timeline

EXPECTED = {"55P03", "53400", "57P01", "connection"}
CLIENTS = 2
# How long the fleet generates undisturbed before each fault and after the last.
STEADY_S = 3.0
STEP_S = 2.0


# Each fault is tested on every version by its own scenario (test_faults, test_clock,
# test_failover); in the suite, the four in a row (about a minute) run on one, and on any version
# when asked for a timeline (make fault-run).
@unittest.skipIf(PG_MAJOR != 18 and not os.environ.get("COSID_TIMELINE"),
                 "the four faults in a row run in the PostgreSQL 18 job")
class Timeline(unittest.TestCase):
    tests_may_run_apart = True

    def setUp(self):
        self.proxies, self.servers, self.clocks = [], [], {}
        self.addCleanup(self.stop_everything)
        self.primary = start_store("timeline-primary", 25700, {})
        # Its servers' clocks run up to 3.5 s ahead on the clock faker: the store allows 5 s.
        set_max_clock_lead(self.primary, "5 s")
        self.standby = start_standby(self.primary, "timeline-standby", 25710)
        for index in range(3):
            proxy = Proxy(self.primary.port)
            self.proxies.append(proxy)
            server = fleet_server(f"server-{index + 1}", 25720 + 3 * index, self.primary.port,
                                  {**FAST, **LAYOUT}, via=proxy)
            self.servers.append(server)
            # Every server on the clock faker, at the real time until a fault moves it, so
            # that all three pay the same for reading the clock.
            self.clocks[server.name] = server.base / "faketime"
            server.env = fake_clock(self.clocks[server.name], 0.0)
            server.start()
            server.query("CREATE EXTENSION cosid")
        self.wait_for_two_holders()

    def stop_everything(self):
        for proxy in self.proxies:
            proxy.close()
        for server in self.servers:
            server.stop(mode="immediate", check=False)
        for store in (getattr(self, "primary", None), getattr(self, "standby", None)):
            if store is not None:
                store.stop(mode="immediate", check=False)

    def states(self):
        return {s.name: status(s)["state"] for s in self.servers}

    def holders(self):
        return [s for s in self.servers if status(s)["state"] == "UP"]

    def wait_for_two_holders(self):
        wait_for(lambda: list(self.states().values()).count("UP") == 2, 20,
                 "two servers to hold the two machine ids")

    def test_four_faults_in_a_row(self):
        windows = FaultWindows()
        loads = {s.name: LoopingClients(s, clients=CLIENTS, batch=500, batches_per_session=4)
                 for s in self.servers}
        start_ms, start_monotonic = now_ms(), time.monotonic()
        for load in loads.values():
            load.__enter__()
        try:
            self.faults(windows)
            self.wait_for_two_holders()
            time.sleep(STEADY_S)
            end_ms = now_ms()
        finally:
            for load in loads.values():
                load.__exit__()
        for server in self.servers:
            row = status(server)
            print(f"{server.name}: {row['state']} {row['machine_id']} {row['last_error']}")
        sessions = {name: load.sessions for name, load in loads.items()}
        everything = [s for group in sessions.values() for s in group]
        errors = Counter(s.sqlstate for s in everything if s.error)
        dups = duplicates(everything)
        conflicts = ownership_conflicts(sessions, decode)
        total = sum(len(s.ids) for s in everything)
        error_text = ", ".join(f"{k} {v}" for k, v in sorted(errors.items())) or "none"
        print(f"\nfour faults in a row: {total} ids, {dups} duplicates, {conflicts} conflicts, "
              f"{(end_ms - start_ms) / 1000:.1f} s; errors by SQLSTATE: {error_text}")
        for window in windows.windows:
            print(f"  {window['label']:<40} {(window['start_ms'] - start_ms) / 1000:6.1f} s "
                  f"to {(window['end_ms'] - start_ms) / 1000:6.1f} s")
        self.assertGreater(total, 0)
        self.assertEqual(dups, 0, "duplicate ids")
        self.assertEqual(conflicts, 0, "a machine id used by two servers at once")
        self.assertEqual(sessions_not_increasing(everything), [],
                         "ids not increasing on a connection")
        self.assertLessEqual(set(errors), EXPECTED, f"unexpected errors {errors}")
        # Every fault happened, and generation went on after the last one.
        self.assertEqual([w["kind"] for w in windows.windows],
                         ["partition", "kill", "clock", "failover"])
        failover_end_ms = windows.windows[-1]["end_ms"]
        self.assertTrue(any(decode(v)[1] > failover_end_ms for s in everything for v in s.ids),
                        "no id after the store failover")
        path = timeline_path()
        if path:
            version = self.servers[0].query("SHOW server_version")
            cosid = self.servers[0].query(
                "SELECT extversion FROM pg_extension WHERE extname = 'cosid'")
            write_timeline(path, sessions, decode, (start_ms, start_monotonic), end_ms,
                           windows.windows, {
                               "postgresql": version, "cosid": cosid, "ids": total,
                               "duplicates": dups, "conflicts": conflicts,
                               "errors": dict(sorted(errors.items())),
                               "clients_per_server": CLIENTS, "safe_guard_s": SAFE_GUARD_S,
                               "renewal_s": 0.5,
                               "machine_bits": LAYOUT["cosid.machine_bits"]})
            print(f"timeline written to {path}")

    def faults(self, windows):
        time.sleep(STEADY_S)

        # A holder cut off from the store for longer than its safe guard: it stops by its
        # deadline, and the waiting server takes its machine id over.
        victim = self.holders()[0]
        victim_id = int(status(victim)["machine_id"])
        waiting = [s for s in self.servers if status(s)["state"] != "UP"][0]
        proxy = self.proxies[self.servers.index(victim)]
        with windows.fault("partition", f"partition: {victim.name} cut off from the store",
                           victim.name) as window:
            proxy.set_mode("blackhole")
            # Healed no sooner than 2 s past the safe guard, and only once the takeover is
            # done: healed before, the victim could claim its own machine id again.
            wait_for(lambda: status(waiting)["state"] == "UP", 20,
                     f"{waiting.name} to take {victim.name}'s machine id over")
            time.sleep(max(0.0, window["start_ms"] / 1000 + SAFE_GUARD_S + 2 - time.time()))
            proxy.set_mode("pass")
        self.assertEqual(int(status(waiting)["machine_id"]), victim_id)
        self.wait_for_two_holders()
        time.sleep(STEADY_S)

        # A holder killed (-9) and started again.
        victim = self.holders()[0]
        with windows.fault("kill", f"kill -9 of {victim.name}, restart", victim.name):
            victim.crash()
            victim.start()
        self.wait_for_two_holders()
        time.sleep(STEADY_S)

        # A holder's clock (backends and worker) steps 2 s ahead, then back: its ids dated
        # ahead are not repeated once its clock is behind them again.
        stepper = self.holders()[0]
        with windows.fault("clock", f"clock of {stepper.name} +{STEP_S:.0f} s, then back",
                           stepper.name):
            set_clock_offset(self.clocks[stepper.name], STEP_S)
            time.sleep(STEADY_S)
            set_clock_offset(self.clocks[stepper.name], 0.0)
        wait_for(lambda: int(stepper.query(
            "SELECT clock_backwards_waits + clock_backwards_errors FROM cosid.status")) > 0,
            10, "the step back to be noticed")
        self.wait_for_two_holders()
        time.sleep(STEADY_S)

        # The store fails over: its primary is killed (-9), the standby promoted, and the
        # servers' addresses of the store lead to it from then on.
        with windows.fault("failover", "store failover", "store"):
            self.primary.crash()
            self.standby.query("SELECT pg_promote(true, 60)")
            wait_for(lambda: self.standby.query("SELECT pg_is_in_recovery()") == "f", 60,
                     "the standby to be promoted")
            for proxy in self.proxies:
                proxy.target_port = self.standby.port
                proxy.set_mode("reset")
                proxy.set_mode("pass")


if __name__ == "__main__":
    unittest.main()
