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
