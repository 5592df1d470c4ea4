"""Fault injection against a fleet: one lease store and three cosid servers on loopback, each
server reaching the store through a TCP proxy of its own, 1 machine bit (2 machine ids for 3
servers, so that takeovers happen), a 4 s safe guard and 0.5 s renewals. Clients generate ids
through every server for the whole run and record every id and every error.

Oracles, over every id any server returned: no duplicates; no ownership conflict (no machine id
used by two servers in overlapping time windows, by the ids' own timestamps); ids strictly
increasing per connection; only the expected SQLSTATEs. Each scenario prints a table row. One
scenario also generates from two named generators per server, each in a namespace of its own
with 1 machine bit, and checks the oracles for each generator apart.

    python3 run.py faults.test_faults            the scenarios, one by one (make test runs each
                                                 in a process of its own)
    COSID_FAULT_ROUNDS=20 python3 run.py faults.test_faults.Faults.test_random_mix
                                                 a longer randomized mix (make test-faults)
"""

import os
import random
import signal
import subprocess
import threading
import time
import unittest
from collections import Counter, defaultdict

from helpers.clients import LoopingClients, duplicates, sessions_not_increasing
from helpers.faults import (FAST, LAYOUT, decode, fake_clock, full_fault_tier,
                            ownership_conflicts, set_clock_offset)
from helpers.fleet import (FLEET_PASSWORD, FLEET_ROLE, Proxy, fleet_server, restore_store_copy,
                           set_max_clock_lead, start_store)
from helpers.generators import (define_second_generator, generators, next_id, ten_minutes_back,
                                try_unsafe_redefinitions)
from helpers.leases import DEADLINE_S, SAFE_GUARD_S, status
from helpers.owner import (SETTINGS_CLIENTS_SURVIVE, make_owner, set_database_settings,
                           try_taking_it_away)
from helpers.pgcluster import PG_BIN, SqlError, query_as, wait_for

# Refusals a client may see: no lease for the moment (55P03), no machine id left (53400), and,
# when a server is stopped (57P01) or killed, a lost connection.
EXPECTED = {"55P03", "53400", "57P01", "connection"}
RESULTS = []


# Named generators of the scenarios with several generators per server, each with 1 machine
# bit in a namespace of its own: (layout, machine bits, sequence bits).
GENERATORS = {"g_ms": ("millisecond", 1, 12), "g_js": ("safe_js", 1, 9)}


def decoder(generator):
    """decode() for the default generator (None) or a named one of GENERATORS."""
    if generator is None:
        return decode
    _, machine_bits, sequence_bits = GENERATORS[generator]
    return lambda value: decode(value, machine_bits, sequence_bits)


