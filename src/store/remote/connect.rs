//! Connecting to the shared store: TLS as the connection string asks, the hosts tried in order as
//! libpq tries them, each session set up and checked to take writes.

use super::{describe, RemoteStore};
use cosid_core::protocol::StoreError;
use cosid_core::store_client::TlsCheck;
use cosid_core::store_timeline::{self, Judgement};
use openssl::ssl::{SslConnector, SslFiletype, SslMethod, SslVerifyMode};
use postgres_openssl::MakeTlsConnector;
use std::time::Duration;
use tokio_postgres::error::SqlState;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{Client, Config, NoTls, Socket};

impl RemoteStore {
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
    pub(super) fn connect(&mut self) -> Result<(), StoreError> {
        let mut failures = Vec::new();
        let mut read_only = 0;
        for index in 0..self.conninfo.hosts.len() {
            match self.connect_to(index).and_then(|client| match client {
                Some(client) => self.check_timeline(index, &client).map(|()| Some(client)),
                None => Ok(None),
            }) {
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
            StoreError::ReadOnly
        } else if read_only > 0 {
            StoreError::Failed(format!(
                "{}; {read_only} host(s) read-only",
                failures.join("; ")
            ))
        } else {
            StoreError::Failed(failures.join("; "))
        })
    }

    /// Refuses host `index` if it answers on an older timeline of the store than this server
    /// saw it on (an old primary: a split brain, or a failback), and remembers a newer one in
    /// the data directory before the host is used (`cosid_core::store_timeline`). A store
    /// without `cosid.lease_store_identity()` (before 0.5.0) is not compared.
    fn check_timeline(&mut self, index: usize, client: &Client) -> Result<(), String> {
        let seen = self.timeline_seen.clone()?;
        let asked = client.query("SELECT cosid.lease_store_identity()", &[]);
        let rows = match self.bounded(self.timeout, asked) {
            Err(cut) => return Err(cut.describe("the store's identity")),
            // A database with no cosid (CosId's table alone, for cosid_jdbc) has no identity.
            Ok(Err(error))
                if error.code() == Some(&SqlState::UNDEFINED_FUNCTION)
                    || error.code() == Some(&SqlState::INVALID_SCHEMA_NAME) =>
            {
                return Ok(())
            }
            Ok(Err(error)) => return Err(describe(error)),
            Ok(Ok(rows)) => rows,
        };
        let text = rows
            .first()
            .and_then(|row| row.try_get::<_, Option<String>>(0).ok())
            .flatten();
        let Some(found) = text.as_deref().and_then(store_timeline::parse_identity) else {
            return Err(
                "the lease store answered its identity in a form this server cannot read"
                    .to_string(),
            );
        };
        match store_timeline::judge(seen.as_ref(), &found) {
            Judgement::Same => Ok(()),
            Judgement::Newer(newer) => {
                crate::local_state::write_line_durably(
                    store_timeline::FILE,
                    &store_timeline::to_text(&newer),
                )
                .map_err(|why| {
                    format!(
                        "could not write the file \"{}\": {why}",
                        store_timeline::FILE
                    )
                })?;
                self.timeline_seen = Ok(Some(newer));
                Ok(())
            }
            Judgement::Older { found, seen } => {
                let text = format!(
                    "{} of cosid.lease_store is on timeline {found} of the lease store, older than timeline {seen} this server saw it on: an old primary (left running after a failover, a split brain, or started again after one) that has not seen what was written since; not used. Fence it, or make it a standby of the current primary",
                    self.host_label(index)
                );
                self.notice = Some(text.clone());
                Err(text)
            }
        }
    }

    /// "host H port P" of host `index`, for messages (no other part of the string).
    fn host_label(&self, index: usize) -> String {
        let config = &self.conninfo.hosts[index];
        let host = match config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
            #[cfg(unix)]
            Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
            None => "localhost".to_string(),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        format!("host {host} port {port}")
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
}
