//! XML to JSON, by the rules of Membrane's `xml2Json` (org.json's `XML.toJSONObject`), parsed
//! with quick-xml and keeping document order: the attributes of an element first, then its
//! children and text in the order they come.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use quick_xml::escape::{resolve_predefined_entity, EscapeError};
use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;

use super::text::{is_name, json_string};

/// How deeply elements may nest: deeper documents are refused rather than converted (the
/// converted object would nest about twice as deep).
pub(crate) const MAX_DEPTH: usize = 512;

/// The key text goes under when an element has attributes or children too.
const CONTENT: &str = "content";

/// How to convert: Membrane's settings.
#[derive(Debug, Clone, Default)]
pub(crate) struct Options {
    /// Keep every text and attribute value a string (`keepString`).
    pub keep_strings: bool,
    /// An element with `xsi:nil="true"` becomes `null` (`convertNilAttributeToNull`).
    pub nil_to_null: bool,
    /// Element names whose values are always arrays (`forceList`).
    pub force_list: HashSet<String>,
}

/// Why a body could not be converted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum XmlError {
    /// The character encoding (from `Content-Type` or the XML declaration) is not one the
    /// converter reads: its name.
    Encoding(String),
    /// The bytes are not valid in the body's character encoding.
    NotText,
    /// Not well-formed: the parser's message (or the converter's), and the byte offset in the
    /// decoded text.
    Malformed { message: String, offset: u64 },
    /// A reference to an entity other than XML's five predefined ones (the DTD is not read).
    Entity,
    /// Nested deeper than [`MAX_DEPTH`] elements.
    TooDeep,
}

/// A JSON value being built; members of objects in document order.
#[derive(Debug)]
enum J {
    Null,
    Bool(bool),
    /// A number, as its text (valid JSON).
    Num(String),
    Str(String),
    Arr(Vec<J>),
    Obj(Obj),
}

/// An object being built: its members in order, with an index once it has many.
#[derive(Debug, Default)]
struct Obj {
    entries: Vec<(String, J)>,
    index: Option<HashMap<String, usize>>,
}

/// Objects with this many members are looked up through an index.
const INDEX_FROM: usize = 16;

impl Obj {
    fn position(&self, key: &str) -> Option<usize> {
        match &self.index {
            Some(ix) => ix.get(key).copied(),
            None => self.entries.iter().position(|(k, _)| k == key),
        }
    }

    /// Adds `value` under `key` as org.json's `accumulate` does: a second value for a key
    /// makes its value an array (a value that is already an array grows); `as_list` makes
    /// the first value an array already.
    fn accumulate(&mut self, key: String, value: J, as_list: bool) {
        if let Some(slot) = self
            .position(&key)
            .and_then(|i| self.entries.get_mut(i))
            .map(|(_, v)| v)
        {
            match slot {
                J::Arr(items) => items.push(value),
                other => {
                    let first = std::mem::replace(other, J::Null);
                    *other = J::Arr(vec![first, value]);
                }
            }
            return;
        }
        let value = if as_list { J::Arr(vec![value]) } else { value };
        if let Some(ix) = &mut self.index {
            ix.insert(key.clone(), self.entries.len());
        }
        self.entries.push((key, value));
        if self.index.is_none() && self.entries.len() >= INDEX_FROM {
            self.index = Some(
                self.entries
                    .iter()
                    .enumerate()
                    .map(|(i, (k, _))| (k.clone(), i))
                    .collect(),
            );
        }
    }
}

/// An element whose end tag has not come yet.
struct Frame {
    name: String,
    obj: Obj,
    /// Text since the last child element's tag.
    text: String,
    /// `xsi:nil="true"` (with `nil_to_null`).
    nil: bool,
}

/// The JSON text (compact, UTF-8) for the XML document `body`, whose `Content-Type` names
/// `charset` (or none): the converted body, or why it cannot be converted.
pub(crate) fn convert(
    body: &[u8],
    charset: Option<&str>,
    opts: &Options,
) -> Result<String, XmlError> {
    let text = decode(body, charset)?;
    let root = parse(&text, opts)?;
    let mut out = String::with_capacity(text.len());
    write(&mut out, &J::Obj(root));
    Ok(out)
}

