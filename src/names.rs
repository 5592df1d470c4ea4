//! The names and namespaces of this server's named generators, `cosid.names` in the data
//! directory, kept whatever database `cosid.database` names (the rules and the record are in
//! `cosid_core::names`). Only the process that manages named generators writes it, before it
//! runs a definition it has not recorded yet; backends read it to refuse such a definition when
//! it is created. A file that cannot be read exactly, or that is older than the generation file
//! says, is a record nobody knows: no named generator runs, and none is created.

use crate::history;
use crate::local_state::{self, NAMES_FILE};
use cosid_core::names::NamesRecord;

/// The record: an empty one when there is no file and none was written.
pub fn read() -> Result<NamesRecord, String> {
    // The number first: a write between the two reads then leaves a file newer than the number,
    // which is trusted, never one that looks older.
    let written = history::read_generation()?.map(|generation| generation.names);
    let record = match std::fs::read(NAMES_FILE) {
        Ok(content) => Some(NamesRecord::parse(&content).map_err(|why| {
            format!("the names file \"{}\" {why}", local_state::path(NAMES_FILE))
        })?),
        // pg_upgrade copies no file of ours: in the data directory it made, a missing record is
        // the old server's, not a first start, until the mark is deleted.
        Err(why)
            if why.kind() == std::io::ErrorKind::NotFound
                && local_state::missing_after_upgrade(NAMES_FILE) =>
        {
            return Err(format!(
                "the names file \"{}\" is missing, and \"{}\" says that pg_upgrade made this \
                 data directory: the record is in the old one's",
                local_state::path(NAMES_FILE),
                local_state::UPGRADE_MARKER
            ))
        }
        Err(why) if why.kind() == std::io::ErrorKind::NotFound => None,
        Err(why) => {
            return Err(format!(
                "the names file \"{}\" could not be read: {why}",
                local_state::path(NAMES_FILE)
            ))
        }
    };
    cosid_core::history::check_generation(record.as_ref().map(|r| r.generation), written).map_err(
        |not_the_last| {
            format!(
                "the names file \"{}\" {not_the_last} (\"{}\")",
                local_state::path(NAMES_FILE),
                local_state::path(local_state::GENERATION_FILE)
            )
        },
    )?;
    Ok(record.unwrap_or_default())
}

/// Writes `record` as the names file's next generation: the file first, then the generation
/// file. In the process that manages named generators only.
pub fn write(record: &NamesRecord) -> Result<(), String> {
    let written =
        history::read_generation()?.unwrap_or(cosid_core::history::GenerationRecord::new(0, 0));
    let generation = written.names.max(record.generation).saturating_add(1);
    let numbered = NamesRecord {
        generation,
        ..record.clone()
    };
    local_state::write_line_durably(NAMES_FILE, &numbered.to_line()).map_err(|why| {
        format!(
            "could not write the names file \"{}\": {why}",
            local_state::path(NAMES_FILE)
        )
    })?;
    history::write_generation(&cosid_core::history::GenerationRecord {
        names: generation,
        ..written
    })
}

/// Records the latest timestamp each namespace's generators issued (or held as a floor), in the
/// postmaster as it throws shared memory away, when no other process of the server runs. A
/// record that cannot be read or written is left as it is: the lease store and the state files
/// still hold those floors in `cosid.database` and the data directory.
pub fn record_last_ids(issued: &[(String, i64)]) {
    let Ok(mut record) = read() else {
        return;
    };
    let mut changed = false;
    for (namespace, last_ms) in issued {
        changed |= record.issued(namespace, *last_ms);
    }
    if changed {
        if let Err(why) = write(&record) {
            pgrx::log!("cosid: {why}");
        }
    }
}
