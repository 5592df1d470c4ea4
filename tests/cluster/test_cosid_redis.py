"""cosid.distributor = 'cosid_redis': cosid servers and Java services (CosId's Redis
distributor, played by helpers/cosid_java.py with its scripts' semantics and timing) share one
namespace of CosId's keys in a real redis-server, and every id any of them issued is counted:
0 duplicates, and no (millisecond, machine id) from two holders."""

import os
import re
import signal
import threading
import time
import unittest

from helpers.clients import LoopingClients, duplicates
from helpers.cosid_java import JavaCosIdRedis, MachineIdOverflow, now_ms
from helpers.fleet import Proxy
from helpers.leases import FAST_LEASES, SAFE_GUARD_S, machine_of, ts_ms_of
from helpers.pgcluster import ROOT, Cluster, SqlError, free_port, wait_for
from helpers.redis_server import RedisServer
from helpers.shared_namespace import (assert_unique, generate, ids_of, holder_pattern,
                                      named_generator_beside, refuses, status, store_ids,
                                      wait_state)

REDIS = {**FAST_LEASES, "cosid.distributor": "'cosid_redis'"}
SAFE_GUARD_MS = int(SAFE_GUARD_S * 1000)
IDS = 100_000
TINY = {"cosid.namespace": "'tiny'", "cosid.machine_bits": 1, "cosid.timestamp_bits": 41,
        "cosid.sequence_bits": 12}
COSID_HOLDER = re.compile(r"^cosid-[0-9a-f]{16}@")
# One machine id for two servers.
ONE_MACHINE_ID = {"cosid.machine_bits": 0, "cosid.timestamp_bits": 41, "cosid.sequence_bits": 12}


def cosid_scripts():
    """cosid's own Lua scripts, as the extension sends them (core/src/cosid_redis.rs): the
    prelude every script starts with, then claim, renew and release."""
    source = (ROOT / "core" / "src" / "cosid_redis.rs").read_text()
    prelude, claim, renew, release = re.findall(r'r#"(.*?)"#', source, re.S)[:4]
    return {name: prelude + body for name, body in
            (("claim", claim), ("renew", renew), ("release", release))}


def resume(pid):
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


