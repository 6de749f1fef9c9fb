//! The JSON body of a message, parsed at most once per exchange and shared by every policy that
//! reads it (OpenAPI validation, JSONPath templates, ...) through the exchange's extensions.

use std::sync::Arc;

use serde_json::Value;

use crate::decode::{self, DecodeError, TextKind};
use crate::exchange::Exchange;

/// Why a message has no JSON value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonBodyError {
    /// The body is empty or was not buffered (no policy of the chain asked for it).
    NoBody,
    /// The body is not valid JSON; the parser's message.
    Invalid(Arc<str>),
    /// The body's coding or charset cannot be undone (see [`crate::decode`]).
    Undecodable(DecodeError),
}

impl std::fmt::Display for JsonBodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JsonBodyError::NoBody => f.write_str("the message has no body"),
            JsonBodyError::Invalid(m) => write!(f, "the body is not valid JSON: {m}"),
            JsonBodyError::Undecodable(e) => e.fmt(f),
        }
    }
}

type Parsed = Result<Arc<Value>, JsonBodyError>;

#[derive(Clone)]
struct RequestJson(Parsed);

#[derive(Clone)]
struct ResponseJson(Parsed);

/// The body parsed after its content coding and charset are undone ([`decode::body`]).
fn parse(headers: &http::HeaderMap, bytes: Option<&bytes::Bytes>) -> Parsed {
    match bytes {
        None => Err(JsonBodyError::NoBody),
        Some(b) if b.is_empty() => Err(JsonBodyError::NoBody),
        Some(b) => {
            let text =
                decode::body(headers, TextKind::Json, b).map_err(JsonBodyError::Undecodable)?;
            serde_json::from_slice(&text)
                .map(Arc::new)
                .map_err(|e| JsonBodyError::Invalid(e.to_string().into()))
        }
    }
}

/// The request body as JSON: parsed on the first call, then taken from the exchange.
/// A policy that changes the request body must call [`forget_request_json`].
pub fn request_json(ex: &mut Exchange) -> Parsed {
    if let Some(RequestJson(p)) = ex.extensions.get::<RequestJson>() {
        return p.clone();
    }
    let p = parse(&ex.request.headers, ex.request_bytes());
    ex.extensions.insert(RequestJson(p.clone()));
    p
}

/// The response body as JSON, parsed at most once (see [`request_json`]).
pub fn response_json(ex: &mut Exchange) -> Parsed {
    if let Some(ResponseJson(p)) = ex.extensions.get::<ResponseJson>() {
        return p.clone();
    }
    let empty = http::HeaderMap::new();
    let headers = ex.response.as_ref().map_or(&empty, |r| r.headers());
    let p = parse(headers, ex.response_bytes());
    ex.extensions.insert(ResponseJson(p.clone()));
    p
}

/// The request JSON if it was parsed already (for readers holding `&Exchange`).
pub fn cached_request_json(ex: &Exchange) -> Option<&Value> {
    match ex.extensions.get::<RequestJson>() {
        Some(RequestJson(Ok(v))) => Some(v),
        _ => None,
    }
}

/// The response JSON if it was parsed already.
pub fn cached_response_json(ex: &Exchange) -> Option<&Value> {
    match ex.extensions.get::<ResponseJson>() {
        Some(ResponseJson(Ok(v))) => Some(v),
        _ => None,
    }
}

/// Drops the cached request JSON (after a policy replaced the request body).
pub fn forget_request_json(ex: &mut Exchange) {
    ex.extensions.remove::<RequestJson>();
}

/// Drops the cached response JSON (after a policy replaced the response body).
pub fn forget_response_json(ex: &mut Exchange) {
    ex.extensions.remove::<ResponseJson>();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::tests::exchange;
    use crate::Body;

    #[test]
    fn parses_once_and_caches() {
        let mut ex = exchange("POST", "/", &[]);
        assert_eq!(request_json(&mut ex), Err(JsonBodyError::NoBody));
        forget_request_json(&mut ex);
        ex.request_body = Body::full(r#"{"a":1}"#);
        let v = request_json(&mut ex).unwrap();
        assert_eq!(v["a"], 1);
        // The body is not read again: the cached value is returned.
        ex.request_body = Body::full("not json");
        assert!(request_json(&mut ex).is_ok());
        assert_eq!(cached_request_json(&ex).unwrap()["a"], 1);
        forget_request_json(&mut ex);
        assert!(matches!(
            request_json(&mut ex),
            Err(JsonBodyError::Invalid(_))
        ));
    }

    #[test]
    fn reads_through_codings_and_charsets() {
        let mut ex = exchange(
            "POST",
            "/",
            &[("content-type", "application/json; charset=utf-16le")],
        );
        let wide: Vec<u8> = r#"{"a":"ü"}"#.encode_utf16().flat_map(u16::to_le_bytes).collect();
        ex.request_body = Body::full(wide);
        assert_eq!(request_json(&mut ex).unwrap()["a"], "ü");
        let mut ex = exchange("POST", "/", &[("content-encoding", "compress")]);
        ex.request_body = Body::full("{}");
        assert!(matches!(
            request_json(&mut ex),
            Err(JsonBodyError::Undecodable(_))
        ));
    }
}
