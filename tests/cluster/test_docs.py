"""The documentation cannot rot: every ```sql block of README.md and docs/*.md runs against a real
server, its output is checked where the document shows one, and every relative link points to a
file and heading that exist.

The conventions, written in the markdown itself (docs/development.md, "The documentation's
examples"):

- A ```sql block runs through psql, as the postgres superuser, in database postgres (a block may
  change database with \\c). The blocks of one document run in order on one server, so that what
  a block creates is there for the next ones; each document has its own server.
- A ```text block right after a ```sql block (blank lines between allowed) is the output psql
  prints for it, errors included. Lines are compared after trailing blanks are cut and runs of
  blanks are made one; `{{...}}` in the expected output matches any text on its line (an id, a
  time), and the rule under a header (`----+----`) is compared by its columns only, since its
  width follows the values. A block whose expected output shows an `ERROR:` may fail; any other must succeed.
- `<!-- test: server settings -->` just before a ``` block of postgresql.conf lines: the blocks
  after it run on a new server started with those settings (`shared_preload_libraries` is always
  'cosid'). `<!-- test: server settings, HOSTNAME=pg-3 -->` also sets the server's environment.
- `<!-- not run: why -->` just before a ```sql block: it is not run (it needs a second server, a
  shared store, ...). The test counts and names these blocks; keep them few.
- psql runs with PGTZ=UTC and PGDATESTYLE=ISO, so that shown times do not depend on the machine.
- Before a block that calls cosid_next() (or cosid_convert_column(), which does) or reads
  cosid.status, the test waits (up to 15 s) until every generator is UP, as a reader waits the second the documents speak of.
"""

import os
import re
import subprocess
import sys
import time
import unittest

from helpers.pgcluster import PG_BIN, ROOT, Cluster, free_port

DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
FIRST_PORT = 25800
STARTED = 0

FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
# A marker comment, with nothing but blank space between it and the block.
MARKER = re.compile(r"<!--\s*(not run|test):?\s*((?:(?!-->).)*?)\s*-->\s*\Z", re.S)
WAIT_FOR_UP = re.compile(r"cosid_next\s*\(|cosid_convert_column\s*\(|cosid\.status", re.I)


class Block:
    def __init__(self, doc, line, lang, text, marker):
        self.doc, self.line, self.lang, self.text, self.marker = doc, line, lang, text, marker
        self.expected = None

    def where(self):
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def blocks_of(doc):
    """The fenced blocks of a document, each with the marker comment just before it, and the
    ```text block that follows a ```sql block as its expected output."""
    source = doc.read_text()
    blocks = []
    previous_end = 0
    for match in FENCE.finditer(source):
        between = source[previous_end:match.start()]
        marker = MARKER.search(between)
        line = source.count("\n", 0, match.start()) + 1
        block = Block(doc, line, match.group(1), match.group(2),
                      (marker.group(1), marker.group(2)) if marker else None)
        if (block.lang == "text" and blocks and blocks[-1].lang == "sql"
                and blocks[-1].expected is None and between.strip() == ""):
            blocks[-1].expected = block.text
        else:
            blocks.append(block)
        previous_end = match.end()
    return blocks


def not_run(doc):
    return [b for b in blocks_of(doc) if b.lang == "sql" and b.marker and b.marker[0] == "not run"]


def settings_of(block):
    """postgresql.conf lines as a dict, and the environment the marker names."""
    settings = {}
    for raw in block.text.splitlines():
        # A comment starts at a # outside quotes.
        line = re.match(r"((?:[^'#]|'[^']*')*)", raw).group(1).strip()
        if not line:
            continue
        key, _, value = line.partition("=")
        settings[key.strip()] = value.strip()
    preload = settings.pop("shared_preload_libraries", "'cosid'")
    if preload != "'cosid'":
        raise AssertionError(f"{block.where()}: shared_preload_libraries must be 'cosid'")
    env = dict(part.strip().split("=", 1) for part in block.marker[1].split(",")[1:]
               if "=" in part)
    return settings, env


def normalise(text):
    return [re.sub(r"\s+", " ", line.rstrip()) for line in text.rstrip("\n").split("\n")]


def output_matches(expected, actual):
    """Whether psql's output matches the expected text; `{{...}}` matches any text."""
    wanted, got = normalise(expected), normalise(actual)
    if len(wanted) != len(got):
        return False
    for pattern, line in zip(wanted, got):
        # The rule under a header is as wide as the values: only its columns are compared.
        if re.fullmatch(r"[-+]+", pattern) and re.fullmatch(r"[-+]+", line):
            if pattern.count("+") != line.count("+"):
                return False
            continue
        parts = re.split(r"\{\{.*?\}\}", pattern)
        if not re.fullmatch(".*?".join(re.escape(p) for p in parts), line):
            return False
    return True


def run_block(cluster, block):
    shows_error = block.expected is not None and "ERROR:" in block.expected
    command = [str(PG_BIN / "psql"), "-X", "-q", "-h", "127.0.0.1", "-p", str(cluster.port),
               "-U", "postgres", "-d", "postgres"]
    if not shows_error:
        command += ["-v", "ON_ERROR_STOP=1"]
    result = subprocess.run(command, input=block.text, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, timeout=120,
                            env={**os.environ, "PGTZ": "UTC", "PGDATESTYLE": "ISO"})
    return result.returncode, result.stdout


