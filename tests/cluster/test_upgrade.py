"""Upgrades from the previous release (0.1.0), against real servers:

- the SQL of 0.1.0 updated with ALTER EXTENSION cosid UPDATE equals a fresh install of this
  version, object by object (definitions, columns, constraints, triggers, owners, privileges,
  comments, the extension's members and its dumped tables);
- a server running the library of 0.1.0, generating under load and killed (-9), restarted onto
  this library: refused with a clear error until ALTER EXTENSION cosid UPDATE, then generating
  again into the same table's DEFAULT cosid_next(), with no duplicate and no id below what 0.1.0
  issued;
- a shared lease store of 0.1.0 updated while two servers of 0.1.0 hold leases and generate:
  they keep renewing through the update, one is then restarted onto this library, and nothing
  is issued twice;
- the store's install and update scripts refuse to run over a store that has them already.

The library of 0.1.0 is built from its commit (once; kept in target/old-versions; see
helpers/old_versions.py, which `make test` runs before the suite) and loaded
through dynamic_library_path, so that this version's files stay installed meanwhile. 0.1.0 was
released for PostgreSQL 15 only: on other versions the tests that run its library are skipped,
and the others run."""

import subprocess
import time
import unittest

from helpers.clients import LoopingClients, run_session
from helpers.fleet import FLEET_ROLE, LEASE_SQL, fleet_server, start_store
from helpers.leases import FAST_LEASES, machine_of, status, ts_ms_of, wait_up
from helpers.made_sql import MADE_SQL, made_sql
from helpers.old_versions import (EXTENSION_DIR, PREVIOUS, PREVIOUS_COMMIT, SQL_COMMITS,
                                  install_old_scripts, old_sql, previous_library)
from helpers.pgcluster import (PG_CONFIG, ROOT, Cluster, ClusterTest, SqlError,
                               free_port, query_as, wait_for)

CURRENT = next(line.split('"')[1] for line in (ROOT / "Cargo.toml").read_text().splitlines()
               if line.startswith("version = "))
# The lease store's versions and update scripts (made from sql/updates/), oldest first: a store
# is updated one version at a time.
STORE_VERSION = "0.5.0"
STORE_UPDATES = [made_sql(f"lease_store--{a}--{b}.sql")
                 for a, b in [("0.1.0", "0.2.0"), ("0.2.0", "0.3.0"), ("0.3.0", "0.4.0"),
                              ("0.4.0", "0.5.0")]]
PG_MAJOR = subprocess.check_output([PG_CONFIG, "--version"], text=True).split()[1].split(".")[0]

# Everything cosid's SQL defines, one sorted line per fact, so that two databases compare
# line by line. Privileges are exploded and sorted, so that their order cannot differ.
CATALOG_SQL = r"""
WITH ext AS (SELECT oid, extversion, extconfig, extcondition FROM pg_extension
              WHERE extname = 'cosid'),
     ns AS (SELECT oid FROM pg_namespace WHERE nspname = 'cosid'),
     members AS (SELECT d.classid, d.objid FROM pg_depend d, ext
                  WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid
                    AND d.deptype = 'e'),
     funcs AS (SELECT p.oid FROM pg_proc p
                WHERE p.pronamespace IN (SELECT oid FROM ns)
                   OR p.oid IN (SELECT objid FROM members WHERE classid = 'pg_proc'::regclass)),
     rels AS (SELECT c.oid FROM pg_class c WHERE c.relnamespace IN (SELECT oid FROM ns))
SELECT line FROM (
  SELECT 'extension version ' || extversion AS line FROM ext
  UNION ALL SELECT 'extension dumps ' || coalesce((SELECT string_agg(c::regclass::text, ',')
                                                   FROM unnest(extconfig) c), '')
                   || ' where ' || coalesce(array_to_string(extcondition, ','), '') FROM ext
  UNION ALL SELECT 'member ' || pg_describe_object(classid, objid, 0) FROM members
  UNION ALL SELECT 'schema owner ' || nspowner::regrole || ' comment '
                   || coalesce(obj_description(oid, 'pg_namespace'), '')
              FROM pg_namespace WHERE oid IN (SELECT oid FROM ns)
  UNION ALL SELECT 'schema grant ' || a.grantee::regrole || ' ' || a.privilege_type
              FROM pg_namespace n, aclexplode(n.nspacl) a WHERE n.oid IN (SELECT oid FROM ns)
  UNION ALL SELECT 'function ' || p.oid::regprocedure || ' owner ' || p.proowner::regrole
                   || ' comment ' || coalesce(obj_description(p.oid, 'pg_proc'), '')
                   || E'\n' || pg_get_functiondef(p.oid)
              FROM pg_proc p WHERE p.oid IN (SELECT oid FROM funcs)
  UNION ALL SELECT 'function grant ' || p.oid::regprocedure || ' '
                   || CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END
                   || ' ' || a.privilege_type
              FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
             WHERE p.oid IN (SELECT oid FROM funcs)
  UNION ALL SELECT 'relation ' || c.oid::regclass || ' kind ' || c.relkind::text || ' owner '
                   || c.relowner::regrole || ' comment '
                   || coalesce(obj_description(c.oid, 'pg_class'), '')
                   || CASE WHEN c.relkind = 'v' THEN E'\n' || pg_get_viewdef(c.oid) ELSE '' END
              FROM pg_class c WHERE c.oid IN (SELECT oid FROM rels)
  UNION ALL SELECT 'relation grant ' || c.oid::regclass || ' '
                   || CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END
                   || ' ' || a.privilege_type
              FROM pg_class c,
                   aclexplode(coalesce(c.relacl, acldefault(CASE WHEN c.relkind = 'S' THEN 's'
                                                                ELSE 'r' END::"char",
                                                           c.relowner))) a
             WHERE c.oid IN (SELECT oid FROM rels)
  UNION ALL SELECT 'column ' || a.attrelid::regclass || ' ' || a.attnum || ' ' || a.attname
                   || ' ' || format_type(a.atttypid, a.atttypmod)
                   || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
                   || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
                   || coalesce(' comment ' || col_description(a.attrelid, a.attnum), '')
              FROM pg_attribute a
              LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
             WHERE a.attrelid IN (SELECT oid FROM rels) AND a.attnum > 0
               AND NOT a.attisdropped
  UNION ALL SELECT 'constraint ' || conrelid::regclass || ' ' || conname || ' '
                   || pg_get_constraintdef(oid)
              FROM pg_constraint WHERE conrelid IN (SELECT oid FROM rels)
  UNION ALL SELECT 'index ' || pg_get_indexdef(indexrelid)
              FROM pg_index WHERE indrelid IN (SELECT oid FROM rels)
  UNION ALL SELECT 'trigger ' || pg_get_triggerdef(oid)
              FROM pg_trigger WHERE tgrelid IN (SELECT oid FROM rels) AND NOT tgisinternal
  UNION ALL SELECT 'type ' || t.oid::regtype || ' owner ' || t.typowner::regrole || ' comment '
                   || coalesce(obj_description(t.oid, 'pg_type'), '')
              FROM pg_type t WHERE t.typnamespace IN (SELECT oid FROM ns)
) facts ORDER BY line
"""


