"""monitoring/ with the tools people run: Debian's prometheus-postgres-exporter, given
monitoring/postgres_exporter.yml and a role that is only a member of pg_monitor, scrapes real
cosid servers in each state (UP; CLAIMING with no machine id left; DOWN with the lease store out
of reach, then past its deadline; CLOCK_BEHIND; a fixed machine id; STOPPED with none set; a
role or a database it cannot read cosid in), promtool runs monitoring/cosid.rules.yml on each of
those real scrapes (which alerts fire), and checks the rules and runs their unit tests. Without the tools the tests are skipped, except in CI (the CI variable set), where
they fail: scripts/setup.sh installs them."""

import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import unittest
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from helpers.fleet import fleet_server, start_store
from helpers.generators import layout_text
from helpers.leases import (DEADLINE_S, FAST_LEASES, SAFE_GUARD_S, lease_cluster,
                            restart_worker_behind, try_next)
from helpers.pgcluster import ROOT, Cluster, ClusterTest, free_port, wait_for

MONITORING = ROOT / "monitoring"
QUERIES = MONITORING / "postgres_exporter.yml"
RULES = MONITORING / "cosid.rules.yml"
RULE_TESTS = MONITORING / "cosid.rules.test.yml"
DASHBOARD = MONITORING / "cosid-dashboard.json"
EXPORTER = "prometheus-postgres-exporter"
# In the order of cosid_generator_state_code (0 to 5).
STATES = ["UP", "DOWN", "CLAIMING", "LOST", "CLOCK_BEHIND", "STOPPED"]
STATES_BY_CODE = dict(enumerate(STATES))
# A sample line of the exposition format: name, labels, value.
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def tool(name):
    """The path of a program, or skip the test without it (fail in CI)."""
    path = shutil.which(name)
    if path:
        return path
    message = f"{name} is not installed: run scripts/setup.sh"
    if os.environ.get("CI"):
        raise AssertionError(message)
    raise unittest.SkipTest(message)


