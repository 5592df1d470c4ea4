//! Named generators (`cosid_create_generator`): one process keeps shared memory in step with
//! their definitions, the rows of `cosid.generator` in `cosid.database`. With a leased machine id
//! that process is the lease worker; with a fixed one (`manual`, `stateful_set`), the generators
//! worker ([`generators_worker_main`]).
//!
//! Every [`POLL_MS`], and at once when a backend's create or drop committed, it reads the
//! definitions and carries out what `cosid_core::registry::plan` decides: drop and retire the
//! slots whose definition is gone, take over live ones after a restart of this process, revive
//! a dropped slot created again as it was, publish new definitions in free slots.
//!
//! Each generator then runs as the default one does: with leasing, its own lease session (claim,
//! renewal, watermark, fail fast, release) in its own namespace, all sessions sharing the one
//! store connection; with a fixed machine id, the server's machine id opened above the floor in
//! its namespace's state file, which is written every `cosid.local_state_interval`.

use super::lease::ServerEnv;
use super::{
    attach_signal_handlers, exit_worker, reload_if_signalled, shutdown_requested,
    sleep_unless_shutdown, wait_latch_ms,
};
use crate::host::boottime_ms;
use crate::settings::{self, MachineSource, ServerSettings};
use crate::shmem::{self, Definition, GeneratorSlot, Phase, MAX_GENERATORS};
use crate::{local_state, store};
use cosid_core::generator::check_sequence_reset_threshold;
use cosid_core::layout::{Layout, LayoutError, TimeUnit};
use cosid_core::lease::session::{LogLevel, Session, Slot};
use cosid_core::lease::{LeaseProblem, LeaseState, LeaseTiming};
use cosid_core::protocol::{layout_text, Holder, LeaseStore};
use cosid_core::registry::{self, SlotView, Step};
use pgrx::bgworkers::{BackgroundWorker, BgWorkerStartTime};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How often the definitions are read: a generator created is usable within about a second.
pub const POLL_MS: u64 = 250;

/// How long after a failed read of the definitions the next one comes; each read waits at most
/// [`READ_TIMEOUT`] (for a lock, say).
const POLL_RETRY_MS: u64 = 2_000;
const READ_TIMEOUT: Duration = Duration::from_millis(500);

pub type SharedStore = Rc<RefCell<Box<dyn LeaseStore>>>;

/// A definition not used, and why.
type Skipped = (String, &'static str);

/// Marks a name or namespace read from the definitions whose bytes are not UTF-8 (it starts
/// with a character no valid text read there has: a NUL).
const NOT_UTF8: &str = "\0";

/// A definition as read from `cosid.generator`.
struct Row {
    name: String,
    namespace: String,
    layout: Layout,
    /// NULL: the layout's own (CosId's, half its maximum sequence).
    sequence_reset_threshold: Option<u32>,
}

/// How the named generators get their machine id.
pub enum Source {
    Leased {
        store: SharedStore,
        database: String,
        stable: bool,
    },
    Fixed(u32),
}

enum Runner<'a> {
    Leased(Box<Session<'a, SharedStore, ServerEnv>>),
    Fixed(Fixed<'a>),
}

struct Entry<'a> {
    slot: &'a GeneratorSlot,
    runner: Runner<'a>,
}

/// A named generator under the server's fixed machine id.
struct Fixed<'a> {
    slot: &'a GeneratorSlot,
    machine_id: u32,
    file: String,
    next_write_ms: u64,
    failing: bool,
}

pub struct NamedGenerators<'a> {
    settings: &'static ServerSettings,
    source: Source,
    slots: &'a [GeneratorSlot; MAX_GENERATORS],
    entries: Vec<Entry<'a>>,
    timing: LeaseTiming,
    next_poll_ms: u64,
    last_logged: String,
}

