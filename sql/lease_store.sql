-- cosid's lease store, version 0.5.0: the table of machine-id leases and the protocol that
-- claims, renews and releases them. Every holder calls these functions, so the rules live here
-- once. CREATE EXTENSION cosid installs it; for a shared store of a fleet, run it with
--   psql -v ON_ERROR_STOP=1 --single-transaction -f lease_store.sql
-- A store installed already is left alone: update it with lease_store--<from>--<to>.sql, one
-- version at a time (cosid.lease_store_version() says which version it is).
--
-- All times come from this database's clock (clock_timestamp()). A claimer decides expiry from
-- the row (expires_at = the holder's renewal time + the holder's own safe guard), never from its
-- own clock or settings. Watermarks are Unix milliseconds on the holders' clocks.
--
-- Safety rules this file keeps (see the README's security section):
-- - A machine id without a row is presumed never used, so no row can vanish by ordinary SQL:
--   DELETE and TRUNCATE are refused, and rows are retired only by cosid.lease_retire(), for
--   machine ids that are not held and whose ids are all in the past.
-- - watermark_ms, the upper bound of every timestamp issued under a machine id, only ever rises.
-- - The tables are private to the NOLOGIN role cosid_lease_owner. Holders act only through the
--   protocol's functions (SECURITY DEFINER, search_path pinned), granted to cosid_lease_holder,
--   and only on their own claim: nobody can read another holder's claim token.
-- - Claims of a namespace are serialised by a row lock on a private table, which no other role
--   can take.
-- - A store that may have forgotten acknowledged writes (a promoted standby, a point-in-time
--   recovery, a restore into another cluster or database) is never trusted at once: after its
--   identity changes, no machine id is handed out as released, new or expired until a whole
--   safe guard has passed, while holders whose claim it still shows keep renewing.
-- - Every duration and timestamp a holder passes is checked against its limit before anything
--   is computed or recorded from it (a safe guard of 1 ms to a day; a watermark of 0 to the
--   safe guard and an hour ahead of the store's clock), and recording a change of the store's
--   identity takes no lock: a holder's open transaction holds nothing another caller waits for,
--   beyond the lease rows and namespace it claimed itself.
-- - Members of pg_monitor read cosid.leases (no claim token is in it) and nothing else: schema
--   cosid, the view and the function behind it.

-- Checks before anything is made. A schema cosid that somebody else created first would let its
-- owner replace the table and the functions: refused. The roles may exist already (another
-- database of the cluster has the store or the extension); they must then still be what this
-- file makes them. The block runs with search_path pinned, so that no operator a role with
-- CREATE on some schema defines can stand in for pg_catalog's (CREATE EXTENSION runs this with
-- the extension's schema in the path); the path is restored for the statements after it.
DO $roles$
DECLARE
    v_path  text := pg_catalog.current_setting('search_path');
    v_found text;
BEGIN
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    IF EXISTS (SELECT FROM pg_catalog.pg_namespace n
                WHERE n.nspname = 'cosid'
                  AND n.nspowner <> (SELECT r.oid FROM pg_catalog.pg_roles r
                                      WHERE r.rolname = current_user)) THEN
        RAISE EXCEPTION 'schema cosid exists and belongs to another role'
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'The owner of schema cosid could replace the lease table and the protocol''s functions.',
                  HINT = 'Install into a database without a schema cosid, or as the role that owns it.';
    END IF;
    -- The one membership allowed is the installing role's ADMIN OPTION without INHERIT and
    -- SET, which PostgreSQL 16 and later give the role that creates a role: it lets that role
    -- grant itself cosid_lease_owner, as CREATEROLE alone does on PostgreSQL 15, and the owner
    -- of schema cosid could drop the store's objects anyway. Any other member (on 15, any
    -- member at all) can act as cosid_lease_owner.
    IF EXISTS (SELECT FROM pg_catalog.pg_roles r
                WHERE r.rolname IN ('cosid_lease_owner', 'cosid_lease_holder') AND r.rolcanlogin)
       OR EXISTS (SELECT FROM pg_catalog.pg_auth_members m
                    JOIN pg_catalog.pg_roles r ON r.oid = m.roleid
                   WHERE r.rolname = 'cosid_lease_owner'
                     AND NOT (m.member = (SELECT u.oid FROM pg_catalog.pg_roles u
                                           WHERE u.rolname = current_user)
                              AND m.admin_option
                              AND NOT coalesce((pg_catalog.to_jsonb(m) ->> 'inherit_option')::boolean, true)
                              AND NOT coalesce((pg_catalog.to_jsonb(m) ->> 'set_option')::boolean, true))) THEN
        RAISE EXCEPTION 'the roles cosid_lease_owner and cosid_lease_holder must be NOLOGIN, and cosid_lease_owner must have no members'
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'cosid_lease_owner owns the lease table and the protocol: whoever can act as it can change every lease.',
                  HINT = 'Drop or fix the roles of that name, then install again.';
    END IF;
    -- Installed already: nothing here may run over it. This transaction and the rest of the
    -- session are made read-only, so that the statements after this one fail too, also when
    -- psql goes on after an error. The version is read, never run.
    IF pg_catalog.to_regclass('cosid.machine_lease') IS NOT NULL THEN
        SELECT coalesce(pg_catalog.substring(p.prosrc, '''([0-9.]+)'''), 'unknown') INTO v_found
          FROM pg_catalog.pg_proc p
         WHERE p.oid = pg_catalog.to_regprocedure('cosid.lease_store_version()');
        v_found := coalesce(v_found, '0.1.0');
        PERFORM pg_catalog.set_config('default_transaction_read_only', 'on', false);
        PERFORM pg_catalog.set_config('transaction_read_only', 'on', true);
        RAISE WARNING 'a cosid lease store (version %) is installed in this database already; nothing was changed', v_found
            USING DETAIL = 'This file installs version 0.5.0 into a database that has none. The rest of this session is read-only.',
                  HINT = pg_catalog.format('To update the store, run lease_store--%s--<next>.sql with psql -v ON_ERROR_STOP=1 --single-transaction, one version at a time.', v_found);
        PERFORM pg_catalog.set_config('search_path', v_path, true);
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'cosid_lease_owner') THEN
        CREATE ROLE cosid_lease_owner NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'cosid_lease_holder') THEN
        CREATE ROLE cosid_lease_holder NOLOGIN;
    END IF;
    PERFORM pg_catalog.set_config('search_path', v_path, true);
END
$roles$;

CREATE SCHEMA IF NOT EXISTS cosid;
GRANT USAGE ON SCHEMA cosid TO cosid_lease_owner, cosid_lease_holder, pg_monitor;

