//! The table of every `cosid.*` setting: its row and the static PostgreSQL writes its value into.
//!
//! Each setting has a static that PostgreSQL writes its value into (the static's initial value
//! is the setting's default: pgrx hands it to PostgreSQL as the boot value) and one row of
//! [`SETTINGS`]. `guc::init` defines the settings from the rows, and the list of values it checks
//! at start is the same rows' names, so a setting cannot be defined without being checked.

use super::row::{check_epoch, Context, Kind, Setting};
use cosid_core::layout;
use cosid_core::lease::LONGEST_SAFE_GUARD_MS;
use pgrx::{GucFlags, GucSetting, PostgresGucEnum};
use std::ffi::{CStr, CString};

#[derive(PostgresGucEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum TimeUnitSetting {
    #[name = c"millisecond"]
    Millisecond,
    #[name = c"second"]
    Second,
}

#[derive(PostgresGucEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum DistributorSetting {
    #[name = c"lease"]
    Lease,
    #[name = c"manual"]
    Manual,
    #[name = c"stateful_set"]
    StatefulSet,
    #[name = c"cosid_jdbc"]
    CosidJdbc,
    #[name = c"cosid_redis"]
    CosidRedis,
}

pub(super) static NAMESPACE: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"cosid"));
pub(super) static DISTRIBUTOR: GucSetting<DistributorSetting> =
    GucSetting::<DistributorSetting>::new(DistributorSetting::Lease);
pub(super) static MACHINE_ID: GucSetting<i32> = GucSetting::<i32>::new(-1);
pub(super) static LEASE_STORE: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(None);
pub(super) static DATABASE: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"postgres"));
pub(super) static INSTANCE_ID: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(None);
pub(super) static STABLE: GucSetting<bool> = GucSetting::<bool>::new(false);
pub(super) static GUARDER_DELAY: GucSetting<i32> = GucSetting::<i32>::new(60_000);
pub(super) static GUARDER_INITIAL_DELAY: GucSetting<i32> = GucSetting::<i32>::new(60_000);
pub(super) static SAFE_GUARD_DURATION: GucSetting<i32> = GucSetting::<i32>::new(300_000);
pub(super) static FAIL_FAST: GucSetting<bool> = GucSetting::<bool>::new(true);
pub(super) static MAX_GENERATORS: GucSetting<i32> = GucSetting::<i32>::new(8);
pub(super) static LOCAL_STATE_INTERVAL: GucSetting<i32> = GucSetting::<i32>::new(1_000);
// The layout settings are read by name (see `layout_setting`); these statics only hold the
// values PostgreSQL checked against each setting's range.
/// `cosid.epoch`'s default, CosId's epoch (`layout::COSID_EPOCH_TEXT_NUL`).
pub(super) const DEFAULT_EPOCH: &CStr =
    match CStr::from_bytes_with_nul(cosid_core::layout::COSID_EPOCH_TEXT_NUL.as_bytes()) {
        Ok(text) => text,
        Err(_) => panic!("COSID_EPOCH_TEXT_NUL ends with its only NUL"),
    };
static EPOCH: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(DEFAULT_EPOCH));
static TIME_UNIT: GucSetting<TimeUnitSetting> =
    GucSetting::<TimeUnitSetting>::new(TimeUnitSetting::Millisecond);
static TIMESTAMP_BITS: GucSetting<i32> =
    GucSetting::<i32>::new(layout::DEFAULT_TIMESTAMP_BITS as i32);
static MACHINE_BITS: GucSetting<i32> = GucSetting::<i32>::new(layout::DEFAULT_MACHINE_BITS as i32);
static SEQUENCE_BITS: GucSetting<i32> =
    GucSetting::<i32>::new(layout::DEFAULT_SEQUENCE_BITS as i32);
/// -1: the layout's own, CosId's (half the maximum sequence).
pub(super) static SEQUENCE_RESET_THRESHOLD: GucSetting<i32> = GucSetting::<i32>::new(-1);
pub(super) static CLOCK_BACKWARDS_SPIN_THRESHOLD: GucSetting<i32> =
    GucSetting::<i32>::new(cosid_core::generator::DEFAULT_SPIN_THRESHOLD_MS as i32);
pub(super) static CLOCK_BACKWARDS_BROKEN_THRESHOLD: GucSetting<i32> =
    GucSetting::<i32>::new(cosid_core::generator::DEFAULT_BROKEN_THRESHOLD_MS as i32);

const NO_FLAGS: GucFlags = GucFlags::empty();

