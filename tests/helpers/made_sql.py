"""The SQL files scripts/make-sql.py makes from sql/ (the update scripts of the extension and of
the lease store, and the store's install script), made into target/sql as `make install` and
scripts/package.sh make them: once per test process, so that the tests run the scripts of the
sources they test."""

import subprocess

from .pgcluster import ROOT, exclusive

MADE_SQL = ROOT / "target" / "sql"
_made = False


def made_sql(name):
    """The path of a made file (lease_store--0.4.0--0.5.0.sql)."""
    global _made
    if not _made:
        with exclusive("make-sql"):
            result = subprocess.run(["python3", ROOT / "scripts" / "make-sql.py", MADE_SQL],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0:
            raise AssertionError(f"scripts/make-sql.py failed:\n{result.stdout}")
        _made = True
    path = MADE_SQL / name
    if not path.is_file():
        raise AssertionError(f"scripts/make-sql.py made no {name}")
    return path
