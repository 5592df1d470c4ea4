//! The checks of the settings' combinations, which PostgreSQL cannot make one setting at a time:
//! the layout, the machine id against it, the lease timings, the names and the lease store.

use super::guc::setting_text;
use super::table::{
    int_range, DistributorSetting, DATABASE, DISTRIBUTOR, INSTANCE_ID, LEASE_STORE, MACHINE_ID,
    MAX_GENERATORS, NAMESPACE, SEQUENCE_RESET_THRESHOLD, STABLE,
};
use super::{
    clock_thresholds, lease_timing, LeaseSettings, MachineSource, ServerSettings,
    MAX_INSTANCE_ID_LEN, MAX_NAMED_GENERATORS, MAX_NAMESPACE_LEN,
};
use crate::error::CosidError;
use cosid_core::distributor::{self, DistributorKind, NoMachineId};
use cosid_core::generator::{default_sequence_reset_threshold, GeneratorConfig};
use cosid_core::layout::{self, Layout, LayoutError, TimeUnit};
use pgrx::GucSetting;
use std::ffi::{CStr, CString};

fn string_setting(setting: &GucSetting<Option<CString>>) -> String {
    setting
        .get()
        .map(|value| value.to_string_lossy().into_owned())
        .unwrap_or_default()
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
///
/// `check_lease_store` checks the syntax of `cosid.lease_store` (the caller passes
/// `store::check`): the settings sit below the stores, which read them, so they are
/// handed the check rather than reaching up for it.
pub fn server_settings(
    check_lease_store: fn(DistributorKind, &str) -> Result<(), String>,
) -> Result<ServerSettings, CosidError> {
    let layout = layout_setting()?;
    clock_within_layout(&layout, crate::host::unix_ms_now())?;
    let namespace = string_setting(&NAMESPACE);
    if namespace.is_empty() || namespace.len() > MAX_NAMESPACE_LEN {
        return Err(refused(
            "cosid.namespace",
            layout::quote_for_message(&namespace, false),
        )
        .detail(format!(
            "A namespace is 1 to {MAX_NAMESPACE_LEN} bytes long."
        )));
    }
    if let Some(refusal) = control_character("cosid.namespace", "A namespace", &namespace) {
        return Err(refusal);
    }
    let distributor = match DISTRIBUTOR.get() {
        DistributorSetting::Lease => DistributorKind::Lease,
        DistributorSetting::Manual => DistributorKind::Manual,
        DistributorSetting::StatefulSet => DistributorKind::StatefulSet,
        DistributorSetting::CosidJdbc => DistributorKind::CosidJdbc,
        DistributorSetting::CosidRedis => DistributorKind::CosidRedis,
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
        None => MachineSource::Leased(lease_settings(distributor, check_lease_store)?),
    };
    let backwards = clock_thresholds().map_err(|why| {
        CosidError::invalid_argument("invalid combination of cosid clock settings")
            .detail(format!("{why}."))
            .hint("Set cosid.clock_backwards_spin_threshold at most as long as cosid.clock_backwards_broken_threshold.")
    })?;
    let database = string_setting(&DATABASE);
    Ok(ServerSettings {
        database,
        max_generators: MAX_GENERATORS.get().clamp(1, MAX_NAMED_GENERATORS as i32) as usize,
        config: GeneratorConfig {
            layout,
            sequence_reset_threshold: match u32::try_from(SEQUENCE_RESET_THRESHOLD.get()) {
                Ok(threshold) => threshold,
                Err(_) => default_sequence_reset_threshold(&layout),
            },
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

fn lease_settings(
    distributor: DistributorKind,
    check_lease_store: fn(DistributorKind, &str) -> Result<(), String>,
) -> Result<LeaseSettings, CosidError> {
    // The database itself is ServerSettings::database.
    if string_setting(&DATABASE).is_empty() {
        return Err(refused("cosid.database", "\"\"")
            .detail("The lease table needs a database.")
            .hint("Set cosid.database to the database where you run CREATE EXTENSION cosid."));
    }
    let instance_id = Some(string_setting(&INSTANCE_ID)).filter(|id| !id.is_empty());
    if let Some(id) = &instance_id {
        if id.len() > MAX_INSTANCE_ID_LEN {
            return Err(
                refused("cosid.instance_id", layout::quote_for_message(id, false)).detail(format!(
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
        check_lease_store(distributor, conninfo).map_err(|why| {
            // The value is never quoted: it may hold a password.
            let refusal = CosidError::invalid_argument("invalid value for parameter \"cosid.lease_store\"")
                .detail(format!("{why}."));
            if distributor == DistributorKind::CosidRedis {
                return refusal.hint("With cosid.distributor = 'cosid_redis', write the URL of the Redis server your CosId services use, such as redis://ids.example:6379/0, with reserved characters percent-encoded (TLS, rediss://, is not built in).");
            }
            refusal.hint("Write a libpq connection string: key=value pairs, such as host=store.example dbname=cosid user=cosid sslmode=verify-full sslrootcert=/etc/cosid/root.crt, with a value that holds spaces in single quotes; or a URL, such as postgresql://cosid@store.example/cosid?sslmode=require, with reserved characters percent-encoded.")
        })?;
    }
    if distributor == DistributorKind::CosidJdbc && lease_store.is_none() {
        return Err(refused("cosid.lease_store", "\"\"")
            .detail("cosid.distributor = 'cosid_jdbc' leases machine ids from CosId's table cosid_machine in the database cosid.lease_store names.")
            .hint("Set cosid.lease_store to a connection string of the PostgreSQL database your CosId services' JDBC distributor uses, such as host=ids.example dbname=ids user=cosid."));
    }
    if distributor == DistributorKind::CosidRedis && lease_store.is_none() {
        return Err(refused("cosid.lease_store", "\"\"")
            .detail("cosid.distributor = 'cosid_redis' leases machine ids from CosId's keys in the Redis server cosid.lease_store names.")
            .hint("Set cosid.lease_store to the URL of the Redis server your CosId services' Redis distributor uses, such as redis://ids.example:6379/0."));
    }
    if distributor.is_cosids() && stable {
        return Err(refused("cosid.stable", "on")
            .detail(format!("With cosid.distributor = '{}' every claim is a holder of its own in CosId's distributor: a restarted server takes a released or expired machine id, never its previous one.", distributor.name()))
            .hint("Set cosid.stable to off."));
    }
    Ok(LeaseSettings {
        lease_store,
        instance_id,
        stable,
    })
}

fn invalid_setting(name: &CStr, value: &str) -> CosidError {
    CosidError::invalid_argument(format!(
        "invalid value for parameter \"{}\": {}",
        name.to_string_lossy(),
        layout::quote_for_message(value, false)
    ))
}

/// A layout bits setting read by name, checked against the range of its row in the table.
fn bits_setting(name: &CStr, default: u32) -> Result<u32, CosidError> {
    let Some(text) = setting_text(name) else {
        return Ok(default);
    };
    let range = int_range(name).expect("every layout bits setting is an integer of the table");
    match text.trim().parse::<i32>() {
        Ok(bits) if range.contains(&bits) => Ok(bits as u32),
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
    let epoch_text = setting_text(c"cosid.epoch")
        .unwrap_or_else(|| super::table::DEFAULT_EPOCH.to_string_lossy().into_owned());
    let epoch_ms = layout::parse_epoch(&epoch_text)
        .map_err(|why| invalid_setting(c"cosid.epoch", &epoch_text).detail(why))?;
    let time_unit = match setting_text(c"cosid.time_unit") {
        None => TimeUnit::Millisecond,
        Some(text) => TimeUnit::from_name(&text).ok_or_else(|| {
            invalid_setting(c"cosid.time_unit", &text)
                .detail("Available values: millisecond, second.")
        })?,
    };
    Layout::new(
        epoch_ms,
        time_unit,
        bits_setting(c"cosid.timestamp_bits", layout::DEFAULT_TIMESTAMP_BITS)?,
        bits_setting(c"cosid.machine_bits", layout::DEFAULT_MACHINE_BITS)?,
        bits_setting(c"cosid.sequence_bits", layout::DEFAULT_SEQUENCE_BITS)?,
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
