//! The forms of the user functions that take a generator's name as their last argument:
//! `cosid_next('name')` on the hot path (the slot kept per call site), and the decode and format
//! functions of a named generator's layout. The definitions are in `generators.rs`.

use super::convert::{decompose_or_raise, layout_or_raise, timestamptz};
use super::ids::{
    cosid_from_radix62, cosid_to_radix62, decoded, decoded_parts, friendly, from_friendly,
    from_timestamp,
};
use super::refusals::{generate_error, no_machine_id};
use crate::clock::ServerClock;
use crate::error::{CosidError, OrRaise};
use crate::settings::{self};
use crate::shmem;
use cosid_core::generator::GenerateError;
use cosid_core::layout::Layout;
use pgrx::composite_type;
use pgrx::prelude::*;

use super::generator_checks::null_argument;
use super::generator_rows::created_in_this_transaction;
use super::text_arg::{GeneratorName, TextArg};
use crate::shmem::{GeneratorSlot, Phase, DEFAULT_NAME};

#[pg_extern(name = "cosid_next", volatile, parallel_safe)]
pub(super) fn cosid_next_named(
    generator: Option<GeneratorName>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> i64 {
    let slot = match slot_of_this_call_site(fcinfo) {
        Some(slot) if slot.is_live() => slot,
        _ => {
            let Some(generator) = &generator else {
                null_argument("generator").raise()
            };
            let slot = live_slot(generator);
            remember_for_this_call_site(fcinfo, slot);
            slot
        }
    };
    match slot.state.next_id(slot.config(), &mut ServerClock) {
        Ok(id) => id,
        Err(GenerateError::Closed) if !slot.is_live() => match &generator {
            Some(generator) => unknown_generator(generator).raise(),
            None => null_argument("generator").raise(),
        },
        Err(why) => generate_error(slot, why).raise(),
    }
}

/// The slot this call site found before, if its generator argument is the same on every call.
///
/// `cosid_next('name')` is on the hot path, and in a query the name is nearly always a constant:
/// the slot found on the first call is kept in the call site's `fn_extra` (which PostgreSQL resets
/// for every new execution of the expression), so later calls compare no name. The slot stays
/// right while it is live: a slot that left `Free` keeps its definition, name included, until
/// the server stops. A cached slot that is not live is looked up again by name.
#[inline]
pub(super) fn slot_of_this_call_site(
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<&'static GeneratorSlot> {
    // SAFETY: PostgreSQL passes a valid fcinfo; its flinfo, when set, lives for the call site's
    // execution. fn_extra is ours for this function: it is null or a slot pointer we stored,
    // and slots live in shared memory for the life of the server.
    unsafe {
        let flinfo = (*fcinfo).flinfo;
        if flinfo.is_null() {
            return None;
        }
        (*flinfo)
            .fn_extra
            .cast::<GeneratorSlot>()
            .cast_const()
            .as_ref()
    }
}

/// Keeps `slot` for the later calls of this call site if its generator argument is a constant.
///
/// Only a constant: a parameter is stable within one execution, but PL/pgSQL evaluates a simple
/// expression again and again through the same call site with new values of its variables.
pub(super) fn remember_for_this_call_site(
    fcinfo: pg_sys::FunctionCallInfo,
    slot: &'static GeneratorSlot,
) {
    // SAFETY: as in `slot_of_this_call_site`. fn_expr, when set, is the call's expression node,
    // read only by its tag; a FuncExpr's args is a List of expression nodes.
    unsafe {
        let flinfo = (*fcinfo).flinfo;
        if flinfo.is_null() || (*flinfo).fn_expr.is_null() {
            return;
        }
        let call = (*flinfo).fn_expr;
        if (*call).type_ != pg_sys::NodeTag::T_FuncExpr {
            return;
        }
        let args = (*call.cast::<pg_sys::FuncExpr>()).args;
        let Some(first) = crate::pg_list::pointers::<pg_sys::Node>(args).next() else {
            return;
        };
        if (*first).type_ == pg_sys::NodeTag::T_Const {
            (*flinfo).fn_extra = std::ptr::from_ref(slot).cast_mut().cast();
        }
    }
}

/// The parts of an id of that generator, of type `cosid.decoded`. Its C symbol is new in 0.4.0,
/// as `cosid_decode_v4`'s is.
#[pg_extern(
    name = "cosid_decode",
    stable,
    strict,
    parallel_safe,
    requires = ["decoded_type"]
)]
pub(super) fn cosid_decode_named_v4(
    id: i64,
    generator: GeneratorName,
    fcinfo: pg_sys::FunctionCallInfo,
) -> composite_type!('static, "cosid.decoded") {
    decoded(&generator_layout(&generator), id, fcinfo)
}

/// `cosid_decode(id, generator)` as cosid 0.3.0 declares it, set-returning, for its SQL until
/// `ALTER EXTENSION cosid UPDATE`.
#[pg_extern(sql = false, stable, strict, parallel_safe)]
pub(super) fn cosid_decode_named(
    id: i64,
    generator: GeneratorName,
) -> TableIterator<
    'static,
    (
        name!(ts, TimestampWithTimeZone),
        name!(machine_id, i32),
        name!(sequence, i32),
    ),
> {
    TableIterator::once(decoded_parts(&generator_layout(&generator), id))
}

