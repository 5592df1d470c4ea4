//! What the shared lease store's client makes of a libpq connection string: the keywords its
//! PostgreSQL client library takes (renamed where the two name one thing differently), the TLS
//! check, the certificate files, the passfile and the TCP user timeout, which the client sets up
//! itself; and which passfile line gives the password. Pure: the extension's store client
//! (`src/store/remote.rs`) hands the kept keywords to tokio-postgres, checks the key file's
//! permissions, and reads the passfile and the environment.
//!
//! Messages name keywords, never values (see `conninfo`).

use crate::conninfo::{parse_conninfo, split_passfile_line};
use std::time::Duration;

/// How the server's certificate is checked, from `sslmode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsCheck {
    /// `disable`, `allow`, `prefer` without a certificate check; the connection may be plain.
    None,
    /// `require`: encrypted, certificate not checked.
    Encrypt,
    /// `verify-ca`: the certificate must chain to `sslrootcert`.
    VerifyCa,
    /// `verify-full`: and name the host.
    VerifyFull,
}

/// A client certificate and its private key, both PEM files (`sslcert`, `sslkey`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientIdentity {
    pub cert: String,
    pub key: String,
}

/// A connection string, translated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientOptions {
    /// The keyword-value pairs for the client library, in the string's order, under the client's
    /// names. `sslmode` is the client's: `disable`, `prefer` or `require` (the certificate is
    /// checked by the TLS set-up, from `tls`).
    pub pairs: Vec<(String, String)>,
    pub tls: TlsCheck,
    pub root_cert: Option<String>,
    pub client_identity: Option<ClientIdentity>,
    pub passfile: Option<String>,
    /// libpq counts it in milliseconds; the client takes it as a duration. Zero (or less) means
    /// the system's default, as in libpq.
    pub tcp_user_timeout: Option<Duration>,
}

/// The libpq keywords passed on to the client library as they are.
pub const PASSED_ON: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "options",
    "application_name",
    "connect_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "channel_binding",
    "load_balance_hosts",
    "sslnegotiation",
];

/// A value quoted for a key=value connection string.
pub fn quote(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
}

