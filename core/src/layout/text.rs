//! The two textual forms CosId defines for an id: the friendly form, whose timestamp is a UTC
//! calendar stamp, and padded Radix62.

use std::fmt::Write as _;
use std::sync::LazyLock;

use chrono::format::Item;

use super::time::{strftime, utc_unix_ms, UtcTime};
use super::{IdParts, Layout, TimeRangeError, TimeUnit};

/// The length of a padded Radix62 id: 62^11 > 2^63 > 62^10.
pub const RADIX62_WIDTH: usize = 11;
const RADIX62_DIGITS: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Why a friendly or Radix62 text was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// Not three non-empty parts separated by single '-'.
    Shape,
    /// The timestamp part is not `yyyyMMddHHmmss[SSS]` of a real date.
    Timestamp,
    /// A part that should be a decimal number is not one, or is padded to another width than
    /// CosId's; carries the part's name and its padded width.
    Number(&'static str, usize),
    /// A part is outside the layout's range; carries the part's name and maximum.
    OutOfRange(&'static str, u64),
    /// Outside the layout's time range.
    TimeRange(TimeRangeError),
    /// Empty, longer than 11 characters, or a character outside `[0-9A-Za-z]`.
    Radix62Digits,
    /// Decodes to more than the largest bigint.
    Radix62Overflow,
}

impl Layout {
    /// CosId's friendly form, in UTC: `yyyyMMddHHmmssSSS-machine-sequence` (`yyyyMMddHHmmss` for
    /// the second unit), machine and sequence unpadded. `None` for an id this layout does not
    /// make, and for one dated after the year 9999, which the form cannot write.
    pub fn to_friendly(&self, id: i64) -> Option<String> {
        let parts = self.decompose(id)?;
        static MILLISECOND_STAMP: LazyLock<Vec<Item>> = LazyLock::new(|| strftime("%m%d%H%M%S%3f"));
        static SECOND_STAMP: LazyLock<Vec<Item>> = LazyLock::new(|| strftime("%m%d%H%M%S"));
        let time = UtcTime::from_unix_ms(self.ticks_to_unix_ms(parts.ticks));
        if time.year > 9999 {
            return None;
        }
        let mut text = String::with_capacity(32);
        time.write(
            &mut text,
            match self.time_unit {
                TimeUnit::Millisecond => &MILLISECOND_STAMP,
                TimeUnit::Second => &SECOND_STAMP,
            },
        );
        write!(text, "-{}-{}", parts.machine_id, parts.sequence).expect("a String takes any text");
        Some(text)
    }

    /// Parses CosId's friendly form, exactly as CosId writes it: the timestamp, then the machine
    /// id and the sequence in decimal, either unpadded (`20220320053617924-5-0`) or padded with
    /// zeros to the width of the field's largest value (`20220320053617924-0005-0000`), separated
    /// by single '-'. Nothing else is taken: no blank, sign, empty part or other padding.
    pub fn from_friendly(&self, text: &str) -> Result<i64, ParseError> {
        let mut parts = text.split('-');
        let (Some(stamp), Some(machine), Some(sequence), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(ParseError::Shape);
        };
        if stamp.is_empty() || machine.is_empty() || sequence.is_empty() {
            return Err(ParseError::Shape);
        }
        let stamp_len = match self.time_unit {
            TimeUnit::Millisecond => 17,
            TimeUnit::Second => 14,
        };
        if stamp.len() != stamp_len || !stamp.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ParseError::Timestamp);
        }
        // chrono's `%Y` would read every digit as the year: the fields are cut at their fixed
        // widths here, and chrono checks them and counts the milliseconds.
        let field = |from: usize, to: usize| -> u32 {
            stamp[from..to].parse().expect("checked to be ASCII digits")
        };
        let unix_ms = utc_unix_ms(
            field(0, 4),
            [field(4, 6), field(6, 8)],
            [field(8, 10), field(10, 12), field(12, 14)],
            if stamp_len == 17 { field(14, 17) } else { 0 },
        )
        .ok_or(ParseError::Timestamp)?;
        let ticks = self
            .unix_ms_to_ticks(unix_ms)
            .map_err(ParseError::TimeRange)?;
        let machine_id = parse_field(machine, "machine id", u64::from(self.max_machine_id()))?;
        let sequence = parse_field(sequence, "sequence", u64::from(self.max_sequence()))?;
        // Each part was checked against its field above.
        Ok(self.compose_in_range(IdParts {
            ticks,
            machine_id: machine_id as u32,
            sequence: sequence as u32,
        }))
    }
}

