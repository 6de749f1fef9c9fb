//! `json2Xml` and `xml2Json`: Membrane's policies that convert the body of the message in the
//! phase they run in between JSON and XML, by the rules of org.json that Membrane uses, but
//! keeping the document order of members and elements. A message of another content type
//! (or without a body, or with a compressed one) passes unchanged; a body that cannot be
//! converted is refused with `bad-json` / `bad-xml` (400 for requests, 502 for the backend's
//! responses).

mod text;
mod to_json;
mod to_xml;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, StatusCode};
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_config::units::Flag;
use turnpike_core::{problems, PolicyFactory, Problem};
use turnpike_core::{Body, BodyNeed, CompileContext, CompileError, Exchange, Outcome, Policy};

use crate::err;
use to_json::{Options, XmlError};
use to_xml::JsonError;

/// `json2Xml`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Json2XmlSettings {
    /// The name of the root element: it wraps the object, or holds the array's `item`s.
    /// Without it, an object with one member (not an array) is that member's element, other
    /// objects are wrapped in `root`, and arrays in `array`.
    #[serde(default)]
    pub root: Option<String>,
}

/// The compiled `json2Xml` policy: in each phase it stands in, replaces a JSON body (by its
/// `Content-Type`) with the XML document for it, or answers `bad-json`.
#[derive(Debug)]
pub struct Json2Xml {
    root: Option<String>,
}

impl PolicyFactory for Json2Xml {
    const NAME: &'static str = "json2Xml";
    type Settings = Json2XmlSettings;

    /// Compiles the policy; a `root` that is not an XML element name is a load error.
    fn compile(c: Json2XmlSettings, _: &CompileContext<'_>) -> Result<Self, CompileError> {
        if let Some(r) = &c.root {
            if !text::is_xml_name(r) {
                return Err(err("root", format!("`{r}` is not an XML element name")));
            }
        }
        Ok(Json2Xml { root: c.root })
    }
}

/// `xml2Json`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Xml2JsonSettings {
    /// Keep every text and attribute value a JSON string (default `false`: `true`, `false`,
    /// `null` and numbers become JSON values).
    #[serde(default)]
    pub keep_string: Option<Flag>,
    /// An element with `xsi:nil="true"` becomes `null` (default `true`).
    #[serde(default)]
    pub convert_nil_attribute_to_null: Option<Flag>,
    /// Element names (with their prefix, as written: `ns:item`) whose values are always JSON
    /// arrays, even when the element occurs once.
    #[serde(default)]
    pub force_list: Vec<String>,
}

/// The compiled `xml2Json` policy: in each phase it stands in, replaces an XML body (by its
/// `Content-Type`) with the JSON text for it, or answers `bad-xml`.
#[derive(Debug)]
pub struct Xml2Json {
    opts: Options,
}

impl PolicyFactory for Xml2Json {
    const NAME: &'static str = "xml2Json";
    type Settings = Xml2JsonSettings;

    /// Compiles the policy; a `forceList` entry that is not an element name is a load error.
    fn compile(c: Xml2JsonSettings, _: &CompileContext<'_>) -> Result<Self, CompileError> {
        for (i, name) in c.force_list.iter().enumerate() {
            if !text::is_name(name) {
                return Err(err(
                    &format!("forceList[{i}]"),
                    format!("`{name}` is not an XML element name"),
                ));
            }
        }
        Ok(Xml2Json {
            opts: Options {
                keep_strings: c.keep_string.is_some_and(|f| f.0),
                nil_to_null: c.convert_nil_attribute_to_null.is_none_or(|f| f.0),
                force_list: c.force_list.into_iter().collect(),
            },
        })
    }
}

/// The `Content-Type` of a message, lower-cased, without parameters.
fn essence(headers: &HeaderMap) -> Option<String> {
    let ct = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    Some(ct.split(';').next()?.trim().to_ascii_lowercase())
}

/// Membrane's `isJSON()`: `application/json`, `*/json` and `*+json`.
fn is_json(headers: &HeaderMap) -> bool {
    essence(headers).is_some_and(|t| t.ends_with("/json") || t.ends_with("+json"))
}

/// Membrane's `isXML()`: `text/xml`, `application/xml`, `*/xml` and `*+xml`.
fn is_xml(headers: &HeaderMap) -> bool {
    essence(headers).is_some_and(|t| t.ends_with("/xml") || t.ends_with("+xml"))
}

/// The `charset` parameter of the `Content-Type`, unquoted.
fn charset(headers: &HeaderMap) -> Option<String> {
    let ct = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    ct.split(';').skip(1).find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("charset")
            .then(|| v.trim().trim_matches('"').to_owned())
    })
}

/// Which message a policy works on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Request,
    Response,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Request => "request",
            Phase::Response => "response",
        }
    }

    /// The status of a refusal: the client's body is its mistake (400), the backend's is the
    /// backend's (502).
    fn status(self) -> StatusCode {
        match self {
            Phase::Request => StatusCode::BAD_REQUEST,
            Phase::Response => StatusCode::BAD_GATEWAY,
        }
    }
}

