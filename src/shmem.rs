//! The generators' shared memory: one segment per server, shared by every backend of every
//! database.
//!
//! # Protocol
//!
//! *Layout of the segment.* [`SharedState`] holds [`MAX_GENERATORS`] slots; slot 0 is the
//! server's default generator, the one `cosid_next()` uses. Later generators (named, each with
//! its own namespace and layout) take the other slots, so adding them needs no new segment.
//!
//! *Written once.* A slot's `config`, `namespace`, `distributor`, `instance_id` and `in_use` are written by the postmaster in the shared-memory startup hook, before any backend
//! exists, and never again. Any process reads them without synchronisation.
//!
//! *Lock-free state.* Everything that changes while the server runs is an atomic inside
//! [`GeneratorState`]: the state word (the last id issued, with the closed bit), the tick bound and
//! the counters. No LWLock or spinlock is taken on any path.
//!
//! - Issuing an id is a compare-and-swap of the state word, `AcqRel` on success, `Acquire` on
//!   failure: a backend that loses the race re-reads the word and decides again. The id a backend
//!   gets is the word it installed, so no two backends get the same id, and each backend's ids
//!   increase, because the word only increases while it is open.
//! - Opening (giving the generator a machine id) is a `Release` store of a floor word; closing is a
//!   `fetch_or` of the closed bit. A compare-and-swap that raced a close or a re-open fails.
//! - The tick bound is stored (`Release`) *before* the word that it governs is opened, and loaded
//!   (`Acquire`) after the word, so a backend that sees an open word also sees a bound at least as
//!   new as the one written before it was opened.
//! - The lease deadline is handled like the bound: the worker stores it (`Release`) after a
//!   renewal succeeds and before it opens a word; backends load it (`Acquire`) on every attempt.
//! - Counters are `Relaxed`: they are statistics and order nothing.
//! - The clock thresholds in force are one packed word (see [`SharedState`]), written by the
//!   postmaster and then by the slot 0 worker only, after it checked them together.
//!
//! *The lease.* Only the background worker writes a slot's [`LeaseStatus`] (one writer, so no
//! lock); backends read it for errors and the status view. Its text field is a sequence lock over
//! atomic words: the writer makes the version odd, writes, makes it even; a reader retries until it
//! saw the same even version before and after copying.
//!
//! *Crashes.* When any backend dies abnormally, the postmaster throws the segment away and runs
//! the startup hook again on a fresh one. Nothing here survives that: the hook rebuilds every slot
//! from the settings. A re-opened generator's floor is the current tick, so it issues nothing in
//! the tick in which the server was reinitialised, nor in any earlier one; a clock stepped back
//! meanwhile is covered by the lease watermark, or for a fixed machine id by the floor in the
//! local state file (`local_state.rs`).

use crate::distributor::DistributorKind;
use crate::error::CosidError;
use crate::generator::{BackwardsPolicy, GeneratorConfig, GeneratorState};
use crate::lease::{self, LeaseState};
use crate::settings::{MachineSource, MAX_INSTANCE_ID_LEN, MAX_NAMESPACE_LEN};
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgAtomic};
use std::sync::atomic::{
    fence, AtomicBool, AtomicI32, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering,
};

/// How many generators one server can hold.
pub const MAX_GENERATORS: usize = 8;
pub const DEFAULT_GENERATOR: usize = 0;

/// Text that one process writes and any reads, without a lock (see the protocol above).
#[repr(C)]
pub struct AtomicText<const WORDS: usize> {
    version: AtomicU64,
    len: AtomicU64,
    words: [AtomicU64; WORDS],
}

impl<const WORDS: usize> AtomicText<WORDS> {
    const fn new() -> Self {
        AtomicText {
            version: AtomicU64::new(0),
            len: AtomicU64::new(0),
            words: [const { AtomicU64::new(0) }; WORDS],
        }
    }

