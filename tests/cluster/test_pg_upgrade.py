"""pg_upgrade of servers with cosid, for real: PostgreSQL 15 to 16, 16 to 17 and 17 to 18, each
major version to the next (the set-up installs all four; the module runs in the PostgreSQL 15 job
only). pg_upgrade copies the
databases, with the lease rows and the generators' definitions, but no file of ours, and a
server with a fixed machine id keeps its floor in `cosid.state` and `cosid.state.<namespace>`
of the data directory. The old server's clock runs ahead, so that its last ids are ahead of the
new server's clock: without the files, the upgraded server refuses (55000, naming the file);
with them copied as docs/upgrading.md says, it issues ids above every id issued before the
upgrade."""

import shutil
import subprocess
import time
import unittest
from pathlib import Path

from helpers.faults import fake_clock
from helpers.leases import epoch_dating_now_as, ts_ms_of
from helpers.pgcluster import (PG_MAJOR, ROOT, Cluster, ClusterTest, SqlError, as_postgres,
                               chown_to_postgres, free_port, wait_for, wait_for_answer,
                               wait_recorded)

# How far ahead of the new server's clock the old server's was: its last ids are that far in
# the new server's future.
AHEAD_S = 5.0
FIXED = {"cosid.distributor": "manual", "cosid.machine_id": 5}
IDS_PER_GENERATOR = 3000
STATE_FILES = ("cosid.state", "cosid.state." + b"orders".hex())
# The default generator's history, which pg_upgrade does not copy either, nor the record of the
# named generators' names and the number of the last writes of both.
HISTORY_FILE = "cosid.history"
RECORD_FILES = ("cosid.names", "cosid.generation")
# Every refusal after pg_upgrade names every file of cosid to copy, the store's timeline too, and
# the mark deleted last.
COPY_HINT = ("Copy cosid.state, cosid.state.*, cosid.history, cosid.generation, cosid.names and "
             "cosid.store_timeline (those of them the old directory has) from the data directory "
             "pg_upgrade upgraded from into this one")


def pg_config(version, what):
    program = subprocess.check_output([ROOT / "scripts" / "pg-config.sh", str(version)],
                                      text=True).strip()
    if not Path(program).exists():
        raise unittest.SkipTest(f"PostgreSQL {version} is not installed: run scripts/setup.sh")
    return Path(subprocess.check_output([program, what], text=True).strip())


def bin_dir(version):
    # make test installs cosid for every tested version before the suite; make quick only for
    # its own.
    if not (pg_config(version, "--pkglibdir") / "cosid.so").exists():
        raise unittest.SkipTest(f"cosid is not installed for PostgreSQL {version}: "
                                f"make install PG={version}")
    return pg_config(version, "--bindir")


def initdb_options(version):
    # PostgreSQL 18's initdb turns data checksums on, and pg_upgrade needs both clusters alike.
    return ["--no-data-checksums"] if version >= 18 else []


def clear_pg_attver(old):
    """PostgreSQL 15.20 gives every column the option pg_attver, which the 16.14 here does not
    know: its pg_upgrade fails on any table, cosid's or not ("unrecognized parameter"). The old
    cluster's user tables are cleared of it."""
    if old.query("SELECT count(*) FROM pg_attribute WHERE attrelid >= 16384 "
                 "AND attoptions::text LIKE '%pg_attver=%'") != "0":
        old.query("UPDATE pg_attribute SET attoptions = (SELECT array_agg(o) FROM "
                  "unnest(attoptions) o WHERE o NOT LIKE 'pg_attver=%') "
                  "WHERE attrelid >= 16384 AND attoptions::text LIKE '%pg_attver=%'")


def ids(cluster, generator):
    call = "cosid_next()" if generator == "default" else f"cosid_next('{generator}')"
    return [int(value) for value in cluster.query(
        f"SELECT {call} FROM generate_series(1, {IDS_PER_GENERATOR})").split()]