def parse(text):
    """The samples of a /metrics page: {(name, frozenset of (label, value)): float}."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        name, labels, value = match.groups()
        samples[(name, frozenset(LABEL.findall(labels or "")))] = float(value)
    return samples


class Scrape:
    """One /metrics page of the exporter."""

    def __init__(self, text):
        self.samples = parse(text)

    def names(self):
        return {name for name, _ in self.samples}

    def value(self, name, **labels):
        """The one sample of `name` whose labels include `labels`."""
        found = [value for (n, have), value in self.samples.items()
                 if n == name and set(labels.items()) <= have]
        assert len(found) == 1, f"{name}{labels}: {len(found)} samples"
        return found[0]

    def labels(self, name, **labels):
        found = [dict(have) for (n, have) in self.samples
                 if n == name and set(labels.items()) <= have]
        assert len(found) == 1, f"{name}{labels}: {len(found)} samples"
        return found[0]

    def generator(self, generator):
        """Every cosid_generator_* value of a generator, without the prefix, and its current
        state from cosid_generator_state_active."""
        values = {name[len("cosid_generator_"):]: value
                  for (name, labels), value in self.samples.items()
                  if name.startswith("cosid_generator_") and name != "cosid_generator_state_active"
                  and ("generator", generator) in labels}
        active = {dict(labels)["state"]: value
                  for (name, labels), value in self.samples.items()
                  if name == "cosid_generator_state_active" and ("generator", generator) in labels}
        assert sorted(active) == sorted(STATES), active
        values["states_active"] = sorted(state for state, value in active.items() if value == 1)
        return values


# An alert promtool found firing where the test expected none: its labels line.
FIRED = re.compile(r'^\s*Labels:\{alertname="(\w+)"', re.MULTILINE)


def alerts_firing(scrape, generator):
    """The alerts of monitoring/cosid.rules.yml that fire on what `scrape` says of `generator`
    (with pg_up), the values held for ten minutes: promtool evaluates the rules on the real
    scrape's series, expecting no alert, and lists those that fire."""
    series = []
    for (name, labels), value in sorted(scrape.samples.items()):
        ours = name.startswith("cosid_") and ("generator", generator) in labels
        if not (ours or name == "pg_up") or math.isnan(value):
            continue
        text = ",".join(f'{key}="{label}"' for key, label in
                        sorted({**dict(labels), "job": "postgres", "instance": "exporter"}.items()))
        series.append(f"      - series: '{name}{{{text}}}'\n        values: '{value!r}x40'\n")
    # The scrape answered: Prometheus records up 1 for its target.
    series.append("      - series: 'up{instance=\"exporter\",job=\"postgres\"}'\n"
                  "        values: '1x40'\n")
    rules = re.findall(r"^\s+- alert: (\w+)$", RULES.read_text(), re.MULTILINE)
    checks = "".join(f"      - {{eval_time: 10m, alertname: {rule}, exp_alerts: []}}\n"
                     for rule in rules)
    with tempfile.TemporaryDirectory() as directory:
        test_file = os.path.join(directory, "scrape.test.yml")
        with open(test_file, "w") as out:
            out.write(f"rule_files: ['{RULES}']\nevaluation_interval: 15s\ntests:\n"
                      f"  - interval: 15s\n    input_series:\n{''.join(series)}"
                      f"    alert_rule_test:\n{checks}")
        tested = subprocess.run([tool("promtool"), "test", "rules", test_file],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    fired = set(FIRED.findall(tested.stdout))
    # Silent (success) or failing only for alerts that fired: anything else is a broken test file.
    assert (tested.returncode == 0) == (not fired) and (fired or "SUCCESS" in tested.stdout), \
        tested.stdout
    return fired


class LoopbackProgram:
    """A program serving HTTP on 127.0.0.1:`port`, its output in the file `log`, stopped when the
    test ends."""

    def launch(self, test, command, env, ready_path):
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(command, env=env, stdout=log,
                                            stderr=subprocess.STDOUT)
        test.addCleanup(self.stop)
        wait_for(lambda: self.answers(ready_path), 30,
                 f"{command[0]} on port {self.port} to answer {ready_path}")

    def answers(self, path):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2).read()
            return True
        except (urllib.error.URLError, ConnectionError):
            assert self.process.poll() is None, Path(self.log).read_text()[-3000:]
            return False

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class Exporter(LoopbackProgram):
    """prometheus-postgres-exporter on loopback with cosid's queries, connected as `user` to
    `dbname` of `cluster`."""

    def __init__(self, test, cluster, user, dbname="postgres", preferred_port=25725,
                 form="name"):
        self.port = free_port(preferred_port)
        self.log = cluster.base / f"exporter-{self.port}.log"
        if form == "name":
            # DATA_SOURCE_NAME, the queries on the command line.
            connection = {"DATA_SOURCE_NAME": (f"host=127.0.0.1 port={cluster.port} "
                                               f"user={user} dbname={dbname} sslmode=disable")}
            options = [f"--extend.query-path={QUERIES}"]
        else:
            # As docs/monitoring.md shows it: the address, the user and a password file apart,
            # the queries in the environment.
            password = cluster.base / "exporter.password"
            password.write_text("change-me\n")
            connection = {
                "DATA_SOURCE_URI": f"127.0.0.1:{cluster.port}/{dbname}?sslmode=disable",
                "DATA_SOURCE_USER": user, "DATA_SOURCE_PASS_FILE": str(password),
                "PG_EXPORTER_EXTEND_QUERY_PATH": str(QUERIES)}
            options = []
        environment = {key: value for key, value in os.environ.items()
                       if not key.startswith(("DATA_SOURCE_", "PG_EXPORTER_"))}
        self.launch(test, [tool(EXPORTER), f"--web.listen-address=127.0.0.1:{self.port}",
                           *options], {**environment, **connection}, "/")

    def scrape(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as page:
            return Scrape(page.read().decode())

    def scrape_until(self, condition, timeout, what):
        """The first scrape that meets `condition`."""
        return wait_for(lambda: (lambda scrape: condition(scrape) and scrape)(self.scrape()),
                        timeout, f"{what}; the exporter's log:\n{self.log.read_text()[-2000:]}")



def state_of(scrape, generator):
    """The generator's state code, when cosid_generator_state_code and
    cosid_generator_state_active agree. The exporter runs the two queries one after the other, so
    a scrape taken while the state changes can hold the old state in one and the new in the
    other."""
    try:
        values = scrape.generator(generator)
    except (AssertionError, KeyError):
        return None
    code = values["state_code"]
    if code != code or values["states_active"] != [STATES_BY_CODE.get(int(code))]:
        return None
    return code


class ExporterScrapesCosid(ClusterTest):
    def test_lease_states_up_claiming_down_and_past_the_deadline(self):
        tool(EXPORTER)
        store = self.track(start_store("montools-store", 25720))
        # Other servers hold all 8 machine ids of namespace "tiny" (3 machine bits of safe_js).
        for index in range(8):
            store.query(f"SELECT cosid.lease_claim('tiny', 3, 'other-{index}', false, 600000, "
                        f"'token-{index}', 0, '{layout_text('safe_js')}')")
        server = self.track(fleet_server("montools", 25721, store.port, dict(FAST_LEASES)))
        server.start()
        server.query("CREATE EXTENSION cosid")
        server.query("CREATE ROLE cosid_exporter LOGIN IN ROLE pg_monitor; CREATE ROLE app LOGIN")
        server.query("CREATE DATABASE noext")
        server.query("SELECT cosid_create_generator('tiny', 'safe_js')")
        exporter = Exporter(self, server, "cosid_exporter")

        # UP, and CLAIMING with no machine id left, side by side.
        scrape = exporter.scrape_until(
            lambda s: state_of(s, "default") == 0 and state_of(s, "tiny") == 2
            and s.generator("tiny")["no_machine_id_left"] == 1, 20,
            "default UP and tiny CLAIMING with no machine id left")
        machine_id = int(server.query("SELECT machine_id FROM cosid.status "
                                      "WHERE name = 'default'"))
        self.assertEqual(server.query("SELECT count(cosid_next()) FROM generate_series(1, 25)"),
                         "25")
        # UP again should a renewal have been slow (DOWN for a moment on a loaded machine).
        scrape = exporter.scrape_until(
            lambda s: state_of(s, "default") == 0 and state_of(s, "tiny") == 2, 20,
            "default UP and tiny CLAIMING")
        # Every query ran as a role that is only a member of pg_monitor, cosid's and the
        # exporter's own.
        self.assertEqual((scrape.value("pg_up"), scrape.value("pg_exporter_last_scrape_error")),
                         (1, 0))
        self.assertEqual(scrape.value("pg_exporter_user_queries_load_error"), 0)
        self.assertEqual(scrape.labels("cosid_generator_up", generator="default"),
                         {"generator": "default", "namespace": "cosid", "distributor": "lease",
                          "server": f"127.0.0.1:{server.port}"})
        up = scrape.generator("default")
        print(f"\n  UP: {up}", end=" ")
        self.assertEqual(
            {key: up[key] for key in ("up", "generating", "state_code", "states_active",
                                      "machine_id", "no_machine_id_left", "ids_issued",
                                      "safe_guard_seconds", "guarder_delay_seconds",
                                      "next_tick_waits", "clock_backwards_waits",
                                      "clock_backwards_errors", "renewal_failures")},
            {"up": 1, "generating": 1, "state_code": 0, "states_active": ["UP"],
             "machine_id": machine_id, "no_machine_id_left": 0, "ids_issued": 25,
             "safe_guard_seconds": SAFE_GUARD_S, "guarder_delay_seconds": 0.5,
             "next_tick_waits": 0, "clock_backwards_waits": 0, "clock_backwards_errors": 0,
             "renewal_failures": 0})
        self.assertTrue(0 < up["deadline_seconds"] <= DEADLINE_S, up)
        self.assertTrue(0 <= up["last_renewal_age_seconds"] < DEADLINE_S, up)
        tiny = scrape.generator("tiny")
        print(f"\n  CLAIMING, no machine id left: {tiny}", end=" ")
        self.assertEqual(scrape.labels("cosid_generator_up", generator="tiny")["namespace"],
                         "tiny")
        self.assertEqual(
            {key: tiny[key] for key in ("up", "generating", "state_code", "states_active",
                                        "machine_id", "no_machine_id_left", "ids_issued")},
            {"up": 0, "generating": 0, "state_code": 2, "states_active": ["CLAIMING"],
             "machine_id": -1, "no_machine_id_left": 1, "ids_issued": 0})
        self.assertTrue(math.isnan(tiny["deadline_seconds"]), tiny)
        self.assertEqual(try_next(server, "SELECT cosid_next('tiny')"), (None, "53400"))
        # The alerting rules on these series: none for UP, its own for no machine id left.
        self.assertEqual(alerts_firing(scrape, "default"), set())
        self.assertEqual(alerts_firing(scrape, "tiny"), {"CosidNoMachineIdLeft"})
        # Every cosid metric the alerting rules use is exported.
        used = set(re.findall(r"\bcosid_generator_[a-z_]+", RULES.read_text()))
        self.assertGreater(len(used), 5)
        self.assertEqual(used - scrape.names(), set())

        # The exporter cannot read cosid: a role without pg_monitor, a database without the
        # extension. It connects (pg_up 1), says that a query failed, and exports no cosid
        # metric (the alert CosidMetricsMissing).
        for user, dbname in (("app", "postgres"), ("cosid_exporter", "noext")):
            refused = Exporter(self, server, user, dbname).scrape()
            self.assertEqual((refused.value("pg_up"),
                              refused.value("pg_exporter_last_scrape_error")), (1, 1),
                             (user, dbname))
            self.assertEqual({name for name in refused.names() if name.startswith("cosid")},
                             set(), (user, dbname))
            self.assertEqual(alerts_firing(refused, "default"), {"CosidMetricsMissing"},
                             (user, dbname))

        # DOWN: the lease store out of reach. Still generating, the deadline coming nearer.
        store.stop(mode="immediate")
        scrape = exporter.scrape_until(lambda s: state_of(s, "default") == 1, 10, "DOWN")
        down = scrape.generator("default")
        print(f"\n  DOWN: {down}", end=" ")
        self.assertEqual(
            {key: down[key] for key in ("up", "generating", "states_active", "machine_id",
                                        "no_machine_id_left")},
            {"up": 0, "generating": 1, "states_active": ["DOWN"], "machine_id": machine_id,
             "no_machine_id_left": 0})
        self.assertTrue(0 < down["deadline_seconds"] < DEADLINE_S, down)
        self.assertTrue(0 < down["last_renewal_age_seconds"], down)
        self.assertGreaterEqual(down["renewal_failures"], 1, down)
        # Less than one renewal interval before the deadline (a slow scrape), the deadline's
        # alert fires too.
        near = {"CosidLeaseDeadlineNear"} if down["deadline_seconds"] < 0.5 else set()
        self.assertEqual(alerts_firing(scrape, "default"), {"CosidLeaseRenewalFailing"} | near)
        # Past the deadline: cosid_next() refuses, and the exporter says it does not generate.
        wait_for(lambda: try_next(server)[1] == "55P03", DEADLINE_S + 2, "the deadline")
        scrape = exporter.scrape()
        past = scrape.generator("default")
        print(f"\n  past the deadline: {past}", end=" ")
        self.assertEqual((past["up"], past["generating"], past["states_active"],
                          past["machine_id"]), (0, 0, ["DOWN"], machine_id), past)
        self.assertLess(past["deadline_seconds"], 0, past)
        self.assertTrue(past["last_renewal_age_seconds"] > DEADLINE_S, past)
        self.assertEqual(alerts_firing(scrape, "default"),
                         {"CosidLeaseRenewalFailing", "CosidLeaseDeadlineNear",
                          "CosidGeneratorNotGenerating"})

    def test_clock_behind_the_watermark(self):
        tool(EXPORTER)
        # One machine id, whose watermark a last holder with a clock 8 s ahead left.
        server = self.track(lease_cluster("montools-behind", 25729, **{
            "cosid.timestamp_bits": 41, "cosid.machine_bits": 0, "cosid.sequence_bits": 12,
            "cosid.clock_backwards_broken_threshold": 2000}))
        server.query("CREATE EXTENSION cosid; CREATE ROLE cosid_exporter LOGIN IN ROLE pg_monitor")
        exporter = Exporter(self, server, "cosid_exporter", preferred_port=25726)
        exporter.scrape_until(lambda s: state_of(s, "default") == 0, 20, "default UP")
        # A last holder's clock 8 s ahead of this server's.
        restart_worker_behind(server, 0, 8000)
        scrape = exporter.scrape_until(lambda s: state_of(s, "default") == 4, 10, "CLOCK_BEHIND")
        behind = scrape.generator("default")
        print(f"\n  CLOCK_BEHIND: {behind}", end=" ")
        self.assertEqual(
            {key: behind[key] for key in ("up", "generating", "states_active", "machine_id",
                                          "no_machine_id_left")},
            {"up": 0, "generating": 0, "states_active": ["CLOCK_BEHIND"], "machine_id": -1,
             "no_machine_id_left": 0})
        self.assertEqual(try_next(server)[1], "55P03")
        # Its own alert, not the general one.
        self.assertEqual(alerts_firing(scrape, "default"), {"CosidClockBehindWatermark"})

    def test_a_fixed_machine_id_and_none_set(self):
        tool(EXPORTER)
        cluster = self.track(Cluster("montools-manual", free_port(25722),
                                     {"cosid.distributor": "manual",
                                      "cosid.machine_id": 7}).init())
        # The exporter's role logs in with its password (from DATA_SOURCE_PASS_FILE).
        hba = cluster.data / "pg_hba.conf"
        hba.write_text("host all cosid_exporter 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
        cluster.start()
        cluster.query("CREATE EXTENSION cosid; "
                      "CREATE ROLE cosid_exporter LOGIN PASSWORD 'change-me' IN ROLE pg_monitor")
        self.assertEqual(cluster.query("SELECT count(cosid_next()) FROM generate_series(1, 3)"),
                         "3")
        scrape = Exporter(self, cluster, "cosid_exporter", preferred_port=25727,
                          form="uri").scrape()
        self.assertEqual((scrape.value("pg_up"), scrape.value("pg_exporter_last_scrape_error")),
                         (1, 0))
        self.assertEqual(scrape.labels("cosid_generator_up", generator="default")["distributor"],
                         "manual")
        manual = scrape.generator("default")
        print(f"\n  manual: {manual}", end=" ")
        self.assertEqual(
            {key: manual[key] for key in ("up", "generating", "state_code", "states_active",
                                          "machine_id", "no_machine_id_left", "ids_issued")},
            {"up": 1, "generating": 1, "state_code": 0, "states_active": ["UP"],
             "machine_id": 7, "no_machine_id_left": 0, "ids_issued": 3})
        # No lease: no deadline, no renewal, no lease timings.
        for key in ("deadline_seconds", "last_renewal_age_seconds", "safe_guard_seconds",
                    "guarder_delay_seconds"):
            self.assertTrue(math.isnan(manual[key]), (key, manual))
        self.assertEqual(alerts_firing(scrape, "default"), set())

        # STOPPED: cosid.distributor manual and no cosid.machine_id, a configuration to fix (not
        # a namespace whose machine ids are all held).
        unset = self.track(Cluster("montools-unset", free_port(25723),
                                   {"cosid.distributor": "manual"}).init())
        unset.start()
        unset.query("CREATE EXTENSION cosid; CREATE ROLE cosid_exporter LOGIN IN ROLE pg_monitor")
        scrape = Exporter(self, unset, "cosid_exporter", preferred_port=25728).scrape()
        self.assertEqual((scrape.value("pg_up"), scrape.value("pg_exporter_last_scrape_error")),
                         (1, 0))
        stopped = scrape.generator("default")
        print(f"\n  STOPPED: {stopped}", end=" ")
        self.assertEqual(
            {key: stopped[key] for key in ("up", "generating", "state_code", "states_active",
                                           "machine_id", "no_machine_id_left", "ids_issued")},
            {"up": 0, "generating": 0, "state_code": 5, "states_active": ["STOPPED"],
             "machine_id": -1, "no_machine_id_left": 0, "ids_issued": 0})
        self.assertTrue(math.isnan(stopped["deadline_seconds"]), stopped)
        self.assertEqual(alerts_firing(scrape, "default"), {"CosidGeneratorNotGenerating"})


class Prometheus(LoopbackProgram):
    """A real Prometheus on loopback scraping `targets` every second, with cosid's alerting rules
    loaded, its data in a temporary folder."""

    def __init__(self, test, targets, preferred_port=25730):
        self.port = free_port(preferred_port)
        self.dir = tempfile.mkdtemp(prefix="cosid-prometheus-")
        test.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
        config = os.path.join(self.dir, "prometheus.yml")
        with open(config, "w") as out:
            out.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                      f"rule_files:\n  - {RULES}\n"
                      "scrape_configs:\n  - job_name: cosid\n    static_configs:\n"
                      f"      - targets: {json.dumps(targets)}\n")
        self.log = os.path.join(self.dir, "prometheus.log")
        self.launch(test, [tool("prometheus"), f"--config.file={config}",
                           f"--storage.tsdb.path={os.path.join(self.dir, 'data')}",
                           f"--web.listen-address=127.0.0.1:{self.port}"], None, "/-/ready")

    def api(self, path, **params):
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as page:
            answer = json.load(page)
        assert answer["status"] == "success", answer
        return answer["data"]

    def query(self, expr):
        """The series of an instant query."""
        return self.api("query", query=expr)["result"]

    def alerts(self):
        return {alert["labels"]["alertname"] for alert in self.api("alerts")["alerts"]}



def dashboard_queries():
    """Every query of monitoring/cosid-dashboard.json, as Prometheus runs it once Grafana has put
    in its variables (every instance and generator; a rate over a minute)."""
    dashboard = json.loads(DASHBOARD.read_text())
    queries = []
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = (target["expr"].replace("$instance", ".+").replace("$generator", ".+")
                    .replace("$__rate_interval", "1m"))
            queries.append((panel["title"], expr))
    return dashboard, queries


class Dashboard(ClusterTest):
    def test_every_panel_has_series_from_a_real_prometheus_up_and_down(self):
        """The Grafana dashboard's queries against a real Prometheus scraping the real exporter
        of a server whose lease is UP, then DOWN (its store stopped): each returns series in
        both. The alerting rules, loaded in that Prometheus, have the DOWN one pending."""
        tool(EXPORTER)
        dashboard, queries = dashboard_queries()
        ids = [panel["id"] for panel in dashboard["panels"]]
        self.assertEqual(len(ids), len(set(ids)), "panel ids are unique")
        self.assertEqual({var["name"] for var in dashboard["templating"]["list"]},
                         {"datasource", "instance", "generator"})
        # Every metric the dashboard shows is one the exporter's file defines.
        defined = set(re.findall(r"^    - ([a-z_]+):$", QUERIES.read_text(), re.MULTILINE))
        for metric in set(re.findall(r"\bcosid_generator_([a-z_]+)", DASHBOARD.read_text())):
            self.assertIn(metric, defined)
        store = self.track(start_store("dashboard-store", 25731))
        server = self.track(fleet_server("dashboard", 25732, store.port, dict(FAST_LEASES)))
        server.start()
        server.query("CREATE EXTENSION cosid; "
                     "CREATE ROLE cosid_exporter LOGIN IN ROLE pg_monitor")
        exporter = Exporter(self, server, "cosid_exporter", preferred_port=25733)
        exporter.scrape_until(lambda s: state_of(s, "default") == 0, 30, "default UP")
        prometheus = Prometheus(self, [f"127.0.0.1:{exporter.port}"], preferred_port=25734)

        def every_panel_answers(state_code):
            if not prometheus.query(f"cosid_generator_state_code == {state_code}"):
                return False
            if state_code == 0:
                server.query("SELECT count(cosid_next()) FROM generate_series(1, 100)")
            return all(prometheus.query(expr) for _, expr in queries)
        wait_for(lambda: every_panel_answers(0), 60,
                 f"every panel's query to return series while UP: {queries}")
        rate = prometheus.query('rate(cosid_generator_ids_issued{generator="default"}[1m])')
        self.assertGreater(float(rate[0]["value"][1]), 0, "ids per second while generating")

        store.stop(mode="immediate")
        wait_for(lambda: every_panel_answers(1), 60,
                 f"every panel's query to return series while DOWN: {queries}")
        wait_for(lambda: "CosidLeaseRenewalFailing" in prometheus.alerts(), 30,
                 "the alert of a DOWN lease to be pending in Prometheus")
        print(f"\n  {len(queries)} queries of {len(ids)} panels answered UP and DOWN", end=" ")


class AlertingRules(unittest.TestCase):
    def test_promtool_checks_the_rules_and_runs_their_unit_tests(self):
        promtool = tool("promtool")
        checked = subprocess.run([promtool, "check", "rules", str(RULES)], cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.assertEqual(checked.returncode, 0, checked.stdout)
        rules = re.findall(r"^\s+- alert: (\w+)$", RULES.read_text(), re.MULTILINE)
        records = re.findall(r"^\s+- record: ([\w:]+)$", RULES.read_text(), re.MULTILINE)
        self.assertIn(f"SUCCESS: {len(rules) + len(records)} rules found", checked.stdout)
        tested = subprocess.run([promtool, "test", "rules", str(RULE_TESTS)], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.assertEqual(tested.returncode, 0, tested.stdout)
        self.assertIn("SUCCESS", tested.stdout)
        # Every alert is tested firing, and not firing (an empty exp_alerts).
        unit_tests = RULE_TESTS.read_text()
        for rule in rules:
            checks = re.findall(rf"alertname: {rule}\n\s+exp_alerts:( \[\])?", unit_tests)
            self.assertIn("", checks, f"{rule} is never tested firing")
            self.assertIn(" []", checks, f"{rule} is never tested silent")
        print(f"\n  promtool: {len(rules)} rules checked, unit tests pass", end=" ")

    def test_every_alert_links_to_its_runbook(self):
        """Each alert's runbook_url names the section of docs/troubleshooting.md titled with the
        alert's name, and the section is there."""
        text = RULES.read_text()
        rules = re.findall(r"^\s+- alert: (\w+)$", text, re.MULTILINE)
        runbooks = re.findall(r'^\s+runbook_url: "docs/troubleshooting\.md#([\w-]+)"$', text,
                              re.MULTILINE)
        self.assertEqual(runbooks, [rule.lower() for rule in rules])
        headings = re.findall(r"^### (\w+)$", (ROOT / "docs" / "troubleshooting.md").read_text(),
                              re.MULTILINE)
        self.assertTrue(set(rules) <= set(headings), set(rules) - set(headings))


if __name__ == "__main__":
    unittest.main()
