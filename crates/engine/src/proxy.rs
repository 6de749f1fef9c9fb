//! The request path, as its phases: [`route`](route) → [`read_body`](read_body) (and
//! [`buffer_body`](buffer_body)) → [`request_phase`](request_phase) → [`forward`](forward) (or
//! the policy's answer) → [`response_phase`](response_phase) → [`finish`](RequestLog::finish). Each phase returns its
//! result or the [`Problem`] that ends it; the one exit point renders problems in the request's
//! [`ErrorFormat`] (problem+json, a gRPC status for gRPC requests, the API's SOAP faults) and
//! writes the access log. WebSocket (and other HTTP/1.1) upgrades are forwarded, then tunnelled
//! both ways.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use http::header;
use http::{HeaderValue, Request, Response, StatusCode, Version};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use smallvec::SmallVec;
use turnpike_core::body::BodyTooLarge;
use turnpike_core::exchange::{ClientCertificate, FixedEndpoint, PathParams};
use turnpike_core::{
    problems, Body, BodyNeed, Chain, ErrorFormat, Exchange, Outcome, Problem, RequestEnd,
    ResponseEnd, Wait,
};
use turnpike_snapshot::upstream::{now_ms, Breaker, Target, TargetPath, Upstream};
use turnpike_snapshot::{Api, Node, Settings, Snapshot};
use turnpike_telemetry::trace::KeyValue;

use crate::balance::{Balancers, NoNode};

use crate::access_log::{self, AccessRecord};
use crate::conn::ConnInfo;
use crate::headers::{remove_hop_by_hop, Forwarded};
use crate::request_body::{buffer, buffer_body};
use crate::slow::{BodyTimeout, TimedBody};
use crate::upstream::{H1Error, UpstreamError, UpstreamPool};

/// What a worker needs to serve a request besides the snapshot.
pub struct RequestContext<'a> {
    /// The worker's upstream connection pool.
    pub client: &'a UpstreamPool,
    /// The worker's balancing counters.
    pub balancers: &'a Balancers,
    /// The listening address the request arrived on, as configured (the snapshot's key).
    pub listener: SocketAddr,
    /// The connection the request came on.
    pub conn: &'a ConnInfo,
    /// The worker's index (its counters' block).
    pub worker: usize,
    /// Count for `/metrics` (the snapshot's setting).
    pub metrics: bool,
}

/// True for an HTTP/1.1 request asking to switch protocols (WebSocket and others).
fn is_upgrade(req: &Request<Incoming>) -> bool {
    req.version() == Version::HTTP_11
        && req.headers().contains_key(header::UPGRADE)
        && req
            .headers()
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// Request ids made at once by a worker: one allocation serves this many requests (each id's
/// header value is a slice of it).
const IDS_PER_BATCH: u64 = 64;
/// Hex digits of a request id.
const ID_LEN: usize = 20;

/// The request id of an exchange: the trusted one the request carries, or a new one. A new
/// id is a per-process random prefix and a per-worker counter (the worker's index in its top
/// bits), in 20 hex digits: unique in the process, and across restarts with high likelihood.
fn request_id(req: &Request<Incoming>, settings: &Settings) -> HeaderValue {
    use std::cell::{Cell, RefCell};
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    if settings.trust_incoming_request_id {
        if let Some(v) = req.headers().get(&settings.request_id_header) {
            let ok = !v.is_empty()
                && v.len() <= 200
                && v.as_bytes().iter().all(|b| b.is_ascii_graphic());
            if ok {
                return v.clone();
            }
        }
    }
    static PREFIX: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    static WORKERS: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        static NEXT: Cell<u64> = Cell::new(WORKERS.fetch_add(1, Ordering::Relaxed) << 40);
        static BATCH: RefCell<bytes::Bytes> = const { RefCell::new(bytes::Bytes::new()) };
    }
    let n = NEXT.with(|c| {
        let n = c.get();
        c.set(n.wrapping_add(1));
        n
    });
    let slot = (n % IDS_PER_BATCH) as usize;
    let ids = BATCH.with(|b| {
        let mut b = b.borrow_mut();
        if slot == 0 || b.is_empty() {
            let prefix = *PREFIX.get_or_init(|| {
                std::collections::hash_map::RandomState::new()
                    .build_hasher()
                    .finish() as u32
            });
            let digits = b"0123456789abcdef";
            let mut text = Vec::with_capacity(ID_LEN * IDS_PER_BATCH as usize);
            for i in 0..IDS_PER_BATCH {
                let id = (n - slot as u64 + i) & 0xffff_ffff_ffff;
                let word = (u128::from(prefix) << 48) | u128::from(id);
                text.extend(
                    (0..ID_LEN).map(|d| digits[((word >> (4 * (ID_LEN - 1 - d))) & 0xf) as usize]),
                );
            }
            *b = bytes::Bytes::from(text);
        }
        b.clone()
    });
    HeaderValue::from_maybe_shared(ids.slice(slot * ID_LEN..(slot + 1) * ID_LEN))
        .unwrap_or(HeaderValue::from_static("0"))
}

/// What one request's phases learned, for the answer and the access log.
struct Served {
    /// The request id (in the response, to the backend, in the log).
    request_id: HeaderValue,
    /// How the gateway's own answers are written (refined once the API is known).
    format: ErrorFormat,
    /// The API that took the request.
    api: Option<Arc<Api>>,
    /// The status the backend answered, when it was called.
    upstream_status: Option<StatusCode>,
    /// Why the gateway answered itself with an error (the problem type's log label).
    error: Option<&'static str>,
    /// The consumer an auth policy identified.
    consumer: Option<Arc<str>>,
    /// The node that answered.
    upstream_node: Option<Arc<str>>,
}

impl Served {
    /// Records `problem` as the request's error and renders it, with the request id.
    fn reject(&mut self, problem: Problem) -> Response<Body> {
        self.error = Some(problem.ty.log);
        let id = self.request_id.to_str().unwrap_or("").to_owned();
        self.format
            .render(problem.with_member("requestId", id.into()))
    }
}

