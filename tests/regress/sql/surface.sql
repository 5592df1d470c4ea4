-- The SQL surface on a server that preloads cosid with cosid.distributor = manual, cosid.machine_id = 5 and CosId's layout.
\set VERBOSITY default
\set SHOW_CONTEXT never
SET timezone = 'UTC';
CREATE EXTENSION cosid;

-- Functions land in the extension's schema, internal objects in schema cosid.
SELECT p.proname, n.nspname, p.provolatile, p.proparallel, p.proisstrict
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE p.proname LIKE 'cosid%' OR n.nspname = 'cosid'
 ORDER BY 1, 2, 3, 4, 5;

-- CosId's test vector.
SELECT * FROM cosid_decode(295913926632165376);
SELECT cosid_timestamp(295913926632165376);
SELECT cosid_friendly(295913926632165376);
SELECT cosid_from_friendly('20220320053617924-5-0');
SELECT cosid_from_friendly('20220320053617924-0005-0000');
SELECT cosid_to_radix62(295913926632165376);
SELECT cosid_from_radix62('0LrHucXALbs');
SELECT cosid_from_radix62('LrHucXALbs');

-- The edges of the layout.
SELECT * FROM cosid_decode(0);
SELECT cosid_friendly(0), cosid_to_radix62(0);
SELECT * FROM cosid_decode(9223372036854775807);
SELECT cosid_friendly(9223372036854775807);
SELECT cosid_from_friendly(cosid_friendly(9223372036854775807)) = 9223372036854775807 AS round_trip;
SELECT cosid_to_radix62(9223372036854775807), cosid_from_radix62('AzL8n0Y58m7');
SELECT cosid_from_timestamp('2019-12-24 16:00:00+00');
SELECT cosid_from_timestamp('2022-03-20 05:36:17.924+00');
SELECT cosid_from_timestamp('2022-03-20 05:36:17.9249+00');
SELECT cosid_from_timestamp('2089-08-30 07:47:35.551+00') = 9223372036850581504 AS last_tick;

-- The smallest id at an instant is the lower bound of every id made from then on.
SELECT cosid_from_timestamp(cosid_timestamp(295913926632165376)) <= 295913926632165376 AS lower_bound,
       cosid_from_timestamp(cosid_timestamp(295913926632165376) + interval '1 ms') > 295913926632165376 AS upper_bound;

-- NULL in, NULL out.
SELECT cosid_friendly(NULL), cosid_from_radix62(NULL), cosid_timestamp(NULL);
SELECT id, cosid_decode(id), (cosid_decode(id, 'default')).machine_id
  FROM (VALUES (295913926632165376), (NULL)) v(id);

-- Bad arguments: 22003 for numbers out of range, 22023 for text that is not an id, 22008 for
-- timestamps outside the layout.
SELECT * FROM cosid_decode(-1);
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_timestamp(-9223372036854775808);
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_friendly(-5);
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_to_radix62(-5);
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_friendly('garbage');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_friendly('');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_friendly('20220320053617924-5');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_friendly('20221320053617924-5-0');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_friendly('20220320053617924-five-0');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_friendly('20220320053617924-1024-0');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_friendly('20220320053617924-5-4096');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_friendly('20190101000000000-5-0');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_radix62('not-radix62');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_radix62('');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_radix62('000000000000');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_radix62('AzL8n0Y58m8');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_timestamp('2019-12-24 15:59:59.999+00');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_timestamp('2089-08-30 07:47:35.552+00');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_timestamp('infinity');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_timestamp('-infinity');
\echo :LAST_ERROR_SQLSTATE

-- Generating: ids carry machine id 5, increase, and are dated now.
CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT cosid_next(), item text);
INSERT INTO orders (item) SELECT 'item ' || g FROM generate_series(1, 10000) g;
SELECT count(*), count(DISTINCT id) FROM orders;
SELECT count(*) AS not_machine_5 FROM orders o, cosid_decode(o.id) d WHERE d.machine_id <> 5;
SELECT bool_and(d.ts BETWEEN now() - interval '1 minute' AND clock_timestamp()) AS dated_now
  FROM orders o, cosid_decode(o.id) d;
SELECT count(*) AS out_of_order FROM (
  SELECT id <= lag(id) OVER (ORDER BY item_no) AS backwards
    FROM (SELECT id, substr(item, 6)::int AS item_no FROM orders) s) t
 WHERE backwards;
SELECT cosid_from_friendly(cosid_friendly(id)) = id AS friendly_round_trip,
       cosid_from_radix62(cosid_to_radix62(id)) = id AS radix62_round_trip,
       length(cosid_to_radix62(id)) AS radix62_length
  FROM (SELECT max(id) AS id FROM orders) s;

-- A range of ids by time is an index range scan.
SET enable_seqscan = off;
EXPLAIN (COSTS OFF)
SELECT count(*) FROM orders WHERE id >= cosid_from_timestamp(now() - interval '1 day');
RESET enable_seqscan;
SELECT count(*) FROM orders WHERE id >= cosid_from_timestamp(now() - interval '1 day');
SELECT count(*) FROM orders WHERE id >= cosid_from_timestamp(clock_timestamp() + interval '1 second');

-- The status view: one row, the default generator; no lease with the manual distributor, and so
-- no deadline.
SELECT namespace, distributor, instance_id, state, machine_id, expires_at, last_renewed_at,
       watermark, last_error, epoch, time_unit, timestamp_bits,
       machine_bits, sequence_bits, sequence_reset_threshold, ids_issued >= 10000 AS issued,
       last_timestamp <= clock_timestamp() AS last_timestamp_past, next_tick_waits >= 0 AS waits,
       clock_backwards_waits, clock_backwards_errors
  FROM cosid.status;
SELECT state, machine_id, deadline IS NULL AS no_deadline, safe_guard_margin IS NULL AS no_margin,
       renewal_failures IS NULL AS no_renewals
  FROM cosid.status;

-- The lease table is empty, and only its holders may use the lease protocol.
SELECT count(*) FROM cosid.leases;
CREATE ROLE cosid_app LOGIN;
SELECT has_table_privilege('cosid_app', 'cosid.machine_lease', 'UPDATE') AS app_may_update,
       has_function_privilege('cosid_app', 'cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint, text)', 'EXECUTE') AS app_may_claim,
       has_function_privilege('cosid_app', 'cosid_next()', 'EXECUTE') AS app_may_generate;
DROP ROLE cosid_app;

-- The layout settings are fixed at server start.
SHOW cosid.machine_bits;
SET cosid.machine_bits = 11;
\echo :LAST_ERROR_SQLSTATE
SET cosid.clock_backwards_broken_threshold = 100;
\echo :LAST_ERROR_SQLSTATE
SHOW cosid.clock_backwards_broken_threshold;

-- Values outside a setting's range are refused with the setting's name and range.
ALTER SYSTEM SET cosid.clock_backwards_broken_threshold = -1;
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET cosid.clock_backwards_spin_threshold = '2s';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET cosid.machine_bits = 40;
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET cosid.machine_id = -2;
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET cosid.time_unit = 'minute';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET cosid.distributor = 'zookeeper';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET cosid.epoch = 'last tuesday';
\echo :LAST_ERROR_SQLSTATE

-- The extension drops cleanly.
DROP TABLE orders;
DROP EXTENSION cosid;
SELECT count(*) FROM pg_namespace WHERE nspname = 'cosid';
