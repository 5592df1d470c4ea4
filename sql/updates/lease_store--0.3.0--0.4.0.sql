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
