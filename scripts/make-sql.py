#!/usr/bin/env python3
"""Makes the update scripts of the extension and of the lease store from their sources:

    scripts/make-sql.py [out-dir]        (target/sql by default)

Each sql/updates/X.sql becomes out-dir/X.sql, its directives replaced by what they name, and
sql/lease_store.sql and sql/cosid_machine.sql are copied beside them, so that out-dir holds every SQL file an install or a
package ships besides the install script cargo-pgrx generates. An update script cannot include a
file when PostgreSQL runs it, so the pieces it shares (the store's update inside the extension's,
functions that lease_store.sql defines too) are put in here. A directive is a line of its own:

    --@include FILE     the lines of FILE (relative to sql/; a file of sql/updates/ made first)
    --@from LINE        (optional, after an include) from the line of FILE equal to LINE
    --@until LINE       (optional) up to, not including, the line of FILE equal to LINE
    --@replace LINE     (optional, with --@with after it) each line of the piece equal to LINE...
    --@with LINE        ...becomes LINE instead (CREATE FUNCTION becoming CREATE OR REPLACE)
    --@-- TEXT          a comment of the source only, not made into the script

A from or until line must occur once in FILE, and a replaced line in the piece, so that an edit
of FILE that moves a piece fails here instead of making another script. Only the update to the
unreleased version is made so. The update scripts of released versions must never change (a
database updated by them has their catalog): each is a plain file, frozen as it was released,
with no directive (so that no edit of a shared piece can reach it), and checked against the
SHA-256 it had then. When a version is released, its made scripts replace their sources and
their hashes join RELEASED.
"""

import hashlib
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SQL = ROOT / "sql"
UPDATES = SQL / "updates"
# Copied as it is: the store's install script, for psql -f (the extension's install script
# includes it through src/sql/mod.rs).
COPIED = [SQL / "lease_store.sql", SQL / "cosid_machine.sql"]
# The update scripts of released versions, as they were released.
RELEASED = {
    "cosid--0.1.0--0.2.0.sql": "30d6d592c979437141f0d726c12052ee40e4b288fd2e78735f1016dd30fd90e7",
    "cosid--0.2.0--0.3.0.sql": "f1a30d9faa5ac11c588104c0e7ea5d1366086440cd7febdd55a408ceb03bef67",
    "cosid--0.3.0--0.4.0.sql": "c8ac6230c1ba707bd05461cb9e94e22ad76c41207d91cf76da2fad9433df6eb3",
    "lease_store--0.1.0--0.2.0.sql":
        "6cbeae0926ed4ecc0decd7f98fb0309ffdb391ce96c22233c80ff51626f0c252",
    "lease_store--0.2.0--0.3.0.sql":
        "faa4c107201e548a48e2bd0026d5f1bf5066580a7ca2a00cdf4ab29e0cdaa5ba",
    "lease_store--0.3.0--0.4.0.sql":
        "704957b3e349f60a66e093ec1e515a45790be3ebf39c30227076d1621770741c",
}
DIRECTIVE = re.compile(r"^--@(include|from|until|replace|with)(?: (.*))?$")


class SourceError(Exception):
    pass


def lines_of(path):
    return path.read_text().splitlines(keepends=True)


def the_line(lines, wanted, path, what):
    """The index of the one line of `lines` equal to `wanted`."""
    found = [index for index, line in enumerate(lines) if line.rstrip("\n") == wanted]
    if len(found) != 1:
        raise SourceError(f"{path.relative_to(ROOT)}: the {what} line occurs {len(found)} times, "
                          f"not once: {wanted!r}")
    return found[0]


