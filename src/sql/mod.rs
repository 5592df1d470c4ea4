//! The SQL surface. Each function converts between SQL types and the pure modules, and turns
//! their refusals into SQL errors; none has logic of its own.
//!
//! User-facing functions go into the schema `CREATE EXTENSION` installs into (public by
//! default), so that `DEFAULT cosid_next()` works unqualified; internal objects go into `cosid`.
//!
//! Volatility: `cosid_next()` is volatile. The decode and format functions are stable, not
//! immutable, because their result depends on the layout settings, which a restart can change;
//! stable is enough for `WHERE id >= cosid_from_timestamp(...)` to be an index range scan. Radix62
//! depends on nothing but its argument, so it is immutable.

mod comments;
mod generators;
mod text_arg;
mod uninstall;

pub use uninstall::install_drop_guard;

use crate::clock::ServerClock;
use crate::error::{CosidError, OrRaise};
use crate::settings::{self, MachineSource};
use crate::shmem;
use cosid_core::generator::GenerateError;
use cosid_core::layout::{self, IdParts, Layout, ParseError, TimeRangeError};
use cosid_core::lease::{LeaseProblem, LeaseSnapshot, RefusalKind, UNKNOWN_TIME};
use pgrx::prelude::*;
use pgrx::{composite_type, IntoDatum, PgLogLevel, PgTupleDesc};
use std::sync::OnceLock;
use text_arg::TextArg;

/// Milliseconds from the Unix epoch to PostgreSQL's, 2000-01-01.
const POSTGRES_EPOCH_UNIX_MS: i64 = 946_684_800_000;

#[pg_extern(volatile, parallel_safe)]
fn cosid_next() -> i64 {
    let slot = shmem::default_generator().or_raise();
    match slot.state.next_id(slot.config(), &mut ServerClock) {
        Ok(id) => id,
        Err(why) => generate_error(slot, why).raise(),
    }
}

// The parts of an id as one value: `SELECT id, cosid_decode(id) FROM t` keeps every row (a NULL
// id gives a NULL value), and `SELECT * FROM cosid_decode(id)` still gives the columns ts,
// machine_id and sequence.
extension_sql!(
    r#"
CREATE TYPE cosid.decoded AS (ts timestamptz, machine_id integer, sequence integer);
"#,
    name = "decoded_type",
    requires = ["lease_store"]
);

/// The parts of an id, of type `cosid.decoded`.
///
/// Its C symbol is new in 0.4.0 (`cosid_decode_v4_wrapper`): the SQL of 0.3.0 declares
/// `cosid_decode` set-returning and calls `cosid_decode_wrapper`, which stays for it below.
#[pg_extern(
    name = "cosid_decode",
    stable,
    strict,
    parallel_safe,
    requires = ["decoded_type"]
)]
fn cosid_decode_v4(
    id: i64,
    fcinfo: pg_sys::FunctionCallInfo,
) -> composite_type!('static, "cosid.decoded") {
    decoded(&layout_or_raise(), id, fcinfo)
}

/// `cosid_decode` as cosid 0.3.0 and earlier declare it, set-returning, for their SQL: a server
/// restarted onto this library serves it until `ALTER EXTENSION cosid UPDATE`.
#[pg_extern(sql = false, stable, strict, parallel_safe)]
fn cosid_decode(
    id: i64,
) -> TableIterator<
    'static,
    (
        name!(ts, TimestampWithTimeZone),
        name!(machine_id, i32),
        name!(sequence, i32),
    ),
> {
    TableIterator::once(decoded_parts(&layout_or_raise(), id))
}

/// The parts of `id` in `layout`: its timestamp, machine id and sequence.
fn decoded_parts(layout: &Layout, id: i64) -> (TimestampWithTimeZone, i32, i32) {
    let parts = decompose_or_raise(layout, id);
    let ts = timestamptz(layout.ticks_to_unix_ms(parts.ticks)).or_raise();
    (ts, parts.machine_id as i32, parts.sequence as i32)
}

