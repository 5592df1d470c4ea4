//! What a server process asks of its machine: the clocks, strong random numbers, the host name
//! and the server's port.

use pgrx::pg_sys;
use std::time::{SystemTime, UNIX_EPOCH};

/// The wall clock in Unix milliseconds (negative before 1970, as a stepped clock may be).
pub fn unix_ms_now() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(since) => since.as_millis() as i64,
        Err(before) => -(before.duration().as_millis() as i64),
    }
}

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

pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_string())
        .unwrap_or_else(|_| "localhost".to_string())
}

pub fn postmaster_port() -> u16 {
    // SAFETY: PostPortNumber is set from the `port` setting before shared memory is created.
    unsafe { pg_sys::PostPortNumber as u16 }
}

/// A random number from PostgreSQL's strong random source.
pub fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    // SAFETY: pg_strong_random fills exactly the 8 bytes of the buffer we pass.
    let filled = unsafe { pg_sys::pg_strong_random(bytes.as_mut_ptr().cast(), bytes.len()) };
    if !filled {
        // Not reached on Linux; a time-derived value still differs between claims.
        return boottime_ms() ^ (std::process::id() as u64) << 40;
    }
    u64::from_le_bytes(bytes)
}

pub fn random_u32() -> u32 {
    random_u64() as u32
}
