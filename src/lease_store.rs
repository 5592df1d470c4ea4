//! The lease store as the background worker sees it: the protocol of `sql/lease_store.sql`
//! (claim, renew, release), called through SPI in the worker's own database. Every call runs in
//! its own transaction with a statement and lock timeout, and an error in it is caught and
//! returned, so that a slow, locked or failing store never hangs the worker or ends it. Each
//! commits durably (`synchronous_commit = local`), so that a crash cannot forget a claim.

use pgrx::bgworkers::BackgroundWorker;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::PgTryBuilder;
use std::time::Duration;

/// What one holder asks of the store.
#[derive(Clone, Debug)]
pub struct Holder {
    pub namespace: String,
    pub machine_bits: u32,
    pub instance_id: String,
    pub stable: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// A machine id; the claimer must wait until its clock passes `previous_watermark_ms`.
    Claimed {
        machine_id: u32,
        how: String,
        previous_watermark_ms: i64,
        expires_at_ms: i64,
        store_now_ms: i64,
    },
    /// This instance's own lease is still live under another claim: it may be taken once it
    /// expires, at `expires_at_ms` by the store's clock.
    Busy { machine_id: u32, expires_at_ms: i64 },
    /// Every machine id of the namespace is held.
    Exhausted,
    /// Other claims kept changing the rows this one chose; try again.
    Contended,
    /// A live lease of the namespace uses other machine bits.
    MachineBitsMismatch,
}

