-- Named generators, defined in cosid.database ("postgres") and using the server's fixed machine
-- id 5: CosId's four layouts against CosId's own ids (data/cosid-layouts.json), each layout's
-- sequence reset threshold, ids exact as JavaScript numbers, columns converted to a named
-- generator, and a namespace a LATIN1 database cannot show.
\set VERBOSITY default
\set SHOW_CONTEXT never
\getenv abs_srcdir PG_ABS_SRCDIR
\set vectors_file :abs_srcdir '/data/cosid-layouts.json'
\set vectors `cat :'vectors_file'`
\c postgres
CREATE EXTENSION cosid;

-- A generator is usable once the worker has published it, within about a second of its creation;
-- until then it is refused with 42704 or 55P03.
CREATE FUNCTION pg_temp.wait_for_generator(generator text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    FOR attempt IN 1..3000 LOOP
        BEGIN
            IF cosid_next(generator) > 0
               AND EXISTS (SELECT FROM cosid.status WHERE name = generator AND state = 'UP') THEN
                RETURN 'UP';
            END IF;
        EXCEPTION WHEN undefined_object OR lock_not_available THEN
            NULL;
        END;
        PERFORM pg_sleep(0.01);
    END LOOP;
    RAISE 'cosid generator % is not usable after 30 s', generator;
END $$;

-- One generator of each of CosId's layouts, with CosId's values.
SELECT layout, cosid_create_generator('v_' || layout, layout)
  FROM json_object_keys(:'vectors'::json -> 'layouts') layout;
SELECT layout, pg_temp.wait_for_generator('v_' || layout)
  FROM json_object_keys(:'vectors'::json -> 'layouts') layout;
SELECT g.name, g.namespace, g.epoch_ms, g.time_unit, g.timestamp_bits, g.machine_bits,
       g.sequence_bits,
       g.namespace = 'v_' || l.layout
       AND g.epoch_ms = (l.spec ->> 'epoch_ms')::bigint
       AND g.time_unit = l.spec ->> 'time_unit'
       AND g.timestamp_bits = (l.spec ->> 'timestamp_bits')::int
       AND g.machine_bits = (l.spec ->> 'machine_bits')::int
       AND g.sequence_bits = (l.spec ->> 'sequence_bits')::int AS as_in_cosid
  FROM json_each(:'vectors'::json -> 'layouts') l(layout, spec)
  JOIN cosid.generator g ON g.name = 'v_' || l.layout
 ORDER BY g.name;

-- Every decode and format function, given the generator's name, reads and writes each of CosId's
-- ids as CosId does.
CREATE TEMP TABLE vectors AS
SELECT l.layout, v.n, (v.vector ->> 'id')::bigint AS id,
       (v.vector ->> 'timestamp_ms')::bigint AS ms, (v.vector ->> 'machine_id')::int AS machine_id,
       (v.vector ->> 'sequence')::int AS sequence, v.vector ->> 'friendly' AS friendly,
       v.vector ->> 'friendly_padded' AS padded, v.vector ->> 'radix62' AS radix62,
       v.vector ->> 'radix62_unpadded' AS unpadded,
       (l.spec ->> 'machine_bits')::int + (l.spec ->> 'sequence_bits')::int AS shift
  FROM json_each(:'vectors'::json -> 'layouts') l(layout, spec),
       json_array_elements(l.spec -> 'vectors') WITH ORDINALITY v(vector, n);
SELECT v.layout, v.n, v.id, (extract(epoch FROM d.ts) * 1000)::bigint AS ms, d.machine_id,
       d.sequence, cosid_friendly(v.id, g.name) AS friendly,
       cosid_to_radix62(v.id, g.name) AS radix62,
       (extract(epoch FROM d.ts) * 1000)::bigint = v.ms
       AND d.machine_id = v.machine_id
       AND d.sequence = v.sequence
       AND (extract(epoch FROM cosid_timestamp(v.id, g.name)) * 1000)::bigint = v.ms
       AND cosid_friendly(v.id, g.name) = v.friendly
       AND cosid_from_friendly(v.friendly, g.name) = v.id
       AND cosid_from_friendly(v.padded, g.name) = v.id
       AND cosid_to_radix62(v.id, g.name) = v.radix62
       AND cosid_from_radix62(v.radix62, g.name) = v.id
       AND cosid_from_radix62(v.unpadded, g.name) = v.id
       AND cosid_from_timestamp(timestamptz 'epoch' + v.ms * interval '1 millisecond', g.name)
           = v.id >> v.shift << v.shift AS as_in_cosid
  FROM vectors v, LATERAL (SELECT 'v_' || v.layout AS name) g, cosid_decode(v.id, g.name) d
 ORDER BY v.layout, v.n;

-- Each generator resets its sequence at its layout's threshold, CosId's: half the largest
-- sequence. The default generator keeps cosid.sequence_reset_threshold, -1: its layout's.
SELECT s.name, s.sequence_reset_threshold, g.sequence_reset_threshold IS NULL AS the_layouts
  FROM cosid.status s JOIN cosid.generator g USING (name)
 WHERE name LIKE 'v\_%' AND cosid_next(name) > 0
 ORDER BY name;
SELECT current_setting('cosid.sequence_reset_threshold'), sequence_reset_threshold
  FROM cosid.status WHERE name = 'default';

-- The ids of a safe_js generator survive JSON read as JavaScript numbers (doubles); the
-- millisecond layout's largest id does not.
CREATE FUNCTION pg_temp.exact_as_a_double(id bigint) RETURNS boolean LANGUAGE sql AS $$
    SELECT CASE WHEN number < 2::float8 ^ 63 THEN number::bigint = id ELSE false END
      FROM (SELECT (json_build_object('id', id) ->> 'id')::float8 AS number) j $$;
SELECT cosid_create_generator('js', 'safe_js');
SELECT pg_temp.wait_for_generator('js');
CREATE TEMP TABLE js_ids AS SELECT n, cosid_next('js') AS id FROM generate_series(1, 1000) n;
SELECT count(*) AS ids, bool_and(pg_temp.exact_as_a_double(id)) AS exact_as_doubles,
       bool_and(id < 9007199254740992) AS below_2_53
  FROM js_ids;
SELECT bool_and(id > previous) AS strictly_increasing
  FROM (SELECT id, lag(id) OVER (ORDER BY n) AS previous FROM js_ids) s;
SELECT s.namespace, s.machine_id, bool_and(((i.id >> 9) & 7) = s.machine_id) AS in_every_id,
       (SELECT (cosid_decode(id, 'js')).machine_id FROM js_ids ORDER BY n DESC LIMIT 1) AS decoded
  FROM js_ids i, cosid.status s
 WHERE s.name = 'js'
 GROUP BY s.namespace, s.machine_id;
SELECT layout, id, pg_temp.exact_as_a_double(id) AS survives
  FROM (SELECT layout, (spec -> 'vectors' -> -1 ->> 'id')::bigint AS id
          FROM json_each(:'vectors'::json -> 'layouts') l(layout, spec)) largest
 WHERE layout IN ('safe_js', 'millisecond')
 ORDER BY layout;

-- Ids paced at one every 1.5 ms, each in a tick of its own: a safe_js sequence climbs to CosId's
-- 255 and restarts; with the millisecond layout's 2047 it would climb to 511 and wrap.
CREATE FUNCTION pg_temp.paced(generator text, ids integer) RETURNS TABLE (n integer, id bigint)
LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..ids LOOP
        PERFORM pg_sleep(0.0015);
        n := i;
        id := cosid_next(generator);
        RETURN NEXT;
    END LOOP;
END $$;
SELECT cosid_create_generator('paced', 'safe_js');
SELECT pg_temp.wait_for_generator('paced');
CREATE TEMP TABLE paced AS SELECT * FROM pg_temp.paced('paced', 700);
SELECT count(*) AS ids, count(DISTINCT d.ts) AS ticks, max(d.sequence) AS highest,
       bool_or(d.sequence = 1) FILTER (WHERE p.n > 256) AS restarted
  FROM paced p, cosid_decode(p.id, 'paced') d;

-- The threshold argument overrides the layout's: 0 restarts the sequence at every tick. It is
-- checked, by the function and by the table.
SELECT cosid_create_generator('every_tick', 'safe_js', sequence_reset_threshold => 0);
SELECT pg_temp.wait_for_generator('every_tick');
CREATE TEMP TABLE every_tick AS SELECT * FROM pg_temp.paced('every_tick', 50);
SELECT count(*) AS ids, count(DISTINCT d.ts) AS ticks, min(d.sequence), max(d.sequence)
  FROM every_tick p, cosid_decode(p.id, 'every_tick') d;
SELECT s.sequence_reset_threshold, g.sequence_reset_threshold
  FROM cosid.status s JOIN cosid.generator g USING (name)
 WHERE name = 'every_tick';
SELECT cosid_create_generator('refused', 'safe_js', sequence_reset_threshold => 512);
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_create_generator('refused', 'safe_js', sequence_reset_threshold => -1);
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_create_generator('refused', 'second', sequence_reset_threshold => 4194304);
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT cosid_create_generator('largest', 'safe_js', sequence_reset_threshold => 511);
ROLLBACK;
\set VERBOSITY terse
UPDATE cosid.generator SET sequence_reset_threshold = 512 WHERE name = 'every_tick';
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default

-- A column fed by a shared sequence is converted and the sequence kept; a converted column
-- changes generator, whose ids are above the column's.
CREATE SEQUENCE shared_seq;
CREATE TABLE shared_a (id bigint PRIMARY KEY DEFAULT nextval('shared_seq'));
CREATE TABLE shared_b (id bigint PRIMARY KEY DEFAULT nextval('shared_seq'));
INSERT INTO shared_a DEFAULT VALUES;
INSERT INTO shared_b DEFAULT VALUES;
SELECT cosid_convert_column('shared_a', 'id') AS first \gset
SELECT to_regclass('shared_seq') IS NOT NULL AS sequence_kept;
INSERT INTO shared_a DEFAULT VALUES;
SELECT cosid_create_generator('conv_other');
SELECT pg_temp.wait_for_generator('conv_other');
SELECT cosid_convert_column('shared_a', 'id', 'conv_other') > :first AS above_the_first;
SELECT d.adrelid::regclass, pg_get_expr(d.adbin, d.adrelid)
  FROM pg_attrdef d WHERE d.adrelid IN ('shared_a'::regclass, 'shared_b'::regclass)
 ORDER BY 1::text;

-- A partitioned table with odd names is converted as a whole, to a named generator; a partition
-- alone is refused (42809).
SELECT cosid_create_generator('conv_gen');
SELECT pg_temp.wait_for_generator('conv_gen');
CREATE SCHEMA "Odd Schema";
CREATE TABLE "Odd Schema"."Odd ""T""" ("My Id" bigserial, k int) PARTITION BY RANGE (k);
CREATE TABLE "Odd Schema".p1 PARTITION OF "Odd Schema"."Odd ""T""" FOR VALUES FROM (0) TO (10);
CREATE TABLE "Odd Schema".p2 PARTITION OF "Odd Schema"."Odd ""T""" FOR VALUES FROM (10) TO (20);
INSERT INTO "Odd Schema"."Odd ""T""" (k) SELECT g % 20 FROM generate_series(1, 100) g;
SELECT cosid_convert_column('"Odd Schema".p1', 'My Id');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_convert_column('"Odd Schema"."Odd ""T"""', 'My Id', 'conv_gen') AS first \gset
SELECT d.adrelid::regclass, pg_get_expr(d.adbin, d.adrelid)
  FROM pg_attrdef d
 WHERE d.adrelid IN ('"Odd Schema"."Odd ""T"""'::regclass, '"Odd Schema".p1'::regclass,
                     '"Odd Schema".p2'::regclass)
 ORDER BY 1::text;
INSERT INTO "Odd Schema"."Odd ""T""" (k) VALUES (1), (11)
RETURNING "My Id" > :first AS above_the_first;
SELECT count(DISTINCT "My Id") FROM "Odd Schema"."Odd ""T""";

-- A namespace that LATIN1 has no character for is shown escaped in a LATIN1 database, as
-- messages show it.
SELECT cosid_create_generator('eu', namespace => E'ns\u20ac\u00e9');
SELECT pg_temp.wait_for_generator('eu');
CREATE DATABASE cosid_latin1 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
\c cosid_latin1
CREATE EXTENSION cosid;
SELECT namespace FROM cosid.status WHERE name = 'eu';
\c postgres
DROP DATABASE cosid_latin1;
