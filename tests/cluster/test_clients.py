"""The examples of docs/clients.md run with the clients themselves against a real cosid server,
and what the document says of them checked: the ids each client returns are the ones the table
holds (compared as decimal strings), the tables the ORMs make take their key's default from
cosid_next(), and the pitfalls happen as written.

The code tested is the document's own: each ```python, ```js or ```ts block marked with
`<!-- test: client NAME -->` just before it (the block may be indented in a list) is read from
docs/clients.md and run inside a small harness of its client (tests/clients/python_examples.py,
tests/clients/js_examples.js), which makes the tables through the client's own schema creation,
inserts rows, and prints what it measured as JSON; the assertions are here.

The clients are installed by scripts/setup.sh into target/clients: the Python ones with pip
--target into target/clients/python, the JavaScript ones from tests/clients/package-lock.json
with npm ci into target/clients/node. Their behaviour does not depend on the server's major
version: the test runs on PostgreSQL 15 only.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
import unittest

from helpers.pgcluster import PG_MAJOR, ROOT, Cluster, ClusterTest, free_port, wait_for

DOC = ROOT / "docs" / "clients.md"
CLIENTS = ROOT / "tests" / "clients"
PYTHON_CLIENTS = ROOT / "target" / "clients" / "python"
NODE_CLIENTS = ROOT / "target" / "clients" / "node"
NODE_MODULES = NODE_CLIENTS / "node_modules"

# A fenced block, indented or not, with its marker comment just before it.
BLOCK = re.compile(r"^([ \t]*)<!--\s*test:\s*client\s+([\w ]+?)\s*-->\s*\n\1```(\w+)[^\n]*\n"
                   r"(.*?)^\1```[ \t]*$", re.M | re.S)


def client_blocks(doc=DOC):
    """The marked blocks of the document, by name, their indentation removed."""
    blocks = {}
    for match in BLOCK.finditer(doc.read_text()):
        indent, name, _lang, text = match.groups()
        lines = [line[len(indent):] if line.startswith(indent) else line
                 for line in text.splitlines()]
        blocks[name.replace(" ", "_")] = "\n".join(lines) + "\n"
    return blocks


def exact(test, out, what):
    """The ids returned are the table's, as decimal strings, and there are some."""
    test.assertTrue(out["returned"], f"{what}: no id returned")
    test.assertEqual(sorted(out["returned"]), sorted(out["table"]),
                     f"{what}: the ids returned are not the ones the table holds")
    test.assertTrue(all(re.fullmatch(r"[1-9]\d{17}", i) for i in out["returned"]),
                    f"{what}: not 18-digit ids of the default layout: {out['returned'][:3]}")


