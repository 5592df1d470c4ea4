//! libpq connection strings and passfiles, as far as the lease store client needs them. Pure.
//!
//! # No values in messages
//!
//! A connection string may hold a password, and a malformed one may hold it anywhere: a value
//! written without quotes spills its words into what reads as keys, and a `/`, `?` or `@` left
//! unescaped in a URL's password moves part of it into the database name or a parameter. So no
//! message here quotes any text of the connection string. A message names a libpq keyword the
//! text used, a part of the URL, or a character position; keys that are not libpq keywords are
//! never echoed, since they may be the words of a value.

/// Every keyword libpq takes in a connection string (PostgreSQL 17). Only these are named in
/// messages.
pub const KEYWORDS: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "passfile",
    "require_auth",
    "channel_binding",
    "connect_timeout",
    "client_encoding",
    "options",
    "application_name",
    "fallback_application_name",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
    "replication",
    "gssencmode",
    "sslmode",
    "sslnegotiation",
    "sslcompression",
    "sslcert",
    "sslkey",
    "sslcertmode",
    "sslpassword",
    "sslrootcert",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "requirepeer",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "krbsrvname",
    "gsslib",
    "gssdelegation",
    "service",
    "target_session_attrs",
    "load_balance_hosts",
];

pub fn is_keyword(key: &str) -> bool {
    KEYWORDS.contains(&key)
}

/// Splits a libpq connection string in either of its forms, a URL
/// (`postgresql://user:password@host:port/dbname?key=value`) or key=value pairs, into pairs of
/// libpq keywords and values. A key given twice keeps its last value, as in libpq. Values are
/// checked where libpq restricts them (numbers, ports, addresses, modes).
pub fn parse_conninfo(text: &str) -> Result<Vec<(String, String)>, String> {
    let url = ["postgresql://", "postgres://"]
        .iter()
        .find_map(|scheme| text.trim().strip_prefix(scheme));
    let pairs = match url {
        Some(rest) => parse_url(rest)?,
        None => parse_key_values(text)?,
    };
    let mut unique: Vec<(String, String)> = Vec::with_capacity(pairs.len());
    for (key, value) in pairs {
        unique.retain(|(earlier, _)| *earlier != key);
        unique.push((key, value));
    }
    for (key, value) in &unique {
        check_value(key, value)?;
    }
    Ok(unique)
}

/// A URL part, for messages: never its text.
#[derive(Clone, Copy)]
enum UrlPart<'a> {
    User,
    Password,
    Host,
    Port,
    Database,
    ParameterName(usize),
    ParameterValue(&'a str, usize),
}

impl std::fmt::Display for UrlPart<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UrlPart::User => write!(f, "The user name in the URL"),
            UrlPart::Password => write!(f, "The password in the URL"),
            UrlPart::Host => write!(f, "A host in the URL"),
            UrlPart::Port => write!(f, "A port in the URL"),
            UrlPart::Database => write!(f, "The database name in the URL"),
            UrlPart::ParameterName(index) => {
                write!(f, "The name of URL parameter {index}")
            }
            UrlPart::ParameterValue(key, _) if is_keyword(key) => {
                write!(f, "The value of URL parameter \"{key}\"")
            }
            UrlPart::ParameterValue(_, index) => write!(f, "The value of URL parameter {index}"),
        }
    }
}