impl<'a> NamedGenerators<'a> {
    pub fn new(
        settings: &'static ServerSettings,
        source: Source,
        slots: &'a [GeneratorSlot; MAX_GENERATORS],
        timing: LeaseTiming,
    ) -> NamedGenerators<'a> {
        shmem::set_manager_pid(std::process::id() as i32);
        NamedGenerators {
            settings,
            source,
            slots,
            entries: Vec::new(),
            timing,
            next_poll_ms: 0,
            last_logged: String::new(),
        }
    }

    fn note(&mut self, line: String) {
        if line != self.last_logged {
            warning!("{line}");
            self.last_logged = line;
        }
    }

    /// Reads the definitions when due, then lets each generator do what is due. `between` runs
    /// before each of them: the default generator's session, whose renewal must not wait behind
    /// all the others' calls.
    pub fn step(&mut self, between: &mut dyn FnMut()) {
        if shmem::take_definitions_changed() || boottime_ms() >= self.next_poll_ms {
            self.next_poll_ms = boottime_ms() + POLL_MS;
            self.poll();
        }
        for entry in &mut self.entries {
            between();
            match &mut entry.runner {
                Runner::Leased(session) => {
                    if boottime_ms() >= session.next_wake_ms() {
                        session.step();
                    }
                }
                Runner::Fixed(fixed) => fixed.step(),
            }
        }
    }

    pub fn next_wake_ms(&self) -> u64 {
        let mut wake = self.next_poll_ms;
        for entry in &self.entries {
            wake = wake.min(match &entry.runner {
                Runner::Leased(session) => session.next_wake_ms(),
                Runner::Fixed(fixed) => fixed.next_write_ms,
            });
        }
        wake
    }

    pub fn reload(&mut self, timing: LeaseTiming) {
        self.timing = timing;
        for entry in &mut self.entries {
            if let Runner::Leased(session) = &mut entry.runner {
                session.reload(timing);
            }
        }
    }

    /// At server shutdown: every generator stops and gives its machine id back exactly.
    pub fn shutdown(&mut self) {
        for entry in &mut self.entries {
            match &mut entry.runner {
                Runner::Leased(session) => session.shutdown(),
                Runner::Fixed(fixed) => fixed.stop(),
            }
        }
    }

    fn poll(&mut self) {
        // Read before the definitions: every creation counted here is in what is read.
        let creations = shmem::creations_committed();
        let rows = match read_definitions(&self.settings.namespace) {
            Ok((rows, skipped)) => {
                if let Some((name, why)) = skipped.first() {
                    self.note(format!(
                        "cosid: generator \"{name}\" is not used: {why}; drop it and create it under a new namespace"
                    ));
                }
                rows
            }
            Err(why) => {
                self.note(format!(
                    "cosid: cannot read the generators' definitions (cosid.generator) in database \"{}\": {why}",
                    self.settings.database
                ));
                // A table locked by someone else must not hold up the leases' renewals.
                self.next_poll_ms = boottime_ms() + POLL_RETRY_MS;
                return;
            }
        };
        let definitions: Vec<Definition> = rows
            .iter()
            .map(|row| {
                Definition::named(
                    self.settings,
                    &row.name,
                    &row.namespace,
                    row.layout,
                    row.sequence_reset_threshold,
                )
            })
            .collect();
        let slots = self.slots;
        let named = &slots[1..=self.settings.max_generators.min(MAX_GENERATORS - 1)];
        let views: Vec<SlotView<'_, Definition>> = named
            .iter()
            .map(|slot| {
                let phase = slot.phase();
                SlotView {
                    phase,
                    definition: (phase != Phase::Free).then(|| slot.definition()),
                    running: self.entry_of(slot).is_some(),
                }
            })
            .collect();
        for step in registry::plan(&views, &definitions) {
            match step {
                Step::Drop(index) => {
                    named[index].drop_generator();
                }
                Step::Retire(index) => {
                    let slot = &named[index];
                    let mut entry = match self.entry_of(slot) {
                        Some(position) => self.entries.remove(position),
                        None => self.runner_for(slot),
                    };
                    entry.retire();
                }
                Step::TakeOver { slot, .. } => {
                    let entry = self.runner_for(&named[slot]);
                    self.entries.push(entry);
                }
                Step::Revive { slot, .. } => {
                    let slot = &named[slot];
                    fresh_status(slot);
                    slot.revive();
                    let entry = self.runner_for(slot);
                    self.entries.push(entry);
                }
                Step::Publish { slot, definition } => {
                    let slot = &named[slot];
                    fresh_status(slot);
                    slot.publish(definitions[definition]);
                    let entry = self.runner_for(slot);
                    self.entries.push(entry);
                }
                Step::NoRoom(definition) => self.note(format!(
                    "cosid: no room for generator \"{}\": all {} places of cosid.max_generators are taken (a dropped generator keeps its place until the server restarts, unless it is created again as it was)",
                    definitions[definition].name(),
                    self.settings.max_generators
                )),
            }
        }
        shmem::set_creations_published(creations);
        shmem::set_definitions_loaded();
    }

    fn entry_of(&self, slot: &GeneratorSlot) -> Option<usize> {
        self.entries
            .iter()
            .position(|entry| std::ptr::eq(entry.slot, slot))
    }

    fn runner_for(&self, slot: &'a GeneratorSlot) -> Entry<'a> {
        let namespace = slot.namespace();
        let file = local_state::file_for(Some(namespace));
        let runner = match &self.source {
            Source::Leased {
                store,
                database,
                stable,
            } => {
                let layout = slot.config().layout;
                let holder = Holder::new(namespace, &layout, slot.instance_id(), *stable);
                let shared = Slot {
                    generator: &slot.state,
                    status: &slot.lease,
                    layout,
                };
                let env = ServerEnv { state_file: file };
                let mut session = Session::new(shared, holder, database, store.clone(), env);
                session.start(self.timing);
                Runner::Leased(Box::new(session))
            }
            Source::Fixed(machine_id) => {
                let mut fixed = Fixed {
                    slot,
                    machine_id: *machine_id,
                    file,
                    next_write_ms: 0,
                    failing: false,
                };
                if slot.is_live() && !slot.state.is_open() {
                    fixed.open();
                }
                Runner::Fixed(fixed)
            }
        };
        Entry { slot, runner }
    }
}

