//! A row of `cosid.status`, read from shared memory, and its projection into each shape of the
//! view (see `status.rs`).

use super::convert::{interval_ms, known_time, timestamptz};
use super::refusals::{lease_error_for, no_machine_id};
use super::text_arg;
use crate::clock::ServerClock;
use crate::error::OrRaise;
use crate::shmem;
use pgrx::prelude::*;

/// One row of `cosid.status` with every column any of its shapes has, in the order of the
/// columns; each shape is a projection of it ([`StatusRow::v4`] and the older ones). A column is
/// added here, filled in by [`status_rows`], and projected into the shapes that have it.
pub(super) struct StatusRow {
    name: String,
    namespace: text_arg::ServerText,
    distributor: String,
    instance_id: Option<String>,
    state: String,
    machine_id: Option<i32>,
    expires_at: Option<TimestampWithTimeZone>,
    last_renewed_at: Option<TimestampWithTimeZone>,
    last_error: Option<String>,
    watermark: Option<TimestampWithTimeZone>,
    epoch: TimestampWithTimeZone,
    time_unit: String,
    timestamp_bits: i32,
    machine_bits: i32,
    sequence_bits: i32,
    sequence_reset_threshold: i64,
    last_timestamp: Option<TimestampWithTimeZone>,
    ids_issued: i64,
    next_tick_waits: i64,
    clock_backwards_waits: i64,
    clock_backwards_errors: i64,
    safe_guard_duration: Option<Interval>,
    guarder_delay: Option<Interval>,
    clock_backwards_spin_threshold: Interval,
    clock_backwards_broken_threshold: Interval,
    /// When `cosid_next()` starts refusing unless a renewal succeeds first: the local deadline,
    /// on the wall clock. NULL without a deadline (a fixed machine id, or cosid.fail_fast off)
    /// and when the generator has no machine id (it refuses already). New in 0.4.0.
    deadline: Option<TimestampWithTimeZone>,
    /// The part of the safe guard kept back for clock skew: the deadline is the sending of the
    /// last successful renewal plus safe_guard_duration minus this. New in 0.4.0.
    safe_guard_margin: Option<Interval>,
    /// Lease renewals that did not renew since the server started (the store failed, or the
    /// lease was lost); NULL without a lease. New in 0.5.0.
    renewal_failures: Option<i64>,
}

/// The columns of cosid 0.1.0's shape, the first 20 of 0.2.0's.
type ShapeV1 = (
    text_arg::ServerText,
    String,
    Option<String>,
    String,
    Option<i32>,
    Option<TimestampWithTimeZone>,
    Option<TimestampWithTimeZone>,
    Option<String>,
    Option<TimestampWithTimeZone>,
    TimestampWithTimeZone,
    String,
    i32,
    i32,
    i32,
    i64,
    Option<TimestampWithTimeZone>,
    i64,
    i64,
    i64,
    i64,
);

/// The columns of cosid 0.2.0's shape: 0.1.0's, then the lease timings and the thresholds.
type ShapeV2 = (
    text_arg::ServerText,
    String,
    Option<String>,
    String,
    Option<i32>,
    Option<TimestampWithTimeZone>,
    Option<TimestampWithTimeZone>,
    Option<String>,
    Option<TimestampWithTimeZone>,
    TimestampWithTimeZone,
    String,
    i32,
    i32,
    i32,
    i64,
    Option<TimestampWithTimeZone>,
    i64,
    i64,
    i64,
    i64,
    Option<Interval>,
    Option<Interval>,
    Interval,
    Interval,
);

/// The columns of cosid 0.3.0's shape: the name, then 0.2.0's.
type ShapeV3 = (
    String,
    text_arg::ServerText,
    String,
    Option<String>,
    String,
    Option<i32>,
    Option<TimestampWithTimeZone>,
    Option<TimestampWithTimeZone>,
    Option<String>,
    Option<TimestampWithTimeZone>,
    TimestampWithTimeZone,
    String,
    i32,
    i32,
    i32,
    i64,
    Option<TimestampWithTimeZone>,
    i64,
    i64,
    i64,
    i64,
    Option<Interval>,
    Option<Interval>,
    Interval,
    Interval,
);

/// The columns of cosid 0.4.0's shape, this version's: 0.3.0's, then the deadline and the margin.
type ShapeV4 = (
    String,
    text_arg::ServerText,
    String,
    Option<String>,
    String,
    Option<i32>,
    Option<TimestampWithTimeZone>,
    Option<TimestampWithTimeZone>,
    Option<String>,
    Option<TimestampWithTimeZone>,
    TimestampWithTimeZone,
    String,
    i32,
    i32,
    i32,
    i64,
    Option<TimestampWithTimeZone>,
    i64,
    i64,
    i64,
    i64,
    Option<Interval>,
    Option<Interval>,
    Interval,
    Interval,
    Option<TimestampWithTimeZone>,
    Option<Interval>,
);

