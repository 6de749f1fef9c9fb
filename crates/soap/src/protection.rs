//! `xmlProtection`: checks an XML body in one streaming pass (quick-xml events, no tree) against
//! size, depth, name, attribute and text limits. Entities are never expanded: a reference to
//! anything but the five predefined entities or a character reference rejects the message. A
//! DTD is cut out of the message (`removeDTD: true`, the default) or rejects it.

use std::borrow::Cow;

use http::{header, HeaderValue, StatusCode};
use quick_xml::events::Event;
use quick_xml::Reader;
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_config::units::{ByteSize, Flag};
use turnpike_core::problems;
use turnpike_core::{Body, BodyInspector, BodyNeed, Exchange, Outcome, Policy, Problem};
use turnpike_core::{CompileContext, CompileError, Phases, PolicyFactory};

use crate::quick::scan::{is_space, name_bytes};

/// The limits `xmlProtection` enforces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Most attributes on one element (namespace declarations count).
    pub max_attribute_count: usize,
    /// Longest element name (with its prefix), in bytes.
    pub max_element_name_length: usize,
    /// Deepest element nesting.
    pub max_depth: usize,
    /// Largest message, in bytes (`None`: the gateway's body limit applies).
    pub max_size: Option<u64>,
    /// Longest run of character data (text, CDATA, references), in bytes.
    pub max_text_length: Option<usize>,
    /// Cut a DTD out of the message (true) or reject the message (false).
    pub remove_dtd: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_attribute_count: 1000,
            max_element_name_length: 1000,
            max_depth: 512,
            max_size: None,
            max_text_length: None,
            remove_dtd: true,
        }
    }
}

/// Why a message was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The HTTP status to answer with (400, or 413 for `maxSize`).
    pub status: StatusCode,
    /// What was wrong, with the byte offset where it was found.
    pub message: String,
}

fn violation(at: u64, message: impl Into<String>) -> Violation {
    Violation {
        status: StatusCode::BAD_REQUEST,
        message: format!("{} (at byte {at})", message.into()),
    }
}

/// Checks `input`; returns the message to pass on: unchanged (borrowed) or with its DTD removed.
pub fn check<'a>(input: &'a [u8], limits: &Limits) -> Result<Cow<'a, [u8]>, Violation> {
    if let Some(max) = limits.max_size {
        if input.len() as u64 > max {
            return Err(Violation {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                message: format!("the message has {} bytes; maxSize is {max}", input.len()),
            });
        }
    }
    if plainly_acceptable(input, limits) {
        return Ok(Cow::Borrowed(input));
    }
    check_events(input, limits)
}

/// Bytes of the names the quick pass takes (prefixed names whole): 1 may start a name, 2 may
/// continue one.
const NAME: [u8; 256] = name_bytes(true);

/// The end of the ASCII name starting at `i` (`i` itself when there is none).
fn name_end(input: &[u8], i: usize) -> usize {
    if input.get(i).is_none_or(|&b| NAME[b as usize] != 1) {
        return i;
    }
    let mut e = i + 1;
    while input.get(e).is_some_and(|&b| NAME[b as usize] != 0) {
        e += 1;
    }
    e
}

