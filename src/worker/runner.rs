//! One runner for every generator, the default one and the named ones (`cosid_create_generator`),
//! leased or fixed: each runs as its own lease session (claim, renewal, watermark, fail fast,
//! release) in its own namespace, all sessions sharing the one store connection, or with the
//! server's fixed machine id above the floor its [`FloorWriter`] keeps. What stays special about
//! the default generator is said in `opening.rs`.
//!
//! The process that manages named generators keeps shared memory in step with their definitions,
//! the rows of `cosid.generator` in `cosid.database`: every [`POLL_MS`], and at once when a
//! backend's create or drop committed, it reads them and carries out what
//! `cosid_core::registry::plan` decides: drop and retire the slots whose definition is gone, take
//! over live ones after a restart of this process, revive a dropped slot created again as it
//! was, publish new definitions in free slots.

use super::definitions::read_definitions;
use super::env::ServerEnv;
use super::floor::FloorWriter;
use crate::history;
use crate::host::{boottime_ms, unix_ms_now};
use crate::opening;
use crate::settings::{MachineSource, ServerSettings};
use crate::shmem::{self, Definition, GeneratorSlot, Phase};
use cosid_core::lease::session::{LogLevel, Session, Slot};
use cosid_core::lease::{GeneratorProblem, LeaseState, LeaseTiming};
use cosid_core::protocol::{Holder, LeaseStore};
use cosid_core::registry::{self, SlotView, Step};
use pgrx::prelude::*;
use std::cell::RefCell;
use std::rc::Rc;

/// How often the definitions are read: a generator created is usable within about a second.
pub const POLL_MS: u64 = 250;

/// How long after a failed read of the definitions the next one comes.
const POLL_RETRY_MS: u64 = 2_000;

pub type SharedStore = Rc<RefCell<dyn LeaseStore>>;

/// How the generators get their machine id: leased from this store, or the server's fixed one.
pub enum Source {
    Leased(SharedStore),
    Fixed(u32),
}

/// Which generators a worker runs: the default one, the named ones, or both.
pub struct Runs {
    pub default: bool,
    pub named: bool,
}

/// Whether a leased generator may claim a machine id.
#[derive(PartialEq, Eq)]
enum Claims {
    /// Its history refused its definition: it would hold one of the namespace's for nothing.
    Never,
    /// Its ids must wait to be above an old definition's: a machine id held (and released)
    /// with a floor far ahead would keep the namespace's other servers from it until then.
    Later {
        said: bool,
    },
    Now,
}

/// What keeps a generator's machine id valid: its lease session, or the writer of its floor.
enum Keeper<'a> {
    Leased(Box<Session<'a, SharedStore, ServerEnv>>, Claims),
    Fixed(FloorWriter<'a>),
}

struct Entry<'a> {
    slot: &'a GeneratorSlot,
    keeper: Keeper<'a>,
}

/// The generators one worker runs, each with its keeper.
pub struct Runner<'a> {
    settings: &'static ServerSettings,
    source: Source,
    /// The default generator is the first entry, when this process runs it.
    runs_default: bool,
    named: Option<&'a [GeneratorSlot]>,
    entries: Vec<Entry<'a>>,
    timing: LeaseTiming,
    next_poll_ms: u64,
    last_logged: String,
}

