"""A lease store made highly available by a real HA manager: Patroni (installed by
scripts/setup.sh into target/patroni, from PyPI) with one etcd member (Debian's etcd-server),
all on loopback. Two Patroni nodes run this PostgreSQL as the postgres user; the test asks
Patroni who leads, fails over with `patronictl failover`, or kills the leader (-9, Patroni and
its PostgreSQL at once)."""

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request

from .pgcluster import (CLUSTERS, PG_BIN, ROOT, Cluster, as_postgres, children_of,
                        chown_to_postgres, free_port, wait_for)

PATRONI = ROOT / "target" / "patroni" / "bin"
ETCD = shutil.which("etcd") or "/usr/bin/etcd"


def available():
    """Why Patroni cannot run here, or None."""
    if not (PATRONI / "patroni").exists():
        return f"{PATRONI / 'patroni'} is missing: run scripts/setup.sh"
    if not os.path.exists(ETCD):
        return "etcd is missing: run scripts/setup.sh (Debian's etcd-server)"
    return None


def zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def get_json(url, timeout=2):
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        return json.loads(answer.read().decode())


class Etcd:
    """One etcd member on loopback, its data in a folder of its own."""

    def __init__(self, name, port):
        self.base = CLUSTERS / name
        if self.base.exists():
            shutil.rmtree(self.base)
        self.base.mkdir(parents=True)
        self.client_port = free_port(port)
        self.peer_port = free_port(self.client_port + 1)
        self.url = f"http://127.0.0.1:{self.client_port}"
        self.log = open(self.base / "etcd.log", "w")
        self.process = subprocess.Popen(
            [ETCD, "--name", name, "--data-dir", str(self.base / "data"),
             "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
             "--listen-peer-urls", f"http://127.0.0.1:{self.peer_port}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer_port}",
             "--initial-cluster", f"{name}=http://127.0.0.1:{self.peer_port}"],
            stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(self.healthy, 30, f"etcd on port {self.client_port}")

    def healthy(self):
        try:
            return get_json(f"{self.url}/health").get("health") == "true"
        except OSError:
            return False

    def stop(self):
        self.process.kill()
        self.process.wait()
        self.log.close()


class PatroniNode:
    """One Patroni member managing one PostgreSQL, which it initialises (the first member) or
    clones from the leader."""

    def __init__(self, scope, name, etcd, port, synchronous_mode):
        self.name = name
        self.base = CLUSTERS / name
        if self.base.exists():
            shutil.rmtree(self.base)
        self.base.mkdir(parents=True)
        self.port = free_port(port)
        self.api_port = free_port(self.port + 1)
        self.config = self.base / "patroni.yml"
        self.config.write_text(json.dumps({
            "scope": scope,
            "name": name,
            "log": {"level": "INFO", "dir": str(self.base)},
            "restapi": {"listen": f"127.0.0.1:{self.api_port}",
                        "connect_address": f"127.0.0.1:{self.api_port}"},
            "etcd3": {"hosts": f"127.0.0.1:{etcd.client_port}"},
            "bootstrap": {
                "dcs": {"ttl": 20, "loop_wait": 1, "retry_timeout": 3,
                        "maximum_lag_on_failover": 16 * 1024 * 1024,
                        "synchronous_mode": synchronous_mode,
                        "postgresql": {"use_pg_rewind": False, "use_slots": True,
                                       "parameters": {"wal_level": "replica",
                                                      "max_wal_senders": 10,
                                                      "max_replication_slots": 10,
                                                      "hot_standby": "on"}}},
                "initdb": [{"encoding": "UTF8"}, {"locale": "C"}],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{self.port}",
                "connect_address": f"127.0.0.1:{self.port}",
                "data_dir": str(self.base / "data"),
                "bin_dir": str(PG_BIN),
                "pgpass": str(self.base / "pgpass"),
                "authentication": {"superuser": {"username": "postgres"},
                                   "replication": {"username": "postgres"}},
                "pg_hba": ["local all all trust", "host all all 127.0.0.1/32 trust",
                           "host replication all 127.0.0.1/32 trust"],
                "parameters": {"unix_socket_directories": str(self.base),
                               "max_connections": 100},
            },
        }))
        chown_to_postgres(self.base)
        self.log = open(self.base / "patroni.out", "w")
        self.process = subprocess.Popen(
            as_postgres([PATRONI / "patroni", str(self.config)],
                        env={"RUST_BACKTRACE": None, "PATH": f"{PATRONI}:/usr/bin:/bin"}),
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        # SQL through the test clusters' own helpers (psql over TCP to this node's port).
        self.sql = Cluster(f"{name}-sql", self.port, preload=False)

    def state(self):
        """Patroni's view of this member: role ("primary", "replica") and state."""
        try:
            answer = get_json(f"http://127.0.0.1:{self.api_port}/patroni")
        except OSError:
            return None, None
        return answer.get("role"), answer.get("state")

    def is_leader(self):
        return self.state() == ("primary", "running")

    def is_replica(self):
        return self.state() == ("replica", "running")

    def patronictl(self, *args):
        result = subprocess.run(
            as_postgres([PATRONI / "patronictl", "-c", str(self.config), *args],
                        env={"PATH": f"{PATRONI}:/usr/bin:/bin"}),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"patronictl {' '.join(args)} failed:\n{result.stdout}")
        return result.stdout

    def kill(self):
        """kill -9 of Patroni and of every process of its PostgreSQL, like a machine crash."""
        pids = [self.process.pid] + children_of(self.process.pid)
        try:
            postmaster = int((self.base / "data" / "postmaster.pid").read_text().split()[0])
            pids += [postmaster] + children_of(postmaster)
        except (OSError, ValueError):
            pass
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.process.wait()
        wait_for(lambda: not any(os.path.exists(f"/proc/{pid}") and not zombie(pid)
                                 for pid in pids), 20, f"{self.name}'s processes to die")

    def stop(self):
        # Also when Patroni itself has died: its PostgreSQL may still run.
        self.kill()
        self.log.close()


def start_ha_store(prefix, port, cleanup, synchronous_mode=False):
    """etcd and two Patroni members, the first leading and the second streaming from it;
    returns (etcd, [leader, replica]). Each is handed to `cleanup` (a test's addCleanup) as it
    starts, so that nothing outlives a failed start."""
    etcd = Etcd(f"{prefix}-etcd", port)
    cleanup(etcd.stop)
    first = PatroniNode(f"{prefix}-scope", f"{prefix}-a", etcd, port + 10, synchronous_mode)
    cleanup(first.stop)
    wait_until(first, first.is_leader, 60, "lead")
    second = PatroniNode(f"{prefix}-scope", f"{prefix}-b", etcd, port + 20, synchronous_mode)
    cleanup(second.stop)
    wait_until(second, second.is_replica, 90, "stream from the leader")
    if synchronous_mode:
        wait_for(lambda: first.sql.query(
            "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'") == "1",
            60, "a synchronous standby")
    return etcd, [first, second]


def wait_until(node, predicate, timeout, what):
    try:
        wait_for(predicate, timeout, f"{node.name} to {what}")
    except AssertionError as error:
        raise AssertionError(f"{error}:\n{tail(node)}") from None


def tail(node, size=3000):
    try:
        text = "".join(path.read_text() for path in sorted(node.base.glob("*.log"))) + \
            (node.base / "patroni.out").read_text()
    except OSError:
        return ""
    return text[-size:]


def wait_for_leader(nodes, timeout=90, other_than=None):
    """The node that leads (and is not `other_than`), once one does."""
    def leader():
        for node in nodes:
            if node is not other_than and node.is_leader():
                return node
        return None
    started = time.monotonic()
    found = wait_for(leader, timeout, "a new leader")
    return found, time.monotonic() - started