def update_store(cluster, db="postgres"):
    """Updates a lease store of 0.1.0 to this version, one script at a time, as the README says;
    the scripts' output."""
    return "".join(update_store_from(cluster, script, db) for script in STORE_UPDATES)


def update_store_from(cluster, script, db="postgres"):
    result = subprocess.run(
        cluster.psql_command(db, "-v", "ON_ERROR_STOP=1", "--single-transaction",
                             "-f", str(script)),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert result.returncode == 0, result.stdout
    return result.stdout


def catalog(cluster, db):
    return cluster.query(CATALOG_SQL, db).split("\n")


def loaded_library(cluster):
    """The path of the cosid.so the postmaster has mapped."""
    pid = cluster.postmaster_pid()
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            if line.rstrip().endswith("/cosid.so"):
                return line.split()[-1]
    return None


def ids_of(sessions):
    return [value for session in sessions for value in session.ids]


class Upgrade(ClusterTest):
    def on_previous_library(self, cluster):
        """Points the cluster at the library of 0.1.0 (from its next start)."""
        if PG_MAJOR != "15":
            self.skipTest(f"cosid {PREVIOUS} was released for PostgreSQL 15 only")
        directory = previous_library()
        if directory is None:
            self.skipTest(f"commit {PREVIOUS_COMMIT} of cosid {PREVIOUS} is not in this clone")
        cluster.settings["dynamic_library_path"] = f"'{directory}:$libdir'"
        cluster.write_settings()
        return directory

    def on_this_library(self, cluster):
        cluster.settings.pop("dynamic_library_path", None)
        cluster.write_settings()

    def test_updated_schema_equals_a_fresh_install(self):
        install_old_scripts()
        cluster = self.track(Cluster("upgrade-catalog", free_port(25600),
                                     {"cosid.distributor": "manual", "cosid.machine_id": 3}))
        cluster.init()
        cluster.start()
        cluster.query("CREATE DATABASE fresh")
        cluster.query("CREATE DATABASE updated")
        cluster.query("CREATE EXTENSION cosid", "fresh")
        cluster.query(f"CREATE EXTENSION cosid VERSION '{PREVIOUS}'", "updated")
        self.assertEqual(cluster.query("SELECT extversion FROM pg_extension WHERE extname = 'cosid'", "updated"), PREVIOUS)
        # The SQL of 0.1.0 runs on this library: its cosid.status has its own shape.
        self.assertEqual(len(cluster.rows("SELECT * FROM cosid.status", "updated")[0]), 20)
        before = catalog(cluster, "updated")
        cluster.query("ALTER EXTENSION cosid UPDATE", "updated")
        fresh, updated = catalog(cluster, "fresh"), catalog(cluster, "updated")
        self.assertIn(f"extension version {CURRENT}", fresh)
        self.assertNotEqual(before, fresh, "the test compares nothing")
        self.assertEqual(updated, fresh)
        self.assertEqual(len(cluster.rows("SELECT * FROM cosid.status", "updated")[0]), 29)
        # From 0.2.0, whose install script is kept: the same catalog as a fresh install.
        cluster.query("CREATE DATABASE from_020")
        cluster.query("CREATE EXTENSION cosid VERSION '0.2.0'", "from_020")
        self.assertEqual(len(cluster.rows("SELECT * FROM cosid.status", "from_020")[0]), 24)
        before = catalog(cluster, "from_020")
        cluster.query("ALTER EXTENSION cosid UPDATE", "from_020")
        self.assertNotEqual(before, fresh, "the test compares nothing")
        self.assertEqual(catalog(cluster, "from_020"), fresh)
        # From 0.3.0, whose install script is kept.
        cluster.query("CREATE DATABASE from_030")
        cluster.query("CREATE EXTENSION cosid VERSION '0.3.0'", "from_030")
        self.assertEqual(len(cluster.rows("SELECT * FROM cosid.status", "from_030")[0]), 25)
        # What users built on cosid.status, for their monitoring, survives the update: the view
        # gains its new columns in place.
        cluster.query("CREATE VIEW public.cosid_health AS "
                      "SELECT name, machine_id FROM cosid.status", "from_030")
        cluster.query("CREATE FUNCTION public.cosid_machine() RETURNS integer LANGUAGE sql "
                      "BEGIN ATOMIC SELECT machine_id FROM cosid.status WHERE name = 'default'; "
                      "END", "from_030")
        # Another superuser is sent to the owner of schema cosid: what the update creates belongs
        # to the role that runs it, and must not be split between two.
        cluster.query("CREATE ROLE dba SUPERUSER LOGIN")
        with self.assertRaises(SqlError) as refused:
            query_as(cluster, "dba", "ALTER EXTENSION cosid UPDATE", db="from_030")
        self.assertEqual(refused.exception.sqlstate, "42501", refused.exception.stderr)
        self.assertIn("DETAIL:  Schema cosid belongs to role postgres.", refused.exception.stderr)
        self.assertIn("HINT:  Update as role postgres: SET ROLE postgres; then run the update "
                      "again.", refused.exception.stderr)
        query_as(cluster, "dba", "SET ROLE postgres; ALTER EXTENSION cosid UPDATE", db="from_030")
        self.assertEqual(catalog(cluster, "from_030"), fresh)
        self.assertEqual(cluster.rows("SELECT * FROM public.cosid_health", "from_030"),
                         [["default", "3"]])
        self.assertEqual(cluster.query("SELECT public.cosid_machine()", "from_030"), "3")
        self.assertEqual(cluster.rows("SELECT name, deadline IS NULL FROM cosid.status",
                                      "from_030"), [["default", "t"]])
        # From 0.4.0: its cosid.status, of 27 columns, is served until the update.
        cluster.query("CREATE DATABASE from_040")
        cluster.query("CREATE EXTENSION cosid VERSION '0.4.0'", "from_040")
        self.assertEqual(len(cluster.rows("SELECT * FROM cosid.status", "from_040")[0]), 27)
        cluster.query("ALTER EXTENSION cosid UPDATE", "from_040")
        self.assertEqual(catalog(cluster, "from_040"), fresh)
        cosid_next = int(cluster.query("SELECT cosid_next()", "updated"))
        self.assertEqual(machine_of(cosid_next), 3)

    def test_a_status_function_of_a_shape_no_version_declared_is_refused(self):
        # The library fills the columns the calling SQL declares, by name: a declaration that is
        # no version's is refused, never filled with other columns' values.
        cluster = self.track(Cluster("upgrade-shape", free_port(25602),
                                     {"cosid.distributor": "manual", "cosid.machine_id": 3}))
        cluster.init()
        cluster.start()
        cluster.query("CREATE EXTENSION cosid")
        columns = cluster.query("SELECT pg_get_function_result('cosid.generator_status()'"
                                "::regprocedure)")
        shapes = {
            "an unknown column": columns.replace("problem text", "bogus text"),
            "a column of another type": columns.replace("problem text", "problem integer"),
            "a column left out": columns.replace(", problem text", ""),
            "columns in another order": columns.replace("(name text, namespace text",
                                                        "(namespace text, name text", 1),
        }
        for what, shape in shapes.items():
            self.assertNotEqual(shape, columns, what)
            cluster.query("CREATE FUNCTION public.tampered() RETURNS " + shape + " LANGUAGE c "
                          "AS '$libdir/cosid', 'generator_status_v5_wrapper'")
            with self.assertRaises(SqlError, msg=what) as refused:
                cluster.query("SELECT * FROM public.tampered()")
            self.assertEqual(refused.exception.sqlstate, "42804", refused.exception.stderr)
            self.assertIn("is not declared as any version of cosid declares it",
                          refused.exception.stderr)
            cluster.query("DROP FUNCTION public.tampered()")
        # The declaration itself is served.
        cluster.query("CREATE FUNCTION public.tampered() RETURNS " + columns + " LANGUAGE c "
                      "AS '$libdir/cosid', 'generator_status_v5_wrapper'")
        self.assertEqual(cluster.query("SELECT name, machine_id FROM public.tampered()"),
                         "default|3")

    def test_what_users_built_on_cosid_status_survives_the_update_or_is_named(self):
        install_old_scripts()
        cluster = self.track(Cluster("upgrade-status-users", free_port(25605),
                                     {"cosid.distributor": "manual", "cosid.machine_id": 3}))
        cluster.init()
        cluster.start()
        cluster.query("CREATE EXTENSION cosid VERSION '0.3.0'")
        # Monitoring set up by hand on 0.3.0: a reader of the view needs EXECUTE on the
        # function behind it too.
        cluster.query("CREATE ROLE watcher LOGIN; GRANT USAGE ON SCHEMA cosid TO watcher; "
                      "GRANT SELECT ON cosid.status TO watcher; "
                      "GRANT EXECUTE ON FUNCTION cosid.generator_status() TO watcher")
        self.assertEqual(query_as(cluster, "watcher", "SELECT machine_id FROM cosid.status"), "3")
        # What would not survive the update: a view on the function itself, and a function
        # with a SQL-standard body returning rows of the view.
        cluster.query("CREATE VIEW raw_status AS SELECT name FROM cosid.generator_status()")
        cluster.query("CREATE FUNCTION all_status() RETURNS SETOF cosid.status LANGUAGE sql "
                      "BEGIN ATOMIC SELECT * FROM cosid.status; END")
        with self.assertRaises(SqlError) as refused:
            cluster.query("ALTER EXTENSION cosid UPDATE")
        error = refused.exception
        self.assertEqual(error.sqlstate, "2BP01", error.stderr)
        self.assertIn("view public.raw_status", error.stderr)
        self.assertIn("function public.all_status()", error.stderr)
        self.assertEqual(cluster.query(
            "SELECT extversion FROM pg_extension WHERE extname = 'cosid'"), "0.3.0")
        # Dropped, as the hint says: the update goes through, and the grant is kept.
        cluster.query("DROP VIEW raw_status; DROP FUNCTION all_status()")
        cluster.query("ALTER EXTENSION cosid UPDATE")
        self.assertEqual(query_as(cluster, "watcher", "SELECT machine_id, deadline IS NULL "
                                  "FROM cosid.status"), "3|t")
        # Only those granted by hand: nobody else calls the function.
        cluster.query("CREATE ROLE nobody LOGIN; GRANT USAGE ON SCHEMA cosid TO nobody")
        with self.assertRaises(SqlError) as refused:
            query_as(cluster, "nobody", "SELECT * FROM cosid.generator_status()")
        self.assertEqual(refused.exception.sqlstate, "42501", refused.exception.stderr)

    def test_the_update_scripts_installed_are_made_from_sql_and_carry_the_store_update(self):
        # make install puts the scripts scripts/make-sql.py makes from sql/updates/: the ones
        # this PostgreSQL has are those, every step of the chain from 0.1.0 to this version.
        versions = [*SQL_COMMITS, CURRENT]
        chain = [f"cosid--{a}--{b}.sql" for a, b in zip(versions, versions[1:])]
        self.assertEqual(sorted(path.name for path in MADE_SQL.glob("cosid--*--*.sql")), chain)
        for name in chain:
            installed = EXTENSION_DIR / name
            self.assertTrue(installed.is_file(), f"{installed} is not installed (make install)")
            self.assertEqual(installed.read_bytes(), made_sql(name).read_bytes(),
                             f"{installed} is not the one made from sql/ (make install)")
        # An update script cannot include a file: each carries its store's update whole.
        for update in STORE_UPDATES:
            name = update.name.replace("lease_store--", "cosid--")
            self.assertTrue(f"\n{update.read_text()}-- </lease store>\n"
                            in made_sql(name).read_text(),
                            f"the made {name} does not carry {update.name} whole")

    def test_the_released_update_scripts_are_made_as_released(self):
        # A database updated by a released script has its catalog: what make-sql.py makes of
        # the sources and the pieces they share must stay the script that was released.
        versions = list(SQL_COMMITS)
        for previous, version in zip(versions, versions[1:]):
            for name in [f"cosid--{previous}--{version}.sql",
                         f"lease_store--{previous}--{version}.sql"]:
                self.assertEqual(made_sql(name).read_bytes(), old_sql(name).read_bytes(), name)

    def test_server_generating_on_the_previous_version_is_updated(self):
        install_old_scripts()
        # One machine id only: the restarted server must take the same one back, after the
        # crashed lease expires, and wait for its watermark.
        # Commits survive the kill -9 (the rows inserted before it are counted at the end).
        cluster = self.track(Cluster("upgrade-server", free_port(25610),
                                     {**FAST_LEASES, "cosid.machine_bits": 0,
                                      "synchronous_commit": "on"}))
        cluster.init()
        previous_directory = self.on_previous_library(cluster)
        cluster.start()
        self.assertEqual(loaded_library(cluster), str(previous_directory / "cosid.so"))
        cluster.query(f"CREATE EXTENSION cosid VERSION '{PREVIOUS}'")
        cluster.query("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT cosid_next(), "
                      "note text)")
        wait_up(cluster)
        # Running ALTER EXTENSION UPDATE before the restart fails and changes nothing: the
        # library still loaded has no function for the new cosid.status.
        with self.assertRaises(SqlError) as refused:
            cluster.query("ALTER EXTENSION cosid UPDATE")
        self.assertEqual(refused.exception.sqlstate, "42883", refused.exception.stderr)
        self.assertIn('could not find function "generator_status_v2_wrapper"',
                      refused.exception.stderr)
        self.assertEqual(cluster.query("SELECT extversion FROM pg_extension WHERE extname = 'cosid'"), PREVIOUS)

        # Generate under load, into the table and directly, and kill the server meanwhile.
        insert = ("COPY (WITH n AS (INSERT INTO orders (note) SELECT 'x' FROM "
                  "generate_series(1, 200) RETURNING id) SELECT id FROM n) TO STDOUT")
        inserted = run_session(cluster, 99, [insert] * 5)
        self.assertFalse(inserted.error, inserted.error)
        with LoopingClients(cluster, clients=4, batch=500, batches_per_session=5) as load:
            wait_for(lambda: load.ids_so_far() > 20_000, 60, "ids from 0.1.0")
            cluster.crash()
        before = ids_of(load.sessions) + inserted.ids
        self.assertGreater(len(before), 20_000)

        # Onto this library: a restart. The generator stays closed until the SQL is updated,
        # and says so.
        self.on_this_library(cluster)
        cluster.start()
        self.assertTrue(loaded_library(cluster).endswith("/cosid.so"))
        self.assertNotEqual(loaded_library(cluster), str(previous_directory / "cosid.so"))
        crashed_watermark_ms = int(cluster.query("SELECT watermark_ms FROM cosid.machine_lease"))
        waiting = wait_for(lambda: "ALTER EXTENSION cosid UPDATE" in status(cluster)["last_error"]
                           and status(cluster), 30, "the worker to ask for the update")
        self.assertNotEqual(waiting["state"], "UP")
        with self.assertRaises(SqlError) as closed:
            cluster.query("SELECT cosid_next()")
        self.assertEqual(closed.exception.sqlstate, "55000")
        self.assertIn("ALTER EXTENSION cosid UPDATE", closed.exception.stderr)

        cluster.query("ALTER EXTENSION cosid UPDATE")
        self.assertEqual(cluster.query("SELECT extversion FROM pg_extension WHERE extname = 'cosid'"), CURRENT)
        wait_up(cluster, timeout=30)
        self.assertEqual(cluster.query(
            "SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef "
            "WHERE adrelid = 'orders'::regclass"), "cosid_next()")
        after = run_session(cluster, 100, [insert] * 5)
        self.assertFalse(after.error, after.error)
        with LoopingClients(cluster, clients=4, batch=500, batches_per_session=5) as load:
            wait_for(lambda: load.ids_so_far() > 20_000, 60, "ids from this version")
        after_ids = after.ids + ids_of(load.sessions)

        everything = before + after_ids
        self.assertEqual(len(set(everything)), len(everything), "duplicate ids")
        # Machine id 0 again: every id after the update is above the watermark the crashed
        # lease of 0.1.0 left.
        self.assertGreater(min(ts_ms_of(v, shift=12) for v in after_ids), crashed_watermark_ms)
        self.assertGreaterEqual(crashed_watermark_ms, max(ts_ms_of(v, shift=12) for v in before))
        self.assertEqual(int(cluster.query("SELECT count(*) FROM orders")), 2000)
        print(f"\n  upgrade of a running server: {len(before)} ids on {PREVIOUS}, kill -9, "
              f"{len(after_ids)} on {CURRENT} above its watermark, 0 duplicates", end=" ")

    def test_shared_store_is_updated_under_live_leases(self):
        install_old_scripts()
        store = self.track(start_store("upgrade-store", 25620,
                                       lease_sql=old_sql(f"lease_store--{PREVIOUS}.sql")))
        self.assertEqual(store.query("SELECT to_regprocedure('cosid.lease_store_version()')"), "")
        servers = []
        for index in range(2):
            server = self.track(fleet_server(f"upgrade-fleet-{index}", 25630 + 10 * index,
                                             store.port, extra=dict(FAST_LEASES)))
            self.on_previous_library(server)
            server.start()
            server.query(f"CREATE EXTENSION cosid VERSION '{PREVIOUS}'")
            servers.append(server)
        held = [int(wait_up(server, timeout=30)["machine_id"]) for server in servers]
        self.assertEqual(len(set(held)), 2)

        def renewals():
            return dict(store.rows("SELECT machine_id, renewed_at FROM cosid.machine_lease"))

        loads = [LoopingClients(server, clients=2, batch=500, batches_per_session=4)
                 for server in servers]
        for load in loads:
            load.__enter__()
        try:
            wait_for(lambda: all(load.ids_so_far() > 5_000 for load in loads), 60, "ids")
            output = update_store(store)
            self.assertIn(f"role {FLEET_ROLE} is now a member of cosid_lease_holder", output)
            self.assertEqual(store.query("SELECT cosid.lease_store_version()"), STORE_VERSION)
            # The servers of 0.1.0 keep renewing through the updated store.
            renewed = renewals()
            wait_for(lambda: all(renewals()[k] > renewed[k] for k in renewed), 15,
                     "renewals after the update")
            for server in servers:
                self.assertEqual(status(server)["state"], "UP")
            # One of them is restarted onto this library (a clean stop releases its lease).
            servers[0].stop()
            self.on_this_library(servers[0])
            servers[0].start()
            restarted = wait_up(servers[0], timeout=30)
            servers[0].query("ALTER EXTENSION cosid UPDATE")
            since = time.monotonic()
            wait_for(lambda: loads[0].ids_so_far(since) > 5_000, 60, "ids from this version")
            self.assertEqual(status(servers[1])["state"], "UP")
        finally:
            for load in loads:
                load.__exit__(None, None, None)
        everything = [value for load in loads for value in ids_of(load.sessions)]
        self.assertEqual(len(set(everything)), len(everything), "duplicate ids")
        machines = {machine_of(v) for v in ids_of(loads[1].sessions)}
        self.assertEqual(machines, {held[1]})
        self.assertNotEqual(int(restarted["machine_id"]), held[1])
        # The fleet role calls the protocol as a member of cosid_lease_holder, and has no
        # direct privilege left on the table.
        self.assertEqual(store.query(
            f"SELECT pg_has_role('{FLEET_ROLE}', 'cosid_lease_holder', 'MEMBER'), "
            f"has_table_privilege('{FLEET_ROLE}', 'cosid.machine_lease', 'SELECT')"), "t|f")
        print(f"\n  shared store updated under live leases: {len(everything)} ids, "
              "0 duplicates", end=" ")

    def test_server_waits_for_an_outdated_store_then_leases_after_its_update(self):
        store = self.track(start_store("upgrade-outdated", 25690,
                                       lease_sql=old_sql(f"lease_store--{PREVIOUS}.sql")))
        server = self.track(fleet_server("upgrade-outdated-server", 25695, store.port,
                                         extra=dict(FAST_LEASES)))
        server.start()
        server.query("CREATE EXTENSION cosid")
        waiting = wait_for(lambda: "waiting for the lease store in cosid.lease_store to be "
                           "updated" in status(server)["last_error"] and status(server), 30,
                           "the worker to refuse the store of 0.1.0")
        self.assertNotEqual(waiting["state"], "UP")
        self.assertEqual(store.query("SELECT count(*) FROM cosid.machine_lease"), "0")
        update_store(store)
        machine_id = int(wait_up(server, timeout=30)["machine_id"])
        self.assertEqual(machine_of(int(server.query("SELECT cosid_next()"))), machine_id)

    def test_store_update_keeps_every_floor_and_answers_0_1_0_as_0_1_0(self):
        store = self.track(start_store("upgrade-floors", 25660,
                                       lease_sql=old_sql(f"lease_store--{PREVIOUS}.sql")))
        now_ms = int(store.query("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint"))

        def claim_0_1_0(instance, token, watermark_ms, bits=2):
            # The statement servers of 0.1.0 send.
            return store.rows(
                "SELECT outcome, machine_id, previous_watermark_ms FROM cosid.lease_claim("
                f"'n', {bits}, '{instance}', false, 60000, '{token}', {watermark_ms})")[0]

        held = claim_0_1_0("a", "ta", now_ms + 30_000)
        released = claim_0_1_0("b", "tb", now_ms + 30_000)
        self.assertEqual(store.query(
            f"SELECT cosid.lease_release('n', {released[1]}, 'b', 'tb', {now_ms - 1_000})"), "t")
        result = subprocess.run(
            store.psql_command("postgres", "-v", "ON_ERROR_STOP=1", "--single-transaction",
                               "-f", str(STORE_UPDATES[0])),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.assertEqual(result.returncode, 0, result.stdout)
        rows = {int(m): (state, int(floor), released_ms) for m, state, floor, released_ms in store.rows(
            "SELECT machine_id, state, claim_floor_ms, released_ms FROM cosid.machine_lease")}
        # A claim of 0.1.0 counts its whole watermark as its floor; a release keeps its exact
        # last timestamp.
        self.assertEqual(rows[int(held[1])][:2], ("claimed", now_ms + 30_000))
        self.assertEqual(rows[int(released[1])][2], str(now_ms - 1_000))
        # The claim of 0.1.0 retried with its token (its answer was lost) waits for the
        # watermark, not for 0.
        retried = claim_0_1_0("a", "ta", now_ms + 30_000)
        self.assertEqual(retried[:2], ["own", held[1]])
        self.assertGreaterEqual(int(retried[2]), now_ms + 30_000)
        # Another layout is 'machine_bits' to a server of 0.1.0, never a claim.
        self.assertEqual(claim_0_1_0("d", "td", now_ms, bits=3)[0], "machine_bits")
        # A server of 0.2.0 takes the released machine id and waits for its exact release.
        taken = store.rows(
            "SELECT outcome, machine_id, previous_watermark_ms FROM cosid.lease_claim("
            f"'n', 2, 'e', false, 60000, 'te', {now_ms + 60_000}, '')")[0]
        self.assertEqual(taken, ["released", released[1], str(now_ms - 1_000)])
        # Whatever writes a new claim into a row (a function of 0.1.0 still running, an
        # operator), the row keeps the floor of what was issued before it.
        store.query(f"UPDATE cosid.machine_lease SET claim_token = 'tz', instance_id = 'z' "
                    f"WHERE machine_id = {held[1]}")
        self.assertEqual(store.rows(
            "SELECT claim_floor_ms, released_ms FROM cosid.machine_lease "
            f"WHERE machine_id = {held[1]}")[0], [str(now_ms + 30_000), ""])

    def test_updates_run_with_pg_catalog_operators_only(self):
        """A database owner (CREATE on public) plants operators that the update scripts' checks
        would pick with the extension's search_path, each making its caller's role, if a
        superuser, grant superuser to the planter."""
        install_old_scripts()
        cluster = self.track(Cluster("upgrade-operators", free_port(25670),
                                     {"cosid.distributor": "manual", "cosid.machine_id": 1}))
        cluster.init()
        cluster.start()
        cluster.query("CREATE ROLE mallory LOGIN")
        cluster.query("CREATE DATABASE victim OWNER mallory")
        planted = ["SET ROLE mallory"]
        for name, (left, right, op) in enumerate([("oid", "regrole", "<>"), ("oid", "regrole", "="),
                                                  ("oid", "regnamespace", "="),
                                                  ("oid", "integer", "<>"), ("oid", "regclass", "="),
                                                  ("name", "text", "=")]):
            planted.append(f"""
                CREATE FUNCTION public.planted_{name}(a {left}, b {right}) RETURNS boolean
                LANGUAGE plpgsql AS $$
                BEGIN
                    IF (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user) THEN
                        EXECUTE 'ALTER ROLE mallory SUPERUSER';
                    END IF;
                    RETURN a::text OPERATOR(pg_catalog.{op}) b::text;
                END $$""")
            planted.append(f"CREATE OPERATOR public.{op} (LEFTARG = {left}, RIGHTARG = {right}, "
                           f"FUNCTION = public.planted_{name})")
        cluster.query(";\n".join(planted), "victim")
        # A role of 0.1.0's store grants, so that the update's loops over grantees run too.
        cluster.query("CREATE ROLE fleet LOGIN")
        cluster.query(f"CREATE EXTENSION cosid VERSION '{PREVIOUS}'", "victim")
        cluster.query("GRANT USAGE ON SCHEMA cosid TO fleet; "
                      "GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA cosid TO fleet", "victim")
        cluster.query("ALTER EXTENSION cosid UPDATE", "victim")
        self.assertEqual(cluster.query("SELECT extversion FROM pg_extension "
                                       "WHERE extname = 'cosid'", "victim"), CURRENT)
        self.assertEqual(cluster.query("SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory'"),
                         "f", "a planted operator ran as the superuser")
        # The same for a plain store updated with psql, and for a new install.
        cluster.query("CREATE DATABASE victim_store OWNER mallory TEMPLATE victim")
        cluster.query("DROP EXTENSION cosid", "victim_store")
        subprocess.run(cluster.psql_command("victim_store", "-q", "-v", "ON_ERROR_STOP=1", "-f",
                                            str(old_sql(f"lease_store--{PREVIOUS}.sql"))),
                       check=True)
        cluster.query("GRANT USAGE ON SCHEMA cosid TO fleet; "
                      "GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA cosid TO fleet", "victim_store")
        update_store(cluster, "victim_store")
        cluster.query("CREATE DATABASE victim_new OWNER mallory TEMPLATE victim_store")
        cluster.query("DROP SCHEMA cosid CASCADE", "victim_new")
        cluster.query("CREATE EXTENSION cosid", "victim_new")
        self.assertEqual(cluster.query("SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory'"),
                         "f", "a planted operator ran as the superuser")

    def test_store_of_0_2_0_updated_keeps_a_namespace_layout_for_good(self):
        # 0.2.0 compared layouts with live leases only: once a namespace's leases had ended, a
        # server of another layout took a machine id, and its ids could equal those issued
        # before. From 0.3.0 a namespace keeps the layout of its rows, held or not.
        store = self.track(start_store("upgrade-layout", 25740,
                                       lease_sql=old_sql("lease_store--0.2.0.sql")))
        fresh = self.track(start_store("upgrade-layout-fresh", 25745))
        now_ms = int(store.query("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint"))
        a = "epoch 1577203200000 ms, millisecond, 41/10/12 bits"
        b = "epoch 1577203210000 ms, millisecond, 41/10/12 bits"

        def claim(instance, layout):
            return store.rows(
                "SELECT outcome, machine_id FROM cosid.lease_claim("
                f"'n', 10, '{instance}', false, 60000, 't{instance}', {now_ms}, '{layout}')")[0]

        outcome, machine_id = claim("first", a)
        self.assertEqual(outcome, "new")
        self.assertEqual(store.query(
            f"SELECT cosid.lease_release('n', {machine_id}, 'first', 'tfirst', {now_ms})"), "t")
        before = catalog(store, "postgres")
        for update in STORE_UPDATES[1:]:
            update_store_from(store, update)
        self.assertNotEqual(catalog(store, "postgres"), before, "the test compares nothing")
        self.assertEqual(catalog(store, "postgres"), catalog(fresh, "postgres"))
        self.assertEqual(store.query("SELECT cosid.lease_store_version()"), STORE_VERSION)
        self.assertEqual(store.query("SELECT cosid.lease_namespace_layout('n')"), a)
        # Nothing is held in the namespace, and still another layout is refused...
        self.assertEqual(claim("second", b), ["layout", ""])
        # ...while the namespace's own layout takes the released machine id.
        self.assertIn(claim("third", a)[0], ("new", "released"))

    def test_store_of_0_3_0_updated_lets_pg_monitor_read_the_leases(self):
        # 0.4.0 changes no part of the protocol: members of pg_monitor read cosid.leases.
        store = self.track(start_store("upgrade-monitor", 25750,
                                       lease_sql=old_sql("lease_store--0.3.0.sql")))
        fresh = self.track(start_store("upgrade-monitor-fresh", 25755))
        store.query("CREATE ROLE watcher LOGIN IN ROLE pg_monitor")
        with self.assertRaises(SqlError) as refused:
            query_as(store, "watcher", "SELECT count(*) FROM cosid.leases")
        self.assertEqual(refused.exception.sqlstate, "42501")
        for update in STORE_UPDATES[2:]:
            update_store_from(store, update)
        self.assertEqual(catalog(store, "postgres"), catalog(fresh, "postgres"))
        self.assertEqual(store.query("SELECT cosid.lease_store_version()"), STORE_VERSION)
        self.assertEqual(query_as(store, "watcher", "SELECT count(*) FROM cosid.leases"), "0")
        with self.assertRaises(SqlError) as refused:
            query_as(store, "watcher", "SELECT count(*) FROM cosid.machine_lease")
        self.assertEqual(refused.exception.sqlstate, "42501")

    def test_store_of_0_4_0_updated_in_place_records_its_identity_and_does_not_settle(self):
        # 0.5.0 records the store's identity: an update in place forgot nothing, so a server of
        # 0.4.0 holding a lease keeps renewing and a new claim is answered at once.
        store = self.track(start_store("upgrade-identity", 25760,
                                       lease_sql=old_sql("lease_store--0.4.0.sql")))
        fresh = self.track(start_store("upgrade-identity-fresh", 25765))
        now_ms = int(time.time() * 1000)
        claim = ("SELECT outcome FROM cosid.lease_claim('n', 2, '{0}', false, 4000, 't{0}', "
                 f"{now_ms}, 'layout a')")
        self.assertEqual(store.query(claim.format("first")), "new")
        update_store_from(store, STORE_UPDATES[3])
        self.assertEqual(catalog(store, "postgres"), catalog(fresh, "postgres"))
        self.assertEqual(store.query("SELECT settles FROM cosid.store_identity"), "f")
        self.assertEqual(store.query(claim.format("second")), "new")
        self.assertEqual(store.query(
            "SELECT count(*) FROM cosid.lease_renew('n', 0, 'first', 'tfirst', 4000, "
            f"{now_ms})"), "1")

    def test_store_update_refuses_what_it_cannot_update_safely(self):
        install_old_scripts()
        store = self.track(start_store("upgrade-refusals", 25680,
                                       lease_sql=old_sql(f"lease_store--{PREVIOUS}.sql")))
        script = str(STORE_UPDATES[0])
        before = catalog(store, "postgres")
        # Outside one transaction: refused before anything changes.
        result = subprocess.run(store.psql_command("postgres", "-f", script),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.assertIn("this update must run in one transaction; nothing was changed",
                      result.stdout)
        self.assertEqual(catalog(store, "postgres"), before)
        # A NOINHERIT store role would lose the protocol: refused, nothing changed.
        store.query(f"ALTER ROLE {FLEET_ROLE} NOINHERIT")
        result = subprocess.run(
            store.psql_command("postgres", "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose",
                               "--single-transaction", "-f", script),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn(f"55000: the lease protocol is granted to {FLEET_ROLE}", result.stdout)
        self.assertEqual(catalog(store, "postgres"), before)
        # A store of the extension is updated by ALTER EXTENSION only.
        store.query("CREATE DATABASE extension_store")
        store.query(f"CREATE EXTENSION cosid VERSION '{PREVIOUS}'", "extension_store")
        before = catalog(store, "extension_store")
        result = subprocess.run(
            store.psql_command("extension_store", "-v", "ON_ERROR_STOP=1", "--single-transaction",
                               "-f", script),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.assertIn("this lease store belongs to the extension cosid: update it with ALTER "
                      "EXTENSION cosid UPDATE; nothing was changed", result.stdout)
        self.assertEqual(catalog(store, "extension_store"), before)

    def test_store_scripts_refuse_to_run_over_an_installed_store(self):
        store = self.track(start_store("upgrade-rerun", 25650))
        store.query("INSERT INTO cosid.lease_namespace VALUES ('kept')")
        for script, warning in [
                (LEASE_SQL, f"a cosid lease store (version {STORE_VERSION}) is installed in this "
                            "database already; nothing was changed"),
                (STORE_UPDATES[0],
                 "this database has no cosid lease store of version 0.1.0; nothing was changed"),
                (STORE_UPDATES[1],
                 "this database has no cosid lease store of version 0.2.0; nothing was changed"),
                (STORE_UPDATES[2],
                 "this database has no cosid lease store of version 0.3.0; nothing was changed"),
                (STORE_UPDATES[3],
                 "this database has no cosid lease store of version 0.4.0; nothing was changed")]:
            before = catalog(store, "postgres")
            # Without ON_ERROR_STOP psql goes on after errors: the statements after the check
            # must fail too.
            for mode in [[], ["--single-transaction"]]:
                result = subprocess.run(store.psql_command("postgres", *mode, "-f", str(script)),
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True)
                self.assertIn(warning, result.stdout)
                self.assertIn("read-only transaction", result.stdout)
                self.assertEqual(catalog(store, "postgres"), before, f"{script.name} {mode}")
            self.assertEqual(store.query("SELECT namespace FROM cosid.lease_namespace"), "kept")


if __name__ == "__main__":
    unittest.main()