/// Every `cosid.*` setting. At start, configured values are checked in this order, so the first
/// bad one is the one reported.
pub(super) static SETTINGS: [Setting; 21] = [
    Setting {
        name: c"cosid.lease_store",
        short: c"A libpq connection string to a shared lease store; empty means cosid.database.",
        long: c"Servers that share a store and a namespace hold distinct machine ids.",
        kind: Kind::Text {
            value: &LEASE_STORE,
            check: None,
        },
        context: Context::ServerStart,
        // It may hold a password.
        flags: GucFlags::SUPERUSER_ONLY,
    },
    Setting {
        name: c"cosid.database",
        short: c"The database that holds the lease table and the background worker connects to.",
        long: c"",
        kind: Kind::Text {
            value: &DATABASE,
            check: None,
        },
        context: Context::ServerStart,
        flags: NO_FLAGS,
    },
    Setting {
        name: c"cosid.instance_id",
        short: c"This server's identity in the lease store; empty means host:port:postmaster-pid.",
        long: c"A non-stable instance without one adds a random suffix at every start.",
        kind: Kind::Text {
            value: &INSTANCE_ID,
            check: None,
        },
        context: Context::ServerStart,
        flags: NO_FLAGS,
    },
    Setting {
        name: c"cosid.stable",
        short: c"This server keeps its machine id across restarts; needs cosid.instance_id.",
        long: c"",
        kind: Kind::Bool(&STABLE),
        context: Context::ServerStart,
        flags: NO_FLAGS,
    },
    Setting {
        name: c"cosid.guarder_delay",
        short: c"How often the background worker renews the machine-id lease.",
        long: c"",
        kind: Kind::Int {
            value: &GUARDER_DELAY,
            min: 1,
            max: i32::MAX,
        },
        context: Context::Reload,
        flags: GucFlags::UNIT_MS,
    },
    Setting {
        name: c"cosid.guarder_initial_delay",
        short: c"How long after claiming the background worker first renews the lease.",
        long: c"",
        kind: Kind::Int {
            value: &GUARDER_INITIAL_DELAY,
            min: 0,
            max: i32::MAX,
        },
        context: Context::Reload,
        flags: GucFlags::UNIT_MS,
    },
    Setting {
        name: c"cosid.safe_guard_duration",
        short: c"How long a lease lasts after a renewal; others may take the machine id after it.",
        long: c"Generation stops earlier, at this minus min(10 s, a tenth of it), counted from \
                when the last successful renewal was sent. Use the same value on every server of \
                a namespace.",
        kind: Kind::Int {
            value: &SAFE_GUARD_DURATION,
            min: 1,
            max: LONGEST_SAFE_GUARD_MS as i32,
        },
        context: Context::Reload,
        flags: GucFlags::UNIT_MS,
    },
    Setting {
        name: c"cosid.fail_fast",
        short: c"Refuse to generate when the lease is lost or not renewed in time.",
        long: c"Off keeps generating as CosId does, and risks duplicates: it is unsafe.",
        kind: Kind::Bool(&FAIL_FAST),
        context: Context::Reload,
        flags: NO_FLAGS,
    },
    Setting {
        name: c"cosid.local_state_interval",
        short: c"How often a stable instance, or a fixed machine id, writes its last timestamp to \
                 the local state file.",
        long: c"",
        kind: Kind::Int {
            value: &LOCAL_STATE_INTERVAL,
            min: 1,
            max: i32::MAX,
        },
        context: Context::Reload,
        flags: GucFlags::UNIT_MS,
    },
    Setting {
        name: c"cosid.max_generators",
        short: c"How many named generators (cosid_create_generator) the server can hold.",
        long: c"A dropped generator keeps its place until the server restarts, unless it is \
                created again with the same definition.",
        kind: Kind::Int {
            value: &MAX_GENERATORS,
            min: 1,
            max: super::MAX_NAMED_GENERATORS as i32,
        },
        context: Context::ServerStart,
        flags: NO_FLAGS,
    },
    Setting {
        name: c"cosid.namespace",
        short: c"Namespace of the machine ids this server holds.",
        long: c"Servers of one namespace hold distinct machine ids; ids of different namespaces \
                may share one.",
        kind: Kind::Text {
            value: &NAMESPACE,
            check: None,
        },
        context: Context::ServerStart,
        flags: NO_FLAGS,
    },
    Setting {
        name: c"cosid.distributor",
        short: c"Where the machine id comes from: lease, manual, stateful_set, cosid_jdbc or cosid_redis.",
        long: c"lease leases one from the lease table; manual takes cosid.machine_id; \
                stateful_set takes the ordinal at the end of HOSTNAME; cosid_jdbc leases one \
                from CosId's table cosid_machine in cosid.lease_store, and cosid_redis from \
                CosId's keys in the Redis server cosid.lease_store names, with Java services.",
        kind: Kind::Enum(&DISTRIBUTOR),
        context: Context::ServerStart,
        flags: NO_FLAGS,
    },
    Setting {
        name: c"cosid.machine_id",
        short: c"The machine id for cosid.distributor = manual; -1 means unset.",
        long: c"Must fit cosid.machine_bits and be unique among the servers of the namespace.",
        kind: Kind::Int {
            value: &MACHINE_ID,
            min: -1,
            max: i32::MAX,
        },
        context: Context::ServerStart,
        flags: NO_FLAGS,
    },
    Setting {
        name: c"cosid.epoch",
        short: c"Start of the id timestamps: Unix milliseconds or an ISO 8601 instant.",
        long: c"CosId's epoch, 2019-12-24T16:00:00Z, by default.",
        kind: Kind::Text {
            value: &EPOCH,
            check: Some(check_epoch),
        },
        context: Context::ServerStart,
        flags: NO_FLAGS,
    },
    Setting {
        name: c"cosid.time_unit",
        short: c"Unit of the id timestamps: millisecond or second.",
        long: c"",
        kind: Kind::Enum(&TIME_UNIT),
        context: Context::ServerStart,
        flags: NO_FLAGS,
    },
    Setting {
        name: c"cosid.timestamp_bits",
        short: c"Bits of an id that hold its timestamp.",
        long: c"Timestamp, machine and sequence bits together may use at most 63 bits.",
        kind: Kind::Int {
            value: &TIMESTAMP_BITS,
            min: 1,
            max: 63,
        },
        context: Context::ServerStart,
        flags: NO_FLAGS,
    },
    Setting {
        name: c"cosid.machine_bits",
        short: c"Bits of an id that hold the machine id.",
        long: c"Timestamp, machine and sequence bits together may use at most 63 bits.",
        kind: Kind::Int {
            value: &MACHINE_BITS,
            min: 0,
            max: 31,
        },
        context: Context::ServerStart,
        flags: NO_FLAGS,
    },
    Setting {
        name: c"cosid.sequence_bits",
        short: c"Bits of an id that hold the sequence within a tick.",
        long: c"Timestamp, machine and sequence bits together may use at most 63 bits.",
        kind: Kind::Int {
            value: &SEQUENCE_BITS,
            min: 1,
            max: 31,
        },
        context: Context::ServerStart,
        flags: NO_FLAGS,
    },
    Setting {
        name: c"cosid.sequence_reset_threshold",
        short: c"A new tick restarts the sequence only once it has reached this value.",
        long: c"-1 (the default) takes CosId's for the layout, half the maximum sequence \
                (2047 with 12 sequence bits), which keeps id % n sharding even at low rates; 0 \
                restarts the sequence at every tick.",
        kind: Kind::Int {
            value: &SEQUENCE_RESET_THRESHOLD,
            min: -1,
            max: i32::MAX,
        },
        context: Context::ServerStart,
        flags: NO_FLAGS,
    },
    Setting {
        name: c"cosid.clock_backwards_spin_threshold",
        short: c"A clock step back up to this long is waited out by spinning.",
        long: c"",
        kind: Kind::Int {
            value: &CLOCK_BACKWARDS_SPIN_THRESHOLD,
            min: 0,
            max: 1_000,
        },
        context: Context::ReloadEverywhere,
        flags: GucFlags::UNIT_MS,
    },
    Setting {
        name: c"cosid.clock_backwards_broken_threshold",
        short: c"A clock step back up to this long is waited out by sleeping; a longer one is an \
                 error.",
        long: c"",
        kind: Kind::Int {
            value: &CLOCK_BACKWARDS_BROKEN_THRESHOLD,
            min: 0,
            max: 60_000,
        },
        context: Context::ReloadEverywhere,
        flags: GucFlags::UNIT_MS,
    },
];

/// The range of an integer setting, as its row gives it.
pub(super) fn int_range(name: &CStr) -> Option<std::ops::RangeInclusive<i32>> {
    SETTINGS.iter().find_map(|row| match row.kind {
        Kind::Int { min, max, .. } if row.name == name => Some(min..=max),
        _ => None,
    })
}
