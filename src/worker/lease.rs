//! The background worker that leases the machine ids (`cosid.distributor = lease`). The
//! postmaster starts it once the server is consistent; it connects to `cosid.database`, and then
//! runs every generator, the default one and the named ones, each as its own lease session
//! (`cosid_core::lease::session`), which decides everything: it claims a machine id before any id
//! is generated, renews it every `cosid.guarder_delay`, and at shutdown stops the generator and
//! releases the machine id with the exact last timestamp it issued. A store error never ends the
//! worker: generation stays safe through the local deadline, and comes back when a renewal
//! succeeds.

use super::runner::{Runner, Runs, SharedStore, Source};
use super::signals::shutdown_requested;
use super::{attach_signal_handlers, backoff, exit_worker, run};
use crate::settings::{self, MachineSource};
use crate::{shmem, store};
use pgrx::bgworkers::BgWorkerStartTime;
use pgrx::pg_sys;
use pgrx::prelude::*;

/// Registers the worker; only while preloading.
pub fn register() {
    let start = BgWorkerStartTime::ConsistentState;
    super::register("cosid lease worker", "cosid_worker_main", start, true);
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn cosid_worker_main(_arg: pg_sys::Datum) {
    attach_signal_handlers();
    let Some(settings) = settings::server() else {
        return;
    };
    let MachineSource::Leased(lease_settings) = &settings.machine else {
        return;
    };
    let Ok(slot) = shmem::default_generator() else {
        return;
    };
    // Connected to a database even with a remote store, so that operators see the worker in
    // pg_stat_activity (backend_type 'cosid lease worker') wherever its store is.
    if !backoff::connect("lease worker", &settings.database, Some(slot)) {
        exit_worker();
    }
    let store: SharedStore = match store::open(
        settings.distributor,
        lease_settings.lease_store.as_deref(),
        shutdown_requested,
    ) {
        Ok(store) => store,
        Err(why) => {
            warning!("cosid: cannot use cosid.lease_store: {why}");
            // Started again after its restart time.
            exit_worker();
        }
    };
    let runs = Runs {
        default: true,
        named: true,
    };
    let Some(mut generators) = Runner::new(settings, Source::Leased(store), runs) else {
        return;
    };
    run(&mut generators, true);
}