-- A role that is not a superuser (a managed service's administrator, with CREATEROLE) may give
-- objects to cosid_lease_owner, and grant and revoke on them as their owner, only while it has
-- that role's privileges and may SET ROLE to it, and while cosid_lease_owner may create in
-- schema cosid. It gets both for this transaction: it grants itself cosid_lease_owner (which
-- CREATEROLE allows on PostgreSQL 15, and ADMIN OPTION on the role, which the role that created
-- it has, on 16 and later), and cosid_lease_owner CREATE on the schema. The block after the
-- last grant below takes both back, with any membership createrole_self_grant gave it, and
-- checks that nobody but superusers can act as cosid_lease_owner. A superuser needs neither.
DO $owner$
DECLARE
    v_path text := pg_catalog.current_setting('search_path');
BEGIN
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    IF NOT pg_catalog.current_setting('transaction_read_only')::boolean
       AND NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user) THEN
        BEGIN
            IF pg_catalog.current_setting('server_version_num')::integer < 160000 THEN
                IF NOT pg_catalog.pg_has_role('cosid_lease_owner', 'MEMBER') THEN
                    EXECUTE pg_catalog.format('GRANT cosid_lease_owner TO %I', current_user);
                END IF;
            ELSIF NOT (pg_catalog.pg_has_role('cosid_lease_owner', 'USAGE')
                       AND pg_catalog.pg_has_role('cosid_lease_owner', 'SET')) THEN
                EXECUTE pg_catalog.format('GRANT cosid_lease_owner TO %I WITH INHERIT TRUE, SET TRUE', current_user);
            END IF;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE EXCEPTION 'role "%" cannot give objects to role cosid_lease_owner', current_user
                USING ERRCODE = 'insufficient_privilege',
                      DETAIL = 'A role that is not a superuser gives objects to a role only while it may act as it, and this role may not grant itself cosid_lease_owner: that takes CREATEROLE on PostgreSQL 15, and ADMIN OPTION on cosid_lease_owner (which the role that created it has) on 16 and later.',
                      HINT = pg_catalog.format('Run this file as the role that created cosid_lease_owner and cosid_lease_holder, or as a superuser, or have a superuser run GRANT cosid_lease_owner TO %I WITH ADMIN OPTION, INHERIT FALSE, SET FALSE (on PostgreSQL 15: ALTER ROLE %I CREATEROLE) first.', current_user, current_user);
        END;
        IF NOT pg_catalog.pg_has_role('cosid_lease_owner', 'USAGE') THEN
            RAISE EXCEPTION 'role "%" cannot use the privileges of role cosid_lease_owner', current_user
                USING ERRCODE = 'insufficient_privilege',
                      DETAIL = 'A role that is not a superuser grants and revokes on objects of cosid_lease_owner only with that role''s privileges, which a role with NOINHERIT does not use.',
                      HINT = pg_catalog.format('Run this file as a superuser, or after ALTER ROLE %I INHERIT.', current_user);
        END IF;
        GRANT CREATE ON SCHEMA cosid TO cosid_lease_owner;
    END IF;
    PERFORM pg_catalog.set_config('search_path', v_path, true);
END
$owner$;

CREATE TABLE cosid.machine_lease (
    namespace      text        NOT NULL,
    machine_id     integer     NOT NULL CHECK (machine_id >= 0),
    machine_bits   integer     NOT NULL CHECK (machine_bits >= 0 AND machine_bits <= 31),
    instance_id    text        NOT NULL,
    claim_token    text        NOT NULL,
    stable         boolean     NOT NULL,
    state          text        NOT NULL CHECK (state IN ('claimed', 'released')),
    claimed_at     timestamptz NOT NULL,
    renewed_at     timestamptz NOT NULL,
    expires_at     timestamptz NOT NULL,
    safe_guard     interval    NOT NULL,
    -- An upper bound on every timestamp issued under this machine id: only ever raised.
    watermark_ms   bigint      NOT NULL,
    -- The watermark the current claim found: what the holders before it may have issued.
    claim_floor_ms bigint      NOT NULL DEFAULT 0,
    -- Set by a release: the exact last timestamp the holder issued (never below claim_floor_ms),
    -- which the next claim waits for instead of the bound; cleared by every claim.
    released_ms    bigint,
    -- The holder's whole id layout (epoch, time unit, bits); '' when a caller did not say.
    layout         text        NOT NULL DEFAULT '',
    -- The store's identity when the protocol last wrote the row (see cosid.store_identity):
    -- a row restored from elsewhere, or from before 0.5.0 (''), has another one.
    written_in     text        NOT NULL DEFAULT '',
    PRIMARY KEY (namespace, machine_id)
);

COMMENT ON TABLE cosid.machine_lease IS
    'Machine-id leases of cosid: one row per namespace and machine id ever claimed. Rows are never deleted by ordinary SQL; see cosid.lease_retire().';

-- One row per namespace, locked by every claim of the namespace: claims are serialised by a lock
-- that only the protocol's owner can take.
CREATE TABLE cosid.lease_namespace (
    namespace  text        PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp()
);

COMMENT ON TABLE cosid.lease_namespace IS
    'Namespaces of cosid''s machine-id leases; claims of a namespace lock its row.';

-- The identity of the store the leases were last written in, and since when: a promoted
-- standby, a point-in-time recovery, a restore into another cluster or database, a restore over
-- the lease table (pg_restore --clean) and a start of the store's server (an older copy of its
-- data directory put back, a base backup started without recovery, the old primary started
-- again after a failover look the same as a restart) each give the store another identity, and
-- each may have lost writes whose commit the holders were told of. A record that only grows,
-- one row per sighting, so that recording one never waits for, nor makes anybody wait for,
-- another caller's transaction (a holder's credential may keep one open): the identity it was
-- made in (a lease row written in an earlier timeline or start of the same cluster, database
-- and lease table that is recorded here is the store's own), when, whether it is a change to
-- wait out (settles; not the identity found at install or at an update in place), the
-- versions of lease rows written elsewhere that it accounts for (rows_seen), a safe guard a
-- holder gave with a write (max_safe_guard: the longest ever given is the greatest of the
-- rows'), whether the change is a start of the server alone (restart), and whether a holder
-- other than this server's own cosid workers ever wrote here (shared).
CREATE TABLE cosid.store_identity (
    identity       text        NOT NULL,
    seen_at        timestamptz NOT NULL,
    settles        boolean     NOT NULL,
    max_safe_guard interval    NOT NULL DEFAULT interval '0',
    rows_seen      text[]      NOT NULL DEFAULT '{}',
    -- The change is a start of the store's server and nothing else (see
    -- cosid.store_settles_at()).
    restart        boolean     NOT NULL DEFAULT false,
    -- A holder other than this server's own cosid workers wrote a lease here (see
    -- cosid.store_holder_seen()).
    shared         boolean     NOT NULL DEFAULT false
);

COMMENT ON TABLE cosid.store_identity IS
    'The identities of the database cosid''s leases were written in (system identifier, timeline, database), when each change was first seen, and the longest safe guard any holder gave.';

