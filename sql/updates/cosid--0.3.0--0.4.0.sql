-- cosid 0.3.0 to 0.4.0: ALTER EXTENSION cosid UPDATE. Run it after the server was restarted
-- with the library of 0.4.0 (see docs/upgrading.md): the library of 0.3.0 has none of the
-- functions below, so run earlier it fails and changes nothing.
\echo Use "ALTER EXTENSION cosid UPDATE" to load this file. \quit

-- <monitoring>
-- Members of pg_monitor read cosid.leases (through the lease store's update to 0.4.0) and
-- cosid.status, which gains the local deadline and the safe guard's margin.

-- <lease store>: the statements of lease_store--0.3.0--0.4.0.sql, word for word (an update
-- script cannot include a file; a test compares the two).
--@include updates/lease_store--0.3.0--0.4.0.sql
-- </lease store>

-- cosid.status gains the local deadline and the safe guard's margin, and members of pg_monitor
-- read it (a lease error's text only for superusers). Its function is a new C symbol of the
-- 0.4.0 library. The view is replaced in place, its new columns after the old ones, so that the
-- views and functions users built on it keep working: the old function is set aside under
-- another name (the view follows it), the new one created, the view pointed at it, and the old
-- one dropped once nothing uses it.
--
-- Two kinds of objects would not survive that, and the update refuses first, naming them, with
-- nothing changed: those that call cosid.generator_status() itself (DROP FUNCTION would fail,
-- with a hint that does not apply), and functions with a SQL-standard body that return rows of
-- cosid.status (their stored body returns the old columns, and would fail at its next call).
DO $status$
DECLARE
    v_path       text := pg_catalog.current_setting('search_path');
    v_dependents text;
BEGIN
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    SELECT pg_catalog.string_agg(DISTINCT o.what, ', ') INTO v_dependents
      FROM (SELECT CASE WHEN d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
                        THEN pg_catalog.pg_describe_object('pg_catalog.pg_class'::pg_catalog.regclass,
                                                           r.ev_class, 0)
                        ELSE pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid) END
                   AS what
              FROM pg_catalog.pg_depend d
              LEFT JOIN pg_catalog.pg_rewrite r
                ON d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass AND r.oid = d.objid
             WHERE d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass
               AND d.refobjid = 'cosid.generator_status()'::pg_catalog.regprocedure
               AND d.deptype IN ('n', 'a')
               AND r.ev_class IS DISTINCT FROM 'cosid.status'::pg_catalog.regclass
            UNION ALL
            SELECT pg_catalog.pg_describe_object('pg_catalog.pg_proc'::pg_catalog.regclass,
                                                 p.oid, 0)
              FROM pg_catalog.pg_proc p
             WHERE p.prosqlbody IS NOT NULL
               AND p.prorettype = (SELECT c.reltype FROM pg_catalog.pg_class c
                                    WHERE c.oid = 'cosid.status'::pg_catalog.regclass)) o;
    PERFORM pg_catalog.set_config('search_path', v_path, true);
    IF v_dependents IS NOT NULL THEN
        RAISE EXCEPTION 'cannot update cosid while other objects use cosid.generator_status() or return rows of cosid.status'
            USING ERRCODE = 'dependent_objects_still_exist',
                  DETAIL = pg_catalog.format('cosid.status gains two columns in 0.4.0, and the function behind it is replaced. These objects would not survive it: %s.', v_dependents),
                  HINT = 'Save their definitions, drop them, run ALTER EXTENSION cosid UPDATE, and create them again, on cosid.status rather than on cosid.generator_status(). Views that select from cosid.status need nothing. Nothing was changed.';
    END IF;
END
$status$;
ALTER FUNCTION cosid.generator_status() RENAME TO generator_status_0_3_0;
--@-- 0.3.0's columns, then those of 0.4.0.
--@include updates/cosid--0.2.0--0.3.0.sql
--@from CREATE  FUNCTION cosid."generator_status"() RETURNS TABLE (
--@until 	"clock_backwards_broken_threshold" interval  /* Interval */
	"clock_backwards_broken_threshold" interval,  /* Interval */
	"deadline" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"safe_guard_margin" interval  /* Option < Interval > */
)
STRICT VOLATILE PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'generator_status_v4_wrapper';

CREATE OR REPLACE VIEW cosid.status AS SELECT * FROM cosid.generator_status();
-- A reader of the view needs EXECUTE on the function too: those who were granted it by hand
-- keep it (PUBLIC's default EXECUTE of 0.3.0 is not carried over: see below).
DO $grants$
DECLARE
    v_path    text := pg_catalog.current_setting('search_path');
    v_grantee text;
BEGIN
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    FOR v_grantee IN
        SELECT DISTINCT pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee))
          FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
         WHERE p.oid = 'cosid.generator_status_0_3_0()'::pg_catalog.regprocedure
           AND a.grantee OPERATOR(pg_catalog.<>) 0::pg_catalog.oid
           AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
           AND a.privilege_type = 'EXECUTE'
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION cosid.generator_status() TO %s',
                                  v_grantee);
    END LOOP;
    PERFORM pg_catalog.set_config('search_path', v_path, true);
