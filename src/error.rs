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

/// `text` as the start of a sentence: its first letter upper-case (a DETAIL or HINT made of a
/// lower-case reason).
pub fn sentence_case(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
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

    /// 55000: a precondition that only an operator can restore is not met (not preloaded, no
    /// machine id configured, an unusable state file, the extension missing or older in the lease
    /// table's database, a command run in the wrong database). Retrying does not help.
    pub fn prerequisite(message: impl Into<String>) -> CosidError {
        CosidError::new(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            message,
        )
    }

    /// 55P03 (lock_not_available): a passing state of the machine id lease, which the background
    /// worker or the clock ends by itself (claiming, not renewed in time, lost and claimed again,
    /// a clock behind the last issued timestamp, a generator created a moment ago). The application retries after a short wait. Drivers and pools
    /// already treat this code as "try again" (the notes of issue 11 say which), and none of
    /// them drops the connection for it, as some do for class 57.
    pub fn unavailable(message: impl Into<String>) -> CosidError {
        CosidError::new(PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE, message)
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

    /// The report, located where the caller's caller raised it: every function on the way from
    /// the raising site is `#[track_caller]`, so LOCATION names that file and line, not this one.
    #[track_caller]
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
    #[track_caller]
    pub fn raise(self) -> ! {
        self.into_report().report(PgLogLevel::ERROR);
        unreachable!("an ERROR report does not return")
    }

    /// Stops the server from starting: for settings refused while the library is preloaded.
    /// Reported at FATAL directly, once, rather than as an ERROR that unwinds through Rust and is
    /// reported again by pgrx's guard (which appends a backtrace to DETAIL when RUST_BACKTRACE is
    /// set); in the postmaster an ERROR would end as FATAL anyway.
    #[track_caller]
    pub fn refuse_start(self) -> ! {
        self.into_report().report(PgLogLevel::FATAL);
        unreachable!("a FATAL report does not return")
    }

    /// Reports the error at a lower level (LOG, WARNING) and returns.
    #[track_caller]
    pub fn log(self, level: PgLogLevel) {
        self.into_report().report(level);
    }
}

/// Raises the error of a `Result`, or returns its value.
pub trait OrRaise<T> {
    #[track_caller]
    fn or_raise(self) -> T;
}

impl<T> OrRaise<T> for Result<T, CosidError> {
    #[track_caller]
    fn or_raise(self) -> T {
        match self {
            Ok(value) => value,
            Err(error) => error.raise(),
        }
    }
}
