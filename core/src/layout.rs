//! The id layout: how a 63-bit id splits into timestamp, machine id and sequence, and the two
//! textual forms CosId defines for an id (the friendly form and padded Radix62).
//!
//! Pure: nothing here calls into PostgreSQL, so every rule is unit-tested on its own.
//!
//! ```text
//!  63   62 ............................ m+s   m+s-1 ....... s   s-1 ....... 0
//! [ 0 ][ ticks since epoch (timestamp_bits) ][ machine id (m) ][ sequence (s) ]
//! ```

use std::fmt::{self, Write as _};
use std::sync::LazyLock;

use chrono::format::{Item, StrftimeItems};
use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime};

/// CosId's epoch, in Unix milliseconds.
pub const COSID_EPOCH_MS: i64 = 1_577_203_200_000;
/// CosId's epoch as `cosid.epoch` spells its default, with the C string's NUL (a setting's
/// default is a C string); `COSID_EPOCH_MS` parsed (a unit test checks the two agree).
pub const COSID_EPOCH_TEXT_NUL: &str = "2019-12-24T16:00:00Z\0";
/// The bits CosId's `MillisecondSnowflakeId` uses: 41 timestamp, 10 machine, 12 sequence.
pub const DEFAULT_TIMESTAMP_BITS: u32 = 41;
pub const DEFAULT_MACHINE_BITS: u32 = 10;
pub const DEFAULT_SEQUENCE_BITS: u32 = 12;
/// An id is a non-negative `bigint`: the sign bit is never used.
pub const TOTAL_BITS: u32 = 63;
/// The widest machine id and sequence: each is an `integer` in SQL (`cosid_decode`), and a
/// machine id is leased within an `integer` too.
pub const MAX_MACHINE_BITS: u32 = 31;
pub const MAX_SEQUENCE_BITS: u32 = 31;

/// The length of a padded Radix62 id: 62^11 > 2^63 > 62^10.
pub const RADIX62_WIDTH: usize = 11;
const RADIX62_DIGITS: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// CosId's named layouts, which `cosid_create_generator(layout => ...)` offers: the name, the
/// time unit, and the timestamp, machine and sequence bits. The `safe_js` ones are CosId's
/// `SafeJavaScriptSnowflakeId`: 53 bits, so that an id survives a JavaScript (or JSON) number.
pub const PRESETS: [(&str, TimeUnit, u32, u32, u32); 4] = [
    ("millisecond", TimeUnit::Millisecond, 41, 10, 12),
    ("second", TimeUnit::Second, 31, 10, 22),
    ("safe_js", TimeUnit::Millisecond, 41, 3, 9),
    ("safe_js_second", TimeUnit::Second, 31, 3, 19),
];

/// The preset of that name: its time unit and its timestamp, machine and sequence bits.
pub fn preset(name: &str) -> Option<(TimeUnit, u32, u32, u32)> {
    PRESETS.iter().find(|preset| preset.0 == name).map(
        |&(_, unit, timestamp_bits, machine_bits, sequence_bits)| {
            (unit, timestamp_bits, machine_bits, sequence_bits)
        },
    )
}

/// The unit of the timestamp field, CosId's `MillisecondSnowflakeId` or `SecondSnowflakeId`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum TimeUnit {
    Millisecond = 0,
    Second = 1,
}

impl TimeUnit {
    pub const fn millis_per_tick(self) -> i64 {
        match self {
            TimeUnit::Millisecond => 1,
            TimeUnit::Second => 1000,
        }
    }

    /// The unit a name stands for: `millisecond` or `second`, in any case, around any spaces.
    pub fn from_name(name: &str) -> Option<TimeUnit> {
        match name.trim().to_ascii_lowercase().as_str() {
            "millisecond" => Some(TimeUnit::Millisecond),
            "second" => Some(TimeUnit::Second),
            _ => None,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            TimeUnit::Millisecond => "millisecond",
            TimeUnit::Second => "second",
        }
    }
}

