"""What the tests of cosid's part in CosId's distributors share: a table `ids (id, source)` in a
cosid server's postgres database, where every participant's ids are stored and counted."""

import re
import subprocess

from .pgcluster import SqlError, wait_for


def status(server, name="default"):
    """The generator's row of cosid.status, or {} before the lease worker has shown it (a
    generator just created appears at the worker's next round)."""
    rows = server.rows("SELECT state, machine_id, problem, last_error FROM cosid.status "
                       f"WHERE name = '{name}'")
    return dict(zip(["state", "machine_id", "problem", "last_error"], rows[0])) if rows else {}


def wait_state(server, state, timeout=60, name="default"):
    return wait_for(lambda: status(server, name).get("state") == state and status(server, name),
                    timeout, f"{server.name}'s {name} to be {state}:\n{server.log()[-2000:]}")


def holder_pattern(server):
    """What the server's claims write as CosId's instance id: cosid-<claim token>@ and the
    instance id cosid.status shows (the token itself is never shown)."""
    instance_id = server.query("SELECT instance_id FROM cosid.status WHERE name = 'default'")
    return rf"^cosid-[0-9a-f]{{16}}@{re.escape(instance_id)}$"


def store_ids(server, source, ids):
    subprocess.run(server.psql_command("postgres", "-c", "COPY ids FROM STDIN"), check=True,
                   input="".join(f"{value}\t{source}\n" for value in ids), text=True)


def generate(server, count, source="cosid"):
    server.query(f"INSERT INTO ids SELECT cosid_next(), '{source}' "
                 f"FROM generate_series(1, {count})")


def refuses(server):
    """Whether cosid_next() refuses for want of a lease (what it issued before is kept)."""
    try:
        generate(server, 10)
    except SqlError as error:
        return error.sqlstate == "55P03"
    return False


def ids_of(server, source):
    return [int(value) for (value,) in server.rows(
        f"SELECT id FROM ids WHERE source = '{source}' ORDER BY id")]


def named_generator_beside(test, server, java, distributor):
    """A named generator of the server in the Java service's namespace (which holds machine id
    0 there): it leases from the same distributor, the next machine id, and its ids and the
    service's are counted together."""
    server.query("SELECT cosid_create_generator('orders', namespace => 'orders')")
    named = wait_state(server, "UP", name="orders")
    test.assertEqual(named["machine_id"], "1")
    test.assertEqual(server.query("SELECT distributor FROM cosid.status WHERE name = 'orders'"),
                     distributor)
    server.query("INSERT INTO ids SELECT cosid_next('orders'), 'orders' "
                 "FROM generate_series(1, 50000)")
    store_ids(server, "java", java.ids(50_000))


def assert_unique(test, server):
    """Every id once, and no (millisecond, machine id) issued under two holders (sources)."""
    duplicates, shared = server.rows(
        "SELECT (SELECT count(*) - count(DISTINCT id) FROM ids), "
        "(SELECT count(*) FROM (SELECT id >> 12 FROM ids GROUP BY id >> 12 "
        "HAVING count(DISTINCT source) > 1) pairs)")[0]
    total = int(server.query("SELECT count(*) FROM ids"))
    test.assertEqual((duplicates, shared), ("0", "0"), f"of {total} ids")
    return total