fn malformed(message: impl Into<String>, offset: u64) -> XmlError {
    XmlError::Malformed {
        message: message.into(),
        offset,
    }
}

const XML_SPACE: [char; 4] = [' ', '\t', '\n', '\r'];

fn parse(text: &str, opts: &Options) -> Result<Obj, XmlError> {
    let mut reader = Reader::from_str(text);
    reader.config_mut().check_end_names = true;
    let mut stack: Vec<Frame> = Vec::new();
    let mut top = Obj::default();
    let mut roots = 0usize;
    loop {
        let at = reader.buffer_position();
        let event = reader
            .read_event()
            .map_err(|e| malformed(e.to_string(), reader.error_position()))?;
        match event {
            Event::Start(_) | Event::Empty(_) if stack.is_empty() && roots > 0 => {
                return Err(malformed("a second root element", at));
            }
            Event::Start(start) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(XmlError::TooDeep);
                }
                roots += usize::from(stack.is_empty());
                if let Some(parent) = stack.last_mut() {
                    flush(parent, opts);
                }
                stack.push(open(&start, opts, at)?);
            }
            Event::Empty(start) => {
                roots += usize::from(stack.is_empty());
                if let Some(parent) = stack.last_mut() {
                    flush(parent, opts);
                }
                let frame = open(&start, opts, at)?;
                finish(frame, stack.last_mut(), &mut top, opts);
            }
            Event::End(_) => {
                let frame = stack
                    .pop()
                    .ok_or_else(|| malformed("an end tag without its start tag", at))?;
                let parent = stack.last_mut();
                finish(frame, parent, &mut top, opts);
            }
            Event::Text(t) => {
                let s = t
                    .xml10_content()
                    .map_err(|e| malformed(e.to_string(), at))?;
                match stack.last_mut() {
                    Some(frame) => frame.text.push_str(&s),
                    None if s.trim_matches(XML_SPACE).is_empty() => {}
                    None => return Err(malformed("text outside the root element", at)),
                }
            }
            Event::CData(c) => {
                let s = c
                    .xml10_content()
                    .map_err(|e| malformed(e.to_string(), at))?;
                match stack.last_mut() {
                    Some(frame) => frame.text.push_str(&s),
                    None => return Err(malformed("CDATA outside the root element", at)),
                }
            }
            Event::GeneralRef(r) => {
                let Some(frame) = stack.last_mut() else {
                    return Err(malformed("a reference outside the root element", at));
                };
                match r.resolve_char_ref() {
                    Ok(Some(c)) => frame.text.push(c),
                    Ok(None) => {
                        let name = r.decode().map_err(|e| malformed(e.to_string(), at))?;
                        match resolve_predefined_entity(&name) {
                            Some(s) => frame.text.push_str(s),
                            None => return Err(XmlError::Entity),
                        }
                    }
                    Err(e) => return Err(malformed(e.to_string(), at)),
                }
            }
            // The declaration, comments, processing instructions and the document type are
            // skipped, as org.json does; entities the DTD declares are refused where used.
            Event::Decl(_) | Event::Comment(_) | Event::PI(_) | Event::DocType(_) => {}
            Event::Eof => break,
        }
    }
    if !stack.is_empty() {
        return Err(malformed(
            "an element is not closed",
            reader.buffer_position(),
        ));
    }
    if roots == 0 {
        return Err(malformed("no root element", reader.buffer_position()));
    }
    Ok(top)
}

