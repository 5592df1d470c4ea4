//! The lease store in the worker's own database (`cosid.database`): the calls of
//! `cosid_core::protocol`, carried through SPI. Every call runs in
//! its own transaction with a statement and lock timeout, and an error in it is caught and
//! returned, so that a slow, locked or failing store never hangs the worker or ends it. Each
//! commits durably (`synchronous_commit = local`), so that a crash cannot forget a claim.

use pgrx::bgworkers::BackgroundWorker;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::{SpiClient, SpiHeapTupleData};
use pgrx::PgTryBuilder;

use cosid_core::protocol::{live_before, Call, Kind, Param, SqlTransport, StoreError, Value};
use std::time::Duration;

// PostgreSQL arms statement_timeout only for statements a client sends, never for SPI calls in a
// background worker: the worker arms the timer itself. Not in pgrx's bindings (utils/timeout.h).
const STATEMENT_TIMEOUT: std::ffi::c_int = 3;
extern "C-unwind" {
    fn enable_timeout_after(id: std::ffi::c_int, delay_ms: std::ffi::c_int);
    fn disable_timeout(id: std::ffi::c_int, keep_indicator: bool);
}

fn arm_statement_timeout(timeout_ms: u128) {
    // SAFETY: the timeout module is initialised in every process connected to a database, and
    // STATEMENT_TIMEOUT's handler is registered by InitPostgres; when it fires, the next interrupt
    // check raises "canceling statement due to statement timeout".
    unsafe { enable_timeout_after(STATEMENT_TIMEOUT, timeout_ms.min(i32::MAX as u128) as _) };
}

fn disarm_statement_timeout() {
    // SAFETY: disabling a timeout that is not armed is allowed.
    unsafe { disable_timeout(STATEMENT_TIMEOUT, false) };
}

