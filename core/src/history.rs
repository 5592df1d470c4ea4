//! The default generator's history (`cosid.history` in the data directory): the namespace and
//! layout its ids were issued under, so that a restart with another `cosid.namespace`, epoch,
//! time unit or widths never repeats them. Pure: the caller reads and writes the file.
//!
//! Ids of two namespaces can coincide (the same machine id can be held in both), and so can ids
//! of two layouts (another epoch dates the same bits differently): a column fed by
//! `cosid_next()` across such a change could get an id it got before. Named generators keep
//! their namespace in the database (`cosid.generator_name`); the default generator's
//! definition is the server's settings, so its record is kept where they act, beside the
//! server's other state files.
//!
//! The rule: after a change, every id of the new definition is above every id the old one
//! could have issued. That is known only when the old definition's last id is: the server
//! records it when it stops cleanly (the postmaster's exit, when no backend is left to issue
//! one). While a definition is in use the record says "running", with no last id; a change
//! from such a record (the server crashed or was killed under the old settings) is refused
//! until the server has run once more with the old settings and stopped cleanly.
//!
//! The floor a change gives is carried in every later record of the new definition, so that a
//! crash before the new ids have passed it does not forget it.
//!
//! # Format
//!
//! One JSON object on one line, ending with a newline:
//!
//! ```text
//! {"cosid_history":1,"namespace":"cosid","layout":{"epoch_ms":1577203200000,"time_unit":"millisecond","timestamp_bits":41,"machine_bits":10,"sequence_bits":12},"last_ms":null,"floor_ms":null,"generation":3}
//! ```
//!
//! An older copy of the file put back would forget the definitions after it: each write is
//! numbered, and the number is also kept in a file of its own ([`GenerationRecord`]).

use crate::layout::{IdParts, Layout, TimeUnit};
use serde::{Deserialize, Serialize};

/// The version written in `cosid_history`.
pub const FORMAT_VERSION: u64 = 1;

/// A layout as the history stores it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayoutRecord {
    pub epoch_ms: i64,
    pub time_unit: String,
    pub timestamp_bits: u32,
    pub machine_bits: u32,
    pub sequence_bits: u32,
}

impl LayoutRecord {
    pub fn of(layout: &Layout) -> LayoutRecord {
        LayoutRecord {
            epoch_ms: layout.epoch_ms(),
            time_unit: layout.time_unit().name().to_string(),
            timestamp_bits: layout.timestamp_bits(),
            machine_bits: layout.machine_bits(),
            sequence_bits: layout.sequence_bits(),
        }
    }

    /// The layout, if the record is a valid one.
    pub fn layout(&self) -> Option<Layout> {
        let time_unit = TimeUnit::from_name(&self.time_unit)?;
        Layout::new(
            self.epoch_ms,
            time_unit,
            self.timestamp_bits,
            self.machine_bits,
            self.sequence_bits,
        )
        .ok()
    }

    /// The layout in words, for messages: "epoch 1577203200000 ms, millisecond, 41/10/12 bits".
    pub fn describe(&self) -> String {
        format!(
            "epoch {} ms, {}, {}/{}/{} bits",
            self.epoch_ms,
            self.time_unit,
            self.timestamp_bits,
            self.machine_bits,
            self.sequence_bits
        )
    }
}

/// One record of the history file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryRecord {
    pub cosid_history: u64,
    pub namespace: String,
    pub layout: LayoutRecord,
    /// The timestamp of the last id issued (or above it), in Unix milliseconds, written when the
    /// server stopped cleanly; `None` while the definition is in use.
    pub last_ms: Option<i64>,
    /// Nothing of this definition is issued at or before this Unix millisecond: what a change
    /// from an earlier definition left (see the module's text).
    pub floor_ms: Option<i64>,
    /// How many times this server wrote its history: each write takes the next number, also
    /// kept in the generation file ([`GenerationRecord`]), so that an older copy of the
    /// history put back is told from the last one ([`check_generation`]). 0 in a file of
    /// before the number.
    #[serde(default)]
    pub generation: u64,
    /// Every earlier definition, with the last id it issued when that is known: a named
    /// generator in one of these namespaces could repeat their ids ([`HistoryRecord::used`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub past: Vec<PastDefinition>,
    /// The database (`cosid.database`) whose own lease table the server leased from, if it did:
    /// its watermarks are the only floors of ids issued since the last clean stop
    /// ([`leases_left_behind`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leases_in: Option<String>,
}

