//! The fast path's XML reader: one forward pass over the bytes, no tree, with namespace
//! resolution. It takes only the plainest XML — UTF-8 (an optional byte order mark), an
//! optional XML declaration in its common forms, ASCII names, quoted attributes, the five
//! predefined entities and character references, text without illegal characters — and is
//! at least as strict as libxml2 on well-formedness for everything it takes. Anything else
//! (comments, CDATA, processing instructions, a DTD, other encodings, ...) stops it: the
//! caller answers "unsure" and libxml2 decides.

use std::borrow::Cow;

use super::automaton::same;
use crate::names::XSI_NS;
use crate::xml::XML_NS;

/// Most open elements (libxml2 refuses more than 256 without `XML_PARSE_HUGE`).
const MAX_DEPTH: usize = 200;
/// Longest name (libxml2's limit is 50,000 bytes).
const MAX_NAME: usize = 1000;
/// Longest run of text or attribute value (libxml2's limit is 10,000,000 bytes).
const MAX_TEXT: usize = 1_000_000;

/// True for the bytes the fast path takes in a namespace URI: those of URIs, without
/// `%`, `&`, brackets or other characters libxml2 may find odd.
pub(super) fn uri_byte(b: u8) -> bool {
    URI_BYTES[b as usize]
}

/// [`uri_byte`] as a table.
const URI_BYTES: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric();
        b += 1;
    }
    let extra = b":/._~#?=+,;@!$*()-";
    let mut i = 0;
    while i < extra.len() {
        t[extra[i] as usize] = true;
        i += 1;
    }
    t
};

/// A table of the ASCII name bytes, built at compile time: 1 may start a name, 2 may only
/// continue one, 0 is neither. With `colon`, `:` continues a name (a prefixed name, read
/// whole); without, names are NCNames.
pub(crate) const fn name_bytes(colon: bool) -> [u8; 256] {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = if c.is_ascii_alphabetic() || c == b'_' {
            1
        } else if c.is_ascii_digit() || c == b'-' || c == b'.' || (colon && c == b':') {
            2
        } else {
            0
        };
        b += 1;
    }
    t
}

/// Bytes that may start (1) or continue (2) an ASCII NCName.
const NAME: [u8; 256] = name_bytes(false);

/// XML whitespace.
pub(crate) fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

/// True when a character reference's code point is an XML 1.0 character.
fn legal_char(c: u32) -> bool {
    matches!(c, 0x9 | 0xA | 0xD | 0x20..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10FFFF)
}

/// True when the whole input is UTF-8 made of XML 1.0 characters.
pub fn plain_text(input: &[u8]) -> bool {
    if has_control(input) {
        return false;
    }
    if input.is_ascii() {
        return true;
    }
    if std::str::from_utf8(input).is_err() {
        return false;
    }
    // U+FFFE and U+FFFF (EF BF BE, EF BF BF) are not XML characters.
    !memchr::memchr_iter(0xEF, input)
        .any(|i| input.get(i + 1) == Some(&0xBF) && matches!(input.get(i + 2), Some(0xBE | 0xBF)))
}

/// True when `input` holds a control character other than tab, line feed and carriage return.
/// Eight bytes at a time: only words with a byte below 0x20 are looked at byte by byte.
fn has_control(input: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let bad = |b: &u8| *b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r');
    let mut words = input.chunks_exact(8);
    for w in &mut words {
        let mut a = [0u8; 8];
        a.copy_from_slice(w);
        let x = u64::from_le_bytes(a);
        // A byte of `x` is below 0x20 iff it is below 0x20 after the subtraction borrows.
        if x.wrapping_sub(ONES * 0x20) & !x & HIGH != 0 && w.iter().any(bad) {
            return true;
        }
    }
    words.remainder().iter().any(bad)
}

/// An attribute of a start tag, resolved.
#[derive(Debug)]
pub struct Attr<'a> {
    /// Namespace (empty: none).
    pub ns: &'a [u8],
    /// Local name.
    pub local: &'a [u8],
    /// The raw value (between the quotes).
    pub raw: &'a [u8],
}

