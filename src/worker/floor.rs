//! The durable floor of a fixed machine id (`manual`, `stateful_set`): every
//! `cosid.local_state_interval` the last timestamp a generator issued is written to its
//! namespace's state file, padded by the interval (ids may be issued until the next write), and
//! once more when it stops. After a crash and a restart the generator is opened above that floor
//! (`opening.rs`), so that a clock stepped back across the crash is refused (or waited out)
//! instead of repeating ids. A leased machine id has the lease watermark for that instead.

use crate::host::boottime_ms;
use crate::shmem::GeneratorSlot;
use crate::{local_state, opening, settings};
use cosid_core::state_file::StateRecord;
use pgrx::prelude::*;

pub struct FloorWriter<'a> {
    slot: &'a GeneratorSlot,
    machine_id: u32,
    file: String,
    next_write_ms: u64,
    failing: bool,
}

impl<'a> FloorWriter<'a> {
    /// The writer of a generator's floor; a live named generator not open yet is opened above
    /// its floor first (the postmaster opened the default one).
    pub fn new(slot: &'a GeneratorSlot, machine_id: u32) -> FloorWriter<'a> {
        if opening::opened_by_its_worker(slot) && slot.is_live() && !slot.state.is_open() {
            opening::open_fixed(slot, machine_id);
        }
        FloorWriter {
            slot,
            machine_id,
            file: opening::state_file(slot),
            next_write_ms: 0,
            failing: false,
        }
    }

    pub fn next_wake_ms(&self) -> u64 {
        self.next_write_ms
    }

    /// Writes the floor when due, while the generator is open.
    pub fn step(&mut self) {
        let now = boottime_ms();
        if now < self.next_write_ms {
            return;
        }
        let interval_ms = settings::local_state_interval_ms();
        self.next_write_ms = now + interval_ms.max(1);
        if !self.slot.state.is_open() {
            return;
        }
        let last_ms = self.last_ms();
        self.write(&local_state::record(
            self.slot.namespace(),
            self.machine_id,
            last_ms,
            interval_ms,
        ));
    }

    /// Writes the floor once more as the generator stops. A named generator is closed first, and
    /// its floor is then exact; the default one stays open (see `opening.rs`), and its floor is
    /// padded. A file whose floor is unknown, or that a refused history left closed, is left as
    /// it is: overwriting it would lose the floor for good.
    pub fn stop(&mut self) {
        if !self.slot.state.is_open()
            && opening::refused_until_restart(self.slot, opening::Machine::Fixed)
        {
            return;
        }
        let record = if opening::stays_open_at_stop(self.slot) {
            let interval_ms = settings::local_state_interval_ms();
            local_state::record(
                self.slot.namespace(),
                self.machine_id,
                self.last_ms(),
                interval_ms,
            )
        } else {
            self.slot.state.close();
            local_state::final_record(self.slot.namespace(), self.machine_id, self.last_ms())
        };
        self.write(&record);
    }

    fn last_ms(&self) -> i64 {
        let layout = self.slot.config().layout;
        self.slot.state.last_timestamp_ms(&layout)
    }

    fn write(&mut self, record: &StateRecord) {
        match local_state::write(&self.file, record) {
            Ok(()) => self.failing = false,
            Err(why) if !self.failing => {
                self.failing = true;
                warning!("cosid: {why}");
            }
            Err(_) => {}
        }
    }
}