    /// Only one process may call this (the worker); text beyond the capacity is cut.
    pub fn store(&self, text: &str) {
        let mut bytes = text.as_bytes();
        if bytes.len() > WORDS * 8 {
            let mut cut = WORDS * 8;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            bytes = &bytes[..cut];
        }
        self.version.fetch_add(1, Ordering::AcqRel);
        fence(Ordering::Release);
        for (index, word) in self.words.iter().enumerate() {
            let mut chunk = [0u8; 8];
            let from = (index * 8).min(bytes.len());
            let to = (from + 8).min(bytes.len());
            chunk[..to - from].copy_from_slice(&bytes[from..to]);
            word.store(u64::from_le_bytes(chunk), Ordering::Relaxed);
        }
        self.len.store(bytes.len() as u64, Ordering::Relaxed);
        self.version.fetch_add(1, Ordering::Release);
    }

    pub fn load(&self) -> String {
        loop {
            let before = self.version.load(Ordering::Acquire);
            if before % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let len = (self.len.load(Ordering::Relaxed) as usize).min(WORDS * 8);
            let mut bytes = Vec::with_capacity(WORDS * 8);
            for word in &self.words {
                bytes.extend_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
            }
            fence(Ordering::Acquire);
            if self.version.load(Ordering::Relaxed) == before {
                bytes.truncate(len);
                return String::from_utf8_lossy(&bytes).into_owned();
            }
        }
    }
}

/// Why a leased generator is not generating, for `cosid_next()`'s error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum LeaseProblem {
    None = 0,
    Exhausted = 1,
    LayoutMismatch = 2,
    ClockBehind = 3,
    StoreError = 4,
    Standby = 5,
    NoExtension = 6,
    Lost = 7,
    ShuttingDown = 8,
    OwnLeaseLive = 9,
    /// The local state file cannot be read exactly: its floor is unknown.
    StateFile = 10,
}

impl LeaseProblem {
    fn from_u8(value: u8) -> LeaseProblem {
        match value {
            1 => LeaseProblem::Exhausted,
            2 => LeaseProblem::LayoutMismatch,
            3 => LeaseProblem::ClockBehind,
            4 => LeaseProblem::StoreError,
            5 => LeaseProblem::Standby,
            6 => LeaseProblem::NoExtension,
            7 => LeaseProblem::Lost,
            8 => LeaseProblem::ShuttingDown,
            9 => LeaseProblem::OwnLeaseLive,
            10 => LeaseProblem::StateFile,
            _ => LeaseProblem::None,
        }
    }
}

/// The lease of a slot whose machine id is leased, as the worker last saw it.
#[repr(C)]
pub struct LeaseStatus {
    state: AtomicU8,
    problem: AtomicU8,
    /// The machine id held, or -1.
    machine_id: AtomicI32,
    /// The random token of the current claim.
    claim_token: AtomicU64,
    /// Store-clock times, Unix ms; `i64::MIN` when unknown.
    expires_at_ms: AtomicI64,
    last_renewed_at_ms: AtomicI64,
    /// The watermark last written to the store, Unix ms.
    watermark_ms: AtomicI64,
    /// Lease workers started since the worker last connected to `cosid.database`: a worker that
    /// cannot connect ends with a FATAL error, and the next one waits longer before trying.
    pub connect_attempts: AtomicU32,
    /// The lease timings in force (the worker's, after its checks of every reload), in ms;
    /// 0 until the worker has started.
    safe_guard_ms: AtomicU64,
    guarder_delay_ms: AtomicU64,
    pub last_error: AtomicText<64>,
}

pub const UNKNOWN_TIME: i64 = i64::MIN;