impl<'a> Runner<'a> {
    pub fn new(
        settings: &'static ServerSettings,
        source: Source,
        runs: Runs,
    ) -> Option<Runner<'a>> {
        let named = if runs.named {
            shmem::set_manager_pid(std::process::id() as i32);
            Some(shmem::named_slots(settings).ok()?)
        } else {
            None
        };
        let mut generators = Runner {
            settings,
            source,
            runs_default: runs.default,
            named,
            entries: Vec::new(),
            timing: crate::settings::lease_timing(),
            next_poll_ms: 0,
            last_logged: String::new(),
        };
        if runs.default {
            let entry = generators.entry_for(shmem::default_generator().ok()?);
            // The default session checked the timings: the others take the ones it kept.
            if let Keeper::Leased(session, _) = &entry.keeper {
                generators.timing = session.timing();
            }
            generators.entries.push(entry);
        }
        Some(generators)
    }

    fn note(&mut self, line: String) {
        if line != self.last_logged {
            warning!("{line}");
            self.last_logged = line;
        }
    }

    /// Reads the definitions when due, then lets each generator do what is due. The default one
    /// goes first, and again before each other one: its renewal must not wait behind all the
    /// others' calls.
    pub fn step(&mut self) {
        let first_named = usize::from(self.runs_default);
        if self.runs_default {
            self.entries[0].step();
        }
        if self.named.is_some()
            && (shmem::take_definitions_changed() || boottime_ms() >= self.next_poll_ms)
        {
            self.next_poll_ms = boottime_ms() + POLL_MS;
            self.poll();
        }
        for index in first_named..self.entries.len() {
            if self.runs_default {
                self.entries[0].step();
            }
            self.entries[index].step();
        }
    }

    pub fn next_wake_ms(&self) -> u64 {
        let poll = if self.named.is_some() {
            self.next_poll_ms
        } else {
            u64::MAX
        };
        self.entries
            .iter()
            .map(Entry::next_wake_ms)
            .fold(poll, u64::min)
    }

    /// After a reload: the first session checks the lease timings, the others take the ones it
    /// kept.
    pub fn reload(&mut self, timing: LeaseTiming) {
        let mut timing = timing;
        for entry in &mut self.entries {
            if let Keeper::Leased(session, _) = &mut entry.keeper {
                session.reload(timing);
                timing = session.timing();
            }
        }
        self.timing = timing;
    }

    /// At server shutdown: every generator stops and gives its machine id back exactly.
    pub fn shutdown(&mut self) {
        for entry in &mut self.entries {
            match &mut entry.keeper {
                Keeper::Leased(session, claims) => {
                    if *claims == Claims::Now {
                        session.shutdown();
                    }
                }
                Keeper::Fixed(floor) => floor.stop(),
            }
        }
    }

    fn poll(&mut self) {
        let Some(named) = self.named else {
            return;
        };
        // The default generator's namespaces, copied where the database's copies carry them,
        // before any definition is read.
        if let Err(why) = crate::history::record_in_database() {
            self.note(format!(
                "cosid: could not record the default generator's namespaces in cosid.default_namespace: {why}"
            ));
        }
        // Read before the definitions: every creation counted here is in what is read.
        let creations = shmem::creations_committed();
        let rows = match read_definitions(&self.settings.namespace) {
            Ok((rows, skipped)) => {
                if let Some((name, why)) = skipped.first() {
                    self.note(format!("cosid: generator \"{name}\" is not used: {why}"));
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
                    &row.name,
                    &row.namespace,
                    row.layout,
                    row.sequence_reset_threshold,
                )
            })
            .collect();
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
                        None => self.entry_for(slot),
                    };
                    entry.retire();
                }
                Step::TakeOver { slot, .. } => {
                    let entry = self.entry_for(&named[slot]);
                    self.entries.push(entry);
                }
                Step::Revive { slot, .. } => {
                    let slot = &named[slot];
                    fresh_status(slot);
                    slot.revive();
                    let entry = self.entry_for(slot);
                    self.entries.push(entry);
                }
                Step::Publish { slot, definition } => {
                    let slot = &named[slot];
                    fresh_status(slot);
                    let floor_ms = rows[definition].floor_ms.unwrap_or(i64::MIN);
                    slot.publish(
                        definitions[definition],
                        crate::shmem::floor_ms_for(&rows[definition].namespace).max(floor_ms),
                    );
                    let entry = self.entry_for(slot);
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

    fn entry_for(&self, slot: &'a GeneratorSlot) -> Entry<'a> {
        let keeper = match &self.source {
            Source::Leased(store) => {
                let stable = match &self.settings.machine {
                    MachineSource::Leased(lease_settings) => lease_settings.stable,
                    _ => false,
                };
                let layout = slot.config().layout;
                let holder = Holder::new(slot.namespace(), &layout, shmem::instance_id(), stable);
                let shared = Slot {
                    generator: &slot.state,
                    status: &slot.status,
                    layout,
                };
                let env = ServerEnv {
                    state_file: opening::state_file(slot),
                };
                let database = &self.settings.database;
                let mut session = Session::new(shared, holder, database, store.clone(), env);
                session.start(self.timing);
                let claims = if opening::refused_until_restart(slot, opening::Machine::Leased) {
                    warning!(
                        "cosid: the default generator generates no id: {}",
                        slot.status.last_error.load()
                    );
                    Claims::Never
                } else {
                    Claims::Later { said: false }
                };
                Keeper::Leased(Box::new(session), claims)
            }
            Source::Fixed(machine_id) => Keeper::Fixed(FloorWriter::new(slot, *machine_id)),
        };
        let mut entry = Entry { slot, keeper };
        entry.check_floor();
        entry
    }
}

/// A fresh status for a new life; the generator stays closed until it has a machine id.
fn fresh_status(slot: &GeneratorSlot) {
    slot.status.set_held(None);
    slot.status.last_error.store("");
    slot.status.set_problem(GeneratorProblem::None);
    slot.status.set_state(LeaseState::Claiming);
}

impl Entry<'_> {
    fn step(&mut self) {
        self.check_floor();
        match &mut self.keeper {
            Keeper::Leased(session, Claims::Now) => {
                if boottime_ms() >= session.next_wake_ms() {
                    session.step();
                }
            }
            Keeper::Leased(..) => {}
            Keeper::Fixed(floor) => floor.step(),
        }
    }

    fn next_wake_ms(&self) -> u64 {
        match &self.keeper {
            Keeper::Leased(session, Claims::Now) => session.next_wake_ms(),
            Keeper::Leased(..) => u64::MAX,
            Keeper::Fixed(floor) => floor.next_wake_ms(),
        }
    }

    /// A leased generator waiting for its floor (the default generator's history, ids its
    /// namespace issued before) claims once the floor is within the broken threshold of the
    /// clock.
    fn check_floor(&mut self) {
        let Keeper::Leased(_, claims) = &mut self.keeper else {
            return;
        };
        let Claims::Later { said } = claims else {
            return;
        };
        let broken_threshold_ms = shmem::backwards_policy().broken_threshold_ms as i64;
        match history::floor_ahead_ms(self.slot) {
            Some(first_ms) if first_ms - unix_ms_now() > broken_threshold_ms => {
                if !std::mem::replace(said, true) {
                    let text = format!(
                        "its ids must be above ids this server issued before that they could equal (an earlier namespace or layout of the default generator, or its namespace's ids before a restart), from {}; its machine id is claimed shortly before",
                        cosid_core::layout::format_unix_ms(first_ms)
                    );
                    log!("cosid: {text}");
                    self.slot.status.last_error.store(&text);
                }
            }
            _ => *claims = Claims::Now,
        }
    }

    /// The generator was dropped: it is closed, and its machine id given back with the exact
    /// last timestamp issued.
    fn retire(&mut self) {
        match &mut self.keeper {
            Keeper::Leased(session, _) => {
                session.shutdown();
                self.slot.status.set_problem(GeneratorProblem::None);
            }
            Keeper::Fixed(floor) => floor.stop(),
        }
        self.slot.status.set_state(LeaseState::Stopped);
        self.slot
            .status
            .last_error
            .store("the generator was dropped");
        if let Keeper::Leased(session, _) = &mut self.keeper {
            session.note(
                LogLevel::Log,
                format!("cosid: generator \"{}\" was dropped", self.slot.name()),
            );
        }
    }
}