/// A fresh status for a new life; the generator stays closed until it has a machine id.
fn fresh_status(slot: &GeneratorSlot) {
    slot.lease.set_held(None);
    slot.lease.last_error.store("");
    slot.lease.set_problem(LeaseProblem::None);
    slot.lease.set_state(LeaseState::Claiming);
}

impl registry::Definition for Definition {
    fn name(&self) -> &str {
        Definition::name(self)
    }
    fn same_as(&self, other: &Self) -> bool {
        Definition::same_as(self, other)
    }
}

impl Entry<'_> {
    /// The generator was dropped: it is closed, and its machine id given back with the exact
    /// last timestamp issued.
    fn retire(&mut self) {
        match &mut self.runner {
            Runner::Leased(session) => {
                session.shutdown();
                self.slot.lease.set_problem(LeaseProblem::None);
            }
            Runner::Fixed(fixed) => fixed.stop(),
        }
        self.slot.lease.set_state(LeaseState::Stopped);
        self.slot
            .lease
            .last_error
            .store("the generator was dropped");
        if let Runner::Leased(session) = &mut self.runner {
            session.note(
                LogLevel::Log,
                format!("cosid: generator \"{}\" was dropped", self.slot.name()),
            );
        }
    }
}

impl Fixed<'_> {
    /// Opens the generator above the floor in its namespace's state file.
    fn open(&mut self) {
        let slot = self.slot;
        let layout = slot.config().layout;
        if let Err(why) = layout.check_machine_id(self.machine_id) {
            slot.lease.set_state(LeaseState::Stopped);
            slot.lease.last_error.store(&format!(
                "the machine id does not fit generator \"{}\": {why}",
                slot.name()
            ));
            return;
        }
        slot.open_above_state_file(&self.file, self.machine_id);
    }

    /// Writes the floor when due, padded by the interval: ids may be issued until the next write.
    fn step(&mut self) {
        let now = boottime_ms();
        if now < self.next_write_ms {
            return;
        }
        let interval_ms = settings::local_state_interval_ms();
        self.next_write_ms = now + interval_ms;
        if !self.slot.state.is_open() {
            return;
        }
        let layout = self.slot.config().layout;
        let last_ms = self.slot.state.last_timestamp_ms(&layout);
        let record =
            local_state::record(self.slot.namespace(), self.machine_id, last_ms, interval_ms);
        self.write(&record);
    }

    /// Closes the generator and writes the exact floor.
    fn stop(&mut self) {
        let was_open = self.slot.state.is_open();
        self.slot.state.close();
        if !was_open && self.slot.lease.problem() == LeaseProblem::StateFile {
            return; // the file's floor is unknown: it is left as it is
        }
        let layout = self.slot.config().layout;
        let last_ms = self.slot.state.last_timestamp_ms(&layout);
        let record = local_state::final_record(self.slot.namespace(), self.machine_id, last_ms);
        self.write(&record);
    }

    fn write(&mut self, record: &cosid_core::state_file::StateRecord) {
        match local_state::write(&self.file, record) {
            Ok(()) => self.failing = false,
            Err(why) if !self.failing => {
                self.failing = true;
                warning!("cosid: {why}");
            }
            Err(_) => {}
        }
    }
}

