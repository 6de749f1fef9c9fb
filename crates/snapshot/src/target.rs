//! A backend node: how the gateway reaches it (its [`Transport`]), and how the upstream URI and
//! `Host` are formed for it. A [`Target`] is an API's pool of nodes ([`crate::Upstream`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderValue, Uri};
use rustls::pki_types::ServerName;

use crate::health::NodeState;

/// How the gateway reaches a backend: address, TLS and protocol. Pooled connections are keyed
/// by [`Transport::id`], which stays the same across reloads for the same node with the same
/// settings (so that a reload keeps its pooled connections).
pub struct Transport {
    /// Unique id (the connection pool's key).
    pub id: u64,
    /// `host:port`.
    pub authority: Authority,
    /// TLS client config and the name sent as SNI and verified.
    pub tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
    /// Speak HTTP/2.
    pub http2: bool,
    /// Time to connect (default: the gateway's).
    pub connect_timeout: Option<std::time::Duration>,
    /// Idle time of pooled connections (default: the gateway's).
    pub idle_timeout: Option<std::time::Duration>,
    /// How long a lookup of the host name is used.
    pub dns_refresh: std::time::Duration,
    /// The address connected to, when the node is one address of a host name (the authority
    /// still gives `Host` and the TLS server name); else the host name is looked up.
    pub addr: Option<std::net::SocketAddr>,
    /// How the host name is looked up.
    pub dns: turnpike_dns::Dns,
    /// The circuit breaker's connection limits and counts of the node's upstream.
    pub counts: Option<Arc<ConnLimits>>,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("authority", &self.authority)
            .field("tls", &self.tls.is_some())
            .field("http2", &self.http2)
            .field("addr", &self.addr)
            .finish()
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The transport ids of nodes, by their URL and settings, while a snapshot uses them.
fn transport_id(key: &str) -> u64 {
    static IDS: std::sync::Mutex<Option<HashMap<String, (u64, std::time::Instant)>>> =
        std::sync::Mutex::new(None);
    let mut ids = IDS.lock().unwrap_or_else(|e| e.into_inner());
    let ids = ids.get_or_insert_with(HashMap::new);
    // Forget keys no load has used for an hour (a reload refreshes the ones it uses).
    ids.retain(|_, (_, at)| at.elapsed() < std::time::Duration::from_secs(3600));
    let entry = ids.entry(key.to_owned()).or_insert_with(|| {
        (
            NEXT_ID.fetch_add(1, Ordering::Relaxed),
            std::time::Instant::now(),
        )
    });
    entry.1 = std::time::Instant::now();
    entry.0
}

/// A circuit breaker's limits on connections to an upstream's nodes and its counts (by every
/// worker): checked when a request needs a new connection.
#[derive(Debug, Default)]
pub struct ConnLimits {
    /// Most connections open.
    pub max_open: Option<u32>,
    /// Most requests waiting for a new connection.
    pub max_pending: Option<u32>,
    /// Connections open now.
    pub open: Arc<AtomicU32>,
    /// Requests waiting for a new connection now.
    pub pending: Arc<AtomicU32>,
}

impl ConnLimits {
    /// Which limit a new connection would exceed now, if any (`maxConnections` or
    /// `maxPendingRequests`).
    pub fn exceeded(&self) -> Option<&'static str> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.max_open.is_some_and(|m| self.open.load(Relaxed) >= m) {
            Some("connections")
        } else if self
            .max_pending
            .is_some_and(|m| self.pending.load(Relaxed) >= m)
        {
            Some("requests waiting for a connection")
        } else {
            None
        }
    }
}

/// The host name a node's address came from, and every address it had at load: the control
/// plane looks the name up again every `refresh` and reloads when the addresses change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsOrigin {
    /// The host name.
    pub host: Arc<str>,
    /// The port.
    pub port: u16,
    /// How often the name is looked up again.
    pub refresh: std::time::Duration,
    /// The addresses at load, sorted (none when the lookup failed).
    pub addrs: Arc<[std::net::IpAddr]>,
    /// How it is looked up.
    pub dns: turnpike_dns::Dns,
}

