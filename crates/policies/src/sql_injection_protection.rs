//! `sqlInjectionProtection`: Membrane's check of a request for SQL injection. Runs in the
//! request phase: every value a backend may put into a query — the path's segments, the query
//! string's and a form body's names and values, the names and string values of a JSON body, the
//! text and attribute values of an XML body, the fields of a `multipart/form-data` body and,
//! with `inspectHeaders`, the headers and cookies — is tested with libinjection (the
//! `libinjectionrs` port; the detector of OWASP CRS rule 942100, paranoia level 1). A hit answers
//! 400 (`sql-injection` problem naming where it was found), or with `onDetect: log` is logged and
//! let through. Bodies are read as the backend reads them: content codings undone and text
//! converted to UTF-8 by `turnpike_core::decode`; a body that cannot be decoded is refused (415,
//! or 413 beyond the decoding allowance), never passed uninspected.

use std::borrow::Cow;

use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::decode::{self, DecodeError, TextKind};
use turnpike_core::problems;
use turnpike_core::{BodyNeed, CompileContext, CompileError, Exchange, Outcome, Phases};
use turnpike_core::{Policy, PolicyFactory, Problem};
use turnpike_openapi::media;

use crate::err;
use crate::form_validation::pairs;

/// What a hit does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OnDetect {
    /// Answer 400 with an `sql-injection` problem.
    #[default]
    Block,
    /// Log the hit (with the request id) and let the request through.
    Log,
}

/// `sqlInjectionProtection`'s settings.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SqlInjectionProtectionSettings {
    /// The OWASP CRS paranoia level; only 1 (libinjection, CRS rule 942100) is implemented.
    #[serde(default = "level_one")]
    pub level: u8,
    /// `block` (400) or `log` (log the hit and forward the request).
    #[serde(default)]
    pub on_detect: OnDetect,
    /// Also test every header's value and every cookie's name and value.
    #[serde(default)]
    pub inspect_headers: bool,
    /// Test the path's segments.
    #[serde(default = "yes")]
    pub inspect_path: bool,
    /// Test the query string's parameter names and values.
    #[serde(default = "yes")]
    pub inspect_query: bool,
    /// Test the body (form, JSON, XML and multipart bodies; it is then read into memory).
    #[serde(default = "yes")]
    pub inspect_body: bool,
}

fn level_one() -> u8 {
    1
}

fn yes() -> bool {
    true
}

/// The compiled `sqlInjectionProtection` policy.
#[derive(Debug)]
pub struct SqlInjectionProtection {
    on_detect: OnDetect,
    headers: bool,
    path: bool,
    query: bool,
    body: bool,
}

impl PolicyFactory for SqlInjectionProtection {
    const NAME: &'static str = "sqlInjectionProtection";
    const PHASES: Phases = Phases::REQUEST;
    type Settings = SqlInjectionProtectionSettings;

    /// Checks the level and that something is inspected; returns the policy.
    fn compile(
        s: SqlInjectionProtectionSettings,
        _: &CompileContext<'_>,
    ) -> Result<Self, CompileError> {
        match s.level {
            1 => {}
            2..=4 => {
                return Err(err(
                    "level",
                    format!(
                        "paranoia level {} is not supported: Turnpike detects SQL injection with \
                         libinjection, OWASP CRS's rule of level 1; use `level: 1`, and validate \
                         inputs with `openapi` (`validateRequests`) or `formValidation` for more",
                        s.level
                    ),
                ))
            }
            n => {
                return Err(err(
                    "level",
                    format!("{n} is not a paranoia level (1 to 4)"),
                ))
            }
        }
        if !(s.inspect_headers || s.inspect_path || s.inspect_query || s.inspect_body) {
            return Err(err(
                "",
                "every `inspect…` setting is off: the policy would test nothing",
            ));
        }
        Ok(SqlInjectionProtection {
            on_detect: s.on_detect,
            headers: s.inspect_headers,
            path: s.inspect_path,
            query: s.inspect_query,
            body: s.inspect_body,
        })
    }
}

/// Where a hit was found: the problem's `in` and `name` members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hit {
    /// `path`, `query`, `form`, `json`, `xml`, `multipart`, `header` or `cookie`.
    pub place: &'static str,
    /// The parameter, field, header or cookie; the JSON path (`$.a[0]`); the XML element (with
    /// `@attribute`); the path segment's position (from 1).
    pub name: String,
    /// libinjection's fingerprint of the value (for the log).
    pub fingerprint: String,
}