/// The part of a URL after its scheme, as libpq reads it: `[user[:password]@][host][:port][,...]
/// [/dbname][?key=value[&...]]`, every part percent-decoded.
fn parse_url(rest: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    let (before_query, query) = match rest.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (rest, None),
    };
    let (authority, dbname) = match before_query.split_once('/') {
        Some((authority, dbname)) => (authority, Some(dbname)),
        None => (before_query, None),
    };
    let hosts = match authority.rsplit_once('@') {
        Some((user_info, hosts)) => {
            let (user, password) = match user_info.split_once(':') {
                Some((user, password)) => (user, Some(password)),
                None => (user_info, None),
            };
            if !user.is_empty() {
                pairs.push(("user".to_string(), percent_decode(user, UrlPart::User)?));
            }
            if let Some(password) = password {
                pairs.push((
                    "password".to_string(),
                    percent_decode(password, UrlPart::Password)?,
                ));
            }
            hosts
        }
        None => authority,
    };
    if !hosts.is_empty() {
        let mut host_list = Vec::new();
        let mut port_list = Vec::new();
        for host_port in hosts.split(',') {
            let (host, port) = split_host_port(host_port)?;
            host_list.push(percent_decode(host, UrlPart::Host)?);
            port_list.push(percent_decode(port, UrlPart::Port)?);
        }
        if host_list.iter().any(|h| !h.is_empty()) {
            pairs.push(("host".to_string(), host_list.join(",")));
        }
        if port_list.iter().any(|p| !p.is_empty()) {
            pairs.push(("port".to_string(), port_list.join(",")));
        }
    }
    if let Some(dbname) = dbname.filter(|d| !d.is_empty()) {
        pairs.push((
            "dbname".to_string(),
            percent_decode(dbname, UrlPart::Database)?,
        ));
    }
    let parameters = query.unwrap_or("").split('&').filter(|p| !p.is_empty());
    for (index, parameter) in parameters.enumerate().map(|(i, p)| (i + 1, p)) {
        let (key, value) = match parameter.split_once('=') {
            Some((key, value)) => (key, Some(value)),
            None => (parameter, None),
        };
        let key = percent_decode(key, UrlPart::ParameterName(index))?;
        let Some(value) = value else {
            return Err(if is_keyword(&key) {
                format!("The URL parameter \"{key}\" has no value; write {key}=value")
            } else {
                format!("URL parameter {index} has no \"=\"; write key=value")
            });
        };
        if !is_keyword(&key) {
            return Err(format!(
                "URL parameter {index} is not a libpq connection keyword"
            ));
        }
        let value = percent_decode(value, UrlPart::ParameterValue(&key, index))?;
        pairs.push((key, value));
    }
    Ok(pairs)
}

/// `host`, `host:port`, `[ipv6]` or `[ipv6]:port`.
fn split_host_port(text: &str) -> Result<(&str, &str), String> {
    if let Some(bracketed) = text.strip_prefix('[') {
        let Some((host, after)) = bracketed.split_once(']') else {
            return Err("A host in the URL has \"[\" without a closing \"]\"".to_string());
        };
        return match after.strip_prefix(':') {
            Some(port) => Ok((host, port)),
            None if after.is_empty() => Ok((host, "")),
            None => Err(
                "A bracketed host in the URL is followed by something other than \":port\""
                    .to_string(),
            ),
        };
    }
    Ok(text.split_once(':').unwrap_or((text, "")))
}

fn percent_decode(text: &str, part: UrlPart) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| {
                    format!(
                        "{part} has an invalid percent escape: \"%\" must be followed by two hex \
                         digits (write \"%25\" for \"%\" itself)"
                    )
                })?;
            decoded.push(hex);
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(decoded).map_err(|_| format!("{part} does not decode to UTF-8 text"))
}

/// A key of a key=value string, for messages: a libpq keyword by name, anything else by where it
/// starts (it may be a word of a value that lacks its quotes).
fn key_for_message(key: &str, at: usize) -> String {
    if is_keyword(key) {
        format!("\"{key}\"")
    } else {
        format!("the key at character {at}")
    }
}