END
$grants$;
DROP FUNCTION cosid.generator_status_0_3_0();
COMMENT ON VIEW cosid.status IS 'One row per cosid generator of this server: configuration and state.';
COMMENT ON COLUMN cosid.status.deadline IS 'When cosid_next() starts refusing unless a lease renewal succeeds first; NULL when the generator has no machine id or no deadline.';
COMMENT ON COLUMN cosid.status.safe_guard_margin IS 'The part of safe_guard_duration kept back for clock skew: the deadline is the last successful renewal''s sending plus safe_guard_duration minus this.';
COMMENT ON COLUMN cosid.status.last_error IS 'Why the generator is not UP; to roles that are not superusers only the kind of problem, since a store error can name hosts and users.';
-- Monitoring, as PostgreSQL's own statistics views: members of pg_monitor read the view (the
-- function hides what only superusers may see); nobody else calls the function.
REVOKE ALL ON FUNCTION cosid.generator_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION cosid.generator_status() TO pg_monitor;
GRANT SELECT ON TABLE cosid.status TO pg_monitor;

-- <cosid_decode returns one value>: cosid_decode(id) and cosid_decode(id, generator) return one
-- value of the new type cosid.decoded per call (NULL for a NULL id) instead of a set of rows, so
-- that SELECT id, cosid_decode(id) FROM t keeps the rows whose id is NULL; SELECT * FROM
-- cosid_decode(id) gives the same columns as before. A function's result type cannot change in
-- place: both are dropped and created again, with new C symbols (the library keeps the old ones
-- for the SQL of 0.3.0). An object that depends on them (a view, a materialized view, a function
-- with a SQL-standard body) would make DROP FUNCTION fail with a hint that does not apply here:
-- the update refuses first, and names them; nothing has changed then.
DO $decode$
DECLARE
    v_path       text := pg_catalog.current_setting('search_path');
    v_dependents text;
BEGIN
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    SELECT pg_catalog.string_agg(DISTINCT CASE
               WHEN d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
                   THEN pg_catalog.pg_describe_object('pg_catalog.pg_class'::pg_catalog.regclass,
                                                      r.ev_class, 0)
               ELSE pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid) END, ', ')
      INTO v_dependents
      FROM pg_catalog.pg_depend e
      JOIN pg_catalog.pg_depend d
        ON d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.refobjid = e.objid
       AND d.deptype IN ('n', 'a')
      LEFT JOIN pg_catalog.pg_rewrite r
        ON d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass AND r.oid = d.objid
     WHERE e.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
       AND e.refobjid = (SELECT x.oid FROM pg_catalog.pg_extension x WHERE x.extname = 'cosid')
       AND e.deptype = 'e' AND e.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass
       AND e.objid IN (SELECT p.oid FROM pg_catalog.pg_proc p WHERE p.proname = 'cosid_decode');
    PERFORM pg_catalog.set_config('search_path', v_path, true);
    IF v_dependents IS NOT NULL THEN
        RAISE EXCEPTION 'cannot update cosid while other objects depend on cosid_decode'
            USING ERRCODE = 'dependent_objects_still_exist',
                  DETAIL = pg_catalog.format('cosid_decode returns one value of type cosid.decoded from 0.4.0 on, instead of a set of rows, so the update drops it and creates it again. These objects depend on it: %s.', v_dependents),
                  HINT = 'Save their definitions, drop them, run ALTER EXTENSION cosid UPDATE, and create them again: SELECT * FROM cosid_decode(id) and (cosid_decode(id)).ts work as before. Nothing was changed.';
    END IF;