def piece(include, source):
    """The lines an include directive names: {file, from, until, replace: [(old, new)]}."""
    path = SQL / include["file"]
    if not path.is_file():
        raise SourceError(f"{source.relative_to(ROOT)}: no file {include['file']} in sql/")
    lines = made_lines(path) if path.parent == UPDATES else lines_of(path)
    start, end = 0, len(lines)
    if include.get("from") is not None:
        start = the_line(lines, include["from"], path, "--@from")
    if include.get("until") is not None:
        end = the_line(lines, include["until"], path, "--@until")
        if end < start:
            raise SourceError(f"{source.relative_to(ROOT)}: --@until before --@from in "
                              f"{include['file']}")
    taken = lines[start:end]
    for old, new in include["replace"]:
        hits = [index for index, line in enumerate(taken) if line.rstrip("\n") == old]
        if not hits:
            raise SourceError(f"{source.relative_to(ROOT)}: the --@replace line is not in the "
                              f"piece of {include['file']}: {old!r}")
        for index in hits:
            taken[index] = new + "\n"
    return taken


def made_lines(source):
    """The lines of a source of sql/updates with its directives replaced."""
    out, include = [], None

    def flush():
        nonlocal include
        if include is not None:
            if include["pending"] is not None:
                raise SourceError(f"{source.relative_to(ROOT)}: --@replace without --@with")
            out.extend(piece(include, source))
            include = None

    for number, line in enumerate(lines_of(source), 1):
        if line.startswith("--@--"):
            continue
        match = DIRECTIVE.match(line.rstrip("\n"))
        if line.startswith("--@") and not match:
            raise SourceError(f"{source.relative_to(ROOT)}:{number}: not a directive: {line!r}")
        if not match:
            flush()
            out.append(line)
            continue
        word, argument = match.group(1), match.group(2) or ""
        if word == "include":
            flush()
            include = {"file": argument, "replace": [], "pending": None}
            continue
        if include is None:
            raise SourceError(f"{source.relative_to(ROOT)}:{number}: --@{word} without --@include")
        if word in ("from", "until"):
            include[word] = argument
        elif word == "replace":
            include["pending"] = argument
        else:
            if include["pending"] is None:
                raise SourceError(f"{source.relative_to(ROOT)}:{number}: --@with without "
                                  "--@replace")
            include["replace"].append((include["pending"], argument))
            include["pending"] = None
    flush()
    return out


def make(out_dir):
    """Writes every made and copied file into out_dir; the names written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    names = []
    missing = sorted(name for name in RELEASED if not (UPDATES / name).is_file())
    if missing:
        raise SourceError(f"sql/updates/ has no {', '.join(missing)}: a released update script "
                          "is shipped for good (databases are on its version)")
    for source in sorted(UPDATES.glob("*.sql")):
        expected = RELEASED.get(source.name)
        if expected is None:
            text = "".join(made_lines(source))
        else:
            text = released_text(source, expected)
        write(out_dir / source.name, text)
        names.append(source.name)
    for path in COPIED:
        write(out_dir / path.name, path.read_text())
        names.append(path.name)
    # A file left from an older source, renamed or removed since, must not be installed.
    for stale in out_dir.glob("*.sql"):
        if stale.name not in names:
            stale.unlink()
    return names


def released_text(source, expected):
    """The text of a released update script, which is copied as it is."""
    text = source.read_text()
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("--@"):
            raise SourceError(f"{source.relative_to(ROOT)}:{number}: a directive in a released "
                              "update script, which is a plain file frozen as it was released")
    if hashlib.sha256(text.encode()).hexdigest() != expected:
        raise SourceError(f"{source.relative_to(ROOT)} is not the {source.name} that was "
                          "released: a released update script must not change")
    return text


def write(path, text):
    """Replaces path whole, so that a reader never sees half a file."""
    if path.exists() and path.read_text() == text:
        return
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    shutil.copymode(SQL / "lease_store.sql", temporary)
    temporary.replace(path)


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "target" / "sql"
    try:
        made = make(out.resolve())
    except SourceError as error:
        print(f"make-sql: {error}", file=sys.stderr)
        sys.exit(1)
    print(f"make-sql: {len(made)} files in {out}")
