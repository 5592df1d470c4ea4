"""Logical replication between servers that write the same tables. A server that leases its
machine ids from its own lease table is coordinated with no other server: CREATE SUBSCRIPTION
and ALTER SUBSCRIPTION ... ENABLE warn so. The documented recipe, a publisher and a writing
subscriber that lease from one shared store, is run under concurrent inserts on both sides:
every row arrives, none collides, and the apply worker reports no error."""

import threading
import unittest

from helpers.fleet import fleet_server, start_store
from helpers.leases import FAST_LEASES, lease_cluster, wait_up
from helpers.pgcluster import PG_MAJOR, ClusterTest, server_says, wait_for

UNCOORDINATED = "cosid's machine ids on this server are coordinated with no other server"
WARNING = f"WARNING:  01000: {UNCOORDINATED}"
SUBSCRIBE = ("CREATE SUBSCRIPTION {name} CONNECTION 'host=127.0.0.1 port={port} dbname=postgres' "
             "PUBLICATION {publication} WITH ({options})")


class SubscriptionWarning(ClusterTest):
    def test_a_subscription_on_a_server_leasing_locally_warns(self):
        server = self.track(lease_cluster("replication-local", 25850))
        server.query("CREATE EXTENSION cosid")
        said = server_says(server, SUBSCRIBE.format(
            name="s", port=1, publication="p",
            options="connect = false, enabled = false, create_slot = false, slot_name = NONE"))
        self.assertIn(WARNING, said)
        self.assertIn('This server leases its machine ids from its own lease table (database '
                      '"postgres"; cosid.lease_store is not set)', said)
        self.assertIn("HINT:  Let every server that writes the same tables lease from one shared "
                      "store (cosid.lease_store, same cosid.namespace), or give each a distinct "
                      "fixed machine id", said)
        # Disabling says nothing; enabling warns again (here it has no slot to start from).
        self.assertNotIn(UNCOORDINATED, server_says(server, "ALTER SUBSCRIPTION s DISABLE"))
        server.query("ALTER SUBSCRIPTION s SET (slot_name = 's')")
        self.assertIn(WARNING, server_says(server, "ALTER SUBSCRIPTION s ENABLE"))
        server_says(server, "ALTER SUBSCRIPTION s DISABLE")
        server.query("ALTER SUBSCRIPTION s SET (slot_name = NONE)")
        server.query("DROP SUBSCRIPTION s")
        # Other statements of every database pass through without a word.
        self.assertEqual(server_says(server, "CREATE TABLE quiet (id bigint)"), "")

    def test_no_warning_with_a_fixed_machine_id_or_a_shared_store(self):
        manual = self.track(lease_cluster("replication-manual", 25855,
                                          **{"cosid.distributor": "manual",
                                             "cosid.machine_id": 3}))
        store = self.track(start_store("replication-quiet-store", 25860))
        shared = self.track(fleet_server("replication-shared", 25865, store.port, FAST_LEASES))
        shared.start()
        for server in (manual, shared):
            server.query("CREATE EXTENSION cosid")
            said = server_says(server, SUBSCRIBE.format(
                name="s", port=1, publication="p",
                options="connect = false, enabled = false, create_slot = false, "
                        "slot_name = NONE"))
            # (PostgreSQL's own warning that no table was subscribed, without a connection, is
            # all there is.)
            self.assertNotIn(UNCOORDINATED, said, server.name)


class SharedStoreRecipe(ClusterTest):
    """The recipes of docs/operations.md: servers that write the same table through logical
    replication, leasing from one store in one namespace, under concurrent inserts on every
    side."""

    ROWS_PER_SIDE = 50_000
    TABLE = "CREATE TABLE events (id bigint PRIMARY KEY DEFAULT cosid_next(), side text NOT NULL)"

    def servers(self, *names):
        store = self.track(start_store("replication-store", 25870))
        servers = []
        for index, name in enumerate(names):
            server = self.track(fleet_server(name, 25875 + 5 * index, store.port,
                                             {**FAST_LEASES, "wal_level": "logical"}))
            server.start()
            server.query("CREATE EXTENSION cosid")
            server.query(self.TABLE)
            server.query("CREATE PUBLICATION events_pub FOR TABLE events")
            wait_up(server)
            servers.append(server)
        return servers

    def subscribe(self, subscriber, publisher, options):
        said = server_says(subscriber, SUBSCRIBE.format(
            name="events_sub", port=publisher.port, publication="events_pub", options=options))
        self.assertNotIn(UNCOORDINATED, said)
        wait_for(lambda: subscriber.query(
            "SELECT count(*) FROM pg_stat_subscription WHERE subname = 'events_sub' "
            "AND pid IS NOT NULL") == "1", 30, f"{subscriber.name}'s apply worker")

    def insert_everywhere(self, servers):
        def insert(server):
            for _ in range(self.ROWS_PER_SIDE // 1000):
                server.query(f"INSERT INTO events (side) SELECT '{server.name}' "
                             "FROM generate_series(1, 1000)")
        threads = [threading.Thread(target=insert, args=(server,)) for server in servers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def assert_complete(self, subscriber, rows, sides):
        wait_for(lambda: subscriber.query("SELECT count(*) FROM events") == str(rows), 60,
                 f"every row to arrive at {subscriber.name}:\n{subscriber.log()[-1500:]}")
        self.assertEqual(subscriber.query(
            "SELECT count(DISTINCT id), count(DISTINCT side), "
            "count(DISTINCT (cosid_decode(id)).machine_id) FROM events"),
            f"{rows}|{sides}|{sides}")
        self.assertEqual(subscriber.query(
            "SELECT apply_error_count, sync_error_count FROM pg_stat_subscription_stats "
            "WHERE subname = 'events_sub'"), "0|0")

    def test_a_writing_subscriber_and_its_publisher_never_collide(self):
        publisher, subscriber = self.servers("replication-publisher", "replication-subscriber")
        self.subscribe(subscriber, publisher, "copy_data = false")
        self.insert_everywhere([publisher, subscriber])
        # Every row of the publisher arrives beside the subscriber's own, each side under a
        # machine id of its own.
        self.assertEqual(publisher.query("SELECT count(*) FROM events"),
                         str(self.ROWS_PER_SIDE))
        self.assert_complete(subscriber, 2 * self.ROWS_PER_SIDE, 2)

    @unittest.skipIf(PG_MAJOR < 16, "origin = none is new in PostgreSQL 16")
    def test_bidirectional_replication_never_collides(self):
        first, second = self.servers("replication-first", "replication-second")
        # Each applies only the other's own rows (origin = none), so nothing goes round.
        self.subscribe(first, second, "copy_data = false, origin = none")
        self.subscribe(second, first, "copy_data = false, origin = none")
        self.insert_everywhere([first, second])
        for server in (first, second):
            self.assert_complete(server, 2 * self.ROWS_PER_SIDE, 2)