@full_fault_tier
class Faults(unittest.TestCase):
    # Each test sets up its own store and servers; tearDownClass only prints the table of the
    # scenarios run in this process (tests/suite.py runs each in a process of its own).
    tests_may_run_apart = True

    @classmethod
    def tearDownClass(cls):
        if RESULTS:
            header = (f"{'scenario':<30}{'ids':>9}{'dups':>6}{'confl':>6}"
                      f"{'avail b/d/a':>16}{'silence s':>11}  errors by SQLSTATE")
            print("\n" + header)
            for row in RESULTS:
                print(row)

    def setUp(self):
        # Cleaned up even when setUp itself fails, so that nothing is left running for the next
        # test.
        self.proxies, self.servers = [], []
        self.addCleanup(self.stop_everything)
        self.store = start_store("faults-store", 25300, {})
        # Its servers' clocks run up to 3.5 s ahead on the clock faker: the store allows 5 s.
        set_max_clock_lead(self.store, "5 s")
        for index in range(3):
            proxy = Proxy(self.store.port)
            self.proxies.append(proxy)
            server = fleet_server(f"faults-{index}", 25310 + 3 * index, self.store.port,
                                  {**FAST, **LAYOUT}, via=proxy)
            self.servers.append(server)
            server.start()
            server.query("CREATE EXTENSION cosid")
        # Two servers hold the two machine ids; the third waits for one.
        wait_for(lambda: sorted(status(s)["state"] for s in self.servers).count("UP") == 2,
                 15, "two servers to lease")

    def stop_everything(self):
        for proxy in self.proxies:
            proxy.close()
        for server in self.servers:
            server.stop(mode="immediate", check=False)
        if hasattr(self, "store"):
            self.store.stop(mode="immediate", check=False)

    def holders(self):
        return [s for s in self.servers if status(s)["state"] == "UP"]

    def create_generators(self):
        """Creates the generators of GENERATORS on every server, each in its own
        cosid.database, and waits until two servers hold the two machine ids of each."""
        for server in self.servers:
            server.query("; ".join(
                f"SELECT cosid_create_generator('{name}', '{layout}', machine_bits => {bits})"
                for name, (layout, bits, _) in GENERATORS.items()))

        def leased():
            states = [{name: row["state"] for name, row in generators(s).items()}
                      for s in self.servers]
            return all([state.get(name) for state in states].count("UP") == 2
                       for name in GENERATORS)
        wait_for(leased, 20, "two servers to lease each generator's machine ids")

    def run_with_load(self, name, fault, heal, during_s, generators=(None,), clients=2,
                      decoder_of=decoder, expected=EXPECTED):
        """Generates through every server, injects `fault` after a second, heals it after
        `during_s`, generates on for a while, and checks the oracles. Generates from the
        default generator, or from each of `generators` (None for the default one), with the
        oracles checked for each (`decoder_of(generator)` decodes its ids; `expected`: the
        refusals allowed); returns the sessions by server, or with several generators, those by
        generator."""
        loads = {(s.name, generator): LoopingClients(s, clients=clients, batch=500,
                                                     batches_per_session=4,
                                                     generator=generator)
                 for s in self.servers for generator in generators}
        for load in loads.values():
            load.__enter__()
        try:
            time.sleep(1.5)
            fault_at = time.monotonic()
            fault_wall_ms = time.time() * 1000
            fault()
            time.sleep(during_s)
            heal()
            healed_at = time.monotonic()
            time.sleep(SAFE_GUARD_S + 2)
        finally:
            for load in loads.values():
                load.__exit__()
        by_generator = {}
        for generator in generators:
            # Each generator's oracles apply to its own ids (those of another namespace may
            # coincide with them).
            sessions = {server: load.sessions for (server, of), load in loads.items()
                        if of == generator}
            by_generator[generator] = sessions
            label = name if len(generators) == 1 else f"{name} [{generator or 'default'}]"
            decode_id = decoder_of(generator)
            everything = [s for group in sessions.values() for s in group]
            errors = Counter(s.sqlstate for s in everything if s.error)
            dups = duplicates(everything)
            conflicts = ownership_conflicts(sessions, decode_id)
            increasing = sessions_not_increasing(everything)
            phases = [(0, fault_at), (fault_at, healed_at), (healed_at, float("inf"))]
            availability = [self.availability(everything, *phase) for phase in phases]
            recover = self.longest_silence(everything, fault_wall_ms, decode_id)
            total = sum(len(s.ids) for s in everything)
            error_text = ", ".join(f"{k} {v}" for k, v in sorted(errors.items())) or "none"
            RESULTS.append(f"{label:<30}{total:>9}{dups:>6}{conflicts:>6}"
                           f"{'/'.join(f'{a:.0%}' for a in availability):>16}"
                           f"{recover:>11.1f}  {error_text}")
            self.assertGreater(total, 0, label)
            self.assertEqual(dups, 0, f"{label}: duplicate ids")
            self.assertEqual(conflicts, 0, f"{label}: a machine id used by two servers at once")
            self.assertEqual(increasing, [], f"{label}: ids not increasing on a connection")
            self.assertLessEqual(set(errors), expected, f"{label}: unexpected errors {errors}")
        return by_generator[generators[0]] if len(generators) == 1 else by_generator

    @staticmethod
    def availability(sessions, start, end):
        started = [s for s in sessions if start <= s.started < end]
        if not started:
            return 1.0
        return sum(1 for s in started if not s.error) / len(started)

    @staticmethod
    def longest_silence(sessions, since_ms, decode=decode):
        """Seconds to recover: the longest time, from the fault on, in which a machine id issued
        no id at all (by whichever server held it)."""
        stamps = defaultdict(list)
        for session in sessions:
            for value in session.ids:
                machine, ts = decode(value)
                stamps[machine].append(ts)
        longest = 0.0
        for machine, values in stamps.items():
            later = sorted(ts for ts in values if ts >= since_ms)
            points = [since_ms] + later
            gaps = [b - a for a, b in zip(points, points[1:])]
            longest = max([longest] + [gap / 1000 for gap in gaps])
        return longest

    def test_partition_longer_than_the_safe_guard(self):
        victim = self.holders()[0]
        proxy = self.proxies[self.servers.index(victim)]
        victim_id = int(status(victim)["machine_id"])
        sessions = self.run_with_load(
            "partition (blackhole)", lambda: proxy.set_mode("blackhole"),
            lambda: proxy.set_mode("pass"), SAFE_GUARD_S + 2)
        # The waiting server took the partitioned server's machine id over.
        takers = {name for name, group in sessions.items() if name != victim.name
                  for s in group for v in s.ids if decode(v)[0] == victim_id}
        self.assertTrue(takers, "no takeover happened")

    def test_store_connections_reset(self):
        self.run_with_load("store resets connections",
                           lambda: [p.set_mode("reset") for p in self.proxies],
                           lambda: [p.set_mode("pass") for p in self.proxies], 2.0)

    def test_slow_store(self):
        self.run_with_load("slow store (0.3 s/packet)",
                           lambda: [p.set_mode("delay", 0.3) for p in self.proxies],
                           lambda: [p.set_mode("pass") for p in self.proxies], 3.0)

    def test_store_locked(self):
        locker = {}

        def lock():
            locker["p"] = subprocess.Popen(
                self.store.psql_command("postgres", "-v", "ON_ERROR_STOP=1"),
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
            locker["p"].stdin.write("BEGIN; LOCK TABLE cosid.machine_lease; SELECT 1;\n")
            locker["p"].stdin.flush()

        def unlock():
            locker["p"].stdin.write("COMMIT;\n")
            locker["p"].stdin.close()
            locker["p"].wait()

        self.run_with_load("store locked", lock, unlock, DEADLINE_S + 1)

    def test_lease_rows_attacked(self):
        # The store's superuser and the store role try to empty the lease table and lower its
        # watermarks while every server generates.
        refusals = []

        def attack():
            for sql in ("DELETE FROM cosid.machine_lease", "TRUNCATE cosid.machine_lease",
                        "UPDATE cosid.machine_lease SET watermark_ms = 0"):
                for run in (self.store.query,
                            lambda q: query_as(self.store, FLEET_ROLE, q, FLEET_PASSWORD)):
                    try:
                        run(sql)
                        refusals.append("done")
                    except SqlError as error:
                        refusals.append(error.sqlstate)

        self.run_with_load("rows deleted, truncated", attack, lambda: None, 2.0)
        self.assertEqual(refusals, ["42501"] * 6)

    def test_stolen_store_credential(self):
        # With the store role's password: read every holder's claim token (or guess it, when
        # that is refused), release its lease with it, and claim under its identity, again and
        # again during the fault.
        answers = []
        stop = threading.Event()

        def as_fleet(sql):
            return query_as(self.store, FLEET_ROLE, sql, FLEET_PASSWORD)

        def token_of(machine_id):
            try:
                return as_fleet("SELECT claim_token FROM cosid.machine_lease "
                                f"WHERE machine_id = {machine_id}")
            except SqlError:
                return "guess"

        def attack():
            holders = [(status(s)["machine_id"], status(s)["instance_id"])
                       for s in self.holders()]

            def loop():
                while not stop.is_set():
                    for machine_id, instance_id in holders:
                        token = token_of(machine_id)
                        answers.append(as_fleet(
                            f"SELECT cosid.lease_release('cosid', {machine_id}, "
                            f"'{instance_id}', '{token}', 0)"))
                        answers.append(as_fleet(
                            "SELECT outcome FROM cosid.lease_claim('cosid', 1, "
                            f"'{instance_id}', false, 4000, 'impostor', 0)"))
            threading.Thread(target=loop, daemon=True).start()

        self.run_with_load("stolen store credential", attack, stop.set, 3.0)
        self.assertTrue(answers)
        self.assertLessEqual(set(answers), {"f", "busy"})

    def test_advisory_lock_during_a_takeover(self):
        # A role with no grants holds the lock that serialised claims before, while a holder
        # is cut off for longer than its safe guard: the waiting server still takes over.
        victim = self.holders()[0]
        proxy = self.proxies[self.servers.index(victim)]
        victim_id = int(status(victim)["machine_id"])
        self.store.query("CREATE ROLE nobody LOGIN")
        locker = subprocess.Popen(
            [str(PG_BIN / "psql"), "-X", "-q", "-h", "127.0.0.1", "-p", str(self.store.port),
             "-U", "nobody", "-d", "postgres"], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, text=True)
        self.addCleanup(locker.kill)

        def fault():
            locker.stdin.write("SELECT pg_advisory_lock(hashtext('cosid.machine_lease'), "
                               "hashtext('cosid'));\n")
            locker.stdin.flush()
            proxy.set_mode("blackhole")

        sessions = self.run_with_load("advisory lock, partition", fault,
                                      lambda: proxy.set_mode("pass"), SAFE_GUARD_S + 2)
        takers = {name for name, group in sessions.items() if name != victim.name
                  for s in group for v in s.ids if decode(v)[0] == victim_id}
        self.assertTrue(takers, "no takeover happened")

    def test_store_restored_from_an_exact_dump(self):
        # The servers are cut off from the store, which is dumped and restored into a new
        # cluster; the proxies then lead there, and the servers renew their own leases.
        def fault():
            for proxy in self.proxies:
                proxy.set_mode("blackhole")
            restored = self.restored = restore_store_copy(self.store, "faults-store-restored",
                                                          25350)
            self.addCleanup(restored.stop, mode="immediate", check=False)
            self.store.stop(mode="immediate")
            for proxy in self.proxies:
                proxy.target_port = restored.port

        def heal():
            for proxy in self.proxies:
                proxy.set_mode("reset")
                proxy.set_mode("pass")

        self.run_with_load("store restored from a dump", fault, heal, 0.5)
        # The copy keeps the guards and the least privilege of the original.
        restored = self.restored
        with self.assertRaises(SqlError) as refused:
            restored.query("DELETE FROM cosid.machine_lease")
        self.assertEqual(refused.exception.sqlstate, "42501")
        with self.assertRaises(SqlError) as refused:
            query_as(restored, FLEET_ROLE, "SELECT claim_token FROM cosid.machine_lease",
                     FLEET_PASSWORD)
        self.assertEqual(refused.exception.sqlstate, "42501")

    def test_store_unreachable_with_two_generators_per_server(self):
        # Besides the default generator, two named ones per server, each leasing in its own
        # namespace: the store out of reach for longer than the safe guard stops all three on
        # every server by the deadline, and all three recover when it is back.
        self.create_generators()
        names = [None, *GENERATORS]
        holders = {(s.name, name) for s in self.servers for name in names
                   if generators(s)[name or "default"]["state"] == "UP"}
        times, refusals = {}, {}

        def fault():
            times["fault_ms"] = time.time() * 1000
            for proxy in self.proxies:
                proxy.set_mode("blackhole")

        def heal():
            # Well past the deadline: every generator of every server refuses.
            for server in self.servers:
                for name in names:
                    refusals[server.name, name] = next_id(server, name)
            times["heal_ms"] = time.time() * 1000
            for proxy in self.proxies:
                proxy.set_mode("pass")

        by_generator = self.run_with_load("store out of reach", fault, heal,
                                          SAFE_GUARD_S + 2, generators=names, clients=1)
        for (server, name), (value, error) in sorted(refusals.items(), key=str):
            label = f"{server}, {name or 'default'}"
            self.assertIsNone(value, f"{label}: generated with the store out of reach")
            expected = {"55P03"} if (server, name) in holders else {"55P03", "53400"}
            self.assertIn(error.sqlstate, expected, f"{label}: {error.stderr}")
        # By the ids' own timestamps: none between the deadline and the store's return, and
        # every generator issued again after it.
        deadline_ms = times["fault_ms"] + DEADLINE_S * 1000 + 300
        for name, sessions in by_generator.items():
            stamps = [decoder(name)(value)[1] for group in sessions.values()
                      for session in group for value in session.ids]
            late = [ts for ts in stamps if deadline_ms < ts < times["heal_ms"]]
            self.assertEqual(late, [], f"{name or 'default'}: ids after the deadline")
            self.assertTrue(any(ts > times["heal_ms"] for ts in stamps),
                            f"{name or 'default'} did not recover")

    def test_store_restarted(self):
        self.run_with_load("store restarted", lambda: self.store.stop(mode="immediate"),
                           self.store.start, 2.0)

    def test_worker_stopped_past_its_deadline(self):
        victim = self.holders()[0]
        worker = {}

        def stop():
            worker["pid"] = victim.worker_pid()
            os.kill(worker["pid"], signal.SIGSTOP)

        self.run_with_load("worker SIGSTOP", stop,
                           lambda: os.kill(worker["pid"], signal.SIGCONT), SAFE_GUARD_S + 2)

    def test_server_killed_and_restarted(self):
        victim = self.holders()[0]

        self.run_with_load("server kill -9, restart", victim.crash, victim.start, 1.0)

    def test_servers_with_different_safe_guards(self):
        # The waiting server uses a far shorter safe guard: expiry still follows the holder's.
        waiting = [s for s in self.servers if status(s)["state"] != "UP"][0]
        waiting.settings["cosid.safe_guard_duration"] = "'1s'"
        waiting.settings["cosid.guarder_delay"] = "'200ms'"
        waiting.settings["cosid.guarder_initial_delay"] = "'200ms'"
        waiting.write_settings()
        waiting.restart()
        victim = self.holders()[0]
        proxy = self.proxies[self.servers.index(victim)]
        self.run_with_load("partition, mixed safe guards", lambda: proxy.set_mode("blackhole"),
                           lambda: proxy.set_mode("pass"), SAFE_GUARD_S + 2)

    def skew(self, server, offset_s):
        """Restarts `server` with its wall clock `offset_s` ahead (the clock faker of
        helpers/faults.py, a file of its own), backends and worker, and leasing again; returns a function that moves its
        clock to another offset while it runs."""
        offset = server.base / "faketime"

        def set_offset(seconds):
            set_clock_offset(offset, seconds)
        server.env = fake_clock(offset, offset_s)
        server.restart()
        wait_for(lambda: status(server)["state"] == "UP", 15, "the skewed server's lease")
        server.put_worker_on_faked_clock(offset_s)
        wait_for(lambda: status(server)["state"] == "UP", 15, "the skewed worker's lease")
        return set_offset

    def test_clock_skew_a_server_ahead_hands_its_machine_id_over(self):
        # One holder runs 3 s ahead: its ids are dated in the future. When it stops, the waiting
        # server, on the real clock, may not issue with that machine id before the last of
        # those dates.
        waiting = [s for s in self.servers if status(s)["state"] != "UP"][0]
        waiting.stop()  # so that nobody takes the machine id while the holder restarts
        ahead = [s for s in self.servers if s is not waiting][0]
        self.skew(ahead, 3.0)
        waiting.start()
        self.run_with_load("clock skew +3 s, handover", ahead.stop, lambda: None, 1.0)
        # The watermark the skewed server left was 3 s ahead of the taker's clock.
        self.assertIn("gave it back", waiting.log())

    def test_clock_steps_forward_then_back_on_a_holder(self):
        # A holder's clock (backends and worker) jumps 2 s ahead, then back: its ids dated in
        # the future must not be repeated once its clock is behind them again, and its watermark
        # keeps covering them for whoever takes its machine id next.
        waiting = [s for s in self.servers if status(s)["state"] != "UP"][0]
        waiting.stop()
        stepper = [s for s in self.servers if s is not waiting][0]
        set_offset = self.skew(stepper, 1.5)
        waiting.start()
        self.run_with_load("clock steps +2 s, then back", lambda: set_offset(3.5),
                           lambda: set_offset(1.5), 2.0)
        self.assertGreater(int(stepper.query(
            "SELECT clock_backwards_waits + clock_backwards_errors FROM cosid.status")), 0,
            "the step back went unnoticed")

    def test_race_for_the_last_machine_id(self):
        waiting = [s for s in self.servers if status(s)["state"] != "UP"][0]
        waiting.stop()
        self.servers.remove(waiting)
        holder = self.holders()[0]
        holder.stop()  # releases its machine id: one is free now
        self.servers.remove(holder)
        racers = []
        for index in range(2):
            proxy = Proxy(self.store.port)
            self.proxies.append(proxy)
            racers.append(fleet_server(f"faults-race-{index}", 25330 + 3 * index,
                                       self.store.port, {**FAST, **LAYOUT}, via=proxy))
        self.servers += racers
        threads = [threading.Thread(target=server.start) for server in racers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for server in racers:
            server.query("CREATE EXTENSION cosid")
        wait_for(lambda: [status(s)["state"] for s in racers].count("UP") >= 1, 15,
                 "a racer to lease the last machine id")
        time.sleep(1.5)  # more claim rounds: the loser must still be refused
        states = sorted(status(server)["state"] for server in racers)
        self.assertEqual(states.count("UP"), 1, states)
        self.run_with_load("race for the last id", lambda: None, lambda: None, 1.0)

    def test_named_generator_dropped_and_defined_again(self):
        # Finding 1 of the hostile review, in the fleet: a `second` generator 'ev' with an epoch
        # ten minutes back, 1 machine bit in its namespace, called through every server, dropped
        # on every server and defined again while the clients keep calling it. The definitions
        # that could repeat its ids (another namespace, another layout) are refused.
        epoch = ten_minutes_back(self.servers[0])
        epoch_ms = int(self.servers[0].query(
            f"SELECT (extract(epoch FROM timestamptz '{epoch}') * 1000)::bigint"))
        for server in self.servers:
            define_second_generator(server, "ev", epoch, machine_bits=1)
        wait_for(lambda: [generators(s).get("ev", {}).get("state")
                          for s in self.servers].count("UP") == 2, 20,
                 "two servers to lease the machine ids of 'ev'")
        refusals = {}

        def drop():
            for server in self.servers:
                server.query("SELECT cosid_drop_generator('ev')")
            for server in self.servers:
                for sql, error in try_unsafe_redefinitions(server, "ev", epoch).items():
                    refusals[server.name, sql] = error and error.sqlstate

        def define_again():
            for server in self.servers:
                define_second_generator(server, "ev", epoch, machine_bits=1)

        # 31 bits of seconds, 1 machine bit, 22 bits of sequence.
        def decode_ev(value):
            return (value >> 22) & 1, (value >> 23) * 1000 + epoch_ms

        # 42704 while 'ev' is not defined.
        self.run_with_load("generator dropped, redefined", drop, define_again, 1.0,
                           generators=("ev",), decoder_of=lambda _: decode_ev,
                           expected=EXPECTED | {"42704"})
        self.assertEqual(len(refusals), 9)
        self.assertEqual(set(refusals.values()), {"22023"}, refusals)

    def test_database_owner_against_the_leases(self):
        # Finding 2 of the hostile review, in the fleet: on every server the owner of
        # cosid.database, a role with CREATEDB and no superuser, gives it the settings that would
        # break the workers' sessions, and every server restarts under load (its workers then
        # run with them); the owner then tries to keep the workers out of the database or take
        # it away: refused (55006).
        for server in self.servers:
            make_owner(server, "alice", "postgres")
            set_database_settings(server, "alice", "postgres", SETTINGS_CLIENTS_SURVIVE)
        answers = {}

        def fault():
            for server in self.servers:
                server.restart()
            for server in self.servers:
                for sql, error in try_taking_it_away(server, "alice", "postgres").items():
                    answers[server.name, sql] = error and error.sqlstate

        # idle_session_timeout ends the load's own sessions too when one waits 200 ms between
        # calls on a loaded machine (57P05): the clients', not cosid's.
        self.run_with_load("database owner's statements", fault, lambda: None, 1.0,
                           expected=EXPECTED | {"57P05"})
        self.assertEqual(len(answers), 15)
        self.assertEqual(set(answers.values()), {"55006"}, answers)
        # Generation goes on: two servers hold the two machine ids, with no error.
        self.assertEqual([status(s)["state"] for s in self.servers].count("UP"), 2)
        self.assertEqual([status(s)["last_error"] for s in self.holders()], ["", ""])

    def test_random_mix(self):
        rounds = int(os.environ.get("COSID_FAULT_ROUNDS", "3"))
        rng = random.Random(int(os.environ.get("COSID_FAULT_SEED", "7")))
        faults = ["blackhole", "reset", "delay"]
        for round_number in range(rounds):
            chosen = rng.choice(faults)
            targets = rng.sample(self.proxies, rng.randint(1, len(self.proxies)))
            duration = rng.uniform(0.5, SAFE_GUARD_S + 2)
            self.run_with_load(
                f"mix {round_number + 1}: {chosen} x{len(targets)}",
                lambda: [p.set_mode(chosen, 0.2) for p in targets],
                lambda: [p.set_mode("pass") for p in targets], duration)


if __name__ == "__main__":
    unittest.main()