/// The parts of `id` in `layout` as a value of the calling function's result type,
/// `cosid.decoded`.
fn decoded(
    layout: &Layout,
    id: i64,
    fcinfo: pg_sys::FunctionCallInfo,
) -> PgHeapTuple<'static, AllocatedByRust> {
    let (ts, machine_id, sequence) = decoded_parts(layout, id);
    let tupdesc = decoded_tupdesc(fcinfo);
    let datums = [
        ts.into_datum(),
        machine_id.into_datum(),
        sequence.into_datum(),
    ];
    // SAFETY: decoded_tupdesc checked that the type has exactly these three attributes, of
    // types timestamptz, integer and integer, which is what the datums are.
    match unsafe { PgHeapTuple::from_datums(tupdesc, datums) } {
        Ok(tuple) => tuple,
        Err(why) => decoded_type_error(format!("{why}")).raise(),
    }
}

/// The descriptor of the calling function's result type, read from the catalog (the function's
/// own declaration, not a name through search_path), once it is checked to be what
/// `cosid.decoded` is: (timestamptz, integer, integer). Somebody could have altered the type.
fn decoded_tupdesc(fcinfo: pg_sys::FunctionCallInfo) -> PgTupleDesc<'static> {
    let mut tupdesc: pg_sys::TupleDesc = std::ptr::null_mut();
    // SAFETY: PostgreSQL passes a valid fcinfo for this call. For a function declared to return
    // a named composite type, get_call_result_type stores a copy of its descriptor, made in the
    // current memory context, which we own.
    let class = unsafe { pg_sys::get_call_result_type(fcinfo, std::ptr::null_mut(), &mut tupdesc) };
    if class != pg_sys::TypeFuncClass::TYPEFUNC_COMPOSITE || tupdesc.is_null() {
        decoded_type_error("the function does not return a composite type".to_string()).raise();
    }
    // SAFETY: tupdesc is the copy made above, ours alone; PgTupleDesc frees it when dropped.
    let tupdesc = unsafe { PgTupleDesc::from_pg_is_copy(tupdesc) };
    let expected = [pg_sys::TIMESTAMPTZOID, pg_sys::INT4OID, pg_sys::INT4OID];
    let types: Vec<pg_sys::Oid> = tupdesc
        .iter()
        .map(|att| {
            if att.attisdropped {
                pg_sys::InvalidOid
            } else {
                att.atttypid
            }
        })
        .collect();
    if types != expected {
        decoded_type_error("its attributes are not (timestamptz, integer, integer)".to_string())
            .raise();
    }
    tupdesc
}

fn decoded_type_error(why: String) -> CosidError {
    CosidError::new(
        PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH,
        "cosid_decode's result type is not cosid.decoded as cosid defines it",
    )
    .detail(format!(
        "The result type of cosid_decode was changed: {why}."
    ))
    .hint("Restore type cosid.decoded to (ts timestamptz, machine_id integer, sequence integer).")
}

#[pg_extern(stable, strict, parallel_safe)]
fn cosid_timestamp(id: i64) -> TimestampWithTimeZone {
    let layout = layout_or_raise();
    let parts = decompose_or_raise(&layout, id);
    timestamptz(layout.ticks_to_unix_ms(parts.ticks)).or_raise()
}

#[pg_extern(stable, strict, parallel_safe)]
fn cosid_from_timestamp(ts: TimestampWithTimeZone) -> i64 {
    from_timestamp(&layout_or_raise(), ts)
}

fn from_timestamp(layout: &Layout, ts: TimestampWithTimeZone) -> i64 {
    let unix_ms = unix_ms(ts).or_raise();
    layout
        .smallest_id_at(unix_ms)
        .map_err(|why| time_range_error(layout, why, "timestamp"))
        .or_raise()
}

#[pg_extern(stable, strict, parallel_safe)]
fn cosid_friendly(id: i64) -> String {
    friendly(&layout_or_raise(), id)
}

