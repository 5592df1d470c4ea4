//! The table of every `cosid.*` setting, and its definition when the library is loaded.
//!
//! Each setting has a static that PostgreSQL writes its value into (the static's initial value
//! is the setting's default: pgrx hands it to PostgreSQL as the boot value) and one row of
//! [`SETTINGS`]. [`init`] defines the settings from the rows, and the list of values it checks
//! at start is the same rows' names, so a setting cannot be defined without being checked.

use cosid_core::layout;
use pgrx::prelude::*;
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting, PostgresGucEnum};
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
/// `cosid.epoch`'s default, CosId's epoch (`layout::COSID_EPOCH_MS`).
pub(super) const DEFAULT_EPOCH: &CStr = c"2019-12-24T16:00:00Z";
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

/// When a setting may change, and so which processes define it.
///
/// `pgrx::GucContext` is not `Copy`, so a row cannot hold one; [`Context::guc`] makes one.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Context {
    /// Only at server start (`PGC_POSTMASTER`): changing it on a running server would break the
    /// ordering or uniqueness of ids. Defined only while preloading: PostgreSQL ends the process
    /// (FATAL) that defines such a setting later.
    ServerStart,
    /// At start and on SIGHUP (`PGC_SIGHUP`), defined only while preloading: only the workers
    /// of a preloaded library read it.
    Reload,
    /// At start and on SIGHUP (`PGC_SIGHUP`), defined in every process that loads the library,
    /// preloaded or not.
    ReloadEverywhere,
}

impl Context {
    fn guc(self) -> GucContext {
        match self {
            Context::ServerStart => GucContext::Postmaster,
            Context::Reload | Context::ReloadEverywhere => GucContext::Sighup,
        }
    }
}

