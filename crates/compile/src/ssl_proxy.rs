//! `sslProxy:` documents (TLS passthrough) become listeners that relay connections by their
//! server name: each port holds its proxies in file order, and no API may share the port.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use turnpike_config::{ConfigErrors, ConfigSet, Located, SslProxyConfig};
use turnpike_core::Router;
use turnpike_snapshot::{AddrHash, ListenerRoutes, Passthrough};

/// What a passthrough can run: it sees only the TLS handshake, never the payload.
const INTERCEPTORS: &str =
    "only `sslLog` runs on a TLS passthrough (the payload stays encrypted end to end)";

/// One proxy, checked; `None` after reporting its errors.
fn passthrough(l: &Located<SslProxyConfig>, errors: &mut ConfigErrors) -> Option<Passthrough> {
    let p = &l.value;
    let hosts: Vec<String> = p
        .host
        .split_whitespace()
        .map(str::to_ascii_lowercase)
        .collect();
    let mut ok = true;
    if hosts.is_empty() {
        errors.push(l.error("host", "give the server names (SNI) this proxy takes"));
        ok = false;
    }
    if let Some(bad) = hosts.iter().find(|h| {
        !h.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-.*_".contains(&b))
    }) {
        errors.push(l.error("host", format!("`{bad}` is not a host name pattern")));
        ok = false;
    }
    if p.target.host.trim().is_empty() {
        errors.push(l.error("target.host", "the backend's host is missing"));
        ok = false;
    }
    if p.port == 0 && p.target.port.is_none() {
        errors.push(l.error(
            "target.port",
            "give the backend's port (the proxy's port is 0)",
        ));
        ok = false;
    }
    let mut log = false;
    for (i, interceptor) in p.interceptors.iter().enumerate() {
        let at = format!("interceptors[{i}]");
        match interceptor.name() {
            "sslLog"
                if interceptor
                    .settings
                    .as_object()
                    .is_some_and(|o| o.is_empty()) =>
            {
                log = true
            }
            "sslLog" => {
                errors.push(l.error(&format!("{at}.sslLog"), "`sslLog` has no settings"));
                ok = false;
            }
            other => {
                errors.push(l.error(&at, format!("`{other}`: {INTERCEPTORS}")));
                ok = false;
            }
        }
    }
    ok.then(|| Passthrough {
        name: format!("SSL {}:{}", p.host, p.port),
        hosts,
        use_as_default: p.use_as_default,
        target_host: p.target.host.trim().to_owned(),
        target_port: p.target.port.unwrap_or(p.port),
        log,
    })
}

/// Adds a listener per port of the `sslProxy:` documents of `set` to `listeners`.
pub(crate) fn listeners(
    set: &ConfigSet,
    listeners: &mut HashMap<SocketAddr, ListenerRoutes, AddrHash>,
    errors: &mut ConfigErrors,
) {
    let mut by_addr: Vec<(SocketAddr, Vec<Passthrough>)> = Vec::new();
    for l in &set.ssl_proxies {
        let addr = SocketAddr::new(
            l.value.ip.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            l.value.port,
        );
        if listeners.contains_key(&addr) {
            errors.push(l.error(
                "port",
                "a TLS passthrough port cannot also serve APIs: give the `sslProxy` a port of its own",
            ));
            continue;
        }
        let Some(p) = passthrough(l, errors) else {
            continue;
        };
        let at = match by_addr.iter().position(|(a, _)| *a == addr) {
            Some(i) => i,
            None => {
                by_addr.push((addr, Vec::new()));
                by_addr.len() - 1
            }
        };
        if let Some(h) = p
            .hosts
            .iter()
            .find(|h| by_addr[at].1.iter().any(|q| q.hosts.contains(h)))
        {
            errors.push(l.error(
                "host",
                format!("another `sslProxy` of this port takes `{h}` already"),
            ));
            continue;
        }
        by_addr[at].1.push(p);
    }
    for (addr, proxies) in by_addr {
        let Ok(router) = Router::build(Vec::new()) else {
            continue;
        };
        listeners.insert(
            addr,
            ListenerRoutes {
                router,
                tls: None,
                h2c: false,
                tls_warnings: true,
                body_routing: false,
                forward_proxy: None,
                passthrough: proxies.into(),
                stats: turnpike_telemetry::stats::listener(&addr.to_string()),
                unrouted: turnpike_telemetry::stats::api("-"),
            },
        );
    }
}
