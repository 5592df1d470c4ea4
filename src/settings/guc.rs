//! How a row of the settings table becomes a PostgreSQL setting: the kinds and contexts a row
//! can have, the definition of every row when the library is loaded (with the start-up check
//! of each configured value), the epoch's check hook, and the reads of a setting by name.

use super::table::SETTINGS;
use cosid_core::layout;
use pgrx::prelude::*;
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};
use std::ffi::{CStr, CString};

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
pub(super) unsafe extern "C-unwind" fn check_epoch(
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
