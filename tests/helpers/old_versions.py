"""The library of the previous release (0.1.0), built from its commit for the PostgreSQL of
$PG_CONFIG, for the upgrade tests (cluster/test_upgrade.py), into target/old-versions:

    cd tests && PG_CONFIG=... python3 -m helpers.old_versions

`make test` builds it before the suite, while nothing else runs: built by the first test that
needs it, under the load of the others, it took ten minutes instead of two.
"""

import os
import shutil
import subprocess
import sys

from .pgcluster import PG_CONFIG, PG_MAJOR, ROOT, exclusive

PREVIOUS = "0.1.0"
PREVIOUS_COMMIT = "833aec748fee26fdb45bc9fc0eb134f14a66a76c"


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
    if subprocess.run(["git", "-C", ROOT, "cat-file", "-e", f"{PREVIOUS_COMMIT}^{{commit}}"],
                      stderr=subprocess.DEVNULL).returncode != 0:
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