/// Splits a libpq key=value connection string. Values may be single-quoted; in quoted and plain
/// values alike, `\` escapes the next character.
pub fn parse_key_values(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    // Character positions (from 1) for messages.
    let mut chars = text.chars().enumerate().map(|(i, c)| (i + 1, c)).peekable();
    let skip_space = |chars: &mut std::iter::Peekable<_>| {
        while chars
            .next_if(|(_, c): &(usize, char)| c.is_whitespace())
            .is_some()
        {}
    };
    loop {
        skip_space(&mut chars);
        let Some(&(key_at, _)) = chars.peek() else {
            return Ok(pairs);
        };
        let mut key = String::new();
        while let Some((_, c)) = chars.next_if(|(_, c)| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        skip_space(&mut chars);
        if key.is_empty() {
            return Err(format!(
                "The connection string has \"=\" without a key at character {key_at}"
            ));
        }
        if chars.next_if(|(_, c)| *c == '=').is_none() {
            let after = match pairs.last() {
                Some((previous, _)) if is_keyword(previous) => {
                    format!(", after the value of \"{previous}\"")
                }
                _ => String::new(),
            };
            return Err(format!(
                "The connection string has a word without \"=\" at character {key_at}{after}; \
                 every setting is key=value, and a value with spaces must be quoted ('...')"
            ));
        }
        if !is_keyword(&key) {
            return Err(format!(
                "The connection string has an unknown key at character {key_at}; it is not a \
                 libpq connection keyword"
            ));
        }
        skip_space(&mut chars);
        let mut value = String::new();
        if chars.next_if(|(_, c)| *c == '\'').is_some() {
            loop {
                match chars.next() {
                    None => {
                        return Err(format!(
                            "The value of {} has no closing quote",
                            key_for_message(&key, key_at)
                        ))
                    }
                    Some((_, '\\')) => value.extend(chars.next().map(|(_, c)| c)),
                    Some((_, '\'')) => break,
                    Some((_, c)) => value.push(c),
                }
            }
        } else {
            while let Some((_, c)) = chars.next_if(|(_, c)| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next().map(|(_, c)| c));
                } else {
                    value.push(c);
                }
            }
        }
        pairs.push((key, value));
    }
}

fn one_of(key: &str, value: &str, allowed: &[&str]) -> Result<(), String> {
    if allowed.contains(&value) {
        return Ok(());
    }
    Err(format!(
        "The value of \"{key}\" is not one of {}",
        allowed.join(", ")
    ))
}

/// Checks a value where libpq restricts it. The message names the key and what it takes, never
/// the value.
pub fn check_value(key: &str, value: &str) -> Result<(), String> {
    let integer = |what: &str| {
        if value.trim().parse::<i64>().is_ok() {
            Ok(())
        } else {
            Err(format!("The value of \"{key}\" is not {what}"))
        }
    };
    match key {
        "port" => {
            let valid = value
                .split(',')
                .all(|port| port.is_empty() || port.parse::<u16>().is_ok_and(|p| p > 0));
            if valid {
                Ok(())
            } else {
                Err(
                    "The value of \"port\" is not a port number from 1 to 65535, or a \
                     comma-separated list of them"
                        .to_string(),
                )
            }
        }
        "hostaddr" => {
            let valid = value
                .split(',')
                .all(|addr| addr.is_empty() || addr.parse::<std::net::IpAddr>().is_ok());
            if valid {
                Ok(())
            } else {
                Err(
                    "The value of \"hostaddr\" is not an IP address, or a comma-separated list \
                     of them"
                        .to_string(),
                )
            }
        }
        "connect_timeout" | "keepalives_idle" | "keepalives_interval" => {
            integer("a whole number of seconds")
        }
        "tcp_user_timeout" => integer("a whole number of milliseconds"),
        "keepalives" | "keepalives_count" => integer("a whole number"),
        "sslmode" => one_of(
            key,
            value,
            &[
                "disable",
                "allow",
                "prefer",
                "require",
                "verify-ca",
                "verify-full",
            ],
        ),
        "channel_binding" => one_of(key, value, &["disable", "prefer", "require"]),
        "target_session_attrs" => one_of(
            key,
            value,
            &[
                "any",
                "read-write",
                "read-only",
                "primary",
                "standby",
                "prefer-standby",
            ],
        ),
        "load_balance_hosts" => one_of(key, value, &["disable", "random"]),
        "sslnegotiation" => one_of(key, value, &["postgres", "direct"]),
        _ => Ok(()),
    }
}

/// `text` with every occurrence of `secret` masked: for messages that come from elsewhere (a
/// server, a TLS library) and could quote it.
pub fn redact(text: &str, secret: &str) -> String {
    if secret.is_empty() {
        return text.to_string();
    }
    text.replace(secret, "********")
}

