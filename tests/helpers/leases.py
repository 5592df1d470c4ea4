"""The default generator's lease on a real server: the fast lease timings of the tests (a 4 s safe
guard, so generation stops 3.6 s after the last renewal was sent, and renewals every 0.5 s), the
parts of an id of the default layout, cosid.status, and claims made as another instance would."""

import datetime
import time

from .pgcluster import Cluster, SqlError, free_port, wait_for

SAFE_GUARD_S = 4.0
DEADLINE_S = SAFE_GUARD_S - min(10.0, SAFE_GUARD_S / 10)
FAST_LEASES = {
    "cosid.safe_guard_duration": "'4s'",
    "cosid.guarder_delay": "'500ms'",
    "cosid.guarder_initial_delay": "'500ms'",
}
SEQUENCE_BITS = 12
MACHINE_MASK = 0x3FF


def machine_of(value, sequence_bits=SEQUENCE_BITS, mask=MACHINE_MASK):
    return (value >> sequence_bits) & mask


def ts_ms_of(value, shift=22, epoch_ms=1_577_203_200_000):
    return (value >> shift) + epoch_ms


def epoch_dating_now_as(unix_ms, epoch_ms=1_577_203_200_000):
    """An epoch (ISO-8601, to the millisecond) under which this moment's ids carry the
    timestamp bits that `unix_ms`'s carried under CosId's epoch: a named generator with it
    issues those ids again, unless it is refused."""
    later_ms = epoch_ms + int(time.time() * 1000) - unix_ms
    return datetime.datetime.fromtimestamp(
        later_ms / 1000, datetime.timezone.utc).isoformat(timespec="milliseconds")


def status(cluster):
    names = ["instance_id", "state", "machine_id", "last_error", "watermark"]
    row = cluster.rows(f"SELECT {', '.join(names)} FROM cosid.status")[0]
    return dict(zip(names, row))


def wait_up(cluster, timeout=15):
    def up():
        now = status(cluster)
        return now["state"] == "UP" and now
    return wait_for(up, timeout,
                    f"{cluster.name} to lease a machine id:\n{cluster.log()[-2000:]}")


def try_next(cluster, sql="SELECT cosid_next()"):
    """(id, None) or (None, sqlstate)."""
    try:
        return int(cluster.query(sql)), None
    except SqlError as error:
        return None, error.sqlstate


def lease_cluster(name, port, **settings):
    cluster = Cluster(name, free_port(port), {**FAST_LEASES, **settings}).init()
    cluster.start()
    return cluster


def fake_claim(cluster, instance_id, safe_guard_ms, machine_bits=10, namespace="cosid"):
    """Claims a machine id through the SQL protocol as another instance would."""
    return cluster.rows(
        "SELECT outcome, machine_id, expires_at_ms "
        f"FROM cosid.lease_claim('{namespace}', {machine_bits}, '{instance_id}', false, "
        f"{safe_guard_ms}, 'token-{instance_id}', 0)")[0]


def restart_worker_behind(cluster, machine_id, ahead_ms):
    """Stops the lease worker, which releases `machine_id` and is started again a second later,
    and, as soon as the release is seen, moves its release and watermark `ahead_ms` past the
    server's clock, as a last holder with a clock that far ahead would have: in one session, so
    that the new worker cannot claim first. Returns the release's Unix millisecond."""
    return int(cluster.query(f"""
        CREATE TEMP TABLE moved (released_ms bigint);
        DO $$
        DECLARE started timestamptz := clock_timestamp();
        BEGIN
            PERFORM pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE backend_type = 'cosid lease worker';
            LOOP
                WITH ahead AS (
                    SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint + {ahead_ms} AS ms)
                UPDATE cosid.machine_lease SET released_ms = ahead.ms,
                       watermark_ms = greatest(watermark_ms, ahead.ms)
                  FROM ahead
                 WHERE machine_id = {machine_id} AND state = 'released';
                EXIT WHEN FOUND;
                IF clock_timestamp() > started + interval '10 s' THEN
                    RAISE EXCEPTION 'the lease worker did not release machine id {machine_id}';
                END IF;
                PERFORM pg_sleep(0.01);
            END LOOP;
            INSERT INTO moved SELECT released_ms FROM cosid.machine_lease
             WHERE machine_id = {machine_id};
        END $$;
        SELECT released_ms FROM moved;"""))
