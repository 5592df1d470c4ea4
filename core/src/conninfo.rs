//! libpq connection strings and passfiles, as far as the lease store client needs them. Pure.

/// Splits a libpq connection string in either of its forms, a URL
/// (`postgresql://user:password@host:port/dbname?key=value`) or key=value pairs, into pairs.
pub fn parse_conninfo(text: &str) -> Result<Vec<(String, String)>, String> {
    let text = text.trim();
    for scheme in ["postgresql://", "postgres://"] {
        if let Some(rest) = text.strip_prefix(scheme) {
            return parse_url(rest);
        }
    }
    parse_key_values(text)
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
                pairs.push(("user".to_string(), percent_decode(user)?));
            }
            if let Some(password) = password {
                pairs.push(("password".to_string(), percent_decode(password)?));
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
            host_list.push(percent_decode(host)?);
            port_list.push(percent_decode(port)?);
        }
        if host_list.iter().any(|h| !h.is_empty()) {
            pairs.push(("host".to_string(), host_list.join(",")));
        }
        if port_list.iter().any(|p| !p.is_empty()) {
            pairs.push(("port".to_string(), port_list.join(",")));
        }
    }
    if let Some(dbname) = dbname.filter(|d| !d.is_empty()) {
        pairs.push(("dbname".to_string(), percent_decode(dbname)?));
    }
    for parameter in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let Some((key, value)) = parameter.split_once('=') else {
            return Err(format!(
                "The URL parameter \"{parameter}\" has no value; write key=value"
            ));
        };
        pairs.push((percent_decode(key)?, percent_decode(value)?));
    }
    Ok(pairs)
}

/// `host`, `host:port`, `[ipv6]` or `[ipv6]:port`.
fn split_host_port(text: &str) -> Result<(&str, &str), String> {
    if let Some(bracketed) = text.strip_prefix('[') {
        let Some((host, after)) = bracketed.split_once(']') else {
            return Err(format!(
                "The host \"{text}\" in the URL has no closing bracket"
            ));
        };
        return match after.strip_prefix(':') {
            Some(port) => Ok((host, port)),
            None if after.is_empty() => Ok((host, "")),
            None => Err(format!("The URL has \"{after}\" after the host \"{host}\"")),
        };
    }
    Ok(text.split_once(':').unwrap_or((text, "")))
}

fn percent_decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("The URL has an invalid percent escape in \"{text}\""))?;
            decoded.push(hex);
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(decoded)
        .map_err(|_| format!("The URL part \"{text}\" does not decode to UTF-8 text"))
}

/// Splits a libpq key=value connection string (values may be single-quoted, with `\` escapes).
pub fn parse_key_values(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return Ok(pairs);
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            chars.next();
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.next() != Some('=') {
            return Err(format!("The key \"{key}\" has no value"));
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'\'') {
            chars.next();
            loop {
                match chars.next() {
                    None => return Err(format!("The value of \"{key}\" has no closing quote")),
                    Some('\\') => value.extend(chars.next()),
                    Some('\'') => break,
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                value.push(c);
                chars.next();
            }
        }
        pairs.push((key, value));
    }
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

    #[test]
    fn key_values_with_quotes() {
        assert_eq!(
            parse_key_values("host=a  port = 5 password='it\\'s x' dbname=d").unwrap(),
            vec![
                ("host".to_string(), "a".to_string()),
                ("port".to_string(), "5".to_string()),
                ("password".to_string(), "it's x".to_string()),
                ("dbname".to_string(), "d".to_string()),
            ]
        );
        assert!(parse_key_values("host").is_err());
        assert!(parse_key_values("password='open").is_err());
        assert_eq!(parse_key_values("  ").unwrap(), vec![]);
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
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
    fn passfile_lines_split_on_unescaped_colons() {
        assert_eq!(
            split_passfile_line("h:5432:*:u:pa\\:ss"),
            vec!["h", "5432", "*", "u", "pa:ss"]
        );
    }
}