/// The rows of `cosid.generator` (none when the extension is not installed in this database),
/// and the names of those not used because their layout is not their namespace's.
fn read_definitions(default_namespace: &str) -> Result<(Vec<Row>, Vec<Skipped>), String> {
    let raw = store::local::in_transaction(READ_TIMEOUT, |client| {
        // Only the extension's own tables: in a database without the extension, a role that
        // may create schemas could otherwise plant a "cosid.generator" that this superuser
        // session would read (a view running the planter's code).
        let installed = client
            .select(
                "SELECT pg_catalog.count(*) = 2 FROM pg_catalog.pg_depend d \
                 JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid \
                 JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) d.objid \
                 JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
                 WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass \
                 AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass \
                 AND d.deptype OPERATOR(pg_catalog.=) 'e' \
                 AND e.extname OPERATOR(pg_catalog.=) 'cosid' \
                 AND c.relkind OPERATOR(pg_catalog.=) 'r' \
                 AND n.nspname OPERATOR(pg_catalog.=) 'cosid' \
                 AND c.relname OPERATOR(pg_catalog.=) ANY (ARRAY['generator', 'generator_namespace'])",
                None,
                &[],
            )
            .map_err(|e| e.to_string())?
            .first()
            .get::<bool>(1)
            .map_err(|e| e.to_string())?
            .unwrap_or(false);
        if !installed {
            return Ok(Vec::new());
        }
        // The extension's SQL of 0.4.0 (not updated yet) has no threshold column: its
        // generators take their layouts' thresholds.
        let has_threshold = client
            .select(
                "SELECT EXISTS (SELECT FROM pg_catalog.pg_attribute \
                 WHERE attrelid OPERATOR(pg_catalog.=) 'cosid.generator'::pg_catalog.regclass \
                 AND attname OPERATOR(pg_catalog.=) 'sequence_reset_threshold' \
                 AND NOT attisdropped)",
                None,
                &[],
            )
            .map_err(|e| e.to_string())?
            .first()
            .get::<bool>(1)
            .map_err(|e| e.to_string())?
            .unwrap_or(false);
        let query = format!(
            // The text as UTF-8 whatever the database's encoding (the names are ASCII by the
            // table's check; a namespace need not be).
            "SELECT pg_catalog.convert_to(g.name, 'UTF8'), \
             pg_catalog.convert_to(g.namespace, 'UTF8'), g.epoch_ms, g.time_unit, \
             g.timestamp_bits, g.machine_bits, g.sequence_bits, n.layout, {} \
             FROM cosid.generator g LEFT JOIN cosid.generator_namespace n \
             ON n.namespace OPERATOR(pg_catalog.=) g.namespace ORDER BY g.created_at, g.name",
            if has_threshold {
                "g.sequence_reset_threshold::pg_catalog.int8"
            } else {
                "NULL::pg_catalog.int8"
            }
        );
        let table = client
            .select(&query, None, &[])
            .map_err(|e| e.to_string())?;
        let mut rows = Vec::new();
        for row in table {
            // Bytes that are not UTF-8 (a database of encoding SQL_ASCII) give a row that is
            // skipped below, not an error that would stop every generator.
            let utf8 = |ordinal| {
                row.get::<Vec<u8>>(ordinal)
                    .map(|bytes| {
                        let bytes = bytes.unwrap_or_default();
                        String::from_utf8(bytes).unwrap_or_else(|not_utf8| {
                            format!("{NOT_UTF8}{}", String::from_utf8_lossy(not_utf8.as_bytes()))
                        })
                    })
                    .map_err(|e| e.to_string())
            };
            let text = |ordinal| {
                row.get::<String>(ordinal)
                    .map(Option::unwrap_or_default)
                    .map_err(|e| e.to_string())
            };
            let int = |ordinal| {
                row.get::<i32>(ordinal)
                    .map(|value| value.unwrap_or(-1))
                    .map_err(|e| e.to_string())
            };
            let epoch_ms = row
                .get::<i64>(3)
                .map_err(|e| e.to_string())?
                .unwrap_or(i64::MIN);
            let threshold = row.get::<i64>(9).map_err(|e| e.to_string())?;
            rows.push((
                (utf8(1)?, utf8(2)?),
                epoch_ms,
                text(4)?,
                int(5)?,
                int(6)?,
                int(7)?,
                text(8)?,
                threshold,
            ));
        }
        Ok(rows)
    })?;
    let mut rows = Vec::new();
    let mut skipped = Vec::new();
    for (
        (name, namespace),
        epoch_ms,
        unit,
        timestamp_bits,
        machine_bits,
        sequence_bits,
        recorded,
        threshold,
    ) in raw
    {
        // The table's checks keep such rows out; one edited past them is skipped.
        let time_unit = match unit.as_str() {
            "millisecond" => TimeUnit::Millisecond,
            "second" => TimeUnit::Second,
            _ => continue,
        };
        let bits = |value: i32| u32::try_from(value).ok();
        let (Some(timestamp_bits), Some(machine_bits), Some(sequence_bits)) = (
            bits(timestamp_bits),
            bits(machine_bits),
            bits(sequence_bits),
        ) else {
            continue;
        };
        let layout = match Layout::new(
            epoch_ms,
            time_unit,
            timestamp_bits,
            machine_bits,
            sequence_bits,
        ) {
            Ok(layout) => layout,
            // cosid 0.4.0 and earlier created such generators: their ids decoded wrongly.
            Err(
                LayoutError::MachineBitsTooMany { .. } | LayoutError::SequenceBitsTooMany { .. },
            ) => {
                skipped.push((
                    name,
                    "its machine_bits or sequence_bits are above 31, the widest a machine id or a sequence can be",
                ));
                continue;
            }
            Err(_) => continue,
        };
        if name.is_empty() || name == shmem::DEFAULT_NAME || namespace.is_empty() {
            continue;
        }
        if name.starts_with(NOT_UTF8) || namespace.starts_with(NOT_UTF8) {
            skipped.push((
                name.trim_start_matches(NOT_UTF8).to_string(),
                "its name or namespace is not text of a known encoding (cosid.database's encoding is SQL_ASCII)",
            ));
            continue;
        }
        // The default generator's namespace may have changed since the generator was created:
        // two generators in one namespace would share a fixed machine id.
        if namespace == default_namespace {
            skipped.push((
                name,
                "its namespace is the default generator's (cosid.namespace)",
            ));
            continue;
        }
        // A namespace keeps the layout it was first used with: ids of two layouts can
        // coincide. cosid_create_generator records and checks it; a row written past it, or
        // changed since, is not used.
        if recorded != layout_text(&layout) {
            skipped.push((
                name,
                "its layout is not the one cosid.generator_namespace records for its namespace (ids of two layouts can coincide)",
            ));
            continue;
        }
        // The table's check keeps a threshold within the layout; one edited past it is not
        // used rather than taken for another.
        let sequence_reset_threshold = match threshold {
            None => None,
            Some(value) => match check_sequence_reset_threshold(&layout, value) {
                Ok(value) => Some(value),
                Err(_) => {
                    skipped.push((
                        name,
                        "its sequence_reset_threshold is not from 0 to its maximum sequence",
                    ));
                    continue;
                }
            },
        };
        rows.push(Row {
            name,
            namespace,
            layout,
            sequence_reset_threshold,
        });
    }
    Ok((rows, skipped))
}