impl Hit {
    fn describe(&self) -> String {
        match self.place {
            "path" => format!("in segment {} of the path", self.name),
            "query" => format!("in the query parameter `{}`", self.name),
            "form" => format!("in the form field `{}`", self.name),
            "json" => format!("in the JSON body at `{}`", self.name),
            "xml" => format!("in the XML body at `{}`", self.name),
            "multipart" => format!("in the multipart field `{}`", self.name),
            "header" => format!("in the header `{}`", self.name),
            "cookie" => format!("in the cookie `{}`", self.name),
            _ => format!("in the {}", self.place),
        }
    }
}

/// libinjection's verdict on one value: its fingerprint when it is SQL injection.
fn sqli(value: &str) -> Option<String> {
    if value.is_empty() {
        return None;
    }
    let r = libinjectionrs::detect_sqli(value.as_bytes());
    r.is_injection()
        .then(|| r.fingerprint.map(|f| f.to_string()).unwrap_or_default())
}

fn hit(place: &'static str, name: impl Into<String>, value: &str) -> Option<Hit> {
    sqli(value).map(|fingerprint| Hit {
        place,
        name: name.into(),
        fingerprint,
    })
}

/// The names and values of `name=value&…` text.
fn scan_pairs(place: &'static str, text: &[u8]) -> Option<Hit> {
    pairs(text).find_map(|(k, v)| hit(place, k.clone(), &k).or_else(|| hit(place, k, &v)))
}

/// The path's segments, percent-decoded.
fn scan_path(path: &str) -> Option<Hit> {
    path.split('/')
        .filter(|s| !s.is_empty())
        .enumerate()
        .find_map(|(i, seg)| {
            let decoded = percent_encoding::percent_decode_str(seg).decode_utf8_lossy();
            hit("path", (i + 1).to_string(), &decoded)
        })
}

/// Every member name and string value of a JSON value, depth first; `at` is the JSON path of
/// `v`.
fn scan_json(v: &serde_json::Value, at: &mut String) -> Option<Hit> {
    match v {
        serde_json::Value::String(s) => hit("json", at.clone(), s),
        serde_json::Value::Array(items) => items.iter().enumerate().find_map(|(i, item)| {
            let len = at.len();
            at.push_str(&format!("[{i}]"));
            let found = scan_json(item, at);
            at.truncate(len);
            found
        }),
        serde_json::Value::Object(members) => members.iter().find_map(|(k, item)| {
            let len = at.len();
            at.push('.');
            at.push_str(k);
            let found = hit("json", at.clone(), k).or_else(|| scan_json(item, at));
            at.truncate(len);
            found
        }),
        _ => None,
    }
}

/// Why an XML body could not be read element by element.
struct Unreadable;

/// The text of every element and every attribute value of an XML document; `Err` when it is
/// not well-formed enough to read.
fn scan_xml(body: &[u8]) -> Result<Option<Hit>, Unreadable> {
    use quick_xml::events::Event;

    let mut reader = quick_xml::Reader::from_reader(body);
    let mut stack: Vec<String> = Vec::new();
    let mut text = String::new();
    let flush = |stack: &[String], text: &mut String| -> Option<Hit> {
        let found = hit("xml", format!("/{}", stack.join("/")), text.trim());
        text.clear();
        found
    };
    loop {
        match reader.read_event().map_err(|_| Unreadable)? {
            Event::Start(e) => {
                if let Some(h) = flush(&stack, &mut text) {
                    return Ok(Some(h));
                }
                let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                stack.push(name);
                if let Some(h) = scan_attributes(&e, &stack)? {
                    return Ok(Some(h));
                }
            }
            Event::Empty(e) => {
                if let Some(h) = flush(&stack, &mut text) {
                    return Ok(Some(h));
                }
                let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                stack.push(name);
                let found = scan_attributes(&e, &stack)?;
                stack.pop();
                if found.is_some() {
                    return Ok(found);
                }
            }
            Event::End(_) => {
                if let Some(h) = flush(&stack, &mut text) {
                    return Ok(Some(h));
                }
                stack.pop();
            }
            Event::Text(t) => text.push_str(&t.xml10_content().map_err(|_| Unreadable)?),
            Event::CData(c) => text.push_str(&c.xml10_content().map_err(|_| Unreadable)?),
            Event::GeneralRef(r) => match r.resolve_char_ref().map_err(|_| Unreadable)? {
                Some(c) => text.push(c),
                None => {
                    let name = r.decode().map_err(|_| Unreadable)?;
                    let s =
                        quick_xml::escape::resolve_predefined_entity(&name).ok_or(Unreadable)?;
                    text.push_str(s);
                }
            },
            Event::Decl(_) | Event::Comment(_) | Event::PI(_) | Event::DocType(_) => {}
            Event::Eof => return Ok(flush(&stack, &mut text)),
        }
    }
}