impl LeaseStatus {
    const fn new() -> LeaseStatus {
        LeaseStatus {
            state: AtomicU8::new(LeaseState::Claiming as u8),
            problem: AtomicU8::new(LeaseProblem::None as u8),
            machine_id: AtomicI32::new(-1),
            claim_token: AtomicU64::new(0),
            expires_at_ms: AtomicI64::new(UNKNOWN_TIME),
            last_renewed_at_ms: AtomicI64::new(UNKNOWN_TIME),
            watermark_ms: AtomicI64::new(UNKNOWN_TIME),
            connect_attempts: AtomicU32::new(0),
            safe_guard_ms: AtomicU64::new(0),
            guarder_delay_ms: AtomicU64::new(0),
            last_error: AtomicText::new(),
        }
    }

    pub fn state(&self) -> LeaseState {
        LeaseState::from_u8(self.state.load(Ordering::Acquire))
    }
    pub fn set_state(&self, state: LeaseState) {
        self.state.store(state as u8, Ordering::Release);
    }
    pub fn problem(&self) -> LeaseProblem {
        LeaseProblem::from_u8(self.problem.load(Ordering::Acquire))
    }
    pub fn set_problem(&self, problem: LeaseProblem) {
        self.problem.store(problem as u8, Ordering::Release);
    }
    /// The machine id and claim token held, if any.
    pub fn held(&self) -> Option<(u32, u64)> {
        let machine_id = self.machine_id.load(Ordering::Acquire);
        (machine_id >= 0).then(|| (machine_id as u32, self.claim_token.load(Ordering::Acquire)))
    }
    pub fn set_held(&self, held: Option<(u32, u64)>) {
        match held {
            Some((machine_id, token)) => {
                self.claim_token.store(token, Ordering::Release);
                self.machine_id.store(machine_id as i32, Ordering::Release);
            }
            None => self.machine_id.store(-1, Ordering::Release),
        }
    }
    pub fn expires_at_ms(&self) -> i64 {
        self.expires_at_ms.load(Ordering::Acquire)
    }
    pub fn last_renewed_at_ms(&self) -> i64 {
        self.last_renewed_at_ms.load(Ordering::Acquire)
    }
    pub fn watermark_ms(&self) -> i64 {
        self.watermark_ms.load(Ordering::Acquire)
    }
    pub fn set_renewed(&self, renewed_at_ms: i64, expires_at_ms: i64, watermark_ms: i64) {
        self.last_renewed_at_ms
            .store(renewed_at_ms, Ordering::Release);
        self.expires_at_ms.store(expires_at_ms, Ordering::Release);
        self.watermark_ms.store(watermark_ms, Ordering::Release);
    }
    /// The safe guard and the renewal period in force, in ms; `None` before the worker started.
    pub fn timing_ms(&self) -> Option<(u64, u64)> {
        let safe_guard = self.safe_guard_ms.load(Ordering::Relaxed);
        (safe_guard > 0).then(|| (safe_guard, self.guarder_delay_ms.load(Ordering::Relaxed)))
    }
    pub fn set_timing_ms(&self, safe_guard_ms: u64, guarder_delay_ms: u64) {
        self.safe_guard_ms.store(safe_guard_ms, Ordering::Relaxed);
        self.guarder_delay_ms
            .store(guarder_delay_ms, Ordering::Relaxed);
    }
    pub fn set_watermark_ms(&self, watermark_ms: i64) {
        self.watermark_ms.store(watermark_ms, Ordering::Release);
    }
}

#[repr(C)]
pub struct GeneratorSlot {
    pub state: GeneratorState,
    pub config: GeneratorConfig,
    pub lease: LeaseStatus,
    namespace_len: u8,
    namespace: [u8; MAX_NAMESPACE_LEN],
    instance_id_len: u8,
    instance_id: [u8; MAX_INSTANCE_ID_LEN],
    distributor: DistributorKind,
    in_use: bool,
}