/// The fields of a passfile line, `host:port:database:user:password`, with `\\` escapes.
pub fn split_passfile_line(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => fields.last_mut().unwrap().extend(chars.next()),
            ':' => fields.push(String::new()),
            c => fields.last_mut().unwrap().push(c),
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn key_values_with_quotes_and_escapes() {
        assert_eq!(
            parse_key_values("host=a  port = 5 password='it\\'s x' dbname=d\\ e").unwrap(),
            pairs(&[
                ("host", "a"),
                ("port", "5"),
                ("password", "it's x"),
                ("dbname", "d e"),
            ])
        );
        assert!(parse_key_values("host").is_err());
        assert!(parse_key_values("password='open").is_err());
        assert_eq!(parse_key_values("  ").unwrap(), vec![]);
    }

    #[test]
    fn urls_split_into_the_same_pairs_as_key_values() {
        assert_eq!(
            parse_conninfo(
                "postgresql://cosid%40x:p%3Ass@store.example:6432/leases?sslmode=verify-full&connect_timeout=2"
            )
            .unwrap(),
            pairs(&[
                ("user", "cosid@x"),
                ("password", "p:ss"),
                ("host", "store.example"),
                ("port", "6432"),
                ("dbname", "leases"),
                ("sslmode", "verify-full"),
                ("connect_timeout", "2"),
            ])
        );
        assert_eq!(
            parse_conninfo("postgres://[::1]:5433,h2/db").unwrap(),
            pairs(&[("host", "::1,h2"), ("port", "5433,"), ("dbname", "db")])
        );
        assert_eq!(
            parse_conninfo("postgresql://%2Fvar%2Frun%2Fpostgresql").unwrap(),
            pairs(&[("host", "/var/run/postgresql")])
        );
        assert_eq!(parse_conninfo("postgresql://").unwrap(), vec![]);
        assert_eq!(parse_conninfo(" host=a ").unwrap(), pairs(&[("host", "a")]));
        assert!(parse_conninfo("postgresql://h/db?sslmode").is_err());
        assert!(parse_conninfo("postgresql://h%zz").is_err());
        assert!(parse_conninfo("postgresql://[::1/db").is_err());
        assert!(parse_conninfo("postgresql://u:%ff@h").is_err());
    }

    #[test]
    fn a_key_given_twice_keeps_its_last_value() {
        assert_eq!(
            parse_conninfo("host=a port=1 host=b").unwrap(),
            pairs(&[("port", "1"), ("host", "b")])
        );
        assert_eq!(
            parse_conninfo("postgresql://h/one?dbname=two").unwrap(),
            pairs(&[("host", "h"), ("dbname", "two")])
        );
    }

    #[test]
    fn errors_name_the_key_or_the_part() {
        let error = |text: &str| parse_conninfo(text).unwrap_err();
        assert!(error("host=h port=abc").contains("\"port\" is not a port number"));
        assert!(error("host=h sslmode=sometimes").contains("\"sslmode\" is not one of disable"));
        assert!(error("host=h connect_timeout=soon").contains("\"connect_timeout\""));
        assert!(error("hostaddr=nowhere").contains("\"hostaddr\""));
        assert!(error("host=h sslmod=require").contains("unknown key at character 8"));
        assert!(error("host=h =x").contains("without a key at character 8"));
        assert!(error("password=two words").contains("after the value of \"password\""));
        assert!(error("host=h dbname='open").contains("\"dbname\" has no closing quote"));
        assert!(error("postgresql://h/db?sslmode").contains("\"sslmode\" has no value"));
        assert!(error("postgresql://h/db?a=1").contains("URL parameter 1 is not a libpq"));
        assert!(error("postgresql://h/db?sslmode=x&b").contains("URL parameter 2 has no"));
        assert!(error("postgresql://u:%zz@h").contains("The password in the URL"));
        assert!(error("postgresql://%zz@h").contains("The user name in the URL"));
        assert!(error("postgresql://h/%zz").contains("The database name in the URL"));
        assert!(error("postgresql://h?sslmode=%zz").contains("URL parameter \"sslmode\""));
    }

    /// Every malformed string below holds the password somewhere; no error may quote it, nor any
    /// recognisable piece of it.
    #[test]
    fn no_error_quotes_a_password() {
        const SECRET: &str = "Sup3rS3cret";
        let cases = [
            // key=value, the password first, in the middle, last, with trouble around it.
            format!("password={SECRET}% host=h port=abc"),
            format!("password={SECRET} host=h sslmode=maybe"),
            format!("password='{SECRET} host=h"),
            format!("password={SECRET} bogus=1"),
            format!("password={SECRET} word"),
            format!("password={SECRET} =x"),
            format!("password=a {SECRET}"),
            format!("password=a {SECRET}=b"),
            format!("password=a{SECRET}\\' host='"),
            format!("host=h password={SECRET} port=99999"),
            format!("host=h password='{SECRET}' sslmode='open"),
            format!("host=h password={SECRET} nokey"),
            format!("host=h password={SECRET}x' b=c"),
            format!("host=h {SECRET}=1 password=x"),
            format!("host=h port=5 password='{SECRET}"),
            format!("host=h port=5 password={SECRET} connect_timeout=x"),
            format!("host=h port=5 password={SECRET} {SECRET}"),
            format!("host=h dbname=d user=u password={SECRET}%zz unknown"),
            // URLs: in the user info, with escapes broken before, in or after it.
            format!("postgresql://u:{SECRET}%zz@h/db"),
            format!("postgresql://u:%zz{SECRET}@h/db"),
            format!("postgresql://u:{SECRET}%f@h/db"),
            format!("postgresql://u:{SECRET}%ff@h/db"),
            format!("postgresql://%zz:{SECRET}@h/db"),
            format!("postgresql://u:{SECRET}@h%zz/db"),
            format!("postgresql://u:{SECRET}@h:port/db"),
            format!("postgresql://u:{SECRET}@[::1/db"),
            format!("postgresql://u:{SECRET}@[::1]x/db"),
            format!("postgresql://u:{SECRET}@h/d%zz"),
            format!("postgresql://u:{SECRET}@h/db?sslmode"),
            format!("postgresql://u:{SECRET}@h/db?bogus=1"),
            // Unescaped reserved characters that move the password into another part.
            format!("postgresql://u:{SECRET}?x@h/db"),
            format!("postgresql://u:{SECRET}/x@h/db"),
            format!("postgresql://u:ab/{SECRET}@h:99999/db"),
            format!("postgresql://u:a?{SECRET}@h"),
            format!("postgresql://u:a?{SECRET}=1@h"),
            format!("postgresql://u:a?sslmode={SECRET}@h"),
            format!("postgresql://u:a?password={SECRET}%zz"),
            // As a query parameter: first, middle, last.
            format!("postgresql://h/db?password={SECRET}%zz&sslmode=require"),
            format!("postgresql://h/db?password={SECRET}&sslmode=sometimes"),
            format!("postgresql://h/db?sslmode=require&password={SECRET}&port=x"),
            format!("postgresql://h/db?sslmode=require&password={SECRET}&{SECRET}"),
            format!("postgresql://h/db?sslmode=require&connect_timeout=1&password=%zz{SECRET}"),
            format!("postgresql://h/db?sslmode=require&password={SECRET}&bogus=%zz"),
            format!("postgresql://h/db?{SECRET}=1&password=x"),
            format!("postgresql://h/db?password={SECRET}%ff%fe"),
        ];
        let pieces: Vec<&str> = (0..=SECRET.len() - 4)
            .map(|start| &SECRET[start..start + 4])
            .collect();
        for case in &cases {
            let error = parse_conninfo(case).expect_err(case);
            for piece in &pieces {
                assert!(
                    !error.contains(piece),
                    "the error for {case:?} quotes {piece:?}: {error}"
                );
            }
        }
    }

    #[test]
    fn redact_masks_every_occurrence() {
        assert_eq!(
            redact("user s3cr3t: s3cr3t failed", "s3cr3t"),
            "user ********: ******** failed"
        );
        assert_eq!(redact("nothing", ""), "nothing");
    }

    #[test]
    fn passfile_lines_split_on_unescaped_colons() {
        assert_eq!(
            split_passfile_line("h:5432:*:u:pa\\:ss"),
            vec!["h", "5432", "*", "u", "pa:ss"]
        );
    }
}