fn scan_attributes(
    e: &quick_xml::events::BytesStart<'_>,
    stack: &[String],
) -> Result<Option<Hit>, Unreadable> {
    for attr in e.attributes() {
        let attr = attr.map_err(|_| Unreadable)?;
        let raw = std::str::from_utf8(&attr.value).map_err(|_| Unreadable)?;
        let value = quick_xml::escape::unescape(raw).map_err(|_| Unreadable)?;
        let key = String::from_utf8_lossy(attr.key.as_ref());
        if let Some(h) = hit("xml", format!("/{}/@{key}", stack.join("/")), &value) {
            return Ok(Some(h));
        }
    }
    Ok(None)
}

/// How a body of this media type is read; `None` for types that are not inspected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyKind {
    Form,
    Json,
    Xml,
    Multipart,
    Text,
}

fn body_kind(essence: &str) -> Option<BodyKind> {
    if essence == "application/x-www-form-urlencoded" {
        Some(BodyKind::Form)
    } else if media::is_json(essence) {
        Some(BodyKind::Json)
    } else if essence == "application/xml" || essence == "text/xml" || essence.ends_with("+xml") {
        Some(BodyKind::Xml)
    } else if essence == "multipart/form-data" {
        Some(BodyKind::Multipart)
    } else if essence == "text/plain" || essence.is_empty() {
        Some(BodyKind::Text)
    } else {
        None
    }
}

/// A body of the given `Content-Type` (`""` when absent), its content coding already undone;
/// its charset is converted to UTF-8 here ([`decode::text`]). A body that claims a type it does
/// not have (JSON that does not parse, XML that is not well-formed, a multipart body without
/// its boundaries) is tested as one text, so that what a lenient backend reads is still seen.
/// A multipart part without a filename is a field, tested as text whatever its type; a file of
/// a type that is not read is skipped. `Err` when a charset cannot be decoded.
fn scan_body(content_type: &str, body: &[u8], depth: u8) -> Result<Option<Hit>, DecodeError> {
    if body.is_empty() {
        return Ok(None);
    }
    let essence = media::essence_cow(content_type);
    let Some(kind) = body_kind(&essence) else {
        return Ok(None);
    };
    let text_kind = match kind {
        BodyKind::Json => TextKind::Json,
        BodyKind::Xml => TextKind::Xml,
        _ => TextKind::Text,
    };
    let body = decode::text(content_type, text_kind, Cow::Borrowed(body))?;
    let body = &*body;
    let as_text = || hit("body", "", &String::from_utf8_lossy(body));
    Ok(match kind {
        BodyKind::Form => scan_pairs("form", body),
        BodyKind::Json => match serde_json::from_slice::<serde_json::Value>(body) {
            Ok(v) => scan_json(&v, &mut String::from("$")),
            Err(_) => as_text(),
        },
        BodyKind::Xml => scan_xml(body).unwrap_or_else(|Unreadable| as_text()),
        BodyKind::Multipart => {
            let parts = turnpike_openapi::multipart::boundary(content_type)
                .and_then(|b| turnpike_openapi::multipart::parse(body, &b));
            match parts {
                Ok(parts) => {
                    for p in &parts {
                        if let Some(h) = scan_part(p, depth)? {
                            return Ok(Some(h));
                        }
                    }
                    None
                }
                Err(_) => as_text(),
            }
        }
        BodyKind::Text => as_text(),
    })
}

