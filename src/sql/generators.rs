//! Named generators: `cosid_create_generator` and `cosid_drop_generator`, and the tables of
//! their definitions. The forms of the user functions that take a generator's name are in
//! `named_forms.rs`; the checks of a definition's arguments in `generator_checks.rs`; the rows it
//! reads and writes, and what becomes of them at commit, in `generator_rows.rs`.
//!
//! The definitions are rows of `cosid.generator` in `cosid.database`; the worker that manages
//! named generators (see `worker::runner`) reads them and publishes each in a slot of shared
//! memory, where backends of every database find it by name. These functions check a
//! definition completely before they write it, so that the worker only ever reads good rows.

use super::convert::unix_ms;
use super::generator_checks::{
    check_name, check_namespace, covers_now, layout_error, null_argument, preset_names,
    threshold_refused, width,
};
use super::generator_rows::{
    in_definitions_database, on_commit_of_this_change, remember_created_here, write_definition,
    OrRaiseSpi,
};
use super::named_forms::no_such_generator;
use crate::error::{CosidError, OrRaise};
use crate::settings::MachineSource;
use crate::shmem;
use cosid_core::layout::{self, Layout};
use pgrx::prelude::*;

use super::text_arg::TextArg;
use crate::shmem::DEFAULT_NAME;
use cosid_core::generator::check_sequence_reset_threshold;
use cosid_core::layout::TimeUnit;
use pgrx::datum::DatumWithOid;

