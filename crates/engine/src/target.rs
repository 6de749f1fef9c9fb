//! A compiled target: where an API forwards to, and how the upstream URI and `Host` are formed.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderValue, Uri};
use rustls::pki_types::ServerName;
use turnpike_config::TargetConfig;

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

impl Target {
    /// Compiles the target; the error names the offending key (below `target`) and what is wrong.
    pub fn compile(t: &TargetConfig, dir: &Path) -> Result<Self, (String, String)> {
        let adjust_host = t.adjust_host_header.is_none_or(|f| f.0);
        let (scheme, authority, base) = match (&t.url, &t.host) {
            (Some(_), Some(_)) => {
                return Err((
                    "url".into(),
                    "give either `url` or `host`/`port`, not both".into(),
                ))
            }
            (None, None) => return Err((String::new(), "needs `url` or `host`".into())),
            (Some(url), None) => {
                if t.port.is_some() {
                    return Err((
                        "port".into(),
                        "with `url`, put the port into the URL".into(),
                    ));
                }
                let uri: Uri = url
                    .parse()
                    .map_err(|e| ("url".to_owned(), format!("`{url}` is not a URL: {e}")))?;
                let scheme = uri
                    .scheme()
                    .cloned()
                    .ok_or_else(|| ("url".to_owned(), format!("`{url}` has no scheme")))?;
                if scheme != Scheme::HTTP && scheme != Scheme::HTTPS {
                    return Err(("url".into(), format!("unsupported scheme `{scheme}`")));
                }
                let auth = uri
                    .authority()
                    .cloned()
                    .ok_or_else(|| ("url".to_owned(), format!("`{url}` has no host")))?;
                if uri.query().is_some() {
                    return Err(("url".into(), "a target URL cannot have a query".into()));
                }
                (scheme, auth, uri.path().to_owned())
            }
            (None, Some(host)) => {
                let port = t.port.unwrap_or(80);
                let host_part = if host.contains(':') && !host.starts_with('[') {
                    format!("[{host}]")
                } else {
                    host.clone()
                };
                let auth: Authority = format!("{host_part}:{port}")
                    .parse()
                    .map_err(|_| ("host".to_owned(), format!("`{host}` is not a host name")))?;
                let scheme = if t.ssl.is_some() {
                    Scheme::HTTPS
                } else {
                    Scheme::HTTP
                };
                let auth: Authority = if t.port.is_none() && scheme == Scheme::HTTPS {
                    format!("{host_part}:443")
                        .parse()
                        .map_err(|_| ("host".to_owned(), format!("`{host}` is not a host name")))?
                } else {
                    auth
                };
                (scheme, auth, String::new())
            }
        };
        // `Host` as written (without a default port); the pool key and connects use host:port.
        let host_header = HeaderValue::from_str(authority.as_str())
            .map_err(|_| ("host".to_owned(), "not a valid Host header".to_owned()))?;
        let authority = if authority.port().is_none() {
            let port = if scheme == Scheme::HTTPS { 443 } else { 80 };
            format!("{}:{port}", authority.as_str())
                .parse()
                .map_err(|_| ("url".to_owned(), "not a valid host".to_owned()))?
        } else {
            authority
        };
        let tls = if scheme == Scheme::HTTPS {
            let label = authority.as_str().to_owned();
            let cfg = turnpike_tls::client_config(t.ssl.as_ref(), dir, t.http2.0, &label)
                .map_err(|m| ("ssl".to_owned(), m))?;
            let name = t
                .ssl
                .as_ref()
                .and_then(|s| s.server_name.clone())
                .unwrap_or_else(|| {
                    authority
                        .host()
                        .trim_start_matches('[')
                        .trim_end_matches(']')
                        .to_owned()
                });
            let server_name = ServerName::try_from(name.clone()).map_err(|_| {
                (
                    "ssl.serverName".to_owned(),
                    format!("`{name}` is not a server name"),
                )
            })?;
            Some((cfg, server_name))
        } else {
            None
        };
        let transport = Arc::new(Transport {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            authority: authority.clone(),
            tls,
            http2: t.http2.0,
        });
        Ok(Target {
            scheme,
            authority,
            transport,
            host_header,
            base_path: base.trim_end_matches('/').to_owned(),
            adjust_host,
        })
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
    use turnpike_config::units::Flag;

    fn t(
        url: Option<&str>,
        host: Option<&str>,
        port: Option<u16>,
    ) -> Result<Target, (String, String)> {
        Target::compile(
            &TargetConfig {
                url: url.map(Into::into),
                host: host.map(Into::into),
                port,
                adjust_host_header: Some(Flag(true)),
                ssl: None,
                http2: Flag(false),
            },
            Path::new("."),
        )
    }

    #[test]
    fn joins_base_path() {
        let target = t(Some("http://127.0.0.1:2010/base/"), None, None).unwrap();
        let pq = PathAndQuery::from_static("/items/1?x=2");
        assert_eq!(
            target.upstream_uri(Some(&pq)).unwrap().to_string(),
            "/base/items/1?x=2"
        );
        let target = t(None, Some("localhost"), Some(8080)).unwrap();
        assert_eq!(
            target.upstream_uri(Some(&pq)).unwrap().to_string(),
            "/items/1?x=2"
        );
        assert_eq!(target.host_header(), "localhost:8080");
        let v6 = t(None, Some("::1"), Some(81)).unwrap();
        assert_eq!(v6.authority().as_str(), "[::1]:81");
    }

    #[test]
    fn rejects_bad_targets() {
        assert_eq!(t(None, None, None).unwrap_err().0, "");
        assert_eq!(t(Some("http://a"), Some("b"), None).unwrap_err().0, "url");
        assert_eq!(
            t(Some("https://a"), None, None)
                .unwrap()
                .authority()
                .as_str(),
            "a:443"
        );
        assert_eq!(t(Some("ftp://a"), None, None).unwrap_err().0, "url");
        assert_eq!(t(Some("http://a/?q=1"), None, None).unwrap_err().0, "url");
        assert_eq!(t(Some("/relative"), None, None).unwrap_err().0, "url");
    }
}