-- This database's identity now: the cluster's system identifier (a new one in another
-- cluster), the database's oid (a new one in every restore into a new database), the lease
-- table's oid (a new one when a restore drops and creates it again), the timeline WAL is written
-- on (a new one at every promotion and point-in-time recovery), and when the server started (a
-- new one at every start: a copy of the data directory put back or a base backup started
-- without recovery starts on the same timeline, and lost what was written after the copy).
CREATE FUNCTION cosid.store_identity_now()
RETURNS text
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT format('system %s, database %s, lease table %s, timeline %s, started %s',
              (SELECT s.system_identifier FROM pg_control_system() s),
              (SELECT d.oid FROM pg_database d WHERE d.datname = current_database()),
              'cosid.machine_lease'::regclass::oid,
              ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint,
              (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint)
$$;

-- The part of an identity that names the store itself (cluster, database, lease table), without
-- the timeline and the start: rows written under an earlier one of those, recorded here, are
-- the store's own.
CREATE FUNCTION cosid.store_of(p_identity text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT regexp_replace(p_identity, ', timeline [0-9]+, started [0-9]+$', '') $$;

-- Whether the caller is one of this server's own cosid background workers (its lease worker or
-- the one that runs named generators), which the lease table of its own cosid.database serves:
-- a process type no client can take.
CREATE FUNCTION cosid.store_caller_is_local()
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT coalesce((SELECT a.backend_type IN ('cosid lease worker', 'cosid generators worker')
                   FROM pg_stat_get_activity(pg_backend_pid()) a), false)
$$;

-- Records, once, that a holder other than this server's own cosid workers wrote a lease here:
-- from then on a start of this server settles for its own workers' claims too. Called after
-- cosid.store_settles_at(), since its row is a sighting of the identity now.
CREATE FUNCTION cosid.store_holder_seen()
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
INSERT INTO cosid.store_identity (identity, seen_at, settles, shared)
SELECT cosid.store_identity_now(), clock_timestamp(), false, true
 WHERE NOT cosid.store_caller_is_local()
   AND NOT EXISTS (SELECT FROM cosid.store_identity i WHERE i.shared)
$$;

-- This store's identity, for a holder to compare with what it saw before: a server that saw a
-- newer timeline of the store never takes an older one (an old primary) for it again.
CREATE FUNCTION cosid.lease_store_identity()
RETURNS text
LANGUAGE sql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT cosid.store_identity_now() $$;

-- Until when this store must not hand out a machine id as released, new or expired (NULL when
-- it need not), and its identity now, which every protocol write records in its row. A call
-- that finds an identity this store never recorded, or lease rows written elsewhere (a restore
-- into this database) that no sighting accounts for, records the change with the time, and the
-- store settles a whole safe guard after the change was first seen: the longest any holder
-- ever gave, any row records, or the caller's, at most a day. A holder whose claim, renewal or
-- release the store forgot stops generating within its safe guard of its last write, which was
-- before the change was seen (Chubby's lock delay). Every sighting made after the change is as
-- safe as the first: a caller that cannot see another's uncommitted one records its own, and
-- the earliest of a change's sightings counts, so that a sighting committed late (from an old
-- snapshot) delays nothing. Nothing here locks a row: a caller's open transaction holds only
-- the rows it inserted, which nobody waits for. The safe guard must be 1 ms to a day.
-- A start of the store's server is a change too: the server cannot tell a restart from an
-- older copy of its data directory started in its place; it settles a safe guard after the
-- start. Only this server's own cosid workers,
-- whose earlier processes all ended with the server, do not wait one out, as long as no other
-- holder ever wrote here (cosid.store_holder_seen()).
CREATE FUNCTION cosid.store_settles_at(p_safe_guard_ms bigint,
                                       OUT settles_at timestamptz, OUT identity text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_unseen  text[];
    v_seen    timestamptz;
    v_private boolean;
BEGIN
    IF p_safe_guard_ms IS NULL OR p_safe_guard_ms < 1 OR p_safe_guard_ms > 86400000 THEN
        RAISE EXCEPTION 'invalid safe guard % ms', p_safe_guard_ms
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A safe guard is from 1 ms to a day (86400000 ms).';
    END IF;
    identity := cosid.store_identity_now();
    -- Rows written neither now nor in an earlier timeline or start of this cluster, database
    -- and lease table that this store recorded (not rows that a restore brought with the
    -- record of another store), each version of which counts once (a row merged again by a
    -- restore is a new version).
    SELECT array_agg(md5(l.xmin::text || ' ' || l::text)) INTO v_unseen
      FROM cosid.machine_lease l
     WHERE l.written_in <> store_settles_at.identity
       AND NOT (cosid.store_of(l.written_in) = cosid.store_of(store_settles_at.identity)
                AND l.written_in IN (SELECT i.identity FROM cosid.store_identity i))
       AND md5(l.xmin::text || ' ' || l::text)
           NOT IN (SELECT r.version FROM cosid.store_identity i, unnest(i.rows_seen) r(version));
    IF v_unseen IS NOT NULL
       OR NOT EXISTS (SELECT FROM cosid.store_identity i
                       WHERE i.identity = store_settles_at.identity) THEN
        INSERT INTO cosid.store_identity (identity, seen_at, settles, rows_seen, restart)
            VALUES (store_settles_at.identity, clock_timestamp(), true, coalesce(v_unseen, '{}'),
                    -- The same cluster, database, lease table and timeline: a start alone.
                    v_unseen IS NULL AND EXISTS (
                        SELECT FROM cosid.store_identity i
                         WHERE regexp_replace(i.identity, ', started [0-9]+$', '')
                               = regexp_replace(store_settles_at.identity,
                                                ', started [0-9]+$', '')));
    END IF;
    v_private := cosid.store_caller_is_local()
                 AND NOT EXISTS (SELECT FROM cosid.store_identity i WHERE i.shared);
    -- When the last change was first seen: the store's identity, or a row written elsewhere.
    -- A start of the server alone happened when the server started, before every write of
    -- it: counted from then, also by a caller whose sighting is rolled back (a refused
    -- cosid.lease_retire() records nothing).
    v_seen := greatest(
        (SELECT min(CASE WHEN i.restart THEN pg_postmaster_start_time() ELSE i.seen_at END)
           FROM cosid.store_identity i
          WHERE i.identity = store_settles_at.identity AND i.settles
            AND NOT (i.restart AND v_private)),
        (SELECT max(f.first_seen)
           FROM (SELECT min(i.seen_at) AS first_seen
                   FROM cosid.store_identity i, unnest(i.rows_seen) r(version)
                  GROUP BY r.version) f));
    -- A safe guard is at most a day.
    IF v_seen > clock_timestamp() - interval '1 day' THEN
        settles_at := v_seen
            + least(interval '1 day',
                    greatest(p_safe_guard_ms * interval '1 millisecond',
                             (SELECT max(i.max_safe_guard) FROM cosid.store_identity i),
                             (SELECT max(l.safe_guard) FROM cosid.machine_lease l)));
    END IF;
END
$$;

-- Records the safe guard (1 ms to a day) a holder gave with a lease it wrote, if it is longer
-- than any recorded: a row of its own, not an update, so that nobody waits for it; rounded up
-- to a whole second, so that at most one row a second of safe guard is ever added.
CREATE FUNCTION cosid.store_guard_given(p_safe_guard_ms bigint)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
INSERT INTO cosid.store_identity (identity, seen_at, settles, max_safe_guard)
SELECT cosid.store_identity_now(), clock_timestamp(), false,
       ceil(p_safe_guard_ms / 1000.0)::double precision * interval '1 second'
 WHERE p_safe_guard_ms BETWEEN 1 AND 86400000
   AND NOT EXISTS (SELECT FROM cosid.store_identity i
                    WHERE i.max_safe_guard >= p_safe_guard_ms * interval '1 millisecond')
$$;

-- How far ahead of this store's clock a holder's clock may run: claims and renewals from a
-- holder further ahead are refused, and the floor every claim waits for after the store
-- forgot writes adds it (cosid.lease_claim()): a holder whose claim the store forgot issued
-- ids up to its own clock, which this bounds. One row; superusers change it with UPDATE.
CREATE TABLE cosid.store_settings (
    one_row        boolean  PRIMARY KEY DEFAULT true CHECK (one_row),
    max_clock_lead interval NOT NULL DEFAULT interval '1 second'
        CHECK (max_clock_lead >= interval '0' AND max_clock_lead <= interval '1 hour')
);

COMMENT ON TABLE cosid.store_settings IS
    'Settings of cosid''s lease store: max_clock_lead, how far ahead of the store''s clock a holder''s clock may run (0 to an hour, 1 s by default).';

INSERT INTO cosid.store_settings DEFAULT VALUES;

-- The largest clock lead allowed, in milliseconds (the default without a row).
CREATE FUNCTION cosid.store_max_clock_lead_ms()
RETURNS bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT coalesce((SELECT (extract(epoch FROM s.max_clock_lead) * 1000)::bigint
                   FROM cosid.store_settings s), 1000)
$$;

-- For a server that leases its machine id from CosId's JDBC table, cosid_machine, in this
-- database (cosid.distributor = 'cosid_jdbc'): what cosid.lease_claim() decides from this
-- store's identity, for a claim of a released, new or expired row of that table, which CosId's
-- statements make without asking. settles_at_ms: until when (this store's clock, Unix ms) the
-- store may have forgotten claims whose holders still generate, after its identity changed;
-- floor_ms: what the ids of a row taken now must stay above (the end of the settling plus the
-- clock lead the store allows: a holder it forgot issued ids up to its own clock); both 0
-- when no change is to be waited out. now_ms: this store's clock. max_clock_lead_ms: how far
-- ahead of it a holder's clock may run (cosid.store_settings.max_clock_lead), which the floor
-- counts on: a claim or renewal from a clock further ahead is refused, as cosid.lease_claim()
-- and cosid.lease_renew() refuse it. Records the caller's safe guard, and that a holder other
-- than this server's own workers wrote here, as a claim does.
CREATE FUNCTION cosid.cosid_machine_settles_at(p_safe_guard_ms bigint,
                                               OUT settles_at_ms bigint, OUT floor_ms bigint,
                                               OUT now_ms bigint, OUT max_clock_lead_ms bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_settles timestamptz;
BEGIN
    SELECT s.settles_at INTO v_settles FROM cosid.store_settles_at(p_safe_guard_ms) s;
    PERFORM cosid.store_holder_seen();
    PERFORM cosid.store_guard_given(p_safe_guard_ms);
    settles_at_ms := coalesce(cosid.unix_ms(v_settles), 0);
    max_clock_lead_ms := cosid.store_max_clock_lead_ms();
    floor_ms := CASE WHEN v_settles IS NULL THEN 0 ELSE settles_at_ms + max_clock_lead_ms END;
    now_ms := cosid.unix_ms(clock_timestamp());
END
$$;

-- What the next holder of a lease must wait for: the exact last timestamp of a release, else the
-- bound.
CREATE FUNCTION cosid.lease_next_floor_ms(l cosid.machine_lease)
RETURNS bigint
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT coalesce(l.released_ms, l.watermark_ms) $$;

CREATE FUNCTION cosid.unix_ms(t timestamptz)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$ SELECT (extract(epoch FROM t) * 1000)::bigint $$;

-- Refuses DELETE and TRUNCATE (a machine id without a row is presumed never used), a lowered
-- watermark, and a changed key. Only cosid.lease_retire() deletes rows.
CREATE FUNCTION cosid.machine_lease_guard()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' OR (TG_OP = 'DELETE' AND NOT (
            current_setting('cosid_lease.retiring', true) = 'on'
            AND (SELECT c.relowner FROM pg_class c WHERE c.oid = TG_RELID)
                = (SELECT r.oid FROM pg_roles r WHERE r.rolname = current_user))) THEN
        RAISE EXCEPTION 'rows of cosid.machine_lease cannot be deleted'
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'A machine id without a lease row is presumed never used: once its row is gone, another server could claim it and issue the same ids again.',
                  HINT = 'To free a machine id, stop the server that holds it (it releases it) or let its lease expire. To retire a machine id or a namespace that is no longer used, call cosid.lease_retire() as a superuser.';
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.claim_token IS DISTINCT FROM OLD.claim_token THEN
        -- A new claim: it waits at least for what every holder before it may have issued,
        -- whichever function wrote it (an older version's too).
        NEW.claim_floor_ms := greatest(NEW.claim_floor_ms,
                                       coalesce(OLD.released_ms, OLD.watermark_ms));
        NEW.released_ms := NULL;
    END IF;
    IF TG_OP = 'UPDATE' THEN
        IF NEW.namespace <> OLD.namespace OR NEW.machine_id <> OLD.machine_id THEN
            RAISE EXCEPTION 'the namespace and machine id of a cosid lease cannot be changed'
                USING ERRCODE = 'insufficient_privilege',
                      DETAIL = format('The row of machine id %s of namespace "%s" keeps what was issued under it.', OLD.machine_id, OLD.namespace);
        END IF;
        IF NEW.watermark_ms < OLD.watermark_ms OR NEW.claim_floor_ms < OLD.claim_floor_ms
           OR NEW.released_ms < NEW.claim_floor_ms THEN
            RAISE EXCEPTION 'the watermark of a cosid lease cannot be lowered'
                USING ERRCODE = 'insufficient_privilege',
                      DETAIL = format('Machine id %s of namespace "%s" may have issued ids up to %s ms; a lower watermark (or claim floor, or a release below it) would let them be issued again.', OLD.machine_id, OLD.namespace, OLD.watermark_ms);
        END IF;
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER machine_lease_guard BEFORE UPDATE OR DELETE ON cosid.machine_lease
    FOR EACH ROW EXECUTE FUNCTION cosid.machine_lease_guard();
CREATE TRIGGER machine_lease_no_truncate BEFORE TRUNCATE ON cosid.machine_lease
    FOR EACH STATEMENT EXECUTE FUNCTION cosid.machine_lease_guard();

-- A restored row that meets the row of its machine id: pg_restore copying the rows into a
-- database where CREATE EXTENSION cosid already ran and the lease worker claimed (as the Quick
-- start does), or where the worker claimed between the restore's CREATE EXTENSION and its COPY.
-- Failing the COPY on the key would lose every row it carries, so the restored row is merged
-- into the row it meets instead: its watermark and floors rise to what the restored row says
-- was issued. A claim held since stays, but only if everything the restored row covers is more
-- than a safe guard older than its start: its holder cannot learn of a higher floor while it
-- generates. Otherwise, and for rows of another id layout than their namespace's, the COPY is
-- refused with what to do, and nothing is changed. Merged rows count as written elsewhere, so
-- that the store settles (cosid.store_settles_at()). The protocol's own inserts are written in
-- this store and go on to their ON CONFLICT. The row is inserted here, after waiting for a
-- claim in flight, so that a claim committing meanwhile is merged into too.
CREATE FUNCTION cosid.machine_lease_merge()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_held  cosid.machine_lease;
    v_floor bigint := cosid.lease_next_floor_ms(NEW);
BEGIN
    IF pg_trigger_depth() > 1 OR NEW.written_in = cosid.store_identity_now() THEN
        RETURN NEW;
    END IF;
    SELECT * INTO v_held FROM cosid.machine_lease l
     WHERE l.namespace = NEW.namespace AND NEW.layout <> '' AND l.layout <> ''
       AND l.layout <> NEW.layout
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'a restored cosid lease of machine id % of namespace "%" has another id layout than the namespace', NEW.machine_id, NEW.namespace
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = format('The restored row says "%s"; the row of machine id %s in this store says "%s". Ids of two layouts can coincide, so one namespace keeps one layout; nothing was changed.', NEW.layout, v_held.machine_id, v_held.layout),
                  HINT = 'Restore into a database that no server leases from yet: create it afresh, restore, and only then point cosid.database (or cosid.lease_store) at it and restart the servers.';
    END IF;
    INSERT INTO cosid.machine_lease SELECT (NEW).* ON CONFLICT (namespace, machine_id) DO NOTHING;
    IF FOUND THEN
        RETURN NULL;
    END IF;
    SELECT * INTO v_held FROM cosid.machine_lease l
     WHERE l.namespace = NEW.namespace AND l.machine_id = NEW.machine_id FOR UPDATE;
    IF v_held.state = 'claimed' AND v_held.released_ms IS NULL
       AND v_held.expires_at > clock_timestamp() - v_held.safe_guard
       AND v_floor > cosid.unix_ms(v_held.claimed_at - v_held.safe_guard) THEN
        RAISE EXCEPTION 'a restored cosid lease of machine id % of namespace "%" overlaps the claim this store holds', NEW.machine_id, NEW.namespace
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = format('The restored row covers ids up to %s; the claim held since began at %s, less than a safe guard (%s) later, and its holder generates without knowing of them. Nothing was changed.', to_timestamp(v_floor / 1000.0), v_held.claimed_at, v_held.safe_guard),
                  HINT = 'Restore into a database that no server leases from yet: create it afresh, restore, and only then point cosid.database (or cosid.lease_store) at it and restart the servers.';
    END IF;
    UPDATE cosid.machine_lease l
       SET watermark_ms = greatest(l.watermark_ms, NEW.watermark_ms, v_floor),
           claim_floor_ms = greatest(l.claim_floor_ms, v_floor),
           released_ms = CASE WHEN l.released_ms IS NOT NULL
                              THEN greatest(l.released_ms, v_floor) END,
           safe_guard = greatest(l.safe_guard, NEW.safe_guard),
           written_in = NEW.written_in
     WHERE l.namespace = NEW.namespace AND l.machine_id = NEW.machine_id;
    RETURN NULL;
END
$$;

CREATE TRIGGER machine_lease_merge BEFORE INSERT ON cosid.machine_lease
    FOR EACH ROW EXECUTE FUNCTION cosid.machine_lease_merge();

-- Claims a machine id for an instance, in CosId's order: the lease it already holds, a released
-- one, a never-used one, then an expired one; released and expired ones whose watermark is
-- ahead of the claimer's clock (p_watermark_ms - p_safe_guard_ms) come last, so that one
-- machine id poisoned by a clock far ahead does not block a namespace with free ones. Stable
-- instances never take an expired lease, and nobody takes theirs. Claims of one namespace are
-- serialised, so concurrent claimers get distinct machine ids. Returns one row; outcome is
-- 'own', 'released', 'new' or 'expired' with the machine id and the watermark the claimer must
-- wait for; 'busy' when this instance's own lease is still live under another claim (after a
-- crash, or because another process uses the same instance id): it may be taken only once it
-- has expired, at expires_at_ms; 'exhausted', 'layout' (the namespace's rows, held or not,
-- have another id layout: epoch, time unit and widths; or a live lease has other machine bits),
-- or 'contended' (other writers kept changing the chosen rows: try
-- again); 'settling' (with p_knows_settling; 'contended' without) while the store settles
-- after its identity changed (see cosid.store_settles_at()), until expires_at_ms: only the
-- same claim again is answered meanwhile. Times are Unix milliseconds. Call it in a READ
-- COMMITTED transaction, so that it sees what the claims it waited for committed.
CREATE FUNCTION cosid.lease_claim(
    p_namespace       text,
    p_machine_bits    integer,
    p_instance_id     text,
    p_stable          boolean,
    p_safe_guard_ms   bigint,
    p_claim_token     text,
    p_watermark_ms    bigint,
    p_layout          text,
    p_knows_settling  boolean)
RETURNS TABLE (outcome text, machine_id integer, previous_watermark_ms bigint,
               expires_at_ms bigint, store_now_ms bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now      timestamptz;
    v_settles  timestamptz;
    v_identity text;
    v_settling boolean;
    v_settled_ms bigint;
    v_lead_ms  bigint;
    v_max      integer;
    v_clock_ms bigint;
    v_lease    cosid.machine_lease;
    v_outcome  text;
    v_taken    integer;
    v_expires  timestamptz;
    v_previous bigint;
BEGIN
    IF p_namespace IS NULL OR p_namespace = '' OR p_instance_id IS NULL OR p_instance_id = ''
       OR p_claim_token IS NULL OR p_claim_token = '' OR p_stable IS NULL
       OR p_machine_bits IS NULL OR p_machine_bits < 0 OR p_machine_bits > 31
       OR p_safe_guard_ms IS NULL OR p_safe_guard_ms <= 0 OR p_safe_guard_ms > 86400000
       OR p_watermark_ms IS NULL OR p_watermark_ms < 0
       OR p_layout IS NULL OR p_knows_settling IS NULL
       -- Only servers of 0.1.0 do not say their layout, through their form of the claim below;
       -- this one and 0.2.0's always do. An empty layout would skip the comparison.
       OR (p_layout = '' AND p_knows_settling)
       OR p_watermark_ms > cosid.unix_ms(clock_timestamp()) + p_safe_guard_ms + 3600000 THEN
        RAISE EXCEPTION 'invalid arguments to cosid.lease_claim'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The namespace, instance id, claim token and layout must not be empty, machine bits must be 0 to 31, the safe guard from 1 ms to a day, and the watermark from 0 to the safe guard and an hour ahead of the store''s clock.';
    END IF;
    -- Every input is within its bounds now, so nothing below can overflow.
    v_clock_ms := p_watermark_ms - p_safe_guard_ms;
    v_max := ((1::bigint << p_machine_bits) - 1)::integer;
    -- A claimer whose clock runs further ahead than the store allows gets nothing: the floor
    -- after a lost write covers a forgotten holder's clock only up to that lead. The answer
    -- carries the lead allowed (previous_watermark_ms) and the store's time.
    v_lead_ms := cosid.store_max_clock_lead_ms();
    IF v_clock_ms - cosid.unix_ms(clock_timestamp()) > v_lead_ms THEN
        RETURN QUERY SELECT CASE WHEN p_knows_settling THEN 'clock_ahead' ELSE 'contended' END,
                            NULL::integer, v_lead_ms, NULL::bigint,
                            cosid.unix_ms(clock_timestamp());
        RETURN;
    END IF;
    INSERT INTO cosid.lease_namespace AS n (namespace) VALUES (p_namespace)
        ON CONFLICT DO NOTHING;
    -- Serialises claims where it can; a lock somebody keeps (a holder's open transaction) is
    -- skipped, since the conditional writes below keep racing claims apart on their own.
    PERFORM FROM cosid.lease_namespace n WHERE n.namespace = p_namespace FOR UPDATE SKIP LOCKED;
    SELECT s.settles_at, s.identity INTO v_settles, v_identity
      FROM cosid.store_settles_at(p_safe_guard_ms) s;
    PERFORM cosid.store_holder_seen();
    v_now := clock_timestamp();
    v_settling := coalesce(v_settles > v_now, false);
    -- What a holder the store forgot issued is below the time it settled, on the store's
    -- clock; a holder's clock may run ahead of it by as much as the store allows (a forgotten
    -- holder's writes, refused beyond that, are lost), or as the rows show (watermark minus the
    -- store's time of the write minus the safe guard: a row written before the limit was
    -- lowered, or restored), at most an hour.
    -- (In numeric: a restored row may hold any value.)
    v_settled_ms := CASE WHEN v_settles IS NULL THEN 0 ELSE cosid.unix_ms(v_settles)
        + greatest(v_lead_ms,
                   -- (least() skips a NULL: no rows count as no lead.)
                   least(3600000, coalesce((SELECT max(l.watermark_ms::numeric
                                                       - cosid.unix_ms(l.renewed_at)
                                                       - extract(epoch FROM l.safe_guard) * 1000)
                                              FROM cosid.machine_lease l), 0))::bigint) END;
    v_expires := v_now + p_safe_guard_ms * interval '1 millisecond';
    -- Every machine id handed out now would wait for that floor, and one further ahead of the
    -- claimer's clock than it waits for is given back: each claim would then take another
    -- never-used machine id, and use the namespace up. Until the claimer's clock has passed the
    -- floor, the store settles for it.
    IF NOT v_settling AND v_settles IS NOT NULL AND v_settled_ms > v_clock_ms THEN
        v_settling := true;
        v_settles := v_now + (v_settled_ms - v_clock_ms) * interval '1 millisecond';
    END IF;

    -- Servers of one namespace must share a layout: ids of two layouts can coincide. A
    -- namespace keeps the layout of its rows for as long as they exist, held or not: a
    -- watermark compares instants, and two layouts give the same id to different instants.
    IF EXISTS (SELECT FROM cosid.machine_lease l
                WHERE l.namespace = p_namespace
                  AND ((l.layout <> '' AND p_layout <> '' AND l.layout <> p_layout)
                       OR (l.machine_bits <> p_machine_bits
                           AND l.state = 'claimed' AND (l.stable OR l.expires_at > v_now)))) THEN
        RETURN QUERY SELECT 'layout'::text, NULL::integer, NULL::bigint, NULL::bigint,
                            cosid.unix_ms(v_now);
        RETURN;
    END IF;

    FOR attempt IN 1..16 LOOP
        v_lease := NULL;
        -- Its own lease, unless it is a non-stable one it gave back with a watermark ahead of
        -- its clock: that one comes last, as anybody's.
        -- While the store settles, only the same claim again (its answer was lost), live.
        SELECT * INTO v_lease FROM cosid.machine_lease l
         WHERE l.namespace = p_namespace AND l.instance_id = p_instance_id
           AND l.machine_id <= v_max
           AND NOT (l.state = 'released' AND NOT l.stable
                    AND cosid.lease_next_floor_ms(l) > v_clock_ms)
           AND (NOT v_settling OR (l.state = 'claimed' AND l.claim_token = p_claim_token
                                   AND l.expires_at > v_now))
         ORDER BY l.machine_id LIMIT 1;
        v_outcome := 'own';
        IF v_settling AND v_lease.machine_id IS NULL THEN
            RETURN QUERY SELECT CASE WHEN p_knows_settling THEN 'settling' ELSE 'contended' END,
                                NULL::integer, NULL::bigint, cosid.unix_ms(v_settles),
                                cosid.unix_ms(v_now);
            RETURN;
        END IF;
        IF v_lease.machine_id IS NOT NULL AND v_lease.state = 'claimed'
           AND v_lease.expires_at > v_now AND v_lease.claim_token <> p_claim_token THEN
            -- Whoever made that claim may still be generating until it expires.
            RETURN QUERY SELECT 'busy'::text, v_lease.machine_id, v_lease.watermark_ms,
                                cosid.unix_ms(v_lease.expires_at), cosid.unix_ms(v_now);
            RETURN;
        END IF;
        IF v_lease.machine_id IS NULL THEN
            SELECT * INTO v_lease FROM cosid.machine_lease l
             WHERE l.namespace = p_namespace AND l.state = 'released' AND NOT l.stable
               AND l.machine_id <= v_max AND cosid.lease_next_floor_ms(l) <= v_clock_ms
             ORDER BY l.machine_id LIMIT 1;
            v_outcome := 'released';
        END IF;
        IF v_lease.machine_id IS NULL THEN
            SELECT CASE
                     WHEN NOT EXISTS (SELECT FROM cosid.machine_lease l
                                       WHERE l.namespace = p_namespace AND l.machine_id = 0)
                     THEN 0
                     ELSE (SELECT min(l.machine_id) + 1 FROM cosid.machine_lease l
                            WHERE l.namespace = p_namespace AND l.machine_id < v_max
                              AND NOT EXISTS (SELECT FROM cosid.machine_lease n
                                               WHERE n.namespace = p_namespace
                                                 AND n.machine_id = l.machine_id + 1))
                   END
              INTO v_taken;
            IF v_taken IS NOT NULL AND v_taken <= v_max THEN
                -- Never seen: nothing was issued under it, since no row can vanish.
                INSERT INTO cosid.machine_lease
                    (namespace, machine_id, machine_bits, layout, instance_id, claim_token,
                     stable, state, claimed_at, renewed_at, expires_at, safe_guard,
                     watermark_ms, claim_floor_ms, written_in)
                VALUES (p_namespace, v_taken, p_machine_bits, p_layout, p_instance_id,
                        p_claim_token, p_stable, 'claimed', v_now, v_now, v_expires,
                        p_safe_guard_ms * interval '1 millisecond', p_watermark_ms,
                        v_settled_ms, v_identity)
                ON CONFLICT DO NOTHING;
                IF FOUND THEN
                    PERFORM cosid.store_guard_given(p_safe_guard_ms);
                    RETURN QUERY SELECT 'new'::text, v_taken, v_settled_ms,
                                        cosid.unix_ms(v_expires), cosid.unix_ms(v_now);
                    RETURN;
                END IF;
                CONTINUE;
            END IF;
        END IF;
        IF v_lease.machine_id IS NULL AND NOT p_stable THEN
            SELECT * INTO v_lease FROM cosid.machine_lease l
             WHERE l.namespace = p_namespace AND l.state = 'claimed' AND NOT l.stable
               AND l.expires_at < v_now AND l.machine_id <= v_max
             ORDER BY cosid.lease_next_floor_ms(l) > v_clock_ms, l.expires_at, l.machine_id
             LIMIT 1;
            v_outcome := 'expired';
        END IF;
        IF v_lease.machine_id IS NULL AND NOT p_stable THEN
            -- Only machine ids whose watermark is ahead of the claimer's clock are left: the
            -- nearest one, which the claimer waits for or gives back.
            SELECT * INTO v_lease FROM cosid.machine_lease l
             WHERE l.namespace = p_namespace AND l.state = 'released' AND NOT l.stable
               AND l.machine_id <= v_max
             ORDER BY cosid.lease_next_floor_ms(l), l.machine_id LIMIT 1;
            v_outcome := 'released';
        END IF;
        IF v_lease.machine_id IS NULL THEN
            RETURN QUERY SELECT 'exhausted'::text, NULL::integer, NULL::bigint, NULL::bigint,
                                cosid.unix_ms(v_now);
            RETURN;
        END IF;

        -- Take the row only if it is still the one we chose: a renewal that committed meanwhile
        -- changed it, and then we choose again.
        -- The same claim again (its answer was lost) waits for what the claim found, not for
        -- the bound it wrote itself.
        -- After the store's identity changed, what a forgotten holder issued is below the time
        -- the store settled.
        IF v_lease.state = 'claimed' AND v_lease.claim_token = p_claim_token THEN
            v_previous := greatest(v_lease.claim_floor_ms, v_settled_ms);
        ELSE
            v_previous := greatest(cosid.lease_next_floor_ms(v_lease), v_settled_ms);
        END IF;
        UPDATE cosid.machine_lease l
           -- A claim that does not say its layout (a server of 0.1.0) leaves the row's.
           SET machine_bits = p_machine_bits,
               layout = CASE WHEN p_layout = '' THEN l.layout ELSE p_layout END,
               instance_id = p_instance_id,
               claim_token = p_claim_token, stable = p_stable, state = 'claimed',
               claimed_at = v_now, renewed_at = v_now, expires_at = v_expires,
               safe_guard = p_safe_guard_ms * interval '1 millisecond',
               watermark_ms = greatest(l.watermark_ms, p_watermark_ms),
               claim_floor_ms = v_previous, released_ms = NULL, written_in = v_identity
         WHERE l.namespace = p_namespace AND l.machine_id = v_lease.machine_id
           AND l.claim_token = v_lease.claim_token AND l.state = v_lease.state
           AND l.expires_at = v_lease.expires_at;
        IF FOUND THEN
            PERFORM cosid.store_guard_given(p_safe_guard_ms);
            RETURN QUERY SELECT v_outcome, v_lease.machine_id, v_previous,
                                cosid.unix_ms(v_expires), cosid.unix_ms(v_now);
            RETURN;
        END IF;
    END LOOP;
    RETURN QUERY SELECT 'contended'::text, NULL::integer, NULL::bigint, NULL::bigint,
                        cosid.unix_ms(v_now);
END
$$;

-- The claim as servers of cosid 0.2.0 to 0.4.0 call it, so that a store can be updated while
-- they still run: the same claim, answering 'contended' (try again) while the store settles.
-- They always say their layout: an empty one is refused (as NULL).
CREATE FUNCTION cosid.lease_claim(
    p_namespace     text,
    p_machine_bits  integer,
    p_instance_id   text,
    p_stable        boolean,
    p_safe_guard_ms bigint,
    p_claim_token   text,
    p_watermark_ms  bigint,
    p_layout        text)
RETURNS TABLE (outcome text, machine_id integer, previous_watermark_ms bigint,
               expires_at_ms bigint, store_now_ms bigint)
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT c.outcome, c.machine_id, c.previous_watermark_ms, c.expires_at_ms, c.store_now_ms
      FROM cosid.lease_claim(p_namespace, p_machine_bits, p_instance_id, p_stable,
                             p_safe_guard_ms, p_claim_token, p_watermark_ms,
                             nullif(p_layout, ''), false) c
$$;

-- The claim as servers of cosid 0.1.0 call it (no layout, times as timestamptz), so that a store
-- can be updated while they still run: the same claim, with the layout not compared, and the
-- layout a row records kept.
CREATE FUNCTION cosid.lease_claim(
    p_namespace     text,
    p_machine_bits  integer,
    p_instance_id   text,
    p_stable        boolean,
    p_safe_guard_ms bigint,
    p_claim_token   text,
    p_watermark_ms  bigint)
RETURNS TABLE (outcome text, machine_id integer, previous_watermark_ms bigint,
               expires_at timestamptz, store_now timestamptz,
               expires_at_ms bigint, store_now_ms bigint)
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    -- 0.1.0 knows a layout mismatch as 'machine_bits' (and would take any unknown outcome for
    -- a claim).
    SELECT CASE c.outcome WHEN 'layout' THEN 'machine_bits' ELSE c.outcome END,
           c.machine_id, c.previous_watermark_ms,
           to_timestamp(c.expires_at_ms / 1000.0), to_timestamp(c.store_now_ms / 1000.0),
           c.expires_at_ms, c.store_now_ms
      FROM cosid.lease_claim(p_namespace, p_machine_bits, p_instance_id, p_stable,
                             p_safe_guard_ms, p_claim_token, p_watermark_ms, ''::text,
                             false) c
$$;

-- Renews a lease held by this instance and claim token, and raises its watermark. No row means
-- the lease is lost: somebody else holds the machine id now. While the store settles after its
-- identity changed (see cosid.store_settles_at()), a lease it shows expired is renewed only for
-- a holder that says it is still generating (p_holder_live: its own deadline, from renewals
-- some store acknowledged, has not passed), since nobody else could take the machine id
-- meanwhile; a holder that stopped may have been followed by one the store forgot. Times come
-- as timestamptz (for servers of cosid 0.1.0) and as Unix milliseconds. A safe guard outside 1
-- ms to a day, or a watermark outside 0 to the safe guard and an hour ahead of the store's
-- clock, renews nothing (no row), and nothing is recorded.
CREATE FUNCTION cosid.lease_renew(
    p_namespace     text,
    p_machine_id    integer,
    p_instance_id   text,
    p_claim_token   text,
    p_safe_guard_ms bigint,
    p_watermark_ms  bigint,
    p_holder_live   boolean)
RETURNS TABLE (expires_at timestamptz, store_now timestamptz,
               expires_at_ms bigint, store_now_ms bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_settles  timestamptz;
    v_identity text;
BEGIN
    IF p_safe_guard_ms IS NULL OR p_safe_guard_ms < 1 OR p_safe_guard_ms > 86400000
       OR p_watermark_ms IS NULL OR p_watermark_ms < 0
       OR p_watermark_ms > cosid.unix_ms(clock_timestamp()) + p_safe_guard_ms + 3600000
       -- A holder whose clock runs further ahead than the store allows (see lease_claim).
       OR p_watermark_ms - p_safe_guard_ms - cosid.unix_ms(clock_timestamp())
          > cosid.store_max_clock_lead_ms() THEN
        RETURN;
    END IF;
    SELECT s.settles_at, s.identity INTO v_settles, v_identity
      FROM cosid.store_settles_at(p_safe_guard_ms) s;
    PERFORM cosid.store_holder_seen();
    RETURN QUERY
    UPDATE cosid.machine_lease l
       SET renewed_at = clock_timestamp(), written_in = v_identity,
           expires_at = clock_timestamp() + p_safe_guard_ms * interval '1 millisecond',
           safe_guard = p_safe_guard_ms * interval '1 millisecond',
           watermark_ms = greatest(l.watermark_ms, p_watermark_ms)
     WHERE l.namespace = p_namespace AND l.machine_id = p_machine_id
       AND l.instance_id = p_instance_id AND l.claim_token = p_claim_token
       AND l.state = 'claimed'
       AND (v_settles IS NULL OR v_settles <= clock_timestamp()
            OR coalesce(p_holder_live, l.expires_at > clock_timestamp()))
    RETURNING l.expires_at, l.renewed_at, cosid.unix_ms(l.expires_at),
              cosid.unix_ms(l.renewed_at);
    IF FOUND THEN
        PERFORM cosid.store_guard_given(p_safe_guard_ms);
    END IF;
END
$$;

-- The renewal as servers of cosid 0.1.0 to 0.4.0 call it: while the store settles, only a lease
-- it shows live is renewed.
CREATE FUNCTION cosid.lease_renew(
    p_namespace     text,
    p_machine_id    integer,
    p_instance_id   text,
    p_claim_token   text,
    p_safe_guard_ms bigint,
    p_watermark_ms  bigint)
RETURNS TABLE (expires_at timestamptz, store_now timestamptz,
               expires_at_ms bigint, store_now_ms bigint)
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT r.expires_at, r.store_now, r.expires_at_ms, r.store_now_ms
      FROM cosid.lease_renew(p_namespace, p_machine_id, p_instance_id, p_claim_token,
                             p_safe_guard_ms, p_watermark_ms, NULL::boolean) r
$$;

-- Releases a lease at shutdown with the exact last timestamp the holder issued, which the next
-- holder waits for (never below what the holders before it issued); the watermark itself stays.
-- A stable instance keeps its machine id (the row stays claimed, and nobody else takes a stable
-- lease), but its lease ends now, so that it takes it back at once when it restarts. Returns
-- whether the lease was still this instance's.
CREATE FUNCTION cosid.lease_release(
    p_namespace    text,
    p_machine_id   integer,
    p_instance_id  text,
    p_claim_token  text,
    p_watermark_ms bigint)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_identity text;
BEGIN
    -- The watermark is only compared (at most an hour ahead of the store's clock, or the
    -- row's), never computed with.
    IF p_watermark_ms IS NULL THEN
        RETURN false;
    END IF;
    -- A change of the store's identity is recorded before the row is written in the new one.
    v_identity := (SELECT s.identity FROM cosid.store_settles_at(1) s);
    PERFORM cosid.store_holder_seen();
    UPDATE cosid.machine_lease l
       SET state = CASE WHEN l.stable THEN 'claimed' ELSE 'released' END,
           expires_at = least(l.expires_at, clock_timestamp()),
           released_ms = greatest(p_watermark_ms, l.claim_floor_ms),
           watermark_ms = greatest(l.watermark_ms, p_watermark_ms),
           written_in = v_identity
     WHERE l.namespace = p_namespace AND l.machine_id = p_machine_id
       AND l.instance_id = p_instance_id AND l.claim_token = p_claim_token
       AND l.state = 'claimed'
       AND p_watermark_ms <= greatest(l.watermark_ms,
                                      cosid.unix_ms(clock_timestamp()) + 3600000);
    RETURN FOUND;
END
$$;

-- Retires a machine id (or, without one, a whole namespace) that is no longer used: its row is
-- deleted, and the machine id counts as never used again. Refused while a lease is held, and
-- while the watermark the next holder would wait for is less than a minute in the past by the
-- store's clock, since a claimer of a never-used machine id waits for nothing. Returns the number
-- of rows retired. Superusers only.
CREATE FUNCTION cosid.lease_retire(p_namespace text, p_machine_id integer DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now      timestamptz;
    v_settles  timestamptz;
    v_identity text;
    v_lease    cosid.machine_lease;
    v_count    integer;
BEGIN
    PERFORM FROM cosid.lease_namespace n WHERE n.namespace = p_namespace FOR UPDATE;
    SELECT s.settles_at, s.identity INTO v_settles, v_identity
      FROM cosid.store_settles_at(1) s;
    v_now := clock_timestamp();
    IF v_settles > v_now THEN
        RAISE EXCEPTION 'the lease store is settling after its identity changed'
            USING ERRCODE = 'object_in_use',
                  DETAIL = format('This database is now %s (after a promotion, a point-in-time recovery, a restore or a start of its server), and may have forgotten leases; it settles at %s.', v_identity, v_settles),
                  HINT = 'Retire it once the store has settled.';
    END IF;
    FOR v_lease IN SELECT * FROM cosid.machine_lease l
                    WHERE l.namespace = p_namespace
                      AND (p_machine_id IS NULL OR l.machine_id = p_machine_id)
                    ORDER BY l.machine_id FOR UPDATE
    LOOP
        IF v_lease.state = 'claimed' AND v_lease.expires_at > v_now THEN
            RAISE EXCEPTION 'machine id % of namespace "%" is held', v_lease.machine_id, p_namespace
                USING ERRCODE = 'object_in_use',
                      DETAIL = format('It is leased to "%s" until %s.', v_lease.instance_id, v_lease.expires_at),
                      HINT = 'Stop the server that holds it (it releases it at shutdown), or wait until its lease expires.';
        END IF;
        IF cosid.lease_next_floor_ms(v_lease) > cosid.unix_ms(v_now) - 60000 THEN
            RAISE EXCEPTION 'machine id % of namespace "%" may have issued ids until %', v_lease.machine_id, p_namespace, to_timestamp(cosid.lease_next_floor_ms(v_lease) / 1000.0)
                USING ERRCODE = 'object_in_use',
                      DETAIL = 'A retired machine id counts as never used, and its next holder would not wait for that watermark.',
                      HINT = 'Retire it once its watermark is more than a minute in the past.';
        END IF;
    END LOOP;
    PERFORM set_config('cosid_lease.retiring', 'on', true);
    DELETE FROM cosid.machine_lease l
     WHERE l.namespace = p_namespace AND (p_machine_id IS NULL OR l.machine_id = p_machine_id);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    PERFORM set_config('cosid_lease.retiring', 'off', true);
    IF p_machine_id IS NULL THEN
        DELETE FROM cosid.lease_namespace n WHERE n.namespace = p_namespace;
    END IF;
    RETURN v_count;
END
$$;

-- Every lease with its holder's state and the time it has left, by the store's clock; claim
-- tokens are not shown.
CREATE FUNCTION cosid.lease_rows()
RETURNS TABLE (namespace text, machine_id integer, instance_id text, stable boolean,
               status text, time_left interval, claimed_at timestamptz,
               renewed_at timestamptz, expires_at timestamptz, safe_guard interval,
               machine_bits integer, watermark timestamptz)
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
SELECT l.namespace, l.machine_id, l.instance_id, l.stable,
       CASE WHEN l.state = 'released' THEN 'released'
            WHEN l.stable THEN 'held (stable)'
            WHEN l.expires_at > clock_timestamp() THEN 'held'
            ELSE 'expired' END,
       CASE WHEN l.state = 'claimed' AND l.expires_at > clock_timestamp()
            THEN l.expires_at - clock_timestamp() END,
       l.claimed_at, l.renewed_at, l.expires_at, l.safe_guard, l.machine_bits,
       to_timestamp(cosid.lease_next_floor_ms(l) / 1000.0)
  FROM cosid.machine_lease l
 ORDER BY l.namespace, l.machine_id
$$;

CREATE VIEW cosid.leases AS SELECT * FROM cosid.lease_rows();

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

-- Which version of this file the store is: the update scripts check it.
CREATE FUNCTION cosid.lease_store_version()
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT '0.5.0'::text $$;

-- The store is installed here: its identity now is the one the leases are written in.
INSERT INTO cosid.store_identity (identity, seen_at, settles)
    SELECT cosid.store_identity_now(), clock_timestamp(), false;

-- Everything belongs to the NOLOGIN owner; holders (members of cosid_lease_holder) may only
-- call the protocol; the view is for superusers and members of pg_monitor, cosid.lease_retire()
-- for superusers.
ALTER TABLE cosid.machine_lease OWNER TO cosid_lease_owner;
ALTER TABLE cosid.lease_namespace OWNER TO cosid_lease_owner;
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
ALTER FUNCTION cosid.lease_next_floor_ms(cosid.machine_lease) OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.unix_ms(timestamptz) OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.machine_lease_guard() OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.machine_lease_merge() OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint, text, boolean) OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint, text) OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint) OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.lease_renew(text, integer, text, text, bigint, bigint, boolean) OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.lease_renew(text, integer, text, text, bigint, bigint) OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.lease_release(text, integer, text, text, bigint) OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.lease_retire(text, integer) OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.lease_rows() OWNER TO cosid_lease_owner;
ALTER VIEW cosid.leases OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.lease_store_version() OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.lease_namespace_layout(text) OWNER TO cosid_lease_owner;

REVOKE ALL ON TABLE cosid.machine_lease, cosid.lease_namespace, cosid.store_identity,
    cosid.store_settings, cosid.leases FROM PUBLIC;
REVOKE ALL ON FUNCTION cosid.lease_next_floor_ms(cosid.machine_lease), cosid.unix_ms(timestamptz),
    cosid.machine_lease_guard(), cosid.machine_lease_merge(), cosid.store_identity_now(),
    cosid.store_of(text), cosid.store_caller_is_local(), cosid.store_holder_seen(),
    cosid.store_max_clock_lead_ms(), cosid.store_settles_at(bigint), cosid.store_guard_given(bigint),
    cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint, text, boolean),
    cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint, text),
    cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint),
    cosid.lease_renew(text, integer, text, text, bigint, bigint, boolean),
    cosid.lease_renew(text, integer, text, text, bigint, bigint),
    cosid.lease_release(text, integer, text, text, bigint),
    cosid.lease_retire(text, integer), cosid.lease_rows(),
    cosid.lease_namespace_layout(text), cosid.lease_store_identity(),
    cosid.cosid_machine_settles_at(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    cosid.lease_namespace_layout(text), cosid.lease_store_identity(),
    cosid.cosid_machine_settles_at(bigint),
    cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint, text, boolean),
    cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint, text),
    cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint),
    cosid.lease_renew(text, integer, text, text, bigint, bigint, boolean),
    cosid.lease_renew(text, integer, text, text, bigint, bigint),
    cosid.lease_release(text, integer, text, text, bigint) TO cosid_lease_holder;
