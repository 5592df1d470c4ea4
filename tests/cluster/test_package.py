"""The packages of `make package` (scripts/package.sh), installed the way a user installs them into
the PostgreSQL under test ($PG_CONFIG, Debian's PostgreSQL 15 by default): the .deb with dpkg
where that PostgreSQL is Debian's, and the tarball by the copies its INSTALL note lists. Then a
real server with cosid preloaded runs CREATE EXTENSION cosid, cosid_next() and cosid_decode(),
and removing the package must remove every file it installed.

So that only the package's files can be loaded, the files `make install` put into that PostgreSQL
are moved aside first; they are put back afterwards whatever happens, and at the next run if this
one was killed (target/package-test holds them meanwhile).

The packages are built for $PG_CONFIG into target/packages first; with COSID_PACKAGE_DIR set, the
packages already in that folder are tested as they are. Also checked: the version in META.json,
Cargo.toml and the packaged cosid.control agree."""

import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import time
import unittest
from pathlib import Path

from helpers.made_sql import MADE_SQL, made_sql
from helpers.pgcluster import PG_CONFIG, ROOT, Cluster, SqlError, exclusive, free_port, wait_for


def pg_config(option):
    return subprocess.check_output([PG_CONFIG, option], text=True).strip()


VERSION = re.search(r'^version = "([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.M).group(1)
PG_FULL = re.match(r"PostgreSQL (\S+)", pg_config("--version")).group(1)
PG_MAJOR = re.match(r"\d+", PG_FULL).group(0)
PKGLIB = Path(pg_config("--pkglibdir"))
SHARE = Path(pg_config("--sharedir"))
EXTENSION_DIR = SHARE / "extension"
CONTRIB_DIR = SHARE / "contrib" / "cosid"
ARCH = os.uname().machine
TARBALL_NAME = f"cosid-{VERSION}-pg{PG_MAJOR}-linux-{ARCH}"
DEB_PACKAGE = f"postgresql-{PG_MAJOR}-cosid"
# Debian's layout, the one the .deb is built for.
IS_DEBIAN_PG = (PKGLIB == Path(f"/usr/lib/postgresql/{PG_MAJOR}/lib")
                and SHARE == Path(f"/usr/share/postgresql/{PG_MAJOR}"))
SAVED = ROOT / "target" / "package-test" / f"saved-pg{PG_MAJOR}"
# The files of the extension each package must install, relative to the PostgreSQL's folders.
REQUIRED = [PKGLIB / "cosid.so", EXTENSION_DIR / "cosid.control",
            EXTENSION_DIR / f"cosid--{VERSION}.sql", CONTRIB_DIR / "lease_store.sql"]


def run(*command, check=True):
    result = subprocess.run([str(part) for part in command], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, command))} exited with {result.returncode}:\n"
                             f"{result.stdout}")
    return result


