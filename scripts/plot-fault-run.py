#!/usr/bin/env python3
"""Draws the timeline of a fault run (tests/faults/test_timeline.py writes it when COSID_TIMELINE
names a file) as an SVG picture: ids per second of each server, by the ids' own timestamps, the
fault windows shaded and named, and under the chart a strip per server marking the seconds in
which its clients were refused (no machine id free, lease not usable, server down). Python's
standard library only.

    scripts/plot-fault-run.py [timeline.json [picture.svg]]

(by default docs/images/fault-run.json and docs/images/fault-run.svg, as `make plot` does)
"""

import json
import sys
from html import escape
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WIDTH = 960
LEFT, RIGHT = 78, 24
TOP = 112
PLOT_HEIGHT = 300
STRIP_HEIGHT, STRIP_GAP = 12, 4
FONT = "font-family='DejaVu Sans, Helvetica, Arial, sans-serif'"

# Colour-blind safe (Okabe and Ito), one per server.
SERVER_COLOURS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#56B4E9", "#E69F00"]
FAULT_COLOURS = {"partition": "#F0E442", "kill": "#F08080", "clock": "#56B4E9",
                 "failover": "#CC79A7"}
FAULT_NAMES = {"partition": "partition", "kill": "kill -9", "clock": "clock step",
               "failover": "store failover"}
# The refusals of the strips, the worst of a second first.
REFUSALS = [("connection", "#B22222", "server down (connection refused or lost)"),
            ("57P01", "#B22222", None),
            ("55P03", "#E69F00", "no usable lease (55P03)"),
            ("53400", "#BBBBBB", "waiting for a machine id (53400)")]


def nice_ceiling(value):
    """The smallest of 1, 2, 2.5 or 5 times a power of ten that is at least `value`."""
    power = 1
    while power * 10 <= value:
        power *= 10
    for step in (1, 2, 2.5, 5, 10):
        if step * power >= value:
            return step * power
    return 10 * power


def thousands(value):
    if value >= 1000:
        text = f"{value / 1000:.1f}".rstrip("0").rstrip(".")
        return f"{text}k"
    return str(value)


def text(x, y, content, size=12, anchor="start", weight="normal", colour="#222222",
         extra=""):
    return (f"<text x='{x:.1f}' y='{y:.1f}' font-size='{size}' text-anchor='{anchor}' "
            f"font-weight='{weight}' fill='{colour}' {FONT}{extra}>{escape(content)}</text>")


