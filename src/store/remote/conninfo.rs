//! The connection string of the shared store, as the client uses it: checked key by key, each
//! host's configuration, the password from the environment or the passfile, and the TLS files.
//! Every message names the key or the part at fault, never a value.

use cosid_core::store_client::{
    passfile_password, quote, ClientIdentity, ClientOptions, PassfileKey, TlsCheck,
};
use tokio_postgres::Config;

/// A connection string as the client uses it: tokio-postgres's configuration of each host, in
/// the string's order, and what the client sets up itself (see `cosid_core::store_client`).
#[derive(Debug)]
pub(super) struct ConnInfo {
    /// The configuration of each host, tried in order (see `RemoteStore::connect`).
    pub(super) hosts: Vec<Config>,
    pub(super) tls: TlsCheck,
    pub(super) root_cert: Option<String>,
    pub(super) client_identity: Option<ClientIdentity>,
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
    /// Every message names the key or the part at fault, never a value (see
    /// `cosid_core::conninfo`).
    pub(super) fn parse(text: &str) -> Result<ConnInfo, String> {
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
