//! The checks of a named generator's arguments, before anything is written, and their errors.

use crate::error::CosidError;
use crate::shmem;
use cosid_core::layout::{self, Layout};
use pgrx::prelude::*;

use crate::shmem::{Phase, DEFAULT_NAME};
use cosid_core::generator::ThresholdTooLarge;
use cosid_core::layout::LayoutError;

pub(super) fn already_exists(name: &str) -> CosidError {
    let error = CosidError::new(
        PgSqlErrorCode::ERRCODE_DUPLICATE_OBJECT,
        format!("cosid generator \"{name}\" already exists"),
    );
    if name == DEFAULT_NAME {
        error.detail("\"default\" names the server's default generator, the one cosid_next() uses.")
    } else {
        error.hint("A generator's definition cannot change: give the new definition a new name and a new namespace, and call it by that name. A name keeps its namespace even after cosid_drop_generator().")
    }
}

pub(super) fn null_argument(argument: &str) -> CosidError {
    CosidError::new(
        PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
        format!("argument \"{argument}\" must not be null"),
    )
    .detail("It names a cosid generator.")
}

pub(super) fn check_name(name: &str) -> Result<(), CosidError> {
    if name == DEFAULT_NAME {
        return Err(already_exists(name));
    }
    let mut chars = name.chars();
    let valid = name.len() <= crate::settings::MAX_GENERATOR_NAME_LEN
        && chars
            .next()
            .is_some_and(|first| first.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if valid {
        return Ok(());
    }
    Err(CosidError::invalid_argument(format!(
        "invalid cosid generator name {}",
        layout::quote_for_message(name, true)
    ))
    .detail(format!(
        "A generator name is 1 to {} letters, digits and underscores (A-Z, a-z, 0-9, _), starting with a letter.",
        crate::settings::MAX_GENERATOR_NAME_LEN
    )))
}

pub(super) fn check_namespace(namespace: &str, default_namespace: &str) -> Result<(), CosidError> {
    let quoted = layout::quote_for_message(namespace, true);
    // SAFETY: reads the encoding of the database this backend is connected to.
    let utf8 = unsafe { pg_sys::GetDatabaseEncoding() } == pg_sys::pg_enc::PG_UTF8 as i32;
    if !utf8 && !namespace.is_ascii() {
        // The worker and the lease store read namespaces as UTF-8, and cosid.status shows
        // them in every database of the server, whatever its encoding.
        return Err(CosidError::invalid_argument(format!(
            "invalid cosid namespace {quoted}"
        ))
        .detail("In a database whose encoding is not UTF8, a namespace is ASCII characters only.")
        .hint("Choose an ASCII namespace, or keep cosid.database in a UTF8 database."));
    }
    if namespace.is_empty()
        || namespace.len() > crate::settings::MAX_NAMESPACE_LEN
        || namespace.chars().any(char::is_control)
    {
        return Err(
            CosidError::invalid_argument(format!("invalid cosid namespace {quoted}")).detail(
                format!(
                    "A namespace is 1 to {} bytes long, without control characters.",
                    crate::settings::MAX_NAMESPACE_LEN
                ),
            ),
        );
    }
    if namespace == default_namespace {
        return Err(CosidError::invalid_argument(format!(
            "namespace {quoted} is the default generator's"
        ))
        .detail("Each generator holds its own machine id in its own namespace; cosid.namespace is the default generator's.")
        .hint("Choose another namespace."));
    }
    let recorded = Spi::connect(crate::history::recorded_in_database);
    let used = recorded.and_then(|recorded| {
        crate::history::DefaultNamespaces::read(default_namespace, recorded).used(namespace)
    });
    match used {
        Ok(false) => Ok(()),
        Ok(true) => Err(CosidError::invalid_argument(format!(
            "namespace {quoted} was the default generator's"
        ))
        .detail("The default generator issued ids in this namespace under an earlier cosid.namespace, as the data directory's cosid.history or the table cosid.default_namespace records; a named generator there could issue them again, whatever its layout or machine id.")
        .hint("Choose another namespace.")),
        Err(why) => Err(CosidError::prerequisite(
            "cosid cannot tell whether the default generator used this namespace",
        )
        .detail(format!("{}.", crate::error::sentence_case(&why)))
        .hint("Make the default generator's history readable (see cosid_next()'s error for what it needs), then create the generator.")),
    }
}

/// A width argument, or the preset's; refused outside `range`, the widths a layout can hold (a
/// machine id is leased, and decoded, as an integer, and so is a sequence).
pub(super) fn width(value: Option<i32>, preset: u32, argument: &str, range: (u32, u32)) -> u32 {
    let Some(value) = value else {
        return preset;
    };
    match u32::try_from(value) {
        Ok(bits) if (range.0..=range.1).contains(&bits) => bits,
        _ => CosidError::invalid_argument(format!(
            "{argument} must be from {} to {}, not {value}",
            range.0, range.1
        ))
        .detail(format!(
            "Timestamp, machine and sequence bits together may use at most {} bits; the machine id and the sequence at most {} each.",
            layout::TOTAL_BITS,
            layout::MAX_MACHINE_BITS
        ))
        .raise(),
    }
}

pub(super) fn threshold_refused(why: ThresholdTooLarge) -> CosidError {
    CosidError::invalid_argument(format!(
        "sequence_reset_threshold must be from 0 to {}, not {}",
        why.max_sequence, why.threshold
    ))
    .detail(format!(
        "A new tick restarts the sequence only once it has reached this value, which the layout's largest sequence, {}, must reach.",
        why.max_sequence
    ))
    .hint(format!(
        "Leave it out for CosId's, half the largest sequence: {}.",
        why.max_sequence >> 1
    ))
}

pub(super) fn preset_names() -> String {
    layout::PRESETS
        .iter()
        .map(|preset| preset.0)
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn layout_error(why: LayoutError) -> CosidError {
    match why {
        LayoutError::TooManyBits {
            timestamp_bits,
            machine_bits,
            sequence_bits,
        } => CosidError::invalid_argument("cosid generator layout does not fit in 63 bits").detail(
            format!(
                "timestamp_bits ({timestamp_bits}) + machine_bits ({machine_bits}) + sequence_bits ({sequence_bits}) = {} exceeds the 63 bits of a non-negative bigint.",
                timestamp_bits + machine_bits + sequence_bits
            ),
        ),
        LayoutError::NoTimestampBits => {
            CosidError::invalid_argument("timestamp_bits must be at least 1")
        }
        LayoutError::NoSequenceBits => {
            CosidError::invalid_argument("sequence_bits must be at least 1")
        }
        // Checked with their ranges before the layout is built.
        LayoutError::MachineBitsTooMany { machine_bits } => CosidError::invalid_argument(
            format!("machine_bits must be from 0 to {}, not {machine_bits}", layout::MAX_MACHINE_BITS),
        ),
        LayoutError::SequenceBitsTooMany { sequence_bits } => CosidError::invalid_argument(
            format!("sequence_bits must be from 1 to {}, not {sequence_bits}", layout::MAX_SEQUENCE_BITS),
        ),
        LayoutError::EpochNotWholeSecond { epoch_ms } => CosidError::invalid_argument(
            "the epoch of a generator by the second must be a whole second",
        )
        .detail(format!("The epoch is {}.", layout::format_unix_ms(epoch_ms))),
        LayoutError::TimeRangeTooLarge => CosidError::invalid_argument(
            "cosid generator layout reaches beyond the year 292 million",
        )
        .detail("Use fewer timestamp_bits."),
    }
}

/// A generator whose layout does not cover the current time could issue no id.
pub(super) fn covers_now(layout: &Layout) -> Result<(), CosidError> {
    let now = crate::host::unix_ms_now();
    if layout.unix_ms_to_ticks(now).is_ok() {
        return Ok(());
    }
    Err(
        CosidError::invalid_argument("cosid generator layout does not cover the current time")
            .detail(format!(
                "Its ids cover {} to {}, and the clock reads {}.",
                layout::format_unix_ms(layout.epoch_ms()),
                layout::format_unix_ms(layout.max_unix_ms()),
                layout::format_unix_ms(now)
            ))
            .hint("Choose an epoch in the past, or more timestamp_bits."),
    )
}

/// Refuses a definition that would find no slot: the named generators' slots are fixed at start.
/// The worker stays the authority; this only says it early and clearly.
pub(super) fn check_room(
    settings: &crate::settings::ServerSettings,
    name: &str,
    namespace: &str,
    layout: &Layout,
    sequence_reset_threshold: Option<u32>,
    defined: usize,
) {
    let Ok(named) = shmem::named_slots(settings) else {
        return;
    };
    let definition = shmem::Definition::named(name, namespace, *layout, sequence_reset_threshold);
    let reusable = named
        .iter()
        .any(|slot| slot.phase() == Phase::Dropped && slot.definition().same_as(&definition));
    let dropped = named
        .iter()
        .filter(|slot| slot.phase() == Phase::Dropped)
        .count();
    if reusable || defined + dropped < settings.max_generators {
        return;
    }
    CosidError::new(
        PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
        format!(
            "no room for another cosid generator: cosid.max_generators is {}",
            settings.max_generators
        ),
    )
    .detail(format!(
        "{defined} generators are defined, and {dropped} dropped ones keep their place until the server restarts (unless created again exactly as they were)."
    ))
    .hint(cosid_core::registry::no_room_hint(
        defined,
        dropped,
        settings.max_generators,
        crate::settings::MAX_NAMED_GENERATORS,
    ))
    .raise()
}
