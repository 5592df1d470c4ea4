"""Real PostgreSQL clusters for cosid's tests: copies of what initdb made (once per build and set
of options), run by the `postgres` user (PostgreSQL refuses to run as root), on loopback, in
folders under target/test-clusters/pg<major>.

Only the standard library is used, plus the PostgreSQL whose pg_config is in $PG_CONFIG (Debian's
PostgreSQL 15 by default). The suites of two major versions use separate folders and ports, so
they can run at the same time.
"""

import contextlib
import hashlib
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import time
import unittest
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
PG_CONFIG = os.environ.get("PG_CONFIG", "/usr/lib/postgresql/15/bin/pg_config")
PG_BIN = Path(subprocess.check_output([PG_CONFIG, "--bindir"], text=True).strip())
PG_PKGLIB = Path(subprocess.check_output([PG_CONFIG, "--pkglibdir"], text=True).strip())
# "PostgreSQL 16.14", "PostgreSQL 18beta1", "PostgreSQL 15.14 (Debian 15.14-0+deb12u1)"
PG_MAJOR = int(re.match(r"PostgreSQL (\d+)",
                        subprocess.check_output([PG_CONFIG, "--version"], text=True)).group(1))
# The clusters of this version; a process of tests/suite.py gets a folder of its own in it
# ($COSID_TEST_JOB), since tests running side by side may name their clusters alike.
CLUSTERS = ROOT / "target" / "test-clusters" / f"pg{PG_MAJOR}" / os.environ.get("COSID_TEST_JOB", "")
# A server with TLS, for a store the tests reach over TLS: this PostgreSQL if it was built with
# OpenSSL, else Debian's PostgreSQL 15 (or $COSID_SSL_PG_CONFIG's); the servers under test stay
# on this version, and their TLS client is cosid's own code.
SSL_PG_CONFIG = PG_CONFIG if re.search(
    r"--with-openssl|--with-ssl=openssl|-Dssl=openssl",
    subprocess.check_output([PG_CONFIG, "--configure"], text=True)) else os.environ.get(
        "COSID_SSL_PG_CONFIG", "/usr/lib/postgresql/15/bin/pg_config")
SSL_PG_BIN = Path(subprocess.check_output([SSL_PG_CONFIG, "--bindir"], text=True).strip())
# The tests' preferred ports (25100 to about 26100) are moved by this much per major version.
PORT_OFFSET = (PG_MAJOR - 15) * 1500
RUN_AS = "postgres"
# Every cluster this process has set up, oldest first. The suite's runner (run.py) removes the
# folders of those a passing test has finished with: the suite makes about 150 clusters of about
# 40 MB each per PostgreSQL version, more than a small disk holds.
MADE = []


def as_postgres(command, env=None):
    """The command, run as the postgres user when we are root, with extra environment."""
    prefix = []
    if os.geteuid() == 0:
        prefix = ["runuser", "-u", RUN_AS, "--"]
    if env:
        # A value of None removes the variable from the environment.
        prefix += ["env"]
        for key, value in env.items():
            prefix += ["-u", key] if value is None else [f"{key}={value}"]
    return prefix + [str(part) for part in command]


def chown_to_postgres(path):
    if os.geteuid() != 0:
        return
    user = pwd.getpwnam(RUN_AS)
    for directory, _, files in os.walk(path):
        os.chown(directory, user.pw_uid, user.pw_gid)
        for name in files:
            os.chown(os.path.join(directory, name), user.pw_uid, user.pw_gid)


class SqlError(Exception):
    def __init__(self, sqlstate, message, stderr):
        super().__init__(f"{sqlstate}: {message}")
        self.sqlstate = sqlstate
        self.message = message
        self.stderr = stderr


