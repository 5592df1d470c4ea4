-- cosid 0.1.0 to 0.2.0: ALTER EXTENSION cosid UPDATE. Run it after the server was restarted
-- with the library of 0.2.0 (see "Upgrading" in the README): the library of 0.1.0 has no
-- function for the new cosid.status, so run earlier it fails and changes nothing.
\echo Use "ALTER EXTENSION cosid UPDATE" to load this file. \quit

-- <lease store>: the statements of lease_store--0.1.0--0.2.0.sql, word for word (an update
-- script cannot include a file; a test compares the two).
-- Updates a cosid lease store from version 0.1.0 to 0.2.0, while it is in use. For a shared
-- store of a fleet run it with
--   psql -v ON_ERROR_STOP=1 --single-transaction -f lease_store--0.1.0--0.2.0.sql
-- ALTER EXTENSION cosid UPDATE runs the same statements for the store inside the extension.
--
-- Servers of cosid 0.1.0 keep their leases through it: their claim, renewal and release keep
-- their signatures and answers, and the roles that could call them become members of
-- cosid_lease_holder (their direct privileges on the table and the schema are revoked, as 0.2.0
-- gives none). Released rows keep their exact last timestamp, which the next holder waits for;
-- a claim of 0.1.0 counts its whole watermark as its floor, since what it found is not known.
-- Servers of cosid 0.2.0 can claim as soon as it commits. Everything it creates is what
-- lease_store.sql of 0.2.0 creates, in the same words.

-- Checks before anything changes, with search_path pinned (see lease_store.sql); the path is
-- restored for the statements after it.
DO $update$
DECLARE
    v_path         text := pg_catalog.current_setting('search_path');
    v_in_extension boolean;
    v_refused      text;
    v_role         pg_catalog.regrole;
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
    IF EXISTS (SELECT FROM pg_catalog.pg_roles r
                WHERE r.rolname IN ('cosid_lease_owner', 'cosid_lease_holder') AND r.rolcanlogin)
       OR EXISTS (SELECT FROM pg_catalog.pg_auth_members m
                    JOIN pg_catalog.pg_roles r ON r.oid = m.roleid
                   WHERE r.rolname = 'cosid_lease_owner') THEN
        RAISE EXCEPTION 'the roles cosid_lease_owner and cosid_lease_holder must be NOLOGIN, and cosid_lease_owner must have no members'
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'cosid_lease_owner owns the lease table and the protocol: whoever can act as it can change every lease.',
                  HINT = 'Drop or fix the roles of that name, then install again.';
    END IF;
    -- Only the update script of the extension may call pg_extension_config_dump().
    BEGIN
        PERFORM pg_catalog.pg_extension_config_dump('cosid.machine_lease', '');
        v_in_extension := true;
    EXCEPTION WHEN OTHERS THEN
        v_in_extension := false;
    END;
    -- Only a store of version 0.1.0 is updated, in one transaction (psql going on after a
    -- failed statement would leave half a store), and a store of the extension only by
    -- ALTER EXTENSION. Anything else is left alone: this transaction and the rest of the
    -- session are made read-only, so that the statements after this one fail too.
    v_refused := CASE
        WHEN pg_catalog.to_regclass('cosid.machine_lease') IS NULL
             OR pg_catalog.to_regprocedure('cosid.lease_store_version()') IS NOT NULL
            THEN 'this database has no cosid lease store of version 0.1.0'
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
            USING DETAIL = 'This file updates a lease store of version 0.1.0 (it has no cosid.lease_store_version()) to 0.2.0. The rest of this session is read-only.',
                  HINT = 'Run it with psql -v ON_ERROR_STOP=1 --single-transaction -f lease_store--0.1.0--0.2.0.sql. See cosid.lease_store_version() for the version of an updated store.';
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'cosid_lease_owner') THEN
        CREATE ROLE cosid_lease_owner NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'cosid_lease_holder') THEN
        CREATE ROLE cosid_lease_holder NOLOGIN;
    END IF;
    -- The lease table is locked for the update: queue behind a long reader (a dump, an open
    -- transaction) for a few seconds at most, since every renewal queues behind the update.
    PERFORM pg_catalog.set_config('lock_timeout', '3s', true);
    -- From 0.2.0 the roles that call the protocol do so as members of cosid_lease_holder. A
    -- grant that cannot become such a membership would cut its servers off: refused.
    SELECT pg_catalog.string_agg(DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                                               ELSE a.grantee::pg_catalog.regrole::text END, ', ')
      INTO v_refused
      FROM pg_catalog.pg_proc p
     CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
      LEFT JOIN pg_catalog.pg_roles r ON r.oid = a.grantee
     WHERE p.pronamespace = 'cosid'::pg_catalog.regnamespace
       AND p.proname IN ('lease_claim', 'lease_renew', 'lease_release')
       AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner
       AND (a.grantee = 0 OR NOT r.rolinherit OR r.rolname = 'pg_database_owner');
    IF v_refused IS NOT NULL THEN
        RAISE EXCEPTION 'the lease protocol is granted to %, which cannot call it as a member of cosid_lease_holder', v_refused
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'From 0.2.0 store roles call the protocol as members of cosid_lease_holder: PUBLIC and pg_database_owner cannot be members, and a NOINHERIT role would not use its membership.',
                  HINT = 'Grant EXECUTE on cosid.lease_claim, cosid.lease_renew and cosid.lease_release to each store role by name, make those roles INHERIT (ALTER ROLE ... INHERIT), then run the update again.';
    END IF;
    -- The roles that could call the protocol of 0.1.0 keep calling it, as members of
    -- cosid_lease_holder; what 0.1.0 had them granted directly goes.
    FOR v_role IN
        SELECT DISTINCT a.grantee::pg_catalog.regrole
          FROM pg_catalog.pg_proc p
         CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
         WHERE p.pronamespace = 'cosid'::pg_catalog.regnamespace
           AND p.proname IN ('lease_claim', 'lease_renew', 'lease_release')
           AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner
           AND a.grantee <> 'cosid_lease_owner'::pg_catalog.regrole
           AND a.grantee <> 'cosid_lease_holder'::pg_catalog.regrole
    LOOP
        EXECUTE pg_catalog.format('GRANT cosid_lease_holder TO %s', v_role);
        RAISE NOTICE 'role % is now a member of cosid_lease_holder', v_role;
    END LOOP;
    FOR v_role IN
        SELECT DISTINCT a.grantee::pg_catalog.regrole
          FROM pg_catalog.pg_class c
         CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) a
         WHERE c.oid IN ('cosid.machine_lease'::pg_catalog.regclass, 'cosid.leases'::pg_catalog.regclass)
           AND a.grantee <> 0 AND a.grantee <> c.relowner
        UNION
        SELECT a.grantee::pg_catalog.regrole
          FROM pg_catalog.pg_namespace n
         CROSS JOIN LATERAL pg_catalog.aclexplode(n.nspacl) a
         WHERE n.nspname = 'cosid' AND a.grantee <> 0 AND a.grantee <> n.nspowner
           AND a.grantee <> 'cosid_lease_owner'::pg_catalog.regrole
           AND a.grantee <> 'cosid_lease_holder'::pg_catalog.regrole
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON TABLE cosid.machine_lease, cosid.leases FROM %s', v_role);
        EXECUTE pg_catalog.format('REVOKE ALL ON SCHEMA cosid FROM %s', v_role);
        RAISE NOTICE 'privileges of role % on schema cosid and its lease table revoked', v_role;
    END LOOP;
    PERFORM pg_catalog.set_config('search_path', v_path, true);