/// A validated layout. Every accessor relies on the invariants checked by [`Layout::new`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Layout {
    epoch_ms: i64,
    time_unit: TimeUnit,
    timestamp_bits: u32,
    machine_bits: u32,
    sequence_bits: u32,
}

/// Why a combination of layout settings was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayoutError {
    TooManyBits {
        timestamp_bits: u32,
        machine_bits: u32,
        sequence_bits: u32,
    },
    NoTimestampBits,
    NoSequenceBits,
    /// More machine bits than [`MAX_MACHINE_BITS`].
    MachineBitsTooMany {
        machine_bits: u32,
    },
    /// More sequence bits than [`MAX_SEQUENCE_BITS`].
    SequenceBitsTooMany {
        sequence_bits: u32,
    },
    EpochNotWholeSecond {
        epoch_ms: i64,
    },
    /// The last instant of the layout is beyond what an `i64` of Unix milliseconds holds.
    TimeRangeTooLarge,
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutError::TooManyBits {
                timestamp_bits,
                machine_bits,
                sequence_bits,
            } => write!(
                f,
                "cosid.timestamp_bits ({timestamp_bits}) + cosid.machine_bits ({machine_bits}) + \
                 cosid.sequence_bits ({sequence_bits}) = {} exceeds the {TOTAL_BITS} bits of a \
                 non-negative bigint",
                timestamp_bits + machine_bits + sequence_bits
            ),
            LayoutError::NoTimestampBits => write!(f, "cosid.timestamp_bits must be at least 1"),
            LayoutError::NoSequenceBits => write!(f, "cosid.sequence_bits must be at least 1"),
            LayoutError::MachineBitsTooMany { machine_bits } => write!(
                f,
                "cosid.machine_bits ({machine_bits}) must be from 0 to {MAX_MACHINE_BITS}"
            ),
            LayoutError::SequenceBitsTooMany { sequence_bits } => write!(
                f,
                "cosid.sequence_bits ({sequence_bits}) must be from 1 to {MAX_SEQUENCE_BITS}"
            ),
            LayoutError::EpochNotWholeSecond { epoch_ms } => write!(
                f,
                "cosid.epoch ({epoch_ms} ms) must be a whole second when cosid.time_unit is \
                 \"second\""
            ),
            LayoutError::TimeRangeTooLarge => write!(
                f,
                "cosid.timestamp_bits with cosid.epoch and cosid.time_unit reach beyond the year \
                 292 million"
            ),
        }
    }
}

/// The parts of an id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdParts {
    /// Ticks since the layout's epoch.
    pub ticks: u64,
    pub machine_id: u32,
    pub sequence: u32,
}

/// Why parts make no id of a layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartsError {
    Ticks {
        ticks: u64,
        max_ticks: u64,
    },
    MachineId {
        machine_id: u32,
        max_machine_id: u32,
    },
    Sequence {
        sequence: u32,
        max_sequence: u32,
    },
}

impl fmt::Display for PartsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PartsError::Ticks { ticks, max_ticks } => write!(
                f,
                "tick {ticks} is beyond the last tick of cosid.timestamp_bits, {max_ticks}"
            ),
            PartsError::MachineId {
                machine_id,
                max_machine_id,
            } => write!(
                f,
                "machine id {machine_id} is outside the range 0 .. {max_machine_id} of \
                 cosid.machine_bits"
            ),
            PartsError::Sequence {
                sequence,
                max_sequence,
            } => write!(
                f,
                "sequence {sequence} is outside the range 0 .. {max_sequence} of \
                 cosid.sequence_bits"
            ),
        }
    }
}

