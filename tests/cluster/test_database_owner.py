"""The owner of cosid.database, who is no superuser, against the leases: the per-database
settings that would break the workers' sessions (read-only transactions, another isolation,
timeouts that end them) are harmless, since the workers pin their own; and the statements that would keep the workers out of the database or move it
away (ALLOW_CONNECTIONS false, RENAME, DROP) are refused. What a store database's owner can still
do is said in docs/security.md."""

from helpers.generators import wait_generators_up
from helpers.leases import lease_cluster, try_next, wait_up
from helpers.owner import (ATTACHED_SETTINGS, make_owner, set_database_settings,
                           try_taking_it_away)
from helpers.pgcluster import ClusterTest, SqlError, query_as


class DatabaseOwner(ClusterTest):
    def test_the_owner_can_neither_stop_the_leases_nor_take_the_database_away(self):
        cluster = self.track(lease_cluster("owner", 25625, **{"cosid.database": "'appdb'"}))
        # With CREATEDB, as the owner of the finding: it could rename and create databases.
        make_owner(cluster, "alice", "appdb")
        cluster.query("CREATE EXTENSION cosid", db="appdb")
        cluster.query("CREATE EXTENSION cosid")
        wait_up(cluster)
        set_database_settings(cluster, "alice", "appdb")
        # Taking effect for every new session of the database, the workers' too.
        cluster.restart()
        with self.assertRaises(SqlError) as read_only:
            query_as(cluster, "alice", "CREATE TABLE t ()", db="appdb")
        self.assertEqual(read_only.exception.sqlstate, "25006")
        status = wait_up(cluster, timeout=30)
        self.assertFalse(status["last_error"])
        self.assertIsNotNone(try_next(cluster)[0])
        # A lease is renewed, released and claimed again under those settings.
        cluster.restart()
        wait_up(cluster, timeout=30)
        self.assertIsNotNone(try_next(cluster)[0])
        for sql, refused in try_taking_it_away(cluster, "alice", "appdb").items():
            with self.subTest(sql=sql):
                self.assertIsNotNone(refused, f"{sql} went through")
                self.assertEqual(refused.sqlstate, "55006", refused.stderr)
                self.assertIn("while it is cosid.database", refused.message)
        # What stays allowed: connections allowed again, another database renamed.
        query_as(cluster, "alice", "ALTER DATABASE appdb ALLOW_CONNECTIONS true")
        cluster.query("CREATE DATABASE other OWNER alice")
        query_as(cluster, "alice", "ALTER DATABASE other RENAME TO other_renamed")
        self.assertIsNotNone(try_next(cluster)[0])

    def test_the_owner_cannot_make_the_workers_act_as_another_role_or_run_slowly(self):
        # ALTER DATABASE ... SET role (or session_authorization) made every new session of the
        # database act as the owner, the workers' too, which the schema cosid refused:
        # CLAIMING forever. JIT costs of 0 pushed the worker's calls into their timeouts.
        cluster = self.track(lease_cluster("owner-role", 25627, **{"cosid.database": "'appdb'"}))
        make_owner(cluster, "alice", "appdb")
        cluster.query("CREATE EXTENSION cosid", db="appdb")
        cluster.query("CREATE EXTENSION cosid")
        wait_up(cluster)
        cluster.query("SELECT cosid_create_generator('orders')", db="appdb")
        for settings in (ATTACHED_SETTINGS, ["session_authorization = 'alice'"]):
            with self.subTest(settings=settings):
                set_database_settings(cluster, "alice", "appdb", settings)
                if settings is ATTACHED_SETTINGS:
                    self.assertEqual(
                        cluster.query("SELECT current_user", db="appdb"), "alice",
                        "the setting does not reach the database's new sessions")
                # (PostgreSQL 15 takes session_authorization from a database's settings for no
                # session; where a version does, the worker must not be one.)
                log_before = len(cluster.log())
                cluster.restart()
                status = wait_up(cluster, timeout=60)
                self.assertFalse(status["last_error"])
                # The named generator leases its own machine id, after the default one's.
                self.assertFalse(wait_generators_up(cluster, ["orders"], 60)["orders"]
                                 ["last_error"])
                # Every attached setting took its default: none was left with a warning.
                self.assertNotIn("could not give the setting", cluster.log()[log_before:])
                self.assertNotIn("could not take", cluster.log()[log_before:])
                self.assertIsNotNone(try_next(cluster)[0])
                self.assertIsNotNone(try_next(cluster, "SELECT cosid_next('orders')")[0])
                query_as(cluster, "alice", "ALTER DATABASE appdb RESET ALL", db="template1")