def package_dir():
    """The folder of the packages under test; builds them for $PG_CONFIG unless
    COSID_PACKAGE_DIR names packages built already."""
    given = os.environ.get("COSID_PACKAGE_DIR")
    if given:
        return Path(given)
    out = ROOT / "target" / "packages"
    # Every version's build goes through one cargo target folder.
    with exclusive("cargo-build"):
        result = subprocess.run([ROOT / "scripts" / "package.sh", PG_CONFIG],
                                env={**os.environ, "COSID_PACKAGE_DIR": str(out)},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        raise AssertionError(f"scripts/package.sh failed:\n{result.stdout[-5000:]}")
    return out


def installed_files():
    """The extension's files in this PostgreSQL now, whoever put them there."""
    found = [PKGLIB / "cosid.so", EXTENSION_DIR / "cosid.control"]
    found += sorted(EXTENSION_DIR.glob("cosid--*.sql"))
    found += sorted(CONTRIB_DIR.glob("*")) if CONTRIB_DIR.is_dir() else []
    return [path for path in found if path.exists()]


def deb_installed():
    status = run("dpkg-query", "-W", "-f=${Status}", DEB_PACKAGE, check=False).stdout
    return "ok installed" in status or "config-files" in status


def restore_saved():
    """Puts back the files moved aside by a run that did not finish, where nothing has replaced
    them since, and forgets the rest."""
    if not SAVED.exists():
        return
    for saved in sorted(path for path in SAVED.rglob("*") if path.is_file()):
        target = Path("/") / saved.relative_to(SAVED)
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(saved, target)
    shutil.rmtree(SAVED)


def move_aside():
    """Moves the extension's files out of this PostgreSQL into SAVED; returns the function that
    puts them back."""
    if IS_DEBIAN_PG and deb_installed():
        run("dpkg", "--purge", DEB_PACKAGE)
    restore_saved()
    moved = []
    for path in installed_files():
        saved = SAVED / path.relative_to("/")
        saved.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, saved)
        path.unlink()
        moved.append(path)
    if CONTRIB_DIR.is_dir() and not any(CONTRIB_DIR.iterdir()):
        CONTRIB_DIR.rmdir()

    def put_back():
        for path in installed_files():
            path.unlink()
        restore_saved()
        missing = [path for path in moved if not path.exists()]
        if missing:
            raise AssertionError(f"could not put back {missing}")
    return put_back


class Versions(unittest.TestCase):
    def test_meta_json_cargo_toml_and_control_file_agree(self):
        meta = json.loads((ROOT / "META.json").read_text())
        self.assertEqual(meta["name"], "cosid")
        self.assertEqual(meta["version"], VERSION)
        self.assertEqual(meta["provides"]["cosid"]["version"], VERSION)
        self.assertEqual(meta["meta-spec"]["version"], "1.0.2")
        for field in ("abstract", "maintainer", "license"):
            self.assertTrue(meta[field], field)
        self.assertTrue((ROOT / meta["provides"]["cosid"]["file"]).exists())
        self.assertTrue((ROOT / meta["provides"]["cosid"]["docfile"]).exists())
        # The control file takes its default_version from Cargo.toml when cargo-pgrx installs it.
        self.assertIn("default_version = '@CARGO_VERSION@'", (ROOT / "cosid.control").read_text())
        self.assertIn(f"## {VERSION}", (ROOT / "CHANGELOG.md").read_text())


