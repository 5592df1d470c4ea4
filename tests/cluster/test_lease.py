"""Leased machine ids against real servers: the background worker claims, renews and releases;
fail fast when the lease is lost or cannot be renewed; recovery without a restart; the
watermark across shutdowns and crashes; stable instances; standbys. Lease timings are shortened
through the settings: a 4 s safe guard (so generation stops 3.6 s after the last renewal was
sent) and renewals every 0.5 s."""

import os
import signal
import subprocess
import threading
import time
import unittest

from helpers.clients import LoopingClients, duplicates, sessions_not_increasing
from helpers.leases import (DEADLINE_S, FAST_LEASES, fake_claim, lease_cluster, machine_of,
                            restart_worker_behind, status, try_next, ts_ms_of, wait_up)
from helpers.pgcluster import (PG_BIN, Cluster, ClusterTest, SqlError, as_postgres, free_port,
                               wait_for)

class Leases(ClusterTest):
    def test_start_claims_and_clean_shutdown_releases_with_exact_watermark(self):
        cluster = self.track(lease_cluster("lease-release", 25140))
        cluster.query("CREATE EXTENSION cosid")
        first = wait_up(cluster)
        machine_id = int(first["machine_id"])
        ids = [int(v) for v in cluster.query(
            "SELECT cosid_next() FROM generate_series(1, 1000)").split()]
        self.assertEqual({machine_of(v) for v in ids}, {machine_id})
        cluster.stop()
        self.assertIn(f'released machine id {machine_id} in namespace "cosid"', cluster.log())
        # Inspect the table with the worker off.
        cluster.settings = {"cosid.distributor": "manual"}
        cluster.write_settings()
        cluster.start()
        state, released_ms, watermark_ms, instance_id = cluster.rows(
            "SELECT state, released_ms, watermark_ms, instance_id FROM cosid.machine_lease "
            f"WHERE machine_id = {machine_id}")[0]
        self.assertEqual(state, "released")
        # The next holder waits for the exact last timestamp; the bound itself never falls.
        self.assertEqual(int(released_ms), ts_ms_of(max(ids)), "the release is not exact")
        self.assertGreater(int(watermark_ms), int(released_ms))
        self.assertEqual(instance_id, first["instance_id"])
        cluster.stop()
        # A restart of a non-stable instance takes a machine id again, under a new identity.
        cluster.settings = FAST_LEASES
        cluster.write_settings()
        cluster.start()
        again = wait_up(cluster)
        self.assertNotEqual(again["instance_id"], first["instance_id"])
        self.assertEqual(int(again["machine_id"]), machine_id, "the released id is taken first")
        later = int(cluster.query("SELECT cosid_next()"))
        self.assertGreater(later, max(ids))

    def test_stable_instance_gets_its_machine_id_back(self):
        cluster = self.track(lease_cluster("lease-stable", 25141, **{
            "cosid.stable": "on", "cosid.instance_id": "'orders-db-a'"}))
        cluster.query("CREATE EXTENSION cosid")
        first = wait_up(cluster)
        self.assertEqual(first["instance_id"], "orders-db-a")
        # Another instance takes the next machine id, and keeps it across the restart; a
        # restart must not move to a new one. (Another holder makes the restart settle for the
        # server's own worker too: for its safe guard, 20 s.)
        outcome, other, _ = fake_claim(cluster, "orders-db-b", 20_000)
        self.assertEqual(outcome, "new")
        last = int(cluster.query("SELECT cosid_next()"))
        cluster.restart()
        again = wait_up(cluster, timeout=60)
        self.assertEqual(again["machine_id"], first["machine_id"])
        self.assertNotEqual(again["machine_id"], other)
        self.assertIn("(own)", cluster.log())
        self.assertGreater(int(cluster.query("SELECT cosid_next()")), last)
        # A stable lease is never released: the row stays claimed by its instance.
        self.assertEqual(cluster.rows(
            "SELECT state, instance_id FROM cosid.machine_lease "
            f"WHERE machine_id = {first['machine_id']}")[0], ["claimed", "orders-db-a"])

    def test_concurrent_claims_get_distinct_machine_ids_and_exhaustion(self):
        cluster = self.track(Cluster("lease-race", free_port(25142),
                                     {"cosid.distributor": "manual"}).init())
        cluster.start()
        cluster.query("CREATE EXTENSION cosid")
        results = [None] * 20
        barrier = threading.Barrier(20)

        def claim(index):
            barrier.wait()
            results[index] = fake_claim(cluster, f"racer-{index}", 600_000, machine_bits=4)

        threads = [threading.Thread(target=claim, args=(i,)) for i in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        claimed = [int(r[1]) for r in results if r[0] == "new"]
        self.assertEqual(sorted(claimed), list(range(16)))
        self.assertEqual([r[0] for r in results].count("exhausted"), 4)

    def test_same_identity_cannot_take_over_a_live_claim(self):
        cluster = self.track(Cluster("lease-identity", free_port(25155),
                                     {"cosid.distributor": "manual"}).init())
        cluster.start()
        cluster.query("CREATE EXTENSION cosid")
        claim = ("SELECT outcome, machine_id FROM cosid.lease_claim('cosid', 10, 'twin', true, "
                 "{sg}, '{token}', 0)")
        self.assertEqual(cluster.rows(claim.format(sg=1500, token="first")), [["new", "0"]])
        # The same claim again (its answer was lost, say) is recognised by its token.
        self.assertEqual(cluster.rows(claim.format(sg=1500, token="first")), [["own", "0"]])
        # A second process with the same identity (a clone, or the same server after a crash)
        # must wait until the first claim has expired.
        self.assertEqual(cluster.rows(claim.format(sg=1500, token="second")), [["busy", "0"]])
        time.sleep(1.6)
        self.assertEqual(cluster.rows(claim.format(sg=1500, token="second")), [["own", "0"]])
        # The first claim is now lost: its renewal matches nothing.
        self.assertEqual(cluster.query(
            "SELECT count(*) FROM cosid.lease_renew('cosid', 0, 'twin', 'first', 1500, 0)"), "0")

    def test_no_machine_id_left_gives_53400(self):
        cluster = self.track(lease_cluster("lease-full", 25143, **{
            "cosid.timestamp_bits": 41, "cosid.machine_bits": 1, "cosid.sequence_bits": 12}))
        # Both machine ids are taken before the worker can see the extension.
        cluster.query("BEGIN; CREATE EXTENSION cosid; "
                      "SELECT cosid.lease_claim('cosid', 1, 'a', false, 600000, 'ta', 0); "
                      "SELECT cosid.lease_claim('cosid', 1, 'b', false, 600000, 'tb', 0); COMMIT")
        wait_for(lambda: "no machine id left" in (status(cluster)["last_error"] or ""), 10,
                 "the worker to find the namespace full")
        with self.assertRaises(SqlError) as refused:
            cluster.query("SELECT cosid_next()")
        self.assertEqual(refused.exception.sqlstate, "53400")
        self.assertIn('no machine id left in namespace "cosid"', refused.exception.stderr)
        self.assertIn("All 2 machine ids of 1 machine bits", refused.exception.stderr)
        # For machines, whatever the text: the problem's code.
        self.assertEqual(cluster.query("SELECT problem FROM cosid.status"), "exhausted")
        # Once a machine id is free, the generator is UP and has no problem.
        cluster.query("SELECT cosid.lease_release('cosid', 1, 'b', 'tb', 0)")
        wait_for(lambda: status(cluster)["state"] == "UP", 30, "the freed machine id claimed")
        self.assertEqual(cluster.query("SELECT problem IS NULL FROM cosid.status"), "t")

    def test_expired_lease_is_taken_only_after_it_expires_by_the_store_clock(self):
        cluster = self.track(lease_cluster("lease-expiry", 25144, **{
            "cosid.timestamp_bits": 41, "cosid.machine_bits": 0, "cosid.sequence_bits": 12}))
        cluster.query("BEGIN; CREATE EXTENSION cosid; "
                      "SELECT cosid.lease_claim('cosid', 0, 'ghost', false, 3000, 'tg', 0); "
                      "COMMIT")
        ghost_expires_ms = int(cluster.query(
            "SELECT (extract(epoch FROM expires_at) * 1000)::bigint FROM cosid.machine_lease"))
        up = wait_up(cluster, timeout=10)
        self.assertEqual(up["machine_id"], "0")
        taken_ms, how_instance = cluster.rows(
            "SELECT (extract(epoch FROM claimed_at) * 1000)::bigint, instance_id "
            "FROM cosid.machine_lease")[0]
        self.assertGreaterEqual(int(taken_ms), ghost_expires_ms)
        self.assertNotEqual(how_instance, "ghost")
        self.assertIn("(expired)", cluster.log())
        self.assertIsNotNone(try_next(cluster)[0])

    def test_stolen_lease_fails_fast_then_recovers_under_a_new_lease(self):
        # Two machine ids: ours, and one another instance holds, so that after the theft there
        # is nothing to claim until that one is released.
        cluster = self.track(lease_cluster("lease-stolen", 25145, **{
            "cosid.timestamp_bits": 41, "cosid.machine_bits": 1, "cosid.sequence_bits": 12}))
        cluster.query("CREATE EXTENSION cosid")
        machine_id = int(wait_up(cluster)["machine_id"])
        outcome, other_id, _ = fake_claim(cluster, "other", 600_000, machine_bits=1)
        self.assertEqual((outcome, int(other_id)), ("new", 1 - machine_id))
        self.assertIsNotNone(try_next(cluster)[0])
        cluster.query("UPDATE cosid.machine_lease SET instance_id = 'thief', "
                      "claim_token = 'stolen', expires_at = now() + interval '1 hour' "
                      f"WHERE machine_id = {machine_id}")
        stolen_at = time.monotonic()
        failed = wait_for(lambda: try_next(cluster)[1], 5, "cosid_next() to fail")
        failed_after = time.monotonic() - stolen_at
        self.assertIn(failed, {"55P03", "53400"})
        # One renewal period (0.5 s) and the round trips of a loaded machine; the local deadline
        # alone would have taken 3.6 s.
        self.assertLess(failed_after, 0.5 + 1.5, "not within one renewal")
        self.assertIn("was lost", cluster.log())
        time.sleep(1)
        self.assertIsNone(try_next(cluster)[0], "generated with no lease")
        cluster.query("SELECT cosid.lease_release('cosid', 1 - "
                      f"{machine_id}, 'other', 'token-other', 0)")
        recovered = wait_for(lambda: try_next(cluster)[0], 10, "generation under a new lease")
        self.assertEqual(machine_of(recovered, mask=0x1), 1 - machine_id)

    def test_blocked_renewal_stops_generation_by_the_deadline_and_resumes(self):
        cluster = self.track(lease_cluster("lease-locked", 25146))
        cluster.query("CREATE EXTENSION cosid")
        wait_up(cluster)
        time.sleep(1)
        locker = subprocess.Popen(cluster.psql_command("postgres", "-v", "ON_ERROR_STOP=1"),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        locker.stdin.write("BEGIN; LOCK TABLE cosid.machine_lease IN ACCESS EXCLUSIVE MODE; "
                           "SELECT 'locked';\n")
        locker.stdin.flush()
        self.assertEqual(locker.stdout.readline().strip(), "?column?")
        locked_at = time.monotonic()
        outcomes = []
        # Each call is recorded with the times it was sent and answered: a success happened
        # after it was sent, a failure before it was answered.
        while time.monotonic() - locked_at < DEADLINE_S + 1.5:
            sent = time.monotonic() - locked_at
            value, state = try_next(cluster)
            outcomes.append((sent, time.monotonic() - locked_at, value, state))
            time.sleep(0.02)
        self.assertEqual(status(cluster)["state"], "DOWN")
        last_success = max(sent for sent, _, value, _ in outcomes if value is not None)
        first_failure = min(answered for _, answered, value, _ in outcomes if value is None)
        # The deadline is 3.6 s after the last renewal sent, and that was sent at most one
        # renewal period (0.5 s, and a late wake-up) before the lock.
        self.assertLessEqual(last_success, DEADLINE_S)
        self.assertGreaterEqual(first_failure, DEADLINE_S - 0.5 - 0.3)
        self.assertTrue(all(value is None for sent, _, value, _ in outcomes if sent > DEADLINE_S),
                        "generated after the deadline")
        self.assertEqual({state for _, _, value, state in outcomes if value is None}, {"55P03"})
        locker.stdin.write("COMMIT;\n")
        locker.stdin.close()
        locker.wait()
        locker.stdout.close()
        unlocked_at = time.monotonic()
        wait_for(lambda: try_next(cluster)[0], 5, "generation after the lock is released")
        self.assertLess(time.monotonic() - unlocked_at, 3)
        wait_up(cluster, timeout=5)

    def test_watermark_ahead_of_the_clock_is_given_back_then_waited_for(self):
        # One machine id: with free ones, a claimer takes those before one whose watermark is
        # ahead of its clock.
        cluster = self.track(lease_cluster("lease-watermark", 25152, **{
            "cosid.timestamp_bits": 41, "cosid.machine_bits": 0, "cosid.sequence_bits": 12}))
        cluster.query("CREATE EXTENSION cosid")
        machine_id = int(wait_up(cluster)["machine_id"])
        before = int(cluster.query("SELECT cosid_next()"))
        # As if the last holder's clock ran 5 s ahead of this server's: written as soon as the
        # release is seen, before the worker is started again.
        ahead_ms = restart_worker_behind(cluster, machine_id, 5000)
        behind = wait_for(lambda: status(cluster)["state"] == "CLOCK_BEHIND" and status(cluster),
                          5, "the worker to give the machine id back")
        self.assertIn(f"machine id {machine_id}", behind["last_error"])
        self.assertIn("gave it back", behind["last_error"])
        with self.assertRaises(SqlError) as refused:
            cluster.query("SELECT cosid_next()")
        self.assertEqual(refused.exception.sqlstate, "55P03")
        self.assertIn("CLOCK_BEHIND", refused.exception.stderr)
        self.assertEqual(cluster.query(
            f"SELECT state FROM cosid.machine_lease WHERE machine_id = {machine_id}"), "released")
        # Once the clock is within the broken threshold of the watermark, the worker waits for
        # it and generates after it.
        wait_up(cluster, timeout=10)
        after = int(cluster.query("SELECT cosid_next()"))
        self.assertEqual(machine_of(after, mask=0), machine_id)
        self.assertGreater(ts_ms_of(after, shift=12), ahead_ms)
        self.assertGreater(after, before)

    def test_slow_store_call_is_cut_by_the_statement_timeout(self):
        cluster = self.track(lease_cluster("lease-slow", 25156))
        cluster.query("CREATE EXTENSION cosid")
        wait_up(cluster)
        # Every renewal now takes a minute, unless the worker's own timeout cuts it.
        cluster.query("""
            CREATE FUNCTION slow_down() RETURNS trigger LANGUAGE plpgsql AS
            $$ BEGIN PERFORM pg_sleep(60); RETURN NEW; END $$;
            CREATE TRIGGER slow BEFORE UPDATE ON cosid.machine_lease
               FOR EACH ROW EXECUTE FUNCTION slow_down();""")
        down = wait_for(lambda: status(cluster)["state"] == "DOWN" and status(cluster), 5,
                        "the renewal to fail")
        self.assertIn("statement timeout", down["last_error"])
        wait_for(lambda: try_next(cluster)[1] == "55P03", DEADLINE_S + 2, "the deadline")
        cluster.query("DROP TRIGGER slow ON cosid.machine_lease")
        wait_for(lambda: try_next(cluster)[0], 5, "generation after the store recovers")
        wait_up(cluster, timeout=5)

    def crash_and_restart_while_generating(self, cluster):
        with LoopingClients(cluster, clients=4, batch=2_000, batches_per_session=10) as load:
            wait_for(lambda: load.ids_so_far() > 50_000, 20, "ids before the crash")
            cluster.crash()
            crashed_at = time.monotonic()
            cluster.start()
            wait_up(cluster)
            wait_for(lambda: load.ids_so_far(started_after=crashed_at) > 50_000, 30,
                     "ids after the restart")
        return load.sessions, crashed_at

    def test_postmaster_kill9_while_generating_leaves_no_duplicates(self):
        cluster = self.track(lease_cluster("lease-kill9", 25147))
        cluster.query("CREATE EXTENSION cosid")
        before = int(wait_up(cluster)["machine_id"])
        sessions, crashed_at = self.crash_and_restart_while_generating(cluster)
        self.assertEqual(duplicates(sessions), 0)
        self.assertEqual(sessions_not_increasing(sessions), [])
        after = {machine_of(v) for s in sessions if s.started > crashed_at for v in s.ids}
        # The crashed instance's lease has not expired: the new instance leases another id.
        self.assertNotIn(before, after)
        total = sum(len(s.ids) for s in sessions)
        print(f"\n  {total} ids across a server kill -9 and restart, 0 duplicates", end=" ")

    def test_stable_instance_honours_its_state_file_after_kill9(self):
        cluster = self.track(lease_cluster("lease-kill9-stable", 25148, **{
            "cosid.stable": "on", "cosid.instance_id": "'orders-db-s'",
            "cosid.local_state_interval": "'200ms'"}))
        cluster.query("CREATE EXTENSION cosid")
        machine_id = int(wait_up(cluster)["machine_id"])
        sessions, crashed_at = self.crash_and_restart_while_generating(cluster)
        self.assertEqual(duplicates(sessions), 0)
        after = [v for s in sessions if s.started > crashed_at for v in s.ids]
        before = [v for s in sessions if s.ended < crashed_at for v in s.ids]
        self.assertEqual({machine_of(v) for v in after}, {machine_id})
        self.assertGreater(min(after), max(before))
        self.assertTrue((cluster.data / "cosid.state").exists())
        # Its own lease was still live after the crash: taken back only once it had expired.
        self.assertIn("waiting for it to expire", cluster.log())

    def test_backend_crash_rebuilds_the_lease_from_the_store(self):
        cluster = self.track(lease_cluster("lease-backend-crash", 25153))
        cluster.query("CREATE EXTENSION cosid")
        first = wait_up(cluster)
        before = [int(v) for v in cluster.query(
            "SELECT cosid_next() FROM generate_series(1, 1000)").split()]
        victim = subprocess.Popen(cluster.psql_command("postgres", "-c", "SELECT pg_sleep(60)"),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pids = wait_for(lambda: cluster.backend_pids("SELECT pg_sleep%"), 5, "the backend")
        os.kill(pids[0], signal.SIGKILL)
        victim.wait()
        wait_for(lambda: "all server processes terminated; reinitializing" in cluster.log(), 10,
                 "the reinitialisation")
        cluster.wait_ready()
        again = wait_up(cluster)
        # Shared memory is new, so the identity is new, and the old claim is another's until it
        # expires: a different machine id.
        self.assertNotEqual(again["instance_id"], first["instance_id"])
        self.assertNotEqual(again["machine_id"], first["machine_id"])
        after = [int(v) for v in cluster.query(
            "SELECT cosid_next() FROM generate_series(1, 1000)").split()]
        self.assertFalse(set(before) & set(after))

    def test_fail_fast_off_keeps_generating_past_the_deadline(self):
        cluster = self.track(lease_cluster("lease-no-fail-fast", 25154,
                                           **{"cosid.fail_fast": "off"}))
        cluster.query("CREATE EXTENSION cosid")
        wait_up(cluster)
        locker = subprocess.Popen(cluster.psql_command("postgres", "-v", "ON_ERROR_STOP=1"),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        locker.stdin.write("BEGIN; LOCK TABLE cosid.machine_lease IN ACCESS EXCLUSIVE MODE; "
                           "SELECT 'locked';\n")
        locker.stdin.flush()
        locker.stdout.readline()
        time.sleep(DEADLINE_S + 1)
        self.assertEqual(status(cluster)["state"], "DOWN")
        self.assertIsNotNone(try_next(cluster)[0], "fail_fast = off stopped generating")
        locker.stdin.write("COMMIT;\n")
        locker.stdin.close()
        locker.wait()
        locker.stdout.close()

    def test_worker_waits_for_the_extension_and_logs_it_once(self):
        cluster = self.track(lease_cluster("lease-noext", 25149))
        wait_for(lambda: "run CREATE EXTENSION cosid in database" in cluster.log(), 15,
                 "the worker to say what is missing")
        time.sleep(2.5)
        self.assertEqual(cluster.log().count("run CREATE EXTENSION cosid in database"), 1)
        cluster.query("CREATE EXTENSION cosid")
        wait_up(cluster)
        self.assertIsNotNone(try_next(cluster)[0])

    def test_hot_standby_refuses_then_promotion_leases_without_restart(self):
        primary = self.track(lease_cluster("lease-primary", 25150))
        primary.query("CREATE EXTENSION cosid")
        primary_machine = int(wait_up(primary)["machine_id"])
        standby = self.track(Cluster("lease-standby", free_port(25151), dict(FAST_LEASES)))
        if standby.base.exists():
            standby.stop(check=False)
            subprocess.run(["rm", "-rf", str(standby.base)], check=True)
        standby.base.mkdir(parents=True)
        os.chown(standby.base, *_postgres_ids())
        subprocess.run(as_postgres([PG_BIN / "pg_basebackup", "-h", "127.0.0.1", "-p",
                                    str(primary.port), "-U", "postgres", "-D", standby.data,
                                    "-R", "-X", "stream"]), check=True)
        standby.write_settings()
        standby.start()
        with self.assertRaises(SqlError) as refused:
            standby.query("SELECT cosid_next()")
        self.assertEqual(refused.exception.sqlstate, "25006")
        subprocess.run(as_postgres([PG_BIN / "pg_ctl", "-D", standby.data, "-w", "promote"]),
                       check=True, stdout=subprocess.DEVNULL)
        promoted = wait_up(standby)
        self.assertNotEqual(int(promoted["machine_id"]), primary_machine,
                            "the promoted standby took the primary's live machine id")
        self.assertIsNotNone(try_next(standby)[0])


def _postgres_ids():
    import pwd
    user = pwd.getpwnam("postgres")
    return user.pw_uid, user.pw_gid


if __name__ == "__main__":
    unittest.main()