/// Why a timestamp cannot be expressed in the layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeRangeError {
    BeforeEpoch,
    AfterMaximum,
}

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
    pub fn new(
        epoch_ms: i64,
        time_unit: TimeUnit,
        timestamp_bits: u32,
        machine_bits: u32,
        sequence_bits: u32,
    ) -> Result<Layout, LayoutError> {
        // A machine id or sequence beyond 31 bits would not survive the u32 fields and the SQL
        // integers they are decoded into: refused, rather than decoded wrongly.
        if machine_bits > MAX_MACHINE_BITS {
            return Err(LayoutError::MachineBitsTooMany { machine_bits });
        }
        if sequence_bits > MAX_SEQUENCE_BITS {
            return Err(LayoutError::SequenceBitsTooMany { sequence_bits });
        }
        if timestamp_bits + machine_bits + sequence_bits > TOTAL_BITS {
            return Err(LayoutError::TooManyBits {
                timestamp_bits,
                machine_bits,
                sequence_bits,
            });
        }
        if timestamp_bits == 0 {
            return Err(LayoutError::NoTimestampBits);
        }
        if sequence_bits == 0 {
            return Err(LayoutError::NoSequenceBits);
        }
        if epoch_ms.rem_euclid(time_unit.millis_per_tick()) != 0 {
            return Err(LayoutError::EpochNotWholeSecond { epoch_ms });
        }
        // At most 62 bits here: the sequence has at least one.
        let span_ms = (1i64 << timestamp_bits).checked_mul(time_unit.millis_per_tick());
        if span_ms
            .and_then(|span| span.checked_add(epoch_ms))
            .is_none()
        {
            return Err(LayoutError::TimeRangeTooLarge);
        }
        Ok(Layout {
            epoch_ms,
            time_unit,
            timestamp_bits,
            machine_bits,
            sequence_bits,
        })
    }

    /// CosId's `MillisecondSnowflakeId` defaults.
    pub fn cosid_default() -> Layout {
        Layout::new(
            COSID_EPOCH_MS,
            TimeUnit::Millisecond,
            DEFAULT_TIMESTAMP_BITS,
            DEFAULT_MACHINE_BITS,
            DEFAULT_SEQUENCE_BITS,
        )
        .expect("CosId's default layout is valid")
    }

    pub fn epoch_ms(&self) -> i64 {
        self.epoch_ms
    }
    pub fn time_unit(&self) -> TimeUnit {
        self.time_unit
    }
    pub fn timestamp_bits(&self) -> u32 {
        self.timestamp_bits
    }
    pub fn machine_bits(&self) -> u32 {
        self.machine_bits
    }
    pub fn sequence_bits(&self) -> u32 {
        self.sequence_bits
    }
    pub fn max_ticks(&self) -> u64 {
        (1u64 << self.timestamp_bits) - 1
    }
    pub fn max_machine_id(&self) -> u32 {
        ((1u64 << self.machine_bits) - 1) as u32
    }
    pub fn max_sequence(&self) -> u32 {
        ((1u64 << self.sequence_bits) - 1) as u32
    }
    fn machine_shift(&self) -> u32 {
        self.sequence_bits
    }
    fn timestamp_shift(&self) -> u32 {
        self.sequence_bits + self.machine_bits
    }

    /// The id for these parts, or why they make none: a part beyond its field would spill into
    /// the next one and give a wrong id, so every build checks them.
    pub fn compose(&self, parts: IdParts) -> Result<i64, PartsError> {
        self.check_machine_id(parts.machine_id)?;
        if parts.ticks > self.max_ticks() {
            return Err(PartsError::Ticks {
                ticks: parts.ticks,
                max_ticks: self.max_ticks(),
            });
        }
        if parts.sequence > self.max_sequence() {
            return Err(PartsError::Sequence {
                sequence: parts.sequence,
                max_sequence: self.max_sequence(),
            });
        }
        Ok(self.compose_in_range(parts))
    }

    /// Whether a machine id fits the machine bits.
    pub fn check_machine_id(&self, machine_id: u32) -> Result<(), PartsError> {
        if machine_id > self.max_machine_id() {
            return Err(PartsError::MachineId {
                machine_id,
                max_machine_id: self.max_machine_id(),
            });
        }
        Ok(())
    }

    /// [`Layout::compose`] without the checks, for the generator's hot path only, whose parts
    /// are in range by construction: the machine id and sequence are masked out of a word that
    /// was checked when the generator was opened, and the ticks come from
    /// [`Layout::unix_ms_to_ticks`].
    #[inline]
    pub(crate) fn compose_in_range(&self, parts: IdParts) -> i64 {
        debug_assert!(parts.ticks <= self.max_ticks());
        debug_assert!(parts.machine_id <= self.max_machine_id());
        debug_assert!(parts.sequence <= self.max_sequence());
        ((parts.ticks << self.timestamp_shift())
            | (u64::from(parts.machine_id) << self.machine_shift())
            | u64::from(parts.sequence)) as i64
    }

    /// The parts of a non-negative id; `None` for a negative one, which no layout produces.
    /// Bits above the timestamp field (possible when the layout uses fewer than 63 bits) are
    /// refused too, because no id of this layout has them.
    pub fn decompose(&self, id: i64) -> Option<IdParts> {
        if id < 0 {
            return None;
        }
        let id = id as u64;
        let ticks = id >> self.timestamp_shift();
        if ticks > self.max_ticks() {
            return None;
        }
        Some(IdParts {
            ticks,
            machine_id: ((id >> self.machine_shift()) & u64::from(self.max_machine_id())) as u32,
            sequence: (id & u64::from(self.max_sequence())) as u32,
        })
    }

    /// The Unix time in milliseconds at which a tick starts.
    pub fn ticks_to_unix_ms(&self, ticks: u64) -> i64 {
        self.epoch_ms + ticks as i64 * self.time_unit.millis_per_tick()
    }

    /// The tick that contains a Unix time in milliseconds.
    pub fn unix_ms_to_ticks(&self, unix_ms: i64) -> Result<u64, TimeRangeError> {
        let since_epoch = unix_ms
            .checked_sub(self.epoch_ms)
            .ok_or(TimeRangeError::BeforeEpoch)?;
        if since_epoch < 0 {
            return Err(TimeRangeError::BeforeEpoch);
        }
        let ticks = (since_epoch / self.time_unit.millis_per_tick()) as u64;
        if ticks > self.max_ticks() {
            return Err(TimeRangeError::AfterMaximum);
        }
        Ok(ticks)
    }

    /// The smallest id whose timestamp is at or after the tick containing `unix_ms`: the lower
    /// bound of an index range scan over ids made from that instant on.
    pub fn smallest_id_at(&self, unix_ms: i64) -> Result<i64, TimeRangeError> {
        let ticks = self.unix_ms_to_ticks(unix_ms)?;
        Ok(self.compose_in_range(IdParts {
            ticks,
            machine_id: 0,
            sequence: 0,
        }))
    }

    /// The last Unix millisecond the layout can express.
    pub fn max_unix_ms(&self) -> i64 {
        self.ticks_to_unix_ms(self.max_ticks()) + self.time_unit.millis_per_tick() - 1
    }

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