/// Pins the settings of `cosid_core::session_settings` (those this server's version has) for the
/// rest of the worker's session, whatever `ALTER DATABASE ... SET` or `ALTER ROLE ... SET` gave
/// it, then gives every other setting they gave it its built-in default and the session back to
/// the bootstrap superuser (`worker_reset_sql`); called right after it connected to its
/// database, outside any transaction. (search_path, lock_timeout and synchronous_commit are set
/// in each transaction.)
pub fn pin_session_settings() {
    for setting in cosid_core::session_settings::pinned_for(pg_sys::PG_VERSION_NUM, true) {
        let (Ok(name), Ok(value)) = (
            std::ffi::CString::new(setting.name),
            std::ffi::CString::new(setting.value),
        ) else {
            continue;
        };
        // SAFETY: both are NUL-terminated; a session-level setting of a superuser's session, as
        // SET would make it, overrides the database's and the role's.
        unsafe {
            pg_sys::SetConfigOption(
                name.as_ptr(),
                value.as_ptr(),
                pg_sys::GucContext::PGC_SUSET,
                pg_sys::GucSource::PGC_S_SESSION,
            )
        };
    }
    let reset = in_transaction(Duration::from_secs(10), |client| {
        client
            .update(cosid_core::session_settings::worker_reset_sql(), None, &[])
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
    if let Err(why) = reset {
        warning!("cosid: the lease worker could not take back its session's settings: {why}");
    }
}

/// Runs `body` in a transaction of its own, bounded by `timeout`. A PostgreSQL error inside is
/// caught, the transaction rolled back, and the error returned as text.
pub fn in_transaction<R>(
    timeout: Duration,
    body: impl FnOnce(&mut SpiClient<'_>) -> Result<R, String>
        + std::panic::UnwindSafe
        + std::panic::RefUnwindSafe,
) -> Result<R, String> {
    let timeout_ms = timeout.as_millis().max(1);
    arm_statement_timeout(timeout_ms);
    let result = PgTryBuilder::new(move || {
        BackgroundWorker::transaction(move || {
            Spi::connect_mut(|client| {
                client
                    .update(
                        // The claim must survive a crash of this server before any id is issued
                        // under it, whatever synchronous_commit the server runs with.
                        // Nothing a role with CREATE on some schema defines may be picked by
                        // the calls, which run as the bootstrap superuser.
                        &format!(
                            "SET LOCAL search_path = pg_catalog, pg_temp; \
                             SET LOCAL lock_timeout = {timeout_ms}; \
                             SET LOCAL synchronous_commit = local"
                        ),
                        None,
                        &[],
                    )
                    .map_err(|e| e.to_string())?;
                body(client)
            })
        })
    })
    .catch_others(|caught| {
        // SAFETY: we are in the worker's main loop, outside any other transaction; aborting the
        // one that failed is what PostgreSQL's own workers do after catching an error.
        unsafe { pg_sys::AbortCurrentTransaction() };
        Err(match caught {
            pg_sys::panic::CaughtError::PostgresError(report)
            | pg_sys::panic::CaughtError::ErrorReport(report)
            | pg_sys::panic::CaughtError::RustPanic {
                ereport: report, ..
            } => report.message().to_string(),
        })
    })
    .execute();
    disarm_statement_timeout();
    result
}

/// The store in this server's own database (`cosid.database`), through SPI.
pub struct LocalStore {
    pub timeout: Duration,
}

impl LocalStore {
    /// Lease calls must see the rows other claims committed while they waited for the
    /// namespace's lock, whatever isolation level the database defaults to.
    pub fn use_read_committed(&self) -> Result<(), String> {
        in_transaction(self.timeout, |client| {
            client
                .update(
                    "SET default_transaction_isolation = 'read committed'",
                    None,
                    &[],
                )
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
    }
}

impl SqlTransport for LocalStore {
    fn is_remote(&self) -> bool {
        false
    }

    fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    fn known_read_only(&mut self) -> bool {
        // SAFETY: RecoveryInProgress only reads shared state.
        unsafe { pg_sys::RecoveryInProgress() }
    }

    fn run(&mut self, call: &Call) -> Result<Vec<Vec<Value>>, StoreError> {
        let call = call.clone();
        let timeout_ms = self.timeout.as_millis() as u64;
        in_transaction(self.timeout, move |client| {
            // Decided now, with the call about to run within its timeout.
            let now_ms = crate::host::boottime_ms();
            let params: Vec<DatumWithOid> = call
                .params
                .iter()
                .map(|param| match param {
                    Param::Text(text) => text.as_str().into(),
                    Param::Int(number) => (*number).into(),
                    Param::BigInt(number) => (*number).into(),
                    Param::Bool(flag) => (*flag).into(),
                    Param::LiveBefore(deadline_ms) => {
                        live_before(*deadline_ms, now_ms, timeout_ms).into()
                    }
                })
                .collect();
            let table = client
                .update(call.sql, None, &params)
                .map_err(|e| e.to_string())?;
            let mut rows = Vec::new();
            for row in table {
                let mut values = Vec::with_capacity(call.columns.len());
                for (index, kind) in call.columns.iter().enumerate() {
                    values.push(read_value(&row, index + 1, *kind)?);
                }
                rows.push(values);
            }
            Ok(rows)
        })
        .map_err(StoreError::Failed)
    }
}

/// Column `ordinal` (from 1) of an SPI row, read as `kind`: a wrong type is an error.
fn read_value(row: &SpiHeapTupleData<'_>, ordinal: usize, kind: Kind) -> Result<Value, String> {
    let value = match kind {
        Kind::Text => row.get::<String>(ordinal).map(|v| v.map(Value::Text)),
        Kind::Int => row.get::<i32>(ordinal).map(|v| v.map(Value::Int)),
        Kind::BigInt => row.get::<i64>(ordinal).map(|v| v.map(Value::BigInt)),
        Kind::Bool => row.get::<bool>(ordinal).map(|v| v.map(Value::Bool)),
    };
    value
        .map(|v| v.unwrap_or(Value::Null))
        .map_err(|e| format!("the lease store answered column {ordinal} with a wrong type: {e}"))
}