/// Ends the phases with `served`'s rendering of a problem when a phase fails.
macro_rules! phase {
    ($phases:lifetime, $served:ident, $result:expr) => {
        match $result {
            Ok(v) => v,
            Err(problem) => break $phases $served.reject(problem),
        }
    };
}

/// Serves one request against `snap`. Never fails: errors become problem responses. The phases
/// run in one labelled block (one future, whose state is not moved between phases); a phase
/// that fails ends the block with its problem rendered, the one exit point.
pub async fn serve(
    snap: Arc<Snapshot>,
    ctx: RequestContext<'_>,
    req: Request<Incoming>,
) -> Response<Body> {
    let settings = &snap.settings;
    let log = RequestLog::start(settings.access_log.as_ref(), ctx.conn.peer, &req);
    let mut trace: Traced = settings.tracing.as_ref().and_then(|s| {
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
    // Kept for the console's recent exchanges: the request as it arrived.
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
    // Counted for `/metrics`: method, status and time to the response head.
    let counted = settings.metrics.then(|| {
        (
            Instant::now(),
            turnpike_telemetry::stats::method_index(req.method().as_str()),
        )
    });
    let version = req.version();
    let mut served = Served {
        request_id: request_id(&req, settings),
        format: ErrorFormat::of(req.headers(), None),
        api: None,
        upstream_status: None,
        error: None,
        consumer: None,
        upstream_node: None,
    };
    // A listener with an API whose routing test reads the body (Membrane's XPath and JSONPath
    // `test`) reads the body before it routes.
    let body_routing = snap
        .listeners
        .get(&ctx.listener)
        .is_some_and(|l| l.body_routing);
    let mut response = 'phases: {
        let upgrade = is_upgrade(&req) || req.method() == http::Method::CONNECT;
        let (mut parts, incoming) = req.into_parts();
        let mut incoming = Some(incoming);
        let routing_body = if body_routing { incoming.take() } else { None };
        let (api, params, body) = if let Some(b) = routing_body {
            let body = phase!('phases, served, read_body(settings, &mut parts, b).await);
            let bytes =
                phase!('phases, served, Box::pin(buffer(body, settings.max_body_size)).await);
            let (api, params) = phase!(
                'phases,
                served,
                route(&snap, ctx.listener, ctx.conn.peer, &parts, Some(&bytes))
            );
            (api, params, Some(Body::Full(Some(bytes))))
        } else {
            let (api, params) = phase!(
                'phases,
                served,
                route(&snap, ctx.listener, ctx.conn.peer, &parts, None)
            );
            (api, params, None)
        };
        served.api = Some(Arc::clone(&api));
        if api.errors.is_some() {
            served.format = ErrorFormat::of(&parts.headers, api.errors.as_ref());
        }
        let mut client_upgrade = if upgrade {
            parts.extensions.remove::<OnUpgrade>()
        } else {
            None
        };
        let body = match (body, incoming) {
            (Some(b), _) => b,
            (None, Some(b)) => phase!('phases, served, read_body(settings, &mut parts, b).await),
            (None, None) => Body::Empty,
        };
        let mut ex = Exchange::new(parts, body, ctx.conn.peer, params);
        ex.tls = ctx.conn.tls;
        ex.request_id = served.request_id.clone();
        if trace.is_some() {
            ex.step_times = Some(Vec::new());
        }
        if let Some(s) = &stored {
            ex.request_body = std::mem::take(&mut ex.request_body).tee(&s.request_body);
        }
        if let Some(subject) = &ctx.conn.client_cert {
            ex.extensions.insert(ClientCertificate {
                subject: subject.to_string(),
            });
        }
        if api.chain.body_need() == BodyNeed::Buffer {
            phase!('phases, served, buffer_body(&api.chain, &mut ex, settings.max_body_size).await);
        }
        let (response, end, backend_upgrade) = match request_phase(&api.chain, &mut ex).await {
            RequestEnd::Answered { at, outcome } => {
                let response = match outcome {
                    Outcome::Respond(r) => r,
                    Outcome::Reject(p) => {
                        if settings.metrics {
                            let policy = api.chain.step_name(at);
                            api.stats.rejection(ctx.worker, policy, p.ty.kind);
                        }
                        served.reject(p)
                    }
                    Outcome::Continue | Outcome::Wait(_) => {
                        served.reject(Problem::new(&problems::INTERNAL))
                    }
                };
                (response, at, None)
            }
            RequestEnd::Forward | RequestEnd::Wait { .. } if api.forward_proxy.is_some() => {
                let connect = ex.request.method == http::Method::CONNECT;
                let client = if connect { client_upgrade.take() } else { None };
                let rules = api.forward_proxy.clone().unwrap_or_default();
                let own: Vec<SocketAddr> = snap.listeners.keys().copied().collect();
                match crate::forward_proxy::forward(
                    &mut ex,
                    client,
                    (&rules, &own),
                    &settings.dns,
                    settings.connect_timeout,
                    settings.upstream_timeout,
                )
                .await
                {
                    Ok(res) => {
                        served.upstream_status = Some(res.status());
                        (res, usize::MAX, None)
                    }
                    Err(p) => (served.reject(p), usize::MAX, None),
                }
            }
            RequestEnd::Forward | RequestEnd::Wait { .. } => {
                // A WebSocket upgrade goes where the API's `webSocket.url` says, if it says.
                let target = match (&api.websocket_target, &client_upgrade) {
                    (Some(ws), Some(_)) => Some(ws),
                    _ => api.target.as_ref(),
                };
                match (internal_next(&api, &mut ex), target) {
                    (Some(name), _) => {
                        let response = match call_internal(
                            &snap,
                            &ctx,
                            &name,
                            &mut ex,
                            &mut served,
                            &mut trace,
                            1,
                        )
                        .await
                        {
                            Ok(r) => r,
                            Err(p) => served.reject(p),
                        };
                        (response, usize::MAX, None)
                    }
                    (None, Some(target)) => {
                        let how = Forwarding {
                            request_id: (&settings.request_id_header, &served.request_id),
                            timeout: settings.upstream_timeout,
                            keep_request: api.chain.response_needs_request(),
                            upgrade: client_upgrade.is_some(),
                        };
                        match forward(&mut ex, target, &ctx, how, &mut trace).await {
                            Ok((res, up, node)) => {
                                if let Some(a) = ex
                                    .extensions
                                    .get_mut::<turnpike_core::exchange::NodeAffinity>()
                                {
                                    a.answered = Some(Arc::clone(&node));
                                }
                                served.upstream_status = Some(res.status());
                                served.upstream_node = Some(node);
                                (res, usize::MAX, up)
                            }
                            Err(problem) => {
                                let what = problem.detail.as_deref().unwrap_or(problem.ty.log);
                                let id = served.request_id.to_str().unwrap_or("");
                                if problem.status.is_server_error() {
                                    tracing::warn!(api = %api.name, uri = %ex.original_uri, request_id = id, "{what}");
                                } else {
                                    tracing::info!(api = %api.name, uri = %ex.original_uri, request_id = id, "{what}");
                                }
                                (served.reject(problem), usize::MAX, None)
                            }
                        }
                    }
                    // Compilation guarantees a target or an answering flow; reaching here means a
                    // conditional answer did not fire.
                    (None, None) => (
                        served.reject(Problem::new(&problems::NO_TARGET)),
                        usize::MAX,
                        None,
                    ),
                }
            }
        };
        let mut response =
            response_phase(&api.chain, &mut ex, response, end, settings, &mut served).await;
        if let (Some(t), Some(times)) = (trace.as_mut(), ex.step_times.take()) {
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
        served.consumer = ex.identity().and_then(|i| i.consumer.clone());
        if response.status() == StatusCode::SWITCHING_PROTOCOLS {
            match (client_upgrade, backend_upgrade) {
                (Some(client), Some(backend)) => tunnel(client, backend),
                _ => {
                    response = served.reject(
                        Problem::new(&problems::UPSTREAM_ERROR)
                            .with_detail("the backend switched protocols unasked"),
                    );
                }
            }
        }
        response
    };
    response.headers_mut().insert(
        settings.request_id_header.clone(),
        served.request_id.clone(),
    );
    let trace_id = trace.as_ref().map(|t| t.trace_id());
    if let Some((start, method)) = counted {
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
    if let (Some(t), Some((method, path, host))) = (trace, traced_head) {
        finish_trace(t, &served, ctx.conn, method, path, host, response.status());
    }
    if let Some(s) = stored {
        response = s.record(response, &served, ctx.conn);
    }
    log.finish(response, &served, version)
}

/// What the store of recent exchanges keeps of a request while it is served.
struct Stored {
    size: usize,
    time: std::time::SystemTime,
    started: Instant,
    method: String,
    pq: String,
    headers: http::HeaderMap,
    request_body: turnpike_core::body::Capture,
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

/// Where a request the flow did not answer goes in-process: the internal API a policy chose
/// (`destination`), else the API's `internal://` target.
fn internal_next(api: &Api, ex: &mut Exchange) -> Option<Arc<str>> {
    ex.extensions
        .remove::<turnpike_core::exchange::Destination>()
        .map(|d| d.0)
        .or_else(|| api.internal_target.clone())
}

/// How deep internal APIs may call each other.
const MAX_INTERNAL_DEPTH: usize = 8;

/// Runs the API `name` (an `internal:` document or a named API) in-process for `ex`: its
/// request phase, then its own target (a backend, or another internal API), then its response
/// phase. Returns its response, or the problem that stopped it (an unknown name, a loop).
fn call_internal<'a>(
    snap: &'a Snapshot,
    ctx: &'a RequestContext<'a>,
    name: &'a str,
    ex: &'a mut Exchange,
    served: &'a mut Served,
    trace: &'a mut Traced,
    depth: usize,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Response<Body>, Problem>> + 'a>> {
    Box::pin(async move {
        if depth > MAX_INTERNAL_DEPTH {
            tracing::warn!(
                api = name,
                "internal APIs call each other more than {MAX_INTERNAL_DEPTH} deep"
            );
            return Err(Problem::new(&problems::INTERNAL));
        }
        let Some(api) = snap.internal.get(name).cloned() else {
            tracing::warn!(api = name, "no internal API of this name");
            return Err(Problem::new(&problems::NO_TARGET));
        };
        let settings = &snap.settings;
        if api.chain.body_need() == BodyNeed::Buffer {
            buffer_body(&api.chain, ex, settings.max_body_size).await?;
        }
        let (response, end) = match request_phase(&api.chain, ex).await {
            RequestEnd::Answered { at, outcome } => {
                let response = match outcome {
                    Outcome::Respond(r) => r,
                    Outcome::Reject(p) => served.reject(p),
                    Outcome::Continue | Outcome::Wait(_) => {
                        served.reject(Problem::new(&problems::INTERNAL))
                    }
                };
                (response, at)
            }
            RequestEnd::Forward | RequestEnd::Wait { .. } => {
                let response = match (internal_next(&api, ex), &api.target) {
                    (Some(next), _) => {
                        call_internal(snap, ctx, &next, ex, served, trace, depth + 1).await?
                    }
                    (None, Some(target)) => {
                        let how = Forwarding {
                            request_id: (&settings.request_id_header, &served.request_id),
                            timeout: settings.upstream_timeout,
                            keep_request: true,
                            upgrade: false,
                        };
                        let (res, _, node) = forward(ex, target, ctx, how, trace).await?;
                        served.upstream_status = Some(res.status());
                        served.upstream_node = Some(node);
                        res
                    }
                    (None, None) => served.reject(Problem::new(&problems::NO_TARGET)),
                };
                (response, usize::MAX)
            }
        };
        Ok(response_phase(&api.chain, ex, response, end, settings, served).await)
    })
}

/// The request head (and its body, for a listener that routes on bodies) as an exchange, for
/// APIs' routing tests.
fn route_probe(
    head: &http::request::Parts,
    body: Option<&bytes::Bytes>,
    client: SocketAddr,
) -> Exchange {
    let mut probe = Request::builder()
        .method(head.method.clone())
        .uri(head.uri.clone())
        .version(head.version);
    if let Some(h) = probe.headers_mut() {
        *h = head.headers.clone();
    }
    let (parts, ()) = probe
        .body(())
        .unwrap_or_else(|_| Request::new(()))
        .into_parts();
    Exchange::new(
        parts,
        Body::full(body.cloned().unwrap_or_default()),
        client,
        PathParams::new(),
    )
}

/// Route: the API of this listener that takes the request, and its path parameters (a target
/// longer than `limits.maxUriLength` is refused first). `body` is the request's body when the
/// listener routes on bodies.
fn route(
    snap: &Snapshot,
    listener: SocketAddr,
    client: SocketAddr,
    head: &http::request::Parts,
    body: Option<&bytes::Bytes>,
) -> Result<(Arc<Api>, PathParams), Problem> {
    let target_len = head.uri.path_and_query().map_or(0, |p| p.as_str().len());
    if target_len > snap.settings.max_uri_length {
        return Err(Problem::new(&problems::URI_TOO_LONG).with_detail(format!(
            "the request target has {target_len} bytes; the limit is {}",
            snap.settings.max_uri_length
        )));
    }
    crate::headers::check_head_size(head, snap.settings.max_header_size)?;

    let host = head
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| head.uri.host());
    // A forward proxy's port is its own: it takes every request.
    if let Some(p) = snap
        .listeners
        .get(&listener)
        .and_then(|l| l.forward_proxy.as_ref())
    {
        return Ok((Arc::clone(p), PathParams::new()));
    }
    // APIs with a `test` look at the request head (built once, only for them).
    let probe = std::cell::OnceCell::new();
    let accept = |api: &Arc<Api>| match &api.test {
        None => true,
        Some(t) => t.matches(probe.get_or_init(|| route_probe(head, body, client))),
    };
    snap.listeners
        .get(&listener)
        .and_then(|r| {
            r.router
                .lookup_if(host, &head.method, head.uri.path(), accept)
        })
        .map(|m| (Arc::clone(m.value), m.params))
        .ok_or_else(|| {
            Problem::no_route().with_detail(format!(
                "no API on this port matches {} {}",
                head.method,
                head.uri.path()
            ))
        })
}

/// Read body: the request body as it goes on, with its announced size checked and its
/// pauses bounded; a chunked body on GET or HEAD is read whole (`parts` gets its length).
async fn read_body(
    settings: &Settings,
    parts: &mut http::request::Parts,
    body: Incoming,
) -> Result<Body, Problem> {
    // Request body limit: announced sizes are checked now, streamed ones as they arrive.
    let limit = settings.max_body_size;
    let announced = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let body = match announced {
        Some(n) if n > limit => {
            return Err(Problem::new(&problems::BODY_TOO_LARGE)
                .with_detail(format!("the body has {n} bytes; the limit is {limit}")));
        }
        Some(_) => Body::Incoming(body),
        None if http_body::Body::is_end_stream(&body) => Body::Empty,
        None => Body::Limited {
            inner: body,
            remaining: limit,
        },
    };
    let body = TimedBody::wrap(body, settings.body_read_timeout);
    let may_trail = announced.is_none() || parts.version == http::Version::HTTP_2;
    let body = turnpike_core::body::Trailers::filter(body, may_trail, settings.forward_trailers);
    // A streamed (chunked) body on GET or HEAD would not be sent on by the HTTP/1.1 client
    // (those methods get no implicit body framing), so such a body is read in full first: it is
    // forwarded with a Content-Length, and malformed chunked framing is refused here instead of
    // being silently dropped.
    if matches!(parts.method, http::Method::GET | http::Method::HEAD)
        && parts.headers.contains_key(header::TRANSFER_ENCODING)
    {
        let bytes = Box::pin(buffer(body, limit)).await?;
        parts.headers.remove(header::TRANSFER_ENCODING);
        parts
            .headers
            .insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
        return Ok(Body::Full(Some(bytes)));
    }
    Ok(body)
}

/// Request phase: the chain's request steps in order, awaiting the steps that wait for I/O.
async fn request_phase(chain: &Chain, ex: &mut Exchange) -> RequestEnd {
    let mut from = 0;
    loop {
        match chain.run_request_from(ex, from) {
            // Boxed: a step that waits is rare, and the request's future stays small.
            RequestEnd::Wait { at, wait } => match Box::pin(settle(wait, ex)).await {
                Outcome::Continue => from = at + 1,
                outcome => return RequestEnd::Answered { at, outcome },
            },
            end => return end,
        }
    }
}

/// Awaits a waiting step within its timeout and applies its result (or its timeout answer) to
/// the exchange. Dropping the request (the client went away) drops the wait with it.
async fn settle(mut wait: Wait, ex: &mut Exchange) -> Outcome {
    loop {
        let outcome = match crate::deadline::timeout(wait.timeout, wait.future).await {
            Ok(resume) => resume(ex),
            Err(_) => (wait.on_timeout)(ex),
        };
        match outcome {
            Outcome::Wait(next) => wait = next,
            outcome => return outcome,
        }
    }
}

/// True when the response is a `text/event-stream`.
fn is_event_stream(response: &Response<Body>) -> bool {
    response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("text/event-stream"))
}

/// Response phase: the response steps of the steps before `end`, last first (Membrane's
/// semantics), with the response body buffered first when a step needs it (or a request-phase
/// step asked for it with [`turnpike_core::exchange::BufferResponse`]); gateway problems are
/// marked [`turnpike_core::exchange::Aborted`] for `abort:` flows.
async fn response_phase(
    chain: &Chain,
    ex: &mut Exchange,
    response: Response<Body>,
    end: usize,
    settings: &Settings,
    served: &mut Served,
) -> Response<Body> {
    if !chain.has_response_steps() {
        return response;
    }
    let buffer_asked = chain.response_body_need() == BodyNeed::Buffer
        || ex
            .extensions
            .get::<turnpike_core::exchange::BufferResponse>()
            .is_some_and(|b| !(b.except_event_streams && is_event_stream(&response)));
    let response = if buffer_asked && response.status() != StatusCode::SWITCHING_PROTOCOLS {
        let (parts, body) = response.into_parts();
        match Box::pin(buffer(body, settings.max_body_size)).await {
            Ok(bytes) => Response::from_parts(parts, Body::Full(Some(bytes))),
            Err(_) => served.reject(
                Problem::new(&problems::UPSTREAM_ERROR)
                    .with_detail("the backend's response could not be read"),
            ),
        }
    } else {
        response
    };
    if served.error.is_some() {
        ex.extensions.insert(turnpike_core::exchange::Aborted);
    }
    ex.response = Some(response);
    let mut end = end;
    loop {
        match chain.run_response_from(ex, end) {
            ResponseEnd::Done => break,
            ResponseEnd::Reject(p) => return served.reject(p),
            ResponseEnd::Wait { at, wait } => {
                match Box::pin(settle(wait, ex)).await {
                    // `settle` never ends with another wait.
                    Outcome::Continue | Outcome::Wait(_) => {}
                    Outcome::Respond(r) => ex.response = Some(r),
                    Outcome::Reject(p) => return served.reject(p),
                }
                end = at;
            }
        }
    }
    match ex.response.take() {
        Some(mut r) => {
            // A policy that set the body in memory may have left the backend's length: the
            // length sent is the body's own.
            let bodiless = ex.request.method == http::Method::HEAD
                || r.status() == StatusCode::NO_CONTENT
                || r.status() == StatusCode::NOT_MODIFIED;
            if let (Body::Full(Some(b)), false) = (r.body(), bodiless) {
                let n = b.len();
                let h = r.headers_mut();
                h.remove(header::TRANSFER_ENCODING);
                if n > 0 || h.contains_key(header::CONTENT_LENGTH) {
                    h.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
                }
            }
            r
        }
        None => served.reject(Problem::new(&problems::INTERNAL)),
    }
}

/// Copies bytes both ways between an upgraded client connection and an upgraded backend
/// connection until either side closes.
fn tunnel(client: OnUpgrade, backend: OnUpgrade) {
    tokio::task::spawn_local(async move {
        let (client, backend) = match tokio::try_join!(client, backend) {
            Ok(pair) => pair,
            Err(e) => {
                tracing::debug!("upgrade failed: {e}");
                return;
            }
        };
        let mut client = hyper_util::rt::TokioIo::new(client);
        let mut backend = hyper_util::rt::TokioIo::new(backend);
        if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut backend).await {
            tracing::debug!("tunnel ended: {e}");
        }
    });
}

/// How one request is forwarded.
struct Forwarding<'a> {
    /// The request id's header and value, sent to the backend.
    request_id: (&'a http::HeaderName, &'a HeaderValue),
    /// Time allowed for the backend's response head.
    timeout: std::time::Duration,
    /// The response phase reads the request, so the exchange keeps a copy of the request head
    /// (otherwise the head moves to the backend without a copy).
    keep_request: bool,
    /// The client asked to switch protocols: `Upgrade` and `Connection: upgrade` are passed on.
    upgrade: bool,
}

/// The spans of a traced request, and the attributes its server span ends with.
type Traced = Option<turnpike_telemetry::trace::Trace>;

/// What a try of a request on one node came to.
enum Tried {
    /// A response (and, for a 101 answer, the backend side of the upgraded connection).
    Answered(Response<Body>, Option<OnUpgrade>),
    /// The node could not be reached, or broke the exchange off.
    Failed(Failure, Problem),
}

impl Tried {
    /// The try's outcome for the node's counters.
    fn outcome(&self) -> turnpike_telemetry::stats::Outcome {
        use turnpike_telemetry::stats::Outcome;
        match self {
            Tried::Answered(r, _) if r.status().is_server_error() => Outcome::ServerError,
            Tried::Answered(..) => Outcome::Ok,
            Tried::Failed(Failure::Connect, _) => Outcome::ConnectError,
            Tried::Failed(Failure::Reset, _) => Outcome::Reset,
            Tried::Failed(Failure::Timeout, _) => Outcome::Timeout,
            Tried::Failed(..) => Outcome::Error,
        }
    }
}

/// How a try failed, for retries and health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// No connection (or no TLS session) could be made.
    Connect,
    /// The connection was reset or closed before a response head.
    Reset,
    /// No response head in time.
    Timeout,
    /// Anything else the backend did wrong (an invalid response).
    Other,
    /// The client's failure (its body): neither retried nor held against the node.
    Client,
    /// The circuit breaker refused a new connection: neither retried nor held against the node.
    Refused,
}

/// Forward: sends the exchange's request to a node of `target` (the balancer's choice, skipping
/// nodes health took out), tries again on another node when the upstream's retry policy says
/// so (and the request can be sent again: an allowed method, a body in memory), and records
/// each try's result in the node's health. Returns the response (hop-by-hop headers removed),
/// for a 101 answer the backend side of the upgraded connection, and the node that answered.
async fn forward(
    ex: &mut Exchange,
    target: &Target,
    ctx: &RequestContext<'_>,
    how: Forwarding<'_>,
    trace: &mut Traced,
) -> Result<(Response<Body>, Option<OnUpgrade>, Arc<str>), Problem> {
    if let Some(m) = &target.method {
        ex.request.method = m.clone();
    }
    // A live pool (a `balancer`'s) is loaded once, lock-free; the request keeps it to its end.
    let live = target.live.as_ref().map(|l| l.current());
    let up: &Upstream = live.as_deref().unwrap_or(&target.upstream);
    // A sticky session's node, when the pool has it and it is usable.
    let preferred = ex
        .extensions
        .get::<turnpike_core::exchange::NodeAffinity>()
        .and_then(|a| a.preferred.as_deref())
        .and_then(|label| up.nodes.iter().position(|n| &*n.label == label))
        .filter(|&i| up.nodes[i].state.usable(now_ms()));
    let mut retry = up
        .retries
        .as_ref()
        .filter(|r| !how.upgrade && r.methods.contains(&ex.request.method));
    if let Some(r) = retry {
        if !replayable(ex, r.max_body_size).await {
            retry = None;
        }
    }
    let _request = match &up.breaker {
        Some(b) => Some(breaker_admit(b)?),
        None => None,
    };
    if let Some(r) = retry {
        ctx.balancers.budget_request(up, r.budget);
    }
    let attempts = retry.map_or(0, |r| r.attempts);
    let mut tried: SmallVec<[usize; 4]> = SmallVec::new();
    let mut last: Option<Problem> = None;
    // A response a retry would replace, kept until another try starts.
    let mut answered: Option<(Response<Body>, Option<OnUpgrade>, Arc<str>)> = None;
    for attempt in 0..=attempts {
        let picked = match preferred {
            Some(i) if attempt == 0 => Ok(i),
            _ => ctx.balancers.pick(up, ex, &tried),
        };
        let i = match picked {
            Ok(i) => i,
            Err(NoNode::NoneHealthy) if attempt == 0 => {
                return Err(Problem::new(&problems::NO_HEALTHY_UPSTREAM)
                    .with_detail(format!("no node of `{}` is healthy", up.name)));
            }
            // Every node was tried: the last try's answer stands.
            Err(_) => break,
        };
        answered = None;
        tried.push(i);
        let node = &up.nodes[i];
        let may_retry = attempt < attempts;
        ctx.balancers.started(up, i);
        let sent = ctx.metrics.then(Instant::now);
        // A traced try tells the backend its span as the parent.
        let timing = trace.as_ref().map(|t| {
            let timing = t.start_child();
            if let Ok(v) = HeaderValue::from_str(&t.traceparent(timing.id())) {
                ex.request.headers.insert("traceparent", v);
            }
            if let Some(v) = t.tracestate().and_then(|s| HeaderValue::from_str(&s).ok()) {
                ex.request.headers.insert("tracestate", v);
            }
            timing
        });
        let result = send_to(ex, target, node, ctx, &how, may_retry).await;
        ctx.balancers.finished(up, i);
        if let (Some(t), Some(timing)) = (trace.as_mut(), timing) {
            let (status, error) = match &result {
                Tried::Answered(r, _) => (
                    Some(r.status()),
                    r.status().is_server_error().then(|| r.status().to_string()),
                ),
                Tried::Failed(kind, p) => (None, Some(format!("{kind:?}: {}", p.ty.log))),
            };
            let mut attrs = vec![
                KeyValue::new("http.request.method", ex.request.method.to_string()),
                KeyValue::new("server.address", node.label.to_string()),
                KeyValue::new("turnpike.upstream", up.name.to_string()),
                KeyValue::new("turnpike.attempt", i64::from(attempt)),
            ];
            if let Some(s) = status {
                attrs.push(KeyValue::new(
                    "http.response.status_code",
                    i64::from(s.as_u16()),
                ));
            }
            t.end_child(
                timing,
                ex.request.method.to_string(),
                turnpike_telemetry::trace::SpanKind::Client,
                attrs,
                error,
            );
        }
        if let Some(t) = sent {
            up.stats.attempt(ctx.worker, t.elapsed());
            node.stats.outcome(ctx.worker, result.outcome());
        }
        match result {
            Tried::Answered(res, upgraded) => {
                let status = res.status().as_u16();
                let failed = up
                    .passive
                    .as_ref()
                    .is_some_and(|p| p.failure_status.contains(&status));
                record(up, i, failed);
                let again = may_retry
                    && retry.is_some_and(|r| r.on_status.contains(&status))
                    && ctx.balancers.take_retry(up);
                if !again {
                    return Ok((res, upgraded, Arc::clone(&node.label)));
                }
                tracing::debug!(upstream = %up.name, node = %node.label, status, "trying again on another node");
                if ctx.metrics {
                    up.stats.retry(ctx.worker);
                }
                answered = Some((res, upgraded, Arc::clone(&node.label)));
            }
            Tried::Failed(Failure::Client | Failure::Refused, problem) => return Err(problem),
            Tried::Failed(kind, problem) => {
                record(up, i, true);
                let again = may_retry
                    && retry.is_some_and(|r| match kind {
                        Failure::Connect => r.on_connect_failure,
                        Failure::Reset => r.on_reset,
                        Failure::Timeout => r.on_timeout,
                        Failure::Other | Failure::Client | Failure::Refused => false,
                    })
                    && ctx.balancers.take_retry(up);
                if !again {
                    return Err(problem);
                }
                tracing::debug!(upstream = %up.name, node = %node.label, ?kind, "trying again on another node");
                if ctx.metrics {
                    up.stats.retry(ctx.worker);
                }
                last = Some(problem);
            }
        }
    }
    match answered {
        Some(a) => Ok(a),
        None => Err(last.unwrap_or_else(|| Problem::new(&problems::UPSTREAM_ERROR))),
    }
}

/// Records a try's result in the node's health (passive checks count failures in a row).
fn record(up: &Upstream, i: usize, failed: bool) {
    let Some(passive) = &up.passive else {
        return;
    };
    let state = &up.nodes[i].state;
    if failed {
        if state.failed(Some(passive), || up.may_eject(now_ms())) {
            up.nodes[i].stats.ejected();
            tracing::warn!(upstream = %up.name, node = %up.nodes[i].label, "node ejected after failures in a row");
        }
    } else {
        state.succeeded();
    }
}

/// Holds the request body in memory, when it is not already and is small enough, so that it can
/// be sent again; false when it cannot be (too large, or of unknown length).
async fn replayable(ex: &mut Exchange, max: u64) -> bool {
    match &ex.request_body {
        Body::Empty | Body::Full(_) => true,
        _ => {
            let announced = ex
                .request
                .headers
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            if announced.is_none_or(|n| n > max) {
                return false;
            }
            let body = std::mem::take(&mut ex.request_body);
            match Box::pin(buffer(body, max)).await {
                Ok(bytes) => {
                    ex.request_body = Body::Full(Some(bytes));
                    true
                }
                Err(_) => false,
            }
        }
    }
}

/// A request counted by a circuit breaker; dropping it gives its place back.
struct Admitted<'a>(&'a std::sync::atomic::AtomicU32);

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Counts a request against the upstream's circuit breaker, or refuses it (503 with
/// `Retry-After`) when the breaker's limits are reached.
fn breaker_admit(b: &Breaker) -> Result<Admitted<'_>, Problem> {
    use std::sync::atomic::Ordering::Relaxed;
    let over = |what: &str| {
        Problem::new(&problems::UPSTREAM_OVERLOADED)
            .with_detail(format!("the upstream has too many {what}"))
            .with_header(header::RETRY_AFTER, HeaderValue::from_static("1"))
    };
    let n = b.requests.fetch_add(1, Relaxed);
    let admitted = Admitted(&b.requests);
    if b.max_requests.is_some_and(|m| n >= m) {
        return Err(over("requests in flight"));
    }
    Ok(admitted)
}

