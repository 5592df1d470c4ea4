"""`make install` sets up the build only (scripts/setup.sh --build): run with Debian's package
tools replaced by recorders that say nothing is installed, it asks apt for the build's packages
and no test tool or service, registers the PostgreSQL it builds for with pgrx, and refuses a
PostgreSQL that is not there with the fix. And `make install` runs that set-up, not the whole
one. (The real packages stay installed: this machine runs the tests.)"""

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
        self.assertIn("give PG_CONFIG=", done.stdout)
        self.assertFalse(any("install" in call for call in self.calls("apt-get")),
                         "nothing installed for a version Debian does not package here")
        self.assertFalse(self.calls("cargo"))

    def test_make_install_runs_the_build_setup_only(self):
        planned = subprocess.run(["make", "-n", "install", "PG=15"], cwd=ROOT, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=True)
        commands = planned.stdout.splitlines()
        self.assertIn("scripts/setup.sh --build", commands)
        self.assertNotIn("scripts/setup.sh", commands)


if __name__ == "__main__":
    unittest.main()