/// A compiled backend node.
#[derive(Debug, Clone)]
pub struct Node {
    scheme: Scheme,
    authority: Authority,
    transport: Arc<Transport>,
    host_header: HeaderValue,
    /// Base path without a trailing `/` ("" when none).
    base_path: String,
    /// Its share of the requests.
    pub weight: u32,
    /// Its health, shared by every worker and kept across reloads.
    pub state: Arc<NodeState>,
    /// `host:port`, for logs.
    pub label: Arc<str>,
    /// Its counters (tries by outcome, ejections).
    pub stats: Arc<turnpike_telemetry::stats::NodeStats>,
    /// The host name its address came from (a pool's node written with a host name).
    pub origin: Option<Arc<DnsOrigin>>,
    /// Log failed TLS handshakes with it as warnings (else at debug level).
    pub tls_warnings: bool,
}

/// The parts of a node, checked by the compiler.
pub struct NodeParts {
    /// `http` or `https`.
    pub scheme: Scheme,
    /// `host:port`, with the scheme's default port filled in.
    pub authority: Authority,
    /// The `Host` header as written in the config (without a default port).
    pub host_header: HeaderValue,
    /// The URL's path ("" or "/" when none).
    pub base_path: String,
    /// TLS client config and the name sent as SNI and verified, for `https`.
    pub tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
    /// Speak HTTP/2.
    pub http2: bool,
    /// Its share of the requests (at least 1).
    pub weight: u32,
    /// Time to connect (default: the gateway's).
    pub connect_timeout: Option<std::time::Duration>,
    /// Idle time of pooled connections (default: the gateway's).
    pub idle_timeout: Option<std::time::Duration>,
    /// How long a lookup of the host name is used.
    pub dns_refresh: std::time::Duration,
    /// The circuit breaker's connection limits (see [`Transport::counts`]).
    pub counts: Option<Arc<ConnLimits>>,
    /// What identifies the node across reloads: its pool and URL, and the settings that make
    /// its connections (a node with the same key keeps its health state).
    pub key: String,
    /// Its counters (tries by outcome, ejections).
    pub stats: Arc<turnpike_telemetry::stats::NodeStats>,
    /// What identifies the node's connections: nodes with the same transport key (in any pool,
    /// before and after a reload) share pooled connections.
    pub transport_key: String,
    /// The address connected to (see [`Transport::addr`]).
    pub addr: Option<std::net::SocketAddr>,
    /// How the host name is looked up.
    pub dns: turnpike_dns::Dns,
    /// The host name its address came from.
    pub origin: Option<Arc<DnsOrigin>>,
    /// The name in logs and metrics (default: the authority).
    pub label: Option<String>,
    /// Log failed TLS handshakes with the node as warnings (else at debug level).
    pub tls_warnings: bool,
}

impl Node {
    /// A node from checked parts.
    pub fn new(p: NodeParts) -> Self {
        let transport = Arc::new(Transport {
            id: transport_id(&p.transport_key),
            authority: p.authority.clone(),
            tls: p.tls,
            http2: p.http2,
            connect_timeout: p.connect_timeout,
            idle_timeout: p.idle_timeout,
            dns_refresh: p.dns_refresh,
            addr: p.addr,
            dns: p.dns,
            counts: p.counts,
        });
        Node {
            label: p.label.as_deref().unwrap_or(p.authority.as_str()).into(),
            origin: p.origin,
            state: NodeState::shared(&p.key),
            scheme: p.scheme,
            authority: p.authority,
            transport,
            host_header: p.host_header,
            base_path: p.base_path.trim_end_matches('/').to_owned(),
            weight: p.weight.max(1),
            stats: p.stats,
            tls_warnings: p.tls_warnings,
        }
    }

    /// The node URL's path, without a trailing `/` ("" when none).
    pub fn base_path(&self) -> &str {
        &self.base_path
    }

