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

use crate::clock::ServerClock;
use crate::error::{CosidError, OrRaise};
use crate::generator::GenerateError;
use crate::layout::{self, IdParts, Layout, ParseError, TimeRangeError};
use crate::shmem;
use pgrx::prelude::*;
use std::sync::OnceLock;

/// Milliseconds from the Unix epoch to PostgreSQL's, 2000-01-01.
const POSTGRES_EPOCH_UNIX_MS: i64 = 946_684_800_000;

#[pg_extern(volatile, parallel_safe)]
fn cosid_next() -> i64 {
    let slot = shmem::default_generator().or_raise();
    match slot
        .state
        .next_id(&slot.config, &mut ServerClock::default())
    {
        Ok(id) => id,
        Err(why) => generate_error(slot, why).raise(),
    }
}

#[pg_extern(stable, strict, parallel_safe)]
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
    let layout = layout_or_raise();
    let parts = decompose_or_raise(&layout, id);
    let ts = timestamptz(layout.ticks_to_unix_ms(parts.ticks)).or_raise();
    TableIterator::once((ts, parts.machine_id as i32, parts.sequence as i32))
}

#[pg_extern(stable, strict, parallel_safe)]
fn cosid_timestamp(id: i64) -> TimestampWithTimeZone {
    let layout = layout_or_raise();
    let parts = decompose_or_raise(&layout, id);
    timestamptz(layout.ticks_to_unix_ms(parts.ticks)).or_raise()
}

#[pg_extern(stable, strict, parallel_safe)]
fn cosid_from_timestamp(ts: TimestampWithTimeZone) -> i64 {
    let layout = layout_or_raise();
    let unix_ms = unix_ms(ts).or_raise();
    layout
        .smallest_id_at(unix_ms)
        .map_err(|why| time_range_error(&layout, why, "timestamp"))
        .or_raise()
}

#[pg_extern(stable, strict, parallel_safe)]
fn cosid_friendly(id: i64) -> String {
    let layout = layout_or_raise();
    decompose_or_raise(&layout, id);
    layout
        .to_friendly(id)
        .expect("a decomposable id has a friendly form")
}

#[pg_extern(stable, strict, parallel_safe)]
fn cosid_from_friendly(friendly: &str) -> i64 {
    let layout = layout_or_raise();
    layout
        .from_friendly(friendly)
        .map_err(|why| parse_error(&layout, friendly, why))
        .or_raise()
}

#[pg_extern(immutable, strict, parallel_safe)]
fn cosid_to_radix62(id: i64) -> String {
    layout::to_radix62(id)
        .ok_or_else(|| negative_id(id))
        .or_raise()
}

#[pg_extern(immutable, strict, parallel_safe)]
fn cosid_from_radix62(radix62: &str) -> i64 {
    layout::from_radix62(radix62)
        .map_err(|why| parse_error(&Layout::cosid_default(), radix62, why))
        .or_raise()
}

#[pg_schema]
mod cosid {
    use super::*;

    /// One row per generator: its configuration and state. Read through the view `cosid.status`.
    #[pg_extern(volatile, parallel_safe)]
    #[allow(clippy::type_complexity)]
    fn generator_status() -> TableIterator<
        'static,
        (
            name!(namespace, String),
            name!(distributor, String),
            name!(state, String),
            name!(machine_id, Option<i32>),
            name!(last_error, Option<String>),
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
        let slots = shmem::slots().or_raise();
        let rows: Vec<_> = slots
            .iter()
            .filter(|slot| slot.in_use())
            .map(|slot| {
                let layout = slot.config.layout;
                let stats = slot.state.stats();
                let open = slot.state.is_open();
                let last = layout.decompose(slot.state.last_word());
                let machine_id = last.filter(|_| open).map(|parts| parts.machine_id as i32);
                let last_timestamp = last
                    .filter(|_| open)
                    .and_then(|parts| timestamptz(layout.ticks_to_unix_ms(parts.ticks)).ok());
                let last_error = no_machine_id().filter(|_| !open).map(|why| why.detail());
                (
                    slot.namespace().to_string(),
                    slot.distributor().name().to_string(),
                    if open { "UP" } else { "STOPPED" }.to_string(),
                    machine_id,
                    last_error,
                    timestamptz(layout.epoch_ms()).or_raise(),
                    layout.time_unit().name().to_string(),
                    layout.timestamp_bits() as i32,
                    layout.machine_bits() as i32,
                    layout.sequence_bits() as i32,
                    i64::from(slot.config.sequence_reset_threshold),
                    last_timestamp,
                    stats.ids_issued as i64,
                    stats.next_tick_waits as i64,
                    stats.clock_backwards_waits as i64,
                    stats.clock_backwards_errors as i64,
                )
            })
            .collect();
        TableIterator::new(rows)
    }
}

