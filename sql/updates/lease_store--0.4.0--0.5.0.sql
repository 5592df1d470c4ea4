-- Updates a cosid lease store from version 0.4.0 to 0.5.0, while it is in use. For a shared
-- store of a fleet run it with
--   psql -v ON_ERROR_STOP=1 --single-transaction -f lease_store--0.4.0--0.5.0.sql
-- ALTER EXTENSION cosid UPDATE runs the same statements for the store inside the extension.
--
-- What changes: the store records its identity (system identifier, database, lease table,
-- timeline, start of its server), and after it changes (a promoted standby, a point-in-time
-- recovery, a restore elsewhere or over the lease table, a start of the server) hands out
-- no machine id as released, new or expired until a whole safe guard has passed, since it may
-- have forgotten claims, renewals and releases it acknowledged (cosid.store_settles_at()). The
-- identity it has now is recorded as settled, and the rows as written in it: an update in
-- place forgets nothing (a 0.4.0 store restored from a dump is not told apart: see
-- docs/upgrading.md). A row that pg_restore brings for a machine id the store has a row of is
-- merged into it (cosid.machine_lease_merge()) instead of failing the COPY. Servers of
-- 0.5.0 claim and renew through the new forms (lease_claim with p_knows_settling, lease_renew
-- with p_holder_live) and need this store; servers of 0.1.0 to 0.4.0 keep claiming, renewing
-- and releasing through the old forms, which follow the same rule. Servers that lease from
-- CosId's table cosid_machine in this database (cosid_jdbc) follow it through
-- cosid.cosid_machine_settles_at(). Everything it creates is what lease_store.sql of 0.5.0
-- creates, in the same words.

--@include updates/lease_store--0.3.0--0.4.0.sql
--@from -- Checks before anything changes, with search_path pinned (see lease_store.sql); the path is
--@until GRANT USAGE ON SCHEMA cosid TO pg_monitor;
--@replace     -- Only a store of version 0.3.0 is updated, in one transaction, and a store of the
--@with     -- Only a store of version 0.4.0 is updated, in one transaction, and a store of the
--@replace              OR v_found IS DISTINCT FROM '0.3.0'
--@with              OR v_found IS DISTINCT FROM '0.4.0'
--@replace             THEN 'this database has no cosid lease store of version 0.3.0'
--@with             THEN 'this database has no cosid lease store of version 0.4.0'
--@replace             USING DETAIL = 'This file updates a lease store of version 0.3.0 (see cosid.lease_store_version()) to 0.4.0. The rest of this session is read-only.',
--@with             USING DETAIL = 'This file updates a lease store of version 0.4.0 (see cosid.lease_store_version()) to 0.5.0. The rest of this session is read-only.',
--@replace                   HINT = 'Run it with psql -v ON_ERROR_STOP=1 --single-transaction -f lease_store--0.3.0--0.4.0.sql.';
--@with                   HINT = 'Run it with psql -v ON_ERROR_STOP=1 --single-transaction -f lease_store--0.4.0--0.5.0.sql.';
--@include lease_store.sql
--@from -- A role that is not a superuser (a managed service's administrator, with CREATEROLE) may give
--@until CREATE TABLE cosid.machine_lease (
--@include lease_store.sql
--@from -- The identity of the store the leases were last written in, and since when: a promoted
--@until -- What the next holder of a lease must wait for: the exact last timestamp of a release, else the
-- Where each row was last written: here, for the rows this store has now.
ALTER TABLE cosid.machine_lease ADD COLUMN written_in text NOT NULL DEFAULT '';
UPDATE cosid.machine_lease SET written_in = cosid.store_identity_now();
-- This store, updated in place, forgot nothing.
INSERT INTO cosid.store_identity (identity, seen_at, settles)
    SELECT cosid.store_identity_now(), pg_catalog.clock_timestamp(), false;

--@-- The functions of 0.4.0 are replaced, the new overloads created.
--@include lease_store.sql
--@from -- A restored row that meets the row of its machine id: pg_restore copying the rows into a
--@until -- they still run: the same claim, answering 'contended' (try again) while the store settles.
--@include lease_store.sql
--@from -- they still run: the same claim, answering 'contended' (try again) while the store settles.
--@until -- Renews a lease held by this instance and claim token, and raises its watermark. No row means
--@replace CREATE FUNCTION cosid.lease_claim(
--@with CREATE OR REPLACE FUNCTION cosid.lease_claim(
--@include lease_store.sql
--@from -- Renews a lease held by this instance and claim token, and raises its watermark. No row means
--@until -- The renewal as servers of cosid 0.1.0 to 0.4.0 call it: while the store settles, only a lease
--@include lease_store.sql
--@from -- The renewal as servers of cosid 0.1.0 to 0.4.0 call it: while the store settles, only a lease
--@until -- Every lease with its holder's state and the time it has left, by the store's clock; claim
--@replace CREATE FUNCTION cosid.lease_renew(
--@with CREATE OR REPLACE FUNCTION cosid.lease_renew(
--@replace CREATE FUNCTION cosid.lease_release(
--@with CREATE OR REPLACE FUNCTION cosid.lease_release(
--@replace CREATE FUNCTION cosid.lease_retire(p_namespace text, p_machine_id integer DEFAULT NULL)
--@with CREATE OR REPLACE FUNCTION cosid.lease_retire(p_namespace text, p_machine_id integer DEFAULT NULL)
-- Which version of this file the store is: the update scripts check it.
CREATE OR REPLACE FUNCTION cosid.lease_store_version()
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT '0.5.0'::text $$;

ALTER TABLE cosid.store_identity OWNER TO cosid_lease_owner;
ALTER TABLE cosid.store_settings OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.store_max_clock_lead_ms() OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.store_identity_now() OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.store_of(text) OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.store_caller_is_local() OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.store_holder_seen() OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.lease_store_identity() OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.store_settles_at(bigint) OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.store_guard_given(bigint) OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.cosid_machine_settles_at(bigint) OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.machine_lease_merge() OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint, text, boolean) OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.lease_renew(text, integer, text, text, bigint, bigint, boolean) OWNER TO cosid_lease_owner;

REVOKE ALL ON TABLE cosid.store_identity, cosid.store_settings FROM PUBLIC;
REVOKE ALL ON FUNCTION cosid.store_identity_now(), cosid.store_settles_at(bigint),
    cosid.store_of(text), cosid.store_caller_is_local(), cosid.store_holder_seen(),
    cosid.store_max_clock_lead_ms(), cosid.lease_store_identity(),
    cosid.store_guard_given(bigint), cosid.cosid_machine_settles_at(bigint),
    cosid.machine_lease_merge(),
    cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint, text, boolean),
    cosid.lease_renew(text, integer, text, text, bigint, bigint, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint, text, boolean),
    cosid.lease_renew(text, integer, text, text, bigint, bigint, boolean),
    cosid.lease_store_identity(), cosid.cosid_machine_settles_at(bigint) TO cosid_lease_holder;

--@include lease_store.sql
--@from -- cosid.store_caller_is_local() reads the type of the calling process, which PostgreSQL shows
--@until -- What the block before the objects were given to cosid_lease_owner granted is taken back, with
--@include lease_store.sql
--@from -- What the block before the objects were given to cosid_lease_owner granted is taken back, with
