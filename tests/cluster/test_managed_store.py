"""A lease store as on a managed service: installed with `psql -f sql/lease_store.sql`, and a
store of 0.4.0 updated with its update script, by a role that is not a superuser but has
CREATEROLE and CREATEDB (and owns the database), with and without `createrole_self_grant =
'set, inherit'` (PostgreSQL 16 and later), on the PostgreSQL under test and on Debian's
PostgreSQL 15 (the store needs no cosid library; $COSID_STORE_PG_BINS adds the bin folders of
more versions, colon-separated). Afterwards nobody but superusers can act as cosid_lease_owner,
the catalog is the one a superuser's install makes, and cosid servers of the version under test
lease from both stores through the holder role. Where the role may not act as
cosid_lease_owner, the error names the privilege it lacks."""

import os
import re
import subprocess
from pathlib import Path

from cluster.test_upgrade import catalog
from helpers.fleet import FLEET_PASSWORD, FLEET_ROLE, LEASE_SQL, fleet_server
from helpers.leases import FAST_LEASES, try_next, wait_up
from helpers.made_sql import made_sql
from helpers.old_versions import old_sql
from helpers.pgcluster import (PG_BIN, Cluster, ClusterTest, SqlError, chown_to_postgres,
                               free_port, query_as)

ADMIN = "store_admin"
DEBIAN_15 = Path("/usr/lib/postgresql/15/bin")
UPDATE = made_sql("lease_store--0.4.0--0.5.0.sql")


def major_of(bin_dir):
    # "postgres (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)", "postgres (PostgreSQL) 18beta1"
    out = subprocess.check_output([bin_dir / "postgres", "--version"], text=True)
    return int(re.search(r"\(PostgreSQL\) (\d+)", out).group(1))


def store_versions():
    """The bin folders of the stores to try: the version under test, Debian's 15, and more."""
    dirs = [PG_BIN]
    if DEBIAN_15.is_dir():
        dirs.append(DEBIAN_15)
    dirs += [Path(d) for d in os.environ.get("COSID_STORE_PG_BINS", "").split(":") if d]
    seen, result = set(), []
    for bin_dir in dirs:
        major = major_of(bin_dir)
        if major not in seen:
            seen.add(major)
            result.append((major, bin_dir))
    return result


def store_040_by_hand(major):
    """0.4.0's install script as such a role had to run it: 0.4.0 gives its objects to
    cosid_lease_owner without first making the role able to, so an administrator granted
    itself the role (and the role CREATE on the schema) around those statements by hand."""
    text = old_sql("lease_store--0.4.0.sql").read_text()
    cut = text.index("ALTER TABLE cosid.machine_lease OWNER TO cosid_lease_owner;")
    grant = f"GRANT cosid_lease_owner TO {ADMIN}" + (
        " WITH INHERIT TRUE, SET TRUE" if major >= 16 else "")
    return (text[:cut] + f"{grant};\nGRANT CREATE ON SCHEMA cosid TO cosid_lease_owner;\n"
            + text[cut:] + "\nREVOKE CREATE ON SCHEMA cosid FROM cosid_lease_owner;\n"
            f"REVOKE cosid_lease_owner FROM {ADMIN};\n")


