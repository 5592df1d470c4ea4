//! How a generator gets its machine id when nothing is leased, and how the default generator is
//! opened in a fresh segment.
//!
//! Every generator, the default one included, is run by one runner (`worker::runner`). What
//! stays special about the default one (slot 0, of the reserved name `default`) is all here:
//! - The postmaster opens it, in the shared-memory startup hook, before any backend runs
//!   ([`open_default`]): it has a history (`history.rs`) that can forbid its definition, and
//!   with a fixed machine id no worker has to start for `cosid_next()` to work. No worker opens
//!   it again.
//! - With a fixed machine id its floor is written by the state writer, which connects to no
//!   database, so that a `cosid.database` that does not exist stops the named generators only.
//!   Its floor is written padded at shutdown too, and it is not closed: backends may still issue
//!   ids until they are gone, and the history records its exact last one at the postmaster's
//!   exit.
//! - Its state file is the server's (`cosid.state`), not one named after its namespace.
//!
//! Elsewhere these rules are asked of this module ([`opened_by_its_worker`],
//! [`stays_open_at_stop`], [`state_file`], [`refused_until_restart`]), never spelt again.

use crate::history::{self, Opening};
use crate::local_state;
use crate::settings::{MachineSource, ServerSettings};
use crate::shmem::GeneratorSlot;
use cosid_core::layout::TimeRangeError;
use cosid_core::lease::{GeneratorProblem, LeaseState};

/// Opens the default generator in a fresh segment, in the postmaster's startup hook: above the
/// floor its history sets, and with a fixed machine id above the floor of its state file. This
/// hook may not raise: a refusal is reported through the status and `cosid_next()`.
pub fn open_default(slot: &GeneratorSlot, settings: &ServerSettings) {
    if !matches!(settings.machine, MachineSource::Missing(_)) {
        let layout = settings.config.layout;
        // With its own lease table, the watermarks are in cosid.database.
        let leases_in = match &settings.machine {
            MachineSource::Leased(lease) if lease.lease_store.is_none() => {
                Some(settings.database.as_str())
            }
            _ => None,
        };
        // A namespace a named generator of this server used keeps its layout and its last id.
        let mut names_floor_ticks = None;
        let names_check = || -> Result<(), Opening> {
            let record = crate::names::read().map_err(Opening::Unusable)?;
            let Some(used) = record.namespaces.get(&settings.namespace) else {
                return Ok(());
            };
            if used.layout != cosid_core::protocol::layout_text(&layout) {
                return Err(Opening::Refuse(format!(
                    "the default generator's namespace \"{}\" was used by a named generator of this server with another layout ({}), as cosid.names records: ids of two layouts in one namespace can coincide",
                    settings.namespace, used.layout
                )));
            }
            names_floor_ticks = match used.last_ms.map(|ms| layout.unix_ms_to_ticks(ms)) {
                Some(Err(TimeRangeError::AfterMaximum)) => {
                    return Err(Opening::Refuse(format!(
                        "no id of the default generator's layout is above the last id a named generator of this server issued in namespace \"{}\", as cosid.names records",
                        settings.namespace
                    )))
                }
                Some(Ok(ticks)) => Some(ticks),
                Some(Err(TimeRangeError::BeforeEpoch)) | None => None,
            };
            Ok(())
        };
        let history_floor_ms =
            match history::open_default(&settings.namespace, &layout, leases_in, names_check) {
                Opening::Generate(floor_ms) => floor_ms,
                Opening::Refuse(why) => return never_open(slot, GeneratorProblem::History, &why),
                Opening::Unusable(why) => {
                    return never_open(slot, GeneratorProblem::HistoryFile, &why)
                }
            };
        match history_floor_ms.map(|ms| layout.unix_ms_to_ticks(ms)) {
            Some(Ok(ticks)) => slot.state.set_history_floor(ticks),
            Some(Err(TimeRangeError::AfterMaximum)) => {
                let why =
                    "no id of the default generator's layout is above the ids its history records";
                return never_open(slot, GeneratorProblem::History, why);
            }
            Some(Err(TimeRangeError::BeforeEpoch)) | None => {}
        }
        if let Some(ticks) = names_floor_ticks {
            slot.state.set_history_floor(ticks);
        }
    }
    match &settings.machine {
        MachineSource::Fixed(machine_id) => open_fixed(slot, *machine_id),
        MachineSource::Missing(_) => slot.status.set_state(LeaseState::Stopped),
        MachineSource::Leased(_) => slot.status.set_state(LeaseState::Claiming),
    }
}

