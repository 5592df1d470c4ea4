//! The state writer: with a fixed machine id (`manual`, `stateful_set`), it keeps the default
//! generator's durable floor (`floor.rs`) and puts reloaded clock thresholds in force. It
//! connects to no database (see `opening.rs`). When the startup hook found the state file
//! unusable, or the history refused the definition, the generator stays closed and nothing is
//! written: the file is the only record of the floor.

use super::runner::{Runner, Runs, Source};
use super::{attach_signal_handlers, run};
use crate::settings::{self, MachineSource};
use crate::{opening, shmem};
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
    if opening::refused_until_restart(slot, opening::Machine::Fixed) {
        // Nothing to do until the server is restarted.
        warning!(
            "cosid: {}; no id is generated and the file is left as it is",
            slot.status.last_error.load()
        );
    }
    let runs = Runs {
        default: true,
        named: false,
    };
    let Some(mut generators) = Runner::new(settings, Source::Fixed(machine_id), runs) else {
        return;
    };
    run(&mut generators, true);
}
