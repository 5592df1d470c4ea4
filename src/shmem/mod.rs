//! The generators' shared memory: one segment per server, shared by every backend of every
//! database.
//!
//! # Protocol
//!
//! *Layout of the segment.* [`SharedState`] holds [`SLOT_COUNT`] slots; slot 0 is the
//! server's default generator, the one `cosid_next()` uses. Named generators
//! (`cosid_create_generator`) take the others, up to `cosid.max_generators`, so adding them needs
//! no new segment.
//!
//! *Slots and their phase.* A slot's [`Definition`] (name, namespace, layout, distributor) is
//! written while the slot is [`Phase::Free`], and never again until the segment
//! is rebuilt. Slot 0's is written by the postmaster in the startup hook, before any backend
//! exists; a named slot's by the one process that manages named generators (`worker::runner`),
//! which then stores the phase `Live` with `Release`. Readers load the phase with `Acquire`
//! before they read a definition, so they see it whole. A live slot is dropped by a
//! compare-and-swap `Live` → `Dropped` (the backend whose drop committed, or the managing
//! process), which then closes the generator. A dropped slot only becomes live again with the
//! same definition: a backend may still be between its check that the slot is live and its
//! compare-and-swap of the generator's word, and that id must stay one of the same generator.
//! Backends cache the slot index of the last name they looked up; a name never moves between
//! slots while one is live, and the cached slot is checked to be live on every call.
//!
//! *Lock-free state.* Everything that changes while the server runs is an atomic inside
//! `GeneratorState`: the state word (the last id issued, with the closed bit), the tick bound and
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
//! *The status.* Only the background worker writes a slot's `GeneratorStatus` (one writer, so no
//! lock); backends read it for errors and the status view. Its text field is a sequence lock over
//! atomic words: the writer makes the version odd, writes, makes it even; a reader retries until it
//! saw the same even version before and after copying.
//!
//! *Crashes.* When any backend dies abnormally, the postmaster throws the segment away and runs
//! the startup hook again on a fresh one. Nothing here survives that: the hook rebuilds slot 0
//! from the settings, and the managing process publishes the named generators again from their
//! definitions. A re-opened generator's floor is the current tick, so it issues nothing in
//! the tick in which the server was reinitialised, nor in any earlier one; a clock stepped back
//! meanwhile is covered by the lease watermark, or for a fixed machine id by the floor in the
//! local state file (`local_state.rs`).

mod slot;

pub use slot::{Definition, GeneratorSlot, Phase, DEFAULT_NAME};

use crate::error::CosidError;
use crate::host;
use crate::settings::{MachineSource, ServerSettings, MAX_INSTANCE_ID_LEN, MAX_NAMED_GENERATORS};
use cosid_core::generator::BackwardsPolicy;
use cosid_core::lease;
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgAtomic};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock};

/// How many slots the segment has: the default generator's and one per named generator.
pub const SLOT_COUNT: usize = 1 + MAX_NAMED_GENERATORS;
/// The default generator's slot.
const DEFAULT_SLOT: usize = 0;

#[repr(C)]
pub struct SharedState {
    pub slots: [GeneratorSlot; SLOT_COUNT],
    /// The instance id under which this server leases (every generator the same); empty when
    /// it does not lease. Written before the segment exists, never changed.
    instance_id_len: u8,
    instance_id: [u8; MAX_INSTANCE_ID_LEN],
    /// The clock step back thresholds in force, packed into one word so that a reader never sees
    /// half of a change: the spin threshold in the high 32 bits, the broken one in the low. The
    /// postmaster writes the ones the server started with; after that only the slot 0 worker
    /// (the lease worker or the state writer) writes, a combination it checked (`Release`);
    /// backends load it (`Acquire`) when the clock has stepped back.
    backwards: AtomicU64,
    /// Set once the managing process has read the named generators' definitions since the
    /// segment was built: until then, a name not found may be one not loaded yet.
    definitions_loaded: AtomicBool,
    /// Failed connections to `cosid.database` in a row, for the back-off of the worker that
    /// connects there (the lease worker or the generators worker: never both on one server).
    connect_attempts: AtomicU32,
    /// Set by a backend whose change of the definitions committed; the managing process reads
    /// them at once instead of at its next poll.
    definitions_changed: AtomicBool,
    /// The managing process's pid, whose latch such a backend sets; 0 while there is none.
    manager_pid: AtomicI32,
    /// Creations committed, and how many of them the managing process has published: while
    /// they differ, a name not found may be one just created.
    creations_committed: AtomicU64,
    creations_published: AtomicU64,
    /// The clock when this segment was made, in Unix milliseconds: no generator of it issues
    /// in that tick (`GeneratorSlot::publish`), so that a server killed and started again
    /// within one tick (a second, for the second layouts) never issues again in it, whatever
    /// floor its generators find (another distributor's, say).
    made_at_ms: i64,
}