/// What the reader found next.
#[derive(Debug)]
pub enum Event<'a> {
    /// A start tag: namespace and local name; its attributes are in [`Scanner::attrs`].
    Start {
        /// Namespace (empty: none).
        ns: &'a [u8],
        /// Local name.
        local: &'a [u8],
    },
    /// The end of the innermost open element (also after an empty-element tag).
    End,
    /// Character data as written (not empty; references not yet resolved).
    Text(&'a [u8]),
    /// The end of the root element was read and only whitespace follows.
    Done,
}

/// Namespace binding: prefix (empty: default) and URI.
type Binding<'a> = (&'a [u8], &'a [u8]);

/// The reader.
pub struct Scanner<'a> {
    input: &'a [u8],
    pos: usize,
    /// Open elements: their qualified names as written and the number of bindings before them.
    open: Vec<(&'a [u8], usize)>,
    bindings: Vec<Binding<'a>>,
    attrs: Vec<Attr<'a>>,
    /// Raw attributes of the current tag: (prefix, local, value).
    raw: Vec<(&'a [u8], &'a [u8], &'a [u8])>,
    pending_end: bool,
    root_done: bool,
}

impl<'a> Scanner<'a> {
    /// A reader of `input` past its prolog (byte order mark, XML declaration, whitespace);
    /// `None` when the input or its prolog is outside what the fast path takes.
    pub fn new(input: &'a [u8]) -> Option<Scanner<'a>> {
        if !plain_text(input) {
            return None;
        }
        let mut pos = if input.starts_with(b"\xEF\xBB\xBF") {
            3
        } else {
            0
        };
        if input[pos..].starts_with(b"<?xml") {
            pos = declaration(input, pos)?;
        }
        while input.get(pos).is_some_and(|&b| is_space(b)) {
            pos += 1;
        }
        Some(Scanner {
            input,
            pos,
            open: Vec::with_capacity(16),
            bindings: Vec::with_capacity(8),
            attrs: Vec::with_capacity(8),
            raw: Vec::with_capacity(8),
            pending_end: false,
            root_done: false,
        })
    }

    /// The attributes of the last start tag.
    pub fn attrs(&self) -> &[Attr<'a>] {
        &self.attrs
    }

    /// The next event; `None` when the input is outside what the fast path takes.
    pub fn next_event(&mut self) -> Option<Event<'a>> {
        if self.pending_end {
            self.pending_end = false;
            self.close();
            return Some(Event::End);
        }
        let input = self.input;
        if self.root_done {
            return input[self.pos..]
                .iter()
                .all(|&b| is_space(b))
                .then_some(Event::Done);
        }
        let rest = &input[self.pos..];
        let lt = memchr::memchr(b'<', rest)?;
        if lt > 0 {
            if self.open.is_empty() || lt > MAX_TEXT {
                return None; // text before the root
            }
            let text = &rest[..lt];
            self.pos += lt;
            return Some(Event::Text(text));
        }
        match rest.get(1)? {
            b'/' => self.end_tag(),
            _ => self.start_tag(),
        }
    }

    fn close(&mut self) {
        if let Some((_, mark)) = self.open.pop() {
            self.bindings.truncate(mark);
        }
        self.root_done = self.open.is_empty();
    }

    fn end_tag(&mut self) -> Option<Event<'a>> {
        let (name, _) = *self.open.last()?;
        let input = self.input;
        let mut i = self.pos + 2;
        if !same(input.get(i..i + name.len())?, name) {
            return None;
        }
        i += name.len();
        while input.get(i).is_some_and(|&b| is_space(b)) {
            i += 1;
        }
        if input.get(i) != Some(&b'>') {
            return None;
        }
        self.pos = i + 1;
        self.close();
        Some(Event::End)
    }

    /// A qualified name at `i`: (prefix, local, end). Prefix empty when there is none.
    fn qname(&self, i: usize) -> Option<(&'a [u8], &'a [u8], usize)> {
        let input = self.input;
        let ncname = |s: usize| {
            if NAME[*input.get(s)? as usize] != 1 {
                return None;
            }
            let mut e = s + 1;
            while input.get(e).is_some_and(|&b| NAME[b as usize] != 0) {
                e += 1;
            }
            Some(e)
        };
        let e = ncname(i)?;
        if input.get(e) == Some(&b':') {
            let e2 = ncname(e + 1)?;
            if input.get(e2) == Some(&b':') || e2 - i > MAX_NAME {
                return None;
            }
            return Some((&input[i..e], &input[e + 1..e2], e2));
        }
        (e - i <= MAX_NAME).then_some((&[], &input[i..e], e))
    }

    fn start_tag(&mut self) -> Option<Event<'a>> {
        if self.open.len() >= MAX_DEPTH {
            return None;
        }
        let input = self.input;
        let (prefix, local, mut i) = self.qname(self.pos + 1)?;
        let name = &input[self.pos + 1..i];
        self.raw.clear();
        let empty = loop {
            let before = i;
            while input.get(i).is_some_and(|&b| is_space(b)) {
                i += 1;
            }
            match *input.get(i)? {
                b'>' => {
                    i += 1;
                    break false;
                }
                b'/' => {
                    if input.get(i + 1) != Some(&b'>') {
                        return None;
                    }
                    i += 2;
                    break true;
                }
                _ => {}
            }
            if i == before {
                return None; // attributes must be separated by whitespace
            }
            let (ap, al, e) = self.qname(i)?;
            i = e;
            while input.get(i).is_some_and(|&b| is_space(b)) {
                i += 1;
            }
            if input.get(i) != Some(&b'=') {
                return None;
            }
            i += 1;
            while input.get(i).is_some_and(|&b| is_space(b)) {
                i += 1;
            }
            let quote = *input.get(i)?;
            if quote != b'"' && quote != b'\'' {
                return None;
            }
            let len = memchr::memchr(quote, &input[i + 1..])?;
            let value = &input[i + 1..i + 1 + len];
            if len > MAX_TEXT || memchr::memchr(b'<', value).is_some() || !references_ok(value) {
                return None;
            }
            if self.raw.iter().any(|(p, l, _)| same(p, ap) && same(l, al)) {
                return None;
            }
            self.raw.push((ap, al, value));
            i += len + 2;
        };
        self.pos = i;
        let mark = self.bindings.len();
        for &(p, l, v) in &self.raw {
            let bound: &[u8] = match (p, l) {
                (b"xmlns", b"xml" | b"xmlns") => return None,
                (b"xmlns", _) => l,
                (b"", b"xmlns") => b"",
                _ => continue,
            };
            // URIs are taken as written: no references, no whitespace, ASCII.
            if !v.iter().all(|&b| uri_byte(b)) || (v.is_empty() && !bound.is_empty()) {
                return None;
            }
            self.bindings.push((bound, v));
        }
        self.open.push((name, mark));
        let ns = self.resolve(prefix, true)?;
        self.attrs.clear();
        for i in 0..self.raw.len() {
            let (p, l, v) = self.raw[i];
            if p == b"xmlns" || (p.is_empty() && l == b"xmlns") {
                continue;
            }
            let ans = if p.is_empty() {
                &[][..]
            } else {
                self.resolve(p, false)?
            };
            if self
                .attrs
                .iter()
                .any(|a| same(a.ns, ans) && same(a.local, l))
            {
                return None;
            }
            self.attrs.push(Attr {
                ns: ans,
                local: l,
                raw: v,
            });
        }
        self.pending_end = empty;
        Some(Event::Start { ns, local })
    }

    /// The namespace of `prefix` (`element`: the default namespace applies when empty).
    fn resolve(&self, prefix: &[u8], element: bool) -> Option<&'a [u8]> {
        match prefix {
            b"xml" => return Some(XML_NS.as_bytes()),
            b"xmlns" => return None,
            b"" if !element => return Some(&[]),
            _ => {}
        }
        for &(p, uri) in self.bindings.iter().rev() {
            if same(p, prefix) {
                return Some(uri);
            }
        }
        prefix.is_empty().then_some(&[][..])
    }
}