/// A setting's type, with the static that holds its value (and its default), and what
/// PostgreSQL checks a new value against.
pub(super) enum Kind {
    Bool(&'static GucSetting<bool>),
    Int {
        value: &'static GucSetting<i32>,
        min: i32,
        max: i32,
    },
    Text {
        value: &'static GucSetting<Option<CString>>,
        /// Must be a `#[pg_guard]` function: PostgreSQL calls it, and a panic must not unwind
        /// into C.
        check: pg_sys::GucStringCheckHook,
    },
    /// The allowed values are those of the enum (`#[derive(PostgresGucEnum)]`).
    Enum(&'static dyn EnumValue),
}

/// A `GucSetting` of any `PostgresGucEnum` type, so that the rows of different enum settings
/// fit in one table.
pub(super) trait EnumValue: Sync {
    fn define(&'static self, row: &Setting);
}

impl<T: pgrx::GucEnum + 'static> EnumValue for GucSetting<T> {
    fn define(&'static self, row: &Setting) {
        GucRegistry::define_enum_guc(
            row.name,
            row.short,
            row.long,
            self,
            row.context.guc(),
            row.flags,
        );
    }
}

/// One `cosid.*` setting.
pub(super) struct Setting {
    pub name: &'static CStr,
    /// PostgreSQL's `short_desc` (pg_settings.short_desc).
    pub short: &'static CStr,
    /// PostgreSQL's `long_desc`; empty for none.
    pub long: &'static CStr,
    pub kind: Kind,
    pub context: Context,
    pub flags: GucFlags,
}

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
            max: i32::MAX,
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
        short: c"Where the machine id comes from: lease, manual or stateful_set.",
        long: c"lease leases one from the lease table; manual takes cosid.machine_id; \
                stateful_set takes the ordinal at the end of HOSTNAME.",
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

impl Setting {
    fn define(&'static self) {
        match self.kind {
            Kind::Bool(value) => GucRegistry::define_bool_guc(
                self.name,
                self.short,
                self.long,
                value,
                self.context.guc(),
                self.flags,
            ),
            Kind::Int { value, min, max } => GucRegistry::define_int_guc(
                self.name,
                self.short,
                self.long,
                value,
                min,
                max,
                self.context.guc(),
                self.flags,
            ),
            // SAFETY: a check hook in the table is a `#[pg_guard]` function with the check-hook
            // signature (see `Kind::Text`), so a panic in it does not unwind into PostgreSQL;
            // without one, PostgreSQL only stores the value.
            Kind::Text { value, check } => unsafe {
                GucRegistry::define_string_guc_with_hooks(
                    self.name,
                    self.short,
                    self.long,
                    value,
                    self.context.guc(),
                    self.flags,
                    check,
                    None,
                    None,
                )
            },
            Kind::Enum(value) => value.define(self),
        }
    }
}

/// The range of an integer setting, as its row gives it.
pub(super) fn int_range(name: &CStr) -> Option<std::ops::RangeInclusive<i32>> {
    SETTINGS.iter().find_map(|row| match row.kind {
        Kind::Int { min, max, .. } if row.name == name => Some(min..=max),
        _ => None,
    })
}

/// Defines the settings. The reloadable ones marked [`Context::ReloadEverywhere`] are defined
/// in every process that loads the library; the others only while preloading, because
/// PostgreSQL refuses to define server-start settings later. Where the library is not
/// preloaded, `layout_setting` still reads the layout from the values in the configuration
/// file.
///
/// While preloading, once every setting is defined, the `cosid` prefix is reserved, as
/// pg_stat_statements does for its own: PostgreSQL then warns about (and drops) any other
/// `cosid.*` name in the configuration, such as a misspelt one that would otherwise be kept
/// silently as a placeholder and leave the setting meant at its default, and refuses to
/// `SET` one. Not while the library is only loaded into a backend: sessions of a server that
/// does not preload cosid keep accepting `cosid.*` placeholders as before.
pub fn init(preloading: bool) {
    if !preloading {
        for row in SETTINGS
            .iter()
            .filter(|row| row.context == Context::ReloadEverywhere)
        {
            row.define();
        }
        return;
    }
    // PostgreSQL answers a value it rejects for a newly defined setting with a WARNING, and then
    // runs with the default: a server meant to use 3 machine bits would start with 10. Read what
    // the configuration says before defining, and refuse to start if PostgreSQL rejects it.
    let configured: Vec<(&CStr, String)> = SETTINGS
        .iter()
        .filter_map(|row| setting_text(row.name).map(|value| (row.name, value)))
        .collect();
    // That WARNING would only repeat the FATAL below: every value it could be about is checked
    // again there. So messages below FATAL are not logged while the settings are defined.
    // SAFETY: log_min_messages is a plain global of this process, which is still the only one
    // (the postmaster preloading libraries); it is restored right after.
    let log_level = unsafe {
        let level = pg_sys::log_min_messages;
        pg_sys::log_min_messages = PgLogLevel::FATAL as std::ffi::c_int;
        level
    };
    for row in &SETTINGS {
        row.define();
    }
    // SAFETY: as above.
    unsafe { pg_sys::log_min_messages = log_level };
    // After the definitions, and with the usual log level: the WARNING about a misspelt name is
    // meant to be seen, even when a bad value below then stops the start.
    // SAFETY: the prefix is a NUL-terminated static string, which PostgreSQL copies; we are in
    // the postmaster while it preloads libraries, where extensions reserve their prefix.
    unsafe { pg_sys::MarkGUCPrefixReserved(c"cosid".as_ptr()) };
    for (name, value) in configured {
        let value = CString::new(value).unwrap_or_default();
        // SAFETY: both strings are NUL-terminated and outlive the call. With changeVal = false
        // PostgreSQL only checks the value. A rejected value is reported at FATAL, by PostgreSQL
        // itself and once, with its own message (the setting's name and its valid range), and
        // the server does not start. (At ERROR, PostgreSQL would jump out of this call, and the
        // error would be reported again from Rust, with a backtrace in its DETAIL when
        // RUST_BACKTRACE is set.)
        unsafe {
            pg_sys::set_config_option(
                name.as_ptr(),
                value.as_ptr(),
                pg_sys::GucContext::PGC_POSTMASTER,
                pg_sys::GucSource::PGC_S_FILE,
                pg_sys::GucAction::GUC_ACTION_SET,
                false,
                PgLogLevel::FATAL as std::ffi::c_int,
                false,
            );
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn check_epoch(
    newval: *mut *mut std::ffi::c_char,
    _extra: *mut *mut std::ffi::c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes a valid pointer to the proposed value, which is a NUL-terminated
    // string or NULL.
    let text = unsafe {
        if newval.is_null() || (*newval).is_null() {
            return true;
        }
        CStr::from_ptr(*newval).to_string_lossy().into_owned()
    };
    match layout::parse_epoch(&text) {
        Ok(_) => true,
        Err(why) => {
            let detail = CString::new(why).unwrap_or_default();
            // SAFETY: check hooks report their detail through this global, which PostgreSQL
            // reads (and frees with the memory context) right after the hook returns false.
            unsafe {
                pg_sys::GUC_check_errdetail_string = pg_sys::pstrdup(detail.as_ptr());
            }
            false
        }
    }
}

/// The current value of a setting as PostgreSQL prints it, defined or only a placeholder from
/// the configuration file; `None` when it is not set anywhere.
pub(super) fn setting_text(name: &CStr) -> Option<String> {
    // SAFETY: GetConfigOption only reads the settings table; with missing_ok it returns NULL for
    // an unknown name, and otherwise a string valid until the setting next changes, which we copy
    // at once.
    unsafe {
        let value = pg_sys::GetConfigOption(name.as_ptr(), true, false);
        (!value.is_null()).then(|| CStr::from_ptr(value).to_string_lossy().into_owned())
    }
}