/// The postmaster's own memory (never shared; inherited by the processes it starts) of the
/// latest timestamp of an id each namespace's generators issued in the segments it threw away
/// since it started (crash-restarts): every generator of a later segment opens above its
/// namespace's (`floor_ms_for`). A clock stepped forward for a moment and back, then a crash,
/// would otherwise let the new segment issue again the ids of that moment.
static ISSUED_BEFORE: Mutex<BTreeMap<String, i64>> = Mutex::new(BTreeMap::new());

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
// functions of this module that check that the library was preloaded first.
static SHARED: PgAtomic<SharedState> = unsafe { PgAtomic::new(c"cosid_generators") };

/// Set in the postmaster when the library is preloaded; inherited by every backend it forks.
static PRELOADED: AtomicBool = AtomicBool::new(false);

/// How the postmaster opens the default generator in a fresh segment (`opening.rs`): handed in
/// by `_PG_init`, so that this module does no file I/O and knows nothing of the history.
static OPEN_DEFAULT: OnceLock<fn(&GeneratorSlot, &ServerSettings)> = OnceLock::new();

/// Requests the segment and installs the hook that fills it. Only while preloading, after the
/// server-start settings were kept (`settings::keep_server`): the hook rebuilds the segment
/// from them after a crash, and opens the default generator with `open_default`.
pub fn init(open_default: fn(&GeneratorSlot, &ServerSettings)) {
    let _ = OPEN_DEFAULT.set(open_default);
    pg_shmem_init!(SHARED = fresh_state());
    PRELOADED.store(true, Ordering::Release);
}

/// The segment's contents at every (re)initialisation: runs in the postmaster's startup hook.
/// Slot 0 is published as the default generator and opened before any backend exists.
fn fresh_state() -> SharedState {
    let settings =
        crate::settings::server().expect("settings are kept before shared memory is requested");
    let mut state = SharedState {
        slots: std::array::from_fn(|_| GeneratorSlot::unused(settings.config)),
        instance_id_len: 0,
        instance_id: [0; MAX_INSTANCE_ID_LEN],
        backwards: AtomicU64::new(pack_policy(settings.backwards)),
        definitions_loaded: AtomicBool::new(false),
        connect_attempts: AtomicU32::new(0),
        definitions_changed: AtomicBool::new(false),
        manager_pid: AtomicI32::new(0),
        creations_committed: AtomicU64::new(0),
        creations_published: AtomicU64::new(0),
        made_at_ms: host::unix_ms_now(),
    };
    if let MachineSource::Leased(lease_settings) = &settings.machine {
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
        state.instance_id_len = slot::copy_text(&instance_id, &mut state.instance_id);
    }
    let default = &state.slots[DEFAULT_SLOT];
    let default_definition = Definition::default_generator(settings);
    let floor_ms = issued_before(default_definition.namespace()).max(state.made_at_ms);
    default.publish(default_definition, floor_ms);
    if let Some(open_default) = OPEN_DEFAULT.get() {
        open_default(default, settings);
    }
    // SAFETY: a plain flag the postmaster set before loading libraries.
    if !unsafe { pg_sys::IsUnderPostmaster } {
        // SAFETY: in the postmaster's startup hook: the callback list is the postmaster's own,
        // emptied when it throws the segment away, so each initialisation registers once, after
        // the segment was attached: the callback runs while it still is.
        unsafe { pg_sys::on_shmem_exit(Some(remember_segment), pg_sys::Datum::from(0)) };
    }
    state
}

