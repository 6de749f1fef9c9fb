//! Validation of requests and responses against a compiled operation. Every violation is
//! collected (not only the first) with its location: `path.id`, `query.limit`, `header.x-a`,
//! `cookie.sid`, `header.content-type`, `#/body/price`, `status`.

use http::header;
use serde_json::Value;
use turnpike_core::decode::{DecodeError, TextKind};
use turnpike_core::json::{self, JsonBodyError};
use turnpike_core::Exchange;

use crate::media::essence_cow;
pub use crate::media::is_json;
use crate::multipart;
use crate::params::{self, Location, Param, Shape};
use crate::schema::Schema;
use crate::spec::{Media, Operation, StatusPattern};
pub use crate::violation::Violation;

/// The result of validating a request.
#[derive(Debug, Default)]
pub struct Report {
    /// Every violation found.
    pub violations: Vec<Violation>,
    /// The body's media type is not accepted, or its coding or charset cannot be undone (415
    /// rather than 400).
    pub unsupported_media_type: bool,
    /// The body decodes to more than the gateway inspects (413 rather than 400).
    pub too_large: bool,
}

impl Report {
    /// Records a body that cannot be decoded for validation.
    fn undecodable(&mut self, e: &turnpike_core::decode::DecodeError) {
        match e {
            turnpike_core::decode::DecodeError::TooLarge(_) => self.too_large = true,
            turnpike_core::decode::DecodeError::Undecodable(_) => {
                self.unsupported_media_type = true
            }
        }
        self.violations
            .push(Violation::new("#/body", e.to_string()));
    }
}

pub(crate) fn schema_errors(schema: &Schema, value: &Value, base: &str, out: &mut Vec<Violation>) {
    if schema.validator.is_valid(value) {
        return;
    }
    for e in schema.validator.iter_errors(value) {
        let ptr = e.instance_path().as_str().to_owned();
        let location = if base.starts_with('#') {
            format!("{base}{ptr}")
        } else if ptr.is_empty() {
            base.to_owned()
        } else {
            format!("{base}{ptr}")
        };
        let message = if is_forbidden_property(&e) {
            let name = ptr.rsplit('/').next().unwrap_or("");
            format!("`{name}` is read-only or write-only: it must not be sent in this direction")
        } else if let Some(m) = discriminator_message(&e) {
            m
        } else {
            shorten(e.to_string())
        };
        let v = Violation::new(location, message);
        // A base schema is checked both where it is used and inside the selected subtype.
        if !out.contains(&v) {
            out.push(v);
        }
    }
}

/// Messages quote the offending value; a huge value is cut so that the answer stays small.
fn shorten(mut m: String) -> String {
    const MAX: usize = 300;
    if m.len() > MAX {
        let mut end = MAX;
        while !m.is_char_boundary(end) {
            end -= 1;
        }
        m.truncate(end);
        m.push('…');
    }
    m
}

/// The message for an unknown discriminator value: the error of the `not` around the check that
/// [`crate::discriminator`] marks.
fn discriminator_message(e: &jsonschema::ValidationError<'_>) -> Option<String> {
    let jsonschema::error::ValidationErrorKind::Not { schema } = e.kind() else {
        return None;
    };
    let prop = schema.get(crate::convert::DISCRIMINATOR)?.as_str()?;
    let known: Vec<String> = schema
        .pointer("/not/enum")?
        .as_array()?
        .iter()
        .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
        .collect();
    Some(shorten(format!(
        "{} is not a known value of the discriminator `{prop}` (known: {})",
        e.instance(),
        known.join(", ")
    )))
}

/// True for the error of a property replaced by `convert` because of `readOnly`/`writeOnly`:
/// `{"not": {}, "x-turnpike-forbidden": ...}` under `properties`.
fn is_forbidden_property(e: &jsonschema::ValidationError<'_>) -> bool {
    let p = e.schema_path().as_str();
    matches!(e.kind(), jsonschema::error::ValidationErrorKind::Not { schema } if schema.as_object().is_some_and(|o| o.is_empty()))
        && p.ends_with("/not")
        && p.contains("/properties/")
}

