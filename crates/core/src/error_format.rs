//! How the gateway writes its own error answers for a request: RFC 9457 problem+json, a gRPC
//! status for gRPC requests, or the API's own format (SOAP faults for SOAP APIs). The one place
//! a [`Problem`] becomes a response.

use std::sync::Arc;

use http::{header, HeaderMap, HeaderValue, Response, StatusCode};

use crate::body::Body;
use crate::problem::Problem;

/// An API's own way of writing problems (SOAP faults), chosen when the API is compiled.
pub trait RenderProblem: Send + Sync + std::fmt::Debug {
    /// Renders `problem` for a request with this `Content-Type`.
    fn render(&self, problem: Problem, content_type: Option<&HeaderValue>) -> Response<Body>;
}

/// How the gateway's own answers are written for one request.
#[derive(Debug, Clone, Default)]
pub enum ErrorFormat {
    /// RFC 9457 `application/problem+json`.
    #[default]
    ProblemJson,
    /// A gRPC "trailers-only" answer: HTTP 200 with `grpc-status` and `grpc-message`.
    Grpc,
    /// The API's renderer, with the request's `Content-Type`.
    Api(Arc<dyn RenderProblem>, Option<HeaderValue>),
}

impl ErrorFormat {
    /// The format for a request with these headers: the API's renderer when it has one (known
    /// once the request is routed), else a gRPC status for gRPC requests, else problem+json.
    pub fn of(headers: &HeaderMap, api: Option<&Arc<dyn RenderProblem>>) -> Self {
        let content_type = headers.get(header::CONTENT_TYPE);
        if let Some(r) = api {
            return ErrorFormat::Api(Arc::clone(r), content_type.cloned());
        }
        if content_type.is_some_and(|v| v.as_bytes().starts_with(b"application/grpc")) {
            ErrorFormat::Grpc
        } else {
            ErrorFormat::ProblemJson
        }
    }

    /// Renders `problem` in this format.
    pub fn render(&self, problem: Problem) -> Response<Body> {
        match self {
            ErrorFormat::ProblemJson => problem.into_response(),
            ErrorFormat::Grpc => grpc_error(&problem),
            ErrorFormat::Api(r, ct) => r.render(problem, ct.as_ref()),
        }
    }
}

/// The gRPC status code for an HTTP status the gateway answers with.
fn grpc_code(status: StatusCode) -> u8 {
    match status.as_u16() {
        400 | 413 | 415 | 422 | 431 | 414 => 3, // INVALID_ARGUMENT
        401 => 16,                              // UNAUTHENTICATED
        403 => 7,                               // PERMISSION_DENIED
        404 | 405 => 12,                        // UNIMPLEMENTED
        429 => 8,                               // RESOURCE_EXHAUSTED
        504 => 4,                               // DEADLINE_EXCEEDED
        502 | 503 => 14,                        // UNAVAILABLE
        _ => 13,                                // INTERNAL
    }
}

fn grpc_error(p: &Problem) -> Response<Body> {
    let mut res = Response::new(Body::Empty);
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    h.insert(
        "grpc-status",
        HeaderValue::from(u16::from(grpc_code(p.status))),
    );
    let message = match &p.detail {
        Some(d) => format!("{}: {d}", p.title()),
        None => p.title().to_owned(),
    };
    // grpc-message is percent-encoded (gRPC over HTTP/2 spec).
    if let Ok(v) = HeaderValue::from_str(&percent_encode_grpc(&message)) {
        h.insert("grpc-message", v);
    }
    for (k, v) in &p.headers {
        h.append(k.clone(), v.clone());
    }
    res
}

fn percent_encode_grpc(s: &str) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::types;

    #[test]
    fn grpc_requests_get_a_grpc_status() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/grpc+proto"),
        );
        let f = ErrorFormat::of(&h, None);
        let r = f.render(Problem::new(&types::UNAUTHORIZED).with_detail("no token ü"));
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["grpc-status"], "16");
        assert_eq!(
            r.headers()["grpc-message"],
            "Authentication required: no token %C3%BC"
        );
    }

    #[test]
    fn others_get_problem_json() {
        let f = ErrorFormat::of(&HeaderMap::new(), None);
        let r = f.render(Problem::no_route());
        assert_eq!(r.status(), 404);
        assert_eq!(r.headers()["content-type"], "application/problem+json");
    }
}