/// The number of decimal digits of `value`: the width CosId pads a field of that maximum to.
pub fn decimal_width(value: u64) -> usize {
    value.checked_ilog10().map_or(1, |log| log as usize + 1)
}

/// A machine id or sequence of a friendly id: ASCII digits, without leading zeros, or padded
/// with zeros to exactly the width of `max`.
fn parse_field(text: &str, what: &'static str, max: u64) -> Result<u64, ParseError> {
    let width = decimal_width(max);
    let padded = text.len() > 1 && text.starts_with('0');
    if text.is_empty()
        || !text.bytes().all(|b| b.is_ascii_digit())
        || (padded && text.len() != width)
    {
        return Err(ParseError::Number(what, width));
    }
    // More digits than any u64 has is out of range as surely as a too large value.
    let value = text.parse::<u64>().unwrap_or(u64::MAX);
    if value > max {
        return Err(ParseError::OutOfRange(what, max));
    }
    Ok(value)
}

/// CosId's padded Radix62 form: always 11 characters of `[0-9A-Za-z]`. `None` for a negative id.
pub fn to_radix62(id: i64) -> Option<String> {
    if id < 0 {
        return None;
    }
    let mut digits = [b'0'; RADIX62_WIDTH];
    let mut rest = id as u64;
    for slot in digits.iter_mut().rev() {
        *slot = RADIX62_DIGITS[(rest % 62) as usize];
        rest /= 62;
    }
    Some(String::from_utf8(digits.to_vec()).expect("Radix62 digits are ASCII"))
}

