"""cosid's benchmark: cosid_next() against nextval(), gen_random_uuid() and (on PostgreSQL 18)
uuidv7(), side by side in one run, on a dedicated cluster with PostgreSQL's default durability
settings.

    make bench                     (or: python3 bench/bench.py [--rounds N] [--costs-only]
                                    [--inserts-only] [--insert-rounds N])

Part 3 inserts 2,000,000 rows keyed by each generator in paired rounds of turning order, and
gives each key's ratio to cosid_next() within a round: its median and its range. Part 4 also
compares cosid_next('bench'), a named generator of the same layout, with cosid_next(): the cost
of finding a generator by name.

Prints median timings of several rounds, the ratios, and the layout's ceiling of 4,096 ids per
millisecond per machine id.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from helpers.pgcluster import Cluster, free_port  # noqa: E402

CALLS = 1_000_000
CEILING_IDS_PER_MS = 4096
CEILING_S = CALLS / CEILING_IDS_PER_MS / 1000

# One call per row, pipelined: a set-returning function in the select list feeds the aggregate
# row by row, so the loop costs little and the timing is mostly the function itself.
LOOP = f"(SELECT generate_series(1, {CALLS}) AS g) s"
CALL_QUERIES = {
    "cosid_next()": f"SELECT count(cosid_next()) FROM {LOOP}",
    "nextval()": f"SELECT count(nextval('bench_seq')) FROM {LOOP}",
    "gen_random_uuid()": f"SELECT count(gen_random_uuid()) FROM {LOOP}",
    "empty loop": f"SELECT count(g) FROM {LOOP}",
}

INSERT_ROWS = 2_000_000
UUIDV7_QUERY = f"SELECT count(uuidv7()) FROM {LOOP}"


def has_uuidv7(cluster):
    """Whether the server has PostgreSQL 18's uuidv7() (by its signature: the name has two)."""
    return cluster.query("SELECT to_regprocedure('uuidv7()') IS NOT NULL") == "t"


def call_queries(cluster):
    """The calls compared, with uuidv7() where the server has it."""
    return {**CALL_QUERIES, "uuidv7()": UUIDV7_QUERY} if has_uuidv7(cluster) else dict(CALL_QUERIES)


TABLES = {
    "cosid_next()": "id bigint PRIMARY KEY DEFAULT cosid_next()",
    "bigint identity": "id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
    "uuid v7 uuidv7()": "id uuid PRIMARY KEY DEFAULT uuidv7()",
    "uuid v4 gen_random_uuid()": "id uuid PRIMARY KEY DEFAULT gen_random_uuid()",
}


def wait_leased(cluster):
    for _ in range(100):
        if cluster.query("SELECT state FROM cosid.status WHERE name = 'default'") == "UP":
            return
        time.sleep(0.1)
    raise RuntimeError(f"{cluster.name} leased no machine id:\n{cluster.log()[-2000:]}")


def wait_named(cluster):
    for _ in range(300):
        if cluster.query("SELECT state FROM cosid.status WHERE name = 'bench'") == "UP":
            return
        time.sleep(0.1)
    raise RuntimeError(f"{cluster.name}: generator bench is not up:\n{cluster.log()[-2000:]}")


def timed_statements(cluster, statements):
    """Runs statements in one session; returns each one's server round trip in seconds."""
    script = "\\timing on\n" + "".join(f"{s};\n" for s in statements)
    result = subprocess.run(cluster.psql_command("postgres", "-At", "-v", "ON_ERROR_STOP=1"),
                            input=script, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, check=True)
    return [float(ms) / 1000 for ms in re.findall(r"^Time: ([0-9.]+) ms", result.stdout, re.M)]


# A named generator (cosid_create_generator) with the same layout as the default one: the cost of
# finding a generator by its name on every call.
NAMED_QUERY = f"SELECT count(cosid_next('bench')) FROM {LOOP}"


def single_backend(cluster, rounds, queries=CALL_QUERIES):
    medians = {}
    for name, query in queries.items():
        timed_statements(cluster, [query])  # warm up
        medians[name] = statistics.median(timed_statements(cluster, [query] * rounds))
    return medians


