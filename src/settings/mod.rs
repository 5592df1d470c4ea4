//! Every `cosid.*` setting: the statics, one `init()` that defines them, and typed accessors.
//!
//! The layout, the machine id source and the instance's identity are server-start settings
//! (`PGC_POSTMASTER`): changing them on a running server would break the ordering and uniqueness
//! of ids. The clock thresholds and the lease timings reload on SIGHUP; the worker of the default
//! generator checks each reload's combination as the start does, and keeps the values in force
//! when it does not fit. A value outside a setting's range is refused by PostgreSQL itself, with
//! a message that names the setting and the range; combinations are checked by
//! [`server_settings`], whose error stops the server from starting.

use crate::distributor::{self, DistributorKind, NoMachineId};
use crate::error::CosidError;
use crate::generator::{BackwardsPolicy, GeneratorConfig};
use crate::layout::{self, Layout, LayoutError, TimeUnit};
use crate::lease::LeaseTiming;
use pgrx::prelude::*;
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting, PostgresGucEnum};
use std::ffi::{CStr, CString};

/// The longest namespace, in bytes: it is kept in shared memory.
pub const MAX_NAMESPACE_LEN: usize = 63;
/// The longest instance id, in bytes: it is kept in shared memory.
pub const MAX_INSTANCE_ID_LEN: usize = 127;

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

static NAMESPACE: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c"cosid"));
static DISTRIBUTOR: GucSetting<DistributorSetting> =
    GucSetting::<DistributorSetting>::new(DistributorSetting::Lease);
static MACHINE_ID: GucSetting<i32> = GucSetting::<i32>::new(-1);
static LEASE_STORE: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static DATABASE: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"postgres"));
static INSTANCE_ID: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static STABLE: GucSetting<bool> = GucSetting::<bool>::new(false);
static GUARDER_DELAY: GucSetting<i32> = GucSetting::<i32>::new(60_000);
static GUARDER_INITIAL_DELAY: GucSetting<i32> = GucSetting::<i32>::new(60_000);
static SAFE_GUARD_DURATION: GucSetting<i32> = GucSetting::<i32>::new(300_000);
static FAIL_FAST: GucSetting<bool> = GucSetting::<bool>::new(true);
static LOCAL_STATE_INTERVAL: GucSetting<i32> = GucSetting::<i32>::new(1_000);
// The layout settings are read by name (see `layout_setting`); these statics only hold the
// values PostgreSQL checked against each setting's range.
static EPOCH: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"2019-12-24T16:00:00Z"));
static TIME_UNIT: GucSetting<TimeUnitSetting> =
    GucSetting::<TimeUnitSetting>::new(TimeUnitSetting::Millisecond);
static TIMESTAMP_BITS: GucSetting<i32> =
    GucSetting::<i32>::new(layout::DEFAULT_TIMESTAMP_BITS as i32);
static MACHINE_BITS: GucSetting<i32> = GucSetting::<i32>::new(layout::DEFAULT_MACHINE_BITS as i32);
static SEQUENCE_BITS: GucSetting<i32> =
    GucSetting::<i32>::new(layout::DEFAULT_SEQUENCE_BITS as i32);
static SEQUENCE_RESET_THRESHOLD: GucSetting<i32> =
    GucSetting::<i32>::new(crate::generator::DEFAULT_SEQUENCE_RESET_THRESHOLD as i32);
static CLOCK_BACKWARDS_SPIN_THRESHOLD: GucSetting<i32> =
    GucSetting::<i32>::new(crate::generator::DEFAULT_SPIN_THRESHOLD_MS as i32);
static CLOCK_BACKWARDS_BROKEN_THRESHOLD: GucSetting<i32> =
    GucSetting::<i32>::new(crate::generator::DEFAULT_BROKEN_THRESHOLD_MS as i32);

