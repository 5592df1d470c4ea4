//! What a server remembers of its shared lease store's history: the latest timeline it saw the
//! store on. A promotion puts the store on a new timeline; an old primary left running (a split
//! brain), or started again after the failover (a failback), answers on the older one and has
//! not seen what was written on the new one. A server that saw the newer timeline never takes
//! the older one as its store again: it refuses that host, and says why. The memory is kept in
//! the data directory (`cosid.store_timeline`), so that a restart keeps it too.
//!
//! The store says who it is with `cosid.lease_store_identity()` (`sql/lease_store.sql`): its
//! system identifier, database, lease table, timeline and start. Only the system identifier and
//! the timeline are compared: another cluster (a new system identifier) is another store, whose
//! own record of its identity makes it settle.

use serde::{Deserialize, Serialize};

/// The file in the data directory.
pub const FILE: &str = "cosid.store_timeline";

/// The latest timeline seen, of the store with that system identifier.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimelineSeen {
    pub system: String,
    pub timeline: u64,
}

/// What to make of a host's identity, given what this server saw before.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Judgement {
    /// The timeline already remembered.
    Same,
    /// A newer timeline, or another store: to remember from now on.
    Newer(TimelineSeen),
    /// An older timeline of the store remembered: refused.
    Older { found: u64, seen: u64 },
}

/// The system identifier and timeline of an identity as `cosid.lease_store_identity()` writes
/// it ("system S, database D, lease table T, timeline N, started P"); `None` for any other text.
pub fn parse_identity(text: &str) -> Option<TimelineSeen> {
    let mut system = None;
    let mut timeline = None;
    for part in text.split(", ") {
        if let Some(value) = part.strip_prefix("system ") {
            system = Some(value.to_string());
        } else if let Some(value) = part.strip_prefix("timeline ") {
            timeline = value.parse().ok();
        }
    }
    Some(TimelineSeen {
        system: system.filter(|s| !s.is_empty())?,
        timeline: timeline?,
    })
}

/// Judges `found` against what was seen before (`None`: nothing).
pub fn judge(seen: Option<&TimelineSeen>, found: &TimelineSeen) -> Judgement {
    match seen {
        Some(seen) if seen.system == found.system => {
            if found.timeline == seen.timeline {
                Judgement::Same
            } else if found.timeline > seen.timeline {
                Judgement::Newer(found.clone())
            } else {
                Judgement::Older {
                    found: found.timeline,
                    seen: seen.timeline,
                }
            }
        }
        _ => Judgement::Newer(found.clone()),
    }
}

/// The file's text for `seen`.
pub fn to_text(seen: &TimelineSeen) -> String {
    let mut text = serde_json::to_string(seen).expect("a record of strings and numbers");
    text.push('\n');
    text
}

/// The record a file holds; an error says what is wrong with it.
pub fn from_text(text: &str) -> Result<TimelineSeen, String> {
    if !text.ends_with('\n') {
        return Err("is truncated: it does not end with a newline".to_string());
    }
    serde_json::from_str(text.trim_end()).map_err(|why| format!("cannot be read: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(system: &str, timeline: u64) -> TimelineSeen {
        TimelineSeen {
            system: system.to_string(),
            timeline,
        }
    }

    #[test]
    fn identities_are_read_for_their_system_and_timeline() {
        assert_eq!(
            parse_identity(
                "system 7715172090487888236, database 5, lease table 16387, timeline 3, started 1796328484150682"
            ),
            Some(seen("7715172090487888236", 3))
        );
        assert_eq!(
            parse_identity("system 1, timeline 1, database 1"),
            Some(seen("1", 1))
        );
        for malformed in [
            "",
            "system , timeline 1",
            "system 1, timeline x",
            "timeline 2",
        ] {
            assert_eq!(parse_identity(malformed), None, "{malformed}");
        }
    }

    #[test]
    fn an_older_timeline_of_the_same_store_is_refused_and_anything_newer_remembered() {
        let before = seen("42", 2);
        assert_eq!(judge(Some(&before), &seen("42", 2)), Judgement::Same);
        assert_eq!(
            judge(Some(&before), &seen("42", 1)),
            Judgement::Older { found: 1, seen: 2 }
        );
        assert_eq!(
            judge(Some(&before), &seen("42", 3)),
            Judgement::Newer(seen("42", 3))
        );
        // Another cluster is another store: its own record makes it settle.
        assert_eq!(
            judge(Some(&before), &seen("43", 1)),
            Judgement::Newer(seen("43", 1))
        );
        assert_eq!(judge(None, &seen("42", 1)), Judgement::Newer(seen("42", 1)));
    }

    #[test]
    fn the_file_is_read_back_and_a_damaged_one_is_an_error() {
        let record = seen("42", 7);
        assert_eq!(from_text(&to_text(&record)), Ok(record));
        assert!(from_text("{\"system\":\"42\",\"timeline\":7}").is_err());
        assert!(from_text("{\"system\":\"42\"}\n").is_err());
        assert!(from_text("\n").is_err());
    }
}
