//! libpq connection strings and passfiles, as far as the lease store client needs them. Pure.

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

    #[test]
    fn passfile_lines_split_on_unescaped_colons() {
        assert_eq!(
            split_passfile_line("h:5432:*:u:pa\\:ss"),
            vec!["h", "5432", "*", "u", "pa:ss"]
        );
    }
}
