"""Settings against a real server: bad combinations stop it from starting with a message that
names the settings; a missing machine id lets it start but refuses to generate, saying why; the
stateful_set distributor reads HOSTNAME; a custom layout is used for generating and decoding;
a used-up second is slept out; text arguments work in databases that are not UTF-8."""

import os
import subprocess
import time
import unittest

from pgcluster import Cluster, SqlError, free_port

LAYOUT_RANGE = "Ids of this layout cover"


class Settings(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster("settings", free_port(25120)).init()

    def tearDown(self):
        self.cluster.stop(check=False)

    def start_with(self, settings, env=None):
        """Starts the shared cluster with only these cosid settings; returns whether it started
        and the part of the server log this start wrote."""
        cluster = self.cluster
        cluster.stop(check=False)
        cluster.settings = {"cosid.distributor": "manual", **settings}
        cluster.env = env or {}
        cluster.write_settings()
        log_before = len(cluster.log())
        started = cluster.start(check=False)
        if started:
            cluster.query("CREATE EXTENSION IF NOT EXISTS cosid")
        return started, cluster.log()[log_before:]

    def assert_refused(self, settings, *expected_in_log):
        started, log = self.start_with(settings)
        self.assertFalse(started, f"the server started with {settings}")
        for text in expected_in_log:
            self.assertIn(text, log)
        self.assertNotIn("panic", log)
        self.assertNotIn("XX000", log)

    def test_bits_beyond_63_stop_the_server(self):
        self.assert_refused(
            {"cosid.machine_id": 1, "cosid.timestamp_bits": 42},
            "invalid combination of cosid layout settings",
            "cosid.timestamp_bits (42) + cosid.machine_bits (10) + cosid.sequence_bits (12) = 64",
            "HINT:")

    def test_setting_outside_its_range_stops_the_server(self):
        self.assert_refused({"cosid.machine_bits": 40},
                            'FATAL:  40 is outside the valid range for parameter '
                            '"cosid.machine_bits" (0 .. 31)')

    def test_machine_id_beyond_the_machine_bits_stops_the_server(self):
        self.assert_refused({"cosid.machine_bits": 3, "cosid.machine_id": 8},
                            'invalid value for parameter "cosid.machine_id": 8',
                            "outside the range 0 .. 7")

    def test_bad_epoch_stops_the_server(self):
        self.assert_refused({"cosid.machine_id": 1, "cosid.epoch": "'next week'"},
                            'FATAL:  invalid value for parameter "cosid.epoch": "next week"')

    def test_epoch_must_be_whole_seconds_for_the_second_unit(self):
        self.assert_refused({"cosid.machine_id": 1, "cosid.time_unit": "second",
                             "cosid.timestamp_bits": 31, "cosid.sequence_bits": 22,
                             "cosid.epoch": "'2020-01-01T00:00:00.5Z'"},
                            "must be a whole second", "Set cosid.epoch to a whole second")

    def test_layout_that_does_not_cover_the_current_time_stops_the_server(self):
        # An epoch in the future: every id would be before it.
        self.assert_refused({"cosid.distributor": "lease", "cosid.epoch": "'2099-01-01'"},
                            "FATAL:  cosid.epoch is in the future",
                            "DETAIL:  Ids of this layout cover 2099-01-01 00:00:00.000+00 to "
                            "2168-09-07 15:47:35.551+00: cosid.epoch plus 2^41 milliseconds "
                            "(cosid.timestamp_bits). The clock reads ",
                            "HINT:  Set cosid.epoch to an instant in the past")
        # An epoch so far back that the timestamp bits ran out long ago.
        self.assert_refused({"cosid.machine_id": 1, "cosid.epoch": "'1900-01-01'"},
                            "FATAL:  the current time is after the last instant of the cosid "
                            "layout",
                            "DETAIL:  Ids of this layout cover 1900-01-01 00:00:00.000+00 to "
                            "1969-09-07 15:47:35.551+00",
                            "HINT:  Raise cosid.timestamp_bits, or set cosid.epoch")
        self.assert_refused({"cosid.machine_id": 1, "cosid.time_unit": "second",
                             "cosid.timestamp_bits": 20, "cosid.epoch": "'2020-01-01'"},
                            "FATAL:  the current time is after the last instant",
                            "to 2020-01-13 03:16:15.999+00: cosid.epoch plus 2^20 seconds")
        # Nothing was leased or written by the refused starts: the server starts as before.
        started, _ = self.start_with({"cosid.machine_id": 1})
        self.assertTrue(started)
        self.cluster.query("SELECT cosid_next()")

    def test_a_used_up_second_is_slept_out_not_spun(self):
        """With the second unit and one sequence bit, each second holds two ids: 8 ids take
        about 4 s, which the backend must spend sleeping, not spinning."""
        started, _ = self.start_with({"cosid.machine_id": 1, "cosid.time_unit": "second",
                                      "cosid.sequence_bits": 1})
        self.assertTrue(started)
        # The backend reads its own CPU time (fields 14 and 15 of /proc/self/stat, in clock
        # ticks) and the wall clock before and after generating, in one session.
        probe = ("SELECT btrim(split_part(pg_read_file('/proc/self/stat'), ') ', 2), E'\\n'), "
                 "extract(epoch FROM clock_timestamp())")
        result = subprocess.run(
            self.cluster.psql_command("postgres", "-At", "-v", "ON_ERROR_STOP=1", "-c", probe,
                                      "-c", "SELECT count(DISTINCT id) FROM (SELECT cosid_next() "
                                            "AS id FROM generate_series(1, 8)) ids",
                                      "-c", probe),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        before, count, after = result.stdout.split("\n")[:3]

        def cpu_and_wall(line):
            stat, wall = line.rsplit("|", 1)
            fields = stat.split()
            # After "pid (comm) ", field 3 (state) is fields[0]: utime is field 14, stime 15.
            ticks = int(fields[11]) + int(fields[12])
            return ticks / os.sysconf("SC_CLK_TCK"), float(wall)

        (cpu_before, wall_before), (cpu_after, wall_after) = map(cpu_and_wall, (before, after))
        self.assertEqual(count, "8")
        wall, cpu = wall_after - wall_before, cpu_after - cpu_before
        self.assertGreater(wall, 2.5, "8 ids at 2 per second wait for at least 3 seconds")
        self.assertLess(cpu, 0.2 * wall,
                        f"the backend used {cpu:.2f} s of CPU in {wall:.2f} s waiting for ticks")
        waits = int(self.cluster.query("SELECT next_tick_waits FROM cosid.status"))
        self.assertGreaterEqual(waits, 3)
        # The sleep is cancellable: a statement timeout ends it, well before the ids would come.
        began = time.monotonic()
        with self.assertRaises(SqlError) as cancelled:
            self.cluster.query("SET statement_timeout = '200ms'; "
                               "SELECT cosid_next() FROM generate_series(1, 40)")
        self.assertEqual(cancelled.exception.sqlstate, "57014")
        self.assertLess(time.monotonic() - began, 5)

    def test_text_arguments_in_databases_that_are_not_utf8(self):
        started, _ = self.start_with({"cosid.machine_id": 1})
        self.assertTrue(started)
        vector = "295913926632165376"
        for database, encoding in [("latin", "LATIN1"), ("ascii", "SQL_ASCII")]:
            with self.subTest(encoding=encoding):
                self.cluster.query(f"DROP DATABASE IF EXISTS {database}")
                self.cluster.query(f"CREATE DATABASE {database} TEMPLATE template0 ENCODING "
                                   f"'{encoding}' LC_COLLATE 'C' LC_CTYPE 'C'")
                self.cluster.query("CREATE EXTENSION cosid", db=database)
                # E'\xe9' is "é" in LATIN1, and a byte that is not UTF-8 in SQL_ASCII.
                for call in [r"cosid_from_radix62(E'\xe9')",
                             r"cosid_from_radix62(E'0LrHucXALb\xe9')",
                             r"cosid_from_friendly(E'2022\xe90320053617924-5-0')",
                             r"cosid_from_friendly(E'20220320053617924-5-\xe9')",
                             r"cosid_from_friendly(E'\xe9')"]:
                    with self.assertRaises(SqlError, msg=call) as refused:
                        self.cluster.query(f"SELECT {call}", db=database)
                    self.assertEqual(refused.exception.sqlstate, "22023", refused.exception.stderr)
                    self.assertRegex(refused.exception.message,
                                     r'^invalid cosid (Radix62|friendly) id: "[ -~]*\\u(00E9|FFFD)')
                    self.assertIn("DETAIL:", refused.exception.stderr)
                    self.assertNotIn("panicked", refused.exception.stderr)
                self.assertEqual(self.cluster.rows(
                    "SELECT cosid_from_radix62('0LrHucXALbs'), cosid_from_radix62('LrHucXALbs'), "
                    "cosid_from_friendly('20220320053617924-0005-0000'), "
                    "cosid_to_radix62(295913926632165376), cosid_friendly(295913926632165376)",
                    db=database)[0],
                    [vector, vector, vector, "0LrHucXALbs", "20220320053617924-5-0"])
        # A no-break space (LATIN1 0xA0) around the parts is a blank, as in a UTF-8 database.
        self.assertEqual(self.cluster.query(
            "SELECT cosid_from_friendly(chr(160) || '20220320053617924-5-0' || chr(160))",
            db="latin"), vector)
        self.assertEqual(self.cluster.query(
            "SELECT cosid_from_friendly(chr(160) || '20220320053617924-5-0' || chr(160))"),
            vector)

    def test_spin_threshold_beyond_broken_threshold_stops_the_server(self):
        self.assert_refused({"cosid.machine_id": 1,
                             "cosid.clock_backwards_spin_threshold": "50ms",
                             "cosid.clock_backwards_broken_threshold": "10ms"},
                            "cosid.clock_backwards_spin_threshold exceeds")

    def test_namespace_too_long_stops_the_server(self):
        self.assert_refused({"cosid.machine_id": 1, "cosid.namespace": "'" + "n" * 64 + "'"},
                            'invalid value for parameter "cosid.namespace"')

    def test_negative_lease_duration_stops_the_server(self):
        self.assert_refused({"cosid.distributor": "lease", "cosid.guarder_delay": -5},
                            'FATAL:  -5 ms is outside the valid range for parameter '
                            '"cosid.guarder_delay" (1 .. 2147483647)')

    def test_initial_delay_beyond_the_safe_guard_stops_the_server(self):
        self.assert_refused({"cosid.distributor": "lease", "cosid.safe_guard_duration": "'4s'",
                             "cosid.guarder_delay": "'1s'", "cosid.guarder_initial_delay": "'5s'"},
                            "invalid combination of cosid lease settings",
                            "cosid.guarder_initial_delay (5000 ms) must be shorter than "
                            "cosid.safe_guard_duration minus its margin (3600 ms)")

    def test_renewals_slower_than_the_safe_guard_stop_the_server(self):
        self.assert_refused({"cosid.distributor": "lease", "cosid.safe_guard_duration": "'4s'",
                             "cosid.guarder_delay": "'1min'",
                             "cosid.guarder_initial_delay": "'1s'"},
                            "cosid.guarder_delay (60000 ms) must be shorter than")

    def test_stable_without_an_instance_id_stops_the_server(self):
        self.assert_refused({"cosid.distributor": "lease", "cosid.stable": "on"},
                            'invalid value for parameter "cosid.stable": on',
                            "HINT:  Set cosid.instance_id")

    def test_bad_lease_store_connection_string_stops_the_server(self):
        self.assert_refused({"cosid.distributor": "lease",
                             "cosid.lease_store": "'host=store sslmode=verify-full'"},
                            'FATAL:  invalid value for parameter "cosid.lease_store"',
                            "sslrootcert must name the certificate")
        self.assert_refused({"cosid.distributor": "lease",
                             "cosid.lease_store": "'postgresql://store/cosid?sslmode'"},
                            'The URL parameter "sslmode" has no value')
        self.assert_refused({"cosid.distributor": "lease",
                             "cosid.lease_store": "'host=store sslmode=require sslcert=/c.crt'"},
                            "sslcert and sslkey must be given together")

    def test_unset_machine_id_refuses_to_generate_and_says_why(self):
        started, log = self.start_with({})
        self.assertTrue(started)
        self.assertIn('WARNING:  cosid has no machine id in namespace "cosid"', log)
        with self.assertRaises(SqlError) as refused:
            self.cluster.query("SELECT cosid_next()")
        self.assertEqual(refused.exception.sqlstate, "55000")
        self.assertIn("cosid.machine_id is not set", refused.exception.stderr)
        self.assertIn("HINT:  Set cosid.machine_id to a value from 0 to 1023",
                      refused.exception.stderr)
        state, machine_id, last_error = self.cluster.rows(
            "SELECT state, machine_id, last_error FROM cosid.status")[0]
        self.assertEqual((state, machine_id), ("STOPPED", ""))
        self.assertIn("cosid.machine_id is not set", last_error)
        # Decoding still works.
        self.assertEqual(self.cluster.query("SELECT cosid_friendly(295913926632165376)"),
                         "20220320053617924-5-0")

    def test_stateful_set_takes_the_hostname_ordinal(self):
        started, _ = self.start_with({"cosid.distributor": "stateful_set"},
                                     env={"HOSTNAME": "orders-db-3"})
        self.assertTrue(started)
        self.assertEqual(
            self.cluster.query("SELECT machine_id FROM cosid_decode(cosid_next())"), "3")
        self.assertEqual(
            self.cluster.rows("SELECT distributor, state, machine_id FROM cosid.status")[0],
            ["stateful_set", "UP", "3"])

    def test_stateful_set_without_an_ordinal_refuses_to_generate(self):
        for hostname, expected in [("db", 'HOSTNAME "db" does not end in an ordinal'),
                                   (None, "HOSTNAME environment variable is not set"),
                                   ("pg-8", 'HOSTNAME "pg-8" gives ordinal 8, outside the range')]:
            with self.subTest(hostname=hostname):
                started, _ = self.start_with(
                    {"cosid.distributor": "stateful_set", "cosid.machine_bits": 3},
                    env={"HOSTNAME": hostname})
                self.assertTrue(started)
                with self.assertRaises(SqlError) as refused:
                    self.cluster.query("SELECT cosid_next()")
                self.assertEqual(refused.exception.sqlstate, "55000")
                self.assertIn(expected, refused.exception.stderr)
                self.assertIn("HINT:", refused.exception.stderr)

    def test_custom_layout_generates_and_decodes(self):
        started, _ = self.start_with({
            "cosid.machine_id": 700, "cosid.time_unit": "second", "cosid.epoch": "'2024-01-01'",
            "cosid.timestamp_bits": 31, "cosid.machine_bits": 10, "cosid.sequence_bits": 22,
            "cosid.sequence_reset_threshold": 0})
        self.assertTrue(started)
        ids = [int(v) for v in self.cluster.query(
            "SELECT cosid_next() FROM generate_series(1, 5000)").split()]
        self.assertEqual(len(set(ids)), 5000)
        self.assertEqual(ids, sorted(ids))
        row = self.cluster.rows(
            f"SET timezone = 'UTC'; SELECT d.machine_id, "
            f"abs(extract(epoch FROM d.ts - now())) < 60, "
            f"extract(milliseconds FROM d.ts)::int % 1000, "
            f"length(cosid_friendly({ids[-1]})), "
            f"cosid_from_friendly(cosid_friendly({ids[-1]})) = {ids[-1]}, "
            f"({ids[-1]} >> 32) = extract(epoch FROM d.ts - '2024-01-01+00')::bigint "
            f"FROM cosid_decode({ids[-1]}) d")[0]
        self.assertEqual(row, ["700", "t", "0", str(14 + 1 + 3 + 1 + len(str(ids[-1] & 0x3FFFFF))),
                               "t", "t"])
        status = self.cluster.rows(
            "SELECT epoch, time_unit, timestamp_bits, machine_bits, sequence_bits, "
            "sequence_reset_threshold FROM cosid.status")[0]
        self.assertEqual(status[1:], ["second", "31", "10", "22", "0"])
        # Before this layout's epoch, there are no ids.
        with self.assertRaises(SqlError) as refused:
            self.cluster.query("SELECT cosid_from_timestamp('2023-12-31 23:59:59+00')")
        self.assertEqual(refused.exception.sqlstate, "22008")

    def test_friendly_form_after_the_year_9999_is_refused(self):
        started, _ = self.start_with({"cosid.machine_id": 1, "cosid.timestamp_bits": 50,
                                      "cosid.machine_bits": 1, "cosid.sequence_bits": 12})
        self.assertTrue(started)
        last = (1 << 63) - 1
        with self.assertRaises(SqlError) as refused:
            self.cluster.query(f"SELECT cosid_friendly({last})")
        self.assertEqual(refused.exception.sqlstate, "22008")
        self.assertIn("after the year 9999", refused.exception.stderr)

    def test_clock_thresholds_reload_on_sighup(self):
        started, _ = self.start_with({"cosid.machine_id": 1})
        self.assertTrue(started)
        self.assertEqual(self.cluster.query("SHOW cosid.clock_backwards_broken_threshold"),
                         "500ms")
        self.cluster.query("ALTER SYSTEM SET cosid.clock_backwards_broken_threshold = '2s'")
        self.cluster.query("SELECT pg_reload_conf()")
        import time
        for _ in range(50):
            if self.cluster.query("SHOW cosid.clock_backwards_broken_threshold") == "2s":
                break
            time.sleep(0.1)
        self.assertEqual(self.cluster.query("SHOW cosid.clock_backwards_broken_threshold"), "2s")
        self.cluster.query("ALTER SYSTEM RESET cosid.clock_backwards_broken_threshold")


if __name__ == "__main__":
    unittest.main()
