//! The columns of `cosid.status`, each declared once with the version that added it, and its
//! rows, read from shared memory. Each version's SQL declares its own shape (`status.rs`).

use super::convert::{interval_ms, known_time, timestamptz};
use super::refusals::{error_shown, no_machine_id};
use super::text_arg;
use crate::clock::ServerClock;
use crate::error::OrRaise;
use crate::shmem;
use pgrx::prelude::*;

/// The SQL of the version that added a column; a shape of `cosid.status` that SQL declares has
/// every column of its version and earlier ones, in the order of [`COLUMNS`].
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(super) enum Since {
    V0_1_0,
    V0_2_0,
    V0_3_0,
    V0_4_0,
    V0_5_0,
}

impl Since {
    pub(super) fn name(self) -> &'static str {
        match self {
            Since::V0_1_0 => "0.1.0",
            Since::V0_2_0 => "0.2.0",
            Since::V0_3_0 => "0.3.0",
            Since::V0_4_0 => "0.4.0",
            Since::V0_5_0 => "0.5.0",
        }
    }
}

/// A column of `cosid.status`: its name, the version that added it, its SQL type and its value
/// in a row.
pub(super) struct Column {
    pub name: &'static str,
    pub since: Since,
    pub type_oid: fn() -> pg_sys::Oid,
    pub value: fn(&StatusRow) -> Option<pg_sys::Datum>,
}