/// The columns of cosid 0.5.0's shape: 0.4.0's, then the renewal failures.
type ShapeV5 = (
    String,
    text_arg::ServerText,
    String,
    Option<String>,
    String,
    Option<i32>,
    Option<TimestampWithTimeZone>,
    Option<TimestampWithTimeZone>,
    Option<String>,
    Option<TimestampWithTimeZone>,
    TimestampWithTimeZone,
    String,
    i32,
    i32,
    i32,
    i64,
    Option<TimestampWithTimeZone>,
    i64,
    i64,
    i64,
    i64,
    Option<Interval>,
    Option<Interval>,
    Interval,
    Interval,
    Option<TimestampWithTimeZone>,
    Option<Interval>,
    Option<i64>,
);

impl StatusRow {
    pub(super) fn v5(self) -> ShapeV5 {
        let renewal_failures = self.renewal_failures;
        let v4 = self.v4();
        (
            v4.0,
            v4.1,
            v4.2,
            v4.3,
            v4.4,
            v4.5,
            v4.6,
            v4.7,
            v4.8,
            v4.9,
            v4.10,
            v4.11,
            v4.12,
            v4.13,
            v4.14,
            v4.15,
            v4.16,
            v4.17,
            v4.18,
            v4.19,
            v4.20,
            v4.21,
            v4.22,
            v4.23,
            v4.24,
            v4.25,
            v4.26,
            renewal_failures,
        )
    }

    pub(super) fn v4(self) -> ShapeV4 {
        (
            self.name,
            self.namespace,
            self.distributor,
            self.instance_id,
            self.state,
            self.machine_id,
            self.expires_at,
            self.last_renewed_at,
            self.last_error,
            self.watermark,
            self.epoch,
            self.time_unit,
            self.timestamp_bits,
            self.machine_bits,
            self.sequence_bits,
            self.sequence_reset_threshold,
            self.last_timestamp,
            self.ids_issued,
            self.next_tick_waits,
            self.clock_backwards_waits,
            self.clock_backwards_errors,
            self.safe_guard_duration,
            self.guarder_delay,
            self.clock_backwards_spin_threshold,
            self.clock_backwards_broken_threshold,
            self.deadline,
            self.safe_guard_margin,
        )
    }

    pub(super) fn v3(self) -> ShapeV3 {
        (
            self.name,
            self.namespace,
            self.distributor,
            self.instance_id,
            self.state,
            self.machine_id,
            self.expires_at,
            self.last_renewed_at,
            self.last_error,
            self.watermark,
            self.epoch,
            self.time_unit,
            self.timestamp_bits,
            self.machine_bits,
            self.sequence_bits,
            self.sequence_reset_threshold,
            self.last_timestamp,
            self.ids_issued,
            self.next_tick_waits,
            self.clock_backwards_waits,
            self.clock_backwards_errors,
            self.safe_guard_duration,
            self.guarder_delay,
            self.clock_backwards_spin_threshold,
            self.clock_backwards_broken_threshold,
        )
    }

    pub(super) fn v2(self) -> ShapeV2 {
        (
            self.namespace,
            self.distributor,
            self.instance_id,
            self.state,
            self.machine_id,
            self.expires_at,
            self.last_renewed_at,
            self.last_error,
            self.watermark,
            self.epoch,
            self.time_unit,
            self.timestamp_bits,
            self.machine_bits,
            self.sequence_bits,
            self.sequence_reset_threshold,
            self.last_timestamp,
            self.ids_issued,
            self.next_tick_waits,
            self.clock_backwards_waits,
            self.clock_backwards_errors,
            self.safe_guard_duration,
            self.guarder_delay,
            self.clock_backwards_spin_threshold,
            self.clock_backwards_broken_threshold,
        )
    }

    pub(super) fn v1(self) -> ShapeV1 {
        (
            self.namespace,
            self.distributor,
            self.instance_id,
            self.state,
            self.machine_id,
            self.expires_at,
            self.last_renewed_at,
            self.last_error,
            self.watermark,
            self.epoch,
            self.time_unit,
            self.timestamp_bits,
            self.machine_bits,
            self.sequence_bits,
            self.sequence_reset_threshold,
            self.last_timestamp,
            self.ids_issued,
            self.next_tick_waits,
            self.clock_backwards_waits,
            self.clock_backwards_errors,
        )
    }
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
            let leased = slot.distributor() == cosid_core::distributor::DistributorKind::Lease;
            // The timings in force: those the worker kept after checking every reload.
            let timing = lease.timing_ms().filter(|_| leased);
            let thresholds = shmem::backwards_policy();
            let last_error = match no_machine_id() {
                Some(why) => Some(why.detail()),
                None => Some(lease_error_for(slot, full_errors)).filter(|text| !text.is_empty()),
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
                state: lease.state().name().to_string(),
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
            }
        })
        .collect()
}