/// The database whose lease table holds the only floors of ids issued since the last clean
/// stop, when the server now leases from elsewhere (another `cosid.database`, a shared store)
/// or has a fixed machine id: after a crash, the last ids are not recorded, and the new
/// store's machine ids would be new there.
pub fn leases_left_behind(
    previous: Option<&HistoryRecord>,
    leases_in: Option<&str>,
) -> Option<String> {
    let previous = previous?;
    let old = previous.leases_in.as_deref()?;
    (previous.last_ms.is_none() && Some(old) != leases_in).then(|| old.to_string())
}

/// A definition the default generator had before its current one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PastDefinition {
    pub namespace: String,
    pub layout: LayoutRecord,
    /// The timestamp of its last id (or above it), in Unix milliseconds, when known.
    pub last_ms: Option<i64>,
}

/// The generation file (`cosid.generation` in the data directory): the number of the last
/// history this server wrote, in a file of its own, written after the history, so that
/// putting back an older copy of the history alone (the step a backup suggests) is caught.
///
/// ```text
/// {"cosid_generation":1,"generation":7,"names":2}
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerationRecord {
    pub cosid_generation: u64,
    /// The number of the history's last write.
    pub generation: u64,
    /// The number of the names file's last write (`names.rs`), written by the process that
    /// manages named generators, while the postmaster, which writes the history, writes nothing.
    #[serde(default)]
    pub names: u64,
}

impl GenerationRecord {
    pub fn new(generation: u64, names: u64) -> GenerationRecord {
        GenerationRecord {
            cosid_generation: FORMAT_VERSION,
            generation,
            names,
        }
    }

    pub fn to_line(&self) -> String {
        // Serialising two integers cannot fail.
        let mut line = serde_json::to_string(self).unwrap_or_default();
        line.push('\n');
        line
    }

    /// The record of a file's content, exactly, or why not (completing "the generation file
    /// ...").
    pub fn parse(content: &[u8]) -> Result<GenerationRecord, String> {
        let text = std::str::from_utf8(content).map_err(|_| "is not UTF-8 text".to_string())?;
        let line = text
            .strip_suffix('\n')
            .ok_or_else(|| "is truncated: it does not end with a newline".to_string())?;
        let record: GenerationRecord = serde_json::from_str(line)
            .map_err(|why| format!("is not a valid cosid generation record: {why}"))?;
        if record.cosid_generation != FORMAT_VERSION {
            return Err(format!(
                "has format version {}, which this version of cosid does not read",
                record.cosid_generation
            ));
        }
        Ok(record)
    }
}

/// Why a file cannot be trusted although it reads well: it is not the last one this server
/// wrote. The texts complete "the ... file ...".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotTheLast {
    /// The file is missing, and the generation file says that this server wrote it.
    Missing { written: u64 },
    /// The file is an older copy: it has the number `found`, the last one written `written`.
    Older { found: u64, written: u64 },
}

impl std::fmt::Display for NotTheLast {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotTheLast::Missing { written } => write!(
                f,
                "is missing, and the generation file says this server wrote it {written} times"
            ),
            NotTheLast::Older { found, written } => write!(
                f,
                "is an older copy: it is this server's write number {found} of it, and the last \
                 one was number {written}"
            ),
        }
    }
}