/// The frame of an element from its start tag: its name and attributes checked, the
/// attributes as members.
fn open(start: &BytesStart<'_>, opts: &Options, at: u64) -> Result<Frame, XmlError> {
    let name = std::str::from_utf8(start.name().as_ref())
        .map_err(|_| XmlError::NotText)?
        .to_owned();
    if !is_name(&name) {
        return Err(malformed(format!("`{name}` is not an element name"), at));
    }
    let mut frame = Frame {
        name,
        obj: Obj::default(),
        text: String::new(),
        nil: false,
    };
    for attr in start.attributes() {
        let attr = attr.map_err(|e| malformed(e.to_string(), at))?;
        let key = std::str::from_utf8(attr.key.as_ref()).map_err(|_| XmlError::NotText)?;
        if !is_name(key) {
            return Err(malformed(format!("`{key}` is not an attribute name"), at));
        }
        let raw = std::str::from_utf8(&attr.value).map_err(|_| XmlError::NotText)?;
        let value = attribute_value(raw).map_err(|e| match e {
            EscapeError::UnrecognizedEntity(..) => XmlError::Entity,
            e => malformed(e.to_string(), at),
        })?;
        if raw.contains('<') {
            return Err(malformed("`<` in an attribute value", at));
        }
        if opts.nil_to_null && key == "xsi:nil" && value.eq_ignore_ascii_case("true") {
            frame.nil = true;
            continue;
        }
        frame
            .obj
            .accumulate(key.to_owned(), coerce(value.into_owned(), opts), false);
    }
    Ok(frame)
}

/// An attribute's value as XML 1.0 normalizes it: each line break, tab or newline a space,
/// then the references resolved.
fn attribute_value(raw: &str) -> Result<Cow<'_, str>, EscapeError> {
    if raw.contains(['\t', '\n', '\r']) {
        let spaced = raw.replace("\r\n", " ").replace(['\t', '\n', '\r'], " ");
        return quick_xml::escape::unescape(&spaced).map(|v| Cow::Owned(v.into_owned()));
    }
    quick_xml::escape::unescape(raw)
}

/// The text gathered since the last tag, trimmed, as a `content` member (when not empty).
fn flush(frame: &mut Frame, opts: &Options) {
    let t = frame.text.trim_matches(XML_SPACE);
    if !t.is_empty() {
        let value = coerce(t.to_owned(), opts);
        frame.obj.accumulate(CONTENT.to_owned(), value, false);
    }
    frame.text.clear();
}

/// Closes an element: its value goes to its parent (or the document's object).
fn finish(mut frame: Frame, parent: Option<&mut Frame>, top: &mut Obj, opts: &Options) {
    flush(&mut frame, opts);
    let value = if frame.nil {
        J::Null
    } else if frame.obj.entries.is_empty() {
        J::Str(String::new())
    } else if matches!(frame.obj.entries.as_slice(), [(k, _)] if k == CONTENT) {
        match frame.obj.entries.pop() {
            Some((_, v)) => v,
            None => J::Null,
        }
    } else {
        J::Obj(frame.obj)
    };
    let as_list = opts.force_list.contains(&frame.name);
    let target = match parent {
        Some(p) => &mut p.obj,
        None => top,
    };
    target.accumulate(frame.name, value, as_list);
}

/// A text or attribute value as JSON: `true`/`false`/`null` (any case) and JSON numbers
/// become those values unless `keep_strings`; everything else stays a string (`007`, `+1`,
/// `.5`, `0x1F`, numbers too large for a double).
fn coerce(s: String, opts: &Options) -> J {
    if opts.keep_strings || s.is_empty() {
        return J::Str(s);
    }
    if s.eq_ignore_ascii_case("true") {
        J::Bool(true)
    } else if s.eq_ignore_ascii_case("false") {
        J::Bool(false)
    } else if s.eq_ignore_ascii_case("null") {
        J::Null
    } else if is_json_number(&s) && s.parse::<f64>().is_ok_and(f64::is_finite) {
        J::Num(s)
    } else {
        J::Str(s)
    }
}

/// True when `s` is a number as JSON writes them: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
fn is_json_number(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = usize::from(b.first() == Some(&b'-'));
    let digits = |i: &mut usize| {
        let from = *i;
        while b.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i - from
    };
    match b.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => {
            digits(&mut i);
        }
        _ => return false,
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// Compact JSON for a value, members in order.
fn write(out: &mut String, value: &J) {
    match value {
        J::Null => out.push_str("null"),
        J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        J::Num(n) => out.push_str(n),
        J::Str(s) => json_string(out, s),
        J::Arr(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(out, item);
            }
            out.push(']');
        }
        J::Obj(obj) => {
            out.push('{');
            for (i, (k, v)) in obj.entries.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json_string(out, k);
                out.push(':');
                write(out, v);
            }
            out.push('}');
        }
    }
}

