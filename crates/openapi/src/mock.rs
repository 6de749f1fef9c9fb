//! Answers from the spec (`openapi: - mock: true`): an operation's response built from its
//! declaration, without a backend. The status is the operation's first success status (2xx, or
//! `default` as 200); the media type the first declared one the request's `Accept` takes; the
//! body the media type's `example`, its first `examples` entry, or a value made from its schema
//! (the schema's own examples, enums, defaults and formats are used; objects get every
//! property, arrays one item).

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use serde_json::Value;
use turnpike_core::body::Body;
use turnpike_core::{Exchange, Outcome, Policy};

use crate::spec::{Found, Spec, StatusPattern};

/// The mock step: answers every operation of the spec from its declaration.
pub struct OpenApiMock {
    spec: std::sync::Arc<Spec>,
}

impl OpenApiMock {
    /// The mock of `spec`.
    pub fn new(spec: std::sync::Arc<Spec>) -> Self {
        OpenApiMock { spec }
    }
}

/// Whether `accept` takes media type `media` (`type/subtype`).
fn accepts(accept: &str, media: &str) -> bool {
    accept.split(',').any(|r| {
        let (range, params) = r.split_once(';').unwrap_or((r, ""));
        if params
            .split(';')
            .any(|p| p.trim().replace(' ', "") == "q=0")
        {
            return false;
        }
        let range = range.trim().to_ascii_lowercase();
        range == "*/*"
            || range == media
            || range
                .strip_suffix("/*")
                .is_some_and(|t| media.split('/').next() == Some(t))
    })
}

impl Policy for OpenApiMock {
    fn name(&self) -> &'static str {
        "openapi"
    }

    fn response_needs_request(&self) -> bool {
        false
    }

    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let Found::Op(_, op, _, _) = self.spec.find(&ex.request.method, ex.request.uri.path())
        else {
            // The validator before this step answers unknown paths and methods.
            return Outcome::Continue;
        };
        let mut declared: Vec<(u16, &crate::spec::ResponseDecl)> = op
            .responses
            .iter()
            .map(|r| match r.status {
                StatusPattern::Code(c) => (c, r),
                StatusPattern::Class(c) => (c * 100, r),
                StatusPattern::Default => (200, r),
            })
            .collect();
        declared.sort_by_key(|(c, _)| (!(200..300).contains(c), *c));
        let Some((code, decl)) = declared.first() else {
            let mut r = Response::new(Body::Empty);
            *r.status_mut() = StatusCode::NO_CONTENT;
            return Outcome::Respond(r);
        };
        let status = StatusCode::from_u16(*code).unwrap_or(StatusCode::OK);
        let accept = ex
            .request
            .headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("*/*")
            .to_owned();
        let chosen = decl
            .media
            .iter()
            .filter(|m| !m.range.contains('*'))
            .find(|m| accepts(&accept, &m.range))
            .or_else(|| decl.media.iter().find(|m| !m.range.contains('*')));
        let mut r = match chosen.and_then(|m| m.example.as_ref().map(|e| (m, e))) {
            Some((m, example)) => {
                let text = match example {
                    Value::String(s) if !m.range.contains("json") => s.clone(),
                    other => other.to_string(),
                };
                let mut r = Response::new(Body::full(Bytes::from(text)));
                if let Ok(v) = HeaderValue::from_str(&m.range) {
                    r.headers_mut().insert(header::CONTENT_TYPE, v);
                }
                r
            }
            None => Response::new(Body::Empty),
        };
        *r.status_mut() = status;
        r.headers_mut()
            .insert("x-turnpike-mock", HeaderValue::from_static("true"));
        Outcome::Respond(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_ranges() {
        assert!(accepts("application/json", "application/json"));
        assert!(accepts("text/*, application/xml;q=0.5", "application/xml"));
        assert!(accepts("*/*", "image/png"));
        assert!(!accepts("application/xml", "application/json"));
        assert!(!accepts("application/json;q=0", "application/json"));
    }
}
