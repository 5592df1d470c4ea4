//! The id functions of the default generator: `cosid_next()`, and the decode and format
//! functions of the server's layout (`cosid_decode`, `cosid_timestamp`, `cosid_from_timestamp`,
//! the friendly and Radix62 forms). Their named forms are in `named_forms.rs`.

use super::convert::{
    decompose_or_raise, layout_or_raise, negative_id, parse_error, radix62_error, time_range_error,
    timestamptz, unix_ms,
};
use super::refusals::generate_error;
use super::text_arg::TextArg;
use crate::clock::ServerClock;
use crate::error::{CosidError, OrRaise};
use crate::shmem;
use cosid_core::layout::{self, Layout};
use pgrx::prelude::*;
use pgrx::{composite_type, IntoDatum, PgTupleDesc};

#[pg_extern(volatile, parallel_safe)]
pub(super) fn cosid_next() -> i64 {
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
pub(super) fn cosid_decode_v4(
    id: i64,
    fcinfo: pg_sys::FunctionCallInfo,
) -> composite_type!('static, "cosid.decoded") {
    decoded(&layout_or_raise(), id, fcinfo)
}

/// `cosid_decode` as cosid 0.3.0 and earlier declare it, set-returning, for their SQL: a server
/// restarted onto this library serves it until `ALTER EXTENSION cosid UPDATE`.
#[pg_extern(sql = false, stable, strict, parallel_safe)]
pub(super) fn cosid_decode(
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
pub(super) fn decoded_parts(layout: &Layout, id: i64) -> (TimestampWithTimeZone, i32, i32) {
    let parts = decompose_or_raise(layout, id);
    let ts = timestamptz(layout.ticks_to_unix_ms(parts.ticks)).or_raise();
    (ts, parts.machine_id as i32, parts.sequence as i32)
}

/// The parts of `id` in `layout` as a value of the calling function's result type,
/// `cosid.decoded`.
pub(super) fn decoded(
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
pub(super) fn decoded_tupdesc(fcinfo: pg_sys::FunctionCallInfo) -> PgTupleDesc<'static> {
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

pub(super) fn decoded_type_error(why: String) -> CosidError {
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
pub(super) fn cosid_timestamp(id: i64) -> TimestampWithTimeZone {
    let layout = layout_or_raise();
    let parts = decompose_or_raise(&layout, id);
    timestamptz(layout.ticks_to_unix_ms(parts.ticks)).or_raise()
}

#[pg_extern(stable, strict, parallel_safe)]
pub(super) fn cosid_from_timestamp(ts: TimestampWithTimeZone) -> i64 {
    from_timestamp(&layout_or_raise(), ts)
}

pub(super) fn from_timestamp(layout: &Layout, ts: TimestampWithTimeZone) -> i64 {
    let unix_ms = unix_ms(ts).or_raise();
    layout
        .smallest_id_at(unix_ms)
        .map_err(|why| time_range_error(layout, why, "timestamp"))
        .or_raise()
}

#[pg_extern(stable, strict, parallel_safe)]
pub(super) fn cosid_friendly(id: i64) -> String {
    friendly(&layout_or_raise(), id)
}

pub(super) fn friendly(layout: &Layout, id: i64) -> String {
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
pub(super) fn cosid_from_friendly(friendly: TextArg) -> i64 {
    from_friendly(&layout_or_raise(), &friendly)
}

pub(super) fn from_friendly(layout: &Layout, friendly: &TextArg) -> i64 {
    layout
        .from_friendly(friendly.as_str())
        .map_err(|why| parse_error(layout, friendly, why))
        .or_raise()
}

#[pg_extern(immutable, strict, parallel_safe)]
pub(super) fn cosid_to_radix62(id: i64) -> String {
    layout::to_radix62(id)
        .ok_or_else(|| negative_id(id))
        .or_raise()
}

#[pg_extern(immutable, strict, parallel_safe)]
pub(super) fn cosid_from_radix62(radix62: TextArg) -> i64 {
    layout::from_radix62(radix62.as_str())
        .map_err(|why| radix62_error(&radix62, why))
        .or_raise()
}