extension_sql!(
    r#"
-- The named generators' definitions. Only cosid.database's rows are used; the lease worker (or,
-- with a fixed machine id, the generators worker) reads them about every 250 ms.
CREATE TABLE cosid.generator (
    name           text        PRIMARY KEY
                   CHECK (name ~ '^[A-Za-z][A-Za-z0-9_]{0,62}$' AND name <> 'default'),
    namespace      text        NOT NULL UNIQUE
                   CHECK (octet_length(namespace) BETWEEN 1 AND 63),
    epoch_ms       bigint      NOT NULL,
    time_unit      text        NOT NULL CHECK (time_unit IN ('millisecond', 'second')),
    timestamp_bits integer     NOT NULL CHECK (timestamp_bits >= 1),
    machine_bits   integer     NOT NULL CHECK (machine_bits >= 0),
    sequence_bits  integer     NOT NULL CHECK (sequence_bits >= 1),
    created_at     timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CHECK (timestamp_bits + machine_bits + sequence_bits <= 63)
);
COMMENT ON TABLE cosid.generator IS 'Named cosid generators (cosid_create_generator). Change them only through cosid_create_generator and cosid_drop_generator.';

-- Every namespace a named generator ever used, with its layout: ids of two layouts in one
-- namespace can coincide, so a namespace keeps its layout after its generator is dropped.
CREATE TABLE cosid.generator_namespace (
    namespace     text        PRIMARY KEY,
    layout        text        NOT NULL,
    first_used_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE cosid.generator_namespace IS 'The layout of every namespace a named cosid generator used. Do not delete rows: a namespace must keep its layout.';

SELECT pg_catalog.pg_extension_config_dump('cosid.generator', '');
SELECT pg_catalog.pg_extension_config_dump('cosid.generator_namespace', '');
-- A new tick restarts the sequence only once it has reached this value; NULL means the layout's
-- own, CosId's: half its maximum sequence.
ALTER TABLE cosid.generator ADD COLUMN sequence_reset_threshold integer,
    ADD CONSTRAINT generator_sequence_reset_threshold_check CHECK (sequence_reset_threshold
        BETWEEN 0 AND (1::pg_catalog.int8 OPERATOR(pg_catalog.<<) sequence_bits) - 1);

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
-- Every definition, however it got there (a restore, an older library), is under its name's
-- recorded namespace.
ALTER TABLE cosid.generator ADD CONSTRAINT generator_keeps_its_names_namespace
    FOREIGN KEY (name, namespace) REFERENCES cosid.generator_name (name, namespace);

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
"#,
    name = "generator_tables",
    // After the lease table's own dump registration: the extension's list of dumped tables
    // then has the order an update from 0.2.0 gives it.
    requires = ["lease_rows_dumped"]
);

extension_sql!(
    r#"
REVOKE ALL ON FUNCTION cosid_create_generator(text, text, text, integer, integer, integer, timestamptz, text, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION cosid_drop_generator(text) FROM PUBLIC;
"#,
    name = "generator_functions_private",
    requires = [cosid_create_generator_v5, cosid_drop_generator]
);

/// `cosid_create_generator` as cosid 0.4.0 and earlier declare it (no threshold), for their SQL
/// until `ALTER EXTENSION cosid UPDATE`: it refuses there with a clear error (their tables lack
/// what this library records), where the new form's symbol would read an argument not passed.
#[pg_extern(sql = false, volatile, parallel_unsafe)]
#[allow(clippy::too_many_arguments)]
fn cosid_create_generator(
    name: Option<TextArg>,
    layout: Option<TextArg>,
    namespace: Option<TextArg>,
    machine_bits: Option<i32>,
    sequence_bits: Option<i32>,
    timestamp_bits: Option<i32>,
    epoch: Option<TimestampWithTimeZone>,
    time_unit: Option<TextArg>,
) {
    create_generator(
        name,
        layout,
        namespace,
        machine_bits,
        sequence_bits,
        timestamp_bits,
        epoch,
        time_unit,
        None,
    )
}

#[pg_extern(name = "cosid_create_generator", volatile, parallel_unsafe)]
#[allow(clippy::too_many_arguments)]
fn cosid_create_generator_v5(
    name: Option<TextArg>,
    layout: default!(Option<TextArg>, "'millisecond'"),
    namespace: default!(Option<TextArg>, "NULL"),
    machine_bits: default!(Option<i32>, "NULL"),
    sequence_bits: default!(Option<i32>, "NULL"),
    timestamp_bits: default!(Option<i32>, "NULL"),
    epoch: default!(Option<TimestampWithTimeZone>, "NULL"),
    time_unit: default!(Option<TextArg>, "NULL"),
    sequence_reset_threshold: default!(Option<i32>, "NULL"),
) {
    create_generator(
        name,
        layout,
        namespace,
        machine_bits,
        sequence_bits,
        timestamp_bits,
        epoch,
        time_unit,
        sequence_reset_threshold,
    )
}

#[allow(clippy::too_many_arguments)]
fn create_generator(
    name: Option<TextArg>,
    layout: Option<TextArg>,
    namespace: Option<TextArg>,
    machine_bits: Option<i32>,
    sequence_bits: Option<i32>,
    timestamp_bits: Option<i32>,
    epoch: Option<TimestampWithTimeZone>,
    time_unit: Option<TextArg>,
    sequence_reset_threshold: Option<i32>,
) {
    let settings = in_definitions_database();
    let Some(name) = name else {
        null_argument("name").raise()
    };
    let name = name.as_str().to_string();
    check_name(&name).or_raise();
    let preset_name = layout.as_ref().map_or("millisecond", |text| text.as_str());
    let Some((preset_unit, preset_timestamp, preset_machine, preset_sequence)) =
        layout::preset(preset_name)
    else {
        let quoted = layout.as_ref().map(TextArg::quoted).unwrap_or_default();
        CosidError::invalid_argument(format!("unknown cosid layout {quoted}"))
            .hint(format!("Use one of: {}.", preset_names()))
            .raise()
    };
    let unit = match &time_unit {
        None => preset_unit,
        // Spelt exactly as the table's CHECK and the presets spell it (the setting
        // cosid.time_unit, an enum, takes any case).
        Some(text) => TimeUnit::from_name(text.as_str())
            .filter(|unit| unit.name() == text.as_str())
            .unwrap_or_else(|| {
                CosidError::invalid_argument(format!("invalid cosid time unit {}", text.quoted()))
                    .hint("Use millisecond or second.")
                    .raise()
            }),
    };
    let timestamp_bits = width(
        timestamp_bits,
        preset_timestamp,
        "timestamp_bits",
        (1, layout::TOTAL_BITS - 1),
    );
    let machine_bits = width(
        machine_bits,
        preset_machine,
        "machine_bits",
        (0, layout::MAX_MACHINE_BITS),
    );
    let sequence_bits = width(
        sequence_bits,
        preset_sequence,
        "sequence_bits",
        (1, layout::MAX_SEQUENCE_BITS),
    );
    let epoch_ms = match epoch {
        None => layout::COSID_EPOCH_MS,
        Some(epoch) => unix_ms(epoch).or_raise(),
    };
    let layout = Layout::new(epoch_ms, unit, timestamp_bits, machine_bits, sequence_bits)
        .map_err(layout_error)
        .or_raise();
    covers_now(&layout).or_raise();
    let threshold = sequence_reset_threshold.map(|value| {
        check_sequence_reset_threshold(&layout, i64::from(value))
            .unwrap_or_else(|why| threshold_refused(why).raise())
    });
    let namespace = match namespace {
        None => name.clone(),
        Some(text) => text.as_str().to_string(),
    };
    check_namespace(&namespace, &settings.namespace).or_raise();
    if let MachineSource::Fixed(machine_id) = settings.machine {
        if layout.check_machine_id(machine_id).is_err() {
            CosidError::invalid_argument(format!(
                "machine id {machine_id} does not fit generator \"{name}\""
            ))
            .detail(format!(
                "Its {machine_bits} machine bits hold machine ids 0 to {}, and this server's fixed machine id (cosid.distributor = {}) is {machine_id}.",
                layout.max_machine_id(),
                settings.distributor.name()
            ))
            .hint("Give the generator more machine_bits (and fewer sequence_bits or timestamp_bits).")
            .raise();
        }
    }
    write_definition(settings, &name, &namespace, &layout, threshold);
    remember_created_here(&name);
    // At commit the worker reads the definitions at once: usable within milliseconds.
    on_commit_of_this_change(shmem::generator_created);
}

#[pg_extern(volatile, parallel_unsafe)]
fn cosid_drop_generator(name: Option<TextArg>) {
    in_definitions_database();
    let Some(name) = name else {
        null_argument("name").raise()
    };
    let quoted = name.quoted();
    let name = name.as_str().to_string();
    if name == DEFAULT_NAME {
        CosidError::invalid_argument("cannot drop the default cosid generator")
            .detail("It is the server's own generator, configured by the cosid.* settings.")
            .raise();
    }
    if check_name(&name).is_err() {
        // No generator can have that name: it does not exist, whatever the definitions say.
        CosidError::new(
            PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
            format!("cosid generator {quoted} does not exist"),
        )
        .detail("A generator name is letters, digits and underscores (A-Z, a-z, 0-9, _), starting with a letter.")
        .raise();
    }
    let deleted = Spi::connect_mut(|client| {
        let args: Vec<DatumWithOid> = vec![name.as_str().into()];
        client
            .update(
                "DELETE FROM cosid.generator WHERE name OPERATOR(pg_catalog.=) $1 RETURNING name",
                None,
                &args,
            )
            .or_raise_spi()
            .len()
    });
    if deleted == 0 {
        // A generator this transaction created would have been deleted: none of that name is
        // seen here.
        no_such_generator(&quoted).raise();
    }
    // At commit the generator stops at once, in every database; the worker then releases its
    // machine id with the exact last timestamp issued.
    on_commit_of_this_change(move || {
        if let Ok(Some(slot)) = shmem::live_generator(name.as_bytes()) {
            slot.drop_generator();
        }
        shmem::definitions_changed();
    });
}
