"""Uninstalling and migrating, against real servers.

DROP EXTENSION cosid is refused while the lease table or the named generators' table has rows,
and DROP ... CASCADE while a column takes its default from cosid; the documented way to
uninstall works end to end, and a new install then issues no id below the old ones.
cosid_convert_column switches a bigserial column, whose dump then has the new default and no
sequence, and one while inserts run."""

import subprocess
import threading
import unittest

from helpers.clients import run_session
from helpers.leases import FAST_LEASES, lease_cluster, wait_up
from helpers.pgcluster import (PG_BIN, Cluster, ClusterTest, SqlError, as_postgres, free_port,
                               query_as, wait_for)


# The documentation's step that forgets the records of generator names and namespaces, as a
# superuser (docs/uninstalling.md).
FORGET_NAMES = ("BEGIN; SET LOCAL session_replication_role = replica; "
                "DELETE FROM cosid.generator_name; DELETE FROM cosid.generator_namespace; COMMIT")


def sqlstate_of(cluster, sql, db="postgres"):
    try:
        cluster.query(sql, db)
    except SqlError as error:
        return error.sqlstate, error.stderr
    return None, ""


class Uninstall(ClusterTest):
    def test_drop_refused_while_leased_and_the_lease_keeps_working(self):
        cluster = self.track(lease_cluster("migrate-drop", 25561))
        cluster.query("CREATE EXTENSION cosid")
        wait_up(cluster)
        before = int(cluster.query("SELECT cosid_next()"))
        for statement in ("DROP EXTENSION cosid", "DROP EXTENSION cosid CASCADE",
                          "DROP SCHEMA public CASCADE"):
            state, stderr = sqlstate_of(cluster, statement)
            self.assertEqual(state, "55006", f"{statement}: {stderr}")
            self.assertIn("lease table has rows", stderr)
            self.assertIn("HINT:", stderr)
            self.assertIn("cosid.lease_retire", stderr)
        # Nor can the database of the leases go, even forcing the lease worker's connection out.
        for statement in ("DROP DATABASE postgres", "DROP DATABASE postgres WITH (FORCE)"):
            state, stderr = sqlstate_of(cluster, statement, db="template1")
            self.assertEqual(state, "55006", f"{statement}: {stderr}")
            self.assertIn('cannot drop database "postgres" while it is cosid.database', stderr)
        self.assertEqual(cluster.query("SELECT count(*) FROM cosid.machine_lease"), "1")
        wait_up(cluster)
        self.assertGreater(int(cluster.query("SELECT cosid_next()")), before)
        # Other statements are untouched, CASCADE or not.
        cluster.query("CREATE TABLE scratch (a int); CREATE VIEW scratch_v AS SELECT * FROM scratch; "
                      "DROP TABLE scratch CASCADE")

    def test_cascade_with_a_cosid_default_is_refused_in_another_database(self):
        cluster = self.track(lease_cluster("migrate-cascade", 25562))
        cluster.query("CREATE EXTENSION cosid")
        cluster.query("CREATE DATABASE app")
        cluster.query("CREATE EXTENSION cosid", db="app")
        cluster.query('CREATE SCHEMA "Shop"; '
                      'CREATE TABLE "Shop"."Order" ("Id" bigint PRIMARY KEY DEFAULT cosid_next()); '
                      "CREATE TABLE plain (id bigint)", db="app")
        wait_up(cluster)
        cluster.query('INSERT INTO "Shop"."Order" DEFAULT VALUES', db="app")
        # Without CASCADE, PostgreSQL itself refuses.
        state, _ = sqlstate_of(cluster, "DROP EXTENSION cosid", db="app")
        self.assertEqual(state, "2BP01")
        state, stderr = sqlstate_of(cluster, "DROP EXTENSION cosid CASCADE", db="app")
        self.assertEqual(state, "2BP01", stderr)
        self.assertIn('"Shop"."Order"."Id"', stderr)
        self.assertIn("HINT:", stderr)
        self.assertEqual(cluster.query(
            "SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef "
            "WHERE adrelid = '\"Shop\".\"Order\"'::regclass", db="app"), "cosid_next()")
        # DROP SCHEMA ... CASCADE that takes the table with it strips nothing: allowed. The
        # extension stays, since it does not live in that schema.
        cluster.query('DROP SCHEMA "Shop" CASCADE', db="app")
        # A database with the extension for its functions only loses nothing: the drop goes
        # through, CASCADE or not.
        cluster.query("DROP EXTENSION cosid CASCADE", db="app")
        self.assertEqual(cluster.query(
            "SELECT count(*) FROM pg_extension WHERE extname = 'cosid'", db="app"), "0")
        # And cosid.database still has its lease.
        self.assertEqual(cluster.query("SELECT count(*) FROM cosid.machine_lease"), "1")

    def test_named_generators_block_the_drop_and_a_schema_owner_is_checked_too(self):
        cluster = self.track(Cluster("migrate-named", free_port(25566),
                                     {"cosid.distributor": "'manual'", "cosid.machine_id": 3}).init())
        cluster.start()
        cluster.query("CREATE EXTENSION cosid")
        cluster.query("SELECT cosid_create_generator('invoices')")
        state, stderr = sqlstate_of(cluster, "DROP EXTENSION cosid")
        self.assertEqual(state, "55006", stderr)
        self.assertIn("named generators", stderr)
        self.assertIn('"invoices"', stderr)
        self.assertEqual(cluster.query("SELECT name FROM cosid.generator"), "invoices")
        cluster.query("SELECT cosid_drop_generator('invoices')")
        # A database owner who is no superuser can drop the extension with its schema: what
        # would be lost is read all the same (the lease table is private), and an empty one
        # does not stand in the way.
        cluster.query("CREATE ROLE alice LOGIN")
        cluster.query("CREATE DATABASE shop OWNER alice")
        cluster.query("CREATE EXTENSION cosid; CREATE SCHEMA app AUTHORIZATION alice", db="shop")
        query_as(cluster, "alice", "CREATE TABLE app.item (id bigint DEFAULT cosid_next())",
                 db="shop")
        with self.assertRaises(SqlError) as caught:
            query_as(cluster, "alice", "DROP SCHEMA public CASCADE", db="shop")
        self.assertEqual(caught.exception.sqlstate, "2BP01", caught.exception.stderr)
        self.assertIn("app.item.id", caught.exception.stderr)
        query_as(cluster, "alice", "ALTER TABLE app.item ALTER COLUMN id DROP DEFAULT", db="shop")
        query_as(cluster, "alice", "DROP SCHEMA public CASCADE", db="shop")
        self.assertEqual(cluster.query(
            "SELECT count(*) FROM pg_extension WHERE extname = 'cosid'", db="shop"), "0")
        # In cosid.database, with no rows left but the name's record, the drop goes through
        # once that is forgotten as the documentation says.
        cluster.query(FORGET_NAMES)
        cluster.query("DROP EXTENSION cosid")

    def test_the_records_of_names_and_namespaces_block_the_drop(self):
        # A name keeps its namespace, and a namespace its layout, after its generator is
        # dropped: a drop of the extension would lose those records, after which the name could
        # be defined again in another namespace or layout and repeat its ids.
        cluster = self.track(Cluster("migrate-names", free_port(25567),
                                     {"cosid.distributor": "'manual'", "cosid.machine_id": 3}).init())
        cluster.start()
        cluster.query("CREATE EXTENSION cosid")
        cluster.query("SELECT cosid_create_generator('invoices', namespace => 'billing'); "
                      "SELECT cosid_drop_generator('invoices')")
        for statement in ("DROP EXTENSION cosid", "DROP EXTENSION cosid CASCADE",
                          "DROP SCHEMA public CASCADE"):
            state, stderr = sqlstate_of(cluster, statement)
            self.assertEqual(state, "55006", f"{statement}: {stderr}")
            self.assertIn("while it records generator names and namespaces", stderr)
            self.assertIn('"invoices" (namespace "billing")', stderr)
            self.assertIn("HINT:", stderr)
        self.assertEqual(cluster.query("SELECT count(*) FROM cosid.generator_name"), "1")
        # A namespace's record alone blocks it too (the update to 0.5.0 records the namespaces
        # of leases without a name).
        cluster.query("BEGIN; SET LOCAL session_replication_role = replica; "
                      "DELETE FROM cosid.generator_name; COMMIT")
        state, stderr = sqlstate_of(cluster, "DROP EXTENSION cosid")
        self.assertEqual(state, "55006", stderr)
        self.assertIn('namespace "billing"', stderr)
        cluster.query(FORGET_NAMES)
        cluster.query("DROP EXTENSION cosid")

    def test_the_documented_uninstall_keeps_every_new_id_above_the_old_ones(self):
        cluster = self.track(lease_cluster("migrate-uninstall", 25563))
        cluster.query("CREATE EXTENSION cosid")
        wait_up(cluster)
        cluster.query("SELECT cosid_create_generator('orders')")
        wait_for(lambda: cluster.query(
            "SELECT state FROM cosid.status WHERE name = 'orders'") == "UP", 15, "orders UP")
        old = [int(cluster.query("SELECT max(cosid_next()) FROM generate_series(1, 1000)")),
               int(cluster.query("SELECT max(cosid_next('orders')) FROM generate_series(1, 1000)"))]
        # Step 1: the named generators.
        # The statements are the documentation's.
        cluster.query("SELECT cosid_drop_generator(name) FROM cosid.generator")
        state, stderr = sqlstate_of(cluster, "DROP EXTENSION cosid")
        self.assertEqual(state, "55006", stderr)
        # Step 2: stop generating: the lease worker releases its leases at shutdown.
        cluster.settings = {**FAST_LEASES, "cosid.distributor": "'manual'"}
        cluster.write_settings()
        cluster.restart()
        self.assertEqual(cluster.query(
            "SELECT count(*) FROM cosid.leases WHERE status <> 'released'"), "0")
        # Step 3: retire the rows, which is refused until their watermarks are a minute old.
        retire = ("SELECT namespace, cosid.lease_retire(namespace) AS rows_retired "
                  "FROM (SELECT DISTINCT namespace FROM cosid.leases) n")
        state, stderr = sqlstate_of(cluster, retire)
        self.assertEqual(state, "55006", stderr)

        def retired():
            return sqlstate_of(cluster, retire)[0] is None
        wait_for(retired, 90, "the watermarks to be a minute old")
        self.assertEqual(cluster.query("SELECT count(*) FROM cosid.machine_lease"), "0")
        # Step 4: the records of the names, which block the drop until they are forgotten.
        state, stderr = sqlstate_of(cluster, "DROP EXTENSION cosid")
        self.assertEqual(state, "55006", stderr)
        self.assertIn('"orders" (namespace "orders")', stderr)
        cluster.query(FORGET_NAMES)
        # Step 5: drop.
        cluster.query("DROP EXTENSION cosid")
        # Installed again, with leases: no id at or below the old ones.
        cluster.settings = dict(FAST_LEASES)
        cluster.write_settings()
        cluster.restart()
        cluster.query("CREATE EXTENSION cosid")
        wait_up(cluster)
        self.assertGreater(int(cluster.query("SELECT cosid_next()")), max(old))


