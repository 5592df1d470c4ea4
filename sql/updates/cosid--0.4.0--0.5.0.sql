-- cosid 0.4.0 to 0.5.0: ALTER EXTENSION cosid UPDATE, before or after the server was restarted
-- with the library of 0.5.0 (see docs/upgrading.md): the library of 0.4.0 keeps working with
-- it, and the library of 0.5.0 claims nothing until it ran.
\echo Use "ALTER EXTENSION cosid UPDATE" to load this file. \quit

-- <lease store>: the statements of lease_store--0.4.0--0.5.0.sql, word for word (an update
-- script cannot include a file; a test compares the two).
--@include updates/lease_store--0.4.0--0.5.0.sql
-- </lease store>

-- Every name a named generator ever had, with its namespace: calls under one name (a column's
-- DEFAULT cosid_next('name')) must never get ids of two namespaces, whose layouts or machine
-- ids can give the same ids, so a name keeps its namespace after its generator is dropped.
CREATE TABLE cosid.generator_name (
    name          text        PRIMARY KEY,
    namespace     text        NOT NULL,
    first_used_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    UNIQUE (name, namespace)
);
COMMENT ON TABLE cosid.generator_name IS 'The namespace of every name a named cosid generator had. Rows cannot be deleted: a name keeps its namespace, so that the ids called under it never repeat.';

-- Refuses DELETE and TRUNCATE of the records a name and a namespace keep (DROP EXTENSION drops
-- the tables, and the uninstall guard says what it would lose).
CREATE FUNCTION cosid.generator_history_guard()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'rows of %.% cannot be deleted', TG_TABLE_SCHEMA, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege',
              DETAIL = 'A name keeps its namespace, and a namespace its layout, after its generator is dropped: ids of another namespace or layout could repeat the ids called under them.',
              HINT = 'Drop a generator with cosid_drop_generator(); its name and namespace stay reserved.';
END
$$;
CREATE TRIGGER generator_name_kept BEFORE DELETE ON cosid.generator_name
    FOR EACH ROW EXECUTE FUNCTION cosid.generator_history_guard();
CREATE TRIGGER generator_name_not_truncated BEFORE TRUNCATE ON cosid.generator_name
    FOR EACH STATEMENT EXECUTE FUNCTION cosid.generator_history_guard();
CREATE TRIGGER generator_namespace_kept BEFORE DELETE ON cosid.generator_namespace
    FOR EACH ROW EXECUTE FUNCTION cosid.generator_history_guard();
CREATE TRIGGER generator_namespace_not_truncated BEFORE TRUNCATE ON cosid.generator_namespace
    FOR EACH STATEMENT EXECUTE FUNCTION cosid.generator_history_guard();
COMMENT ON FUNCTION cosid.generator_history_guard() IS 'Trigger of cosid.generator_name and cosid.generator_namespace: refuses DELETE and TRUNCATE, since a name keeps its namespace and a namespace its layout.';
REVOKE ALL ON FUNCTION cosid.generator_history_guard() FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('cosid.generator_name', '');
-- The names defined now keep their namespaces. Of those dropped before 0.5.0 only the ones
-- whose namespace had their name (a namespace defaults to the name) are known.
INSERT INTO cosid.generator_name (name, namespace, first_used_at)
    SELECT g.name, g.namespace, g.created_at FROM cosid.generator g;
INSERT INTO cosid.generator_name (name, namespace, first_used_at)
    SELECT n.namespace, n.namespace, n.first_used_at FROM cosid.generator_namespace n
     WHERE n.namespace ~ '^[A-Za-z][A-Za-z0-9_]{0,62}$' AND n.namespace <> 'default'
    ON CONFLICT (name) DO NOTHING;
-- Every definition, however it got there (a restore, an older library), is under its name's
-- recorded namespace.
ALTER TABLE cosid.generator ADD CONSTRAINT generator_keeps_its_names_namespace
    FOREIGN KEY (name, namespace) REFERENCES cosid.generator_name (name, namespace);