def wait_until_up(cluster, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if cluster.query("SELECT count(*) FROM pg_extension WHERE extname = 'cosid'") != "1":
                return
            # Every generator defined is published (a new one is recorded in the data
            # directory first), and every one is UP.
            if cluster.query(
                    "SELECT bool_and(state = 'UP') AND NOT EXISTS (SELECT FROM cosid.generator g "
                    "WHERE g.name NOT IN (SELECT name FROM cosid.status)) "
                    "FROM cosid.status") == "t":
                return
        except Exception:
            pass
        time.sleep(0.1)


class Docs(unittest.TestCase):
    clusters = []

    def tearDown(self):
        while self.clusters:
            self.clusters.pop().stop(check=False)

    def start_cluster(self, doc, settings=None, env=None):
        while self.clusters:
            self.clusters.pop().stop(check=False)
        global STARTED
        STARTED += 1
        cluster = Cluster(f"docs-{doc.stem.lower()}", free_port(FIRST_PORT + STARTED % 40),
                          settings or {}, env=env).init()
        self.clusters.append(cluster)
        cluster.start()
        return cluster

    def run_document(self, doc):
        """Runs the document's blocks in order; returns how many ran."""
        cluster = None
        ran = 0
        for block in blocks_of(doc):
            if block.marker and block.marker[0] == "test" and block.marker[1].startswith(
                    "server settings"):
                settings, env = settings_of(block)
                cluster = self.start_cluster(doc, settings, env)
                continue
            if block.lang != "sql" or (block.marker and block.marker[0] == "not run"):
                continue
            if cluster is None:
                cluster = self.start_cluster(doc)
            if WAIT_FOR_UP.search(block.text):
                wait_until_up(cluster)
            code, output = run_block(cluster, block)
            shows_error = block.expected is not None and "ERROR:" in block.expected
            if code != 0 and not shows_error:
                self.fail(f"{block.where()}: the example failed:\n{block.text}\n{output}")
            if block.expected is not None and not output_matches(block.expected, output):
                self.fail(f"{block.where()}: the output differs from the document's.\n"
                          f"SQL:\n{block.text}\nexpected:\n{block.expected}\ngot:\n{output}")
            ran += 1
        return ran

    def test_relative_links(self):
        """Every relative link of the docs names a file that exists, and a heading in it."""
        broken = []
        for doc in DOCS:
            text = FENCE.sub("", doc.read_text())
            for target in re.findall(r"\]\(([^)\s]+)\)", text):
                if re.match(r"[a-z]+:", target):
                    continue
                path, _, anchor = target.partition("#")
                file = (doc.parent / path).resolve() if path else doc
                if not file.exists():
                    broken.append(f"{doc.relative_to(ROOT)}: {target} (no such file)")
                elif anchor and anchor not in anchors_of(file):
                    broken.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
        self.assertEqual(broken, [])

    def test_every_sql_block_is_found(self):
        """A ```sql block the parser would miss (indented in a list, say) would go untested."""
        for doc in DOCS:
            fences = len(re.findall(r"^\s*```sql", doc.read_text(), re.M))
            found = sum(1 for b in blocks_of(doc) if b.lang == "sql")
            self.assertEqual(fences, found, f"{doc.relative_to(ROOT)}: a ```sql block not at "
                             "the start of a line is not run; move it out of the list")

    def test_not_run_blocks_say_why(self):
        blocks = [b for doc in DOCS for b in not_run(doc)]
        for block in blocks:
            self.assertTrue(block.marker[1], f"{block.where()}: a not-run block must say why")
        print(f"\n{len(blocks)} SQL blocks not run:", file=sys.stderr)
        for block in blocks:
            print(f"  {block.where()}: {block.marker[1]}", file=sys.stderr)

    def test_a_wrong_output_is_caught(self):
        self.assertTrue(output_matches(" id \n----\n {{id}}\n(1 row)", " id\n----\n 42\n(1 row)"))
        self.assertFalse(output_matches(" id \n----\n 41\n(1 row)", " id\n----\n 42\n(1 row)"))
        self.assertFalse(output_matches(" id \n----\n {{id}}\n(1 row)", " id\n----\n 42\n"))


def anchors_of(file):
    """GitHub's anchors for the headings of a markdown file."""
    anchors, seen = set(), {}
    for heading in re.findall(r"^#+\s+(.*?)\s*$", FENCE.sub("", file.read_text()), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def make_test(doc):
    def test(self):
        ran = self.run_document(doc)
        print(f"\n{doc.relative_to(ROOT)}: {ran} SQL blocks run, {len(not_run(doc))} not run",
              file=sys.stderr)
    return test


for _doc in DOCS:
    if any(b.lang == "sql" for b in blocks_of(_doc)):
        _name = "test_" + re.sub(r"\W", "_", _doc.stem.lower())
        setattr(Docs, _name, make_test(_doc))

if __name__ == "__main__":
    unittest.main()