/// A quick pass for the everyday message: elements with ASCII names, attributes written
/// `name="value"` (without `&` or `<` in the value), text with predefined or character
/// references, processing instructions (the XML declaration). True only when [`check_events`]
/// would accept `input` unchanged; anything else (comments, CDATA, a DTD, other spellings, a
/// limit reached, an error) answers false and leaves the verdict, and its message, to
/// [`check_events`]. About five times cheaper than the event reader.
fn plainly_acceptable(input: &[u8], limits: &Limits) -> bool {
    let n = input.len();
    let mut i = if input.starts_with(&[0xEF, 0xBB, 0xBF]) {
        3
    } else {
        0
    };
    // Open elements, as ranges of `input`.
    let mut open: Vec<(usize, usize)> = Vec::with_capacity(16);
    let mut root_seen = false;
    let mut root_done = false;
    // Attribute names of the current start tag, for the duplicate check.
    let mut keys: Vec<(usize, usize)> = Vec::new();
    loop {
        let lt = memchr::memchr(b'<', &input[i..]).map(|p| i + p);
        let text = &input[i..lt.unwrap_or(n)];
        if !text.is_empty() {
            if open.is_empty() {
                if !text.iter().all(|&b| is_space(b)) {
                    return false;
                }
            } else {
                let mut rest = text;
                while let Some(amp) = memchr::memchr(b'&', rest) {
                    rest = &rest[amp + 1..];
                    let Some(semi) = memchr::memchr2(b';', b'&', rest) else {
                        return false;
                    };
                    let name = std::str::from_utf8(&rest[..semi]).unwrap_or("");
                    if rest[semi] != b';' || crate::xml::resolve_reference(name).is_none() {
                        return false;
                    }
                    rest = &rest[semi + 1..];
                }
                // A text run ends at markup: it is this text, references included.
                if limits.max_text_length.is_some_and(|max| text.len() > max) {
                    return false;
                }
            }
        }
        let Some(lt) = lt else { break };
        i = lt + 1;
        match input.get(i) {
            Some(b'/') => {
                // `</name>` of the innermost open element.
                let Some((s, e)) = open.pop() else {
                    return false;
                };
                let end = i + 1 + (e - s);
                if input.get(i + 1..end) != Some(&input[s..e]) || input.get(end) != Some(&b'>') {
                    return false;
                }
                root_done = open.is_empty();
                i = end + 1;
            }
            Some(b'?') => {
                // Up to the first `?>` that does not reuse the opening `?`.
                match memchr::memmem::find(&input[i..], b"?>") {
                    Some(k) if k > 0 => i += k + 2,
                    _ => return false,
                }
            }
            _ => {
                let start = i;
                let name_e = name_end(input, start);
                i = name_e;
                if i == start
                    || root_done
                    || i - start > limits.max_element_name_length
                    || open.len() + 1 > limits.max_depth
                {
                    return false;
                }
                root_seen = true;
                keys.clear();
                loop {
                    let before = i;
                    while i < n && is_space(input[i]) {
                        i += 1;
                    }
                    match input.get(i) {
                        Some(b'>') => {
                            open.push((start, name_e));
                            i += 1;
                            break;
                        }
                        Some(b'/') if input.get(i + 1) == Some(&b'>') => {
                            root_done = open.is_empty();
                            i += 2;
                            break;
                        }
                        _ if i > before => {
                            let key = (i, name_end(input, i));
                            if key.1 == key.0
                                || keys.len() >= limits.max_attribute_count
                                || keys
                                    .iter()
                                    .any(|&(s, e)| input[s..e] == input[key.0..key.1])
                            {
                                return false;
                            }
                            keys.push(key);
                            i = key.1;
                            let quote = match input.get(i..i + 2) {
                                Some([b'=', q @ (b'"' | b'\'')]) => *q,
                                _ => return false,
                            };
                            i += 2;
                            let Some(len) = memchr::memchr(quote, &input[i..]) else {
                                return false;
                            };
                            if memchr::memchr2(b'&', b'<', &input[i..i + len]).is_some() {
                                return false;
                            }
                            i += len + 1;
                        }
                        _ => return false,
                    }
                }
            }
        }
    }
    root_seen && open.is_empty()
}

