//! `cosid.status`: one row per generator of this server, from shared memory, in each shape an
//! extension's SQL of 0.2.0 to this version binds to (`generator_status` of each version).

use super::*;

#[pg_schema]
mod cosid {
    use super::*;

    /// One row per generator: its name, configuration and state. Read through the view
    /// `cosid.status`.
    ///
    /// Its C symbol is new in 0.4.0 (`generator_status_v4_wrapper`), so that the SQL of 0.4.0
    /// cannot be bound to the function of an older library still loaded in a running server.
    #[pg_extern(name = "generator_status", volatile, parallel_safe)]
    #[allow(clippy::type_complexity)]
    fn generator_status_v4() -> TableIterator<
        'static,
        (
            name!(name, String),
            name!(namespace, text_arg::ServerText),
            name!(distributor, String),
            name!(instance_id, Option<String>),
            name!(state, String),
            name!(machine_id, Option<i32>),
            name!(expires_at, Option<TimestampWithTimeZone>),
            name!(last_renewed_at, Option<TimestampWithTimeZone>),
            name!(last_error, Option<String>),
            name!(watermark, Option<TimestampWithTimeZone>),
            name!(epoch, TimestampWithTimeZone),
            name!(time_unit, String),
            name!(timestamp_bits, i32),
            name!(machine_bits, i32),
            name!(sequence_bits, i32),
            name!(sequence_reset_threshold, i64),
            name!(last_timestamp, Option<TimestampWithTimeZone>),
            name!(ids_issued, i64),
            name!(next_tick_waits, i64),
            name!(clock_backwards_waits, i64),
            name!(clock_backwards_errors, i64),
            name!(safe_guard_duration, Option<Interval>),
            name!(guarder_delay, Option<Interval>),
            name!(clock_backwards_spin_threshold, Interval),
            name!(clock_backwards_broken_threshold, Interval),
            // New in 0.4.0, after the columns of 0.3.0: the update replaces the view in place
            // (CREATE OR REPLACE VIEW may only add columns at the end), so that the views and
            // functions users built on cosid.status keep working through it.
            name!(deadline, Option<TimestampWithTimeZone>),
            name!(safe_guard_margin, Option<Interval>),
        ),
    > {
        TableIterator::new(status_rows().into_iter().map(|(name, row, extra)| {
            (
                name,
                row.0,
                row.1,
                row.2,
                row.3,
                row.4,
                row.5,
                row.6,
                row.7,
                row.8,
                row.9,
                row.10,
                row.11,
                row.12,
                row.13,
                row.14,
                row.15,
                row.16,
                row.17,
                row.18,
                row.19,
                row.20,
                row.21,
                row.22,
                row.23,
                extra.deadline,
                extra.safe_guard_margin,
            )
        }))
    }

    /// The same rows in the shape of cosid 0.3.0 (no deadline, no margin), for its SQL, which
    /// calls this symbol: a server restarted onto this library serves `cosid.status` until
    /// `ALTER EXTENSION cosid UPDATE`.
    #[pg_extern(sql = false, volatile, parallel_safe)]
    #[allow(clippy::type_complexity)]
    fn generator_status_v3() -> TableIterator<
        'static,
        (
            name!(name, String),
            name!(namespace, text_arg::ServerText),
            name!(distributor, String),
            name!(instance_id, Option<String>),
            name!(state, String),
            name!(machine_id, Option<i32>),
            name!(expires_at, Option<TimestampWithTimeZone>),
            name!(last_renewed_at, Option<TimestampWithTimeZone>),
            name!(last_error, Option<String>),
            name!(watermark, Option<TimestampWithTimeZone>),
            name!(epoch, TimestampWithTimeZone),
            name!(time_unit, String),
            name!(timestamp_bits, i32),
            name!(machine_bits, i32),
            name!(sequence_bits, i32),
            name!(sequence_reset_threshold, i64),
            name!(last_timestamp, Option<TimestampWithTimeZone>),
            name!(ids_issued, i64),
            name!(next_tick_waits, i64),
            name!(clock_backwards_waits, i64),
            name!(clock_backwards_errors, i64),
            name!(safe_guard_duration, Option<Interval>),
            name!(guarder_delay, Option<Interval>),
            name!(clock_backwards_spin_threshold, Interval),
            name!(clock_backwards_broken_threshold, Interval),
        ),
    > {
        TableIterator::new(status_rows().into_iter().map(|(name, row, _)| {
            (
                name, row.0, row.1, row.2, row.3, row.4, row.5, row.6, row.7, row.8, row.9, row.10,
                row.11, row.12, row.13, row.14, row.15, row.16, row.17, row.18, row.19, row.20,
                row.21, row.22, row.23,
            )
        }))
    }

