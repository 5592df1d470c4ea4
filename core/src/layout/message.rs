//! User text quoted in messages: cut short so that a huge argument cannot fill the log, and
//! escaped to ASCII for a server whose encoding cannot carry the rest.

use std::fmt::Write as _;

/// How many characters of a text a message quotes: a longer one is cut there, followed by "…"
/// and its length in characters, so that a 10 kB argument does not fill the log.
pub const MESSAGE_TEXT_CHARS: usize = 64;

/// Text in double quotes, for a message. With `ascii_only`, for a server whose encoding is not
/// UTF-8, other characters are written as `\uXXXX` (`\UXXXXXXXX` beyond the BMP), the escapes
/// of PostgreSQL's `E''` strings.
pub fn quote_for_message(text: &str, ascii_only: bool) -> String {
    let mut out = String::with_capacity(text.len().min(4 * MESSAGE_TEXT_CHARS) + 32);
    out.push('"');
    for c in text.chars().take(MESSAGE_TEXT_CHARS) {
        let code = u32::from(c);
        if c.is_ascii() || !ascii_only {
            out.push(c);
        } else if code <= 0xFFFF {
            out.push_str(&format!("\\u{code:04X}"));
        } else {
            out.push_str(&format!("\\U{code:08X}"));
        }
    }
    let chars = text.chars().count();
    if chars > MESSAGE_TEXT_CHARS {
        out.push_str(if ascii_only { "...\"" } else { "…\"" });
        write!(out, " ({chars} characters)").expect("a String takes any text");
    } else {
        out.push('"');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_for_message_escapes_non_ascii_only_when_asked() {
        assert_eq!(quote_for_message("abc", true), "\"abc\"");
        assert_eq!(quote_for_message("é-1", false), "\"é-1\"");
        assert_eq!(quote_for_message("é-1", true), "\"\\u00E9-1\"");
        assert_eq!(quote_for_message("😀", true), "\"\\U0001F600\"");
    }

    #[test]
    fn long_texts_are_cut_in_messages() {
        let short = "a".repeat(MESSAGE_TEXT_CHARS);
        assert_eq!(quote_for_message(&short, false), format!("\"{short}\""));
        let long = "é".repeat(10_000);
        let quoted = quote_for_message(&long, false);
        assert_eq!(
            quoted,
            format!("\"{}…\" (10000 characters)", "é".repeat(MESSAGE_TEXT_CHARS))
        );
        let ascii = quote_for_message(&long, true);
        assert_eq!(
            ascii,
            format!(
                "\"{}...\" (10000 characters)",
                "\\u00E9".repeat(MESSAGE_TEXT_CHARS)
            )
        );
    }
}
