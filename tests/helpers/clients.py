"""Clients that generate ids through real backends, record every id they were given, and check
the uniqueness oracles over everything that was generated."""

import re
import subprocess
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Session:
    """What one backend (one psql connection) gave one client."""
    client: int
    started: float
    ended: float = 0.0
    ids: list = field(default_factory=list)
    error: str = ""

    @property
    def sqlstate(self):
        """The SQLSTATE of the error that ended the session, "connection" when the server could
        not be reached or went away, "" without an error."""
        if not self.error:
            return ""
        found = re.search(r"(?:ERROR|FATAL):\s+([0-9A-Z]{5}):", self.error)
        return found.group(1) if found else "connection"


def run_session(cluster, client, statements, db="postgres"):
    """Runs statements that each print ids (COPY ... TO STDOUT) on one connection to `db`;
    returns the session with every complete id it printed, even if the connection was lost
    midway."""
    session = Session(client=client, started=time.monotonic())
    script = "".join(f"{statement};\n" for statement in statements)
    result = subprocess.run(cluster.psql_command(db, "-At", "-v", "ON_ERROR_STOP=1",
                                                 "-v", "VERBOSITY=verbose"),
                            input=script, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    session.ended = time.monotonic()
    session.ids = [int(line) for line in result.stdout.split() if line.isdigit()]
    if result.returncode != 0:
        session.error = result.stderr.strip()
    return session


def copy_ids(batch, generator=None):
    """Prints `batch` ids of the default generator, or of the named one."""
    call = f"cosid_next('{generator}')" if generator else "cosid_next()"
    return f"COPY (SELECT {call} FROM generate_series(1, {batch})) TO STDOUT"


def concurrent_sessions(cluster, clients, statements):
    """One session per client, all at once."""
    sessions = [None] * clients

    def work(index):
        sessions[index] = run_session(cluster, index, statements)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sessions


class LoopingClients:
    """Clients that keep opening sessions and generating until stopped, across server crashes,
    from the default generator or a named one."""

    def __init__(self, cluster, clients, batch, batches_per_session, generator=None):
        self.cluster = cluster
        self.statements = [copy_ids(batch, generator)] * batches_per_session
        self.sessions = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self.loop, args=(i,)) for i in range(clients)]

    def loop(self, client):
        while not self.stopping.is_set():
            session = run_session(self.cluster, client, self.statements)
            with self.lock:
                self.sessions.append(session)
            if session.error:
                time.sleep(0.05)

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_):
        self.stopping.set()
        for thread in self.threads:
            thread.join()

    def ids_so_far(self, started_after=0.0):
        """Ids of finished sessions, counting only sessions started after the given time."""
        with self.lock:
            return sum(len(s.ids) for s in self.sessions if s.started >= started_after)


def duplicates(sessions):
    seen = set()
    repeated = 0
    for session in sessions:
        for value in session.ids:
            if value in seen:
                repeated += 1
            seen.add(value)
    return repeated


def sessions_not_increasing(sessions):
    return [s for s in sessions if any(a >= b for a, b in zip(s.ids, s.ids[1:]))]
