"""A lease store that goes back in time without a new timeline, done for real with two cosid
servers on one machine id (the holder generating, the claimer waiting for a machine id) and
clients on both (helpers/failover.py): the store's data directory put back from a copy taken
while it was stopped, a base backup started in its place without recovery, an older dump
restored over the store's database with pg_restore --clean while it runs, and a failback to the
old primary after a holder moved its machine id on the promoted standby. Each loses the
holder's claim while its system identifier, database and timeline stay the same. The server
whose claim is lost reaches the store through a proxy that answers nothing for CUT_S seconds
once the store went back (as a server whose renewals are slow to arrive, or that renews only a
minute later with the defaults): it generates until its deadline. The store must settle (hand
the machine id to nobody for a safe guard) rather than give it to the other server meanwhile.
Each scenario adds a row to the table printed at the end.

StoreBackInTimeCosidJdbc runs the scenarios with both servers leasing from CosId's table
cosid_machine (cosid.distributor = 'cosid_jdbc'), which CosId's statements alone would hand out
again: cosid's lease store in the same database is what makes the claimer wait.

    python3 run.py faults.test_store_back_in_time
"""

import shutil
import subprocess
import time
import unittest

from helpers.failover import EXPECTED, SAFE_GUARD_S, STOPPED, FailoverScenario, print_results
from helpers.faults import fake_clock, full_fault_tier
from helpers.fleet import Proxy, add_cosid_machine, fleet_server, set_max_clock_lead, start_store
from helpers.leases import status
from helpers.pgcluster import PG_BIN, as_postgres, wait_for
from helpers.replication import HeldBack, fail_over, start_standby

RESULTS = []
# Generation after the store went back: a whole safe guard of settling, the claims after it,
# and a margin for a loaded machine.
AFTER_S = SAFE_GUARD_S * 2 + 4
# How long the server whose claim the store lost hears nothing from it after it went back:
# longer than the other server takes to claim (a claim is tried every second), shorter than the
# safe guard.
CUT_S = 3.0


def copy_folder(source, target):
    """A copy of a data directory as `cp -a` makes it, owner and modes kept."""
    if target.exists():
        shutil.rmtree(target)
    subprocess.run(["cp", "-a", str(source), str(target)], check=True)


