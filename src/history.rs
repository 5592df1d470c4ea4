//! The default generator's history file, `cosid.history` in the data directory: the namespace
//! and layout its ids were issued under, and their last id at a clean stop, so that a server
//! restarted with another `cosid.namespace` or layout never repeats them. The rule and the
//! record are in `cosid_core::history`; this file reads and writes it, in the postmaster only:
//! once when shared memory is (re)initialised, before any backend exists, and once when the
//! postmaster exits, after every backend is gone.
//!
//! A file that cannot be read exactly is a history nobody knows: the default generator refuses,
//! as for a state file. The postmaster keeps, across crash-restarts of the segment, the latest
//! timestamp any segment held, so that a clean stop after a crash records every id since the
//! server started.

use crate::host::unix_ms_now;
use crate::local_state;
use cosid_core::history::{self, HistoryRecord, Verdict};
use cosid_core::layout::Layout;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;

pub use crate::local_state::{GENERATION_FILE, HISTORY_FILE};
use cosid_core::history::GenerationRecord;

/// The postmaster's record of the definition in use, and the latest timestamp a segment that
/// was thrown away held (crash-restarts).
struct Running {
    record: HistoryRecord,
    layout: Layout,
    last_ms: i64,
}

static RUNNING: Mutex<Option<Running>> = Mutex::new(None);

/// What the history says of the default generator at this (re)initialisation.
pub enum Opening {
    /// Open as usual, with nothing issued at or before this Unix millisecond, if any.
    Generate(Option<i64>),
    /// Never open: the definition could repeat ids. The reason, for the status.
    Refuse(String),
    /// Never open: the file cannot be read or written. The reason, for the status.
    Unusable(String),
}

/// Reads the history, decides, and records the definition in use before any id of it can be
/// issued. In the postmaster's shared-memory startup hook.
/// Set in the postmaster (and so in every process it starts) when the server did not stop
/// cleanly while it leased from the lease table of a database it no longer leases from: the
/// database's name. No leased generator may open then (`leases_left_behind`).
static LEASES_LEFT_BEHIND: Mutex<Option<String>> = Mutex::new(None);

/// The database whose lease table holds the only floors of ids issued before the server's last
/// crash, when the server now leases elsewhere: no generator runs until it stopped cleanly with it.
pub fn leases_left_behind() -> Option<String> {
    LEASES_LEFT_BEHIND.lock().map_or(None, |left| left.clone())
}

/// `before_recording` is what else can refuse the definition (the server's record of its named
/// generators): asked after the checks that stop more than the default generator, and before the
/// definition is recorded, since a definition refused issues nothing, and recorded it would be a
/// change the next start has to wait out.
pub fn open_default(
    namespace: &str,
    layout: &Layout,
    leases_in: Option<&str>,
    before_recording: impl FnOnce() -> Result<(), Opening>,
) -> Opening {
    // SAFETY: plain flags the postmaster set before loading libraries.
    let (under_postmaster, binary_upgrade) =
        unsafe { (pg_sys::IsUnderPostmaster, pg_sys::IsBinaryUpgrade) };
    // Only the postmaster keeps the history: a child that runs the startup hook itself
    // (EXEC_BACKEND builds) finds the segment made, and must neither write nor register an exit
    // of its own. pg_upgrade's servers issue no id, and the old server's history is copied over
    // (docs/upgrading.md).
    if under_postmaster || binary_upgrade {
        return before_recording().map_or_else(|refused| refused, |()| Opening::Generate(None));
    }
    let previous = match read() {
        Ok(previous) => previous,
        Err(why) => return Opening::Unusable(why),
    };
    if let Some(database) = history::leases_left_behind(previous.as_ref(), leases_in) {
        let why = format!(
            "the server did not stop cleanly while it leased its machine ids from the lease table of database \"{database}\", which it no longer leases from: the watermarks there are the only floors of the ids issued since, and machine ids would be new elsewhere"
        );
        *LEASES_LEFT_BEHIND
            .lock()
            .unwrap_or_else(|poison| poison.into_inner()) = Some(database);
        return Opening::Refuse(why);
    }
    if let Err(refused) = before_recording() {
        // A crash-restart of a segment in which the definition ran: its last id is still
        // recorded at the postmaster's exit, as it would have been.
        if RUNNING.lock().map_or(true, |running| running.is_some()) {
            register_exit_callback();
        }
        return refused;
    }
    match history::verdict(previous.as_ref(), namespace, layout, unix_ms_now()) {
        Verdict::Generate { floor_ms, record } => {
            let record = record
                .numbered(previous.as_ref().map_or(0, |p| p.generation))
                .leasing_in(leases_in);
            // A crash-restart finds its own record: no write, so that a full disk, a common
            // cause of crashes, does not keep the generator closed once space is freed.
            if previous.as_ref() != Some(&record) {
                if let Err(why) = write(&record) {
                    return Opening::Unusable(why);
                }
            }
            let mut running = RUNNING.lock().unwrap_or_else(|poison| poison.into_inner());
            // What earlier segments of this postmaster issued, and what the record carries.
            let last_ms = running
                .as_ref()
                .map_or(i64::MIN, |r| r.last_ms)
                .max(floor_ms.unwrap_or(i64::MIN));
            *running = Some(Running {
                record,
                layout: *layout,
                last_ms,
            });
            drop(running);
            register_exit_callback();
            Opening::Generate(floor_ms)
        }
        Verdict::LastIdUnknown { previous } => Opening::Refuse(format!(
            "the default generator's namespace or layout changed (it was namespace \"{}\", {}), \
             and the last id issued under the old one is unknown: the server did not stop cleanly \
             with those settings",
            previous.namespace,
            previous.layout.describe()
        )),
        Verdict::NeverAbove { previous } => Opening::Refuse(format!(
            "the default generator's layout changed (it was namespace \"{}\", {}), and no id of \
             the new layout is above the ids issued under the old one",
            previous.namespace,
            previous.layout.describe()
        )),
        Verdict::TooFar { previous, floor_ms } => Opening::Refuse(format!(
            "the default generator's namespace or layout changed (it was namespace \"{}\", {}), \
             and the ids of the new one are above those issued under the old one only after {}, \
             more than a day from now",
            previous.namespace,
            previous.layout.describe(),
            cosid_core::layout::format_unix_ms(floor_ms)
        )),
    }
}