@unittest.skipIf(PG_MAJOR != 15, "pg_upgrade from 15 to 16, 16 to 17 and 17 to 18 runs in the 15 job")
class PgUpgrade(ClusterTest):
    def old_server(self, version, port):
        """A server of `version` with a fixed machine id and a named generator, whose clock runs
        AHEAD_S ahead; the ids it issued, by generator, once it is stopped."""
        name = f"pg-upgrade-{version}"
        env = fake_clock(Path(f"/tmp/cosid-{name}-clock"), AHEAD_S)
        old = self.track(Cluster(name, free_port(port), FIXED, env=env,
                                 bin_dir=bin_dir(version),
                                 initdb_options=initdb_options(version)).init())
        old.start()
        old.query("CREATE EXTENSION cosid")
        old.query("SELECT cosid_create_generator('orders', 'millisecond', namespace => 'orders')")
        wait_for_answer(old, "SELECT cosid_next('orders')", ("55P03", "42704"))
        issued = {generator: ids(old, generator) for generator in ("default", "orders")}
        clear_pg_attver(old)
        old.stop()
        for file in (*STATE_FILES, HISTORY_FILE):
            self.assertTrue((old.data / file).exists(), file)
        return old, issued

    def upgrade(self, old, new_version, port, preload_while_upgrading, started_before=False):
        """pg_upgrade of `old` into a new cluster of `new_version` (cosid preloaded while
        pg_upgrade runs, or only afterwards, as pg_upgrade's own steps allow; the new cluster
        started once before, or not)."""
        new = self.track(Cluster(f"pg-upgrade-{new_version}-from-{old.name[-2:]}",
                                 free_port(port), FIXED, preload=preload_while_upgrading,
                                 bin_dir=bin_dir(new_version),
                                 initdb_options=initdb_options(new_version)).init())
        if started_before:
            # It writes a state file of its own, which is not the old server's floor.
            new.start()
            wait_for(lambda: (new.data / "cosid.state").exists(), 10, "a state file")
            new.stop()
        result = subprocess.run(
            as_postgres([new.bin / "pg_upgrade", "-b", old.bin, "-B", new.bin,
                         "-d", old.data, "-D", new.data, "-p", old.port, "-P", new.port,
                         "-U", "postgres", "--no-sync"]),
            cwd=new.base, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            timeout=600)
        self.assertEqual(result.returncode, 0, result.stdout)
        # Only the new cluster is marked; the new cluster's own file, if any, is put aside.
        self.assertTrue((new.data / "cosid.upgraded").exists())
        self.assertFalse((old.data / "cosid.upgraded").exists())
        self.assertEqual((new.data / "cosid.state.before-pg_upgrade").exists(), started_before)
        self.assertEqual((new.data / "cosid.history.before-pg_upgrade").exists(), started_before)
        if not preload_while_upgrading:
            new.preload = True
            new.write_settings()
        return new

    def assert_refused_until_the_files_are_copied(self, old, new, issued):
        # pg_upgrade copied no state file, and no history.
        for file in (*STATE_FILES, HISTORY_FILE):
            self.assertFalse((new.data / file).exists(), file)
        new.start()
        for generator, sql in (("default", "SELECT cosid_next()"),
                               ("orders", "SELECT cosid_next('orders')")):
            try:
                # A named generator is not known for a moment after the start.
                got = wait_for_answer(new, sql, ("55P03", "42704"))
            except AssertionError:
                with self.assertRaises(SqlError) as refused:
                    new.query(sql)
                said = refused.exception.stderr
                if generator == "orders" and refused.exception.sqlstate == "42704":
                    # Without the history, whether the default generator used the named
                    # generator's namespace is unknown: the named generator is not run at all.
                    self.assertIn('generator "orders" is not used: the default generator\'s '
                                  "history (cosid.history) cannot be read", new.log())
                    continue
                self.assertEqual(refused.exception.sqlstate, "55000", said)
                self.assertIn('"cosid.upgraded" says that pg_upgrade made this data directory',
                              said)
                if generator == "default":
                    # The history is read first: without it, no id of the default generator
                    # (a missing history is not taken for a first start).
                    self.assertIn("cosid cannot use the default generator's history file", said)
                    self.assertIn(COPY_HINT, said)
                else:
                    self.assertIn("cosid cannot use its state file", said)
                    self.assertIn(COPY_HINT, said)
                continue
            self.fail(f"{generator} generated {got} after pg_upgrade without its state file, "
                      f"{'above' if int(got[0][0]) > max(issued[generator]) else 'below'} "
                      "the ids issued before")
        new.stop()
        # The state files copied, the history forgotten: while the mark is there, a missing
        # history is the old server's, not a first start, and the default generator refuses.
        for file in STATE_FILES:
            shutil.copy2(old.data / file, new.data / file)
        chown_to_postgres(new.data)
        new.start()
        with self.assertRaises(SqlError) as refused:
            new.query("SELECT cosid_next()")
        said = refused.exception.stderr
        self.assertEqual(refused.exception.sqlstate, "55000", said)
        self.assertIn("cosid cannot use the default generator's history file", said)
        self.assertIn(COPY_HINT, said)
        new.stop()
        # The history copied too, the record of the names forgotten: while the mark is there, a
        # missing cosid.names is the old server's, and nothing that depends on it runs.
        shutil.copy2(old.data / HISTORY_FILE, new.data / HISTORY_FILE)
        chown_to_postgres(new.data)
        new.start()
        with self.assertRaises(SqlError) as refused:
            new.query("SELECT cosid_next()")
        said = refused.exception.stderr
        self.assertEqual(refused.exception.sqlstate, "55000", said)
        self.assertIn("cosid cannot use the server's record of its generators' names", said)
        self.assertIn(COPY_HINT, said)
        with self.assertRaises(SqlError) as refused:
            new.query("SELECT cosid_create_generator('later')")
        self.assertEqual(refused.exception.sqlstate, "55000", refused.exception.stderr)
        new.stop()
        # The documented step: copy the files, delete the mark.
        for file in (*STATE_FILES, HISTORY_FILE, *RECORD_FILES):
            shutil.copy2(old.data / file, new.data / file)
        (new.data / "cosid.upgraded").unlink()
        chown_to_postgres(new.data)
        new.start()
        started = time.monotonic()
        for generator in ("default", "orders"):
            call = "cosid_next()" if generator == "default" else f"cosid_next('{generator}')"
            # The new server's clock is behind the floor: refused as a clock behind it (55P03)
            # until it has caught up.
            wait_for_answer(new, f"SELECT {call}", ("55P03", "42704"), timeout=AHEAD_S + 30)
            waited_s = time.monotonic() - started
            after = ids(new, generator)
            self.assertGreater(min(after), max(issued[generator]), generator)
            repeated = len(after) + len(issued[generator]) - len(set(after) | set(issued[generator]))
            print(f"\n  {old.name} to {new.name}, {generator}: {len(issued[generator])} ids "
                  f"before, {len(after)} after, {repeated} duplicates, first id after "
                  f"{waited_s:.1f} s", end=" ")
            self.assertEqual(repeated, 0)

    def test_pg_upgrade_15_to_16_keeps_ids_above_the_old_ones(self):
        old, issued = self.old_server(15, 25985)
        new = self.upgrade(old, 16, 25987, preload_while_upgrading=True, started_before=True)
        self.assert_refused_until_the_files_are_copied(old, new, issued)

    def test_pg_upgrade_16_to_17_keeps_ids_above_the_old_ones(self):
        # cosid is put in shared_preload_libraries of the new cluster only after pg_upgrade.
        old, issued = self.old_server(16, 26040)
        new = self.upgrade(old, 17, 26042, preload_while_upgrading=False)
        self.assert_refused_until_the_files_are_copied(old, new, issued)

    def test_pg_upgrade_17_to_18_keeps_ids_above_the_old_ones(self):
        # Preloaded while pg_upgrade runs, on a new cluster never started before.
        old, issued = self.old_server(17, 26045)
        new = self.upgrade(old, 18, 26047, preload_while_upgrading=True)
        self.assert_refused_until_the_files_are_copied(old, new, issued)

    def test_the_default_generators_namespaces_survive_a_lost_old_directory(self):
        """The old server's default generator issued ids in 'orders', then moved to 'web'; after
        pg_upgrade the old data directory is lost, and the mark deleted as the message allows
        then (before, a named generator in 'orders' with a later epoch was then accepted:
        2,372,954 ids issued again). cosid.default_namespace, which pg_upgrade carries,
        still says that the default generator used 'orders': refused (22023)."""
        name = "pg-upgrade-lost"
        old = self.track(Cluster(name, free_port(26050), {**FIXED, "cosid.namespace": "'orders'"},
                                 bin_dir=bin_dir(15), initdb_options=initdb_options(15)).init())
        old.start()
        old.query("CREATE EXTENSION cosid")
        issued = ids(old, "default")
        old.stop()
        old.settings = {**FIXED, "cosid.namespace": "'web'"}
        old.write_settings()
        old.start()
        wait_recorded(old, "orders")
        clear_pg_attver(old)
        old.stop()
        new = self.upgrade(old, 16, 26052, preload_while_upgrading=True)
        new.settings = {**FIXED, "cosid.namespace": "'web'"}
        new.write_settings()
        # The old directory is lost: nothing is copied, the mark is deleted.
        shutil.rmtree(old.data)
        (new.data / "cosid.upgraded").unlink()
        new.start()
        epoch = epoch_dating_now_as(ts_ms_of(issued[len(issued) // 2]))
        legacy = []
        refusal = None
        try:
            new.query(f"SELECT cosid_create_generator('legacy', namespace => 'orders', "
                      f"epoch => '{epoch}')")
            wait_for_answer(new, "SELECT cosid_next('legacy')", ("55P03", "42704"))
            legacy = ids(new, "legacy")
        except SqlError as error:
            refusal = error
        repeated = len(set(legacy) & set(issued))
        self.assertEqual(repeated, 0, f"{repeated} of {len(legacy)} ids issued again")
        self.assertIsNotNone(refusal, "a named generator was created in the default's namespace")
        self.assertEqual(refusal.sqlstate, "22023", refusal.stderr)
        self.assertIn("cosid.default_namespace", refusal.stderr)


if __name__ == "__main__":
    unittest.main()
