//! cosid's background workers, and what they share: registration, signals, waits, the main loop
//! and the exit. Every generator is run by [`runner`], in one of three workers:
//!
//! - [`lease`]: every generator, with leased machine ids (`cosid.distributor = lease`).
//! - [`state`]: the default generator, with a fixed machine id (`manual`, `stateful_set`).
//! - [`named`]: the named generators, with a fixed machine id (the "cosid generators worker").
//!
//! The first two are the slot 0 workers: exactly one of them runs, and it alone puts reloaded
//! clock thresholds in force.

mod backoff;
mod definitions;
mod env;
mod floor;
pub mod lease;
pub mod named;
mod runner;
mod signals;
pub mod state;

use crate::host::boottime_ms;
use crate::{settings, shmem};
use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags,
};
use pgrx::pg_sys;
use pgrx::prelude::*;
use runner::Runner;
use signals::{shutdown_requested, wait_latch_ms};
use std::time::Duration;

/// Registers a worker of this library; only while preloading. A worker that ends with exit
/// code 1 is started again after a second.
fn register(name: &str, function: &str, start: BgWorkerStartTime, spi: bool) {
    let mut builder = BackgroundWorkerBuilder::new(name);
    // First: enabling SPI also sets the start time to the end of recovery, which would keep the
    // lease worker of a hot standby from ever starting.
    if spi {
        builder = builder.enable_spi_access();
    }
    builder
        .set_type(name)
        .set_library("cosid")
        .set_function(function)
        .set_start_time(start)
        .set_restart_time(Some(Duration::from_secs(1)))
        .load();
}

/// The first thing a worker does: SIGHUP and SIGTERM set the latch and their flags.
fn attach_signal_handlers() {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
}

/// Ends a cosid background worker with exit code 1, not 0: a worker that was terminated on its
/// own (pg_terminate_backend) is then started again after its restart time, while at server
/// shutdown nothing is restarted.
pub(crate) fn exit_worker() -> ! {
    // SAFETY: proc_exit runs PostgreSQL's exit callbacks and ends the process; nothing of ours is
    // left to clean up.
    unsafe { pg_sys::proc_exit(1) };
    // PostgreSQL 18 declares proc_exit `pg_noreturn` (C11's `_Noreturn`), which the generated
    // bindings do not turn into `-> !` as they do the `noreturn` attribute of older versions.
    #[allow(unreachable_code)]
    {
        unreachable!("proc_exit returned")
    }
}

/// Reloads the configuration file after a SIGHUP; whether there was one.
fn reload_if_signalled() -> bool {
    if !BackgroundWorker::sighup_received() {
        return false;
    }
    // SAFETY: reloading the configuration file is what a process does on SIGHUP, outside any
    // transaction.
    unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
    true
}

/// Runs the generators until the server shuts down or the postmaster dies: each is stepped when
/// due, and at shutdown stopped. A slot 0 worker also puts the clock thresholds in force, at its
/// start and after each reload.
fn run(generators: &mut Runner, sets_thresholds: bool) -> ! {
    let mut thresholds = Thresholds { ignored: None };
    if sets_thresholds {
        thresholds.apply();
    }
    loop {
        if reload_if_signalled() {
            if sets_thresholds {
                thresholds.apply();
            }
            generators.reload(settings::lease_timing());
        }
        if shutdown_requested() {
            break;
        }
        generators.step();
        let wait = generators
            .next_wake_ms()
            .saturating_sub(boottime_ms())
            .clamp(10, 1_000);
        if !wait_latch_ms(wait) {
            break;
        }
    }
    // Stop and release on SIGTERM; when the postmaster died there is nothing to release to.
    if shutdown_requested() {
        generators.shutdown();
    }
    // Restarted if it was terminated on its own.
    exit_worker();
}

/// The clock thresholds of this process's settings, put in force for every backend. A
/// combination the server would refuse at start is ignored, and the thresholds in force stay;
/// that is logged once, until the settings change.
struct Thresholds {
    ignored: Option<String>,
}

impl Thresholds {
    fn apply(&mut self) {
        let ignored = match settings::clock_thresholds() {
            Ok(policy) => {
                shmem::set_backwards_policy(policy);
                None
            }
            Err(why) => {
                let kept = shmem::backwards_policy();
                Some(format!(
                    "cosid: ignoring the reloaded clock thresholds: {why}; keeping spin {} ms and \
                     broken {} ms",
                    kept.spin_threshold_ms, kept.broken_threshold_ms
                ))
            }
        };
        if let Some(line) = ignored
            .as_ref()
            .filter(|line| self.ignored.as_ref() != Some(*line))
        {
            warning!("{line}");
        }
        self.ignored = ignored;
    }
}
