//! Instants as text: `cosid.epoch`, read as Unix milliseconds or ISO 8601, and UTC calendar
//! times for the friendly form and for messages, written even beyond chrono's years.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::LazyLock;

use chrono::format::{Item, StrftimeItems};
use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, Timelike};

/// Parses `cosid.epoch`: Unix milliseconds (`1577203200000`), or an ISO 8601 date and time,
/// `YYYY-MM-DD[(T|t| )HH:MM[:SS[.f...]]][Z|z|(+|-)HH[[:]MM]]`, in UTC when no offset is given;
/// blanks around either are dropped, and a fraction is cut to milliseconds.
pub fn parse_epoch(text: &str) -> Result<i64, String> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse::<i64>()
            .map_err(|_| format!("\"{text}\" is too large for Unix milliseconds."));
    }
    parse_iso_instant(text).ok_or_else(|| {
        format!(
            "\"{text}\" is neither Unix milliseconds nor an ISO 8601 instant such as \
             \"2019-12-24T16:00:00Z\"."
        )
    })
}

/// chrono's RFC 3339 parser reads the instant and checks every field. RFC 3339 insists on what
/// `cosid.epoch` lets a user leave out (the time, its seconds, the offset) and on a colon in the
/// offset, so the text is spelt out in full for it first.
fn parse_iso_instant(text: &str) -> Option<i64> {
    let (date, rest) = text.split_at_checked("YYYY-MM-DD".len())?;
    let (time, offset) = match rest.strip_prefix(['T', 't', ' ']) {
        Some(rest) => {
            // The offset starts with none of the time's characters; chrono checks their order.
            let time_len = rest
                .find(|c: char| !(c.is_ascii_digit() || c == ':' || c == '.'))
                .unwrap_or(rest.len());
            rest.split_at(time_len)
        }
        None => ("00:00", rest),
    };
    let missing_seconds = if time.len() == "HH:MM".len() {
        ":00"
    } else {
        ""
    };
    let offset = rfc3339_offset(offset)?;
    let instant =
        DateTime::parse_from_rfc3339(&format!("{date}T{time}{missing_seconds}{offset}")).ok()?;
    // RFC 3339 allows a leap second, which chrono keeps as a second 59 of over 10^9 nanoseconds;
    // `cosid.epoch` never took one.
    if instant.nanosecond() >= 1_000_000_000 {
        return None;
    }
    Some(instant.timestamp_millis())
}

/// An ISO 8601 offset as RFC 3339 wants it: none means UTC, and `+hh` and `+hhmm` gain their
/// minutes or colon; `+hh:mm`, or anything chrono will refuse, passes as it is.
fn rfc3339_offset(offset: &str) -> Option<Cow<'_, str>> {
    if offset.is_empty() {
        return Some("Z".into());
    }
    if matches!(offset, "Z" | "z") {
        return Some(offset.into());
    }
    // Otherwise a sign must come first: after a bare date, ".5" would land where RFC 3339 has a
    // fraction of a second and chrono would read it as one. And chrono's sign may also be
    // U+2212 MINUS SIGN, which `cosid.epoch` never took.
    if !offset.starts_with(['+', '-']) || !offset.is_ascii() {
        return None;
    }
    Some(match offset.len() {
        3 => format!("{offset}:00").into(),
        5 => format!("{}:{}", &offset[..3], &offset[3..]).into(),
        _ => offset.into(),
    })
}

/// A Unix time in milliseconds as PostgreSQL prints a UTC timestamptz, for messages.
pub fn format_unix_ms(unix_ms: i64) -> String {
    static AFTER_YEAR: LazyLock<Vec<Item>> = LazyLock::new(|| strftime("-%m-%d %H:%M:%S%.3f+00"));
    let mut text = String::with_capacity(32);
    UtcTime::from_unix_ms(unix_ms).write(&mut text, &AFTER_YEAR);
    text
}

/// The Unix millisecond of a UTC calendar time, or `None` for a field out of its calendar
/// range (month 13, February 30, hour 24, second 60...). The year is one of the texts' four
/// digits, well within chrono's range.
pub(super) fn utc_unix_ms(
    year: u32,
    [month, day]: [u32; 2],
    [hour, minute, second]: [u32; 3],
    milli: u32,
) -> Option<i64> {
    debug_assert!(year <= 9999 && milli <= 999);
    let time = NaiveDate::from_ymd_opt(year as i32, month, day)?
        .and_hms_milli_opt(hour, minute, second, milli)?;
    Some(time.and_utc().timestamp_millis())
}