/// Validates the request of `ex` against `op`; `params` are the path parameter ranges.
pub fn validate_request(op: &Operation, ex: &mut Exchange) -> Report {
    let mut report = Report::default();
    let mut undecodable = None;
    let out = &mut report.violations;
    let query = if op.has_query {
        ex.request
            .uri
            .query()
            .map(params::parse_query)
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    for p in &op.params {
        let loc = p.label.as_str();
        let value = match p.location {
            Location::Path => Some(p.read_single(ex.param(p.path_index))),
            Location::Query => p.read_query(&query),
            // The whole query string, an empty one when there is none.
            Location::Querystring => match (&p.shape, &p.schema) {
                (Shape::Form(fields), Some(_)) => Some(Ok(params::form_value(
                    ex.request.uri.query().unwrap_or(""),
                    fields,
                ))),
                _ => None,
            },
            Location::Header => {
                let vals: Vec<&str> = ex
                    .request
                    .headers
                    .get_all(p.name.as_str())
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .collect();
                (!vals.is_empty()).then(|| p.read_single(&vals.join(",")))
            }
            Location::Cookie => ex
                .request
                .headers
                .get_all(header::COOKIE)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .find_map(|h| params::cookie(h, &p.name))
                .map(|v| p.read_single(v)),
        };
        check_param(p, value, loc, out);
    }
    if let Some(body) = &op.body {
        let has_body = match ex.request_bytes() {
            Some(b) => !b.is_empty(),
            None => has_body_headers(&ex.request.headers),
        };
        if !has_body {
            if body.required {
                out.push(Violation::new("#/body", "the request body is required"));
            }
        } else {
            let ct = ex
                .request
                .headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(essence_cow);
            match ct.as_deref().and_then(|ct| match_media(&body.media, ct)) {
                None => {
                    report.unsupported_media_type = true;
                    let accepted: Vec<&str> = body.media.iter().map(|m| m.range.as_str()).collect();
                    out.push(Violation::new(
                        "header.content-type",
                        match &ct {
                            Some(ct) => format!(
                                "`{ct}` is not accepted here (accepted: {})",
                                accepted.join(", ")
                            ),
                            None => format!(
                                "a body needs a Content-Type (accepted: {})",
                                accepted.join(", ")
                            ),
                        },
                    ));
                }
                Some(media) => {
                    if let (Some(schema), Some(fields)) = (&media.schema, &media.form) {
                        let decoded = ex.request_bytes().map(|b| {
                            turnpike_core::decode::body(&ex.request.headers, TextKind::Text, b)
                        });
                        match decoded {
                            Some(Ok(b)) => {
                                let v = params::form_value(&String::from_utf8_lossy(&b), fields);
                                schema_errors(schema, &v, "#/body", out);
                            }
                            Some(Err(e)) => undecodable = Some(e),
                            None => {}
                        }
                    } else if let (Some(schema), Some(fields)) = (&media.schema, &media.parts) {
                        if let Err(e) = multipart_body(ex, schema, fields, out) {
                            undecodable = Some(e);
                        }
                    } else if let (Some(schema), true) =
                        (&media.schema, ct.as_deref().is_some_and(is_json))
                    {
                        match json::request_json(ex) {
                            Ok(v) => schema_errors(schema, &v, "#/body", out),
                            Err(JsonBodyError::Invalid(m)) => {
                                out.push(Violation::new("#/body", format!("not valid JSON: {m}")))
                            }
                            Err(JsonBodyError::Undecodable(e)) => undecodable = Some(e),
                            Err(JsonBodyError::NoBody) => {}
                        }
                    }
                }
            }
        }
    }
    if let Some(e) = undecodable {
        report.undecodable(&e);
    }
    report
}

/// Parses a `multipart/form-data` body and validates the form it carries against `schema`.
fn multipart_body(
    ex: &Exchange,
    schema: &Schema,
    fields: &[multipart::Field],
    out: &mut Vec<Violation>,
) -> Result<(), DecodeError> {
    let ct = ex
        .request
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let boundary = match multipart::boundary(ct) {
        Ok(b) => b,
        Err(e) => {
            out.push(Violation::new("header.content-type", e.to_string()));
            return Ok(());
        }
    };
    let Some(body) = ex.request_bytes() else {
        return Ok(());
    };
    let body = turnpike_core::decode::content(&ex.request.headers, body)?;
    match multipart::parse(&body, &boundary) {
        Ok(parts) => {
            let v = multipart::form_value(&parts, fields, out);
            schema_errors(schema, &v, "#/body", out);
        }
        Err(e) => out.push(Violation::new(
            "#/body",
            format!("malformed multipart body: {e}"),
        )),
    }
    Ok(())
}

fn check_param(
    p: &Param,
    value: Option<Result<Value, String>>,
    loc: &str,
    out: &mut Vec<Violation>,
) {
    match value {
        None if p.required => out.push(Violation::new(loc, "the required parameter is missing")),
        None => {}
        Some(Err(m)) => out.push(Violation::new(loc, m)),
        Some(Ok(v)) => {
            if let Some(s) = &p.schema {
                schema_errors(s, &v, loc, out);
            }
        }
    }
}

fn has_body_headers(h: &http::HeaderMap) -> bool {
    h.contains_key(header::TRANSFER_ENCODING)
        || h.get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim() != "0")
}

