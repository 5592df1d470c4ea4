//! The generator's clock inside a server: the wall clock for timestamps, a monotonic clock to
//! bound waits, and waits that let a cancelled query or a terminated backend go.

use crate::generator::{BackwardsPolicy, Clock};
use pgrx::pg_sys;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The wall clock in Unix milliseconds (negative before 1970, as a stepped clock may be).
pub fn unix_ms_now() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(since) => since.as_millis() as i64,
        Err(before) => -(before.duration().as_millis() as i64),
    }
}

/// Longest single sleep: waits are cut into slices so that interrupts are seen promptly.
const SLEEP_SLICE_MS: u64 = 10;

#[derive(Default)]
pub struct ServerClock {
    /// Set on the first wait only, so that the common path reads one clock.
    monotonic_origin: Option<Instant>,
}

impl Clock for ServerClock {
    #[inline]
    fn unix_ms(&mut self) -> i64 {
        unix_ms_now()
    }

    fn monotonic_ms(&mut self) -> u64 {
        let origin = *self.monotonic_origin.get_or_insert_with(Instant::now);
        origin.elapsed().as_millis() as u64
    }

    fn spin(&mut self) {
        std::hint::spin_loop();
        pg_sys::check_for_interrupts!();
    }

    fn sleep_ms(&mut self, ms: u64) {
        let mut left = ms;
        while left > 0 {
            let slice = left.min(SLEEP_SLICE_MS);
            // SAFETY: pg_usleep only sleeps; it is safe to call from a backend at any time.
            unsafe { pg_sys::pg_usleep((slice * 1000) as std::ffi::c_long) };
            pg_sys::check_for_interrupts!();
            left -= slice;
        }
    }

    fn backwards_policy(&mut self) -> BackwardsPolicy {
        crate::guc::backwards_policy()
    }
}
