//! The local state file, `cosid.state` in the data directory (the working directory of every
//! server process): the floor a restart honours for the machine id this server last used. Written
//! every `cosid.local_state_interval` by a background worker, for a stable leased instance and for
//! a fixed machine id (`manual`, `stateful_set`), which have no lease watermark of their own. The
//! record's format and the floor's rule are in `cosid_core::state_file`.
//!
//! No file means no floor (the first start). A file that cannot be read exactly means an unknown
//! floor: the callers refuse to generate (fixed machine id) or to claim (stable instance), and
//! nothing writes over it. So does a missing file in a data directory that pg_upgrade made,
//! since pg_upgrade copies no file of ours: `cosid.upgraded` says so (`mark_upgraded`).

use crate::host::{boottime_ms, unix_ms_now};
use cosid_core::layout::Layout;
use cosid_core::state_file::{StateRecord, Written};

const STATE_FILE: &str = "cosid.state";

/// Left in a data directory by a server that pg_upgrade runs, whose state files pg_upgrade does
/// not copy: while it is there, a missing state file is an unknown floor, not a first start.
pub const UPGRADE_MARKER: &str = "cosid.upgraded";

/// The default generator's history (`history.rs`), named here with the data directory's other
/// files of ours, which `mark_upgraded` puts aside.
pub const HISTORY_FILE: &str = "cosid.history";

/// The number of the history's and the names file's last writes (`history.rs`), in a file of
/// its own.
pub const GENERATION_FILE: &str = "cosid.generation";

/// The names and namespaces of the server's named generators (`names.rs`).
pub const NAMES_FILE: &str = "cosid.names";

/// Every file of ours in the data directory but the namespaces' state files (`cosid.state.<hex>`):
/// pg_upgrade copies none of them.
const FILES_OF_OURS: [&str; 5] = [
    STATE_FILE,
    HISTORY_FILE,
    GENERATION_FILE,
    NAMES_FILE,
    cosid_core::store_timeline::FILE,
];

/// What an operator copies from the old data directory into the new one before deleting the
/// mark, in the words of the messages that say so: every file of ours.
pub fn copied_after_upgrade() -> String {
    let mut files: Vec<String> = FILES_OF_OURS.iter().map(|file| file.to_string()).collect();
    files.insert(1, format!("{STATE_FILE}.*"));
    let last = files.pop().unwrap_or_default();
    format!(
        "{} and {last} (those of them the old directory has)",
        files.join(", ")
    )
}

/// Marks the new data directory of a pg_upgrade: the server runs in binary-upgrade mode, and
/// pg_upgrade keeps its output there (`pg_upgrade_output.d`, since PostgreSQL 15), not in the
/// old cluster's. pg_upgrade loads the library into the new cluster to check it, and preloads it
/// when the cluster's settings say so; the first time marks the directory. A state file the new
/// cluster wrote before (started once before the upgrade) is not this server's floor any more:
/// it is put aside, so that only the old cluster's files, copied over, can give one. So is the
/// default generator's history (`cosid.history`), which is the old cluster's to give, and every
/// other file of ours.
pub fn mark_upgraded() -> Result<(), String> {
    use std::path::Path;
    if !Path::new("pg_upgrade_output.d").exists() || Path::new(UPGRADE_MARKER).exists() {
        return Ok(());
    }
    let directory = std::fs::read_dir(".")
        .map_err(|why| format!("could not read the data directory: {why}"))?;
    for entry in directory.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let hex_suffix = name
            .strip_prefix(&format!("{STATE_FILE}."))
            .is_some_and(|hex| !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()));
        if FILES_OF_OURS.contains(&name.as_str()) || hex_suffix {
            let aside = format!("{name}.before-pg_upgrade");
            std::fs::rename(&name, &aside).map_err(|why| {
                format!("could not rename \"{}\" to \"{aside}\": {why}", path(&name))
            })?;
        }
    }
    let note = format!(
        "This data directory was made by pg_upgrade, which does not copy cosid's files. Copy \
         {} from the old data directory, then delete this file, last \
         (see docs/upgrading.md).\n",
        copied_after_upgrade()
    );
    std::fs::write(UPGRADE_MARKER, note)
        .map_err(|why| format!("could not write \"{}\": {why}", path(UPGRADE_MARKER)))
}

/// Whether `file` is missing from a data directory that pg_upgrade made.
pub fn missing_after_upgrade(file: &str) -> bool {
    !std::path::Path::new(file).exists() && std::path::Path::new(UPGRADE_MARKER).exists()
}

