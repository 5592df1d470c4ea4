//! The generators' shared memory: one segment per server, shared by every backend of every
//! database.
//!
//! # Protocol
//!
//! *Layout of the segment.* [`SharedState`] holds [`MAX_GENERATORS`] slots; slot 0 is the
//! server's default generator, the one `cosid_next()` uses. Later generators (named, each with
//! its own namespace and layout) take the other slots, so adding them needs no new segment.
//!
//! *Written once.* A slot's `config`, `namespace`, `distributor` and `in_use` are written by the
//! postmaster in the shared-memory startup hook, before any backend exists, and never again. Any
//! process reads them without synchronisation.
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
//! - Counters are `Relaxed`: they are statistics and order nothing.
//!
//! *Crashes.* When any backend dies abnormally, the postmaster throws the segment away and runs
//! the startup hook again on a fresh one. Nothing here survives that: the hook rebuilds every slot
//! from the settings. A re-opened generator's floor is the current tick, so it issues nothing in
//! the tick in which the server was reinitialised, nor in any earlier one (unless the clock has
//! been stepped back, which is what the lease watermark is for).

use crate::distributor::DistributorKind;
use crate::error::CosidError;
use crate::generator::{GeneratorConfig, GeneratorState};
use crate::guc::{ServerSettings, MAX_NAMESPACE_LEN};
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgAtomic};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// How many generators one server can hold.
pub const MAX_GENERATORS: usize = 8;
pub const DEFAULT_GENERATOR: usize = 0;

#[repr(C)]
pub struct GeneratorSlot {
    pub state: GeneratorState,
    pub config: GeneratorConfig,
    namespace_len: u8,
    namespace: [u8; MAX_NAMESPACE_LEN],
    distributor: DistributorKind,
    in_use: bool,
}

impl GeneratorSlot {
    const fn unused(config: GeneratorConfig) -> GeneratorSlot {
        GeneratorSlot {
            state: GeneratorState::closed(),
            config,
            namespace_len: 0,
            namespace: [0; MAX_NAMESPACE_LEN],
            distributor: DistributorKind::Manual,
            in_use: false,
        }
    }

    pub fn namespace(&self) -> &str {
        std::str::from_utf8(&self.namespace[..usize::from(self.namespace_len)]).unwrap_or("?")
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
}

// SAFETY: `SharedState` is plain data and atomics, with no pointers, so it means the same in every
// process that maps the segment; the protocol above says who may write what.
unsafe impl PGRXSharedMemory for SharedState {}

// SAFETY: the name is unique to this extension, and the segment is only reached through
// `slots()` and `default_generator()`, which check that the library was preloaded first.
static SHARED: PgAtomic<SharedState> = unsafe { PgAtomic::new(c"cosid_generators") };

/// Set in the postmaster when the library is preloaded; inherited by every backend it forks.
static PRELOADED: AtomicBool = AtomicBool::new(false);

/// The server-start settings the postmaster read, kept to rebuild the segment after a crash.
static SERVER_SETTINGS: OnceLock<ServerSettings> = OnceLock::new();

/// Requests the segment and installs the hook that fills it. Only while preloading.
pub fn init(settings: ServerSettings) {
    let _ = SERVER_SETTINGS.set(settings);
    pg_shmem_init!(SHARED = fresh_state());
    PRELOADED.store(true, Ordering::Release);
}

/// The segment's contents at every (re)initialisation: runs in the postmaster's startup hook.
fn fresh_state() -> SharedState {
    let settings = SERVER_SETTINGS
        .get()
        .expect("settings are stored before shared memory is requested");
    let mut state = SharedState {
        slots: std::array::from_fn(|_| GeneratorSlot::unused(settings.config)),
    };
    let slot = &mut state.slots[DEFAULT_GENERATOR];
    let namespace = settings.namespace.as_bytes();
    slot.namespace[..namespace.len()].copy_from_slice(namespace);
    slot.namespace_len = namespace.len() as u8;
    slot.distributor = settings.distributor;
    slot.in_use = true;
    if let Ok(machine_id) = settings.machine {
        let layout = &settings.config.layout;
        let now_ticks = layout
            .unix_ms_to_ticks(crate::clock::unix_ms_now())
            .unwrap_or(0);
        slot.state.open(layout, machine_id, now_ticks);
    }
    state
}

pub fn is_preloaded() -> bool {
    PRELOADED.load(Ordering::Acquire)
}

/// The settings the postmaster started with; `None` when not preloaded.
pub fn server_settings() -> Option<&'static ServerSettings> {
    SERVER_SETTINGS.get()
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