/// Whether a file read with the number `found` (`None`: no file) is the last one written, as
/// far as the generation file knows (`written`; `None`: no generation file, or one of before
/// the number: a first start). A file newer than the generation file is its last one: the
/// server stopped between the two writes.
pub fn check_generation(found: Option<u64>, written: Option<u64>) -> Result<(), NotTheLast> {
    let Some(written) = written else {
        return Ok(());
    };
    match found {
        None if written > 0 => Err(NotTheLast::Missing { written }),
        Some(found) if found < written => Err(NotTheLast::Older { found, written }),
        _ => Ok(()),
    }
}

/// Why the content of a history file is not a record. The texts complete "the history file …".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParseError {
    NotText,
    Truncated,
    SeveralLines,
    Invalid(String),
    UnknownVersion(String),
    BadLayout,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParseError::NotText => write!(f, "is not UTF-8 text"),
            ParseError::Truncated => write!(f, "is truncated: it does not end with a newline"),
            ParseError::SeveralLines => write!(f, "holds more than one line"),
            ParseError::Invalid(why) => write!(f, "is not a valid cosid history record: {why}"),
            ParseError::UnknownVersion(version) => write!(
                f,
                "has format version {version}, which this version of cosid does not read"
            ),
            ParseError::BadLayout => write!(f, "records a layout that is not valid"),
        }
    }
}

impl HistoryRecord {
    /// The record of a definition in use, carrying `floor_ms`.
    pub fn running(namespace: &str, layout: &Layout, floor_ms: Option<i64>) -> HistoryRecord {
        HistoryRecord {
            cosid_history: FORMAT_VERSION,
            namespace: namespace.to_string(),
            layout: LayoutRecord::of(layout),
            last_ms: None,
            floor_ms,
            generation: 0,
            past: Vec::new(),
            leases_in: None,
        }
    }

    /// The same record once the server stopped cleanly, its last id at `last_ms`.
    pub fn stopped(&self, last_ms: i64) -> HistoryRecord {
        HistoryRecord {
            last_ms: Some(last_ms),
            ..self.clone()
        }
    }

    pub fn to_line(&self) -> String {
        // Serialising plain strings and integers cannot fail.
        let mut line = serde_json::to_string(self).unwrap_or_default();
        line.push('\n');
        line
    }

    /// The record of a file's content: exactly one record, or an error (never "no record").
    pub fn parse(content: &[u8]) -> Result<HistoryRecord, ParseError> {
        let text = std::str::from_utf8(content).map_err(|_| ParseError::NotText)?;
        let line = text.strip_suffix('\n').ok_or(ParseError::Truncated)?;
        if line.contains(['\n', '\r']) {
            return Err(ParseError::SeveralLines);
        }
        let value: serde_json::Value =
            serde_json::from_str(line).map_err(|why| ParseError::Invalid(why.to_string()))?;
        match value.get("cosid_history") {
            Some(version) if version.as_u64() == Some(FORMAT_VERSION) => {}
            Some(version) => return Err(ParseError::UnknownVersion(version.to_string())),
            None => {
                return Err(ParseError::Invalid(
                    "missing field `cosid_history`".to_string(),
                ))
            }
        }
        let record: HistoryRecord =
            serde_json::from_value(value).map_err(|why| ParseError::Invalid(why.to_string()))?;
        if record.layout.layout().is_none() {
            return Err(ParseError::BadLayout);
        }
        Ok(record)
    }

    /// The same record as the next write: number `generation`.
    pub fn numbered(&self, generation: u64) -> HistoryRecord {
        HistoryRecord {
            generation,
            ..self.clone()
        }
    }

    /// Every namespace and layout the record names, this definition's first: the definitions
    /// under which the default generator may have issued ids.
    pub fn definitions(&self) -> Vec<(&str, &LayoutRecord)> {
        std::iter::once((self.namespace.as_str(), &self.layout))
            .chain(
                self.past
                    .iter()
                    .map(|past| (past.namespace.as_str(), &past.layout)),
            )
            .collect()
    }

