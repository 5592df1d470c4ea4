"""Runs tests in one process as `python3 -m unittest` does, against the PostgreSQL of $PG_CONFIG,
and removes the clusters a test has finished with, so that the whole suite fits on a small disk.

    python3 run.py -v cluster.test_lease faults.test_faults.Faults.test_random_mix

tests/suite.py runs the tiers through it, many processes side by side.

The suite sets up about 150 PostgreSQL clusters of about 40 MB each per version; kept, three
versions took 18 GB. A cluster made during a test is removed when that test has passed and the
server is stopped; one made by a class's setUpClass when the class is done and none of its tests
failed. The clusters of a failed test are kept for their logs (target/test-clusters/pg<major>/), as
are all of them with COSID_KEEP_CLUSTERS=1. With COSID_TEST_RESULT=<file>, the counts of the run
(tests, failures, errors, skipped) are written there as JSON.
"""

import json
import os
import sys
import unittest

from helpers.pgcluster import MADE


class RemovingFinishedClusters(unittest.TextTestResult):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.keep_all = os.environ.get("COSID_KEEP_CLUSTERS") == "1"
        # MADE[:seen] have been given to a test or a class.
        self.seen = 0
        self.current_class = None
        self.class_clusters = []
        self.class_failed = False
        self.problems_at_stop = 0

    def problems(self):
        return len(self.failures) + len(self.errors) + len(self.unexpectedSuccesses)

    def remove(self, clusters, passed):
        if self.keep_all or not passed:
            return
        for cluster in clusters:
            # A server a test left running is not removed under itself.
            if not cluster.is_running():
                cluster.remove()

    def finish_class(self):
        # A fixture's failure (setUpClass, tearDownClass, setUpModule) is recorded between two
        # tests.
        failed = self.class_failed or self.problems() > self.problems_at_stop
        self.remove(self.class_clusters, not failed)
        self.class_clusters, self.class_failed = [], False

    def startTest(self, test):
        fixture_failed = self.problems() > self.problems_at_stop
        if type(test) is not self.current_class:
            self.finish_class()
            self.current_class = type(test)
        if fixture_failed:
            # Made by a fixture that failed (the setUpClass of a class none of whose tests ran,
            # say): kept, with their logs.
            self.seen = len(MADE)
        self.problems_at_stop = self.problems()
        # Made since the last test ended: by this class's setUpClass.
        self.class_clusters += MADE[self.seen:]
        self.seen = len(MADE)
        self.problems_at_test_start = self.problems()
        super().startTest(test)

    def stopTest(self, test):
        super().stopTest(test)
        passed = self.problems() == self.problems_at_test_start
        self.class_failed |= not passed
        self.remove(MADE[self.seen:], passed)
        self.seen = len(MADE)
        self.problems_at_stop = self.problems()

    def stopTestRun(self):
        self.finish_class()
        super().stopTestRun()
        result_file = os.environ.get("COSID_TEST_RESULT")
        if result_file:
            with open(result_file, "w") as handle:
                json.dump({"tests": self.testsRun, "failures": len(self.failures),
                           "errors": len(self.errors), "skipped": len(self.skipped),
                           "unexpected_successes": len(self.unexpectedSuccesses)}, handle)


class Runner(unittest.TextTestRunner):
    resultclass = RemovingFinishedClusters


if __name__ == "__main__":
    unittest.main(module=None, testRunner=Runner, argv=[sys.argv[0]] + sys.argv[1:])
