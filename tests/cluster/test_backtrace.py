"""A server started with RUST_BACKTRACE=1 in its environment (common where a Rust toolchain is
installed): PostgreSQL's own errors of utility statements pass through cosid's ProcessUtility
hook unchanged, with every field a client reads (DETAIL, the table and constraint names, the
LOCATION in PostgreSQL's code) and no Rust backtrace; cosid's own errors, and PostgreSQL's errors
raised inside cosid's functions, carry no backtrace either. The rest of the suite strips the
variable from the servers it starts (helpers/pgcluster.py)."""

import subprocess

from helpers.leases import FAST_LEASES, wait_up
from helpers.pgcluster import Cluster, ClusterTest, free_port

# What a Rust backtrace in an error's text looks like.
BACKTRACE_SIGNS = ("stack backtrace", "rust_begin_unwind", "std::panicking", "pgrx",
                   "at ./", "/rustc/")


def failing(cluster, sql, db="postgres"):
    """What psql printed for `sql`, which must fail, in verbose form."""
    result = subprocess.run(
        cluster.psql_command(db, "-At", "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose",
                             "-c", sql),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert result.returncode != 0, f"{sql} did not fail"
    return result.stderr


class WithRustBacktrace(ClusterTest):
    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster("backtrace", free_port(25700 + 99), dict(FAST_LEASES),
                              env={"RUST_BACKTRACE": "1"}).init()
        cls.cluster.start()
        cls.cluster.query("CREATE EXTENSION cosid")
        wait_up(cls.cluster)
        cls.cluster.query("CREATE TABLE keyed (id bigint PRIMARY KEY)")
        cls.cluster.query("INSERT INTO keyed VALUES (1)")

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop(check=False)

    def assert_no_backtrace(self, said):
        for sign in BACKTRACE_SIGNS:
            self.assertNotIn(sign, said)
        self.assertLess(len(said.splitlines()), 12, said)

    def test_the_environment_really_has_it(self):
        pid = self.cluster.postmaster_pid()
        with open(f"/proc/{pid}/environ", "rb") as environ:
            environment = environ.read().split(b"\0")
        self.assertIn(b"RUST_BACKTRACE=1", environment)

    def test_postgresql_errors_of_utility_statements_pass_unchanged(self):
        cases = [
            ("CREATE TABLE twice (); CREATE TABLE twice ()", "42P07",
             'relation "twice" already exists', "heap.c"),
            ("DROP TABLE no_such_table", "42P01", 'table "no_such_table" does not exist',
             "tablecmds.c"),
            ("BEGIN; CREATE DATABASE inside_a_block", "25001",
             "CREATE DATABASE cannot run inside a transaction block", "xact.c"),
        ]
        for sql, sqlstate, message, source in cases:
            with self.subTest(sql=sql):
                said = failing(self.cluster, sql)
                self.assertIn(f"ERROR:  {sqlstate}: {message}", said)
                self.assertNotIn("DETAIL", said)
                # PostgreSQL's own place, not the place pgrx raised it again.
                self.assertRegex(said, rf"LOCATION:  \w+, {source}:\d+")
                self.assert_no_backtrace(said)

    def test_a_duplicate_key_in_copy_keeps_its_detail_and_names(self):
        said = failing(self.cluster, "COPY keyed FROM PROGRAM 'echo 1'")
        self.assertIn("ERROR:  23505: duplicate key value violates unique constraint "
                      '"keyed_pkey"', said)
        self.assertIn("DETAIL:  Key (id)=(1) already exists.", said)
        # The fields clients map errors with.
        self.assertIn("SCHEMA NAME:  public", said)
        self.assertIn("TABLE NAME:  keyed", said)
        self.assertIn("CONSTRAINT NAME:  keyed_pkey", said)
        self.assertRegex(said, r"LOCATION:  \w+, nbtinsert\.c:\d+")
        self.assert_no_backtrace(said)

    def test_cosid_errors_carry_no_backtrace(self):
        # cosid's own refusal in the hook, two from inside functions of cosid, and an error
        # PostgreSQL raises inside one (its INSERT in a read-only transaction).
        for sql, sqlstate in (("DROP DATABASE postgres", "55006"),
                              ("SELECT cosid_next('no_such_generator')", "42704"),
                              ("SELECT cosid_decode(-1)", "22003"),
                              ("BEGIN READ ONLY; SELECT cosid_create_generator('read_only', "
                               "'millisecond', namespace => 'read_only')", "25006")):
            with self.subTest(sql=sql):
                said = failing(self.cluster, sql, db="template1" if "DROP" in sql
                               else "postgres")
                self.assertIn(f"ERROR:  {sqlstate}:", said)
                self.assert_no_backtrace(said)
