"""cosid.database in a LATIN1 database: a namespace that is not ASCII is refused at create, and
one definition the workers read that has such a namespace (written before this check, or past
the function) goes through the server encoding: it stops no other generator, it is used under
the same characters in every database, cosid.status shows it in those characters in a LATIN1
database and a UTF8 one, and a drop of a name no generator can have answers 42704."""

import os
from unittest import mock

from helpers.generators import wait_generators_up
from helpers.leases import FAST_LEASES, wait_up
from helpers.pgcluster import Cluster, ClusterTest, SqlError, free_port

NAMESPACE = "E'ns\\351\\377x'"


class Latin1Definitions(ClusterTest):
    # The tests' psql reads in UTF8 whatever the database's encoding: cosid.status's LATIN1 text
    # reaches them converted.
    @mock.patch.dict(os.environ, {"PGCLIENTENCODING": "UTF8"})
    def test_one_namespace_that_is_not_ascii_stops_no_generator(self):
        cluster = self.track(Cluster("encoding-latin1", free_port(25615), dict(FAST_LEASES),
                                     initdb_options=["-E", "LATIN1"]).init())
        cluster.start()
        self.assertEqual(cluster.query("SHOW server_encoding"), "LATIN1")
        cluster.query("CREATE EXTENSION cosid")
        wait_up(cluster)
        cluster.query("SELECT cosid_create_generator('ok', 'millisecond')")
        wait_generators_up(cluster, ["ok"])
        with self.assertRaises(SqlError) as refused:
            cluster.query(f"SELECT cosid_create_generator('lg', namespace => {NAMESPACE})")
        self.assertEqual(refused.exception.sqlstate, "22023", refused.exception.stderr)
        self.assertIn("a namespace is ASCII characters only", refused.exception.stderr)
        # A definition written past the function, as a superuser can: the row of 'ok' copied
        # under a namespace of two LATIN1 letters.
        cluster.query(f"INSERT INTO cosid.generator_name (name, namespace) "
                      f"VALUES ('lg', {NAMESPACE})")
        cluster.query(
            "INSERT INTO cosid.generator (name, namespace, epoch_ms, time_unit, timestamp_bits, "
            f"machine_bits, sequence_bits) SELECT 'lg', {NAMESPACE}, epoch_ms, time_unit, "
            "timestamp_bits, machine_bits, sequence_bits FROM cosid.generator WHERE name = 'ok'")
        cluster.query(f"INSERT INTO cosid.generator_namespace (namespace, layout) SELECT "
                      f"{NAMESPACE}, layout FROM cosid.generator_namespace "
                      "WHERE namespace = 'ok'")
        # The worker reads the definitions again about every 250 ms.
        # Both generate: the bad row stopped nothing, and was read as the characters it holds.
        wait_generators_up(cluster, ["ok", "lg"])
        self.assertIsNotNone(cluster.query("SELECT cosid_next('ok')"))
        self.assertIsNotNone(cluster.query("SELECT cosid_next('lg')"))
        # cosid.status shows it in the characters it holds, converted to each database's
        # encoding: the LATIN1 letters in this one.
        self.assertEqual(cluster.query(
            f"SELECT namespace = {NAMESPACE} FROM cosid.status WHERE name = 'lg'"), "t")
        cluster.query("CREATE DATABASE utf8 ENCODING 'UTF8' TEMPLATE template0")
        cluster.query("CREATE EXTENSION cosid", db="utf8")
        self.assertEqual(cluster.query("SELECT namespace FROM cosid.status WHERE name = 'lg'",
                                       db="utf8"), "ns\u00e9\u00ffx")
        with self.assertRaises(SqlError) as unknown:
            cluster.query("SELECT cosid_drop_generator(E'\\351')")
        self.assertEqual(unknown.exception.sqlstate, "42704", unknown.exception.stderr)
        self.assertIn("does not exist", unknown.exception.message)