/// As the postmaster throws a segment away (a crash-restart) or exits, when every process that
/// could issue an id is gone: the latest timestamp of an id each namespace's generators issued
/// goes into `ISSUED_BEFORE`, and the named generators' into `cosid.names`, whatever database
/// `cosid.database` names next time.
#[pg_guard]
unsafe extern "C-unwind" fn remember_segment(_code: std::os::raw::c_int, _arg: pg_sys::Datum) {
    let Ok(slots) = all_slots() else {
        return;
    };
    let issued: Vec<(bool, String, i64)> = slots
        .iter()
        .filter(|slot| slot.phase() != Phase::Free)
        .filter_map(|slot| {
            let last_ms = slot.state.last_issued_ms(&slot.config().layout)?;
            Some((slot.is_default(), slot.namespace().to_string(), last_ms))
        })
        .collect();
    {
        let mut before = ISSUED_BEFORE
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        for (_, namespace, last_ms) in &issued {
            let known = before.entry(namespace.clone()).or_insert(i64::MIN);
            *known = (*known).max(*last_ms);
        }
    }
    let named: Vec<(String, i64)> = issued
        .into_iter()
        .filter(|(default, _, _)| !default)
        .map(|(_, namespace, last_ms)| (namespace, last_ms))
        .collect();
    crate::names::record_last_ids(&named);
}

/// What `namespace`'s generators issued in the segments thrown away since the postmaster
/// started, as the postmaster kept it (a copy inherited by the processes it starts).
fn issued_before(namespace: &str) -> i64 {
    ISSUED_BEFORE.lock().map_or(i64::MIN, |before| {
        before.get(namespace).copied().unwrap_or(i64::MIN)
    })
}

/// When this segment was made (`SharedState::made_at_ms`).
pub fn made_at_ms() -> i64 {
    if !is_preloaded() {
        return i64::MIN;
    }
    SHARED.get().made_at_ms
}

/// What a generator of `namespace` published in this segment opens above: the ids its
/// namespace's generators issued before a crash-restart, and the tick the segment was made in.
pub fn floor_ms_for(namespace: &str) -> i64 {
    if !is_preloaded() {
        return i64::MIN;
    }
    issued_before(namespace).max(SHARED.get().made_at_ms)
}

pub fn is_preloaded() -> bool {
    PRELOADED.load(Ordering::Acquire)
}

pub fn not_preloaded() -> CosidError {
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

/// Every slot of the segment, `Free` ones included: for the process that manages them.
pub fn all_slots() -> Result<&'static [GeneratorSlot; SLOT_COUNT], CosidError> {
    if !is_preloaded() {
        return Err(not_preloaded());
    }
    Ok(&SHARED.get().slots)
}

/// The slots named generators may take: as many as `cosid.max_generators` allows.
pub fn named_slots(settings: &ServerSettings) -> Result<&'static [GeneratorSlot], CosidError> {
    let slots = all_slots()?;
    Ok(&slots[DEFAULT_SLOT + 1..=settings.max_generators.min(MAX_NAMED_GENERATORS)])
}

/// Every generator that has a definition, live or dropped, the default one first.
pub fn generators() -> Result<impl Iterator<Item = &'static GeneratorSlot>, CosidError> {
    Ok(all_slots()?
        .iter()
        .filter(|slot| slot.phase() != Phase::Free))
}

/// The instance id under which this server leases; empty when it does not lease.
pub fn instance_id() -> &'static str {
    if !is_preloaded() {
        return "";
    }
    let shared = SHARED.get();
    std::str::from_utf8(&shared.instance_id[..usize::from(shared.instance_id_len)]).unwrap_or("?")
}

