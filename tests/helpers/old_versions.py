"""What the tests take of released versions from the git history, for the upgrade tests
(cluster/test_upgrade.py and the others that start from an older version):

- the library of the previous release (0.1.0), built from its commit for the PostgreSQL of
  $PG_CONFIG into target/old-versions:

    cd tests && PG_CONFIG=... python3 -m helpers.old_versions

  `make test` builds it before the suite, beside its builds of each version: built by the first
  test that needs it, under the load of the others, it took ten minutes instead of two;
- the SQL of released versions, which the tree does not keep: their install scripts
  (cosid--0.3.0.sql, lease_store--0.3.0.sql) and their update scripts as released, taken from
  the commits below (old_sql), and the extension's install scripts put into this PostgreSQL's
  share/extension for CREATE EXTENSION cosid VERSION '0.3.0' (install_old_scripts).

Without that history (a shallow clone) the tests that need it are skipped, saying why; in CI
($CI set) they fail instead.
"""

import os
import re
import shutil
import subprocess
import sys
import unittest
from pathlib import Path

from .pgcluster import PG_CONFIG, PG_MAJOR, ROOT, exclusive

PREVIOUS = "0.1.0"
PREVIOUS_COMMIT = "833aec748fee26fdb45bc9fc0eb134f14a66a76c"
# The commit each released version's SQL is taken from: the last one that changed its install
# scripts (sql/cosid--V.sql, sql/lease_store--V.sql, kept in the tree until 0.5.0) and the update
# scripts to it. Each file there is the one the tree had until then.
SQL_COMMITS = {
    "0.1.0": "03a90365f238a263c9d007cea42c50aa01e76fb4",
    "0.2.0": "5f59111f2e394401acfb12ba64c7d0f814fd00c8",
    "0.3.0": "5f59111f2e394401acfb12ba64c7d0f814fd00c8",
    "0.4.0": "c2a6b8be8734206171a5b450575d0745d590c764",
}
OLD_SQL = ROOT / "target" / "old-versions" / "sql"
EXTENSION_DIR = Path(subprocess.check_output([PG_CONFIG, "--sharedir"], text=True).strip()) \
    / "extension"


def has_commit(commit):
    return subprocess.run(["git", "-C", ROOT, "cat-file", "-e", f"{commit}^{{commit}}"],
                          stderr=subprocess.DEVNULL).returncode == 0


def missing_history(what):
    """Skips the test for want of the git history, or fails it in CI."""
    message = f"{what} is not in this clone's history (a shallow clone?)"
    if os.environ.get("CI"):
        raise AssertionError(message)
    raise unittest.SkipTest(message)


def old_sql(name):
    """The path of a released SQL file, as it was released: an install script (cosid--0.3.0.sql,
    lease_store--0.3.0.sql) or an update script to a released version (cosid--0.2.0--0.3.0.sql),
    taken from its commit in SQL_COMMITS."""
    version = re.fullmatch(r"(?:cosid|lease_store)--(?:[0-9.]+--)?([0-9.]+)\.sql", name)
    if not version or version.group(1) not in SQL_COMMITS:
        raise ValueError(f"{name} is no file of a released version")
    commit = SQL_COMMITS[version.group(1)]
    path = OLD_SQL / commit[:12] / name
    if path.exists():
        return path
    if not has_commit(commit):
        missing_history(f"commit {commit} of cosid {version.group(1)}")
    text = subprocess.run(["git", "-C", ROOT, "show", f"{commit}:sql/{name}"],
                          stdout=subprocess.PIPE, check=True).stdout
    write_whole(path, text)
    return path


def install_old_scripts():
    """Puts the install script of each released version into this PostgreSQL's share/extension
    (cargo pgrx install and make install put only this version's), for CREATE EXTENSION cosid
    VERSION '0.3.0'. Tests running side by side wait for the one that writes them, and a server
    that reads one meanwhile sees a whole file."""
    with exclusive(f"old-install-scripts-pg{PG_MAJOR}"):
        for version in SQL_COMMITS:
            name = f"cosid--{version}.sql"
            text = old_sql(name).read_bytes()
            target = EXTENSION_DIR / name
            if not target.exists() or target.read_bytes() != text:
                if os.access(EXTENSION_DIR, os.W_OK):
                    write_whole(target, text)
                else:
                    # As make install does where the folder is root's (Debian's PostgreSQL).
                    subprocess.run(["sudo", "install", "-m", "644", old_sql(name), target],
                                   check=True)


def write_whole(path, data):
    """Writes path through a file renamed over it, readable by the postgres user."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(data)
    os.chmod(temporary, 0o644)
    temporary.replace(path)


def previous_library():
    """The directory with cosid.so of 0.1.0, built for this PostgreSQL from its commit the first
    time it is needed. None when the commit is not in this clone's history."""
    # Tests running side by side wait for the one that builds it.
    with exclusive(f"old-version-{PREVIOUS}-pg{PG_MAJOR}"):
        return build_previous_library()


def build_previous_library():
    base = ROOT / "target" / "old-versions" / f"{PREVIOUS}-pg{PG_MAJOR}"
    library = base / "lib" / "cosid.so"
    if library.exists():
        return library.parent
    if not has_commit(PREVIOUS_COMMIT):
        return None
    source = base / "src"
    shutil.rmtree(source, ignore_errors=True)
    source.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", ROOT, "archive", PREVIOUS_COMMIT],
                             stdout=subprocess.PIPE, check=True).stdout
    subprocess.run(["tar", "-x", "-C", source], input=archive, check=True)
    stage = base / "stage"
    # Without the release profile's whole-program optimisation, which makes no difference to
    # what the tests run and takes the build from about 4 minutes to 2.
    subprocess.run(["cargo", "pgrx", "package", "--pg-config", PG_CONFIG, "--out-dir", stage],
                   cwd=source, check=True, env={**os.environ, "CARGO_TARGET_DIR": str(base / "target"),
                                                "CARGO_PROFILE_RELEASE_LTO": "false",
                                                "CARGO_PROFILE_RELEASE_CODEGEN_UNITS": "16"})
    built = next(stage.rglob("cosid.so"))
    library.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(built, library)
    os.chmod(library, 0o755)
    # The postgres user must reach it.
    for parent in [library.parent, *library.parent.parents]:
        if parent == ROOT.parent:
            break
        os.chmod(parent, os.stat(parent).st_mode | 0o055)
    return library.parent


if __name__ == "__main__":
    directory = previous_library()
    if directory is None:
        # As the upgrade tests do: those that need it are skipped, saying why.
        print(f"old_versions: commit {PREVIOUS_COMMIT} of cosid {PREVIOUS} is not in this clone: "
              "the tests that run its library will be skipped")
        sys.exit(0)
    print(f"old_versions: cosid {PREVIOUS} for PostgreSQL {PG_MAJOR} in {directory}")