def parallel_rate(cluster, query, backends):
    """Aggregate calls per second of `backends` sessions each running `query` once."""
    times = [0.0] * backends
    barrier = threading.Barrier(backends)

    def work(index):
        barrier.wait()
        times[index] = timed_statements(cluster, [query])[0]

    started = time.monotonic()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(backends)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - started
    return CALLS * backends / wall, wall


def inserts(cluster, rounds, tables):
    """Paired rounds: each round inserts with every key once, in an order that turns by one key
    each round (so no key always runs first, or after the same one); a key's ratio to cosid_next()
    is taken within each round, where the machine's state is the same for both."""
    names = list(tables)
    seconds = {name: [] for name in names}
    sizes = {name: [] for name in names}
    for round_number in range(rounds):
        turn = round_number % len(names)
        for name in names[turn:] + names[:turn]:
            cluster.query("DROP TABLE IF EXISTS bench_t; "
                          f"CREATE TABLE bench_t ({tables[name]}, n int); CHECKPOINT")
            seconds[name] += timed_statements(
                cluster, [f"INSERT INTO bench_t (n) SELECT g FROM generate_series(1, "
                          f"{INSERT_ROWS}) g"])
            sizes[name].append(int(cluster.query("SELECT pg_relation_size('bench_t_pkey')")))
    cluster.query("DROP TABLE bench_t")
    base = seconds["cosid_next()"]
    return {name: (statistics.median(seconds[name]),
                   [other / cosid for other, cosid in zip(seconds[name], base)],
                   statistics.median(sizes[name])) for name in names}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--insert-rounds", type=int, default=6)
    parser.add_argument("--costs-only", action="store_true",
                        help="only part 4, the cost of one call (default and named generator)")
    parser.add_argument("--inserts-only", action="store_true",
                        help="only part 3, the paired INSERT rounds")
    args = parser.parse_args()
    if not args.costs_only:
        throughput(args)
    if not args.inserts_only:
        call_costs(args)


def calls_side_by_side(cluster, args):
    medians = single_backend(cluster, args.rounds, call_queries(cluster))
    print(f"1. One backend, {CALLS:,} calls (median s; ratio = other / cosid_next)")
    print(f"   {'function':<20}{'seconds':>9}{'calls/ms':>10}{'vs cosid':>10}")
    for name, seconds in medians.items():
        print(f"   {name:<20}{seconds:>9.3f}{CALLS / seconds / 1000:>10.0f}"
              f"{seconds / medians['cosid_next()']:>9.2f}x")
    cosid_rate = CALLS / medians["cosid_next()"] / 1000
    print(f"   cosid_next() reaches {100 * cosid_rate / CEILING_IDS_PER_MS:.0f}% of the "
          f"layout's ceiling; nextval() takes {medians['nextval()'] / medians['cosid_next()']:.2f}x "
          f"and gen_random_uuid() {medians['gen_random_uuid()'] / medians['cosid_next()']:.2f}x "
          f"the time of cosid_next().\n")

    print("2. Several backends at once, each 1,000,000 calls (aggregate calls/ms)")
    print(f"   {'backends':<10}{'cosid_next()':>14}{'nextval()':>12}{'gen_random_uuid()':>19}")
    for backends in (1, 2, 4):
        rates = [parallel_rate(cluster, CALL_QUERIES[name], backends)[0] / 1000
                 for name in ("cosid_next()", "nextval()", "gen_random_uuid()")]
        print(f"   {backends:<10}{rates[0]:>14.0f}{rates[1]:>12.0f}{rates[2]:>19.0f}")
    print(f"   One machine id caps cosid_next() at {CEILING_IDS_PER_MS} ids/ms for the whole "
          f"server, however many backends call it.\n")


