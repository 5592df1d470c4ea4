"""The integration tiers, on several PostgreSQL versions at once:

    python3 suite.py [--versions "15 16 17 18"] [--jobs 6] [tier ...]

The tiers are folders of this one: `regress` (pg_regress golden files), `cluster` (tests against
real servers) and `faults` (fault injection, crashes, clock steps and load); with none named, all
three. Their tests are found by discovery (`test_*.py`, as `python3 -m unittest discover`), once
per version, with that version's pg_config (scripts/pg-config.sh).

Each job is one test, or one class when the class or its module has fixtures (setUpClass and the
like: its tests share a server), run as `python3 run.py -v <id>` in a process of its own, with
its output in target/test-logs/pg<major>/<id>.log and its clusters in a folder of its own. At
most --jobs run at a time (COSID_TEST_JOBS, 6 by default), the longest first: tests/durations.json
holds what each took in a measured run (`--write-durations` rewrites it from this run; a job it
does not know counts as long). The tests mostly wait on lease timings, not on the processor,
which is why several run on two cores. Ports are never shared: free_port holds a lock on each
port it hands out until its process ends. A job that needs its version to itself (see ALONE)
waits until that version's other jobs are done, and no other starts meanwhile. A job of BESIDE
(a build that keeps the processor busy at the lowest priority) runs outside the slots.

At the end: the output of every failed job, then the tests, skips and time of each tier and
version (with, from --steps, the times of the steps make ran before) and how busy the
processors were. The exit status is 1 if
any job failed. A job is never run again: a test that fails once has failed.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import unittest
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
TIERS = {
    "regress": "SQL golden files",
    "cluster": "cluster tests",
    "faults": "fault and load tests",
}
# Jobs during which no other job of the same version may run, and why.
ALONE = {
    "cluster.test_package.Packages":
        "it moves this version's installed extension aside to install the packages in its place",
}
# Jobs that run beside the others, not in one of the --jobs slots, and why: they keep the
# processor busy at the lowest priority, using what the tests, which mostly wait on lease
# timings, leave; in a slot such a job held it for four times its time alone. They use nothing of
# their version's installed extension, so a job of ALONE does not wait for them either.
BESIDE = {
    "cluster.test_clean_host.CleanHost.test_make_install_alone_on_a_machine_with_only_postgresql":
        "it builds cosid from nothing in a Debian system of its own, at the lowest priority",
}
# A job still running after this long is stopped and counted as failed; a job of BESIDE, which
# gets the processor only when the tests leave it, has an hour (the clean-host job took 658 s).
JOB_TIMEOUT_S = 20 * 60
BESIDE_TIMEOUT_S = 60 * 60
DURATIONS = TESTS / "durations.json"
UNKNOWN_DURATION_S = 120


def discover(tiers):
    """The jobs of the tiers for $PG_CONFIG: (tier, id, number of tests)."""
    sys.path.insert(0, str(TESTS))
    loader = unittest.TestLoader()
    jobs = {}
    for tier in tiers:
        found = loader.discover(start_dir=str(TESTS / tier), pattern="test_*.py",
                                top_level_dir=str(TESTS))
        if loader.errors:
            raise SystemExit("\n".join(loader.errors))
        for test in flatten(found):
            if isinstance(test, unittest.loader._FailedTest):
                raise SystemExit(f"{test.id()}: {test._exception}")
            cls = type(test)
            job = f"{cls.__module__}.{cls.__qualname__}" if has_fixtures(cls) else test.id()
            jobs.setdefault(job, [tier, job, 0])[2] += 1
    return list(jobs.values())


def flatten(suite):
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from flatten(item)
        else:
            yield item


def has_fixtures(cls):
    """Whether the tests of the class share something set up once; a class whose fixtures only
    report (a table printed at the end, say) says `tests_may_run_apart = True`."""
    if getattr(cls, "tests_may_run_apart", False):
        return False
    module = sys.modules[cls.__module__]
    return (cls.setUpClass.__func__ is not unittest.TestCase.setUpClass.__func__
            or cls.tearDownClass.__func__ is not unittest.TestCase.tearDownClass.__func__
            or hasattr(module, "setUpModule") or hasattr(module, "tearDownModule"))


def pg_config_of(version):
    return subprocess.check_output([ROOT / "scripts" / "pg-config.sh", version], text=True).strip()


class Job:
    def __init__(self, version, tier, test_id, tests, estimate, number):
        self.version, self.tier, self.id, self.tests = version, tier, test_id, tests
        self.estimate = estimate
        self.beside = test_id in BESIDE
        # The folder of its clusters, target/test-clusters/pg<major>/<number>: short, since a
        # server's socket path must fit in 107 bytes.
        self.number = number
        self.log = ROOT / "target" / "test-logs" / f"pg{version}" / f"{test_id}.log"
        self.result_file = self.log.with_suffix(".result.json")
        self.process = None
        self.started = self.ended = None
        self.result = None

    def start(self, pg_config):
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.result_file.unlink(missing_ok=True)
        env = {**os.environ, "PG_CONFIG": pg_config, "COSID_TEST_JOB": str(self.number),
               "COSID_TEST_RESULT": str(self.result_file), "PYTHONUNBUFFERED": "1"}
        # A job of BESIDE runs at the lowest priority from its start.
        nice = ["nice", "-n", "19"] if self.beside else []
        with open(self.log, "w") as log:
            self.process = subprocess.Popen([*nice, sys.executable, "run.py", "-v", self.id],
                                            cwd=TESTS,
                                            env=env, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        self.started = time.monotonic()

    def finished(self):
        if self.process.poll() is None:
            timeout = BESIDE_TIMEOUT_S if self.beside else JOB_TIMEOUT_S
            if time.monotonic() - self.started < timeout:
                return False
            self.stop()
            with open(self.log, "a") as log:
                log.write(f"\nsuite: stopped after {timeout} s\n")
        self.ended = time.monotonic()
        try:
            self.result = json.loads(self.result_file.read_text())
            self.result_file.unlink()
        except (OSError, ValueError):
            self.result = {"tests": 0, "failures": 0, "errors": 1, "skipped": 0}
        if self.process.returncode != 0 and self.failed_count() == 0:
            self.result["errors"] = 1
        return True

    def stop(self):
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        # Its servers run in sessions of their own (pg_ctl starts them so): stopped here, or
        # they would go on using the processor under the other jobs.
        folder = ROOT / "target" / "test-clusters" / f"pg{self.version}" / str(self.number)
        for pid_file in folder.glob("*/data/postmaster.pid"):
            try:
                postmaster = int(pid_file.read_text().split("\n", 1)[0])
                os.killpg(postmaster, signal.SIGKILL)
            except (OSError, ValueError):
                pass

    def failed_count(self):
        r = self.result
        return r["failures"] + r["errors"] + r.get("unexpected_successes", 0)

    def seconds(self):
        return self.ended - self.started


def plan(versions, tiers):
    """Every version's jobs, longest first."""
    durations = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    listings = {}
    for version in versions:
        listings[version] = subprocess.Popen(
            [sys.executable, __file__, "--discover", *tiers], cwd=TESTS,
            env={**os.environ, "PG_CONFIG": pg_config_of(version)},
            stdout=subprocess.PIPE, text=True)
    jobs = []
    for version, listing in listings.items():
        out, _ = listing.communicate()
        if listing.returncode != 0:
            raise SystemExit(f"suite: the tests of PostgreSQL {version} could not be listed")
        for number, (tier, test_id, tests) in enumerate(json.loads(out), 1):
            jobs.append(Job(version, tier, test_id, tests,
                            durations.get(test_id, UNKNOWN_DURATION_S), number))
    jobs.sort(key=lambda job: (-job.estimate, job.id, job.version))
    return jobs


