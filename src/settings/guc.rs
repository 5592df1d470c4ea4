//! The settings defined when the library is loaded (with the start-up check of each configured
//! value), and the reads of a setting by name.

use super::row::Context;
use super::table::SETTINGS;
use pgrx::prelude::*;
use std::ffi::{CStr, CString};

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
