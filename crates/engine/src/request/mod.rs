//! The request path, as its phases: [`route`] → [`body`] → [`phases`] (the request steps) →
//! [`backend`] (forwarded by [`forward`], or the policy's answer) → [`phases`] (the response
//! steps; [`admission`] holds a request for a slot of its upstream's concurrency limit), watched by the [`observe`]rs (access log, trace, recent exchanges, counters) from
//! arrival to response. Each phase returns its result or the [`Problem`] that ends it; the one
//! exit point renders problems in the request's [`ErrorFormat`] (problem+json, a gRPC status
//! for gRPC requests, the API's SOAP faults). WebSocket (and other HTTP/1.1) upgrades are
//! forwarded, then tunnelled both ways.
//!
//! A new phase is a module here with a function [`serve`] calls; a new observer is a field of
//! [`observe::Observers`] that the snapshot's settings turn on.

mod admission;
mod backend;
pub(crate) mod body;
mod context;
mod forward;
mod observe;
mod phases;
mod route;

use std::net::SocketAddr;
use std::sync::Arc;

use http::{HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use turnpike_core::{Body, BodyNeed, ErrorFormat, Problem, RequestEnd};
use turnpike_snapshot::{Api, Snapshot};

use crate::balance::Balancers;
use crate::conn::ConnInfo;
use crate::upstream::UpstreamPool;

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

/// What one request's phases learned, for the answer and the access log.
pub(crate) struct Served {
    /// The request id (in the response, to the backend, in the log).
    pub(crate) request_id: HeaderValue,
    /// How the gateway's own answers are written (refined once the API is known).
    pub(crate) format: ErrorFormat,
    /// The API that took the request.
    pub(crate) api: Option<Arc<Api>>,
    /// The status the backend answered, when it was called.
    pub(crate) upstream_status: Option<StatusCode>,
    /// Why the gateway answered itself with an error (the problem type's log label).
    pub(crate) error: Option<&'static str>,
    /// The consumer an auth policy identified.
    pub(crate) consumer: Option<Arc<str>>,
    /// The node that answered.
    pub(crate) upstream_node: Option<Arc<str>>,
}

impl Served {
    /// A request known by `request_id`, whose problems are written as `format` says until its
    /// API is known.
    fn new(request_id: HeaderValue, format: ErrorFormat) -> Self {
        Served {
            request_id,
            format,
            api: None,
            upstream_status: None,
            error: None,
            consumer: None,
            upstream_node: None,
        }
    }

    /// Records `problem` as the request's error and renders it, with the request id.
    pub(crate) fn reject(&mut self, problem: Problem) -> Response<Body> {
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
    let mut observed = observe::Observers::start(settings, ctx.conn, &req);
    let version = req.version();
    let request_id = context::request_id(&req, settings);
    let mut served = Served::new(request_id, ErrorFormat::of(req.headers(), None));
    let response = 'phases: {
        let upgrade = context::is_upgrade(&req) || req.method() == http::Method::CONNECT;
        let (mut parts, incoming) = req.into_parts();
        let mut incoming = Some(incoming);
        let (api, params, body) = match (route::reads_body(&snap, &ctx), incoming.take()) {
            (true, Some(b)) => {
                phase!('phases, served, route::routed_on_body(&snap, &ctx, &mut parts, b).await)
            }
            (_, b) => {
                incoming = b;
                let (api, params) = phase!(
                    'phases,
                    served,
                    route::route(&snap, ctx.listener, ctx.conn.peer, &parts, None)
                );
                (api, params, None)
            }
        };
        served.api = Some(Arc::clone(&api));
        if api.errors.is_some() {
            served.format = ErrorFormat::of(&parts.headers, api.errors.as_ref());
        }
        let mut client_upgrade = upgrade
            .then(|| parts.extensions.remove::<OnUpgrade>())
            .flatten();
        let body = match body {
            Some(b) => b,
            None => phase!('phases, served, body::read(settings, &mut parts, incoming).await),
        };
        let mut ex = context::exchange(parts, body, params, &ctx, &served, &observed);
        if api.chain.body_need() == BodyNeed::Buffer {
            let limit = settings.max_body_size;
            phase!('phases, served, body::buffer_body(&api.chain, &mut ex, limit).await);
        }
        let (response, end, backend_upgrade) =
            match phases::request_phase(&api.chain, &mut ex).await {
                RequestEnd::Answered { at, outcome } => {
                    let count = settings.metrics.then_some((&*api, at, ctx.worker));
                    (backend::answered(outcome, &mut served, count), at, None)
                }
                RequestEnd::Forward | RequestEnd::Wait { .. } => {
                    let trace = &mut observed.trace;
                    let (response, backend_upgrade) = backend::call(
                        &snap,
                        &ctx,
                        &api,
                        &mut ex,
                        &mut served,
                        trace,
                        &mut client_upgrade,
                    )
                    .await;
                    (response, usize::MAX, backend_upgrade)
                }
            };
        let response =
            phases::response_phase(&api.chain, &mut ex, response, end, settings, &mut served).await;
        observed.steps(&api, ex.step_times.take());
        served.consumer = ex.identity().and_then(|i| i.consumer.clone());
        backend::upgraded(response, client_upgrade, backend_upgrade, &mut served)
    };
    observed.end(response, &snap, &ctx, &served, version)
}
