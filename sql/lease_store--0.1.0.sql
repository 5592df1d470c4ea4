-- cosid's lease store: the table of machine-id leases and the protocol that claims, renews and
-- releases them. Every holder calls these functions, so the rules live here once.
--
-- All times come from this database's clock (clock_timestamp()). A claimer decides expiry from
-- the row (expires_at = the holder's renewal time + the holder's own safe guard), never from its
-- own clock or settings. Watermarks are Unix milliseconds: an upper bound on every timestamp the
-- holder can issue before its next write.

CREATE SCHEMA IF NOT EXISTS cosid;

CREATE TABLE cosid.machine_lease (
    namespace    text        NOT NULL,
    machine_id   integer     NOT NULL CHECK (machine_id >= 0),
    machine_bits integer     NOT NULL CHECK (machine_bits BETWEEN 0 AND 31),
    instance_id  text        NOT NULL,
    claim_token  text        NOT NULL,
    stable       boolean     NOT NULL,
    state        text        NOT NULL CHECK (state IN ('claimed', 'released')),
    claimed_at   timestamptz NOT NULL,
    renewed_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    safe_guard   interval    NOT NULL,
    watermark_ms bigint      NOT NULL,
    PRIMARY KEY (namespace, machine_id)
);

COMMENT ON TABLE cosid.machine_lease IS
    'Machine-id leases of cosid: one row per namespace and machine id ever claimed.';

-- Claims a machine id for an instance, in CosId's order: the lease it already holds, a released
-- one, a never-used one, then an expired one. Stable instances never take an expired lease, and
-- nobody takes theirs. Claims of one namespace are serialised, so concurrent claimers get
-- distinct machine ids. Returns one row; outcome is 'own', 'released', 'new' or 'expired' with the
-- machine id and the watermark the claimer must wait for; 'busy' when this instance's own lease
-- is still live under another claim (after a crash, or because another process uses the same
-- instance id): it may be taken only once it has expired, with its expiry in expires_at;
-- 'exhausted', 'machine_bits' (a live lease of the namespace uses other machine bits), or
-- 'contended' (other writers kept changing the chosen rows: try again). Call it in a READ
-- COMMITTED transaction, so that it sees what the claims it waited for committed.
CREATE FUNCTION cosid.lease_claim(
    p_namespace     text,
    p_machine_bits  integer,
    p_instance_id   text,
    p_stable        boolean,
    p_safe_guard_ms bigint,
    p_claim_token   text,
    p_watermark_ms  bigint)
RETURNS TABLE (outcome text, machine_id integer, previous_watermark_ms bigint,
               expires_at timestamptz, store_now timestamptz)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now      timestamptz := clock_timestamp();
    v_max      integer := ((1::bigint << p_machine_bits) - 1)::integer;
    v_lease    cosid.machine_lease;
    v_outcome  text;
    v_taken    integer;
    v_expires  timestamptz;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('cosid.machine_lease'), hashtext(p_namespace));
    v_now := clock_timestamp();
    v_expires := v_now + p_safe_guard_ms * interval '1 millisecond';

    IF EXISTS (SELECT 1 FROM cosid.machine_lease l
                WHERE l.namespace = p_namespace AND l.machine_bits <> p_machine_bits
                  AND l.state = 'claimed' AND (l.stable OR l.expires_at > v_now)) THEN
        RETURN QUERY SELECT 'machine_bits'::text, NULL::integer, NULL::bigint,
                            NULL::timestamptz, v_now;
        RETURN;
    END IF;

    FOR attempt IN 1..16 LOOP
        v_lease := NULL;
        SELECT * INTO v_lease FROM cosid.machine_lease l
         WHERE l.namespace = p_namespace AND l.instance_id = p_instance_id
           AND l.machine_id <= v_max
         ORDER BY l.machine_id LIMIT 1;
        v_outcome := 'own';
        IF v_lease.machine_id IS NOT NULL AND v_lease.state = 'claimed'
           AND v_lease.expires_at > v_now AND v_lease.claim_token <> p_claim_token THEN
            -- Whoever made that claim may still be generating until it expires.
            RETURN QUERY SELECT 'busy'::text, v_lease.machine_id, v_lease.watermark_ms,
                                v_lease.expires_at, v_now;
            RETURN;
        END IF;
        IF v_lease.machine_id IS NULL THEN
            SELECT * INTO v_lease FROM cosid.machine_lease l
             WHERE l.namespace = p_namespace AND l.state = 'released' AND NOT l.stable
               AND l.machine_id <= v_max
             ORDER BY l.machine_id LIMIT 1;
            v_outcome := 'released';
        END IF;
        IF v_lease.machine_id IS NULL THEN
            SELECT CASE
                     WHEN NOT EXISTS (SELECT 1 FROM cosid.machine_lease l
                                       WHERE l.namespace = p_namespace AND l.machine_id = 0)
                     THEN 0
                     ELSE (SELECT min(l.machine_id) + 1 FROM cosid.machine_lease l
                            WHERE l.namespace = p_namespace AND l.machine_id < v_max
                              AND NOT EXISTS (SELECT 1 FROM cosid.machine_lease n
                                               WHERE n.namespace = p_namespace
                                                 AND n.machine_id = l.machine_id + 1))
                   END
              INTO v_taken;
            IF v_taken IS NOT NULL AND v_taken <= v_max THEN
                INSERT INTO cosid.machine_lease
                    (namespace, machine_id, machine_bits, instance_id, claim_token, stable, state,
                     claimed_at, renewed_at, expires_at, safe_guard, watermark_ms)
                VALUES (p_namespace, v_taken, p_machine_bits, p_instance_id, p_claim_token,
                        p_stable, 'claimed', v_now, v_now, v_expires,
                        p_safe_guard_ms * interval '1 millisecond', p_watermark_ms)
                ON CONFLICT DO NOTHING;
                IF FOUND THEN
                    RETURN QUERY SELECT 'new'::text, v_taken, 0::bigint, v_expires, v_now;
                    RETURN;
                END IF;
                CONTINUE;
            END IF;
        END IF;
        IF v_lease.machine_id IS NULL AND NOT p_stable THEN
            SELECT * INTO v_lease FROM cosid.machine_lease l
             WHERE l.namespace = p_namespace AND l.state = 'claimed' AND NOT l.stable
               AND l.expires_at < v_now AND l.machine_id <= v_max
             ORDER BY l.expires_at, l.machine_id LIMIT 1;
            v_outcome := 'expired';
        END IF;
        IF v_lease.machine_id IS NULL THEN
            RETURN QUERY SELECT 'exhausted'::text, NULL::integer, NULL::bigint,
                                NULL::timestamptz, v_now;
            RETURN;
        END IF;

        -- Take the row only if it is still the one we chose: a renewal that committed meanwhile
        -- changed it, and then we choose again.
        UPDATE cosid.machine_lease l
           SET machine_bits = p_machine_bits, instance_id = p_instance_id,
               claim_token = p_claim_token, stable = p_stable, state = 'claimed',
               claimed_at = v_now, renewed_at = v_now, expires_at = v_expires,
               safe_guard = p_safe_guard_ms * interval '1 millisecond',
               watermark_ms = greatest(l.watermark_ms, p_watermark_ms)
         WHERE l.namespace = p_namespace AND l.machine_id = v_lease.machine_id
           AND l.claim_token = v_lease.claim_token AND l.state = v_lease.state
           AND l.expires_at = v_lease.expires_at;
        IF FOUND THEN
            RETURN QUERY SELECT v_outcome, v_lease.machine_id, v_lease.watermark_ms, v_expires, v_now;
            RETURN;
        END IF;
    END LOOP;
    RETURN QUERY SELECT 'contended'::text, NULL::integer, NULL::bigint, NULL::timestamptz, v_now;
