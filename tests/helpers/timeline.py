"""The timeline of a fault run, the data of the picture in docs/reliability.md
(scripts/plot-fault-run.py draws it): ids per second per server, counted by the ids' own
timestamps, and the fault windows on the same clock (the machine's wall clock, which every server
reads unless a test moves its clock). Written only when COSID_TIMELINE names a file, so that a
run without it computes and writes nothing."""

import json
import os
import time
from collections import Counter
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

ENVIRONMENT = "COSID_TIMELINE"


def timeline_path():
    """The file COSID_TIMELINE names (relative to the current folder), or None."""
    path = os.environ.get(ENVIRONMENT)
    return Path(path).resolve() if path else None


def now_ms():
    return time.time() * 1000


class FaultWindows:
    """The fault windows of a run, by the wall clock: `with windows.fault(kind, label, target):`
    around the injection and the healing of each."""

    def __init__(self):
        self.windows = []

    @contextmanager
    def fault(self, kind, label, target):
        window = {"kind": kind, "label": label, "target": target, "start_ms": now_ms()}
        try:
            yield window
        finally:
            window["end_ms"] = now_ms()
            self.windows.append(window)


def write_timeline(path, sessions_by_server, decode, start, end_ms, windows, facts):
    """Writes the timeline of a run whose load ran from `start` (a pair: the wall clock in ms and
    time.monotonic() at the same moment) to end_ms (wall clock): for each server, the ids it
    returned in each whole second from the start, dated by their own timestamps (`decode(id)`
    gives (machine id, ms)), and the client sessions it refused in each second by SQLSTATE
    (dated by when they began); the fault windows in seconds from the start; and `facts` (ids,
    duplicates, versions and settings). Ids dated outside those whole seconds (the last part
    of a second, or ahead, by a server whose clock a test moved) are counted in `outside`."""
    start_ms, start_monotonic = start
    seconds = int((end_ms - start_ms) // 1000)
    servers, refused, outside = {}, {}, 0
    for server, sessions in sorted(sessions_by_server.items()):
        counts = Counter(int((decode(value)[1] - start_ms) // 1000)
                         for session in sessions for value in session.ids)
        outside += sum(n for second, n in counts.items() if not 0 <= second < seconds)
        servers[server] = [counts.get(second, 0) for second in range(seconds)]
        by_state = {}
        for session in sessions:
            second = int(session.started - start_monotonic)
            if session.error and 0 <= second < seconds:
                by_state.setdefault(session.sqlstate, [0] * seconds)[second] += 1
        refused[server] = dict(sorted(by_state.items()))
    started = datetime.fromtimestamp(start_ms / 1000, timezone.utc)
    timeline = {
        "started": started.isoformat(timespec="seconds"),
        "date": started.date().isoformat(),
        **facts,
        "seconds": seconds,
        "outside": outside,
        "servers": servers,
        "refused": refused,
        "faults": [{"kind": w["kind"], "label": w["label"], "target": w["target"],
                    "start_s": round((w["start_ms"] - start_ms) / 1000, 2),
                    "end_s": round((w["end_ms"] - start_ms) / 1000, 2)} for w in windows],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(compact_json(timeline))
    return timeline


def compact_json(value, depth=0):
    """JSON with one line per list of numbers (a server's counts) and per fault window, so that
    the file stays small and its diffs readable."""
    if isinstance(value, dict) and depth < 3 and not all(
            isinstance(item, (int, float, str)) for item in value.values()):
        inner = " " * (depth + 1)
        items = ",\n".join(f"{inner}{json.dumps(key)}: {compact_json(item, depth + 1)}"
                           for key, item in value.items())
        return "{\n" + items + "\n" + " " * depth + "}" + ("\n" if depth == 0 else "")
    if isinstance(value, list) and value and isinstance(value[0], dict):
        inner = " " * (depth + 1)
        return "[\n" + ",\n".join(inner + json.dumps(item) for item in value) + "\n" + \
            " " * depth + "]"
    return json.dumps(value)
