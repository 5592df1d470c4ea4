//! The lease store in another PostgreSQL database (`cosid.lease_store`), shared by a fleet of
//! servers: the protocol of `sql/lease_store.sql`, called over libpq's protocol with
//! tokio-postgres, from the worker's own thread on a single-threaded runtime.
//!
//! Nothing here touches PostgreSQL's own functions: pgrx allows that from one thread only, and
//! the worker calls this module from that thread. Every call is bounded: a connect timeout, TCP
//! keepalives and a TCP user timeout, a statement and lock timeout in the store's session, and a
//! client-side timeout around every round trip, so that an unreachable or silent store never
//! hangs the worker. After any failed call the connection is dropped and made again on the next
//! one. The password (in the connection string, a passfile or `PGPASSWORD`) never appears in a
//! message: errors about the connection string name keys, never values (see
//! `cosid_core::conninfo`), tokio-postgres's own parse errors are not passed on, and every store
//! error has the password masked.
//!
//! [`conninfo`] reads the connection string, [`connect`] makes the connection; this file makes
//! the calls.

mod connect;
mod conninfo;

use conninfo::ConnInfo;
use cosid_core::conninfo::redact;
use cosid_core::protocol::{live_before, Call, Kind, Param, SqlTransport, StoreError, Value};
use cosid_core::store_timeline::{self, TimelineSeen};
use std::time::Duration;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row};

/// Checks a connection string without connecting, for the check at server start (no runtime,
/// no socket in the postmaster).
pub fn check(conninfo: &str) -> Result<(), String> {
    ConnInfo::parse(conninfo).map(|_| ())
}

pub struct RemoteStore {
    runtime: tokio::runtime::Runtime,
    conninfo: ConnInfo,
    client: Option<Client>,
    timeout: Duration,
    /// Whether the server is shutting down: a call under way when it starts is cut at once, so
    /// that an unreachable store never holds a shutdown up. (A plain read of a flag the signal
    /// handler sets, on this same thread.)
    shutting_down: fn() -> bool,
    /// The latest timeline this server saw the store on (`cosid_core::store_timeline`), or why
    /// its file cannot be read: then no host is taken.
    timeline_seen: Result<Option<TimelineSeen>, String>,
    /// A host passed over since the session last asked (`LeaseStore::take_notice`).
    notice: Option<String>,
}

/// Why a round trip did not complete.
enum Cut {
    TimedOut,
    ShuttingDown,
}

impl RemoteStore {
    /// Checks the connection string; connects on the first call.
    pub fn new(conninfo: &str, shutting_down: fn() -> bool) -> Result<RemoteStore, String> {
        let mut conninfo = ConnInfo::parse(conninfo)?;
        for config in &mut conninfo.hosts {
            if config.get_connect_timeout().is_none() {
                config.connect_timeout(Duration::from_secs(5));
            }
            config.keepalives(true);
            config.keepalives_idle(Duration::from_secs(5));
            config.keepalives_interval(Duration::from_secs(2));
            config.keepalives_retries(3);
            if config.get_tcp_user_timeout().is_none() {
                config.tcp_user_timeout(Duration::from_secs(10));
            }
            if config.get_application_name().is_none() {
                config.application_name("cosid lease worker");
            }
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| format!("cannot start the store client: {e}"))?;
        Ok(RemoteStore {
            runtime,
            conninfo,
            client: None,
            timeout: Duration::from_secs(5),
            shutting_down,
            timeline_seen: read_timeline_seen(),
            notice: None,
        })
    }

    /// Runs `work` to its end, for at most `limit`; a call started before the server began to
    /// shut down is cut when it does (the calls made during the shutdown itself, the release,
    /// run to their limit).
    fn bounded<F: std::future::Future>(&self, limit: Duration, work: F) -> Result<F::Output, Cut> {
        let shutting_down = self.shutting_down;
        let cut_on_shutdown = !shutting_down();
        self.runtime.block_on(async move {
            let work = tokio::time::timeout(limit, work);
            tokio::pin!(work);
            loop {
                tokio::select! {
                    done = &mut work => return done.map_err(|_| Cut::TimedOut),
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {
                        if cut_on_shutdown && shutting_down() {
                            return Err(Cut::ShuttingDown);
                        }
                    }
                }
            }
        })
    }

    /// Runs a statement, connecting first if needed. Its error never holds the password, even
    /// where a server or a library quotes it.
    fn query(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, StoreError> {
        self.query_unredacted(sql, params)
            .map_err(|why| self.redacted(why))
    }

    /// The error with every host's password masked.
    fn redacted(&self, error: StoreError) -> StoreError {
        let StoreError::Failed(text) = error else {
            return error;
        };
        StoreError::Failed(self.conninfo.hosts.iter().fold(text, |text, config| {
            let password = config.get_password().unwrap_or_default();
            redact(&text, &String::from_utf8_lossy(password))
        }))
    }

    fn query_unredacted(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        if self.client.is_none() {
            self.connect()?;
        }
        let Some(client) = self.client.as_ref() else {
            return Err(StoreError::failed("the lease store is not connected"));
        };
        let timeout = self.timeout;
        let result = self.bounded(timeout, client.query(sql, params));
        match result {
            Ok(Ok(rows)) => Ok(rows),
            Ok(Err(error)) => {
                // Any failure starts again on a new connection: the host may have become a
                // standby, or another host of the string the primary.
                self.client = None;
                Err(StoreError::Failed(describe(error)))
            }
            Err(cut) => {
                // The connection may be stuck: start again with a new one.
                self.client = None;
                Err(StoreError::Failed(cut.describe(&format!(
                    "a call ({} ms allowed)",
                    timeout.as_millis()
                ))))
            }
        }
    }
}

impl SqlTransport for RemoteStore {
    fn is_remote(&self) -> bool {
        true
    }

    fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    fn take_notice(&mut self) -> Option<String> {
        self.notice.take()
    }

    fn run(&mut self, call: &Call) -> Result<Vec<Vec<Value>>, StoreError> {
        // Connected first: a parameter decided as the call is sent is decided once the hosts
        // were tried.
        if self.client.is_none() {
            self.connect().map_err(|why| self.redacted(why))?;
        }
        let now_ms = crate::host::boottime_ms();
        let round_trip_ms = self.timeout.as_millis() as u64;
        let params: Vec<Box<dyn ToSql + Sync>> = call
            .params
            .iter()
            .map(|param| -> Box<dyn ToSql + Sync> {
                match param {
                    Param::Text(text) => Box::new(text.clone()),
                    Param::Int(number) => Box::new(*number),
                    Param::BigInt(number) => Box::new(*number),
                    Param::Bool(flag) => Box::new(*flag),
                    Param::LiveBefore(deadline_ms) => {
                        Box::new(live_before(*deadline_ms, now_ms, round_trip_ms))
                    }
                }
            })
            .collect();
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|param| param.as_ref()).collect();
        let rows = self.query(call.sql, &refs)?;
        rows.iter()
            .map(|row| {
                if row.len() != call.columns.len() {
                    return Err(StoreError::Failed(format!(
                        "the lease store answered with {} columns instead of {}",
                        row.len(),
                        call.columns.len()
                    )));
                }
                call.columns
                    .iter()
                    .enumerate()
                    .map(|(index, kind)| read_value(row, index, *kind).map_err(StoreError::Failed))
                    .collect()
            })
            .collect()
    }
}

/// The latest timeline this server saw its store on, from the data directory (the worker's
/// working directory); `None` before it saw any.
fn read_timeline_seen() -> Result<Option<TimelineSeen>, String> {
    let file = store_timeline::FILE;
    match std::fs::read_to_string(file) {
        Ok(text) => store_timeline::from_text(&text).map(Some).map_err(|why| {
            format!(
                "the file \"{file}\" in the data directory {why}; it keeps the latest timeline this server saw its lease store on, so that an old primary of the store is never taken for it again: no host of cosid.lease_store is used until it is readable (move it aside only once no old primary of the store can be reached)"
            )
        }),
        // pg_upgrade copies no file of ours: in the data directory it made, a missing file is
        // the old server's knowledge, not a first start, until the mark is deleted.
        Err(why)
            if why.kind() == std::io::ErrorKind::NotFound
                && crate::local_state::missing_after_upgrade(file) =>
        {
            Err(format!(
                "the file \"{file}\" is missing, and \"{marker}\" says that pg_upgrade made this data directory: the latest timeline the old server saw its lease store on is in the old one's; no host of cosid.lease_store is used until it is copied from there with the other files of cosid ({files}) and the server restarted (or, if the old server never leased from this store, until \"{marker}\" is deleted, last, once the other files are in place, and the server restarted)",
                files = crate::local_state::copied_after_upgrade(),
                marker = crate::local_state::UPGRADE_MARKER
            ))
        }
        Err(why) if why.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(why) => Err(format!("cannot read the file \"{file}\": {why}")),
    }
}

/// Column `index` (from 0) of a row, read as `kind`: a wrong type is an error, never a panic.
fn read_value(row: &Row, index: usize, kind: Kind) -> Result<Value, String> {
    let value = match kind {
        Kind::Text => row
            .try_get::<_, Option<String>>(index)
            .map(|v| v.map(Value::Text)),
        Kind::Int => row
            .try_get::<_, Option<i32>>(index)
            .map(|v| v.map(Value::Int)),
        Kind::BigInt => row
            .try_get::<_, Option<i64>>(index)
            .map(|v| v.map(Value::BigInt)),
        Kind::Bool => row
            .try_get::<_, Option<bool>>(index)
            .map(|v| v.map(Value::Bool)),
    };
    value.map(|v| v.unwrap_or(Value::Null)).map_err(|e| {
        format!(
            "the lease store answered column {} with a wrong type: {e}",
            index + 1
        )
    })
}

impl Cut {
    fn describe(&self, what: &str) -> String {
        match self {
            Cut::TimedOut => format!("the lease store did not answer {what} in time"),
            Cut::ShuttingDown => format!("{what} was cut short: the server is shutting down"),
        }
    }
}

/// An error's message and its causes (a TLS failure says why), without the connection string.
/// [`RemoteStore::query`] masks the password in it, should a server or library quote it.
fn describe(error: tokio_postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        return format!("{}: {}", db.severity(), db.message());
    }
    let mut text = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