END
$update$;

GRANT USAGE ON SCHEMA cosid TO cosid_lease_owner, cosid_lease_holder;

-- The new columns go last, where lease_store.sql of 0.2.0 has them. A release of 0.1.0 wrote
-- the holder's exact last timestamp as the watermark: that is what released_ms holds now.
ALTER TABLE cosid.machine_lease
    DROP CONSTRAINT machine_lease_machine_bits_check,
    ADD CONSTRAINT machine_lease_machine_bits_check CHECK (machine_bits >= 0 AND machine_bits <= 31),
    ADD COLUMN claim_floor_ms bigint NOT NULL DEFAULT 0,
    ADD COLUMN released_ms    bigint,
    ADD COLUMN layout         text   NOT NULL DEFAULT '';
UPDATE cosid.machine_lease SET released_ms = watermark_ms WHERE state = 'released';
UPDATE cosid.machine_lease SET claim_floor_ms = watermark_ms WHERE state = 'claimed';

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

INSERT INTO cosid.lease_namespace (namespace)
    SELECT DISTINCT l.namespace FROM cosid.machine_lease l;

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

-- The protocol of 0.1.0 goes; 0.2.0's keeps its calls (new answers, same arguments).
DROP VIEW cosid.leases;
DROP FUNCTION cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint);
DROP FUNCTION cosid.lease_renew(text, integer, text, text, bigint, bigint);
DROP FUNCTION cosid.lease_release(text, integer, text, text, bigint);