/// Registers the generators worker, for a fixed machine id; only while preloading.
pub fn register() {
    super::register(
        "cosid generators worker",
        "cosid_generators_worker_main",
        BgWorkerStartTime::ConsistentState,
        true,
    );
}

/// With a fixed machine id (`manual`, `stateful_set`): runs the named generators. The default
/// one needs no worker but the state writer, so this one is apart: a `cosid.database` that does
/// not exist stops the named generators only.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn cosid_generators_worker_main(_arg: pg_sys::Datum) {
    attach_signal_handlers();
    let Some(settings) = settings::server() else {
        return;
    };
    let MachineSource::Fixed(machine_id) = settings.machine else {
        return;
    };
    let Ok(slots) = shmem::all_slots() else {
        return;
    };
    let attempts = shmem::generators_worker_connect_attempts();
    let failed = attempts.fetch_add(1, Ordering::Relaxed);
    if failed > 0 {
        let wait_ms = (1_000u64 << failed.min(6).saturating_sub(1)).min(60_000);
        if failed == 1 {
            warning!(
                "cosid: the generators worker could not connect to database \"{}\" (cosid.database); the server log says why; trying again every {} s",
                settings.database,
                wait_ms / 1_000
            );
        }
        sleep_unless_shutdown(wait_ms);
        if shutdown_requested() {
            exit_worker();
        }
    }
    BackgroundWorker::connect_worker_to_spi(Some(&settings.database), None);
    crate::store::local::pin_session_settings();
    attempts.store(0, Ordering::Relaxed);
    let mut named = NamedGenerators::new(
        settings,
        Source::Fixed(machine_id),
        slots,
        settings::lease_timing(),
    );
    loop {
        reload_if_signalled();
        if shutdown_requested() {
            break;
        }
        named.step(&mut || {});
        let wait = named
            .next_wake_ms()
            .saturating_sub(boottime_ms())
            .clamp(10, 1_000);
        if !wait_latch_ms(wait) {
            break;
        }
    }
    if shutdown_requested() {
        named.shutdown();
    }
    exit_worker();
}