def throughput(args):

    # The product's default: a machine id leased by the background worker.
    cluster = Cluster("bench", free_port(25190), {}, durable=True).init()
    cluster.start()
    try:
        cluster.query("CREATE EXTENSION cosid; CREATE SEQUENCE bench_seq")
        wait_leased(cluster)
        version = cluster.query("SHOW server_version")
        print(f"cosid benchmark: PostgreSQL {version}, {os.cpu_count()} CPUs, "
              f"default durability settings, median of {args.rounds} rounds")
        print(f"layout ceiling: {CEILING_IDS_PER_MS} ids/ms per machine id = "
              f"{CEILING_S:.3f} s per million\n")

        if not args.inserts_only:
            calls_side_by_side(cluster, args)
        tables = {name: column for name, column in TABLES.items()
                  if has_uuidv7(cluster) or "uuidv7" not in column}
        print(f"3. INSERT of {INSERT_ROWS:,} rows, key generated by default, {args.insert_rounds} "
              "paired rounds in turning order (median; ratio = other / cosid_next in the same "
              "round, its median and range)")
        results = inserts(cluster, args.insert_rounds, tables)
        print(f"   {'key':<27}{'seconds':>9}{'vs cosid':>10}{'range':>15}{'pkey index MB':>15}")
        for name, (seconds, ratios, size) in results.items():
            spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
            print(f"   {name:<27}{seconds:>9.3f}{statistics.median(ratios):>9.2f}x"
                  f"{spread:>15}{size / 2**20:>15.1f}")
        if "uuid v7 uuidv7()" not in tables:
            print("   (no uuidv7() before PostgreSQL 18: make bench PG=18 for UUIDv7)")
    finally:
        cluster.stop()


def call_costs(args):
    # The ceiling hides what a call costs. A layout with 22 sequence bits (4,194,304 ids per
    # millisecond) and an epoch of today shows the cost of cosid_next() itself, with a leased
    # machine id (a deadline and a watermark checked on every call) and with a manual one.
    today = time.strftime("%Y-%m-%d", time.gmtime())
    uncapped_layout = {"cosid.epoch": f"'{today}'", "cosid.timestamp_bits": 35,
                       "cosid.machine_bits": 6, "cosid.sequence_bits": 22}
    costs = {}
    named_layout = (f"timestamp_bits => 35, machine_bits => 6, sequence_bits => 22, "
                    f"epoch => '{today}'")
    for distributor in ("lease", "manual"):
        uncapped = Cluster(f"bench-uncapped-{distributor}", free_port(25191), {
            **uncapped_layout, "cosid.distributor": distributor, "cosid.machine_id": 1},
            durable=True).init()
        uncapped.start()
        try:
            uncapped.query("CREATE EXTENSION cosid; CREATE SEQUENCE bench_seq; "
                           f"SELECT cosid_create_generator('bench', {named_layout})")
            wait_leased(uncapped)
            wait_named(uncapped)
            queries = call_queries(uncapped)
            queries["cosid_next('bench')"] = NAMED_QUERY
            medians = single_backend(uncapped, args.rounds, queries)
            loop = medians.pop("empty loop")
            for name, seconds in medians.items():
                label = f"{name} ({distributor})" if name.startswith("cosid_next") else name
                costs.setdefault(label, []).append((seconds - loop) * 1e9 / CALLS)
        finally:
            uncapped.stop()
    print("\n4. Cost of one call, net of the loop, with a 35/6/22-bit layout whose ceiling is far "
          "away")
    print(f"   {'function':<30}{'ns per call':>12}{'vs leased':>11}")
    base = statistics.median(costs["cosid_next() (lease)"])
    for name, samples in costs.items():
        ns = statistics.median(samples)
        print(f"   {name:<30}{ns:>12.0f}{ns / base:>10.2f}x")
    for distributor in ("lease", "manual"):
        default = statistics.median(costs[f"cosid_next() ({distributor})"])
        named = statistics.median(costs[f"cosid_next('bench') ({distributor})"])
        print(f"   {distributor}: cosid_next('bench') costs {named / default:.2f}x "
              f"cosid_next() ({named - default:+.0f} ns)")


if __name__ == "__main__":
    main()
