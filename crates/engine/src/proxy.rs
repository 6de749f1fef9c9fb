//! The request path: route → exchange → request phase → target (or the policy's answer) →
//! response phase → client. Every error the gateway generates has the right status and a
//! machine-readable body — problem+json, a gRPC status for gRPC requests, a SOAP fault on SOAP
//! APIs — and is logged.
//! WebSocket (and other HTTP/1.1) upgrades are forwarded, then tunnelled both ways.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use http::header;
use http::{HeaderValue, Request, Response, StatusCode, Version};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use turnpike_core::body::BodyTooLarge;
use turnpike_core::exchange::{ClientCertificate, FixedEndpoint};
use turnpike_core::{
    Body, BodyInspected, BodyInspector, BodyNeed, Exchange, Outcome, Problem, RequestEnd,
};

use crate::access_log::{self, AccessRecord};
use crate::headers::{remove_hop_by_hop, Forwarded};
use crate::snapshot::{Api, ErrorFormat as ApiErrorFormat, Snapshot};
use crate::upstream::{UpstreamError, UpstreamPool};
use crate::worker::ConnInfo;

/// What a worker needs to serve a request besides the snapshot.
pub struct RequestContext<'a> {
    /// The worker's upstream connection pool.
    pub client: &'a UpstreamPool,
    /// The listening address the request arrived on, as configured (the snapshot's key).
    pub listener: SocketAddr,
    /// The connection the request came on.
    pub conn: &'a ConnInfo,
}

/// How the gateway's own error answers are written for a request.
#[derive(Clone, PartialEq, Eq)]
enum ErrorFormat {
    /// RFC 9457 problem+json.
    Problem,
    /// A gRPC "trailers-only" answer: HTTP 200 with `grpc-status` and `grpc-message`.
    Grpc,
    /// A SOAP fault in the version of the request's `Content-Type` (SOAP APIs).
    Soap(Option<HeaderValue>),
}

impl ErrorFormat {
    fn of(req: &Request<Incoming>) -> Self {
        let grpc = req
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
        if grpc {
            ErrorFormat::Grpc
        } else {
            ErrorFormat::Problem
        }
    }

    fn render(&self, p: Problem) -> Response<Body> {
        match self {
            ErrorFormat::Problem => p.into_response(),
            ErrorFormat::Grpc => grpc_error(&p),
            ErrorFormat::Soap(ct) => ApiErrorFormat::SoapFault.render(p, ct.as_ref()),
        }
    }
}

/// The gRPC status code for an HTTP status the gateway answers with.
fn grpc_code(status: StatusCode) -> u8 {
    match status.as_u16() {
        400 | 413 | 415 | 422 => 3, // INVALID_ARGUMENT
        401 => 16,                  // UNAUTHENTICATED
        403 => 7,                   // PERMISSION_DENIED
        404 | 405 => 12,            // UNIMPLEMENTED
        429 => 8,                   // RESOURCE_EXHAUSTED
        504 => 4,                   // DEADLINE_EXCEEDED
        502 | 503 => 14,            // UNAVAILABLE
        _ => 13,                    // INTERNAL
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
        Some(d) => format!("{}: {d}", p.title),
        None => p.title.to_string(),
    };
    // grpc-message is percent-encoded (gRPC over HTTP/2 spec).
    let encoded = percent_encode_grpc(&message);
    if let Ok(v) = HeaderValue::from_str(&encoded) {
        h.insert("grpc-message", v);
    }
    for (k, v) in &p.headers {
        h.append(k.clone(), v.clone());
    }
    res
}

fn percent_encode_grpc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
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