/// The full check on quick-xml's events: every verdict and message of [`check`].
fn check_events<'a>(input: &'a [u8], limits: &Limits) -> Result<Cow<'a, [u8]>, Violation> {
    let mut reader = Reader::from_reader(input);
    reader.config_mut().enable_all_checks(true);
    let mut depth = 0usize;
    let mut root_done = false;
    let mut root_seen = false;
    let mut text_run = 0usize;
    let mut dtd: Option<(usize, usize)> = None;
    loop {
        let before = reader.buffer_position();
        let ev = reader
            .read_event()
            .map_err(|e| violation(reader.error_position(), format!("not well-formed XML: {e}")))?;
        let at = before;
        match &ev {
            Event::Text(_) | Event::CData(_) | Event::GeneralRef(_) => {}
            _ => text_run = 0,
        }
        match ev {
            Event::Start(ref s) | Event::Empty(ref s) => {
                if root_done {
                    return Err(violation(at, "content after the root element"));
                }
                root_seen = true;
                let name_len = s.name().as_ref().len();
                if name_len > limits.max_element_name_length {
                    return Err(violation(
                        at,
                        format!(
                            "an element name has {name_len} bytes; maxElementNameLength is {}",
                            limits.max_element_name_length
                        ),
                    ));
                }
                depth += 1;
                if depth > limits.max_depth {
                    return Err(violation(
                        at,
                        format!("elements nest deeper than maxDepth {}", limits.max_depth),
                    ));
                }
                let mut count = 0usize;
                for a in s.attributes() {
                    let a = a.map_err(|e| violation(at, format!("bad attribute: {e}")))?;
                    count += 1;
                    if count > limits.max_attribute_count {
                        return Err(violation(
                            at,
                            format!(
                                "an element has more than maxAttributeCount {} attributes",
                                limits.max_attribute_count
                            ),
                        ));
                    }
                    if memchr::memchr(b'&', &a.value).is_none() {
                        continue;
                    }
                    a.unescape_value().map_err(|e| {
                        violation(
                            at,
                            format!("attribute value: {e} (entities are never expanded)"),
                        )
                    })?;
                }
                if matches!(ev, Event::Empty(_)) {
                    depth -= 1;
                    root_done = depth == 0;
                }
            }
            Event::End(_) => {
                depth = depth.saturating_sub(1);
                root_done = depth == 0;
            }
            Event::Text(ref t) => {
                if depth == 0 {
                    if !t.iter().all(|b| b.is_ascii_whitespace()) {
                        return Err(violation(at, "text outside the root element"));
                    }
                } else {
                    text_run += t.len();
                }
            }
            Event::CData(ref t) => {
                if depth == 0 {
                    return Err(violation(at, "CDATA outside the root element"));
                }
                text_run += t.len();
            }
            Event::GeneralRef(ref r) => {
                if depth == 0 {
                    return Err(violation(at, "reference outside the root element"));
                }
                let name = std::str::from_utf8(r.as_ref()).unwrap_or("");
                if crate::xml::resolve_reference(name).is_none() {
                    return Err(violation(
                        at,
                        format!(
                            "entity reference `&{}` is not allowed: entities are never expanded",
                            String::from_utf8_lossy(&r[..r.len().min(64)])
                        ),
                    ));
                }
                text_run += r.len() + 2;
            }
            Event::DocType(_) => {
                if root_seen || dtd.is_some() {
                    return Err(violation(at, "misplaced document type declaration"));
                }
                if !limits.remove_dtd {
                    return Err(violation(
                        at,
                        "document type declarations (DTD) are not allowed",
                    ));
                }
                dtd = Some((at as usize, reader.buffer_position() as usize));
            }
            Event::Eof => break,
            Event::Comment(_) | Event::Decl(_) | Event::PI(_) => {}
        }
        if let Some(max) = limits.max_text_length {
            if text_run > max {
                return Err(violation(
                    at,
                    format!("a text has more than maxTextLength {max} bytes"),
                ));
            }
        }
    }
    if depth > 0 {
        return Err(violation(
            reader.buffer_position(),
            "unexpected end of the message: unclosed elements",
        ));
    }
    if !root_seen {
        return Err(violation(0, "the message has no root element"));
    }
    Ok(match dtd {
        None => Cow::Borrowed(input),
        Some((s, e)) => {
            let mut out = Vec::with_capacity(input.len() - (e - s));
            out.extend_from_slice(&input[..s]);
            out.extend_from_slice(&input[e..]);
            Cow::Owned(out)
        }
    })
}

/// `xmlProtection`: checks XML bodies in one streaming pass; entities are never expanded.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct XmlProtectionSettings {
    /// Most attributes (namespace declarations included) on one element (default 1000).
    #[serde(default)]
    pub max_attribute_count: Option<u64>,
    /// Longest element name, prefix included, in bytes (default 1000).
    #[serde(default)]
    pub max_element_name_length: Option<u64>,
    /// Deepest element nesting (default 512).
    #[serde(default)]
    pub max_depth: Option<u64>,
    /// Largest message (default: the gateway's `limits.maxBodySize`); larger → 413.
    #[serde(default)]
    pub max_size: Option<ByteSize>,
    /// Longest run of character data in an element (default: no limit beyond `maxSize`).
    #[serde(default)]
    pub max_text_length: Option<ByteSize>,
    /// Remove a document type declaration from the message (default true); `false` rejects
    /// messages that carry one.
    #[serde(default, rename = "removeDTD")]
    pub remove_dtd: Option<Flag>,
}