    /// The same rows in the shape of cosid 0.2.0 (no name), for its SQL, which calls this
    /// symbol: a server restarted onto this library serves `cosid.status` until
    /// `ALTER EXTENSION cosid UPDATE`.
    #[pg_extern(sql = false, volatile, parallel_safe)]
    #[allow(clippy::type_complexity)]
    fn generator_status_v2() -> TableIterator<
        'static,
        (
            name!(namespace, text_arg::ServerText),
            name!(distributor, String),
            name!(instance_id, Option<String>),
            name!(state, String),
            name!(machine_id, Option<i32>),
            name!(expires_at, Option<TimestampWithTimeZone>),
            name!(last_renewed_at, Option<TimestampWithTimeZone>),
            name!(last_error, Option<String>),
            name!(watermark, Option<TimestampWithTimeZone>),
            name!(epoch, TimestampWithTimeZone),
            name!(time_unit, String),
            name!(timestamp_bits, i32),
            name!(machine_bits, i32),
            name!(sequence_bits, i32),
            name!(sequence_reset_threshold, i64),
            name!(last_timestamp, Option<TimestampWithTimeZone>),
            name!(ids_issued, i64),
            name!(next_tick_waits, i64),
            name!(clock_backwards_waits, i64),
            name!(clock_backwards_errors, i64),
            name!(safe_guard_duration, Option<Interval>),
            name!(guarder_delay, Option<Interval>),
            name!(clock_backwards_spin_threshold, Interval),
            name!(clock_backwards_broken_threshold, Interval),
        ),
    > {
        TableIterator::new(status_rows().into_iter().map(|(_, row, _)| row))
    }

    /// The same rows in the shape of cosid 0.1.0, for its SQL, which calls this symbol: a server
    /// restarted onto this library serves `cosid.status` until `ALTER EXTENSION cosid UPDATE`.
    #[pg_extern(sql = false, volatile, parallel_safe)]
    #[allow(clippy::type_complexity)]
    fn generator_status() -> TableIterator<
        'static,
        (
            name!(namespace, text_arg::ServerText),
            name!(distributor, String),
            name!(instance_id, Option<String>),
            name!(state, String),
            name!(machine_id, Option<i32>),
            name!(expires_at, Option<TimestampWithTimeZone>),
            name!(last_renewed_at, Option<TimestampWithTimeZone>),
            name!(last_error, Option<String>),
            name!(watermark, Option<TimestampWithTimeZone>),
            name!(epoch, TimestampWithTimeZone),
            name!(time_unit, String),
            name!(timestamp_bits, i32),
            name!(machine_bits, i32),
            name!(sequence_bits, i32),
            name!(sequence_reset_threshold, i64),
            name!(last_timestamp, Option<TimestampWithTimeZone>),
            name!(ids_issued, i64),
            name!(next_tick_waits, i64),
            name!(clock_backwards_waits, i64),
            name!(clock_backwards_errors, i64),
        ),
    > {
        TableIterator::new(status_rows().into_iter().map(|(_, row, _)| {
            (
                row.0, row.1, row.2, row.3, row.4, row.5, row.6, row.7, row.8, row.9, row.10,
                row.11, row.12, row.13, row.14, row.15, row.16, row.17, row.18, row.19,
            )
        }))
    }
}