/// Whether the named generators' definitions were read since the segment was built.
pub fn definitions_loaded() -> bool {
    is_preloaded() && SHARED.get().definitions_loaded.load(Ordering::Acquire)
}

/// Failed connections to `cosid.database` in a row (see [`SharedState`]).
pub fn connect_attempts() -> &'static AtomicU32 {
    &SHARED.get().connect_attempts
}

/// The managing process says where to wake it.
pub fn set_manager_pid(pid: i32) {
    if is_preloaded() {
        SHARED.get().manager_pid.store(pid, Ordering::Release);
    }
}

/// After a creation committed: counted, and the managing process reads the definitions now.
pub fn generator_created() {
    if is_preloaded() {
        SHARED
            .get()
            .creations_committed
            .fetch_add(1, Ordering::AcqRel);
        definitions_changed();
    }
}

/// Creations committed so far: the managing process reads this before the definitions, and
/// publishes it with [`set_creations_published`] once it has published what it read.
pub fn creations_committed() -> u64 {
    SHARED.get().creations_committed.load(Ordering::Acquire)
}

pub fn set_creations_published(count: u64) {
    SHARED
        .get()
        .creations_published
        .store(count, Ordering::Release);
}

/// Whether a committed creation may not be published yet.
pub fn creations_pending() -> bool {
    is_preloaded() && {
        let shared = SHARED.get();
        let published = shared.creations_published.load(Ordering::Acquire);
        shared.creations_committed.load(Ordering::Acquire) != published
    }
}

/// After a change of the definitions committed: the managing process reads them now.
pub fn definitions_changed() {
    if !is_preloaded() {
        return;
    }
    let shared = SHARED.get();
    shared.definitions_changed.store(true, Ordering::Release);
    let pid = shared.manager_pid.load(Ordering::Acquire);
    if pid == 0 {
        return;
    }
    // SAFETY: BackendPidGetProc looks the pid up under ProcArrayLock and returns null when no
    // process of the server has it; a PGPROC stays mapped for the server's life, and setting the
    // latch of a process that has just exited, or of one that reused the slot, only wakes it.
    unsafe {
        let proc = pg_sys::BackendPidGetProc(pid);
        if !proc.is_null() {
            pg_sys::SetLatch(&mut (*proc).procLatch);
        }
    }
}

/// Whether a backend changed the definitions since the last call.
pub fn take_definitions_changed() -> bool {
    is_preloaded()
        && SHARED
            .get()
            .definitions_changed
            .swap(false, Ordering::AcqRel)
}

pub fn set_definitions_loaded() {
    if is_preloaded() {
        SHARED
            .get()
            .definitions_loaded
            .store(true, Ordering::Release);
    }
}

/// The slot of this backend's last looked-up name: a slot's name never changes, so it stays
/// right as long as the slot is live and has the name asked for. A backend is one thread, so a
/// plain static does (a thread-local costs a call to the dynamic loader in a loaded library).
static LAST_LOOKUP: AtomicU8 = AtomicU8::new(0);

/// The live generator of that name (`default` is the default one), if any.
#[inline]
pub fn live_generator(name: &[u8]) -> Result<Option<&'static GeneratorSlot>, CosidError> {
    let slots = all_slots()?;
    let is = |slot: &GeneratorSlot| slot.is_live() && slot.definition().name_bytes() == name;
    let cached = &slots[usize::from(LAST_LOOKUP.load(Ordering::Relaxed)) % SLOT_COUNT];
    if is(cached) {
        return Ok(Some(cached));
    }
    let found = slots.iter().position(is);
    if let Some(index) = found {
        LAST_LOOKUP.store(index as u8, Ordering::Relaxed);
    }
    Ok(found.map(|index| &slots[index]))
}

/// The slot `cosid_next()` uses.
#[inline]
pub fn default_generator() -> Result<&'static GeneratorSlot, CosidError> {
    if !is_preloaded() {
        return Err(not_preloaded());
    }
    Ok(&SHARED.get().slots[DEFAULT_SLOT])
}
