"""Monitoring against real servers: members of pg_monitor read cosid.status and cosid.leases and
nothing else of cosid, and see no lease error's text; cosid.status shows the local deadline and
the timings in force after a reload; CREATE EXTENSION outside cosid.database says where the
leases live."""

import time
import unittest

from helpers.leases import FAST_LEASES, fake_claim, lease_cluster, status, wait_up
from helpers.old_versions import install_old_scripts
from helpers.pgcluster import (Cluster, ClusterTest, SqlError, free_port, query_as,
                               server_says, wait_for)

# What a member of pg_monitor may use in schema cosid; everything else there is refused.
MONITOR_FUNCTIONS = {"cosid.generator_status()", "cosid.lease_rows()",
                     "cosid.lease_store_version()"}
MONITOR_RELATIONS = {"cosid.status", "cosid.leases"}

# Every privilege a relation or a function can be granted.
ALL_TABLE_PRIVILEGES = "SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER"


def create_extension(cluster, db="postgres", before=""):
    """CREATE EXTENSION cosid in `db`, after the statements `before`; the NOTICE lines it
    printed."""
    return server_says(cluster, before + "CREATE EXTENSION cosid", db)


def deadline_row(cluster, role=None):
    """The deadline columns of the default generator, as booleans and intervals, from the
    server's clock."""
    sql = ("SELECT state, deadline IS NULL, deadline > clock_timestamp(), "
           "deadline <= last_renewed_at + safe_guard_duration - safe_guard_margin "
           "+ interval '10 ms', "
           "safe_guard_duration, safe_guard_margin, guarder_delay, "
           "extract(epoch FROM deadline - last_renewed_at) "
           "FROM cosid.status WHERE name = 'default'")
    row = (query_as(cluster, role, sql).split("|") if role
           else cluster.rows(sql)[0])
    keys = ["state", "null", "future", "within_safe_guard", "safe_guard", "margin", "delay",
            "after_renewal_s"]
    return dict(zip(keys, row))