/// True when the namespace is that of `xsi:` attributes.
pub fn is_xsi(ns: &[u8]) -> bool {
    ns == XSI_NS.as_bytes()
}

/// The end of an XML declaration at `pos` in one of its common forms; `None` otherwise.
fn declaration(input: &[u8], pos: usize) -> Option<usize> {
    let end = memchr::memchr_iter(b'?', &input[pos..])
        .map(|i| i + pos)
        .find(|&i| input.get(i + 1) == Some(&b'>'))?;
    let body = std::str::from_utf8(&input[pos + 5..end]).ok()?;
    let mut parts = body.split(' ').filter(|p| !p.is_empty());
    if !body.starts_with(' ') || body.contains(['\t', '\r', '\n']) {
        return None;
    }
    if !matches!(parts.next()?, "version=\"1.0\"" | "version='1.0'") {
        return None;
    }
    let mut next = parts.next();
    if let Some(p) = next {
        if matches!(
            p,
            "encoding=\"UTF-8\"" | "encoding='UTF-8'" | "encoding=\"utf-8\"" | "encoding='utf-8'"
        ) {
            next = parts.next();
        }
    }
    if let Some(p) = next {
        if matches!(
            p,
            "standalone=\"yes\"" | "standalone='yes'" | "standalone=\"no\"" | "standalone='no'"
        ) {
            next = parts.next();
        } else {
            return None;
        }
    }
    if next.is_some() {
        return None;
    }
    Some(end + 2)
}

