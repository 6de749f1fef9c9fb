//! XML 1.0 names and character data, and JSON strings, as the converters write and check them.

use std::borrow::Cow;

/// `NameStartChar` of XML 1.0 (fifth edition), without the colon.
fn is_start(c: char) -> bool {
    matches!(c,
        'A'..='Z' | '_' | 'a'..='z'
        | '\u{C0}'..='\u{D6}' | '\u{D8}'..='\u{F6}' | '\u{F8}'..='\u{2FF}'
        | '\u{370}'..='\u{37D}' | '\u{37F}'..='\u{1FFF}' | '\u{200C}'..='\u{200D}'
        | '\u{2070}'..='\u{218F}' | '\u{2C00}'..='\u{2FEF}' | '\u{3001}'..='\u{D7FF}'
        | '\u{F900}'..='\u{FDCF}' | '\u{FDF0}'..='\u{FFFD}' | '\u{10000}'..='\u{EFFFF}')
}

/// `NameChar` of XML 1.0, without the colon.
fn is_char(c: char) -> bool {
    is_start(c)
        || matches!(c,
            '-' | '.' | '0'..='9' | '\u{B7}' | '\u{300}'..='\u{36F}' | '\u{203F}'..='\u{2040}')
}

/// True when `name` is a `Name` of XML 1.0 (colons anywhere).
pub(crate) fn is_name(name: &str) -> bool {
    let mut cs = name.chars();
    cs.next().is_some_and(|c| c == ':' || is_start(c)) && cs.all(|c| c == ':' || is_char(c))
}

/// True when `name` is an XML name that namespace-aware parsers accept too: a name without a
/// colon, or `prefix:local`.
pub(crate) fn is_xml_name(name: &str) -> bool {
    let mut parts = name.split(':');
    let ncname = |p: &str| {
        let mut cs = p.chars();
        cs.next().is_some_and(is_start) && cs.all(is_char)
    };
    match (parts.next(), parts.next(), parts.next()) {
        (Some(a), None, _) => ncname(a),
        (Some(a), Some(b), None) => ncname(a) && ncname(b),
        _ => false,
    }
}

/// `key` as an element name: unchanged when it is one ([`is_xml_name`]), else each character a
/// name cannot hold becomes `_`, and a name that would start with a digit, `-` or `.` gets a
/// `_` first (`first name` → `first_name`, `1st` → `_1st`, the empty key → `_`).
pub(crate) fn element_name(key: &str) -> Cow<'_, str> {
    if is_xml_name(key) {
        return Cow::Borrowed(key);
    }
    let keep_colon = key.matches(':').count() == 1 && !key.starts_with(':') && !key.ends_with(':');
    let mut out = String::with_capacity(key.len() + 1);
    let mut at_start = true;
    for c in key.chars() {
        if c == ':' {
            out.push(if keep_colon { ':' } else { '_' });
            at_start = keep_colon;
            continue;
        }
        if at_start && !is_start(c) {
            out.push('_');
            if is_char(c) {
                out.push(c);
            }
        } else if is_char(c) {
            out.push(c);
        } else {
            out.push('_');
        }
        at_start = false;
    }
    if out.is_empty() {
        out.push('_');
    }
    Cow::Owned(out)
}

/// True for the characters XML 1.0 documents may hold.
pub(super) fn is_xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..='\u{10FFFF}')
}

/// Appends `s` as character data: `& < > " '` as entities (as org.json writes them), a carriage
/// return as `&#13;` (so that parsers do not turn it into a line feed), and each character XML
/// cannot hold (control characters, U+FFFE, U+FFFF) as U+FFFD.
pub(crate) fn push_text(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\r' => out.push_str("&#13;"),
            c if is_xml_char(c) => out.push(c),
            _ => out.push('\u{FFFD}'),
        }
    }
}

/// Appends `s` as a JSON string literal, escaped by serde_json.
pub(crate) fn json_string(out: &mut String, s: &str) {
    match serde_json::to_string(s) {
        Ok(lit) => out.push_str(&lit),
        // Serializing a string cannot fail; were it to, the text stays readable without quotes.
        Err(_) => out.push_str(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["a", "_a", "a-b.c1", "ns:item", "ü", "xml"] {
            assert!(is_xml_name(ok), "{ok}");
        }
        for bad in ["", "1a", "-a", "a b", ":a", "a:", "a:b:c", "a:1", "<a>"] {
            assert!(!is_xml_name(bad), "{bad}");
        }
        assert_eq!(element_name("a:1"), "a:_1");
        assert_eq!(element_name("<a>"), "_a_");
        assert_eq!(element_name(".x"), "_.x");
        for key in ["", "1", ":", "::", "a b:c d", "\u{0}", "x:"] {
            assert!(is_xml_name(&element_name(key)), "{key:?}");
        }
    }
}