/// chrono's items of a format that has no year, parsed once rather than at every formatting.
pub(super) fn strftime(format: &'static str) -> Vec<Item<'static>> {
    StrftimeItems::new(format)
        .parse_to_owned()
        .expect("a valid format")
}

/// The milliseconds of 400 Gregorian years (146,097 days), after which the calendar repeats.
const MS_PER_GREGORIAN_CYCLE: i64 = 146_097 * 86_400_000;

/// A Unix millisecond as a UTC calendar time, for the texts.
///
/// chrono's dates end near the years -262,000 and 262,000, an `i64` of Unix milliseconds near
/// -292 and 292 million, and a layout with many timestamp bits reaches that far. So chrono
/// reads the instant moved by whole 400-year cycles into 1970 .. 2369, which keeps its month,
/// day and time, and the cycles are added back to the year.
pub(super) struct UtcTime {
    pub(super) year: i64,
    /// Month, day and time; its own year is the one in 1970 .. 2369, not `year`.
    rest: NaiveDateTime,
}

impl UtcTime {
    /// Writes the year, at least four digits (`{:04}`, as before chrono: chrono's `%Y` would
    /// write the years before 0 and after 9999 differently) and then the rest of the time in
    /// chrono's `items`.
    pub(super) fn write(&self, text: &mut String, items: &[Item]) {
        write!(text, "{:04}", self.year).expect("a String takes any text");
        self.rest
            .format_with_items(items.iter())
            .write_to(text)
            .expect("a String takes any text");
    }

    pub(super) fn from_unix_ms(unix_ms: i64) -> UtcTime {
        let cycles = unix_ms.div_euclid(MS_PER_GREGORIAN_CYCLE);
        let rest = DateTime::from_timestamp_millis(unix_ms.rem_euclid(MS_PER_GREGORIAN_CYCLE))
            .expect("1970 .. 2369 is within chrono's range")
            .naive_utc();
        UtcTime {
            year: i64::from(rest.year()) + 400 * cycles,
            rest,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Layout, TimeUnit, COSID_EPOCH_MS};

    #[test]
    fn calendar_conversion_matches_known_dates() {
        for (days, date) in [
            (0, (1970, 1, 1)),
            (-1, (1969, 12, 31)),
            (18_254, (2019, 12, 24)),
            (19_417, (2023, 3, 1)),
            (-719_468, (0, 3, 1)),
        ] {
            let unix_ms = days * 86_400_000;
            let time = UtcTime::from_unix_ms(unix_ms);
            assert_eq!((time.year, time.rest.month(), time.rest.day()), date);
            assert_eq!(
                utc_unix_ms(date.0 as u32, [date.1, date.2], [0, 0, 0], 0),
                Some(unix_ms)
            );
        }
    }

    #[test]
    fn epochs_parse_in_every_documented_form() {
        for text in [
            "1577203200000",
            "2019-12-24T16:00:00Z",
            "2019-12-24T16:00:00.000Z",
            "2019-12-24 16:00:00",
            "2019-12-24T16:00Z",
            "2019-12-25T00:00:00+08:00",
            "2019-12-25T00:00:00+0800",
            "2019-12-24T12:00:00-04",
        ] {
            assert_eq!(parse_epoch(text), Ok(COSID_EPOCH_MS), "{text}");
        }
        assert_eq!(parse_epoch("1970-01-01"), Ok(0));
        assert_eq!(
            parse_epoch("2019-12-24T16:00:00.5Z"),
            Ok(COSID_EPOCH_MS + 500)
        );
        assert_eq!(
            parse_epoch("2019-12-24T16:00:00.1239Z"),
            Ok(COSID_EPOCH_MS + 123)
        );
        for bad in [
            "",
            "yesterday",
            "2019-13-24",
            "2019-12-24T25:00:00Z",
            "2019-12-24T16:00:00+",
            "2019-12-24T16:00:00.Z",
            "2019/12/24",
            "99999999999999999999",
            "2019-12-24T16:00:00+aé1",
        ] {
            let message = parse_epoch(bad).unwrap_err();
            assert!(message.contains(bad.trim()), "{message}");
        }
    }

    /// Every form `cosid.epoch` reads, with the Unix millisecond it stands for (worked out with
    /// Python's `datetime`), so that a change of parser cannot widen or shift them unseen.
    #[test]
    fn epochs_are_read_in_exactly_these_forms() {
        const DAY_START_MS: i64 = COSID_EPOCH_MS - 16 * 3_600_000;
        for (text, unix_ms) in [
            // Unix milliseconds, digits only.
            ("0", 0),
            ("9223372036854775807", i64::MAX),
            // ISO 8601's basic form of a date is all digits: it is read as Unix milliseconds.
            ("20191224", 20_191_224),
            // A date alone is its midnight, in UTC unless an offset follows it directly.
            ("2019-12-24", DAY_START_MS),
            ("2019-12-24Z", DAY_START_MS),
            ("2019-12-24z", DAY_START_MS),
            ("2019-12-25+08", COSID_EPOCH_MS),
            ("2019-12-24-04:00", DAY_START_MS + 4 * 3_600_000),
            // 'T', 't' or one space before the time; seconds optional.
            ("2019-12-24T16:00", COSID_EPOCH_MS),
            ("2019-12-24t16:00:00z", COSID_EPOCH_MS),
            ("2019-12-24 16:00:00Z", COSID_EPOCH_MS),
            ("2019-12-24T16:00-00", COSID_EPOCH_MS),
            // Fractions of any length after the seconds, cut (not rounded) to milliseconds.
            ("2019-12-24T16:00:00.5", COSID_EPOCH_MS + 500),
            ("2019-12-24T16:00:00.12Z", COSID_EPOCH_MS + 120),
            ("2019-12-24T16:00:00.123Z", COSID_EPOCH_MS + 123),
            ("2019-12-24T16:00:00.1239Z", COSID_EPOCH_MS + 123),
            ("2019-12-24T16:00:00.999999999999+00", COSID_EPOCH_MS + 999),
            (
                "2019-12-24T16:00:00.0000000000000000000001Z",
                COSID_EPOCH_MS,
            ),
            // Offsets as +hh, +hhmm or +hh:mm, up to a minute short of a day either way.
            ("2019-12-25T00:00:00+08", COSID_EPOCH_MS),
            ("2019-12-25T00:00:00+0800", COSID_EPOCH_MS),
            ("2019-12-25T00:00:00+08:00", COSID_EPOCH_MS),
            ("2019-12-24T12:00:00-0400", COSID_EPOCH_MS),
            ("2019-12-24T16:00:00+00:00", COSID_EPOCH_MS),
            ("2019-12-25T15:59:00+23:59", COSID_EPOCH_MS),
            ("2019-12-23T16:01:00-23:59", COSID_EPOCH_MS),
            // Every four-digit year, and an offset may carry the instant past them.
            ("0000-01-01", -62_167_219_200_000),
            ("0000-01-01T00:00+23:59", -62_167_305_540_000),
            ("9999-12-31T23:59:59.999Z", 253_402_300_799_999),
            ("9999-12-31T23:59:59.999-23:59", 253_402_387_139_999),
            ("2024-02-29", 1_709_164_800_000),
            // Blanks around the text are dropped, ASCII or not.
            (" \t2019-12-24T16:00:00Z\n", COSID_EPOCH_MS),
            ("\u{a0}1577203200000\u{3000}", COSID_EPOCH_MS),
        ] {
            assert_eq!(parse_epoch(text), Ok(unix_ms), "{text:?}");
        }
    }

    #[test]
    fn epochs_in_any_other_form_are_refused() {
        for text in [
            "",
            " ",
            // Unix milliseconds take no sign, separator or overflow.
            "-1",
            "+1577203200000",
            "1_577_203_200_000",
            "9223372036854775808",
            // The date: four-digit year, two-digit month and day, '-' between them.
            "2019-12-2",
            "2019-1-24",
            "19-12-24",
            "+2019-12-24",
            "-0001-12-24",
            "12019-12-24",
            "20191224T160000Z",
            "2019/12/24",
            "２019-12-24",
            // Dates and times that do not exist, leap seconds among them.
            "2019-02-29",
            "1900-02-29",
            "2019-00-10",
            "2019-13-01",
            "2019-12-00",
            "2019-12-32",
            "2019-12-24T24:00",
            "2019-12-24T24:00:00Z",
            "2019-12-24T16:60",
            "2019-12-24T16:00:60Z",
            "2019-12-31T23:59:60Z",
            "2019-12-24T16:00:61",
            // The time: 'T', 't' or a single space, then hh:mm[:ss[.fraction]].
            "2019-12-24T",
            "2019-12-24T16",
            "2019-12-24T1600",
            "2019-12-24T160000Z",
            "2019-12-24T6:00",
            "2019-12-24T16:0",
            "2019-12-24T16:00:",
            "2019-12-24T16:00:0",
            "2019-12-24T16:00.5",
            "2019-12-24T16:00:00.",
            "2019-12-24T16:00:00.Z",
            "2019-12-24T16:00:00,5",
            "2019-12-24T16:00:00.5.5",
            "2019-12-24T16:00:00.5:",
            "2019-12-24_16:00",
            "2019-12-24  16:00",
            "2019-12-24T 16:00",
            "2019-12-24 T16:00",
            "2019-12-24TZ",
            "2019-12-24T16:00:00 Z",
            "2019-12-24T16:00:00 +08:00",
            // The offset: Z, or a sign and hh, hhmm or hh:mm within a day.
            "2019-12-24T16:00:00+",
            "2019-12-24T16:00:00+8",
            "2019-12-24T16:00:00+080",
            "2019-12-24T16:00:00+08:0",
            "2019-12-24T16:00:00+08:000",
            "2019-12-24T16:00:00+08000",
            "2019-12-24T16:00:00+08 00",
            "2019-12-24T16:00:00+08:00:00",
            "2019-12-24T16:00:00+24",
            "2019-12-24T16:00:00+24:00",
            "2019-12-24T16:00:00-2400",
            "2019-12-24T16:00:00+08:60",
            "2019-12-24T16:00:00+0a:00",
            "2019-12-24T16:00:00\u{2212}08:00",
            "2019-12-24T16:00:00+\u{661}\u{662}",
            "2019-12-24T16:00:00+aé1",
            "2019-12-24T16:00:00UTC",
            "2019-12-24T16:00:00GMT",
            "2019-12-24T16:00:00ZZ",
            "2019-12-24T16:00:00Z+08:00",
            "2019-12-24T16:00:00+08:00Z",
            "2019-12-24Z16:00",
        ] {
            assert!(parse_epoch(text).is_err(), "{text:?}");
        }
    }

    /// chrono's dates end near the year 262,000, Unix milliseconds near 292 million: the texts
    /// go on past chrono, as they did before it.
    #[test]
    fn times_beyond_chronos_range_are_written() {
        assert!(DateTime::from_timestamp_millis(i64::MAX).is_none());
        for (unix_ms, text) in [
            (i64::MAX, "292278994-08-17 07:12:55.807+00"),
            (i64::MIN, "-292275055-05-16 16:47:04.192+00"),
            (8_210_298_412_799_999, "262143-12-31 23:59:59.999+00"),
            (8_210_298_412_800_000, "262144-01-01 00:00:00.000+00"),
            (-8_334_601_228_800_000, "-262143-01-01 00:00:00.000+00"),
            (-8_334_601_228_800_001, "-262144-12-31 23:59:59.999+00"),
            (-8_334_632_851_200_001, "-262145-12-31 23:59:59.999+00"),
            (253_402_300_800_000, "10000-01-01 00:00:00.000+00"),
            (-62_167_219_200_000, "0000-01-01 00:00:00.000+00"),
            // Years before 0 as `{:04}` writes them, which is not chrono's `%Y` ("-0001").
            (-62_167_219_200_001, "-001-12-31 23:59:59.999+00"),
            (-1, "1969-12-31 23:59:59.999+00"),
        ] {
            assert_eq!(format_unix_ms(unix_ms), text, "{unix_ms}");
        }
        // A layout reaching 146 million years past 1970.
        let far = Layout::new(0, TimeUnit::Millisecond, 62, 0, 1).unwrap();
        assert_eq!(
            format_unix_ms(far.max_unix_ms()),
            "146140482-04-24 15:36:27.903+00"
        );
        assert_eq!(far.to_friendly(i64::MAX), None);
        // An epoch a minute into the year -1, which `cosid.epoch` accepts.
        let before_0 = Layout::new(
            parse_epoch("0000-01-01T00:00+23:59").unwrap(),
            TimeUnit::Millisecond,
            41,
            10,
            12,
        )
        .unwrap();
        assert_eq!(before_0.to_friendly(1).unwrap(), "-0011231000100000-0-1");
    }
}