fn friendly(layout: &Layout, id: i64) -> String {
    let parts = decompose_or_raise(layout, id);
    match layout.to_friendly(id) {
        Some(friendly) => friendly,
        None => CosidError::timestamp_out_of_range(format!("cosid id {id} has no friendly form"))
            .detail(format!(
                "Its timestamp, {}, is after the year 9999, which the friendly form cannot write.",
                layout::format_unix_ms(layout.ticks_to_unix_ms(parts.ticks))
            ))
            .raise(),
    }
}

#[pg_extern(stable, strict, parallel_safe)]
fn cosid_from_friendly(friendly: TextArg) -> i64 {
    from_friendly(&layout_or_raise(), &friendly)
}

fn from_friendly(layout: &Layout, friendly: &TextArg) -> i64 {
    layout
        .from_friendly(friendly.as_str())
        .map_err(|why| parse_error(layout, friendly, why))
        .or_raise()
}

#[pg_extern(immutable, strict, parallel_safe)]
fn cosid_to_radix62(id: i64) -> String {
    layout::to_radix62(id)
        .ok_or_else(|| negative_id(id))
        .or_raise()
}

#[pg_extern(immutable, strict, parallel_safe)]
fn cosid_from_radix62(radix62: TextArg) -> i64 {
    layout::from_radix62(radix62.as_str())
        .map_err(|why| radix62_error(&radix62, why))
        .or_raise()
}

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
type StatusRow = (
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
struct StatusExtra {
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
fn status_rows() -> Vec<(String, StatusRow, StatusExtra)> {
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
            let lease = &slot.lease;
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
                leased.then(|| slot.instance_id().to_string()),
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

extension_sql_file!("../../sql/lease_store.sql", name = "lease_store");

// The lease rows are dumped with the database (pg_dump, pg_restore): a machine id without a row
// counts as never used, so a restored database must keep them.
extension_sql!(
    r#"
SELECT pg_catalog.pg_extension_config_dump('cosid.machine_lease', '');
"#,
    name = "lease_rows_dumped",
    requires = ["lease_store"]
);

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

/// Says, once, where the leases are, when the server's machine id is leased and they are not in
/// this database: here `cosid.leases` shows none of them while `cosid.status` says UP. The
/// utility hook calls this after `CREATE EXTENSION cosid` succeeded, under the session's own
/// `client_min_messages` (the extension's script runs with it at `warning` at least, which would
/// hide a NOTICE, or show one to a session that asked for warnings only if it were lowered).
pub(crate) fn say_where_the_leases_live() {
    let Some(settings) = settings::server() else {
        return;
    };
    let MachineSource::Leased(lease) = &settings.machine else {
        return;
    };
    let notice = if lease
        .lease_store
        .as_deref()
        .is_some_and(|store| !store.is_empty())
    {
        CosidError::new(
            PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION,
            "cosid leases its machine ids from the shared lease store of cosid.lease_store",
        )
        .detail("The leases of this server are in cosid.leases of the store's database; cosid.leases in this database shows none of them.")
        .hint("See the leases with SELECT * FROM cosid.leases in the store's database, and this server's generators with SELECT * FROM cosid.status.")
    } else {
        // SAFETY: get_database_name reads the catalog inside the transaction of CREATE
        // EXTENSION, for this backend's own database, which exists while it is connected; the
        // name it returns is a NUL-terminated palloc'd string.
        let here = unsafe {
            let name = pg_sys::get_database_name(pg_sys::MyDatabaseId);
            if name.is_null() {
                return;
            }
            std::ffi::CStr::from_ptr(name)
                .to_string_lossy()
                .into_owned()
        };
        if here == settings.database {
            return;
        }
        let database = &settings.database;
        CosidError::new(
            PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION,
            format!("cosid leases its machine ids in database \"{database}\" (cosid.database), not in this one"),
        )
        .detail("cosid.leases in this database shows no lease; cosid.status shows the generators of the whole server in every database.")
        .hint(format!("See the leases with SELECT * FROM cosid.leases in database \"{database}\"."))
    };
    notice.log(PgLogLevel::NOTICE);
}

/// After `CREATE SUBSCRIPTION` or `ALTER SUBSCRIPTION ... ENABLE`: a WARNING when this server
/// leases its machine ids from its own lease table. Another server (the publisher, say) then
/// holds machine ids of the same namespace independently, and the ids it issued can equal this
/// server's: rows replicated into a table this server also fills collide, and the apply worker
/// stops on the duplicate key.
pub(crate) fn warn_of_uncoordinated_machine_ids() {
    let Some(settings) = settings::server() else {
        return;
    };
    let MachineSource::Leased(lease) = &settings.machine else {
        return;
    };
    if lease
        .lease_store
        .as_deref()
        .is_some_and(|store| !store.is_empty())
    {
        return;
    }
    CosidError::new(
        PgSqlErrorCode::ERRCODE_WARNING,
        "cosid's machine ids on this server are coordinated with no other server",
    )
    .detail(format!(
        "This server leases its machine ids from its own lease table (database \"{}\"; cosid.lease_store is not set), so a server this subscription replicates from can hold the same machine ids and issue the same ids: rows it sends into a table that this server also fills with cosid_next() can collide, and the apply worker stops on the duplicate key.",
        settings.database
    ))
    .hint("Let every server that writes the same tables lease from one shared store (cosid.lease_store, same cosid.namespace), or give each a distinct fixed machine id (cosid.distributor = 'manual', cosid.machine_id).")
    .log(PgLogLevel::WARNING);
}

fn interval_ms(ms: u64) -> Interval {
    Interval::from_micros(ms.min(i64::MAX as u64 / 1_000) as i64 * 1_000)
}

/// The layout from the settings, read once per process.
fn layout_or_raise() -> Layout {
    static LAYOUT: OnceLock<Option<Layout>> = OnceLock::new();
    match LAYOUT.get_or_init(|| crate::settings::layout_setting().ok()) {
        Some(layout) => *layout,
        None => match crate::settings::layout_setting() {
            Ok(layout) => layout,
            Err(why) => why.raise(),
        },
    }
}

fn decompose_or_raise(layout: &Layout, id: i64) -> IdParts {
    match layout.decompose(id) {
        Some(parts) => parts,
        None if id < 0 => negative_id(id).raise(),
        None => CosidError::out_of_range(format!("cosid id {id} is out of range"))
            .detail(format!(
                "Its timestamp needs more than the {} bits of cosid.timestamp_bits.",
                layout.timestamp_bits()
            ))
            .raise(),
    }
}

fn negative_id(id: i64) -> CosidError {
    CosidError::out_of_range(format!("cosid id {id} is out of range"))
        .detail("A cosid id is a non-negative bigint.")
}

fn timestamptz(unix_ms: i64) -> Result<TimestampWithTimeZone, CosidError> {
    unix_ms
        .checked_sub(POSTGRES_EPOCH_UNIX_MS)
        .and_then(|ms| ms.checked_mul(1000))
        .and_then(|micros| TimestampWithTimeZone::try_from(micros).ok())
        .ok_or_else(|| {
            CosidError::timestamp_out_of_range("timestamp out of range").detail(format!(
                "{} is outside the range of PostgreSQL's timestamptz.",
                layout::format_unix_ms(unix_ms)
            ))
        })
}

fn unix_ms(ts: TimestampWithTimeZone) -> Result<i64, CosidError> {
    if !ts.is_finite() {
        return Err(CosidError::timestamp_out_of_range(
            "cannot convert an infinite timestamp to a cosid id",
        )
        .detail("Ids only exist for finite timestamps within the layout's range."));
    }
    let micros: i64 = ts.into();
    Ok(micros.div_euclid(1000) + POSTGRES_EPOCH_UNIX_MS)
}

fn time_range_error(layout: &Layout, why: TimeRangeError, what: &str) -> CosidError {
    let side = match why {
        TimeRangeError::BeforeEpoch => "before the epoch",
        TimeRangeError::AfterMaximum => "after the last instant",
    };
    CosidError::timestamp_out_of_range(format!("{what} is {side} of the cosid layout")).detail(
        format!(
            "Ids of this layout cover {} to {}.",
            layout::format_unix_ms(layout.epoch_ms()),
            layout::format_unix_ms(layout.max_unix_ms())
        ),
    )
}

fn parse_error(layout: &Layout, text: &TextArg, why: ParseError) -> CosidError {
    let quoted = text.quoted();
    let friendly_form = match layout.time_unit() {
        layout::TimeUnit::Millisecond => {
            "A friendly id has the form yyyyMMddHHmmssSSS-machine-sequence in UTC, such as \
             \"20220320053617924-5-0\"."
        }
        layout::TimeUnit::Second => {
            "A friendly id has the form yyyyMMddHHmmss-machine-sequence in UTC, such as \
             \"20220320053617-5-0\"."
        }
    };
    match why {
        ParseError::Shape | ParseError::Timestamp => {
            CosidError::invalid_argument(format!("invalid cosid friendly id: {quoted}"))
                .detail(friendly_form)
        }
        ParseError::Number(part, width) => CosidError::invalid_argument(format!(
            "invalid cosid friendly id: {quoted}"
        ))
        .detail(format!(
            "Its {part} must be a decimal number without leading zeros, or padded with \
                     zeros to {width} digits. {friendly_form}"
        )),
        ParseError::OutOfRange(part, max) => {
            CosidError::out_of_range(format!("cosid friendly id {quoted} is out of range"))
                .detail(format!("Its {part} must be from 0 to {max}."))
        }
        ParseError::TimeRange(range) => time_range_error(layout, range, "friendly id timestamp"),
        ParseError::Radix62Digits | ParseError::Radix62Overflow => radix62_error(text, why),
    }
}

fn radix62_error(text: &TextArg, why: ParseError) -> CosidError {
    let quoted = text.quoted();
    match why {
        ParseError::Radix62Overflow => {
            CosidError::out_of_range(format!("cosid Radix62 id {quoted} is out of range"))
                .detail("It is larger than the largest bigint, \"AzL8n0Y58m7\".")
        }
        _ => CosidError::invalid_argument(format!("invalid cosid Radix62 id: {quoted}")).detail(
            "A Radix62 id has 1 to 11 characters from 0-9, A-Z and a-z, such as \
                 \"0LrHucXALbs\".",
        ),
    }
}

fn known_time(unix_ms: i64) -> Option<TimestampWithTimeZone> {
    (unix_ms != UNKNOWN_TIME)
        .then(|| timestamptz(unix_ms).ok())
        .flatten()
}

/// Why the server has no machine id, when a store-less distributor gave none.
fn no_machine_id() -> Option<&'static cosid_core::distributor::NoMachineId> {
    match settings::server().map(|settings| &settings.machine) {
        Some(MachineSource::Missing(why)) => Some(why),
        _ => None,
    }
}

fn recovery_in_progress() -> bool {
    // SAFETY: RecoveryInProgress only reads shared state.
    unsafe { pg_sys::RecoveryInProgress() }
}

/// The lease worker's last error as `role` may see it: its text for a superuser; for any other
/// role only the kind of problem, since the text of a store's error can name its host, port,
/// user and database. Empty when there is none.
fn lease_error_for(slot: &shmem::GeneratorSlot, superuser: bool) -> String {
    let text = slot.lease.last_error.load();
    error_shown(&text, slot.lease.problem(), superuser)
}

fn error_shown(text: &str, problem: LeaseProblem, superuser: bool) -> String {
    if superuser || text.is_empty() {
        text.to_string()
    } else {
        problem.public_summary().to_string()
    }
}

fn is_superuser() -> bool {
    // SAFETY: superuser() only reads the current user's role, which every backend has.
    unsafe { pg_sys::superuser() }
}

/// The last renewal of a snapshot, written out; `None` before the first.
fn renewed_text(snapshot: &LeaseSnapshot) -> Option<String> {
    let renewed = snapshot.last_renewed_at_ms;
    (renewed != UNKNOWN_TIME).then(|| layout::format_unix_ms(renewed))
}

/// The lease's state in sentences, for the DETAIL of a refusal, which any caller of
/// `cosid_next()` reads.
fn lease_situation(slot: &shmem::GeneratorSlot) -> String {
    let snapshot = slot.lease.snapshot();
    let last_error = error_shown(&snapshot.last_error, snapshot.problem, is_superuser());
    cosid_core::lease::situation(
        snapshot.state,
        renewed_text(&snapshot).as_deref(),
        &last_error,
    )
}

/// The refusal of a closed generator. Everything it says of the lease comes from one snapshot:
/// the worker may open the generator, or lose it, while it is composed.
fn closed_error(slot: &shmem::GeneratorSlot) -> CosidError {
    let namespace = slot.namespace();
    let message = format!("cosid has no machine id in namespace \"{namespace}\"");
    if let Some(why) = no_machine_id() {
        return CosidError::prerequisite(message)
            .detail(why.detail())
            .hint(why.hint());
    }
    let snapshot = slot.lease.snapshot();
    if snapshot.problem == LeaseProblem::StateFile {
        return state_file_error(slot, &snapshot.last_error);
    }
    let superuser = is_superuser();
    let last_error = error_shown(&snapshot.last_error, snapshot.problem, superuser);
    if slot.distributor() != cosid_core::distributor::DistributorKind::Lease {
        let detail = if last_error.is_empty() {
            "The generator is stopped.".to_string()
        } else {
            format!(
                "The generator is stopped: {}.",
                last_error.trim_end_matches('.')
            )
        };
        return CosidError::prerequisite(message)
            .detail(detail)
            .hint("A superuser sees the cause in the last_error column of cosid.status.");
    }
    let local_store = matches!(
        settings::server().map(|settings| &settings.machine),
        Some(MachineSource::Leased(lease)) if lease.lease_store.is_none()
    );
    // A shared store that is read-only is the store's problem, not this server's: the general
    // answer below, whose DETAIL says so.
    if local_store && (snapshot.problem == LeaseProblem::Standby || recovery_in_progress()) {
        return CosidError::new(
            PgSqlErrorCode::ERRCODE_READ_ONLY_SQL_TRANSACTION,
            "cannot generate cosid ids on a hot standby",
        )
        .detail(format!(
            "Machine ids of namespace \"{namespace}\" are leased from a table in this server's own database, which is read-only during recovery."
        ))
        .hint("Generate ids on the primary. A standby leases a machine id when it is promoted.");
    }
    if snapshot.problem == LeaseProblem::Exhausted {
        let bits = slot.config().layout.machine_bits();
        let named = slot.name() != shmem::DEFAULT_NAME;
        let (bits_setting, raise) = if named {
            (
                format!("generator \"{}\"", slot.name()),
                "Create the generator under a new namespace with more machine_bits, or stop a server of the namespace",
            )
        } else {
            (
                "cosid.machine_bits".to_string(),
                "Stop a server of the namespace, or move every server to a new namespace (cosid.namespace) with more cosid.machine_bits: a namespace keeps its layout",
            )
        };
        return CosidError::new(
            PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
            format!("no machine id left in namespace \"{namespace}\""),
        )
        .detail(format!(
            "All {} machine ids of {bits} machine bits ({bits_setting}) are held by other servers of the namespace.",
            1u64 << bits
        ))
        .hint(format!("{raise}: see cosid.leases. Do not delete rows of cosid.machine_lease: their watermarks keep ids from being issued twice."));
    }
    let refusal = cosid_core::lease::no_lease_refusal(
        namespace,
        snapshot.state,
        snapshot.problem,
        renewed_text(&snapshot).as_deref(),
        &last_error,
    );
    let error = match refusal.kind {
        RefusalKind::Prerequisite => CosidError::prerequisite(refusal.message),
        RefusalKind::Unavailable => CosidError::unavailable(refusal.message),
    };
    error.detail(refusal.detail).hint(refusal.hint)
}

/// The state file of the slot's namespace.
fn state_file_of(slot: &shmem::GeneratorSlot) -> String {
    let named = slot.name() != shmem::DEFAULT_NAME;
    crate::local_state::file_for(named.then(|| slot.namespace()))
}

/// The local state file could not be read exactly when the generator was to be opened (fixed
/// machine id) or a machine id claimed (stable instance): the floor it holds is unknown.
/// `error` is the text the lease status holds (the snapshot's).
fn state_file_error(slot: &shmem::GeneratorSlot, error: &str) -> CosidError {
    let leased = slot.distributor() == cosid_core::distributor::DistributorKind::Lease;
    let then = if leased {
        "delete the file: the background worker then claims a machine id within a second"
    } else {
        "delete the file and restart the server"
    };
    // The file's path and the system's error name the data directory, which only superusers and
    // members of pg_read_all_settings may know: any other role is told only what happened.
    // SAFETY: superuser() only reads the current user's role, which every backend has.
    let (message, why) = if unsafe { pg_sys::superuser() } {
        let message = format!(
            "cosid cannot use its state file \"{}\"",
            crate::local_state::path(&state_file_of(slot))
        );
        (message, error.to_string())
    } else {
        let why = "the state file cannot be used; its path and error are shown to superusers only";
        (
            "cosid cannot use its state file".to_string(),
            why.to_string(),
        )
    };
    let mut why_sentence = why.clone();
    if let Some(first) = why.chars().next() {
        why_sentence.replace_range(..first.len_utf8(), &first.to_uppercase().to_string());
    }
    CosidError::prerequisite(message)
        .detail(format!(
            "{why_sentence}. The file holds the floor that keeps ids issued before a restart or a \
         crash from being issued again, so namespace \"{}\" generates no id without it.",
            slot.namespace()
        ))
        .hint(
            if crate::local_state::missing_after_upgrade(&state_file_of(slot)) {
                let then = if leased {
                    ": the background worker then claims a machine id within a second"
                } else {
                    ", and restart the server"
                };
                format!(
                "Copy cosid.state and cosid.state.* from the data directory pg_upgrade upgraded \
             from into this one{then}; then delete {marker}. If that directory is lost, delete \
             {marker} once you are sure this server's clock is past the timestamp of every id \
             the old server issued.",
                marker = crate::local_state::UPGRADE_MARKER
            )
            } else {
                format!(
                "Restore the file from a backup of the data directory. Or, once you are sure this \
             server's clock is past the timestamp of every id it issued, {then}."
            )
            },
        )
}

/// The refusal of a default generator whose history forbids its definition, or whose ids must
/// still wait to be above those of its previous definition (`crate::history`).
fn history_error(slot: &shmem::GeneratorSlot) -> Option<CosidError> {
    if slot.name() != shmem::DEFAULT_NAME {
        return None;
    }
    const SETTINGS: &str = "cosid.namespace, cosid.epoch, cosid.time_unit, cosid.timestamp_bits, \
                            cosid.machine_bits and cosid.sequence_bits";
    if slot.lease.problem() == LeaseProblem::History {
        // SAFETY: superuser() only reads the current user's role, which every backend has.
        let why = lease_error_for(slot, unsafe { pg_sys::superuser() });
        let settings = settings::server()?;
        let previous = crate::history::read().ok().flatten();
        let verdict = cosid_core::history::verdict(
            previous.as_ref(),
            &settings.namespace,
            &settings.config.layout,
        );
        let hint = match verdict {
            cosid_core::history::Verdict::LastIdUnknown { .. } => format!(
                "Restart the server with the settings it had before ({SETTINGS}), and stop it \
                 cleanly (pg_ctl stop -m fast): the last id is then recorded, and at the next \
                 start the new settings issue ids above it. For a new layout in new columns, \
                 create a named generator instead (cosid_create_generator)."
            ),
            _ => format!(
                "Set {SETTINGS} back to what the history records and restart. For a new layout \
                 in new columns, create a named generator instead (cosid_create_generator)."
            ),
        };
        let mut detail = why;
        if let Some(first) = detail.chars().next() {
            detail.replace_range(..first.len_utf8(), &first.to_uppercase().to_string());
        }
        return Some(
            CosidError::prerequisite("cosid_next() refuses: the default generator's definition changed")
                .detail(format!(
                    "{}. Ids of the new definition could repeat those issued before, so none is issued.",
                    detail.trim_end_matches('.')
                ))
                .hint(hint),
        );
    }
    let floor_ms = crate::history::floor_ahead_ms(slot)?;
    Some(
        CosidError::unavailable(format!(
            "the default generator issues no id before {}",
            layout::format_unix_ms(floor_ms)
        ))
        .detail(format!(
            "The default generator's namespace or layout changed at the last start (now \
             namespace \"{}\"): every id it issues is above every id issued under the previous \
             definition, and the first such id is dated after {}.",
            slot.namespace(),
            layout::format_unix_ms(floor_ms)
        ))
        .hint(format!(
            "Retry after that time, or set {SETTINGS} back to the previous definition (recorded \
             in {} in the data directory) and restart.",
            crate::history::HISTORY_FILE
        )),
    )
}

fn generate_error(slot: &shmem::GeneratorSlot, why: GenerateError) -> CosidError {
    if let Some(refusal) = history_error(slot) {
        return refusal;
    }
    match why {
        GenerateError::Closed => closed_error(slot),
        GenerateError::ClockBackwards {
            last_unix_ms,
            now_unix_ms,
            broken_threshold_ms,
        } => CosidError::unavailable(format!(
            "clock moved backwards by {} ms",
            last_unix_ms - now_unix_ms
        ))
        .detail(format!(
            "The last id of namespace \"{}\" has timestamp {}, and the clock now reads {}, more \
             than cosid.clock_backwards_broken_threshold ({broken_threshold_ms} ms) behind.",
            slot.namespace(),
            layout::format_unix_ms(last_unix_ms),
            layout::format_unix_ms(now_unix_ms)
        ))
        .hint(
            "Retry in a moment: ids are issued again once the clock passes the last issued \
             timestamp. If this lasts, check the server's time synchronisation.",
        ),
        GenerateError::ClockStalled { waited_ms } => {
            CosidError::unavailable("the clock did not advance").detail(format!(
                "cosid waited {waited_ms} ms for the clock to reach the next tick of namespace \
                 \"{}\".",
                slot.namespace()
            ))
            .hint("Retry at once. If this lasts, check the server's clock.")
        }
        GenerateError::TimeRange(range) => {
            time_range_error(&slot.config().layout, range, "the current time")
        }
        GenerateError::DeadlinePassed => {
            let of_machine_id = slot
                .lease
                .held()
                .map(|(machine_id, _)| format!(" of machine id {machine_id}"))
                .unwrap_or_default();
            CosidError::unavailable(format!(
                "cosid lease{of_machine_id} in namespace \"{}\" was not renewed in time",
                slot.namespace()
            ))
            .detail(format!(
                "{} Without a renewal, generation stops cosid.safe_guard_duration minus its margin after the last successful one was sent.",
                lease_situation(slot)
            ))
            .hint("Retry in a moment: ids are generated again as soon as a renewal succeeds. If this lasts, check the lease table's database and the cosid background worker (cosid.status).")
        }
        GenerateError::BoundReached { bound_unix_ms } => {
            CosidError::unavailable("cosid reached the watermark of its lease").detail(format!(
                "No id of namespace \"{}\" may have a timestamp at or after {} until the lease is \
             renewed.",
                slot.namespace(),
                layout::format_unix_ms(bound_unix_ms)
            ))
            .hint("Retry in a moment: the background worker renews the lease and moves the watermark ahead. If this lasts, see cosid.status.")
        }
    }
}

// Switching a sequence-fed key column to cosid (the migration guide's first step).
extension_sql_file!("../../sql/convert_column.sql", name = "convert_column");
