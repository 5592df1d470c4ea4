-- cosid 0.4.0 to 0.5.0: ALTER EXTENSION cosid UPDATE, before or after the server was restarted
-- with the library of 0.5.0 (see docs/upgrading.md): the library of 0.4.0 keeps working with
-- it, and the library of 0.5.0 claims nothing until it ran.
\echo Use "ALTER EXTENSION cosid UPDATE" to load this file. \quit

-- <lease store>: the statements of lease_store--0.4.0--0.5.0.sql, word for word (an update
-- script cannot include a file; a test compares the two).
-- Updates a cosid lease store from version 0.4.0 to 0.5.0, while it is in use. For a shared
-- store of a fleet run it with
--   psql -v ON_ERROR_STOP=1 --single-transaction -f lease_store--0.4.0--0.5.0.sql
-- ALTER EXTENSION cosid UPDATE runs the same statements for the store inside the extension.
--
-- What changes: the store records its identity (system identifier, timeline, database), and
-- after it changes (a promoted standby, a point-in-time recovery, a restore elsewhere) hands out
-- no machine id as released, new or expired until a whole safe guard has passed, since it may
-- have forgotten claims, renewals and releases it acknowledged (cosid.store_settles_at()). The
-- identity it has now is recorded as settled, and the rows as written in it: an update in
-- place forgets nothing (a 0.4.0 store restored from a dump is not told apart: see
-- docs/upgrading.md). A row that pg_restore brings for a machine id the store has a row of is
-- merged into it (cosid.machine_lease_merge()) instead of failing the COPY. Servers of
-- 0.5.0 claim and renew through the new forms (lease_claim with p_knows_settling, lease_renew
-- with p_holder_live) and need this store; servers of 0.1.0 to 0.4.0 keep claiming, renewing
-- and releasing through the old forms, which follow the same rule. Everything it creates is
-- what lease_store.sql of 0.5.0 creates, in the same words.

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
    -- Only a store of version 0.4.0 is updated, in one transaction, and a store of the
    -- extension only by ALTER EXTENSION. Anything else is left alone: this transaction and the
    -- rest of the session are made read-only, so that the statements after this one fail too.
    v_refused := CASE
        WHEN pg_catalog.to_regclass('cosid.machine_lease') IS NULL
             OR v_found IS DISTINCT FROM '0.4.0'
            THEN 'this database has no cosid lease store of version 0.4.0'
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
            USING DETAIL = 'This file updates a lease store of version 0.4.0 (see cosid.lease_store_version()) to 0.5.0. The rest of this session is read-only.',
                  HINT = 'Run it with psql -v ON_ERROR_STOP=1 --single-transaction -f lease_store--0.4.0--0.5.0.sql.';
        RETURN;
    END IF;
    -- Claims queue behind the update for a few seconds at most.
    PERFORM pg_catalog.set_config('lock_timeout', '3s', true);
    PERFORM pg_catalog.set_config('search_path', v_path, true);
END
$update$;

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

-- The identity of the store the leases were last written in, and since when: a promoted
-- standby, a point-in-time recovery and a restore into another cluster or database each give
-- the store another identity, and each may have lost writes whose commit the holders were
-- told of. settles says whether the change must be waited out (not at install); max_safe_guard
-- is the longest safe guard any holder ever gave, which only rises.
CREATE TABLE cosid.store_identity (
    only_row       boolean     PRIMARY KEY DEFAULT true CHECK (only_row),
    identity       text        NOT NULL,
    seen_at        timestamptz NOT NULL,
    settles        boolean     NOT NULL,
    max_safe_guard interval    NOT NULL DEFAULT interval '0'
);

COMMENT ON TABLE cosid.store_identity IS
    'The identity of the database cosid''s leases were last written in (system identifier, timeline, database), and when it was first seen.';

-- This database's identity now: the cluster's system identifier (a new one in another
-- cluster), the timeline WAL is written on (a new one at every promotion and point-in-time
-- recovery) and the database's oid (a new one in every restore into a new database).
CREATE FUNCTION cosid.store_identity_now()
RETURNS text
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT format('system %s, timeline %s, database %s',
              (SELECT s.system_identifier FROM pg_control_system() s),
              ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint,
              (SELECT d.oid FROM pg_database d WHERE d.datname = current_database()))