/// The body as text. A byte order mark decides the encoding (and is dropped); else the
/// `Content-Type`'s charset; else the XML declaration's `encoding`; else UTF-8.
fn decode<'a>(body: &'a [u8], charset: Option<&str>) -> Result<Cow<'a, str>, XmlError> {
    if let Some(rest) = body.strip_prefix(b"\xEF\xBB\xBF") {
        return utf8(rest);
    }
    if let Some(rest) = body.strip_prefix(b"\xFE\xFF") {
        return utf16(rest, true);
    }
    if let Some(rest) = body.strip_prefix(b"\xFF\xFE") {
        return utf16(rest, false);
    }
    match charset {
        Some(label) => by_label(body, label),
        None => match body {
            // `<?` in UTF-16 without a byte order mark (XML 1.0, appendix F).
            [0, b'<', 0, b'?', ..] => utf16(body, true),
            [b'<', 0, b'?', 0, ..] => utf16(body, false),
            _ => match declared_encoding(body) {
                Some(label) => by_label(body, &label),
                None => utf8(body),
            },
        },
    }
}

/// The `encoding` of the XML declaration the body starts with, if any (read with quick-xml;
/// only the declaration is looked at).
fn declared_encoding(body: &[u8]) -> Option<String> {
    let mut reader = Reader::from_reader(body);
    match reader.read_event() {
        Ok(Event::Decl(decl)) => {
            let enc = decl.encoding()?.ok()?;
            Some(String::from_utf8_lossy(&enc).into_owned())
        }
        _ => None,
    }
}

fn by_label<'a>(body: &'a [u8], label: &str) -> Result<Cow<'a, str>, XmlError> {
    match label.trim().to_ascii_lowercase().as_str() {
        "utf-8" | "utf8" | "us-ascii" | "ascii" => utf8(body),
        "iso-8859-1" | "iso8859-1" | "iso_8859-1" | "latin1" | "latin-1" | "l1" => {
            Ok(Cow::Owned(body.iter().map(|&b| char::from(b)).collect()))
        }
        "windows-1252" | "cp1252" => Ok(Cow::Owned(body.iter().map(|&b| cp1252(b)).collect())),
        "utf-16" => match body {
            [b, 0, ..] if *b != 0 => utf16(body, false),
            _ => utf16(body, true),
        },
        "utf-16be" => utf16(body, true),
        "utf-16le" => utf16(body, false),
        other => Err(XmlError::Encoding(other.chars().take(40).collect())),
    }
}

fn utf8(body: &[u8]) -> Result<Cow<'_, str>, XmlError> {
    std::str::from_utf8(body)
        .map(Cow::Borrowed)
        .map_err(|_| XmlError::NotText)
}

fn utf16(body: &[u8], big_endian: bool) -> Result<Cow<'static, str>, XmlError> {
    if !body.len().is_multiple_of(2) {
        return Err(XmlError::NotText);
    }
    let units = body.chunks_exact(2).map(|p| {
        let pair = [p[0], p[1]];
        if big_endian {
            u16::from_be_bytes(pair)
        } else {
            u16::from_le_bytes(pair)
        }
    });
    char::decode_utf16(units)
        .collect::<Result<String, _>>()
        .map(Cow::Owned)
        .map_err(|_| XmlError::NotText)
}

