//! Named generators: `cosid_create_generator`, `cosid_drop_generator`, and the forms of the user
//! functions that take a generator's name as their last argument.
//!
//! The definitions are rows of `cosid.generator` in `cosid.database`; the worker that manages
//! named generators (see `worker::runner`) reads them and publishes each in a slot of shared
//! memory, where backends of every database find it by name. These functions check a
//! definition completely before they write it, so that the worker only ever reads good rows.

use super::text_arg::TextArg;
use super::*;
use crate::shmem::{Phase, DEFAULT_NAME};
use cosid_core::generator::{check_sequence_reset_threshold, ThresholdTooLarge};
use cosid_core::layout::{LayoutError, TimeUnit};
use cosid_core::protocol::layout_text;
use pgrx::datum::DatumWithOid;
use pgrx::{register_xact_callback, PgXactCallbackEvent};

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
    let unit = match time_unit.as_ref().map(TextArg::as_str) {
        None => preset_unit,
        Some("millisecond") => TimeUnit::Millisecond,
        Some("second") => TimeUnit::Second,
        Some(_) => {
            let quoted = time_unit.as_ref().map(TextArg::quoted).unwrap_or_default();
            CosidError::invalid_argument(format!("invalid cosid time unit {quoted}"))
                .hint("Use millisecond or second.")
                .raise()
        }
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
    let layout_line = layout_text(&layout);
    Spi::connect_mut(|client| {
        // One definition change at a time, so that the checks below stay true until commit.
        client
            .update(
                "LOCK TABLE cosid.generator IN SHARE ROW EXCLUSIVE MODE",
                None,
                &[],
            )
            .or_raise_spi();
        let args: Vec<DatumWithOid> = vec![name.as_str().into()];
        let existing = client
            .select(
                "SELECT 1 FROM cosid.generator WHERE name OPERATOR(pg_catalog.=) $1",
                None,
                &args,
            )
            .or_raise_spi();
        if !existing.is_empty() {
            already_exists(&name).raise();
        }
        let args: Vec<DatumWithOid> = vec![namespace.as_str().into()];
        let sharing = client
            .select(
                "SELECT name FROM cosid.generator WHERE namespace OPERATOR(pg_catalog.=) $1",
                None,
                &args,
            )
            .or_raise_spi();
        if let Some(other) = sharing
            .into_iter()
            .next()
            .and_then(|row| row.get::<String>(1).ok().flatten())
        {
            CosidError::invalid_argument(format!(
                "namespace \"{namespace}\" is used by cosid generator \"{other}\""
            ))
            .detail("Each generator holds its own machine id in its own namespace.")
            .hint("Choose another namespace.")
            .raise();
        }
        let updated = client
            .select(
                "SELECT pg_catalog.to_regclass('cosid.generator_name') IS NOT NULL",
                None,
                &[],
            )
            .or_raise_spi()
            .first()
            .get::<bool>(1)
            .ok()
            .flatten()
            .unwrap_or(false);
        if !updated {
            CosidError::prerequisite("the extension cosid in this database is older than its library")
                .detail("cosid_create_generator() of this library records each name's namespace in cosid.generator_name, which the extension's SQL of this database does not have yet.")
                .hint("Run ALTER EXTENSION cosid UPDATE in this database.")
                .raise();
        }
        let name_args: Vec<DatumWithOid> = vec![name.as_str().into()];
        let named_before = client
            .select(
                "SELECT namespace FROM cosid.generator_name WHERE name OPERATOR(pg_catalog.=) $1",
                None,
                &name_args,
            )
            .or_raise_spi();
        if let Some(earlier) = named_before
            .into_iter()
            .next()
            .and_then(|row| row.get::<String>(1).ok().flatten())
        {
            if earlier != namespace {
                CosidError::invalid_argument(format!(
                    "cosid generator name \"{name}\" was used with namespace \"{earlier}\""
                ))
                .detail(format!(
                    "Calls of cosid_next('{name}') got ids of namespace \"{earlier}\". Ids of another namespace can repeat them: its layout or its machine ids can give the same ids."
                ))
                .hint(format!(
                    "Create it with namespace => '{earlier}' (which keeps its layout), or give the new definition a new name and call it by that name."
                ))
                .raise();
            }
        }
        let used = client
            .select(
                "SELECT layout FROM cosid.generator_namespace WHERE namespace OPERATOR(pg_catalog.=) $1",
                None,
                &args,
            )
            .or_raise_spi();
        if let Some(earlier) = used
            .into_iter()
            .next()
            .and_then(|row| row.get::<String>(1).ok().flatten())
        {
            if earlier != layout_line {
                CosidError::invalid_argument(format!(
                    "namespace \"{namespace}\" was used with another layout"
                ))
                .detail(format!(
                    "Its ids have the layout {earlier}; this definition's is {layout_line}. Ids of two layouts in one namespace can coincide."
                ))
                .hint("A namespace keeps its layout. Give the new definition a new name and a new namespace, and call it by that name.")
                .raise();
            }
        }
        let defined = client
            .select("SELECT pg_catalog.count(*) FROM cosid.generator", None, &[])
            .or_raise_spi()
            .first()
            .get::<i64>(1)
            .ok()
            .flatten()
            .unwrap_or(0);
        check_room(
            settings,
            &name,
            &namespace,
            &layout,
            threshold,
            defined as usize,
        );
        let args: Vec<DatumWithOid> = vec![
            name.as_str().into(),
            namespace.as_str().into(),
            epoch_ms.into(),
            layout.time_unit().name().into(),
            (layout.timestamp_bits() as i32).into(),
            (layout.machine_bits() as i32).into(),
            (layout.sequence_bits() as i32).into(),
            layout_line.as_str().into(),
            threshold.map(|value| value as i32).into(),
        ];
        client
            .update(
                "WITH defined AS (INSERT INTO cosid.generator (name, namespace, epoch_ms, time_unit, timestamp_bits, machine_bits, sequence_bits, sequence_reset_threshold) VALUES ($1, $2, $3, $4, $5, $6, $7, $9)), \
                 named AS (INSERT INTO cosid.generator_name (name, namespace) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING) \
                 INSERT INTO cosid.generator_namespace (namespace, layout) VALUES ($2, $8) ON CONFLICT (namespace) DO NOTHING",
                None,
                &args,
            )
            .or_raise_spi();
    });
    remember_created_here(&name);
    // At commit the worker reads the definitions at once: usable within milliseconds.
    on_commit_of_this_change(shmem::generator_created);
}

