//! The local state file (`cosid.state` in the data directory): the floor a restarted server must
//! honour for the machine id it last used, when no lease watermark says more. Pure: the caller
//! reads and writes the file, and passes the clocks in.
//!
//! A record says: this server had issued ids up to `last_ms`, and expects to issue nothing
//! dated after `floor_ms` (the later of `last_ms` and the wall clock at the write, plus the write
//! interval) before the next record. It also says when it was written, on the wall clock and on
//! the boot-time clock, and in which boot.
//!
//! After a restart in the same boot, the boot-time clock measures how long ago the write was, and
//! every id issued since is dated no later than the wall clock at the write plus that time (plus
//! the drift a disciplined clock may gain), unless the clock was stepped forward meanwhile. That
//! holds however late the next write was, and an ordinary crash costs no wait: a clock that has
//! not been stepped back is already there. After a reboot, only the padded floor is known.
//!
//! # Format
//!
//! One JSON object on one line, ending with a newline:
//!
//! ```text
//! {"cosid_state":1,"namespace":"orders","machine_id":7,"floor_ms":11000,"written":{"last_ms":10000,"wall_ms":10050,"boot_ms":500000,"boot_id":"…"}}
//! ```
//!
//! `cosid_state` is the format's version. JSON escapes every character that could break the line
//! (quotes, backslashes, control characters), so no namespace can make the file unreadable.
//! Versions before this format wrote tab-separated fields; such a line is still read, but only if
//! writing its record back in that format gives exactly the same text.
//!
//! A file that is not exactly one record (empty, torn, foreign, of an unknown version) is an
//! error, never "no floor": the caller must refuse to generate rather than ignore the floor.

use serde::{Deserialize, Serialize};

/// The version written in `cosid_state`.
pub const FORMAT_VERSION: u64 = 1;

/// One record of the state file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateRecord {
    pub namespace: String,
    pub machine_id: u32,
    /// The later of the last timestamp issued and the wall clock at the write, plus the write
    /// interval.
    pub floor_ms: i64,
    pub written: Option<Written>,
}

/// When and from where a record was written; absent in a record written at a clean shutdown
/// (its floor is exact), or where the boot id could not be read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Written {
    /// The last timestamp issued when the record was written.
    pub last_ms: i64,
    pub wall_ms: i64,
    pub boot_ms: u64,
    /// `/proc/sys/kernel/random/boot_id`: tells whether the boot-time clock is the same one.
    pub boot_id: String,
}

/// The record as it is stored: the record's fields after the format's version.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRecord {
    cosid_state: u64,
    namespace: String,
    machine_id: u32,
    floor_ms: i64,
    written: Option<Written>,
}

/// Why the content of a state file is not a record. The texts complete "the state file …".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParseError {
    Empty,
    NotText,
    /// The last line does not end with a newline: the write was cut short.
    Truncated,
    SeveralLines,
    /// A JSON line that is not a record of this format.
    Invalid(String),
    UnknownVersion(String),
    /// Neither JSON nor an exact line of the older tab-separated format.
    NotARecord,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParseError::Empty => write!(f, "is empty"),
            ParseError::NotText => write!(f, "is not UTF-8 text"),
            ParseError::Truncated => write!(f, "is truncated: it does not end with a newline"),
            ParseError::SeveralLines => write!(f, "holds more than one line"),
            ParseError::Invalid(why) => write!(f, "is not a valid cosid state record: {why}"),
            ParseError::UnknownVersion(version) => write!(
                f,
                "has format version {version}, which this version of cosid does not read"
            ),
            ParseError::NotARecord => write!(
                f,
                "is not a cosid state record: it is neither a JSON record nor an exact line of \
                 the tab-separated format of older versions"
            ),
        }
    }
}

impl StateRecord {
    /// The file's content: one JSON line.
    pub fn to_line(&self) -> String {
        let stored = FileRecord {
            cosid_state: FORMAT_VERSION,
            namespace: self.namespace.clone(),
            machine_id: self.machine_id,
            floor_ms: self.floor_ms,
            written: self.written.clone(),
        };
        // Serialising plain strings and integers cannot fail.
        let mut line = serde_json::to_string(&stored).unwrap_or_default();
        line.push('\n');
        line
    }

