//! A compiled target: where an API forwards to, and how the upstream URI and `Host` are formed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderValue, Uri};
use rustls::pki_types::ServerName;

/// How the gateway reaches a backend: address, TLS and protocol. Pooled connections are keyed
/// by [`Transport::id`], unique per compiled target.
pub struct Transport {
    /// Unique id (the connection pool's key).
    pub id: u64,
    /// `host:port`.
    pub authority: Authority,
    /// TLS client config and the name sent as SNI and verified.
    pub tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
    /// Speak HTTP/2.
    pub http2: bool,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("authority", &self.authority)
            .field("tls", &self.tls.is_some())
            .field("http2", &self.http2)
            .finish()
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A compiled `target:`.
#[derive(Debug, Clone)]
pub struct Target {
    scheme: Scheme,
    authority: Authority,
    transport: Arc<Transport>,
    host_header: HeaderValue,
    /// Base path without a trailing `/` ("" when none).
    base_path: String,
    /// Rewrite `Host` to the target's authority.
    pub adjust_host: bool,
}

/// The parts of a target, checked by the compiler.
pub struct TargetParts {
    /// `http` or `https`.
    pub scheme: Scheme,
    /// `host:port`, with the scheme's default port filled in.
    pub authority: Authority,
    /// The `Host` header as written in the config (without a default port).
    pub host_header: HeaderValue,
    /// The URL's path ("" or "/" when none).
    pub base_path: String,
    /// Rewrite `Host` to the target's authority.
    pub adjust_host: bool,
    /// TLS client config and the name sent as SNI and verified, for `https`.
    pub tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
    /// Speak HTTP/2.
    pub http2: bool,
}

impl Target {
    /// A target from checked parts, with a transport of its own (its own connection pool key).
    pub fn new(p: TargetParts) -> Self {
        let transport = Arc::new(Transport {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            authority: p.authority.clone(),
            tls: p.tls,
            http2: p.http2,
        });
        Target {
            scheme: p.scheme,
            authority: p.authority,
            transport,
            host_header: p.host_header,
            base_path: p.base_path.trim_end_matches('/').to_owned(),
            adjust_host: p.adjust_host,
        }
    }

    /// The `Host` header value for this target.
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

    fn target(base: &str) -> Target {
        Target::new(TargetParts {
            scheme: Scheme::HTTP,
            authority: Authority::from_static("127.0.0.1:2010"),
            host_header: HeaderValue::from_static("127.0.0.1:2010"),
            base_path: base.into(),
            adjust_host: true,
            tls: None,
            http2: false,
        })
    }

    #[test]
    fn joins_base_path() {
        let pq = PathAndQuery::from_static("/items/1?x=2");
        let t = target("/base/");
        assert_eq!(
            t.upstream_uri(Some(&pq)).unwrap().to_string(),
            "/base/items/1?x=2"
        );
        assert_eq!(
            target("").upstream_uri(Some(&pq)).unwrap().to_string(),
            "/items/1?x=2"
        );
        assert_eq!(target("").upstream_uri(None).unwrap().to_string(), "/");
    }

    #[test]
    fn fixed_endpoints_use_the_base_path_first() {
        let e = PathAndQuery::from_static("/soap");
        assert_eq!(target("/svc").endpoint_uri(&e).unwrap().to_string(), "/svc");
        assert_eq!(target("").endpoint_uri(&e).unwrap().to_string(), "/soap");
    }
}