/// The headers and buffered body of the message `phase` names; `None` when it has no body,
/// or a compressed one (`Content-Encoding` other than `identity`), which passes unchanged.
fn message(ex: &Exchange, phase: Phase) -> Option<(&HeaderMap, &Bytes)> {
    let (headers, body) = match phase {
        Phase::Request => (&ex.request.headers, ex.request_bytes()?),
        Phase::Response => (ex.response.as_ref()?.headers(), ex.response_bytes()?),
    };
    let encoded = headers
        .get_all(header::CONTENT_ENCODING)
        .iter()
        .any(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
    (!encoded && !body.is_empty()).then_some((headers, body))
}

/// Replaces the body of the message `phase` names, with its `Content-Type`.
fn replace(ex: &mut Exchange, phase: Phase, body: String, content_type: &'static str) {
    let headers = match phase {
        Phase::Request => {
            ex.request_body = Body::full(Bytes::from(body));
            turnpike_core::json::forget_request_json(ex);
            ex.extensions.remove::<turnpike_core::BodyInspected>();
            &mut ex.request.headers
        }
        Phase::Response => {
            turnpike_core::json::forget_response_json(ex);
            let Some(res) = ex.response.as_mut() else {
                return;
            };
            *res.body_mut() = Body::full(Bytes::from(body));
            res.headers_mut()
        }
    };
    headers.remove(header::CONTENT_LENGTH);
    headers.remove(header::TRANSFER_ENCODING);
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
}

/// Logs why a body was refused (the library's words stay in the log) and builds the problem.
fn refuse(
    ex: &Exchange,
    policy: &'static str,
    phase: Phase,
    problem: Problem,
    why: &str,
) -> Outcome {
    let request_id = ex.request_id.to_str().unwrap_or("");
    match phase {
        Phase::Request => {
            tracing::info!(
                policy,
                request_id,
                phase = phase.name(),
                "refused the body: {why}"
            );
        }
        Phase::Response => {
            tracing::warn!(
                policy,
                request_id,
                phase = phase.name(),
                "refused the backend's body: {why}"
            );
        }
    }
    Outcome::Reject(problem.with_status(phase.status()))
}

impl Json2Xml {
    /// Converts the JSON body of the message `phase` names to XML (`application/xml`); other
    /// messages pass unchanged.
    fn run(&self, ex: &mut Exchange, phase: Phase) -> Outcome {
        let Some((headers, body)) = message(ex, phase) else {
            return Outcome::Continue;
        };
        if !is_json(headers) {
            return Outcome::Continue;
        }
        match to_xml::convert(body, self.root.as_deref()) {
            Ok(xml) => {
                replace(ex, phase, xml, "application/xml");
                Outcome::Continue
            }
            Err(e) => {
                let (detail, why) = match &e {
                    JsonError::Invalid {
                        message,
                        line,
                        column,
                    } => (
                        format!("the body is not valid JSON (line {line}, column {column})"),
                        message.clone(),
                    ),
                    JsonError::DuplicateKey => (
                        "an object of the JSON body has the same key twice".to_owned(),
                        "duplicate key".to_owned(),
                    ),
                    JsonError::Scalar(kind) => (
                        format!("a JSON {kind} cannot be converted to XML: the body must be an object or an array"),
                        format!("a JSON {kind}"),
                    ),
                };
                let problem = Problem::new(&problems::BAD_JSON).with_detail(detail);
                refuse(ex, "json2Xml", phase, problem, &why)
            }
        }
    }
}

impl Policy for Json2Xml {
    fn name(&self) -> &'static str {
        "json2Xml"
    }

    fn body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    fn response_body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    fn response_needs_request(&self) -> bool {
        false
    }

    /// Converts a JSON request body to XML; refuses (400) a JSON body it cannot convert.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        self.run(ex, Phase::Request)
    }

    /// Converts a JSON response body to XML; refuses (502) a JSON body it cannot convert.
    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        self.run(ex, Phase::Response)
    }
}

impl Xml2Json {
    /// Converts the XML body of the message `phase` names to JSON
    /// (`application/json; charset=utf-8`); other messages pass unchanged.
    fn run(&self, ex: &mut Exchange, phase: Phase) -> Outcome {
        let Some((headers, body)) = message(ex, phase) else {
            return Outcome::Continue;
        };
        if !is_xml(headers) {
            return Outcome::Continue;
        }
        match to_json::convert(body, charset(headers).as_deref(), &self.opts) {
            Ok(json) => {
                replace(ex, phase, json, "application/json; charset=utf-8");
                Outcome::Continue
            }
            Err(e) => {
                let (detail, why) = match &e {
                    XmlError::Encoding(label) => (
                        "the body's character encoding is not supported (UTF-8, UTF-16, ISO-8859-1, windows-1252 and US-ASCII are)".to_owned(),
                        format!("unsupported encoding {label:?}"),
                    ),
                    XmlError::NotText => (
                        "the body is not valid in its character encoding".to_owned(),
                        "invalid bytes for the character encoding".to_owned(),
                    ),
                    XmlError::Malformed { message, offset } => (
                        "the body is not well-formed XML".to_owned(),
                        format!("{message} (at byte {offset} of the decoded text)"),
                    ),
                    XmlError::Entity => (
                        "the XML body refers to an entity other than the predefined ones (&amp; &lt; &gt; &quot; &apos;)".to_owned(),
                        "undeclared or DTD entity".to_owned(),
                    ),
                    XmlError::TooDeep => (
                        format!("the XML body nests elements deeper than {}", to_json::MAX_DEPTH),
                        "too deep".to_owned(),
                    ),
                };
                let problem = Problem::new(&problems::BAD_XML).with_detail(detail);
                refuse(ex, "xml2Json", phase, problem, &why)
            }
        }
    }
}

impl Policy for Xml2Json {
    fn name(&self) -> &'static str {
        "xml2Json"
    }

    fn body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    fn response_body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    fn response_needs_request(&self) -> bool {
        false
    }

    /// Converts an XML request body to JSON; refuses (400) an XML body it cannot convert.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        self.run(ex, Phase::Request)
    }

    /// Converts an XML response body to JSON; refuses (502) an XML body it cannot convert.
    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        self.run(ex, Phase::Response)
    }
}

#[cfg(test)]
mod tests;