/// The default generator's history refuses its definition, or cannot be used: it is never
/// opened. Neither the state writer nor the lease worker opens it, and a floor past the layout's
/// last tick keeps any opening from issuing.
fn never_open(slot: &GeneratorSlot, problem: GeneratorProblem, why: &str) {
    slot.state.set_history_floor(u64::MAX);
    slot.status.set_problem(problem);
    slot.status.last_error.store(why);
    slot.status.set_state(LeaseState::Stopped);
}

/// Whether the opening refused the generator for as long as the server runs: its history
/// refused the default generator's definition or could not be used ([`never_open`]), or, with
/// a fixed machine id, its state file could not be read exactly ([`open_fixed`]). Nothing
/// opens it again, nothing overwrites the file it could not use, and no other trouble replaces
/// the reason in its status: it is why no id is issued.
pub fn refused_until_restart(slot: &GeneratorSlot, machine: Machine) -> bool {
    match slot.status.problem() {
        GeneratorProblem::History | GeneratorProblem::HistoryFile => true,
        // A stable leased instance reads its state file again before each claim.
        GeneratorProblem::StateFile => machine == Machine::Fixed,
        _ => false,
    }
}

/// How a generator's machine id comes, for the rules that differ between the two.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Machine {
    Leased,
    Fixed,
}

/// Whether a worker opens the generator when it starts running it: the postmaster opened the
/// default one already ([`open_default`]).
pub fn opened_by_its_worker(slot: &GeneratorSlot) -> bool {
    !slot.is_default()
}

/// Whether the generator stays open as its worker stops at shutdown: backends may still issue
/// the default generator's ids until they are gone, and its history records its exact last one
/// at the postmaster's exit. A named generator is closed first, and its floor is then exact.
pub fn stays_open_at_stop(slot: &GeneratorSlot) -> bool {
    slot.is_default()
}

/// The state file of a generator's namespace.
pub fn state_file(slot: &GeneratorSlot) -> String {
    if slot.is_default() {
        local_state::file_for(None)
    } else {
        local_state::file_for(Some(slot.namespace()))
    }
}

/// Opens a generator of a fixed machine id above the floor its state file records. A file that
/// cannot be read exactly leaves the generator closed: `cosid_next()` refuses and says why, and
/// the file is left as it is. So does a machine id the layout refuses: a wrong id is never
/// issued.
pub fn open_fixed(slot: &GeneratorSlot, machine_id: u32) {
    let layout = slot.config().layout;
    if let Err(why) = layout.check_machine_id(machine_id) {
        // Of no kind the status has a code for: a stale one must not stay.
        slot.status.set_problem(GeneratorProblem::None);
        slot.status.set_state(LeaseState::Stopped);
        slot.status.last_error.store(&format!(
            "the machine id does not fit generator \"{}\": {why}",
            slot.name()
        ));
        return;
    }
    let file = state_file(slot);
    match local_state::fixed_floor_ticks(&file, &layout, slot.namespace(), machine_id) {
        Ok(floor_ticks) => match slot.state.open(&layout, machine_id, floor_ticks) {
            Ok(()) => {
                slot.status.set_problem(GeneratorProblem::None);
                slot.status.set_state(LeaseState::Up);
            }
            Err(why) => {
                slot.status.set_problem(GeneratorProblem::None);
                slot.status.set_state(LeaseState::Stopped);
                slot.status.last_error.store(&why.to_string());
            }
        },
        Err(unusable) => {
            slot.status.set_problem(GeneratorProblem::StateFile);
            slot.status.last_error.store(&unusable.to_string());
            slot.status.set_state(LeaseState::Stopped);
        }
    }
}
