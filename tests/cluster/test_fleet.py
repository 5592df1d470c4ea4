"""A fleet sharing one lease store: a plain PostgreSQL holding the protocol from
`psql -f sql/lease_store.sql`, and cosid servers that lease from it over the network with a
password from a passfile. Distinct machine ids, no duplicates across servers, the store going
away and coming back, TLS with certificate checks, standbys, and a clone carrying the same stable
identity."""

import shutil
import subprocess
import threading
import time
import unittest
from collections import defaultdict

from helpers.clients import concurrent_sessions, copy_ids, duplicates, run_session
from helpers.fleet import (CERTIFICATE_ROLE, FLEET_PASSWORD, FLEET_ROLE, Proxy, fleet_server,
                           start_store)
from helpers.generators import decode, wait_generators_up
from helpers.leases import DEADLINE_S, FAST_LEASES, machine_of, status, try_next, wait_up
from helpers.pgcluster import (CLUSTERS, PG_BIN, Cluster, ClusterTest, as_postgres,
                               chown_to_postgres, free_port, query_as, wait_for)


class Fleet(ClusterTest):
    def store(self, certificate_role=False, **settings):
        return self.track(start_store("fleet-store", 25200, settings,
                                      certificate_role=certificate_role))

    def server(self, name, store, **extra):
        connection = {key: extra.pop(key) for key in ("conninfo_extra", "password_from",
                                                       "host", "form", "via") if key in extra}
        server = self.track(fleet_server(name, 25210, store.port,
                                         {**FAST_LEASES, **extra}, **connection))
        server.start()
        server.query("CREATE EXTENSION cosid")
        return server

    def test_three_servers_lease_distinct_ids_and_never_duplicate(self):
        store = self.store()
        # Two read the password from a passfile, one from PGPASSWORD; one connection string is
        # a URL.
        servers = [self.server(f"fleet-{i}", store,
                               password_from="environment" if i == 2 else "passfile",
                               form="url" if i == 1 else "key=value")
                   for i in range(3)]
        ids = {s.name: int(wait_up(s)["machine_id"]) for s in servers}
        self.assertEqual(len(set(ids.values())), 3, ids)
        sessions = []
        for server in servers:
            sessions += concurrent_sessions(server, 3, [copy_ids(20_000)] * 3)
        self.assertTrue(all(not s.error for s in sessions))
        self.assertEqual(duplicates(sessions), 0)
        held = store.rows("SELECT machine_id, instance_id, status FROM cosid.leases "
                          "ORDER BY machine_id")
        self.assertEqual(sorted(int(r[0]) for r in held), sorted(ids.values()))
        self.assertEqual({r[2] for r in held}, {"held"})
        self.assertEqual({r[1] for r in held}, {status(s)["instance_id"] for s in servers})
        for server in servers:
            self.assertNotIn(FLEET_PASSWORD, server.log())
            # The worker is visible on its own server although its store is elsewhere.
            self.assertEqual(server.query(
                "SELECT datname FROM pg_stat_activity "
                "WHERE backend_type = 'cosid lease worker'"), "postgres")
        print(f"\n  3 servers, {sum(len(s.ids) for s in sessions)} ids, 0 duplicates", end=" ")

    def test_three_servers_with_two_generators_each_never_duplicate(self):
        store = self.store()
        servers = [self.server(f"fleet-gen-{i}", store) for i in range(3)]
        layouts = {"orders": "millisecond", "users": "safe_js"}
        for server in servers:
            # The same two definitions on each server, in its own cosid.database.
            server.query("SELECT cosid_create_generator('orders'); "
                         "SELECT cosid_create_generator('users', 'safe_js')")
        held = {s.name: wait_generators_up(s, ["default", *layouts]) for s in servers}
        sessions = {}

        def generate(server, name):
            sessions[server.name, name] = concurrent_sessions(
                server, 2, [copy_ids(20_000, name)] * 2)

        # Every server generates from both generators at once.
        threads = [threading.Thread(target=generate, args=(server, name))
                   for server in servers for name in layouts]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        after = {s.name: wait_generators_up(s, layouts) for s in servers}
        total = 0
        for name, layout in layouts.items():
            everything = [s for server in servers for s in sessions[server.name, name]]
            total += sum(len(s.ids) for s in everything)
            self.assertEqual([s.error for s in everything if s.error], [], name)
            self.assertEqual(duplicates(everything), 0, f"duplicate ids of '{name}'")
            # Each server issued under the machine id its status shows, and no machine id of the
            # namespace was used by two servers.
            owners = defaultdict(set)
            for server in servers:
                for session in sessions[server.name, name]:
                    for value in session.ids:
                        owners[decode(value, layout)[1]].add(server.name)
            self.assertEqual({m: names for m, names in owners.items() if len(names) > 1}, {},
                             f"machine ids of namespace '{name}' used by two servers")
            self.assertEqual(owners, {int(held[s.name][name]["machine_id"]): {s.name}
                                      for s in servers})
            # In the store: each live lease of the namespace is held by the one server whose
            # status shows it, and has been since before the load.
            expected = sorted((int(held[s.name][name]["machine_id"]),
                               held[s.name][name]["instance_id"]) for s in servers)
            self.assertEqual(sorted((int(after[s.name][name]["machine_id"]),
                                     after[s.name][name]["instance_id"]) for s in servers),
                             expected)
            live = store.rows("SELECT machine_id, instance_id FROM cosid.leases "
                              f"WHERE namespace = '{name}' AND status = 'held'")
            self.assertEqual(sorted((int(m), instance) for m, instance in live), expected)
        print(f"\n  3 servers, 2 generators each, {total} ids, 0 duplicates", end=" ")

    def test_servers_of_the_previous_version_keep_working_with_this_store(self):
        # The exact statements a cosid 0.1.0 server sends, as the store role: a store updated
        # while such servers still run keeps their leases working beside the new servers'.
        store = self.store()
        server = self.server("fleet-mixed", store)
        held = wait_up(server)["machine_id"]
        now_ms = int(time.time() * 1000)

        def as_old_server(sql):
            return query_as(store, FLEET_ROLE, sql, FLEET_PASSWORD)

        outcome, machine_id, previous, expires_ms, _ = as_old_server(
            "SELECT outcome, machine_id, previous_watermark_ms, "
            "(extract(epoch FROM expires_at) * 1000)::bigint, "
            "(extract(epoch FROM store_now) * 1000)::bigint "
            "FROM cosid.lease_claim('cosid', 10, 'old-server', false, 4000, 'old-token', "
            f"{now_ms + 4000})").split("|")
        self.assertEqual((outcome, previous), ("new", "0"))
        self.assertNotEqual(machine_id, held)
        self.assertGreater(int(expires_ms), now_ms)
        renewed = as_old_server(
            "SELECT (extract(epoch FROM expires_at) * 1000)::bigint, "
            "(extract(epoch FROM store_now) * 1000)::bigint FROM cosid.lease_renew("
            f"'cosid', {machine_id}, 'old-server', 'old-token', 4000, {now_ms + 5000})")
        self.assertEqual(len(renewed.split("|")), 2)
        self.assertEqual(as_old_server(
            f"SELECT cosid.lease_release('cosid', {machine_id}, 'old-server', 'old-token', "
            f"{now_ms + 10})"), "t")
        self.assertEqual(wait_up(server)["machine_id"], held)

    def test_store_down_stops_generation_by_the_deadline_then_resumes(self):
        store = self.store()
        server = self.server("fleet-down", store)
        wait_up(server)
        failures_before = int(server.query("SELECT renewal_failures FROM cosid.status"))
        stopped_at = time.monotonic()
        store.stop(mode="immediate")
        down = wait_for(lambda: status(server)["state"] == "DOWN" and status(server), 5,
                        "DOWN")
        self.assertTrue(down["last_error"])
        wait_for(lambda: try_next(server)[1] == "55P03", DEADLINE_S + 2, "the deadline")
        self.assertGreater(time.monotonic() - stopped_at, DEADLINE_S - 1.0)
        # One outage, one renewal that did not renew, however often it was tried again (once a
        # second while DOWN); kept once UP again.
        failed = int(server.query("SELECT renewal_failures FROM cosid.status")) - failures_before
        self.assertEqual(failed, 1)
        store.start()
        wait_for(lambda: try_next(server)[0], 10, "generation after the store returns")
        wait_up(server, timeout=5)
        self.assertEqual(
            int(server.query("SELECT renewal_failures FROM cosid.status")) - failures_before, 1)

    def outage_longer_than_the_safe_guard(self, name, restart_the_store):
        """The defaults scaled down (a 5 min safe guard, renewals every minute, a 10 min
        outage): a 6 s safe guard, renewals every 5 s, the store out of reach for 10 s, right
        after a renewal (the worst case: the next one is a whole period away), either on the
        network (a proxy refuses every connection) or stopped and started again. Returns the
        seconds from the store's return to the first id, after checking the deadline."""
        store = self.store()
        proxy = Proxy(store.port)
        self.addCleanup(proxy.close)
        server = self.server(name, store, via=proxy, **{
            "cosid.safe_guard_duration": "'6s'", "cosid.guarder_delay": "'5s'",
            "cosid.guarder_initial_delay": "'5s'"})
        wait_up(server)
        before = server.query("SELECT last_renewed_at FROM cosid.status")
        wait_for(lambda: server.query("SELECT last_renewed_at FROM cosid.status") != before, 10,
                 "a renewal")
        # The deadline that renewal set, on the wall clock: the polling above may have seen the
        # renewal late on a loaded machine, so the time generating is measured from it.
        deadline = float(server.query("SELECT extract(epoch FROM deadline) FROM cosid.status"))
        outage_started = time.monotonic()
        proxy.set_mode("reset")
        if restart_the_store:
            store.stop(mode="immediate")
        refused_at = wait_for(lambda: try_next(server)[1] == "55P03" and time.monotonic(), 10,
                              "the deadline")
        refused_wall = time.time()
        wait_for(lambda: time.monotonic() - outage_started >= 10, 11, "a 10 s outage")
        if restart_the_store:
            store.start()
        proxy.set_mode("pass")
        returned_at = time.monotonic()
        resumed_at = wait_for(lambda: try_next(server)[0] and time.monotonic(), 30,
                              "generation after the store returns")
        generating_s = refused_at - outage_started
        print(f"\n  store gone at 0 s{' (restarted)' if restart_the_store else ''}: generating "
              f"until {generating_s:.1f} s, 55P03 until {resumed_at - outage_started:.1f} s; the "
              f"store back at {returned_at - outage_started:.1f} s, ids again "
              f"{resumed_at - returned_at:.1f} s later")
        # The deadline: 5.4 s after the last renewal was sent, just before the outage. Ids
        # until then (the first refusal seen after it), none long after it.
        self.assertGreater(refused_wall, deadline - 0.1)
        self.assertLess(refused_wall, deadline + 1.5)
        self.assertLess(generating_s, 6.5)
        wait_up(server, timeout=5)
        return resumed_at - returned_at

    def test_an_outage_longer_than_the_safe_guard_ends_within_a_second_of_the_return(self):
        # Within about two seconds of the store's return (claims retried every 2 s while the
        # store does not answer, a new connection and the polling), not at the next scheduled
        # renewal up to 5 s later, nor a safe guard later: nothing restarted.
        self.assertLess(self.outage_longer_than_the_safe_guard("fleet-outage", False), 4.0)

    def test_a_restarted_store_settles_before_a_stopped_holder_claims_again(self):
        # The store cannot tell its restart from an older copy of it started in its place: the
        # server, whose deadline passed, claims again once the store settled, a safe guard
        # (6 s) after its first call, and not long after.
        resumed_s = self.outage_longer_than_the_safe_guard("fleet-restarted", True)
        self.assertGreater(resumed_s, 5.5)
        self.assertLess(resumed_s, 6.0 + 1.0 + 2.5 + 4.0)

    def test_a_claim_survives_a_store_crash_whatever_the_store_commits_with(self):
        # The store acknowledges commits before they are on disk, and flushes them only every
        # 10 s: a claim must still survive the store's crash right after it.
        store = self.store(synchronous_commit="off", wal_writer_delay="'10s'")
        server = self.server("fleet-durable", store)
        claimed = wait_up(server)
        store.crash()
        store.start()
        self.assertEqual(store.rows("SELECT machine_id, instance_id FROM cosid.machine_lease "
                                    "WHERE state = 'claimed'"),
                         [[claimed["machine_id"], claimed["instance_id"]]])

    def test_tls_with_certificate_checks(self):
        tls_dir = CLUSTERS / "fleet-tls-certs"
        tls_dir.mkdir(parents=True, exist_ok=True)
        self.addCleanup(shutil.rmtree, tls_dir, ignore_errors=True)
        make_certificates(tls_dir)
        chown_to_postgres(tls_dir)
        store = self.store(ssl="on", ssl_cert_file=f"'{tls_dir / 'server.crt'}'",
                           ssl_key_file=f"'{tls_dir / 'server.key'}'",
                           ssl_ca_file=f"'{tls_dir / 'ca.crt'}'", certificate_role=True)

        def encrypted_workers():
            return int(store.query(
                "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) "
                "WHERE a.application_name = 'cosid lease worker' AND s.ssl"))

        # The store's certificate names localhost, not 127.0.0.1.
        good = self.server("fleet-tls-good", store, host="localhost", conninfo_extra=(
            f"sslmode=verify-full sslrootcert={tls_dir / 'ca.crt'}"))
        wait_up(good)
        wait_for(lambda: encrypted_workers() == 1, 5, "1 encrypted worker connections")
        encrypted = self.server("fleet-tls-require", store, conninfo_extra="sslmode=require")
        wait_up(encrypted)
        wait_for(lambda: encrypted_workers() == 2, 5, "2 encrypted worker connections")
        # verify-ca checks the authority only, so the address is accepted.
        by_address = self.server("fleet-tls-verify-ca", store, form="url", conninfo_extra=(
            f"sslmode=verify-ca sslrootcert={tls_dir / 'ca.crt'}"))
        wait_up(by_address)
        wait_for(lambda: encrypted_workers() == 3, 5, "3 encrypted worker connections")
        # A client certificate instead of a password; its key must be private.
        certified = self.server("fleet-tls-client-cert", store, conninfo_extra=(
            f"user={CERTIFICATE_ROLE} sslmode=verify-full host=localhost "
            f"sslrootcert={tls_dir / 'ca.crt'} sslcert={tls_dir / 'client.crt'} "
            f"sslkey={tls_dir / 'client.key'}"), password_from=None)
        wait_up(certified)
        self.assertEqual(store.query(
            "SELECT s.client_dn FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) "
            f"WHERE a.usename = '{CERTIFICATE_ROLE}'"), f"/CN={CERTIFICATE_ROLE}")
        # Refused: an unknown authority, a name that is not the certificate's, a readable key.
        wrong_ca = self.server("fleet-tls-wrong", store, conninfo_extra=(
            f"sslmode=verify-full sslrootcert={tls_dir / 'other-ca.crt'}"))
        wrong_name = self.server("fleet-tls-wrong-name", store, conninfo_extra=(
            f"sslmode=verify-full sslrootcert={tls_dir / 'ca.crt'}"))
        for refused_server in (wrong_ca, wrong_name):
            refused = wait_for(
                lambda: "certificate" in (status(refused_server)["last_error"] or "")
                and status(refused_server), 10, "the certificate to be refused")
            self.assertEqual(refused["state"], "CLAIMING")
            self.assertIsNone(try_next(refused_server)[0])
        wait_for(lambda: encrypted_workers() == 4, 5, "4 encrypted worker connections")
        (tls_dir / "client.key").chmod(0o644)
        certified.stop()
        self.assertFalse(certified.start(check=False), "started with a key others can read")
        self.assertIn("cosid.lease_store", certified.log())
        self.assertIn("permissions 644", certified.log())

    def test_standby_with_a_shared_store_generates_under_its_own_machine_id(self):
        store = self.store()
        primary = self.server("fleet-primary", store)
        primary_id = int(wait_up(primary)["machine_id"])
        standby = self.track(clone_as_standby(primary, "fleet-standby", 25230))
        standby.start()
        up = wait_up(standby)
        self.assertEqual(standby.query("SELECT pg_is_in_recovery()"), "t")
        self.assertNotEqual(int(up["machine_id"]), primary_id)
        values = [try_next(standby)[0], try_next(primary)[0]]
        self.assertEqual({machine_of(v) for v in values}, {int(up["machine_id"]), primary_id})
        subprocess.run(as_postgres([PG_BIN / "pg_ctl", "-D", standby.data, "-w", "promote"]),
                       check=True, stdout=subprocess.DEVNULL)
        self.assertEqual(machine_of(try_next(standby)[0]), int(up["machine_id"]))

    def test_clone_with_the_same_stable_identity_is_refused_while_the_original_runs(self):
        store = self.store()
        original = self.server("fleet-stable-a", store, **{
            "cosid.stable": "on", "cosid.instance_id": "'orders-db-1'"})
        machine_id = int(wait_up(original)["machine_id"])
        clone = self.track(clone_as_standby(original, "fleet-stable-clone", 25240))
        clone.start()
        subprocess.run(as_postgres([PG_BIN / "pg_ctl", "-D", clone.data, "-w", "promote"]),
                       check=True, stdout=subprocess.DEVNULL)
        time.sleep(2 * DEADLINE_S)
        # The original keeps its lease and generates; the clone never generates with it.
        self.assertEqual(status(original)["state"], "UP")
        self.assertIn("waiting for it to expire", status(clone)["last_error"] or "")
        self.assertIsNone(try_next(clone)[0])
        before = run_session(original, 0, [copy_ids(1000)])
        # When the original stops (and releases), the clone takes the machine id over.
        original.stop()
        wait_up(clone, timeout=10)
        after = run_session(clone, 1, [copy_ids(1000)])
        self.assertEqual({machine_of(v) for v in after.ids}, {machine_id})
        self.assertGreater(min(after.ids), max(before.ids))
        self.assertEqual(duplicates([before, after]), 0)