class Convert(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = lease_cluster("migrate-convert", 25564)
        cls.cluster.query("CREATE EXTENSION cosid")
        wait_up(cls.cluster)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop(mode="immediate", check=False)

    def q(self, sql):
        return self.cluster.query(sql)

    def default_of(self, table, column):
        return self.q(f"SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d "
                      f"JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum "
                      f"WHERE d.adrelid = '{table}'::regclass AND a.attname = '{column}'")

    def test_bigserial_with_rows(self):
        self.q("CREATE TABLE serial_t (id bigserial PRIMARY KEY, v int); "
               "INSERT INTO serial_t (v) SELECT g FROM generate_series(1, 1000) g")
        first = int(self.q("SELECT cosid_convert_column('serial_t', 'id')"))
        self.assertGreater(first, 1000)
        self.assertEqual(self.default_of("serial_t", "id"), "cosid_next()")
        self.assertEqual(self.q("SELECT to_regclass('serial_t_id_seq') IS NULL"), "t")
        new = int(self.q("INSERT INTO serial_t (v) VALUES (0) RETURNING id"))
        self.assertGreater(new, first)
        # The dump writes the new default and no sequence.
        dump = subprocess.run(
            as_postgres([PG_BIN / "pg_dump", "-h", "127.0.0.1", "-p", str(self.cluster.port),
                         "-U", "postgres", "-s", "-t", "serial_t", "postgres"]),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=True).stdout
        self.assertIn("DEFAULT public.cosid_next()", dump)
        self.assertNotIn("SEQUENCE", dump)

    def test_concurrent_inserters_during_the_switch(self):
        self.q("CREATE TABLE busy_t (id bigserial PRIMARY KEY, client int); "
               "CREATE TABLE busy_stop (stop boolean)")
        clients, inserts = 4, 20000
        sessions = [None] * clients

        # Each client inserts one row per statement, printing its id, until busy_stop has a row.
        def work(index):
            sessions[index] = run_session(
                self.cluster, index,
                [f"INSERT INTO busy_t (client) SELECT {index} "
                 "WHERE NOT EXISTS (SELECT FROM busy_stop) RETURNING id"] * inserts)
        threads = [threading.Thread(target=work, args=(i,)) for i in range(clients)]
        for thread in threads:
            thread.start()
        wait_for(lambda: int(self.q("SELECT count(*) FROM busy_t")) >= 200, 30, "inserts")
        # The lock is held a moment after the switch, so that inserts queue behind it.
        out = self.q("BEGIN; SELECT cosid_convert_column('busy_t', 'id'); "
                     "SELECT pg_sleep(0.3); COMMIT")
        first = int(out.split()[0])
        wait_for(lambda: int(self.q(f"SELECT count(*) FROM busy_t WHERE id > {first}")) >= 200,
                 30, "inserts after the switch")
        self.q("INSERT INTO busy_stop VALUES (true)")
        for thread in threads:
            thread.join()
        ids = [i for session in sessions for i in session.ids]
        self.assertEqual([s.error for s in sessions], [""] * clients)
        self.assertEqual(len(set(ids)), len(ids))
        self.assertEqual(self.q("SELECT count(*) FROM busy_t"), str(len(ids)))
        old = [i for i in ids if i < first]
        new = [i for i in ids if i > first]
        self.assertEqual(len(old) + len(new), len(ids))
        self.assertTrue(old and new, (len(old), len(new)))
        self.assertLess(max(old), min(new))
        # Each client saw its sequence ids, then only cosid ids: none went back to the sequence.
        for session in sessions:
            switched = [i > first for i in session.ids]
            self.assertEqual(switched, sorted(switched))


if __name__ == "__main__":
    unittest.main()