/// Parses Radix62, padded to 11 characters or not.
pub fn from_radix62(text: &str) -> Result<i64, ParseError> {
    if text.is_empty() || text.len() > RADIX62_WIDTH {
        return Err(ParseError::Radix62Digits);
    }
    let mut value: u64 = 0;
    for byte in text.bytes() {
        let digit = match byte {
            b'0'..=b'9' => byte - b'0',
            b'A'..=b'Z' => byte - b'A' + 10,
            b'a'..=b'z' => byte - b'a' + 36,
            _ => return Err(ParseError::Radix62Digits),
        };
        value = value
            .checked_mul(62)
            .and_then(|v| v.checked_add(u64::from(digit)))
            .ok_or(ParseError::Radix62Overflow)?;
    }
    i64::try_from(value).map_err(|_| ParseError::Radix62Overflow)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::tests::COSID_VECTOR_ID;
    use crate::layout::{format_unix_ms, parse_epoch, COSID_EPOCH_MS};

    #[test]
    fn cosid_test_vector_text_forms() {
        let layout = Layout::cosid_default();
        assert_eq!(
            layout.to_friendly(COSID_VECTOR_ID).unwrap(),
            "20220320053617924-5-0"
        );
        assert_eq!(to_radix62(COSID_VECTOR_ID).unwrap(), "0LrHucXALbs");
        assert_eq!(
            layout.from_friendly("20220320053617924-5-0"),
            Ok(COSID_VECTOR_ID)
        );
        assert_eq!(
            layout.from_friendly("20220320053617924-0005-0000"),
            Ok(COSID_VECTOR_ID)
        );
        assert_eq!(
            layout.from_friendly(" 20220320053617924 - 5 - 0 "),
            Err(ParseError::Timestamp)
        );
        assert_eq!(from_radix62("0LrHucXALbs"), Ok(COSID_VECTOR_ID));
        assert_eq!(from_radix62("LrHucXALbs"), Ok(COSID_VECTOR_ID));
    }

    #[test]
    fn the_largest_bigint_round_trips_through_radix62() {
        assert_eq!(to_radix62(i64::MAX).unwrap(), "AzL8n0Y58m7");
        assert_eq!(from_radix62("AzL8n0Y58m7"), Ok(i64::MAX));
        assert_eq!(
            from_radix62("AzL8n0Y58m8"),
            Err(ParseError::Radix62Overflow)
        );
        assert_eq!(
            from_radix62("zzzzzzzzzzz"),
            Err(ParseError::Radix62Overflow)
        );
        assert_eq!(to_radix62(0).unwrap(), "00000000000");
        assert_eq!(to_radix62(-1), None);
    }

    #[test]
    fn bad_radix62_is_refused() {
        for text in ["", "000000000000", "abc-", "é", " 0"] {
            assert_eq!(
                from_radix62(text),
                Err(ParseError::Radix62Digits),
                "{text:?}"
            );
        }
    }

    #[test]
    fn only_cosids_friendly_forms_are_taken() {
        let layout = Layout::cosid_default();
        let id = layout.from_friendly("20220320053617924-5-0").unwrap();
        assert_eq!(layout.from_friendly("20220320053617924-0005-0000"), Ok(id));
        assert_eq!(
            layout
                .from_friendly("20220320053617924-1023-4095")
                .map(|_| ()),
            Ok(())
        );
        assert_eq!(
            layout.from_friendly("20220320053617924-0-0").map(|_| ()),
            Ok(())
        );
        for text in [
            "20220320053617924--5-0",
            "---5---0",
            "20220320053617924-5-0-",
            "-20220320053617924-5-0",
            "20220320053617924-5--0",
            "20220320053617924-5",
            "--",
            "",
        ] {
            assert_eq!(
                layout.from_friendly(text),
                Err(ParseError::Shape),
                "{text:?}"
            );
        }
        for text in [
            " 20220320053617924-5-0",
            "20220320053617924 -5-0",
            "\u{a0}20220320053617924-5-0",
            "+0220320053617924-5-0",
            "２0220320053617924-5-0",
        ] {
            assert_eq!(
                layout.from_friendly(text),
                Err(ParseError::Timestamp),
                "{text:?}"
            );
        }
        for (text, part) in [
            ("20220320053617924- 5-0", "machine id"),
            ("20220320053617924-5 -0", "machine id"),
            ("20220320053617924-+5-0", "machine id"),
            ("20220320053617924-05-0", "machine id"),
            ("20220320053617924-00005-0", "machine id"),
            ("20220320053617924-5-0\u{a0}", "sequence"),
            ("20220320053617924-5-000", "sequence"),
            ("20220320053617924-5-0 ", "sequence"),
            ("20220320053617924-5-\n0", "sequence"),
        ] {
            assert_eq!(
                layout.from_friendly(text),
                Err(ParseError::Number(part, 4)),
                "{text:?}"
            );
        }
        let seconds = Layout::new(layout.epoch_ms(), TimeUnit::Second, 31, 1, 31).unwrap();
        assert_eq!(decimal_width(u64::from(seconds.max_machine_id())), 1);
        assert_eq!(decimal_width(u64::from(seconds.max_sequence())), 10);
        assert_eq!(decimal_width(0), 1);
        assert_eq!(decimal_width(9), 1);
        assert_eq!(decimal_width(10), 2);
        assert_eq!(decimal_width(u64::MAX), 20);
    }

    #[test]
    fn bad_friendly_text_is_refused() {
        let layout = Layout::cosid_default();
        assert_eq!(layout.from_friendly("garbage"), Err(ParseError::Shape));
        assert_eq!(layout.from_friendly("1-2-3-4"), Err(ParseError::Shape));
        assert_eq!(
            layout.from_friendly("2022032005361792-5-0"),
            Err(ParseError::Timestamp)
        );
        assert_eq!(
            layout.from_friendly("20221320053617924-5-0"),
            Err(ParseError::Timestamp)
        );
        assert_eq!(
            layout.from_friendly("20230229053617924-5-0"),
            Err(ParseError::Timestamp)
        );
        assert_eq!(
            layout.from_friendly("20220320243617924-5-0"),
            Err(ParseError::Timestamp)
        );
        assert_eq!(
            layout.from_friendly("20220320053617924-x-0"),
            Err(ParseError::Number("machine id", 4))
        );
        assert_eq!(
            layout.from_friendly("20220320053617924-1024-0"),
            Err(ParseError::OutOfRange("machine id", 1023))
        );
        assert_eq!(
            layout.from_friendly("20220320053617924-5-4096"),
            Err(ParseError::OutOfRange("sequence", 4095))
        );
        assert_eq!(
            layout.from_friendly("20220320053617924-5-99999999999999999999999"),
            Err(ParseError::OutOfRange("sequence", 4095))
        );
        assert_eq!(
            layout.from_friendly("20191224155959999-0-0"),
            Err(ParseError::TimeRange(TimeRangeError::BeforeEpoch))
        );
        assert_eq!(
            layout.from_friendly("20991224155959999-0-0"),
            Err(ParseError::TimeRange(TimeRangeError::AfterMaximum))
        );
    }

    #[test]
    fn leap_days_parse() {
        let layout = Layout::cosid_default();
        let id = layout.from_friendly("20240229235959999-1-2").unwrap();
        assert_eq!(layout.to_friendly(id).unwrap(), "20240229235959999-1-2");
    }

    #[test]
    fn second_unit_uses_fourteen_digit_stamps() {
        let layout = Layout::new(COSID_EPOCH_MS, TimeUnit::Second, 31, 10, 22).unwrap();
        let id = layout.from_friendly("20220320053617-5-7").unwrap();
        assert_eq!(layout.to_friendly(id).unwrap(), "20220320053617-5-7");
        assert_eq!(
            layout.ticks_to_unix_ms(layout.decompose(id).unwrap().ticks),
            1_647_754_577_000
        );
        assert_eq!(
            layout.from_friendly("20220320053617924-5-0"),
            Err(ParseError::Timestamp)
        );
    }

    /// Not a check: times 1,000,000 friendly-form formats and parses, and 1,000,000
    /// `format_unix_ms`, the best of seven rounds. Run with
    /// `cargo test -p cosid-core --release -- --ignored --nocapture friendly_form_timing`.
    #[test]
    #[ignore]
    fn friendly_form_timing() {
        use std::hint::black_box;
        use std::time::{Duration, Instant};
        const N: u64 = 1_000_000;
        let layout = Layout::cosid_default();
        // Ids about 20 minutes apart from 2022 on: every field of the stamp varies.
        let id_at = |i: u64| COSID_VECTOR_ID + ((i * 1_234_567) << 22) as i64 + (i % 4096) as i64;
        let texts: Vec<String> = (0..N)
            .map(|i| layout.to_friendly(id_at(i)).unwrap())
            .collect();
        let mut best = [Duration::MAX; 3];
        let mut check = 0i64;
        for _ in 0..7 {
            let started = Instant::now();
            for i in 0..N {
                let text = layout.to_friendly(black_box(id_at(i))).unwrap();
                check = check.wrapping_add(black_box(text).len() as i64);
            }
            best[0] = best[0].min(started.elapsed());
            let started = Instant::now();
            for text in &texts {
                check = check.wrapping_add(layout.from_friendly(black_box(text)).unwrap());
            }
            best[1] = best[1].min(started.elapsed());
            let started = Instant::now();
            for i in 0..N {
                let text = format_unix_ms(black_box(1_647_754_577_924 + (i * 1_234_567) as i64));
                check = check.wrapping_add(black_box(text).len() as i64);
            }
            best[2] = best[2].min(started.elapsed());
        }
        let [format, parse, message] = best.map(|d| d.as_nanos() / u128::from(N));
        println!(
            "ns each, best of 7 rounds of {N}: to_friendly {format}, from_friendly {parse}, \
             format_unix_ms {message} [{check}]"
        );
    }

    /// Friendly forms at calendar corners, read and written back. The Unix milliseconds were
    /// worked out apart from this code, with Python's `datetime`.
    #[test]
    fn friendly_form_round_trips_at_calendar_corners() {
        let from_1900 = Layout::new(
            parse_epoch("1900-01-01").unwrap(),
            TimeUnit::Millisecond,
            42,
            5,
            10,
        )
        .unwrap();
        let from_year_0 = Layout::new(
            parse_epoch("0000-01-01").unwrap(),
            TimeUnit::Millisecond,
            62,
            0,
            1,
        )
        .unwrap();
        let seconds = Layout::new(0, TimeUnit::Second, 40, 10, 12).unwrap();
        let cases: [(&Layout, i64, &str); 16] = [
            (&from_1900, -2_208_988_800_000, "19000101000000000-0-0"),
            (&from_1900, -1, "19691231235959999-31-1023"),
            (&from_1900, 0, "19700101000000000-1-2"),
            (&from_1900, 951_782_399_999, "20000228235959999-0-0"),
            (&from_1900, 951_782_400_000, "20000229000000000-0-0"),
            (&from_1900, 951_868_800_000, "20000301000000000-0-0"),
            (&from_1900, 1_704_067_199_999, "20231231235959999-0-0"),
            (&from_1900, 1_704_067_200_000, "20240101000000000-0-0"),
            (&from_1900, 1_709_164_800_000, "20240229000000000-0-0"),
            (&from_year_0, -62_167_219_200_000, "00000101000000000-0-0"),
            (&from_year_0, -62_162_121_600_000, "00000229000000000-0-0"),
            (&from_year_0, 4_107_542_399_999, "21000228235959999-0-1"),
            (&from_year_0, 4_107_542_400_000, "21000301000000000-0-0"),
            (&from_year_0, 253_402_300_799_999, "99991231235959999-0-0"),
            (&seconds, 0, "19700101000000-1023-4095"),
            (&seconds, 1_709_251_199_000, "20240229235959-7-0"),
        ];
        for (layout, unix_ms, friendly) in cases {
            let parts = layout
                .decompose(layout.from_friendly(friendly).unwrap())
                .unwrap();
            assert_eq!(layout.ticks_to_unix_ms(parts.ticks), unix_ms, "{friendly}");
            let id = layout.compose(parts).unwrap();
            assert_eq!(layout.to_friendly(id).as_deref(), Some(friendly));
        }
        // The last instant of CosId's 41-bit layout, as the SQL tests print it.
        let default = Layout::cosid_default();
        let last = default
            .compose(IdParts {
                ticks: default.max_ticks(),
                machine_id: default.max_machine_id(),
                sequence: default.max_sequence(),
            })
            .unwrap();
        assert_eq!(last, i64::MAX);
        assert_eq!(
            default.to_friendly(last).unwrap(),
            "20890830074735551-1023-4095"
        );
        assert_eq!(
            default.from_friendly("20890830074735551-1023-4095"),
            Ok(i64::MAX)
        );
        assert_eq!(
            format_unix_ms(default.max_unix_ms()),
            "2089-08-30 07:47:35.551+00"
        );
        // The form stops after the year 9999.
        let after_9999 = from_year_0.smallest_id_at(253_402_300_800_000).unwrap();
        assert_eq!(from_year_0.to_friendly(after_9999), None);
        assert_eq!(
            from_year_0.to_friendly(after_9999 - 2),
            Some("99991231235959999-0-0".into())
        );
    }

    #[test]
    fn friendly_form_refuses_dates_that_do_not_exist() {
        let layout = Layout::new(
            parse_epoch("0000-01-01").unwrap(),
            TimeUnit::Millisecond,
            62,
            0,
            1,
        )
        .unwrap();
        for text in [
            "20240230000000000-0-0", // February 30
            "20230229000000000-0-0", // February 29 of a common year
            "19000229000000000-0-0", // 1900 is not a leap year
            "20240431000000000-0-0", // April 31
            "20241301000000000-0-0", // month 13
            "20240001000000000-0-0", // month 0
            "20240100000000000-0-0", // day 0
            "20240132000000000-0-0", // day 32
            "20240101240000000-0-0", // hour 24
            "20240101006000000-0-0", // minute 60
            "20240101000060000-0-0", // second 60, a leap second
        ] {
            assert_eq!(
                layout.from_friendly(text),
                Err(ParseError::Timestamp),
                "{text}"
            );
        }
        for text in ["20000229000000000-0-0", "00000229000000000-0-0"] {
            assert!(layout.from_friendly(text).is_ok(), "{text}");
        }
        assert!(parse_epoch("2023-02-29").is_err());
        assert!(parse_epoch("2019-12-24T16:00:60Z").is_err());
        assert_eq!(
            parse_epoch("2024-02-29T00:00:00.999+23:59"),
            Ok(1_709_078_460_999)
        );
    }
}
