//! The rows a named generator's definition is checked against and written to (`cosid.generator`,
//! and the records every name and namespace keep: `cosid.generator_name`,
//! `cosid.generator_namespace`), and what happens once that write commits.

use crate::error::CosidError;
use crate::settings::{self};
use crate::shmem;
use cosid_core::layout::Layout;
use pgrx::prelude::*;

use super::generator_checks::{already_exists, check_room};
use cosid_core::protocol::layout_text;
use pgrx::datum::DatumWithOid;
use pgrx::{register_xact_callback, PgXactCallbackEvent};

/// Writes a definition whose arguments were checked, once the rows already there allow it: a
/// name not defined, a namespace no other generator uses, a name and a namespace that keep what
/// they were first used with, and room for one more generator.
pub(super) fn write_definition(
    settings: &crate::settings::ServerSettings,
    name: &str,
    namespace: &str,
    layout: &Layout,
    threshold: Option<u32>,
) {
    let epoch_ms = layout.epoch_ms();
    let layout_line = layout_text(layout);
    Spi::connect_mut(|client| {
        // One definition change at a time, so that the checks below stay true until commit.
        client
            .update(
                "LOCK TABLE cosid.generator IN SHARE ROW EXCLUSIVE MODE",
                None,
                &[],
            )
            .or_raise_spi();
        let args: Vec<DatumWithOid> = vec![name.into()];
        let existing = client
            .select(
                "SELECT 1 FROM cosid.generator WHERE name OPERATOR(pg_catalog.=) $1",
                None,
                &args,
            )
            .or_raise_spi();
        if !existing.is_empty() {
            already_exists(name).raise();
        }
        let args: Vec<DatumWithOid> = vec![namespace.into()];
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
        let name_args: Vec<DatumWithOid> = vec![name.into()];
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
        // The same rules, kept by the server whatever database cosid.database names.
        match crate::names::read() {
            Ok(record) => match record.conflict(name, namespace, &layout_line) {
                Some(cosid_core::names::Conflict::Name { earlier }) => {
                    CosidError::invalid_argument(format!(
                        "cosid generator name \"{name}\" was used with namespace \"{earlier}\" on this server"
                    ))
                    .detail(format!(
                        "This server issued ids of namespace \"{earlier}\" to calls of cosid_next('{name}'), as the data directory's cosid.names records (cosid.database may have named another database then). Ids of another namespace can repeat them."
                    ))
                    .hint(format!(
                        "Create it with namespace => '{earlier}' and its layout, or give the new definition a new name and call it by that name."
                    ))
                    .raise();
                }
                Some(cosid_core::names::Conflict::Layout { earlier }) => {
                    CosidError::invalid_argument(format!(
                        "namespace \"{namespace}\" was used with another layout on this server"
                    ))
                    .detail(format!(
                        "This server issued ids of this namespace with the layout {earlier}, as the data directory's cosid.names records (cosid.database may have named another database then); this definition's is {layout_line}. Ids of two layouts in one namespace can coincide."
                    ))
                    .hint("A namespace keeps its layout. Give the new definition a new name and a new namespace, and call it by that name.")
                    .raise();
                }
                None => {}
            },
            Err(why) => {
                super::refusals::names_file_error(&crate::error::sentence_case(&why)).raise();
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
            name,
            namespace,
            layout,
            threshold,
            defined as usize,
        );
        let args: Vec<DatumWithOid> = vec![
            name.into(),
            namespace.into(),
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
}

thread_local! {
    /// The generators this backend created, each with the (sub)transaction that wrote its
    /// definition: until that commits, the worker cannot publish it, and a call in the same
    /// transaction (a migration that creates a generator and a table that uses it) is refused.
    static CREATED_HERE: std::cell::RefCell<Vec<(String, pg_sys::TransactionId)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

pub(super) fn remember_created_here(name: &str) {
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

/// Runs `action` once the change just written is committed, and never if it is not. The commit
/// callback fires at the top-level commit, also after a `ROLLBACK TO SAVEPOINT` that undid the
/// change, and, for a prepared transaction, at a later commit of the session: so it asks the
/// commit log whether the (sub)transaction that wrote the change committed. A change still
/// prepared is seen by the worker's next read once `COMMIT PREPARED` ran.
pub(super) fn on_commit_of_this_change(
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

/// The server's settings, when this is the database that holds the definitions.
pub(super) fn in_definitions_database() -> &'static crate::settings::ServerSettings {
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

pub(super) trait OrRaiseSpi<T> {
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