GRANT SELECT ON TABLE cosid.leases TO pg_monitor;
-- A view's functions run with the privileges of its reader.
GRANT EXECUTE ON FUNCTION cosid.lease_rows() TO pg_monitor;

-- cosid.store_caller_is_local() reads the type of the calling process, which PostgreSQL shows
-- only to roles with pg_read_all_stats: granted where the installing role may (a superuser, as
-- CREATE EXTENSION runs). Elsewhere every caller counts as another server's, which is the safe
-- side: a store installed without it has no cosid workers of its own.
DO $stats$
DECLARE
    v_path text := pg_catalog.current_setting('search_path');
BEGIN
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    IF NOT pg_catalog.current_setting('transaction_read_only')::boolean
       AND (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user) THEN
        GRANT pg_read_all_stats TO cosid_lease_owner;
    END IF;
    PERFORM pg_catalog.set_config('search_path', v_path, true);
END
$stats$;

-- What the block before the objects were given to cosid_lease_owner granted is taken back, with
-- any membership createrole_self_grant gave the role that created it (see that block), so that
-- nobody but superusers can act as cosid_lease_owner; what is left is checked.
DO $owner$
DECLARE
    v_path text := pg_catalog.current_setting('search_path');
    v_me   oid;
BEGIN
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    IF NOT pg_catalog.current_setting('transaction_read_only')::boolean
       AND NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user) THEN
        SELECT r.oid INTO v_me FROM pg_catalog.pg_roles r WHERE r.rolname = current_user;
        REVOKE CREATE ON SCHEMA cosid FROM cosid_lease_owner;
        IF EXISTS (SELECT FROM pg_catalog.pg_auth_members m
                    WHERE m.roleid = 'cosid_lease_owner'::pg_catalog.regrole
                      AND m.member = v_me AND m.grantor = v_me)
           OR pg_catalog.current_setting('server_version_num')::integer < 160000 THEN
            EXECUTE pg_catalog.format('REVOKE cosid_lease_owner FROM %I', current_user);
        END IF;
        IF EXISTS (SELECT FROM pg_catalog.pg_auth_members m
                    WHERE m.roleid = 'cosid_lease_owner'::pg_catalog.regrole
                      AND NOT (m.member = v_me AND m.admin_option
                               AND NOT coalesce((pg_catalog.to_jsonb(m) ->> 'inherit_option')::boolean, true)
                               AND NOT coalesce((pg_catalog.to_jsonb(m) ->> 'set_option')::boolean, true))) THEN
            RAISE EXCEPTION 'role cosid_lease_owner has members'
                USING ERRCODE = 'insufficient_privilege',
                      DETAIL = pg_catalog.format('Members of cosid_lease_owner can change every lease: %s.', (SELECT pg_catalog.string_agg(pg_catalog.format('%s (granted by %s)', m.member::pg_catalog.regrole, m.grantor::pg_catalog.regrole), ', ') FROM pg_catalog.pg_auth_members m WHERE m.roleid = 'cosid_lease_owner'::pg_catalog.regrole)),
                      HINT = 'Revoke those memberships (as a superuser where this role may not), then run this file again.';
        END IF;
    END IF;
    PERFORM pg_catalog.set_config('search_path', v_path, true);
END
$owner$;
