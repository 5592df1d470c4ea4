"""The fleet of the fault and load tiers: its layout (1 machine bit, so that 3 servers take each
other's machine ids over), its lease timings, and the clock faker."""

from pathlib import Path

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
MACHINE_BITS = 1
SEQUENCE_BITS = 12
LAYOUT = {"cosid.timestamp_bits": 41, "cosid.machine_bits": MACHINE_BITS,
          "cosid.sequence_bits": SEQUENCE_BITS}
FAST = {"cosid.safe_guard_duration": "'4s'", "cosid.guarder_delay": "'500ms'",
        "cosid.guarder_initial_delay": "'500ms'"}