/// A byte of windows-1252: ISO-8859-1 but for 0x80–0x9F (the five bytes it leaves undefined
/// stay the C1 control characters).
fn cp1252(b: u8) -> char {
    const HIGH: [char; 32] = [
        '€', '\u{81}', '‚', 'ƒ', '„', '…', '†', '‡', 'ˆ', '‰', 'Š', '‹', 'Œ', '\u{8D}', 'Ž',
        '\u{8F}', '\u{90}', '‘', '’', '“', '”', '•', '–', '—', '˜', '™', 'š', '›', 'œ', '\u{9D}',
        'ž', 'Ÿ',
    ];
    match b {
        0x80..=0x9F => HIGH[usize::from(b - 0x80)],
        _ => char::from(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> Options {
        Options {
            nil_to_null: true,
            ..Options::default()
        }
    }

    fn json(xml: &str) -> String {
        convert(xml.as_bytes(), None, &opts()).unwrap()
    }

    #[test]
    fn the_root_element_is_the_key() {
        assert_eq!(json("<zoo><a>1</a></zoo>"), r#"{"zoo":{"a":1}}"#);
        assert_eq!(
            json(r#"<?xml version="1.0"?><!-- c --><!DOCTYPE zoo><zoo/><?pi x?>"#),
            r#"{"zoo":""}"#
        );
        assert_eq!(json("<a></a>"), r#"{"a":""}"#);
        assert_eq!(json("<a> text </a>"), r#"{"a":"text"}"#);
    }

    #[test]
    fn nested_elements_repeats_and_document_order() {
        assert_eq!(
            json("<r><z>1</z><a><y>x</y><b/></a><z>2</z><m>3</m></r>"),
            r#"{"r":{"z":[1,2],"a":{"y":"x","b":""},"m":3}}"#
        );
        // Many distinct children (looked up through the index) keep their order too.
        let many: String = (0..40).rev().map(|i| format!("<e{i}>{i}</e{i}>")).collect();
        let out = json(&format!("<r>{many}<e3>x</e3></r>"));
        assert!(out.starts_with(r#"{"r":{"e39":39,"e38":38,"#), "{out}");
        assert!(out.contains(r#""e3":[3,"x"],"e2":2"#), "{out}");
    }

    #[test]
    fn attributes_come_first_and_text_goes_to_content() {
        assert_eq!(
            json(r#"<p id="7" lang="en">Hi <b>you</b> there<![CDATA[ <raw> ]]></p>"#),
            r#"{"p":{"id":7,"lang":"en","content":["Hi","there <raw>"],"b":"you"}}"#
        );
        assert_eq!(
            json(r#"<price currency="EUR">1.50</price>"#),
            r#"{"price":{"currency":"EUR","content":1.50}}"#
        );
        assert_eq!(
            json("<a x=\"1\ttwo\r\nthree &amp; &#x41;\"/>"),
            r#"{"a":{"x":"1 two three & A"}}"#
        );
    }

    #[test]
    fn values_are_coerced_unless_kept_strings() {
        let xml = "<r><t>TRUE</t><f>false</f><n>Null</n><i>-12</i><d>1.5e3</d><z>007</z><p>+1</p><h>0x1F</h><s>.5</s><big>1e999</big><w>1.</w></r>";
        assert_eq!(
            json(xml),
            r#"{"r":{"t":true,"f":false,"n":null,"i":-12,"d":1.5e3,"z":"007","p":"+1","h":"0x1F","s":".5","big":"1e999","w":"1."}}"#
        );
        let kept = Options {
            keep_strings: true,
            ..opts()
        };
        assert_eq!(
            convert(br#"<r a="1"><t>true</t><i>-12</i></r>"#, None, &kept).unwrap(),
            r#"{"r":{"a":"1","t":"true","i":"-12"}}"#
        );
    }

    #[test]
    fn namespaces_keep_their_prefixes() {
        assert_eq!(
            json(r#"<ns:a xmlns:ns="urn:x" xmlns="urn:d"><ns:b>1</ns:b><c ns:k="v"/></ns:a>"#),
            r#"{"ns:a":{"xmlns:ns":"urn:x","xmlns":"urn:d","ns:b":1,"c":{"ns:k":"v"}}}"#
        );
    }

    #[test]
    fn nil_and_force_list() {
        let xml = r#"<r xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"><a xsi:nil="true"/><b xsi:nil="false">1</b><c>x</c></r>"#;
        assert_eq!(
            json(xml),
            r#"{"r":{"xmlns:xsi":"http://www.w3.org/2001/XMLSchema-instance","a":null,"b":{"xsi:nil":false,"content":1},"c":"x"}}"#
        );
        let keep_nil = Options {
            force_list: ["c".to_owned(), "r".to_owned()].into(),
            ..Options::default()
        };
        assert_eq!(
            convert(xml.as_bytes(), None, &keep_nil).unwrap(),
            r#"{"r":[{"xmlns:xsi":"http://www.w3.org/2001/XMLSchema-instance","a":{"xsi:nil":true},"b":{"xsi:nil":false,"content":1},"c":["x"]}]}"#
        );
    }

    #[test]
    fn character_encodings() {
        let latin1 = b"<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?><a>\xE4</a>";
        assert_eq!(convert(latin1, None, &opts()).unwrap(), r#"{"a":"ä"}"#);
        // The header's charset wins over the declaration.
        assert_eq!(
            convert(b"<a>\x80</a>", Some("windows-1252"), &opts()).unwrap(),
            r#"{"a":"€"}"#
        );
        assert_eq!(
            convert("<a>ä</a>".as_bytes(), Some("utf-8"), &opts()).unwrap(),
            r#"{"a":"ä"}"#
        );
        let utf16: Vec<u8> = "\u{FEFF}<a>ü</a>"
            .encode_utf16()
            .flat_map(u16::to_le_bytes)
            .collect();
        assert_eq!(
            convert(&utf16, Some("iso-8859-1"), &opts()).unwrap(),
            r#"{"a":"ü"}"#,
            "the byte order mark wins"
        );
        let be: Vec<u8> = "<?xml version=\"1.0\" encoding=\"UTF-16\"?><a>ü</a>"
            .encode_utf16()
            .flat_map(u16::to_be_bytes)
            .collect();
        assert_eq!(convert(&be, None, &opts()).unwrap(), r#"{"a":"ü"}"#);
        assert_eq!(
            convert(b"<a/>", Some("ebcdic"), &opts()),
            Err(XmlError::Encoding("ebcdic".to_owned()))
        );
        assert_eq!(
            convert(b"<a>\xE4</a>", None, &opts()),
            Err(XmlError::NotText)
        );
    }

    #[test]
    fn what_cannot_be_converted() {
        for bad in [
            "<unclosed>",
            "<a><b></a></b>",
            "<a/><b/>",
            "text",
            "",
            "<a/>trailing",
            "</a>",
            "<a x=1/>",
            "<a x='1' x='2'/>",
            "<a x='<'/>",
            "<1a/>",
            "<a>&#0;</a>",
            "<a>& b</a>",
        ] {
            assert!(
                matches!(
                    convert(bad.as_bytes(), None, &opts()),
                    Err(XmlError::Malformed { .. })
                ),
                "{bad}: {:?}",
                convert(bad.as_bytes(), None, &opts())
            );
        }
        assert_eq!(
            convert(b"<!DOCTYPE a [<!ENTITY e \"x\">]><a>&e;</a>", None, &opts()),
            Err(XmlError::Entity)
        );
        assert_eq!(
            convert(b"<a x='&e;'/>", None, &opts()),
            Err(XmlError::Entity)
        );
        let deep = format!(
            "{}{}",
            "<a>".repeat(MAX_DEPTH + 1),
            "</a>".repeat(MAX_DEPTH + 1)
        );
        assert_eq!(
            convert(deep.as_bytes(), None, &opts()),
            Err(XmlError::TooDeep)
        );
        let ok = format!("{}{}", "<a>".repeat(MAX_DEPTH), "</a>".repeat(MAX_DEPTH));
        assert!(convert(ok.as_bytes(), None, &opts()).is_ok());
    }

    #[test]
    fn json_numbers() {
        for ok in ["0", "-0", "12", "1.5", "1e5", "1E+5", "-1.25e-3"] {
            assert!(is_json_number(ok), "{ok}");
        }
        for bad in [
            "", "-", "01", "1.", ".5", "+1", "1e", "1e+", "0x1", "1 ", "NaN",
        ] {
            assert!(!is_json_number(bad), "{bad}");
        }
    }

    #[test]
    fn the_output_is_json_in_document_order() {
        let out = json("<r><b>1</b><a>2</a><b>3</b></r>");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["r"]["b"], serde_json::json!([1, 3]));
        assert_eq!(out, r#"{"r":{"b":[1,3],"a":2}}"#);
    }
}
