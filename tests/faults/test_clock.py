"""Clock faults with the fault tier's clock faker (helpers/fakeclock.c): the server's wall clock is
offset through a file of its own (the monotonic clocks stay real), while clients record every id. A small step back is waited
out, a large one is refused, and a step back across a restart waits for the lease's watermark or
gives the machine id back. Zero duplicates in every case."""

import json
import os
import shutil
import signal
import time
import unittest

from helpers.clients import copy_ids, duplicates, run_session
from helpers.failover import ONE_MACHINE_ID
from helpers.faults import fake_clock, set_clock_offset
from helpers.leases import FAST_LEASES, status, try_next, ts_ms_of, wait_up
from helpers.pgcluster import Cluster, SqlError, free_port, query_as, wait_for



def first_id_after_refusals(test, cluster, timeout_s, behind_what):
    """Calls cosid_next() until it answers: the first calls must be refused with 55P03 (retry:
    the clock is behind `behind_what`), and an id must come within `timeout_s`. Returns that id."""
    refused = False
    deadline = time.monotonic() + timeout_s
    while True:
        value, sqlstate = try_next(cluster)
        if value is not None:
            break
        test.assertLess(time.monotonic(), deadline, "never generated again")
        test.assertEqual(sqlstate, "55P03")
        refused = True
        time.sleep(0.05)
    test.assertTrue(refused, f"an id was issued with the clock behind {behind_what}")
    return value


class ClockFaults(unittest.TestCase):
    def setUp(self):
        # One machine id, so that a server restarted with its clock behind must take the same
        # one back, and wait for (or give back) its watermark. With free machine ids its worker,
        # on the faked clock, would take a free one; test_lease tests that choice.
        self.cluster = Cluster(self.id().rsplit(".", 1)[-1][:40], free_port(25160),
                               {**FAST_LEASES, **ONE_MACHINE_ID})
        self.cluster.init()
        self.offset_file = self.cluster.base / "faketime"
        self.cluster.env = fake_clock(self.offset_file, 0)
        self.cluster.start()
        self.cluster.query("CREATE EXTENSION cosid")
        wait_up(self.cluster)
        self.sessions = []

    def tearDown(self):
        self.cluster.stop(mode="immediate", check=False)

    def set_offset(self, seconds):
        """Moves the server's wall clock to real time + seconds."""
        set_clock_offset(self.offset_file, seconds)

    def generate(self, count=2_000):
        session = run_session(self.cluster, 0, [copy_ids(count)])
        self.sessions.append(session)
        return session

    def assert_no_duplicates(self):
        total = sum(len(s.ids) for s in self.sessions)
        self.assertGreater(total, 0)
        self.assertEqual(duplicates(self.sessions), 0)

    def test_small_step_back_is_waited_out(self):
        # One connection, so that the step comes right after the last id, however slow the
        # machine is to connect.
        session = run_session(self.cluster, 0, [
            copy_ids(2_000), f"\\! printf '%s\\n' -0.300 > {self.offset_file}", copy_ids(200)])
        self.sessions.append(session)
        self.assertEqual(session.error, "")
        before, after = session.ids[:2_000], session.ids[2_000:]
        self.assertEqual(len(after), 200)
        self.assertGreater(min(after), max(before))
        waits = int(self.cluster.query("SELECT clock_backwards_waits FROM cosid.status"))
        self.assertGreaterEqual(waits, 1, "it did not wait")
        self.assert_no_duplicates()

    def test_large_step_back_is_refused_until_the_clock_catches_up(self):
        before = self.generate()
        self.set_offset(-2.0)
        with self.assertRaises(SqlError) as refused:
            self.cluster.query("SELECT cosid_next()")
        self.assertEqual(refused.exception.sqlstate, "55P03")
        self.assertIn("clock moved backwards by", refused.exception.stderr)
        self.assertIn("cosid.clock_backwards_broken_threshold (500 ms)", refused.exception.stderr)
        # The faked clock runs at real speed: after 2 s it passes the last issued timestamp.
        resumed = wait_for(lambda: try_next(self.cluster)[0], 5, "generation to resume")
        self.assertGreater(resumed, max(before.ids))
        self.sessions.append(type(before)(client=1, started=0, ids=[resumed]))
        self.generate()
        self.assert_no_duplicates()

    def restart_with_offset(self, seconds):
        machine_id = int(status(self.cluster)["machine_id"])
        self.cluster.stop()
        self.set_offset(seconds)
        self.cluster.start()
        return machine_id

    def test_small_step_back_across_a_restart_waits_for_the_watermark(self):
        before = self.generate()
        machine_id = self.restart_with_offset(-0.3)
        up = wait_up(self.cluster)
        self.assertEqual(int(up["machine_id"]), machine_id)
        after = self.generate()
        self.assertGreater(min(after.ids), max(before.ids))
        self.assert_no_duplicates()

    def test_large_step_back_across_a_restart_refuses_until_the_watermark(self):
        before = self.generate()
        machine_id = self.restart_with_offset(-6.0)
        # Refused while the clock is behind the watermark the last holder left: by the worker,
        # which gives the machine id back (CLOCK_BEHIND), or by the generator, whose floor is the
        # watermark; either is right here, and the give-back itself is tested in test_lease.
        value = first_id_after_refusals(self, self.cluster, 20, "the watermark")
        self.assertEqual(int(status(self.cluster)["machine_id"]), machine_id)
        self.assertGreater(value, max(before.ids))
        self.sessions.append(type(before)(client=1, started=0, ids=[value]))
        self.generate()
        self.assert_no_duplicates()


