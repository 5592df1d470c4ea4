"""Named generators against real servers: several layouts and namespaces on one server, each
named generator with a lease of its own in the same lease store; one lease lost while the others
keep working; a dropped generator that releases its lease with the exact last timestamp, and a
re-created one that waits for a watermark ahead of the clock; a new generator known as soon as
its creation commits; definitions seen from a second database, and the errors; a restart, a
backend kill -9 and a server kill -9 while every generator generates; a namespace with no
machine id left; a name defined again under load, which keeps its namespace (and so its layout).
Lease timings as in helpers.leases: a 4 s safe guard and renewals every 0.5 s."""

import contextlib
import queue
import subprocess
import threading
import time
import unittest

from helpers.clients import LoopingClients, duplicates, sessions_not_increasing
from helpers.generators import (EPOCH_MS, decode, define_second_generator, generators,
                                layout_text, next_id, ten_minutes_back,
                                try_unsafe_redefinitions, wait_generators_up)
from helpers.leases import DEADLINE_S, FAST_LEASES
from helpers.pgcluster import (Cluster, ClusterTest, SqlError, free_port, parse_error, query_as,
                               wait_for)

def refused_with(cluster, generator, sqlstate, db="postgres"):
    """The error of cosid_next(generator) if it is `sqlstate`, else None (for wait_for)."""
    _, error = next_id(cluster, generator, db)
    return error if error is not None and error.sqlstate == sqlstate else None


def many_ids(cluster, generator, count, db="postgres"):
    return [int(v) for v in cluster.query(
        f"SELECT cosid_next('{generator}') FROM generate_series(1, {count})", db).split()]


def hint_of(error):
    return "\n".join(line for line in error.stderr.splitlines() if line.startswith("HINT:"))