class Packages(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = package_dir()
        cls.tarball = cls.dir / f"{TARBALL_NAME}.tar.gz"
        cls.deb = cls.dir / f"{DEB_PACKAGE}_{VERSION}-1_{deb_arch()}.deb"

    def isolate(self):
        """This PostgreSQL without the `make install` files, until the test ends."""
        self.addCleanup(move_aside())

    def check_server(self, name, port):
        """A server with cosid preloaded from the files installed now: the extension, an id and
        its decoding."""
        cluster = Cluster(name, free_port(port)).init()
        self.addCleanup(cluster.stop, check=False)
        cluster.start()
        cluster.query("CREATE EXTENSION cosid")
        self.assertEqual(cluster.query(
            "SELECT extversion FROM pg_extension WHERE extname = 'cosid'"), VERSION)

        def next_id():
            try:
                return int(cluster.query("SELECT cosid_next()"))
            except SqlError:
                return None
        before_ms = int(time.time() * 1000) - 1000
        value = wait_for(next_id, 30, "cosid_next() to return an id")
        self.assertGreater(value, 0)
        ts_ms, machine_id, sequence = cluster.rows(
            "SELECT (extract(epoch FROM ts) * 1000)::bigint, machine_id, sequence "
            f"FROM cosid_decode({value})")[0]
        self.assertLessEqual(before_ms, int(ts_ms))
        self.assertLessEqual(int(ts_ms), int(time.time() * 1000) + 1000)
        self.assertEqual(cluster.query("SELECT machine_id FROM cosid.status"), machine_id)
        self.assertGreaterEqual(int(sequence), 0)
        # The lease store's SQL, where the package puts it, installs into a plain database.
        cluster.query("CREATE DATABASE store")
        run(*cluster.psql_command("store", "-v", "ON_ERROR_STOP=1", "-f",
                                  CONTRIB_DIR / "lease_store.sql"))
        self.assertEqual(cluster.query("SELECT count(*) FROM cosid.machine_lease", db="store"),
                         "0")
        cluster.stop()

    def assert_installed(self, paths):
        # Every update script made from sql/ too (scripts/make-sql.py), and the store's SQL.
        made_sql("lease_store.sql")
        scripts = ([EXTENSION_DIR / path.name for path in MADE_SQL.glob("cosid--*.sql")]
                   + [CONTRIB_DIR / path.name for path in MADE_SQL.glob("lease_store*.sql")])
        self.assertGreater(len(scripts), 2, "no update scripts were made")
        for path in REQUIRED + scripts:
            self.assertIn(path, paths, f"{path} is not installed")
            self.assertTrue(path.is_file(), f"{path} is missing")

    @unittest.skipUnless(IS_DEBIAN_PG, f"PostgreSQL {PG_FULL} is not Debian's package")
    def test_deb_installs_works_and_removes(self):
        self.assertTrue(self.deb.exists(), f"no {self.deb}")
        fields = run("dpkg-deb", "-f", self.deb, "Package", "Version", "Depends",
                     "Section").stdout
        self.assertIn(f"Package: {DEB_PACKAGE}\n", fields)
        self.assertIn(f"Version: {VERSION}-1\n", fields)
        self.assertRegex(fields, rf"Depends: postgresql-{PG_MAJOR}, .*libc6 \(>= ")
        self.assertIn("Section: database\n", fields)

        self.isolate()
        self.assertEqual(installed_files(), [])
        run("dpkg", "-i", self.deb)
        self.addCleanup(lambda: deb_installed() and run("dpkg", "--purge", DEB_PACKAGE))
        listed = [Path(line) for line in run("dpkg", "-L", DEB_PACKAGE).stdout.splitlines()]
        self.assert_installed(listed)
        self.assertIn(Path(f"/usr/share/doc/{DEB_PACKAGE}/copyright"), listed)
        # Every file matches the package's md5sums.
        run("dpkg", "--verify", DEB_PACKAGE)

        self.check_server("package-deb", 25700)

        run("dpkg", "-r", DEB_PACKAGE)
        left = [path for path in listed if path.is_file()]
        self.assertEqual(left, [], "files left after dpkg -r")
        self.assertEqual(installed_files(), [])

    @unittest.skipIf(IS_DEBIAN_PG, "installed and used by test_deb_installs_works_and_removes")
    def test_deb_of_another_build_is_in_the_packaged_layout(self):
        """The .deb made from a PostgreSQL outside Debian's layout (the tests' builds) installs
        into the packaged server of its major, /usr/lib/postgresql/<major>: its fields, its
        files where that server reads them, and the library of the tarball."""
        self.assertTrue(self.deb.exists(), f"no {self.deb}")
        fields = run("dpkg-deb", "-f", self.deb, "Package", "Depends").stdout
        self.assertIn(f"Package: {DEB_PACKAGE}\n", fields)
        self.assertRegex(fields, rf"Depends: postgresql-{PG_MAJOR}, .*libc6 \(>= ")
        listed = {line.split()[-1] for line in run("dpkg-deb", "-c", self.deb).stdout.splitlines()}
        lib, share = f"./usr/lib/postgresql/{PG_MAJOR}/lib", f"./usr/share/postgresql/{PG_MAJOR}"
        for path in (f"{lib}/cosid.so", f"{share}/extension/cosid.control",
                     f"{share}/extension/cosid--{VERSION}.sql",
                     f"{share}/extension/cosid--0.4.0--0.5.0.sql",
                     f"{share}/contrib/cosid/lease_store.sql",
                     f"{share}/contrib/cosid/cosid_machine.sql",
                     f"./usr/share/doc/{DEB_PACKAGE}/copyright",
                     f"./usr/share/doc/{DEB_PACKAGE}/changelog.gz",
                     f"./usr/share/doc/{DEB_PACKAGE}/README.md"):
            self.assertIn(path, listed)
        # Every file the README links to is beside it, readable as it is.
        readme_links = set(re.findall(r"\]\(([\w./-]+?)(?:#[\w-]*)?\)",
                                      (ROOT / "README.md").read_text()))
        local = {link for link in readme_links if not link.startswith(("http", "../"))
                 and not link.endswith("/")}
        self.assertIn("docs/installing.md", local)
        missing = {link for link in local
                   if f"./usr/share/doc/{DEB_PACKAGE}/{link}" not in listed}
        self.assertEqual(missing, set(), "README links the package does not ship")
        outside = [path for path in listed if path.startswith("./") and not path.endswith("/")
                   and not path.startswith((lib + "/", share + "/", "./usr/share/doc/"))]
        self.assertEqual(outside, [])
        with tarfile.open(self.tarball) as archive:
            library = archive.extractfile(f"{TARBALL_NAME}/lib/cosid.so").read()
        self.assertEqual(deb_member(self.deb, f"{lib}/cosid.so"), library)

    def test_tarball_installs_works_and_removes(self):
        self.assertTrue(self.tarball.exists(), f"no {self.tarball}")
        with tarfile.open(self.tarball) as archive:
            members = {member.name: member for member in archive.getmembers()}
            top = TARBALL_NAME + "/"
            self.assertTrue(all(name == TARBALL_NAME or name.startswith(top)
                                for name in members), sorted(members))
            names = {name[len(top):] for name in members if name.startswith(top)}
            for name in ("lib/cosid.so", "share/extension/cosid.control",
                         f"share/extension/cosid--{VERSION}.sql",
                         "share/contrib/cosid/lease_store.sql",
                         "share/contrib/cosid/cosid_machine.sql", "INSTALL", "LICENSE"):
                self.assertIn(name, names)
            for name in names:
                self.assertFalse(name.startswith("/") or ".." in name.split("/"), name)
            install_note = archive.extractfile(top + "INSTALL").read().decode()
            library = archive.extractfile(top + "lib/cosid.so").read()
            staged = {name: archive.extractfile(top + name).read() for name in names
                      if name.startswith(("lib/", "share/")) and members[top + name].isfile()}
        # The note says where each folder goes.
        for line in ('"$($PG_CONFIG --pkglibdir)/"', '"$($PG_CONFIG --sharedir)/extension/"',
                     '"$($PG_CONFIG --sharedir)/contrib/cosid/"'):
            self.assertIn(line, install_note)
        # The same library as in the .deb.
        if IS_DEBIAN_PG and self.deb.exists():
            self.assertEqual(library, deb_member(self.deb,
                                                 f"./usr/lib/postgresql/{PG_MAJOR}/lib/cosid.so"))

        # Installed as INSTALL says: lib/ into pkglibdir, share/ into sharedir.
        self.isolate()
        self.assertEqual(installed_files(), [])
        copied = []
        for name, data in staged.items():
            base, rest = name.split("/", 1)
            target = (PKGLIB if base == "lib" else SHARE) / rest
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            target.chmod(0o644)
            copied.append(target)
        self.addCleanup(lambda: [path.unlink() for path in copied if path.exists()])
        self.assert_installed(copied)

        self.check_server("package-tarball", 25701)

        # Removed as INSTALL says.
        for path in copied:
            path.unlink()
        shutil.rmtree(CONTRIB_DIR)
        self.assertEqual(installed_files(), [])


def deb_arch():
    return subprocess.check_output(["dpkg", "--print-architecture"], text=True).strip()


def deb_member(deb, name):
    """The content of one file of a .deb."""
    data = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE,
                          check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        return archive.extractfile(name).read()


if __name__ == "__main__":
    unittest.main()
