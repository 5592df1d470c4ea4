//! The generator's clock inside a server: the wall clock for timestamps, a monotonic clock to
//! bound waits, and waits that let a cancelled query or a terminated backend go.

use crate::generator::{BackwardsPolicy, Clock};
use pgrx::pg_sys;
use std::time::{SystemTime, UNIX_EPOCH};

/// The wall clock in Unix milliseconds (negative before 1970, as a stepped clock may be).
pub fn unix_ms_now() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(since) => since.as_millis() as i64,
        Err(before) => -(before.duration().as_millis() as i64),
    }
}

/// Longest single sleep: waits are cut into slices so that interrupts are seen promptly.
const SLEEP_SLICE_MS: u64 = 10;

/// Milliseconds since boot on CLOCK_BOOTTIME: the same in every process, never stepped, and,
/// unlike `Instant`, still running while the machine is suspended, so that a lease deadline
/// counted on it passes during a suspend too.
pub fn boottime_ms() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the buffer we own; CLOCK_BOOTTIME exists on
    // every Linux this extension builds for, so it cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now) };
    now.tv_sec as u64 * 1000 + now.tv_nsec as u64 / 1_000_000
}

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
        crate::shmem::backwards_policy()
    }
}
