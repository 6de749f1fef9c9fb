//! Checks of an XML message before libxml2 parses it: the encoding (an ASCII superset, so that
//! padding can be appended), and what is refused before parsing (a DTD, encodings that could
//! hide one).

use std::sync::LazyLock;

/// Whitespace appended to a message before libxml2 parses it. libxml2 2.9 (the one of Debian 12)
/// asks a memory input for more data at nearly every token read within 250 bytes
/// (`INPUT_CHUNK`) of its end, each time growing and re-measuring its buffer: for a message of a
/// few hundred bytes that is a fifth of the parse. With this much trailing whitespace, which XML
/// allows after the root element and which changes neither the tree nor the line numbers of
/// diagnostics, the end is never that near while elements are read.
pub(crate) const PARSE_PADDING: usize = 250;

/// True when `bytes` is in an encoding in which an ASCII space is the byte 0x20 (UTF-8 and the
/// other ASCII supersets): it starts with a UTF-8 byte order mark, or with `<` or ASCII
/// whitespace not followed by a zero byte (which would be UTF-16 or UCS-4).
pub(crate) fn ascii_compatible(bytes: &[u8]) -> bool {
    match bytes {
        [0xEF, 0xBB, 0xBF, ..] => true,
        [first, second, ..] => matches!(first, b'<' | b' ' | b'\t' | b'\r' | b'\n') && *second != 0,
        _ => false,
    }
}

/// The encodings a SOAP message may be in (WS-I Basic Profile R1012: UTF-8 or UTF-16), as
/// told by its first bytes and its XML declaration (XML 1.0, appendix F).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    /// UTF-8, or an encoding that writes `<!DOCTYPE` as ASCII does.
    AsciiLike,
    /// UTF-16, little-endian.
    Utf16Le,
    /// UTF-16, big-endian.
    Utf16Be,
}

/// The encoding of `bytes`, or why libxml2 must not be given them: an encoding other than UTF-8
/// and UTF-16 (UTF-32, EBCDIC, UTF-7, ...) could hide a `<!DOCTYPE` from the byte search.
fn encoding_of(bytes: &[u8]) -> Result<Encoding, &'static str> {
    const OTHER: &str = "SOAP messages must be encoded in UTF-8 or UTF-16";
    match bytes {
        [0xFF, 0xFE, 0x00, 0x00, ..]
        | [0x00, 0x00, ..]
        | [b'<', 0x00, 0x00, 0x00, ..]
        | [0x4C, 0x6F, 0xA7, 0x94, ..] => return Err(OTHER),
        [0xFE, 0xFF, ..] | [0x00, b'<', 0x00, _, ..] => return Ok(Encoding::Utf16Be),
        [0xFF, 0xFE, ..] | [b'<', 0x00, _, 0x00, ..] => return Ok(Encoding::Utf16Le),
        _ => {}
    }
    // An ASCII-compatible start: the declaration's `encoding` decides.
    let text = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let Some(decl) = text.strip_prefix(b"<?xml") else {
        return Ok(Encoding::AsciiLike);
    };
    let end = memchr::memmem::find(&decl[..decl.len().min(512)], b"?>").unwrap_or(0);
    let decl = &decl[..end];
    let Some(at) = memchr::memmem::find(decl, b"encoding") else {
        return Ok(Encoding::AsciiLike);
    };
    let value: Vec<u8> = decl[at + 8..]
        .iter()
        .skip_while(|b| b.is_ascii_whitespace() || **b == b'=')
        .skip(1)
        .take_while(|b| **b != b'"' && **b != b'\'')
        .map(u8::to_ascii_lowercase)
        .collect();
    let ascii_like = value == b"utf-8"
        || value == b"utf8"
        || value == b"us-ascii"
        || value == b"ascii"
        || value.starts_with(b"iso-8859-")
        || value.starts_with(b"windows-125");
    if ascii_like {
        Ok(Encoding::AsciiLike)
    } else {
        Err(OTHER)
    }
}

/// True when the message has a document type declaration (`<!DOCTYPE`), in whichever encoding
/// it is in, or is in an encoding SOAP does not allow (the searchers are built once).
fn has_doctype(hay: &[u8]) -> bool {
    static ASCII: LazyLock<memchr::memmem::Finder<'static>> =
        LazyLock::new(|| memchr::memmem::Finder::new(b"<!DOCTYPE"));
    static LE: LazyLock<memchr::memmem::Finder<'static>> =
        LazyLock::new(|| memchr::memmem::Finder::new(b"<\0!\0D\0O\0C\0T\0Y\0P\0E\0").into_owned());
    static BE: LazyLock<memchr::memmem::Finder<'static>> =
        LazyLock::new(|| memchr::memmem::Finder::new(b"\0<\0!\0D\0O\0C\0T\0Y\0P\0E").into_owned());
    match encoding_of(hay) {
        Ok(Encoding::AsciiLike) => ASCII.find(hay).is_some(),
        Ok(Encoding::Utf16Le) => LE.find(hay).is_some(),
        Ok(Encoding::Utf16Be) => BE.find(hay).is_some(),
        Err(_) => true,
    }
}

/// Why a message is refused before it is parsed: a DTD, or an encoding SOAP does not allow.
pub(crate) fn refused_before_parsing(bytes: &[u8]) -> Option<&'static str> {
    if let Err(m) = encoding_of(bytes) {
        return Some(m);
    }
    has_doctype(bytes).then_some("SOAP messages must not contain a DTD")
}

/// Why an XML message (not SOAP) is refused before it is parsed: a DTD (never read, so that
/// no entity is expanded), or an encoding in which a DTD could hide from the byte search.
pub(crate) fn xml_refused_before_parsing(bytes: &[u8]) -> Option<&'static str> {
    if encoding_of(bytes).is_err() {
        return Some(
            "the message must be encoded in UTF-8, UTF-16, US-ASCII, ISO-8859-* or windows-125*",
        );
    }
    has_doctype(bytes).then_some("the message must not contain a DTD")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utf16(text: &str, le: bool, bom: bool) -> Vec<u8> {
        let mut out = Vec::new();
        if bom {
            out.extend_from_slice(if le { &[0xFF, 0xFE] } else { &[0xFE, 0xFF] });
        }
        for u in text.encode_utf16() {
            out.extend_from_slice(&if le { u.to_le_bytes() } else { u.to_be_bytes() });
        }
        out
    }

    #[test]
    fn a_doctype_is_found_in_utf8_and_utf16_and_other_encodings_are_refused() {
        let dtd = "<?xml version=\"1.0\"?><!DOCTYPE e [<!ENTITY x \"y\">]><e>&x;</e>";
        let plain = "<?xml version=\"1.0\"?><e/>";
        assert!(has_doctype(dtd.as_bytes()));
        assert!(!has_doctype(plain.as_bytes()));
        for (le, bom) in [(true, true), (true, false), (false, true), (false, false)] {
            assert!(has_doctype(&utf16(dtd, le, bom)), "le={le} bom={bom}");
            assert!(!has_doctype(&utf16(plain, le, bom)), "le={le} bom={bom}");
        }
        for other in [
            "<?xml version=\"1.0\" encoding=\"UTF-7\"?><e/>",
            "<?xml version='1.0' encoding='ucs-4'?><e/>",
        ] {
            assert!(
                refused_before_parsing(other.as_bytes()).is_some(),
                "{other}"
            );
        }
        assert_eq!(
            refused_before_parsing(b"<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?><e/>"),
            None
        );
        assert!(refused_before_parsing(&[0, 0, 0, b'<', 0, 0, 0, b'e']).is_some());
    }
}
