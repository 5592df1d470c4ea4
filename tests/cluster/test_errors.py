"""Errors an application can act on, against a real server: a passing lease state is refused with
55P03 (retry in a moment), a configuration with 55000; every DETAIL reads as sentences, also
before any lease was held; and LOCATION names the place that raised the error, not the error
type's own file."""

import re
import unittest

from helpers.leases import FAST_LEASES, status
from helpers.pgcluster import ROOT, Cluster, SqlError, conf_string, free_port, wait_for


def field(stderr, name):
    """The text of one field (DETAIL, HINT, LOCATION) of a psql error printed verbosely."""
    for line in stderr.splitlines():
        if line.startswith(f"{name}:"):
            return line[len(name) + 1:].strip()
    return None


class NeverLeased(unittest.TestCase):
    """A server whose lease store cannot be reached: the worker has never held a lease."""

    @classmethod
    def setUpClass(cls):
        closed_port = free_port(25991)
        store = f"host=127.0.0.1 port={closed_port} dbname=cosid user=cosid connect_timeout=1"
        cls.cluster = Cluster("errors", free_port(25990), {
            **FAST_LEASES, "cosid.distributor": "lease",
            "cosid.lease_store": conf_string(store)}).init()
        cls.cluster.start()
        cls.cluster.query("CREATE EXTENSION cosid")
        wait_for(lambda: "cannot reach the lease table" in (status(cls.cluster)["last_error"]
                                                             or ""), 20, "the store's refusal")

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    def refused(self, sql):
        with self.assertRaises(SqlError) as refused:
            self.cluster.query(sql)
        return refused.exception

    def test_no_lease_yet_is_retryable_and_reads_as_sentences(self):
        error = self.refused("SELECT cosid_next()")
        self.assertEqual(error.sqlstate, "55P03", error.stderr)
        self.assertEqual(error.message, 'cosid holds no machine id lease in namespace "cosid"')
        detail = field(error.stderr, "DETAIL")
        self.assertTrue(detail.startswith(
            "The background worker is claiming a machine id (state CLAIMING in cosid.status). "
            "No renewal has succeeded yet. The last error was: "), detail)
        self.assertIn("cannot reach the lease table", detail)
        self.assertNotIn("never", detail)
        self.assertNotIn("..", detail)
        self.assertTrue(detail.endswith("."), detail)
        self.assertTrue(field(error.stderr, "HINT").startswith("Retry in a moment"))
        # PL/pgSQL catches it by its condition name.
        caught = self.cluster.query("""DO $$ BEGIN PERFORM cosid_next();
            EXCEPTION WHEN lock_not_available THEN RAISE NOTICE 'retry'; END $$""")
        self.assertEqual(caught, "")

    def test_location_is_where_the_error_was_raised(self):
        error = self.refused("SELECT cosid_next()")
        location = field(error.stderr, "LOCATION")
        self.assertIsNotNone(location, error.stderr)
        # PostgreSQL prints the file's base name: the line must be one of src/sql/ids.rs that
        # raises (cosid_next's), not the one inside the error type.
        self.assertNotIn("error.rs", location)
        match = re.fullmatch(r"cosid, ids\.rs:(\d+)", location)
        self.assertIsNotNone(match, location)
        line = (ROOT / "src" / "sql" / "ids.rs").read_text().splitlines()[int(match[1]) - 1]
        self.assertIn("raise", line)
        parse = self.refused("SELECT cosid_from_friendly('x')")
        self.assertNotIn("error.rs", field(parse.stderr, "LOCATION"))


if __name__ == "__main__":
    unittest.main()
