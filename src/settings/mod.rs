//! Every `cosid.*` setting: one table that defines them, the start-up checks of their
//! combinations, the server-start settings kept for the life of the server, and typed accessors.
//!
//! # The table
//!
//! [`table::SETTINGS`] has one row per setting: its name, its short and long descriptions, its
//! kind (bool, integer with its range, text with an optional check hook, or enum), its context
//! (server start, reload while preloaded, or reload in every process), its flags (`UNIT_MS`,
//! `SUPERUSER_ONLY`) and the `GucSetting` static PostgreSQL writes its value into, whose initial
//! value is the default. [`init`] defines the settings from the rows, and checks at start the
//! configured value of every row, so no setting can be defined without being checked. Adding a
//! setting is adding its static and its row, and an accessor if the code reads it.
//!
//! # What may change when
//!
//! The layout, the machine id source and the instance's identity are server-start settings
//! (`PGC_POSTMASTER`): changing them on a running server would break the ordering and uniqueness
//! of ids. The clock thresholds and the lease timings reload on SIGHUP; the worker of the default
//! generator checks each reload's combination as the start does, and keeps the values in force
//! when it does not fit. A value outside a setting's range is refused by PostgreSQL itself, with
//! a message that names the setting and the range; combinations are checked by
//! [`server_settings`], whose error stops the server from starting.
//!
//! While preloading, the `cosid` prefix is reserved once every setting is defined, so that a
//! misspelt `cosid.*` name is reported rather than kept silently (see [`init`]).

mod checks;
mod guc;
mod row;
mod table;

pub use checks::{layout_setting, server_settings};
pub use guc::init;

use cosid_core::distributor::{DistributorKind, NoMachineId};
use cosid_core::generator::{BackwardsPolicy, GeneratorConfig};
use cosid_core::lease::LeaseTiming;
use std::sync::OnceLock;
use table::{
    CLOCK_BACKWARDS_BROKEN_THRESHOLD, CLOCK_BACKWARDS_SPIN_THRESHOLD, FAIL_FAST, GUARDER_DELAY,
    GUARDER_INITIAL_DELAY, LOCAL_STATE_INTERVAL, SAFE_GUARD_DURATION,
};

/// The longest namespace, in bytes: it is kept in shared memory.
pub const MAX_NAMESPACE_LEN: usize = 63;
/// The most named generators a server can hold: `cosid.max_generators` is at most this, and
/// shared memory has a slot for each, plus the default generator's.
pub const MAX_NAMED_GENERATORS: usize = 31;
/// The longest generator name, in bytes: it is kept in shared memory.
pub const MAX_GENERATOR_NAME_LEN: usize = 63;
/// The longest instance id, in bytes: it is kept in shared memory.
pub const MAX_INSTANCE_ID_LEN: usize = 127;

/// Everything fixed at server start that the generator needs.
#[derive(Clone, Debug)]
pub struct ServerSettings {
    /// `cosid.database`: where the lease table and the generators' definitions are.
    pub database: String,
    /// `cosid.max_generators`: how many named generators the server can hold.
    pub max_generators: usize,
    pub config: GeneratorConfig,
    pub namespace: String,
    pub distributor: DistributorKind,
    pub machine: MachineSource,
    /// The clock thresholds at start; they reload (see [`clock_thresholds`]).
    pub backwards: BackwardsPolicy,
}

/// Where the default generator's machine id comes from.
#[derive(Clone, Debug)]
pub enum MachineSource {
    /// `manual` or `stateful_set` gave one.
    Fixed(u32),
    /// `manual` or `stateful_set` gave none: the server runs, but `cosid_next()` refuses and
    /// says why.
    Missing(NoMachineId),
    /// Leased by the background worker.
    Leased(LeaseSettings),
}

#[derive(Clone, Debug)]
pub struct LeaseSettings {
    /// `cosid.lease_store`, when set: a shared store instead of `cosid.database`.
    pub lease_store: Option<String>,
    /// `cosid.instance_id`, when set.
    pub instance_id: Option<String>,
    pub stable: bool,
}

/// The server-start settings the postmaster read and checked. They live as long as the server:
/// the shared-memory startup hook rebuilds the segment from them after a crash, and every
/// process the postmaster forks inherits them, so workers and SQL functions read the values
/// the server started with, whatever the configuration file says by then.
static SERVER: OnceLock<ServerSettings> = OnceLock::new();

/// Keeps the checked server-start settings for [`server`]. `_PG_init` calls this once, while
/// preloading; a second call would keep the first settings.
pub fn keep_server(settings: ServerSettings) -> &'static ServerSettings {
    SERVER.get_or_init(|| settings)
}

/// The settings the server started with; `None` when the library is not preloaded.
pub fn server() -> Option<&'static ServerSettings> {
    SERVER.get()
}

/// The lease timings, as they are now (they reload on SIGHUP).
pub fn lease_timing() -> LeaseTiming {
    LeaseTiming {
        safe_guard_ms: SAFE_GUARD_DURATION.get().max(1) as u64,
        guarder_delay_ms: GUARDER_DELAY.get().max(1) as u64,
        guarder_initial_delay_ms: GUARDER_INITIAL_DELAY.get().max(0) as u64,
    }
}

pub fn fail_fast() -> bool {
    FAIL_FAST.get()
}

pub fn local_state_interval_ms() -> u64 {
    LOCAL_STATE_INTERVAL.get().max(1) as u64
}

/// The clock step back thresholds as this process's settings say now (they reload on SIGHUP),
/// checked together. Generators use the ones in force in shared memory instead (see
/// `shmem::backwards_policy`), which only a valid combination replaces.
pub fn clock_thresholds() -> Result<BackwardsPolicy, String> {
    let spin = CLOCK_BACKWARDS_SPIN_THRESHOLD.get().max(0) as u64;
    let broken = CLOCK_BACKWARDS_BROKEN_THRESHOLD.get().max(0) as u64;
    if spin > broken {
        return Err(format!(
            "cosid.clock_backwards_spin_threshold ({spin} ms) must not exceed \
             cosid.clock_backwards_broken_threshold ({broken} ms)"
        ));
    }
    Ok(BackwardsPolicy {
        spin_threshold_ms: spin,
        broken_threshold_ms: broken,
    })
}