    /// The record of a file's content, which must be exactly one record: anything else (empty,
    /// torn, foreign) is an error, never "no record".
    pub fn parse(content: &[u8]) -> Result<StateRecord, ParseError> {
        if content.is_empty() {
            return Err(ParseError::Empty);
        }
        let text = std::str::from_utf8(content).map_err(|_| ParseError::NotText)?;
        let line = text.strip_suffix('\n').ok_or(ParseError::Truncated)?;
        if line.contains(['\n', '\r']) {
            return Err(ParseError::SeveralLines);
        }
        if line.starts_with('{') {
            parse_json(line)
        } else {
            parse_tab_separated(line).ok_or(ParseError::NotARecord)
        }
    }

    /// Whether the record is about `machine_id` of `namespace`: a record of another one says
    /// nothing about it (the configuration changed).
    pub fn is_for(&self, namespace: &str, machine_id: u32) -> bool {
        self.namespace == namespace && self.machine_id == machine_id
    }

    /// The floor to honour now for this record's machine id: nothing may be issued at or
    /// before it.
    ///
    /// In the boot that wrote the record: the wall clock at the write plus the time elapsed
    /// since on the boot-time clock, with 1 ms per second for drift and 2 ms for the truncation
    /// of the two readings, and never below what was issued before the write. Otherwise the
    /// padded floor is all there is.
    pub fn floor_now_ms(&self, now_boot_ms: u64, boot_id: &str) -> i64 {
        match &self.written {
            Some(w) if w.boot_id == boot_id && now_boot_ms >= w.boot_ms => {
                let elapsed = (now_boot_ms - w.boot_ms).min(i64::MAX as u64 / 2) as i64;
                let since_write = elapsed + elapsed / 1_000 + 2;
                w.last_ms.max(w.wall_ms.saturating_add(since_write))
            }
            _ => self.floor_ms,
        }
    }
}

fn parse_json(line: &str) -> Result<StateRecord, ParseError> {
    let value: serde_json::Value =
        serde_json::from_str(line).map_err(|why| ParseError::Invalid(why.to_string()))?;
    // The version first: a newer format may have fields this one does not know.
    match value.get("cosid_state") {
        Some(version) if version.as_u64() == Some(FORMAT_VERSION) => {}
        Some(version) => return Err(ParseError::UnknownVersion(version.to_string())),
        None => {
            return Err(ParseError::Invalid(
                "missing field `cosid_state`".to_string(),
            ))
        }
    }
    let stored: FileRecord =
        serde_json::from_value(value).map_err(|why| ParseError::Invalid(why.to_string()))?;
    if stored
        .written
        .as_ref()
        .is_some_and(|w| w.boot_id.is_empty())
    {
        return Err(ParseError::Invalid("empty `boot_id`".to_string()));
    }
    Ok(StateRecord {
        namespace: stored.namespace,
        machine_id: stored.machine_id,
        floor_ms: stored.floor_ms,
        written: stored.written,
    })
}

/// A line of the format written before the JSON one: namespace, machine id and floor, then
/// optionally last, wall and boot-time milliseconds and the boot id, separated by tabs. Read
/// only if it is exactly what that format would write for the record it gives, and the
/// namespace has no control character: a namespace holding a tab broke that format.
fn parse_tab_separated(line: &str) -> Option<StateRecord> {
    let mut fields = line.split('\t');
    let namespace = fields.next()?.to_string();
    let machine_id = fields.next()?.parse().ok()?;
    let floor_ms = fields.next()?.parse().ok()?;
    let rest: Vec<&str> = fields.collect();
    let written = match rest.as_slice() {
        [] => None,
        [last, wall, boot, boot_id] if !boot_id.is_empty() => Some(Written {
            last_ms: last.parse().ok()?,
            wall_ms: wall.parse().ok()?,
            boot_ms: boot.parse().ok()?,
            boot_id: boot_id.to_string(),
        }),
        _ => return None,
    };
    let record = StateRecord {
        namespace,
        machine_id,
        floor_ms,
        written,
    };
    let exact = tab_separated_line(&record) == line
        && !record.namespace.is_empty()
        && !record.namespace.contains(char::is_control)
        && !record
            .written
            .as_ref()
            .is_some_and(|w| w.boot_id.contains(char::is_control));
    exact.then_some(record)
}

