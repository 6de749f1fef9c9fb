//! The request path: route → exchange → request phase → target (or the policy's answer) →
//! response phase → client. Every error the gateway generates is problem+json with the right
//! status (a SOAP fault on SOAP APIs, see [`ErrorFormat`]), and is logged.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use http::header;
use http::{Request, Response, StatusCode, Version};
use hyper::body::Incoming;
use turnpike_core::body::BodyTooLarge;
use turnpike_core::exchange::FixedEndpoint;
use turnpike_core::{Body, BodyNeed, Exchange, Outcome, Problem, RequestEnd};

use crate::access_log::{self, AccessRecord};
use crate::headers::{add_forwarded, remove_hop_by_hop};
use crate::snapshot::{Api, ErrorFormat, Snapshot};
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
    // Timing is read only when it is logged.
    let start = settings.access_log.then(Instant::now);
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
        return finish_log(
            settings.access_log,
            &ctx,
            &req,
            None,
            start,
            None,
            problem.into_response(),
            Some("no route"),
        );
    };
    let api: Arc<Api> = Arc::clone(m.value);
    let params = m.params;

    let (parts, body) = req.into_parts();
    // The request's Content-Type, kept only where problems are answered as SOAP faults.
    let soap_ct = match api.error_format {
        ErrorFormat::ProblemJson => None,
        ErrorFormat::SoapFault => parts.headers.get(header::CONTENT_TYPE).cloned(),
    };
    let render = |p: Problem| api.error_format.render(p, soap_ct.as_ref());
    let log_method = parts.method.clone();
    let log_uri = parts.uri.clone();

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
            return log_and(
                settings.access_log,
                &ctx,
                &log_method,
                &log_uri,
                Some(&api),
                start,
                None,
                render(problem),
                Some("body too large"),
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
                return log_and(
                    settings.access_log,
                    &ctx,
                    &log_method,
                    &log_uri,
                    Some(&api),
                    start,
                    None,
                    render(problem),
                    Some("request body"),
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
                    render(p)
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
            Some(target) => match forward(&mut ex, target, &ctx, settings.upstream_timeout).await {
                Ok(res) => {
                    upstream_status = Some(res.status());
                    (res, usize::MAX)
                }
                Err((kind, problem)) => {
                    error = Some(kind);
                    tracing::warn!(api = %api.name, uri = %log_uri, "{}", problem.detail.as_deref().unwrap_or(kind));
                    (render(problem), usize::MAX)
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
                    render(Problem::new(
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
            render(p)
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
    log_and(
        settings.access_log,
        &ctx,
        &log_method,
        &log_uri,
        Some(&api),
        start,
        upstream_status,
        response,
        error,
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
async fn forward(
    ex: &mut Exchange,
    target: &crate::target::Target,
    ctx: &RequestContext<'_>,
    timeout: std::time::Duration,
) -> Result<Response<Body>, ForwardError> {
    let uri = match ex.extensions.get::<FixedEndpoint>() {
        Some(FixedEndpoint(endpoint)) => target.endpoint_uri(endpoint),
        None => target.upstream_uri(ex.request.uri.path_and_query()),
    }
    .map_err(|e| {
        (
            "bad-uri",
            Problem::new(StatusCode::BAD_REQUEST, "bad-request", "Bad request")
                .with_detail(e.to_string()),
        )
    })?;
    let mut parts = std::mem::replace(&mut ex.request, Request::new(()).into_parts().0);
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

#[allow(clippy::too_many_arguments)]
fn log_and(
    enabled: bool,
    ctx: &RequestContext<'_>,
    method: &http::Method,
    uri: &http::Uri,
    api: Option<&Api>,
    start: Option<Instant>,
    upstream_status: Option<StatusCode>,
    mut response: Response<Body>,
    error: Option<&str>,
) -> Response<Body> {
    if enabled {
        access_log::write(&AccessRecord {
            client: ctx.peer,
            method,
            uri: uri.path_and_query().map_or("/", |p| p.as_str()),
            api: api.map(|a| &*a.name),
            status: response.status(),
            elapsed: start.map_or(std::time::Duration::ZERO, |s| s.elapsed()),
            upstream_status,
            error,
        });
    }
    if response.version() != Version::HTTP_11 {
        *response.version_mut() = Version::HTTP_11;
    }
    response
}

#[allow(clippy::too_many_arguments)]
fn finish_log(
    enabled: bool,
    ctx: &RequestContext<'_>,
    req: &Request<Incoming>,
    api: Option<&Api>,
    start: Option<Instant>,
    upstream_status: Option<StatusCode>,
    response: Response<Body>,
    error: Option<&str>,
) -> Response<Body> {
    log_and(
        enabled,
        ctx,
        req.method(),
        req.uri(),
        api,
        start,
        upstream_status,
        response,
        error,
    )
}
