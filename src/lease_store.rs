//! The lease store as the background worker sees it: the protocol of `sql/lease_store.sql`
//! (claim, renew, release), called through SPI in the worker's own database. Every call runs in
//! its own transaction with a statement and lock timeout, and an error in it is caught and
//! returned, so that a slow, locked or failing store never hangs the worker or ends it. Each
//! commits durably (`synchronous_commit = local`), so that a crash cannot forget a claim.

use pgrx::bgworkers::BackgroundWorker;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::{SpiClient, SpiHeapTupleData};
use pgrx::PgTryBuilder;

use crate::protocol::{
    self, Call, ClaimOutcome, Holder, Kind, Param, Renewed, StoreProtocol, Value,
};
use std::time::Duration;

/// Whether the store can be used yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    /// This server is a hot standby, and the store is its own (read-only) database.
    ReadOnly,
    /// `CREATE EXTENSION cosid` has not run in the database yet.
    NoExtension,
    /// The store has an older version's protocol: its update script has not run yet.
    Outdated,
}

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

/// Runs `body` in a transaction of its own, bounded by `timeout`. A PostgreSQL error inside is
/// caught, the transaction rolled back, and the error returned as text.
fn in_transaction<R>(
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

/// What the worker needs of a lease store: its own database through SPI ([`LocalStore`]), or a
/// shared one over the network (`RemoteStore`). Both only carry the calls of
/// [`crate::protocol`], which writes and decodes them once.
pub trait LeaseStore {
    /// Whether the store is another server's database.
    fn is_remote(&self) -> bool;
    /// The longest any one call may take.
    fn set_timeout(&mut self, timeout: Duration);
    fn readiness(&mut self) -> Result<Readiness, String> {
        self.installed_protocol()
    }

    /// Which version's protocol the store has.
    fn installed_protocol(&mut self) -> Result<Readiness, String> {
        Ok(
            match protocol::decode_readiness(&self.run(&protocol::readiness())?) {
                Ok(StoreProtocol::Current) => Readiness::Ready,
                Ok(StoreProtocol::Older) => Readiness::Outdated,
                Ok(StoreProtocol::Absent) => Readiness::NoExtension,
                Err(why) => return Err(why.to_string()),
            },
        )
    }
    /// Runs one call; its rows, each value read as the call's column says.
    fn run(&mut self, call: &Call) -> Result<Vec<Vec<Value>>, String>;

    fn claim(
        &mut self,
        holder: &Holder,
        safe_guard_ms: u64,
        token: u64,
        watermark_ms: i64,
    ) -> Result<ClaimOutcome, String> {
        let rows = self.run(&protocol::claim(holder, safe_guard_ms, token, watermark_ms))?;
        protocol::decode_claim(&rows, holder.machine_bits).map_err(|e| e.to_string())
    }

    /// `Ok(None)`: the lease is lost.
    fn renew(
        &mut self,
        holder: &Holder,
        machine_id: u32,
        token: u64,
        safe_guard_ms: u64,
        watermark_ms: i64,
    ) -> Result<Option<Renewed>, String> {
        let call = protocol::renew(holder, machine_id, token, safe_guard_ms, watermark_ms);
        protocol::decode_renew(&self.run(&call)?).map_err(|e| e.to_string())
    }

    /// Whether the lease was still this holder's.
    fn release(
        &mut self,
        holder: &Holder,
        machine_id: u32,
        token: u64,
        watermark_ms: i64,
    ) -> Result<bool, String> {
        let call = protocol::release(holder, machine_id, token, watermark_ms);
        protocol::decode_release(&self.run(&call)?).map_err(|e| e.to_string())
    }
}

impl LeaseStore for LocalStore {
    fn is_remote(&self) -> bool {
        false
    }

    fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    fn readiness(&mut self) -> Result<Readiness, String> {
        // SAFETY: RecoveryInProgress only reads shared state.
        if unsafe { pg_sys::RecoveryInProgress() } {
            return Ok(Readiness::ReadOnly);
        }
        self.installed_protocol()
    }

    fn run(&mut self, call: &Call) -> Result<Vec<Vec<Value>>, String> {
        let call = call.clone();
        in_transaction(self.timeout, move |client| {
            let params: Vec<DatumWithOid> = call
                .params
                .iter()
                .map(|param| match param {
                    Param::Text(text) => text.as_str().into(),
                    Param::Int(number) => (*number).into(),
                    Param::BigInt(number) => (*number).into(),
                    Param::Bool(flag) => (*flag).into(),
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