    /// The `Host` header value for this node.
    pub fn host_header(&self) -> &HeaderValue {
        &self.host_header
    }

    /// How the backend is reached.
    pub fn transport(&self) -> &Arc<Transport> {
        &self.transport
    }

    /// The authority (`host:port`).
    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// The scheme spoken to the backend.
    pub fn scheme(&self) -> &Scheme {
        &self.scheme
    }

    /// The upstream request target for a fixed endpoint ([`turnpike_core::exchange::FixedEndpoint`]):
    /// the base path alone when the target has one, else `endpoint`.
    pub fn endpoint_uri(&self, endpoint: &PathAndQuery) -> Result<Uri, http::Error> {
        if self.base_path.is_empty() {
            Ok(Uri::from(endpoint.clone()))
        } else {
            Ok(Uri::from(PathAndQuery::try_from(self.base_path.as_str())?))
        }
    }

    /// The upstream request target (origin-form: path and query) for a request's path and query:
    /// the base path joined with the request path. Without a base path, the request's
    /// path-and-query is reused as is (no copy).
    pub fn upstream_uri(&self, pq: Option<&PathAndQuery>) -> Result<Uri, http::Error> {
        let pq = match (self.base_path.is_empty(), pq) {
            (true, Some(pq)) => pq.clone(),
            (true, None) => PathAndQuery::from_static("/"),
            (false, pq) => {
                let rest = pq.map_or("/", |p| p.as_str());
                let mut s = String::with_capacity(self.base_path.len() + rest.len());
                s.push_str(&self.base_path);
                if !rest.starts_with('/') {
                    s.push('/');
                }
                s.push_str(rest);
                PathAndQuery::try_from(s)?
            }
        };
        Ok(Uri::from(pq))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(base: &str) -> Node {
        node_reached_by(base, "test")
    }

    fn node_reached_by(base: &str, transport_key: &str) -> Node {
        Node::new(NodeParts {
            scheme: Scheme::HTTP,
            authority: Authority::from_static("127.0.0.1:2010"),
            host_header: HeaderValue::from_static("127.0.0.1:2010"),
            base_path: base.into(),
            tls: None,
            http2: false,
            weight: 1,
            connect_timeout: None,
            idle_timeout: None,
            dns_refresh: std::time::Duration::from_secs(30),
            counts: None,
            key: format!("test|{base}"),
            transport_key: transport_key.into(),
            addr: None,
            dns: turnpike_dns::Dns::System,
            origin: None,
            label: None,
            stats: turnpike_telemetry::stats::node("test", base),
            tls_warnings: true,
        })
    }

    #[test]
    fn joins_base_path() {
        let pq = PathAndQuery::from_static("/items/1?x=2");
        assert_eq!(
            node("/base/").upstream_uri(Some(&pq)).unwrap().to_string(),
            "/base/items/1?x=2"
        );
        assert_eq!(
            node("").upstream_uri(Some(&pq)).unwrap().to_string(),
            "/items/1?x=2"
        );
        assert_eq!(node("").upstream_uri(None).unwrap().to_string(), "/");
    }

    #[test]
    fn fixed_endpoints_use_the_base_path_first() {
        let e = PathAndQuery::from_static("/soap");
        assert_eq!(node("/svc").endpoint_uri(&e).unwrap().to_string(), "/svc");
        assert_eq!(node("").endpoint_uri(&e).unwrap().to_string(), "/soap");
    }

    #[test]
    fn the_same_key_keeps_its_transport_id_and_state() {
        let a = node("/same");
        let b = node("/same");
        assert_eq!(a.transport().id, b.transport().id);
        assert!(Arc::ptr_eq(&a.state, &b.state));
        // Another key: another state; another transport key: other connections.
        let other = node("/other");
        assert!(!Arc::ptr_eq(&a.state, &other.state));
        assert_eq!(a.transport().id, other.transport().id, "same transport key");
        assert_ne!(
            a.transport().id,
            node_reached_by("/same", "tls").transport().id
        );
    }
}