/// One try: sends the exchange's request to `node`. With `keep`, the exchange keeps the request
/// (head and body) for another try.
async fn send_to(
    ex: &mut Exchange,
    target: &Target,
    node: &Node,
    ctx: &RequestContext<'_>,
    how: &Forwarding<'_>,
    keep: bool,
) -> Tried {
    let transport = node.transport();
    let bad = |_: http::Error| {
        Tried::Failed(
            Failure::Client,
            Problem::new(&problems::BAD_REQUEST)
                .with_detail("the request's path cannot be sent to the backend"),
        )
    };
    let uri = match (ex.extensions.get::<FixedEndpoint>(), &target.path) {
        (Some(FixedEndpoint(endpoint)), _) => node.endpoint_uri(endpoint),
        (None, TargetPath::Join) => node.upstream_uri(ex.request.uri.path_and_query()),
        (None, TargetPath::Exact(pq)) => Ok(http::Uri::from(pq.clone())),
        (None, TargetPath::Template(t)) => http::uri::PathAndQuery::try_from(t.render_uri(ex))
            .map(http::Uri::from)
            .map_err(http::Error::from),
    };
    let mut uri = match uri {
        Ok(u) => u,
        Err(e) => return bad(e),
    };
    if transport.http2 {
        // HTTP/2 carries scheme and authority as pseudo-headers: give the full URI.
        let mut p = uri.into_parts();
        p.scheme = Some(node.scheme().clone());
        p.authority = Some(node.authority().clone());
        uri = match http::Uri::from_parts(p) {
            Ok(u) => u,
            Err(e) => return bad(e.into()),
        };
    }
    // HTTP/2 clients send the authority instead of `Host`.
    let client_authority = ex.request.uri.authority().cloned();
    let mut parts = if how.keep_request || keep {
        let mut p = Request::new(()).into_parts().0;
        p.method = ex.request.method.clone();
        p.headers = ex.request.headers.clone();
        p
    } else {
        std::mem::replace(&mut ex.request, Request::new(()).into_parts().0)
    };
    parts.uri = uri;
    parts.version = if transport.http2 {
        Version::HTTP_2
    } else {
        Version::HTTP_11
    };
    let te_trailers = parts
        .headers
        .get(header::TE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"trailers"));
    let upgrade_to = if how.upgrade {
        parts.headers.get(header::UPGRADE).cloned()
    } else {
        None
    };
    remove_hop_by_hop(&mut parts.headers);
    if te_trailers {
        // The one TE value that may cross (gRPC needs it).
        parts
            .headers
            .insert(header::TE, HeaderValue::from_static("trailers"));
    }
    if let Some(u) = upgrade_to {
        parts
            .headers
            .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        parts.headers.insert(header::UPGRADE, u);
    }
    let mut forwarded = Forwarded::of(
        &parts.headers,
        &ctx.conn.peer_ip,
        if ctx.conn.tls { "https" } else { "http" },
    );
    forwarded.request_id = Some((how.request_id.0.clone(), how.request_id.1.clone()));
    if transport.http2 {
        parts.headers.remove(header::HOST);
    } else if target.adjust_host {
        parts
            .headers
            .insert(header::HOST, node.host_header().clone());
    } else if !parts.headers.contains_key(header::HOST) {
        let host = client_authority
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
            .unwrap_or_else(|| node.host_header().clone());
        parts.headers.insert(header::HOST, host);
    }
    let body = if keep {
        match &ex.request_body {
            Body::Full(b) => Body::Full(b.clone()),
            _ => Body::Empty,
        }
    } else {
        std::mem::take(&mut ex.request_body)
    };
    let req = Request::from_parts(parts, body);
    let up = &*target.upstream;
    let timeout = match up.retries.as_ref().and_then(|r| r.per_try_timeout) {
        Some(t) => t,
        None => up.response_timeout.unwrap_or(how.timeout),
    };
    let result = crate::deadline::timeout(
        timeout,
        ctx.client.send(transport, req, forwarded, how.upgrade),
    )
    .await;
    let mut res = match result {
        Err(_) => {
            tracing::warn!(upstream = %up.name, node = %node.label, "no response head within {timeout:?}");
            return Tried::Failed(
                Failure::Timeout,
                Problem::new(&problems::UPSTREAM_TIMEOUT)
                    .with_detail(format!("no response within {timeout:?}")),
            );
        }
        Ok(Err(e)) => {
            let (kind, problem) = classify(&e, node);
            return Tried::Failed(kind, problem);
        }
        Ok(Ok(res)) => res,
    };
    let upgraded = if res.status() == StatusCode::SWITCHING_PROTOCOLS {
        res.extensions_mut().remove::<OnUpgrade>()
    } else {
        None
    };
    let (mut parts, body) = res.into_parts();
    // The pool hands back responses without hop-by-hop fields, except an upgrade's.
    let upgrade_to = if how.upgrade {
        let u = parts.headers.get(header::UPGRADE).cloned();
        remove_hop_by_hop(&mut parts.headers);
        u
    } else {
        None
    };
    if let (true, Some(u)) = (upgraded.is_some(), upgrade_to) {
        parts
            .headers
            .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        parts.headers.insert(header::UPGRADE, u);
    }
    Tried::Answered(Response::from_parts(parts, body), upgraded)
}