/// One part of a multipart body: its name, then its content (see [`scan_body`]).
fn scan_part(
    p: &turnpike_openapi::multipart::Part<'_>,
    depth: u8,
) -> Result<Option<Hit>, DecodeError> {
    if let Some(h) = hit("multipart", p.name.clone(), &p.name) {
        return Ok(Some(h));
    }
    // A part's own type decides how it is read (a field is text/plain); a multipart part
    // inside a part is not followed further. A field of a type that is not read (an
    // `application/octet-stream` value without a filename) is still a value a backend reads.
    let mut ct: Cow<'_, str> = Cow::Borrowed(p.content_type.as_deref().unwrap_or("text/plain"));
    let essence = media::essence_cow(&ct);
    if depth > 0 && essence == "multipart/form-data" {
        return Ok(None);
    }
    if p.filename.is_none() && body_kind(&essence).is_none() {
        ct = Cow::Owned(match decode::charset(&ct) {
            Some(c) => format!("text/plain; charset={c}"),
            None => "text/plain".to_owned(),
        });
    }
    let Some(found) = scan_body(&ct, p.body, depth + 1)? else {
        return Ok(None);
    };
    Ok(Some(match found.place {
        "body" => Hit {
            place: "multipart",
            name: p.name.clone(),
            fingerprint: found.fingerprint,
        },
        _ => found,
    }))
}

/// Every header's value, and the names and values of the cookies.
fn scan_headers(headers: &http::HeaderMap) -> Option<Hit> {
    headers.iter().find_map(|(name, value)| {
        let value = String::from_utf8_lossy(value.as_bytes());
        if name == http::header::COOKIE {
            value.split(';').find_map(|c| {
                let (k, v) = c.split_once('=').unwrap_or((c, ""));
                let (k, v) = (k.trim(), v.trim());
                hit("cookie", k, k).or_else(|| hit("cookie", k, v))
            })
        } else {
            hit("header", name.as_str(), &value)
        }
    })
}

impl SqlInjectionProtection {
    /// The first hit in what the policy inspects, in the order path, query, headers, body
    /// (its content coding undone by [`decode::content`]); `Err` when the body cannot be
    /// decoded, which is refused rather than let through uninspected.
    pub(crate) fn find(&self, ex: &Exchange) -> Result<Option<Hit>, DecodeError> {
        let uri = &ex.request.uri;
        if self.path {
            if let Some(h) = scan_path(uri.path()) {
                return Ok(Some(h));
            }
        }
        if self.query {
            if let Some(h) = scan_pairs("query", uri.query().unwrap_or("").as_bytes()) {
                return Ok(Some(h));
            }
        }
        if self.headers {
            if let Some(h) = scan_headers(&ex.request.headers) {
                return Ok(Some(h));
            }
        }
        if self.body {
            let ct: Cow<'_, str> = ex
                .request
                .headers
                .get(http::header::CONTENT_TYPE)
                .map_or(Cow::Borrowed(""), |v| String::from_utf8_lossy(v.as_bytes()));
            if let Some(body) = ex.request_bytes() {
                let body = decode::content(&ex.request.headers, body)?;
                return scan_body(&ct, &body, 0);
            }
        }
        Ok(None)
    }
}

