"""SQL golden tests (pg_regress): every function and error of the SQL surface, on a server that
preloads cosid and on one that does not. The golden files of the preloaded server run in the
order of PRELOADED, on one server with room for the ten named generators of generators.sql; they
read CosId's ids of each layout from data/ in the input folder (tests/vectors/cosid-layouts.json)."""

import re
import shutil
import subprocess
import unittest

from helpers.pgcluster import CLUSTERS, PG_BIN, PG_MAJOR, PG_PKGLIB, ROOT, Cluster, free_port

REGRESS = ROOT / "tests" / "regress"
VECTORS = ROOT / "tests" / "vectors" / "cosid-layouts.json"
PRELOADED = ["surface", "decode", "parsing", "convert", "generators"]
PG_REGRESS = PG_PKGLIB / "pgxs" / "src" / "test" / "regress" / "pg_regress"


# PostgreSQL 18, and 17 (17.10, the tests' build), print the unit of a setting's range after each
# bound, "(0 ms .. 60000 ms)", where 15 and 16 print "(0 .. 60000)". The golden files hold the
# older wording; this is the one difference between versions, applied to them for 17 and later.
RANGE_WITHOUT_UNITS = re.compile(
    r"^(ERROR:  -?\d+ (\w+) is outside the valid range for parameter \"[^\"]+\") "
    r"\((-?\d+) \.\. (-?\d+)\)$", re.M)


def expected_output(test):
    """The golden file's text as this PostgreSQL version prints it."""
    text = (REGRESS / "expected" / f"{test}.out").read_text()
    if PG_MAJOR >= 17:
        text = RANGE_WITHOUT_UNITS.sub(r"\1 (\3 \2 .. \4 \2)", text)
    return text


def pg_regress(cluster, *tests):
    """Runs the named tests against the cluster; returns (passed, output with the diffs). The
    input folder is a copy of tests/regress with this version's golden files."""
    outdir = CLUSTERS / f"{cluster.name}-regress"
    inputdir = outdir / "input"
    shutil.rmtree(inputdir, ignore_errors=True)
    shutil.copytree(REGRESS / "sql", inputdir / "sql")
    (inputdir / "data").mkdir()
    shutil.copy(VECTORS, inputdir / "data")
    (inputdir / "expected").mkdir()
    for test in tests:
        (inputdir / "expected" / f"{test}.out").write_text(expected_output(test))
    result = subprocess.run(
        [PG_REGRESS, f"--inputdir={inputdir}", f"--outputdir={outdir}", f"--bindir={PG_BIN}",
         "--host=127.0.0.1", f"--port={cluster.port}", "--user=postgres",
         "--dbname=cosid_regress", *tests],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    diffs = outdir / "regression.diffs"
    output = result.stdout + (diffs.read_text() if diffs.exists() else "")
    return result.returncode == 0, output


class SqlSurface(unittest.TestCase):
    def run_golden(self, tests, name, port, **cluster_options):
        cluster = Cluster(name, free_port(port), **cluster_options).init()
        cluster.start()
        try:
            passed, output = pg_regress(cluster, *tests)
            self.assertTrue(passed, output)
            for test in tests:
                results = CLUSTERS / f"{name}-regress" / "results" / f"{test}.out"
                self.assertEqual(results.read_text(), expected_output(test),
                                 f"{results} is not expected/{test}.out as PostgreSQL "
                                 f"{PG_MAJOR} prints it")
        finally:
            cluster.stop(check=False)

    def test_preloaded_server(self):
        self.run_golden(PRELOADED, "regress-preloaded", 25110, settings={
            "cosid.distributor": "manual", "cosid.machine_id": 5, "cosid.max_generators": 16})

    def test_server_without_preload(self):
        self.run_golden(["not_preloaded"], "regress-not-preloaded", 25111, preload=False)


if __name__ == "__main__":
    unittest.main()
