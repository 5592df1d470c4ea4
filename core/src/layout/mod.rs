//! The id layout: how a 63-bit id splits into timestamp, machine id and sequence, and the two
//! textual forms CosId defines for an id (the friendly form and padded Radix62).
//!
//! The text forms live in `text`, the epoch setting and the UTC calendar in `time`, the quoting
//! of user text for messages in `message`; their public items are re-exported here, where the
//! rest of the crate and the extension have always found them.
//!
//! Pure: nothing here calls into PostgreSQL, so every rule is unit-tested on its own.
//!
//! ```text
//!  63   62 ............................ m+s   m+s-1 ....... s   s-1 ....... 0
//! [ 0 ][ ticks since epoch (timestamp_bits) ][ machine id (m) ][ sequence (s) ]
//! ```

use std::fmt;

mod message;
mod text;
mod time;

pub use message::{quote_for_message, MESSAGE_TEXT_CHARS};
pub use text::{decimal_width, from_radix62, to_radix62, ParseError, RADIX62_WIDTH};
pub use time::{format_unix_ms, parse_epoch};

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
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) const COSID_VECTOR_ID: i64 = 295_913_926_632_165_376;

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
}
