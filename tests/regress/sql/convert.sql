-- cosid_convert_column with the default generator: an identity column converted, and every
-- refusal with its SQLSTATE, changing nothing.
\set VERBOSITY default
\set SHOW_CONTEXT never
CREATE EXTENSION cosid;

-- An identity column loses its identity and its sequence, and takes ids above the one returned.
CREATE TABLE ident_t (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v int);
INSERT INTO ident_t (v) SELECT g FROM generate_series(1, 50) g;
SELECT cosid_convert_column('ident_t', 'id') AS first \gset
SELECT :first > 50 AS above_every_old_id;
SELECT a.attidentity, pg_get_expr(d.adbin, d.adrelid)
  FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE a.attrelid = 'ident_t'::regclass AND a.attname = 'id';
SELECT count(*) FROM pg_class WHERE relkind = 'S' AND relname LIKE 'ident_t%';
INSERT INTO ident_t (v) VALUES (0) RETURNING id > :first AS above_the_first;
DROP TABLE ident_t;

-- Refusals: not a bigint (42804), a largest value above the id (55000), a default that is not a
-- sequence (55000), a generated column or a view (42809), no such column (42703), an unknown
-- generator (42704), NULL (22004), no such table (42P01), a snapshot older than the lock
-- (25000), not the owner (42501).
CREATE TABLE int_t (id serial PRIMARY KEY);
CREATE TABLE big_t (id bigserial PRIMARY KEY);
INSERT INTO big_t VALUES (9000000000000000000);
CREATE TABLE other_t (id bigint DEFAULT 42, g bigint GENERATED ALWAYS AS (id * 2) STORED);
CREATE VIEW view_v AS SELECT * FROM big_t;
CREATE TABLE owned_t (id bigserial);
CREATE ROLE convert_stranger LOGIN;
GRANT ALL ON owned_t TO convert_stranger;
SELECT cosid_convert_column('int_t', 'id');
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY terse
SELECT cosid_convert_column('big_t', 'id');
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
SELECT cosid_convert_column('other_t', 'id');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_convert_column('other_t', 'g');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_convert_column('other_t', 'nope');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_convert_column('view_v', 'id');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_convert_column('owned_t', 'id', 'no_such_generator');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_convert_column(NULL, 'id');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_convert_column(4000000000::oid::regclass, 'id');
\echo :LAST_ERROR_SQLSTATE
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT cosid_convert_column('owned_t', 'id');
\echo :LAST_ERROR_SQLSTATE
COMMIT;
SET ROLE convert_stranger;
SELECT cosid_convert_column('owned_t', 'id');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT d.adrelid::regclass, pg_get_expr(d.adbin, d.adrelid)
  FROM pg_attrdef d JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
 WHERE d.adrelid IN ('int_t'::regclass, 'big_t'::regclass, 'owned_t'::regclass,
                     'other_t'::regclass) AND a.attname = 'id'
 ORDER BY 1::text;
DROP VIEW view_v;
DROP TABLE int_t, big_t, other_t, owned_t;
DROP ROLE convert_stranger;

-- The extension's own tables, one put into the extension and one only in schema cosid, are
-- refused (42809).
CREATE TABLE cosid.planted (id bigserial);
CREATE TABLE member_t (id bigserial);
ALTER EXTENSION cosid ADD TABLE member_t;
SELECT count(*) AS defaults_in_cosid FROM pg_attrdef d JOIN pg_class c ON c.oid = d.adrelid
 WHERE c.relnamespace = 'cosid'::regnamespace \gset
SELECT cosid_convert_column('cosid.machine_lease', 'watermark_ms');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_convert_column('cosid.generator_namespace', 'first_used_at');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_convert_column('cosid.planted', 'id');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_convert_column('member_t', 'id');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) = :defaults_in_cosid AS defaults_unchanged FROM pg_attrdef d
  JOIN pg_class c ON c.oid = d.adrelid
 WHERE c.relnamespace = 'cosid'::regnamespace;
SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d WHERE d.adrelid = 'member_t'::regclass;
ALTER EXTENSION cosid DROP TABLE member_t;
DROP TABLE member_t, cosid.planted;

DROP EXTENSION cosid;
