"""Settings against a real server: bad combinations stop it from starting with a message that
names the settings; a missing machine id lets it start but refuses to generate, saying why; the
stateful_set distributor reads HOSTNAME; a custom layout is used for generating and decoding."""

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
