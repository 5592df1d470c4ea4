"""Named generators of CosId's four layouts against CosId's own ids (tests/vectors/
cosid-layouts.json, written by CosId's classes): every decode and format function, given the
generator's name, must read and write each id as CosId does. And the point of the `safe_js`
layout: its ids survive JSON read as JavaScript numbers (doubles), as node-postgres or a browser
would read them."""

import json
import unittest

from helpers.leases import FAST_LEASES
from helpers.pgcluster import ROOT, Cluster, SqlError, free_port, wait_for, wait_for_answer

VECTORS = json.loads((ROOT / "tests" / "vectors" / "cosid-layouts.json").read_text())["layouts"]


def literal(text):
    return "'" + text.replace("'", "''") + "'"


class Layouts(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster("layouts", free_port(25750), dict(FAST_LEASES)).init()
        cls.cluster.start()
        cls.cluster.query("CREATE EXTENSION cosid")
        for layout in VECTORS:
            cls.cluster.query(f"SELECT cosid_create_generator('v_{layout}', '{layout}')")

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    def test_generators_have_cosids_layouts(self):
        for layout, cosid in VECTORS.items():
            with self.subTest(layout=layout):
                row = self.cluster.rows(
                    "SELECT namespace, epoch_ms, time_unit, timestamp_bits, machine_bits, "
                    f"sequence_bits FROM cosid.generator WHERE name = 'v_{layout}'")
                self.assertEqual(row, [[
                    f"v_{layout}", str(cosid["epoch_ms"]), cosid["time_unit"],
                    str(cosid["timestamp_bits"]), str(cosid["machine_bits"]),
                    str(cosid["sequence_bits"])]])

    def test_every_vector_reads_and_writes_as_in_cosid(self):
        columns = ["decode_ms", "decode_machine_id", "decode_sequence", "timestamp_ms",
                   "friendly", "from_friendly", "from_friendly_padded", "radix62",
                   "from_radix62", "from_radix62_unpadded", "from_timestamp"]
        checked = 0
        for layout, cosid in VECTORS.items():
            generator = f"'v_{layout}'"
            values = ",\n".join(
                f"({n}, {v['id']}::bigint, {v['timestamp_ms']}::bigint, {literal(v['friendly'])}, "
                f"{literal(v['friendly_padded'])}, {literal(v['radix62'])}, "
                f"{literal(v['radix62_unpadded'])})"
                for n, v in enumerate(cosid["vectors"]))
            sql = f"""
                SELECT (extract(epoch FROM d.ts) * 1000)::bigint, d.machine_id, d.sequence,
                       (extract(epoch FROM cosid_timestamp(v.id, {generator})) * 1000)::bigint,
                       cosid_friendly(v.id, {generator}),
                       cosid_from_friendly(v.friendly, {generator}),
                       cosid_from_friendly(v.padded, {generator}),
                       cosid_to_radix62(v.id, {generator}),
                       cosid_from_radix62(v.radix62, {generator}),
                       cosid_from_radix62(v.unpadded, {generator}),
                       cosid_from_timestamp(
                           timestamptz 'epoch' + v.ms * interval '1 millisecond', {generator})
                  FROM (VALUES {values}) v(n, id, ms, friendly, padded, radix62, unpadded),
                       cosid_decode(v.id, {generator}) d
                 ORDER BY v.n"""
            # A generator just created is known everywhere within about a second.
            rows = wait_for_answer(self.cluster, sql, {"42704", "55P03"})
            self.assertEqual(len(rows), len(cosid["vectors"]), sql)
            shift = cosid["machine_bits"] + cosid["sequence_bits"]
            for vector, row in zip(cosid["vectors"], rows):
                with self.subTest(layout=layout, id=vector["id"], note=vector["note"]):
                    expected = [vector["timestamp_ms"], vector["machine_id"], vector["sequence"],
                                vector["timestamp_ms"], vector["friendly"], vector["id"],
                                vector["id"], vector["radix62"], vector["id"], vector["id"],
                                vector["id"] >> shift << shift]
                    got = dict(zip(columns, row))
                    self.assertEqual(got, dict(zip(columns, [str(e) for e in expected])),
                                     f"generator {generator}, id {vector['id']}:\n{sql}")
                    checked += 1
        self.assertGreaterEqual(checked, 32)

    def test_safe_js_ids_survive_javascript_numbers(self):
        self.cluster.query("SELECT cosid_create_generator('js', 'safe_js')")
        # A new generator answers once the lease worker holds its lease.
        wait_for_answer(self.cluster, "SELECT cosid_next('js')", {"42704", "55P03"})
        rows = self.cluster.rows("""
            WITH ids AS MATERIALIZED (
                SELECT n, cosid_next('js') AS id FROM generate_series(1, 1000) n)
            SELECT id, json_build_object('id', id)::text FROM ids ORDER BY n""")
        self.assertEqual(len(rows), 1000)
        ids = []
        for id_text, json_text in rows:
            id_ = int(id_text)
            # What JSON.parse does: every number is a double.
            number = json.loads(json_text, parse_int=float)["id"]
            self.assertIsInstance(number, float)
            self.assertEqual(int(number), id_, json_text)
            self.assertLess(id_, 2**53)
            ids.append(id_)
        self.assertEqual(ids, sorted(set(ids)), "ids of one session strictly increase")
        # They are the js generator's: its machine id, in its own namespace.
        (namespace, machine_id), = self.cluster.rows(
            "SELECT namespace, machine_id FROM cosid.status WHERE name = 'js'")
        self.assertEqual(namespace, "js")
        self.assertEqual({(i >> 9) & 7 for i in ids}, {int(machine_id)})
        decoded = self.cluster.rows(f"SELECT machine_id FROM cosid_decode({ids[-1]}, 'js')")
        self.assertEqual(decoded, [[machine_id]])
        # The largest id of the layout, 2^53 - 1, survives too; an id of the millisecond layout
        # does not (which is why safe_js exists).
        for layout, survives in [("safe_js", True), ("millisecond", False)]:
            largest = VECTORS[layout]["vectors"][-1]["id"]
            (json_text,), = self.cluster.rows(f"SELECT json_build_object('id', {largest}::bigint)")
            number = json.loads(json_text, parse_int=float)["id"]
            self.assertEqual(int(number) == largest, survives, f"{layout}: {json_text}")

    def test_each_generator_resets_its_sequence_at_its_layouts_threshold(self):
        # CosId's SnowflakeId.defaultSequenceResetThreshold: half the maximum sequence.
        expected = {"millisecond": 2047, "second": 2097151, "safe_js": 255,
                    "safe_js_second": 262143}
        self.assertEqual(set(expected), set(VECTORS))
        for layout, threshold in expected.items():
            with self.subTest(layout=layout):
                # Published (and so in cosid.status) once recorded in the data directory.
                wait_for(lambda: self.cluster.query(
                    f"SELECT count(*) FROM cosid.status WHERE name = 'v_{layout}'") == "1", 30,
                    f"v_{layout} in cosid.status")
                rows = wait_for_answer(
                    self.cluster,
                    "SELECT s.sequence_reset_threshold, g.sequence_reset_threshold IS NULL "
                    "FROM cosid.status s JOIN cosid.generator g USING (name) "
                    f"WHERE name = 'v_{layout}' AND cosid_next(name) > 0", {"42704", "55P03"})
                self.assertEqual(rows, [[str(threshold), "t"]])
        # The default generator keeps cosid.sequence_reset_threshold, -1 by default: its
        # layout's, 2047 for the default layout.
        self.assertEqual(
            self.cluster.rows("SELECT current_setting('cosid.sequence_reset_threshold'), "
                              "sequence_reset_threshold FROM cosid.status WHERE name = 'default'"),
            [["-1", "2047"]])

    def paced_sequences(self, generator, count):
        """The sequences of `count` ids of `generator`, one about every 1.5 ms: each in a tick
        of its own, as an application issuing a few hundred ids a second gets them."""
        wait_for_answer(self.cluster, f"SELECT cosid_next('{generator}')", {"42704", "55P03"})
        table = f"paced_{generator}"
        self.cluster.query(f"CREATE TABLE {table} (n int, id bigint)")
        self.cluster.query(f"""
            DO $$
            BEGIN
                FOR n IN 1..{count} LOOP
                    INSERT INTO {table} VALUES (n, cosid_next('{generator}'));
                    PERFORM pg_sleep(0.0015);
                END LOOP;
            END $$""")
        rows = self.cluster.rows(f"""
            SELECT d.sequence, (extract(epoch FROM d.ts) * 1000)::bigint
              FROM {table} p, cosid_decode(p.id, '{generator}') d ORDER BY p.n""")
        self.assertEqual(len(rows), count)
        ticks = [int(tick) for _, tick in rows]
        self.assertEqual(len(set(ticks)), count, "one id per millisecond")
        return [int(sequence) for sequence, _ in rows]

    def test_safe_js_sequence_stays_at_or_below_255_at_one_id_per_1_5_ms(self):
        # Every id is in a new millisecond, so the sequence climbs by one per id until it has
        # reached the threshold. With CosId's 255 it restarts there; with the millisecond
        # layout's 2047, never reached by 9 bits, it climbs to 511 and wraps.
        self.cluster.query("SELECT cosid_create_generator('paced', 'safe_js')")
        sequences = self.paced_sequences("paced", 700)
        peak = sequences.index(max(sequences))
        self.assertEqual(max(sequences), 255,
                         f"sequences around the highest: {sequences[max(0, peak - 3):peak + 3]}")
        self.assertIn(1, sequences[256:], "restarted after reaching 255")

    def test_the_threshold_argument_overrides_the_layouts_and_is_checked(self):
        self.cluster.query(
            "SELECT cosid_create_generator('every_tick', 'safe_js', sequence_reset_threshold => 0)")
        # 0: every new millisecond restarts the sequence, so each paced id has sequence 1.
        self.assertEqual(set(self.paced_sequences("every_tick", 50)), {1})
        self.assertEqual(
            self.cluster.rows("SELECT s.sequence_reset_threshold, g.sequence_reset_threshold "
                              "FROM cosid.status s JOIN cosid.generator g USING (name) "
                              "WHERE name = 'every_tick'"),
            [["0", "0"]])
        for layout, threshold, largest in [("safe_js", 512, 511), ("safe_js", -1, 511),
                                           ("second", 4194304, 4194303)]:
            with self.subTest(layout=layout, threshold=threshold):
                with self.assertRaises(SqlError) as refused:
                    self.cluster.query(
                        f"SELECT cosid_create_generator('refused', '{layout}', "
                        f"sequence_reset_threshold => {threshold})")
                self.assertEqual(refused.exception.sqlstate, "22023")
                self.assertIn(f"sequence_reset_threshold must be from 0 to {largest}, "
                              f"not {threshold}", refused.exception.stderr)
                self.assertIn("HINT:", refused.exception.stderr)
        # The largest is accepted; a row written past the function is refused by the table.
        self.cluster.query("BEGIN; SELECT cosid_create_generator('largest', 'safe_js', "
                           "sequence_reset_threshold => 511); ROLLBACK")
        with self.assertRaises(SqlError) as refused:
            self.cluster.query("UPDATE cosid.generator SET sequence_reset_threshold = 512 "
                               "WHERE name = 'every_tick'")
        self.assertEqual(refused.exception.sqlstate, "23514")


if __name__ == "__main__":
    unittest.main()