class FixedMachineIdAcrossACrash(unittest.TestCase):
    """A fixed machine id has no lease watermark: its floor after a crash comes from the local
    state file the state writer keeps. Each test kills the whole server right after its last id
    and restarts it with the clock seconds behind: nothing may be issued until the clock has passed
    every id issued before the crash."""

    def setUp(self):
        self.cluster = Cluster(self.id().rsplit(".", 1)[-1][:40], free_port(25175), {
            "cosid.distributor": "manual", "cosid.machine_id": 5,
            "cosid.local_state_interval": "'200ms'"}, durable=True).init()
        self.addCleanup(self.cluster.stop, mode="immediate", check=False)
        self.offset_file = self.cluster.base / "faketime"
        self.cluster.env = fake_clock(self.offset_file, 0)
        self.cluster.start()
        self.cluster.query("CREATE EXTENSION cosid")
        wait_for(lambda: (self.cluster.data / "cosid.state").exists(), 5, "the state file")

    def crash_and_restart_behind(self, before, seconds):
        cluster = self.cluster
        cluster.crash()
        set_clock_offset(self.offset_file, -seconds)
        cluster.start()
        value = first_id_after_refusals(self, cluster, seconds + 15, "the floor")
        after = run_session(cluster, 1, [copy_ids(2_000)])
        self.assertEqual(after.error, "")
        self.assertGreater(value, max(before.ids))
        self.assertGreater(min(after.ids), value)
        self.assertEqual(duplicates([before, after]), 0)

    def test_ids_after_the_last_write_are_covered(self):
        # Idle for several intervals, then a short burst and the crash: the record holds the time
        # of its write, not only the last id, which is old.
        time.sleep(1)
        before = run_session(self.cluster, 0, [copy_ids(100)])
        self.assertEqual(before.error, "")
        self.crash_and_restart_behind(before, 5)

    def test_a_stalled_state_writer_still_leaves_a_floor_above_every_id(self):
        # The writer stops writing; ids are issued long after its last record (more than the
        # interval it pads with). In the same boot, the boot-time clock since that record covers
        # them.
        writer = self.cluster.worker_pid("cosid state writer")
        self.assertIsNotNone(writer)
        os.kill(writer, signal.SIGSTOP)
        time.sleep(1.5)
        before = run_session(self.cluster, 0, [copy_ids(2_000)])
        self.assertEqual(before.error, "")
        self.crash_and_restart_behind(before, 5)

    def test_a_torn_state_file_after_a_crash_refuses_ids_until_it_is_restored(self):
        # The hostile case: ids up to the crash, the state file torn by it, the clock 5 s behind
        # at the restart. Without its floor the server would repeat ids; it must refuse instead,
        # and generate above every earlier id once the file is restored.
        before = run_session(self.cluster, 0, [copy_ids(2_000)])
        self.assertEqual(before.error, "")
        cluster = self.cluster
        cluster.crash()
        state = cluster.data / "cosid.state"
        record = state.read_bytes()
        plant_state_file(cluster, record[:len(record) // 2])
        set_clock_offset(self.offset_file, -5)
        cluster.start()
        refusal = assert_refused_for_the_state_file(self, cluster, "restart the server")
        self.assertIn("is truncated: it does not end with a newline", refusal.stderr)
        self.assertEqual(state.read_bytes(), record[:len(record) // 2], "the file was overwritten")
        cluster.stop()
        plant_state_file(cluster, record)
        cluster.start()
        value = first_id_after_refusals(self, cluster, 20, "the restored floor")
        self.assertGreater(value, max(before.ids))


STATE_FILE_PORT = 25185


def plant_state_file(cluster, content):
    """Writes `content` (bytes) as the data directory's cosid.state, owned by the server."""
    path = cluster.data / "cosid.state"
    path.write_bytes(content)
    if os.geteuid() == 0:
        shutil.chown(path, "postgres", "postgres")


def assert_refused_for_the_state_file(test, cluster, what_to_do):
    """cosid_next() must refuse with 55000, naming the state file, with a DETAIL and a HINT that
    says what to do. Returns the error."""
    with test.assertRaises(SqlError) as refused:
        cluster.query("SELECT cosid_next()")
    error = refused.exception
    test.assertEqual(error.sqlstate, "55000", error.stderr)
    test.assertIn(str(cluster.data / "cosid.state"), error.message)
    test.assertIn("DETAIL:", error.stderr)
    test.assertIn("HINT:  Restore the file", error.stderr)
    test.assertIn(what_to_do, error.stderr)
    # A role that is not a superuser is told what happened, not the data directory's path.
    cluster.query("DO $$ BEGIN CREATE ROLE cosid_app LOGIN; "
                  "EXCEPTION WHEN duplicate_object THEN NULL; END $$")
    with test.assertRaises(SqlError) as refused:
        query_as(cluster, "cosid_app", "SELECT cosid_next()")
    hidden = refused.exception
    test.assertEqual(hidden.sqlstate, "55000", hidden.stderr)
    test.assertIn("cosid cannot use its state file", hidden.message)
    test.assertIn("shown to superusers only", hidden.stderr)
    test.assertIn("HINT:  Restore the file", hidden.stderr)
    test.assertNotIn(str(cluster.data), hidden.stderr)
    return error


class StateFileFailsClosed(unittest.TestCase):
    """The state file holds the only floor of a fixed machine id (and a stable instance's floor
    for a lease table that forgot its watermark): a file that cannot be read exactly must stop
    generation, with a message naming it, never be taken for "no floor". Names that could break
    the file are refused at start; those accepted survive it."""

    def cluster(self, settings):
        cluster = Cluster(self.id().rsplit(".", 1)[-1][:40], free_port(STATE_FILE_PORT),
                          settings).init()
        self.addCleanup(cluster.stop, mode="immediate", check=False)
        return cluster

    def test_names_with_control_characters_are_refused_at_start(self):
        # In postgresql.conf, \t inside a quoted value is a tab and \n a newline.
        cases = [
            ({"cosid.distributor": "manual", "cosid.machine_id": 5,
              "cosid.namespace": "'tab\\there'"}, "cosid.namespace"),
            ({"cosid.stable": "on", "cosid.instance_id": "'db\\n1'"}, "cosid.instance_id"),
        ]
        for settings, name in cases:
            with self.subTest(name):
                cluster = self.cluster(settings)
                self.assertFalse(cluster.start(check=False),
                                 f"started with a control character in {name}")
                self.assertIn(f'invalid value for parameter "{name}"', cluster.log())
                self.assertIn("may not contain control characters", cluster.log())

    def test_an_unusable_state_file_stops_a_fixed_machine_id(self):
        cluster = self.cluster({"cosid.distributor": "manual", "cosid.machine_id": 5,
                                "cosid.local_state_interval": "'100ms'"})
        ahead_ms = int(time.time() * 1000) + 60_000
        record = (f'{{"cosid_state":1,"namespace":"cosid","machine_id":5,"floor_ms":{ahead_ms},'
                  '"written":null}\n').encode()
        contents = {
            "empty": b"",
            "garbage": b"\x00\x01garbage\xff",
            "truncated": record[:-12],
            "without its newline": record[:-1],
            "foreign JSON": b'{"hello": "world"}\n',
            "a newer format": record.replace(b'"cosid_state":1', b'"cosid_state":2'),
            "a torn line of the older format": b"cosid\t5\t16",
            "an inexact line of the older format": b"cosid\t5\t+16\n",
        }
        created = False
        for count, (name, content) in enumerate(contents.items(), 1):
            with self.subTest(name):
                plant_state_file(cluster, content)
                cluster.start()
                if not created:
                    cluster.query("CREATE EXTENSION cosid")
                    created = True
                assert_refused_for_the_state_file(self, cluster, "delete the file and restart")
                row = status(cluster)
                self.assertEqual(row["state"], "STOPPED")
                self.assertIn("cosid.state", row["last_error"])
                # The state writer is up, and leaves the file alone: it is the only record of
                # the floor.
                wait_for(lambda: cluster.log().count("the file is left as it is") == count, 10,
                         "the state writer's warning")
                self.assertEqual((cluster.data / "cosid.state").read_bytes(), content)
                cluster.stop()
                self.assertEqual((cluster.data / "cosid.state").read_bytes(), content)
        # Deleted, as the hint says: no floor, ids again, and a new record.
        (cluster.data / "cosid.state").unlink()
        cluster.start()
        self.assertIsNotNone(try_next(cluster)[0])

    def test_an_unusable_state_file_stops_a_stable_instance_until_it_is_removed(self):
        cluster = self.cluster({**FAST_LEASES, "cosid.stable": "on",
                                "cosid.instance_id": "'orders-db-f'",
                                "cosid.local_state_interval": "'100ms'"})
        garbage = b'{"cosid_state":1,"namespace":"cosid","machine_id":0,"floor\n'
        plant_state_file(cluster, garbage)
        cluster.start()
        cluster.query("CREATE EXTENSION cosid")
        row = wait_for(lambda: (lambda r: "cosid.state" in r["last_error"] and r)(status(cluster)),
                       10, "the worker to report the state file")
        self.assertEqual(row["state"], "STOPPED")
        self.assertIn("is not a valid cosid state record", row["last_error"])
        self.assertEqual(row["machine_id"], "", "a machine id was claimed")
        assert_refused_for_the_state_file(self, cluster, "the background worker then claims")
        self.assertEqual((cluster.data / "cosid.state").read_bytes(), garbage)
        # Removed: the worker claims again without a restart, and writes a new record.
        (cluster.data / "cosid.state").unlink()
        wait_up(cluster)
        self.assertIsNotNone(try_next(cluster)[0])
        wait_for(lambda: (cluster.data / "cosid.state").exists(), 10, "a new state file")
        self.assertEqual(json.loads((cluster.data / "cosid.state").read_text())["namespace"],
                         "cosid")

    def test_any_accepted_namespace_survives_the_state_file(self):
        # Quotes, a backslash and non-ASCII text, in postgresql.conf's quoting.
        namespace = 'it\'s "q" \\ ünï 日本'
        cluster = self.cluster({"cosid.distributor": "manual", "cosid.machine_id": 5,
                                "cosid.namespace": "'it''s \"q\" \\\\ ünï 日本'"})
        # Far enough ahead that the start and CREATE EXTENSION of a loaded machine end before it.
        floor_ms = int(time.time() * 1000) + 10_000
        plant_state_file(cluster, json.dumps({
            "cosid_state": 1, "namespace": namespace, "machine_id": 5, "floor_ms": floor_ms,
            "written": None}).encode() + b"\n")
        cluster.start()
        cluster.query("CREATE EXTENSION cosid")
        self.assertEqual(status(cluster)["state"], "UP")
        self.assertEqual(cluster.query("SELECT namespace FROM cosid.status"), namespace)
        # The floor of its own namespace is honoured: refused until the clock passes it.
        value = first_id_after_refusals(self, cluster, 25, "the planted floor")
        self.assertGreater(ts_ms_of(value), floor_ms)
        # And written back as JSON, which reads back to the same namespace.
        cluster.stop()
        written = json.loads((cluster.data / "cosid.state").read_text())
        self.assertEqual((written["namespace"], written["machine_id"]), (namespace, 5))
        self.assertGreaterEqual(written["floor_ms"], ts_ms_of(value))

    def test_an_exact_line_of_the_older_format_still_gives_its_floor(self):
        cluster = self.cluster({"cosid.distributor": "manual", "cosid.machine_id": 5})
        floor_ms = int(time.time() * 1000) + 10_000
        plant_state_file(cluster, f"cosid\t5\t{floor_ms}\n".encode())
        cluster.start()
        cluster.query("CREATE EXTENSION cosid")
        value = first_id_after_refusals(self, cluster, 25, "the older format's floor")
        self.assertGreater(ts_ms_of(value), floor_ms)
        # A record of another namespace or machine id is no floor: the configuration changed.
        cluster.stop()
        plant_state_file(cluster, f"other\t5\t{floor_ms + 600_000}\n".encode())
        cluster.start()
        self.assertIsNotNone(try_next(cluster)[0])




class ExcursionThenCrash(unittest.TestCase):
    """A clock stepped ahead for a moment and back, then a backend killed with kill -9: the
    postmaster reinitialises shared memory, and every generator of the new segment, the default
    one and a named one, opens above the ids the thrown-away segment issued during the
    excursion. (0.5.0 opened them above the state file's floor only, written before the
    excursion: they issued the excursion's timestamps again as the real clock reached them,
    906 and 331 duplicates in three rounds.)"""

    AHEAD_S = 6

    def test_a_crash_restart_opens_above_what_the_excursion_issued(self):
        cluster = Cluster("excursion-crash", free_port(25168), {
            "cosid.distributor": "'manual'", "cosid.machine_id": "7",
            "cosid.local_state_interval": "'10s'"})
        cluster.init()
        offset_file = cluster.base / "faketime"
        cluster.env = fake_clock(offset_file, 0)
        cluster.start()
        self.addCleanup(cluster.stop, mode="immediate", check=False)
        cluster.query("CREATE EXTENSION cosid")
        cluster.query("SELECT cosid_create_generator('n', namespace => 'n')")
        wait_for(lambda: try_next(cluster, "SELECT cosid_next('n')")[0], 30,
                 "the named generator")
        generators = {"default": None, "n": "n"}
        sessions = {name: [] for name in generators}
        for name, generator in generators.items():
            sessions[name].append(run_session(cluster, 0, [copy_ids(2_000, generator)]))
        set_clock_offset(offset_file, self.AHEAD_S)
        ahead = {}
        for name, generator in generators.items():
            session = run_session(cluster, 0, [copy_ids(2_000, generator)])
            self.assertEqual(len(session.ids), 2_000, session.error)
            sessions[name].append(session)
            ahead[name] = max(session.ids)
        set_clock_offset(offset_file, 0)
        # The test clusters commit asynchronously: what the crash must not forget is made durable.
        cluster.query("CHECKPOINT")
        cluster.kill9_a_generating_backend()
        for name, generator in generators.items():
            sql = f"SELECT cosid_next('{generator}')" if generator else "SELECT cosid_next()"
            # Refused (the clock is behind the floor) until the real clock passes it.
            first = wait_for(lambda: try_next(cluster, sql)[0], 60 + 10 * self.AHEAD_S,
                             f"generator {name} after the crash")
            self.assertGreater(ts_ms_of(first), ts_ms_of(ahead[name]),
                               f"generator {name} issued below the excursion's ids")
            sessions[name].append(type(sessions[name][0])(client=1, started=0, ids=[first]))
            sessions[name].append(run_session(cluster, 0, [copy_ids(2_000, generator)]))
        for name in generators:
            self.assertEqual(duplicates(sessions[name]), 0, name)


if __name__ == "__main__":
    unittest.main()
