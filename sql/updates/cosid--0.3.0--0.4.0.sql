-- cosid 0.3.0 to 0.4.0: ALTER EXTENSION cosid UPDATE. Run it after the server was restarted
-- with the library of 0.4.0 (see docs/upgrading.md): the library of 0.3.0 has none of the
-- functions below, so run earlier it fails and changes nothing.
\echo Use "ALTER EXTENSION cosid UPDATE" to load this file. \quit

-- <monitoring>
-- Members of pg_monitor read cosid.leases (through the lease store's update to 0.4.0) and
-- cosid.status, which gains the local deadline and the safe guard's margin.

-- <lease store>: the statements of lease_store--0.3.0--0.4.0.sql, word for word (an update
-- script cannot include a file; a test compares the two).
-- Updates a cosid lease store from version 0.3.0 to 0.4.0, while it is in use. For a shared
-- store of a fleet run it with
--   psql -v ON_ERROR_STOP=1 --single-transaction -f lease_store--0.3.0--0.4.0.sql
-- ALTER EXTENSION cosid UPDATE runs the same statements for the store inside the extension.
--
-- What changes: members of pg_monitor may read cosid.leases (schema cosid, the view and the
-- function behind it; no claim token is in it), so that monitoring needs no superuser. The
-- protocol is unchanged: servers of 0.1.0 to 0.4.0 keep claiming, renewing and releasing
-- through it, and a server of 0.4.0 works with a store of 0.3.0 as well. Everything it creates
-- is what lease_store.sql of 0.4.0 creates, in the same words.

-- Checks before anything changes, with search_path pinned (see lease_store.sql); the path is
-- restored for the statements after it.
DO $update$
DECLARE
    v_path         text := pg_catalog.current_setting('search_path');
    v_in_extension boolean;
    v_found        text;
    v_refused      text;
    v_owner        text;
BEGIN
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    -- Everything the update creates belongs to the role that runs it, so only the owner of
    -- schema cosid may: another role (a second superuser, say) would own part of it, and could
    -- keep that part after losing its superuser.
    SELECT pg_catalog.pg_get_userbyid(n.nspowner) INTO v_owner
      FROM pg_catalog.pg_namespace n
     WHERE n.nspname = 'cosid'
       AND n.nspowner <> (SELECT r.oid FROM pg_catalog.pg_roles r
                           WHERE r.rolname = current_user);
    IF v_owner IS NOT NULL THEN
        RAISE EXCEPTION 'schema cosid exists and belongs to another role'
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = pg_catalog.format('Schema cosid belongs to role %s. Its owner could replace the lease table and the protocol''s functions, and what the update creates belongs to the role that runs it.', v_owner),
                  HINT = pg_catalog.format('Update as role %1$s: SET ROLE %1$s; then run the update again.', pg_catalog.quote_ident(v_owner));
    END IF;
    -- Only the update script of the extension may call pg_extension_config_dump().
    BEGIN
        PERFORM pg_catalog.pg_extension_config_dump('cosid.machine_lease', '');
        v_in_extension := true;
    EXCEPTION WHEN OTHERS THEN
        v_in_extension := false;
    END;
    -- The version is read, never run.
    SELECT pg_catalog.substring(p.prosrc, '''([0-9.]+)''') INTO v_found
      FROM pg_catalog.pg_proc p
     WHERE p.oid = pg_catalog.to_regprocedure('cosid.lease_store_version()');
    -- Only a store of version 0.3.0 is updated, in one transaction, and a store of the
    -- extension only by ALTER EXTENSION. Anything else is left alone: this transaction and the
    -- rest of the session are made read-only, so that the statements after this one fail too.
    v_refused := CASE
        WHEN pg_catalog.to_regclass('cosid.machine_lease') IS NULL
             OR v_found IS DISTINCT FROM '0.3.0'
            THEN 'this database has no cosid lease store of version 0.3.0'
        WHEN NOT v_in_extension AND EXISTS (
                SELECT FROM pg_catalog.pg_depend d
                 WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
                   AND d.objid = pg_catalog.to_regclass('cosid.machine_lease')
                   AND d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
                   AND d.deptype = 'e')
            THEN 'this lease store belongs to the extension cosid: update it with ALTER EXTENSION cosid UPDATE'
        WHEN NOT v_in_extension AND pg_catalog.now() = pg_catalog.statement_timestamp()
            THEN 'this update must run in one transaction'
    END;
    IF v_refused IS NOT NULL THEN
        PERFORM pg_catalog.set_config('default_transaction_read_only', 'on', false);
        PERFORM pg_catalog.set_config('transaction_read_only', 'on', true);
        PERFORM pg_catalog.set_config('search_path', v_path, true);
        RAISE WARNING '%; nothing was changed', v_refused
            USING DETAIL = 'This file updates a lease store of version 0.3.0 (see cosid.lease_store_version()) to 0.4.0. The rest of this session is read-only.',
                  HINT = 'Run it with psql -v ON_ERROR_STOP=1 --single-transaction -f lease_store--0.3.0--0.4.0.sql.';
        RETURN;
    END IF;
    -- Claims queue behind the update for a few seconds at most.
    PERFORM pg_catalog.set_config('lock_timeout', '3s', true);
    PERFORM pg_catalog.set_config('search_path', v_path, true);
END
$update$;

GRANT USAGE ON SCHEMA cosid TO pg_monitor;
GRANT SELECT ON TABLE cosid.leases TO pg_monitor;
-- A view's functions run with the privileges of its reader.
GRANT EXECUTE ON FUNCTION cosid.lease_rows() TO pg_monitor;

CREATE OR REPLACE FUNCTION cosid.lease_store_version()
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT '0.4.0'::text $$;
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
CREATE  FUNCTION cosid."generator_status"() RETURNS TABLE (
	"name" TEXT,  /* String */
	"namespace" TEXT,  /* String */
	"distributor" TEXT,  /* String */
	"instance_id" TEXT,  /* Option < String > */
	"state" TEXT,  /* String */
	"machine_id" INT,  /* Option < i32 > */
	"expires_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"last_renewed_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"last_error" TEXT,  /* Option < String > */
	"watermark" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"epoch" timestamp with time zone,  /* TimestampWithTimeZone */
	"time_unit" TEXT,  /* String */
	"timestamp_bits" INT,  /* i32 */
	"machine_bits" INT,  /* i32 */
	"sequence_bits" INT,  /* i32 */
	"sequence_reset_threshold" bigint,  /* i64 */
	"last_timestamp" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"ids_issued" bigint,  /* i64 */
	"next_tick_waits" bigint,  /* i64 */
	"clock_backwards_waits" bigint,  /* i64 */
	"clock_backwards_errors" bigint,  /* i64 */
	"safe_guard_duration" interval,  /* Option < Interval > */
	"guarder_delay" interval,  /* Option < Interval > */
	"clock_backwards_spin_threshold" interval,  /* Interval */
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
CREATE FUNCTION cosid_convert_column(tab regclass, col name, generator text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $convert$
DECLARE
    v_rel       pg_catalog.pg_class;
    v_att       pg_catalog.pg_attribute;
    v_default   text;
    v_column    text;
    v_schema    name;
    v_next      text;
    v_seq       regclass;
    v_owned     boolean := false;
    v_cosid     boolean := false;
    v_max       bigint;
    v_first     bigint;
BEGIN
    IF tab IS NULL OR col IS NULL THEN
        RAISE EXCEPTION 'the table and the column to convert must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    -- The largest value is read below with a snapshot taken after the lock is granted, which
    -- only READ COMMITTED does (one per statement). Under REPEATABLE READ or SERIALIZABLE the
    -- transaction's snapshot predates the lock and would miss rows committed while it waited.
    IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'cosid_convert_column must run at isolation level READ COMMITTED'
            USING ERRCODE = 'invalid_transaction_state',
                  DETAIL = pg_catalog.format('This transaction is %s: its snapshot was taken before the table''s lock, so the largest value read could miss rows committed meanwhile.', pg_catalog.current_setting('transaction_isolation')),
                  HINT = 'Call it in a transaction of its own at READ COMMITTED, the default.';
    END IF;
    SELECT * INTO v_rel FROM pg_catalog.pg_class c WHERE c.oid = tab;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'relation with OID % does not exist', tab::oid
            USING ERRCODE = 'undefined_table';
    END IF;
    v_column := pg_catalog.format('%s.%I', tab, col);
    IF v_rel.relkind NOT IN ('r', 'p') THEN
        RAISE EXCEPTION '"%" is not a table', tab
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'Only the key column of a table or a partitioned table can be converted.';
    END IF;
    IF v_rel.relispartition THEN
        RAISE EXCEPTION 'table % is a partition', tab
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'Rows inserted through the partitioned table take the partitioned table''s default, not the partition''s.',
                  HINT = 'Convert the partitioned table: its new default applies to every partition.';
    END IF;
    IF NOT pg_catalog.pg_has_role(current_user, v_rel.relowner, 'USAGE') THEN
        RAISE EXCEPTION 'must be owner of table % to convert its column', tab
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'Converting a column changes its default and drops its sequence, which only the table''s owner may do.',
                  HINT = 'Call cosid_convert_column as the owner of the table (or a member of its role).';
    END IF;

    -- From here until commit no row can be inserted: the largest value read below stays the
    -- largest.
    EXECUTE pg_catalog.format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', tab);

    SELECT * INTO v_att FROM pg_catalog.pg_attribute a
     WHERE a.attrelid = tab AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'column "%" of table % does not exist', col, tab
            USING ERRCODE = 'undefined_column';
    END IF;
    IF v_att.atttypid <> 'pg_catalog.int8'::pg_catalog.regtype THEN
        RAISE EXCEPTION 'column % is of type %, not bigint', v_column, pg_catalog.format_type(v_att.atttypid, v_att.atttypmod)
            USING ERRCODE = 'datatype_mismatch',
                  DETAIL = 'A cosid id is a bigint of up to 63 bits; a smaller type cannot hold it.',
                  HINT = pg_catalog.format('Change the column''s type first: ALTER TABLE %s ALTER COLUMN %I TYPE bigint (and the columns that reference it).', tab, col);
    END IF;
    IF v_att.attgenerated <> '' THEN
        RAISE EXCEPTION 'column % is a generated column', v_column
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'Its value is computed from other columns, so it cannot take a default.';
    END IF;

    SELECT pg_catalog.pg_get_expr(d.adbin, d.adrelid) INTO v_default
      FROM pg_catalog.pg_attrdef d WHERE d.adrelid = tab AND d.adnum = v_att.attnum;
    -- The sequence the column takes its values from: an identity column's, or the one its
    -- default calls (serial's is owned by the column).
    SELECT dep.refobjid::pg_catalog.regclass INTO v_seq
      FROM pg_catalog.pg_attrdef d
      JOIN pg_catalog.pg_depend dep
        ON dep.classid = 'pg_catalog.pg_attrdef'::pg_catalog.regclass AND dep.objid = d.oid
       AND dep.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
      JOIN pg_catalog.pg_class s ON s.oid = dep.refobjid AND s.relkind = 'S'
     WHERE d.adrelid = tab AND d.adnum = v_att.attnum
     LIMIT 1;
    IF v_att.attidentity = '' AND v_seq IS NOT NULL THEN
        v_owned := EXISTS (SELECT FROM pg_catalog.pg_depend dep
                            WHERE dep.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
                              AND dep.objid = v_seq
                              AND dep.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
                              AND dep.refobjid = tab AND dep.refobjsubid = v_att.attnum
                              AND dep.deptype = 'a');
    END IF;
    -- A default that already calls one of cosid's functions: switching generators is allowed.
    v_cosid := EXISTS (
        SELECT FROM pg_catalog.pg_attrdef d
          JOIN pg_catalog.pg_depend f
            ON f.classid = 'pg_catalog.pg_attrdef'::pg_catalog.regclass AND f.objid = d.oid
           AND f.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass
          JOIN pg_catalog.pg_depend m
            ON m.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND m.objid = f.refobjid
           AND m.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass AND m.deptype = 'e'
          JOIN pg_catalog.pg_extension e ON e.oid = m.refobjid AND e.extname = 'cosid'
         WHERE d.adrelid = tab AND d.adnum = v_att.attnum);
    IF v_default IS NOT NULL AND v_att.attidentity = '' AND v_seq IS NULL AND NOT v_cosid THEN
        RAISE EXCEPTION 'column % has a default that is not a sequence', v_column
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = pg_catalog.format('Its default is %s. Only a column fed by a sequence (bigserial, identity) or without a default is converted.', v_default),
                  HINT = pg_catalog.format('If the column should take cosid ids instead, drop its default first: ALTER TABLE %s ALTER COLUMN %I DROP DEFAULT.', tab, col);
    END IF;

    SELECT n.nspname INTO v_schema
      FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
     WHERE e.extname = 'cosid';
    IF generator IS NULL THEN
        v_next := pg_catalog.format('%I.cosid_next()', v_schema);
    ELSE
        v_next := pg_catalog.format('%I.cosid_next(%L::pg_catalog.text)', v_schema, generator);
    END IF;

    EXECUTE pg_catalog.format('SELECT pg_catalog.max(%I) FROM %s', col, tab) INTO v_max;
    -- One id from the generator: if it cannot generate (no lease, unknown generator), its own
    -- error ends the conversion, and nothing is changed.
    EXECUTE 'SELECT ' || v_next INTO v_first;
    IF v_max >= v_first THEN
        RAISE EXCEPTION 'column % has values at or above the ids cosid issues now', v_column
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = pg_catalog.format('Its largest value is %s; the generator just issued %s. Ids from the generator would collide with existing rows, now or later.', v_max, v_first),
                  HINT = 'Keep the sequence for this table, or give the rows new ids below the generator''s (and update the rows that reference them) before converting.';
    END IF;

    IF v_att.attidentity <> '' THEN
        EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I DROP IDENTITY', tab, col);
    END IF;
    EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT %s', tab, col, v_next);
    IF v_owned THEN
        -- serial's sequence served only this column; another default that still uses it keeps
        -- it.
        BEGIN
            EXECUTE pg_catalog.format('DROP SEQUENCE %s', v_seq);
        EXCEPTION WHEN dependent_objects_still_exist THEN
            RAISE NOTICE 'sequence % was kept: other objects use it', v_seq;
        END;
    ELSIF v_seq IS NOT NULL AND v_att.attidentity = '' THEN
        RAISE NOTICE 'sequence % was kept: column % did not own it', v_seq, v_column;
    END IF;
    RETURN v_first;
END
$convert$;

COMMENT ON FUNCTION cosid_convert_column(regclass, name, text) IS
    'Switches a bigint column fed by a sequence (bigserial, identity) to DEFAULT cosid_next() (or a named generator''s), locking the table; refused unless every existing value is below the ids cosid issues now. Returns the id drawn for the check.';