#[pg_extern(name = "cosid_timestamp", stable, strict, parallel_safe)]
pub(super) fn cosid_timestamp_named(id: i64, generator: GeneratorName) -> TimestampWithTimeZone {
    let layout = generator_layout(&generator);
    let parts = decompose_or_raise(&layout, id);
    timestamptz(layout.ticks_to_unix_ms(parts.ticks)).or_raise()
}

#[pg_extern(name = "cosid_from_timestamp", stable, strict, parallel_safe)]
pub(super) fn cosid_from_timestamp_named(
    ts: TimestampWithTimeZone,
    generator: GeneratorName,
) -> i64 {
    from_timestamp(&generator_layout(&generator), ts)
}

#[pg_extern(name = "cosid_friendly", stable, strict, parallel_safe)]
pub(super) fn cosid_friendly_named(id: i64, generator: GeneratorName) -> String {
    friendly(&generator_layout(&generator), id)
}

#[pg_extern(name = "cosid_from_friendly", stable, strict, parallel_safe)]
pub(super) fn cosid_from_friendly_named(friendly: TextArg, generator: GeneratorName) -> i64 {
    from_friendly(&generator_layout(&generator), &friendly)
}

/// Radix62 is the same for every layout; the generator's is checked to hold the id.
#[pg_extern(name = "cosid_to_radix62", stable, strict, parallel_safe)]
pub(super) fn cosid_to_radix62_named(id: i64, generator: GeneratorName) -> String {
    decompose_or_raise(&generator_layout(&generator), id);
    cosid_to_radix62(id)
}

#[pg_extern(name = "cosid_from_radix62", stable, strict, parallel_safe)]
pub(super) fn cosid_from_radix62_named(radix62: TextArg, generator: GeneratorName) -> i64 {
    let layout = generator_layout(&generator);
    let id = cosid_from_radix62(radix62);
    decompose_or_raise(&layout, id);
    id
}

/// The live generator of that name, or the error that says why there is none.
#[inline]
pub(super) fn live_slot(generator: &GeneratorName) -> &'static GeneratorSlot {
    match shmem::live_generator(generator.bytes()) {
        Ok(Some(slot)) => slot,
        Ok(None) => unknown_generator(generator).raise(),
        Err(why) => why.raise(),
    }
}

/// The layout of that generator; the default one's works without preloading, as the
/// one-argument functions do.
pub(super) fn generator_layout(generator: &GeneratorName) -> Layout {
    if generator.bytes() == DEFAULT_NAME.as_bytes() {
        return layout_or_raise();
    }
    live_slot(generator).config().layout
}

/// The error for a name that is no live generator: one this transaction created is usable once
/// it commits; see [`no_such_generator`] for the others.
pub(super) fn unknown_generator(generator: &GeneratorName) -> CosidError {
    let quoted = generator.quoted();
    // A name this transaction created is ASCII (letters, digits, _), in every server encoding.
    if let Ok(name) = std::str::from_utf8(generator.bytes()) {
        if created_in_this_transaction(name) {
            return CosidError::prerequisite(format!(
                "cosid generator {quoted} was created in this transaction and is usable only after it commits"
            ))
            .detail("The background worker publishes a new generator, and claims its lease, once the transaction that created it has committed.")
            .hint("Create the generator in a transaction of its own (a migration of its own, for a migration tool) and commit it before the statements that use it.");
        }
    }
    no_such_generator(&quoted)
}

/// The error for a name, `quoted` for a message, that no generator has. Until the definitions
/// were first read, the name may be one not loaded yet: that is a moment's wait, not a mistake.
pub(super) fn no_such_generator(quoted: &str) -> CosidError {
    let preloaded = shmem::is_preloaded();
    if preloaded && (!shmem::definitions_loaded() || shmem::creations_pending()) {
        if let Some(why) = no_machine_id() {
            return CosidError::prerequisite(format!(
                "cosid has no machine id for generator {quoted}"
            ))
            .detail(why.detail())
            .hint(why.hint());
        }
        return CosidError::unavailable(format!(
            "cosid generator {quoted} is not known yet"
        ))
        .detail(format!(
            "The background worker has not yet read the generators' definitions (table cosid.generator in cosid.database, \"{}\") since the server started or a generator was created.",
            settings::server().map_or("", |settings| settings.database.as_str())
        ))
        .hint("Try again in a moment. If this lasts, see the server log and cosid.status.");
    }
    let names: Vec<String> = shmem::generators()
        .map(|slots| {
            slots
                .filter(|slot| slot.phase() == Phase::Live)
                .map(|slot| slot.name().to_string())
                .collect()
        })
        .unwrap_or_else(|_| vec![DEFAULT_NAME.to_string()]);
    let error = CosidError::new(
        PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
        format!("cosid generator {quoted} does not exist"),
    );
    match settings::server() {
        // A database restored from another server's dump calls the generators it used there.
        Some(settings) => error
            .detail(format!(
                "Named generators are defined in cosid.database of each server (\"{}\" on this one), not in the databases that use them: a dump of another database does not carry them.",
                settings.database
            ))
            .hint(format!(
                "The generators of this server are: {}. Create one with cosid_create_generator() in database \"{}\"; it is usable everywhere within about a second.",
                names.join(", "),
                settings.database
            )),
        None => error.hint("Only the default generator exists while cosid is not loaded via \"shared_preload_libraries\"."),
    }
}
