//! Connecting a worker to `cosid.database`, with one back-off for every worker that does. A
//! worker that cannot connect (the database does not exist, say) ends with PostgreSQL's FATAL
//! error and is started again: each attempt after a failed one waits twice as long, up to a
//! minute. The count of failed attempts is one word of the segment: the lease worker and the
//! generators worker never run on the same server.

use super::signals::{shutdown_requested, sleep_unless_shutdown};
use crate::opening;
use crate::shmem::{self, GeneratorSlot};
use cosid_core::lease::GeneratorProblem;
use pgrx::bgworkers::BackgroundWorker;
use pgrx::prelude::*;
use std::sync::atomic::Ordering;

/// Connects this worker (`worker`, its name in the log) to `database`, after the wait its
/// earlier failed attempts call for. While it waits, the reason stays in `reported`'s status
/// (the default generator's, for the lease worker, which runs it). Returns false on shutdown.
pub fn connect(worker: &str, database: &str, reported: Option<&GeneratorSlot>) -> bool {
    let attempts = shmem::connect_attempts();
    let failed = attempts.fetch_add(1, Ordering::Relaxed);
    if failed > 0 {
        let wait_ms = (1_000u64 << failed.min(6).saturating_sub(1)).min(60_000);
        let text = format!(
            "the {worker} could not connect to database \"{database}\" (cosid.database); the server log says why, for example that it does not exist; trying again every {} s",
            wait_ms / 1_000
        );
        if let Some(slot) =
            reported.filter(|slot| !opening::refused_until_restart(slot, opening::Machine::Leased))
        {
            slot.status.last_error.store(&text);
            slot.status.set_problem(GeneratorProblem::StoreError);
        }
        if failed == 1 {
            warning!("cosid: {text}");
        }
        sleep_unless_shutdown(wait_ms);
        if shutdown_requested() {
            return false;
        }
    }
    BackgroundWorker::connect_worker_to_spi(Some(database), None);
    crate::store::local::pin_session_settings();
    attempts.store(0, Ordering::Relaxed);
    true
}