impl Policy for SqlInjectionProtection {
    fn name(&self) -> &'static str {
        "sqlInjectionProtection"
    }

    fn body_need(&self) -> BodyNeed {
        if self.body {
            BodyNeed::Buffer
        } else {
            BodyNeed::None
        }
    }

    /// Tests what the settings name; continues when nothing looks like SQL injection or
    /// `onDetect` is `log`, else rejects with 400 `sql-injection`.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let h = match self.find(ex) {
            Ok(Some(h)) => h,
            Ok(None) => return Outcome::Continue,
            Err(e) => {
                let request_id = ex.request_id.to_str().unwrap_or("");
                tracing::info!(request_id, error = %e, "sqlInjectionProtection: body refused");
                return Outcome::Reject(e.problem());
            }
        };
        let request_id = ex.request_id.to_str().unwrap_or("");
        tracing::warn!(
            request_id,
            place = h.place,
            name = %h.name,
            fingerprint = %h.fingerprint,
            blocked = self.on_detect == OnDetect::Block,
            "sqlInjectionProtection: SQL injection {}",
            h.describe()
        );
        match self.on_detect {
            OnDetect::Log => Outcome::Continue,
            OnDetect::Block => {
                let mut p = Problem::new(&problems::SQL_INJECTION)
                    .with_detail(format!("SQL injection {}", h.describe()))
                    .with_member("in", h.place.into());
                if !h.name.is_empty() {
                    p = p.with_member("name", h.name.into());
                }
                Outcome::Reject(p)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{exchange, plain};

    fn policy(v: serde_json::Value) -> SqlInjectionProtection {
        let s: SqlInjectionProtectionSettings = serde_json::from_value(v).unwrap();
        SqlInjectionProtection::compile(s, &plain()).unwrap()
    }

    fn default() -> SqlInjectionProtection {
        policy(serde_json::json!({}))
    }

    fn found(
        p: &SqlInjectionProtection,
        uri: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Option<(String, String)> {
        let ex = exchange("POST", uri, headers, body);
        p.find(&ex).unwrap().map(|h| (h.place.to_owned(), h.name))
    }

    fn at(place: &str, name: &str) -> Option<(String, String)> {
        Some((place.to_owned(), name.to_owned()))
    }

    #[test]
    fn libinjection_tells_injection_from_ordinary_text() {
        for attack in [
            "1' OR '1'='1",
            "1 UNION SELECT password FROM users--",
            "'; DROP TABLE users; --",
            "admin'--",
            "1; waitfor delay '0:0:5'--",
            "1) or (1=1",
            "-1 union all select 1,2,3",
        ] {
            assert!(sqli(attack).is_some(), "{attack}");
        }
        for benign in [
            "hello world",
            "O'Reilly",
            "It's 5 o'clock",
            "john@example.com",
            "select a product",
            "Bob's \"best\" price: 1.5",
            "Mozilla/5.0 (X11; Linux x86_64)",
            "",
        ] {
            assert_eq!(sqli(benign), None, "{benign}");
        }
    }

    #[test]
    fn path_and_query_are_decoded_and_tested() {
        let p = default();
        assert_eq!(
            found(&p, "/shop/products/7?limit=10&q=O%27Reilly", &[], ""),
            None
        );
        assert_eq!(
            found(&p, "/shop/products/1%27%20OR%20%271%27%3D%271", &[], ""),
            at("path", "3")
        );
        assert_eq!(
            found(&p, "/products?id=1%27+OR+%271%27%3D%271", &[], ""),
            at("query", "id")
        );
        // A parameter's name counts as well.
        assert_eq!(
            found(&p, "/products?1%27+OR+%271%27%3D%271=x", &[], ""),
            at("query", "1' OR '1'='1")
        );
        let off = policy(serde_json::json!({"inspectQuery": false, "inspectPath": false}));
        assert_eq!(
            found(
                &off,
                "/a%27%20OR%20%271%27%3D%271?id=1%27+OR+%271%27%3D%271",
                &[],
                ""
            ),
            None
        );
    }

    #[test]
    fn bodies_are_read_by_their_content_type() {
        let p = default();
        let form = [("content-type", "application/x-www-form-urlencoded")];
        assert_eq!(found(&p, "/", &form, "name=Ann&note=It%27s+fine"), None);
        assert_eq!(
            found(&p, "/", &form, "name=admin%27--&x=1"),
            at("form", "name")
        );
        let json = [("content-type", "application/json; charset=utf-8")];
        assert_eq!(
            found(
                &p,
                "/",
                &json,
                r#"{"name":"O'Reilly","tags":["a","b"],"n":1}"#
            ),
            None
        );
        assert_eq!(
            found(
                &p,
                "/",
                &json,
                r#"{"user":{"names":["Ann","x' or 'a'='a"]}}"#
            ),
            at("json", "$.user.names[1]")
        );
        assert_eq!(
            found(
                &p,
                "/",
                &json,
                r#"{"1 UNION SELECT password FROM users--":1}"#
            ),
            at("json", "$.1 UNION SELECT password FROM users--")
        );
        // JSON that does not parse is tested as one text.
        assert_eq!(found(&p, "/", &json, "1 or 1=1"), at("body", ""));
        let xml = [("content-type", "application/xml")];
        assert_eq!(
            found(
                &p,
                "/",
                &xml,
                "<order id=\"7\"><item>Apple &amp; Pear</item></order>"
            ),
            None
        );
        assert_eq!(
            found(
                &p,
                "/",
                &xml,
                "<order><item>1&apos; OR &apos;1&apos;=&apos;1</item></order>"
            ),
            at("xml", "/order/item")
        );
        assert_eq!(
            found(
                &p,
                "/",
                &xml,
                "<order><item id=\"1 UNION SELECT 1,2--\"/></order>"
            ),
            at("xml", "/order/item/@id")
        );
        assert_eq!(
            found(
                &p,
                "/",
                &xml,
                "<order><![CDATA['; DROP TABLE users; --]]></order>"
            ),
            at("xml", "/order")
        );
        let text = [("content-type", "text/plain")];
        assert_eq!(found(&p, "/", &text, "admin'--"), at("body", ""));
        assert_eq!(found(&p, "/", &[], "admin'--"), at("body", ""));
        // Binary and other types are not read.
        let bin = [("content-type", "application/octet-stream")];
        assert_eq!(found(&p, "/", &bin, "admin'--"), None);
        let off = policy(serde_json::json!({"inspectBody": false}));
        assert_eq!(off.body_need(), BodyNeed::None);
        assert_eq!(default().body_need(), BodyNeed::Buffer);
    }

    #[test]
    fn multipart_fields_are_tested_by_their_own_type() {
        let p = default();
        let ct = [("content-type", "multipart/form-data; boundary=XyZ")];
        let body = |name: &str, part_ct: &str, value: &str| {
            format!(
                "--XyZ\r\nContent-Disposition: form-data; name=\"ok\"\r\n\r\nfine\r\n\
                 --XyZ\r\nContent-Disposition: form-data; name=\"{name}\"\r\n{part_ct}\r\n{value}\r\n--XyZ--\r\n"
            )
        };
        assert_eq!(found(&p, "/", &ct, &body("q", "", "O'Reilly")), None);
        assert_eq!(
            found(&p, "/", &ct, &body("q", "", "admin'--")),
            at("multipart", "q")
        );
        assert_eq!(
            found(
                &p,
                "/",
                &ct,
                &body(
                    "doc",
                    "Content-Type: application/json\r\n",
                    r#"{"a":"1 or 1=1"}"#
                )
            ),
            at("json", "$.a")
        );
        assert_eq!(
            found(
                &p,
                "/",
                &ct,
                &body("f", "Content-Type: image/png\r\n", "admin'--")
            ),
            at("multipart", "f"),
            "a field without a filename is a value whatever its type"
        );
        assert_eq!(
            found(
                &p,
                "/",
                &ct,
                &body(
                    "f\"; filename=\"a.png",
                    "Content-Type: image/png\r\n",
                    "admin'--"
                )
            ),
            None
        );
        // Without its boundaries the body is one text.
        assert_eq!(found(&p, "/", &ct, "admin'--"), at("body", ""));
    }

    #[test]
    fn headers_and_cookies_only_when_asked() {
        let h = [
            ("user-agent", "1' OR '1'='1"),
            ("content-type", "text/plain"),
        ];
        assert_eq!(found(&default(), "/", &h, ""), None);
        let p = policy(serde_json::json!({"inspectHeaders": true}));
        assert_eq!(found(&p, "/", &h, ""), at("header", "user-agent"));
        let c = [("cookie", "theme=dark; SESSION=x' or 'a'='a")];
        assert_eq!(found(&p, "/", &c, ""), at("cookie", "SESSION"));
        assert_eq!(
            found(&p, "/", &[("cookie", "theme=dark; lang=de")], ""),
            None
        );
    }

    #[test]
    fn block_answers_400_and_log_lets_through() {
        let mut ex = exchange("GET", "/p?id=1%27+OR+%271%27%3D%271", &[], "");
        match default().on_request(&mut ex) {
            Outcome::Reject(pr) => {
                assert_eq!(pr.status, 400);
                assert_eq!(pr.kind(), "sql-injection");
                assert_eq!(
                    pr.detail.as_deref(),
                    Some("SQL injection in the query parameter `id`")
                );
                let j = pr.to_json();
                assert_eq!(j["in"], "query");
                assert_eq!(j["name"], "id");
            }
            other => panic!("{other:?}"),
        }
        let log = policy(serde_json::json!({"onDetect": "log"}));
        assert!(matches!(log.on_request(&mut ex), Outcome::Continue));
        let mut clean = exchange("GET", "/p?id=7", &[], "");
        assert!(matches!(
            default().on_request(&mut clean),
            Outcome::Continue
        ));
    }

    fn found_in_bytes(
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Result<Option<(String, String)>, DecodeError> {
        let mut ex = exchange("POST", "/", headers, "");
        ex.request_body = turnpike_core::Body::full(body);
        default()
            .find(&ex)
            .map(|h| h.map(|h| (h.place.to_owned(), h.name)))
    }

    #[test]
    fn encoded_bodies_are_decoded_before_they_are_tested() {
        use std::io::Write;
        let json = r#"{"q":"1' OR '1'='1"}"#;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(json.as_bytes()).unwrap();
        let gz = gz.finish().unwrap();
        let ct = ("content-type", "application/json");
        assert_eq!(
            found_in_bytes(&[ct, ("content-encoding", "gzip")], gz.clone()),
            Ok(at("json", "$.q"))
        );
        let utf16: Vec<u8> = json.encode_utf16().flat_map(u16::to_le_bytes).collect();
        assert_eq!(found_in_bytes(&[ct], utf16.clone()), Ok(at("json", "$.q")));
        assert_eq!(
            found_in_bytes(
                &[("content-type", "application/json; charset=utf-16le")],
                utf16
            ),
            Ok(at("json", "$.q"))
        );
        let utf32: Vec<u8> = json
            .chars()
            .flat_map(|c| (c as u32).to_be_bytes())
            .collect();
        assert_eq!(found_in_bytes(&[ct], utf32), Ok(at("json", "$.q")));
        // What cannot be decoded is refused, never let through.
        let e = found_in_bytes(&[ct, ("content-encoding", "compress")], gz).unwrap_err();
        assert_eq!(e.problem().status, http::StatusCode::UNSUPPORTED_MEDIA_TYPE);
        let e = found_in_bytes(
            &[("content-type", "text/plain; charset=nope")],
            b"x".to_vec(),
        )
        .unwrap_err();
        assert!(matches!(e, DecodeError::Undecodable(_)));
    }

    #[test]
    fn a_multipart_field_of_any_type_is_tested() {
        let body = "--b\r\nContent-Disposition: form-data; name=\"id\"\r\n\
                    Content-Type: application/octet-stream\r\n\r\n1' OR '1'='1\r\n--b--\r\n";
        let ct = ("content-type", "multipart/form-data; boundary=b");
        assert_eq!(
            found_in_bytes(&[ct], body.as_bytes().to_vec()),
            Ok(at("multipart", "id"))
        );
        // A file of a type that is not read stays a file.
        let file = body.replace("name=\"id\"", "name=\"id\"; filename=\"a.bin\"");
        assert_eq!(found_in_bytes(&[ct], file.into_bytes()), Ok(None));
    }

    proptest::proptest! {
        /// Any body, under any of the types that are read, is tested without a panic.
        #[test]
        fn any_body_is_read(body in proptest::collection::vec(proptest::num::u8::ANY, 0..300), kind in 0usize..6) {
            let ct = ["application/json", "application/xml", "application/x-www-form-urlencoded",
                      "multipart/form-data; boundary=b", "text/plain", ""][kind];
            let _ = scan_body(ct, &body, 0);
        }

        /// A value that libinjection calls SQL injection is found wherever it is put.
        #[test]
        fn an_injection_is_found_in_any_json_field(name in "[a-z]{1,8}", depth in 0usize..4) {
            let mut v = serde_json::json!("1 UNION SELECT password FROM users--");
            let mut path = String::from("$");
            for _ in 0..depth {
                v = serde_json::json!({ name.clone(): v });
                path.push('.');
                path.push_str(&name);
            }
            let body = v.to_string();
            let hit = scan_body("application/json", body.as_bytes(), 0).unwrap().unwrap();
            proptest::prop_assert_eq!(hit.place, "json");
            proptest::prop_assert_eq!(hit.name, path);
        }
    }

    #[test]
    fn settings_errors() {
        let parse =
            |v: serde_json::Value| serde_json::from_value::<SqlInjectionProtectionSettings>(v);
        assert!(parse(serde_json::json!({"onDetect": "drop"})).is_err());
        assert!(parse(serde_json::json!({"paranoia": 1})).is_err());
        let compile = |v| {
            SqlInjectionProtection::compile(parse(v).unwrap(), &plain())
                .map(|_| ())
                .map_err(|e| (e.key, e.message))
        };
        let (key, msg) = compile(serde_json::json!({"level": 2})).unwrap_err();
        assert_eq!(key, "level");
        assert!(msg.contains("paranoia level 2 is not supported"), "{msg}");
        assert_eq!(
            compile(serde_json::json!({"level": 0})).unwrap_err().0,
            "level"
        );
        assert!(compile(serde_json::json!({
            "inspectPath": false, "inspectQuery": false, "inspectBody": false
        }))
        .is_err());
        assert!(compile(
            serde_json::json!({"level": 1, "onDetect": "block", "inspectHeaders": false})
        )
        .is_ok());
    }
}
