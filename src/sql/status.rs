//! `cosid.status`: one row per generator of this server, from shared memory, in each shape an
//! extension's SQL of 0.2.0 to this version binds to (`generator_status` of each version).

use super::text_arg;
use pgrx::prelude::*;

use super::status_row::{status_rows, StatusRow};

#[pg_schema]
mod cosid {
    use super::*;

    /// One row per generator: its name, configuration and state. Read through the view
    /// `cosid.status`.
    ///
    /// Its C symbol is new in 0.5.0 (`generator_status_v5_wrapper`), so that the SQL of 0.5.0
    /// cannot be bound to the function of an older library still loaded in a running server.
    #[pg_extern(name = "generator_status", volatile, parallel_safe)]
    #[allow(clippy::type_complexity)]
    fn generator_status_v5() -> TableIterator<
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
            // New in 0.5.0, last, for the same reason.
            name!(renewal_failures, Option<i64>),
        ),
    > {
        TableIterator::new(status_rows().into_iter().map(StatusRow::v5))
    }

    /// The same rows in the shape of cosid 0.4.0 (no renewal failures), for its SQL, which calls
    /// this symbol until `ALTER EXTENSION cosid UPDATE`.
    #[pg_extern(sql = false, volatile, parallel_safe)]
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
        TableIterator::new(status_rows().into_iter().map(StatusRow::v4))
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
        TableIterator::new(status_rows().into_iter().map(StatusRow::v3))
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
        TableIterator::new(status_rows().into_iter().map(StatusRow::v2))
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
        TableIterator::new(status_rows().into_iter().map(StatusRow::v1))
    }
}

extension_sql!(
    r#"
CREATE VIEW cosid.status AS SELECT * FROM cosid.generator_status();
COMMENT ON VIEW cosid.status IS 'One row per cosid generator of this server: configuration and state.';
COMMENT ON COLUMN cosid.status.deadline IS 'When cosid_next() starts refusing unless a lease renewal succeeds first; NULL when the generator has no machine id or no deadline.';
COMMENT ON COLUMN cosid.status.safe_guard_margin IS 'The part of safe_guard_duration kept back for clock skew: the deadline is the last successful renewal''s sending plus safe_guard_duration minus this.';
COMMENT ON COLUMN cosid.status.last_error IS 'Why the generator is not UP; to roles that are not superusers only the kind of problem, since a store error can name hosts and users.';
COMMENT ON COLUMN cosid.status.renewal_failures IS 'Lease renewals that did not renew since the server started: the store failed (DOWN) or no longer showed the lease (LOST); NULL without a lease.';
-- Monitoring, as PostgreSQL's own statistics views: members of pg_monitor read the view (the
-- function hides what only superusers may see); nobody else calls the function.
REVOKE ALL ON FUNCTION cosid.generator_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION cosid.generator_status() TO pg_monitor;
GRANT SELECT ON TABLE cosid.status TO pg_monitor;
"#,
    name = "status_view",
    requires = [cosid::generator_status_v5]
);
