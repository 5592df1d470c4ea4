//! Conversions between SQL values and the pure modules' (timestamps, intervals, the layout of the
//! settings), and the errors of bad arguments to the id functions.

use super::text_arg::TextArg;
use crate::error::CosidError;
use cosid_core::layout::{self, IdParts, Layout, ParseError, TimeRangeError};
use cosid_core::lease::UNKNOWN_TIME;
use pgrx::prelude::*;
use std::sync::OnceLock;

/// Milliseconds from the Unix epoch to PostgreSQL's, 2000-01-01.
pub(super) const POSTGRES_EPOCH_UNIX_MS: i64 = 946_684_800_000;

pub(super) fn interval_ms(ms: u64) -> Interval {
    Interval::from_micros(ms.min(i64::MAX as u64 / 1_000) as i64 * 1_000)
}

/// The default generator's layout: the one the server started with, or, on a server that
/// does not preload cosid, the settings' read once per process.
pub(super) fn layout_or_raise() -> Layout {
    if let Some(settings) = crate::settings::server() {
        return settings.config.layout;
    }
    static LAYOUT: OnceLock<Option<Layout>> = OnceLock::new();
    match LAYOUT.get_or_init(|| crate::settings::layout_setting().ok()) {
        Some(layout) => *layout,
        None => match crate::settings::layout_setting() {
            Ok(layout) => layout,
            Err(why) => why.raise(),
        },
    }
}

pub(super) fn decompose_or_raise(layout: &Layout, id: i64) -> IdParts {
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

pub(super) fn negative_id(id: i64) -> CosidError {
    CosidError::out_of_range(format!("cosid id {id} is out of range"))
        .detail("A cosid id is a non-negative bigint.")
}

pub(super) fn timestamptz(unix_ms: i64) -> Result<TimestampWithTimeZone, CosidError> {
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

pub(super) fn unix_ms(ts: TimestampWithTimeZone) -> Result<i64, CosidError> {
    if !ts.is_finite() {
        return Err(CosidError::timestamp_out_of_range(
            "cannot convert an infinite timestamp to a cosid id",
        )
        .detail("Ids only exist for finite timestamps within the layout's range."));
    }
    let micros: i64 = ts.into();
    Ok(micros.div_euclid(1000) + POSTGRES_EPOCH_UNIX_MS)
}

pub(super) fn time_range_error(layout: &Layout, why: TimeRangeError, what: &str) -> CosidError {
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

pub(super) fn parse_error(layout: &Layout, text: &TextArg, why: ParseError) -> CosidError {
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

pub(super) fn radix62_error(text: &TextArg, why: ParseError) -> CosidError {
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

pub(super) fn known_time(unix_ms: i64) -> Option<TimestampWithTimeZone> {
    (unix_ms != UNKNOWN_TIME)
        .then(|| timestamptz(unix_ms).ok())
        .flatten()
}
