//! cosid's background workers, and what they share: registration, signals, waits and the exit.
//!
//! - [`lease`]: leases the default generator's machine id (`cosid.distributor = lease`).
//! - [`state`]: keeps the durable floor of a fixed machine id (`manual`, `stateful_set`).
//!
//! - [`named`]: the named generators; in the lease worker, or with a fixed machine id in the
//!   generators worker.
//!
//! Exactly one of the first two runs, and it alone puts reloaded clock thresholds in force.

pub mod lease;
pub mod named;
pub mod state;

use crate::host::boottime_ms;
use crate::{settings, shmem};
use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags,
};
use pgrx::pg_sys;
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

pub fn shutdown_requested() -> bool {
    // SAFETY: a plain read of a flag set by the SIGTERM handler.
    unsafe { pg_sys::ShutdownRequestPending != 0 }
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

/// Waits on the latch for at most `ms`; false when the postmaster died.
fn wait_latch_ms(ms: u64) -> bool {
    BackgroundWorker::wait_latch(Some(Duration::from_millis(ms)))
}

/// Sleeps until `ms` have passed, the server shuts down or the postmaster dies.
fn sleep_unless_shutdown(ms: u64) {
    let until = boottime_ms() + ms;
    while !shutdown_requested() {
        let now = boottime_ms();
        if now >= until || !wait_latch_ms((until - now).min(50)) {
            break;
        }
    }
}

/// Puts the clock thresholds of this process's settings in force for every backend: at the
/// worker's start and after each reload. A combination the server would refuse at start is
/// ignored, and the thresholds in force stay; the error is the line to log.
fn apply_clock_thresholds() -> Result<(), String> {
    match settings::clock_thresholds() {
        Ok(policy) => {
            shmem::set_backwards_policy(policy);
            Ok(())
        }
        Err(why) => {
            let kept = shmem::backwards_policy();
            Err(format!(
                "cosid: ignoring the reloaded clock thresholds: {why}; keeping spin {} ms and \
                 broken {} ms",
                kept.spin_threshold_ms, kept.broken_threshold_ms
            ))
        }
    }
}