class CosidRedis(unittest.TestCase):
    def setUp(self):
        self.redis = RedisServer(free_port(24640)).start()
        self.servers = []

    def tearDown(self):
        for server in self.servers:
            server.stop(check=False)
        self.redis.stop()

    def server(self, name, port, **settings):
        server = Cluster(name, free_port(port), {
            **REDIS, "cosid.lease_store": f"'{self.redis.url}'", **settings}).init()
        self.servers.append(server)
        server.start()
        server.query("CREATE EXTENSION cosid; CREATE TABLE ids (id bigint, source text)")
        return server

    def java(self, instance_id, **options):
        return JavaCosIdRedis(self.redis, instance_id, safe_guard_ms=SAFE_GUARD_MS, **options)

    def entries(self, namespace="cosid"):
        """CosId's holders of the namespace: holder -> (machine id, stamp)."""
        flat = self.redis.call("HGETALL", f"cosid:{{{namespace}}}:itc_idx")
        return {flat[i]: tuple(int(part) for part in flat[i + 1].split("|"))
                for i in range(0, len(flat), 2)}

    def settled_since(self, namespace, changed_ms, server=None):
        """cosid's record of a Redis server (its run id and replication id now), as a claim
        leaves it, saying the server last changed at changed_ms, with this suite's safe guard."""
        server = server or self.redis
        run_id = re.search(r"run_id:(\w+)", server.call("INFO", "server")).group(1)
        replid = re.search(r"master_replid:(\w+)",
                           server.call("INFO", "replication")).group(1)
        server.call("HSET", f"cosid:{{{namespace}}}:cosid_store", "run_id", run_id,
                    "replid", replid, "changed", changed_ms, "safe_guard", SAFE_GUARD_MS)

    def cosid_entry(self, namespace="cosid"):
        [(machine_id, stamp)] = [state for holder, state in self.entries(namespace).items()
                                 if COSID_HOLDER.match(holder)]
        return machine_id, stamp

    def test_java_services_and_cosid_write_one_table(self):
        """The scenario that gave 343 equal ids with two machine-id schemes: a Java service on
        machine id 0 (the adder's first) and cosid, each 100,000 ids at once into one table;
        then a second Java service joins while both run."""
        first = self.java("10.0.0.5:4242")
        self.assertEqual(first.distribute(), 0)
        server = self.server("redis-a", 24641)
        self.assertEqual(wait_state(server, "UP")["machine_id"], "1")
        self.assertEqual(self.cosid_entry()[0], 1)
        [(holder, (machine_id, _))] = [(holder, state) for holder, state in self.entries().items()
                                       if holder.startswith("cosid-")]
        self.assertRegex(holder, holder_pattern(server), "the status's instance id")
        self.assertEqual(machine_id, 1)
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
        self.assertEqual(assert_unique(self, server), 3 * IDS)
        machines = server.rows("SELECT DISTINCT source, (id >> 12) & 1023 FROM ids ORDER BY 1")
        self.assertEqual(machines, [["10.0.0.5:4242", "0"], ["10.0.0.6:4242", "2"],
                                    ["cosid", "1"]])
        self.assertEqual(self.redis.call("GET", "cosid:{cosid}:adder"), "2")

    def test_releases_hand_the_machine_id_over_both_ways(self):
        """cosid's clean stop moves its machine id to CosId's released hash with the millisecond
        after its last id (CosId waits until its clock reaches it); the Java service that takes
        it next issues above. The Java service's revert is taken by cosid likewise."""
        server = self.server("redis-b", 24642)
        self.assertEqual(wait_state(server, "UP")["machine_id"], "0")
        generate(server, 20_000)
        cosid_ids = ids_of(server, "cosid")
        server.stop()
        self.assertEqual(self.entries(), {})
        released = self.redis.call("HGETALL", "cosid:{cosid}:revert")
        self.assertEqual(released, ["0", str(ts_ms_of(cosid_ids[-1]) + 1)])
        java = self.java("10.0.0.7:4242")
        self.assertEqual(java.distribute(), 0, "the released machine id, before a new one")
        java_ids = java.ids(20_000)
        self.assertGreater(java_ids[0], cosid_ids[-1])
        java.revert()
        server.start()
        self.assertEqual(wait_state(server, "UP")["machine_id"], "0")
        generate(server, 20_000, "cosid again")
        store_ids(server, "java", java_ids)
        self.assertGreater(min(ids_of(server, "cosid again")), java_ids[-1])
        self.assertEqual(assert_unique(self, server), 60_000)

    def test_expired_java_entries_are_never_taken_and_machine_ids_run_out(self):
        """Two machine ids (machine_bits 1), both held by Java services that stopped renewing:
        CosId would take them, cosid does not (a Java instance keeps generating when its
        renewals fail). It refuses with 53400 (problem exhausted) and takes the first one a
        service reverts."""
        tiny = {"namespace": "tiny", "machine_bits": 1}
        held = [self.java(f"10.0.2.{n}:4242", **tiny) for n in (1, 2)]
        self.assertEqual([java.distribute() for java in held], [0, 1])
        with self.assertRaises(MachineIdOverflow):
            self.java("10.0.2.3:4242", **tiny).distribute()
        wait_for(lambda: all(stamp <= now_ms() - SAFE_GUARD_MS
                             for _, stamp in self.entries("tiny").values()),
                 4 * SAFE_GUARD_S + 10, "both Java entries to expire")
        server = self.server("redis-c", 24643, **TINY)
        wait_for(lambda: status(server)["problem"] == "exhausted", 60,
                 f"cosid to see no machine id left:\n{server.log()[-2000:]}")
        with self.assertRaises(SqlError) as refused:
            server.query("SELECT cosid_next()")
        self.assertEqual(refused.exception.sqlstate, "53400")
        self.assertEqual(sorted(self.entries("tiny")), ["10.0.2.1:4242", "10.0.2.2:4242"])
        store_ids(server, "java 0", held[0].ids(10_000))
        store_ids(server, "java 1", held[1].ids(10_000))
        held[1].revert()
        self.assertEqual(wait_state(server, "UP")["machine_id"], "1")
        generate(server, 10_000)
        store_ids(server, "java 0 again", held[0].ids(10_000))
        self.assertEqual(assert_unique(self, server), 40_000)
        self.assertEqual({machine_of(i, mask=1) for i in ids_of(server, "cosid")}, {1})

    def test_a_crashed_servers_machine_id_is_taken_by_a_late_clock_above_every_id(self):
        """kill -9: no release; a Java service whose clock runs 1.5 s behind takes the machine
        id once it expired by its clock and safe guard (CosId's rule), and issues above every id
        the crashed server issued, because cosid wrote as stamp a time its ids never reach."""
        server = self.server("redis-d", 24644, **TINY)
        self.assertEqual(wait_state(server, "UP")["machine_id"], "0")
        other = self.java("10.0.3.1:4242", namespace="tiny", machine_bits=1)
        self.assertEqual(other.distribute(), 1)
        generate(server, 20_000)
        cosid_ids = sorted(ids_of(server, "cosid") + [int(value) for value in server.query(
            "SELECT cosid_next() FROM generate_series(1, 1000)").split()])
        server.crash()
        started = time.monotonic()
        taker = self.java("10.0.3.2:4242", namespace="tiny", machine_bits=1,
                          clock_offset_ms=-1_500)

        def expired_by_the_late_clock():
            other.guard()
            return self.cosid_entry("tiny")[1] <= taker.now() - SAFE_GUARD_MS
        wait_for(expired_by_the_late_clock, 4 * SAFE_GUARD_S + 10,
                 "the crashed server's entry to expire by the late clock")
        self.assertEqual(taker.distribute(), 0)
        waited = time.monotonic() - started
        first = taker.next_id()
        self.assertGreater(first, cosid_ids[-1])
        self.assertGreater(ts_ms_of(first), ts_ms_of(cosid_ids[-1]) + SAFE_GUARD_MS,
                           "past the watermark cosid wrote")
        print(f"\n  the crashed server's machine id taken by a clock 1.5 s late after "
              f"{waited:.1f} s", end=" ")

    def test_a_halted_lease_worker_stops_ids_before_java_takes_over(self):
        """The lease worker halted (SIGSTOP) while backends generate: cosid_next() refuses
        before the stamp it wrote is reached; a Java service takes the machine id once it
        expired by CosId's rule and generates; the worker, resumed, finds it lost and takes
        nothing a Java service holds. Every id counted: 0 duplicates, 0 shared pairs."""
        server = self.server("redis-e", 24645, **TINY)
        self.assertEqual(wait_state(server, "UP")["machine_id"], "0")
        other = self.java("10.0.4.1:4242", namespace="tiny", machine_bits=1)
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
        taker = self.java("10.0.4.2:4242", namespace="tiny", machine_bits=1)

        def expired():
            other.guard()
            return self.cosid_entry("tiny")[1] <= taker.now() - SAFE_GUARD_MS
        wait_for(expired, 4 * SAFE_GUARD_S + 10, "the halted server's entry to expire")
        self.assertEqual(taker.distribute(), 0)
        taker_ids = taker.ids(20_000)
        self.assertGreater(taker_ids[0], cosid_ids[-1])
        resume(worker)
        wait_for(lambda: status(server)["problem"] == "exhausted", 60,
                 f"the resumed worker to find its machine id lost:\n{server.log()[-2000:]}")
        with self.assertRaises(SqlError) as after:
            server.query("SELECT cosid_next()")
        self.assertEqual(after.exception.sqlstate, "53400")
        store_ids(server, "taker", taker_ids)
        store_ids(server, "other", other.ids(20_000))
        total = assert_unique(self, server)
        print(f"\n  {len(cosid_ids)} ids before the refusal, {refused_after:.1f} s after the "
              f"halt; {total} ids in all", end=" ")

    def test_a_java_service_whose_renewals_stop_keeps_generating(self):
        """The risk left to the Java side, measured: with every machine id handed out (machine
        bits 1), a service that stops renewing but keeps generating, and a second service that
        takes its expired entry by CosId's rule. cosid, beside them, keeps its own."""
        stalled = self.java("10.0.5.1:4242", namespace="tiny", machine_bits=1)
        self.assertEqual(stalled.distribute(), 0)
        server = self.server("redis-f", 24646, **TINY)
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
            wait_for(lambda: self.entries("tiny")["10.0.5.1:4242"][1] <= now_ms() - SAFE_GUARD_MS,
                     4 * SAFE_GUARD_S + 10, "the stalled service's entry to expire")
            taker = self.java("10.0.5.2:4242", namespace="tiny", machine_bits=1)
            self.assertEqual(taker.distribute(), 0, "CosId takes the expired entry")
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

    def test_a_named_generator_leases_in_its_own_namespace(self):
        """Named generators use the server's distributor, one machine id per namespace: in a
        namespace where a Java service holds machine id 0, the named generator takes 1, while
        the default generator holds 0 of its own; 100,000 ids of the two, 0 duplicates."""
        java = self.java("10.0.7.1:4242", namespace="orders")
        self.assertEqual(java.distribute(), 0)
        server = self.server("redis-g", 24647)
        self.assertEqual(wait_state(server, "UP")["machine_id"], "0")
        named_generator_beside(self, server, java, "cosid_redis")
        self.assertEqual(assert_unique(self, server), 100_000)

    def test_entries_cosid_cannot_vouch_for_are_never_taken(self):
        """Fail closed on what CosId's scripts would not write: an entry that is not
        "<machine id>|<stamp>" stops cosid's claims, named in cosid.status (which machine id it
        holds is unknown); an expired entry of cosid's whose machine id a live Java entry also
        holds is passed over (machine_bits 1, both machine ids handed out)."""
        held, adder = "cosid:{tiny}:itc_idx", "cosid:{tiny}:adder"
        self.redis.call("HSET", held, "10.0.9.1:4242", "7")
        server = self.server("redis-h", 24648, **TINY)
        wait_for(lambda: "10.0.9.1:4242" in (status(server).get("last_error") or ""), 60,
                 f"cosid to name the entry it cannot read:\n{server.log()[-2000:]}")
        self.assertEqual(status(server)["state"], "CLAIMING")
        self.assertIn("is not a machine id and a stamp: cosid cannot tell which machine id it "
                      "holds", status(server)["last_error"])
        with self.assertRaises(SqlError):
            server.query("SELECT cosid_next()")
        java = self.java("10.0.9.2:4242", namespace="tiny", machine_bits=1)
        self.assertEqual(java.distribute(), 0)
        self.redis.call("SET", adder, "1")
        self.redis.call("HSET", held, "10.0.9.1:4242", f"1|{now_ms()}",
                        "cosid-00000000000000aa@gone:5432:1", "1|1")
        wait_for(lambda: status(server)["problem"] == "exhausted", 60,
                 f"cosid to pass over the doubly held machine id:\n{server.log()[-2000:]}")
        self.assertIn("cosid-00000000000000aa@gone:5432:1", self.entries("tiny"))
        self.redis.call("HDEL", held, "10.0.9.1:4242")
        self.assertEqual(wait_state(server, "UP")["machine_id"], "1")
        self.assertNotIn("cosid-00000000000000aa@gone:5432:1", self.entries("tiny"))
        generate(server, 10_000)
        store_ids(server, "java", java.ids(10_000))
        self.assertEqual(assert_unique(self, server), 20_000)

    def test_an_entry_put_back_after_another_claim_stops_both_holders(self):
        """A co-tenant that may write CosId's keys deletes server A's entry, puts machine id 0
        into the released hash, lets server B take it, and puts A's entry back (before, both
        renewed for good: 1,289,349 equal ids). A's lease worker is halted meanwhile, so that
        B, not A's next renewal, takes machine id 0. Each renewal now finds the other entry on
        its machine id: both stop and claim again, on machine ids of their own, and never
        share one again."""
        a = self.server("redis-pa", 24656)
        self.assertEqual(wait_state(a, "UP")["machine_id"], "0")
        held, released = "cosid:{cosid}:itc_idx", "cosid:{cosid}:revert"
        [(a_holder, a_entry)] = [(holder, value) for holder, value in zip(
            *[iter(self.redis.call("HGETALL", held))] * 2) if COSID_HOLDER.match(holder)]
        worker = a.worker_pid()
        os.kill(worker, signal.SIGSTOP)
        self.addCleanup(resume, worker)
        self.redis.call("HDEL", held, a_holder)
        self.redis.call("HSET", released, "0", "1")
        b = self.server("redis-pb", 24657)
        self.assertEqual(wait_state(b, "UP")["machine_id"], "0")
        b_holders = [holder for holder, state in self.entries().items()
                     if re.match(holder_pattern(b), holder) and state[0] == 0]
        self.assertEqual(len(b_holders), 1, self.entries())
        self.redis.call("HSET", held, a_holder, a_entry)
        resume(worker)
        started = time.monotonic()
        wait_for(lambda: all(status(s).get("state") == "UP"
                             and status(s)["machine_id"] not in ("0", None) for s in (a, b)),
                 60, f"both to claim again:\n{a.log()[-1500:]}\n{b.log()[-1500:]}")
        print(f"\n  both back in {time.monotonic() - started:.1f} s", end=" ")
        self.assertIn("was lost", b.log(), "B stopped by its renewal")
        self.assertNotEqual(status(a)["machine_id"], status(b)["machine_id"])
        for server, source in ((a, "a"), (b, "b")):
            generate(server, 20_000, source)
        store_ids(a, "b", ids_of(b, "b"))
        self.assertEqual(assert_unique(self, a), 40_000)

    def test_a_restarted_redis_settles_before_a_machine_id_is_handed_out(self):
        """A Redis restarted without its data hands machine id 0 out again as new, while its
        holder, whose renewals do not arrive (a proxy answers nothing from the restart until
        the claimer holds the machine id), generates until its deadline. cosid's record of the server (its run id, in
        cosid:{ns}:cosid_store, or the server's start when the record is gone too) makes the
        claimer wait a whole safe guard after the start, and its ids start above it. Two
        servers on one machine id (0 machine bits), clients on both."""
        proxy = Proxy(self.redis.port)
        self.addCleanup(proxy.close)
        holder = self.server("redis-r1", 24650, **ONE_MACHINE_ID, **{
            "cosid.lease_store": f"'redis://127.0.0.1:{proxy.port}/0'"})
        self.assertEqual(wait_state(holder, "UP")["machine_id"], "0")
        claimer = self.server("redis-r2", 24651, **ONE_MACHINE_ID)
        wait_for(lambda: status(claimer).get("problem") == "exhausted", 30,
                 f"the claimer to find no machine id:\n{claimer.log()[-2000:]}")
        loads = [LoopingClients(server, clients=2, batch=200, batches_per_session=5)
                 for server in (holder, claimer)]
        for load in loads:
            load.__enter__()
        try:
            time.sleep(1.0)
            proxy.set_mode("blackhole")
            restarted_ms = now_ms()
            self.redis.restart()
            settling = wait_for(lambda: status(claimer).get("problem") == "store_settling"
                                and status(claimer), 30,
                                f"the claimer to wait for Redis:\n{claimer.log()[-2000:]}")
            self.assertEqual(wait_state(claimer, "UP")["machine_id"], "0")
            proxy.set_mode("pass")
            time.sleep(1.0)
        finally:
            for load in loads:
                load.__exit__()
        self.assertIn("it may have forgotten claims", settling["last_error"])
        sessions = [load.sessions for load in loads]
        ids = [[value for session in group for value in session.ids] for group in sessions]
        held_ms = [{ts_ms_of(value, shift=12) for value in group} for group in ids]
        dups = duplicates([session for group in sessions for session in group])
        shared = len(held_ms[0] & held_ms[1])
        print(f"\n  {len(ids[0])} ids from the holder, {len(ids[1])} from the claimer: "
              f"{dups} duplicates, {shared} shared milliseconds", end=" ")
        self.assertEqual(dups, 0)
        self.assertEqual(shared, 0)
        self.assertTrue(ids[1], "the claimer issued nothing")
        # Safety, not timing: Redis started after restarted_ms, and settles a safe guard.
        self.assertGreater(ts_ms_of(min(ids[1]), shift=12), restarted_ms + SAFE_GUARD_MS)

    def test_a_claim_whose_answer_was_lost_waits_for_the_floor_it_found(self):
        """cosid's scripts on a real redis-server: a claim that took a released machine id and
        whose answer was lost is sent again under its token; the second answer is the released
        stamp it found, not the watermark the first wrote (a safe guard ahead, which made the
        server give the machine id back). The first renewal forgets the floor."""
        scripts, key = cosid_scripts(), "{lost}"
        floors = "cosid:{lost}:cosid_claim_floor"
        # Settled long ago, by cosid's record of the server.
        self.settled_since("lost", 1)
        now = now_ms()
        released_stamp, watermark = now - 10, now + SAFE_GUARD_MS - 500
        self.redis.call("HSET", "cosid:{lost}:revert", 0, released_stamp)
        holder = "cosid-00000000000000ab@db1:5432:1"
        claim = (holder, 1023, now - SAFE_GUARD_MS, watermark, SAFE_GUARD_MS, 1000)
        first = self.redis.call("EVAL", scripts["claim"], 1, key, *claim)
        self.assertEqual(first[:3], [0, released_stamp, 1])
        again = self.redis.call("EVAL", scripts["claim"], 1, key, *claim)
        self.assertEqual(again[:4], [0, released_stamp, 0, first[3]],
                         "the floor found and the settling, not the watermark written")
        self.assertEqual(self.entries("lost")[holder], (0, watermark))
        self.assertEqual(self.redis.call("EVAL", scripts["renew"], 1, key, holder, 0,
                                         watermark + 500, SAFE_GUARD_MS, 1000, 1), 1)
        self.assertEqual(self.redis.call("HGETALL", floors), [])
        # A second claimer's new machine id, then its release: nothing of it is left behind.
        other = "cosid-00000000000000cd@db2:5432:1"
        self.assertEqual(self.redis.call("EVAL", scripts["claim"], 1, key, other, 1023,
                                         now - SAFE_GUARD_MS, watermark, SAFE_GUARD_MS,
                                         1000)[:3], [1, 0, 2])
        self.assertEqual(self.redis.call("EVAL", scripts["release"], 1, key, other, 1, now), 1)
        self.assertEqual(self.redis.call("HGETALL", floors), [])


    def test_while_redis_settles_no_claim_goes_on_and_only_live_holders_renew(self):
        """cosid's scripts on a real redis-server that settles (cosid's record says it changed
        just now): a claim whose own entry is there waits as any claim, expired or not (that it
        has not expired is its own clock's judgement, and a claimer ahead of it may have taken
        it in the history the server forgot); a renewal from a holder that stopped generating
        is refused (its entry may be such a history's), one from a holder that still generates
        goes on; neither from a clock further ahead of the server's than the lead. Once
        settled, the expired own entry is released and taken back, above its stamp."""
        scripts, key, lead = cosid_scripts(), "{settle}", 1000
        now = now_ms()
        self.settled_since("settle", now)
        holder = "cosid-00000000000000ab@db1:5432:1"
        expired_stamp = now - SAFE_GUARD_MS - 10
        self.redis.call("HSET", "cosid:{settle}:itc_idx", holder, f"0|{expired_stamp}")
        watermark = now + SAFE_GUARD_MS

        def claim(by=holder, watermark=watermark):
            return self.redis.call("EVAL", scripts["claim"], 1, key, by, 1023,
                                   now_ms() - SAFE_GUARD_MS, watermark, SAFE_GUARD_MS, lead)

        def renew(live, watermark=watermark):
            return self.redis.call("EVAL", scripts["renew"], 1, key, holder, 0, watermark,
                                   SAFE_GUARD_MS, lead, live)

        settling = claim()
        self.assertEqual(settling[0], -2, settling)
        self.assertGreaterEqual(settling[1], now + SAFE_GUARD_MS + lead)
        self.assertEqual(self.entries("settle")[holder], (0, expired_stamp))
        unexpired = f"0|{now + SAFE_GUARD_MS}"
        self.redis.call("HSET", "cosid:{settle}:itc_idx", holder, unexpired)
        self.assertEqual(claim()[0], -2, "an unexpired own entry waits too")
        self.assertEqual(self.entries("settle")[holder], (0, now + SAFE_GUARD_MS))
        self.redis.call("HSET", "cosid:{settle}:itc_idx", holder, f"0|{expired_stamp}")
        self.assertEqual(renew(0), 0, "a holder that stopped generating")
        self.assertEqual(self.entries("settle")[holder], (0, expired_stamp))
        self.assertEqual(renew(1), 1, "a holder that still generates")
        self.assertEqual(self.entries("settle")[holder], (0, watermark))
        ahead = now_ms() + SAFE_GUARD_MS + 3 * lead
        self.assertEqual(renew(1, watermark=ahead), 0)
        self.assertEqual(claim("cosid-00000000000000cd@db2:5432:1", watermark=ahead)[:2],
                         [-3, lead])
        self.assertEqual(self.entries("settle")[holder], (0, watermark))
        # Settled long ago: the expired own entry goes back to the released hash and is taken
        # from it, above its stamp.
        self.settled_since("settle", 1)
        self.redis.call("HSET", "cosid:{settle}:itc_idx", holder, f"0|{expired_stamp}")
        self.assertEqual(claim()[:3], [0, expired_stamp, 1])
        self.assertEqual(self.entries("settle")[holder], (0, watermark))
        self.assertEqual(self.redis.call("HGETALL", "cosid:{settle}:revert"), [])

    def test_a_promoted_replica_settles_from_its_promotion(self):
        """A replica of the Redis server, promoted (REPLICAOF NO ONE), has another replication
        id than cosid's record it copied: it may lack writes its primary acknowledged, so a
        claim on it waits a whole safe guard and the lead from the promotion."""
        scripts, key, lead = cosid_scripts(), "{promoted}", 1000
        self.settled_since("promoted", 1)
        now = now_ms()
        first = self.redis.call("EVAL", scripts["claim"], 1, key,
                                "cosid-00000000000000ab@db1:5432:1", 1023, now - SAFE_GUARD_MS,
                                now + SAFE_GUARD_MS, SAFE_GUARD_MS, lead)
        self.assertEqual(first[:3], [0, 0, 2])
        replica = RedisServer(free_port(24653)).start()
        self.addCleanup(replica.stop)
        replica.call("REPLICAOF", "127.0.0.1", self.redis.port)
        # Up for longer than the settling after a start, so that only the new replication id
        # can make the claim below wait.
        settling_s = (SAFE_GUARD_MS + lead) / 1000
        wait_for(lambda: "master_link_status:up" in replica.call("INFO", "replication")
                 and replica.call("HGET", "cosid:{promoted}:cosid_store", "changed") == "1"
                 and int(re.search(r"uptime_in_seconds:(\d+)",
                                   replica.call("INFO", "server")).group(1)) > settling_s + 1,
                 30, "the replica to copy the primary")
        replica.call("REPLICAOF", "NO", "ONE")
        promoted_ms = now_ms()
        answer = replica.call("EVAL", scripts["claim"], 1, key,
                              "cosid-00000000000000cd@db2:5432:1", 1023,
                              now_ms() - SAFE_GUARD_MS, now_ms() + SAFE_GUARD_MS,
                              SAFE_GUARD_MS, lead)
        self.assertEqual(answer[0], -2, answer)
        self.assertGreaterEqual(answer[1], promoted_ms + SAFE_GUARD_MS + lead)

    def test_a_lapsed_lease_is_not_renewed_while_a_restarted_redis_settles(self):
        """A Redis that keeps its data (an append-only file) is killed while a cosid server
        holds a machine id: the server's renewals fail and it stops generating at its deadline.
        Redis comes back with the server's entry under a new run id; since it may be a copy
        that forgot later writes, the renewal of a holder that no longer generates is refused
        while it settles, and the server's ids start above the end of the settling."""
        redis = RedisServer(free_port(24654), persistent=True).start()
        self.addCleanup(redis.stop)
        server = self.server("redis-l", 24655, **{"cosid.lease_store": f"'{redis.url}'"})
        self.assertEqual(wait_state(server, "UP")["machine_id"], "0")
        generate(server, 1_000)
        redis.kill()

        wait_for(lambda: refuses(server) and status(server)["state"] != "UP",
                 4 * SAFE_GUARD_S + 10, "the server to stop generating")
        restarted_ms = now_ms()
        redis.start()
        wait_state(server, "UP")
        generate(server, 1_000, "after")
        after = ids_of(server, "after")
        self.assertIn("it may have forgotten claims", server.log())
        # Safety, not timing: Redis started after restarted_ms, and settles a safe guard.
        self.assertGreater(ts_ms_of(min(after)), restarted_ms + SAFE_GUARD_MS)
        total = assert_unique(self, server)
        print(f"\n  back {(ts_ms_of(min(after)) - restarted_ms) / 1000:.1f} s after Redis "
              f"restarted with its data (safe guard {SAFE_GUARD_S} s); {total} ids", end=" ")


class Settings(unittest.TestCase):
    def test_cosid_redis_needs_a_redis_url_and_no_stable_instance(self):
        for name, settings, refused in (
                ("redis-no-store", {}, 'invalid value for parameter "cosid.lease_store": ""'),
                ("redis-libpq", {"cosid.lease_store": "'host=127.0.0.1 password=sekret'"},
                 'invalid value for parameter "cosid.lease_store"'),
                ("redis-stable", {"cosid.lease_store": "'redis://127.0.0.1:1/0'",
                                  "cosid.stable": "on", "cosid.instance_id": "'db1'"},
                 'invalid value for parameter "cosid.stable": on')):
            server = Cluster(name, free_port(24650), {**REDIS, **settings}).init()
            self.assertFalse(server.start(check=False))
            self.assertIn(refused, server.log())
            self.assertNotIn("sekret", server.log())


if __name__ == "__main__":
    unittest.main()
