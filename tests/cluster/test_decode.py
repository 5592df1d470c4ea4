"""cosid_decode updated from the set-returning function of 0.3.0 to one value of type
cosid.decoded per call, and a comment on every object of the extension, against a real server:

- the SQL of 0.3.0 (set-returning, through the old C symbols) keeps working on this library, and
  after ALTER EXTENSION cosid UPDATE the new functions give the same parts for CosId's test
  vectors of the four layouts (tests/vectors/cosid-layouts.json);
- the update refuses, and changes nothing, while a view or a function depends on cosid_decode;
- every member of the extension has a catalog comment, after CREATE EXTENSION and after an
  update, and the check names a member that has none."""

import json
import unittest

from helpers.old_versions import install_old_scripts
from helpers.pgcluster import ROOT, Cluster, SqlError, free_port, wait_for_answer

VECTORS = json.loads((ROOT / "tests" / "vectors" / "cosid-layouts.json").read_text())["layouts"]
# CosId's own test vector in the default layout, on a server with machine id 5.
VECTOR_ID = 295913926632165376
VECTOR_PARTS = ["2022-03-20 05:36:17.924+00", "5", "0"]

# Every member of the extension without a catalog comment, described as \dx+ does. Any kind:
# functions, views, tables, types, the schema, and whatever other parts add.
MISSING_COMMENTS = """
SELECT pg_describe_object(d.classid, d.objid, 0)
  FROM pg_depend d
 WHERE d.refclassid = 'pg_extension'::regclass
   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'cosid')
   AND d.deptype = 'e'
   AND obj_description(d.objid, d.classid::regclass::text) IS NULL
   -- PostgreSQL 18 also records as members the types made implicitly with a table or view (its
   -- row type) and with every type (its array type); they have no comment of their own.
   AND NOT EXISTS (SELECT FROM pg_type t LEFT JOIN pg_class c ON c.oid = t.typrelid
                    WHERE d.classid = 'pg_type'::regclass AND t.oid = d.objid
                      AND ((t.typcategory = 'A' AND t.typelem <> 0)
                           OR (t.typrelid <> 0 AND c.relkind <> 'c')))
 ORDER BY 1"""


def decode_functions(cluster, db):
    """cosid_decode's forms: signature, result type, whether it returns a set, and its labels."""
    return cluster.rows(
        "SELECT p.oid::regprocedure, p.prorettype::regtype, p.proretset, p.provolatile, "
        "p.proisstrict, p.proparallel FROM pg_proc p WHERE p.proname = 'cosid_decode' "
        "ORDER BY 1::text", db)