/// Declares every column of `cosid.status` once, in the order of the view: the field of
/// [`StatusRow`] that holds it, its Rust type (which gives its SQL type), and the version that
/// added it. A column is added at the end (the update replaces the view in place, and
/// CREATE OR REPLACE VIEW may only add columns there), and filled in by [`status_rows`]; the
/// SQL of its version declares it (`status.rs`, and the update script).
macro_rules! status_columns {
    ($($(#[doc = $doc:literal])* $field:ident: $type:ty, $since:ident;)*) => {
        /// One row of `cosid.status`, with every column any of its shapes has.
        pub(super) struct StatusRow {
            $($(#[doc = $doc])* $field: $type,)*
        }

        /// Every column of `cosid.status`, in the order of the view.
        pub(super) static COLUMNS: &[Column] = &[$(Column {
            name: stringify!($field),
            since: Since::$since,
            type_oid: <$type as IntoDatum>::type_oid,
            value: |row| row.$field.clone().into_datum(),
        }),*];
    };
}

status_columns! {
    name: String, V0_3_0;
    namespace: text_arg::ServerText, V0_1_0;
    distributor: String, V0_1_0;
    instance_id: Option<String>, V0_1_0;
    state: String, V0_1_0;
    machine_id: Option<i32>, V0_1_0;
    expires_at: Option<TimestampWithTimeZone>, V0_1_0;
    last_renewed_at: Option<TimestampWithTimeZone>, V0_1_0;
    last_error: Option<String>, V0_1_0;
    watermark: Option<TimestampWithTimeZone>, V0_1_0;
    epoch: TimestampWithTimeZone, V0_1_0;
    time_unit: String, V0_1_0;
    timestamp_bits: i32, V0_1_0;
    machine_bits: i32, V0_1_0;
    sequence_bits: i32, V0_1_0;
    sequence_reset_threshold: i64, V0_1_0;
    last_timestamp: Option<TimestampWithTimeZone>, V0_1_0;
    ids_issued: i64, V0_1_0;
    next_tick_waits: i64, V0_1_0;
    clock_backwards_waits: i64, V0_1_0;
    clock_backwards_errors: i64, V0_1_0;
    safe_guard_duration: Option<Interval>, V0_2_0;
    guarder_delay: Option<Interval>, V0_2_0;
    clock_backwards_spin_threshold: Interval, V0_2_0;
    clock_backwards_broken_threshold: Interval, V0_2_0;
    /// When `cosid_next()` starts refusing unless a renewal succeeds first: the local deadline,
    /// on the wall clock. NULL without a deadline (a fixed machine id, or cosid.fail_fast off)
    /// and when the generator has no machine id (it refuses already).
    deadline: Option<TimestampWithTimeZone>, V0_4_0;
    /// The part of the safe guard kept back for clock skew: the deadline is the sending of the
    /// last successful renewal plus safe_guard_duration minus this.
    safe_guard_margin: Option<Interval>, V0_4_0;
    /// Lease renewals that did not renew since the server started (the store failed, or the
    /// lease was lost); NULL without a lease.
    renewal_failures: Option<i64>, V0_5_0;
    /// Why the generator is not UP, as a code for machines (`GeneratorProblem::code`; `settings`
    /// when the server's settings give it no machine id); NULL when UP or without a known
    /// problem.
    problem: Option<String>, V0_5_0;
}

/// One row per live generator.
///
/// Members of pg_monitor read the view, as superusers do, with one difference: the text of a
/// lease error can name the store's host, port, user and database (a connection failure) or a
/// path of the data directory, so a role that is not a superuser sees only the kind of problem.
pub(super) fn status_rows() -> Vec<StatusRow> {
    // SAFETY: superuser() only reads the current user's role, which every backend has.
    let full_errors = unsafe { pg_sys::superuser() };
    let mut clock = ServerClock;
    let (now_monotonic_ms, now_unix_ms) = {
        use cosid_core::generator::Clock;
        (clock.monotonic_ms(), clock.unix_ms())
    };
    shmem::generators()
        .or_raise()
        .filter(|slot| slot.is_live())
        .map(|slot| {
            let layout = slot.config().layout;
            let stats = slot.state.stats();
            let open = slot.state.is_open();
            let last = layout.decompose(slot.state.last_word()).filter(|_| open);
            let lease = &slot.status;
            let machine_id = last
                .map(|parts| parts.machine_id)
                .or_else(|| lease.held().map(|(machine_id, _)| machine_id))
                .map(|machine_id| machine_id as i32);
            let last_timestamp =
                last.and_then(|parts| timestamptz(layout.ticks_to_unix_ms(parts.ticks)).ok());
            let leased = slot.distributor().is_leased();
            // The timings in force: those the worker kept after checking every reload.
            let timing = lease.timing_ms().filter(|_| leased);
            let thresholds = shmem::backwards_policy();
            // State, problem and text read together, the state first (the worker writes it
            // last), so that a row never pairs one state with another's problem.
            let snapshot = lease.snapshot();
            let (last_error, problem) = match no_machine_id() {
                Some(why) => (Some(why.detail()), Some("settings")),
                None => (
                    Some(error_shown(
                        &snapshot.last_error,
                        snapshot.problem,
                        full_errors,
                    ))
                    .filter(|text| !text.is_empty()),
                    snapshot.problem.code(),
                ),
            };
            // Read before last_renewed_at: the worker publishes a renewal before the deadline it
            // gives, so the deadline shown is never later than last_renewed_at allows.
            let deadline = cosid_core::lease::deadline_unix_ms(
                slot.state.deadline_ms(),
                now_monotonic_ms,
                now_unix_ms,
            )
            .filter(|_| open)
            .and_then(|unix_ms| timestamptz(unix_ms).ok());
            StatusRow {
                name: slot.name().to_string(),
                namespace: text_arg::ServerText(slot.namespace().to_string()),
                distributor: slot.distributor().name().to_string(),
                instance_id: leased.then(|| shmem::instance_id().to_string()),
                state: snapshot.state.name().to_string(),
                machine_id,
                expires_at: known_time(lease.expires_at_ms()),
                last_renewed_at: known_time(lease.last_renewed_at_ms()),
                last_error,
                watermark: known_time(lease.watermark_ms()),
                epoch: timestamptz(layout.epoch_ms()).or_raise(),
                time_unit: layout.time_unit().name().to_string(),
                timestamp_bits: layout.timestamp_bits() as i32,
                machine_bits: layout.machine_bits() as i32,
                sequence_bits: layout.sequence_bits() as i32,
                sequence_reset_threshold: i64::from(slot.config().sequence_reset_threshold),
                last_timestamp,
                ids_issued: stats.ids_issued as i64,
                next_tick_waits: stats.next_tick_waits as i64,
                clock_backwards_waits: stats.clock_backwards_waits as i64,
                clock_backwards_errors: stats.clock_backwards_errors as i64,
                safe_guard_duration: timing.map(|(safe_guard_ms, _)| interval_ms(safe_guard_ms)),
                guarder_delay: timing.map(|(_, delay_ms)| interval_ms(delay_ms)),
                clock_backwards_spin_threshold: interval_ms(thresholds.spin_threshold_ms),
                clock_backwards_broken_threshold: interval_ms(thresholds.broken_threshold_ms),
                deadline,
                safe_guard_margin: timing.map(|(safe_guard_ms, delay_ms)| {
                    let timing = cosid_core::lease::LeaseTiming {
                        safe_guard_ms,
                        guarder_delay_ms: delay_ms,
                        guarder_initial_delay_ms: 0,
                    };
                    interval_ms(timing.margin_ms())
                }),
                renewal_failures: leased.then(|| lease.renewal_failures() as i64),
                problem: problem
                    .filter(|_| snapshot.state != cosid_core::lease::LeaseState::Up)
                    .map(str::to_string),
            }
        })
        .collect()
}