/// The namespaces the default generator ever issued ids in: its namespace now, those its
/// history records, and those `cosid.default_namespace` in `cosid.database` records (the
/// copy a standby, a point-in-time recovery or `pg_upgrade` carries, where the file stays
/// behind). A named generator in one could repeat them, whatever its layout or machine id.
pub struct DefaultNamespaces {
    current: String,
    recorded: Vec<String>,
    history: Result<Option<HistoryRecord>, String>,
}

impl DefaultNamespaces {
    /// Reads the history once, for any number of questions; `recorded` is what
    /// [`recorded_in_database`] read.
    pub fn read(current: &str, recorded: Vec<String>) -> DefaultNamespaces {
        DefaultNamespaces {
            current: current.to_string(),
            recorded,
            history: read(),
        }
    }

    /// Whether the default generator used `namespace`; a history that cannot be read answers
    /// with why, unless the database's record says so already.
    pub fn used(&self, namespace: &str) -> Result<bool, String> {
        if namespace == self.current || self.recorded.iter().any(|used| used == namespace) {
            return Ok(true);
        }
        match &self.history {
            Ok(record) => Ok(record.as_ref().is_some_and(|r| r.used(namespace))),
            Err(why) => Err(why.clone()),
        }
    }
}

/// The record in the history file: `None` when there is none (the first start). A file the
/// generation file says is not the last one written (deleted, or an older copy put back) is a
/// history nobody knows, for every reader alike: the default generator's opening, and the
/// checks of a named generator's namespace.
pub fn read() -> Result<Option<HistoryRecord>, String> {
    // The number first: a write between the two reads then leaves a file newer than the number,
    // which is trusted, never one that looks older.
    let written = read_generation()?.map(|generation| generation.generation);
    let record = read_file()?;
    history::check_generation(record.as_ref().map(|r| r.generation), written).map_err(
        |not_the_last| {
            format!(
                "the history file \"{}\" {not_the_last} (\"{}\")",
                local_state::path(HISTORY_FILE),
                local_state::path(GENERATION_FILE)
            )
        },
    )?;
    Ok(record)
}

/// The history file's record as it is, unchecked against the generation file.
fn read_file() -> Result<Option<HistoryRecord>, String> {
    match std::fs::read(HISTORY_FILE) {
        Ok(content) => HistoryRecord::parse(&content).map(Some).map_err(|why| {
            format!(
                "the history file \"{}\" {why}",
                local_state::path(HISTORY_FILE)
            )
        }),
        // pg_upgrade copies no file of ours: in the data directory it made, a missing history
        // is the old server's, not a first start, until the mark is deleted.
        Err(why)
            if why.kind() == std::io::ErrorKind::NotFound
                && local_state::missing_after_upgrade(HISTORY_FILE) =>
        {
            Err(format!(
                "the history file \"{}\" is missing, and \"{}\" says that pg_upgrade made this \
                 data directory: the history is in the old one's",
                local_state::path(HISTORY_FILE),
                local_state::UPGRADE_MARKER
            ))
        }
        Err(why) if why.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(why) => Err(format!(
            "the history file \"{}\" could not be read: {why}",
            local_state::path(HISTORY_FILE)
        )),
    }
}