/// Serves one request against `snap`. Never fails: errors become problem responses.
pub async fn serve(
    snap: Arc<Snapshot>,
    ctx: RequestContext<'_>,
    req: Request<Incoming>,
) -> Response<Body> {
    let settings = &snap.settings;
    let log = RequestLog::start(settings.access_log, ctx.conn.peer, &req);
    let mut format = ErrorFormat::of(&req);
    let version = req.version();
    let routes = snap.listeners.get(&ctx.listener);
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri().host());
    let found = routes.and_then(|r| r.router.lookup(host, req.method(), req.uri().path()));
    let Some(m) = found else {
        let problem = Problem::no_route().with_detail(format!(
            "no API on this port matches {} {}",
            req.method(),
            req.uri().path()
        ));
        return log.finish(
            format.render(problem),
            None,
            None,
            Some("no route"),
            None,
            version,
        );
    };
    let api: Arc<Api> = Arc::clone(m.value);
    let params = m.params;

    if api.error_format == ApiErrorFormat::SoapFault {
        format = ErrorFormat::Soap(req.headers().get(header::CONTENT_TYPE).cloned());
    }
    let upgrade = is_upgrade(&req);
    let (mut parts, body) = req.into_parts();
    let client_upgrade = if upgrade {
        parts.extensions.remove::<OnUpgrade>()
    } else {
        None
    };

    // Request body limit: announced sizes are checked now, streamed ones as they arrive.
    let limit = settings.max_body_size;
    let announced = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let body = match announced {
        Some(n) if n > limit => {
            let problem = Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body-too-large",
                "Request body too large",
            )
            .with_detail(format!("the body has {n} bytes; the limit is {limit}"));
            return log.finish(
                format.render(problem),
                Some(&api),
                None,
                Some("body too large"),
                None,
                version,
            );
        }
        Some(_) => Body::Incoming(body),
        None if http_body::Body::is_end_stream(&body) => Body::Empty,
        None => Body::Limited {
            inner: body,
            remaining: limit,
        },
    };

    // A streamed (chunked) body on GET or HEAD would not be sent on by the HTTP/1.1 client
    // (those methods get no implicit body framing), so such a body is read in full first: it is
    // forwarded with a Content-Length, and malformed chunked framing is refused here instead of
    // being silently dropped.
    let body = if matches!(parts.method, http::Method::GET | http::Method::HEAD)
        && parts.headers.contains_key(header::TRANSFER_ENCODING)
    {
        match Box::pin(buffer(body, limit)).await {
            Ok(bytes) => {
                parts.headers.remove(header::TRANSFER_ENCODING);
                parts
                    .headers
                    .insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
                Body::Full(Some(bytes))
            }
            Err(problem) => {
                return log.finish(
                    format.render(problem),
                    Some(&api),
                    None,
                    Some("request body"),
                    None,
                    version,
                );
            }
        }
    } else {
        body
    };
    let mut ex = Exchange::new(parts, body, ctx.conn.peer, params);
    if let Some(subject) = &ctx.conn.client_cert {
        ex.extensions.insert(ClientCertificate {
            subject: subject.to_string(),
        });
    }
    let mut upstream_status = None;
    let mut error: Option<&'static str> = None;
    if api.chain.body_need() == BodyNeed::Buffer {
        let mut inspectors = api.chain.body_inspectors();
        let body = std::mem::take(&mut ex.request_body);
        let read = if inspectors.is_empty() {
            Box::pin(buffer(body, limit)).await
        } else {
            Box::pin(buffer_inspected(body, limit, &mut inspectors)).await
        };
        match read {
            Ok(bytes) => {
                ex.request_body = Body::Full(Some(bytes));
                if !inspectors.is_empty() {
                    ex.extensions.insert(BodyInspected);
                }
            }
            Err(problem) => {
                let kind = problem.kind;
                return log.finish(
                    format.render(problem),
                    Some(&api),
                    None,
                    Some(kind),
                    None,
                    version,
                );
            }
        }
    }
    let internal = || {
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "Internal error",
        )
    };
    let mut backend_upgrade = None;
    let (response, end) = match api.chain.run_request(&mut ex) {
        RequestEnd::Answered { at, outcome } => {
            let res = match outcome {
                Outcome::Respond(r) => r,
                Outcome::Reject(p) => {
                    error = Some(p.kind);
                    format.render(p)
                }
                Outcome::Continue => format.render(internal()),
            };
            (res, at)
        }
        RequestEnd::Forward => match &api.target {
            Some(target) => {
                let how = Forwarding {
                    timeout: settings.upstream_timeout,
                    keep_request: api.chain.response_needs_request(),
                    upgrade: client_upgrade.is_some(),
                };
                match forward(&mut ex, target, &ctx, how).await {
                    Ok((res, up)) => {
                        upstream_status = Some(res.status());
                        backend_upgrade = up;
                        (res, usize::MAX)
                    }
                    Err((kind, problem)) => {
                        error = Some(kind);
                        tracing::warn!(api = %api.name, uri = %ex.original_uri, "{}", problem.detail.as_deref().unwrap_or(kind));
                        (format.render(problem), usize::MAX)
                    }
                }
            }
            None => {
                // Compilation guarantees a target or an answering flow; reaching here means a
                // conditional answer did not fire.
                error = Some("no target");
                (
                    format.render(Problem::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "no-target",
                        "This API has no target",
                    )),
                    usize::MAX,
                )
            }
        },
    };
    let mut response = if api.chain.has_response_steps() {
        let response = if api.chain.response_body_need() == BodyNeed::Buffer
            && response.status() != StatusCode::SWITCHING_PROTOCOLS
        {
            let (parts, body) = response.into_parts();
            match Box::pin(buffer(body, limit)).await {
                Ok(bytes) => Response::from_parts(parts, Body::Full(Some(bytes))),
                Err(_) => {
                    error = Some("response body");
                    format.render(Problem::new(
                        StatusCode::BAD_GATEWAY,
                        "upstream-error",
                        "The backend's response could not be read",
                    ))
                }
            }
        } else {
            response
        };
        ex.response = Some(response);
        if let Some(p) = api.chain.run_response(&mut ex, end) {
            error = Some(p.kind);
            format.render(p)
        } else {
            ex.response
                .take()
                .unwrap_or_else(|| format.render(internal()))
        }
    } else {
        response
    };
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        match (client_upgrade, backend_upgrade) {
            (Some(client), Some(backend)) => tunnel(client, backend),
            _ => {
                error = Some("upgrade");
                response = format.render(Problem::new(
                    StatusCode::BAD_GATEWAY,
                    "upstream-error",
                    "The backend switched protocols unasked",
                ));
            }
        }
    }
    let consumer = ex.identity().and_then(|i| i.consumer.clone());
    log.finish(
        response,
        Some(&api),
        upstream_status,
        error,
        consumer.as_deref(),
        version,
    )
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

