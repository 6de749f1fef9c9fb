//! The access log: one JSON object per line on standard output, written when a response head is
//! sent.

use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{Method, StatusCode};

/// What is logged about one request.
pub struct AccessRecord<'a> {
    /// Client address.
    pub client: SocketAddr,
    /// Request method.
    pub method: &'a Method,
    /// Request path and query as received.
    pub uri: &'a str,
    /// The API that took it (None: no route).
    pub api: Option<&'a str>,
    /// Status sent to the client.
    pub status: StatusCode,
    /// Time from request head to response head.
    pub elapsed: Duration,
    /// Status the backend answered, when it was called.
    pub upstream_status: Option<StatusCode>,
    /// Why the gateway answered itself with an error, if it did.
    pub error: Option<&'a str>,
    /// The consumer an auth policy identified.
    pub consumer: Option<&'a str>,
    /// The request id (also in the response and sent to the backend).
    pub request_id: &'a str,
    /// The node that answered (`host:port`).
    pub upstream: Option<&'a str>,
}

/// Writes `r` as one JSON line to stdout. Errors writing the log are ignored (the request has been
/// served already).
pub fn write(r: &AccessRecord<'_>) {
    let ts = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    let mut obj = serde_json::Map::with_capacity(10);
    obj.insert("ts".into(), ts.into());
    obj.insert("client".into(), r.client.ip().to_string().into());
    obj.insert("method".into(), r.method.as_str().into());
    obj.insert("uri".into(), r.uri.into());
    obj.insert("status".into(), r.status.as_u16().into());
    obj.insert(
        "durationMs".into(),
        ((r.elapsed.as_secs_f64() * 1e6).round() / 1e3).into(),
    );
    if let Some(api) = r.api {
        obj.insert("api".into(), api.into());
    }
    if let Some(s) = r.upstream_status {
        obj.insert("upstreamStatus".into(), s.as_u16().into());
    }
    if let Some(u) = r.upstream {
        obj.insert("upstream".into(), u.into());
    }
    if let Some(c) = r.consumer {
        obj.insert("consumer".into(), c.into());
    }
    if let Some(e) = r.error {
        obj.insert("error".into(), e.into());
    }
    obj.insert("requestId".into(), r.request_id.into());
    let mut line = serde_json::Value::Object(obj).to_string();
    line.push('\n');
    let _ = std::io::stdout().lock().write_all(line.as_bytes());
}
