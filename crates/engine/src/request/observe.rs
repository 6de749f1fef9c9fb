//! What watches a request without changing it: the access log, the trace, the console's store
//! of recent exchanges and the request counters. Each is an observer that the snapshot's
//! settings turn on; one that is off is `None` and costs nothing but its check. They start when
//! the request arrives ([`Observers::start`]) and end with its response ([`Observers::end`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use http::header;
use http::{HeaderValue, Request, Response, StatusCode, Version};
use hyper::body::Incoming;
use turnpike_core::Body;
use turnpike_snapshot::{Api, Settings, Snapshot};
use turnpike_telemetry::trace::KeyValue;

use crate::access_log::{self, AccessRecord};
use crate::conn::ConnInfo;

use super::forward::Traced;
use super::{RequestContext, Served};

/// The observers of one request.
pub(super) struct Observers {
    /// The access log's entry.
    log: RequestLog,
    /// The request's spans, when it is traced.
    pub(super) trace: Traced,
    /// What the server span is named and labelled with, when traced.
    traced_head: Option<(http::Method, String, String)>,
    /// The console's record of the exchange, when the store is on.
    pub(super) stored: Option<Stored>,
    /// When the request arrived and its method's index, when counted for `/metrics`.
    counted: Option<(Instant, usize)>,
}

impl Observers {
    /// Starts the observers `settings` turn on, with what they need of the request as it
    /// arrived.
    #[inline]
    pub(super) fn start(settings: &Settings, conn: &ConnInfo, req: &Request<Incoming>) -> Self {
        let log = RequestLog::start(settings.access_log.as_ref(), conn.peer, req);
        let trace: Traced = settings.tracing.as_ref().and_then(|s| {
            turnpike_telemetry::trace::Trace::begin(
                req.headers().get("traceparent").map(HeaderValue::as_bytes),
                req.headers()
                    .get("tracestate")
                    .and_then(|v| v.to_str().ok()),
                s,
            )
        });
        let traced_head = trace.as_ref().map(|_| {
            (
                req.method().clone(),
                req.uri().path().to_owned(),
                req.headers()
                    .get(header::HOST)
                    .and_then(|h| h.to_str().ok())
                    .unwrap_or("")
                    .to_owned(),
            )
        });
        let stored = settings.exchange_store.map(|(size, body)| Stored {
            size,
            time: std::time::SystemTime::now(),
            started: Instant::now(),
            method: req.method().to_string(),
            pq: req
                .uri()
                .path_and_query()
                .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned()),
            headers: req.headers().clone(),
            request_body: turnpike_core::body::Capture::new(body),
            response_body: turnpike_core::body::Capture::new(body),
        });
        let counted = settings.metrics.then(|| {
            (
                Instant::now(),
                turnpike_telemetry::stats::method_index(req.method().as_str()),
            )
        });
        Observers {
            log,
            trace,
            traced_head,
            stored,
            counted,
        }
    }

    /// Adds a child span per policy step that ran (`times`, recorded when traced).
    pub(super) fn steps(
        &mut self,
        api: &Api,
        times: Option<Vec<turnpike_core::exchange::StepTime>>,
    ) {
        let (Some(t), Some(times)) = (self.trace.as_mut(), times) else {
            return;
        };
        for st in times {
            let policy = api.chain.step_name(st.at);
            let phase = if st.response { "response" } else { "request" };
            t.add_child(
                policy,
                st.start,
                st.end,
                vec![
                    KeyValue::new("turnpike.policy", policy),
                    KeyValue::new("turnpike.phase", phase),
                ],
                None,
            );
        }
    }

    /// Ends every observer with the response (which gets the request id header) and returns
    /// it in the client's protocol `version`.
    pub(super) fn end(
        &mut self,
        mut response: Response<Body>,
        snap: &Snapshot,
        ctx: &RequestContext<'_>,
        served: &Served,
        version: Version,
    ) -> Response<Body> {
        response.headers_mut().insert(
            snap.settings.request_id_header.clone(),
            served.request_id.clone(),
        );
        let trace_id = self.trace.as_ref().map(|t| t.trace_id());
        if let Some((start, method)) = self.counted {
            let status = response.status().as_u16();
            let stats = match &served.api {
                Some(api) => Some(&api.stats),
                None => snap.listeners.get(&ctx.listener).map(|l| &l.unrouted),
            };
            if let Some(s) = stats {
                s.request(
                    ctx.worker,
                    method,
                    status,
                    start.elapsed(),
                    trace_id.as_deref(),
                );
            }
        }
        if let (Some(t), Some((method, path, host))) = (self.trace.take(), self.traced_head.take())
        {
            finish_trace(t, served, ctx.conn, method, path, host, response.status());
        }
        if let Some(s) = self.stored.take() {
            response = s.record(response, served, ctx.conn);
        }
        RequestLog {
            entry: self.log.entry.take(),
        }
        .finish(response, served, version)
    }
}

/// What the store of recent exchanges keeps of a request while it is served.
pub(super) struct Stored {
    size: usize,
    time: std::time::SystemTime,
    started: Instant,
    method: String,
    pq: String,
    headers: http::HeaderMap,
    pub(super) request_body: turnpike_core::body::Capture,
    response_body: turnpike_core::body::Capture,
}