@unittest.skipIf(PG_MAJOR != 15, "the clients do not depend on the server's major: run on 15")
class Clients(ClusterTest):
    @classmethod
    def setUpClass(cls):
        cls.blocks = client_blocks()
        cls.cluster = Cluster("clients", free_port(25870)).init()
        cls.cluster.start()
        try:
            cls.cluster.query("CREATE EXTENSION cosid")
            # The JavaScript section's safe_js generator, and Drizzle's named one.
            cls.cluster.query("SELECT cosid_create_generator('web', 'safe_js')")
            cls.cluster.query("SELECT cosid_create_generator('invoices')")
            for name in ("javascript", "sequelize", "knex", "drizzle", "typeorm", "sqlalchemy",
                         "json", "django_convert"):
                cls.cluster.query(f"CREATE DATABASE {name}")
                cls.cluster.query("CREATE EXTENSION cosid", name)
            # Django's database has no extension: its first migration creates it; nor has the one
            # drizzle-kit migrate runs on first.
            cls.cluster.query("CREATE DATABASE django")
            cls.cluster.query("CREATE DATABASE drizzle_bare")
            wait_for(lambda: cls.cluster.query(
                "SELECT bool_and(state = 'UP') AND count(*) = 3 FROM cosid.status") == "t",
                15, "the default generator, 'web' and 'invoices' UP")
            cls.work = ROOT / "target" / "clients" / "work" / str(cls.cluster.port)
            shutil.rmtree(cls.work, ignore_errors=True)
            cls.work.mkdir(parents=True)
            (cls.work / "blocks.json").write_text(json.dumps(cls.blocks))
        except BaseException:
            cls.cluster.stop(check=False)
            raise

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop(check=False)
        shutil.rmtree(cls.work, ignore_errors=True)

    def run_js(self, client):
        if not (NODE_MODULES / "pg").is_dir():
            self.fail(f"no JavaScript clients in {NODE_CLIENTS}: run scripts/setup.sh")
        node_work = NODE_CLIENTS / f"work-{self.cluster.port}-{client}"
        shutil.rmtree(node_work, ignore_errors=True)
        node_work.mkdir()
        self.addCleanup(shutil.rmtree, node_work, ignore_errors=True)
        return self.run_harness(
            client, ["node", str(CLIENTS / "js_examples.js"), client, str(self.cluster.port),
                     str(self.work / "blocks.json"), str(node_work)],
            {"NODE_PATH": str(NODE_MODULES)}, cwd=node_work)

    def run_python(self, client, work=None):
        """Runs the harness for `client` in a folder of its own, or in `work`'s (a second
        process of the same app)."""
        if not (PYTHON_CLIENTS / "sqlalchemy").is_dir():
            self.fail(f"no Python clients in {PYTHON_CLIENTS}: run scripts/setup.sh")
        python_work = self.work / (work or client)
        python_work.mkdir(exist_ok=work is not None)
        return self.run_harness(
            client, [sys.executable, str(CLIENTS / "python_examples.py"), client,
                     str(self.cluster.port), str(self.work / "blocks.json"), str(python_work)],
            {"PYTHONPATH": str(PYTHON_CLIENTS)}, cwd=python_work)

    def run_harness(self, client, command, env, cwd):
        started = time.monotonic()
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, timeout=300, cwd=cwd, env={**os.environ, **env})
        if result.returncode != 0:
            self.fail(f"{client}: the harness failed ({result.returncode}):\n"
                      f"{result.stderr[-4000:]}")
        out = json.loads(result.stdout.strip().splitlines()[-1])
        print(f"\n{client}: {time.monotonic() - started:.1f} s", file=sys.stderr)
        return out

    def test_blocks_found(self):
        """Every marked block is found, and every block the harnesses run is marked."""
        self.assertEqual(sorted(self.blocks), sorted([
            "sqlalchemy", "sqlalchemy_insert", "django", "django_migration", "django_convert",
            "sequelize",
            "knex", "drizzle", "typeorm"]))
        marked = len(re.findall(r"<!--\s*test:\s*client\b", DOC.read_text()))
        self.assertEqual(marked, len(self.blocks), "a marker not followed by its block")

    # -- JavaScript -------------------------------------------------------------------------------

    def test_javascript(self):
        """node-postgres returns strings, exact; BigInt is exact but JSON.stringify refuses it;
        Number gives other ids; ids inside json are rounded; safe_js ids are exact as Number."""
        out = self.run_js("javascript")
        self.assertEqual(out["types"], ["string"])
        exact(self, out, "node-postgres")
        number = out["through_number"]
        print(f"Number(id) as the parameter, 1,000 ids: {number['own']} own row, "
              f"{number['another']} another, {number['none']} none", file=sys.stderr)
        self.assertEqual(sum(number.values()), 1000)
        # The document: about 1 in 128 found its own row (the one whose id is the shortest
        # decimal of the double), the others another row or none.
        self.assertLess(number["own"], 20)
        self.assertGreater(number["another"], 0)
        self.assertEqual(out["through_bigint"], {"own": 1000, "another": 0, "none": 0})
        self.assertEqual(out["bigint_json"], "TypeError: Do not know how to serialize a BigInt")
        self.assertEqual(out["bigint_json_replacer"], json.dumps({"id": out["first_id"]},
                                                                 separators=(",", ":")))
        # json_build_object and row_to_json: parsed by JSON.parse, rounded.
        self.assertLess(out["json_exact"], 10)
        self.assertLess(out["row_to_json_exact"], 10)
        # safe_js: still strings by default, exact as Number with a type parser.
        self.assertEqual(out["safe_js_types"], ["string"])
        self.assertEqual(out["safe_js_number_types"], ["number"])
        self.assertTrue(out["safe_js_max_below_2_53"])
        self.assertEqual(out["safe_js_through_number"], {"own": 1000, "another": 0, "none": 0})

    def test_sequelize(self):
        out = self.run_js("sequelize")
        self.assertIn('"id" BIGINT DEFAULT cosid_next()', out["create_table"])
        self.assertEqual(out["column"]["column_default"], "cosid_next()")
        self.assertEqual(out["types"], ["string"])
        exact(self, out, "Sequelize create() and bulkCreate()")
        self.assertIn('"id"  BIGSERIAL', out["auto_increment_table"])
        self.assertIn("multiple default values specified", out["auto_increment_and_default"])

    def test_knex(self):
        out = self.run_js("knex")
        self.assertEqual(out["column"]["column_default"], "cosid_next()")
        self.assertEqual(out["column"]["data_type"], "bigint")
        self.assertEqual(out["types"], ["string"])
        self.assertEqual(len(out["returned"]), 2)
        exact(self, out, "Knex insert().returning('id')")
        self.assertIn("bigserial", out["big_increments"])

    def test_drizzle(self):
        out = self.run_js("drizzle")
        # drizzle-kit push makes the table, with and without schemaFilter; a second push changes
        # nothing with the argument written as PostgreSQL shows it back, and something every
        # time without.
        for push in ("push", "push_filtered", "push_plain", "push_plain_again", "push_again"):
            self.assertEqual(out[push]["status"], 0, f"{push}: {out[push]['output']}")
        self.assertIn("Changes applied", out["push"]["output"])
        self.assertIn("No changes detected", out["push_filtered"]["output"])
        self.assertTrue(out["plain_default_changed"])
        self.assertIn("Changes applied", out["push_plain"]["output"])
        self.assertIn("Changes applied", out["push_plain_again"]["output"])
        self.assertIn("No changes detected", out["push_again"]["output"])
        self.assertEqual(out["column"]["column_default"], "cosid_next('invoices'::text)")
        # migrate without the extension: status 1 and no message; with it, applied.
        self.assertEqual(out["generate"]["status"], 0, out["generate"]["output"])
        self.assertEqual(out["migrate_bare"]["status"], 1, out["migrate_bare"]["output"])
        self.assertNotRegex(out["migrate_bare"]["output"], r"cosid|ERROR|rror:|does not exist")
        self.assertEqual(out["migrate_with_extension"]["status"], 0,
                         out["migrate_with_extension"]["output"])
        # The custom type: strings, exact, 1,000 of 1,000 found again, JSON as strings.
        self.assertEqual(out["types"], ["string"])
        self.assertEqual(len(out["returned"]), 1000)
        exact(self, out, "Drizzle's custom type")
        self.assertEqual(out["custom_type_found"], 1000)
        self.assertRegex(out["json"], r'^\{"id":"\d{18}"')
        number, bigint = out["modes"]["number"], out["modes"]["bigint"]
        print(f"Drizzle mode 'number', 1,000 ids looked up again: {number['found']['own']} own "
              f"row, {number['found']['another']} another, {number['found']['none']} none",
              file=sys.stderr)
        self.assertEqual(number["types"], ["number"])
        self.assertLess(number["found"]["own"], 20)
        self.assertGreater(number["found"]["another"], 0)
        self.assertEqual(bigint["types"], ["bigint"])
        self.assertEqual(bigint["found"], {"own": 1000, "another": 0, "none": 0})
        self.assertEqual(bigint["json"], "TypeError: Do not know how to serialize a BigInt")

    def test_typeorm(self):
        out = self.run_js("typeorm")
        self.assertIn('"id" bigint NOT NULL DEFAULT cosid_next()', out["create_table"])
        self.assertEqual(out["column"]["column_default"], "cosid_next()")
        self.assertEqual(out["second_synchronize"], [])
        self.assertEqual(len(out["inserts"]), 3)
        for insert in out["inserts"]:
            self.assertRegex(insert, r'VALUES \(DEFAULT, \$1\).* RETURNING "id"$')
        self.assertEqual(out["types"], ["string"])
        self.assertEqual(len(out["returned"]), 5)
        exact(self, out, "TypeORM save() and insert()")

    # -- Python -----------------------------------------------------------------------------------

    def test_sqlalchemy(self):
        out = self.run_python("sqlalchemy")
        self.assertEqual(out["create_table"], [
            "CREATE TABLE orders ( id BIGINT DEFAULT cosid_next() NOT NULL, "
            "item VARCHAR NOT NULL, PRIMARY KEY (id) )"])
        for variant, ddl in out["variants"].items():
            self.assertIn("id BIGSERIAL NOT NULL", ddl, variant)
            self.assertNotIn("cosid_next", ddl, variant)
        self.assertEqual(out["types"], ["int"])
        self.assertEqual(out["unit_of_work_statements"], 100)
        self.assertEqual(out["insert_statements"], 1)
        self.assertEqual(out["insert_ids"], 2)
        self.assertEqual(out["insert_2500_statements"], 3)
        self.assertEqual(len(out["returned"]), 2602)
        exact(self, out, "SQLAlchemy")

    def test_django(self):
        out = self.run_python("django")
        # The document's CreateExtension migration comes first, and creates the extension in a
        # database that had none.
        self.assertEqual(out["migrations"][0], "0001_initial.py")
        self.assertEqual(len(out["migrations"]), 2)
        self.assertTrue(out["extension"])
        self.assertIn('"id" bigint DEFAULT (cosid_next()) NOT NULL PRIMARY KEY', out["sqlmigrate"])
        self.assertEqual(out["column_default"], "cosid_next()")
        self.assertEqual(out["types"], ["int"])
        exact(self, out, "Django save() and create()")
        # bulk_create: pk stays DatabaseDefault, a later save() inserts a second row, and a row
        # that refers to one fails.
        self.assertEqual(out["bulk_pk_type"], "DatabaseDefault")
        self.assertEqual(out["rows_added_by_save_after_bulk"], 1)
        self.assertEqual(out["b1_rows"], 2)
        self.assertRegex(out["line_of_bulk_created"],
                         r'^IntegrityError: null value in column "order_id"')

    def test_django_convert(self):
        """The document's migration moves a BigAutoField table with rows to cosid: Django's
        state agrees with the model (makemigrations finds nothing), the identity is gone, the
        default is cosid_next(), the old rows keep their ids and a new one is above them."""
        before = self.run_python("django_convert_before")
        self.assertEqual(before["migrations"], ["0001_initial.py"])
        self.assertEqual(before["table"], ["1", "2", "3"])
        out = self.run_python("django_convert", work="django_convert_before")
        self.assertEqual(out["makemigrations"], "no changes")
        self.assertEqual(out["column_default"], "cosid_next()")
        self.assertEqual(out["identity"], "")
        self.assertGreater(int(out["new_id"]), 3)
        self.assertEqual(sorted(out["table"], key=int), ["1", "2", "3", out["new_id"]])

    def test_ids_in_json_from_python(self):
        """json.dumps writes the exact id; JavaScript's JSON.parse rounds it."""
        out = self.run_python("json")
        self.assertEqual(out["type"], "int")
        self.assertEqual(out["json"], f'{{"id": {out["id"]}}}')
        parsed = subprocess.run(["node", "-e", "process.stdout.write(String(JSON.parse("
                                 "process.argv[1]).id))", out["json"]],
                                stdout=subprocess.PIPE, text=True, check=True).stdout
        print(f"JSON.parse of {out['json']}: {parsed}", file=sys.stderr)
        self.assertNotEqual(parsed, out["id"])
        self.assertEqual(int(parsed) % 100, 0)
        self.assertEqual(out["str_json"], f'{{"id": "{out["id"]}"}}')