END
$$;

-- Renews a lease held by this instance and claim token, and raises its watermark. No row means
-- the lease is lost: somebody else holds the machine id now.
CREATE FUNCTION cosid.lease_renew(
    p_namespace     text,
    p_machine_id    integer,
    p_instance_id   text,
    p_claim_token   text,
    p_safe_guard_ms bigint,
    p_watermark_ms  bigint)
RETURNS TABLE (expires_at timestamptz, store_now timestamptz)
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    UPDATE cosid.machine_lease l
       SET renewed_at = clock_timestamp(),
           expires_at = clock_timestamp() + p_safe_guard_ms * interval '1 millisecond',
           safe_guard = p_safe_guard_ms * interval '1 millisecond',
           watermark_ms = greatest(l.watermark_ms, p_watermark_ms)
     WHERE l.namespace = p_namespace AND l.machine_id = p_machine_id
       AND l.instance_id = p_instance_id AND l.claim_token = p_claim_token
       AND l.state = 'claimed'
    RETURNING l.expires_at, l.renewed_at
$$;

-- Releases a lease at shutdown with the exact watermark: the last timestamp the holder issued.
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
SET search_path = pg_catalog, pg_temp
AS $$
    WITH released AS (
        UPDATE cosid.machine_lease l
           SET state = CASE WHEN l.stable THEN 'claimed' ELSE 'released' END,
               expires_at = clock_timestamp(),
               watermark_ms = p_watermark_ms
         WHERE l.namespace = p_namespace AND l.machine_id = p_machine_id
           AND l.instance_id = p_instance_id AND l.claim_token = p_claim_token
         RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM released)
$$;

-- Every lease with its holder's state and the time it has left, by the store's clock.
CREATE VIEW cosid.leases AS
SELECT l.namespace, l.machine_id, l.instance_id, l.stable,
       CASE WHEN l.state = 'released' THEN 'released'
            WHEN l.stable THEN 'held (stable)'
            WHEN l.expires_at > clock_timestamp() THEN 'held'
            ELSE 'expired' END AS status,
       CASE WHEN l.state = 'claimed' AND l.expires_at > clock_timestamp()
            THEN l.expires_at - clock_timestamp() END AS time_left,
       l.claimed_at, l.renewed_at, l.expires_at, l.safe_guard, l.machine_bits,
       to_timestamp(l.watermark_ms / 1000.0) AS watermark
  FROM cosid.machine_lease l;

-- Leases are runtime state of the servers that hold them: only the holders (superusers, or the
-- cosid background worker) may change them.
REVOKE ALL ON TABLE cosid.machine_lease FROM PUBLIC;
REVOKE ALL ON FUNCTION cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION cosid.lease_renew(text, integer, text, text, bigint, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION cosid.lease_release(text, integer, text, text, bigint) FROM PUBLIC;