/// The compiled `xmlProtection` policy.
#[derive(Debug)]
pub struct XmlProtection {
    limits: Limits,
}

impl XmlProtection {
    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }
}

impl PolicyFactory for XmlProtection {
    const NAME: &'static str = "xmlProtection";
    const PHASES: Phases = Phases::REQUEST;
    const SOAP: bool = true;
    type Settings = XmlProtectionSettings;

    /// Compiles the policy from its settings.
    fn compile(c: XmlProtectionSettings, _: &CompileContext<'_>) -> Result<Self, CompileError> {
        let d = Limits::default();
        let positive = |v: Option<u64>, key: &str| -> Result<Option<u64>, CompileError> {
            match v {
                Some(0) => Err(CompileError::new(key, "must be at least 1")),
                v => Ok(v),
            }
        };
        Ok(XmlProtection {
            limits: Limits {
                max_attribute_count: positive(c.max_attribute_count, "maxAttributeCount")?
                    .map_or(d.max_attribute_count, |v| v as usize),
                max_element_name_length: positive(
                    c.max_element_name_length,
                    "maxElementNameLength",
                )?
                .map_or(d.max_element_name_length, |v| v as usize),
                max_depth: positive(c.max_depth, "maxDepth")?.map_or(d.max_depth, |v| v as usize),
                max_size: c.max_size.map(|s| s.0),
                max_text_length: c.max_text_length.map(|s| s.0 as usize),
                remove_dtd: c.remove_dtd.is_none_or(|f| f.0),
            },
        })
    }
}

/// Counts the body while the engine reads it: a body larger than `maxSize` is refused without
/// being read whole. The structural checks run on the whole body in the request phase.
struct SizeInspector {
    max: u64,
    seen: u64,
}

impl BodyInspector for SizeInspector {
    fn chunk(&mut self, data: &[u8]) -> Result<(), Box<Problem>> {
        self.seen += data.len() as u64;
        if self.seen > self.max {
            return Err(Box::new(
                Problem::new(&problems::XML_PROTECTION)
                    .with_status(StatusCode::PAYLOAD_TOO_LARGE)
                    .with_detail(format!(
                        "the message has more than {} bytes; maxSize is {}",
                        self.seen, self.max
                    )),
            ));
        }
        Ok(())
    }

    fn end(&mut self) -> Result<(), Box<Problem>> {
        Ok(())
    }
}

impl Policy for XmlProtection {
    fn name(&self) -> &'static str {
        "xmlProtection"
    }

    fn body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    fn body_inspector(&self) -> Option<Box<dyn BodyInspector>> {
        self.limits
            .max_size
            .map(|max| Box::new(SizeInspector { max, seen: 0 }) as Box<dyn BodyInspector>)
    }

    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        // A request without a body (GET, `?wsdl`) has nothing to check.
        let Some(body) = ex.request_bytes() else {
            return Outcome::Continue;
        };
        // A compressed body is checked as the backend reads it; its charset is the XML
        // parser's to read (the byte order mark, the declaration).
        let decoded = match turnpike_core::decode::content(&ex.request.headers, body) {
            Ok(d) => d,
            Err(e) => return Outcome::Reject(e.problem()),
        };
        let coded = matches!(decoded, Cow::Owned(_));
        match check(&decoded, &self.limits) {
            Ok(Cow::Borrowed(_)) => Outcome::Continue,
            Ok(Cow::Owned(cleaned)) => {
                let len = cleaned.len();
                ex.request_body = Body::full(cleaned);
                // The cleaned body is sent decoded.
                if coded {
                    ex.request.headers.remove(header::CONTENT_ENCODING);
                }
                ex.request
                    .headers
                    .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
                Outcome::Continue
            }
            Err(v) => Outcome::Reject(
                Problem::new(&problems::XML_PROTECTION)
                    .with_status(v.status)
                    .with_detail(v.message),
            ),
        }
    }
}

#[cfg(test)]
mod tests;
