//! A compiled API: what the data plane runs for the requests its route matches.

use std::sync::Arc;

use turnpike_core::{Chain, RenderProblem, RouteTest};

use crate::upstream::Target;

/// Where an API sends the requests its flow does not answer.
#[derive(Debug)]
pub enum Backend {
    /// A pool of backends reached over the network.
    Target(Target),
    /// An `internal://NAME` target: the API of that name (an `internal:` document, or a named
    /// API) runs in-process instead of a call to a backend.
    Internal(Arc<str>),
    /// A forward proxy (Membrane's `proxy:`): requests go on to the origin their absolute URI
    /// names, CONNECT opens a tunnel, within these destination rules.
    ForwardProxy(Arc<crate::proxy_rules::ProxyRules>),
    /// None: the flow answers (compilation checks that it can).
    None,
}

impl Backend {
    /// The network target, when the backend is one.
    pub fn target(&self) -> Option<&Target> {
        match self {
            Backend::Target(t) => Some(t),
            _ => None,
        }
    }
}

/// A compiled API.
#[derive(Debug)]
pub struct Api {
    /// Name for logs (`name`, or `port path` when unnamed).
    pub name: Arc<str>,
    /// Global policies followed by the API's own flow.
    pub chain: Chain,
    /// Where requests go when the flow does not answer.
    pub backend: Backend,
    /// Where WebSocket upgrade requests go instead of the backend (Membrane's `webSocket.url`);
    /// `None`: to the backend like any request.
    pub websocket_target: Option<Target>,
    /// Its request counters (kept across reloads by name).
    pub stats: Arc<turnpike_telemetry::stats::ApiStats>,
    /// How the problems the gateway generates for this API are written when not as
    /// problem+json: SOAP APIs answer SOAP faults, which is all their clients understand.
    /// `None` for problem+json (or a gRPC status for gRPC requests).
    pub errors: Option<Arc<dyn RenderProblem>>,
    /// A condition on the request head besides the route (Membrane's `test`): when it does not
    /// hold, the next API whose route matches takes the request.
    pub test: Option<Arc<dyn RouteTest>>,
}
