"""A fleet on loopback: one lease store (a plain PostgreSQL without cosid, the protocol installed
with `psql -f sql/lease_store.sql`, as on a managed service) and several cosid servers that
lease from it, each through a TCP proxy of its own that can delay, blackhole or reset its
connections to the store."""

import os
import select
import socket
import subprocess
import threading
import time
import urllib.parse

from .pgcluster import (PG_BIN, ROOT, SSL_PG_BIN, Cluster, as_postgres, chown_to_postgres,
                       free_port)

FLEET_ROLE = "cosid_fleet"
FLEET_PASSWORD = "fleet-secret-9f3k"
CERTIFICATE_ROLE = "cosid_certified"
LEASE_SQL = ROOT / "sql" / "lease_store.sql"
COSID_MACHINE_SQL = ROOT / "sql" / "cosid_machine.sql"


class Proxy:
    """A TCP proxy on loopback. Modes: pass (forward), delay (forward after a pause), blackhole
    (accept and keep connections, forward nothing, answer nothing), reset (close at once)."""

    def __init__(self, target_port):
        self.target_port = target_port
        self.mode = "pass"
        self.delay_s = 0.0
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.port = free_port(26000)
        self.listener.bind(("127.0.0.1", self.port))
        self.listener.listen(64)
        self.connections = []
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self.accept_loop, daemon=True).start()

    def set_mode(self, mode, delay_s=0.0):
        """Changes what happens to new and existing connections."""
        self.mode, self.delay_s = mode, delay_s
        if mode in ("reset", "blackhole"):
            with self.lock:
                connections, self.connections = self.connections, []
            for pair in connections:
                for sock in pair:
                    try:
                        if mode == "reset":
                            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                            b"\x01\x00\x00\x00\x00\x00\x00\x00")
                        sock.close()
                    except OSError:
                        pass

    def accept_loop(self):
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.mode == "reset":
                try:
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                      b"\x01\x00\x00\x00\x00\x00\x00\x00")
                except OSError:
                    pass
                client.close()
                continue
            if self.mode == "blackhole":
                with self.lock:
                    self.connections.append((client,))
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.connections.append((client, upstream))
            threading.Thread(target=self.pump, args=(client, upstream), daemon=True).start()

    def pump(self, client, upstream):
        sockets = [client, upstream]
        try:
            while True:
                readable, _, _ = select.select(sockets, [], [], 0.2)
                if self.mode == "blackhole":
                    time.sleep(0.1)
                    continue
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        raise OSError("closed")
                    if self.mode == "delay":
                        time.sleep(self.delay_s)
                    (upstream if sock is client else client).sendall(data)
        except (OSError, ValueError):
            for sock in sockets:
                try:
                    sock.close()
                except OSError:
                    pass

    def close(self):
        self.closed = True
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept loop
        except OSError:
            pass
        self.listener.close()
        self.set_mode("reset")


def start_store(name, port, settings=None, certificate_role=False, lease_sql=LEASE_SQL):
    """A plain PostgreSQL (cosid not preloaded) holding the lease protocol (`lease_sql`: this
    version's, or a released one), with a role that logs in with a password, and, when asked, a
    role that logs in with a client certificate (TLS settings then come with `settings`). A
    store with ssl on runs on a PostgreSQL built with OpenSSL, which need not be the version
    under test."""
    settings = dict(settings or {})
    store = Cluster(name, free_port(port), settings, preload=False,
                    bin_dir=SSL_PG_BIN if settings.get("ssl") == "on" else PG_BIN).init()
    hba = store.data / "pg_hba.conf"
    certificate_line = (f"hostssl all {CERTIFICATE_ROLE} 127.0.0.1/32 cert\n"
                        if certificate_role else "")
    hba.write_text(
        certificate_line +
        f"host all {FLEET_ROLE} 127.0.0.1/32 scram-sha-256\n"
        "local all all trust\nhost all all 127.0.0.1/32 trust\n"
        "host replication all 127.0.0.1/32 trust\n")
    chown_to_postgres(store.data)
    store.start()
    install_store(store, lease_sql)
    if certificate_role:
        store.query(f"CREATE ROLE {CERTIFICATE_ROLE} LOGIN")
        grant_lease_protocol(store, CERTIFICATE_ROLE)
    return store


def add_cosid_machine(store):
    """CosId's JDBC table in the store's database, as sql/cosid_machine.sql makes it, beside
    the lease store, with the grant its comment gives the fleet's role."""
    store.query(COSID_MACHINE_SQL.read_text())
    store.query(f"GRANT SELECT, INSERT, UPDATE ON public.cosid_machine TO {FLEET_ROLE}")
    return store


