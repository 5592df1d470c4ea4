//! One error type for everything cosid refuses, mapped to a SQLSTATE with a DETAIL and a HINT,
//! in PostgreSQL's message style: a lower-case message, full-sentence detail and hint.
//!
//! Nothing a user or an operator can cause is reported as XX000.

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{PgLogLevel, PgSqlErrorCode};

pub struct CosidError {
    code: PgSqlErrorCode,
    message: String,
    detail: Option<String>,
    hint: Option<String>,
}

impl CosidError {
    pub fn new(code: PgSqlErrorCode, message: impl Into<String>) -> CosidError {
        CosidError {
            code,
            message: message.into(),
            detail: None,
            hint: None,
        }
    }

    /// 55000: a precondition of generating is not met (no lease, not preloaded, bad clock).
    pub fn prerequisite(message: impl Into<String>) -> CosidError {
        CosidError::new(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            message,
        )
    }

    /// 22023: an argument that is not what the function takes.
    pub fn invalid_argument(message: impl Into<String>) -> CosidError {
        CosidError::new(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, message)
    }

    /// 22003: a number outside the layout's range.
    pub fn out_of_range(message: impl Into<String>) -> CosidError {
        CosidError::new(PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE, message)
    }

    /// 22008: a timestamp outside the layout's range.
    pub fn timestamp_out_of_range(message: impl Into<String>) -> CosidError {
        CosidError::new(PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW, message)
    }

    pub fn detail(mut self, detail: impl Into<String>) -> CosidError {
        self.detail = Some(detail.into());
        self
    }

    pub fn hint(mut self, hint: impl Into<String>) -> CosidError {
        self.hint = Some(hint.into());
        self
    }

    fn into_report(self) -> ErrorReport {
        let mut report = ErrorReport::new(self.code, self.message, "cosid");
        if let Some(detail) = self.detail {
            report = report.set_detail(detail);
        }
        if let Some(hint) = self.hint {
            report = report.set_hint(hint);
        }
        report
    }

    /// Raises the error as an SQL ERROR: the current statement is aborted.
    pub fn raise(self) -> ! {
        self.into_report().report(PgLogLevel::ERROR);
        unreachable!("an ERROR report does not return")
    }

    /// Stops the server from starting: for settings refused while the library is preloaded.
    /// Reported at FATAL directly, once, rather than as an ERROR that unwinds through Rust and is
    /// reported again by pgrx's guard (which appends a backtrace to DETAIL when RUST_BACKTRACE is
    /// set); in the postmaster an ERROR would end as FATAL anyway.
    pub fn refuse_start(self) -> ! {
        self.into_report().report(PgLogLevel::FATAL);
        unreachable!("a FATAL report does not return")
    }

    /// Reports the error at a lower level (LOG, WARNING) and returns.
    pub fn log(self, level: PgLogLevel) {
        self.into_report().report(level);
    }
}

/// Raises the error of a `Result`, or returns its value.
pub trait OrRaise<T> {
    fn or_raise(self) -> T;
}

impl<T> OrRaise<T> for Result<T, CosidError> {
    fn or_raise(self) -> T {
        match self {
            Ok(value) => value,
            Err(error) => error.raise(),
        }
    }
}
