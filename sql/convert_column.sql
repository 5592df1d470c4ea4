-- cosid_convert_column: switches a bigint key column fed by a sequence (bigserial, or an
-- identity column) to DEFAULT cosid_next(), or to a named generator's cosid_next('name').
--
-- The table is locked (ACCESS EXCLUSIVE) before anything is read, so no row can be inserted
-- between the check and the switch: inserts that were waiting run after the commit, with the new
-- default. Then one id is drawn from the generator, and the switch is refused unless the column's
-- largest value is below it: a generator's ids only rise, so every id the column gets afterwards
-- is above every id it had. The id drawn is returned. SECURITY INVOKER: the caller must own the
-- table (ALTER TABLE requires it anyway; checked first for a clearer error).
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

COMMENT ON FUNCTION cosid_convert_column(regclass, name, text) IS
    'Switches a bigint column fed by a sequence (bigserial, identity) to DEFAULT cosid_next() (or a named generator''s), locking the table; refused unless every existing value is below the ids cosid issues now. Returns the id drawn for the check.';