impl Stored {
    /// Records the exchange (secrets redacted) and returns the response, whose body now also
    /// fills the record's capture as it streams.
    fn record(self, response: Response<Body>, served: &Served, conn: &ConnInfo) -> Response<Body> {
        use crate::exchanges::{self, Record};
        let none = turnpike_core::policy::SecretFields::default();
        let secrets = served
            .api
            .as_ref()
            .map_or(&none, |a| a.chain.secret_fields());
        let (parts, body) = response.into_parts();
        let body = body.tee(&self.response_body);
        exchanges::push(
            self.size,
            Record {
                id: served.request_id.to_str().unwrap_or("").to_owned(),
                time_ms: self
                    .time
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
                api: served.api.as_ref().map(|a| Arc::clone(&a.name)),
                method: self.method,
                uri: exchanges::redacted_uri(&self.pq, secrets),
                status: parts.status.as_u16(),
                duration_us: self.started.elapsed().as_micros() as u64,
                node: served.upstream_node.clone(),
                client: conn.peer.ip(),
                request_headers: exchanges::redacted_headers(&self.headers, secrets),
                response_headers: exchanges::redacted_headers(&parts.headers, secrets),
                request_body: self.request_body,
                response_body: self.response_body,
                error: served.error,
            },
        );
        Response::from_parts(parts, body)
    }
}

/// Ends a traced request's server span (HTTP semantic conventions) and hands its spans over.
fn finish_trace(
    t: turnpike_telemetry::trace::Trace,
    served: &Served,
    conn: &ConnInfo,
    method: http::Method,
    path: String,
    host: String,
    status: StatusCode,
) {
    let api = served.api.as_ref().map_or("-", |a| &*a.name);
    let mut attrs = vec![
        KeyValue::new("http.request.method", method.to_string()),
        KeyValue::new("url.path", path),
        KeyValue::new("url.scheme", if conn.tls { "https" } else { "http" }),
        KeyValue::new("server.address", host),
        KeyValue::new("client.address", conn.peer.ip().to_string()),
        KeyValue::new("http.response.status_code", i64::from(status.as_u16())),
        KeyValue::new("turnpike.api", api.to_owned()),
        KeyValue::new(
            "turnpike.request_id",
            served.request_id.to_str().unwrap_or("").to_owned(),
        ),
    ];
    if let Some(e) = served.error {
        attrs.push(KeyValue::new("error.type", e));
    }
    let error = status.is_server_error().then(|| status.to_string());
    t.finish(format!("{method} {api}"), attrs, error);
}

/// What the access log needs of a request, taken when it arrives (only when logging is on).
struct RequestLog {
    entry: Option<LogEntry>,
}

/// What the access log needs of a request, taken when it arrives.
struct LogEntry {
    settings: Arc<turnpike_snapshot::AccessLogSettings>,
    start: Instant,
    client: SocketAddr,
    method: http::Method,
    uri: http::Uri,
    version: Version,
    user_agent: Option<HeaderValue>,
    referer: Option<HeaderValue>,
}

impl RequestLog {
    fn start(
        settings: Option<&Arc<turnpike_snapshot::AccessLogSettings>>,
        peer: SocketAddr,
        req: &Request<Incoming>,
    ) -> Self {
        RequestLog {
            entry: settings.map(|s| {
                use turnpike_snapshot::{LogField, LogFormat};
                let wants = |f: LogField| s.format == LogFormat::Combined || s.fields.contains(&f);
                LogEntry {
                    settings: Arc::clone(s),
                    start: Instant::now(),
                    client: peer,
                    method: req.method().clone(),
                    uri: req.uri().clone(),
                    version: req.version(),
                    user_agent: wants(LogField::UserAgent)
                        .then(|| req.headers().get(header::USER_AGENT).cloned())
                        .flatten(),
                    referer: wants(LogField::Referer)
                        .then(|| req.headers().get(header::REFERER).cloned())
                        .flatten(),
                }
            }),
        }
    }

    /// Finish: writes the access log line (when on, and sampled) and returns the response to
    /// send, in the client's protocol version whatever the backend spoke.
    fn finish(
        self,
        mut response: Response<Body>,
        served: &Served,
        version: Version,
    ) -> Response<Body> {
        if response.version() != version {
            *response.version_mut() = version;
        }
        if let Some(e) = &self.entry {
            if access_log::sampled(&e.settings, response.status()) {
                let bytes = response
                    .headers()
                    .get(header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse().ok());
                access_log::write(
                    &AccessRecord {
                        client: e.client,
                        method: &e.method,
                        uri: e.uri.path_and_query().map_or("/", |p| p.as_str()),
                        version: e.version,
                        api: served.api.as_deref().map(|a| &*a.name),
                        status: response.status(),
                        bytes,
                        elapsed: e.start.elapsed(),
                        upstream_status: served.upstream_status,
                        error: served.error,
                        consumer: served.consumer.as_deref(),
                        request_id: served.request_id.to_str().unwrap_or(""),
                        upstream: served.upstream_node.as_deref(),
                        user_agent: e.user_agent.as_ref().and_then(|v| v.to_str().ok()),
                        referer: e.referer.as_ref().and_then(|v| v.to_str().ok()),
                    },
                    &e.settings,
                );
            }
        }
        response
    }
}