class ManagedStore(ClusterTest):
    def setUp(self):
        self.catalogs = {}

    def start_store(self, name, port, bin_dir, self_grant):
        settings = {"createrole_self_grant": "'set, inherit'"} if self_grant else {}
        store = self.track(Cluster(name, free_port(port), settings, preload=False,
                                   bin_dir=bin_dir).init())
        (store.data / "pg_hba.conf").write_text(
            f"host all {FLEET_ROLE} 127.0.0.1/32 scram-sha-256\n"
            "local all all trust\nhost all all 127.0.0.1/32 trust\n")
        chown_to_postgres(store.data)
        store.start()
        # What a managed service gives its administrator: CREATEROLE and CREATEDB, and a
        # database of its own.
        store.query(f"CREATE ROLE {ADMIN} LOGIN CREATEROLE CREATEDB")
        store.query(f"CREATE DATABASE updated OWNER {ADMIN}")
        return store

    def run_as_admin(self, store, db, path, role=ADMIN):
        result = subprocess.run(
            [str(store.bin / "psql"), "-X", "-q", "-h", "127.0.0.1", "-p", str(store.port),
             "-U", role, "-d", db, "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose",
             "--single-transaction", "-f", str(path)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        return result

    def assert_nobody_acts_as_the_owner(self, store, major, db):
        # On 16 and later the role that created cosid_lease_owner keeps the ADMIN OPTION
        # PostgreSQL gives it (as CREATEROLE alone does on 15), and nothing else: no INHERIT,
        # no SET, whatever createrole_self_grant says.
        columns = ("m.admin_option, m.inherit_option, m.set_option" if major >= 16
                   else "m.admin_option")
        members = store.rows(f"SELECT m.member::regrole, {columns} FROM pg_auth_members m "
                             "WHERE m.roleid = 'cosid_lease_owner'::regrole")
        self.assertEqual(members, [[ADMIN, "t", "f", "f"]] if major >= 16 else [])
        for sql in ("SELECT count(*) FROM cosid.machine_lease",
                    "SET ROLE cosid_lease_owner",
                    "DELETE FROM cosid.lease_namespace"):
            with self.assertRaises(SqlError) as refused:
                query_as(store, ADMIN, sql, db=db)
            self.assertEqual(refused.exception.sqlstate, "42501", f"{sql}: "
                             f"{refused.exception.stderr}")
        with self.assertRaises(SqlError) as refused:
            query_as(store, FLEET_ROLE, "SELECT claim_token FROM cosid.machine_lease",
                     password=FLEET_PASSWORD, db=db)
        self.assertEqual(refused.exception.sqlstate, "42501", refused.exception.stderr)

    def superusers_catalog(self, major, bin_dir, port):
        """The catalog of a store a superuser installed, in a cluster of its own: the store
        refuses to install where another role can act as cosid_lease_owner, which on 16 and
        later includes the role that created it."""
        if major not in self.catalogs:
            store = self.track(Cluster(f"managed-{major}-superuser", free_port(port),
                                       preload=False, bin_dir=bin_dir).init())
            store.start()
            subprocess.run(store.psql_command("postgres", "-v", "ON_ERROR_STOP=1",
                                              "--single-transaction", "-f", str(LEASE_SQL)),
                           check=True, stdout=subprocess.DEVNULL)
            self.catalogs[major] = catalog(store, "postgres")
            store.stop(mode="immediate")
        return self.catalogs[major]

    def install_update_and_lease(self, major, bin_dir, self_grant, port):
        tag = f"{major}{'-selfgrant' if self_grant else ''}"
        store = self.start_store(f"managed-{tag}", port, bin_dir, self_grant)
        # A store of 0.4.0, updated in place by the administrator.
        old = store.base / "lease_store-0.4.0-by-hand.sql"
        old.write_text(store_040_by_hand(major))
        chown_to_postgres(store.base)
        result = self.run_as_admin(store, "updated", old)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(store.query("SELECT cosid.lease_store_version()", "updated"), "0.4.0")
        result = self.run_as_admin(store, "updated", UPDATE)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(store.query("SELECT cosid.lease_store_version()", "updated"), "0.5.0")
        # A store installed afresh, in a database the administrator creates; the roles exist.
        query_as(store, ADMIN, "CREATE DATABASE fresh")
        result = self.run_as_admin(store, "fresh", LEASE_SQL)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(store.query("SELECT cosid.lease_store_version()", "fresh"), "0.5.0")
        # The role the servers log in as, made by the administrator.
        query_as(store, ADMIN, f"CREATE ROLE {FLEET_ROLE} LOGIN PASSWORD '{FLEET_PASSWORD}' "
                 "IN ROLE cosid_lease_holder")
        # Everything as a superuser's install makes it, but the schema's owner.
        reference = [line.replace("schema owner postgres", f"schema owner {ADMIN}")
                         .replace("schema grant postgres ", f"schema grant {ADMIN} ")
                     for line in self.superusers_catalog(major, bin_dir, port + 5)]
        self.assertIn(f"schema owner {ADMIN} comment ", reference)
        for db in ("fresh", "updated"):
            self.assertEqual(catalog(store, db), reference, db)
            self.assertEqual(store.query(
                "SELECT has_schema_privilege('cosid_lease_owner', 'cosid', 'CREATE')", db), "f")
        self.assert_nobody_acts_as_the_owner(store, major, "fresh")
        # Servers of the version under test lease from both through the holder role.
        servers = [self.track(fleet_server(f"managed-{tag}-{db}", port + 10 + i, store.port,
                                           FAST_LEASES, password_from="environment",
                                           conninfo_extra=f"dbname={db}"))
                   for i, db in enumerate(("fresh", "updated"))]
        for server in servers:
            server.start()
            server.query("CREATE EXTENSION cosid")
        for server, db in zip(servers, ("fresh", "updated")):
            wait_up(server)
            first, error = try_next(server)
            self.assertIsNone(error)
            self.assertGreater(int(first), 0)
            self.assertEqual(store.query("SELECT count(*) FROM cosid.machine_lease "
                                         "WHERE state = 'claimed'", db), "1")
        self.assert_nobody_acts_as_the_owner(store, major, "updated")

    def test_installed_and_updated_by_a_createrole_role(self):
        for i, (major, bin_dir) in enumerate(store_versions()):
            for self_grant in ([False, True] if major >= 16 else [False]):
                with self.subTest(store=major, createrole_self_grant=self_grant):
                    self.install_update_and_lease(major, bin_dir, self_grant,
                                                  26300 + 40 * i + (20 if self_grant else 0))

    def test_a_role_that_may_not_act_as_the_owner_is_told_what_it_lacks(self):
        for i, (major, bin_dir) in enumerate(store_versions()):
            with self.subTest(store=major):
                store = self.start_store(f"managed-lacks-{major}", 26450 + 10 * i, bin_dir,
                                         False)
                # The roles exist already, made by a superuser's install in another database.
                subprocess.run(store.psql_command("postgres", "-v", "ON_ERROR_STOP=1", "-f",
                                                  str(LEASE_SQL)),
                               check=True, stdout=subprocess.DEVNULL)
                # A database owner without CREATEROLE may never act as cosid_lease_owner; on 16
                # and later, neither may a role with CREATEROLE that did not create it.
                store.query("CREATE ROLE db_owner LOGIN")
                store.query("CREATE DATABASE owned OWNER db_owner")
                lacking = [("db_owner", "owned")] + ([(ADMIN, "updated")] if major >= 16 else [])
                for role, db in lacking:
                    result = self.run_as_admin(store, db, LEASE_SQL, role=role)
                    self.assertNotEqual(result.returncode, 0)
                    self.assertIn(f'ERROR:  42501: role "{role}" cannot give objects to role '
                                  "cosid_lease_owner", result.stderr)
                    self.assertIn("ADMIN OPTION on cosid_lease_owner", result.stderr)
                    self.assertIn(f"GRANT cosid_lease_owner TO {role} WITH ADMIN OPTION, "
                                  "INHERIT FALSE, SET FALSE", result.stderr)
                    self.assertEqual(store.query("SELECT to_regnamespace('cosid') IS NULL", db),
                                     "t")
                # As the hint says (on 15, CREATEROLE is enough): then it installs.
                if major >= 16:
                    store.query(f"GRANT cosid_lease_owner TO {ADMIN} WITH ADMIN OPTION, "
                                "INHERIT FALSE, SET FALSE")
                result = self.run_as_admin(store, "updated", LEASE_SQL)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertEqual(store.query("SELECT cosid.lease_store_version()", "updated"),
                                 "0.5.0")
                # A second role with CREATEROLE while the first keeps ADMIN OPTION on
                # cosid_lease_owner (16 and later) or any other member of it: refused, as ever.
                store.query("CREATE ROLE second_admin LOGIN CREATEROLE")
                store.query("CREATE DATABASE second OWNER second_admin")
                if major < 16:
                    store.query(f"GRANT cosid_lease_owner TO {ADMIN}")
                result = self.run_as_admin(store, "second", LEASE_SQL, role="second_admin")
                self.assertNotEqual(result.returncode, 0)
                self.assertIn("cosid_lease_owner must have no members", result.stderr)