@full_fault_tier
class StoreBackInTime(FailoverScenario, unittest.TestCase):
    tests_may_run_apart = True
    prefix = "back"
    results = RESULTS
    # Every claim in the store, and the claims held in the servers' namespace.
    claims_sql = "SELECT count(*) FROM cosid.machine_lease"
    held_claims_sql = ("SELECT count(*) FROM cosid.machine_lease "
                       "WHERE namespace = 'cosid' AND state = 'claimed'")

    @classmethod
    def tearDownClass(cls):
        print_results(RESULTS)

    def setUp(self):
        self.store = start_store("back-store", 25460)
        self.addCleanup(self.store.stop, mode="immediate", check=False)
        self.ports = [self.store.port]
        # The server whose claim the store loses reaches it through this proxy.
        self.proxy = Proxy(self.store.port)
        self.addCleanup(self.proxy.close)
        self.cut_off = "holder"
        # How far ahead of the real clock the cut-off server's clock runs.
        self.cut_off_clock_s = 0.0

    def store_ports(self):
        return self.ports

    def cosid_server(self, name, port, timings=None):
        if not name.endswith(self.cut_off):
            return super().cosid_server(name, port, timings)
        server = fleet_server(name, port, self.store.port,
                              extra=self.server_settings(timings), via=self.proxy,
                              password_from="environment",
                              conninfo_extra="target_session_attrs=read-write")
        if self.cut_off_clock_s:
            server.env.update(fake_clock(server.base / "faketime", self.cut_off_clock_s))
        server.start()
        self.addCleanup(server.stop, mode="immediate", check=False)
        server.query("CREATE EXTENSION cosid")
        if self.cut_off_clock_s:
            server.put_worker_on_faked_clock(self.cut_off_clock_s)
        return server

    def going_back(self, goes_back):
        """The store goes back (`goes_back()`) while the proxied server hears nothing from it,
        and for CUT_S seconds more."""
        def scenario():
            self.proxy.set_mode("blackhole")
            goes_back()
            time.sleep(CUT_S)
            self.proxy.set_mode("pass")
        return scenario

    def holder_claimed(self, holder, claimer):
        """Before the store goes back: the holder generates on the machine id, the claimer
        waits for one, and the store has written the holder's claim."""
        self.assertEqual(self.store.query(self.held_claims_sql), "1")
        time.sleep(1.0)

    def test_a_restart_of_the_store_costs_its_holders_nothing(self):
        # What a store restart costs now that it settles: the holder renews on the restarted
        # store (its claim is there) and goes on; only claims wait. The holder's connection is
        # not cut here.
        self.cut_off = "nobody"

        def restart():
            self.store.restart()
        (holder, claimer), stopped_s = self.run_scenario(
            "store restarted (nothing lost)", self.holder_claimed, restart, AFTER_S)
        self.assertEqual(status(holder)["state"], "UP")
        self.assertNotEqual(status(claimer)["state"], "UP")
        self.assertLess(stopped_s, SAFE_GUARD_S, "the holder stopped for a whole safe guard")

    def test_an_older_copy_of_the_data_directory_put_back(self):
        # The copy is taken while the store is stopped, before any claim: started again in its
        # place, the store shows no lease at all, on the same timeline.
        copy = self.store.base / "data-copy"
        self.store.stop()
        copy_folder(self.store.data, copy)
        self.store.start()

        def put_back():
            self.store.stop()
            shutil.rmtree(self.store.data)
            copy_folder(copy, self.store.data)
            self.store.start()
        self.run_scenario("older copy of the data directory", self.holder_claimed,
                          self.going_back(put_back), AFTER_S)

    def test_a_base_backup_started_without_recovery(self):
        # pg_basebackup of the running store before any claim, later started in its place
        # without recovery.signal: crash recovery to the end of the backup, timeline 1.
        backup = self.store.base / "data-backup"
        subprocess.run(as_postgres([PG_BIN / "pg_basebackup", "-h", "127.0.0.1",
                                    "-p", self.store.port, "-U", "postgres", "-D", backup,
                                    "-X", "stream", "--no-sync"]),
                       check=True, stdout=subprocess.DEVNULL)

        def start_the_backup():
            self.store.crash()
            shutil.rmtree(self.store.data)
            copy_folder(backup, self.store.data)
            self.store.start()
        self.run_scenario("base backup started without recovery", self.holder_claimed,
                          self.going_back(start_the_backup), AFTER_S)

    def test_an_older_dump_restored_over_the_running_store(self):
        # pg_dump before any claim, then pg_restore --clean --if-exists into the same database
        # while the store runs and the servers use it: the store is never down.
        dump = self.store.base / "store.dump"
        connect = ["-h", "127.0.0.1", "-p", self.store.port, "-U", "postgres"]
        subprocess.run(as_postgres([PG_BIN / "pg_dump", *connect, "-Fc", "-f", dump,
                                    "postgres"]), check=True)

        def restore_over():
            subprocess.run(as_postgres([PG_BIN / "pg_restore", *connect, "-d", "postgres",
                                        "--clean", "--if-exists", dump]),
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            # The restore took the holder's claim back.
            self.assertEqual(self.store.query(self.claims_sql), "0")
        # While pg_restore drops and creates the store's functions, a call may find an older
        # protocol or none: refused (55000), as the store is not usable then, until it commits.
        self.run_scenario("older dump restored over the store", self.holder_claimed,
                          self.going_back(restore_over), AFTER_S,
                          expected=EXPECTED | {"55000"})

    def test_a_failback_to_the_old_primary(self):
        # The holder lists host=P,Q; the claimer reaches the primary through the proxy, which
        # follows it (as a virtual address would). P stops, Q is promoted and settles, the
        # machine id moves to the claimer on Q (the holder stops, releasing it there, and
        # starts again); then Q stops and P starts again on its old timeline, where the
        # holder's first claim is the last thing written: expired, for the holder (a new
        # process) to take again while the claimer, whose claim P never saw, still generates.
        primary = self.store
        standby = start_standby(primary, "back-standby", 25470)
        self.addCleanup(standby.stop, mode="immediate", check=False)
        self.ports = [primary.port, standby.port]
        self.cut_off = "claimer"

        def move_the_machine_id_on_the_standby(holder, claimer):
            primary.stop()
            standby.query("SELECT pg_promote(true, 60)")
            self.proxy.target_port = standby.port
            self.proxy.set_mode("reset")
            self.proxy.set_mode("pass")
            holder.stop()
            self.wait_state(claimer, "UP", timeout=SAFE_GUARD_S * 3 + 30)
            holder.start()
            self.wait_state(holder, "CLAIMING")
            time.sleep(1.0)

        def fail_back():
            standby.stop()
            primary.start()
            self.proxy.target_port = primary.port
        (holder, claimer), _ = self.run_scenario(
            "failback to the old primary", move_the_machine_id_on_the_standby,
            self.going_back(fail_back), AFTER_S, expected=STOPPED)
        # Both saw the promoted standby's newer timeline, so neither takes the old primary for
        # its store again (the store's own rule, a settling after its start, is what protects
        # a server that never saw the promotion): nobody generates, and both say why. Holders
        # of CosId's table check it too, with cosid's lease store in the same database.
        states = sorted(status(server)["state"] for server in (holder, claimer))
        self.assertNotIn("UP", states)
        for server in (holder, claimer):
            self.assertTrue("older than timeline 2 this server saw it on" in server.log(),
                            f"{server.name} does not say it passed the old primary over")

    def test_a_forgotten_holder_whose_clock_runs_ahead(self):
        # The store allows clocks 15 s ahead of its own; the holder's runs 12 s ahead and
        # reaches the primary only. Replication is held back from the start, so that the standby never
        # sees the holder's claim; the primary dies and the standby is promoted. The promoted
        # store settles, and the claimer's ids must then start above the holder's, which ran
        # 12 s ahead until its deadline: the floor adds the lead the store allows. (Without it,
        # the floor was the end of the settling: 8 s of lead outlast the failover and the
        # claimer's first call, which the settling counts from.)
        primary = self.store
        set_max_clock_lead(primary, "15 s")
        standby = start_standby(primary, "back-standby", 25470)
        self.addCleanup(standby.stop, mode="immediate", check=False)
        # A lease of another namespace, with a clock in step, that both have: what a fleet's
        # store holds besides (and without which a store of 0.5.0 waited an hour).
        primary.query("SELECT cosid.lease_claim('other', 4, 'in-step', false, 6000, 't', "
                      "(extract(epoch FROM clock_timestamp()) * 1000)::bigint + 6000, "
                      "'epoch 0 ms, millisecond, 41/4/12 bits', true)")
        wait_for(lambda: standby.query("SELECT count(*) FROM cosid.machine_lease") == "1", 30,
                 "the standby to have the other lease")
        held = HeldBack(primary)
        self.addCleanup(held.release)
        self.ports = [primary.port, standby.port]
        self.cut_off_clock_s = 12.0

        def fail_over_away():
            # The hold-back worked: the standby has not seen the holder's claim.
            self.assertEqual(standby.query(self.held_claims_sql), "0")
            fail_over(primary, standby)
            held.release()
        self.run_scenario("forgotten holder 12 s ahead (async failover)", self.holder_claimed,
                          fail_over_away, AFTER_S + 16)


class StoreBackInTimeCosidJdbc(StoreBackInTime):
    """The same with both servers on CosId's table: a released, new or expired row is taken only
    when cosid's lease store in that database says it has not forgotten claims."""
    prefix = "jdbc-back"
    distributor = {"cosid.distributor": "'cosid_jdbc'"}
    claims_sql = "SELECT count(*) FROM public.cosid_machine"
    held_claims_sql = ("SELECT count(*) FROM public.cosid_machine "
                       "WHERE namespace = 'cosid' AND instance_id <> ''")

    def setUp(self):
        super().setUp()
        add_cosid_machine(self.store)

    def test_a_base_backup_started_without_recovery(self):
        self.skipTest("the same loss as an older copy of the data directory, which this class "
                      "runs; kept to cosid's own store for the suite's time")



if __name__ == "__main__":
    unittest.main()