$$;

-- Until when this store must not hand out a machine id as released, new or expired (NULL when
-- it need not), and its identity now, which every protocol write records in its row. A call
-- that finds another identity than the one recorded, or lease rows written elsewhere (a
-- restore into this database), records the change with the time, and the store settles a
-- whole safe guard later: the longest any holder ever gave, any row records, or the caller's.
-- A holder whose claim, renewal or release the store forgot stops generating within its safe
-- guard of its last write, which was before the change was seen (Chubby's lock delay).
CREATE FUNCTION cosid.store_settles_at(p_safe_guard_ms bigint,
                                       OUT settles_at timestamptz, OUT identity text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_row      cosid.store_identity;
    v_guard    interval := greatest(p_safe_guard_ms, 1) * interval '1 millisecond';
BEGIN
    identity := cosid.store_identity_now();
    SELECT * INTO v_row FROM cosid.store_identity i;
    IF v_row.identity IS DISTINCT FROM identity
       OR EXISTS (SELECT FROM cosid.machine_lease l WHERE l.written_in <> identity) THEN
        -- Decided again under the row's lock, which a concurrent caller may have taken to
        -- record the same change. A row deleted by hand is a change too.
        INSERT INTO cosid.store_identity AS i (identity, seen_at, settles)
            VALUES ('', clock_timestamp(), true) ON CONFLICT DO NOTHING;
        SELECT * INTO v_row FROM cosid.store_identity i FOR UPDATE;
        IF v_row.identity <> identity
           OR EXISTS (SELECT FROM cosid.machine_lease l WHERE l.written_in <> identity) THEN
            UPDATE cosid.store_identity i
               SET identity = store_settles_at.identity, seen_at = clock_timestamp(),
                   settles = true
             RETURNING * INTO v_row;
            -- Those rows are accounted for by this change.
            UPDATE cosid.machine_lease l SET written_in = store_settles_at.identity
             WHERE l.written_in <> store_settles_at.identity;
        END IF;
    END IF;
    IF v_row.max_safe_guard < v_guard THEN
        UPDATE cosid.store_identity i SET max_safe_guard = greatest(i.max_safe_guard, v_guard);
    END IF;
    -- A safe guard is at most a day.
    IF v_row.settles AND v_row.seen_at > clock_timestamp() - interval '1 day' THEN
        settles_at := v_row.seen_at
            + greatest(v_guard, v_row.max_safe_guard,
                       (SELECT max(l.safe_guard) FROM cosid.machine_lease l));
    END IF;
END
$$;

-- Where each row was last written: here, for the rows this store has now.
ALTER TABLE cosid.machine_lease ADD COLUMN written_in text NOT NULL DEFAULT '';
UPDATE cosid.machine_lease SET written_in = cosid.store_identity_now();
-- This store, updated in place, forgot nothing.
INSERT INTO cosid.store_identity (identity, seen_at, settles)
    SELECT cosid.store_identity_now(), pg_catalog.clock_timestamp(), false;

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
    v_max      integer;
    v_clock_ms bigint := p_watermark_ms - p_safe_guard_ms;
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
       OR p_watermark_ms IS NULL OR p_layout IS NULL OR p_knows_settling IS NULL
       -- Only servers of 0.1.0 do not say their layout, through their form of the claim below;
       -- this one and 0.2.0's always do. An empty layout would skip the comparison.
       OR (p_layout = '' AND p_knows_settling)
       OR p_watermark_ms > cosid.unix_ms(clock_timestamp()) + p_safe_guard_ms + 3600000 THEN
        RAISE EXCEPTION 'invalid arguments to cosid.lease_claim'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The namespace, instance id, claim token and layout must not be empty, machine bits must be 0 to 31, the safe guard from 1 ms to a day, and the watermark at most the safe guard and an hour ahead of the store''s clock.';
    END IF;
    v_max := ((1::bigint << p_machine_bits) - 1)::integer;
    INSERT INTO cosid.lease_namespace AS n (namespace) VALUES (p_namespace)
        ON CONFLICT DO NOTHING;
    -- Serialises claims where it can; a lock somebody keeps (a holder's open transaction) is
    -- skipped, since the conditional writes below keep racing claims apart on their own.
    PERFORM FROM cosid.lease_namespace n WHERE n.namespace = p_namespace FOR UPDATE SKIP LOCKED;
    SELECT s.settles_at, s.identity INTO v_settles, v_identity
      FROM cosid.store_settles_at(p_safe_guard_ms) s;
    v_now := clock_timestamp();
    v_settling := coalesce(v_settles > v_now, false);
    -- What a holder the store forgot issued is below the time it settled, on the store's
    -- clock; a holder's clock may run ahead of it by as much as the rows show (watermark minus
    -- the store's time of the write minus the safe guard).
    v_settled_ms := CASE WHEN v_settles IS NULL THEN 0 ELSE cosid.unix_ms(v_settles)
        + coalesce((SELECT greatest(0, least(3600000, max(
                               l.watermark_ms - cosid.unix_ms(l.renewed_at)
                               - cosid.unix_ms(to_timestamp(0) + l.safe_guard))))
                      FROM cosid.machine_lease l), 0) END;
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
CREATE OR REPLACE FUNCTION cosid.lease_claim(
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
CREATE OR REPLACE FUNCTION cosid.lease_claim(
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
-- as timestamptz (for servers of cosid 0.1.0) and as Unix milliseconds.
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
    SELECT s.settles_at, s.identity INTO v_settles, v_identity
      FROM cosid.store_settles_at(p_safe_guard_ms) s;
    RETURN QUERY
    UPDATE cosid.machine_lease l
       SET renewed_at = clock_timestamp(), written_in = v_identity,
           expires_at = clock_timestamp() + greatest(p_safe_guard_ms, 1) * interval '1 millisecond',
           safe_guard = greatest(p_safe_guard_ms, 1) * interval '1 millisecond',
           watermark_ms = greatest(l.watermark_ms, p_watermark_ms)
     WHERE l.namespace = p_namespace AND l.machine_id = p_machine_id
       AND l.instance_id = p_instance_id AND l.claim_token = p_claim_token
       AND l.state = 'claimed' AND p_safe_guard_ms <= 86400000
       AND p_watermark_ms <= cosid.unix_ms(clock_timestamp()) + p_safe_guard_ms + 3600000
       AND (v_settles IS NULL OR v_settles <= clock_timestamp()
            OR coalesce(p_holder_live, l.expires_at > clock_timestamp()))
    RETURNING l.expires_at, l.renewed_at, cosid.unix_ms(l.expires_at),
              cosid.unix_ms(l.renewed_at);
END
$$;

-- The renewal as servers of cosid 0.1.0 to 0.4.0 call it: while the store settles, only a lease
-- it shows live is renewed.
CREATE OR REPLACE FUNCTION cosid.lease_renew(
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
CREATE OR REPLACE FUNCTION cosid.lease_release(
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
    -- A change of the store's identity is recorded before the row is written in the new one.
    v_identity text := (SELECT s.identity FROM cosid.store_settles_at(1) s);
BEGIN
    UPDATE cosid.machine_lease l
       SET state = CASE WHEN l.stable THEN 'claimed' ELSE 'released' END,
           expires_at = least(l.expires_at, clock_timestamp()),
           released_ms = greatest(p_watermark_ms, l.claim_floor_ms),
           watermark_ms = greatest(l.watermark_ms, p_watermark_ms),
           written_in = v_identity
     WHERE l.namespace = p_namespace AND l.machine_id = p_machine_id
       AND l.instance_id = p_instance_id AND l.claim_token = p_claim_token
       AND l.state = 'claimed' AND p_watermark_ms IS NOT NULL
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
CREATE OR REPLACE FUNCTION cosid.lease_retire(p_namespace text, p_machine_id integer DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now     timestamptz;
    v_settles timestamptz;
    v_lease   cosid.machine_lease;
    v_count   integer;
BEGIN
    PERFORM FROM cosid.lease_namespace n WHERE n.namespace = p_namespace FOR UPDATE;
    SELECT s.settles_at INTO v_settles FROM cosid.store_settles_at(1) s;
    v_now := clock_timestamp();
    IF v_settles > v_now THEN
        RAISE EXCEPTION 'the lease store is settling after its identity changed'
            USING ERRCODE = 'object_in_use',
                  DETAIL = format('This database was first seen as %s at %s (a promotion, a point-in-time recovery or a restore), and may have forgotten leases; it settles at %s.', (SELECT i.identity FROM cosid.store_identity i), (SELECT i.seen_at FROM cosid.store_identity i), v_settles),
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

-- Which version of this file the store is: the update scripts check it.
CREATE OR REPLACE FUNCTION cosid.lease_store_version()
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT '0.5.0'::text $$;

ALTER TABLE cosid.store_identity OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.store_identity_now() OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.store_settles_at(bigint) OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.machine_lease_merge() OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint, text, boolean) OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.lease_renew(text, integer, text, text, bigint, bigint, boolean) OWNER TO cosid_lease_owner;

REVOKE ALL ON TABLE cosid.store_identity FROM PUBLIC;
REVOKE ALL ON FUNCTION cosid.store_identity_now(), cosid.store_settles_at(bigint),
    cosid.machine_lease_merge(),
    cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint, text, boolean),
    cosid.lease_renew(text, integer, text, text, bigint, bigint, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint, text, boolean),
    cosid.lease_renew(text, integer, text, text, bigint, bigint, boolean) TO cosid_lease_holder;

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

-- The catalog comments of the store's new and changed functions (see src/sql/comments.rs).
COMMENT ON FUNCTION cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint, text, boolean) IS 'Lease protocol: claims a machine id of a namespace for a holder, which then waits for the returned watermark; answers settling while the store settles after its identity changed. Called by the cosid background worker.';
COMMENT ON FUNCTION cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint, text) IS 'Lease protocol: the claim as servers of cosid 0.2.0 to 0.4.0 call it, answering contended while the store settles.';
COMMENT ON FUNCTION cosid.lease_renew(text, integer, text, text, bigint, bigint, boolean) IS 'Lease protocol: renews a lease this holder holds and raises its watermark; no row means the lease is lost. While the store settles, a lease it shows expired only for a holder still generating.';
COMMENT ON FUNCTION cosid.lease_renew(text, integer, text, text, bigint, bigint) IS 'Lease protocol: the renewal as servers of cosid 0.1.0 to 0.4.0 call it.';
COMMENT ON FUNCTION cosid.store_identity_now() IS 'Lease protocol: this database''s identity now (system identifier, timeline, database oid).';
COMMENT ON FUNCTION cosid.store_settles_at(bigint) IS 'Lease protocol: until when the store hands out no released, new or expired machine id after its identity changed (a promotion, a point-in-time recovery, a restore), NULL when it need not; and its identity now.';
COMMENT ON FUNCTION cosid.machine_lease_merge() IS 'Trigger of cosid.machine_lease: merges a restored row (pg_restore) into the row its machine id already has, keeping the higher watermark, instead of failing the COPY; refuses a row of another id layout than its namespace, or one that overlaps a claim held.';

-- cosid_convert_column refuses the extension's own tables (sql/convert_column.sql).
CREATE OR REPLACE FUNCTION cosid_convert_column(tab regclass, col name, generator text DEFAULT NULL)
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
    -- cosid's own tables keep its records (leases and their watermarks, generators' names and
    -- layouts): a default on one of their columns would write values nobody meant.
    IF EXISTS (SELECT FROM pg_catalog.pg_namespace n
                WHERE n.oid = v_rel.relnamespace AND n.nspname = 'cosid')
       OR EXISTS (SELECT FROM pg_catalog.pg_depend d
                    JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid
                   WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
                     AND d.objid = tab
                     AND d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
                     AND d.deptype = 'e' AND e.extname = 'cosid') THEN
        RAISE EXCEPTION 'table % belongs to the extension cosid', tab
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'cosid''s own tables, and every table in schema cosid, keep its records; none of their columns is a key to convert.',
                  HINT = 'Convert a column of one of your own tables.';
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