def run(jobs, slots, pg_configs, started):
    pending, running, done = list(jobs), [], []
    total = len(jobs)
    while pending or running:
        in_slots = [job for job in running if not job.beside]
        blocked_versions = set()
        for job in in_slots:
            if job.id in ALONE:
                blocked_versions.add(job.version)
        for job in list(pending):
            if not job.beside and (len(in_slots) >= slots or job.version in blocked_versions):
                continue
            if job.id in ALONE:
                # It waits for its version's running jobs; none of its version starts meanwhile.
                blocked_versions.add(job.version)
                if any(other.version == job.version for other in in_slots):
                    continue
            pending.remove(job)
            job.start(pg_configs[job.version])
            running.append(job)
            if not job.beside:
                in_slots.append(job)
        for job in list(running):
            if job.finished():
                running.remove(job)
                done.append(job)
                verdict = "FAILED" if job.failed_count() else "ok"
                skipped = f", {job.result['skipped']} skipped" if job.result["skipped"] else ""
                print(f"[{len(done):>3}/{total}] {job.ended - started:>5.0f} s pg{job.version} "
                      f"{job.id}: {verdict} ({job.result['tests']} tests{skipped}, "
                      f"{job.seconds():.0f} s)", flush=True)
                remove_if_empty(job)
        time.sleep(0.2)
    return done


def remove_if_empty(job):
    folder = ROOT / "target" / "test-clusters" / f"pg{job.version}" / str(job.number)
    try:
        folder.rmdir()
    except OSError:
        pass


