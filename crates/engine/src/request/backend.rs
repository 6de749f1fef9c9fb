//! Where a request goes once its flow let it through: the API's backend (a target, an internal
//! API, or the origin a forward proxy's request names), or the WebSocket target for an upgrade;
//! and a policy's own answer when the flow answered instead.

use std::net::SocketAddr;
use std::sync::Arc;

use http::{Response, StatusCode};
use hyper::upgrade::OnUpgrade;
use turnpike_core::{problems, Body, BodyNeed, Exchange, Outcome, Problem, RequestEnd};
use turnpike_snapshot::{Api, Backend, Snapshot};

use super::body::buffer_body;
use super::forward::{forward, Forwarding, Traced};
use super::phases::{request_phase, response_phase};
use super::{RequestContext, Served};

/// The response a policy answered with (a rejection rendered in the API's format, and counted
/// for `/metrics` when `count` names the API, the step and the worker).
pub(super) fn answered(
    outcome: Outcome,
    served: &mut Served,
    count: Option<(&Api, usize, usize)>,
) -> Response<Body> {
    match outcome {
        Outcome::Respond(r) => r,
        Outcome::Reject(p) => {
            if let Some((api, at, worker)) = count {
                api.stats
                    .rejection(worker, api.chain.step_name(at), p.ty.kind);
            }
            served.reject(p)
        }
        Outcome::Continue | Outcome::Wait(_) => served.reject(Problem::new(&problems::INTERNAL)),
    }
}

/// Calls the API's backend for a request its flow let through: the forward proxy's origin,
/// the internal API a policy chose or the API names, the WebSocket target for an upgrade, or
/// the API's target. Returns the response (a problem rendered when the call failed) and, for a
/// 101 answer, the backend side of the upgraded connection.
pub(super) async fn call(
    snap: &Snapshot,
    ctx: &RequestContext<'_>,
    api: &Api,
    ex: &mut Exchange,
    served: &mut Served,
    trace: &mut Traced,
    client_upgrade: &mut Option<OnUpgrade>,
) -> (Response<Body>, Option<OnUpgrade>) {
    let settings = &snap.settings;
    if let Backend::ForwardProxy(rules) = &api.backend {
        let connect = ex.request.method == http::Method::CONNECT;
        let client = if connect { client_upgrade.take() } else { None };
        let own: Vec<SocketAddr> = snap.listeners.keys().copied().collect();
        let called = crate::forward_proxy::forward(
            ex,
            client,
            (rules, &own),
            &settings.dns,
            settings.connect_timeout,
            settings.upstream_timeout,
        )
        .await;
        return match called {
            Ok(res) => {
                served.upstream_status = Some(res.status());
                (res, None)
            }
            Err(p) => (served.reject(p), None),
        };
    }
    // A WebSocket upgrade goes where the API's `webSocket.url` says, if it says.
    let target = match (&api.websocket_target, &client_upgrade) {
        (Some(ws), Some(_)) => Some(ws),
        _ => api.backend.target(),
    };
    match (internal_next(api, ex), target) {
        (Some(name), _) => match call_internal(snap, ctx, &name, ex, served, trace, 1).await {
            Ok(r) => (r, None),
            Err(p) => (served.reject(p), None),
        },
        (None, Some(target)) => {
            let how = Forwarding {
                request_id: (&settings.request_id_header, &served.request_id),
                timeout: settings.upstream_timeout,
                keep_request: api.chain.response_needs_request(),
                upgrade: client_upgrade.is_some(),
            };
            match forward(ex, target, ctx, how, trace).await {
                Ok((res, up, node)) => {
                    if let Some(a) = ex.directives.affinity.as_mut() {
                        a.answered = Some(Arc::clone(&node));
                    }
                    served.upstream_status = Some(res.status());
                    served.upstream_node = Some(node);
                    (res, up)
                }
                Err(problem) => {
                    let what = problem.detail.as_deref().unwrap_or(problem.ty.log);
                    let id = served.request_id.to_str().unwrap_or("");
                    if problem.status.is_server_error() {
                        tracing::warn!(api = %api.name, uri = %ex.original_uri, request_id = id, "{what}");
                    } else {
                        tracing::info!(api = %api.name, uri = %ex.original_uri, request_id = id, "{what}");
                    }
                    (served.reject(problem), None)
                }
            }
        }
        // Compilation guarantees a target or an answering flow; reaching here means a
        // conditional answer did not fire.
        (None, None) => (served.reject(Problem::new(&problems::NO_TARGET)), None),
    }
}

/// A 101 answer: the client's and the backend's upgraded connections are tunnelled both ways.
/// A backend that switched protocols unasked is an error.
pub(super) fn upgraded(
    response: Response<Body>,
    client: Option<OnUpgrade>,
    backend: Option<OnUpgrade>,
    served: &mut Served,
) -> Response<Body> {
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        return response;
    }
    match (client, backend) {
        (Some(client), Some(backend)) => {
            tunnel(client, backend);
            response
        }
        _ => served.reject(
            Problem::new(&problems::UPSTREAM_ERROR)
                .with_detail("the backend switched protocols unasked"),
        ),
    }
}

/// Where a request the flow did not answer goes in-process: the internal API a policy chose
/// (`destination`), else the API's `internal://` target.
fn internal_next(api: &Api, ex: &mut Exchange) -> Option<Arc<str>> {
    ex.directives
        .destination
        .take()
        .or_else(|| match &api.backend {
            Backend::Internal(name) => Some(Arc::clone(name)),
            _ => None,
        })
}

/// How deep internal APIs may call each other.
const MAX_INTERNAL_DEPTH: usize = 8;

/// Runs the API `name` (an `internal:` document or a named API) in-process for `ex`: its
/// request phase, then its own target (a backend, or another internal API), then its response
/// phase. Returns its response, or the problem that stopped it (an unknown name, a loop).
pub(super) fn call_internal<'a>(
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
            RequestEnd::Answered { at, outcome } => (answered(outcome, served, None), at),
            RequestEnd::Forward | RequestEnd::Wait { .. } => {
                let response = match (internal_next(&api, ex), api.backend.target()) {
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