class Cluster:
    """One PostgreSQL server: its data directory, settings, log and process."""

    def __init__(self, name, port, settings=None, preload=True, env=None, durable=False,
                 bin_dir=PG_BIN, initdb_options=()):
        self.name = name
        self.port = port
        self.base = CLUSTERS / name
        self.data = self.base / "data"
        self.logfile = self.base / "server.log"
        self.settings = dict(settings or {})
        self.preload = preload
        self.env = dict(env or {})
        # Tests turn durability off for speed; benchmarks keep PostgreSQL's defaults.
        self.durable = durable
        # The PostgreSQL programs of this server, and what its initdb is told beyond ours.
        self.bin = bin_dir
        self.initdb_options = list(initdb_options)
        MADE.append(self)

    def server_env(self):
        # The suite's servers do not depend on the machine's RUST_BACKTRACE; the servers of
        # cluster/test_backtrace.py have it set, and show that errors carry no backtrace.
        return {"RUST_BACKTRACE": None, **self.env}

    # -- life cycle ---------------------------------------------------------------------------

    def init(self):
        """A new data directory: a copy of what initdb made once for this PostgreSQL and these
        options (initdb_template), with a system identifier of its own, as initdb gives each."""
        if self.base.exists():
            self.stop(check=False)
            shutil.rmtree(self.base)
        self.base.mkdir(parents=True)
        chown_to_postgres(self.base)
        template = initdb_template(self.bin, self.initdb_options)
        copied = subprocess.run(["cp", "-a", template, self.data], stderr=subprocess.PIPE,
                                text=True)
        if copied.returncode != 0:
            raise RuntimeError(f"{self.name}: the copy of {template} failed:\n"
                               f"{copied.stderr}\n{disk_space(CLUSTERS)}")
        give_new_system_identifier(self.data)
        self.write_settings()
        return self

    def write_settings(self):
        """(Re)writes the settings file the cluster includes; takes effect at the next start."""
        lines = {
            "port": self.port,
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{self.base}'",
            "max_connections": 250,
            "restart_after_crash": "on",
            "log_line_prefix": "'%m [%p] '",
            "log_timezone": "'UTC'",
        }
        if not self.durable:
            lines.update({"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"})
        if self.preload:
            lines["shared_preload_libraries"] = "'cosid'"
        lines.update(self.settings)
        text = "".join(f"{key} = {value}\n" for key, value in lines.items())
        (self.data / "cosid_test.conf").write_text(text)
        conf = self.data / "postgresql.conf"
        if "include = 'cosid_test.conf'" not in conf.read_text():
            with conf.open("a") as handle:
                handle.write("\ninclude = 'cosid_test.conf'\n")
        chown_to_postgres(self.data)

    def start(self, check=True):
        """Starts the server and waits until it accepts connections. With check=False, returns
        whether it started instead of raising."""
        result = subprocess.run(
            as_postgres([self.bin / "pg_ctl", "-D", self.data, "-l", self.logfile, "-w",
                         "-t", "60", "start"], env=self.server_env()),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # What pg_ctl printed, for tests of what a failed start shows.
        self.start_output = result.stdout
        if result.returncode != 0:
            if check:
                raise RuntimeError(f"{self.name} did not start:\n{result.stdout}\n{self.log()}")
            return False
        return True

    def stop(self, mode="fast", check=True):
        if not (self.data / "postmaster.pid").exists():
            return
        subprocess.run(
            as_postgres([self.bin / "pg_ctl", "-D", self.data, "-m", mode, "-w", "-t", "60",
                         "stop"]),
            check=check, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def restart(self):
        self.stop()
        self.start()

    def is_running(self):
        """Whether a process of this server may still use its folder."""
        try:
            pid = self.postmaster_pid()
        except (OSError, ValueError):
            return False
        return os.path.exists(f"/proc/{pid}")

    def remove(self):
        """Deletes the cluster's folder, its data and log; only for a stopped server."""
        if self.is_running():
            raise RuntimeError(f"{self.name} is running: stop it before removing it")
        shutil.rmtree(self.base, ignore_errors=True)

    def postmaster_pid(self):
        return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])

    def processes(self):
        """The postmaster and its children."""
        postmaster = self.postmaster_pid()
        return [postmaster] + children_of(postmaster)

    def crash(self):
        """kill -9 of the postmaster and of every process of the server, like a machine crash;
        returns once they are gone."""
        postmaster = self.postmaster_pid()
        pids = self.processes()
        # pg_ctl starts the postmaster in a session of its own, so its process group also holds
        # a backend being forked while the list above was read.
        if os.getpgid(postmaster) == postmaster:
            os.killpg(postmaster, signal.SIGKILL)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        # Gone means reaped: PostgreSQL takes a zombie's pid in postmaster.pid for a live server.
        deadline = time.monotonic() + 20
        while any(os.path.exists(f"/proc/{pid}") for pid in pids):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: processes survived kill -9")
            time.sleep(0.02)

    def kill9_a_generating_backend(self, call="cosid_next()"):
        """kill -9 of a backend while it generates ids with `call`, which makes the postmaster
        end every backend and reinitialise shared memory. Returns the time of the kill
        (time.monotonic()) once the server accepts connections again."""
        log_before = len(self.log())
        victim = subprocess.Popen(
            self.psql_command("postgres", "-c", f"SELECT count({call}) "
                              "FROM generate_series(1, 1000000000000) AS victim"),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # It cannot end on its own before the signal reaches it.
        victim_pid = wait_for(lambda: self.backend_pids("%AS victim%"), 10,
                              "the victim backend")[0]
        killed_at = time.monotonic()
        os.kill(victim_pid, signal.SIGKILL)
        victim.wait(timeout=30)
        self.wait_reinitialised(log_before)
        return killed_at

    def wait_reinitialised(self, log_before):
        """Waits until the postmaster, after a child of it died (kill -9), has ended every
        process and accepts connections again; `log_before` is the log's length before."""
        def reinitialised():
            log = self.log()[log_before:]
            _, found, after_crash = log.partition("all server processes terminated")
            return found and "database system is ready to accept connections" in after_crash
        wait_for(reinitialised, 30, "the reinitialisation")
        self.wait_ready()

    def worker_pid(self, name="cosid lease worker"):
        """The pid of a cosid background worker, found through /proc so that it is found while
        the server cannot answer queries."""
        for pid in children_of(self.postmaster_pid()):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                    if name.encode() in cmdline.read():
                        return pid
            except OSError:
                continue
        return None

    def put_worker_on_faked_clock(self, offset_s, timeout=30):
        """Restarts the lease worker until one dates its log lines `offset_s` from the real clock
        (a server on the fault tier's fake clock, helpers/faults.py); returns its pid. The proof
        that the worker runs on the faked clock, not only its backends: with the clock faker the
        tests used before, PostgreSQL 15's first worker stayed on the real clock."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid = self.restart_worker()
            while self.clock_offset_of(pid) is None and time.monotonic() < deadline:
                time.sleep(0.05)
            offset = self.clock_offset_of(pid)
            if offset is not None and abs(offset - offset_s) < 0.5:
                return pid
        raise TimeoutError(f"{self.name}: no lease worker on the faked clock after {timeout} s")

    def restart_worker(self, timeout=15):
        """Terminates the lease worker, and returns the pid of the one the postmaster starts in
        its place."""
        old = self.worker_pid()
        self.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                   "WHERE backend_type = 'cosid lease worker'")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid = self.worker_pid()
            if pid is not None and pid != old:
                return pid
            time.sleep(0.05)
        raise TimeoutError(f"{self.name}: no new lease worker after {timeout} s")

    def clock_offset_of(self, pid):
        """How far ahead of the real clock process `pid` dated its latest log line (the log line
        prefix holds the time the process read from its own clock), in seconds; None before it
        logged anything."""
        stamps = re.findall(rf"^(\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{{3}}) UTC \[{pid}\]",
                            self.log(), re.M)
        if not stamps:
            return None
        logged = datetime.strptime(stamps[-1], "%Y-%m-%d %H:%M:%S.%f")
        return logged.replace(tzinfo=timezone.utc).timestamp() - time.time()

    def log(self):
        return self.logfile.read_text(errors="replace") if self.logfile.exists() else ""

    def wait_ready(self, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            probe = subprocess.run([self.bin / "pg_isready", "-h", "127.0.0.1", "-p",
                                    str(self.port), "-U", "postgres", "-t", "1"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if probe.returncode == 0:
                try:
                    self.query("SELECT 1")
                    return
                except SqlError:
                    pass
            time.sleep(0.1)
        raise TimeoutError(f"{self.name} not ready after {timeout} s:\n{self.log()[-3000:]}")

    # -- SQL ------------------------------------------------------------------------------------

    def psql_command(self, db="postgres", *extra):
        return [str(self.bin / "psql"), "-X", "-q", "-h", "127.0.0.1", "-p", str(self.port),
                "-U", "postgres", "-d", db, *extra]

    def query(self, sql, db="postgres"):
        """Runs SQL, returns its output as unaligned tuples; raises SqlError with the SQLSTATE."""
        result = subprocess.run(
            self.psql_command(db, "-At", "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose",
                              "-c", sql),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        if result.returncode != 0:
            raise parse_error(result.stderr)
        return result.stdout.strip()

    def rows(self, sql, db="postgres"):
        out = self.query(sql, db)
        return [line.split("|") for line in out.splitlines()] if out else []

    def backend_pids(self, like):
        """The client backends running a query LIKE `like`: not an earlier lookup's own backend
        (its text matches too), which can still be listed while it ends. In CI a kill -9 of the
        first pid found once left the victim running, with no crash in the server log."""
        return [int(pid) for (pid,) in self.rows(
            "SELECT pid FROM pg_stat_activity WHERE query LIKE "
            f"'{like}' AND pid <> pg_backend_pid() AND state = 'active' "
            "AND backend_type = 'client backend' AND query NOT LIKE '%pg_stat_activity%'")]


class ClusterTest(unittest.TestCase):
    """A test whose servers are stopped when it ends, however it ends: `track` each one."""

    def track(self, cluster):
        # Immediately: a test's servers hold nothing to keep. Cleanups run last in, first out,
        # so a server is stopped before those it was started after (a store, say).
        self.addCleanup(cluster.stop, mode="immediate", check=False)
        return cluster


def children_of(parent):
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == parent:
                children.append(int(entry))
    return children


def wait_for(predicate, timeout, what):
    """The first true value of predicate(), asked every 50 ms for at most timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def disk_space(path):
    """What is left on the disk of path, for messages about failures to write."""
    while not path.exists():
        path = path.parent
    usage = shutil.disk_usage(path)
    return f"{usage.free / 2**30:.1f} GiB free of {usage.total / 2**30:.1f} GiB under {path}"


def parse_error(stderr):
    """The SQLSTATE and message of a psql error printed with VERBOSITY verbose."""
    for line in stderr.splitlines():
        for level in ("ERROR:", "FATAL:"):
            if line.startswith(level):
                rest = line[len(level):].strip()
                code, _, message = rest.partition(": ")
                if len(code) == 5:
                    return SqlError(code, message, stderr)
                return SqlError(None, rest, stderr)
    return SqlError(None, stderr.strip(), stderr)


# What initdb made for each PostgreSQL build and set of options, copied for each new cluster: on
# the cluster tier of 16 alone, 182 s at 67% processor use against 211 s at 81% with an initdb
# per cluster. tests/suite.py removes them when it starts (a few initdb runs make them again).
TEMPLATES = ROOT / "target" / "test-clusters" / "initdb-templates"


def initdb_template(bin_dir, options):
    """The data directory initdb makes with our options and `options`, made once per PostgreSQL
    build (and user running the tests) under a lock, for the tests running side by side. It is
    made in a folder of its own and renamed into place whole, so that a template that exists is
    complete."""
    postgres = (Path(bin_dir) / "postgres").stat()
    key = hashlib.sha256(repr((str(bin_dir), postgres.st_size, postgres.st_mtime_ns,
                               list(options), os.geteuid())).encode()).hexdigest()[:16]
    data = TEMPLATES / key / "data"
    if data.exists():
        return data
    with exclusive(f"initdb-template-{key}"):
        if data.exists():
            return data
        making = TEMPLATES / f"{key}.making"
        shutil.rmtree(making, ignore_errors=True)
        making.mkdir(parents=True)
        chown_to_postgres(making)
        result = subprocess.run(
            as_postgres([Path(bin_dir) / "initdb", "-D", making / "data", "-U", "postgres",
                         "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C", *options]),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"initdb failed ({result.returncode}):\n"
                               f"{result.stderr}\n{disk_space(TEMPLATES)}")
        # The WAL segment's zeros past initdb's records (12 of its 16 MB) as a hole, which
        # reads as zeros and which cp keeps a hole: a third less to copy for each cluster.
        subprocess.run(["fallocate", "--dig-holes", *wal_segments(making / "data")],
                       check=False)
        os.rename(making, TEMPLATES / key)
    return data


def wal_segments(data):
    return [path for path in (data / "pg_wal").iterdir()
            if re.fullmatch(r"[0-9A-F]{24}", path.name)]


def crc32c(data, crc=0):
    """CRC-32C (Castagnoli), the checksum of pg_control; `crc` continues an earlier one."""
    crc ^= 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def give_new_system_identifier(data):
    """Gives a copied data directory a system identifier of its own, as initdb does (seconds in
    the high half; random bits, not initdb's microseconds and process id, in the low half): the
    first 8 bytes of global/pg_control, whose CRC-32C follows its fields, and the long header of
    each WAL segment (xlp_sysid, at byte 24), which the server checks against pg_control."""
    control = data / "global" / "pg_control"
    raw = bytearray(control.read_bytes())
    old = bytes(raw[:8])
    # The checksum's place differs between versions: the first 4-byte-aligned place where the
    # checksum of the bytes before it is stored.
    crc, checked, crc_at = 0, 0, None
    for at in range(8, 1024, 4):
        crc = crc32c(raw[checked:at], crc)
        checked = at
        if crc == int.from_bytes(raw[at:at + 4], "little"):
            crc_at = at
            break
    if crc_at is None:
        raise RuntimeError(f"{control}: no CRC-32C of its fields found")
    new = ((int(time.time()) << 32) | secrets.randbits(32)).to_bytes(8, "little")
    raw[:8] = new
    raw[crc_at:crc_at + 4] = crc32c(raw[:crc_at]).to_bytes(4, "little")
    patched = 0
    for segment in wal_segments(data):
        with open(segment, "r+b") as wal:
            wal.seek(24)
            if wal.read(8) == old:
                wal.seek(24)
                wal.write(new)
                patched += 1
    if patched == 0:
        raise RuntimeError(f"{data}: no WAL segment with the system identifier of pg_control")
    control.write_bytes(raw)


# Ports handed out by free_port, each held by a lock on a file of its own until this process
# exits: test processes running side by side (tests/suite.py) never pick the same port, even
# between the check that it can be bound and the server's start. Nor does this process hand one
# out twice: two servers made before either starts would both find it free.
PORT_LOCKS = Path("/tmp/cosid-test-ports")
HELD_PORTS = {}


@contextlib.contextmanager
def exclusive(name):
    """Holds a lock of this checkout named `name` across test processes, for work that tests
    running side by side must not do at once (building into one cargo target folder, say)."""
    import fcntl
    folder = ROOT / "target" / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def free_port(preferred):
    """`preferred` moved by PORT_OFFSET, unless another test process holds it or it cannot be bound
    on loopback; then the next port that can. Tests use ports below the kernel's ephemeral range
    (32768 and up), where client connections would otherwise take them."""
    import fcntl
    import socket
    port = preferred + PORT_OFFSET
    if not PORT_LOCKS.exists():
        PORT_LOCKS.mkdir(exist_ok=True)
        # Any user's tests, as /tmp itself.
        os.chmod(PORT_LOCKS, 0o1777)
    while True:
        if not 1024 <= port < 32768:
            raise ValueError(f"port {port} for PostgreSQL {PG_MAJOR} is outside 1024..32767")
        if port in HELD_PORTS:
            port += 1
            continue
        lock = os.fdopen(os.open(PORT_LOCKS / f"{port}.lock", os.O_WRONLY | os.O_CREAT, 0o666), "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            port += 1
            continue
        HELD_PORTS[port] = lock
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
                return port
            except OSError:
                port += 1


def query_as(cluster, role, sql, password=None, db="postgres"):
    """Runs SQL as `role` over TCP (with a password when given); raises SqlError."""
    env = dict(os.environ, PGPASSWORD=password) if password else None
    command = [str(PG_BIN / "psql"), "-X", "-q", "-At", "-h", "127.0.0.1", "-p",
               str(cluster.port), "-U", role, "-d", db, "-v", "ON_ERROR_STOP=1",
               "-v", "VERBOSITY=verbose", "-c", sql]
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            timeout=60, env=env)
    if result.returncode != 0:
        raise parse_error(result.stderr)
    return result.stdout.strip()


def conf_string(value):
    """A value as a quoted string of postgresql.conf."""
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def server_says(cluster, sql, db="postgres"):
    """Runs `sql` (outside a transaction block), which must succeed; what the server said on
    stderr (its NOTICEs and WARNINGs, verbose)."""
    result = subprocess.run(
        cluster.psql_command(db, "-At", "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose",
                             "-c", sql),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stderr


def wait_recorded(cluster, namespace, timeout=30):
    """Waits until cosid.default_namespace records that the default generator used `namespace`
    (at once where the table does not exist: a build of before it, which a test is run against
    to show what it catches)."""
    if cluster.query("SELECT to_regclass('cosid.default_namespace') IS NULL") == "t":
        return
    wait_for(lambda: cluster.query(
        "SELECT EXISTS (SELECT FROM cosid.default_namespace "
        f"WHERE namespace = '{namespace}')") == "t", timeout,
        f"{namespace} in cosid.default_namespace")


def wait_for_answer(cluster, sql, allowed, timeout=30):
    """The rows of `sql` once it answers; until then it may fail only with the SQLSTATEs in
    `allowed` (a generator just created is not known yet, or has no lease yet)."""
    started = time.monotonic()
    while True:
        try:
            return cluster.rows(sql)
        except SqlError as error:
            waited = time.monotonic() - started
            if error.sqlstate not in allowed or waited > timeout:
                why = "an answer not allowed" if error.sqlstate not in allowed else "still"
                raise AssertionError(
                    f"{sql}\nfailed with {error} ({why}, after {waited:.1f} s of at most "
                    f"{timeout} s):\n{cluster.log()[-2000:]}")
        time.sleep(0.05)