END
$decode$;
DROP FUNCTION cosid_decode(bigint);
DROP FUNCTION cosid_decode(bigint, text);
CREATE TYPE cosid.decoded AS (ts timestamptz, machine_id integer, sequence integer);
CREATE FUNCTION cosid_decode(id bigint) RETURNS cosid.decoded
STRICT STABLE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'cosid_decode_v4_wrapper';
CREATE FUNCTION cosid_decode(id bigint, generator text) RETURNS cosid.decoded
STRICT STABLE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'cosid_decode_named_v4_wrapper';

-- <comments>: a catalog comment on every object of the extension (src/sql/comments.rs), so that
-- \df+ cosid* and \dv+ cosid.* describe them. The lease store's objects are commented here, not
-- in its update script: a comment is no reason for a new store version.
COMMENT ON SCHEMA cosid IS 'Internal objects of the extension cosid: the machine-id lease table and its protocol, the named generators'' definitions, and the views status and leases.';
COMMENT ON FUNCTION cosid_next() IS 'The next id of the server''s default cosid generator: a unique, time-ordered, non-negative bigint.';
COMMENT ON FUNCTION cosid_next(text) IS 'The next id of the named cosid generator (''default'' is the server''s own).';
COMMENT ON FUNCTION cosid_decode(bigint) IS 'The parts of a cosid id: its timestamp, machine id and sequence; NULL for a NULL id.';
COMMENT ON FUNCTION cosid_decode(bigint, text) IS 'The parts of an id of the named cosid generator: its timestamp, machine id and sequence; NULL for a NULL id.';
COMMENT ON FUNCTION cosid_timestamp(bigint) IS 'The timestamp of a cosid id.';
COMMENT ON FUNCTION cosid_timestamp(bigint, text) IS 'The timestamp of an id of the named cosid generator.';
COMMENT ON FUNCTION cosid_from_timestamp(timestamptz) IS 'The smallest cosid id at that instant (machine id 0, sequence 0): a lower bound for range scans.';
COMMENT ON FUNCTION cosid_from_timestamp(timestamptz, text) IS 'The smallest id of the named cosid generator at that instant (machine id 0, sequence 0): a lower bound for range scans.';
COMMENT ON FUNCTION cosid_friendly(bigint) IS 'CosId''s friendly form of an id in UTC: yyyyMMddHHmmssSSS-machine-sequence (yyyyMMddHHmmss-machine-sequence for the second unit).';
COMMENT ON FUNCTION cosid_friendly(bigint, text) IS 'CosId''s friendly form in UTC of an id of the named cosid generator.';
COMMENT ON FUNCTION cosid_from_friendly(text) IS 'The cosid id of a friendly form, padded (20220320053617924-0005-0000) or not (20220320053617924-5-0).';
COMMENT ON FUNCTION cosid_from_friendly(text, text) IS 'The id of a friendly form, in the layout of the named cosid generator.';
COMMENT ON FUNCTION cosid_to_radix62(bigint) IS 'CosId''s Radix62 form of an id: 11 characters of 0-9, A-Z and a-z.';
COMMENT ON FUNCTION cosid_to_radix62(bigint, text) IS 'CosId''s Radix62 form of an id, checked to fit the named cosid generator''s layout.';
COMMENT ON FUNCTION cosid_from_radix62(text) IS 'The cosid id of a Radix62 form, padded to 11 characters or not.';
COMMENT ON FUNCTION cosid_from_radix62(text, text) IS 'The id of a Radix62 form, checked to fit the named cosid generator''s layout.';
COMMENT ON FUNCTION cosid_create_generator(text, text, text, integer, integer, integer, timestamptz, text) IS 'Defines a named cosid generator, in the database cosid.database; usable from every database of the server within about a second. Superusers only.';
COMMENT ON FUNCTION cosid_drop_generator(text) IS 'Drops a named cosid generator at commit: its calls are refused at once, and its machine id is released. Superusers only.';
COMMENT ON TYPE cosid.decoded IS 'The parts of a cosid id, as cosid_decode returns them.';
COMMENT ON COLUMN cosid.decoded.ts IS 'The id''s timestamp.';
COMMENT ON COLUMN cosid.decoded.machine_id IS 'The machine id of the server that issued the id.';
COMMENT ON COLUMN cosid.decoded.sequence IS 'The id''s sequence number within its timestamp and machine id.';
COMMENT ON FUNCTION cosid.generator_status() IS 'The rows of the view cosid.status.';
COMMENT ON VIEW cosid.leases IS 'The machine-id leases of this database''s lease table, without claim tokens: holder, status, time left and watermark. Superusers only.';
COMMENT ON FUNCTION cosid.lease_rows() IS 'The rows of the view cosid.leases.';
COMMENT ON FUNCTION cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint, text) IS 'Lease protocol: claims a machine id of a namespace for a holder, which then waits for the returned watermark. Called by the cosid background worker.';
COMMENT ON FUNCTION cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint) IS 'Lease protocol: the claim as servers of cosid 0.1.0 call it, without a layout.';
COMMENT ON FUNCTION cosid.lease_renew(text, integer, text, text, bigint, bigint) IS 'Lease protocol: renews a lease this holder holds and raises its watermark; no row means the lease is lost.';
COMMENT ON FUNCTION cosid.lease_release(text, integer, text, text, bigint) IS 'Lease protocol: releases a lease with the exact last timestamp the holder issued; true if the lease was still the holder''s.';
COMMENT ON FUNCTION cosid.lease_retire(text, integer) IS 'Deletes the lease rows of a machine id, or of a whole namespace, no longer used, so that it counts as never used; refused while a lease is held or its watermark is less than a minute old. Superusers only.';
COMMENT ON FUNCTION cosid.lease_namespace_layout(text) IS 'The id layout a namespace of the lease table keeps; NULL for a namespace without one.';
COMMENT ON FUNCTION cosid.lease_next_floor_ms(cosid.machine_lease) IS 'Lease protocol: what the next holder of a lease waits for, in Unix milliseconds: the exact last timestamp of a release, else the watermark.';
COMMENT ON FUNCTION cosid.unix_ms(timestamptz) IS 'Lease protocol: a timestamp as Unix milliseconds.';
COMMENT ON FUNCTION cosid.machine_lease_guard() IS 'Trigger of cosid.machine_lease: refuses DELETE, TRUNCATE, a lowered watermark and a changed key (rows are deleted only by cosid.lease_retire).';
COMMENT ON FUNCTION cosid.lease_store_version() IS 'The version of the lease store''s SQL, which its update scripts check.';

-- cosid_convert_column: switching a sequence-fed column to cosid
--@-- 0.4.0's function: that of convert_column.sql without the refusal of cosid's own tables
--@-- (0.5.0).
--@include convert_column.sql
--@from CREATE FUNCTION cosid_convert_column(tab regclass, col name, generator text DEFAULT NULL)
--@until     -- cosid's own tables keep its records (leases and their watermarks, generators' names and
--@include convert_column.sql
--@from     IF NOT pg_catalog.pg_has_role(current_user, v_rel.relowner, 'USAGE') THEN