def draw(timeline):
    seconds = timeline["seconds"]
    servers = timeline["servers"]
    refused = timeline.get("refused", {})
    plot_width = WIDTH - LEFT - RIGHT
    strips_top = TOP + PLOT_HEIGHT + 66
    strips_height = len(servers) * (STRIP_HEIGHT + STRIP_GAP)
    legend_top = strips_top + strips_height + 16
    height = legend_top + 40
    peak = max(max(counts) for counts in servers.values())
    y_max = nice_ceiling(peak * 1.05)

    def x_of(second):
        return LEFT + plot_width * second / seconds

    def y_of(count):
        return TOP + PLOT_HEIGHT * (1 - count / y_max)

    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{height}' "
           f"viewBox='0 0 {WIDTH} {height}'>",
           f"<rect width='{WIDTH}' height='{height}' fill='white'/>"]
    out.append(text(LEFT, 24, "cosid under four faults: ids per second of each server", 17,
                    weight="bold"))
    out.append(text(LEFT, 44, (
        f"{timeline['date']}, PostgreSQL {timeline['postgresql']}, cosid {timeline['cosid']}: "
        f"{timeline['ids']:,} ids, {timeline['duplicates']} duplicates, "
        f"{timeline['conflicts']} ownership conflicts"), 13))
    out.append(text(LEFT, 62, (
        f"{len(servers)} servers, {2 ** timeline['machine_bits']} machine ids, "
        f"{timeline['safe_guard_s']:g} s safe guard, renewals every {timeline['renewal_s']:g} s, "
        f"{timeline['clients_per_server']} clients per server"), 12, colour="#555555"))

    # The fault windows, shaded over the chart, their names above it (on a second row when
    # they would overlap the one before).
    label_ends = [0.0, 0.0]
    for fault in timeline["faults"]:
        x0, x1 = x_of(fault["start_s"]), x_of(fault["end_s"])
        colour = FAULT_COLOURS.get(fault["kind"], "#DDDDDD")
        out.append(f"<rect x='{x0:.1f}' y='{TOP}' width='{max(x1 - x0, 2):.1f}' "
                   f"height='{PLOT_HEIGHT}' fill='{colour}' fill-opacity='0.28'/>")
        name = FAULT_NAMES.get(fault["kind"], fault["kind"])
        target = "" if fault["target"] == "store" else f" ({fault['target']})"
        label = name + target
        width = 6.6 * len(label)
        row = 0 if label_ends[0] < x0 else 1
        label_ends[row] = x0 + width + 8
        y = TOP - 8 - 15 * (1 - row)
        out.append(f"<line x1='{x0:.1f}' y1='{y + 3}' x2='{x0:.1f}' y2='{TOP}' "
                   f"stroke='{colour}' stroke-width='2'/>")
        out.append(text(x0 + 3, y, label, 11.5, weight="bold", colour="#333333"))

    # Axes and grid.
    for index in range(6):
        count = y_max * index / 5
        y = y_of(count)
        out.append(f"<line x1='{LEFT}' y1='{y:.1f}' x2='{LEFT + plot_width}' y2='{y:.1f}' "
                   f"stroke='#E4E4E4' stroke-width='1'/>")
        out.append(text(LEFT - 6, y + 4, thousands(int(count)), 11, anchor="end"))
    step = 5 if seconds <= 80 else 10
    for second in range(0, seconds + 1, step):
        x = x_of(second)
        out.append(f"<line x1='{x:.1f}' y1='{TOP + PLOT_HEIGHT}' x2='{x:.1f}' "
                   f"y2='{TOP + PLOT_HEIGHT + 5}' stroke='#444444'/>")
        out.append(text(x, TOP + PLOT_HEIGHT + 18, str(second), 11, anchor="middle"))
    out.append(f"<rect x='{LEFT}' y='{TOP}' width='{plot_width}' height='{PLOT_HEIGHT}' "
               "fill='none' stroke='#444444'/>")
    out.append(text(LEFT + plot_width / 2, TOP + PLOT_HEIGHT + 34,
                    "seconds from the start of the load (ids dated by their own timestamps)",
                    12, anchor="middle"))
    out.append(text(18, TOP + PLOT_HEIGHT / 2, "ids per second", 12, anchor="middle",
                    extra=f" transform='rotate(-90 18 {TOP + PLOT_HEIGHT / 2})'"))

    # One line per server: each second's count drawn across that second.
    for index, (server, counts) in enumerate(servers.items()):
        colour = SERVER_COLOURS[index % len(SERVER_COLOURS)]
        points = []
        for second, count in enumerate(counts):
            points += [(x_of(second), y_of(count)), (x_of(second + 1), y_of(count))]
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        out.append(f"<polyline points='{path}' fill='none' stroke='{colour}' "
                   "stroke-width='2.2' stroke-linejoin='round'/>")

    # A strip per server: the seconds in which its clients were refused, by the worst refusal.
    for index, server in enumerate(servers):
        y = strips_top + index * (STRIP_HEIGHT + STRIP_GAP)
        colour = SERVER_COLOURS[index % len(SERVER_COLOURS)]
        out.append(text(LEFT - 6, y + STRIP_HEIGHT - 2, server, 11, anchor="end",
                        colour=colour, weight="bold"))
        out.append(f"<rect x='{LEFT}' y='{y}' width='{plot_width}' height='{STRIP_HEIGHT}' "
                   "fill='#F6F6F6'/>")
        states = refused.get(server, {})
        for second in range(seconds):
            for state, fill, _ in REFUSALS:
                if states.get(state, [0] * seconds)[second]:
                    out.append(f"<rect x='{x_of(second):.1f}' y='{y}' "
                               f"width='{x_of(second + 1) - x_of(second):.1f}' "
                               f"height='{STRIP_HEIGHT}' fill='{fill}'/>")
                    break
    out.append(text(LEFT, strips_top - 4, "seconds in which a server's clients were refused",
                    11, colour="#555555"))

    # The legend: servers, then refusals.
    x = LEFT
    for index, server in enumerate(servers):
        colour = SERVER_COLOURS[index % len(SERVER_COLOURS)]
        out.append(f"<line x1='{x}' y1='{legend_top}' x2='{x + 22}' y2='{legend_top}' "
                   f"stroke='{colour}' stroke-width='3'/>")
        out.append(text(x + 28, legend_top + 4, server, 12))
        x += 28 + 7 * len(server) + 22
    x = LEFT
    for _, fill, name in REFUSALS:
        if name is None:
            continue
        out.append(f"<rect x='{x}' y='{legend_top + 14}' width='14' height='10' "
                   f"fill='{fill}'/>")
        out.append(text(x + 20, legend_top + 23, name, 11.5))
        x += 20 + 6.4 * len(name) + 22
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(arguments):
    source = Path(arguments[0]) if arguments else ROOT / "docs" / "images" / "fault-run.json"
    target = (Path(arguments[1]) if len(arguments) > 1
              else ROOT / "docs" / "images" / "fault-run.svg")
    target.write_text(draw(json.loads(source.read_text())))
    print(f"{target} drawn from {source}")


if __name__ == "__main__":
    main(sys.argv[1:])
