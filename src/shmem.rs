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

use crate::error::CosidError;
use crate::settings::{MachineSource, MAX_INSTANCE_ID_LEN, MAX_NAMESPACE_LEN};
use crate::{host, local_state};
use cosid_core::distributor::DistributorKind;
use cosid_core::generator::{BackwardsPolicy, GeneratorConfig, GeneratorState};
use cosid_core::lease::{self, LeaseProblem, LeaseState, LeaseStatus};
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgAtomic};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// How many generators one server can hold.
pub const MAX_GENERATORS: usize = 8;
pub const DEFAULT_GENERATOR: usize = 0;

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
            // A file that cannot be read exactly leaves the generator closed: `cosid_next()`
            // refuses and reports why (this hook may not raise), and the state writer leaves the
            // file as it is.
            match local_state::fixed_floor_ticks(layout, &settings.namespace, *machine_id) {
                Ok(floor_ticks) => {
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
                    &host::host_name(),
                    host::postmaster_port(),
                    std::process::id(),
                    (!lease_settings.stable).then(host::random_u32),
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