/// Reads a whole body into memory, failing with 413 past `limit` bytes and 400 when the peer
/// breaks off.
async fn buffer(body: Body, limit: u64) -> Result<bytes::Bytes, Problem> {
    use http_body_util::BodyExt;
    match body.capped(limit).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) => Err(read_error(&e, limit)),
    }
}

fn read_error(e: &turnpike_core::body::BodyError, limit: u64) -> Problem {
    if e.downcast_ref::<BodyTooLarge>().is_some() {
        Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body-too-large",
            "Request body too large",
        )
        .with_detail(format!("the body exceeds the limit of {limit} bytes"))
    } else {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "bad-body",
            "The body could not be read",
        )
        .with_detail(e.to_string())
    }
}

/// Like [`buffer`], feeding every chunk to the chain's body inspectors as it arrives; the first
/// inspector's error stops reading.
async fn buffer_inspected(
    body: Body,
    limit: u64,
    inspectors: &mut [Box<dyn BodyInspector>],
) -> Result<bytes::Bytes, Problem> {
    use http_body_util::BodyExt;
    let mut body = body.capped(limit);
    let mut first: Option<bytes::Bytes> = None;
    let mut rest = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| read_error(&e, limit))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        for i in inspectors.iter_mut() {
            i.chunk(&data).map_err(|p| *p)?;
        }
        // A body in one chunk (the usual case) is kept without copying.
        match &first {
            None if rest.is_empty() => first = Some(data),
            _ => {
                if let Some(f) = first.take() {
                    rest.extend_from_slice(&f);
                }
                rest.extend_from_slice(&data);
            }
        }
    }
    for i in inspectors.iter_mut() {
        i.end().map_err(|p| *p)?;
    }
    Ok(match first {
        Some(f) => f,
        None => rest.freeze(),
    })
}

