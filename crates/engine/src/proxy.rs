//! The request path: route → exchange → request phase → target (or the policy's answer) →
//! response phase → client. Every error the gateway generates is problem+json with the right
//! status, and is logged.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use http::header;
use http::{Request, Response, StatusCode, Version};
use hyper::body::Incoming;
use turnpike_core::body::BodyTooLarge;
use turnpike_core::{Body, BodyNeed, Exchange, Outcome, Problem, RequestEnd};

use crate::access_log::{self, AccessRecord};
use crate::headers::{add_forwarded, remove_hop_by_hop};
use crate::snapshot::{Api, Snapshot};
use crate::upstream::{UpstreamError, UpstreamPool};
use http::HeaderValue;

/// What a worker needs to serve a request besides the snapshot.
pub struct RequestContext<'a> {
    /// The worker's upstream connection pool.
    pub client: &'a UpstreamPool,
    /// The listening address the request arrived on, as configured (the snapshot's key).
    pub listener: SocketAddr,
    /// The client's address.
    pub peer: SocketAddr,
    /// The client's IP as an `X-Forwarded-For` element (computed once per connection).
    pub peer_ip: &'a HeaderValue,
}

/// Serves one request against `snap`. Never fails: errors become problem responses.
pub async fn serve(
    snap: Arc<Snapshot>,
    ctx: RequestContext<'_>,
    req: Request<Incoming>,
) -> Response<Body> {
    let settings = &snap.settings;
    let log = RequestLog::start(settings.access_log, ctx.peer, &req);
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
        return log.finish(problem.into_response(), None, None, Some("no route"), None);
    };
    let api: Arc<Api> = Arc::clone(m.value);
    let params = m.params;

    let (parts, body) = req.into_parts();

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
                problem.into_response(),
                Some(&api),
                None,
                Some("body too large"),
                None,
            );
        }
        Some(_) => Body::Incoming(body),
        None if http_body::Body::is_end_stream(&body) => Body::Empty,
        None => Body::Limited {
            inner: body,
            remaining: limit,
        },
    };

    let mut ex = Exchange::new(parts, body, ctx.peer, params);
    let mut upstream_status = None;
    let mut error: Option<&'static str> = None;
    if api.chain.body_need() == BodyNeed::Buffer {
        match buffer(std::mem::take(&mut ex.request_body), limit).await {
            Ok(bytes) => ex.request_body = Body::Full(Some(bytes)),
            Err(problem) => {
                return log.finish(
                    problem.into_response(),
                    Some(&api),
                    None,
                    Some("request body"),
                    None,
                );
            }
        }
    }
    let (response, end) = match api.chain.run_request(&mut ex) {
        RequestEnd::Answered { at, outcome } => {
            let res = match outcome {
                Outcome::Respond(r) => r,
                Outcome::Reject(p) => {
                    error = Some(p.kind);
                    p.into_response()
                }
                Outcome::Continue => Problem::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "Internal error",
                )
                .into_response(),
            };
            (res, at)
        }
        RequestEnd::Forward => match &api.target {
            Some(target) => match forward(
                &mut ex,
                target,
                &ctx,
                settings.upstream_timeout,
                api.chain.response_needs_request(),
            )
            .await
            {
                Ok(res) => {
                    upstream_status = Some(res.status());
                    (res, usize::MAX)
                }
                Err((kind, problem)) => {
                    error = Some(kind);
                    tracing::warn!(api = %api.name, uri = %ex.original_uri, "{}", problem.detail.as_deref().unwrap_or(kind));
                    (problem.into_response(), usize::MAX)
                }
            },
            None => {
                // Compilation guarantees a target or an answering flow; reaching here means a
                // conditional answer did not fire.
                error = Some("no target");
                (
                    Problem::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "no-target",
                        "This API has no target",
                    )
                    .into_response(),
                    usize::MAX,
                )
            }
        },
    };
    let response = if api.chain.has_response_steps() {
        let response = if api.chain.response_body_need() == BodyNeed::Buffer {
            let (parts, body) = response.into_parts();
            match buffer(body, limit).await {
                Ok(bytes) => Response::from_parts(parts, Body::Full(Some(bytes))),
                Err(_) => {
                    error = Some("response body");
                    Problem::new(
                        StatusCode::BAD_GATEWAY,
                        "upstream-error",
                        "The backend's response could not be read",
                    )
                    .into_response()
                }
            }
        } else {
            response
        };
        ex.response = Some(response);
        if let Some(p) = api.chain.run_response(&mut ex, end) {
            error = Some(p.kind);
            p.into_response()
        } else {
            ex.response.take().unwrap_or_else(|| {
                Problem::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "Internal error",
                )
                .into_response()
            })
        }
    } else {
        response
    };
    let consumer = ex.identity().and_then(|i| i.consumer.clone());
    log.finish(
        response,
        Some(&api),
        upstream_status,
        error,
        consumer.as_deref(),
    )
}

/// Reads a whole body into memory, failing with 413 past `limit` bytes and 400 when the peer
/// breaks off.
async fn buffer(body: Body, limit: u64) -> Result<bytes::Bytes, Problem> {
    use http_body_util::BodyExt;
    let body = match body {
        Body::Incoming(inner) => Body::Limited {
            inner,
            remaining: limit,
        },
        other => other,
    };
    match body.collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.downcast_ref::<BodyTooLarge>().is_some() => Err(Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body-too-large",
            "Request body too large",
        )
        .with_detail(format!("the body exceeds the limit of {limit} bytes"))),
        Err(e) => Err(Problem::new(
            StatusCode::BAD_REQUEST,
            "bad-body",
            "The body could not be read",
        )
        .with_detail(e.to_string())),
    }
}

type ForwardError = (&'static str, Problem);

/// Sends the exchange's request to `target` and returns its response with hop-by-hop headers
/// removed.
/// `keep_request`: the response phase reads the request, so the exchange keeps its own copy of
/// the request head (otherwise the head moves to the backend without a copy).
async fn forward(
    ex: &mut Exchange,
    target: &crate::target::Target,
    ctx: &RequestContext<'_>,
    timeout: std::time::Duration,
    keep_request: bool,
) -> Result<Response<Body>, ForwardError> {
    let uri = target
        .upstream_uri(ex.request.uri.path_and_query())
        .map_err(|e| {
            (
                "bad-uri",
                Problem::new(StatusCode::BAD_REQUEST, "bad-request", "Bad request")
                    .with_detail(e.to_string()),
            )
        })?;
    let mut parts = if keep_request {
        let mut p = Request::new(()).into_parts().0;
        p.method = ex.request.method.clone();
        p.headers = ex.request.headers.clone();
        p
    } else {
        std::mem::replace(&mut ex.request, Request::new(()).into_parts().0)
    };
    parts.uri = uri;
    parts.version = Version::HTTP_11;
    remove_hop_by_hop(&mut parts.headers);
    add_forwarded(&mut parts.headers, ctx.peer_ip, "http");
    if target.adjust_host || !parts.headers.contains_key(header::HOST) {
        parts
            .headers
            .insert(header::HOST, target.host_header().clone());
    }
    let body = std::mem::take(&mut ex.request_body);
    let req = Request::from_parts(parts, body);
    let result = tokio::time::timeout(timeout, ctx.client.send(target.authority(), req)).await;
    let res = match result {
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
    let (mut parts, body) = res.into_parts();
    remove_hop_by_hop(&mut parts.headers);
    Ok(Response::from_parts(parts, Body::Incoming(body)))
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
    ) -> Response<Body> {
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