/// The older format's line for a record, without its newline.
fn tab_separated_line(record: &StateRecord) -> String {
    let head = format!(
        "{}\t{}\t{}",
        record.namespace, record.machine_id, record.floor_ms
    );
    match &record.written {
        Some(w) => format!(
            "{head}\t{}\t{}\t{}\t{}",
            w.last_ms, w.wall_ms, w.boot_ms, w.boot_id
        ),
        None => head,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOOT_ID: &str = "4c0e3b1e-5d1a-4f57-9a51-0c2b8f3e6d2a";

    fn record() -> StateRecord {
        StateRecord {
            namespace: "orders".to_string(),
            machine_id: 7,
            floor_ms: 10_000 + 1_000,
            written: Some(Written {
                last_ms: 10_000,
                wall_ms: 10_050,
                boot_ms: 500_000,
                boot_id: "b1".to_string(),
            }),
        }
    }

    fn round_trips(r: &StateRecord) {
        let line = r.to_line();
        assert_eq!(line.matches('\n').count(), 1, "{line:?}");
        assert!(line.ends_with('\n') && !line.contains('\r'), "{line:?}");
        assert_eq!(
            StateRecord::parse(line.as_bytes()).as_ref(),
            Ok(r),
            "{line:?}"
        );
    }

    #[test]
    fn records_are_one_json_line_and_round_trip() {
        let r = record();
        assert_eq!(
            r.to_line(),
            "{\"cosid_state\":1,\"namespace\":\"orders\",\"machine_id\":7,\"floor_ms\":11000,\
             \"written\":{\"last_ms\":10000,\"wall_ms\":10050,\"boot_ms\":500000,\"boot_id\":\"b1\"}}\n"
        );
        round_trips(&r);
        let exact = StateRecord {
            written: None,
            ..record()
        };
        round_trips(&exact);
        let extremes = StateRecord {
            machine_id: u32::MAX,
            floor_ms: i64::MIN,
            written: Some(Written {
                last_ms: i64::MAX,
                wall_ms: i64::MIN,
                boot_ms: u64::MAX,
                boot_id: BOOT_ID.to_string(),
            }),
            ..record()
        };
        round_trips(&extremes);
    }

    #[test]
    fn every_namespace_round_trips() {
        for namespace in [
            "cosid",
            "it's",
            "say \"hi\"",
            "back\\slash\\",
            "\\t is not a tab",
            "ünïcödé 日本語 🦀",
            "\u{2028}\u{2029}\u{feff}",
            "{\"cosid_state\":1}",
            "a\tb\nc\rd\u{0}\u{1b}\u{7f}\u{85}",
            &"x".repeat(63),
            &"é".repeat(31),
        ] {
            round_trips(&StateRecord {
                namespace: namespace.to_string(),
                ..record()
            });
        }
        // Every character up to U+0FFF (ASCII, the control characters, two-byte UTF-8) and a
        // sample of the rest, with the characters JSON escapes around it.
        let characters = (0..0x1000).chain((0x1000..=0x10FFFF).step_by(97));
        for c in characters.filter_map(char::from_u32) {
            let r = StateRecord {
                namespace: format!("\"{c}\\{c}"),
                written: None,
                ..record()
            };
            let line = r.to_line();
            assert_eq!(StateRecord::parse(line.as_bytes()), Ok(r), "{line:?}");
        }
    }

    #[test]
    fn a_torn_or_foreign_file_is_an_error() {
        let line = record().to_line();
        // Every torn write: each prefix of a record.
        for end in 0..line.len() {
            let torn = &line.as_bytes()[..end];
            assert!(StateRecord::parse(torn).is_err(), "{:?}", &line[..end]);
        }
        assert_eq!(StateRecord::parse(b""), Err(ParseError::Empty));
        assert_eq!(
            StateRecord::parse(line.trim_end().as_bytes()),
            Err(ParseError::Truncated)
        );
        assert_eq!(
            StateRecord::parse(format!("{line}{line}").as_bytes()),
            Err(ParseError::SeveralLines)
        );
        assert_eq!(
            StateRecord::parse(line.replace('\n', "\r\n").as_bytes()),
            Err(ParseError::SeveralLines)
        );
        assert_eq!(
            StateRecord::parse(b"\xff\xfe\x00garbage\n"),
            Err(ParseError::NotText)
        );
        assert_eq!(
            StateRecord::parse(
                line.replace("\"cosid_state\":1", "\"cosid_state\":2")
                    .as_bytes()
            ),
            Err(ParseError::UnknownVersion("2".to_string()))
        );
        for foreign in [
            "\n",
            "garbage\n",
            "[1,2]\n",
            "{}\n",
            "{\"namespace\":\"orders\"}\n",
            "{\"cosid_state\":\"1\",\"namespace\":\"orders\",\"machine_id\":7,\"floor_ms\":1}\n",
            "{\"cosid_state\":1,\"namespace\":\"orders\",\"machine_id\":7}\n",
            "{\"cosid_state\":1,\"namespace\":\"orders\",\"machine_id\":-7,\"floor_ms\":1}\n",
            "{\"cosid_state\":1,\"namespace\":\"orders\",\"machine_id\":7,\"floor_ms\":1.5}\n",
            "{\"cosid_state\":1,\"namespace\":\"orders\",\"machine_id\":7,\"floor_ms\":1,\"x\":0}\n",
            "{\"cosid_state\":1,\"namespace\":\"orders\",\"machine_id\":7,\"floor_ms\":1} {}\n",
            "{\"cosid_state\":1,\"namespace\":\"o\",\"machine_id\":7,\"floor_ms\":1,\
             \"written\":{\"last_ms\":1,\"wall_ms\":1,\"boot_ms\":1,\"boot_id\":\"\"}}\n",
        ] {
            let parsed = StateRecord::parse(foreign.as_bytes());
            assert!(parsed.is_err(), "{foreign:?} gave {parsed:?}");
        }
    }

    #[test]
    fn lines_of_the_older_format_are_read_only_when_exact() {
        let old = StateRecord::parse(b"orders\t7\t11000\n").unwrap();
        assert_eq!(
            old,
            StateRecord {
                written: None,
                ..record()
            }
        );
        let line = format!("orders\t7\t11000\t10000\t10050\t500000\t{BOOT_ID}\n");
        let old = StateRecord::parse(line.as_bytes()).unwrap();
        assert_eq!(old.written.as_ref().unwrap().boot_id, BOOT_ID);
        assert_eq!(old.floor_now_ms(500_300, BOOT_ID), 10_352);
        for inexact in [
            "orders\n",
            "orders\t7\n",
            "orders\tx\t1\n",
            "orders\t7\t1\t2\n",
            "o\t7\t1\t2\t3\t4\t\n",
            "orders\t+7\t11000\n",
            "orders\t07\t11000\n",
            "orders\t7\t011000\n",
            "orders\t7\t11000\t\n",
            "\t7\t11000\n",
            "ord\u{1}ers\t7\t11000\n",
            // A namespace that held a tab: its fields no longer line up.
            "tab\there\t5\t11000\t10000\t10050\t500000\tb1\n",
            "tab\there\t5\t11000\n",
        ] {
            let parsed = StateRecord::parse(inexact.as_bytes());
            assert!(parsed.is_err(), "{inexact:?} gave {parsed:?}");
        }
    }

    #[test]
    fn a_restart_in_the_same_boot_waits_only_for_a_clock_stepped_back() {
        let r = record();
        // 300 ms after the write: ids after it are dated at most 10_350 (+ 2 ms of truncation).
        assert_eq!(r.floor_now_ms(500_300, "b1"), 10_352);
        // Long after, even if the next writes never came: the elapsed time, not the pad, counts
        // (with 1 ms per second of drift).
        assert_eq!(r.floor_now_ms(600_000, "b1"), 10_050 + 100_000 + 100 + 2);
        // Never below what was already issued when it was written.
        let mut behind = record();
        behind.written.as_mut().unwrap().wall_ms = 9_000;
        assert_eq!(behind.floor_now_ms(500_100, "b1"), 10_000);
    }

    #[test]
    fn after_a_reboot_or_without_write_times_only_the_padded_floor_counts() {
        let r = record();
        assert_eq!(r.floor_now_ms(1_000, "b2"), 11_000);
        assert_eq!(
            r.floor_now_ms(400_000, "b1"),
            11_000,
            "boot clock behind the write"
        );
        let mut old = record();
        old.written = None;
        assert_eq!(old.floor_now_ms(500_300, "b1"), 11_000);
    }
}
