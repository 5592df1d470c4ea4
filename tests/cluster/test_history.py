"""The default generator's history (cosid.history in the data directory): a server restarted with
another cosid.namespace or layout never repeats the ids cosid_next() issued before. Under load,
on real servers: a clean stop, then another namespace and an epoch moved forward (the ids wait
until they are above the old ones, also across a kill -9 meanwhile); and a kill -9 under the old
settings, after which the change is refused until the server stopped cleanly with them."""

import json
import time

from helpers.clients import LoopingClients, duplicates
from helpers.faults import fake_clock, set_clock_offset
from helpers.leases import (FAST_LEASES, epoch_dating_now_as, lease_cluster, try_next,
                            ts_ms_of, wait_up)
from helpers.pgcluster import Cluster, ClusterTest, SqlError, free_port, wait_for, wait_recorded
from helpers.replication import start_standby

COSID_EPOCH = "2019-12-24T16:00:00Z"
EPOCH_MS = 1_577_203_200_000
SHIFT_S = 5
# How far ahead a clock runs for a while, in the tests that step it.
AHEAD_S = 30


def ids_of(sessions):
    return [value for session in sessions for value in session.ids]



class DefaultGeneratorHistory(ClusterTest):
    def test_another_namespace_and_a_later_epoch_never_repeat_an_id(self):
        # The finding: restarted with another namespace and an epoch moved forward, the server
        # issued again ids it had issued before (the same machine id is free in the new
        # namespace, and the later epoch dates the same bits earlier).
        cluster = self.track(lease_cluster("history-epoch", 25180))
        cluster.query("CREATE EXTENSION cosid")
        wait_up(cluster)
        with LoopingClients(cluster, clients=2, batch=2000, batches_per_session=5) as before:
            wait_for(lambda: before.ids_so_far() >= 60_000, 60, "ids before the change")
            # Long enough that the later epoch reaches back into it.
            started = time.monotonic()
            wait_for(lambda: time.monotonic() - started >= SHIFT_S, SHIFT_S + 5,
                     "a few seconds of ids")
        cluster.stop()
        old_ids = ids_of(before.sessions)
        cluster.settings = {**FAST_LEASES, "cosid.namespace": "'orders'",
                            "cosid.epoch": f"'{EPOCH_MS + SHIFT_S * 1000}'"}
        cluster.write_settings()
        cluster.start()
        # Refused, saying until when, as long as a new id would be below an old one (checked
        # at the end, after the oracles).
        try:
            first_answer = cluster.query("SELECT cosid_next()")
        except SqlError as error:
            first_answer = error
        # A crash before the new ids are above the old ones forgets nothing: the floor is in
        # the history.
        cluster.crash()
        cluster.start()
        wait_up(cluster)
        with LoopingClients(cluster, clients=2, batch=2000, batches_per_session=5) as after:
            wait_for(lambda: after.ids_so_far() >= 60_000, 60, "ids after the change")
        new_ids = ids_of(after.sessions)
        refused = {s.sqlstate for s in after.sessions if s.error}
        self.assertLessEqual(refused, {"55P03"})
        print(f"\n  before: {len(old_ids)} ids; after the change: {len(new_ids)} ids, "
              f"{sum(1 for s in after.sessions if s.error)} refused sessions")
        self.assertEqual(duplicates(before.sessions + after.sessions), 0)
        self.assertGreater(min(new_ids), max(old_ids))
        self.assertIsInstance(first_answer, SqlError, "an id below the old ones was issued")
        self.assertEqual(first_answer.sqlstate, "55P03")
        self.assertIn("the default generator issues no id before", first_answer.message)

    def test_a_change_after_a_crash_waits_for_a_clean_stop_under_the_old_settings(self):
        cluster = self.track(lease_cluster("history-crash", 25181))
        cluster.query("CREATE EXTENSION cosid")
        wait_up(cluster)
        old_ids = [int(v) for v in cluster.query(
            "SELECT cosid_next() FROM generate_series(1, 5000)").split()]
        cluster.crash()
        # The old settings' last id is not known: refused, and no machine id is taken.
        cluster.settings = {**FAST_LEASES, "cosid.namespace": "'orders'"}
        cluster.write_settings()
        cluster.start()
        with self.assertRaises(SqlError) as refusal:
            cluster.query("SELECT cosid_next()")
        self.assertEqual(refusal.exception.sqlstate, "55000")
        self.assertIn("the default generator's definition changed", refusal.exception.message)
        self.assertIn('it was namespace "cosid"', refusal.exception.stderr)
        self.assertIn("wait until cosid.status shows the default generator UP", refusal.exception.stderr)
        self.assertEqual(cluster.rows("SELECT state FROM cosid.status")[0][0], "STOPPED")
        self.assertEqual(cluster.query(
            "SELECT count(*) FROM cosid.machine_lease WHERE namespace = 'orders'"), "0")
        # Nor does a lease worker that cannot connect (cosid.database missing) hide why: its
        # back-off leaves the history's refusal in place.
        cluster.stop()
        cluster.settings = {**FAST_LEASES, "cosid.namespace": "'orders'",
                            "cosid.database": "'no_such_database'"}
        cluster.write_settings()
        cluster.start()
        wait_for(lambda: 'could not connect to database "no_such_database"' in cluster.log(), 20,
                 "the lease worker's back-off")
        with self.assertRaises(SqlError) as refusal:
            cluster.query("SELECT cosid_next()")
        self.assertEqual(refusal.exception.sqlstate, "55000", refusal.exception.stderr)
        # The leases the crash left in "postgres" are named first: they too wait for a clean
        # stop with the old settings.
        self.assertIn("the leases of the server's last run are in another database",
                      refusal.exception.message)
        # What the HINT says: once with the old settings, stopped cleanly, then the new ones.
        cluster.stop()
        cluster.settings = FAST_LEASES
        cluster.write_settings()
        cluster.start()
        wait_up(cluster)
        cluster.stop()
        cluster.settings = {**FAST_LEASES, "cosid.namespace": "'orders'"}
        cluster.write_settings()
        cluster.start()
        wait_up(cluster)
        new_ids = [int(v) for v in cluster.query(
            "SELECT cosid_next() FROM generate_series(1, 5000)").split()]
        self.assertGreater(min(new_ids), max(old_ids))
        self.assertEqual(len(set(old_ids) | set(new_ids)), 10_000)

    def test_a_clean_run_that_issued_nothing_keeps_the_last_id_known(self):
        # A run with the same settings whose generator never opened (here: cosid.database does
        # not exist, so nothing is claimed) and that stops cleanly must not forget the last id
        # of the run before it.
        shift_s = 10
        cluster = self.track(lease_cluster("history-idle", 25182))
        cluster.query("CREATE EXTENSION cosid")
        wait_up(cluster)
        old_ids = [int(v) for v in cluster.query(
            "SELECT cosid_next() FROM generate_series(1, 20000)").split()]
        cluster.stop()
        cluster.settings = {**FAST_LEASES, "cosid.database": "'no_such_database'"}
        cluster.write_settings()
        cluster.start()
        with self.assertRaises(SqlError):
            cluster.query("SELECT cosid_next()")
        cluster.stop()
        # Another namespace, since a namespace keeps its layout in the lease table.
        cluster.settings = {**FAST_LEASES, "cosid.namespace": "'orders'",
                            "cosid.epoch": f"'{EPOCH_MS + shift_s * 1000}'"}
        cluster.write_settings()
        cluster.start()
        new_ids = []

        def generated():
            try:
                new_ids.extend(int(v) for v in cluster.query(
                    "SELECT cosid_next() FROM generate_series(1, 20000)").split())
                return True
            except SqlError as error:
                self.assertEqual(error.sqlstate, "55P03", error.stderr)
                return False
        wait_for(generated, shift_s + 15, "ids of the later epoch")
        self.assertGreater(min(new_ids), max(old_ids))

    def test_an_older_copy_of_the_history_put_back_is_refused(self):
        # The finding: after a run with the epoch 8 s earlier (allowed at once: its ids are
        # above), an older copy of cosid.history put back (the step "restore it from a backup"
        # of the old HINT) and a restart with the first settings issued again 5,384 of the run's
        # 6,000 ids: the copy records the first settings as the last ones.
        fixed = {"cosid.distributor": "'manual'", "cosid.machine_id": "3"}
        cluster = self.track(Cluster("history-copy", free_port(25183), fixed).init())
        cluster.start()
        cluster.query("CREATE EXTENSION cosid")
        cluster.query("SELECT cosid_next() FROM generate_series(1, 2000)")
        cluster.stop()
        history = cluster.data / "cosid.history"
        older_copy = history.read_bytes()
        cluster.settings = {**fixed, "cosid.epoch": f"'{EPOCH_MS - 8000}'"}
        cluster.write_settings()
        cluster.start()
        earlier_epoch_ids = []
        started = time.monotonic()
        while time.monotonic() - started < 3:
            earlier_epoch_ids += [int(v) for v in cluster.query(
                "SELECT cosid_next() FROM generate_series(1, 2000)").split()]
        cluster.stop()
        last_copy = history.read_bytes()
        history.write_bytes(older_copy)
        cluster.settings = fixed
        cluster.write_settings()
        cluster.start()
        # Ids of the earlier epoch equal those of the first one 8 s later: generated until the
        # clock has passed the earlier epoch's run by 8 s, unless refused.
        issued = []
        refusal = None
        while refusal is None and time.monotonic() - started < 8 + 3 + 1:
            try:
                issued += [int(v) for v in cluster.query(
                    "SELECT cosid_next() FROM generate_series(1, 2000)").split()]
            except SqlError as error:
                refusal = error
        repeated = len(set(issued) & set(earlier_epoch_ids))
        self.assertEqual(repeated, 0, f"{repeated} of {len(issued)} ids issued again")
        self.assertEqual(issued, [], "ids issued from an older copy of the history")
        self.assertEqual(refusal.sqlstate, "55000", refusal.stderr)
        self.assertIn("cosid cannot use the default generator's history file", refusal.message)
        self.assertIn("is an older copy", refusal.stderr)
        self.assertIn("Never put back an older copy", refusal.stderr)
        # Deleted instead, it is refused the same way: the generation file says it was written.
        cluster.stop()
        history.unlink()
        cluster.start()
        with self.assertRaises(SqlError) as missing:
            cluster.query("SELECT cosid_next()")
        self.assertEqual(missing.exception.sqlstate, "55000")
        self.assertIn("is missing, and the generation file says", missing.exception.stderr)
        # The last one put back is trusted: the first settings wait until their ids are above
        # the earlier epoch's, then generate.
        cluster.stop()
        history.write_bytes(last_copy)
        cluster.start()
        resumed = wait_for(lambda: try_next(cluster)[0], 60, "generation with the last history")
        self.assertGreater(resumed, max(earlier_epoch_ids))

    def test_a_named_generator_in_a_namespace_the_default_generator_used_is_refused(self):
        # The finding: the default generator on machine id 7 in namespace 'orders', stopped
        # cleanly and started in 'web'; a named generator 'legacy' in 'orders' with a later
        # epoch then issued the default generator's ids again (11,494,787 duplicates): only the
        # current cosid.namespace was compared.
        fixed = {"cosid.distributor": "'manual'", "cosid.machine_id": "7"}
        cluster = self.track(Cluster("history-named", free_port(25184),
                                     {**fixed, "cosid.namespace": "'orders'"}).init())
        cluster.start()
        cluster.query("CREATE EXTENSION cosid")
        default_ids = []
        started = time.monotonic()
        while time.monotonic() - started < 2:
            default_ids += [int(v) for v in cluster.query(
                "SELECT cosid_next() FROM generate_series(1, 2000)").split()]
        cluster.stop()
        cluster.settings = {**fixed, "cosid.namespace": "'web'"}
        cluster.write_settings()
        cluster.start()
        # An epoch that dates this moment's ids as the middle of the default generator's.
        middle_ms = ts_ms_of(default_ids[len(default_ids) // 2])
        epoch = epoch_dating_now_as(middle_ms)
        legacy_ids = []
        refusal = None
        try:
            cluster.query(f"SELECT cosid_create_generator('legacy', namespace => 'orders', "
                          f"epoch => '{epoch}')")
            legacy = wait_for(lambda: try_next(cluster, "SELECT cosid_next('legacy')")[0], 30,
                              "generator legacy")
            legacy_ids = [legacy] + [int(v) for v in cluster.query(
                "SELECT cosid_next('legacy') FROM generate_series(1, 200000)").split()]
        except SqlError as error:
            refusal = error
        repeated = len(set(legacy_ids) & set(default_ids))
        self.assertEqual(repeated, 0, f"{repeated} of {len(legacy_ids)} ids issued again")
        self.assertIsNotNone(refusal, "a named generator was created in the default's namespace")
        self.assertEqual(refusal.sqlstate, "22023", refusal.stderr)
        self.assertIn('namespace "orders" was the default generator\'s', refusal.message)
        self.assertIn("cosid.history", refusal.stderr)
        # A namespace the default generator never used is another matter.
        cluster.query("SELECT cosid_create_generator('fresh', namespace => 'fresh')")
        self.assertIsNotNone(
            wait_for(lambda: try_next(cluster, "SELECT cosid_next('fresh')")[0], 30, "fresh"))

    def test_a_named_generator_is_refused_while_the_history_is_missing_or_older(self):
        # The finding: with cosid.history deleted, or an older copy put back, cosid_next()
        # refused but cosid_create_generator() in a namespace the default generator had used
        # was accepted (478,387 and 1,609,924 duplicates): its check read the file alone, and a
        # missing file read as a first start. Both now read it checked against cosid.generation.
        fixed = {"cosid.distributor": "'manual'", "cosid.machine_id": "7"}
        cluster = self.track(Cluster("history-named-copy", free_port(25189),
                                     {**fixed, "cosid.namespace": "'first'"}).init())
        cluster.start()
        cluster.query("CREATE EXTENSION cosid")
        cluster.query("SELECT cosid_next()")
        cluster.stop()
        history = cluster.data / "cosid.history"
        before_orders = history.read_bytes()
        generation_before_orders = (cluster.data / "cosid.generation").read_bytes()
        cluster.settings = {**fixed, "cosid.namespace": "'orders'"}
        cluster.write_settings()
        cluster.start()
        default_ids = []
        started = time.monotonic()
        while time.monotonic() - started < 2:
            default_ids += [int(v) for v in cluster.query(
                "SELECT cosid_next() FROM generate_series(1, 2000)").split()]
        cluster.stop()
        cluster.settings = {**fixed, "cosid.namespace": "'web'"}
        cluster.write_settings()
        cluster.start()
        wait_recorded(cluster, "orders")
        cluster.stop()
        last = history.read_bytes()
        last_generation = (cluster.data / "cosid.generation").read_bytes()
        middle_ms = ts_ms_of(default_ids[len(default_ids) // 2])

        def create_legacy(name, namespace="orders"):
            """The named generator in 'orders' with an epoch that dates this moment's ids as
            the middle of the default generator's: its ids if it was created, else the error."""
            epoch = epoch_dating_now_as(middle_ms)
            try:
                cluster.query(f"SELECT cosid_create_generator('{name}', "
                              f"namespace => '{namespace}', "
                              f"epoch => '{epoch}')")
            except SqlError as error:
                return [], error
            if namespace != "orders":
                cluster.query(f"SELECT cosid_drop_generator('{name}')")
                return [], None
            first = wait_for(lambda: try_next(cluster, f"SELECT cosid_next('{name}')")[0], 30,
                             f"generator {name}")
            return [first] + [int(v) for v in cluster.query(
                f"SELECT cosid_next('{name}') FROM generate_series(1, 100000)").split()], None

        generation = cluster.data / "cosid.generation"
        for case, put_back in (("deleted", None), ("an older copy", (before_orders, None)),
                               ("an older copy with its generation file",
                                (before_orders, generation_before_orders))):
            with self.subTest(case):
                if put_back is None:
                    history.unlink()
                else:
                    history.write_bytes(put_back[0])
                    if put_back[1] is not None:
                        generation.write_bytes(put_back[1])
                cluster.start()
                try:
                    legacy_ids, refusal = create_legacy("legacy")
                    if refusal is None:
                        cluster.query("SELECT cosid_drop_generator('legacy')")
                    _, unknown = create_legacy(f"u{len(case)}", namespace=f"unknown_{len(case)}")
                finally:
                    cluster.stop()
                repeated = len(set(legacy_ids) & set(default_ids))
                self.assertEqual(repeated, 0, f"{repeated} of {len(legacy_ids)} ids issued again")
                self.assertIsNotNone(refusal, "created while the history was " + case)
                # cosid.database's record answers for the namespace the default generator used.
                self.assertEqual(refusal.sqlstate, "22023", refusal.stderr)
                self.assertIn("cosid.default_namespace", refusal.stderr)
                if put_back is not None and put_back[1] is not None:
                    # The two files agree: another namespace is created.
                    self.assertIsNone(unknown, "the files put back together are read")
                    continue
                # For a namespace it does not record, the file decides, and cannot be read.
                self.assertIsNotNone(unknown, "created while the history was " + case)
                self.assertEqual(unknown.sqlstate, "55000", unknown.stderr)
                self.assertIn("cannot tell whether the default generator used this namespace",
                              unknown.message)
                self.assertIn("cosid.generation", unknown.stderr)
        generation.write_bytes(last_generation)
        # The last one back: refused as a namespace the default generator used, and a
        # namespace it never used is created and generates.
        history.write_bytes(last)
        cluster.start()
        _, refusal = create_legacy("legacy")
        self.assertEqual(refusal.sqlstate, "22023", refusal.stderr)
        cluster.query("SELECT cosid_create_generator('fresh', namespace => 'fresh')")
        self.assertIsNotNone(
            wait_for(lambda: try_next(cluster, "SELECT cosid_next('fresh')")[0], 30, "fresh"))

    def test_a_promoted_standby_knows_the_namespaces_its_primary_used(self):
        # The finding: a standby made while the default generator ran in 'first', promoted
        # after the primary had issued ids in 'orders' and moved to 'web': its cosid.history is
        # the base backup's, and a named generator in 'orders' with a later epoch was accepted
        # there (3,508,383 ids issued again). cosid.default_namespace reached it through WAL.
        fixed = {"cosid.distributor": "'manual'", "cosid.machine_id": "7"}
        primary = self.track(Cluster("history-primary", free_port(25191),
                                     {**fixed, "cosid.namespace": "'first'"}).init())
        primary.start()
        primary.query("CREATE EXTENSION cosid")
        primary.query("SELECT cosid_next()")
        standby = self.track(start_standby(primary, "history-standby", 25193, preload=True))
        primary.stop()
        primary.settings = {**fixed, "cosid.namespace": "'orders'"}
        primary.write_settings()
        primary.start()
        default_ids = []
        started = time.monotonic()
        while time.monotonic() - started < 2:
            default_ids += [int(v) for v in primary.query(
                "SELECT cosid_next() FROM generate_series(1, 2000)").split()]
        wait_recorded(primary, "orders")
        primary.stop()
        primary.settings = {**fixed, "cosid.namespace": "'web'"}
        primary.write_settings()
        primary.start()
        lsn = primary.query("SELECT pg_current_wal_lsn()")
        wait_for(lambda: standby.query(
            f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn") == "t", 30, "the standby")
        primary.stop()
        standby.query("SELECT pg_promote()")
        wait_for(lambda: standby.query("SELECT pg_is_in_recovery()") == "f", 30, "the promotion")
        middle_ms = ts_ms_of(default_ids[len(default_ids) // 2])
        epoch = epoch_dating_now_as(middle_ms)
        legacy_ids = []
        refusal = None
        try:
            standby.query(f"SELECT cosid_create_generator('legacy', namespace => 'orders', "
                          f"epoch => '{epoch}')")
            legacy = wait_for(lambda: try_next(standby, "SELECT cosid_next('legacy')")[0], 30,
                              "generator legacy")
            legacy_ids = [legacy] + [int(v) for v in standby.query(
                "SELECT cosid_next('legacy') FROM generate_series(1, 200000)").split()]
        except SqlError as error:
            refusal = error
        repeated = len(set(legacy_ids) & set(default_ids))
        self.assertEqual(repeated, 0, f"{repeated} of {len(legacy_ids)} ids issued again")
        self.assertIsNotNone(refusal, "a named generator was created in the primary's namespace")
        self.assertEqual(refusal.sqlstate, "22023", refusal.stderr)
        self.assertIn("cosid.default_namespace", refusal.stderr)
        # A namespace the primary never used is created on the promoted server, and generates.
        standby.query("SELECT cosid_create_generator('fresh', namespace => 'fresh')")
        self.assertIsNotNone(
            wait_for(lambda: try_next(standby, "SELECT cosid_next('fresh')")[0], 30, "fresh"))

    def test_the_default_generator_in_a_namespace_a_named_generator_used(self):
        # The default generator opens in a namespace a named generator of this server used only
        # with that namespace's layout, and then above its last id. Machine id 7 of 'shop' was
        # the named generator's, with the clock 30 s ahead meanwhile; the default generator
        # opened (namespace 'orders') and stopped with the clock right, so that neither its
        # history nor its state file (of namespace 'orders') holds that floor: cosid.names does.
        fixed = {"cosid.distributor": "'manual'", "cosid.machine_id": "7"}
        cluster = self.track(Cluster("history-default-named", free_port(25187),
                                     {**fixed, "cosid.namespace": "'orders'"}).init())
        offset_file = cluster.base / "faketime"
        cluster.env = fake_clock(offset_file, 0)
        cluster.start()
        cluster.query("CREATE EXTENSION cosid")
        set_clock_offset(offset_file, AHEAD_S)
        cluster.query("SELECT cosid_create_generator('clicks', namespace => 'shop')")
        wait_for(lambda: try_next(cluster, "SELECT cosid_next('clicks')")[0], 30, "clicks")
        clicks_ids = []
        started = time.monotonic()
        while time.monotonic() - started < 2:
            clicks_ids += [int(v) for v in cluster.query(
                "SELECT cosid_next('clicks') FROM generate_series(1, 2000)").split()]
        set_clock_offset(offset_file, 0)
        cluster.stop()
        # Another layout in that namespace: refused for as long as the server runs so, and not
        # recorded (a definition recorded would be a change the next start waits out: two
        # months for this one, of seconds, before the fix).
        cluster.settings = {**fixed, "cosid.namespace": "'shop'", "cosid.time_unit": "'second'",
                            "cosid.timestamp_bits": "31", "cosid.sequence_bits": "22"}
        cluster.write_settings()
        cluster.start()
        with self.assertRaises(SqlError) as refused:
            cluster.query("SELECT cosid_next()")
        said = refused.exception.stderr
        self.assertEqual(refused.exception.sqlstate, "55000", said)
        self.assertIn('namespace "shop" was used by a named generator of this server with '
                      'another layout', said)
        cluster.stop()
        # Its layout: the default generator waits until its ids are above the named one's, half
        # a minute ahead of this clock.
        cluster.settings = {**fixed, "cosid.namespace": "'shop'"}
        cluster.write_settings()
        cluster.start()
        with self.assertRaises(SqlError, msg="an id below the named generator's last one "
                               "was issued") as waiting:
            cluster.query("SELECT cosid_next()")
        self.assertEqual(waiting.exception.sqlstate, "55P03", waiting.exception.stderr)
        set_clock_offset(offset_file, AHEAD_S + 5)
        wait_for(lambda: try_next(cluster, "SELECT cosid_next()")[0], 30,
                 "the default generator past the named generator's last id")
        default_ids = [int(v) for v in cluster.query(
            "SELECT cosid_next() FROM generate_series(1, 20000)").split()]
        self.assertGreater(min(default_ids), max(clicks_ids))
        repeated = len(set(default_ids) & set(clicks_ids))
        self.assertEqual(repeated, 0, f"{repeated} of {len(default_ids)} ids issued again")

    def test_a_name_created_again_after_cosid_database_moved_keeps_its_layout(self):
        # The finding: cosid_next('orders'), then cosid.database pointed to a new database (as
        # the drop guard's hint said), the extension created there and 'orders' created again
        # with a later epoch: both on machine id 0 of namespace 'orders', 208,355 duplicates.
        # The name's namespace and the namespace's layout lived only in the old database.
        cluster = self.track(lease_cluster("history-moved", 25185,
                                           **{"cosid.database": "'db_a'"}))
        cluster.query("CREATE DATABASE db_a")
        cluster.query("CREATE EXTENSION cosid", db="db_a")
        cluster.query("CREATE EXTENSION cosid")
        wait_up(cluster)
        cluster.query("SELECT cosid_create_generator('orders')", db="db_a")
        next_orders = "SELECT cosid_next('orders') FROM generate_series(1, 2000)"
        wait_for(lambda: try_next(cluster, "SELECT cosid_next('orders')")[0], 30, "orders")
        old_ids = []
        started = time.monotonic()
        while time.monotonic() - started < 2:
            old_ids += [int(v) for v in cluster.query(next_orders, db="db_a").split()]
        cluster.stop()
        # The server keeps the name, its namespace's layout and its last id, outside db_a.
        names = json.loads((cluster.data / "cosid.names").read_text())
        self.assertEqual(names["names"], {"orders": "orders"})
        self.assertGreaterEqual(names["namespaces"]["orders"]["last_ms"], ts_ms_of(max(old_ids)))
        cluster.settings = {**FAST_LEASES, "cosid.database": "'db_b'"}
        cluster.write_settings()
        cluster.start()
        cluster.query("CREATE DATABASE db_b")
        cluster.query("CREATE EXTENSION cosid", db="db_b")
        wait_up(cluster)
        middle_ms = ts_ms_of(old_ids[len(old_ids) // 2])
        epoch = epoch_dating_now_as(middle_ms)
        new_ids = []
        refusal = None
        try:
            cluster.query("SELECT cosid_create_generator('orders', epoch => "
                          f"'{epoch}')", db="db_b")
            wait_for(lambda: try_next(cluster, "SELECT cosid_next('orders')")[0], 30, "orders")
            started = time.monotonic()
            while time.monotonic() - started < 2:
                new_ids += [int(v) for v in cluster.query(next_orders, db="db_b").split()]
        except SqlError as error:
            refusal = error
        repeated = len(set(new_ids) & set(old_ids))
        self.assertEqual(repeated, 0, f"{repeated} of {len(new_ids)} ids issued again")
        self.assertIsNotNone(refusal, "'orders' was created again with another layout")
        self.assertEqual(refusal.sqlstate, "22023", refusal.stderr)
        self.assertIn('namespace "orders" was used with another layout on this server',
                      refusal.message)
        # A definition written past the check into the new database's tables (consistent with
        # them: the name in another namespace) is not run.
        layout = f"epoch {EPOCH_MS} ms, millisecond, 41/10/12 bits"
        cluster.query("INSERT INTO cosid.generator_name (name, namespace) "
                      "VALUES ('orders', 'elsewhere');"
                      "INSERT INTO cosid.generator_namespace (namespace, layout) "
                      f"VALUES ('elsewhere', '{layout}');"
                      "INSERT INTO cosid.generator (name, namespace, epoch_ms, time_unit, "
                      "timestamp_bits, machine_bits, sequence_bits) VALUES ('orders', "
                      f"'elsewhere', {EPOCH_MS}, 'millisecond', 41, 10, 12)", db="db_b")
        wait_for(lambda: "its name was used with another namespace on this server"
                 in cluster.log(), 30, "the definition to be skipped")
        self.assertIsNone(try_next(cluster, "SELECT cosid_next('orders')")[0])
        # The namespace with the layout it had takes another generator, whose ids are above
        # the old ones.
        cluster.query("SELECT cosid_create_generator('again', namespace => 'orders')",
                      db="db_b")
        first = wait_for(lambda: try_next(cluster, "SELECT cosid_next('again')")[0], 30,
                         "a generator of namespace orders with its layout")
        self.assertGreater(first, max(old_ids))

    def test_leases_left_in_another_database_by_a_crash_are_waited_for(self):
        # The review's finding: the last ids of a server are recorded at a clean stop only; after
        # a crash, the lease table's watermarks are their only floors. Pointed at another
        # cosid.database then, the server took machine id 0 as new there and, its clock behind,
        # issued again 59,204 ids of the default generator and 80,927 of a named one.
        cluster = self.track(lease_cluster("history-crash-moved", 25186,
                                           **{"cosid.database": "'db_a'"}))
        cluster.query("CREATE DATABASE db_a")
        cluster.query("CREATE EXTENSION cosid", db="db_a")
        cluster.query("CREATE EXTENSION cosid")
        wait_up(cluster)
        cluster.query("SELECT cosid_create_generator('orders')", db="db_a")
        wait_for(lambda: try_next(cluster, "SELECT cosid_next('orders')")[0], 30, "orders")
        old_ids = [int(v) for v in cluster.query(
            "SELECT cosid_next() FROM generate_series(1, 2000) UNION ALL "
            "SELECT cosid_next('orders') FROM generate_series(1, 2000)").split()]
        cluster.crash()
        cluster.settings = {**FAST_LEASES, "cosid.database": "'db_b'"}
        cluster.write_settings()
        cluster.start()
        cluster.query("CREATE DATABASE db_b")
        cluster.query("CREATE EXTENSION cosid", db="db_b")
        cluster.query("SELECT cosid_create_generator('orders')", db="db_b")
        with self.assertRaises(SqlError) as refused:
            cluster.query("SELECT cosid_next()")
        said = refused.exception.stderr
        self.assertEqual(refused.exception.sqlstate, "55000", said)
        self.assertIn("the leases of the server's last run are in another database", said)
        self.assertIn("cosid.database = 'db_a'", said)
        wait_for(lambda: "leased from another cosid.database's lease table" in cluster.log(), 30,
                 "the named generator to be left out")
        self.assertIsNone(try_next(cluster, "SELECT cosid_next('orders')")[0])
        # What the HINT says: once with db_a, stopped cleanly; then db_b.
        cluster.stop()
        cluster.settings = {**FAST_LEASES, "cosid.database": "'db_a'"}
        cluster.write_settings()
        cluster.start()
        wait_up(cluster)
        cluster.stop()
        cluster.settings = {**FAST_LEASES, "cosid.database": "'db_b'"}
        cluster.write_settings()
        cluster.start()
        new_ids = [wait_for(lambda: try_next(cluster, sql)[0], 30, sql)
                   for sql in ("SELECT cosid_next()", "SELECT cosid_next('orders')")]
        self.assertGreater(min(new_ids), max(old_ids))

    def test_leases_left_behind_are_waited_for_whatever_else_is_refused(self):
        # After a crash, cosid.database moved and the default generator put in a named
        # generator's namespace with another layout: the default generator is refused for both,
        # and the leases left in db_a still keep every named generator from leasing in db_b (a
        # review found the layout's refusal returning before the history set that rule).
        cluster = self.track(lease_cluster("history-crash-both", 25188,
                                           **{"cosid.database": "'db_a'"}))
        cluster.query("CREATE DATABASE db_a")
        cluster.query("CREATE EXTENSION cosid", db="db_a")
        cluster.query("CREATE EXTENSION cosid")
        wait_up(cluster)
        cluster.query("SELECT cosid_create_generator('orders')", db="db_a")
        wait_for(lambda: try_next(cluster, "SELECT cosid_next('orders')")[0], 30, "orders")
        cluster.crash()
        cluster.settings = {**FAST_LEASES, "cosid.database": "'db_b'",
                            "cosid.namespace": "'orders'", "cosid.time_unit": "'second'",
                            "cosid.timestamp_bits": "31", "cosid.sequence_bits": "22"}
        cluster.write_settings()
        cluster.start()
        cluster.query("CREATE DATABASE db_b")
        cluster.query("CREATE EXTENSION cosid", db="db_b")
        cluster.query("SELECT cosid_create_generator('clicks')", db="db_b")
        with self.assertRaises(SqlError) as refused:
            cluster.query("SELECT cosid_next()")
        said = refused.exception.stderr
        self.assertEqual(refused.exception.sqlstate, "55000", said)
        self.assertIn("the leases of the server's last run are in another database", said)
        wait_for(lambda: "leased from another cosid.database's lease table" in cluster.log(), 30,
                 "the named generator to be left out")
        self.assertIsNone(try_next(cluster, "SELECT cosid_next('clicks')")[0])