extension_sql!(
    r#"
CREATE VIEW cosid.status AS SELECT * FROM cosid.generator_status();
COMMENT ON VIEW cosid.status IS 'One row per cosid generator of this server: configuration and state.';
"#,
    name = "status_view",
    requires = [cosid::generator_status]
);

/// The layout from the settings, read once per process.
fn layout_or_raise() -> Layout {
    static LAYOUT: OnceLock<Option<Layout>> = OnceLock::new();
    match LAYOUT.get_or_init(|| crate::guc::layout_setting().ok()) {
        Some(layout) => *layout,
        None => match crate::guc::layout_setting() {
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

fn parse_error(layout: &Layout, text: &str, why: ParseError) -> CosidError {
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
            CosidError::invalid_argument(format!("invalid cosid friendly id: \"{text}\""))
                .detail(friendly_form)
        }
        ParseError::Number(part) => {
            CosidError::invalid_argument(format!("invalid cosid friendly id: \"{text}\"")).detail(
                format!("Its {part} is not a decimal number. {friendly_form}"),
            )
        }
        ParseError::OutOfRange(part, max) => {
            CosidError::out_of_range(format!("cosid friendly id \"{text}\" is out of range"))
                .detail(format!("Its {part} must be from 0 to {max}."))
        }
        ParseError::TimeRange(range) => time_range_error(layout, range, "friendly id timestamp"),
        ParseError::Radix62Digits => {
            CosidError::invalid_argument(format!("invalid cosid Radix62 id: \"{text}\"")).detail(
                "A Radix62 id has 1 to 11 characters from 0-9, A-Z and a-z, such as \
                 \"0LrHucXALbs\".",
            )
        }
        ParseError::Radix62Overflow => {
            CosidError::out_of_range(format!("cosid Radix62 id \"{text}\" is out of range"))
                .detail("It is larger than the largest bigint, \"AzL8n0Y58m7\".")
        }
    }
}

/// Why the server has no machine id, when that is why a generator is closed.
fn no_machine_id() -> Option<&'static crate::distributor::NoMachineId> {
    shmem::server_settings().and_then(|settings| settings.machine.as_ref().err())
}

fn closed_error(slot: &shmem::GeneratorSlot) -> CosidError {
    let error = CosidError::prerequisite(format!(
        "cosid has no machine id in namespace \"{}\"",
        slot.namespace()
    ));
    match no_machine_id() {
        Some(why) => error.detail(why.detail()).hint(why.hint()),
        None => error.detail("The generator is stopped."),
    }
}

fn generate_error(slot: &shmem::GeneratorSlot, why: GenerateError) -> CosidError {
    match why {
        GenerateError::Closed => closed_error(slot),
        GenerateError::ClockBackwards {
            last_unix_ms,
            now_unix_ms,
            broken_threshold_ms,
        } => CosidError::prerequisite(format!(
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
            "Check the server's time synchronisation. Ids are issued again once the clock passes \
             the last issued timestamp.",
        ),
        GenerateError::ClockStalled { waited_ms } => {
            CosidError::prerequisite("the clock did not advance").detail(format!(
                "cosid waited {waited_ms} ms for the clock to reach the next tick of namespace \
                 \"{}\".",
                slot.namespace()
            ))
        }
        GenerateError::TimeRange(range) => {
            time_range_error(&slot.config.layout, range, "the current time")
        }
        GenerateError::BoundReached { bound_unix_ms } => {
            CosidError::prerequisite("cosid reached the watermark of its lease").detail(format!(
                "No id of namespace \"{}\" may have a timestamp at or after {} until the lease is \
             renewed.",
                slot.namespace(),
                layout::format_unix_ms(bound_unix_ms)
            ))
        }
    }
}
