"""cosid.distributor = 'cosid_jdbc': cosid servers and Java services (CosId's JDBC distributor,
played by helpers/cosid_java.py with CosId's statements and timing) share one namespace of
CosId's table cosid_machine on a PostgreSQL that also holds cosid's lease store (which only
says whether the database may have forgotten claims), and every id any of them issued is counted:
0 duplicates, and no (millisecond, machine id) from two holders."""

import os
import signal
import subprocess
import threading
import time
import unittest

from helpers.cosid_java import JavaCosId, MachineIdOverflow, distribute_or_error, now_ms
from helpers.fleet import (COSID_MACHINE_SQL, FLEET_PASSWORD, FLEET_ROLE, LEASE_SQL,
                           add_cosid_machine, fleet_server, start_store)
from helpers.leases import FAST_LEASES, SAFE_GUARD_S, machine_of, ts_ms_of
from helpers.pgcluster import (Cluster, SqlError, chown_to_postgres, free_port, query_as,
                               wait_for)
from helpers.shared_namespace import (assert_unique, generate, ids_of, holder_pattern,
                                      named_generator_beside, refuses, status, store_ids,
                                      wait_state)

JDBC = {**FAST_LEASES, "cosid.distributor": "'cosid_jdbc'"}
SAFE_GUARD_MS = int(SAFE_GUARD_S * 1000)
IDS = 100_000


def start_cosid_store(name, port):
    """A plain PostgreSQL with cosid's lease store and CosId's table, as sql/cosid_machine.sql
    makes it, and the role cosid servers log in as, with the privileges its comment grants."""
    return add_cosid_machine(start_store(name, port))


def cosid_server(name, port, store, **settings):
    server = fleet_server(name, port, store.port, extra={**JDBC, **settings})
    server.start()
    server.query("CREATE EXTENSION cosid; CREATE TABLE ids (id bigint, source text)")
    return server


def resume(pid):
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