    /// Whether the default generator ever issued ids in `namespace`, under this definition or
    /// an earlier one.
    pub fn used(&self, namespace: &str) -> bool {
        self.namespace == namespace || self.past.iter().any(|past| past.namespace == namespace)
    }

    /// The earlier definitions a record of a new definition carries: this one's, and this
    /// one's own definition with `last_ms` (one entry per namespace and layout, its latest
    /// last id).
    fn past_with_this(&self, last_ms: Option<i64>) -> Vec<PastDefinition> {
        let mut past = self.past.clone();
        match past
            .iter_mut()
            .find(|p| p.namespace == self.namespace && p.layout == self.layout)
        {
            Some(entry) => {
                entry.last_ms = match (entry.last_ms, last_ms) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    _ => None,
                }
            }
            None => past.push(PastDefinition {
                namespace: self.namespace.clone(),
                layout: self.layout.clone(),
                last_ms,
            }),
        }
        past
    }

    /// The same record, leasing from `leases_in`'s own lease table (or not).
    pub fn leasing_in(&self, leases_in: Option<&str>) -> HistoryRecord {
        HistoryRecord {
            leases_in: leases_in.map(str::to_string),
            ..self.clone()
        }
    }

    fn with_past(self, past: Vec<PastDefinition>) -> HistoryRecord {
        HistoryRecord { past, ..self }
    }

    fn is_definition(&self, namespace: &str, layout: &Layout) -> bool {
        self.namespace == namespace && self.layout == LayoutRecord::of(layout)
    }
}

/// The longest a changed definition waits for its ids to be above the old one's: a floor further
/// ahead is refused, since the wait would look like an outage (an epoch moved a day forward, or
/// narrower fields whose ids pass the old ones only in years).
pub const MAX_WAIT_MS: i64 = 24 * 3_600_000;

/// What the history says of the definition a server starts with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Generate, above `floor_ms` if there is one; write `record` before any id is issued.
    Generate {
        floor_ms: Option<i64>,
        record: HistoryRecord,
    },
    /// The definition changed, and the old one's last id is unknown: the server did not stop
    /// cleanly under it.
    LastIdUnknown { previous: HistoryRecord },
    /// The definition changed, and no id of the new one can be above the old one's last.
    NeverAbove { previous: HistoryRecord },
    /// The definition changed, and its ids are above the old one's only after `floor_ms`, more
    /// than [`MAX_WAIT_MS`] after `now_ms`.
    TooFar {
        previous: HistoryRecord,
        floor_ms: i64,
    },
}

/// The verdict for a server starting with `namespace` and `layout` at `now_ms`, given the record
/// the history file holds (`None`: no file, the first start).
pub fn verdict(
    previous: Option<&HistoryRecord>,
    namespace: &str,
    layout: &Layout,
    now_ms: i64,
) -> Verdict {
    let Some(previous) = previous else {
        return Verdict::Generate {
            floor_ms: None,
            record: HistoryRecord::running(namespace, layout, None),
        };
    };
    // Everything the recorded definitions issued is at or before this, when it is known.
    let issued_up_to = match (previous.last_ms, previous.floor_ms) {
        (Some(last_ms), floor_ms) => Some(last_ms.max(floor_ms.unwrap_or(i64::MIN))),
        (None, _) => None,
    };
    if previous.is_definition(namespace, layout) {
        // Nothing below what the same definition issued before, whatever machine id it gets
        // now (another distributor, a clock stepped back across the restart).
        let floor_ms = issued_up_to.or(previous.floor_ms);
        return Verdict::Generate {
            floor_ms,
            record: HistoryRecord::running(namespace, layout, floor_ms)
                .with_past(previous.past.clone()),
        };
    }
    let (Some(last_ms), Some(old_layout)) = (issued_up_to, previous.layout.layout()) else {
        return Verdict::LastIdUnknown {
            previous: previous.clone(),
        };
    };
    match floor_above(&old_layout, last_ms, layout) {
        Some(floor_ms) if floor_ms > now_ms.saturating_add(MAX_WAIT_MS) => Verdict::TooFar {
            previous: previous.clone(),
            floor_ms,
        },
        Some(floor_ms) => Verdict::Generate {
            floor_ms: Some(floor_ms),
            record: HistoryRecord::running(namespace, layout, Some(floor_ms))
                .with_past(previous.past_with_this(Some(last_ms))),
        },
        None => Verdict::NeverAbove {
            previous: previous.clone(),
        },
    }
}

