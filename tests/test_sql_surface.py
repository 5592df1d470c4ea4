"""SQL golden tests (pg_regress): every function and error of the SQL surface, on a server that
preloads cosid and on one that does not."""

import subprocess
import unittest

from pgcluster import CLUSTERS, PG_BIN, PG_MAJOR, PG_PKGLIB, ROOT, Cluster, free_port

REGRESS = ROOT / "tests" / "regress"
PG_REGRESS = PG_PKGLIB / "pgxs" / "src" / "test" / "regress" / "pg_regress"


def pg_regress(cluster, *tests):
    """Runs the named tests against the cluster; returns (passed, output with the diffs)."""
    outdir = CLUSTERS / f"{cluster.name}-regress"
    outdir.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [PG_REGRESS, f"--inputdir={REGRESS}", f"--outputdir={outdir}", f"--bindir={PG_BIN}",
         "--host=127.0.0.1", f"--port={cluster.port}", "--user=postgres",
         "--dbname=cosid_regress", *tests],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    diffs = outdir / "regression.diffs"
    output = result.stdout + (diffs.read_text() if diffs.exists() else "")
    return result.returncode == 0, output


def expected_output(test):
    """The golden file of this PostgreSQL version. pg_regress accepts `<test>.out` or any
    alternate `<test>_1.out`; the alternate is PostgreSQL 18's (which prints the unit of a
    setting's range: `(0 ms .. 60000 ms)`), and each version must match its own."""
    alternate = REGRESS / "expected" / f"{test}_1.out"
    if PG_MAJOR >= 18 and alternate.exists():
        return alternate
    return REGRESS / "expected" / f"{test}.out"


class SqlSurface(unittest.TestCase):
    def run_golden(self, test, name, port, **cluster_options):
        cluster = Cluster(name, free_port(port), **cluster_options).init()
        cluster.start()
        try:
            passed, output = pg_regress(cluster, test)
            self.assertTrue(passed, output)
            results = CLUSTERS / f"{name}-regress" / "results" / f"{test}.out"
            self.assertEqual(results.read_text(), expected_output(test).read_text(),
                             f"{results} is not {expected_output(test).name}")
        finally:
            cluster.stop(check=False)

    def test_preloaded_server(self):
        self.run_golden("surface", "regress-preloaded", 25110, settings={"cosid.distributor": "manual",
                                                               "cosid.machine_id": 5})

    def test_server_without_preload(self):
        self.run_golden("not_preloaded", "regress-not-preloaded", 25111, preload=False)


if __name__ == "__main__":
    unittest.main()
