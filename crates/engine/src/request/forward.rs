//! Forward: a request sent to a node of its target (the balancer's choice, skipping nodes
//! health took out), tried again on another node as the upstream's retry policy allows, each
//! try recorded in the node's health, counters and the request's trace.

use std::sync::Arc;
use std::time::Instant;

use http::header;
use http::{HeaderValue, Request, Response, StatusCode, Version};
use hyper::upgrade::OnUpgrade;
use smallvec::SmallVec;
use turnpike_core::body::BodyTooLarge;
use turnpike_core::{problems, Body, Exchange, Problem};
use turnpike_snapshot::upstream::{now_ms, Breaker, Target, TargetPath, Upstream};
use turnpike_snapshot::Node;
use turnpike_telemetry::trace::KeyValue;

use crate::balance::NoNode;
use crate::headers::{remove_hop_by_hop, Forwarded};
use crate::slow::BodyTimeout;
use crate::upstream::{H1Error, UpstreamError};

use super::body::buffer;
use super::RequestContext;

/// How one request is forwarded.
pub(super) struct Forwarding<'a> {
    /// The request id's header and value, sent to the backend.
    pub(super) request_id: (&'a http::HeaderName, &'a HeaderValue),
    /// Time allowed for the backend's response head.
    pub(super) timeout: std::time::Duration,
    /// The response phase reads the request, so the exchange keeps a copy of the request head
    /// (otherwise the head moves to the backend without a copy).
    pub(super) keep_request: bool,
    /// The client asked to switch protocols: `Upgrade` and `Connection: upgrade` are passed on.
    pub(super) upgrade: bool,
}

/// The spans of a traced request, and the attributes its server span ends with.
pub(super) type Traced = Option<turnpike_telemetry::trace::Trace>;

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
pub(super) async fn forward(
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
        .directives
        .affinity
        .as_ref()
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
    // A slot in the upstream's concurrency limit, held until the response head.
    let _slot = super::admission::admit(up, ex).await?;
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
    let uri = match (&ex.directives.fixed_endpoint, &target.path) {
        (Some(endpoint), _) => node.endpoint_uri(endpoint),
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