-- Claims a machine id for an instance, in CosId's order: the lease it already holds, a released
-- one, a never-used one, then an expired one; released and expired ones whose watermark is
-- ahead of the claimer's clock (p_watermark_ms - p_safe_guard_ms) come last, so that one
-- machine id poisoned by a clock far ahead does not block a namespace with free ones. Stable
-- instances never take an expired lease, and nobody takes theirs. Claims of one namespace are
-- serialised, so concurrent claimers get distinct machine ids. Returns one row; outcome is
-- 'own', 'released', 'new' or 'expired' with the machine id and the watermark the claimer must
-- wait for; 'busy' when this instance's own lease is still live under another claim (after a
-- crash, or because another process uses the same instance id): it may be taken only once it
-- has expired, at expires_at_ms; 'exhausted', 'layout' (a live lease of the namespace uses
-- another id layout: machine bits, or epoch, time unit and widths), or 'contended' (other writers kept changing the chosen rows: try
-- again). Times are Unix milliseconds. Call it in a READ COMMITTED transaction, so that it sees
-- what the claims it waited for committed.
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
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now      timestamptz;
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
       OR p_watermark_ms IS NULL OR p_layout IS NULL
       OR p_watermark_ms > cosid.unix_ms(clock_timestamp()) + p_safe_guard_ms + 3600000 THEN
        RAISE EXCEPTION 'invalid arguments to cosid.lease_claim'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The namespace, instance id and claim token must not be empty, machine bits must be 0 to 31, the safe guard from 1 ms to a day, and the watermark at most the safe guard and an hour ahead of the store''s clock.';
    END IF;
    v_max := ((1::bigint << p_machine_bits) - 1)::integer;
    INSERT INTO cosid.lease_namespace AS n (namespace) VALUES (p_namespace)
        ON CONFLICT DO NOTHING;
    -- Serialises claims where it can; a lock somebody keeps (a holder's open transaction) is
    -- skipped, since the conditional writes below keep racing claims apart on their own.
    PERFORM FROM cosid.lease_namespace n WHERE n.namespace = p_namespace FOR UPDATE SKIP LOCKED;
    v_now := clock_timestamp();
    v_expires := v_now + p_safe_guard_ms * interval '1 millisecond';

    -- Servers of one namespace must share a layout: ids of two layouts can coincide.
    IF EXISTS (SELECT FROM cosid.machine_lease l
                WHERE l.namespace = p_namespace
                  AND (l.machine_bits <> p_machine_bits
                       OR (l.layout <> '' AND p_layout <> '' AND l.layout <> p_layout))
                  AND l.state = 'claimed' AND (l.stable OR l.expires_at > v_now)) THEN
        RETURN QUERY SELECT 'layout'::text, NULL::integer, NULL::bigint, NULL::bigint,
                            cosid.unix_ms(v_now);
        RETURN;
    END IF;

    FOR attempt IN 1..16 LOOP
        v_lease := NULL;
        -- Its own lease, unless it is a non-stable one it gave back with a watermark ahead of
        -- its clock: that one comes last, as anybody's.
        SELECT * INTO v_lease FROM cosid.machine_lease l
         WHERE l.namespace = p_namespace AND l.instance_id = p_instance_id
           AND l.machine_id <= v_max
           AND NOT (l.state = 'released' AND NOT l.stable
                    AND cosid.lease_next_floor_ms(l) > v_clock_ms)
         ORDER BY l.machine_id LIMIT 1;
        v_outcome := 'own';
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
                     watermark_ms, claim_floor_ms)
                VALUES (p_namespace, v_taken, p_machine_bits, p_layout, p_instance_id,
                        p_claim_token, p_stable, 'claimed', v_now, v_now, v_expires,
                        p_safe_guard_ms * interval '1 millisecond', p_watermark_ms, 0)
                ON CONFLICT DO NOTHING;
                IF FOUND THEN
                    RETURN QUERY SELECT 'new'::text, v_taken, 0::bigint, cosid.unix_ms(v_expires),
                                        cosid.unix_ms(v_now);
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
        IF v_lease.state = 'claimed' AND v_lease.claim_token = p_claim_token THEN
            v_previous := v_lease.claim_floor_ms;
        ELSE
            v_previous := cosid.lease_next_floor_ms(v_lease);
        END IF;
        UPDATE cosid.machine_lease l
           SET machine_bits = p_machine_bits, layout = p_layout, instance_id = p_instance_id,
               claim_token = p_claim_token, stable = p_stable, state = 'claimed',
               claimed_at = v_now, renewed_at = v_now, expires_at = v_expires,
               safe_guard = p_safe_guard_ms * interval '1 millisecond',
               watermark_ms = greatest(l.watermark_ms, p_watermark_ms),
               claim_floor_ms = v_previous, released_ms = NULL
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

-- The claim as servers of cosid 0.1.0 call it (no layout, times as timestamptz), so that a store
-- can be updated while they still run: the same claim, with the layout not compared.
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
                             p_safe_guard_ms, p_claim_token, p_watermark_ms, ''::text) c
$$;