/// Parses `cosid.epoch`: Unix milliseconds (`1577203200000`), or an ISO 8601 date and time,
/// `YYYY-MM-DD[(T| )HH:MM[:SS[.fff]]][Z|(+|-)HH[:MM]]`, in UTC when no offset is given.
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

fn parse_iso_instant(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    let digits = |from: usize, len: usize| -> Option<u32> {
        let part = text.get(from..from + len)?;
        if !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        part.parse().ok()
    };
    let expect = |at: usize, what: u8| bytes.get(at) == Some(&what);
    if !(expect(4, b'-') && expect(7, b'-')) {
        return None;
    }
    let (year, month, day) = (digits(0, 4)?, digits(5, 2)?, digits(8, 2)?);
    let (mut hour, mut minute, mut second, mut milli) = (0, 0, 0, 0);
    let mut at = 10;
    if matches!(bytes.get(at), Some(b'T' | b't' | b' ')) {
        hour = digits(at + 1, 2)?;
        if !expect(at + 3, b':') {
            return None;
        }
        minute = digits(at + 4, 2)?;
        at += 6;
        if expect(at, b':') {
            second = digits(at + 1, 2)?;
            at += 3;
            if expect(at, b'.') {
                let fraction_len = text[at + 1..]
                    .bytes()
                    .take_while(u8::is_ascii_digit)
                    .count();
                if fraction_len == 0 {
                    return None;
                }
                let fraction = &text[at + 1..at + 1 + fraction_len];
                let padded = format!("{:0<3}", &fraction[..fraction_len.min(3)]);
                milli = padded.parse().ok()?;
                at += 1 + fraction_len;
            }
        }
    }
    let offset_minutes: i64 = match &text[at..] {
        "" | "Z" | "z" => 0,
        zone if !zone.is_ascii() => return None,
        zone => {
            let sign = match zone.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let zone = &zone[1..];
            let (hours, minutes) = match zone.len() {
                2 => (zone, "00"),
                4 => (&zone[..2], &zone[2..]),
                5 if zone.as_bytes()[2] == b':' => (&zone[..2], &zone[3..]),
                _ => return None,
            };
            if !(hours
                .bytes()
                .chain(minutes.bytes())
                .all(|b| b.is_ascii_digit()))
            {
                return None;
            }
            let hours: i64 = hours.parse().ok()?;
            let minutes: i64 = minutes.parse().ok()?;
            if hours > 23 || minutes > 59 {
                return None;
            }
            sign * (hours * 60 + minutes)
        }
    };
    let unix_ms = utc_unix_ms(year, [month, day], [hour, minute, second], milli)?;
    Some(unix_ms - offset_minutes * 60_000)
}

