//! A row of the settings table: the kinds and contexts a setting can have, how a row becomes a
//! PostgreSQL setting, and the check hooks rows name.

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
    pub(super) fn define(&'static self) {
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