/// The declared media type that accepts `ct`: exact, then `type/*`, then `*/*`.
pub fn match_media<'m>(media: &'m [Media], ct: &str) -> Option<&'m Media> {
    media
        .iter()
        .find(|m| m.range == ct)
        .or_else(|| {
            let main = ct.split('/').next().unwrap_or("");
            media
                .iter()
                .find(|m| m.range.strip_suffix("/*").is_some_and(|t| t == main))
        })
        .or_else(|| media.iter().find(|m| m.range == "*/*"))
}

/// Validates the response of `ex` (status, content type, JSON body) against `op`.
pub fn validate_response(op: &Operation, ex: &mut Exchange) -> Vec<Violation> {
    let mut out = Vec::new();
    let Some(res) = ex.response.as_ref() else {
        return out;
    };
    let status = res.status().as_u16();
    let decl = op
        .responses
        .iter()
        .find(|r| r.status == StatusPattern::Code(status))
        .or_else(|| {
            op.responses
                .iter()
                .find(|r| r.status == StatusPattern::Class(status / 100))
        })
        .or_else(|| {
            op.responses
                .iter()
                .find(|r| r.status == StatusPattern::Default)
        });
    let Some(decl) = decl else {
        out.push(Violation::new(
            "status",
            format!(
                "status {status} is not declared for {} (declared: {})",
                op.method,
                declared(op)
            ),
        ));
        return out;
    };
    for h in &decl.headers {
        let vals: Vec<&str> = res
            .headers()
            .get_all(h.name.as_str())
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        let value = (!vals.is_empty()).then(|| h.read_single(&vals.join(",")));
        check_param(h, value, &h.label, &mut out);
    }
    if decl.media.is_empty() {
        return out;
    }
    let has_body = match ex.response_bytes() {
        Some(b) => !b.is_empty(),
        None => has_body_headers(res.headers()),
    };
    if !has_body {
        return out;
    }
    let ct = res
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(essence_cow);
    let Some(media) = ct.as_deref().and_then(|ct| match_media(&decl.media, ct)) else {
        let accepted: Vec<&str> = decl.media.iter().map(|m| m.range.as_str()).collect();
        out.push(Violation::new(
            "header.content-type",
            format!(
                "the response's Content-Type {} is not declared for status {status} (declared: {})",
                ct.as_deref()
                    .map_or("(none)".to_owned(), |c| format!("`{c}`")),
                accepted.join(", ")
            ),
        ));
        return out;
    };
    if let (Some(schema), true) = (&media.schema, ct.as_deref().is_some_and(is_json)) {
        match json::response_json(ex) {
            Ok(v) => schema_errors(schema, &v, "#/body", &mut out),
            Err(JsonBodyError::Invalid(m)) => {
                out.push(Violation::new("#/body", format!("not valid JSON: {m}")))
            }
            Err(JsonBodyError::Undecodable(e)) => out.push(Violation::new("#/body", e.to_string())),
            Err(JsonBodyError::NoBody) => {}
        }
    }
    out
}

fn declared(op: &Operation) -> String {
    let v: Vec<String> = op
        .responses
        .iter()
        .map(|r| match r.status {
            StatusPattern::Code(c) => c.to_string(),
            StatusPattern::Class(c) => format!("{c}XX"),
            StatusPattern::Default => "default".into(),
        })
        .collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}
