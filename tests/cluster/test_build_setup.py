"""`make install` sets up the build only (scripts/setup.sh --build): run with Debian's package
tools replaced by recorders that say nothing is installed, it asks apt for the build's packages
and no test tool or service, registers the PostgreSQL it builds for with pgrx, and refuses a
PostgreSQL that is not there, or a user's PostgreSQL without server headers, with the fix; the
tests' own build of 17, which has none, is accepted. And `make install` runs that set-up, not
the whole one. (The real packages stay installed: this machine runs the tests.)"""

import os
import stat
import subprocess
import tempfile
import unittest
from pathlib import Path

from helpers.pgcluster import ROOT

RECORDER = """#!/bin/sh
echo "$(basename "$0") $*" >> "{log}"
{body}
"""
# What make install may install, and never more: the build's tools and libraries.
BUILD_PACKAGES = {"libclang-dev", "clang", "gcc", "libssl-dev", "pkg-config"}


class BuildSetup(unittest.TestCase):
    def setUp(self):
        self.dir = Path(tempfile.mkdtemp(prefix="cosid-build-setup-"))
        self.log = self.dir / "calls.log"
        self.log.touch()
        bin_dir = self.dir / "bin"
        bin_dir.mkdir()
        for tool, body in (("dpkg-query", "exit 1"), ("apt-get", "exit 0"),
                           ("sudo", 'exec "$@"'),
                           ("cargo", '[ "$2" = "--version" ] && echo "cargo-pgrx 0.18.1"; exit 0')):
            path = bin_dir / tool
            path.write_text(RECORDER.format(log=self.log, body=body))
            path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        self.env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}",
                        PGRX_HOME=str(self.dir / "pgrx"))

    def setup_build(self, pg_config):
        return subprocess.run([ROOT / "scripts" / "setup.sh", "--build"],
                              env=dict(self.env, PG_CONFIG=pg_config), cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def calls(self, tool):
        return [line.split()[1:] for line in self.log.read_text().splitlines()
                if line.split()[0] == tool]

    def test_only_the_builds_packages_and_the_pgrx_registration(self):
        pg_config = "/usr/lib/postgresql/15/bin/pg_config"
        done = self.setup_build(pg_config)
        self.assertEqual(done.returncode, 0, done.stdout)
        installs = [call for call in self.calls("apt-get") if "install" in call]
        self.assertEqual(len(installs), 1, installs)
        asked = {word for word in installs[0] if not word.startswith("-") and word != "install"}
        # Server headers too when this machine's PostgreSQL 15 has none.
        self.assertTrue(BUILD_PACKAGES <= asked <= BUILD_PACKAGES | {"postgresql-server-dev-15"},
                        asked)
        self.assertIn(["pgrx", "init", "--pg15", pg_config], self.calls("cargo"))

    def test_a_postgresql_that_is_not_there_is_refused_with_the_fix(self):
        done = self.setup_build("/usr/lib/postgresql/9/bin/pg_config")
        self.assertEqual(done.returncode, 1, done.stdout)
        self.assertIn("no PostgreSQL at /usr/lib/postgresql/9/bin/pg_config", done.stdout)
        self.assertIn("PG_CONFIG=/path/to/pg_config", done.stdout)
        self.assertFalse(any("install" in call for call in self.calls("apt-get")),
                         "nothing installed for a version Debian does not package here")
        self.assertFalse(self.calls("cargo"))

    def headerless_pg_config(self, folder):
        """A pg_config in `folder` of a PostgreSQL 17 without server headers (the tests' build
        of 17 is one)."""
        bin_dir = folder / "bin"
        bin_dir.mkdir(parents=True)
        (folder / "include" / "server").mkdir(parents=True)
        pg_config = bin_dir / "pg_config"
        pg_config.write_text(f"""#!/bin/sh
case "$1" in
    --version) echo "PostgreSQL 17.10" ;;
    --includedir-server) echo "{folder}/include/server" ;;
    *) exit 1 ;;
esac
""")
        pg_config.chmod(0o755)
        return pg_config

    def test_a_headerless_build_of_the_tests_is_accepted(self):
        root = self.dir / "cosid-postgres"
        pg_config = self.headerless_pg_config(root / "17" / "build")
        done = subprocess.run([ROOT / "scripts" / "setup.sh", "--build"],
                              env=dict(self.env, PG_CONFIG=pg_config, COSID_PG_ROOT=root),
                              cwd=ROOT, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)
        self.assertEqual(done.returncode, 0, done.stdout)
        self.assertNotIn("no server headers", done.stdout)
        self.assertIn(["pgrx", "init", "--pg17", str(pg_config)], self.calls("cargo"))

    def test_a_headerless_postgresql_of_the_user_is_refused_with_the_fix(self):
        pg_config = self.headerless_pg_config(self.dir / "elsewhere")
        done = subprocess.run([ROOT / "scripts" / "setup.sh", "--build"],
                              env=dict(self.env, PG_CONFIG=pg_config,
                                       COSID_PG_ROOT=self.dir / "cosid-postgres"),
                              cwd=ROOT, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)
        self.assertEqual(done.returncode, 1, done.stdout)
        self.assertIn(f"{pg_config} has no server headers", done.stdout)
        self.assertIn("install its development package (postgresql-server-dev-<major> on Debian",
                      done.stdout)
        self.assertFalse(self.calls("cargo"), "no build set up for it")

    def test_make_install_runs_the_build_setup_only(self):
        planned = subprocess.run(["make", "-n", "install", "PG=15"], cwd=ROOT, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=True)
        commands = planned.stdout.splitlines()
        self.assertIn("scripts/setup.sh --build", commands)
        self.assertNotIn("scripts/setup.sh", commands)
        self.assertFalse([line for line in commands if "--with-server" in line],
                         "make install never installs a PostgreSQL server")

    def test_make_run_may_install_the_server_of_its_demo(self):
        planned = subprocess.run(["make", "-n", "run", "PG=15"], cwd=ROOT, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=True)
        commands = planned.stdout.splitlines()
        self.assertIn("scripts/setup.sh --build --with-server", commands)
        self.assertLess(commands.index("scripts/setup.sh --build --with-server"),
                        commands.index("scripts/setup.sh --build"))


if __name__ == "__main__":
    unittest.main()
