//! The background worker that keeps the durable floor of a fixed machine id (`manual`,
//! `stateful_set`): every `cosid.local_state_interval` it writes the last timestamp issued to the
//! local state file, and once more at shutdown. After a crash and a restart, the shared-memory
//! startup hook opens the generator above that floor, so that a clock stepped back across the
//! crash is refused (or waited out) instead of repeating ids. A leased machine id has the lease
//! watermark for that, and the lease worker instead. When the hook found the file unusable, the
//! generator stays closed and this worker writes nothing: the file is the only record of the
//! floor.

use super::{
    apply_clock_thresholds, attach_signal_handlers, exit_worker, reload_if_signalled,
    shutdown_requested, wait_latch_ms,
};
use crate::settings::{self, MachineSource};
use crate::{local_state, shmem};
use cosid_core::lease::LeaseProblem;
use pgrx::bgworkers::BgWorkerStartTime;
use pgrx::pg_sys;
use pgrx::prelude::*;

/// Registers the worker; only while preloading.
pub fn register() {
    let start = BgWorkerStartTime::PostmasterStart;
    super::register(
        "cosid state writer",
        "cosid_state_worker_main",
        start,
        false,
    );
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn cosid_state_worker_main(_arg: pg_sys::Datum) {
    attach_signal_handlers();
    let (Some(settings), Ok(slot)) = (settings::server(), shmem::default_generator()) else {
        return;
    };
    let MachineSource::Fixed(machine_id) = settings.machine else {
        return;
    };
    if matches!(
        slot.lease.problem(),
        LeaseProblem::StateFile | LeaseProblem::History | LeaseProblem::HistoryFile
    ) {
        // The floor in the file is unknown, or the history refused the definition, and the
        // generator was left closed: overwriting the file would lose the floor for good.
        // Nothing to do until the server is restarted.
        warning!(
            "cosid: {}; no id is generated and the file is left as it is",
            slot.lease.last_error.load()
        );
        while !shutdown_requested() {
            if !wait_latch_ms(1_000) {
                break;
            }
        }
        exit_worker();
    }
    let layout = settings.config.layout;
    let namespace = settings.namespace.as_str();
    let mut failing = false;
    // The clock thresholds are put in force here, for a fixed machine id, as the lease worker
    // does for a leased one; a refused combination is logged once, until the settings change.
    let mut ignored_thresholds = None;
    let mut reloaded = true;
    loop {
        reloaded |= reload_if_signalled();
        if std::mem::take(&mut reloaded) {
            let outcome = apply_clock_thresholds().err();
            if let Some(line) = outcome
                .as_ref()
                .filter(|line| ignored_thresholds.as_ref() != Some(*line))
            {
                warning!("{line}");
            }
            ignored_thresholds = outcome;
        }
        let interval_ms = crate::settings::local_state_interval_ms();
        let shutting_down = shutdown_requested();
        let last_ms = slot.state.last_timestamp_ms(&layout);
        // Padded at shutdown too: backends may still be issuing ids until they are gone.
        let record = local_state::record(namespace, machine_id, last_ms, interval_ms);
        match local_state::write(&local_state::file_for(None), &record) {
            Ok(()) => failing = false,
            Err(why) if !failing => {
                failing = true;
                warning!("cosid: {why}");
            }
            Err(_) => {}
        }
        if shutting_down {
            break;
        }
        let woke = wait_latch_ms(interval_ms.max(1));
        if !woke && !shutdown_requested() {
            break; // the postmaster died: nobody to write for
        }
    }
    // Restarted if it was terminated on its own, as the lease worker.
    exit_worker();
}