/// The generation file's record: `None` when there is none.
pub fn read_generation() -> Result<Option<GenerationRecord>, String> {
    match std::fs::read(GENERATION_FILE) {
        Ok(content) => GenerationRecord::parse(&content).map(Some).map_err(|why| {
            format!(
                "the generation file \"{}\" {why}",
                local_state::path(GENERATION_FILE)
            )
        }),
        Err(why) if why.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(why) => Err(format!(
            "the generation file \"{}\" could not be read: {why}",
            local_state::path(GENERATION_FILE)
        )),
    }
}

/// Writes `record` as the history's next generation: the history first, then the generation
/// file, so that a stop between the two leaves a history newer than the number, which is
/// trusted, never one older.
fn write(record: &HistoryRecord) -> Result<(), String> {
    let written = read_generation()?.unwrap_or(GenerationRecord::new(0, 0));
    let generation = written.generation.max(record.generation).saturating_add(1);
    local_state::write_line_durably(HISTORY_FILE, &record.numbered(generation).to_line()).map_err(
        |why| {
            format!(
                "could not write the history file \"{}\": {why}",
                local_state::path(HISTORY_FILE)
            )
        },
    )?;
    write_generation(&GenerationRecord {
        generation,
        ..written
    })
}

/// Writes the generation file, after the file whose number it records. Only the postmaster
/// (the history, when no other process of the server runs) and the process that manages named
/// generators (the names file) write it, never at once.
pub fn write_generation(record: &GenerationRecord) -> Result<(), String> {
    local_state::write_line_durably(GENERATION_FILE, &record.to_line()).map_err(|why| {
        format!(
            "could not write the generation file \"{}\": {why}",
            local_state::path(GENERATION_FILE)
        )
    })
}

fn register_exit_callback() {
    // SAFETY: called in the postmaster's startup hook; the callback list is the postmaster's
    // own, and it empties it when it throws the segment away (crash-restart), so each
    // initialisation registers once.
    unsafe { pg_sys::on_shmem_exit(Some(at_exit), pg_sys::Datum::from(0)) }
}

/// The postmaster's exit (code 0, every backend gone) records the last id of the definition;
/// a segment thrown away after a crash (any other code) only adds its last timestamp to what
/// the postmaster remembers. Registered after the segment was attached, so it runs while the
/// segment still is.
#[pg_guard]
unsafe extern "C-unwind" fn at_exit(code: std::os::raw::c_int, _arg: pg_sys::Datum) {
    let Ok(slot) = crate::shmem::default_generator() else {
        return;
    };
    let mut running = RUNNING.lock().unwrap_or_else(|poison| poison.into_inner());
    let Some(running) = running.as_mut() else {
        return;
    };
    // The segment's last id, or its floor; and the clock: every id was issued before the exit,
    // unless the clock was stepped back meanwhile, which the segment's last id covers.
    let segment_last_ms = slot.state.last_timestamp_ms(&running.layout);
    running.last_ms = running.last_ms.max(segment_last_ms).max(unix_ms_now());
    if code != 0 {
        return;
    }
    // A failed write leaves the record "running": a later change of definition is refused,
    // never let through.
    if let Err(why) = write(&running.record.stopped(running.last_ms)) {
        log!("cosid: {why}");
    }
}

/// The Unix millisecond from which the default generator may issue ids, when that is still
/// ahead of the clock: for a refusal's message and for the lease worker, which claims no
/// machine id long before it can use it.
pub fn floor_ahead_ms(slot: &crate::shmem::GeneratorSlot) -> Option<i64> {
    let floor_ticks = slot.state.history_floor_ticks();
    if floor_ticks == 0 {
        return None;
    }
    let layout = slot.config().layout;
    // Only the tick the segment was made in: a clock behind it moved backwards, and says so.
    if layout
        .unix_ms_to_ticks(crate::shmem::made_at_ms())
        .is_ok_and(|made_at_ticks| floor_ticks <= made_at_ticks)
    {
        return None;
    }
    // The first tick an id may have is the one after the floor's.
    let first_ms = layout.ticks_to_unix_ms(floor_ticks.saturating_add(1).min(layout.max_ticks()));
    (first_ms > unix_ms_now()).then_some(first_ms)
}

