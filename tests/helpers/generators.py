"""Named generators on a real server: CosId's layouts, the parts of their ids, and their rows of
cosid.status."""

from .pgcluster import SqlError, wait_for

EPOCH_MS = 1_577_203_200_000
# CosId's layouts: timestamp bits, machine bits, sequence bits, and the time unit in ms.
LAYOUTS = {"millisecond": (41, 10, 12, 1), "second": (31, 10, 22, 1000),
           "safe_js": (41, 3, 9, 1), "safe_js_second": (31, 3, 19, 1000)}
STATUS = ["name", "namespace", "instance_id", "state", "machine_id", "last_error"]


def decode(value, layout):
    """(Unix ms of the id's timestamp, machine id) of an id of one of CosId's layouts."""
    _, machine_bits, sequence_bits, unit_ms = LAYOUTS[layout]
    ticks = value >> (machine_bits + sequence_bits)
    return ticks * unit_ms + EPOCH_MS, (value >> sequence_bits) & ((1 << machine_bits) - 1)


def layout_text(layout):
    """The layout as the lease store compares it (core/src/protocol.rs, layout_text)."""
    timestamp_bits, machine_bits, sequence_bits, unit_ms = LAYOUTS[layout]
    unit = "millisecond" if unit_ms == 1 else "second"
    return (f"epoch {EPOCH_MS} ms, {unit}, "
            f"{timestamp_bits}/{machine_bits}/{sequence_bits} bits")


def generators(cluster, db="postgres"):
    """The rows of cosid.status, by generator name."""
    found = {}
    for row in cluster.rows(f"SELECT {', '.join(STATUS)} FROM cosid.status", db):
        # The last error may hold the field separator: it is the last column.
        fields = row[:len(STATUS) - 1] + ["|".join(row[len(STATUS) - 1:])]
        found[fields[0]] = dict(zip(STATUS, fields))
    return found


def generators_or_none(cluster):
    try:
        return generators(cluster)
    except SqlError:
        return None


def wait_generators_up(cluster, names, timeout=20):
    """Waits until every generator named is UP; returns the status by name."""
    def up():
        now = generators_or_none(cluster)
        return now and all(now.get(name, {}).get("state") == "UP" for name in names) and now
    try:
        return wait_for(up, timeout, f"generators {sorted(names)} of {cluster.name} to be UP")
    except AssertionError as error:
        raise AssertionError(f"{error}\nstatus: {generators_or_none(cluster)}\n"
                             f"log:\n{cluster.log()[-3000:]}") from None


def next_id(cluster, generator=None, db="postgres"):
    """(id, None) or (None, the SqlError)."""
    call = f"cosid_next('{generator}')" if generator else "cosid_next()"
    try:
        return int(cluster.query(f"SELECT {call}", db)), None
    except SqlError as error:
        return None, error


# The redefinition of the hostile review: a `second` generator whose epoch is ten minutes back,
# called all along, dropped and defined again under its name. In another namespace (whatever the
# layout), or in its own with another layout, ids already called under the name could come
# again: refused (22023). The same definition in its own namespace is allowed: the namespace's
# watermark keeps its new ids above the old ones.

def ten_minutes_back(cluster):
    """An epoch ten minutes before the server's clock, to the second."""
    return cluster.query("SELECT date_trunc('second', now()) - interval '10 minutes'")


def define_second_generator(cluster, name, epoch, machine_bits=None):
    bits = f", machine_bits => {machine_bits}" if machine_bits is not None else ""
    cluster.query(f"SELECT cosid_create_generator('{name}', 'second', epoch => '{epoch}'{bits})")


def unsafe_redefinitions(name, epoch):
    """The definitions under `name` that could repeat the ids of the `second` generator it had."""
    return [f"SELECT cosid_create_generator('{name}', '{layout}', namespace => '{name}2', "
            f"epoch => '{epoch}')" for layout in ("millisecond", "second")] + [
        f"SELECT cosid_create_generator('{name}', 'millisecond', epoch => '{epoch}')"]


def try_unsafe_redefinitions(cluster, name, epoch):
    """{statement: the SqlError, or None if it went through} for each unsafe redefinition."""
    answers = {}
    for sql in unsafe_redefinitions(name, epoch):
        try:
            cluster.query(sql)
            answers[sql] = None
        except SqlError as error:
            answers[sql] = error
    return answers