/// Defines the settings. The reloadable ones are defined in every process that loads the
/// library; the server-start ones only while preloading, because PostgreSQL refuses to define
/// them later. Where the library is not preloaded, [`layout_setting`] still reads the layout from
/// the values in the configuration file.
pub fn init(preloading: bool) {
    if !preloading {
        define_reloadable();
        return;
    }
    // PostgreSQL answers a value it rejects for a newly defined setting with a WARNING, and then
    // runs with the default: a server meant to use 3 machine bits would start with 10. Read what
    // the configuration says before defining, and refuse to start if PostgreSQL rejects it.
    let configured: Vec<(&CStr, String)> = ALL_SETTINGS
        .iter()
        .filter_map(|name| setting_text(name).map(|value| (*name, value)))
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
    define_reloadable();
    define_server_start();
    // SAFETY: as above.
    unsafe { pg_sys::log_min_messages = log_level };
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

const ALL_SETTINGS: [&CStr; 20] = [
    c"cosid.lease_store",
    c"cosid.database",
    c"cosid.instance_id",
    c"cosid.stable",
    c"cosid.guarder_delay",
    c"cosid.guarder_initial_delay",
    c"cosid.safe_guard_duration",
    c"cosid.fail_fast",
    c"cosid.local_state_interval",
    c"cosid.namespace",
    c"cosid.distributor",
    c"cosid.machine_id",
    c"cosid.epoch",
    c"cosid.time_unit",
    c"cosid.timestamp_bits",
    c"cosid.machine_bits",
    c"cosid.sequence_bits",
    c"cosid.sequence_reset_threshold",
    c"cosid.clock_backwards_spin_threshold",
    c"cosid.clock_backwards_broken_threshold",
];

fn define_reloadable() {
    GucRegistry::define_int_guc(
        c"cosid.clock_backwards_spin_threshold",
        c"A clock step back up to this long is waited out by spinning.",
        c"",
        &CLOCK_BACKWARDS_SPIN_THRESHOLD,
        0,
        1_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"cosid.clock_backwards_broken_threshold",
        c"A clock step back up to this long is waited out by sleeping; a longer one is an error.",
        c"",
        &CLOCK_BACKWARDS_BROKEN_THRESHOLD,
        0,
        60_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
}

fn define_lease_reloadable() {
    GucRegistry::define_int_guc(
        c"cosid.guarder_delay",
        c"How often the background worker renews the machine-id lease.",
        c"",
        &GUARDER_DELAY,
        1,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"cosid.guarder_initial_delay",
        c"How long after claiming the background worker first renews the lease.",
        c"",
        &GUARDER_INITIAL_DELAY,
        0,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"cosid.safe_guard_duration",
        c"How long a lease lasts after a renewal; others may take the machine id after it.",
        c"Generation stops earlier, at this minus min(10 s, a tenth of it), counted from when the \
          last successful renewal was sent. Use the same value on every server of a namespace.",
        &SAFE_GUARD_DURATION,
        1,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_bool_guc(
        c"cosid.fail_fast",
        c"Refuse to generate when the lease is lost or not renewed in time.",
        c"Off keeps generating as CosId does, and risks duplicates: it is unsafe.",
        &FAIL_FAST,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"cosid.local_state_interval",
        c"How often a stable instance, or a fixed machine id, writes its last timestamp to the local state file.",
        c"",
        &LOCAL_STATE_INTERVAL,
        1,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
}

fn define_server_start() {
    define_lease_reloadable();
    GucRegistry::define_string_guc(
        c"cosid.lease_store",
        c"A libpq connection string to a shared lease store; empty means cosid.database.",
        c"Servers that share a store and a namespace hold distinct machine ids.",
        &LEASE_STORE,
        GucContext::Postmaster,
        GucFlags::SUPERUSER_ONLY,
    );
    GucRegistry::define_string_guc(
        c"cosid.database",
        c"The database that holds the lease table and the background worker connects to.",
        c"",
        &DATABASE,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"cosid.instance_id",
        c"This server's identity in the lease store; empty means host:port:postmaster-pid.",
        c"A non-stable instance without one adds a random suffix at every start.",
        &INSTANCE_ID,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"cosid.stable",
        c"This server keeps its machine id across restarts; needs cosid.instance_id.",
        c"",
        &STABLE,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"cosid.namespace",
        c"Namespace of the machine ids this server holds.",
        c"Servers of one namespace hold distinct machine ids; ids of different namespaces may \
          share one.",
        &NAMESPACE,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_enum_guc(
        c"cosid.distributor",
        c"Where the machine id comes from: lease, manual or stateful_set.",
        c"lease leases one from the lease table; manual takes cosid.machine_id; stateful_set \
          takes the ordinal at the end of HOSTNAME.",
        &DISTRIBUTOR,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"cosid.machine_id",
        c"The machine id for cosid.distributor = manual; -1 means unset.",
        c"Must fit cosid.machine_bits and be unique among the servers of the namespace.",
        &MACHINE_ID,
        -1,
        i32::MAX,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    // SAFETY: `check_epoch` is a `#[pg_guard]` function with the check-hook signature; it only
    // reads its argument and sets the error detail PostgreSQL provides for check hooks.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            c"cosid.epoch",
            c"Start of the id timestamps: Unix milliseconds or an ISO 8601 instant.",
            c"CosId's epoch, 2019-12-24T16:00:00Z, by default.",
            &EPOCH,
            GucContext::Postmaster,
            GucFlags::default(),
            Some(check_epoch),
            None,
            None,
        );
    }
    GucRegistry::define_enum_guc(
        c"cosid.time_unit",
        c"Unit of the id timestamps: millisecond or second.",
        c"",
        &TIME_UNIT,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"cosid.timestamp_bits",
        c"Bits of an id that hold its timestamp.",
        c"Timestamp, machine and sequence bits together may use at most 63 bits.",
        &TIMESTAMP_BITS,
        1,
        63,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"cosid.machine_bits",
        c"Bits of an id that hold the machine id.",
        c"Timestamp, machine and sequence bits together may use at most 63 bits.",
        &MACHINE_BITS,
        0,
        31,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"cosid.sequence_bits",
        c"Bits of an id that hold the sequence within a tick.",
        c"Timestamp, machine and sequence bits together may use at most 63 bits.",
        &SEQUENCE_BITS,
        1,
        31,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"cosid.sequence_reset_threshold",
        c"A new tick restarts the sequence only once it has reached this value.",
        c"CosId's default, 2047, keeps id % n sharding even at low rates; 0 restarts the \
          sequence at every tick.",
        &SEQUENCE_RESET_THRESHOLD,
        0,
        i32::MAX,
        GucContext::Postmaster,
        GucFlags::default(),
    );
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

fn string_setting(setting: &GucSetting<Option<CString>>) -> String {
    setting
        .get()
        .map(|value| value.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Everything fixed at server start that the generator needs.
#[derive(Clone, Debug)]
pub struct ServerSettings {
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
    pub database: String,
    /// `cosid.instance_id`, when set.
    pub instance_id: Option<String>,
    pub stable: bool,
}

fn refused(name: &str, value: impl std::fmt::Display) -> CosidError {
    CosidError::invalid_argument(format!("invalid value for parameter \"{name}\": {value}"))
}

/// The refusal of a name holding a control character (a tab, a newline, ...): names are
/// written into logs, the lease table and the local state file, and one that does not print as
/// itself is a mistake, such as `'a\tb'` in postgresql.conf, where `\t` is a tab.
fn control_character(name: &str, what: &str, value: &str) -> Option<CosidError> {
    let (at, character) = value.char_indices().find(|(_, c)| c.is_control())?;
    Some(
        refused(name, format!("{:?}", value))
            .detail(format!(
                "{what} may not contain control characters; this one has {} at byte {at}.",
                character.escape_unicode()
            ))
            .hint(format!(
                "Set {name} to printable text (a backslash in a quoted value of postgresql.conf \
                 starts an escape: write \\\\ for one), and restart the server."
            )),
    )
}

/// Reads and checks the server-start settings together.
pub fn server_settings() -> Result<ServerSettings, CosidError> {
    let layout = layout_setting()?;
    clock_within_layout(&layout, crate::clock::unix_ms_now())?;
    let namespace = string_setting(&NAMESPACE);
    if namespace.is_empty() || namespace.len() > MAX_NAMESPACE_LEN {
        return Err(
            refused("cosid.namespace", format!("\"{namespace}\"")).detail(format!(
                "A namespace is 1 to {MAX_NAMESPACE_LEN} bytes long."
            )),
        );
    }
    if let Some(refusal) = control_character("cosid.namespace", "A namespace", &namespace) {
        return Err(refusal);
    }
    let distributor = match DISTRIBUTOR.get() {
        DistributorSetting::Lease => DistributorKind::Lease,
        DistributorSetting::Manual => DistributorKind::Manual,
        DistributorSetting::StatefulSet => DistributorKind::StatefulSet,
    };
    let hostname = std::env::var("HOSTNAME").ok();
    let machine = match distributor::resolve(
        distributor,
        i64::from(MACHINE_ID.get()),
        hostname.as_deref(),
        layout.max_machine_id(),
    ) {
        Some(Ok(machine_id)) => MachineSource::Fixed(machine_id),
        Some(Err(why @ NoMachineId::ManualOutOfRange { .. })) => {
            return Err(refused("cosid.machine_id", MACHINE_ID.get())
                .detail(why.detail())
                .hint(why.hint()));
        }
        Some(Err(why)) => MachineSource::Missing(why),
        None => MachineSource::Leased(lease_settings()?),
    };
    let backwards = clock_thresholds().map_err(|why| {
        CosidError::invalid_argument("invalid combination of cosid clock settings")
            .detail(format!("{why}."))
            .hint("Set cosid.clock_backwards_spin_threshold at most as long as cosid.clock_backwards_broken_threshold.")
    })?;
    Ok(ServerSettings {
        config: GeneratorConfig {
            layout,
            sequence_reset_threshold: SEQUENCE_RESET_THRESHOLD.get() as u32,
        },
        namespace,
        distributor,
        machine,
        backwards,
    })
}

/// Refuses a layout that does not cover the current time: such a server could issue no id, and
/// a lease it claimed would carry a watermark outside its layout.
fn clock_within_layout(layout: &Layout, now_unix_ms: i64) -> Result<(), CosidError> {
    let Err(why) = layout.unix_ms_to_ticks(now_unix_ms) else {
        return Ok(());
    };
    let range = format!(
        "Ids of this layout cover {} to {}: cosid.epoch plus 2^{} {}s (cosid.timestamp_bits). \
         The clock reads {}.",
        layout::format_unix_ms(layout.epoch_ms()),
        layout::format_unix_ms(layout.max_unix_ms()),
        layout.timestamp_bits(),
        layout.time_unit().name(),
        layout::format_unix_ms(now_unix_ms)
    );
    Err(match why {
        layout::TimeRangeError::BeforeEpoch => {
            CosidError::invalid_argument("cosid.epoch is in the future")
                .detail(range)
                .hint(
                    "Set cosid.epoch to an instant in the past, such as CosId's \
                     2019-12-24T16:00:00Z, and restart the server.",
                )
        }
        layout::TimeRangeError::AfterMaximum => CosidError::invalid_argument(
            "the current time is after the last instant of the cosid layout",
        )
        .detail(range)
        .hint(
            "Raise cosid.timestamp_bits, or set cosid.epoch to a later instant, so that the \
             layout covers the years ahead, and restart the server. Ids of the old layout decode \
             differently under the new one.",
        ),
    })
}

fn lease_settings() -> Result<LeaseSettings, CosidError> {
    let database = string_setting(&DATABASE);
    if database.is_empty() {
        return Err(refused("cosid.database", "\"\"")
            .detail("The lease table needs a database.")
            .hint("Set cosid.database to the database where you run CREATE EXTENSION cosid."));
    }
    let instance_id = Some(string_setting(&INSTANCE_ID)).filter(|id| !id.is_empty());
    if let Some(id) = &instance_id {
        if id.len() > MAX_INSTANCE_ID_LEN {
            return Err(
                refused("cosid.instance_id", format!("\"{id}\"")).detail(format!(
                    "An instance id is at most {MAX_INSTANCE_ID_LEN} bytes long."
                )),
            );
        }
    }
    if let Some(refusal) = instance_id
        .as_deref()
        .and_then(|id| control_character("cosid.instance_id", "An instance id", id))
    {
        return Err(refusal);
    }
    let stable = STABLE.get();
    if stable && instance_id.is_none() {
        return Err(refused("cosid.stable", "on")
            .detail("A stable instance keeps its machine id across restarts, so it needs an identity that survives them.")
            .hint("Set cosid.instance_id to a name that stays the same across restarts, such as the host name."));
    }
    lease_timing()
        .validate()
        .map_err(|why| {
            CosidError::invalid_argument("invalid combination of cosid lease settings")
                .detail(format!("{why}."))
                .hint("Shorten cosid.guarder_delay or cosid.guarder_initial_delay, or lengthen cosid.safe_guard_duration.")
        })?;
    let lease_store = Some(string_setting(&LEASE_STORE)).filter(|text| !text.trim().is_empty());
    if let Some(conninfo) = &lease_store {
        crate::remote_store::check(conninfo).map_err(|why| {
            // The value is never quoted: it may hold a password.
            CosidError::invalid_argument("invalid value for parameter \"cosid.lease_store\"")
                .detail(format!("{why}."))
                .hint("Write a libpq connection string: key=value pairs, such as host=store.example dbname=cosid user=cosid sslmode=verify-full sslrootcert=/etc/cosid/root.crt, with a value that holds spaces in single quotes; or a URL, such as postgresql://cosid@store.example/cosid?sslmode=require, with reserved characters percent-encoded.")
        })?;
    }
    Ok(LeaseSettings {
        lease_store,
        database,
        instance_id,
        stable,
    })
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

/// The current value of a setting as PostgreSQL prints it, defined or only a placeholder from
/// the configuration file; `None` when it is not set anywhere.
fn setting_text(name: &CStr) -> Option<String> {
    // SAFETY: GetConfigOption only reads the settings table; with missing_ok it returns NULL for
    // an unknown name, and otherwise a string valid until the setting next changes, which we copy
    // at once.
    unsafe {
        let value = pg_sys::GetConfigOption(name.as_ptr(), true, false);
        (!value.is_null()).then(|| CStr::from_ptr(value).to_string_lossy().into_owned())
    }
}

fn invalid_setting(name: &CStr, value: &str) -> CosidError {
    CosidError::invalid_argument(format!(
        "invalid value for parameter \"{}\": \"{value}\"",
        name.to_string_lossy()
    ))
}

fn bits_setting(
    name: &CStr,
    default: u32,
    range: std::ops::RangeInclusive<u32>,
) -> Result<u32, CosidError> {
    let Some(text) = setting_text(name) else {
        return Ok(default);
    };
    match text.trim().parse::<u32>() {
        Ok(bits) if range.contains(&bits) => Ok(bits),
        _ => Err(invalid_setting(name, &text).detail(format!(
            "{} must be an integer from {} to {}.",
            name.to_string_lossy(),
            range.start(),
            range.end()
        ))),
    }
}

/// The layout the settings describe. It reads the settings by name rather than through the
/// statics, so that it works where the library is not preloaded and they are not defined.
pub fn layout_setting() -> Result<Layout, CosidError> {
    let epoch_text = setting_text(c"cosid.epoch").unwrap_or_else(|| "2019-12-24T16:00:00Z".into());
    let epoch_ms = layout::parse_epoch(&epoch_text)
        .map_err(|why| invalid_setting(c"cosid.epoch", &epoch_text).detail(why))?;
    let time_unit = match setting_text(c"cosid.time_unit") {
        None => TimeUnit::Millisecond,
        Some(text) => match text.trim().to_ascii_lowercase().as_str() {
            "millisecond" => TimeUnit::Millisecond,
            "second" => TimeUnit::Second,
            _ => {
                return Err(invalid_setting(c"cosid.time_unit", &text)
                    .detail("Available values: millisecond, second."))
            }
        },
    };
    Layout::new(
        epoch_ms,
        time_unit,
        bits_setting(
            c"cosid.timestamp_bits",
            layout::DEFAULT_TIMESTAMP_BITS,
            1..=63,
        )?,
        bits_setting(c"cosid.machine_bits", layout::DEFAULT_MACHINE_BITS, 0..=31)?,
        bits_setting(
            c"cosid.sequence_bits",
            layout::DEFAULT_SEQUENCE_BITS,
            1..=31,
        )?,
    )
    .map_err(|why| {
        let hint = match why {
            LayoutError::EpochNotWholeSecond { .. } => {
                "Set cosid.epoch to a whole second, and restart the server."
            }
            _ => {
                "Choose cosid.timestamp_bits, cosid.machine_bits and cosid.sequence_bits that \
                 add up to at most 63, and restart the server."
            }
        };
        CosidError::invalid_argument("invalid combination of cosid layout settings")
            .detail(format!("{why}."))
            .hint(hint)
    })
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
