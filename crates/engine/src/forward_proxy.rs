//! Forward proxying (Membrane's `proxy:` documents): a client that is configured to use the
//! gateway as its HTTP proxy sends requests in absolute form (`GET http://host:port/path`),
//! which are sent on to that origin, and `CONNECT host:port` for TLS, which opens a TCP tunnel
//! to it once the flow passed. Each request opens its own connection to the origin (origins are
//! not known in advance, so they get no pools of their own).

use std::time::Duration;

use http::{header, HeaderValue, Method, Response, StatusCode};
use hyper::upgrade::OnUpgrade;
use turnpike_core::problem::{types as problems, Problem};
use turnpike_core::{Body, Exchange};
use turnpike_snapshot::proxy_rules::ProxyRules;

use crate::headers::remove_hop_by_hop;

/// The origin `host:port` of a proxied request: the authority of an absolute-form URI (port 80
/// by default) or of a CONNECT request.
fn origin(ex: &Exchange) -> Result<(String, u16), Problem> {
    let uri = &ex.request.uri;
    let bad = |d: &str| Problem::new(&problems::BAD_REQUEST).with_detail(d.to_owned());
    let Some(authority) = uri.authority() else {
        return Err(bad(
            "a forward proxy takes requests with an absolute URI (http://host/path) or CONNECT host:port",
        ));
    };
    if ex.request.method != Method::CONNECT && uri.scheme_str() != Some("http") {
        return Err(bad(
            "only http:// URIs are forwarded as requests; use CONNECT for https://",
        ));
    }
    let port = authority.port_u16().unwrap_or(80);
    Ok((
        authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned(),
        port,
    ))
}

/// A connection to `host:port` within `rules`: the name is checked, then every address it
/// resolves to; only allowed addresses are tried (a name that resolves to 127.0.0.1 cannot
/// reach this machine unless a rule allows it). Refused destinations are 403.
async fn connect(
    dns: &turnpike_dns::Dns,
    host: &str,
    port: u16,
    timeout: Duration,
    (rules, own): (&ProxyRules, &[std::net::SocketAddr]),
) -> Result<tokio::net::TcpStream, Problem> {
    let refused = || {
        tracing::info!(
            host,
            port,
            "forward proxy: destination refused by its rules"
        );
        Problem::new(&problems::FORBIDDEN)
            .with_detail("this proxy does not forward to that destination")
    };
    if !rules.name_allowed(host, port) {
        return Err(refused());
    }
    let unreachable = |e: String| {
        tracing::info!(host, port, "forward proxy: {e}");
        Problem::new(&problems::UPSTREAM_UNREACHABLE)
    };
    let addrs = dns
        .lookup(host, port)
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    let allowed: Vec<std::net::SocketAddr> = addrs
        .into_iter()
        .filter(|a| rules.address_allowed(host, *a, own))
        .collect();
    if allowed.is_empty() {
        return Err(refused());
    }
    connect_first(allowed, timeout).await.map_err(unreachable)
}

/// A connection to `host:port`: each address the name resolves to tried in turn, each within
/// `timeout`; the error says why the last one failed (for the log).
pub(crate) async fn connect_any(
    dns: &turnpike_dns::Dns,
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<tokio::net::TcpStream, String> {
    let addrs = dns.lookup(host, port).await.map_err(|e| e.to_string())?;
    connect_first(addrs, timeout).await
}

/// A connection to the first of `addrs` that answers, each tried within `timeout`; the error
/// says why the last one failed (for the log).
async fn connect_first(
    addrs: impl IntoIterator<Item = std::net::SocketAddr>,
    timeout: Duration,
) -> Result<tokio::net::TcpStream, String> {
    let mut last = None;
    for a in addrs {
        match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(a)).await {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Ok(Err(e)) => last = Some(e.to_string()),
            Err(_) => last = Some("connect timed out".into()),
        }
    }
    Err(last.unwrap_or_else(|| "no address".into()))
}

/// Sends the request of `ex` on to the origin its URI names (absolute form), or, for CONNECT,
/// answers 200 and tunnels the client's connection to the origin once it is upgraded.
pub async fn forward(
    ex: &mut Exchange,
    client_upgrade: Option<OnUpgrade>,
    rules: (&ProxyRules, &[std::net::SocketAddr]),
    dns: &turnpike_dns::Dns,
    connect_timeout: Duration,
    response_timeout: Duration,
) -> Result<Response<Body>, Problem> {
    let (host, port) = origin(ex)?;
    let tcp = connect(dns, &host, port, connect_timeout, rules).await?;
    if ex.request.method == Method::CONNECT {
        let Some(client) = client_upgrade else {
            return Err(Problem::new(&problems::BAD_REQUEST)
                .with_detail("CONNECT needs HTTP/1.1 (a connection that can be taken over)"));
        };
        tokio::task::spawn_local(async move {
            let upgraded = match client.await {
                Ok(u) => u,
                Err(e) => {
                    tracing::debug!("CONNECT: the client's connection was not handed over: {e}");
                    return;
                }
            };
            let mut client = hyper_util::rt::TokioIo::new(upgraded);
            let mut origin = tcp;
            if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut origin).await {
                tracing::debug!("CONNECT tunnel ended: {e}");
            }
        });
        let mut r = Response::new(Body::Empty);
        *r.status_mut() = StatusCode::OK;
        return Ok(r);
    }
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .map_err(|e| {
                tracing::info!(host, "forward proxy: {e}");
                Problem::new(&problems::UPSTREAM_ERROR)
            })?;
    tokio::task::spawn_local(async move {
        if let Err(e) = conn.await {
            tracing::debug!("forward proxy connection: {e}");
        }
    });
    // Origin form on the way to the origin, with the origin's Host.
    let target = ex.request.uri.path_and_query().map_or_else(
        || http::Uri::from_static("/"),
        |pq| http::Uri::from(pq.clone()),
    );
    let mut headers = ex.request.headers.clone();
    remove_hop_by_hop(&mut headers);
    headers.remove("proxy-authorization");
    headers.remove("proxy-connection");
    let authority = if port == 80 {
        host.clone()
    } else {
        format!("{host}:{port}")
    };
    if let Ok(v) = HeaderValue::from_str(&authority) {
        headers.insert(header::HOST, v);
    }
    let body = std::mem::take(&mut ex.request_body);
    let mut req = http::Request::new(body);
    *req.method_mut() = ex.request.method.clone();
    *req.uri_mut() = target;
    *req.headers_mut() = headers;
    let res = tokio::time::timeout(response_timeout, sender.send_request(req))
        .await
        .map_err(|_| Problem::new(&problems::UPSTREAM_TIMEOUT))?
        .map_err(|e| {
            tracing::info!(host, "forward proxy: {e}");
            Problem::new(&problems::UPSTREAM_ERROR)
        })?;
    let (mut parts, body) = res.into_parts();
    remove_hop_by_hop(&mut parts.headers);
    Ok(Response::from_parts(parts, Body::Incoming(body)))
}