impl ClientOptions {
    /// Translates a libpq connection string (key=value or URL). Every message names the key or
    /// the part at fault, never a value.
    pub fn translate(text: &str) -> Result<ClientOptions, String> {
        let mut pairs = Vec::new();
        let mut tls = TlsCheck::None;
        let mut root_cert = None;
        let mut client_cert = None;
        let mut client_key = None;
        let mut passfile = None;
        let mut tcp_user_timeout = None;
        for (key, value) in parse_conninfo(text)? {
            match key.as_str() {
                "sslmode" => {
                    tls = match value.as_str() {
                        "require" => TlsCheck::Encrypt,
                        "verify-ca" => TlsCheck::VerifyCa,
                        "verify-full" => TlsCheck::VerifyFull,
                        _ => TlsCheck::None,
                    };
                    let mode = if value == "disable" {
                        "disable"
                    } else if tls == TlsCheck::None {
                        "prefer"
                    } else {
                        "require"
                    };
                    pairs.push((key, mode.to_string()));
                }
                "sslrootcert" => root_cert = Some(value),
                "sslcert" => client_cert = Some(value),
                "sslkey" => client_key = Some(value),
                "passfile" => passfile = Some(value),
                "tcp_user_timeout" => {
                    tcp_user_timeout = value
                        .trim()
                        .parse::<i64>()
                        .ok()
                        .filter(|ms| *ms > 0)
                        .map(|ms| Duration::from_millis(ms as u64))
                }
                // libpq's name for what tokio-postgres calls keepalives_retries.
                "keepalives_count" => pairs.push(("keepalives_retries".to_string(), value)),
                "target_session_attrs" => {
                    if !matches!(value.as_str(), "any" | "read-write" | "read-only") {
                        return Err(
                            "The lease store client takes target_session_attrs any, read-write \
                             or read-only"
                                .to_string(),
                        );
                    }
                    pairs.push((key, value));
                }
                _ if PASSED_ON.contains(&key.as_str()) => pairs.push((key, value)),
                _ => {
                    return Err(format!(
                        "The lease store client does not support \"{key}\"; leave it out"
                    ))
                }
            }
        }
        if matches!(tls, TlsCheck::VerifyCa | TlsCheck::VerifyFull) && root_cert.is_none() {
            return Err(
                "With sslmode verify-ca or verify-full, sslrootcert must name the certificate of \
                 the authority that signed the store's certificate"
                    .to_string(),
            );
        }
        let client_identity = match (client_cert, client_key) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some(ClientIdentity { cert, key }),
            _ => {
                return Err(
                    "sslcert and sslkey must be given together: the client certificate \
                     and its private key"
                        .to_string(),
                )
            }
        };
        if client_identity.is_some() && tls == TlsCheck::None {
            return Err(
                "A client certificate (sslcert, sslkey) needs sslmode require, verify-ca or \
                 verify-full"
                    .to_string(),
            );
        }
        Ok(ClientOptions {
            pairs,
            tls,
            root_cert,
            client_identity,
            passfile,
            tcp_user_timeout,
        })
    }

    /// One string per host, in the string's order, as libpq tries them: each with its own
    /// `host` (and `hostaddr`), its port (one port for every host, or one each), and the rest
    /// unchanged, so that each host gets a whole `connect_timeout` of its own, start-up exchange
    /// included. `target_session_attrs` and `load_balance_hosts` are left out: the store must
    /// be writable, which the caller checks on each host, and hosts are tried in order. An
    /// error when the lists do not match, as libpq's.
    pub fn per_host(&self) -> Result<Vec<ClientOptions>, String> {
        let list = |key: &str| -> Vec<String> {
            self.pairs
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, value)| {
                    value
                        .split(',')
                        .map(|part| part.trim().to_string())
                        .collect()
                })
                .unwrap_or_default()
        };
        let (hosts, addresses, ports) = (list("host"), list("hostaddr"), list("port"));
        let count = hosts.len().max(addresses.len()).max(1);
        if (!hosts.is_empty() && hosts.len() != count)
            || (!addresses.is_empty() && addresses.len() != count)
        {
            return Err("host and hostaddr must list as many hosts".to_string());
        }
        if ports.len() > 1 && ports.len() != count {
            return Err("port must give one port, or one for each host".to_string());
        }
        let pick = |values: &[String], index: usize| -> Option<String> {
            match values.len() {
                0 => None,
                1 => Some(values[0].clone()),
                _ => Some(values[index].clone()),
            }
        };
        Ok((0..count)
            .map(|index| {
                let mut pairs: Vec<(String, String)> = self
                    .pairs
                    .iter()
                    .filter(|(key, _)| {
                        !matches!(
                            key.as_str(),
                            "host"
                                | "hostaddr"
                                | "port"
                                | "target_session_attrs"
                                | "load_balance_hosts"
                        )
                    })
                    .cloned()
                    .collect();
                for (key, values) in [("host", &hosts), ("hostaddr", &addresses), ("port", &ports)]
                {
                    if let Some(value) = pick(values, index) {
                        pairs.insert(0, (key.to_string(), value));
                    }
                }
                ClientOptions {
                    pairs,
                    ..self.clone()
                }
            })
            .collect())
    }

    /// The pairs as the client library's key=value string, every value quoted.
    pub fn client_string(&self) -> String {
        let quoted: Vec<String> = self
            .pairs
            .iter()
            .map(|(key, value)| format!("{key}={}", quote(value)))
            .collect();
        quoted.join(" ")
    }
}