impl GeneratorSlot {
    const fn unused(config: GeneratorConfig) -> GeneratorSlot {
        GeneratorSlot {
            state: GeneratorState::closed(),
            config,
            lease: LeaseStatus::new(),
            namespace_len: 0,
            namespace: [0; MAX_NAMESPACE_LEN],
            instance_id_len: 0,
            instance_id: [0; MAX_INSTANCE_ID_LEN],
            distributor: DistributorKind::Manual,
            in_use: false,
        }
    }

    pub fn namespace(&self) -> &str {
        std::str::from_utf8(&self.namespace[..usize::from(self.namespace_len)]).unwrap_or("?")
    }

    /// The instance id this slot leases under; empty when it does not lease.
    pub fn instance_id(&self) -> &str {
        std::str::from_utf8(&self.instance_id[..usize::from(self.instance_id_len)]).unwrap_or("?")
    }

    pub fn distributor(&self) -> DistributorKind {
        self.distributor
    }

    pub fn in_use(&self) -> bool {
        self.in_use
    }
}

#[repr(C)]
pub struct SharedState {
    pub slots: [GeneratorSlot; MAX_GENERATORS],
    /// The clock step back thresholds in force, packed into one word so that a reader never sees
    /// half of a change: the spin threshold in the high 32 bits, the broken one in the low. The
    /// postmaster writes the ones the server started with; after that only the slot 0 worker
    /// (the lease worker or the state writer) writes, a combination it checked (`Release`);
    /// backends load it (`Acquire`) when the clock has stepped back.
    backwards: AtomicU64,
}

fn pack_policy(policy: BackwardsPolicy) -> u64 {
    (policy.spin_threshold_ms.min(u32::MAX as u64) << 32)
        | policy.broken_threshold_ms.min(u32::MAX as u64)
}

/// The clock step back thresholds in force. Not preloaded, nothing generates; the defaults then.
pub fn backwards_policy() -> BackwardsPolicy {
    if !is_preloaded() {
        return BackwardsPolicy::default();
    }
    let word = SHARED.get().backwards.load(Ordering::Acquire);
    BackwardsPolicy {
        spin_threshold_ms: word >> 32,
        broken_threshold_ms: word & u32::MAX as u64,
    }
}

/// Puts checked thresholds in force for every backend. Only the slot 0 worker calls this.
pub fn set_backwards_policy(policy: BackwardsPolicy) {
    if is_preloaded() {
        SHARED
            .get()
            .backwards
            .store(pack_policy(policy), Ordering::Release);
    }
}

// SAFETY: `SharedState` is plain data and atomics, with no pointers, so it means the same in every
// process that maps the segment; the protocol above says who may write what.
unsafe impl PGRXSharedMemory for SharedState {}

// SAFETY: the name is unique to this extension, and the segment is only reached through
// `slots()` and `default_generator()`, which check that the library was preloaded first.
static SHARED: PgAtomic<SharedState> = unsafe { PgAtomic::new(c"cosid_generators") };

/// Set in the postmaster when the library is preloaded; inherited by every backend it forks.
static PRELOADED: AtomicBool = AtomicBool::new(false);

/// Requests the segment and installs the hook that fills it. Only while preloading, after the
/// server-start settings were kept (`settings::keep_server`): the hook rebuilds the segment
/// from them after a crash.
pub fn init() {
    pg_shmem_init!(SHARED = fresh_state());
    PRELOADED.store(true, Ordering::Release);
}