def processor_times():
    """The machine's processor times so far from /proc/stat: (normal priority, lowest priority
    (nice), idle, all), in clock ticks; None where there is no /proc/stat."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, idle, iowait = fields[:5]
    rest = sum(fields[5:8])  # irq, softirq, steal
    return user + system + rest, nice, idle + iowait, sum(fields[:8])


def processor_use(before, after):
    """How the processors were used between two processor_times(), as a sentence."""
    if before is None or after is None or after[3] <= before[3]:
        return "processor use: unknown"
    busy, nice, idle, total = (a - b for a, b in zip(after, before))
    return (f"the machine's processors: {100 * busy / total:.0f}% busy at normal priority (and in "
            f"the kernel), {100 * nice / total:.0f}% at low priority (niced), "
            f"{100 * idle / total:.0f}% idle")


def report(done, versions, tiers, slots, wall_s, steps, processors):
    failed = [job for job in done if job.failed_count()]
    for job in failed:
        print(f"\n======== pg{job.version} {job.id} FAILED: {job.log}\n"
              f"{job.log.read_text(errors='replace')}")
    print("\nmake test: " + ("FAILED: " + ", ".join(f"pg{j.version} {j.id}" for j in failed)
                             if failed else "all passed"))
    for name, seconds in steps:
        print(f"  {name:<44}{seconds:>6} s")
    print(f"  {'tier':<30}{'version':>8}{'tests':>7}{'skipped':>9}{'wall':>8}{'busy':>8}")
    for tier in tiers:
        for version in versions:
            mine = [job for job in done if job.tier == tier and job.version == version]
            if not mine:
                continue
            tests = sum(job.result["tests"] for job in mine)
            skipped = sum(job.result["skipped"] for job in mine)
            wall = max(job.ended for job in mine) - min(job.started for job in mine)
            busy = sum(job.seconds() for job in mine)
            print(f"  {tier + ' (' + TIERS[tier] + ')':<30}{version:>8}{tests:>7}{skipped:>9}"
                  f"{wall:>6.0f} s{busy:>6.0f} s")
    print(f"  (wall: from a tier's first job's start to its last one's end on that version; busy:"
          f" the sum of its jobs' times)\n  every tier and version side by side: {len(done)} "
          f"jobs, at most {slots} at a time (those of BESIDE beside them), in {wall_s:.0f} s;\n"
          f"  {processors}")
    return not failed


def write_durations(done, tiers):
    """The longest time of each job over the versions; jobs of tiers not run keep theirs, and
    jobs that are gone are dropped."""
    durations = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    durations = {job: seconds for job, seconds in durations.items()
                 if job.split(".", 1)[0] not in tiers}
    measured = {}
    for job in done:
        measured[job.id] = max(measured.get(job.id, 0), round(job.seconds(), 1))
    durations.update(measured)
    DURATIONS.write_text(json.dumps(dict(sorted(durations.items())), indent=1) + "\n")


def read_steps(path):
    """Lines of `<seconds> <name>` written by the Makefile for the steps before the suite."""
    if not path or not Path(path).exists():
        return []
    steps = []
    for line in Path(path).read_text().splitlines():
        seconds, _, name = line.partition(" ")
        steps.append((name, int(seconds)))
    return steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tiers", nargs="*", help=f"of {', '.join(TIERS)} (all by default)")
    parser.add_argument("--versions", default=os.environ.get("TESTED_PG", "15 16 17 18"))
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("COSID_TEST_JOBS", 6)))
    parser.add_argument("--steps", help="a file of the times of earlier steps, to show")
    parser.add_argument("--write-durations", action="store_true")
    parser.add_argument("--discover", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    tiers = args.tiers or list(TIERS)
    unknown = [tier for tier in tiers if tier not in TIERS]
    if unknown:
        parser.error(f"no tier {', '.join(unknown)}; the tiers are {', '.join(TIERS)}")
    if args.discover:
        print(json.dumps(discover(tiers)))
        return 0
    versions = args.versions.split()
    pg_configs = {version: pg_config_of(version) for version in versions}
    # The clusters' initdb templates are made again for this run (tests/helpers/pgcluster.py).
    shutil.rmtree(ROOT / "target" / "test-clusters" / "initdb-templates", ignore_errors=True)
    started = time.monotonic()
    processor_before = processor_times()
    jobs = plan(versions, tiers)
    print(f"suite: {len(jobs)} jobs ({sum(job.tests for job in jobs)} tests) of "
          f"{', '.join(tiers)} on PostgreSQL {', '.join(versions)}, {args.jobs} at a time",
          flush=True)
    try:
        done = run(jobs, args.jobs, pg_configs, started)
    finally:
        # Interrupted, or failed to start a job: nothing is left running.
        for job in jobs:
            if job.process is not None and job.process.poll() is None:
                job.stop()
    if args.write_durations:
        write_durations(done, tiers)
    passed = report(done, versions, tiers, args.jobs, time.monotonic() - started,
                    read_steps(args.steps), processor_use(processor_before, processor_times()))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
