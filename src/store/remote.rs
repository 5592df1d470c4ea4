//! The lease store in another PostgreSQL database (`cosid.lease_store`), shared by a fleet of
//! servers: the protocol of `sql/lease_store.sql`, called over libpq's protocol with
//! tokio-postgres, from the worker's own thread on a single-threaded runtime.
//!
//! Nothing here touches PostgreSQL's own functions: pgrx allows that from one thread only, and
//! the worker calls this module from that thread. Every call is bounded: a connect timeout, TCP
//! keepalives and a TCP user timeout, a statement and lock timeout in the store's session, and a
//! client-side timeout around every round trip, so that an unreachable or silent store never
//! hangs the worker. After any failed call the connection is dropped and made again on the next one.
//! The password (in the connection string, a passfile or `PGPASSWORD`) never appears in a message:
//! errors about the connection string name keys, never values (see `conninfo`), tokio-postgres's
//! own parse errors are not passed on, and every store error has the password masked.

use cosid_core::conninfo::redact;
use cosid_core::protocol::{live_before, Call, Kind, LeaseStore, Param, Readiness, Value};
use cosid_core::store_client::{
    passfile_password, quote, ClientIdentity, ClientOptions, PassfileKey, TlsCheck,
};
use openssl::ssl::{SslConnector, SslFiletype, SslMethod, SslVerifyMode};
use postgres_openssl::MakeTlsConnector;
use std::time::Duration;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Config, NoTls, Row, Socket};

/// A connection string as the client uses it: tokio-postgres's configuration of each host, in
/// the string's order, and what the client sets up itself (see `cosid_core::store_client`).
#[derive(Debug)]
struct ConnInfo {
    /// The configuration of each host, tried in order (see [`RemoteStore::connect`]).
    hosts: Vec<Config>,
    tls: TlsCheck,
    root_cert: Option<String>,
    client_identity: Option<ClientIdentity>,
}

/// libpq's rule for a private key file: not readable by others, and not by the group unless root
/// owns it. A key anybody on the machine can read is refused rather than used.
fn check_key_file_permissions(path: &str) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let metadata = std::fs::metadata(path)
        .map_err(|e| format!("Cannot read the file named by sslkey: {}", io_reason(&e)))?;
    let mode = metadata.mode() & 0o777;
    let allowed = if metadata.uid() == 0 { 0o640 } else { 0o600 };
    if mode & !allowed != 0 {
        return Err(format!(
            "The private key file named by sslkey has permissions {mode:o}; it must be u=rw \
             (0600) or less, or u=rw,g=r (0640) or less if owned by root"
        ));
    }
    Ok(())
}

/// An I/O error's reason without the path some errors carry.
fn io_reason(error: &std::io::Error) -> String {
    let text = error.to_string();
    match text.split_once(" (os error") {
        Some((reason, _)) => reason.to_string(),
        None => text,
    }
}

/// The error for a string tokio-postgres refused although every key and value passed our checks:
/// the pair it refuses alone is named by its key. Its own message is never passed on, since it
/// may quote the text.
fn refused_by_client(pairs: &[(String, String)]) -> String {
    for (key, value) in pairs {
        if format!("{key}={}", quote(value)).parse::<Config>().is_err() {
            return format!("The lease store client does not accept the value of \"{key}\"");
        }
    }
    "The lease store client does not accept this connection string".to_string()
}

impl ConnInfo {
    /// Every message names the key or the part at fault, never a value (see `conninfo`).
    fn parse(text: &str) -> Result<ConnInfo, String> {
        let options = ClientOptions::translate(text)?;
        // The whole string must be one the client takes, and so must each host's.
        options
            .client_string()
            .parse::<Config>()
            .map_err(|_| refused_by_client(&options.pairs))?;
        if let Some(identity) = &options.client_identity {
            check_key_file_permissions(&identity.key)?;
        }
        let mut hosts = Vec::new();
        for host in options.per_host()? {
            let mut config: Config = host
                .client_string()
                .parse()
                .map_err(|_| refused_by_client(&host.pairs))?;
            if let Some(timeout) = options.tcp_user_timeout {
                config.tcp_user_timeout(timeout);
            }
            if config.get_password().is_none() {
                if let Some(password) =
                    password_from_environment(&config, options.passfile.as_deref())
                {
                    config.password(password);
                }
            }
            hosts.push(config);
        }
        Ok(ConnInfo {
            hosts,
            tls: options.tls,
            root_cert: options.root_cert,
            client_identity: options.client_identity,
        })
    }
}