class Psql:
    """One psql connection kept open: statements are sent one at a time, and each answer is read
    back, so that one backend can be used before and after another session's COMMIT."""

    def __init__(self, cluster, db="postgres"):
        self.process = subprocess.Popen(
            cluster.psql_command(db, "-At", "-v", "VERBOSITY=verbose"), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        self.lines = queue.Queue()
        self.count = 0
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def send(self, sql):
        """Sends a statement without waiting for its answer; returns what answer() takes."""
        self.count += 1
        marker = f"-- answered {self.count} --"
        self.process.stdin.write(f"{sql};\n\\echo '{marker}'\n")
        self.process.stdin.flush()
        return sql, marker

    def answer(self, sent, timeout=30):
        """The lines the statement sent printed; raises SqlError when it failed."""
        sql, marker = sent
        deadline = time.monotonic() + timeout
        lines = []
        while True:
            line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            if line is None:
                raise RuntimeError(f"psql ended while running {sql}: {lines}")
            if line == marker:
                break
            lines.append(line)
        if any(line.startswith(("ERROR:", "FATAL:")) for line in lines):
            raise parse_error("\n".join(lines))
        return lines

    def run(self, sql, timeout=30):
        return self.answer(self.send(sql), timeout)

    def close(self):
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait(timeout=30)
        self.process.stdout.close()


class Generators(ClusterTest):
    def cluster(self, name, port, durable=False, **settings):
        """A cluster leasing with short timings, with the extension created."""
        cluster = Cluster(name, free_port(port), {**FAST_LEASES, **settings},
                          durable=durable).init()
        self.track(cluster)
        cluster.start()
        cluster.query("CREATE EXTENSION cosid")
        return cluster

    def assertRefused(self, sqlstate, sql, cluster, db="postgres"):
        with self.assertRaises(SqlError, msg=sql) as refused:
            cluster.query(sql, db)
        self.assertEqual(refused.exception.sqlstate, sqlstate,
                         f"{sql}:\n{refused.exception.stderr}")
        return refused.exception

    def test_two_namespaces_leased_at_once(self):
        cluster = self.cluster("gen-two", 25800)
        cluster.query("SELECT cosid_create_generator('a'); "
                      "SELECT cosid_create_generator('b', 'safe_js')")
        up = wait_generators_up(cluster, ["default", "a", "b"])
        # One row per generator, each in its own namespace.
        self.assertEqual(sorted(up), ["a", "b", "default"])
        self.assertEqual({name: row["namespace"] for name, row in up.items()},
                         {"default": "cosid", "a": "a", "b": "b"})
        self.assertEqual(cluster.rows(
            "SELECT name, time_unit, timestamp_bits, machine_bits, sequence_bits "
            "FROM cosid.status WHERE name <> 'default' ORDER BY name"),
            [["a", "millisecond", "41", "10", "12"], ["b", "millisecond", "41", "3", "9"]])
        a_ids, b_ids = many_ids(cluster, "a", 2000), many_ids(cluster, "b", 2000)
        self.assertEqual(len(set(a_ids)), 2000)
        self.assertEqual(len(set(b_ids)), 2000)
        self.assertEqual({decode(v, "millisecond")[1] for v in a_ids}, {int(up["a"]["machine_id"])})
        self.assertEqual({decode(v, "safe_js")[1] for v in b_ids}, {int(up["b"]["machine_id"])})
        self.assertLess(max(b_ids), 1 << 53, "a safe_js id does not fit a JavaScript number")
        # The overloads decode with the generator's layout.
        self.assertEqual(cluster.rows(f"SELECT machine_id FROM cosid_decode({b_ids[-1]}, 'b')"),
                         [[up["b"]["machine_id"]]])
        self.assertIsNotNone(next_id(cluster)[0])
        # Each generator holds a live lease of its own in the lease table of cosid.database.
        live = cluster.rows(
            "SELECT namespace, machine_id, instance_id, machine_bits, layout "
            "FROM cosid.machine_lease WHERE state = 'claimed' "
            "AND expires_at > clock_timestamp() ORDER BY namespace")
        self.assertEqual(live, [
            ["a", up["a"]["machine_id"], up["a"]["instance_id"], "10",
             layout_text("millisecond")],
            ["b", up["b"]["machine_id"], up["b"]["instance_id"], "3", layout_text("safe_js")],
            ["cosid", up["default"]["machine_id"], up["default"]["instance_id"], "10",
             layout_text("millisecond")]])

    def test_one_lease_lost_while_the_others_keep_working(self):
        cluster = self.cluster("gen-lost", 25801)
        cluster.query("SELECT cosid_create_generator('a'); "
                      "SELECT cosid_create_generator('b', 'safe_js')")
        up = wait_generators_up(cluster, ["default", "a", "b"])
        machine_id = up["a"]["machine_id"]
        before = many_ids(cluster, "a", 2000)
        # Another claim of the same identity takes the row of namespace 'a' (a clone, say): the
        # worker's renewal no longer matches it, and the claim is live for an hour.
        cluster.query("UPDATE cosid.machine_lease SET claim_token = 'stolen', "
                      "expires_at = clock_timestamp() + interval '1 hour' "
                      f"WHERE namespace = 'a' AND machine_id = {machine_id}")
        lost_at = time.monotonic()
        error = wait_for(lambda: next_id(cluster, "a")[1], 10, "cosid_next('a') to be refused")
        self.assertEqual(error.sqlstate, "55P03", error.stderr)
        self.assertLess(time.monotonic() - lost_at, 3, "not refused within a few renewals")
        # While 'a' has no lease, the other generators go on.
        for _ in range(8):
            value, error = next_id(cluster, "a")
            self.assertIsNone(value, "generated with a lost lease")
            self.assertEqual(error.sqlstate, "55P03", error.stderr)
            self.assertIsNotNone(next_id(cluster, "b")[0], "'b' stopped with 'a'")
            self.assertIsNotNone(next_id(cluster)[0], "the default generator stopped with 'a'")
        now = generators(cluster)
        self.assertEqual((now["default"]["state"], now["b"]["state"]), ("UP", "UP"))
        self.assertNotEqual(now["a"]["state"], "UP")
        self.assertIn(f'lease of machine id {machine_id} in namespace "a" was lost',
                      cluster.log())
        # Once the other claim ends, the worker claims again.
        cluster.query("UPDATE cosid.machine_lease SET expires_at = clock_timestamp() "
                      "WHERE namespace = 'a' AND claim_token = 'stolen'")
        wait_for(lambda: next_id(cluster, "a")[0], 15, "cosid_next('a') under a new claim")
        after = many_ids(cluster, "a", 2000)
        again = wait_generators_up(cluster, ["a"])["a"]
        self.assertEqual(cluster.rows(
            "SELECT instance_id, claim_token <> 'stolen' FROM cosid.machine_lease "
            f"WHERE namespace = 'a' AND machine_id = {again['machine_id']} "
            "AND state = 'claimed'"), [[again["instance_id"], "t"]])
        self.assertEqual(len(set(before) | set(after)), len(before) + len(after),
                         "ids of 'a' repeated after the new claim")
        self.assertGreater(min(after), max(before))

    def test_dropped_generator_releases_exactly_and_a_new_one_waits_for_the_watermark(self):
        cluster = self.cluster("gen-drop", 25802)
        # One machine id, so that the re-created generator must wait for its watermark rather
        # than take a never-used machine id.
        create = ("SELECT cosid_create_generator('w', 'millisecond', namespace => 'w', "
                  "machine_bits => 0)")
        cluster.query(create)
        wait_generators_up(cluster, ["w"])
        user, dropper = Psql(cluster), Psql(cluster)
        self.addCleanup(user.close)
        self.addCleanup(dropper.close)
        batch = ("SELECT max(id), (extract(epoch FROM cosid_timestamp(max(id), 'w')) * 1000)"
                 "::bigint FROM (SELECT cosid_next('w') AS id FROM generate_series(1, 1000)) s")

        def last_of_batch():
            last_id, last_ms = user.run(batch)[0].split("|")
            return int(last_id), int(last_ms)

        first_id, _ = last_of_batch()
        # A drop rolled back changes nothing, nor does one in a subtransaction rolled back.
        dropper.run("BEGIN")
        dropper.run("SELECT cosid_drop_generator('w')")
        dropper.run("ROLLBACK")
        dropper.run("BEGIN")
        dropper.run("SAVEPOINT before_drop")
        dropper.run("SELECT cosid_drop_generator('w')")
        dropper.run("ROLLBACK TO SAVEPOINT before_drop")
        dropper.run("COMMIT")
        self.assertGreater(last_of_batch()[0], first_id)
        self.assertIsNotNone(next_id(cluster, "w")[0])
        # A drop takes effect at COMMIT: until then 'w' generates, right after it nothing does,
        # not even a backend that used it before.
        dropper.run("BEGIN")
        dropper.run("SELECT cosid_drop_generator('w')")
        last_id, last_ms = last_of_batch()
        dropper.run("COMMIT")
        with self.assertRaises(SqlError) as refused:
            user.run("SELECT cosid_next('w')")
        self.assertEqual(refused.exception.sqlstate, "42704", refused.exception.stderr)
        self.assertIn('cosid generator "w" does not exist', refused.exception.message)
        self.assertIsNotNone(refused_with(cluster, "w", "42704"), "a new session used 'w'")
        # The lease is released with the exact last timestamp issued.
        wait_for(lambda: cluster.query(
            "SELECT state FROM cosid.machine_lease WHERE namespace = 'w'") == "released", 10,
            "the release of the dropped generator's lease")
        released_ms = int(cluster.query(
            "SELECT released_ms FROM cosid.machine_lease WHERE namespace = 'w'"))
        self.assertEqual(released_ms, last_ms, "the release is not the exact last timestamp")
        self.assertIn('released machine id 0 in namespace "w"', cluster.log())
        wait_for(lambda: "w" not in generators(cluster), 5, "the status row of 'w' to go")
        # As if the last holder's clock had run ahead: the watermark is 3 s in the future.
        ahead_ms = int(cluster.query(
            "UPDATE cosid.machine_lease SET "
            "released_ms = cosid.unix_ms(clock_timestamp()) + 3000, "
            "watermark_ms = greatest(watermark_ms, cosid.unix_ms(clock_timestamp()) + 3000) "
            "WHERE namespace = 'w' RETURNING released_ms"))
        cluster.query(create)
        issued = []

        def generated():
            value, _ = next_id(cluster, "w")
            if value is not None:
                issued.append(value)
            return value

        wait_for(generated, 20, "'w' to generate again")
        issued += many_ids(cluster, "w", 1000)
        # No machine bits: the timestamp is above the 12 sequence bits.
        stamps = [(value >> 12) + EPOCH_MS for value in issued]
        self.assertGreater(min(stamps), ahead_ms, "an id dated at or below the watermark")
        self.assertGreater(min(issued), last_id)
        self.assertEqual(int(cluster.query(
            f"SELECT (extract(epoch FROM cosid_timestamp({issued[0]}, 'w')) * 1000)::bigint")),
            stamps[0])
        # The name again, defined again, which takes another slot: a backend that used the one
        # dropped follows the name to the new one. A name keeps its namespace (and so its
        # layout): another one is refused.
        self.assertTrue(user.run("SELECT cosid_next('w')"))
        cluster.query("SELECT cosid_drop_generator('w')")
        with self.assertRaises(SqlError) as refused:
            user.run("SELECT cosid_next('w')")
        self.assertEqual(refused.exception.sqlstate, "42704", refused.exception.stderr)
        self.assertRefused("22023", "SELECT cosid_create_generator('w', 'safe_js', "
                           "namespace => 'w_js')", cluster)
        cluster.query(create)
        refusals = []

        def generated_by_user():
            try:
                return user.run("SELECT cosid_next('w')")
            except SqlError as error:
                refusals.append(error.sqlstate)
                return None

        wait_for(generated_by_user, 10, "the backend to generate from the new 'w'")
        self.assertLessEqual(set(refusals), {"55P03"})
        self.assertEqual(user.run("SELECT namespace, machine_bits FROM cosid.status "
                                  "WHERE name = 'w'"), ["w|0"])
        self.assertEqual(cluster.query("SELECT count(*) FROM cosid.machine_lease "
                                       "WHERE namespace = 'w' AND state = 'claimed'"), "1")

    def test_a_new_generator_is_known_as_soon_as_its_creation_commits(self):
        # Until the worker has published it and holds its lease, a new generator is refused
        # with 55P03 (retry in a moment), in the creating session and in others; never with
        # 42704, which would tell the caller it was never created.
        cluster = self.cluster("gen-new", 25806)
        wait_generators_up(cluster, ["default"])
        creator, locker = Psql(cluster), Psql(cluster)
        self.addCleanup(locker.close)
        self.addCleanup(creator.close)
        creator.run("BEGIN")
        creator.run("SELECT cosid_create_generator('fresh')")
        # A lock queued behind the creation's is granted at its COMMIT, and then keeps the worker
        # from reading the definitions.
        locked = locker.send("BEGIN; LOCK TABLE cosid.generator IN ACCESS EXCLUSIVE MODE")
        wait_for(lambda: cluster.query(
            "SELECT count(*) FROM pg_locks WHERE NOT granted "
            "AND relation = 'cosid.generator'::regclass") != "0", 10, "the lock to queue")
        creator.run("COMMIT")
        locker.answer(locked)
        locked_at = time.monotonic()
        refusals = []

        def refusal(call):
            try:
                call()
                return None
            except SqlError as error:
                return error.sqlstate

        # Longer than the deadline of a lease: the other generators keep their leases meanwhile.
        while time.monotonic() - locked_at < DEADLINE_S + 1:
            refusals.append(refusal(lambda: creator.run("SELECT cosid_next('fresh')")))
            refusals.append(refusal(lambda: cluster.query("SELECT cosid_next('fresh')")))
            self.assertIsNotNone(next_id(cluster)[0], "the default generator stopped")
        self.assertEqual(set(refusals), {"55P03"})
        locker.run("COMMIT")
        wait_for(lambda: next_id(cluster, "fresh")[0], 10, "'fresh' to generate")
        creator.run("SELECT cosid_next('fresh')")

    def test_a_generator_used_in_the_transaction_that_creates_it(self):
        # Migration tools run a migration in one transaction: the generator it creates is not
        # published before that transaction commits, so a use in it cannot succeed. The refusal
        # says so (55000), not that the generator does not exist and should be created (42704).
        cluster = self.cluster("gen-same-xact", 25809)
        wait_generators_up(cluster, ["default"])
        migration = ("SELECT cosid_create_generator('migrated'); "
                     "CREATE TABLE migrated (id bigint PRIMARY KEY "
                     "DEFAULT cosid_next('migrated'), v text); ")
        for use in ("INSERT INTO migrated (v) VALUES ('a')",
                    "SELECT cosid_timestamp(1, 'migrated')",
                    "SELECT cosid_decode(1, 'migrated')"):
            refused = self.assertRefused("55000", migration + use, cluster)
            self.assertIn('cosid generator "migrated" was created in this transaction',
                          refused.message, use)
            self.assertIn("commit", hint_of(refused), use)
        # Created in a savepoint rolled back, or created and dropped: it does not exist.
        self.assertRefused("42704", "BEGIN; SAVEPOINT s; "
                           "SELECT cosid_create_generator('migrated'); ROLLBACK TO s; "
                           "SELECT cosid_next('migrated'); COMMIT", cluster)
        self.assertRefused("42704", "SELECT cosid_create_generator('migrated'); "
                           "SELECT cosid_drop_generator('migrated'); "
                           "SELECT cosid_next('migrated')", cluster)
        # Created in a savepoint released: still this transaction's.
        self.assertRefused("55000", "BEGIN; SAVEPOINT s; "
                           "SELECT cosid_create_generator('migrated'); RELEASE s; "
                           "SELECT cosid_next('migrated'); COMMIT", cluster)
        # Another session does not see it before the commit: it does not exist there.
        creator = Psql(cluster)
        self.addCleanup(creator.close)
        creator.run("BEGIN")
        creator.run("SELECT cosid_create_generator('migrated')")
        self.assertRefused("42704", "SELECT cosid_next('migrated')", cluster)
        creator.run("COMMIT")
        # Committed, the migration's generator works in the same session and in others.
        wait_for(lambda: next_id(cluster, "migrated")[0], 10, "'migrated' to generate")
        creator.run("SELECT cosid_next('migrated')")

    def test_each_call_uses_the_generator_its_argument_names(self):
        # A call site whose name is a constant keeps the generator it found for the rest of the
        # query; any other argument is looked up on every call. 'js' issues ids below 2^53 and
        # 'ms' ids above, so every id shows which generator issued it.
        cluster = self.cluster("gen-args", 25807)
        cluster.query("SELECT cosid_create_generator('ms'); "
                      "SELECT cosid_create_generator('js', 'safe_js')")
        wait_generators_up(cluster, ["ms", "js"])
        below_2_53 = "(id < 2^53) = (name = 'js')"
        # A name from a column, and one from a PL/pgSQL variable, which reaches the function as
        # a parameter whose value changes between calls through the same call site.
        from_column = cluster.query(
            f"SELECT count(*) FILTER (WHERE NOT {below_2_53}), count(*) FROM ("
            "SELECT name, cosid_next(name) AS id FROM ("
            "SELECT CASE WHEN g % 3 = 0 THEN 'js' ELSE 'ms' END AS name "
            "FROM generate_series(1, 3000) g) n) s")
        self.assertEqual(from_column, "0|3000")
        cluster.query("""
            CREATE FUNCTION alternate(calls int) RETURNS TABLE (name text, id bigint)
            LANGUAGE plpgsql AS $$
            BEGIN
                FOR i IN 1..calls LOOP
                    name := CASE WHEN i % 2 = 0 THEN 'js' ELSE 'ms' END;
                    id := cosid_next(name);
                    RETURN NEXT;
                END LOOP;
            END $$""")
        from_variable = cluster.query(
            f"SELECT count(*) FILTER (WHERE NOT {below_2_53}), count(*) FROM alternate(3000)")
        self.assertEqual(from_variable, "0|3000")
        # A constant name, in one long query: a drop committed while it runs stops it at once.
        user = Psql(cluster)
        self.addCleanup(user.close)
        user.run("SELECT set_config('application_name', 'long-query', false)")
        running = user.send("SELECT count(cosid_next('ms')) FROM "
                            "(SELECT generate_series(1, 1000000000) AS g) s")
        wait_for(lambda: cluster.query(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'long-query' "
            "AND state = 'active'") == "1", 10, "the long query to run")
        cluster.query("SELECT cosid_drop_generator('ms')")
        with self.assertRaises(SqlError) as refused:
            user.answer(running, timeout=60)
        self.assertEqual(refused.exception.sqlstate, "42704", refused.exception.stderr)
        # The other generator is untouched, and 'ms' defined again (in its own namespace: a name
        # keeps it) is found by the same constant call site's next execution.
        self.assertLess(int(cluster.query("SELECT cosid_next('js')")), 2**53)
        cluster.query("SELECT cosid_create_generator('ms')")
        wait_generators_up(cluster, ["ms"])
        ids = many_ids(cluster, "ms", 1000)
        self.assertEqual(len(set(ids)), 1000)
        second = cluster.query(f"SELECT count(*) FROM unnest(ARRAY{ids}::bigint[]) id "
                               "WHERE cosid_timestamp(id, 'ms') BETWEEN now() - interval '1 min'"
                               " AND now() + interval '1 min'")
        self.assertEqual(second, "1000")

    def test_definitions_seen_from_a_second_database_and_errors(self):
        cluster = self.cluster("gen-app2", 25803)
        cluster.query("SELECT cosid_create_generator('orders')")
        cluster.query("CREATE DATABASE app2")
        cluster.query("CREATE EXTENSION cosid", db="app2")
        value = wait_for(lambda: next_id(cluster, "orders", db="app2")[0], 10,
                         "cosid_next('orders') in app2")
        here = many_ids(cluster, "orders", 1000)
        there = many_ids(cluster, "orders", 1000, db="app2")
        self.assertEqual(len(set(here) | set(there) | {value}), 2001)
        self.assertEqual({decode(v, "millisecond")[1] for v in here + there},
                         {decode(value, "millisecond")[1]})
        wait_generators_up(cluster, ["default", "orders"])
        self.assertIsNone(next_id(cluster, "default", db="app2")[1])
        # In app2: an unknown name, and no definitions outside cosid.database.
        unknown = self.assertRefused("42704", "SELECT cosid_next('nope')", cluster, "app2")
        self.assertIn('cosid generator "nope" does not exist', unknown.message)
        self.assertIn("orders", hint_of(unknown))
        self.assertRefused("42704", "SELECT cosid_next('Orders')", cluster, "app2")
        elsewhere = self.assertRefused("55000", "SELECT cosid_create_generator('x')", cluster,
                                       "app2")
        self.assertIn("postgres", hint_of(elsewhere))
        # In postgres: names taken, bad definitions, a NULL name.
        for name in ("orders", "default"):
            self.assertRefused("42710", f"SELECT cosid_create_generator('{name}')", cluster)
        bad = {
            "SELECT cosid_create_generator('x', 'minute')": "minute",
            "SELECT cosid_create_generator('x', machine_bits => 20)": "20",
            "SELECT cosid_create_generator('x', 'second', sequence_bits => 30)": "30",
            "SELECT cosid_create_generator('x', time_unit => 'hour')": "hour",
            "SELECT cosid_create_generator('x', namespace => 'cosid')": "cosid",
            "SELECT cosid_create_generator('x', 'safe_js', namespace => 'orders')": "orders",
            "SELECT cosid_create_generator('1x')": "1x",
            "SELECT cosid_create_generator('a-b')": "a-b",
            "SELECT cosid_create_generator('')": "",
            f"SELECT cosid_create_generator('{'g' * 64}')": "g" * 64,
        }
        for sql, named in bad.items():
            error = self.assertRefused("22023", sql, cluster)
            self.assertIn(named, error.stderr, sql)
        self.assertRefused("22004", "SELECT cosid_next(NULL::text)", cluster)
        cluster.query("CREATE ROLE app LOGIN")
        with self.assertRaises(SqlError) as denied:
            query_as(cluster, "app", "SELECT cosid_create_generator('x')")
        self.assertEqual(denied.exception.sqlstate, "42501")
        # None of them left a definition behind.
        self.assertEqual(cluster.rows("SELECT name, namespace FROM cosid.generator"),
                         [["orders", "orders"]])
        self.assertEqual(sorted(generators(cluster, "app2")), ["default", "orders"])

    def test_restart_and_kill9_while_every_generator_generates(self):
        # Durable: a kill -9 must not throw away the definitions committed asynchronously.
        cluster = self.cluster("gen-crash", 25804, durable=True)
        layouts = {"ms": "millisecond", "sec": "second", "js": "safe_js"}
        for name, layout in layouts.items():
            cluster.query(f"SELECT cosid_create_generator('{name}', '{layout}')")
        wait_generators_up(cluster, layouts)
        loads = {name: LoopingClients(cluster, clients=2, batch=2_000, batches_per_session=5,
                                      generator=name) for name in layouts}

        def wait_ids(since, what):
            for name, load in loads.items():
                wait_for(lambda: load.ids_so_far(started_after=since) >= 60_000, 60,
                         f"60000 ids of '{name}' {what}")

        with contextlib.ExitStack() as stack:
            for load in loads.values():
                stack.enter_context(load)
            wait_ids(0, "before the restart")
            # Early in a second, so that the restarted server may lease again within the
            # second the last ids of 'sec' were issued in: it must not issue in that second.
            wait_for(lambda: time.time() % 1 < 0.2, 5, "the start of a second")
            restarted_at = time.monotonic()
            cluster.restart()
            wait_generators_up(cluster, layouts)
            wait_ids(restarted_at, "after the restart")
            # kill -9 of a backend that generates: the postmaster reinitialises shared memory.
            log_before = len(cluster.log())
            killed_at = cluster.kill9_a_generating_backend("cosid_next('ms')")
            wait_generators_up(cluster, layouts)
            wait_ids(killed_at, "after the backend kill -9")
            # kill -9 of the whole server, then a start.
            crashed_at = time.monotonic()
            cluster.crash()
            cluster.start()
            wait_generators_up(cluster, layouts)
            wait_ids(crashed_at, "after the server kill -9")
        self.assertIn("all server processes terminated; reinitializing",
                      cluster.log()[log_before:])
        totals = {}
        for name, load in loads.items():
            sessions = load.sessions
            totals[name] = sum(len(s.ids) for s in sessions)
            # Refused while claiming (55P03), or cut by the shutdown, the crash and the start;
            # never told that the generator does not exist.
            self.assertLessEqual({s.sqlstate for s in sessions if s.error},
                                 {"55P03", "57P01", "57P02", "57P03", "connection"}, name)
            self.assertEqual(duplicates(sessions), 0, f"duplicate ids of '{name}'")
            self.assertEqual(sessions_not_increasing(sessions), [], name)
            # Every phase made ids, and every session's ids are of this generator's layout.
            for since in (restarted_at, killed_at, crashed_at):
                self.assertTrue(any(s.ids for s in sessions if s.started >= since), name)
        self.assertLess(max(v for s in loads["js"].sessions for v in s.ids), 1 << 53)
        # The definitions outlived both.
        self.assertEqual(cluster.rows("SELECT name FROM cosid.generator ORDER BY name"),
                         [["js"], ["ms"], ["sec"]])
        self.assertEqual(sorted(generators(cluster)), ["default", "js", "ms", "sec"])
        print(f"\n  {totals} ids across a restart, a backend and a server kill -9, "
              "0 duplicates", end=" ")

    def test_namespace_without_a_free_machine_id_refuses_only_its_generator(self):
        cluster = self.cluster("gen-full", 25805)
        # Other instances hold all 8 machine ids of namespace "tiny", with cosid's layout text.
        for index in range(8):
            self.assertEqual(cluster.rows(
                "SELECT outcome, machine_id FROM cosid.lease_claim('tiny', 3, "
                f"'other-{index}', false, 600000, 'token-{index}', 0, "
                f"'{layout_text('safe_js')}')"), [["new", str(index)]])
        cluster.query("SELECT cosid_create_generator('other', 'safe_js')")
        cluster.query("SELECT cosid_create_generator('tiny', 'safe_js')")
        full = wait_for(lambda: refused_with(cluster, "tiny", "53400"), 15,
                        "cosid_next('tiny') to find no machine id left")
        self.assertIn('no machine id left in namespace "tiny"', full.message)
        now = wait_generators_up(cluster, ["default", "other"])
        self.assertIn("no machine id left", now["tiny"]["last_error"])
        self.assertIsNotNone(next_id(cluster)[0])
        self.assertIsNotNone(next_id(cluster, "other")[0])
        self.assertIsNotNone(refused_with(cluster, "tiny", "53400"))
        # One machine id freed: 'tiny' takes it.
        self.assertEqual(cluster.query(
            "SELECT cosid.lease_release('tiny', 5, 'other-5', 'token-5', 0)"), "t")
        value = wait_for(lambda: next_id(cluster, "tiny")[0], 10, "'tiny' to take machine id 5")
        self.assertEqual(decode(value, "safe_js")[1], 5)


    def test_widths_a_machine_id_or_sequence_cannot_hold_are_refused(self):
        cluster = self.cluster("gen-widths", 25806)
        # A machine id is leased as an integer and decoded as one, and so is a sequence: wider
        # fields stayed CLAIMING for good (machine_bits 32) or decoded wrongly (a sequence of
        # 2^33 in 35 bits decoded as 0).
        for sql, argument, valid in (
                ("'second', timestamp_bits => 28, machine_bits => 32, sequence_bits => 3",
                 "machine_bits", "from 0 to 31, not 32"),
                ("'second', timestamp_bits => 28, machine_bits => 0, sequence_bits => 35",
                 "sequence_bits", "from 1 to 31, not 35"),
                ("sequence_bits => 0", "sequence_bits", "from 1 to 31, not 0"),
                ("machine_bits => -1", "machine_bits", "from 0 to 31, not -1"),
                ("timestamp_bits => 63", "timestamp_bits", "from 1 to 62, not 63")):
            with self.subTest(sql=sql):
                refused = self.assertRefused(
                    "22023", f"SELECT cosid_create_generator('wide', {sql})", cluster)
                self.assertEqual(refused.message, f"{argument} must be {valid}")
        self.assertEqual(cluster.query("SELECT count(*) FROM cosid.generator"), "0")
        # 31 bits each is the widest: a sequence above 16 bits decodes exactly.
        cluster.query("SELECT cosid_create_generator('wide', 'second', timestamp_bits => 29, "
                      "machine_bits => 3, sequence_bits => 31)")
        value = wait_for(lambda: next_id(cluster, "wide")[0], 15, "generator wide")
        self.assertEqual(cluster.query(
            f"SELECT (d).machine_id = ({value} >> 31) & 7, (d).sequence "
            f"FROM (SELECT cosid_decode({value} | (1::bigint << 30) | 5, 'wide') d) s"),
            f"t|{(value | (1 << 30) | 5) & ((1 << 31) - 1)}")
        # A definition an older library accepted, with 35 sequence bits, is not used.
        cluster.query(
            "INSERT INTO cosid.generator_name (name, namespace) VALUES ('old35', 'old35'); "
            "INSERT INTO cosid.generator_namespace (namespace, layout) VALUES ('old35', "
            f"'epoch {EPOCH_MS} ms, second, 25/3/35 bits'); "
            "INSERT INTO cosid.generator (name, namespace, epoch_ms, time_unit, timestamp_bits, "
            f"machine_bits, sequence_bits) VALUES ('old35', 'old35', {EPOCH_MS}, 'second', 25, "
            "3, 35)")
        wait_for(lambda: 'generator "old35" is not used: its machine_bits or sequence_bits '
                 "are above 31" in cluster.log(), 15, "the worker to skip old35")
        self.assertEqual(next_id(cluster, "old35")[1].sqlstate, "42704")
        self.assertNotIn("old35", generators(cluster))

    def test_no_room_says_a_restart_frees_a_dropped_generators_place(self):
        cluster = self.cluster("gen-room", 25807, **{"cosid.max_generators": 2})
        cluster.query("SELECT cosid_create_generator('a'); SELECT cosid_create_generator('b')")
        wait_generators_up(cluster, ["default", "a", "b"])
        cluster.query("SELECT cosid_drop_generator('b')")
        full = self.assertRefused("53400", "SELECT cosid_create_generator('c')", cluster)
        self.assertIn("1 generators are defined, and 1 dropped ones keep their place",
                      full.stderr)
        self.assertIn("HINT:  Restart the server: that frees the place the dropped generator "
                      "keeps. Or raise cosid.max_generators (up to 31)", full.stderr)
        # What the hint says is true: after the restart, the place is free.
        cluster.restart()
        cluster.query("SELECT cosid_create_generator('c')")
        wait_generators_up(cluster, ["default", "a", "c"])
        # Every place defined: a drop alone frees none, and the hint says so.
        full = self.assertRefused("53400", "SELECT cosid_create_generator('d')", cluster)
        self.assertIn("HINT:  Drop a generator with cosid_drop_generator() and restart the "
                      "server: a dropped generator keeps its place until a restart", full.stderr)

    def test_a_name_defined_again_never_repeats_the_ids_called_under_it(self):
        # The finding: a `second` generator whose epoch is ten minutes back, called by clients
        # all along, dropped and defined again under its name with another layout and
        # namespace: 109 of 301,200 ids repeated.
        cluster = self.cluster("gen-redefine", 25808)
        epoch = ten_minutes_back(cluster)
        define_second_generator(cluster, "ev", epoch)
        wait_generators_up(cluster, ["ev"])
        with LoopingClients(cluster, 2, 300, 5, generator="ev") as clients:
            wait_for(lambda: clients.ids_so_far() > 20_000, 30, "ids of 'ev'")
            cluster.query("SELECT cosid_drop_generator('ev')")
            # Another namespace under the name, with another layout or the same one, or its own
            # namespace with another layout: refused.
            for sql, refused in try_unsafe_redefinitions(cluster, "ev", epoch).items():
                self.assertIsNotNone(refused, f"{sql} went through")
                self.assertEqual(refused.sqlstate, "22023", f"{sql}:\n{refused.stderr}")
                if "namespace =>" in sql:
                    self.assertIn('cosid generator name "ev" was used with namespace "ev"',
                                  refused.message)
                    self.assertIn("namespace => 'ev'", refused.stderr)
            # The same definition again: the namespace's watermark keeps its ids above.
            define_second_generator(cluster, "ev", epoch)
            started = time.monotonic()
            wait_for(lambda: clients.ids_so_far(started_after=started) > 20_000, 60,
                     "ids of 'ev' defined again")
        sessions = clients.sessions
        ids = sum(len(session.ids) for session in sessions)
        print(f"\n  'ev' dropped and defined again under load: {ids} ids, "
              f"{duplicates(sessions)} duplicates", end=" ")
        self.assertEqual(duplicates(sessions), 0)
        self.assertLessEqual({session.sqlstate for session in sessions if session.error},
                             {"42704", "55P03"})
        # The hints no longer suggest dropping and creating again under the name.
        refused = self.assertRefused("42710", "SELECT cosid_create_generator('ev', 'second', "
                                     f"epoch => '{epoch}')", cluster)
        self.assertIn("give the new definition a new name", refused.stderr)
        self.assertNotIn("Drop it", refused.stderr)


if __name__ == "__main__":
    unittest.main()
