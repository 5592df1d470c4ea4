//! The names and namespaces this server's named generators used (`cosid.names` in the data
//! directory): a name keeps its namespace, and a namespace its layout, on this server for good,
//! whatever database `cosid.database` names. The database keeps the same rules in
//! `cosid.generator_name` and `cosid.generator_namespace`, but only for itself: pointed at
//! another database, a server forgot them, and a name created again there with a later epoch
//! issued its ids again. Pure: the caller reads and writes the file.
//!
//! # Format
//!
//! One JSON object on one line, ending with a newline:
//!
//! ```text
//! {"cosid_names":1,"generation":2,"names":{"orders":"orders"},"namespaces":{"orders":{"layout":"epoch 1577203200000 ms, millisecond, 41/10/12 bits","last_ms":1796317688090}}}
//! ```
//!
//! `last_ms` is the latest timestamp of an id the namespace's generators issued on this server,
//! recorded by the postmaster when it throws shared memory away (at its exit, and at a
//! crash-restart), when every process that could issue one is gone: a generator of the namespace
//! opens above it, also where a new lease store hands out its machine id as never used.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The version written in `cosid_names`.
pub const FORMAT_VERSION: u64 = 1;

/// The record of the file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamesRecord {
    pub cosid_names: u64,
    /// How many times this server wrote the file, also kept in the generation file, so that an
    /// older copy put back is told from the last one (see `history::check_generation`).
    pub generation: u64,
    /// Every name a named generator had, with the namespace its ids were issued in.
    pub names: BTreeMap<String, String>,
    /// Every namespace a named generator used, with its layout and last id.
    pub namespaces: BTreeMap<String, UsedNamespace>,
}

/// A namespace a named generator used.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsedNamespace {
    /// Its layout (`protocol::layout_text`).
    pub layout: String,
    /// The latest timestamp of its ids on this server, in Unix milliseconds, when recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_ms: Option<i64>,
}

/// Why a definition cannot run on this server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Conflict {
    /// The name's ids were issued in namespace `earlier`.
    Name { earlier: String },
    /// The namespace's ids have the layout `earlier`.
    Layout { earlier: String },
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Conflict::Name { earlier } => write!(
                f,
                "its name was used with namespace \"{earlier}\" on this server"
            ),
            Conflict::Layout { earlier } => write!(
                f,
                "its namespace was used with another layout on this server ({earlier})"
            ),
        }
    }
}

impl Default for NamesRecord {
    fn default() -> NamesRecord {
        NamesRecord {
            cosid_names: FORMAT_VERSION,
            generation: 0,
            names: BTreeMap::new(),
            namespaces: BTreeMap::new(),
        }
    }
}

impl NamesRecord {
    /// Whether a generator `name` of `namespace` with the layout `layout_text` breaks what the
    /// server's earlier generators left.
    pub fn conflict(&self, name: &str, namespace: &str, layout_text: &str) -> Option<Conflict> {
        if let Some(earlier) = self.names.get(name).filter(|e| *e != namespace) {
            return Some(Conflict::Name {
                earlier: earlier.clone(),
            });
        }
        if let Some(earlier) = self
            .namespaces
            .get(namespace)
            .filter(|used| used.layout != layout_text)
        {
            return Some(Conflict::Layout {
                earlier: earlier.layout.clone(),
            });
        }
        None
    }

    /// Nothing of `namespace` may be issued at or before this Unix millisecond.
    pub fn floor_ms(&self, namespace: &str) -> Option<i64> {
        self.namespaces.get(namespace)?.last_ms
    }

    /// Raises the namespace's last id to `last_ms`; true when the record changed.
    pub fn issued(&mut self, namespace: &str, last_ms: i64) -> bool {
        match self.namespaces.get_mut(namespace) {
            Some(used) if used.last_ms.is_none_or(|known| known < last_ms) => {
                used.last_ms = Some(last_ms);
                true
            }
            _ => false,
        }
    }