/// Whom a passfile line is looked up for: the first host and port of the string (libpq's
/// defaults `localhost` and 5432), its database (the user's name by default) and user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassfileKey<'a> {
    pub host: &'a str,
    pub port: &'a str,
    pub database: &'a str,
    pub user: &'a str,
}

/// The password of the first passfile line (`host:port:database:user:password`, `*` matching
/// anything, `#` starting a comment line) that matches.
pub fn passfile_password(text: &str, key: &PassfileKey) -> Option<String> {
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let fields = split_passfile_line(line);
        if fields.len() != 5 {
            continue;
        }
        let matches = |field: &str, value: &str| field == "*" || field == value;
        if matches(&fields[0], key.host)
            && matches(&fields[1], key.port)
            && matches(&fields[2], key.database)
            && matches(&fields[3], key.user)
        {
            return Some(fields[4].clone());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(options: &ClientOptions) -> Vec<(&str, &str)> {
        options
            .pairs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    fn refused(text: &str) -> String {
        ClientOptions::translate(text).expect_err(text)
    }

    #[test]
    fn each_host_gets_a_string_of_its_own() {
        let options = ClientOptions::translate(
            "host=a,b,c port=5432,5433,5434 dbname=store connect_timeout=2 \
             target_session_attrs=read-write load_balance_hosts=disable",
        )
        .unwrap();
        let hosts = options.per_host().unwrap();
        let strings: Vec<String> = hosts.iter().map(ClientOptions::client_string).collect();
        assert_eq!(
            strings,
            [
                "port='5432' host='a' dbname='store' connect_timeout='2'",
                "port='5433' host='b' dbname='store' connect_timeout='2'",
                "port='5434' host='c' dbname='store' connect_timeout='2'",
            ]
        );
        let one_port = ClientOptions::translate("host=a,b hostaddr=127.0.0.1,127.0.0.2 port=6000")
            .unwrap()
            .per_host()
            .unwrap();
        assert_eq!(
            pairs(&one_port[1]),
            vec![("port", "6000"), ("hostaddr", "127.0.0.2"), ("host", "b")]
        );
        let no_host = ClientOptions::translate("dbname=store").unwrap();
        assert_eq!(no_host.per_host().unwrap(), vec![no_host.clone()]);
        for text in [
            "host=a,b port=1,2,3",
            "host=a,b hostaddr=127.0.0.1,127.0.0.2,127.0.0.3",
        ] {
            assert!(
                ClientOptions::translate(text).unwrap().per_host().is_err(),
                "{text}"
            );
        }
    }

    #[test]
    fn plain_keywords_are_passed_on_in_order() {
        let options = ClientOptions::translate(
            "host=a,b port=5432,5433 dbname=store user=cosid password=secret \
             application_name=x connect_timeout=3 keepalives=1 keepalives_idle=5 \
             keepalives_interval=2 options='-c x=1' channel_binding=prefer \
             load_balance_hosts=disable hostaddr=127.0.0.1 sslnegotiation=postgres",
        )
        .unwrap();
        assert_eq!(
            pairs(&options),
            vec![
                ("host", "a,b"),
                ("port", "5432,5433"),
                ("dbname", "store"),
                ("user", "cosid"),
                ("password", "secret"),
                ("application_name", "x"),
                ("connect_timeout", "3"),
                ("keepalives", "1"),
                ("keepalives_idle", "5"),
                ("keepalives_interval", "2"),
                ("options", "-c x=1"),
                ("channel_binding", "prefer"),
                ("load_balance_hosts", "disable"),
                ("hostaddr", "127.0.0.1"),
                ("sslnegotiation", "postgres"),
            ]
        );
        assert_eq!(options.tls, TlsCheck::None);
        assert_eq!(options.root_cert, None);
        assert_eq!(options.client_identity, None);
        assert_eq!(options.passfile, None);
        assert_eq!(options.tcp_user_timeout, None);
    }

    #[test]
    fn a_url_is_translated_like_its_key_values() {
        let url = ClientOptions::translate(
            "postgresql://cosid:p%40ss@db.example:6432/leases?sslmode=require&application_name=a",
        )
        .unwrap();
        let mut found = pairs(&url);
        found.sort();
        assert_eq!(
            found,
            vec![
                ("application_name", "a"),
                ("dbname", "leases"),
                ("host", "db.example"),
                ("password", "p@ss"),
                ("port", "6432"),
                ("sslmode", "require"),
                ("user", "cosid"),
            ]
        );
        assert_eq!(url.tls, TlsCheck::Encrypt);
    }

    #[test]
    fn sslmode_becomes_the_clients_mode_and_a_certificate_check() {
        for (mode, client, check) in [
            ("disable", "disable", TlsCheck::None),
            ("allow", "prefer", TlsCheck::None),
            ("prefer", "prefer", TlsCheck::None),
            ("require", "require", TlsCheck::Encrypt),
            ("verify-ca", "require", TlsCheck::VerifyCa),
            ("verify-full", "require", TlsCheck::VerifyFull),
        ] {
            let options =
                ClientOptions::translate(&format!("host=h sslmode={mode} sslrootcert=/ca.pem"))
                    .unwrap();
            assert_eq!(pairs(&options), vec![("host", "h"), ("sslmode", client)]);
            assert_eq!(options.tls, check, "{mode}");
            assert_eq!(options.root_cert.as_deref(), Some("/ca.pem"));
        }
    }

    #[test]
    fn keywords_named_otherwise_or_handled_by_the_client_are_taken_out() {
        let options = ClientOptions::translate(
            "host=h keepalives_count=4 tcp_user_timeout=2500 passfile=/p/.pgpass \
             sslmode=verify-full sslrootcert=/ca sslcert=/c.pem sslkey=/k.pem \
             target_session_attrs=read-write",
        )
        .unwrap();
        assert_eq!(
            pairs(&options),
            vec![
                ("host", "h"),
                ("keepalives_retries", "4"),
                ("sslmode", "require"),
                ("target_session_attrs", "read-write"),
            ]
        );
        assert_eq!(options.tcp_user_timeout, Some(Duration::from_millis(2500)));
        assert_eq!(options.passfile.as_deref(), Some("/p/.pgpass"));
        assert_eq!(
            options.client_identity,
            Some(ClientIdentity {
                cert: "/c.pem".to_string(),
                key: "/k.pem".to_string()
            })
        );
        assert_eq!(options.tls, TlsCheck::VerifyFull);
    }

    #[test]
    fn a_tcp_user_timeout_of_zero_or_less_is_the_systems_default() {
        for value in ["0", "-5"] {
            let options =
                ClientOptions::translate(&format!("host=h tcp_user_timeout='{value}'")).unwrap();
            assert_eq!(options.tcp_user_timeout, None, "{value:?}");
        }
        let options = ClientOptions::translate("host=h tcp_user_timeout=' 750 '").unwrap();
        assert_eq!(options.tcp_user_timeout, Some(Duration::from_millis(750)));
        assert_eq!(
            refused("host=h tcp_user_timeout=soon"),
            "The value of \"tcp_user_timeout\" is not a whole number of milliseconds"
        );
    }

    #[test]
    fn target_session_attrs_takes_only_what_the_client_knows() {
        for value in ["any", "read-write", "read-only"] {
            ClientOptions::translate(&format!("host=h target_session_attrs={value}")).unwrap();
        }
        for value in ["primary", "standby", "prefer-standby"] {
            let message = refused(&format!("host=h target_session_attrs={value}"));
            assert!(
                message.contains("any, read-write or read-only"),
                "{message}"
            );
            assert!(!message.contains(value), "{message}");
        }
    }

    #[test]
    fn keywords_the_client_does_not_support_are_refused_by_name() {
        for key in [
            "service",
            "sslpassword",
            "sslcrl",
            "gssencmode",
            "requirepeer",
            "krbsrvname",
            "client_encoding",
            "replication",
        ] {
            let message = refused(&format!("host=h {key}=whatever"));
            assert_eq!(
                message,
                format!("The lease store client does not support \"{key}\"; leave it out")
            );
            assert!(!message.contains("whatever"));
        }
    }

    #[test]
    fn certificate_checks_need_their_files() {
        for mode in ["verify-ca", "verify-full"] {
            assert!(refused(&format!("host=h sslmode={mode}")).contains("sslrootcert must name"));
        }
        assert!(refused("host=h sslmode=require sslcert=/c").contains("given together"));
        assert!(refused("host=h sslmode=require sslkey=/k").contains("given together"));
        for mode in ["disable", "allow", "prefer"] {
            let message = refused(&format!("host=h sslmode={mode} sslcert=/c sslkey=/k"));
            assert!(message.contains("needs sslmode require"), "{message}");
        }
        // No sslmode at all is libpq's prefer: a client certificate needs more.
        assert!(refused("host=h sslcert=/c sslkey=/k").contains("needs sslmode require"));
    }

    #[test]
    fn messages_never_quote_a_value() {
        let secret = "s3cr3t-V4lue";
        for text in [
            format!("host=h password={secret} target_session_attrs=primary"),
            format!("host=h password={secret} sslmode=verify-ca"),
            format!("host=h password={secret} sslcert=/c"),
            format!("host=h password={secret} service=x"),
            format!("host=h password={secret} sslcert=/c sslkey=/k"),
        ] {
            let message = refused(&text);
            assert!(!message.contains(secret), "{message}");
        }
    }

    #[test]
    fn parse_errors_of_the_string_come_through() {
        assert_eq!(
            refused("host"),
            crate::conninfo::parse_conninfo("host").unwrap_err()
        );
    }

    #[test]
    fn the_client_string_quotes_every_value() {
        let options = ClientOptions::translate(r"host=h password='it\'s a \\ pass'").unwrap();
        assert_eq!(
            pairs(&options),
            vec![("host", "h"), ("password", r"it's a \ pass")]
        );
        assert_eq!(
            options.client_string(),
            r"host='h' password='it\'s a \\ pass'"
        );
        assert_eq!(quote(""), "''");
    }

    fn key<'a>(host: &'a str, port: &'a str, database: &'a str, user: &'a str) -> PassfileKey<'a> {
        PassfileKey {
            host,
            port,
            database,
            user,
        }
    }

    #[test]
    fn the_first_matching_passfile_line_gives_the_password() {
        let text = "# comment:*:*:*:no\n\
                    other:5432:store:cosid:wrong-host\n\
                    db:6432:store:cosid:wrong-port\n\
                    db:5432:other:cosid:wrong-db\n\
                    db:5432:store:someone:wrong-user\n\
                    db:5432:store:cosid:right\n\
                    *:*:*:*:later\n";
        assert_eq!(
            passfile_password(text, &key("db", "5432", "store", "cosid")).as_deref(),
            Some("right")
        );
        assert_eq!(
            passfile_password(text, &key("x", "1", "y", "z")).as_deref(),
            Some("later")
        );
        assert_eq!(
            passfile_password(
                "db:5432:store:cosid\nbroken\n",
                &key("db", "5432", "store", "cosid")
            ),
            None
        );
    }

    #[test]
    fn passfile_fields_may_hold_escaped_colons_and_backslashes() {
        let text = r"db:5432:store:cosid:pa\:ss\\word";
        assert_eq!(
            passfile_password(text, &key("db", "5432", "store", "cosid")).as_deref(),
            Some(r"pa:ss\word")
        );
        let text = r"*:*:st\:ore:*:x";
        assert_eq!(
            passfile_password(text, &key("db", "5432", "st:ore", "cosid")).as_deref(),
            Some("x")
        );
    }
}