/// The problem for a failed backend exchange, and the kind of failure. What the client learns
/// is the kind of failure; the backend's address and the error itself go to the log. A request
/// body that broke off or whose framing is bad is the client's failure, not the backend's: 400
/// (the connection to the backend, which got a truncated request, is closed, and so is the
/// client's).
fn classify(e: &UpstreamError, node: &Node) -> (Failure, Problem) {
    let close = || HeaderValue::from_static("close");
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.downcast_ref::<BodyTooLarge>().is_some() {
            return (
                Failure::Client,
                Problem::new(&problems::BODY_TOO_LARGE)
                    .with_detail("the request body exceeds the configured limit")
                    .with_header(header::CONNECTION, close()),
            );
        }
        if s.downcast_ref::<BodyTimeout>().is_some() {
            return (
                Failure::Client,
                Problem::new(&problems::BODY_TIMEOUT).with_header(header::CONNECTION, close()),
            );
        }
        source = s.source();
    }
    if let UpstreamError::H1(H1Error::RequestBody(_) | H1Error::RequestBodyLength) = e {
        tracing::info!("request body from the client: {}", error_chain(e));
        return (
            Failure::Client,
            Problem::new(&problems::BAD_BODY)
                .with_detail("the body broke off or its chunked framing is invalid")
                .with_header(header::CONNECTION, close()),
        );
    }
    if let UpstreamError::Overloaded(what) = e {
        tracing::warn!(backend = %node.label, "circuit breaker: {e}");
        return (
            Failure::Refused,
            Problem::new(&problems::UPSTREAM_OVERLOADED)
                .with_detail(format!("the upstream has too many {what}"))
                .with_header(header::RETRY_AFTER, HeaderValue::from_static("1")),
        );
    }
    if matches!(e, UpstreamError::Tls { .. }) && !node.tls_warnings {
        tracing::debug!(backend = %node.label, "{}", error_chain(e));
    } else {
        tracing::warn!(backend = %node.label, "{}", error_chain(e));
    }
    match e {
        UpstreamError::Tls { .. } => (Failure::Connect, Problem::new(&problems::UPSTREAM_TLS)),
        UpstreamError::Connect { .. } | UpstreamError::ConnectTimeout { .. } => (
            Failure::Connect,
            Problem::new(&problems::UPSTREAM_UNREACHABLE),
        ),
        UpstreamError::H1(h) if h.is_stale_connection() => {
            (Failure::Reset, Problem::new(&problems::UPSTREAM_ERROR))
        }
        _ => (Failure::Other, Problem::new(&problems::UPSTREAM_ERROR)),
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::local;
    use std::time::Duration;
    use turnpike_core::{Policy, Step};

    /// Waits `delay` (forever when `None`), then answers with `status`.
    struct Slow {
        delay: Option<Duration>,
        status: u16,
    }

    impl Policy for Slow {
        fn name(&self) -> &'static str {
            "slow"
        }

        fn on_request(&self, _: &mut Exchange) -> Outcome {
            let (delay, status) = (self.delay, self.status);
            Outcome::Wait(Wait::new(
                async move {
                    match delay {
                        Some(d) => tokio::time::sleep(d).await,
                        None => std::future::pending::<()>().await,
                    }
                    Box::new(move |ex: &mut Exchange| {
                        ex.request
                            .headers
                            .insert("x-waited", HeaderValue::from(status));
                        Outcome::Continue
                    }) as turnpike_core::Resume
                },
                Duration::from_millis(100),
                |_| Outcome::Reject(Problem::new(&problems::POLICY_TIMEOUT)),
            ))
        }
    }

    fn chain(delay: Option<Duration>) -> Chain {
        let step = |d, status| Step {
            policy: Box::new(Slow { delay: d, status }) as Box<dyn Policy>,
            request: true,
            response: false,
        };
        Chain::new(vec![step(Some(Duration::ZERO), 1), step(delay, 2)])
    }

    fn exchange() -> Exchange {
        let (parts, _) = Request::new(()).into_parts();
        Exchange::new(
            parts,
            Body::Empty,
            "192.0.2.1:1".parse().unwrap(),
            PathParams::new(),
        )
    }

    #[test]
    fn waiting_steps_resume_the_chain_in_order() {
        local(async {
            let mut ex = exchange();
            let end = request_phase(&chain(Some(Duration::from_millis(5))), &mut ex).await;
            assert!(matches!(end, RequestEnd::Forward), "{end:?}");
            assert_eq!(ex.request.headers["x-waited"], "2");
        });
    }

    #[test]
    fn a_step_that_waits_too_long_gets_its_timeout_answer() {
        local(async {
            let mut ex = exchange();
            let started = Instant::now();
            let end = request_phase(&chain(None), &mut ex).await;
            let RequestEnd::Answered {
                at: 1,
                outcome: Outcome::Reject(p),
            } = end
            else {
                panic!("{end:?}")
            };
            assert_eq!(p.status, 504);
            assert!(started.elapsed() >= Duration::from_millis(100));
            assert_eq!(ex.request.headers["x-waited"], "1");
        });
    }
}
