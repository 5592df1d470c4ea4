//! The background worker that leases the default generator's machine id. The postmaster starts
//! it once the server is consistent; it connects to `cosid.database`, and then only schedules the
//! lease session (`cosid_core::lease::session`), which decides everything: it claims a machine
//! id before any id is generated, renews it every `cosid.guarder_delay`, and at shutdown stops
//! the generator and releases the machine id with the exact last timestamp it issued.
//!
//! This file gives the session its process ([`ServerEnv`]: clocks, latch sleeps, the log, the
//! settings, the local state file) and its store. A store error never ends the worker:
//! generation stays safe through the local deadline, and comes back when a renewal succeeds.

use super::named::{NamedGenerators, SharedStore, Source};
use super::{
    apply_clock_thresholds, attach_signal_handlers, exit_worker, reload_if_signalled,
    shutdown_requested, sleep_unless_shutdown, wait_latch_ms,
};
use crate::host::{boottime_ms, random_u64, unix_ms_now};
use crate::settings::{self, MachineSource};
use crate::shmem::{self, GeneratorSlot};
use crate::{local_state, store};
use cosid_core::lease::session::{Env, LogLevel, Session, Slot};
use cosid_core::lease::LeaseProblem;
use cosid_core::protocol::Holder;
use cosid_core::state_file::StateRecord;
use pgrx::bgworkers::{BackgroundWorker, BgWorkerStartTime};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::Ordering;

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
    if !wait_before_connecting(slot, &settings.database) {
        exit_worker();
    }
    BackgroundWorker::connect_worker_to_spi(Some(&settings.database), None);
    crate::store::local::pin_session_settings();
    slot.lease.connect_attempts.store(0, Ordering::Relaxed);
    let store = match store::open(lease_settings.lease_store.as_deref(), shutdown_requested) {
        Ok(store) => store,
        Err(why) => {
            warning!("cosid: cannot use cosid.lease_store: {why}");
            // Started again after its restart time.
            exit_worker();
        }
    };
    let store: SharedStore = Rc::new(RefCell::new(store));
    let layout = slot.config().layout;
    let holder = Holder::new(
        &settings.namespace,
        &layout,
        slot.instance_id(),
        lease_settings.stable,
    );
    let shared = Slot {
        generator: &slot.state,
        status: &slot.lease,
        layout,
    };
    let env = ServerEnv {
        state_file: local_state::file_for(None),
    };
    let mut session = Session::new(shared, holder, &settings.database, store.clone(), env);
    if let Err(line) = apply_clock_thresholds() {
        session.note(LogLevel::Warning, line);
    }
    // A definition its history refuses claims no machine id: it would hold one of the
    // namespace's for nothing. The named generators are still managed here.
    let history_refused = matches!(
        slot.lease.problem(),
        LeaseProblem::History | LeaseProblem::HistoryFile
    );
    if history_refused {
        warning!(
            "cosid: the default generator generates no id: {}",
            slot.lease.last_error.load()
        );
    }
    // The session's timings are the named generators' too, whether or not it claims.
    session.start(settings::lease_timing());
    // A changed definition whose ids must wait to be above the old one's claims its machine id
    // only when it can use it: a machine id held (and released) with a floor far ahead would
    // keep the namespace's other servers from it until then.
    let mut session_started = false;
    let mut said_waiting = false;
    let source = Source::Leased {
        store,
        database: settings.database.clone(),
        stable: lease_settings.stable,
    };
    let Ok(slots) = shmem::all_slots() else {
        return;
    };
    let mut named = NamedGenerators::new(settings, source, slots, session.timing());
    loop {
        if reload_if_signalled() {
            if let Err(line) = apply_clock_thresholds() {
                session.note(LogLevel::Warning, line);
            }
            session.reload(settings::lease_timing());
            named.reload(session.timing());
        }
        if shutdown_requested() {
            break;
        }
        if !session_started && !history_refused {
            let broken_threshold_ms = shmem::backwards_policy().broken_threshold_ms as i64;
            match crate::history::floor_ahead_ms(slot) {
                Some(first_ms) if first_ms - unix_ms_now() > broken_threshold_ms => {
                    if !std::mem::replace(&mut said_waiting, true) {
                        let text = format!(
                            "the default generator's namespace or layout changed: its ids are above those of the previous definition from {}, and its machine id is claimed shortly before",
                            cosid_core::layout::format_unix_ms(first_ms)
                        );
                        log!("cosid: {text}");
                        slot.lease.last_error.store(&text);
                    }
                }
                _ => session_started = true,
            }
        }
        // The default generator first, and again between the named ones: its renewal must not
        // wait behind all their calls.
        let mut default_step = || {
            if session_started && boottime_ms() >= session.next_wake_ms() {
                session.step();
            }
        };
        default_step();
        named.step(&mut default_step);
        let default_wake_ms = if session_started {
            session.next_wake_ms()
        } else {
            u64::MAX
        };
        let wait = default_wake_ms
            .min(named.next_wake_ms())
            .saturating_sub(boottime_ms())
            .clamp(10, 1_000);
        if !wait_latch_ms(wait) {
            break;
        }
    }
    // Stop and release on SIGTERM; when the postmaster died there is nothing to release to.
    if shutdown_requested() {
        if session_started {
            session.shutdown();
        }
        named.shutdown();
    }
    exit_worker();
}