impl ClaimOutcome {
    /// The outcome of `cosid.lease_claim`'s row, from either store.
    pub fn from_row(
        outcome: &str,
        machine_id: Option<i32>,
        previous_watermark_ms: i64,
        expires_at_ms: i64,
        store_now_ms: i64,
    ) -> ClaimOutcome {
        let machine_id = machine_id.unwrap_or(-1) as u32;
        match outcome {
            "exhausted" => ClaimOutcome::Exhausted,
            "contended" => ClaimOutcome::Contended,
            "machine_bits" => ClaimOutcome::MachineBitsMismatch,
            "busy" => ClaimOutcome::Busy {
                machine_id,
                expires_at_ms,
            },
            how => ClaimOutcome::Claimed {
                machine_id,
                how: how.to_string(),
                previous_watermark_ms,
                expires_at_ms,
                store_now_ms,
            },
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Renewed {
    pub expires_at_ms: i64,
    pub store_now_ms: i64,
}

/// Whether the store can be used yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    /// This server is a hot standby, and the store is its own (read-only) database.
    ReadOnly,
    /// `CREATE EXTENSION cosid` has not run in the database yet.
    NoExtension,
}

/// The protocol's calls, as both stores send them: times come back as Unix milliseconds.
pub const CLAIM_SQL: &str = "SELECT outcome, machine_id, previous_watermark_ms, \
        (extract(epoch FROM expires_at) * 1000)::bigint, \
        (extract(epoch FROM store_now) * 1000)::bigint \
    FROM cosid.lease_claim($1, $2, $3, $4, $5, $6, $7)";
pub const RENEW_SQL: &str = "SELECT (extract(epoch FROM expires_at) * 1000)::bigint, \
        (extract(epoch FROM store_now) * 1000)::bigint \
    FROM cosid.lease_renew($1, $2, $3, $4, $5, $6)";
pub const RELEASE_SQL: &str = "SELECT cosid.lease_release($1, $2, $3, $4, $5)";

pub fn token_text(token: u64) -> String {
    format!("{token:016x}")
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
                        &format!(
                            "SET LOCAL lock_timeout = {timeout_ms}; \
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
/// shared one over the network (`RemoteStore`). Both send the same calls of the same protocol.
pub trait LeaseStore {
    /// Whether the store is another server's database.
    fn is_remote(&self) -> bool;
    /// The longest any one call may take.
    fn set_timeout(&mut self, timeout: Duration);
    fn readiness(&mut self) -> Result<Readiness, String>;
    fn claim(
        &mut self,
        holder: &Holder,
        safe_guard_ms: u64,
        token: u64,
        watermark_ms: i64,
    ) -> Result<ClaimOutcome, String>;
    /// `Ok(None)`: the lease is lost.
    fn renew(
        &mut self,
        holder: &Holder,
        machine_id: u32,
        token: u64,
        safe_guard_ms: u64,
        watermark_ms: i64,
    ) -> Result<Option<Renewed>, String>;
    /// Whether the lease was still this holder's.
    fn release(
        &mut self,
        holder: &Holder,
        machine_id: u32,
        token: u64,
        watermark_ms: i64,
    ) -> Result<bool, String>;
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
        in_transaction(self.timeout, |client| {
            let table = client
                .select(
                    "SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'cosid'",
                    None,
                    &[],
                )
                .map_err(|e| e.to_string())?;
            Ok(if table.is_empty() {
                Readiness::NoExtension
            } else {
                Readiness::Ready
            })
        })
    }

    fn claim(
        &mut self,
        holder: &Holder,
        safe_guard_ms: u64,
        token: u64,
        watermark_ms: i64,
    ) -> Result<ClaimOutcome, String> {
        let holder = holder.clone();
        in_transaction(self.timeout, move |client| {
            let table = client
                .update(
                    CLAIM_SQL,
                    None,
                    &[
                        holder.namespace.as_str().into(),
                        (holder.machine_bits as i32).into(),
                        holder.instance_id.as_str().into(),
                        holder.stable.into(),
                        (safe_guard_ms as i64).into(),
                        token_text(token).as_str().into(),
                        watermark_ms.into(),
                    ],
                )
                .map_err(|e| e.to_string())?;
            let row = table.first();
            let outcome: String = row
                .get(1)
                .map_err(|e| e.to_string())?
                .ok_or("the claim returned no outcome")?;
            Ok(ClaimOutcome::from_row(
                &outcome,
                row.get(2).map_err(|e| e.to_string())?,
                row.get(3).map_err(|e| e.to_string())?.unwrap_or(0),
                row.get(4).map_err(|e| e.to_string())?.unwrap_or(0),
                row.get(5).map_err(|e| e.to_string())?.unwrap_or(0),
            ))
        })
    }

    fn renew(
        &mut self,
        holder: &Holder,
        machine_id: u32,
        token: u64,
        safe_guard_ms: u64,
        watermark_ms: i64,
    ) -> Result<Option<Renewed>, String> {
        let holder = holder.clone();
        in_transaction(self.timeout, move |client| {
            let table = client
                .update(
                    RENEW_SQL,
                    None,
                    &[
                        holder.namespace.as_str().into(),
                        (machine_id as i32).into(),
                        holder.instance_id.as_str().into(),
                        token_text(token).as_str().into(),
                        (safe_guard_ms as i64).into(),
                        watermark_ms.into(),
                    ],
                )
                .map_err(|e| e.to_string())?;
            if table.is_empty() {
                return Ok(None);
            }
            let row = table.first();
            Ok(Some(Renewed {
                expires_at_ms: row.get(1).map_err(|e| e.to_string())?.unwrap_or(0),
                store_now_ms: row.get(2).map_err(|e| e.to_string())?.unwrap_or(0),
            }))
        })
    }

    fn release(
        &mut self,
        holder: &Holder,
        machine_id: u32,
        token: u64,
        watermark_ms: i64,
    ) -> Result<bool, String> {
        let holder = holder.clone();
        in_transaction(self.timeout, move |client| {
            let table = client
                .update(
                    RELEASE_SQL,
                    None,
                    &[
                        holder.namespace.as_str().into(),
                        (machine_id as i32).into(),
                        holder.instance_id.as_str().into(),
                        token_text(token).as_str().into(),
                        watermark_ms.into(),
                    ],
                )
                .map_err(|e| e.to_string())?;
            Ok(table
                .first()
                .get::<bool>(1)
                .map_err(|e| e.to_string())?
                .unwrap_or(false))
        })
    }
}
