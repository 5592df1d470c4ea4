"""Load: pgbench with 200 client connections spread over three cosid servers that share a lease
store, inserting rows keyed by cosid_next() while one server is cut off from the store for
longer than the safe guard. Zero duplicates over every row of every server, no server crash
(pg_postmaster_start_time unchanged), and the throughput and error counts reported."""

import re
import subprocess
import threading
import time
import unittest

from helpers.faults import FAST, LAYOUT
from helpers.fleet import Proxy, fleet_server, start_store
from helpers.leases import SAFE_GUARD_S, status
from helpers.pgcluster import PG_BIN, wait_for

CLIENTS = 200
SECONDS = 14

# One transaction: insert a row keyed by cosid_next(). A refusal to generate (no lease, 55P03 or
# 53400) is counted, not fatal; any other error, a duplicate key above all, aborts the client.
SETUP_SQL = """
CREATE EXTENSION IF NOT EXISTS cosid;
CREATE TABLE events (id bigint PRIMARY KEY DEFAULT cosid_next(), client int, at timestamptz
                     DEFAULT clock_timestamp());
CREATE UNLOGGED TABLE refusals (sqlstate text, n bigint DEFAULT 1);
CREATE FUNCTION add_event(client int) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO events (client) VALUES (client);
EXCEPTION WHEN lock_not_available OR configuration_limit_exceeded THEN
    INSERT INTO refusals (sqlstate) VALUES (SQLSTATE);
END $$;
"""
SCRIPT = "SELECT add_event(:client_id);\n"


class Load(unittest.TestCase):
    def test_two_hundred_clients_through_a_partition(self):
        store = start_store("load-store", 25400, {})
        proxies, servers = [], []
        try:
            for index in range(3):
                proxy = Proxy(store.port)
                # 2 machine bits: each server holds one, one is left for a takeover.
                server = fleet_server(f"load-{index}", 25410 + 3 * index, store.port,
                                      {**FAST, **LAYOUT, "cosid.machine_bits": 2,
                                       "max_connections": 120}, via=proxy)
                server.start()
                server.query(SETUP_SQL)
                proxies.append(proxy)
                servers.append(server)
            for server in servers:
                wait_for(lambda s=server: status(s)["state"] == "UP", 15, "a lease")
            started = {s.name: s.query("SELECT pg_postmaster_start_time()") for s in servers}
            script = servers[0].base.parent / "load-script.sql"
            script.write_text(SCRIPT)
            outputs = {}

            def bench(server, clients):
                result = subprocess.run(
                    [PG_BIN / "pgbench", "-n", "-h", "127.0.0.1", "-p", str(server.port),
                     "-U", "postgres", "-c", str(clients), "-j", "2", "-T", str(SECONDS),
                     "-f", str(script), "postgres"],
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                outputs[server.name] = result.stdout

            shares = [CLIENTS // 3 + (1 if i < CLIENTS % 3 else 0) for i in range(3)]
            threads = [threading.Thread(target=bench, args=(s, n))
                       for s, n in zip(servers, shares)]
            for thread in threads:
                thread.start()
            time.sleep(2)
            proxies[0].set_mode("blackhole")
            time.sleep(SAFE_GUARD_S + 2)
            proxies[0].set_mode("pass")
            for thread in threads:
                thread.join()

            rows, refused, tps = [], {}, {}
            for server in servers:
                rows += server.query("SELECT id FROM events").split()
                refused[server.name] = int(server.query(
                    "SELECT coalesce(sum(n), 0) FROM refusals"))
                found = re.search(r"tps = ([0-9.]+)", outputs[server.name])
                tps[server.name] = float(found.group(1)) if found else 0.0
                self.assertNotIn("aborted", outputs[server.name], outputs[server.name][-2000:])
                self.assertEqual(server.query("SELECT pg_postmaster_start_time()"),
                                 started[server.name], "a server restarted")
            self.assertEqual(len(rows), len(set(rows)), "duplicate ids across servers")
            self.assertGreater(refused[servers[0].name], 0, "the partition refused nothing")
            print(f"\n  {CLIENTS} clients, {len(rows)} rows, 0 duplicates, "
                  f"{sum(tps.values()):.0f} tps in all "
                  f"({', '.join(f'{n}: {t:.0f}' for n, t in tps.items())}), "
                  f"refusals {refused}", end=" ")
        finally:
            for proxy in proxies:
                proxy.close()
            for server in servers:
                server.stop(mode="immediate", check=False)
            store.stop(mode="immediate", check=False)


if __name__ == "__main__":
    unittest.main()