/// A worker that cannot connect to `cosid.database` (it does not exist, say) ends with
/// PostgreSQL's FATAL error and is started again: each attempt after a failed one waits twice as
/// long, up to a minute, and the reason stays in `cosid.status`. Returns false on shutdown.
fn wait_before_connecting(slot: &GeneratorSlot, database: &str) -> bool {
    let failed = slot.lease.connect_attempts.fetch_add(1, Ordering::Relaxed);
    if failed == 0 {
        return true;
    }
    let wait_ms = 1_000u64 << failed.min(6).saturating_sub(1);
    let wait_ms = wait_ms.min(60_000);
    let text = format!(
        "the lease worker could not connect to database \"{database}\" (cosid.database); the server log says why, for example that it does not exist; trying again every {} s",
        wait_ms / 1_000
    );
    slot.lease.last_error.store(&text);
    slot.lease.set_problem(LeaseProblem::StoreError);
    if failed == 1 {
        warning!("cosid: {text}");
    }
    sleep_unless_shutdown(wait_ms);
    !shutdown_requested()
}

/// The lease session's process: this worker, and the state file of the session's namespace.
pub struct ServerEnv {
    pub state_file: String,
}

impl Env for ServerEnv {
    fn monotonic_ms(&mut self) -> u64 {
        boottime_ms()
    }
    fn unix_ms(&mut self) -> i64 {
        unix_ms_now()
    }
    fn sleep_ms(&mut self, ms: u64) {
        sleep_unless_shutdown(ms)
    }
    fn shutdown_requested(&mut self) -> bool {
        shutdown_requested()
    }
    fn random_u64(&mut self) -> u64 {
        random_u64()
    }
    fn log(&mut self, level: LogLevel, line: &str) {
        match level {
            LogLevel::Warning => warning!("{line}"),
            LogLevel::Log => log!("{line}"),
        }
    }
    fn fail_fast(&mut self) -> bool {
        settings::fail_fast()
    }
    fn broken_threshold_ms(&mut self) -> u64 {
        shmem::backwards_policy().broken_threshold_ms
    }
    fn local_state_interval_ms(&mut self) -> u64 {
        settings::local_state_interval_ms()
    }
    fn read_state(&mut self) -> Result<Option<StateRecord>, String> {
        local_state::read(&self.state_file).map_err(|unusable| unusable.to_string())
    }
    fn state_floor_ms(&mut self, record: &StateRecord) -> i64 {
        local_state::floor_now_ms(record)
    }
    fn write_state(
        &mut self,
        namespace: &str,
        machine_id: u32,
        last_ms: i64,
        pad_ms: Option<u64>,
    ) -> Result<(), String> {
        let record = match pad_ms {
            Some(pad_ms) => local_state::record(namespace, machine_id, last_ms, pad_ms),
            None => local_state::final_record(namespace, machine_id, last_ms),
        };
        local_state::write(&self.state_file, &record)
    }
}