-- Renews a lease held by this instance and claim token, and raises its watermark. No row means
-- the lease is lost: somebody else holds the machine id now. Times come as timestamptz (for
-- servers of cosid 0.1.0) and as Unix milliseconds.
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
    UPDATE cosid.machine_lease l
       SET renewed_at = clock_timestamp(),
           expires_at = clock_timestamp() + greatest(p_safe_guard_ms, 1) * interval '1 millisecond',
           safe_guard = greatest(p_safe_guard_ms, 1) * interval '1 millisecond',
           watermark_ms = greatest(l.watermark_ms, p_watermark_ms)
     WHERE l.namespace = p_namespace AND l.machine_id = p_machine_id
       AND l.instance_id = p_instance_id AND l.claim_token = p_claim_token
       AND l.state = 'claimed' AND p_safe_guard_ms <= 86400000
       AND p_watermark_ms <= cosid.unix_ms(clock_timestamp()) + p_safe_guard_ms + 3600000
    RETURNING l.expires_at, l.renewed_at, cosid.unix_ms(l.expires_at),
              cosid.unix_ms(l.renewed_at)
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
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH released AS (
        UPDATE cosid.machine_lease l
           SET state = CASE WHEN l.stable THEN 'claimed' ELSE 'released' END,
               expires_at = least(l.expires_at, clock_timestamp()),
               released_ms = greatest(p_watermark_ms, l.claim_floor_ms),
               watermark_ms = greatest(l.watermark_ms, p_watermark_ms)
         WHERE l.namespace = p_namespace AND l.machine_id = p_machine_id
           AND l.instance_id = p_instance_id AND l.claim_token = p_claim_token
           AND l.state = 'claimed' AND p_watermark_ms IS NOT NULL
           AND p_watermark_ms <= greatest(l.watermark_ms,
                                          cosid.unix_ms(clock_timestamp()) + 3600000)
         RETURNING 1)
    SELECT EXISTS (SELECT FROM released)
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
    v_now   timestamptz;
    v_lease cosid.machine_lease;
    v_count integer;
BEGIN
    PERFORM FROM cosid.lease_namespace n WHERE n.namespace = p_namespace FOR UPDATE;
    v_now := clock_timestamp();
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

-- Which version of this file the store is: the update scripts check it.
CREATE FUNCTION cosid.lease_store_version()
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT '0.2.0'::text $$;

-- Everything belongs to the NOLOGIN owner; holders (members of cosid_lease_holder) may only
-- call the protocol; the view and cosid.lease_retire() are for superusers.
ALTER TABLE cosid.machine_lease OWNER TO cosid_lease_owner;
ALTER TABLE cosid.lease_namespace OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.lease_next_floor_ms(cosid.machine_lease) OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.unix_ms(timestamptz) OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.machine_lease_guard() OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint, text) OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint) OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.lease_renew(text, integer, text, text, bigint, bigint) OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.lease_release(text, integer, text, text, bigint) OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.lease_retire(text, integer) OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.lease_rows() OWNER TO cosid_lease_owner;
ALTER VIEW cosid.leases OWNER TO cosid_lease_owner;
ALTER FUNCTION cosid.lease_store_version() OWNER TO cosid_lease_owner;

REVOKE ALL ON TABLE cosid.machine_lease, cosid.lease_namespace, cosid.leases FROM PUBLIC;
REVOKE ALL ON FUNCTION cosid.lease_next_floor_ms(cosid.machine_lease), cosid.unix_ms(timestamptz),
    cosid.machine_lease_guard(),
    cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint, text),
    cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint),
    cosid.lease_renew(text, integer, text, text, bigint, bigint),
    cosid.lease_release(text, integer, text, text, bigint),
    cosid.lease_retire(text, integer), cosid.lease_rows() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint, text),
    cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint),
    cosid.lease_renew(text, integer, text, text, bigint, bigint),
    cosid.lease_release(text, integer, text, text, bigint) TO cosid_lease_holder;
-- </lease store>

-- The lease rows are dumped with the database (pg_dump, pg_restore): a machine id without a row
-- counts as never used, so a restored database must keep them.
SELECT pg_catalog.pg_extension_config_dump('cosid.machine_lease', '');

-- cosid.status gains the timings in force. Its function is a new C symbol of the 0.2.0 library.
DROP VIEW cosid.status;
DROP FUNCTION cosid.generator_status();
CREATE  FUNCTION cosid."generator_status"() RETURNS TABLE (
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
	"clock_backwards_broken_threshold" interval  /* Interval */
)
STRICT VOLATILE PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'generator_status_v2_wrapper';

CREATE VIEW cosid.status AS SELECT * FROM cosid.generator_status();
COMMENT ON VIEW cosid.status IS 'One row per cosid generator of this server: configuration and state.';