class Monitoring(ClusterTest):
    def assert_refused(self, role, cluster, sql):
        with self.assertRaises(SqlError, msg=f"{role}: {sql}") as refused:
            query_as(cluster, role, sql)
        self.assertEqual(refused.exception.sqlstate, "42501", refused.exception)

    def test_pg_monitor_reads_status_and_leases_and_nothing_else(self):
        cluster = self.track(lease_cluster("monitor-roles", 25710))
        self.assertEqual(create_extension(cluster), "", "a NOTICE in cosid.database")
        up = wait_up(cluster)
        cluster.query("CREATE ROLE watcher LOGIN IN ROLE pg_monitor; "
                      "CREATE ROLE nobody LOGIN; "
                      "CREATE ROLE holder LOGIN IN ROLE cosid_lease_holder")
        self.assertEqual(query_as(cluster, "watcher", "SELECT state, machine_id FROM cosid.status"),
                         f"UP|{up['machine_id']}")
        self.assertEqual(query_as(cluster, "watcher",
                                  "SELECT machine_id, status FROM cosid.leases"),
                         f"{up['machine_id']}|held")
        # Roles without pg_monitor stay refused, a holder of the lease protocol too.
        for role in ("nobody", "holder"):
            for sql in ("SELECT * FROM cosid.status", "SELECT * FROM cosid.leases",
                        "SELECT * FROM cosid.generator_status()",
                        "SELECT * FROM cosid.lease_rows()"):
                self.assert_refused(role, cluster, sql)
        # pg_monitor gains nothing else in schema cosid: no table, no function of the protocol.
        functions = cluster.rows(
            "SELECT p.oid::regprocedure, has_function_privilege('watcher', p.oid, 'EXECUTE') "
            "FROM pg_proc p WHERE p.pronamespace = 'cosid'::regnamespace")
        self.assertGreater(len(functions), 10)
        self.assertEqual({name for name, allowed in functions if allowed == "t"},
                         MONITOR_FUNCTIONS)
        relations = cluster.rows(
            "SELECT c.oid::regclass, "
            f"has_table_privilege('watcher', c.oid, '{ALL_TABLE_PRIVILEGES}'), "
            "has_table_privilege('watcher', c.oid, 'SELECT'), "
            "has_table_privilege('watcher', c.oid, "
            "'INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER') "
            "FROM pg_class c WHERE c.relnamespace = 'cosid'::regnamespace "
            "AND c.relkind IN ('r', 'v', 'p', 'S', 'm', 'f')")
        self.assertEqual({name for name, some, _, _ in relations if some == "t"},
                         MONITOR_RELATIONS)
        self.assertEqual({name for name, _, _, write in relations if write == "t"}, set())
        self.assertEqual(cluster.query(
            "SELECT has_schema_privilege('watcher', 'cosid', 'CREATE'), "
            "has_function_privilege('watcher', 'cosid_create_generator(text, text, text, "
            "integer, integer, integer, timestamptz, text, integer)', 'EXECUTE')"), "f|f")
        for sql in ("SELECT * FROM cosid.machine_lease", "SELECT * FROM cosid.lease_namespace",
                    "SELECT * FROM cosid.generator",
                    "SELECT cosid.lease_claim('cosid', 10, 'w', false, 4000, 'tw', 0, '')",
                    f"SELECT cosid.lease_release('cosid', {up['machine_id']}, "
                    f"'{up['instance_id']}', 'x', 0)",
                    "SELECT cosid.lease_retire('other')"):
            self.assert_refused("watcher", cluster, sql)
        # No claim token anywhere it reads.
        columns = cluster.query(
            "SELECT string_agg(attname, ',') FROM pg_attribute "
            "WHERE attrelid IN ('cosid.status'::regclass, 'cosid.leases'::regclass) "
            "AND attnum > 0")
        self.assertNotIn("token", columns)

    def test_pg_monitor_sees_the_kind_of_a_store_error_not_its_text(self):
        # A shared store (the server itself) that refuses the store's role: the error names it.
        port = free_port(25711)
        cluster = self.track(Cluster("monitor-error", port, {
            **FAST_LEASES,
            "cosid.lease_store": f"'host=127.0.0.1 port={port} user=store_secret_user "
                                 "dbname=store_secret_db connect_timeout=2'"}).init())
        cluster.start()
        notice = create_extension(cluster)
        self.assertIn("NOTICE:  00000: cosid leases its machine ids from the shared lease store "
                      "of cosid.lease_store", notice)
        self.assertIn("cosid.leases in this database shows none of them", notice)
        cluster.query("CREATE ROLE watcher LOGIN IN ROLE pg_monitor")
        full = wait_for(lambda: cluster.query(
            "SELECT last_error FROM cosid.status WHERE name = 'default'"), 15,
            "a lease error in cosid.status")
        self.assertIn("store_secret_user", full, "the superuser sees the error's text")
        shown = query_as(cluster, "watcher",
                         "SELECT state, last_error FROM cosid.status WHERE name = 'default'")
        self.assertNotEqual(shown.split("|")[0], "UP")
        self.assertEqual(shown.split("|")[1],
                         "the lease store failed (its error is shown to superusers only)")
        for secret in (str(port), "127.0.0.1", "store_secret"):
            self.assertNotIn(secret, shown)
        # Without a lease there is no deadline.
        self.assertEqual(deadline_row(cluster, "watcher")["null"], "t")
        # An application role's refusal says the same, never the error's text; a superuser's
        # refusal carries it.
        cluster.query("CREATE ROLE app LOGIN")
        with self.assertRaises(SqlError) as refused:
            query_as(cluster, "app", "SELECT cosid_next()")
        self.assertEqual(refused.exception.sqlstate, "55P03", refused.exception.stderr)
        self.assertIn("the lease store failed (its error is shown to superusers only)",
                      refused.exception.stderr)
        for secret in (str(port), "127.0.0.1", "store_secret"):
            self.assertNotIn(secret, refused.exception.stderr)
        with self.assertRaises(SqlError) as refused:
            cluster.query("SELECT cosid_next()")
        self.assertIn("store_secret_user", refused.exception.stderr)

    def test_deadline_and_timings_in_force(self):
        cluster = self.track(lease_cluster("monitor-deadline", 25712, **{
            "cosid.timestamp_bits": 41, "cosid.machine_bits": 1, "cosid.sequence_bits": 12}))
        create_extension(cluster)
        machine_id = int(wait_up(cluster)["machine_id"])
        # UP: the deadline is ahead, and no later than the last renewal plus the safe guard
        # less its margin (the renewal was sent before the store stamped it).
        for _ in range(20):
            row = deadline_row(cluster)
            # A renewal slower than its 500 ms limit (a loaded machine) shows DOWN for a moment;
            # the deadline stands all the same.
            self.assertIn(row["state"], ("UP", "DOWN"), row)
            self.assertEqual((row["null"], row["future"], row["within_safe_guard"]),
                             ("f", "t", "t"), row)
            self.assertEqual((row["safe_guard"], row["margin"], row["delay"]),
                             ("00:00:04", "00:00:00.4", "00:00:00.5"))
            time.sleep(0.1)
        # After a reload the new timings are in force, and the deadline follows them.
        cluster.settings = {**cluster.settings, "cosid.safe_guard_duration": "'7s'",
                            "cosid.guarder_delay": "'700ms'"}
        cluster.write_settings()
        cluster.query("SELECT pg_reload_conf()")

        def reloaded():
            row = deadline_row(cluster)
            return (row["safe_guard"] == "00:00:07" and float(row["after_renewal_s"]) > 4
                    and row)
        row = wait_for(reloaded, 15, "the reloaded timings in cosid.status")
        self.assertEqual((row["state"], row["future"], row["within_safe_guard"], row["margin"],
                          row["delay"]), ("UP", "t", "t", "00:00:00.7", "00:00:00.7"), row)
        # The lease is lost (somebody took the machine id, and the other one is held): no
        # deadline, the generator refuses.
        outcome, other_id, _ = fake_claim(cluster, "other", 600_000, machine_bits=1)
        self.assertEqual((outcome, int(other_id)), ("new", 1 - machine_id))
        cluster.query("UPDATE cosid.machine_lease SET instance_id = 'thief', "
                      "claim_token = 'stolen', expires_at = now() + interval '1 hour' "
                      f"WHERE machine_id = {machine_id}")
        row = wait_for(lambda: (lambda r: r["state"] != "UP" and r)(deadline_row(cluster)), 10,
                       "the lease to be lost")
        self.assertEqual(row["null"], "t", row)

    def test_status_of_0_3_0_is_served_until_the_update(self):
        install_old_scripts()
        cluster = self.track(lease_cluster("monitor-update", 25714))
        cluster.query("CREATE EXTENSION cosid VERSION '0.3.0'")
        # This library claims only through the lease protocol of its own version (0.5.0: the
        # store settles after a failover), and says what to run meanwhile.
        waiting = "waiting for the extension's update"
        wait_for(lambda: waiting in (status(cluster)["last_error"] or ""), 15,
                 "the worker to wait for the update")
        # The SQL of 0.3.0 is bound to the symbol of 0.3.0, which this library keeps.
        self.assertEqual(cluster.query(
            "SELECT count(*) FROM information_schema.columns "
            "WHERE table_schema = 'cosid' AND table_name = 'status'"), "25")
        self.assertEqual(cluster.query("SELECT state FROM cosid.status"), "STOPPED")
        cluster.query("ALTER EXTENSION cosid UPDATE")
        wait_up(cluster)
        self.assertEqual(cluster.query(
            "SELECT state, deadline > clock_timestamp(), safe_guard_margin FROM cosid.status"),
            "UP|t|00:00:00.4")
        cluster.query("CREATE ROLE watcher LOGIN IN ROLE pg_monitor")
        self.assertEqual(query_as(cluster, "watcher", "SELECT count(*) FROM cosid.leases"), "1")