-- Every namespace the server's default generator issued ids in, with its layout, as the data
-- directory's cosid.history records it: kept here too, since a copy of the database carries
-- it where the file stays behind (a promoted standby, a point-in-time recovery, pg_upgrade, both
-- files put back from an older backup), and a named generator in one of them could repeat the
-- default generator's ids. The worker that manages named generators adds the history's
-- namespaces each time it starts.
-- No key: a restored dump adds its rows to those the worker wrote, and nothing is lost.
CREATE TABLE cosid.default_namespace (
    namespace     text        NOT NULL,
    layout        text        NOT NULL,
    first_used_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE cosid.default_namespace IS 'Every namespace and layout the default cosid generator of this server issued ids in (the data directory''s cosid.history, kept where copies of the database carry it). Rows cannot be deleted: no named generator is created in these namespaces.';
CREATE TRIGGER default_namespace_kept BEFORE DELETE ON cosid.default_namespace
    FOR EACH ROW EXECUTE FUNCTION cosid.generator_history_guard();
CREATE TRIGGER default_namespace_not_truncated BEFORE TRUNCATE ON cosid.default_namespace
    FOR EACH STATEMENT EXECUTE FUNCTION cosid.generator_history_guard();
SELECT pg_catalog.pg_extension_config_dump('cosid.default_namespace', '');

-- The catalog comments of the store's new and changed functions (see src/sql/comments.rs).
COMMENT ON FUNCTION cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint, text, boolean) IS 'Lease protocol: claims a machine id of a namespace for a holder, which then waits for the returned watermark; answers settling while the store settles after its identity changed. Called by the cosid background worker.';
COMMENT ON FUNCTION cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint, text) IS 'Lease protocol: the claim as servers of cosid 0.2.0 to 0.4.0 call it, answering contended while the store settles.';
COMMENT ON FUNCTION cosid.lease_renew(text, integer, text, text, bigint, bigint, boolean) IS 'Lease protocol: renews a lease this holder holds and raises its watermark; no row means the lease is lost. While the store settles, a lease it shows expired only for a holder still generating.';
COMMENT ON FUNCTION cosid.lease_renew(text, integer, text, text, bigint, bigint) IS 'Lease protocol: the renewal as servers of cosid 0.1.0 to 0.4.0 call it.';
COMMENT ON FUNCTION cosid.store_identity_now() IS 'Lease protocol: this database''s identity now (system identifier, database oid, lease table oid, timeline, start of the server).';
COMMENT ON FUNCTION cosid.store_of(text) IS 'Lease protocol: the part of a store identity that names the store itself (cluster, database, lease table), without the timeline and the start.';
COMMENT ON FUNCTION cosid.store_caller_is_local() IS 'Lease protocol: whether the caller is one of this server''s own cosid background workers.';
COMMENT ON FUNCTION cosid.store_holder_seen() IS 'Lease protocol: records, once, that a holder other than this server''s own cosid workers wrote a lease here, after which a start of this server settles for its own workers too.';
COMMENT ON FUNCTION cosid.store_max_clock_lead_ms() IS 'Lease protocol: how far ahead of the store''s clock a holder''s clock may run, in milliseconds (cosid.store_settings.max_clock_lead).';
COMMENT ON FUNCTION cosid.lease_store_identity() IS 'Lease protocol: this store''s identity (system identifier, database, lease table, timeline, start), which a holder compares with the latest timeline it saw the store on.';
COMMENT ON FUNCTION cosid.store_settles_at(bigint) IS 'Lease protocol: until when the store hands out no released, new or expired machine id after its identity changed (a promotion, a point-in-time recovery, a restore, a start of its server), NULL when it need not; and its identity now.';
COMMENT ON FUNCTION cosid.store_guard_given(bigint) IS 'Lease protocol: records the safe guard a holder gave with a lease it wrote, if it is the longest yet, which the store settles for after its identity changed.';
COMMENT ON FUNCTION cosid.cosid_machine_settles_at(bigint) IS 'Lease protocol: for servers that lease from CosId''s JDBC table cosid_machine in this database, until when the store settles after its identity changed, the floor of a row taken now, the store''s clock and how far ahead of it a holder''s clock may run.';
COMMENT ON FUNCTION cosid.machine_lease_merge() IS 'Trigger of cosid.machine_lease: merges a restored row (pg_restore) into the row its machine id already has, keeping the higher watermark, instead of failing the COPY; refuses a row of another id layout than its namespace, or one that overlaps a claim held.';

-- cosid_convert_column refuses the extension's own tables (sql/convert_column.sql).
--@include convert_column.sql
--@from CREATE FUNCTION cosid_convert_column(tab regclass, col name, generator text DEFAULT NULL)
--@until COMMENT ON FUNCTION cosid_convert_column(regclass, name, text) IS
--@replace CREATE FUNCTION cosid_convert_column(tab regclass, col name, generator text DEFAULT NULL)
--@with CREATE OR REPLACE FUNCTION cosid_convert_column(tab regclass, col name, generator text DEFAULT NULL)
-- Each named generator's sequence reset threshold, NULL for its layout's own (CosId's: half its
-- maximum sequence); cosid_create_generator takes it as a new last argument.
ALTER TABLE cosid.generator ADD COLUMN sequence_reset_threshold integer,
    ADD CONSTRAINT generator_sequence_reset_threshold_check CHECK (sequence_reset_threshold
        BETWEEN 0 AND (1::pg_catalog.int8 OPERATOR(pg_catalog.<<) sequence_bits) - 1);
