//! The generator's clock inside a server: the wall clock for timestamps, a monotonic clock to
//! bound waits, waits that let a cancelled query or a terminated backend go, and the clock step
//! back thresholds in force in shared memory.

use crate::host::{boottime_ms, unix_ms_now};
use cosid_core::generator::{BackwardsPolicy, Clock};
use pgrx::pg_sys;

pub struct ServerClock;

impl Clock for ServerClock {
    #[inline]
    fn unix_ms(&mut self) -> i64 {
        unix_ms_now()
    }

    fn monotonic_ms(&mut self) -> u64 {
        boottime_ms()
    }

    fn spin(&mut self) {
        std::hint::spin_loop();
        pg_sys::check_for_interrupts!();
    }

    /// Sleeps on the process latch, as `pg_sleep()` does: a cancel or terminate request sets the
    /// latch, so it ends the sleep at once and is acted on here; the postmaster's death ends the
    /// process. No CPU is used meanwhile.
    fn sleep_ms(&mut self, ms: u64) {
        let until = boottime_ms() + ms;
        loop {
            pg_sys::check_for_interrupts!();
            let left = until.saturating_sub(boottime_ms());
            if left == 0 {
                return;
            }
            // SAFETY: every process that can call cosid_next() (a backend, a parallel or
            // background worker) has initialised MyLatch, its own latch, and waiting on it and
            // resetting it are what PostgreSQL's own sleeps do.
            unsafe {
                pg_sys::WaitLatch(
                    pg_sys::MyLatch,
                    (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH)
                        as std::ffi::c_int,
                    left as std::ffi::c_long,
                    pg_sys::PG_WAIT_EXTENSION,
                );
                pg_sys::ResetLatch(pg_sys::MyLatch);
            }
        }
    }

    fn backwards_policy(&mut self) -> BackwardsPolicy {
        crate::shmem::backwards_policy()
    }
}