type ForwardError = (&'static str, Problem);

/// Sends the exchange's request to `target` and returns its response with hop-by-hop headers
/// removed.
/// How one request is forwarded.
struct Forwarding {
    /// Time allowed for the backend's response head.
    timeout: std::time::Duration,
    /// The response phase reads the request, so the exchange keeps a copy of the request head
    /// (otherwise the head moves to the backend without a copy).
    keep_request: bool,
    /// The client asked to switch protocols: `Upgrade` and `Connection: upgrade` are passed on.
    upgrade: bool,
}

/// Sends the exchange's request to `target`; returns its response (hop-by-hop headers removed)
/// and, for a 101 answer, the backend side of the upgraded connection.
async fn forward(
    ex: &mut Exchange,
    target: &crate::target::Target,
    ctx: &RequestContext<'_>,
    how: Forwarding,
) -> Result<(Response<Body>, Option<OnUpgrade>), ForwardError> {
    let transport = target.transport();
    let bad = |e: http::Error| {
        (
            "bad-uri",
            Problem::new(StatusCode::BAD_REQUEST, "bad-request", "Bad request")
                .with_detail(e.to_string()),
        )
    };
    let mut uri = match ex.extensions.get::<FixedEndpoint>() {
        Some(FixedEndpoint(endpoint)) => target.endpoint_uri(endpoint),
        None => target.upstream_uri(ex.request.uri.path_and_query()),
    }
    .map_err(bad)?;
    if transport.http2 {
        // HTTP/2 carries scheme and authority as pseudo-headers: give the full URI.
        let mut p = uri.into_parts();
        p.scheme = Some(target.scheme().clone());
        p.authority = Some(target.authority().clone());
        uri = http::Uri::from_parts(p).map_err(|e| bad(e.into()))?;
    }
    // HTTP/2 clients send the authority instead of `Host`.
    let client_authority = ex.request.uri.authority().cloned();
    let mut parts = if how.keep_request {
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
    let forwarded = Forwarded::of(
        &parts.headers,
        &ctx.conn.peer_ip,
        if ctx.conn.tls { "https" } else { "http" },
    );
    if transport.http2 {
        parts.headers.remove(header::HOST);
    } else if target.adjust_host {
        parts
            .headers
            .insert(header::HOST, target.host_header().clone());
    } else if !parts.headers.contains_key(header::HOST) {
        let host = client_authority
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
            .unwrap_or_else(|| target.host_header().clone());
        parts.headers.insert(header::HOST, host);
    }
    let body = std::mem::take(&mut ex.request_body);
    let req = Request::from_parts(parts, body);
    let timeout = how.timeout;
    let result = crate::deadline::timeout(
        timeout,
        ctx.client.send(transport, req, forwarded, how.upgrade),
    )
    .await;
    let mut res = match result {
        Err(_) => {
            return Err((
                "upstream timeout",
                Problem::new(
                    StatusCode::GATEWAY_TIMEOUT,
                    "upstream-timeout",
                    "The backend did not answer in time",
                )
                .with_detail(format!(
                    "no response from {} within {:?}",
                    target.authority(),
                    timeout
                )),
            ))
        }
        Ok(Err(e)) => return Err(classify(&e, target)),
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
    Ok((Response::from_parts(parts, body), upgraded))
}

fn classify(e: &UpstreamError, target: &crate::target::Target) -> ForwardError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.downcast_ref::<BodyTooLarge>().is_some() {
            return (
                "body too large",
                Problem::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body-too-large",
                    "Request body too large",
                )
                .with_detail("the request body exceeds the configured limit"),
            );
        }
        source = s.source();
    }
    if let UpstreamError::Tls { .. } = e {
        return (
            "upstream tls",
            Problem::new(
                StatusCode::BAD_GATEWAY,
                "upstream-tls",
                "TLS to the backend failed",
            )
            .with_detail(error_chain(e)),
        );
    }
    if matches!(
        e,
        UpstreamError::Connect { .. } | UpstreamError::ConnectTimeout { .. }
    ) {
        return (
            "upstream unreachable",
            Problem::new(
                StatusCode::BAD_GATEWAY,
                "upstream-unreachable",
                "The backend cannot be reached",
            )
            .with_detail(format!(
                "connecting to {} failed: {}",
                target.authority(),
                error_chain(e)
            )),
        );
    }
    (
        "upstream error",
        Problem::new(
            StatusCode::BAD_GATEWAY,
            "upstream-error",
            "The backend failed",
        )
        .with_detail(format!(
            "request to {} failed: {}",
            target.authority(),
            error_chain(e)
        )),
    )
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
    entry: Option<(Instant, SocketAddr, http::Method, http::Uri)>,
}

impl RequestLog {
    fn start(enabled: bool, peer: SocketAddr, req: &Request<Incoming>) -> Self {
        RequestLog {
            entry: enabled.then(|| {
                (
                    Instant::now(),
                    peer,
                    req.method().clone(),
                    req.uri().clone(),
                )
            }),
        }
    }

    /// Writes the access log line (when on) and returns the response to send.
    fn finish(
        self,
        response: Response<Body>,
        api: Option<&Api>,
        upstream_status: Option<StatusCode>,
        error: Option<&str>,
        consumer: Option<&str>,
        version: Version,
    ) -> Response<Body> {
        let mut response = response;
        // Answer in the client's protocol, whatever the backend spoke.
        if response.version() != version {
            *response.version_mut() = version;
        }
        if let Some((start, client, method, uri)) = &self.entry {
            access_log::write(&AccessRecord {
                client: *client,
                method,
                uri: uri.path_and_query().map_or("/", |p| p.as_str()),
                api: api.map(|a| &*a.name),
                status: response.status(),
                elapsed: start.elapsed(),
                upstream_status,
                error,
                consumer,
            });
        }
        response
    }
}
