"""The owner of cosid.database, who is no superuser, against the leases: the per-database
settings that would break the workers' sessions (read-only transactions, another isolation,
timeouts that end them) are harmless, since the workers pin their own; and the statements that would keep the workers out of the database or move it
away (ALLOW_CONNECTIONS false, RENAME, DROP) are refused. What a store database's owner can still
do is said in docs/security.md."""

from helpers.leases import lease_cluster, try_next, wait_up
from helpers.pgcluster import ClusterTest, SqlError, query_as

BREAKING_SETTINGS = [
    "default_transaction_read_only = on",
    "default_transaction_isolation = 'serializable'",
    "statement_timeout = '1ms'",
    "idle_session_timeout = '200ms'",
    "idle_in_transaction_session_timeout = '1ms'",
]


class DatabaseOwner(ClusterTest):
    def test_the_owner_can_neither_stop_the_leases_nor_take_the_database_away(self):
        cluster = self.track(lease_cluster("owner", 25625, **{"cosid.database": "'appdb'"}))
        # With CREATEDB, as the owner of the finding: it could rename and create databases.
        cluster.query("CREATE ROLE alice LOGIN CREATEDB")
        cluster.query("CREATE DATABASE appdb OWNER alice")
        cluster.query("CREATE EXTENSION cosid", db="appdb")
        cluster.query("CREATE EXTENSION cosid")
        wait_up(cluster)
        for setting in BREAKING_SETTINGS:
            query_as(cluster, "alice", f"ALTER DATABASE appdb SET {setting}")
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
        for sql in ("ALTER DATABASE appdb ALLOW_CONNECTIONS false",
                    "ALTER DATABASE appdb WITH ALLOW_CONNECTIONS = false",
                    "ALTER DATABASE appdb RENAME TO appdb_old",
                    "DROP DATABASE appdb", "DROP DATABASE appdb WITH (FORCE)"):
            with self.subTest(sql=sql), self.assertRaises(SqlError) as refused:
                query_as(cluster, "alice", sql)
            self.assertEqual(refused.exception.sqlstate, "55006", refused.exception.stderr)
            self.assertIn("while it is cosid.database", refused.exception.message)
        # What stays allowed: connections allowed again, another database renamed.
        query_as(cluster, "alice", "ALTER DATABASE appdb ALLOW_CONNECTIONS true")
        cluster.query("CREATE DATABASE other OWNER alice")
        query_as(cluster, "alice", "ALTER DATABASE other RENAME TO other_renamed")
        self.assertIsNotNone(try_next(cluster)[0])
