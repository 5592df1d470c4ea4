"""A store string with several hosts, as libpq takes it: each host gets a connect_timeout of its
own, start-up exchange included; a host that is read-only (a hot standby) is passed over,
whatever target_session_attrs says; and a string whose every host is read-only shows so in
cosid.status. The store role's own settings (ALTER ROLE ... SET, which the role may give itself)
do not make a writable host read-only, nor break the worker's session: the client pins them."""

import time

from helpers.fleet import FLEET_PASSWORD, FLEET_ROLE, Proxy, fleet_server, start_store
from helpers.leases import FAST_LEASES, SAFE_GUARD_S, status, wait_up
from helpers.pgcluster import ClusterTest, chown_to_postgres, query_as, wait_for

LEASE_WORKER = "application_name = 'cosid lease worker'"
from helpers.replication import start_standby


class StoreHosts(ClusterTest):
    def server(self, name, ports, conninfo_extra="connect_timeout=2", start=True):
        server = self.track(fleet_server(name, 25810, ports, FAST_LEASES,
                                         host=",".join(["127.0.0.1"] * len(ports.split(","))),
                                         password_from="environment",
                                         conninfo_extra=conninfo_extra))
        if start:
            server.start()
            server.query("CREATE EXTENSION cosid")
        return server

    def test_a_first_host_that_never_answers_costs_its_own_timeout_only(self):
        store = self.track(start_store("hosts-store", 25800))
        silent = Proxy(store.port)
        self.addCleanup(silent.close)
        silent.set_mode("blackhole")
        server = self.server("hosts-silent-first", f"{silent.port},{store.port}", start=False)
        started = time.monotonic()
        server.start()
        server.query("CREATE EXTENSION cosid")
        up = wait_up(server, timeout=30)
        took_s = time.monotonic() - started
        self.assertEqual(up["machine_id"], "0")
        # One connect_timeout (2 s) on the silent host per attempt, then the store; sharing one
        # budget, the hosts never got as far as the second.
        self.assertLess(took_s, 15, f"leased after {took_s:.1f} s")
        # Its connection cut, the worker connects again through the silent host to the store.
        lease_worker = "application_name = 'cosid lease worker'"
        cut = store.query(f"SELECT pid FROM pg_stat_activity WHERE {lease_worker}")
        self.assertEqual(store.query(f"SELECT pg_terminate_backend({cut})"), "t")
        wait_for(lambda: store.query(
            f"SELECT count(*) FROM pg_stat_activity WHERE {lease_worker} AND pid <> {cut}")
            == "1", 15, "the lease worker to connect again")
        # And it renews through that connection.
        renewed = store.query("SELECT renewed_at FROM cosid.machine_lease")
        wait_for(lambda: store.query("SELECT renewed_at FROM cosid.machine_lease") != renewed,
                 15, "a renewal through the new connection")
        wait_up(server, timeout=15)

    def test_a_standby_listed_first_is_passed_over(self):
        store = self.track(start_store("hosts-primary", 25820))
        standby = self.track(start_standby(store, "hosts-standby", 25825))
        # No target_session_attrs: the store must take writes all the same.
        server = self.server("hosts-standby-first", f"{standby.port},{store.port}")
        wait_up(server, timeout=20)
        self.assertEqual(store.query("SELECT count(*) FROM cosid.machine_lease "
                                     "WHERE state = 'claimed'"), "1")

    def test_a_store_of_standbys_only_says_it_is_read_only(self):
        store = self.track(start_store("hosts-only-primary", 25830))
        standby = self.track(start_standby(store, "hosts-only-standby", 25835))
        server = self.server("hosts-standby-only", str(standby.port))
        read_only = "every host of cosid.lease_store is read-only"
        wait_for(lambda: read_only in (status(server)["last_error"] or ""), 20,
                 f"cosid.status to say the store is read-only:\n{server.log()[-1500:]}")
        self.assertEqual(status(server)["state"], "STOPPED")
        self.assertEqual(server.query("SELECT count(*) FROM cosid.status "
                                      "WHERE machine_id IS NULL"), "1")


