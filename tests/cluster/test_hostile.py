"""cosid against hostile roles and careless operators, on real clusters: lease rows that cannot
be deleted or emptied (and two servers that never duplicate while somebody tries), rows that
survive pg_dump and pg_restore, a store role that can neither read claim tokens nor touch other
servers' leases, an operator planted in `public` that the lease worker never runs, and an
advisory lock that no longer stalls claims."""

import os
import subprocess
import time

from helpers.clients import LoopingClients, duplicates, sessions_not_increasing
from helpers.fleet import (FLEET_PASSWORD, FLEET_ROLE, LEASE_SQL, Proxy, fleet_server,
                           restore_store_copy, start_store)
from helpers.leases import FAST_LEASES, lease_cluster, status, try_next, wait_up
from helpers.pgcluster import (PG_BIN, Cluster, ClusterTest, SqlError, as_postgres, free_port,
                               query_as, wait_for)

ONE_BIT = {"cosid.timestamp_bits": 41, "cosid.machine_bits": 1, "cosid.sequence_bits": 12}
TOKEN_COLUMNS = "namespace, machine_id, instance_id, claim_token, state, claimed_at"


def answer_claims_with(store, row):
    """Makes the store's claim answer `row`, whatever it is asked."""
    store.query(f"""
        CREATE OR REPLACE FUNCTION cosid.lease_claim(p_namespace text, p_machine_bits integer,
            p_instance_id text, p_stable boolean, p_safe_guard_ms bigint, p_claim_token text,
            p_watermark_ms bigint, p_layout text, p_knows_settling boolean)
        RETURNS TABLE (outcome text, machine_id integer, previous_watermark_ms bigint,
                       expires_at_ms bigint, store_now_ms bigint)
        LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
        AS $$ SELECT {row} $$""")


