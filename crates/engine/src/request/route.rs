//! Route: the API of the listener that takes a request, by host, method and path (and the
//! APIs' routing tests), with the request target's and head's sizes checked first.

use std::net::SocketAddr;
use std::sync::Arc;

use http::header;
use http::Request;
use hyper::body::Incoming;
use turnpike_core::exchange::PathParams;
use turnpike_core::{problems, Body, Exchange, Problem};
use turnpike_snapshot::{Api, Snapshot};

use super::body::{buffer, read};
use super::RequestContext;

/// True when the listener has an API whose routing test reads the body (Membrane's XPath and
/// JSONPath `test`): its requests are read before they are routed ([`routed_on_body`]).
#[inline]
pub(super) fn reads_body(snap: &Snapshot, ctx: &RequestContext<'_>) -> bool {
    snap.listeners
        .get(&ctx.listener)
        .is_some_and(|l| l.body_routing)
}

/// The API that takes the request on a listener that routes on bodies ([`reads_body`]), its
/// path parameters, and the body, read whole to route.
pub(super) async fn routed_on_body(
    snap: &Snapshot,
    ctx: &RequestContext<'_>,
    parts: &mut http::request::Parts,
    incoming: Incoming,
) -> Result<(Arc<Api>, PathParams, Option<Body>), Problem> {
    let body = read(&snap.settings, parts, Some(incoming)).await?;
    let bytes = Box::pin(buffer(body, snap.settings.max_body_size)).await?;
    let (api, params) = route(snap, ctx.listener, ctx.conn.peer, parts, Some(&bytes))?;
    Ok((api, params, Some(Body::Full(Some(bytes)))))
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
pub(super) fn route(
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