    /// Records the definition, which must not conflict; true when the record changed (it must
    /// then be written before the generator issues an id).
    pub fn add(&mut self, name: &str, namespace: &str, layout_text: &str) -> bool {
        let named = self
            .names
            .insert(name.to_string(), namespace.to_string())
            .is_none();
        let used = match self.namespaces.entry(namespace.to_string()) {
            std::collections::btree_map::Entry::Occupied(_) => false,
            std::collections::btree_map::Entry::Vacant(vacant) => {
                vacant.insert(UsedNamespace {
                    layout: layout_text.to_string(),
                    last_ms: None,
                });
                true
            }
        };
        named || used
    }

    pub fn to_line(&self) -> String {
        // Serialising strings and integers cannot fail.
        let mut line = serde_json::to_string(self).unwrap_or_default();
        line.push('\n');
        line
    }

    /// The record of a file's content, exactly, or why not (completing "the file ...").
    pub fn parse(content: &[u8]) -> Result<NamesRecord, String> {
        let text = std::str::from_utf8(content).map_err(|_| "is not UTF-8 text".to_string())?;
        let line = text
            .strip_suffix('\n')
            .ok_or_else(|| "is truncated: it does not end with a newline".to_string())?;
        if line.contains(['\n', '\r']) {
            return Err("holds more than one line".to_string());
        }
        let record: NamesRecord = serde_json::from_str(line)
            .map_err(|why| format!("is not a valid cosid names record: {why}"))?;
        if record.cosid_names != FORMAT_VERSION {
            return Err(format!(
                "has format version {}, which this version of cosid does not read",
                record.cosid_names
            ));
        }
        Ok(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: &str = "epoch 1577203200000 ms, millisecond, 41/10/12 bits";
    const LATER: &str = "epoch 1577203205000 ms, millisecond, 41/10/12 bits";

    #[test]
    fn a_name_keeps_its_namespace_and_a_namespace_its_layout() {
        let mut record = NamesRecord::default();
        assert_eq!(record.conflict("orders", "orders", MS), None);
        assert!(record.add("orders", "orders", MS));
        assert!(!record.add("orders", "orders", MS), "nothing new");
        assert_eq!(record.conflict("orders", "orders", MS), None);
        assert_eq!(
            record.conflict("orders", "orders", LATER),
            Some(Conflict::Layout {
                earlier: MS.to_string()
            })
        );
        assert_eq!(
            record.conflict("orders", "other", MS),
            Some(Conflict::Name {
                earlier: "orders".to_string()
            })
        );
        assert_eq!(
            record.conflict("invoices", "orders", LATER),
            Some(Conflict::Layout {
                earlier: MS.to_string()
            })
        );
        // Another name in the namespace, with its layout, is not a conflict of this record's
        // (the database refuses two live generators in one namespace).
        assert_eq!(record.conflict("invoices", "orders", MS), None);
    }

    #[test]
    fn a_namespace_keeps_its_latest_last_id() {
        let mut record = NamesRecord::default();
        assert!(
            !record.issued("orders", 5),
            "a namespace never used records nothing"
        );
        record.add("orders", "orders", MS);
        assert_eq!(record.floor_ms("orders"), None);
        assert!(record.issued("orders", 5));
        assert!(!record.issued("orders", 3), "a last id never goes down");
        assert!(!record.issued("orders", 5));
        assert_eq!(record.floor_ms("orders"), Some(5));
        assert!(record.add("again", "orders", MS), "a new name");
        assert_eq!(
            record.floor_ms("orders"),
            Some(5),
            "kept by another name's record"
        );
        assert_eq!(record.floor_ms("other"), None);
    }

    #[test]
    fn a_record_reads_back_exactly_and_nothing_else_is_one() {
        let mut record = NamesRecord::default();
        record.add("o\"rders", "ns \u{e9}", MS);
        record.issued("ns \u{e9}", 1_796_317_688_090);
        record.generation = 4;
        let line = record.to_line();
        assert_eq!(NamesRecord::parse(line.as_bytes()), Ok(record));
        assert!(NamesRecord::parse(line.trim_end().as_bytes()).is_err());
        assert!(NamesRecord::parse(b"{}\n").is_err());
        assert!(NamesRecord::parse(
            b"{\"cosid_names\":2,\"generation\":0,\"names\":{},\"namespaces\":{}}\n"
        )
        .is_err());
        assert!(NamesRecord::parse(b"\xff\n").is_err());
    }
}
