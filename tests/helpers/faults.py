"""The fleet of the fault and load tiers: its layout (1 machine bit, so that 3 servers take each
other's machine ids over), its lease timings, and the clock faker (fakeclock.c)."""

import os
import subprocess
import unittest
from collections import defaultdict

from .pgcluster import PG_MAJOR, ROOT, chown_to_postgres, exclusive

MACHINE_BITS = 1
SEQUENCE_BITS = 12
LAYOUT = {"cosid.timestamp_bits": 41, "cosid.machine_bits": MACHINE_BITS,
          "cosid.sequence_bits": SEQUENCE_BITS}
FAST = {"cosid.safe_guard_duration": "'4s'", "cosid.guarder_delay": "'500ms'",
        "cosid.guarder_initial_delay": "'500ms'"}

EPOCH_MS = 1_577_203_200_000

# The PostgreSQL versions on which the heaviest fault tests run (`full_fault_tier`): the oldest and
# the newest tested. What those tests exercise (leases, takeovers, failovers of the store, a store
# gone back in time, operators' actions in random order) is cosid's own Rust and SQL, the same on
# every version; what differs between versions (the server's API, its catalogs, its messages,
# pg_upgrade, replication's options) is covered on every version by the SQL golden files, the
# cluster tests and the rest of the fault tier. Running them on the versions between as well
# would cost about a quarter of the suite's job time (on 17: 1,866 s of its 3,430 s, three jobs
# at a time) to test the same code again, and make test on 15, 16, 17 and 18 must fit CI's time
# budget. COSID_FULL_FAULTS=1 runs them on any version.
FULL_FAULT_VERSIONS = (15, 18)


def full_fault_tier(cls):
    """Skips the test class on the versions that are not in FULL_FAULT_VERSIONS (unless
    COSID_FULL_FAULTS=1), saying why."""
    runs = PG_MAJOR in FULL_FAULT_VERSIONS or os.environ.get("COSID_FULL_FAULTS") == "1"
    versions = " and ".join(str(version) for version in FULL_FAULT_VERSIONS)
    return unittest.skipUnless(
        runs, f"the heaviest fault tests run on PostgreSQL {versions} only: they test "
        f"version-independent code (tests/helpers/faults.py, FULL_FAULT_VERSIONS; "
        f"COSID_FULL_FAULTS=1 runs them here)")(cls)

FAKE_CLOCK_SOURCE = ROOT / "tests" / "helpers" / "fakeclock.c"


def fake_clock_library():
    """The clock faker, built from fakeclock.c with gcc the first time it is needed (again when
    the source changes) into target/fakeclock/."""
    source = FAKE_CLOCK_SOURCE.read_bytes()
    library = ROOT / "target" / "fakeclock" / f"fakeclock-{hash_of(source)}.so"
    with exclusive("fakeclock"):
        if not library.exists():
            library.parent.mkdir(parents=True, exist_ok=True)
            building = library.with_suffix(".building")
            result = subprocess.run(
                ["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o", building,
                 FAKE_CLOCK_SOURCE], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if result.returncode != 0:
                raise RuntimeError(f"gcc could not build {FAKE_CLOCK_SOURCE}:\n{result.stdout}")
            os.chmod(building, 0o755)
            building.rename(library)
    return library


def hash_of(data):
    import hashlib
    return hashlib.sha256(data).hexdigest()[:16]


def fake_clock(offset_file, offset_s=0.0):
    """Writes the clock offset of a server (its wall clock is real time + offset_s) to
    offset_file, and returns the environment that puts the server on it: every process of the
    server reads the file again at each reading of the wall clock."""
    set_clock_offset(offset_file, offset_s)
    return {"LD_PRELOAD": str(fake_clock_library()), "COSID_FAKECLOCK_FILE": str(offset_file)}


def set_clock_offset(offset_file, offset_s):
    """Moves the wall clock of the servers on offset_file to real time + offset_s."""
    offset_file.write_text(f"{offset_s:+.3f}\n")
    chown_to_postgres(offset_file)


# The oracles over the ids of a fleet of this layout.

def decode(value, machine_bits=MACHINE_BITS, sequence_bits=SEQUENCE_BITS):
    machine = (value >> sequence_bits) & ((1 << machine_bits) - 1)
    return machine, (value >> (sequence_bits + machine_bits)) + EPOCH_MS


def ownership_conflicts(sessions_by_server, decode=decode):
    """Pairs of servers whose ids with one machine id overlap in time."""
    windows = defaultdict(list)
    for server, sessions in sessions_by_server.items():
        # A server can hold a machine id several times; each session is one stretch.
        for session in sessions:
            for machine, group in _by_machine(session.ids, decode).items():
                windows[machine].append((min(group), max(group), server))
    conflicts = 0
    for machine, spans in windows.items():
        spans.sort()
        for i, (start, end, server) in enumerate(spans):
            for other_start, _, other_server in spans[i + 1:]:
                if other_start > end:
                    break
                if other_server != server:
                    conflicts += 1
    return conflicts


def _by_machine(ids, decode=decode):
    groups = defaultdict(list)
    for value in ids:
        machine, ts = decode(value)
        groups[machine].append(ts)
    return groups
