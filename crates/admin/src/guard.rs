//! Who may talk to the admin listener, before any token is looked at: requests must name this
//! machine (a loopback name or address, the listen address, or one of `admin.hosts`) in `Host`,
//! and a browser's request must come from the listener's own origin. A web page that rebinds
//! its own DNS name to 127.0.0.1 (DNS rebinding) names that name in `Host` and is refused with
//! 421; a page of another origin posting to the API carries its `Origin` (or
//! `Sec-Fetch-Site: cross-site`) and is refused with 403.

use std::net::{IpAddr, SocketAddr};

use bytes::Bytes;
use http::{header, request::Parts, Response};
use http_body_util::Full;
use turnpike_core::problem::{types, Problem};

/// The Host and Origin rules of one admin listener.
#[derive(Debug, Clone)]
pub struct Guard {
    listen: SocketAddr,
    /// Extra names (lowercase; `*.domain` for every name below `domain`).
    hosts: Vec<String>,
    scheme: &'static str,
}

impl Guard {
    /// The rules for a listener on `listen` (`tls` when it speaks HTTPS) that also accepts
    /// the names in `hosts`.
    pub fn new(listen: SocketAddr, hosts: Vec<String>, tls: bool) -> Guard {
        Guard {
            listen,
            hosts,
            scheme: if tls { "https" } else { "http" },
        }
    }

    /// `None` when the request may go on (the probes `GET /healthz` and `/readyz` always
    /// may); otherwise the refusal (421 for a `Host` this listener does not answer to, 403 for
    /// a cross-origin browser request), problem+json.
    pub fn check(&self, parts: &Parts) -> Option<Response<Full<Bytes>>> {
        // The probes tell nothing but whether the process serves; health checkers name the
        // machine however they like.
        if parts.method == http::Method::GET && matches!(parts.uri.path(), "/healthz" | "/readyz") {
            return None;
        }
        let host = parts
            .uri
            .authority()
            .map(|a| a.as_str().to_owned())
            .or_else(|| {
                parts
                    .headers
                    .get(header::HOST)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            });
        // HTTP/1.0 clients (health checks) may send no Host; browsers always send one.
        if let Some(host) = &host {
            if !self.host_allowed(host) {
                tracing::warn!(host = %host, "admin API: request for a host this listener does not answer to refused (421)");
                return Some(crate::routes::problem(
                    Problem::new(&types::MISDIRECTED).with_detail(
                        "this admin listener answers to loopback names and addresses, its listen address and `admin.hosts`",
                    ),
                ));
            }
        }
        let cross_site = parts
            .headers
            .get("sec-fetch-site")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.eq_ignore_ascii_case("cross-site") || v.eq_ignore_ascii_case("same-site")
            });
        let origin_ok = parts.headers.get_all(header::ORIGIN).iter().all(|o| {
            o.to_str()
                .ok()
                .is_some_and(|o| self.own_origin(o, host.as_deref()))
        });
        if cross_site || !origin_ok {
            tracing::warn!("admin API: cross-origin request refused (403)");
            return Some(crate::routes::problem(
                Problem::new(&types::CROSS_ORIGIN)
                    .with_detail("the admin API takes requests from its own origin only"),
            ));
        }
        None
    }

    /// Whether `host` (a `Host` value, with or without port) names this listener.
    pub fn host_allowed(&self, host: &str) -> bool {
        let name = strip_port(host).to_ascii_lowercase();
        let name = name.trim_end_matches('.');
        if name == "localhost" || name.ends_with(".localhost") {
            // RFC 6761: browsers resolve these to loopback themselves.
            return true;
        }
        let literal = name.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = literal.parse::<IpAddr>() {
            // A page cannot rebind an address literal: only names are at risk.
            return ip.is_loopback()
                || ip == self.listen.ip()
                || self.listen.ip().is_unspecified()
                || self.named(name);
        }
        self.named(name)
    }

    fn named(&self, name: &str) -> bool {
        self.hosts.iter().any(|h| match h.strip_prefix("*.") {
            Some(domain) => name
                .strip_suffix(domain)
                .is_some_and(|rest| rest.len() > 1 && rest.ends_with('.')),
            None => h == name,
        })
    }

    /// Whether `origin` is this listener's own: the scheme it speaks and the host asked for.
    fn own_origin(&self, origin: &str, host: Option<&str>) -> bool {
        let Some(host) = host else {
            return false;
        };
        let Some(rest) = origin
            .strip_prefix(self.scheme)
            .and_then(|r| r.strip_prefix("://"))
        else {
            return false;
        };
        rest.eq_ignore_ascii_case(host)
    }
}

/// `host` without its `:port` (IPv6 literals keep their brackets).
fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return match host.find(']') {
            Some(end) => &host[..=end],
            None => host,
        };
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parts(headers: &[(&str, &str)]) -> Parts {
        let mut b = http::Request::builder().uri("/admin/v1/status");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn names_of_this_machine_pass_and_others_do_not() {
        let g = Guard::new(
            "127.0.0.1:9901".parse().unwrap(),
            vec!["admin.example.com".into(), "*.internal".into()],
            false,
        );
        for ok in [
            "127.0.0.1:9901",
            "127.0.0.2",
            "localhost:9901",
            "LOCALHOST",
            "[::1]:9901",
            "admin.example.com",
            "gw.internal:9901",
        ] {
            assert!(g.host_allowed(ok), "{ok}");
        }
        for bad in [
            "rebind.attacker.example",
            "attacker.example:9901",
            "internal",
            "evilinternal",
            "10.0.0.1",
            "localhost.attacker.example",
        ] {
            assert!(!g.host_allowed(bad), "{bad}");
        }
        let any = Guard::new("0.0.0.0:9901".parse().unwrap(), vec![], false);
        assert!(any.host_allowed("10.0.0.1:9901"));
        assert!(!any.host_allowed("gateway.example"));
    }

    #[test]
    fn foreign_origins_and_cross_site_fetches_are_refused() {
        let g = Guard::new("127.0.0.1:9901".parse().unwrap(), vec![], false);
        assert!(g.check(&parts(&[("host", "127.0.0.1:9901")])).is_none());
        assert!(g
            .check(&parts(&[
                ("host", "127.0.0.1:9901"),
                ("origin", "http://127.0.0.1:9901")
            ]))
            .is_none());
        let r = g
            .check(&parts(&[
                ("host", "127.0.0.1:9901"),
                ("origin", "http://evil.example"),
            ]))
            .unwrap();
        assert_eq!(r.status(), 403);
        let r = g
            .check(&parts(&[("host", "127.0.0.1:9901"), ("origin", "null")]))
            .unwrap();
        assert_eq!(r.status(), 403);
        let r = g
            .check(&parts(&[
                ("host", "127.0.0.1:9901"),
                ("sec-fetch-site", "cross-site"),
            ]))
            .unwrap();
        assert_eq!(r.status(), 403);
        let r = g
            .check(&parts(&[("host", "rebind.attacker.example:9901")]))
            .unwrap();
        assert_eq!(r.status(), 421);
        // HTTPS listeners: an http:// origin is another origin.
        let tls = Guard::new("127.0.0.1:9901".parse().unwrap(), vec![], true);
        assert!(tls
            .check(&parts(&[
                ("host", "127.0.0.1:9901"),
                ("origin", "http://127.0.0.1:9901")
            ]))
            .is_some());
    }
}