def set_max_clock_lead(store, lead):
    """How far ahead of the store's clock its holders' clocks may run (an interval's text), for
    the tests whose servers run ahead on the clock faker; a store of a version without the limit
    is left as it is."""
    store.query("DO $$ BEGIN IF to_regclass('cosid.store_settings') IS NOT NULL THEN "
                f"UPDATE cosid.store_settings SET max_clock_lead = '{lead}'; END IF; END $$")


def install_store(store, lease_sql=LEASE_SQL):
    """The lease protocol (`lease_sql`) in database postgres of a running server, and the role
    the fleet's servers log in as, with a password."""
    subprocess.run(store.psql_command("postgres", "-q", "-v", "ON_ERROR_STOP=1", "-f",
                                      str(lease_sql)), check=True)
    store.query(f"CREATE ROLE {FLEET_ROLE} LOGIN PASSWORD '{FLEET_PASSWORD}'")
    grant_lease_protocol(store, FLEET_ROLE)


def grant_lease_protocol(store, role):
    """What a store role needs, and no more: membership of cosid_lease_holder, which may only
    call the protocol's functions. (A store of a version before that role existed gets that
    version's grants, so that these tests can be run against it.)"""
    if store.query("SELECT to_regrole('cosid_lease_holder') IS NOT NULL") == "t":
        store.query(f"GRANT cosid_lease_holder TO {role}")
        return
    store.query(f"""
        GRANT USAGE ON SCHEMA cosid TO {role};
        GRANT SELECT, INSERT, UPDATE ON cosid.machine_lease TO {role};
        GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA cosid TO {role};""")


def write_passfile(directory, port):
    path = directory / "store.pgpass"
    path.write_text("".join(f"{host}:{port}:postgres:{FLEET_ROLE}:{FLEET_PASSWORD}\n"
                            for host in ("127.0.0.1", "localhost")))
    chown_to_postgres(directory)
    os.chmod(path, 0o600)
    return path


def fleet_server(name, port, store_port, extra=None, via=None, conninfo_extra="",
                 password_from="passfile", host="127.0.0.1", form="key=value"):
    """A cosid server leasing from the store (through a proxy, when given), its password in a
    passfile, in PGPASSWORD in the server's environment, or nowhere (password_from=None). The connection string is in libpq's
    key=value form, or its URL form; `conninfo_extra` is key=value pairs in either case."""
    server = Cluster(name, free_port(port), {}).init()
    target = via.port if via else store_port
    options = {"connect_timeout": "2"}
    if password_from == "passfile":
        options["passfile"] = str(write_passfile(server.base, target))
    elif password_from == "environment":
        server.env["PGPASSWORD"] = FLEET_PASSWORD
    options.update(pair.split("=", 1) for pair in conninfo_extra.split())
    if form == "url":
        user = options.pop("user", FLEET_ROLE)
        query = "&".join(f"{key}={urllib.parse.quote(value, safe='')}"
                         for key, value in options.items())
        conninfo = f"postgresql://{user}@{host}:{target}/postgres?{query}"
    else:
        options = {"host": host, "port": str(target), "dbname": "postgres",
                   "user": FLEET_ROLE, **options}
        conninfo = " ".join(f"{key}={value}" for key, value in options.items())
    server.settings = {"cosid.lease_store": f"'{conninfo}'", **(extra or {})}
    server.write_settings()
    return server


def restore_store_copy(store, name, port):
    """A copy of the store's database in a new cluster, made as an operator would: its roles
    with `pg_dumpall --roles-only`, then `pg_dump -Fc` and `pg_restore`. Returns the started
    copy."""
    dump = store.base / "store.dump"
    roles = store.base / "roles.sql"
    connect = ["-h", "127.0.0.1", "-p", store.port, "-U", "postgres"]
    subprocess.run(as_postgres([PG_BIN / "pg_dump", *connect, "-Fc", "-f", dump, "postgres"]),
                   check=True)
    subprocess.run(as_postgres([PG_BIN / "pg_dumpall", *connect, "--roles-only", "-f", roles]),
                   check=True)
    restored = Cluster(name, free_port(port), dict(store.settings), preload=False).init()
    (restored.data / "pg_hba.conf").write_text((store.data / "pg_hba.conf").read_text())
    chown_to_postgres(restored.data)
    restored.start()
    connect = ["-h", "127.0.0.1", "-p", restored.port, "-U", "postgres"]
    # The roles script also creates roles that exist already (postgres): those lines fail.
    subprocess.run(as_postgres([PG_BIN / "psql", "-X", "-q", *connect, "-d", "postgres", "-f",
                                roles]), check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    subprocess.run(as_postgres([PG_BIN / "pg_restore", *connect, "-d", "postgres",
                                "--exit-on-error", dump]), check=True)
    return restored