/// True when every `&` in `raw` starts a predefined entity or a legal character reference.
pub fn references_ok(raw: &[u8]) -> bool {
    let mut rest = raw;
    while let Some(amp) = memchr::memchr(b'&', rest) {
        let Some(len) = reference(&rest[amp..]) else {
            return false;
        };
        rest = &rest[amp + len..];
    }
    true
}

/// The length and character of the reference at the start of `s` (which starts with `&`).
fn reference_char(s: &[u8]) -> Option<(usize, char)> {
    let semi = memchr::memchr(b';', &s[..s.len().min(12)])?;
    let name = &s[1..semi];
    let c = match name {
        b"amp" => '&',
        b"lt" => '<',
        b"gt" => '>',
        b"quot" => '"',
        b"apos" => '\'',
        [b'#', b'x', hex @ ..] if !hex.is_empty() && hex.iter().all(u8::is_ascii_hexdigit) => {
            let v = u32::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
            char::from_u32(v).filter(|_| legal_char(v))?
        }
        [b'#', dec @ ..] if !dec.is_empty() && dec.iter().all(u8::is_ascii_digit) => {
            let v: u32 = std::str::from_utf8(dec).ok()?.parse().ok()?;
            char::from_u32(v).filter(|_| legal_char(v))?
        }
        _ => return None,
    };
    Some((semi + 1, c))
}

fn reference(s: &[u8]) -> Option<usize> {
    reference_char(s).map(|(n, _)| n)
}

/// True when `raw` contains `]]>` (not allowed in text). A one-shot `memmem` search would
/// build a searcher per call; `>` is rare in text.
fn cdata_end(raw: &[u8]) -> bool {
    memchr::memchr_iter(b'>', raw).any(|i| i >= 2 && raw[i - 2..i] == *b"]]")
}

/// Character data as the parser reports it: references resolved, line ends normalized
/// (CR LF and lone CR become LF); `attribute`: also tabs and line ends become spaces
/// (attribute-value normalization). `None` on a bad reference or `]]>` in text.
pub fn decode(raw: &[u8], attribute: bool) -> Option<Cow<'_, str>> {
    if !attribute && cdata_end(raw) {
        return None;
    }
    let plain = !raw
        .iter()
        .any(|&b| b == b'&' || b == b'\r' || (attribute && (b == b'\t' || b == b'\n')));
    if plain {
        return std::str::from_utf8(raw).ok().map(Cow::Borrowed);
    }
    let text = std::str::from_utf8(raw).ok()?;
    let mut out = String::with_capacity(raw.len());
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '&' => {
                let (len, r) = reference_char(&raw[i..])?;
                out.push(r);
                while chars.peek().is_some_and(|&(j, _)| j < i + len) {
                    chars.next();
                }
            }
            '\r' => {
                if chars.peek().is_some_and(|&(_, n)| n == '\n') {
                    chars.next();
                }
                out.push(if attribute { ' ' } else { '\n' });
            }
            '\t' | '\n' if attribute => out.push(' '),
            c => out.push(c),
        }
    }
    Some(Cow::Owned(out))
}

#[cfg(test)]
mod tests {
    proptest::proptest! {
        #[test]
        fn control_characters_are_found_a_word_at_a_time(input in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40)) {
            let naive = input.iter().any(|&b| b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r'));
            proptest::prop_assert_eq!(super::has_control(&input), naive);
        }
    }

    use super::*;

