//! The local state file, `cosid.state` in the data directory (the working directory of every
//! server process): the floor a restart honours for the machine id this server last used. Written
//! every `cosid.local_state_interval` by a background worker, for a stable leased instance and for
//! a fixed machine id (`manual`, `stateful_set`), which have no lease watermark of their own. The
//! record's format and the floor's rule are in `cosid_core::state_file`.

use crate::clock::{boottime_ms, unix_ms_now};
use crate::state_file::{StateRecord, Written};

const STATE_FILE: &str = "cosid.state";

/// The record for `last_ms`, the last timestamp issued, with `pad_ms` for what may be issued
/// before the next write (after a reboot, the only cover ids issued after this write have).
pub fn record(namespace: &str, machine_id: u32, last_ms: i64, pad_ms: u64) -> StateRecord {
    let boot_id = boot_id();
    // The boot-time clock first: the wall reading is then no earlier than the moment it stands
    // for, and the floor computed from the two is never too low.
    let boot_ms = boottime_ms();
    let wall_ms = unix_ms_now();
    StateRecord {
        namespace: namespace.to_string(),
        machine_id,
        floor_ms: last_ms
            .max(wall_ms)
            .saturating_add(pad_ms.min(i64::MAX as u64 / 2) as i64),
        written: (!boot_id.is_empty()).then_some(Written {
            last_ms,
            wall_ms,
            boot_ms,
            boot_id,
        }),
    }
}

/// The record written once the generator is closed: nothing can be issued after `last_ms`, so
/// the floor is exact, whatever the clocks say later.
pub fn final_record(namespace: &str, machine_id: u32, last_ms: i64) -> StateRecord {
    StateRecord {
        namespace: namespace.to_string(),
        machine_id,
        floor_ms: last_ms,
        written: None,
    }
}

/// Writes the record so that it survives a crash of the machine: a new file, flushed, renamed
/// over the old one, and the directory flushed. The error names the file.
pub fn write(record: &StateRecord) -> Result<(), String> {
    write_durably(record)
        .map_err(|why| format!("could not write the state file \"{STATE_FILE}\": {why}"))
}

fn write_durably(record: &StateRecord) -> std::io::Result<()> {
    use std::io::Write;
    let temporary = format!("{STATE_FILE}.tmp");
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(record.to_line().as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&temporary, STATE_FILE)?;
    std::fs::File::open(".")?.sync_all()
}

/// The floor to honour now for `machine_id` of `namespace`, if the file holds one for it.
pub fn floor_ms(namespace: &str, machine_id: u32) -> Option<i64> {
    let record = StateRecord::parse(&std::fs::read_to_string(STATE_FILE).ok()?)?;
    (record.namespace == namespace && record.machine_id == machine_id)
        .then(|| record.floor_now_ms(boottime_ms(), &boot_id()))
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|id| id.trim().to_string())
        .unwrap_or_default()
}
