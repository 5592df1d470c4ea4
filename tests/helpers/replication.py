"""A lease store with a streaming standby, as a highly available store runs: the standby made
with pg_basebackup from the primary, replication held back by pausing the primary's walsender
(its acknowledged commits then exist on the primary only), the primary killed (-9) and the
standby promoted."""

import os
import shutil
import signal
import subprocess

from .pgcluster import PG_BIN, Cluster, as_postgres, chown_to_postgres, free_port, wait_for


def start_standby(primary, name, port, synchronous=False, preload=False):
    """A hot standby of `primary`, streaming from it; with `synchronous`, the primary's commits
    wait for it (synchronous_standby_names); with `preload`, a cosid server as its primary is."""
    standby = Cluster(name, free_port(port), dict(primary.settings), preload=preload)
    if standby.base.exists():
        standby.stop(check=False)
        shutil.rmtree(standby.base)
    standby.base.mkdir(parents=True)
    chown_to_postgres(standby.base)
    subprocess.run(as_postgres([PG_BIN / "pg_basebackup", "-h", "127.0.0.1", "-p", primary.port,
                                "-U", "postgres", "-D", standby.data, "-X", "stream",
                                "--no-sync"]), check=True, stdout=subprocess.DEVNULL)
    # The copied settings file names the primary's port and socket folder; the standby's name
    # is what synchronous_standby_names lists.
    standby.settings["primary_conninfo"] = (f"'host=127.0.0.1 port={primary.port} user=postgres "
                                            f"application_name={name}'")
    standby.write_settings()
    (standby.data / "standby.signal").touch()
    chown_to_postgres(standby.data)
    standby.start()
    wait_for(lambda: streaming_pids(primary), 30, f"{name} to stream from {primary.name}")
    if synchronous:
        primary.query(f"ALTER SYSTEM SET synchronous_standby_names = '\"{name}\"'")
        primary.query("SELECT pg_reload_conf()")
        wait_for(lambda: primary.query("SELECT count(*) FROM pg_stat_replication "
                                       "WHERE sync_state = 'sync'") == "1",
                 30, f"{name} to be synchronous")
    return standby


def streaming_pids(primary):
    """The pids of the primary's walsenders that stream."""
    rows = primary.rows("SELECT pid FROM pg_stat_replication WHERE state = 'streaming'")
    return [int(row[0]) for row in rows]


class HeldBack:
    """Replication paused: the walsenders are stopped (SIGSTOP), so commits the primary
    acknowledges from now on reach no standby until `release()`, or ever, if the primary dies
    first."""

    def __init__(self, primary):
        self.pids = streaming_pids(primary)
        if not self.pids:
            raise RuntimeError(f"{primary.name} has no streaming standby to hold back")
        for pid in self.pids:
            os.kill(pid, signal.SIGSTOP)

    def release(self):
        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


def fail_over(primary, standby):
    """The primary crashes (kill -9 of every process, the paused walsenders too) and the standby
    is promoted; returns once it accepts writes."""
    primary.crash()
    standby.query("SELECT pg_promote(true, 60)")
    wait_for(lambda: standby.query("SELECT pg_is_in_recovery()") == "f", 60,
             f"{standby.name} to be promoted")