class StoreRoleSettings(ClusterTest):
    def test_the_store_roles_own_settings_stop_no_server(self):
        store = self.track(start_store("hosts-role-settings", 25840))
        server = self.track(fleet_server("hosts-role-settings-server", 25845, store.port,
                                         FAST_LEASES))
        server.start()
        server.query("CREATE EXTENSION cosid")
        wait_up(server, timeout=20)
        # With its password, the store role gives itself settings that would make every claim
        # and renewal fail, or end its sessions between renewals.
        # (Read-only last: the role's later sessions could not alter it any more.)
        for setting in ("default_transaction_isolation = 'serializable'",
                        "idle_session_timeout = '300ms'",
                        "idle_in_transaction_session_timeout = '1ms'",
                        "default_transaction_read_only = on"):
            query_as(store, FLEET_ROLE, f"ALTER ROLE {FLEET_ROLE} SET {setting}", FLEET_PASSWORD)
        # They take effect for the role's new sessions: the worker's connection is cut, and it
        # connects again.
        cut = store.query(f"SELECT pid FROM pg_stat_activity WHERE {LEASE_WORKER}")
        self.assertEqual(store.query(f"SELECT pg_terminate_backend({cut})"), "t")
        wait_for(lambda: store.query(
            f"SELECT count(*) FROM pg_stat_activity WHERE {LEASE_WORKER} AND pid <> {cut}")
            == "1", 15, f"the lease worker to connect again:\n{server.log()[-1500:]}")
        # It renews through the new session for longer than a safe guard, and stays UP.
        renewed = store.query("SELECT renewed_at FROM cosid.machine_lease")
        wait_for(lambda: store.query("SELECT renewed_at FROM cosid.machine_lease") != renewed,
                 15, f"a renewal through the new connection:\n{server.log()[-1500:]}")
        wait_for(lambda: status(server)["state"] == "UP" and store.query(
            f"SELECT count(*) FROM pg_stat_activity WHERE {LEASE_WORKER} "
            f"AND backend_start < now() - interval '{SAFE_GUARD_S + 1} s'") == "1",
                 SAFE_GUARD_S + 10, "the session to last past a safe guard")
        self.assertEqual(status(server)["state"], "UP")
        self.assertFalse(status(server)["last_error"])
        self.assertIsNotNone(server.query("SELECT cosid_next()"))


class UpgradedDataDirectory(ClusterTest):
    def test_a_missing_store_timeline_after_pg_upgrade_uses_no_host(self):
        # What pg_upgrade leaves: the mark in the new data directory, and none of our files. The
        # latest timeline the server saw its store on is the old server's to give; until it is
        # copied, the store could be an old primary for all the server knows.
        store = self.track(start_store("upgraded-store", 25840))
        server = self.track(fleet_server("upgraded-server", 25845, store.port, FAST_LEASES))
        server.start()
        server.query("CREATE EXTENSION cosid")
        # A named generator, so that the server has a cosid.names to keep (copied, as if).
        server.query("SELECT cosid_create_generator('orders')")
        wait_for(lambda: server.query("SELECT state FROM cosid.status WHERE name = 'orders'")
                 == "UP", 20, "the named generator to lease a machine id")
        wait_up(server, timeout=20)
        server.stop()
        self.assertTrue((server.data / "cosid.names").exists())
        timeline = server.data / "cosid.store_timeline"
        seen = timeline.read_bytes()
        timeline.unlink()
        (server.data / "cosid.upgraded").write_text("pg_upgrade made this data directory\n")
        chown_to_postgres(server.data)
        server.start()
        missing = ('"cosid.store_timeline" is missing, and "cosid.upgraded" says that pg_upgrade '
                   "made this data directory")
        wait_for(lambda: missing in (status(server)["last_error"] or ""), 20,
                 f"cosid.status to say the file is missing:\n{server.log()[-1500:]}")
        self.assertNotEqual(status(server)["state"], "UP")
        self.assertFalse(timeline.exists(), "the server wrote a timeline it did not know")
        # The documented step: the file copied from the old data directory, the mark deleted.
        server.stop()
        timeline.write_bytes(seen)
        (server.data / "cosid.upgraded").unlink()
        chown_to_postgres(server.data)
        server.start()
        wait_up(server, timeout=20)
