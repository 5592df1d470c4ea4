-- A server that does not preload cosid: generating is refused with a hint, decoding works.
\set VERBOSITY default
\set SHOW_CONTEXT never
SET timezone = 'UTC';
CREATE EXTENSION cosid;
SELECT cosid_next();
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM cosid.status;
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM cosid_decode(295913926632165376);
SELECT cosid_friendly(295913926632165376), cosid_to_radix62(295913926632165376);
SELECT cosid_from_friendly('20220320053617924-5-0');
CREATE TABLE t (id bigint PRIMARY KEY DEFAULT cosid_next());
INSERT INTO t DEFAULT VALUES;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM t;
DROP TABLE t;
DROP EXTENSION cosid;
