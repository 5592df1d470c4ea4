//! The generators worker: with a fixed machine id (`manual`, `stateful_set`), it runs the named
//! generators. The default one needs no worker but the state writer, so this one is apart: a
//! `cosid.database` that does not exist stops the named generators only. With a leased machine
//! id the lease worker runs them instead.

use super::runner::{Runner, Runs, Source};
use super::{attach_signal_handlers, backoff, exit_worker, run};
use crate::settings::{self, MachineSource};
use pgrx::bgworkers::BgWorkerStartTime;
use pgrx::pg_sys;
use pgrx::prelude::*;

/// Registers the worker; only while preloading.
pub fn register() {
    super::register(
        "cosid generators worker",
        "cosid_generators_worker_main",
        BgWorkerStartTime::ConsistentState,
        true,
    );
}

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
    if !backoff::connect("generators worker", &settings.database, None) {
        exit_worker();
    }
    let runs = Runs {
        default: false,
        named: true,
    };
    let Some(mut generators) = Runner::new(settings, Source::Fixed(machine_id), runs) else {
        return;
    };
    run(&mut generators, false);
}
