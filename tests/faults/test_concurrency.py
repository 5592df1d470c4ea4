"""Uniqueness under real concurrency and real crashes: many backends of one server share the
generator in shared memory; a backend killed with SIGKILL makes the postmaster reinitialise
shared memory, and generation goes on without a duplicate."""

import time
import unittest

from helpers.clients import (LoopingClients, concurrent_sessions, copy_ids, duplicates,
                             sessions_not_increasing)
from helpers.pgcluster import Cluster, free_port, wait_for

MACHINE_ID = 9
SEQUENCE_BITS = 12


def machine_of(value):
    return (value >> SEQUENCE_BITS) & 0x3FF


class Concurrency(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # Durable: a backend killed with SIGKILL throws away the WAL not yet written, and with
        # asynchronous commit that could be CREATE EXTENSION itself (the ids are copied out, not
        # stored, so durability costs nothing here).
        cls.cluster = Cluster("concurrency", free_port(25130),
                              {"cosid.distributor": "manual", "cosid.machine_id": MACHINE_ID},
                              durable=True).init()
        cls.cluster.start()
        cls.cluster.query("CREATE EXTENSION cosid")

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    def issued(self):
        return int(self.cluster.query("SELECT ids_issued FROM cosid.status"))

    def test_eight_backends_generate_a_million_unique_ids(self):
        clients, batches, batch = 8, 5, 25_000
        issued_before = self.issued()
        sessions = concurrent_sessions(self.cluster, clients, [copy_ids(batch)] * batches)
        for session in sessions:
            self.assertEqual(session.error, "")
        total = sum(len(session.ids) for session in sessions)
        self.assertEqual(total, clients * batches * batch)
        self.assertGreaterEqual(total, 1_000_000)
        self.assertEqual(duplicates(sessions), 0)
        self.assertEqual(sessions_not_increasing(sessions), [])
        self.assertEqual({machine_of(v) for s in sessions for v in s.ids}, {MACHINE_ID})
        self.assertEqual(self.issued() - issued_before, total)
        # The backends really ran at the same time: their id ranges interleave.
        spans = sorted((min(s.ids), max(s.ids)) for s in sessions)
        overlapping = sum(1 for a, b in zip(spans, spans[1:]) if b[0] < a[1])
        self.assertGreater(overlapping, 0, "the sessions ran one after another")
        print(f"\n  {clients} backends, {total} ids, 0 duplicates, "
              f"{overlapping} overlapping session pairs", end=" ")

    def test_backend_killed_by_sigkill_leaves_no_duplicates(self):
        cluster = self.cluster
        postmaster = cluster.postmaster_pid()
        log_before = len(cluster.log())
        with LoopingClients(cluster, clients=8, batch=5_000, batches_per_session=20) as load:
            wait_for(lambda: load.ids_so_far() >= 200_000, 30, "ids before the kill")
            # The postmaster notices, terminates every backend, reinitialises shared memory.
            killed_at = cluster.kill9_a_generating_backend()
            recovered_at, recovered_wall = time.monotonic(), time.time()
            wait_for(lambda: load.ids_so_far(started_after=recovered_at) >= 200_000, 60,
                       "ids after the kill")
        sessions = load.sessions
        log = cluster.log()[log_before:]
        self.assertIn("terminated by signal 9", log)
        self.assertIn("all server processes terminated; reinitializing", log)
        self.assertEqual(cluster.postmaster_pid(), postmaster, "the postmaster itself restarted")
        before = [s for s in sessions if s.ended <= killed_at]
        cut = [s for s in sessions if s.started <= killed_at < s.ended]
        after = [s for s in sessions if s.started >= recovered_at]
        self.assertTrue(before and cut and after, (len(before), len(cut), len(after)))
        self.assertTrue(any(s.error for s in cut), "no session saw the crash")
        # The floor the state writer left costs nothing after a crash with a clock that was not
        # stepped back: sessions after the reinitialisation are all served.
        self.assertEqual([s.error for s in after if s.error], [])
        # The state writer was started again and keeps the floor.
        state_file = cluster.data / "cosid.state"
        wait_for(lambda: state_file.stat().st_mtime > recovered_wall, 5,
                 "the state file to be written after the reinitialisation")
        total = sum(len(s.ids) for s in sessions)
        self.assertEqual(duplicates(sessions), 0)
        self.assertEqual(sessions_not_increasing(sessions), [])
        # Shared memory was rebuilt, and every id made after it is above every id made before the
        # kill. (A session cut by the crash may have connected before or after it.)
        last_before = max(v for s in before for v in s.ids)
        first_after = min(v for s in after for v in s.ids)
        self.assertLess(last_before, first_after)
        self.assertLess(self.issued(), total)
        print(f"\n  {total} ids across a backend SIGKILL and reinitialisation "
              f"({len(sessions)} sessions, {sum(1 for s in sessions if s.error)} cut), "
              f"0 duplicates", end=" ")


if __name__ == "__main__":
    unittest.main()