class Hostile(ClusterTest):
    def setUp(self):
        self.proxies = []
        self.addCleanup(self.close_proxies)

    def close_proxies(self):
        for proxy in self.proxies:
            proxy.close()

    def fleet_server(self, name, port, store, extra=None, via=None):
        server = self.track(fleet_server(name, port, store.port, {**FAST_LEASES, **(extra or {})},
                                         via=via))
        server.start()
        server.query("CREATE EXTENSION cosid")
        return server

    def assert_refused(self, sqlstate, run, *args):
        with self.assertRaises(SqlError) as refused:
            run(*args)
        self.assertEqual(refused.exception.sqlstate, sqlstate, refused.exception.stderr)
        return refused.exception

    # -- 1. deleted rows --------------------------------------------------------------------

    def test_lease_rows_cannot_be_deleted_while_two_servers_generate(self):
        # The scenario that gave 92,102 duplicates: S1 renews every 10 s, S2 every second, and
        # somebody empties the lease table of the store.
        store = self.track(start_store("hostile-del-store", 25400))
        slow = self.fleet_server("hostile-del-s1", 25410, store, {
            **ONE_BIT, "cosid.safe_guard_duration": "'12s'", "cosid.guarder_delay": "'10s'",
            "cosid.guarder_initial_delay": "'10s'"})
        fast = self.fleet_server("hostile-del-s2", 25413, store, {
            **ONE_BIT, "cosid.guarder_delay": "'1s'", "cosid.guarder_initial_delay": "'1s'"})
        held = {s.name: wait_up(s)["machine_id"] for s in (slow, fast)}
        self.assertEqual(len(set(held.values())), 2, held)
        rows_before = store.rows(f"SELECT {TOKEN_COLUMNS} FROM cosid.machine_lease ORDER BY 2")
        loads = [LoopingClients(s, clients=2, batch=2000, batches_per_session=5)
                 for s in (slow, fast)]
        for load in loads:
            load.__enter__()
        try:
            wait_for(lambda: all(load.ids_so_far() > 20_000 for load in loads), 30, "ids")
            # The store's superuser, not only the fleet's role, is refused.
            for statement in ("DELETE FROM cosid.machine_lease",
                              f"DELETE FROM cosid.machine_lease WHERE machine_id = "
                              f"{held[slow.name]}",
                              "TRUNCATE cosid.machine_lease"):
                refused = self.assert_refused("42501", store.query, statement)
                self.assertIn("cannot be deleted", refused.message)
                self.assertIn("presumed never used", refused.stderr)
                self.assertIn("cosid.lease_retire()", refused.stderr)
            for statement in ("DELETE FROM cosid.machine_lease",
                              "TRUNCATE cosid.machine_lease"):
                self.assert_refused("42501", query_as, store, FLEET_ROLE, statement,
                                    FLEET_PASSWORD)
            # Neither can a superuser lower a watermark or move a row to another machine id.
            self.assert_refused("42501", store.query,
                                "UPDATE cosid.machine_lease SET watermark_ms = 0")
            self.assert_refused("42501", store.query,
                                "UPDATE cosid.machine_lease SET machine_id = machine_id + 2")
            # The fast server renews a few more times, and both go on generating.
            renewed = store.query("SELECT max(renewed_at) FROM cosid.machine_lease")
            wait_for(lambda: store.query("SELECT max(renewed_at) FROM cosid.machine_lease")
                     > renewed, 5, "a renewal after the attempts")
            counts = [load.ids_so_far() for load in loads]
            wait_for(lambda: all(load.ids_so_far() > count + 20_000
                                 for load, count in zip(loads, counts)), 30, "more ids")
        finally:
            for load in loads:
                load.__exit__()
        sessions = [s for load in loads for s in load.sessions]
        total = sum(len(s.ids) for s in sessions)
        self.assertEqual(duplicates(sessions), 0)
        self.assertEqual(sessions_not_increasing(sessions), [])
        self.assertEqual([s.error for s in sessions if s.error], [])
        self.assertEqual(store.rows(f"SELECT {TOKEN_COLUMNS} FROM cosid.machine_lease "
                                    "ORDER BY 2"), rows_before)
        self.assertEqual({s.name: status(s)["machine_id"] for s in (slow, fast)}, held)
        print(f"\n  {total} ids from two servers while their rows were attacked, 0 duplicates",
              end=" ")

    def test_retiring_is_for_superusers_and_only_for_machine_ids_not_in_use(self):
        store = self.track(start_store("hostile-retire-store", 25420))
        server = self.fleet_server("hostile-retire", 25423, store)
        machine_id = wait_up(server)["machine_id"]
        refused = self.assert_refused("55006", store.query,
                                      f"SELECT cosid.lease_retire('cosid', {machine_id})")
        self.assertIn("is held", refused.message)
        # A machine id released an hour ago, and one released just now, written in this store
        # (rows written elsewhere would make it settle first).
        store.query("""
            INSERT INTO cosid.machine_lease (namespace, machine_id, machine_bits, instance_id,
                claim_token, stable, state, claimed_at, renewed_at, expires_at, safe_guard,
                watermark_ms, claim_floor_ms, released_ms, written_in)
            SELECT 'old', m, 10, 'gone', 'x', false, 'released', now() - interval '2 hours',
                   now() - interval '1 hour', now() - interval '1 hour', interval '5 min',
                   (extract(epoch FROM now() - interval '55 min') * 1000)::bigint, 0,
                   (extract(epoch FROM now() - interval '1 hour') * 1000)
                       ::bigint + m * 3600000, cosid.store_identity_now()
              FROM generate_series(0, 1) m""")
        self.assert_refused("42501", query_as, store, FLEET_ROLE,
                            "SELECT cosid.lease_retire('old', 0)", FLEET_PASSWORD)
        refused = self.assert_refused("55006", store.query, "SELECT cosid.lease_retire('old')")
        self.assertIn("may have issued ids until", refused.message)
        self.assertEqual(store.query("SELECT cosid.lease_retire('old', 0)"), "1")
        self.assertEqual(store.query("SELECT machine_id FROM cosid.machine_lease "
                                     "WHERE namespace = 'old'"), "1")
        self.assertIsNotNone(try_next(server)[0])

    def test_lease_rows_survive_dump_and_restore_of_a_store(self):
        # The servers reach the store through proxies; the store is dumped once they can no
        # longer write (an exact dump), restored into another cluster, and the proxies then
        # lead there: both servers renew the leases they hold, with no new claim.
        store = self.track(start_store("hostile-dump-store", 25430))
        servers = []
        for index in range(2):
            proxy = Proxy(store.port)
            self.proxies.append(proxy)
            servers.append(self.fleet_server(f"hostile-dump-{index}", 25433 + 3 * index, store,
                                             ONE_BIT, via=proxy))
        held = {s.name: wait_up(s) for s in servers}
        loads = [LoopingClients(s, clients=1, batch=2000, batches_per_session=5)
                 for s in servers]
        for load in loads:
            load.__enter__()
        try:
            wait_for(lambda: all(load.ids_so_far() > 10_000 for load in loads), 30, "ids")
            for proxy in self.proxies:
                proxy.set_mode("blackhole")
            # A renewal the store had received before the cut may still commit: the claims
            # themselves cannot change.
            rows = store.rows(f"SELECT {TOKEN_COLUMNS} FROM cosid.machine_lease ORDER BY 2")
            restored = self.track(restore_store_copy(store, "hostile-dump-restored", 25440))
            self.assertEqual(restored.rows(f"SELECT {TOKEN_COLUMNS} FROM cosid.machine_lease "
                                           "ORDER BY 2"), rows)
            store.stop(mode="immediate")
            for proxy in self.proxies:
                proxy.target_port = restored.port
                proxy.set_mode("reset")
                proxy.set_mode("pass")
            counts = [load.ids_so_far() for load in loads]
            wait_for(lambda: all(load.ids_so_far() > count + 10_000
                                 for load, count in zip(loads, counts)), 30,
                     "ids after the restore")
        finally:
            for load in loads:
                load.__exit__()
        for server in servers:
            now = wait_up(server)
            self.assertEqual(now["machine_id"], held[server.name]["machine_id"])
            self.assertEqual(now["instance_id"], held[server.name]["instance_id"])
        sessions = [s for load in loads for s in load.sessions]
        self.assertEqual(duplicates(sessions), 0)
        # The restored store keeps its guards, its owner and the least privilege of its roles.
        self.assert_refused("42501", restored.query, "DELETE FROM cosid.machine_lease")
        self.assertEqual(restored.query(
            "SELECT DISTINCT pg_get_userbyid(proowner) || ' ' || prosecdef FROM pg_proc "
            "WHERE proname IN ('lease_claim', 'lease_renew', 'lease_release')"),
            "cosid_lease_owner true")
        self.assert_refused("42501", query_as, restored, FLEET_ROLE,
                            "SELECT claim_token FROM cosid.machine_lease", FLEET_PASSWORD)

    def test_lease_rows_survive_dump_and_restore_of_the_extension(self):
        cluster = self.track(lease_cluster("hostile-dump-ext", 25445))
        cluster.query("CREATE EXTENSION cosid")
        wait_up(cluster)
        rows = cluster.rows(f"SELECT {TOKEN_COLUMNS}, watermark_ms FROM cosid.machine_lease")
        self.assertEqual(len(rows), 1)
        dump = cluster.base / "postgres.dump"
        subprocess.run(as_postgres([PG_BIN / "pg_dump", "-h", "127.0.0.1", "-p", cluster.port,
                                    "-U", "postgres", "-Fc", "-f", dump, "postgres"]),
                       check=True)
        cluster.query("CREATE DATABASE restored")
        subprocess.run(as_postgres([PG_BIN / "pg_restore", "-h", "127.0.0.1", "-p",
                                    cluster.port, "-U", "postgres", "-d", "restored",
                                    "--exit-on-error", dump]), check=True)
        restored = cluster.rows(f"SELECT {TOKEN_COLUMNS}, watermark_ms FROM cosid.machine_lease",
                                db="restored")
        self.assertEqual(len(restored), 1)
        # Renewals went on between the read and the dump: the claim is the same, the watermark
        # no lower.
        self.assertEqual(restored[0][:6], rows[0][:6])
        self.assertGreaterEqual(int(restored[0][6]), int(rows[0][6]))
        self.assert_refused("42501", cluster.query, "TRUNCATE cosid.machine_lease", "restored")

    # -- 2. a stolen store credential ---------------------------------------------------------

    def test_store_role_cannot_read_tokens_or_touch_other_leases(self):
        store = self.track(start_store("hostile-role-store", 25450))
        victim = self.fleet_server("hostile-role-victim", 25453, store, ONE_BIT)
        held = wait_up(victim)
        machine_id, instance_id = held["machine_id"], held["instance_id"]
        token = store.query("SELECT claim_token FROM cosid.machine_lease "
                            f"WHERE machine_id = {machine_id}")
        load = LoopingClients(victim, clients=2, batch=2000, batches_per_session=5)
        with load:
            wait_for(lambda: load.ids_so_far() > 10_000, 30, "ids")

            def as_fleet(sql):
                return query_as(store, FLEET_ROLE, sql, FLEET_PASSWORD)

            for sql in ("SELECT claim_token FROM cosid.machine_lease",
                        "SELECT * FROM cosid.lease_namespace",
                        "SELECT * FROM cosid.leases",
                        f"UPDATE cosid.machine_lease SET claim_token = 'mine' "
                        f"WHERE machine_id = {machine_id}",
                        "DELETE FROM cosid.machine_lease",
                        "TRUNCATE cosid.machine_lease",
                        "INSERT INTO cosid.machine_lease SELECT * FROM cosid.machine_lease",
                        "SELECT cosid.lease_retire('cosid', 0)"):
                self.assert_refused("42501", as_fleet, sql)
            # Releasing without the token, however it is guessed, changes nothing.
            for guess in ("", "0", "0000000000000000", token.upper(), f"{token}' OR 'x'='x"):
                self.assertEqual(as_fleet(
                    f"SELECT cosid.lease_release('cosid', {machine_id}, '{instance_id}', "
                    f"$${guess}$$, 0)"), "f")
            # Renewing someone else's lease is a loss for the caller, not a change.
            self.assertEqual(as_fleet(
                f"SELECT count(*) FROM cosid.lease_renew('cosid', {machine_id}, "
                f"'{instance_id}', 'guess', 1, 0)"), "0")
            # An impostor claiming with the victim's identity waits for it to expire, which
            # never happens while the victim renews; under its own identity it gets the other
            # machine id.
            self.assertEqual(as_fleet(
                "SELECT outcome, machine_id FROM cosid.lease_claim('cosid', 1, "
                f"'{instance_id}', false, 4000, 'impostor', 0)"), f"busy|{machine_id}")
            self.assertEqual(as_fleet(
                "SELECT outcome, machine_id FROM cosid.lease_claim('cosid', 1, 'impostor', "
                "false, 4000, 'impostor', 0)"), f"new|{1 - int(machine_id)}")
            self.assertEqual(as_fleet(
                "SELECT outcome FROM cosid.lease_claim('cosid', 1, 'impostor-2', false, 4000, "
                "'impostor-2', 0)"), "exhausted")
            count = load.ids_so_far()
            wait_for(lambda: load.ids_so_far() > count + 10_000, 30, "ids after the attempts")
        self.assertEqual(store.query("SELECT claim_token FROM cosid.machine_lease "
                                     f"WHERE machine_id = {machine_id}"), token)
        self.assertEqual(wait_up(victim)["machine_id"], machine_id)
        self.assertEqual(duplicates(load.sessions), 0)
        self.assertEqual([s.error for s in load.sessions if s.error], [])

    # -- 4. an operator planted in public -----------------------------------------------------

    PLANT = """
        CREATE TABLE public.pwned (at timestamptz DEFAULT now(), who text);
        GRANT INSERT ON public.pwned TO PUBLIC;
        CREATE FUNCTION public.evil(a numeric, b integer) RETURNS numeric LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO public.pwned (who) VALUES (current_user);
            BEGIN
                EXECUTE 'ALTER ROLE hostile SUPERUSER';
            EXCEPTION WHEN others THEN NULL;
            END;
            RETURN a * b::numeric;
        END $$;
        CREATE OPERATOR public.* (LEFTARG = numeric, RIGHTARG = integer, FUNCTION = public.evil);
        CREATE FUNCTION public.evil_div(a bigint, b numeric) RETURNS numeric LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO public.pwned (who) VALUES (current_user);
            RETURN a::numeric / b;
        END $$;
        CREATE OPERATOR public./ (LEFTARG = bigint, RIGHTARG = numeric, FUNCTION = public.evil_div);
        """

    def plant(self, cluster):
        """A role that owns the database, and so may create in public, plants operators that
        a query with an inexact match would pick over pg_catalog's."""
        cluster.query("CREATE ROLE hostile LOGIN; ALTER DATABASE postgres OWNER TO hostile; "
                      "ALTER SCHEMA public OWNER TO hostile")
        query_as(cluster, "hostile", self.PLANT)
        # The trap works: an unqualified query with the default search_path runs it.
        self.assertEqual(query_as(cluster, "hostile", "SELECT 2.5 * 2"), "5.0")
        query_as(cluster, "hostile", "DELETE FROM public.pwned")

    def assert_never_ran(self, cluster):
        self.assertEqual(cluster.query("SELECT count(*) FROM public.pwned"), "0")
        self.assertEqual(cluster.query("SELECT rolsuper FROM pg_roles WHERE rolname = 'hostile'"),
                         "f")

    def test_operator_planted_in_public_never_runs_in_the_worker(self):
        cluster = self.track(Cluster("hostile-plant", free_port(25460), {
            **FAST_LEASES, "cosid.stable": "on", "cosid.instance_id": "'planted'"}).init())
        cluster.start()
        self.plant(cluster)
        cluster.query("CREATE EXTENSION cosid")
        wait_up(cluster)
        renewed = cluster.query("SELECT renewed_at FROM cosid.machine_lease")
        wait_for(lambda: cluster.query("SELECT renewed_at FROM cosid.machine_lease") > renewed,
                 5, "a renewal")
        self.assertIsNotNone(try_next(cluster)[0])
        cluster.query("SELECT * FROM cosid.status; SELECT * FROM cosid.leases")
        cluster.restart()  # a release, then a claim of its own lease
        wait_up(cluster)
        self.assert_never_ran(cluster)

    def test_operator_planted_in_the_stores_public_never_runs(self):
        store = self.track(start_store("hostile-plant-store", 25465))
        self.plant(store)
        server = self.fleet_server("hostile-plant-server", 25468, store)
        wait_up(server)
        renewed = store.query("SELECT max(renewed_at) FROM cosid.machine_lease")
        wait_for(lambda: store.query("SELECT max(renewed_at) FROM cosid.machine_lease")
                 > renewed, 5, "a renewal")
        server.restart()
        wait_up(server)
        self.assert_never_ran(store)

    # -- 5. an advisory lock --------------------------------------------------------------------

    def test_advisory_lock_of_any_role_does_not_stall_claims(self):
        cluster = self.track(lease_cluster("hostile-lock", 25470))
        cluster.query("CREATE ROLE nobody LOGIN")
        holder = subprocess.Popen(
            [str(PG_BIN / "psql"), "-X", "-q", "-At", "-h", "127.0.0.1", "-p", str(cluster.port),
             "-U", "nobody", "-d", "postgres", "-v", "ON_ERROR_STOP=1"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.addCleanup(holder.kill)
        holder.stdin.write("SELECT pg_advisory_lock(hashtext('cosid.machine_lease'), "
                           "hashtext('cosid')); SELECT 'locked';\n")
        holder.stdin.flush()
        self.assertEqual(holder.stdout.readline().strip(), "")
        self.assertEqual(holder.stdout.readline().strip(), "locked")
        cluster.query("CREATE EXTENSION cosid")
        wait_up(cluster, timeout=10)
        # The lock that serialises claims now is a row lock on a table no other role may lock.
        for sql in ("SELECT * FROM cosid.lease_namespace FOR UPDATE",
                    "BEGIN; LOCK TABLE cosid.lease_namespace; COMMIT",
                    "BEGIN; LOCK TABLE cosid.machine_lease; COMMIT"):
            self.assert_refused("42501", query_as, cluster, "nobody", sql)

    # -- medium: a machine id whose watermark is far ahead ---------------------------------------

    def test_a_poisoned_machine_id_does_not_block_free_ones(self):
        # A server whose clock ran half an hour ahead gave machine id 0 back. (The store refuses
        # watermarks further ahead of its own clock than the safe guard and an hour.)
        cluster = self.track(lease_cluster("hostile-poison", 25475))
        cluster.query("""
            BEGIN;
            CREATE EXTENSION cosid;
            SELECT cosid.lease_claim('cosid', 10, 'future', false, 4000, 'tf',
                (extract(epoch FROM now()) * 1000)::bigint + 4000);
            SELECT cosid.lease_release('cosid', 0, 'future', 'tf',
                (extract(epoch FROM now() + interval '30 minutes') * 1000)::bigint);
            COMMIT""")
        up = wait_up(cluster, timeout=10)
        self.assertEqual(up["machine_id"], "1")
        self.assertIsNotNone(try_next(cluster)[0])
        self.assertNotIn("CLOCK_BEHIND", cluster.log())

    # -- medium: a store that answers nonsense --------------------------------------------------

    def test_a_malformed_store_answer_is_an_error_not_an_id(self):
        store = self.track(start_store("hostile-answer-store", 25480))
        # The store's claim answers a machine id beyond 10 bits, then one with no watermark.
        answer_claims_with(store, "'new', 5000, 0::bigint, 0::bigint, 0::bigint")
        server = self.fleet_server("hostile-answer", 25483, store)
        wait_for(lambda: "machine id 5000, outside 0 to 1023" in (status(server)["last_error"]
                                                                  or ""), 10, "the refusal")
        self.assertEqual(status(server)["state"], "CLAIMING")
        self.assertEqual(try_next(server)[1], "55P03")
        answer_claims_with(store, "'released', 3, NULL::bigint, 0::bigint, 0::bigint")
        wait_for(lambda: "no previous watermark" in (status(server)["last_error"] or ""), 10,
                 "the refusal of a NULL watermark")
        self.assertEqual(try_next(server)[1], "55P03")
        self.assertNotIn("panicked", server.log())
        self.assertNotIn("server process (PID", server.log())

    # -- medium: cosid.database names no database -----------------------------------------------

    def test_missing_database_is_reported_and_retried_with_backoff(self):
        cluster = self.track(lease_cluster("hostile-nodb", 25486, **{"cosid.database": "'nodb'"}))
        cluster.query("CREATE EXTENSION cosid")  # for cosid.status only
        refused = wait_for(lambda: "nodb" in (status(cluster)["last_error"] or "")
                           and status(cluster), 10, "the reason in cosid.status")
        self.assertIn('could not connect to database "nodb" (cosid.database)',
                      refused["last_error"])
        started = self.fatal_lines(cluster)
        # Each attempt after a failed one waits twice as long: 1, 2, 4 s ... where a restart a
        # second would make 8 attempts in these 8 s.
        wait_for(lambda: "trying again every 4 s" in (status(cluster)["last_error"] or ""), 15,
                 "the backoff to reach 4 s")
        self.assertLessEqual(self.fatal_lines(cluster) - started, 3)
        self.assertEqual(cluster.log().count("cosid: the lease worker could not connect"), 1)
        cluster.query("CREATE DATABASE nodb")
        cluster.query("CREATE EXTENSION cosid", db="nodb")
        wait_up(cluster, timeout=70)

    @staticmethod
    def fatal_lines(cluster):
        return cluster.log().count('FATAL:  database "nodb" does not exist')

    # -- medium: shutdown with an unreachable store ---------------------------------------------

    def test_shutdown_is_prompt_when_the_store_does_not_answer(self):
        store = self.track(start_store("hostile-stop-store", 25490))
        proxies = [Proxy(store.port), Proxy(store.port)]
        self.proxies += proxies
        # Default timings, so that a store call may take 10 s, and a 30 s connect timeout.
        slow = {"cosid.safe_guard_duration": "'5min'", "cosid.guarder_delay": "'1min'",
                "cosid.guarder_initial_delay": "'1min'"}
        servers = []
        for index, proxy in enumerate(proxies):
            server = self.track(fleet_server(f"hostile-stop-{index}", 25493 + 3 * index,
                                             store.port, slow, via=proxy,
                                             conninfo_extra="connect_timeout=30"))
            servers.append(server)
        holder, claiming = servers
        holder.start()
        holder.query("CREATE EXTENSION cosid")
        wait_up(holder)
        # The store stops answering: what reaches it is held back for a minute.
        for proxy in proxies:
            proxy.set_mode("delay", 60)
        claiming.start()
        claiming.query("CREATE EXTENSION cosid")
        wait_for(lambda: proxies[1].connections, 10, "the claiming worker to connect")
        for server in (holder, claiming):
            began = time.monotonic()
            server.stop(mode="fast")
            took = time.monotonic() - began
            # Well under the 10 s of a store call and the 30 s of a connection it must not wait
            # out, with room for pg_ctl on a loaded machine.
            self.assertLess(took, 8.0, f"{server.name} took {took:.1f} s to stop")

    # -- the review's findings: the protocol under a holder's credential ------------------------

    def test_a_schema_created_by_another_role_is_refused_at_install(self):
        store = self.track(Cluster("hostile-schema", free_port(25500), preload=False).init())
        store.start()
        store.query("CREATE ROLE squatter LOGIN; GRANT CREATE ON DATABASE postgres TO squatter")
        query_as(store, "squatter", "CREATE SCHEMA cosid")
        result = subprocess.run(store.psql_command("postgres", "-v", "ON_ERROR_STOP=1", "-f",
                                                   str(LEASE_SQL)),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("schema cosid exists and belongs to another role", result.stderr)
        self.assertEqual(store.query("SELECT to_regclass('cosid.machine_lease') IS NULL"), "t")
        # A role of the protocol's name that can log in is refused too.
        store.query("DROP SCHEMA cosid; CREATE ROLE cosid_lease_owner LOGIN")
        result = subprocess.run(store.psql_command("postgres", "-v", "ON_ERROR_STOP=1", "-f",
                                                   str(LEASE_SQL)),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.assertIn("must be NOLOGIN", result.stderr)

    def test_a_namespace_refuses_a_second_layout(self):
        store = self.track(start_store("hostile-layout-store", 25505))
        first = self.fleet_server("hostile-layout-ms", 25508, store)
        wait_up(first)
        # Same machine bits, another time unit: ids of the two could coincide.
        second = self.fleet_server("hostile-layout-s", 25511, store,
                                   {"cosid.time_unit": "second", "cosid.timestamp_bits": 31,
                                    "cosid.sequence_bits": 22})
        refused = wait_for(lambda: "another id layout" in (status(second)["last_error"] or "")
                           and status(second), 10, "the refusal")
        self.assertEqual(refused["state"], "CLAIMING")
        self.assertEqual(try_next(second)[1], "55000")
        self.assertIsNotNone(try_next(first)[0])
        # Once the first server has given its machine id back, nothing of the namespace is held,
        # and still the second layout is refused: the ids issued stay in the namespace's rows.
        first.stop()
        self.assertEqual(store.query("SELECT state FROM cosid.machine_lease"), "released")
        self.assertEqual(store.query("SELECT cosid.lease_namespace_layout('cosid')"),
                         "epoch 1577203200000 ms, millisecond, 41/10/12 bits")
        deadline = time.monotonic() + 3  # three claims of the second server
        while time.monotonic() < deadline:
            self.assertNotEqual(status(second)["state"], "UP")
            time.sleep(0.2)
        self.assertIn("another id layout", status(second)["last_error"])
        self.assertEqual(store.query("SELECT count(*) FROM cosid.machine_lease"), "1")

    def claim(self, cluster, instance, token, watermark="0", safe_guard=4000, bits=10,
              stable="false"):
        return cluster.query(
            "SELECT outcome || ' ' || coalesce(machine_id::text, '-') || ' ' || "
            "coalesce(previous_watermark_ms::text, '-') FROM cosid.lease_claim('ns', "
            f"{bits}, '{instance}', {stable}, {safe_guard}, '{token}', {watermark})")

    def test_claims_under_a_holders_credential(self):
        store = self.track(start_store("hostile-claims-store", 25515))
        now_ms = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
        # A claim retried with its token (its answer was lost) waits for what the claim found,
        # not for the bound it wrote itself.
        self.assertEqual(self.claim(store, "a", "ta", f"{now_ms} + 4000"), "new 0 0")
        self.assertEqual(self.claim(store, "a", "ta", f"{now_ms} + 4000"), "own 0 0")
        # Given back with a watermark far ahead, its own machine id comes after a free one.
        store.query("SELECT cosid.lease_release('ns', 0, 'a', 'ta', "
                    f"{now_ms} + 1800000)")
        self.assertEqual(self.claim(store, "a", "ta2", f"{now_ms} + 4000").split()[:2],
                         ["new", "1"])
        # Arguments that would lock machine ids or instances up for good are refused.
        for arguments in ("3000000000000, 'x', 0", f"4000, 'x', {now_ms} + 90000000",
                          "0, 'x', 0", "4000, '', 0"):
            with self.subTest(arguments=arguments):
                self.assert_refused("22023", store.query,
                                    "SELECT cosid.lease_claim('ns', 10, 'z', true, "
                                    f"{arguments})")
        self.assertEqual(store.query(
            f"SELECT count(*) FROM cosid.lease_renew('ns', 1, 'a', 'ta2', 4000, "
            f"{now_ms} + 90000000)"), "0")
        # Nobody lowers what the next holder waits for, superusers included.
        for column in ("watermark_ms = 0", "claim_floor_ms = -1", "released_ms = -5"):
            with self.subTest(column=column):
                self.assert_refused("42501", store.query,
                                    f"UPDATE cosid.machine_lease SET {column} "
                                    "WHERE machine_id = 0")

    def test_an_empty_layout_neither_erases_nor_skips_a_namespaces_layout(self):
        store = self.track(start_store("hostile-blank-store", 25517))
        layout = "epoch 1577203200000 ms, millisecond, 41/10/12 bits"

        def claim(instance, token, layout_argument):
            return query_as(store, FLEET_ROLE,
                            "SELECT outcome || ' ' || coalesce(machine_id::text, '-') FROM "
                            f"cosid.lease_claim('ns', 10, '{instance}', false, 4000, "
                            f"'{token}', 0{layout_argument})", FLEET_PASSWORD)

        self.assertEqual(claim("a", "ta", f", '{layout}', true"), "new 0")
        # A holder's credential cannot blank the layout through the claim of this version or
        # of 0.2.0 to 0.4.0, which always say theirs...
        for form in (", '', true", ", ''"):
            with self.subTest(form=form):
                refused = self.assert_refused("22023", claim, "a", "ta", form)
                self.assertIn("layout must not be empty", refused.stderr)
        # ...nor through 0.1.0's, which does not say it: the claim is served, the layout kept.
        self.assertEqual(claim("a", "ta", ""), "own 0")
        self.assertEqual(claim("a", "ta", ", '', false"), "own 0")
        self.assertEqual(store.query("SELECT layout FROM cosid.machine_lease"), layout)
        self.assertEqual(store.query("SELECT cosid.lease_namespace_layout('ns')"), layout)
        # So a server of another layout is still refused.
        self.assertEqual(claim("b", "tb", ", 'epoch 0 ms, second, 31/10/22 bits', true"),
                         "layout -")

    def test_a_holder_keeping_the_namespace_lock_does_not_stall_released_ids(self):
        store = self.track(start_store("hostile-nslock-store", 25520))
        server = self.fleet_server("hostile-nslock", 25523, store, ONE_BIT)
        machine_id = wait_up(server)["machine_id"]
        server.stop()  # releases its machine id
        holder = subprocess.Popen(
            [str(PG_BIN / "psql"), "-X", "-q", "-At", "-h", "127.0.0.1", "-p", str(store.port),
             "-U", FLEET_ROLE, "-d", "postgres"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, env=dict(os.environ, PGPASSWORD=FLEET_PASSWORD))
        self.addCleanup(holder.kill)
        # A claim left open in a transaction keeps the namespace's row locked.
        holder.stdin.write("BEGIN; SELECT outcome FROM cosid.lease_claim('cosid', 1, 'hog', "
                           "false, 4000, 'hog', 0);\n")
        holder.stdin.flush()
        self.assertEqual(holder.stdout.readline().strip(), "new")
        server.start()
        self.assertEqual(wait_up(server, timeout=10)["machine_id"], machine_id)

    # -- named generators -------------------------------------------------------------------

    def test_a_generators_table_planted_where_the_extension_is_not_never_runs(self):
        # A fixed machine id: the generators worker connects to cosid.database, where the
        # extension is not installed; its owner plants what the worker would read.
        cluster = self.track(Cluster("hostile-generators", free_port(25530), {
            "cosid.distributor": "manual", "cosid.machine_id": 1,
            "cosid.database": "appdb"}).init())
        cluster.start()
        cluster.query("CREATE ROLE mallory LOGIN")
        cluster.query("CREATE DATABASE appdb OWNER mallory")
        cluster.query("CREATE EXTENSION cosid")  # in postgres, to call the functions
        query_as(cluster, "mallory", """
            CREATE SCHEMA cosid;
            CREATE FUNCTION cosid.escalate() RETURNS text LANGUAGE plpgsql AS $$
            BEGIN ALTER ROLE mallory SUPERUSER; RETURN 'x'; END $$;
            CREATE VIEW cosid.generator AS SELECT cosid.escalate() AS name, 'x'::text AS namespace,
                0::bigint AS epoch_ms, 'millisecond'::text AS time_unit, 41 AS timestamp_bits,
                10 AS machine_bits, 12 AS sequence_bits, now() AS created_at;
            CREATE TABLE cosid.generator_namespace (namespace text, layout text);""", db="appdb")
        # The worker has read "the definitions" once a name is refused as unknown (42704),
        # not as not yet read (55P03).
        wait_for(lambda: try_next(cluster, "SELECT cosid_next('x')")[1] == "42704", 15,
                 "the worker's first read")
        self.assertEqual(cluster.query("SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory'"),
                         "f", "the planted view ran as the worker")
        self.assertEqual(cluster.query("SELECT string_agg(name, ',') FROM cosid.status"),
                         "default")

    def test_lease_functions_planted_where_the_extension_is_not_never_run(self):
        # The lease worker's store is its own cosid.database, where the extension is not
        # installed yet; the database's owner plants the lease protocol. The worker runs as a
        # superuser: it must not call functions that are not cosid's, SECURITY DEFINER or not.
        cluster = self.track(Cluster("hostile-protocol", free_port(25533), {
            **FAST_LEASES, "cosid.database": "appdb"}).init())
        cluster.start()
        cluster.query("CREATE ROLE mallory LOGIN")
        cluster.query("CREATE DATABASE appdb OWNER mallory")
        cluster.query("CREATE EXTENSION cosid")  # in postgres, to read cosid.status
        query_as(cluster, "mallory", """
            CREATE SCHEMA cosid;
            CREATE FUNCTION cosid.escalate() RETURNS void LANGUAGE plpgsql AS $$
            BEGIN ALTER ROLE mallory SUPERUSER; END $$;
            CREATE FUNCTION cosid.lease_namespace_layout(text) RETURNS text LANGUAGE sql
                AS $$ SELECT NULL::text $$;
            CREATE FUNCTION cosid.lease_claim(text, integer, text, boolean, bigint, text,
                bigint, text, boolean)
                RETURNS TABLE (outcome text, machine_id integer, previous_watermark_ms bigint,
                               expires_at_ms bigint, store_now_ms bigint)
                LANGUAGE plpgsql SECURITY DEFINER AS $$
                BEGIN PERFORM cosid.escalate(); RETURN; END $$;
            CREATE FUNCTION cosid.lease_renew(text, integer, text, text, bigint, bigint,
                boolean)
                RETURNS TABLE (expires_at_ms bigint, store_now_ms bigint)
                LANGUAGE plpgsql AS $$ BEGIN PERFORM cosid.escalate(); RETURN; END $$;
            CREATE FUNCTION cosid.lease_release(text, integer, text, text, bigint)
                RETURNS boolean
                LANGUAGE plpgsql AS $$ BEGIN PERFORM cosid.escalate(); RETURN true; END $$;
            """, db="appdb")
        refused = "not calling the lease functions of database \"appdb\": they are not cosid's"
        wait_for(lambda: refused in (status(cluster)["last_error"] or ""), 15,
                 "the worker to refuse the planted protocol")
        self.assertEqual(cluster.query("SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory'"),
                         "f", "a planted lease function ran as the worker")
        self.assertEqual(status(cluster)["state"], "STOPPED")
        self.assertEqual(try_next(cluster)[1], "55000")
        # Once mallory's schema is gone and the extension installed, the worker leases.
        query_as(cluster, "mallory", "DROP SCHEMA cosid CASCADE", db="appdb")
        cluster.query("CREATE EXTENSION cosid", "appdb")
        wait_up(cluster, timeout=30)

    def test_a_drop_undone_by_a_savepoint_or_a_prepared_rollback_keeps_the_generator(self):
        cluster = self.track(Cluster("hostile-undone-drop", free_port(25540), {
            **FAST_LEASES, "max_prepared_transactions": 2}).init())
        cluster.start()
        cluster.query("CREATE EXTENSION cosid; SELECT cosid_create_generator('g')")
        wait_for(lambda: try_next(cluster, "SELECT cosid_next('g')")[0], 15, "generator g")
        cluster.query("BEGIN; SAVEPOINT s; SELECT cosid_drop_generator('g'); ROLLBACK TO s; "
                      "COMMIT")
        cluster.query("BEGIN; SELECT cosid_drop_generator('g'); PREPARE TRANSACTION 'p'")
        cluster.query("ROLLBACK PREPARED 'p'")
        cluster.query("BEGIN; COMMIT")  # a later commit of a session, for the callback
        # Still live, in this session and in a new one, without a new claim.
        machine_id = cluster.query("SELECT machine_id FROM cosid.status WHERE name = 'g'")
        self.assertIsNotNone(try_next(cluster, "SELECT cosid_next('g')")[0])
        self.assertEqual(cluster.query("SELECT count(*) FROM cosid.machine_lease "
                                       "WHERE namespace = 'g' AND state = 'claimed'"), "1")
        self.assertEqual(cluster.query("SELECT machine_id FROM cosid.status WHERE name = 'g'"),
                         machine_id)
        self.assertNotIn('generator "g" was dropped', cluster.log())
        # A drop that commits stops it.
        cluster.query("SELECT cosid_drop_generator('g')")
        self.assertEqual(try_next(cluster, "SELECT cosid_next('g')")[1], "42704")

    def test_the_records_of_names_and_namespaces_cannot_be_deleted(self):
        # DELETE FROM cosid.generator_namespace once stopped every named generator silently.
        cluster = self.track(Cluster("hostile-history", free_port(25555), {
            "cosid.distributor": "manual", "cosid.machine_id": 5}).init())
        cluster.start()
        cluster.query("CREATE EXTENSION cosid; SELECT cosid_create_generator('orders'); "
                      "SELECT cosid_create_generator('gone'); SELECT cosid_drop_generator('gone')")
        wait_for(lambda: try_next(cluster, "SELECT cosid_next('orders')")[0], 15,
                 "generator orders")
        records = ("SELECT string_agg(namespace || ' ' || layout, ',' ORDER BY namespace) "
                   "FROM cosid.generator_namespace UNION ALL "
                   "SELECT string_agg(name || ' ' || namespace, ',' ORDER BY name) "
                   "FROM cosid.generator_name")
        before = cluster.query(records)
        self.assertIn("gone", before)
        for table in ("cosid.generator_namespace", "cosid.generator_name"):
            for statement in (f"DELETE FROM {table}", f"DELETE FROM {table} WHERE "
                              f"{'namespace' if table.endswith('namespace') else 'name'} = "
                              "'gone'", f"TRUNCATE {table} CASCADE"):
                with self.subTest(statement=statement):
                    refused = self.assert_refused("42501", cluster.query, statement)
                    self.assertIn(f"rows of {table} cannot be deleted", refused.message)
        self.assertEqual(cluster.query(records), before)
        self.assertEqual(cluster.query("SELECT string_agg(name, ',') FROM cosid.generator"),
                         "orders")
        # The generator goes on, and the worker never found its definition unusable.
        self.assertIsNotNone(try_next(cluster, "SELECT cosid_next('orders')")[0])
        self.assertNotIn("is not used", cluster.log())

    def test_a_generator_in_the_default_namespace_is_not_used(self):
        # With a fixed machine id, two generators of one namespace would share it: a named
        # generator whose namespace became the default generator's (cosid.namespace changed
        # after it was created) is left unused, with a warning.
        cluster = self.track(Cluster("hostile-default-namespace", free_port(25550), {
            "cosid.distributor": "manual", "cosid.machine_id": 5}).init())
        cluster.start()
        cluster.query("CREATE EXTENSION cosid; SELECT cosid_create_generator('orders')")
        wait_for(lambda: try_next(cluster, "SELECT cosid_next('orders')")[0], 15,
                 "generator orders")
        cluster.settings["cosid.namespace"] = "'orders'"
        cluster.write_settings()
        cluster.restart()
        wait_for(lambda: try_next(cluster, "SELECT cosid_next('orders')")[1] == "42704", 15,
                 "the worker's first read")
        self.assertIn('generator "orders" is not used: its namespace is the default '
                      "generator's", cluster.log())
        self.assertEqual(cluster.query("SELECT string_agg(name, ',') FROM cosid.status"),
                         "default")
        self.assertIsNotNone(try_next(cluster)[0])