/// The oid of `cosid.default_namespace` if it is the extension's own table in this database (a
/// role that may create schemas could otherwise plant one that a superuser session would
/// write to), else none.
const RECORD_TABLE_INSTALLED: &str =
    "SELECT (SELECT c.oid::pg_catalog.int8 FROM pg_catalog.pg_depend d \
     JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid \
     JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) d.objid \
     JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
     WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass \
     AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass \
     AND d.deptype OPERATOR(pg_catalog.=) 'e' AND e.extname OPERATOR(pg_catalog.=) 'cosid' \
     AND c.relkind OPERATOR(pg_catalog.=) 'r' AND n.nspname OPERATOR(pg_catalog.=) 'cosid' \
     AND c.relname OPERATOR(pg_catalog.=) 'default_namespace')";

/// The oid of the `cosid.default_namespace` this process copied the history's definitions into
/// (0: none yet): the history changes only as the server starts and stops, and a table made
/// again (`DROP EXTENSION`, then `CREATE EXTENSION`) is copied into again.
static RECORDED_IN_DATABASE: AtomicI64 = AtomicI64::new(0);

/// Copies every namespace and layout the history records into `cosid.default_namespace` of
/// `cosid.database`, once per process, by the process that manages named generators: WAL
/// carries the table where the file stays behind (a physical standby and its promotion, a
/// point-in-time recovery, `pg_upgrade`, a restore of both files from an older backup), and a
/// named generator is never created, nor run, in one of its namespaces. Nothing on a standby,
/// whose table follows its primary's, nor while the extension is not installed there (tried
/// again at the next call). A history that cannot be read copies nothing: the default
/// generator refuses then.
pub fn record_in_database() -> Result<(), String> {
    // SAFETY: RecoveryInProgress only reads shared state.
    if unsafe { pg_sys::RecoveryInProgress() } {
        return Ok(());
    }
    let Ok(Some(record)) = read() else {
        return Ok(());
    };
    // SAFETY: reads the encoding of the database this process is connected to.
    let utf8 = unsafe { pg_sys::GetDatabaseEncoding() } == pg_sys::pg_enc::PG_UTF8 as i32;
    // In a database whose encoding is not UTF8 a named generator's namespace is ASCII
    // (`check_namespace`): no other namespace can be refused there, nor stored as it is.
    let definitions: Vec<(String, String)> = record
        .definitions()
        .into_iter()
        .filter(|(namespace, _)| utf8 || namespace.is_ascii())
        .map(|(namespace, layout)| (namespace.to_string(), layout.describe()))
        .collect();
    let recorded = RECORDED_IN_DATABASE.load(Ordering::Relaxed);
    let written = crate::store::local::in_transaction(
        std::time::Duration::from_millis(500),
        move |client| {
            let table = record_table_installed(client)?;
            if table == 0 || table == recorded {
                return Ok(table);
            }
            // Committed only once a synchronous standby has it too: a failover to it must not
            // forget what the primary issued ids in.
            client
                .update("SET LOCAL synchronous_commit = on", None, &[])
                .map_err(|e| e.to_string())?;
            for (namespace, layout) in &definitions {
                let args: Vec<pgrx::datum::DatumWithOid> =
                    vec![namespace.as_str().into(), layout.as_str().into()];
                client
                    .update(
                        "INSERT INTO cosid.default_namespace (namespace, layout) \
                         SELECT $1, $2 WHERE NOT EXISTS (SELECT FROM cosid.default_namespace \
                         WHERE namespace OPERATOR(pg_catalog.=) $1 \
                         AND layout OPERATOR(pg_catalog.=) $2)",
                        None,
                        &args,
                    )
                    .map_err(|e| e.to_string())?;
            }
            Ok(table)
        },
    )?;
    RECORDED_IN_DATABASE.store(written, Ordering::Relaxed);
    Ok(())
}

/// The oid of the extension's `cosid.default_namespace` here, 0 when there is none.
fn record_table_installed(client: &SpiClient<'_>) -> Result<i64, String> {
    Ok(client
        .select(RECORD_TABLE_INSTALLED, None, &[])
        .map_err(|e| e.to_string())?
        .first()
        .get::<i64>(1)
        .map_err(|e| e.to_string())?
        .unwrap_or(0))
}

/// The namespaces `cosid.default_namespace` records, in this database's transaction (none where
/// the extension's table is not installed).
pub fn recorded_in_database(client: &SpiClient<'_>) -> Result<Vec<String>, String> {
    if record_table_installed(client)? == 0 {
        return Ok(Vec::new());
    }
    let mut namespaces = Vec::new();
    // As UTF-8 whatever the database's encoding.
    for row in client
        .select(
            "SELECT DISTINCT pg_catalog.convert_to(namespace, 'UTF8') \
             FROM cosid.default_namespace",
            None,
            &[],
        )
        .map_err(|e| e.to_string())?
    {
        if let Some(bytes) = row.get::<Vec<u8>>(1).map_err(|e| e.to_string())? {
            namespaces.push(String::from_utf8_lossy(&bytes).into_owned());
        }
    }
    Ok(namespaces)
}
