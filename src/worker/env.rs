//! The process a lease session runs in ([`ServerEnv`]): clocks, latch sleeps, the log, the
//! settings and the state file of the session's namespace.

use super::signals::{shutdown_requested, sleep_unless_shutdown};
use crate::host::{boottime_ms, random_u64, unix_ms_now};
use crate::{local_state, settings, shmem};
use cosid_core::lease::session::{Env, LogLevel};
use cosid_core::state_file::StateRecord;
use pgrx::prelude::*;

/// A lease session's process: this worker, and the state file of the session's namespace.
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