class Decode(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster("decode", free_port(25780),
                              {"cosid.distributor": "manual", "cosid.machine_id": 5}).init()
        cls.cluster.start()
        cls.cluster.query("CREATE EXTENSION cosid")
        cls.cluster.query("SET timezone = 'UTC'")
        cls.cluster.query("ALTER DATABASE postgres SET timezone = 'UTC'")
        for layout in VECTORS:
            cls.cluster.query(f"SELECT cosid_create_generator('v_{layout}', '{layout}')")
        # Named generators are known everywhere within about a second: until then the name is
        # unknown (42704) or, while the worker has not read the new definitions, not known yet
        # (55P03).
        for layout in VECTORS:
            wait_for_answer(cls.cluster, f"SELECT cosid_timestamp(0, 'v_{layout}')",
                            {"42704", "55P03"})

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    def database(self, name, version=None):
        """A new database with cosid, of this version or the one given."""
        self.cluster.query(f"DROP DATABASE IF EXISTS {name}")
        self.cluster.query(f"CREATE DATABASE {name}")
        self.cluster.query(f"ALTER DATABASE {name} SET timezone = 'UTC'")
        if version:
            install_old_scripts()
        self.cluster.query("CREATE EXTENSION cosid" + (f" VERSION '{version}'" if version else ""),
                           name)
        return name

    def vector_parts(self, db, form):
        """Each test vector's id decoded by the named generator of its layout, and by the default
        generator for the millisecond layout's ids, in `form` ('from' or 'value'): rows of
        [kind, n, ts, ts in Unix ms, machine_id, sequence]."""
        values = ",\n".join(
            f"({n}, {v['id']}::bigint, 'v_{layout}')"
            for index, (layout, cosid) in enumerate(VECTORS.items())
            for n, v in enumerate(cosid["vectors"], start=1000 * index))
        named, default = {
            "from": ("SELECT v.n, d.* FROM vectors v, cosid_decode(v.id, v.g) d",
                     "SELECT v.n, d.* FROM vectors v, cosid_decode(v.id) d "
                     "WHERE v.g = 'v_millisecond'"),
            "value": ("SELECT v.n, (cosid_decode(v.id, v.g)).* FROM vectors v",
                      "SELECT v.n, (cosid_decode(v.id)).* FROM vectors v "
                      "WHERE v.g = 'v_millisecond'"),
        }[form]
        return self.cluster.rows(
            f"CREATE TEMP VIEW vectors AS SELECT * FROM (VALUES {values}) v(n, id, g);\n"
            "SELECT kind, n, ts, (extract(epoch FROM ts) * 1000)::bigint, machine_id, sequence "
            f"FROM (SELECT 'named', * FROM ({named}) a UNION ALL "
            f"SELECT 'default', * FROM ({default}) b) x(kind, n, ts, machine_id, sequence) "
            "ORDER BY 1, 2", db)

    def test_same_parts_as_0_3_0_for_the_test_vectors(self):
        db = self.database("decode_from_030", "0.3.0")
        # The SQL of 0.3.0 runs on this library: set-returning, through the old C symbols.
        self.assertEqual([row[1:3] for row in decode_functions(self.cluster, db)],
                         [["record", "t"], ["record", "t"]])
        before = self.vector_parts(db, "from")
        self.cluster.query("ALTER EXTENSION cosid UPDATE", db)
        self.assertEqual([row[1:3] for row in decode_functions(self.cluster, db)],
                         [["cosid.decoded", "f"], ["cosid.decoded", "f"]])
        self.assertEqual(self.vector_parts(db, "from"), before)
        self.assertEqual(self.vector_parts(db, "value"), before)
        # And they are CosId's.
        expected = []
        for index, (layout, cosid) in enumerate(VECTORS.items()):
            for n, v in enumerate(cosid["vectors"], start=1000 * index):
                parts = [v["timestamp_ms"], v["machine_id"], v["sequence"]]
                expected.append(["named", n, *parts])
                if layout == "millisecond":
                    expected.append(["default", n, *parts])
        got = [[kind, int(n), int(ms), int(machine), int(sequence)]
               for kind, n, _, ms, machine, sequence in before]
        self.assertEqual(sorted(got), sorted(expected))
        self.assertGreaterEqual(len(got), 32)

    def test_update_refuses_while_objects_depend_on_cosid_decode(self):
        db = self.database("decode_dependents", "0.3.0")
        self.cluster.query(
            "CREATE TABLE orders (id bigint); "
            f"INSERT INTO orders VALUES ({VECTOR_ID}), (NULL); "
            "CREATE VIEW order_parts AS SELECT o.id, d.* FROM orders o, cosid_decode(o.id) d; "
            "CREATE FUNCTION machine_of(bigint) RETURNS integer "
            "BEGIN ATOMIC SELECT machine_id FROM cosid_decode($1, 'default'); END", db)
        with self.assertRaises(SqlError) as raised:
            self.cluster.query("ALTER EXTENSION cosid UPDATE", db)
        self.assertEqual(raised.exception.sqlstate, "2BP01")
        self.assertIn("cannot update cosid while other objects depend on cosid_decode",
                      raised.exception.message)
        self.assertIn("These objects depend on it: function public.machine_of(bigint), "
                      "view public.order_parts.", raised.exception.stderr)
        self.assertIn("Nothing was changed.", raised.exception.stderr)
        # Nothing was: 0.3.0, its functions, and the view as it was (NULL ids dropped).
        self.assertEqual(self.cluster.query(
            "SELECT extversion FROM pg_extension WHERE extname = 'cosid'", db), "0.3.0")
        self.assertEqual(self.cluster.rows("SELECT * FROM order_parts", db),
                         [[str(VECTOR_ID), *VECTOR_PARTS]])
        self.assertEqual(self.cluster.query("SELECT machine_of(0)", db), "0")
        # Dropped, updated and created again, the same definitions keep every row.
        self.cluster.query("DROP VIEW order_parts; DROP FUNCTION machine_of(bigint)", db)
        self.cluster.query("ALTER EXTENSION cosid UPDATE", db)
        self.cluster.query(
            "CREATE VIEW order_parts AS SELECT o.id, d.* FROM orders o, cosid_decode(o.id) d; "
            "CREATE FUNCTION machine_of(bigint) RETURNS integer "
            "BEGIN ATOMIC SELECT machine_id FROM cosid_decode($1, 'default'); END", db)
        self.assertEqual(self.cluster.rows("SELECT * FROM order_parts ORDER BY id", db),
                         [[str(VECTOR_ID), *VECTOR_PARTS], ["", "", "", ""]])
        self.assertEqual(self.cluster.query(f"SELECT machine_of({VECTOR_ID})", db), "5")
        # From 0.4.0 on, a DEFAULT may use it (a set-returning function may not).
        self.cluster.query("CREATE TABLE stamped (id bigint DEFAULT cosid_next(), "
                           "machine integer DEFAULT (cosid_decode(cosid_next())).machine_id)", db)
        self.cluster.query("INSERT INTO stamped DEFAULT VALUES", db)
        self.assertEqual(self.cluster.query("SELECT machine FROM stamped", db), "5")

    def test_every_member_of_the_extension_has_a_comment(self):
        self.assertEqual(self.cluster.rows(MISSING_COMMENTS), [])
        self.assertGreaterEqual(int(self.cluster.query(
            "SELECT count(*) FROM pg_depend WHERE deptype = 'e' AND refobjid = "
            "(SELECT oid FROM pg_extension WHERE extname = 'cosid')")), 38)
        for version in ["0.1.0", "0.3.0"]:
            with self.subTest(updated_from=version):
                db = self.database("comments_from_" + version.replace(".", ""), version)
                self.assertNotEqual(self.cluster.rows(MISSING_COMMENTS, db), [],
                                    "the check finds nothing to check")
                self.cluster.query("ALTER EXTENSION cosid UPDATE", db)
                self.assertEqual(self.cluster.rows(MISSING_COMMENTS, db), [])
        # The check names what has no comment: one taken away, and a new member without one.
        db = self.database("comments_missing")
        self.cluster.query(
            "COMMENT ON FUNCTION cosid_next() IS NULL; COMMENT ON SCHEMA cosid IS NULL; "
            "CREATE TYPE cosid.extra AS (a integer); ALTER EXTENSION cosid ADD TYPE cosid.extra; "
            "CREATE VIEW cosid.extra_view AS SELECT 1 AS one; "
            "ALTER EXTENSION cosid ADD VIEW cosid.extra_view", db)
        self.assertEqual(self.cluster.rows(MISSING_COMMENTS, db),
                         [["function cosid_next()"], ["schema cosid"], ["type cosid.extra"],
                          ["view cosid.extra_view"]])


if __name__ == "__main__":
    unittest.main()
