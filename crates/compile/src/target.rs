//! `target:` settings into a [`Target`]: scheme, authority, `Host`, base path and TLS.

use std::path::Path;

use http::uri::{Authority, Scheme};
use http::{HeaderValue, Uri};
use rustls::pki_types::ServerName;
use turnpike_config::TargetConfig;
use turnpike_snapshot::{Target, TargetParts};

/// Compiles a `target:`; the error names the offending key (below `target`) and what is wrong.
pub fn compile_target(t: &TargetConfig, dir: &Path) -> Result<Target, (String, String)> {
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
    Ok(Target::new(TargetParts {
        scheme,
        authority,
        host_header,
        base_path: base,
        adjust_host,
        tls,
        http2: t.http2.0,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::uri::PathAndQuery;
    use turnpike_config::units::Flag;

    fn t(
        url: Option<&str>,
        host: Option<&str>,
        port: Option<u16>,
    ) -> Result<Target, (String, String)> {
        compile_target(
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