thread_local! {
    /// The generators this backend created, each with the (sub)transaction that wrote its
    /// definition: until that commits, the worker cannot publish it, and a call in the same
    /// transaction (a migration that creates a generator and a table that uses it) is refused.
    static CREATED_HERE: std::cell::RefCell<Vec<(String, pg_sys::TransactionId)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

fn remember_created_here(name: &str) {
    // SAFETY: the definition was just written, so this (sub)transaction has a transaction id.
    let writer = unsafe { pg_sys::GetCurrentTransactionId() };
    CREATED_HERE.with_borrow_mut(|created| {
        created.retain(|(_, xid)| is_this_transaction(*xid));
        created.push((name.to_string(), writer));
    });
}

/// Whether `xid` is this transaction or one of its subtransactions not rolled back.
fn is_this_transaction(xid: pg_sys::TransactionId) -> bool {
    // SAFETY: reads this backend's own transaction state; an aborted subtransaction's id is no
    // longer part of it.
    unsafe { pg_sys::TransactionIdIsCurrentTransactionId(xid) }
}

/// Whether this transaction created a generator of that name that it has not dropped: the
/// remembered creation, confirmed by the definition this transaction sees.
pub(super) fn created_in_this_transaction(name: &str) -> bool {
    let remembered = CREATED_HERE.with_borrow(|created| {
        created
            .iter()
            .any(|(created, xid)| created == name && is_this_transaction(*xid))
    });
    if !remembered {
        return false;
    }
    let args: Vec<DatumWithOid> = vec![name.into()];
    Spi::get_one_with_args::<bool>(
        "SELECT EXISTS (SELECT FROM cosid.generator WHERE name OPERATOR(pg_catalog.=) $1)",
        &args,
    )
    .ok()
    .flatten()
    .unwrap_or(false)
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
        unknown_generator(&format!("\"{name}\"")).raise();
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

/// Runs `action` once the change just written is committed, and never if it is not. The commit
/// callback fires at the top-level commit, also after a `ROLLBACK TO SAVEPOINT` that undid the
/// change, and, for a prepared transaction, at a later commit of the session: so it asks the
/// commit log whether the (sub)transaction that wrote the change committed. A change still
/// prepared is seen by the worker's next read once `COMMIT PREPARED` ran.
fn on_commit_of_this_change(
    action: impl FnOnce() + std::panic::UnwindSafe + std::panic::RefUnwindSafe + 'static,
) {
    // SAFETY: the change was just written in this (sub)transaction, which therefore has a
    // transaction id; asking for it assigns none anew.
    let writer = unsafe { pg_sys::GetCurrentTransactionId() };
    register_xact_callback(PgXactCallbackEvent::Commit, move || {
        // SAFETY: TransactionIdDidCommit reads the commit log for a transaction id of this
        // server; the callback runs after the top-level commit was recorded.
        if unsafe { pg_sys::TransactionIdDidCommit(writer) } {
            action();
        }
    });
}

fn already_exists(name: &str) -> CosidError {
    let error = CosidError::new(
        PgSqlErrorCode::ERRCODE_DUPLICATE_OBJECT,
        format!("cosid generator \"{name}\" already exists"),
    );
    if name == DEFAULT_NAME {
        error.detail("\"default\" names the server's default generator, the one cosid_next() uses.")
    } else {
        error.hint("A generator's definition cannot change: give the new definition a new name and a new namespace, and call it by that name. A name keeps its namespace even after cosid_drop_generator().")
    }
}

pub(super) fn null_argument(argument: &str) -> CosidError {
    CosidError::new(
        PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
        format!("argument \"{argument}\" must not be null"),
    )
    .detail("It names a cosid generator.")
}

/// The server's settings, when this is the database that holds the definitions.
fn in_definitions_database() -> &'static crate::settings::ServerSettings {
    let Some(settings) = settings::server() else {
        shmem::not_preloaded().raise()
    };
    let current = Spi::get_one::<String>("SELECT pg_catalog.current_database()::pg_catalog.text")
        .ok()
        .flatten()
        .unwrap_or_default();
    if current != settings.database {
        CosidError::prerequisite(format!(
            "cosid generators are defined in database \"{}\"",
            settings.database
        ))
        .detail(format!(
            "This is database \"{current}\". Generators are defined in cosid.database, and usable from every database of the server."
        ))
        .hint(format!(
            "Connect to database \"{}\" and run the command there.",
            settings.database
        ))
        .raise();
    }
    settings
}

fn check_name(name: &str) -> Result<(), CosidError> {
    if name == DEFAULT_NAME {
        return Err(already_exists(name));
    }
    let mut chars = name.chars();
    let valid = name.len() <= crate::settings::MAX_GENERATOR_NAME_LEN
        && chars
            .next()
            .is_some_and(|first| first.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if valid {
        return Ok(());
    }
    Err(CosidError::invalid_argument(format!(
        "invalid cosid generator name {}",
        layout::quote_for_message(name, true)
    ))
    .detail(format!(
        "A generator name is 1 to {} letters, digits and underscores (A-Z, a-z, 0-9, _), starting with a letter.",
        crate::settings::MAX_GENERATOR_NAME_LEN
    )))
}

fn check_namespace(namespace: &str, default_namespace: &str) -> Result<(), CosidError> {
    let quoted = layout::quote_for_message(namespace, true);
    // SAFETY: reads the encoding of the database this backend is connected to.
    let utf8 = unsafe { pg_sys::GetDatabaseEncoding() } == pg_sys::pg_enc::PG_UTF8 as i32;
    if !utf8 && !namespace.is_ascii() {
        // The worker and the lease store read namespaces as UTF-8, and cosid.status shows
        // them in every database of the server, whatever its encoding.
        return Err(CosidError::invalid_argument(format!(
            "invalid cosid namespace {quoted}"
        ))
        .detail("In a database whose encoding is not UTF8, a namespace is ASCII characters only.")
        .hint("Choose an ASCII namespace, or keep cosid.database in a UTF8 database."));
    }
    if namespace.is_empty()
        || namespace.len() > crate::settings::MAX_NAMESPACE_LEN
        || namespace.chars().any(char::is_control)
    {
        return Err(
            CosidError::invalid_argument(format!("invalid cosid namespace {quoted}")).detail(
                format!(
                    "A namespace is 1 to {} bytes long, without control characters.",
                    crate::settings::MAX_NAMESPACE_LEN
                ),
            ),
        );
    }
    if namespace == default_namespace {
        return Err(CosidError::invalid_argument(format!(
            "namespace {quoted} is the default generator's"
        ))
        .detail("Each generator holds its own machine id in its own namespace; cosid.namespace is the default generator's.")
        .hint("Choose another namespace."));
    }
    Ok(())
}

/// A width argument, or the preset's; refused outside `range`, the widths a layout can hold (a
/// machine id is leased, and decoded, as an integer, and so is a sequence).
fn width(value: Option<i32>, preset: u32, argument: &str, range: (u32, u32)) -> u32 {
    let Some(value) = value else {
        return preset;
    };
    match u32::try_from(value) {
        Ok(bits) if (range.0..=range.1).contains(&bits) => bits,
        _ => CosidError::invalid_argument(format!(
            "{argument} must be from {} to {}, not {value}",
            range.0, range.1
        ))
        .detail(format!(
            "Timestamp, machine and sequence bits together may use at most {} bits; the machine id and the sequence at most {} each.",
            layout::TOTAL_BITS,
            layout::MAX_MACHINE_BITS
        ))
        .raise(),
    }
}

fn threshold_refused(why: ThresholdTooLarge) -> CosidError {
    CosidError::invalid_argument(format!(
        "sequence_reset_threshold must be from 0 to {}, not {}",
        why.max_sequence, why.threshold
    ))
    .detail(format!(
        "A new tick restarts the sequence only once it has reached this value, which the layout's largest sequence, {}, must reach.",
        why.max_sequence
    ))
    .hint(format!(
        "Leave it out for CosId's, half the largest sequence: {}.",
        why.max_sequence >> 1
    ))
}

fn preset_names() -> String {
    layout::PRESETS
        .iter()
        .map(|preset| preset.0)
        .collect::<Vec<_>>()
        .join(", ")
}

fn layout_error(why: LayoutError) -> CosidError {
    match why {
        LayoutError::TooManyBits {
            timestamp_bits,
            machine_bits,
            sequence_bits,
        } => CosidError::invalid_argument("cosid generator layout does not fit in 63 bits").detail(
            format!(
                "timestamp_bits ({timestamp_bits}) + machine_bits ({machine_bits}) + sequence_bits ({sequence_bits}) = {} exceeds the 63 bits of a non-negative bigint.",
                timestamp_bits + machine_bits + sequence_bits
            ),
        ),
        LayoutError::NoTimestampBits => {
            CosidError::invalid_argument("timestamp_bits must be at least 1")
        }
        LayoutError::NoSequenceBits => {
            CosidError::invalid_argument("sequence_bits must be at least 1")
        }
        // Checked with their ranges before the layout is built.
        LayoutError::MachineBitsTooMany { machine_bits } => CosidError::invalid_argument(
            format!("machine_bits must be from 0 to {}, not {machine_bits}", layout::MAX_MACHINE_BITS),
        ),
        LayoutError::SequenceBitsTooMany { sequence_bits } => CosidError::invalid_argument(
            format!("sequence_bits must be from 1 to {}, not {sequence_bits}", layout::MAX_SEQUENCE_BITS),
        ),
        LayoutError::EpochNotWholeSecond { epoch_ms } => CosidError::invalid_argument(
            "the epoch of a generator by the second must be a whole second",
        )
        .detail(format!("The epoch is {}.", layout::format_unix_ms(epoch_ms))),
        LayoutError::TimeRangeTooLarge => CosidError::invalid_argument(
            "cosid generator layout reaches beyond the year 292 million",
        )
        .detail("Use fewer timestamp_bits."),
    }
}

/// A generator whose layout does not cover the current time could issue no id.
fn covers_now(layout: &Layout) -> Result<(), CosidError> {
    let now = crate::host::unix_ms_now();
    if layout.unix_ms_to_ticks(now).is_ok() {
        return Ok(());
    }
    Err(
        CosidError::invalid_argument("cosid generator layout does not cover the current time")
            .detail(format!(
                "Its ids cover {} to {}, and the clock reads {}.",
                layout::format_unix_ms(layout.epoch_ms()),
                layout::format_unix_ms(layout.max_unix_ms()),
                layout::format_unix_ms(now)
            ))
            .hint("Choose an epoch in the past, or more timestamp_bits."),
    )
}

/// Refuses a definition that would find no slot: the named generators' slots are fixed at start.
/// The worker stays the authority; this only says it early and clearly.
fn check_room(
    settings: &crate::settings::ServerSettings,
    name: &str,
    namespace: &str,
    layout: &Layout,
    sequence_reset_threshold: Option<u32>,
    defined: usize,
) {
    let Ok(named) = shmem::named_slots(settings) else {
        return;
    };
    let definition =
        shmem::Definition::named(settings, name, namespace, *layout, sequence_reset_threshold);
    let reusable = named
        .iter()
        .any(|slot| slot.phase() == Phase::Dropped && slot.definition().same_as(&definition));
    let dropped = named
        .iter()
        .filter(|slot| slot.phase() == Phase::Dropped)
        .count();
    if reusable || defined + dropped < settings.max_generators {
        return;
    }
    CosidError::new(
        PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
        format!(
            "no room for another cosid generator: cosid.max_generators is {}",
            settings.max_generators
        ),
    )
    .detail(format!(
        "{defined} generators are defined, and {dropped} dropped ones keep their place until the server restarts (unless created again exactly as they were)."
    ))
    .hint(cosid_core::registry::no_room_hint(
        defined,
        dropped,
        settings.max_generators,
        crate::settings::MAX_NAMED_GENERATORS,
    ))
    .raise()
}

trait OrRaiseSpi<T> {
    fn or_raise_spi(self) -> T;
}

impl<T> OrRaiseSpi<T> for Result<T, pgrx::spi::SpiError> {
    fn or_raise_spi(self) -> T {
        match self {
            Ok(value) => value,
            Err(why) => CosidError::new(
                PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                format!("cosid could not read or write its generators' definitions: {why}"),
            )
            .raise(),
        }
    }
}