/// The segment's contents at every (re)initialisation: runs in the postmaster's startup hook.
fn fresh_state() -> SharedState {
    let settings =
        crate::settings::server().expect("settings are kept before shared memory is requested");
    let mut state = SharedState {
        slots: std::array::from_fn(|_| GeneratorSlot::unused(settings.config)),
        backwards: AtomicU64::new(pack_policy(settings.backwards)),
    };
    let slot = &mut state.slots[DEFAULT_GENERATOR];
    let namespace = settings.namespace.as_bytes();
    slot.namespace[..namespace.len()].copy_from_slice(namespace);
    slot.namespace_len = namespace.len() as u8;
    slot.distributor = settings.distributor;
    slot.in_use = true;
    match &settings.machine {
        MachineSource::Fixed(machine_id) => {
            let layout = &settings.config.layout;
            let now_ticks = layout
                .unix_ms_to_ticks(crate::clock::unix_ms_now())
                .unwrap_or(0);
            // The durable floor the state writer left: ids issued before a crash stay below
            // everything issued after it, even if the clock was stepped back meanwhile. A file
            // that cannot be read exactly leaves the generator closed: `cosid_next()` refuses
            // and reports why (this hook may not raise), and the state writer leaves the file
            // as it is.
            match crate::local_state::read() {
                Ok(record) => {
                    let floor_ticks = crate::local_state::floor_ms(
                        record.as_ref(),
                        &settings.namespace,
                        *machine_id,
                    )
                    .and_then(|floor_ms| layout.unix_ms_to_ticks(floor_ms).ok())
                    .map_or(now_ticks, |floor| floor.max(now_ticks));
                    // The machine id was checked against the layout with the settings; a
                    // refusal here leaves the generator stopped rather than issue a wrong id.
                    match slot.state.open(layout, *machine_id, floor_ticks) {
                        Ok(()) => slot.lease.set_state(LeaseState::Up),
                        Err(why) => {
                            slot.lease.set_state(LeaseState::Stopped);
                            slot.lease.last_error.store(&why.to_string());
                        }
                    }
                }
                Err(unusable) => {
                    slot.lease.set_problem(LeaseProblem::StateFile);
                    slot.lease.last_error.store(&unusable.to_string());
                    slot.lease.set_state(LeaseState::Stopped);
                }
            }
        }
        MachineSource::Missing(_) => slot.lease.set_state(LeaseState::Stopped),
        MachineSource::Leased(lease_settings) => {
            // A fresh identity at every initialisation: after a crash, the old claim is somebody
            // else's until it expires.
            let instance_id = match &lease_settings.instance_id {
                Some(id) => id.clone(),
                None => lease::default_instance_id(
                    &host_name(),
                    postmaster_port(),
                    std::process::id(),
                    (!lease_settings.stable).then(random_u32),
                ),
            };
            let bytes = &instance_id.as_bytes()[..instance_id.len().min(MAX_INSTANCE_ID_LEN)];
            slot.instance_id[..bytes.len()].copy_from_slice(bytes);
            slot.instance_id_len = bytes.len() as u8;
            slot.lease.set_state(LeaseState::Claiming);
        }
    }
    state
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_string())
        .unwrap_or_else(|_| "localhost".to_string())
}

fn postmaster_port() -> u16 {
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
        return crate::clock::boottime_ms() ^ (std::process::id() as u64) << 40;
    }
    u64::from_le_bytes(bytes)
}

fn random_u32() -> u32 {
    random_u64() as u32
}

pub fn is_preloaded() -> bool {
    PRELOADED.load(Ordering::Acquire)
}

fn not_preloaded() -> CosidError {
    CosidError::prerequisite("cosid must be loaded via \"shared_preload_libraries\"")
        .detail(
            "Ids are generated in shared memory, which only a library loaded at server start can \
             set up. The decode and format functions work without it.",
        )
        .hint(
            "Add cosid to shared_preload_libraries in postgresql.conf (for example \
             shared_preload_libraries = 'cosid') and restart the server.",
        )
}

/// Every slot of the segment.
pub fn slots() -> Result<&'static [GeneratorSlot; MAX_GENERATORS], CosidError> {
    if !is_preloaded() {
        return Err(not_preloaded());
    }
    Ok(&SHARED.get().slots)
}

/// The slot `cosid_next()` uses.
#[inline]
pub fn default_generator() -> Result<&'static GeneratorSlot, CosidError> {
    if !is_preloaded() {
        return Err(not_preloaded());
    }
    Ok(&SHARED.get().slots[DEFAULT_GENERATOR])
}