class WhereTheLeasesLive(ClusterTest):
    def test_create_extension_outside_cosid_database_says_where_the_leases_live(self):
        cluster = self.track(lease_cluster("monitor-where", 25713))
        self.assertEqual(create_extension(cluster), "")
        up = wait_up(cluster)
        cluster.query("CREATE DATABASE app")
        notice = create_extension(cluster, "app")
        self.assertIn('NOTICE:  00000: cosid leases its machine ids in database "postgres" '
                      "(cosid.database), not in this one", notice)
        self.assertIn('HINT:  See the leases with SELECT * FROM cosid.leases in database '
                      '"postgres".', notice)
        # What the NOTICE explains: the leases are there, and not here.
        self.assertEqual(cluster.query("SELECT count(*) FROM cosid.leases", "app"), "0")
        self.assertEqual(cluster.query("SELECT state FROM cosid.status", "app"), "UP")
        self.assertEqual(cluster.query("SELECT machine_id FROM cosid.leases"), up["machine_id"])
        # A session that asked for warnings only is not shown it.
        cluster.query("CREATE DATABASE app2")
        self.assertEqual(create_extension(cluster, "app2", "SET client_min_messages = warning; "),
                         "")
        self.assertEqual(cluster.query("SELECT count(*) FROM pg_extension "
                                       "WHERE extname = 'cosid'", "app2"), "1")


if __name__ == "__main__":
    unittest.main()