/// The Unix millisecond at or before which `new` must issue nothing, so that each of its ids is
/// above every id `old` can have issued up to `last_ms`: the largest such id has `old`'s tick of
/// `last_ms` and every machine and sequence bit set. `None` when `new` has no id above it.
pub fn floor_above(old: &Layout, last_ms: i64, new: &Layout) -> Option<i64> {
    let old_ticks = match old.unix_ms_to_ticks(last_ms) {
        Ok(ticks) => ticks,
        // Before the old epoch: nothing was issued.
        Err(crate::layout::TimeRangeError::BeforeEpoch) => return Some(i64::MIN),
        Err(crate::layout::TimeRangeError::AfterMaximum) => old.max_ticks(),
    };
    let largest_old = old
        .compose(IdParts {
            ticks: old_ticks,
            machine_id: old.max_machine_id(),
            sequence: old.max_sequence(),
        })
        .ok()?;
    // The ids of `new` in a tick T are T << shift and above, so each tick after
    // largest_old >> shift holds only larger ids.
    let shift = new.machine_bits() + new.sequence_bits();
    let floor_ticks = (largest_old as u64) >> shift;
    if floor_ticks >= new.max_ticks() {
        return None;
    }
    // The last millisecond of the floor tick: nothing at or before it.
    Some(new.ticks_to_unix_ms(floor_ticks + 1) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::COSID_EPOCH_MS;

    #[test]
    fn an_older_copy_or_a_missing_file_is_not_the_last() {
        assert_eq!(check_generation(Some(5), Some(5)), Ok(()));
        // Stopped between the file's write and the generation file's.
        assert_eq!(check_generation(Some(6), Some(5)), Ok(()));
        assert_eq!(
            check_generation(Some(4), Some(5)),
            Err(NotTheLast::Older {
                found: 4,
                written: 5
            })
        );
        assert_eq!(
            check_generation(None, Some(5)),
            Err(NotTheLast::Missing { written: 5 })
        );
        // Never written (the names file of a server without named generators).
        assert_eq!(check_generation(None, Some(0)), Ok(()));
        // No generation file: a first start, or a file of before the number.
        assert_eq!(check_generation(Some(0), None), Ok(()));
        assert_eq!(check_generation(None, None), Ok(()));
    }

    #[test]
    fn every_namespace_the_default_generator_used_is_remembered() {
        let layout = millis(COSID_EPOCH_MS);
        let later = millis(COSID_EPOCH_MS + 5_000);
        let Verdict::Generate { record: first, .. } = verdict(None, "orders", &layout, NOW) else {
            panic!("a first start generates");
        };
        assert!(first.used("orders") && !first.used("web"));
        let Verdict::Generate { record: web, .. } =
            verdict(Some(&first.stopped(NOW)), "web", &layout, NOW + 10)
        else {
            panic!("another namespace after a clean stop generates");
        };
        assert!(web.used("orders") && web.used("web"));
        // Carried by a restart with the same settings, and by a later change.
        let Verdict::Generate { record: again, .. } =
            verdict(Some(&web.stopped(NOW + 20)), "web", &layout, NOW + 30)
        else {
            panic!("the same settings generate");
        };
        assert!(again.used("orders"));
        let Verdict::Generate { record: third, .. } =
            verdict(Some(&again.stopped(NOW + 40)), "third", &later, NOW + 50)
        else {
            panic!("another namespace and a later epoch after a clean stop generate");
        };
        assert!(third.used("orders") && third.used("web") && third.used("third"));
        assert_eq!(third.past.len(), 2);
        assert_eq!(third.past[1].last_ms, Some(NOW + 40));
        // It reads back.
        assert_eq!(HistoryRecord::parse(third.to_line().as_bytes()), Ok(third));
    }

    #[test]
    fn leases_left_behind_after_a_crash_are_found() {
        let layout = millis(COSID_EPOCH_MS);
        let running = HistoryRecord::running("cosid", &layout, None).leasing_in(Some("db_a"));
        // A crash (still "running"), then another database, a shared store or a fixed id.
        assert_eq!(
            leases_left_behind(Some(&running), Some("db_b")),
            Some("db_a".to_string())
        );
        assert_eq!(
            leases_left_behind(Some(&running), None),
            Some("db_a".to_string())
        );
        // The same database, or after a clean stop, or no lease table of its own before.
        assert_eq!(leases_left_behind(Some(&running), Some("db_a")), None);
        assert_eq!(
            leases_left_behind(Some(&running.stopped(NOW)), Some("db_b")),
            None
        );
        let fixed = HistoryRecord::running("cosid", &layout, None);
        assert_eq!(leases_left_behind(Some(&fixed), Some("db_b")), None);
        assert_eq!(leases_left_behind(None, Some("db_b")), None);
        assert_eq!(
            HistoryRecord::parse(running.to_line().as_bytes()),
            Ok(running)
        );
    }

    #[test]
    fn a_generation_record_reads_back_exactly() {
        let record = GenerationRecord::new(42, 3);
        let line = record.to_line();
        assert_eq!(
            line,
            "{\"cosid_generation\":1,\"generation\":42,\"names\":3}\n"
        );
        assert_eq!(GenerationRecord::parse(line.as_bytes()), Ok(record));
        assert!(GenerationRecord::parse(b"{\"cosid_generation\":1,\"generation\":42}").is_err());
        assert!(GenerationRecord::parse(b"{\"cosid_generation\":2,\"generation\":1}\n").is_err());
        // One of before the names' number.
        assert_eq!(
            GenerationRecord::parse(b"{\"cosid_generation\":1,\"generation\":42}\n"),
            Ok(GenerationRecord::new(42, 0))
        );
        assert!(GenerationRecord::parse(b"{\"cosid_generation\":1,\"generation\":-1}\n").is_err());
        // A history of before the number reads as number 0.
        let old = "{\"cosid_history\":1,\"namespace\":\"cosid\",\"layout\":{\"epoch_ms\":1577203200000,\"time_unit\":\"millisecond\",\"timestamp_bits\":41,\"machine_bits\":10,\"sequence_bits\":12},\"last_ms\":null,\"floor_ms\":null}\n";
        assert_eq!(HistoryRecord::parse(old.as_bytes()).unwrap().generation, 0);
    }

    fn millis(epoch_ms: i64) -> Layout {
        Layout::new(epoch_ms, TimeUnit::Millisecond, 41, 10, 12).unwrap()
    }

    fn seconds(epoch_ms: i64) -> Layout {
        Layout::new(epoch_ms, TimeUnit::Second, 31, 10, 22).unwrap()
    }

    const NOW: i64 = 1_790_000_000_000;

    fn every_new_id_above(old: &Layout, last_ms: i64, new: &Layout, floor_ms: i64) {
        let largest_old = old
            .compose(IdParts {
                ticks: old.unix_ms_to_ticks(last_ms).unwrap(),
                machine_id: old.max_machine_id(),
                sequence: old.max_sequence(),
            })
            .unwrap();
        let first_tick = new.unix_ms_to_ticks(floor_ms).unwrap() + 1;
        let smallest_new = new
            .compose(IdParts {
                ticks: first_tick,
                machine_id: 0,
                sequence: 0,
            })
            .unwrap();
        assert!(
            smallest_new > largest_old,
            "{smallest_new} <= {largest_old}"
        );
        // And the tick before the first allowed one still holds ids at or below it: the floor
        // is not needlessly high.
        let below = new
            .compose(IdParts {
                ticks: first_tick - 1,
                machine_id: 0,
                sequence: 0,
            })
            .unwrap();
        assert!(below <= largest_old);
    }

    #[test]
    fn a_first_start_generates_with_no_floor() {
        let verdict = verdict(None, "cosid", &millis(COSID_EPOCH_MS), NOW);
        assert_eq!(
            verdict,
            Verdict::Generate {
                floor_ms: None,
                record: HistoryRecord::running("cosid", &millis(COSID_EPOCH_MS), None),
            }
        );
    }

    #[test]
    fn the_same_definition_stays_above_what_it_issued_before() {
        let layout = millis(COSID_EPOCH_MS);
        // Stopped cleanly: above its last id and its carried floor (another machine id, or a
        // clock stepped back across the restart, must not go below them).
        for (last_ms, expected) in [
            (None, Some(NOW - 5)),
            (Some(NOW), Some(NOW)),
            (Some(NOW - 9), Some(NOW - 5)),
        ] {
            let previous = HistoryRecord {
                last_ms,
                ..HistoryRecord::running("cosid", &layout, Some(NOW - 5))
            };
            match verdict(Some(&previous), "cosid", &layout, NOW) {
                Verdict::Generate { floor_ms, record } => {
                    assert_eq!(floor_ms, expected, "{last_ms:?}");
                    assert_eq!(record.floor_ms, expected, "carried");
                    assert_eq!(record.last_ms, None, "running again");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_floor_more_than_a_day_ahead_is_refused() {
        let old = millis(COSID_EPOCH_MS);
        let previous = HistoryRecord::running("cosid", &old, None).stopped(NOW);
        let day_later = millis(COSID_EPOCH_MS + MAX_WAIT_MS + 1_000);
        assert!(matches!(
            verdict(Some(&previous), "cosid", &day_later, NOW),
            Verdict::TooFar { floor_ms, .. } if floor_ms == NOW + MAX_WAIT_MS + 1_000
        ));
        let hour_later = millis(COSID_EPOCH_MS + 3_600_000);
        assert!(matches!(
            verdict(Some(&previous), "cosid", &hour_later, NOW),
            Verdict::Generate { floor_ms: Some(floor_ms), .. } if floor_ms == NOW + 3_600_000
        ));
    }

    #[test]
    fn a_change_after_a_crash_is_refused() {
        let previous = HistoryRecord::running("cosid", &millis(COSID_EPOCH_MS), None);
        for (namespace, layout) in [
            ("other", millis(COSID_EPOCH_MS)),
            ("cosid", millis(COSID_EPOCH_MS + 600_000)),
            ("cosid", seconds(COSID_EPOCH_MS)),
        ] {
            assert_eq!(
                verdict(Some(&previous), namespace, &layout, NOW),
                Verdict::LastIdUnknown {
                    previous: previous.clone()
                }
            );
        }
    }

    #[test]
    fn another_namespace_of_the_same_layout_waits_only_past_the_last_id() {
        let layout = millis(COSID_EPOCH_MS);
        let previous = HistoryRecord::running("cosid", &layout, None).stopped(NOW);
        match verdict(Some(&previous), "orders", &layout, NOW) {
            Verdict::Generate { floor_ms, record } => {
                assert_eq!(floor_ms, Some(NOW));
                assert_eq!(record.namespace, "orders");
                assert_eq!(record.floor_ms, Some(NOW));
                every_new_id_above(&layout, NOW, &layout, NOW);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_epoch_moved_forward_waits_that_much_longer() {
        // The finding: ids of an epoch ten minutes later repeat those of ten minutes before.
        let old = millis(COSID_EPOCH_MS);
        let new = millis(COSID_EPOCH_MS + 600_000);
        let floor_ms = floor_above(&old, NOW, &new).unwrap();
        assert_eq!(floor_ms, NOW + 600_000);
        every_new_id_above(&old, NOW, &new, floor_ms);
    }

    #[test]
    fn an_epoch_moved_back_needs_no_wait() {
        let old = millis(COSID_EPOCH_MS);
        let new = millis(COSID_EPOCH_MS - 86_400_000);
        let floor_ms = floor_above(&old, NOW, &new).unwrap();
        assert!(floor_ms < NOW - 86_000_000);
        every_new_id_above(&old, NOW, &new, floor_ms);
    }

    #[test]
    fn other_units_and_widths_are_compared_by_id() {
        let old = seconds(COSID_EPOCH_MS);
        let new = millis(COSID_EPOCH_MS);
        // A second-layout id is larger than a millisecond one of the same instant (its ticks
        // are shifted by 32 bits, not 22, 4.3 million per second against 4.2): the
        // millisecond ids pass it about 59 days later.
        let floor_ms = floor_above(&old, NOW, &new).unwrap();
        assert!(floor_ms > NOW + 50 * 86_400_000, "{}", floor_ms - NOW);
        every_new_id_above(&old, NOW, &new, floor_ms);
        // A layout whose every id is below the old one's last: never above.
        let short = Layout::new(COSID_EPOCH_MS, TimeUnit::Millisecond, 20, 10, 12).unwrap();
        let previous = HistoryRecord::running("cosid", &old, None).stopped(NOW);
        assert_eq!(
            verdict(Some(&previous), "cosid", &short, NOW),
            Verdict::NeverAbove {
                previous: previous.clone()
            }
        );
        // The other way round, the new ids are above at once.
        let floor_ms = floor_above(&new, NOW, &old).unwrap();
        assert!(floor_ms < NOW);
        every_new_id_above(&new, NOW, &old, floor_ms);
        let narrow = Layout::new(COSID_EPOCH_MS, TimeUnit::Millisecond, 41, 8, 12).unwrap();
        // Fewer machine bits: the same instant makes ids four times smaller, so the floor is
        // years away (and the server refuses rather than wait for it: MAX_WAIT_MS).
        let layout = millis(COSID_EPOCH_MS);
        let floor_ms = floor_above(&layout, NOW, &narrow).unwrap();
        assert!(floor_ms > NOW + 3 * 365 * 86_400_000);
        every_new_id_above(&layout, NOW, &narrow, floor_ms);
    }

    #[test]
    fn a_carried_floor_above_the_last_id_counts() {
        let layout = millis(COSID_EPOCH_MS);
        let previous = HistoryRecord::running("cosid", &layout, Some(NOW + 1_000)).stopped(NOW);
        match verdict(Some(&previous), "orders", &layout, NOW) {
            Verdict::Generate { floor_ms, .. } => assert_eq!(floor_ms, Some(NOW + 1_000)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn records_round_trip_and_anything_else_is_an_error() {
        let record =
            HistoryRecord::running("ns \"é\"\t", &millis(COSID_EPOCH_MS), Some(7)).stopped(NOW);
        let line = record.to_line();
        assert_eq!(HistoryRecord::parse(line.as_bytes()), Ok(record));
        assert_eq!(
            HistoryRecord::parse(b"{\"cosid_history\":1}"),
            Err(ParseError::Truncated)
        );
        assert!(matches!(
            HistoryRecord::parse(b"{\"cosid_history\":2}\n"),
            Err(ParseError::UnknownVersion(_))
        ));
        assert!(matches!(
            HistoryRecord::parse(b"{}\n"),
            Err(ParseError::Invalid(_))
        ));
        assert_eq!(HistoryRecord::parse(b"\xff\n"), Err(ParseError::NotText));
        let bad = line.replace("\"sequence_bits\":12", "\"sequence_bits\":40");
        assert_eq!(
            HistoryRecord::parse(bad.as_bytes()),
            Err(ParseError::BadLayout)
        );
    }
}