DROP FUNCTION cosid_create_generator(text, text, text, integer, integer, integer, timestamptz, text);
CREATE  FUNCTION "cosid_create_generator"(
	"name" text, /* Option < TextArg > */
	"layout" text DEFAULT 'millisecond', /* Option < TextArg > */
	"namespace" text DEFAULT NULL, /* Option < TextArg > */
	"machine_bits" INT DEFAULT NULL, /* Option < i32 > */
	"sequence_bits" INT DEFAULT NULL, /* Option < i32 > */
	"timestamp_bits" INT DEFAULT NULL, /* Option < i32 > */
	"epoch" timestamp with time zone DEFAULT NULL, /* Option < TimestampWithTimeZone > */
	"time_unit" text DEFAULT NULL, /* Option < TextArg > */
	"sequence_reset_threshold" INT DEFAULT NULL /* Option < i32 > */
) RETURNS void
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'cosid_create_generator_v5_wrapper';
REVOKE ALL ON FUNCTION cosid_create_generator(text, text, text, integer, integer, integer, timestamptz, text, integer) FROM PUBLIC;
COMMENT ON FUNCTION cosid_create_generator(text, text, text, integer, integer, integer, timestamptz, text, integer) IS 'Defines a named cosid generator, in the database cosid.database; usable from every database of the server within about a second. Superusers only.';

-- cosid.status gains renewal_failures, a counter for monitoring, and problem, a code. Its function
-- is a new C symbol of the 0.5.0 library, and the view is replaced in place as the update to 0.4.0
-- replaced it: refused first, nothing changed, while other objects use the function or return rows
-- of the view; the old function set aside, the new one created, the view pointed at it, the grants
-- of the old one carried over, the old one dropped.
--@include updates/cosid--0.3.0--0.4.0.sql
--@from DO $status$
--@until CREATE  FUNCTION cosid."generator_status"() RETURNS TABLE (
--@replace                   DETAIL = pg_catalog.format('cosid.status gains two columns in 0.4.0, and the function behind it is replaced. These objects would not survive it: %s.', v_dependents),
--@with                   DETAIL = pg_catalog.format('cosid.status gains two columns in 0.5.0, and the function behind it is replaced. These objects would not survive it: %s.', v_dependents),
--@replace ALTER FUNCTION cosid.generator_status() RENAME TO generator_status_0_3_0;
--@with ALTER FUNCTION cosid.generator_status() RENAME TO generator_status_0_4_0;
--@include updates/cosid--0.3.0--0.4.0.sql
--@from CREATE  FUNCTION cosid."generator_status"() RETURNS TABLE (
--@until 	"safe_guard_margin" interval  /* Option < Interval > */
	"safe_guard_margin" interval,  /* Option < Interval > */
	"renewal_failures" bigint,  /* Option < i64 > */
	"problem" TEXT  /* Option < String > */
)
STRICT VOLATILE PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'generator_status_v5_wrapper';

CREATE OR REPLACE VIEW cosid.status AS SELECT * FROM cosid.generator_status();
--@include updates/cosid--0.3.0--0.4.0.sql
--@from -- A reader of the view needs EXECUTE on the function too: those who were granted it by hand
--@until COMMENT ON VIEW cosid.status IS 'One row per cosid generator of this server: configuration and state.';
--@replace -- keep it (PUBLIC's default EXECUTE of 0.3.0 is not carried over: see below).
--@with -- keep it.
--@replace          WHERE p.oid = 'cosid.generator_status_0_3_0()'::pg_catalog.regprocedure
--@with          WHERE p.oid = 'cosid.generator_status_0_4_0()'::pg_catalog.regprocedure
--@replace DROP FUNCTION cosid.generator_status_0_3_0();
--@with DROP FUNCTION cosid.generator_status_0_4_0();
COMMENT ON COLUMN cosid.status.problem IS 'Why the generator is not UP, as a code for machines: exhausted, store_error, store_read_only, store_settling, lost, clock_behind, clock_ahead, history, state_file, settings, ...; NULL when UP or when the kind is not known.';
COMMENT ON COLUMN cosid.status.renewal_failures IS 'Lease renewals that did not renew since the server started: the store failed (DOWN) or no longer showed the lease (LOST); NULL without a lease.';
COMMENT ON FUNCTION cosid.generator_status() IS 'The rows of the view cosid.status.';
REVOKE ALL ON FUNCTION cosid.generator_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION cosid.generator_status() TO pg_monitor;
