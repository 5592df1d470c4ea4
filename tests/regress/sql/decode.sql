-- cosid_decode gives one value of type cosid.decoded per call, by the default generator and by
-- its name.
\set VERBOSITY default
\set SHOW_CONTEXT never
SET timezone = 'UTC';
SET datestyle = 'ISO';
CREATE EXTENSION cosid;

-- A NULL id keeps its row: NULL in, NULL out, also in FROM.
CREATE TABLE t (n integer, id bigint);
INSERT INTO t VALUES (1, 295913926632165376), (2, NULL), (3, 0);
SELECT n, cosid_decode(id) FROM t ORDER BY n;
SELECT n, cosid_decode(id, 'default') FROM t ORDER BY n;
SELECT n, cosid_decode(id) IS NULL AS is_null, (cosid_decode(id)).ts, (cosid_decode(id)).machine_id,
       (cosid_decode(id)).sequence
  FROM t ORDER BY n;
SELECT n, cosid_decode(id, 'default') IS NULL AS is_null, (cosid_decode(id, 'default')).ts,
       (cosid_decode(id, 'default')).machine_id, (cosid_decode(id, 'default')).sequence
  FROM t ORDER BY n;
SELECT t.n, d.* FROM t, cosid_decode(t.id) d ORDER BY t.n;
SELECT t.n, d.* FROM t, cosid_decode(t.id, 'default') d ORDER BY t.n;
SELECT count(*) FROM t WHERE cosid_decode(id) IS NULL;
SELECT count(*) FROM t WHERE cosid_decode(id, 'default') IS NULL;
DROP TABLE t;

-- SELECT * keeps the columns ts, machine_id and sequence and their types.
SELECT * FROM cosid_decode(295913926632165376);
SELECT * FROM cosid_decode(295913926632165376, 'default');
CREATE VIEW star_0 AS SELECT * FROM cosid_decode(295913926632165376);
CREATE VIEW star_1 AS SELECT * FROM cosid_decode(295913926632165376, 'default');
SELECT attrelid::regclass, attname, format_type(atttypid, atttypmod)
  FROM pg_attribute
 WHERE attrelid IN ('star_0'::regclass, 'star_1'::regclass) AND attnum > 0
 ORDER BY attrelid::regclass::text, attnum;
DROP VIEW star_0, star_1;

-- One value per call, stable, strict and parallel safe.
SELECT p.oid::regprocedure, p.prorettype::regtype, p.proretset, p.provolatile, p.proisstrict,
       p.proparallel
  FROM pg_proc p WHERE p.proname = 'cosid_decode'
 ORDER BY 1::text;

-- An altered cosid.decoded is refused (42804), never misread.
DROP EXTENSION cosid;
CREATE EXTENSION cosid;
ALTER TYPE cosid.decoded ALTER ATTRIBUTE machine_id TYPE text;
SELECT cosid_decode(1);
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_decode(1, 'default');
\echo :LAST_ERROR_SQLSTATE
DROP EXTENSION cosid;
CREATE EXTENSION cosid;
ALTER TYPE cosid.decoded DROP ATTRIBUTE sequence, ADD ATTRIBUTE sequence integer;
SELECT cosid_decode(1);
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_decode(1, 'default');
\echo :LAST_ERROR_SQLSTATE
DROP EXTENSION cosid;
CREATE EXTENSION cosid;
SELECT cosid_decode(1);

DROP EXTENSION cosid;
