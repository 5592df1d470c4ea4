//! A worker's waits and the server's shutdown request: what every part of a worker checks
//! between steps.

use crate::host::boottime_ms;
use pgrx::bgworkers::BackgroundWorker;
use pgrx::pg_sys;
use std::time::Duration;

pub fn shutdown_requested() -> bool {
    // SAFETY: a plain read of a flag set by the SIGTERM handler.
    unsafe { pg_sys::ShutdownRequestPending != 0 }
}

/// Waits on the latch for at most `ms`; false when the postmaster died.
pub(super) fn wait_latch_ms(ms: u64) -> bool {
    BackgroundWorker::wait_latch(Some(Duration::from_millis(ms)))
}

/// Sleeps until `ms` have passed, the server shuts down or the postmaster dies.
pub(super) fn sleep_unless_shutdown(ms: u64) {
    let until = boottime_ms() + ms;
    while !shutdown_requested() {
        let now = boottime_ms();
        if now >= until || !wait_latch_ms((until - now).min(50)) {
            break;
        }
    }
}