    fn events(doc: &str) -> Option<Vec<String>> {
        let mut s = Scanner::new(doc.as_bytes())?;
        let mut out = Vec::new();
        loop {
            match s.next_event()? {
                Event::Start { ns, local } => {
                    let mut e = format!(
                        "<{{{}}}{}",
                        String::from_utf8_lossy(ns),
                        String::from_utf8_lossy(local)
                    );
                    for a in s.attrs() {
                        e.push_str(&format!(
                            " {{{}}}{}={}",
                            String::from_utf8_lossy(a.ns),
                            String::from_utf8_lossy(a.local),
                            decode(a.raw, true)?
                        ));
                    }
                    out.push(e);
                }
                Event::End => out.push("/".into()),
                Event::Text(t) => out.push(decode(t, false)?.into_owned()),
                Event::Done => return Some(out),
            }
        }
    }

    #[test]
    fn reads_plain_documents_with_namespaces() {
        let e = events(
            "\u{feff}<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<a:r xmlns:a=\"urn:a\" xmlns=\"urn:d\" x='1&amp;2'><c a:y=\"\t&#65;\r\n\"/>t&lt;\r\nu</a:r>\n",
        )
        .unwrap();
        assert_eq!(
            e,
            vec![
                "<{urn:a}r {}x=1&2",
                "<{urn:d}c {urn:a}y= A ",
                "/",
                "t<\nu",
                "/"
            ]
        );
        // the default namespace does not apply to attributes; xmlns="" undeclares it
        let e = events("<r xmlns=\"urn:d\"><c xmlns=\"\" x=\"1\"/></r>").unwrap();
        assert_eq!(e, vec!["<{urn:d}r", "<{}c {}x=1", "/", "/"]);
        assert!(events("<r></r >").is_some());
    }

    #[test]
    fn refuses_everything_else() {
        for doc in [
            "<r><!-- c --></r>",
            "<r><![CDATA[x]]></r>",
            "<r><?pi x?></r>",
            "<!DOCTYPE r><r/>",
            "<?xml version=\"1.1\"?><r/>",
            "<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?><r/>",
            "<?xml version=\"1.0\" standalone=\"yes\" encoding=\"UTF-8\"?><r/>",
            "<?xml version=\"1.0\"encoding=\"UTF-8\"?><r/>",
            " <?xml version=\"1.0\"?><r/>",
            "<r>&foo;</r>",
            "<r>&#0;</r>",
            "<r>&#xD800;</r>",
            "<r>&#X41;</r>",
            "<r>&#65</r>",
            "<r>a]]>b</r>",
            "<r>\u{1}</r>",
            "<r>\u{fffe}</r>",
            "<r x=\"1\" x=\"2\"/>",
            "<r xmlns:a=\"urn:x\" xmlns:b=\"urn:x\" a:x=\"1\" b:x=\"2\"/>",
            "<r x=\"1\"y=\"2\"/>",
            "<r x=1/>",
            "<r x=\"<\"/>",
            "<a:r/>",
            "<r xmlns:a=\"\"/>",
            "<r xmlns:xml=\"urn:x\"/>",
            "<xmlns:r/>",
            "<é/>",
            "<r></s>",
            "<r>",
            "<r/><r/>",
            "<r/>x",
            "x<r/>",
            "<r a:b:c=\"1\"/>",
            "<r xmlns:a=\"a b\"/>",
            "<r xmlns:a=\"a^b\"/>",
            "<r xmlns:a=\"%zz\"/>",
            "",
        ] {
            assert!(events(doc).is_none(), "{doc}");
        }
        assert!(Scanner::new(b"<r>\xff</r>").is_none());
    }

    #[test]
    fn decoding() {
        assert_eq!(decode(b"a\r\nb\rc", false).unwrap(), "a\nb\nc");
        assert_eq!(decode(b"a\r\nb\tc", true).unwrap(), "a b c");
        assert_eq!(decode(b"&#9;&#xA;&#13;", true).unwrap(), "\t\n\r");
        assert_eq!(
            decode("&amp;é&#x10000;".as_bytes(), false).unwrap(),
            "&é\u{10000}"
        );
        assert!(decode(b"&amp", false).is_none());
        assert!(decode(b"&#1;", false).is_none());
        assert!(decode(b"&#xFFFE;", false).is_none());
        assert!(decode(b"&#99999999999;", false).is_none());
    }
}
