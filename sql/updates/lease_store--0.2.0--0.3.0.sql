-- Updates a cosid lease store from version 0.2.0 to 0.3.0, while it is in use. For a shared
-- store of a fleet run it with
--   psql -v ON_ERROR_STOP=1 --single-transaction -f lease_store--0.2.0--0.3.0.sql
-- ALTER EXTENSION cosid UPDATE runs the same statements for the store inside the extension.
--
-- What changes: a namespace keeps the id layout of its rows for as long as they exist, held or
-- released (0.2.0 compared only live leases, so a namespace whose leases had all ended took a
-- server of another layout, whose ids could equal ids issued before); and
-- cosid.lease_namespace_layout() says which layout a namespace keeps. Servers of 0.1.0 and
-- 0.2.0 keep claiming, renewing and releasing through it; a server of 0.3.0 refuses a store of
-- 0.2.0. Everything it creates is what lease_store.sql of 0.3.0 creates, in the same words.

-- Checks before anything changes, with search_path pinned (see lease_store.sql); the path is
-- restored for the statements after it.
DO $update$
DECLARE
    v_path         text := pg_catalog.current_setting('search_path');
    v_in_extension boolean;
    v_found        text;
    v_refused      text;
BEGIN
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    IF EXISTS (SELECT FROM pg_catalog.pg_namespace n
                WHERE n.nspname = 'cosid'
                  AND n.nspowner <> (SELECT r.oid FROM pg_catalog.pg_roles r
                                      WHERE r.rolname = current_user)) THEN
        RAISE EXCEPTION 'schema cosid exists and belongs to another role'
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'The owner of schema cosid could replace the lease table and the protocol''s functions.',
                  HINT = 'Update as the role that owns schema cosid.';
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
    -- Only a store of version 0.2.0 is updated, in one transaction, and a store of the
    -- extension only by ALTER EXTENSION. Anything else is left alone: this transaction and the
    -- rest of the session are made read-only, so that the statements after this one fail too.
    v_refused := CASE
        WHEN pg_catalog.to_regclass('cosid.machine_lease') IS NULL
             OR v_found IS DISTINCT FROM '0.2.0'
            THEN 'this database has no cosid lease store of version 0.2.0'
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
            USING DETAIL = 'This file updates a lease store of version 0.2.0 (see cosid.lease_store_version()) to 0.3.0. The rest of this session is read-only.',
                  HINT = 'Run it with psql -v ON_ERROR_STOP=1 --single-transaction -f lease_store--0.2.0--0.3.0.sql.';
        RETURN;
    END IF;
    -- Claims queue behind the update for a few seconds at most.
    PERFORM pg_catalog.set_config('lock_timeout', '3s', true);
    PERFORM pg_catalog.set_config('search_path', v_path, true);
END
$update$;

CREATE OR REPLACE FUNCTION cosid.lease_claim(
    p_namespace     text,
    p_machine_bits  integer,
    p_instance_id   text,
    p_stable        boolean,
    p_safe_guard_ms bigint,
    p_claim_token   text,
--@-- The claim of 0.2.0 with the layout check changed: the rest is 0.2.0's text.
--@include updates/lease_store--0.1.0--0.2.0.sql
--@from     p_watermark_ms  bigint,
--@until     -- Servers of one namespace must share a layout: ids of two layouts can coincide.
    -- Servers of one namespace must share a layout: ids of two layouts can coincide. A
    -- namespace keeps the layout of its rows for as long as they exist, held or not: a
    -- watermark compares instants, and two layouts give the same id to different instants.
    IF EXISTS (SELECT FROM cosid.machine_lease l
                WHERE l.namespace = p_namespace
                  AND ((l.layout <> '' AND p_layout <> '' AND l.layout <> p_layout)
                       OR (l.machine_bits <> p_machine_bits
                           AND l.state = 'claimed' AND (l.stable OR l.expires_at > v_now)))) THEN
--@include updates/lease_store--0.1.0--0.2.0.sql
--@from         RETURN QUERY SELECT 'layout'::text, NULL::integer, NULL::bigint, NULL::bigint,
--@until -- The claim as servers of cosid 0.1.0 call it (no layout, times as timestamptz), so that a store
-- The id layout a namespace keeps (NULL for a namespace without rows, or only rows of 0.1.0's
-- servers, which did not say): what a claim with another layout is refused for.
CREATE FUNCTION cosid.lease_namespace_layout(p_namespace text)
RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
SELECT l.layout FROM cosid.machine_lease l
 WHERE l.namespace = p_namespace AND l.layout <> ''
 ORDER BY l.renewed_at DESC LIMIT 1
$$;

CREATE OR REPLACE FUNCTION cosid.lease_store_version()
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT '0.3.0'::text $$;

ALTER FUNCTION cosid.lease_namespace_layout(text) OWNER TO cosid_lease_owner;
REVOKE ALL ON FUNCTION cosid.lease_namespace_layout(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION cosid.lease_namespace_layout(text) TO cosid_lease_holder;
