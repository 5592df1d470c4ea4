"""Store failovers under load, the machinery of tests/faults/test_failover.py (a primary and a
streaming standby) and tests/faults/test_patroni.py (Patroni and etcd): two cosid servers on one
machine id (0 machine bits), one holding it and one claiming, clients generating through both
for the whole run, and the oracles over every id either server returned: no duplicates, no
(machine id, millisecond) pair issued by both servers, ids increasing per connection, only the
expected SQLSTATEs. Each scenario adds a row to a table printed at the end of its class: ids,
duplicates, shared (machine id, ms) pairs, and the longest time no server issued an id from the
failover on."""

import time
from collections import Counter

from .clients import LoopingClients, duplicates, sessions_not_increasing
from .faults import decode
from .fleet import fleet_server
from .leases import status
from .pgcluster import wait_for

# A 6 s safe guard, renewed every 2 s: a holder whose renewals fail keeps generating for up to
# 5.4 s, long enough for a claimer to overlap it if the promoted store let it.
SAFE_GUARD_S = 6.0
TIMINGS = {"cosid.safe_guard_duration": "'6s'", "cosid.guarder_delay": "'2s'",
           "cosid.guarder_initial_delay": "'2s'"}
# One machine id for two servers.
ONE_MACHINE_ID = {"cosid.timestamp_bits": 41, "cosid.machine_bits": 0, "cosid.sequence_bits": 12}
EXPECTED = {"55P03", "53400"}
# A 12 s safe guard, for a holder that must renew on the promoted store before its deadline:
# 10.8 s after its last renewal, a renewal is judged live only if it ends before then, and the
# promotion and the new connection take a few seconds under load.
LONG_SAFE_GUARD_S = 12.0
LONG_TIMINGS = {**TIMINGS, "cosid.safe_guard_duration": "'12s'"}
# A server stopped by the scenario: its clients see it shut down.
STOPPED = EXPECTED | {"57P01", "connection"}


def machine_ms(value):
    return decode(value, machine_bits=0)


def print_results(results):
    if results:
        print(f"\n{'scenario':<44}{'ids':>9}{'dups':>6}{'shared ms':>10}{'stopped s':>10}"
              "  errors by SQLSTATE")
        for row in results:
            print(row)


class FailoverScenario:
    """A mixin of unittest.TestCase: `store_ports` (the store's hosts, in the order the servers
    list them) and `results` (the class's table) come from the test class; `distributor`, the
    servers' settings of where their machine id comes from (cosid's own lease by default)."""

    distributor = {}

    def server_settings(self, timings=None):
        return {**(timings or TIMINGS), **ONE_MACHINE_ID, **self.distributor}

    def cosid_server(self, name, port, timings=None):
        """A cosid server reaching the store through every host that can become its primary."""
        ports = self.store_ports()
        server = fleet_server(name, port, ",".join(str(p) for p in ports),
                              extra=self.server_settings(timings),
                              host=",".join(["127.0.0.1"] * len(ports)),
                              password_from="environment",
                              conninfo_extra="target_session_attrs=read-write")
        server.start()
        self.addCleanup(server.stop, mode="immediate", check=False)
        server.query("CREATE EXTENSION cosid")
        return server

    def wait_state(self, server, state, timeout=30):
        wait_for(lambda: status(server)["state"] == state, timeout,
                 f"{server.name} to be {state}:\n{server.log()[-1500:]}")

    def run_scenario(self, label, before_failover, failover, after_s, expected=EXPECTED,
                     timings=None, ports=(25420, 25430)):
        """Clients on both servers (with `timings`, or TIMINGS); `before_failover(holder,
        claimer)`, `failover()`, `after_s` seconds of generation; the oracles. Returns the
        servers and the stopped time."""
        holder = self.cosid_server(f"{self.prefix}-holder", ports[0], timings)
        self.wait_state(holder, "UP")
        claimer = self.cosid_server(f"{self.prefix}-claimer", ports[1], timings)
        self.wait_state(claimer, "CLAIMING")
        servers = [holder, claimer]
        loads = {s.name: LoopingClients(s, clients=2, batch=200, batches_per_session=5)
                 for s in servers}
        for load in loads.values():
            load.__enter__()
        try:
            time.sleep(1.0)
            before_failover(holder, claimer)
            failover_ms = time.time() * 1000
            failover()
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
        self.results.append(f"{label:<44}{total:>9}{dups:>6}{shared:>10}{stopped_s:>10.1f}"
                            f"  {error_text}")
        self.assertGreater(total, 0, label)
        self.assertEqual(dups, 0, f"{label}: duplicate ids")
        self.assertEqual(shared, 0, f"{label}: one machine id used by both servers in one ms")
        self.assertEqual(sessions_not_increasing(everything), [],
                         f"{label}: ids not increasing on a connection")
        self.assertLessEqual(set(errors), expected, f"{label}: unexpected errors {errors}")
        # Generation came back on the new primary.
        self.assertTrue(stamps, f"{label}: no id after the failover")
        return servers, stopped_s