/// A Unix time in milliseconds as PostgreSQL prints a UTC timestamptz, for messages.
pub fn format_unix_ms(unix_ms: i64) -> String {
    static AFTER_YEAR: LazyLock<Vec<Item>> = LazyLock::new(|| strftime("-%m-%d %H:%M:%S%.3f+00"));
    let mut text = String::with_capacity(32);
    UtcTime::from_unix_ms(unix_ms).write(&mut text, &AFTER_YEAR);
    text
}

/// How many characters of a text a message quotes: a longer one is cut there, followed by "…"
/// and its length in characters, so that a 10 kB argument does not fill the log.
pub const MESSAGE_TEXT_CHARS: usize = 64;

/// Text in double quotes, for a message. With `ascii_only`, for a server whose encoding is not
/// UTF-8, other characters are written as `\uXXXX` (`\UXXXXXXXX` beyond the BMP), the escapes
/// of PostgreSQL's `E''` strings.
pub fn quote_for_message(text: &str, ascii_only: bool) -> String {
    let mut out = String::with_capacity(text.len().min(4 * MESSAGE_TEXT_CHARS) + 32);
    out.push('"');
    for c in text.chars().take(MESSAGE_TEXT_CHARS) {
        let code = u32::from(c);
        if c.is_ascii() || !ascii_only {
            out.push(c);
        } else if code <= 0xFFFF {
            out.push_str(&format!("\\u{code:04X}"));
        } else {
            out.push_str(&format!("\\U{code:08X}"));
        }
    }
    let chars = text.chars().count();
    if chars > MESSAGE_TEXT_CHARS {
        out.push_str(if ascii_only { "...\"" } else { "…\"" });
        write!(out, " ({chars} characters)").expect("a String takes any text");
    } else {
        out.push('"');
    }
    out
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

/// The Unix millisecond of a UTC calendar time, or `None` for a field out of its calendar
/// range (month 13, February 30, hour 24, second 60...). The year is one of the texts' four
/// digits, well within chrono's range.
fn utc_unix_ms(
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
fn strftime(format: &'static str) -> Vec<Item<'static>> {
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
struct UtcTime {
    year: i64,
    /// Month, day and time; its own year is the one in 1970 .. 2369, not `year`.
    rest: NaiveDateTime,
}

impl UtcTime {
    /// Writes the year, at least four digits (`{:04}`, as before chrono: chrono's `%Y` would
    /// write the years before 0 and after 9999 differently) and then the rest of the time in
    /// chrono's `items`.
    fn write(&self, text: &mut String, items: &[Item]) {
        write!(text, "{:04}", self.year).expect("a String takes any text");
        self.rest
            .format_with_items(items.iter())
            .write_to(text)
            .expect("a String takes any text");
    }

    fn from_unix_ms(unix_ms: i64) -> UtcTime {
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

    #[test]
    fn the_epoch_setting_default_is_cosid_epoch() {
        let text = COSID_EPOCH_TEXT_NUL.strip_suffix('\0').unwrap();
        assert_eq!(parse_epoch(text), Ok(COSID_EPOCH_MS));
    }

    #[test]
    fn time_units_are_named_in_any_case() {
        assert_eq!(TimeUnit::from_name(" Second "), Some(TimeUnit::Second));
        assert_eq!(
            TimeUnit::from_name("MILLISECOND"),
            Some(TimeUnit::Millisecond)
        );
        assert_eq!(TimeUnit::from_name("minute"), None);
        for unit in [TimeUnit::Millisecond, TimeUnit::Second] {
            assert_eq!(TimeUnit::from_name(unit.name()), Some(unit));
        }
    }

    use super::*;

    const COSID_VECTOR_ID: i64 = 295_913_926_632_165_376;

    #[test]
    fn cosid_test_vector_decodes() {
        let layout = Layout::cosid_default();
        let parts = layout.decompose(COSID_VECTOR_ID).unwrap();
        assert_eq!(layout.ticks_to_unix_ms(parts.ticks), 1_647_754_577_924);
        assert_eq!(parts.machine_id, 5);
        assert_eq!(parts.sequence, 0);
        assert_eq!(layout.compose(parts), Ok(COSID_VECTOR_ID));
    }

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
    fn layout_edges_round_trip() {
        for layout in [
            Layout::cosid_default(),
            Layout::new(COSID_EPOCH_MS, TimeUnit::Second, 31, 10, 22).unwrap(),
            Layout::new(0, TimeUnit::Millisecond, 32, 0, 31).unwrap(),
            Layout::new(0, TimeUnit::Millisecond, 1, 31, 31).unwrap(),
            Layout::new(0, TimeUnit::Millisecond, 61, 1, 1).unwrap(),
            Layout::new(COSID_EPOCH_MS, TimeUnit::Millisecond, 41, 3, 8).unwrap(),
        ] {
            let corners = [
                IdParts {
                    ticks: 0,
                    machine_id: 0,
                    sequence: 0,
                },
                IdParts {
                    ticks: layout.max_ticks(),
                    machine_id: layout.max_machine_id(),
                    sequence: layout.max_sequence(),
                },
                IdParts {
                    ticks: layout.max_ticks(),
                    machine_id: 0,
                    sequence: 0,
                },
                IdParts {
                    ticks: 0,
                    machine_id: layout.max_machine_id(),
                    sequence: 0,
                },
                IdParts {
                    ticks: 0,
                    machine_id: 0,
                    sequence: layout.max_sequence(),
                },
            ];
            for parts in corners {
                let id = layout.compose(parts).unwrap();
                assert!(id >= 0, "{layout:?} {parts:?}");
                assert_eq!(layout.decompose(id), Some(parts), "{layout:?}");
                let unix_ms = layout.ticks_to_unix_ms(parts.ticks);
                match layout.to_friendly(id) {
                    Some(friendly) => {
                        assert_eq!(layout.from_friendly(&friendly), Ok(id), "{friendly}")
                    }
                    None => assert!(unix_ms > 253_402_300_799_999, "{layout:?} {parts:?}"),
                }
                let radix = to_radix62(id).unwrap();
                assert_eq!(radix.len(), RADIX62_WIDTH);
                assert_eq!(from_radix62(&radix), Ok(id));
            }
        }
    }

    /// Checked in every build, not only with debug assertions: `cargo test --release` runs it
    /// too.
    #[test]
    fn compose_refuses_parts_beyond_their_fields() {
        let layout = Layout::new(COSID_EPOCH_MS, TimeUnit::Millisecond, 41, 3, 8).unwrap();
        let parts = |ticks, machine_id, sequence| IdParts {
            ticks,
            machine_id,
            sequence,
        };
        assert_eq!(
            layout.compose(parts(5, 8, 0)),
            Err(PartsError::MachineId {
                machine_id: 8,
                max_machine_id: 7
            })
        );
        assert_eq!(
            layout.compose(parts(5, u32::MAX, 0)),
            Err(PartsError::MachineId {
                machine_id: u32::MAX,
                max_machine_id: 7
            })
        );
        assert_eq!(
            layout.compose(parts(1 << 41, 0, 0)),
            Err(PartsError::Ticks {
                ticks: 1 << 41,
                max_ticks: (1 << 41) - 1
            })
        );
        assert_eq!(
            layout.compose(parts(5, 0, 256)),
            Err(PartsError::Sequence {
                sequence: 256,
                max_sequence: 255
            })
        );
        assert_eq!(layout.check_machine_id(7), Ok(()));
        assert!(layout.check_machine_id(8).is_err());
        assert_eq!(
            PartsError::MachineId {
                machine_id: 8,
                max_machine_id: 7
            }
            .to_string(),
            "machine id 8 is outside the range 0 .. 7 of cosid.machine_bits"
        );
        // No machine bits: only machine id 0.
        let no_machine = Layout::new(COSID_EPOCH_MS, TimeUnit::Millisecond, 41, 0, 12).unwrap();
        assert_eq!(no_machine.compose(parts(5, 0, 1)), Ok((5 << 12) | 1));
        assert!(no_machine.compose(parts(5, 1, 1)).is_err());
    }

    #[test]
    fn quote_for_message_escapes_non_ascii_only_when_asked() {
        assert_eq!(quote_for_message("abc", true), "\"abc\"");
        assert_eq!(quote_for_message("é-1", false), "\"é-1\"");
        assert_eq!(quote_for_message("é-1", true), "\"\\u00E9-1\"");
        assert_eq!(quote_for_message("😀", true), "\"\\U0001F600\"");
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
    fn long_texts_are_cut_in_messages() {
        let short = "a".repeat(MESSAGE_TEXT_CHARS);
        assert_eq!(quote_for_message(&short, false), format!("\"{short}\""));
        let long = "é".repeat(10_000);
        let quoted = quote_for_message(&long, false);
        assert_eq!(
            quoted,
            format!("\"{}…\" (10000 characters)", "é".repeat(MESSAGE_TEXT_CHARS))
        );
        let ascii = quote_for_message(&long, true);
        assert_eq!(
            ascii,
            format!(
                "\"{}...\" (10000 characters)",
                "\\u00E9".repeat(MESSAGE_TEXT_CHARS)
            )
        );
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
    fn negative_and_foreign_ids_do_not_decode() {
        let layout = Layout::new(COSID_EPOCH_MS, TimeUnit::Millisecond, 20, 10, 12).unwrap();
        assert_eq!(layout.decompose(-1), None);
        assert_eq!(layout.decompose(1 << 42), None);
        assert!(layout.decompose((1 << 42) - 1).is_some());
    }

    #[test]
    fn smallest_id_is_the_lower_bound_of_its_tick() {
        let layout = Layout::cosid_default();
        let at = 1_647_754_577_924;
        let low = layout.smallest_id_at(at).unwrap();
        // The vector has machine id 5; the smallest id of its millisecond has machine id 0.
        assert_eq!(low, COSID_VECTOR_ID - (5 << 12));
        assert_eq!(layout.smallest_id_at(at + 1).unwrap() - low, 1 << 22);
        assert_eq!(
            layout.smallest_id_at(COSID_EPOCH_MS - 1),
            Err(TimeRangeError::BeforeEpoch)
        );
        assert_eq!(layout.smallest_id_at(COSID_EPOCH_MS), Ok(0));
        assert!(layout.smallest_id_at(layout.max_unix_ms()).is_ok());
        assert_eq!(
            layout.smallest_id_at(layout.max_unix_ms() + 1),
            Err(TimeRangeError::AfterMaximum)
        );
        assert_eq!(
            layout.smallest_id_at(i64::MIN),
            Err(TimeRangeError::BeforeEpoch)
        );
    }

    #[test]
    fn machine_and_sequence_fields_are_at_most_31_bits_and_decode_exactly_up_to_them() {
        // 31 bits each: the largest machine id and sequence round-trip, and so does a sequence
        // beyond 16 bits with a machine id beyond 16 bits.
        let wide = Layout::new(COSID_EPOCH_MS, TimeUnit::Second, 1, 31, 31).unwrap();
        assert_eq!(wide.max_machine_id(), (1 << 31) - 1);
        assert_eq!(wide.max_sequence(), (1 << 31) - 1);
        for parts in [
            IdParts {
                ticks: 1,
                machine_id: (1 << 31) - 1,
                sequence: (1 << 31) - 1,
            },
            IdParts {
                ticks: 0,
                machine_id: 1 << 30,
                sequence: (1 << 30) + 5,
            },
        ] {
            let id = wide.compose(parts).unwrap();
            assert_eq!(wide.decompose(id), Some(parts));
        }
        let sequence = Layout::new(COSID_EPOCH_MS, TimeUnit::Second, 29, 3, 31).unwrap();
        let id = sequence
            .compose(IdParts {
                ticks: 7,
                machine_id: 5,
                sequence: 1 << 30,
            })
            .unwrap();
        assert_eq!(id, (7 << 34) | (5 << 31) | (1 << 30));
        assert_eq!(sequence.decompose(id).unwrap().sequence, 1 << 30);
        // One bit more would not fit the fields (a sequence of 2^33 in 35 bits decoded as 0).
        assert_eq!(
            Layout::new(COSID_EPOCH_MS, TimeUnit::Second, 25, 3, 35),
            Err(LayoutError::SequenceBitsTooMany { sequence_bits: 35 })
        );
        assert_eq!(
            Layout::new(COSID_EPOCH_MS, TimeUnit::Second, 1, 31, 32),
            Err(LayoutError::SequenceBitsTooMany { sequence_bits: 32 })
        );
        assert_eq!(
            Layout::new(COSID_EPOCH_MS, TimeUnit::Second, 1, 32, 1),
            Err(LayoutError::MachineBitsTooMany { machine_bits: 32 })
        );
        assert_eq!(
            Layout::new(COSID_EPOCH_MS, TimeUnit::Millisecond, 20, 32, 11)
                .unwrap_err()
                .to_string(),
            "cosid.machine_bits (32) must be from 0 to 31"
        );
    }

    #[test]
    fn settings_combinations_are_checked() {
        assert!(matches!(
            Layout::new(COSID_EPOCH_MS, TimeUnit::Millisecond, 41, 11, 12),
            Err(LayoutError::TooManyBits { .. })
        ));
        assert_eq!(
            Layout::new(COSID_EPOCH_MS, TimeUnit::Millisecond, 0, 10, 12),
            Err(LayoutError::NoTimestampBits)
        );
        assert_eq!(
            Layout::new(COSID_EPOCH_MS, TimeUnit::Millisecond, 41, 10, 0),
            Err(LayoutError::NoSequenceBits)
        );
        assert_eq!(
            Layout::new(COSID_EPOCH_MS + 1, TimeUnit::Second, 31, 10, 22),
            Err(LayoutError::EpochNotWholeSecond {
                epoch_ms: COSID_EPOCH_MS + 1
            })
        );
        assert_eq!(
            Layout::new(COSID_EPOCH_MS, TimeUnit::Second, 54, 0, 9),
            Err(LayoutError::TimeRangeTooLarge)
        );
        assert!(Layout::new(COSID_EPOCH_MS, TimeUnit::Second, 52, 0, 11).is_ok());
        assert!(Layout::new(COSID_EPOCH_MS, TimeUnit::Millisecond, 62, 0, 1).is_ok());
        let message = Layout::new(COSID_EPOCH_MS, TimeUnit::Millisecond, 41, 11, 12)
            .unwrap_err()
            .to_string();
        assert!(message.contains("cosid.machine_bits (11)"), "{message}");
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