/// `PGPASSWORD`, or the first matching line of the passfile (`passfile`, `PGPASSFILE` or
/// `~/.pgpass`).
fn password_from_environment(config: &Config, passfile: Option<&str>) -> Option<Vec<u8>> {
    if let Ok(password) = std::env::var("PGPASSWORD") {
        return Some(password.into_bytes());
    }
    let path = passfile
        .map(str::to_string)
        .or_else(|| std::env::var("PGPASSFILE").ok())
        .or_else(|| {
            std::env::var("HOME")
                .ok()
                .map(|home| format!("{home}/.pgpass"))
        })?;
    let text = std::fs::read_to_string(path).ok()?;
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        _ => "localhost".to_string(),
    };
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let user = config.get_user().unwrap_or("postgres");
    let database = config.get_dbname().unwrap_or(user);
    let key = PassfileKey {
        host: &host,
        port: &port,
        database,
        user,
    };
    passfile_password(&text, &key).map(String::into_bytes)
}

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
}

/// The error of a store string none of whose hosts takes writes.
pub const READ_ONLY: &str =
    "every host of cosid.lease_store is read-only (a hot standby, or default_transaction_read_only on)";

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

    fn tls_connector(&self) -> Result<MakeTlsConnector, String> {
        let mut builder = SslConnector::builder(SslMethod::tls_client())
            .map_err(|e| format!("cannot set up TLS: {e}"))?;
        match self.conninfo.tls {
            TlsCheck::None | TlsCheck::Encrypt => builder.set_verify(SslVerifyMode::NONE),
            TlsCheck::VerifyCa | TlsCheck::VerifyFull => {
                let path = self.conninfo.root_cert.as_deref().unwrap_or_default();
                builder
                    .set_ca_file(path)
                    .map_err(|e| format!("cannot read the file named by sslrootcert: {e}"))?;
                builder.set_verify(SslVerifyMode::PEER);
            }
        }
        if let Some(identity) = &self.conninfo.client_identity {
            builder
                .set_certificate_chain_file(&identity.cert)
                .map_err(|e| format!("cannot read the file named by sslcert: {e}"))?;
            builder
                .set_private_key_file(&identity.key, SslFiletype::PEM)
                .map_err(|e| format!("cannot read the file named by sslkey: {e}"))?;
            builder
                .check_private_key()
                .map_err(|e| format!("sslkey is not the key of sslcert: {e}"))?;
        }
        let mut connector = MakeTlsConnector::new(builder.build());
        if self.conninfo.tls != TlsCheck::VerifyFull {
            connector.set_callback(|config, _| {
                config.set_verify_hostname(false);
                Ok(())
            });
        }
        Ok(connector)
    }

    /// Connects to the first host of the string that answers and is writable, as libpq tries
    /// hosts: each gets its own `connect_timeout` (5 s by default), the start-up exchange and
    /// the session set-up included, so that a host that accepts connections and never answers
    /// costs only its own time. A host in recovery (a hot standby) or otherwise read-only is
    /// passed over, whatever `target_session_attrs` says: the lease store must take writes.
    fn connect(&mut self) -> Result<(), String> {
        let mut failures = Vec::new();
        let mut read_only = 0;
        for index in 0..self.conninfo.hosts.len() {
            match self.connect_to(index) {
                Ok(Some(client)) => {
                    self.client = Some(client);
                    return Ok(());
                }
                Ok(None) => read_only += 1,
                Err(why) => failures.push(why),
            }
            if (self.shutting_down)() {
                break;
            }
        }
        Err(if failures.is_empty() && read_only > 0 {
            READ_ONLY.to_string()
        } else if read_only > 0 {
            format!("{}; {read_only} host(s) read-only", failures.join("; "))
        } else {
            failures.join("; ")
        })
    }

    /// A session on host `index`, set up; `None` when the host is read-only.
    fn connect_to(&self, index: usize) -> Result<Option<Client>, String> {
        let config = &self.conninfo.hosts[index];
        let mut limit = config
            .get_connect_timeout()
            .copied()
            .unwrap_or(self.timeout);
        // At shutdown, the release must not wait for a whole connect timeout.
        if (self.shutting_down)() {
            limit = limit.min(self.timeout);
        }
        let started = std::time::Instant::now();
        let client = if self.conninfo.tls == TlsCheck::None
            && config.get_ssl_mode() == tokio_postgres::config::SslMode::Disable
        {
            self.open(config, NoTls, limit)?
        } else {
            let tls = self.tls_connector()?;
            self.open(config, tls, limit)?
        };
        // The statement timeout first, since a role's or database's may be too short for the
        // rest; then the settings every worker session pins (cosid_core::session_settings),
        // which a store role can give itself with ALTER ROLE ... SET; then this client's own.
        let session = format!(
            "SET statement_timeout = {ms}; SET search_path = pg_catalog, pg_temp; \
             {pinning}; \
             SET statement_timeout = {ms}; SET lock_timeout = {ms}; \
             SET idle_in_transaction_session_timeout = {ms}; \
             SET default_transaction_isolation = 'read committed'; \
             SET synchronous_commit = on",
            ms = self.timeout.as_millis().max(1),
            pinning = cosid_core::session_settings::store_pinning_sql(),
        );
        // What is left of the host's time, and at least a little for each step.
        let left = || {
            let floor = Duration::from_millis(500).min(limit);
            limit.saturating_sub(started.elapsed()).max(floor)
        };
        self.bounded(left(), client.batch_execute(&session))
            .map_err(|cut| cut.describe("the session set-up"))?
            .map_err(describe)?;
        let rows = self
            .bounded(left(), client.query("SHOW transaction_read_only", &[]))
            .map_err(|cut| cut.describe("the check for a writable host"))?
            .map_err(describe)?;
        let writable = rows
            .first()
            .and_then(|row| row.try_get::<_, String>(0).ok())
            .is_some_and(|value| value == "off");
        Ok(writable.then_some(client))
    }

    /// Connects to one host within `limit`, and lets the connection run on the runtime.
    fn open<T>(&self, config: &Config, tls: T, limit: Duration) -> Result<Client, String>
    where
        T: MakeTlsConnect<Socket>,
        T::Stream: Send + 'static,
    {
        let connecting = config.connect(tls);
        let (client, connection) = self
            .bounded(limit, connecting)
            .map_err(|cut| cut.describe("the connection"))?
            .map_err(describe)?;
        self.runtime.spawn(async move {
            let _ = connection.await;
        });
        Ok(client)
    }

    /// Runs a statement, connecting first if needed. Its error never holds the password, even
    /// where a server or a library quotes it.
    fn query(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, String> {
        self.query_unredacted(sql, params)
            .map_err(|why| self.redacted(why))
    }

    /// The text with every host's password masked.
    fn redacted(&self, text: String) -> String {
        self.conninfo.hosts.iter().fold(text, |text, config| {
            let password = config.get_password().unwrap_or_default();
            redact(&text, &String::from_utf8_lossy(password))
        })
    }

    fn query_unredacted(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, String> {
        if self.client.is_none() {
            self.connect()?;
        }
        let Some(client) = self.client.as_ref() else {
            return Err("the lease store is not connected".to_string());
        };
        let timeout = self.timeout;
        let result = self.bounded(timeout, client.query(sql, params));
        match result {
            Ok(Ok(rows)) => Ok(rows),
            Ok(Err(error)) => {
                // Any failure starts again on a new connection: the host may have become a
                // standby, or another host of the string the primary.
                self.client = None;
                Err(describe(error))
            }
            Err(cut) => {
                // The connection may be stuck: start again with a new one.
                self.client = None;
                Err(cut.describe(&format!("a call ({} ms allowed)", timeout.as_millis())))
            }
        }
    }
}

impl LeaseStore for RemoteStore {
    fn is_remote(&self) -> bool {
        true
    }

    fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// A store none of whose hosts takes writes is read-only, not unreachable: `cosid.status`
    /// says so.
    fn readiness(&mut self) -> Result<Readiness, String> {
        match self.installed_protocol() {
            Err(why) if why == READ_ONLY => Ok(Readiness::ReadOnly),
            other => other,
        }
    }

    fn run(&mut self, call: &Call) -> Result<Vec<Vec<Value>>, String> {
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
                    return Err(format!(
                        "the lease store answered with {} columns instead of {}",
                        row.len(),
                        call.columns.len()
                    ));
                }
                call.columns
                    .iter()
                    .enumerate()
                    .map(|(index, kind)| read_value(row, index, *kind))
                    .collect()
            })
            .collect()
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
