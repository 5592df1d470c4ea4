"""Restoring cosid.database with pg_restore, as an operator does it, keeps every lease row: into a
database where `CREATE EXTENSION cosid` already ran and the lease worker holds a machine id (the
Quick start, then the restore), and with the worker claiming between the restore's
`CREATE EXTENSION` and its `COPY`. A restored row that meets a row of the same machine id is
merged into it (the higher watermark) and the claim held stays, if everything the restored row
covers came more than a safe guard before the claim began; if not, the COPY is refused with
nothing changed, and the restore into a fresh database that the HINT gives works. Clients
generate throughout; every id is counted. And the generator of a dump
of an application database restored on another server says, when first used, where named
generators live."""

import subprocess
import time

from helpers.clients import LoopingClients, duplicates
from helpers.leases import FAST_LEASES, lease_cluster, machine_of, ts_ms_of, wait_up
from helpers.pgcluster import (PG_BIN, Cluster, ClusterTest, SqlError, as_postgres, free_port,
                               wait_for)

ROWS = ("SELECT machine_id, instance_id, claim_token, state, watermark_ms, written_in "
        "FROM cosid.machine_lease WHERE namespace = 'cosid' ORDER BY machine_id")


def restore(cluster, dump, db, *options):
    """pg_restore into `db`, as an operator runs it: (exit code, what it said)."""
    result = subprocess.run(
        as_postgres([PG_BIN / "pg_restore", "-h", "127.0.0.1", "-p", cluster.port, "-U",
                     "postgres", "-d", db, *options, dump]),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    return result.returncode, result.stdout


def dump_of(cluster, db):
    """pg_dump -Fc of `db`; the file's path."""
    dump = cluster.base / f"{db}.dump"
    subprocess.run(as_postgres([PG_BIN / "pg_dump", "-h", "127.0.0.1", "-p", cluster.port, "-U",
                                "postgres", "-Fc", "-f", dump, db]), check=True)
    return dump


def longest_stop_s(sessions):
    """The longest time, by the ids' own timestamps, in which the server issued nothing."""
    stamps = sorted({ts_ms_of(value) for session in sessions for value in session.ids})
    return max((b - a for a, b in zip(stamps, stamps[1:])), default=0) / 1000


class Restore(ClusterTest):
    def dump_of_a_used_store(self, cluster, watermark_from_now_ms):
        """A dump of database "source" of `cluster`, whose lease table holds rows of machine ids
        0 to 2 as three other servers left them, machine id 0 with a watermark that far from
        now; and the rows it holds."""
        # cosid.status is in every database with the extension.
        cluster.query("CREATE EXTENSION cosid")
        cluster.query("CREATE DATABASE source")
        cluster.query("CREATE EXTENSION cosid", db="source")
        for instance in ("gone-0", "gone-1", "gone-2"):
            cluster.query(
                "SELECT outcome FROM cosid.lease_claim('cosid', 10, "
                f"'{instance}', false, 4000, 't-{instance}', 0)", db="source")
        cluster.query("UPDATE cosid.machine_lease SET watermark_ms = "
                      f"cosid.unix_ms(clock_timestamp()) + {watermark_from_now_ms} "
                      "WHERE machine_id = 0", db="source")
        dump = dump_of(cluster, "source")
        return dump, cluster.rows(ROWS, db="source")

    def assert_every_row_kept(self, cluster, dumped):
        rows = cluster.rows(ROWS, db="appdb")
        self.assertEqual([row[0] for row in rows], ["0", "1", "2"], rows)
        # Machine id 0 keeps at least the dumped watermark; the others are as they were dumped.
        self.assertGreaterEqual(int(rows[0][4]), int(dumped[0][4]))
        self.assertEqual(rows[1][:5], dumped[1][:5])
        self.assertEqual(rows[2][:5], dumped[2][:5])
        # The rows came from elsewhere: the store settles, so that no machine id is handed out
        # as released, new or expired before a safe guard has passed.
        wait_for(lambda: cluster.query("SELECT bool_or(settles) FROM cosid.store_identity",
                                       db="appdb") == "t", 10, "the store to settle")
        return rows

    def report(self, what, sessions):
        refused = sum(1 for session in sessions if session.error)
        ids = sum(len(session.ids) for session in sessions)
        print(f"\n  {what}: {ids} ids, {duplicates(sessions)} duplicates, {refused} sessions "
              f"refused, longest stop {longest_stop_s(sessions):.1f} s", end=" ")

    def test_restore_into_a_database_whose_server_already_claimed(self):
        cluster = self.track(lease_cluster("restore-after", 25960, **{
            "cosid.database": "'appdb'"}))
        # An older dump: the holders of its rows stopped a minute ago.
        dump, dumped = self.dump_of_a_used_store(cluster, -60_000)
        # The Quick start: the database, the extension, and the worker claims machine id 0.
        cluster.query("CREATE DATABASE appdb")
        cluster.query("CREATE EXTENSION cosid", db="appdb")
        holder = wait_up(cluster)["instance_id"]
        with LoopingClients(cluster, 2, 500, 4) as clients:
            time.sleep(0.5)
            code, said = restore(cluster, dump, "appdb")
            time.sleep(1.5)
        self.assertEqual(code, 0, said)
        rows = self.assert_every_row_kept(cluster, dumped)
        # The claim held began after everything the restored rows say was issued: it stays, and
        # the server never stopped.
        self.assertEqual(rows[0][1], holder)
        self.assertEqual(wait_up(cluster)["instance_id"], holder)
        self.report("restore after the Quick start", clients.sessions)
        self.assertEqual(duplicates(clients.sessions), 0)
        self.assertEqual([session.error for session in clients.sessions if session.error], [])
        self.assertEqual({machine_of(value) for session in clients.sessions
                          for value in session.ids}, {0})

    def test_restore_while_the_worker_claims_between_create_extension_and_copy(self):
        cluster = self.track(lease_cluster("restore-between", 25965, **{
            "cosid.database": "'appdb'"}))
        # A dump of moments ago: its holders may have issued ids 8 s ahead of now.
        dump, dumped = self.dump_of_a_used_store(cluster, 8000)
        cluster.query("CREATE DATABASE appdb")
        code, said = restore(cluster, dump, "appdb", "--section=pre-data", "--exit-on-error")
        self.assertEqual(code, 0, said)
        # The restore's CREATE EXTENSION ran: the worker claims before the rows are copied.
        holder = wait_up(cluster)["instance_id"]
        before = cluster.rows(ROWS, db="appdb")
        with LoopingClients(cluster, 2, 500, 4) as clients:
            time.sleep(0.5)
            code, said = restore(cluster, dump, "appdb", "--section=data", "--exit-on-error")
            time.sleep(1.0)
        # The claim held began less than a safe guard after what the restored row covers, and
        # its holder cannot learn of a higher floor while it generates: the COPY is refused,
        # nothing changes, and the server goes on generating.
        self.assertNotEqual(code, 0, said)
        self.assertIn('a restored cosid lease of machine id 0 of namespace "cosid" overlaps the '
                      "claim this store holds", said)
        self.assertIn("Restore into a database that no server leases from yet", said)
        self.assertEqual([row[:4] + row[5:] for row in cluster.rows(ROWS, db="appdb")],
                         [row[:4] + row[5:] for row in before])
        self.assertEqual(wait_up(cluster)["instance_id"], holder)
        self.report("restore with a claim before its COPY", clients.sessions)
        self.assertEqual(duplicates(clients.sessions), 0)
        self.assertEqual([session.error for session in clients.sessions if session.error], [])
        # What the HINT says: a database no server leases from, then cosid.database there.
        cluster.query("CREATE DATABASE fresh")
        code, said = restore(cluster, dump, "fresh", "--exit-on-error")
        self.assertEqual(code, 0, said)
        self.assertEqual(cluster.rows(ROWS, db="fresh"), dumped)
        cluster.query("ALTER SYSTEM SET cosid.database = 'fresh'")
        cluster.restart()
        cluster.query("CREATE EXTENSION IF NOT EXISTS cosid")
        # The restored rows make the store settle before the server claims.
        status = wait_up(cluster, timeout=30)
        # One claim, not a machine id taken and given back per second: the claimer waited
        # until its clock passed the floor the settling gives.
        held = cluster.rows("SELECT machine_id, claim_floor_ms FROM cosid.machine_lease "
                            f"WHERE instance_id = '{status['instance_id']}'", db="fresh")
        self.assertEqual(len(held), 1, held)
        self.assertGreater(int(held[0][1]), 0)

    def test_an_application_database_restored_elsewhere_says_where_its_generators_live(self):
        cluster = self.track(lease_cluster("restore-app", 25970))
        cluster.query("CREATE EXTENSION cosid")
        wait_up(cluster)
        cluster.query("SELECT cosid_create_generator('orders_id', 'millisecond', "
                      "namespace => 'orders')")
        cluster.query("CREATE DATABASE app")
        cluster.query("CREATE EXTENSION cosid", db="app")
        cluster.query("CREATE TABLE orders (id bigint PRIMARY KEY "
                      "DEFAULT cosid_next('orders_id'), note text)", db="app")
        dump = dump_of(cluster, "app")
        # Another server, whose cosid.database has no such generator.
        elsewhere = self.track(Cluster("restore-elsewhere", free_port(25975),
                                       dict(FAST_LEASES)).init())
        elsewhere.start()
        elsewhere.query("CREATE EXTENSION cosid")
        elsewhere.query("CREATE DATABASE app")
        code, said = restore(elsewhere, dump, "app", "--exit-on-error")
        self.assertEqual(code, 0, said)
        # pg_restore shows no NOTICE (it sets client_min_messages to warning): the first use
        # of the generator says it.
        wait_up(elsewhere)
        with self.assertRaises(SqlError) as refused:
            elsewhere.query("INSERT INTO orders (note) VALUES ('x')", db="app")
        self.assertEqual(refused.exception.sqlstate, "42704")
        said = refused.exception.stderr
        self.assertIn('cosid generator "orders_id" does not exist', said)
        self.assertIn('Named generators are defined in cosid.database of each server '
                      '("postgres" on this one)', said)
        self.assertIn("a dump of another database does not carry them", said)

    def test_a_restored_row_of_another_layout_is_refused_and_nothing_changes(self):
        cluster = self.track(lease_cluster("restore-layout", 25980, **{
            "cosid.database": "'appdb'"}))
        cluster.query("CREATE EXTENSION cosid")
        cluster.query("CREATE DATABASE source")
        cluster.query("CREATE EXTENSION cosid", db="source")
        cluster.query("SELECT outcome FROM cosid.lease_claim('cosid', 10, 'gone', false, 4000, "
                      "'t-gone', 0, 'epoch 0 ms, second, 31/10/22 bits', true)", db="source")
        dump = dump_of(cluster, "source")
        cluster.query("CREATE DATABASE appdb")
        cluster.query("CREATE EXTENSION cosid", db="appdb")
        wait_up(cluster)
        before = cluster.rows(ROWS, db="appdb")
        code, said = restore(cluster, dump, "appdb")
        self.assertNotEqual(code, 0, said)
        self.assertIn('a restored cosid lease of machine id 0 of namespace "cosid" has another '
                      "id layout", said)
        self.assertIn("Restore into a database that no server leases from yet", said)
        # The holder's row only went on being renewed (its watermark rises).
        self.assertEqual([row[:4] + row[5:] for row in cluster.rows(ROWS, db="appdb")],
                         [row[:4] + row[5:] for row in before])