/// A row of `cosid.status`, in the order of its columns.
pub(super) type StatusRow = (
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

/// The columns of `cosid.status` new in 0.4.0.
pub(super) struct StatusExtra {
    /// When `cosid_next()` starts refusing unless a renewal succeeds first: the local deadline,
    /// on the wall clock. NULL without a deadline (a fixed machine id, or cosid.fail_fast off)
    /// and when the generator has no machine id (it refuses already).
    deadline: Option<TimestampWithTimeZone>,
    /// The part of the safe guard kept back for clock skew: the deadline is the sending of the
    /// last successful renewal plus safe_guard_duration minus this.
    safe_guard_margin: Option<Interval>,
}

/// One row per live generator: its name, every column of `cosid.status` of 0.3.0, and those
/// new in 0.4.0.
///
/// Members of pg_monitor read the view, as superusers do, with one difference: the text of a
/// lease error can name the store's host, port, user and database (a connection failure) or a
/// path of the data directory, so a role that is not a superuser sees only the kind of problem.
pub(super) fn status_rows() -> Vec<(String, StatusRow, StatusExtra)> {
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
            let extra = StatusExtra {
                deadline,
                safe_guard_margin: timing.map(|(safe_guard_ms, delay_ms)| {
                    let timing = cosid_core::lease::LeaseTiming {
                        safe_guard_ms,
                        guarder_delay_ms: delay_ms,
                        guarder_initial_delay_ms: 0,
                    };
                    interval_ms(timing.margin_ms())
                }),
            };
            let row = (
                text_arg::ServerText(slot.namespace().to_string()),
                slot.distributor().name().to_string(),
                leased.then(|| shmem::instance_id().to_string()),
                lease.state().name().to_string(),
                machine_id,
                known_time(lease.expires_at_ms()),
                known_time(lease.last_renewed_at_ms()),
                last_error,
                known_time(lease.watermark_ms()),
                timestamptz(layout.epoch_ms()).or_raise(),
                layout.time_unit().name().to_string(),
                layout.timestamp_bits() as i32,
                layout.machine_bits() as i32,
                layout.sequence_bits() as i32,
                i64::from(slot.config().sequence_reset_threshold),
                last_timestamp,
                stats.ids_issued as i64,
                stats.next_tick_waits as i64,
                stats.clock_backwards_waits as i64,
                stats.clock_backwards_errors as i64,
                timing.map(|(safe_guard_ms, _)| interval_ms(safe_guard_ms)),
                timing.map(|(_, delay_ms)| interval_ms(delay_ms)),
                interval_ms(thresholds.spin_threshold_ms),
                interval_ms(thresholds.broken_threshold_ms),
            );
            (slot.name().to_string(), row, extra)
        })
        .collect()
}

extension_sql!(
    r#"
CREATE VIEW cosid.status AS SELECT * FROM cosid.generator_status();
COMMENT ON VIEW cosid.status IS 'One row per cosid generator of this server: configuration and state.';
COMMENT ON COLUMN cosid.status.deadline IS 'When cosid_next() starts refusing unless a lease renewal succeeds first; NULL when the generator has no machine id or no deadline.';
COMMENT ON COLUMN cosid.status.safe_guard_margin IS 'The part of safe_guard_duration kept back for clock skew: the deadline is the last successful renewal''s sending plus safe_guard_duration minus this.';
COMMENT ON COLUMN cosid.status.last_error IS 'Why the generator is not UP; to roles that are not superusers only the kind of problem, since a store error can name hosts and users.';
-- Monitoring, as PostgreSQL's own statistics views: members of pg_monitor read the view (the
-- function hides what only superusers may see); nobody else calls the function.
REVOKE ALL ON FUNCTION cosid.generator_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION cosid.generator_status() TO pg_monitor;
GRANT SELECT ON TABLE cosid.status TO pg_monitor;
"#,
    name = "status_view",
    requires = [cosid::generator_status_v4]
);