class CosidJdbc(unittest.TestCase):
    def setUp(self):
        self.store = start_cosid_store("jdbc-store", 24610)
        self.servers = []

    def tearDown(self):
        for server in self.servers:
            server.stop(check=False)
        self.store.stop(check=False)

    def server(self, name, port, **settings):
        server = cosid_server(name, port, self.store, **settings)
        self.servers.append(server)
        return server

    def java(self, instance_id, **options):
        return JavaCosId(self.store, instance_id, safe_guard_ms=SAFE_GUARD_MS, **options)

    def assert_unique(self, server):
        return assert_unique(self, server)

    def test_java_services_and_cosid_write_one_table(self):
        """The scenario that gave 343 equal ids with two machine-id schemes: a Java service on
        machine id 0 (the first of an empty table) and cosid, each 100,000 ids at once into one
        table; then a second Java service joins while both run."""
        first = self.java("10.0.0.5:4242")
        self.assertEqual(first.distribute(), 0)
        server = self.server("jdbc-a", 24611)
        self.assertEqual(wait_state(server, "UP")["machine_id"], "1")
        holder = self.store.query("SELECT instance_id FROM cosid_machine WHERE machine_id = 1")
        self.assertRegex(holder, holder_pattern(server), "the status's instance id")
        # CosId's guarder renews the row (every minute by default): here before the second
        # service starts, since the server's start can outlast the safe guard on a loaded
        # machine, and CosId takes an expired row before it makes a new one.
        first.guard()
        second = self.java("10.0.0.6:4242")
        self.assertEqual(second.distribute(), 2)
        java_ids = {}
        threads = [threading.Thread(target=lambda p=p: java_ids.update({p.instance_id: p.ids(IDS)}))
                   for p in (first, second)]
        for thread in threads:
            thread.start()
        generate(server, IDS)
        for thread in threads:
            thread.join()
        for participant in (first, second):
            store_ids(server, participant.instance_id, java_ids[participant.instance_id])
        self.assertEqual(self.assert_unique(server), 3 * IDS)
        machines = server.rows("SELECT DISTINCT source, (id >> 12) & 1023 FROM ids ORDER BY 1")
        self.assertEqual(machines, [["10.0.0.5:4242", "0"], ["10.0.0.6:4242", "2"],
                                    ["cosid", "1"]])

    def test_releases_hand_the_machine_id_over_both_ways(self):
        """cosid's clean stop writes the millisecond after the last one it issued (CosId's next
        holder waits until its clock reaches it); the Java service that takes the row next
        issues above it. The Java service's revert is taken by cosid likewise."""
        server = self.server("jdbc-b", 24612)
        self.assertEqual(wait_state(server, "UP")["machine_id"], "0")
        generate(server, 20_000)
        cosid_ids = ids_of(server, "cosid")
        server.stop()
        last_timestamp = int(self.store.query(
            "SELECT last_timestamp FROM cosid_machine WHERE machine_id = 0 AND instance_id = ''"))
        self.assertEqual(last_timestamp, ts_ms_of(cosid_ids[-1]) + 1,
                         "the release writes the millisecond after the last id issued")
        java = self.java("10.0.0.7:4242")
        self.assertEqual(java.distribute(), 0, "the released row, before any new one")
        java_ids = java.ids(20_000)
        self.assertGreater(java_ids[0], cosid_ids[-1])
        java.revert()
        server.start()
        self.assertEqual(wait_state(server, "UP")["machine_id"], "0")
        generate(server, 20_000, "cosid again")
        store_ids(server, "java", java_ids)
        self.assertGreater(min(ids_of(server, "cosid again")), java_ids[-1])
        self.assertEqual(self.assert_unique(server), 60_000)

    def test_an_expired_java_row_is_never_taken(self):
        """A Java service whose renewals stopped may still generate (CosId only reports it):
        cosid takes a new machine id instead, and the Java instance's ids never meet cosid's."""
        java = self.java("10.0.0.8:4242")
        self.assertEqual(java.distribute(), 0)
        time.sleep(SAFE_GUARD_S + 1)
        self.assertEqual(self.store.query(
            f"SELECT count(*) FROM cosid_machine WHERE last_timestamp <= {now_ms() - SAFE_GUARD_MS}"),
            "1", "the Java row has expired by the claimer's clock")
        server = self.server("jdbc-c", 24613)
        self.assertEqual(wait_state(server, "UP")["machine_id"], "1")
        generate(server, 20_000)
        store_ids(server, "java", java.ids(20_000))
        self.assertEqual(self.assert_unique(server), 40_000)
        self.assertEqual({machine_of(i) for i in ids_of(server, "java")}, {0})

    def test_a_crashed_servers_row_is_taken_by_java_above_every_id_it_issued(self):
        """kill -9: no release; the Java service takes the row once it expired by its clock and
        safe guard (CosId's rule), and issues above every id the crashed server issued, because
        cosid wrote as last_timestamp a time its ids never reach."""
        server = self.server("jdbc-d", 24614)
        self.assertEqual(wait_state(server, "UP")["machine_id"], "0")
        generate(server, 20_000)
        cosid_ids = ids_of(server, "cosid") + [int(value) for value in server.query(
            "SELECT cosid_next() FROM generate_series(1, 1000)").split()]
        cosid_ids.sort()
        server.crash()
        java = self.java("10.0.0.9:4242")
        started = time.monotonic()
        self.assertEqual(java.distribute(), 1, "not the crashed server's row: it is live")

        wait_for(lambda: self.store.query(
            "SELECT last_timestamp <= (extract(epoch FROM clock_timestamp()) * 1000)::bigint - "
            f"{SAFE_GUARD_MS} FROM cosid_machine WHERE machine_id = 0") == "t",
            4 * SAFE_GUARD_S + 10, "the crashed server's row to expire by CosId's rule")
        taker = self.java("10.0.1.1:4242")
        self.assertEqual(taker.distribute(), 0)
        waited = time.monotonic() - started
        first = taker.next_id()
        self.assertGreater(first, cosid_ids[-1])
        self.assertGreater(ts_ms_of(first), ts_ms_of(cosid_ids[-1]) + SAFE_GUARD_MS,
                           "past the watermark cosid wrote")
        print(f"\n  the crashed server's row taken by Java after {waited:.1f} s "
              f"(safe guard {SAFE_GUARD_S} s on each side)", end=" ")

    def test_a_halted_lease_worker_stops_ids_before_java_takes_over(self):
        """The lease worker halted (SIGSTOP) while backends generate: cosid_next() refuses
        before the last_timestamp it wrote is reached; a Java service takes the row once it
        expired by CosId's rule and generates; the worker, resumed, finds its renewal matches no
        row and takes a new machine id, never the Java service's. Every id counted."""
        server = self.server("jdbc-h", 24623)
        self.assertEqual(wait_state(server, "UP")["machine_id"], "0")
        other = self.java("10.0.6.1:4242")
        self.assertEqual(other.distribute(), 1)
        worker = server.worker_pid()
        os.kill(worker, signal.SIGSTOP)
        self.addCleanup(resume, worker)
        halted = time.monotonic()
        refused = None
        while refused is None:
            try:
                generate(server, 2_000)
            except SqlError as error:
                refused = error.sqlstate
            other.guard()
        refused_after = time.monotonic() - halted
        self.assertEqual(refused, "55P03")
        cosid_ids = ids_of(server, "cosid")
        taker = self.java("10.0.6.2:4242")

        def expired():
            other.guard()
            return int(self.store.query(
                "SELECT last_timestamp FROM cosid_machine WHERE machine_id = 0")) <= (
                taker.now() - SAFE_GUARD_MS)
        wait_for(expired, 4 * SAFE_GUARD_S + 10, "the halted server's row to expire")
        self.assertEqual(taker.distribute(), 0)
        taker_ids = taker.ids(20_000)
        self.assertGreater(taker_ids[0], cosid_ids[-1])
        resume(worker)
        after = wait_for(lambda: status(server)["state"] == "UP"
                         and status(server)["machine_id"] not in ("0", "1") and status(server),
                         60, f"the resumed worker to take a new machine id:\n{server.log()[-2000:]}")
        generate(server, 20_000, "cosid after")
        store_ids(server, "taker", taker_ids)
        store_ids(server, "other", other.ids(20_000))
        total = self.assert_unique(server)
        print(f"\n  {len(cosid_ids)} ids before the refusal, {refused_after:.1f} s after the "
              f"halt; resumed on machine id {after['machine_id']}; {total} ids in all", end=" ")

    def test_clocks_skewed_within_the_margin(self):
        """A Java service whose clock runs 1.5 s ahead reverts its row: cosid, on the real clock,
        takes it only once its clock is within its broken threshold of the row's last_timestamp
        (or takes another), and issues above. Then cosid is killed and a service whose clock runs
        1.5 s behind takes its row when CosId's rule lets it: above every id cosid issued."""
        ahead = self.java("10.0.4.1:4242", clock_offset_ms=1_500)
        self.assertEqual(ahead.distribute(), 0)
        ahead_ids = ahead.ids(20_000)
        ahead.revert()
        server = self.server("jdbc-f", 24621)
        machine = wait_state(server, "UP")["machine_id"]
        generate(server, 20_000)
        store_ids(server, "ahead", ahead_ids)
        cosid_ids = ids_of(server, "cosid")
        if machine == "0":
            self.assertGreater(cosid_ids[0], ahead_ids[-1])
        self.assertEqual(self.assert_unique(server), 40_000)
        server.crash()
        behind = self.java("10.0.4.2:4242", clock_offset_ms=-1_500)
        wait_for(lambda: self.store.query(
            "SELECT count(*) FROM cosid_machine WHERE instance_id LIKE 'cosid-%' AND "
            f"last_timestamp <= {behind.now() - SAFE_GUARD_MS}") == "1",
            4 * SAFE_GUARD_S + 10, "the crashed server's row to expire by the late clock")
        self.assertEqual(behind.distribute(), int(machine))
        first = behind.next_id()
        self.assertGreater(first, cosid_ids[-1])
        print(f"\n  cosid took machine id {machine} after a service 1.5 s ahead reverted it",
              end=" ")

    def test_a_java_service_whose_renewals_stop_keeps_generating(self):
        """The risk left to the Java side, measured: a service that stops renewing but keeps
        generating (CosId only reports the failed renewals), and a second service that takes its
        expired row by CosId's rule. cosid, beside them, never takes that row."""
        stalled = self.java("10.0.5.1:4242")
        self.assertEqual(stalled.distribute(), 0)
        server = self.server("jdbc-g", 24622)
        self.assertEqual(wait_state(server, "UP")["machine_id"], "1")
        stalled_ids, taker_ids = [], []
        stop = threading.Event()
        second = None

        def keep_generating(participant, into):
            while not stop.is_set():
                into.extend(participant.ids(200))
                time.sleep(0.005)
        runner = threading.Thread(target=keep_generating, args=(stalled, stalled_ids))
        runner.start()
        try:
            wait_for(lambda: self.store.query(
                "SELECT last_timestamp <= (extract(epoch FROM clock_timestamp()) * 1000)::bigint"
                f" - {SAFE_GUARD_MS} FROM cosid_machine WHERE machine_id = 0") == "t",
                4 * SAFE_GUARD_S + 10, "the stalled service's row to expire")
            taker = self.java("10.0.5.2:4242")
            self.assertEqual(taker.distribute(), 0, "CosId takes the expired row")
            second = threading.Thread(target=keep_generating, args=(taker, taker_ids))
            second.start()
            generate(server, 20_000)
            time.sleep(1)
        finally:
            stop.set()
            runner.join()
            if second is not None:
                second.join()
        java_duplicates = len(stalled_ids) + len(taker_ids) - len(set(stalled_ids + taker_ids))
        shared = {i >> 12 for i in stalled_ids} & {i >> 12 for i in taker_ids}
        store_ids(server, "stalled", stalled_ids)
        store_ids(server, "taker", taker_ids)
        cosid_ids = set(ids_of(server, "cosid"))
        self.assertEqual(len(cosid_ids), 20_000)
        self.assertFalse(cosid_ids & (set(stalled_ids) | set(taker_ids)))
        print(f"\n  two Java services on machine id 0: {java_duplicates} equal ids and "
              f"{len(shared)} shared milliseconds in {len(stalled_ids)} and {len(taker_ids)}; "
              "cosid: 0 in 20000", end=" ")

    def test_machine_ids_running_out_and_coming_back(self):
        """Two machine ids (machine_bits 1), both held by Java services: cosid refuses, says why
        in cosid.status (problem exhausted), and takes the first one a service reverts."""
        tiny = {"namespace": "tiny", "machine_bits": 1}
        held = [self.java(f"10.0.2.{n}:4242", **tiny) for n in (1, 2)]
        self.assertEqual([java.distribute() for java in held], [0, 1])
        with self.assertRaises(MachineIdOverflow):
            self.java("10.0.2.3:4242", **tiny).distribute()
        server = self.server("jdbc-e", 24615, **{
            "cosid.namespace": "'tiny'", "cosid.machine_bits": 1, "cosid.timestamp_bits": 41,
            "cosid.sequence_bits": 12})
        wait_for(lambda: status(server)["problem"] == "exhausted", 60,
                 f"cosid to see no machine id left:\n{server.log()[-2000:]}")
        with self.assertRaises(SqlError) as refused:
            server.query("SELECT cosid_next()")
        self.assertEqual(refused.exception.sqlstate, "53400")
        held[1].revert()
        self.assertEqual(wait_state(server, "UP")["machine_id"], "1")

    def test_new_machine_ids_raced_for(self):
        """Two cosid servers and Java services claim new machine ids of an empty namespace at
        once: cosid's insert of a taken name is a retry (ON CONFLICT), every holder distinct.
        CosId's own insert fails on PostgreSQL with 23505 when it loses that race, as it does
        for Java services on PostgreSQL today; that count is reported."""
        servers = [fleet_server(f"jdbc-race-{n}", 24616 + n, self.store.port, extra=JDBC)
                   for n in range(2)]
        self.servers.extend(servers)
        javas = [self.java(f"10.0.3.{n}:4242") for n in range(4)]
        results = []
        threads = ([threading.Thread(target=server.start) for server in servers] +
                   [threading.Thread(target=lambda j=j: results.append(distribute_or_error(j)))
                    for j in javas])
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for server in servers:
            server.query("CREATE EXTENSION cosid")
        cosid_machines = [wait_state(server, "UP")["machine_id"] for server in servers]
        java_machines = [machine for machine, _ in results if machine is not None]
        failures = [sqlstate for _, sqlstate in results if sqlstate is not None]
        self.assertTrue(set(failures) <= {"23505"}, failures)
        holders = self.store.rows("SELECT machine_id, instance_id FROM cosid_machine")
        self.assertEqual(len(holders), len({machine for machine, _ in holders}))
        self.assertEqual(len(set(cosid_machines + [str(m) for m in java_machines])),
                         len(cosid_machines) + len(java_machines))
        print(f"\n  {len(failures)} of 4 Java services failed to start on 23505", end=" ")

    def test_a_named_generator_leases_in_its_own_namespace(self):
        """Named generators use the server's distributor, one machine id per namespace: in a
        namespace where a Java service holds machine id 0, the named generator takes 1, while
        the default generator holds 0 of its own; 100,000 ids of the two, 0 duplicates."""
        java = self.java("10.0.7.2:4242", namespace="orders")
        self.assertEqual(java.distribute(), 0)
        server = self.server("jdbc-i", 24624)
        self.assertEqual(wait_state(server, "UP")["machine_id"], "0")
        named_generator_beside(self, server, java, "cosid_jdbc")
        self.assertEqual(self.assert_unique(server), 100_000)

    def test_a_restarted_store_settles_before_a_row_is_taken(self):
        """A start of the store's server may have been an older copy of it, whose
        cosid_machine no longer shows a claim: cosid's lease store beside the table makes a
        claimer wait a whole safe guard before it takes a released row (as it would a row
        such a copy shows released), and its ids start above the end of the settling."""
        first = self.server("jdbc-s1", 24625)
        self.assertEqual(wait_state(first, "UP")["machine_id"], "0")
        generate(first, 1_000)
        first_ids = ids_of(first, "cosid")
        first.stop()
        self.assertEqual(self.store.query(
            "SELECT instance_id FROM cosid_machine WHERE machine_id = 0"), "")
        restarted_ms = now_ms()
        self.store.restart()
        second = self.server("jdbc-s2", 24626)
        settling = wait_for(lambda: status(second).get("problem") == "store_settling"
                            and status(second), 30,
                            f"the claimer to wait for the store:\n{second.log()[-2000:]}")
        self.assertNotEqual(settling["state"], "UP")
        self.assertIn("it may have forgotten claims", settling["last_error"])
        self.assertEqual(wait_state(second, "UP")["machine_id"], "0")
        generate(second, 1_000)
        second_ids = ids_of(second, "cosid")
        # Safety, not timing: the store started after restarted_ms and settles for a safe guard.
        self.assertGreater(ts_ms_of(min(second_ids)), restarted_ms + SAFE_GUARD_MS)
        store_ids(second, "first", first_ids)
        self.assert_unique(second)

    def test_a_lapsed_lease_is_not_renewed_while_the_store_settles(self):
        """The store's server stops while a cosid server holds a row: the server's renewals
        fail and it stops generating at its deadline. The store starts again, and may be an
        older copy that forgot later claims: the row it shows this server holding may have
        gone to another in the history it forgot, so the renewal of a holder that no longer
        generates is refused while it settles, and the server's ids start above the end of
        the settling."""
        server = self.server("jdbc-l", 24629)
        self.assertEqual(wait_state(server, "UP")["machine_id"], "0")
        generate(server, 1_000)
        self.store.stop()
        wait_for(lambda: refuses(server) and status(server)["state"] != "UP",
                 4 * SAFE_GUARD_S + 10, "the server to stop generating")
        restarted_ms = now_ms()
        self.store.start()
        wait_state(server, "UP")
        generate(server, 1_000, "after")
        after = ids_of(server, "after")
        self.assertIn("it may have forgotten claims", server.log())
        # Safety, not timing: the store started after restarted_ms and settles a safe guard.
        self.assertGreater(ts_ms_of(min(after)), restarted_ms + SAFE_GUARD_MS)
        total = self.assert_unique(server)
        print(f"\n  back {(ts_ms_of(min(after)) - restarted_ms) / 1000:.1f} s after the store "
              f"started again (safe guard {SAFE_GUARD_S} s); {total} ids", end=" ")


    def co_tenant(self, sql):
        """Runs SQL as a role with exactly the grants CosId's services need on its table."""
        if not self.store.query("SELECT 1 FROM pg_roles WHERE rolname = 'cosid_java'"):
            self.store.query("CREATE ROLE cosid_java LOGIN; "
                             "GRANT SELECT, INSERT, UPDATE ON public.cosid_machine TO cosid_java")
        return query_as(self.store, "cosid_java", sql)

    def test_a_renamed_row_and_a_released_twin_are_never_taken(self):
        """A co-tenant with CosId's grants renames the row server A holds and inserts a
        released row for machine id 0 under the old name (before, server B took machine id 0
        and both renewed for good: 218,681 equal ids). B passes machine id 0 over (two rows
        have it), A's next renewal finds its row renamed and stops at once, and both come back
        on machine ids of their own."""
        a = self.server("jdbc-ra", 24630)
        self.assertEqual(wait_state(a, "UP")["machine_id"], "0")
        self.co_tenant("UPDATE cosid_machine SET name = 'cosid.renamed' WHERE machine_id = 0; "
                       "INSERT INTO cosid_machine VALUES ('cosid.00000000', 'cosid', 0, 1, '', "
                       "0, 0)")
        b = self.server("jdbc-rb", 24631)
        b_machine = wait_state(b, "UP")["machine_id"]
        self.assertNotEqual(b_machine, "0", "a machine id two rows have was taken")
        # A stops at its next renewal (every 0.5 s), and claims again: back within a bound
        # several times the renewal interval and the safe guard.
        started = time.monotonic()
        wait_for(lambda: status(a).get("machine_id") not in ("0", None)
                 and status(a)["state"] == "UP", 30,
                 f"A to claim again:\n{a.log()[-2000:]}")
        print(f"\n  A back on machine id {status(a)['machine_id']} in "
              f"{time.monotonic() - started:.1f} s", end=" ")
        self.assertIn("lost", a.log())
        self.assertNotEqual(status(a)["machine_id"], b_machine)
        for server, source in ((a, "a"), (b, "b")):
            generate(server, 20_000, source)
        store_ids(a, "b", ids_of(b, "b"))
        self.assertEqual(self.assert_unique(a), 40_000)

    def test_a_released_row_for_a_held_machine_id_blocks_no_claim(self):
        """A co-tenant inserts a released row for the machine id server A holds, under another
        name (before, server B stayed CLAIMING for good: "other claims kept changing the lease
        table"). B claims another machine id; A, whose machine id now has a twin, stops at
        its next renewal and claims another one; both generate, 0 equal ids."""
        a = self.server("jdbc-ta", 24632)
        self.assertEqual(wait_state(a, "UP")["machine_id"], "0")
        self.co_tenant("INSERT INTO cosid_machine VALUES ('cosid.twin', 'cosid', 0, 1, '', 0, 0)")
        b = self.server("jdbc-tb", 24633)
        b_machine = wait_state(b, "UP")["machine_id"]
        self.assertNotEqual(b_machine, "0")
        wait_for(lambda: status(a).get("machine_id") not in ("0", None)
                 and status(a)["state"] == "UP", 30, f"A to claim again:\n{a.log()[-2000:]}")
        self.assertNotEqual(status(a)["machine_id"], b_machine)
        for server, source in ((a, "a"), (b, "b")):
            generate(server, 20_000, source)
        store_ids(a, "b", ids_of(b, "b"))
        self.assertEqual(self.assert_unique(a), 40_000)