/// The state file of a named generator's namespace (`None`: the default generator's),
/// `cosid.state.<namespace in hex>`: hex, so that any namespace makes a plain file name.
pub fn file_for(namespace: Option<&str>) -> String {
    match namespace {
        None => STATE_FILE.to_string(),
        Some(namespace) => {
            let hex: String = namespace
                .bytes()
                .map(|byte| format!("{byte:02x}"))
                .collect();
            format!("{STATE_FILE}.{hex}")
        }
    }
}

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
pub fn write(file: &str, record: &StateRecord) -> Result<(), String> {
    write_line_durably(file, &record.to_line())
        .map_err(|why| format!("could not write the state file \"{file}\": {why}"))
}

/// Writes `line` as the whole file, so that it survives a crash of the machine: a new file,
/// flushed, renamed over the old one, and the directory flushed.
pub fn write_line_durably(file_name: &str, line: &str) -> std::io::Result<()> {
    use std::io::Write;
    let temporary = format!("{file_name}.tmp");
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(line.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&temporary, file_name)?;
    std::fs::File::open(".")?.sync_all()
}

/// Why the state file cannot be used: the floor it holds is unknown, so nothing may be issued
/// under the machine id it protects until the file is restored or deliberately removed.
#[derive(Clone, Debug)]
pub struct Unusable {
    pub file: String,
    /// Completes "the state file …", e.g. "is truncated: it does not end with a newline".
    pub reason: String,
}

impl std::fmt::Display for Unusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the state file \"{}\" {}", path(&self.file), self.reason)
    }
}

/// The state file's path: absolute, since every server process runs in the data directory.
pub fn path(file: &str) -> String {
    std::env::current_dir()
        .map(|directory| directory.join(file).display().to_string())
        .unwrap_or_else(|_| file.to_string())
}

/// The record in the state file: `None` when there is no file (the first start). A file that
/// cannot be read, or is not exactly one record, is an error.
pub fn read(file: &str) -> Result<Option<StateRecord>, Unusable> {
    let content = match std::fs::read(file) {
        Ok(content) => content,
        Err(why) if why.kind() == std::io::ErrorKind::NotFound => {
            if !std::path::Path::new(UPGRADE_MARKER).exists() {
                return Ok(None);
            }
            return Err(Unusable {
                file: file.to_string(),
                reason: format!(
                    "is missing, and \"{UPGRADE_MARKER}\" says that pg_upgrade made this data \
                     directory: the floor is in the old one's"
                ),
            });
        }
        Err(why) => {
            return Err(Unusable {
                file: file.to_string(),
                reason: format!("could not be read: {why}"),
            })
        }
    };
    StateRecord::parse(&content)
        .map(Some)
        .map_err(|why| Unusable {
            file: file.to_string(),
            reason: why.to_string(),
        })
}

/// The floor to honour now for `machine_id` of `namespace`, if `record` is for them: a record
/// of another namespace or machine id says nothing about this one (the configuration changed).
fn floor_ms(record: Option<&StateRecord>, namespace: &str, machine_id: u32) -> Option<i64> {
    let record = record?;
    record
        .is_for(namespace, machine_id)
        .then(|| floor_now_ms(record))
}

/// The floor a fixed machine id (`manual`, `stateful_set`) opens above, in ticks of `layout`: the
/// durable floor the state writer left, so that ids issued before a crash stay below everything
/// issued after it, even if the clock was stepped back meanwhile; and the current tick, so that
/// nothing is issued in the tick in which the server was (re)initialised.
pub fn fixed_floor_ticks(
    file: &str,
    layout: &Layout,
    namespace: &str,
    machine_id: u32,
) -> Result<u64, Unusable> {
    let record = read(file)?;
    let now_ticks = layout.unix_ms_to_ticks(unix_ms_now()).unwrap_or(0);
    Ok(floor_ms(record.as_ref(), namespace, machine_id)
        .and_then(|floor_ms| layout.unix_ms_to_ticks(floor_ms).ok())
        .map_or(now_ticks, |floor| floor.max(now_ticks)))
}

/// The floor `record` stands for now, on this boot and these clocks.
pub fn floor_now_ms(record: &StateRecord) -> i64 {
    record.floor_now_ms(boottime_ms(), &boot_id())
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|id| id.trim().to_string())
        .unwrap_or_default()
}