def clone_as_standby(source, name, port):
    """A pg_basebackup of `source`, configured as a hot standby on its own port."""
    clone = Cluster(name, free_port(port), dict(source.settings))
    if clone.base.exists():
        clone.stop(check=False)
        subprocess.run(["rm", "-rf", str(clone.base)], check=True)
    clone.base.mkdir(parents=True)
    chown_to_postgres(clone.base)
    subprocess.run(as_postgres([PG_BIN / "pg_basebackup", "-h", "127.0.0.1", "-p",
                                str(source.port), "-U", "postgres", "-D", clone.data, "-R",
                                "-X", "stream"]), check=True)
    clone.write_settings()
    return clone


def make_certificates(directory):
    """A CA; a server certificate for the name localhost (not the address 127.0.0.1) and a client
    certificate for the certificate role, both signed by it; and an unrelated second CA."""
    def run(*args):
        subprocess.run(["openssl", *args], cwd=directory, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for ca in ("ca", "other-ca"):
        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            f"/CN=cosid test {ca}", "-keyout", f"{ca}.key", "-out", f"{ca}.crt")
    (directory / "san.ext").write_text("subjectAltName=DNS:localhost\n")
    for name, subject, extensions in (("server", "/CN=localhost", ["-extfile", "san.ext"]),
                                      ("client", f"/CN={CERTIFICATE_ROLE}", [])):
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout",
            f"{name}.key", "-out", f"{name}.csr")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", *extensions, "-out", f"{name}.crt")
        (directory / f"{name}.key").chmod(0o600)


if __name__ == "__main__":
    unittest.main()