class StoreSetUp(unittest.TestCase):
    def test_a_table_without_cosids_lease_store_is_not_used(self):
        """CosId's table alone: a cosid server claims nothing and says what is missing; with
        cosid's lease store installed and the least the docs give its role (EXECUTE on
        cosid.cosid_machine_settles_at() and USAGE on its schema), it claims."""
        # Every statement logged: the test sees the server check the store again.
        store = Cluster("jdbc-bare", free_port(24627), {"log_statement": "'all'"},
                        preload=False).init()
        (store.data / "pg_hba.conf").write_text(
            f"host all {FLEET_ROLE} 127.0.0.1/32 scram-sha-256\n"
            "local all all trust\nhost all all 127.0.0.1/32 trust\n")
        chown_to_postgres(store.data)
        store.start()
        self.addCleanup(store.stop, check=False)
        store.query(COSID_MACHINE_SQL.read_text())
        store.query(f"CREATE ROLE {FLEET_ROLE} LOGIN PASSWORD '{FLEET_PASSWORD}'; "
                    f"GRANT SELECT, INSERT, UPDATE ON public.cosid_machine TO {FLEET_ROLE}")
        server = cosid_server("jdbc-bare-server", 24628, store)
        self.addCleanup(server.stop, check=False)
        waiting = wait_for(lambda: "cosid's lease store" in (status(server).get("last_error")
                                                             or "") and status(server), 30,
                           f"the server to say what is missing:\n{server.log()[-2000:]}")
        self.assertNotEqual(waiting["state"], "UP")
        self.assertIn("grant cosid_lease_holder", waiting["last_error"])
        self.assertEqual(store.query("SELECT count(*) FROM cosid_machine"), "0")
        subprocess.run(store.psql_command("postgres", "-q", "-v", "ON_ERROR_STOP=1", "-f",
                                          str(LEASE_SQL)), check=True)
        # The function alone, without the use of its schema, is not enough: still waiting.
        store.query("GRANT EXECUTE ON FUNCTION cosid.cosid_machine_settles_at(bigint) "
                    f"TO {FLEET_ROLE}")
        granted_at = len(store.log())
        # Two of the server's checks of the store since the grant: the first one's answer is
        # in the status by the time the second starts.
        wait_for(lambda: store.log()[granted_at:].count("has_function_privilege(p.oid") >= 2,
                 30, f"the server to check the store twice:\n{server.log()[-2000:]}")
        waiting = status(server)
        self.assertNotEqual(waiting["state"], "UP")
        self.assertIn("grant cosid_lease_holder", waiting["last_error"])
        # With the use of the schema too (the least the docs give instead of the role), it
        # claims.
        store.query(f"GRANT USAGE ON SCHEMA cosid TO {FLEET_ROLE}")
        self.assertEqual(wait_state(server, "UP")["machine_id"], "0")


class Settings(unittest.TestCase):
    def test_cosid_jdbc_needs_a_store_and_no_stable_instance(self):
        for name, settings, refused in (
                ("jdbc-no-store", {}, 'invalid value for parameter "cosid.lease_store": ""'),
                ("jdbc-stable", {"cosid.lease_store": "'host=127.0.0.1 port=1'",
                                 "cosid.stable": "on", "cosid.instance_id": "'db1'"},
                 'invalid value for parameter "cosid.stable": on')):
            server = Cluster(name, free_port(24620), {**JDBC, **settings}).init()
            self.assertFalse(server.start(check=False))
            self.assertIn(refused, server.log())


if __name__ == "__main__":
    unittest.main()
