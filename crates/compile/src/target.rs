//! `target:` settings and `upstream:` documents into [`Target`]s: pools of nodes (each with its
//! scheme, authority, `Host`, base path and TLS), how a node is chosen, health checks, retries,
//! timeouts and circuit breaking. Errors name the key below `target` (or the `upstream:`).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::uri::{Authority, Scheme};
use http::{HeaderValue, Method, Uri};
use rustls::pki_types::ServerName;
use turnpike_config::{
    LoadBalancing, NodeConfig, PoolSettings, RetryOn, TargetConfig, UpstreamConfig,
};
use turnpike_core::{Template, TemplateScope};
use turnpike_dns::Dns;
use turnpike_snapshot::upstream::{
    hash_ring, ActiveCheck, Balance, Breaker, ConnLimits, Passive, RetryPolicy, Target, TargetPath,
    Upstream,
};
use turnpike_snapshot::{DnsOrigin, Node, NodeParts};

/// A compile error: the key below the target or upstream (`""` for itself) and the message.
type Error = (String, String);

fn err(key: &str, msg: impl Into<String>) -> Error {
    (key.to_owned(), msg.into())
}

/// How long a host name's addresses are used when `dnsRefresh` is not set.
const DNS_REFRESH: Duration = Duration::from_secs(30);

static NEXT_UPSTREAM: AtomicU64 = AtomicU64::new(1);

/// A new upstream's id (unique in the process: the key of each worker's balancing counters).
pub(crate) fn next_upstream_id() -> u64 {
    NEXT_UPSTREAM.fetch_add(1, Ordering::Relaxed)
}

/// The `upstream:` documents of a load, compiled, by name; and how the load looks up host
/// names.
#[derive(Debug, Default)]
pub struct Upstreams {
    /// The compiled `upstream:` documents.
    pub by_name: HashMap<String, Arc<Upstream>>,
    /// How host names are looked up (`gateway.resolver`).
    pub dns: Dns,
    /// The load's `balancer`s, which `clusterNotification` finds by name.
    pub balancers: Arc<turnpike_policies::balancer::Directory>,
}

impl Upstreams {
    /// No upstream documents; host names looked up by the system's resolver.
    pub fn new() -> Self {
        Upstreams::default()
    }
}

/// Compiles an `upstream:` document; `dir` is its file's folder. Host names become one node
/// per address `dns` finds for them.
pub fn compile_upstream(u: &UpstreamConfig, dir: &Path, dns: &Dns) -> Result<Upstream, Error> {
    if u.name.trim().is_empty() {
        return Err(err("name", "must not be empty"));
    }
    pool(
        u.name.as_str().into(),
        &u.pool(),
        dir,
        &format!("upstream {}", u.name),
        Lookup::Expand(dns),
    )
}

/// How a pool's host names are handled at load.
#[derive(Clone, Copy)]
enum Lookup<'a> {
    /// Looked up now: one node per address (nodes of `upstream:` documents and `nodes:`).
    Expand(&'a Dns),
    /// Looked up when connecting: one node whose addresses are tried in turn (a target's
    /// `url` or `host`).
    Connect(&'a Dns),
}

impl Lookup<'_> {
    fn dns(&self) -> &Dns {
        match self {
            Lookup::Expand(d) | Lookup::Connect(d) => d,
        }
    }
}

/// Compiles a `target:`; `upstreams` are the load's `upstream:` documents, `name` is the
/// API's (for logs), `key` identifies this target across reloads (its file and place), `scope`
/// the path parameters its URL's expressions may use (`None`: the caller sets
/// [`Target::path`] with [`target_path`] for each route). The error names the offending key
/// (below `target`) and what is wrong.
pub fn compile_target(
    t: &TargetConfig,
    dir: &Path,
    upstreams: &Upstreams,
    name: &str,
    key: &str,
    scope: Option<&TemplateScope>,
) -> Result<Target, Error> {
    let adjust_host = t.adjust_host_header.is_none_or(|f| f.0);
    let single = t.url.is_some() || t.host.is_some();
    let upstream = match (&t.upstream, &t.nodes, single) {
        (Some(u), None, false) => {
            if has_pool_settings(t) {
                return Err(err(
                    "upstream",
                    "a named upstream brings its own settings: set them in its `upstream:` document",
                ));
            }
            Arc::clone(upstreams.by_name.get(u).ok_or_else(|| {
                let mut known: Vec<&str> = upstreams.by_name.keys().map(String::as_str).collect();
                known.sort_unstable();
                err(
                    "upstream",
                    format!(
                        "no `upstream:` document is named `{u}` (known: {})",
                        known.join(", ")
                    ),
                )
            })?)
        }
        (None, Some(nodes), false) => Arc::new(pool(
            name.into(),
            &t.pool(nodes),
            dir,
            key,
            Lookup::Expand(&upstreams.dns),
        )?),
        (None, None, true) => {
            let node = single_node(t)?;
            Arc::new(pool(
                name.into(),
                &t.pool(std::slice::from_ref(&node)),
                dir,
                key,
                Lookup::Connect(&upstreams.dns),
            )?)
        }
        (None, None, false) => return Err(err("", "needs `url`, `host`, `nodes` or `upstream`")),
        _ => {
            return Err(err(
                "",
                "give one of `url`, `host`/`port`, `nodes` and `upstream`",
            ))
        }
    };
    let method = t
        .method
        .as_deref()
        .map(|m| {
            Method::from_bytes(m.trim().to_ascii_uppercase().as_bytes())
                .map_err(|_| err("method", format!("`{m}` is not an HTTP method")))
        })
        .transpose()?;
    Ok(Target {
        upstream,
        adjust_host,
        live: None,
        method,
        // Without a scope the caller sets the path (per route).
        path: match scope {
            Some(scope) => target_path(t, scope)?,
            None => TargetPath::Join,
        },
    })
}

/// `scheme://authority` and the rest (path and query, `""` when none) of a URL.
fn split_url(url: &str) -> (&str, &str) {
    let start = url.find("://").map_or(0, |i| i + 3);
    match url[start..].find(['/', '?']) {
        Some(i) => url.split_at(start + i),
        None => (url, ""),
    }
}

/// Where a target sends requests (Membrane's rule): a `url` with a path other than `/` is
/// sent to as it is (its expressions `${…}` rendered per request, values escaped); any other
/// target joins its base path with the request's path and query. `scope` holds the route's
/// path parameters (`${pathParam.id}`).
pub fn target_path(t: &TargetConfig, scope: &TemplateScope) -> Result<TargetPath, Error> {
    let Some(url) = &t.url else {
        return Ok(TargetPath::Join);
    };
    let (origin, rest) = split_url(url);
    if origin.contains("${") {
        return Err(err(
            "url",
            "expressions in the scheme, host or port of a target URL are not supported (only in its path and query)",
        ));
    }
    if rest.is_empty() || rest == "/" {
        return Ok(TargetPath::Join);
    }
    if !rest.starts_with('/') {
        return Err(err("url", "the path of a target URL must start with `/`"));
    }
    if rest.contains("${") {
        let language = match t
            .language
            .as_deref()
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            None | Some("spel") => None,
            Some("jsonpath") => Some(turnpike_policies::language::ExpressionLanguage::JsonPath),
            Some("xpath") => Some(turnpike_policies::language::ExpressionLanguage::XPath),
            Some(other) => {
                return Err(err(
                    "language",
                    format!("`{other}` is not a language of target URLs (spel, jsonpath, xpath)"),
                ))
            }
        };
        let shared = http::Extensions::new();
        let ctx = turnpike_core::CompileContext {
            scope,
            in_consumer_flow: false,
            base_dir: std::path::Path::new("."),
            path_prefix: "",
            shared: &shared,
            site: "",
        };
        let t = turnpike_policies::language::compile_template(rest, language, &ctx)
            .map_err(|m| err("url", m))?;
        return Ok(TargetPath::Template(t));
    }
    if t.language.is_some() {
        return Err(err(
            "language",
            "the target URL has no `${…}` expression for `language` to apply to",
        ));
    }
    http::uri::PathAndQuery::try_from(rest)
        .map(TargetPath::Exact)
        .map_err(|_| err("url", format!("`{rest}` is not a valid path and query")))
}

fn has_pool_settings(t: &TargetConfig) -> bool {
    t.load_balancing.is_some()
        || t.hash_key.is_some()
        || t.health_check.is_some()
        || t.retries.is_some()
        || t.timeouts.is_some()
        || t.circuit_breaker.is_some()
        || t.dns_refresh.is_some()
        || t.ssl.is_some()
        || t.http2.0
}

/// The node of a target written as `url` or `host`/`port`, as a node URL.
fn single_node(t: &TargetConfig) -> Result<NodeConfig, Error> {
    let url = match (&t.url, &t.host) {
        (Some(_), Some(_)) => {
            return Err(err("url", "give either `url` or `host`/`port`, not both"))
        }
        (Some(url), None) => {
            if t.port.is_some() {
                return Err(err("port", "with `url`, put the port into the URL"));
            }
            // The node is the origin and the path (the query and expressions are the target's,
            // see `target_path`).
            let (origin, rest) = split_url(url);
            let path = rest.split('?').next().unwrap_or("");
            if rest.contains("${") {
                origin.to_owned()
            } else {
                format!("{origin}{path}")
            }
        }
        (None, Some(host)) => {
            let scheme = if t.ssl.is_some() { "https" } else { "http" };
            let host_part = if host.contains(':') && !host.starts_with('[') {
                format!("[{host}]")
            } else {
                host.clone()
            };
            match t.port {
                Some(p) => format!("{scheme}://{host_part}:{p}"),
                None => format!("{scheme}://{host_part}"),
            }
        }
        (None, None) => return Err(err("", "needs `url` or `host`")),
    };
    Ok(NodeConfig { url, weight: None })
}

/// Compiles a pool: its nodes and settings.
fn pool(
    name: Arc<str>,
    p: &PoolSettings<'_>,
    dir: &Path,
    key: &str,
    lookup: Lookup<'_>,
) -> Result<Upstream, Error> {
    if p.nodes.is_empty() {
        return Err(err("nodes", "needs at least one node"));
    }
    let breaker = p.circuit_breaker.map(|c| Breaker {
        max_requests: c.max_requests,
        connections: Arc::new(ConnLimits {
            max_open: c.max_connections,
            max_pending: c.max_pending_requests,
            ..ConnLimits::default()
        }),
        ..Breaker::default()
    });
    let counts = breaker
        .as_ref()
        .filter(|b| b.connections.max_open.is_some() || b.connections.max_pending.is_some())
        .map(|b| Arc::clone(&b.connections));
    let mut nodes = Vec::with_capacity(p.nodes.len());
    for (i, n) in p.nodes.iter().enumerate() {
        let at = if p.nodes.len() == 1 && n.weight.is_none() {
            // A target's `url` or `host`: errors name those keys.
            "url".to_owned()
        } else {
            format!("nodes[{i}].url")
        };
        if n.weight == Some(0) {
            return Err(err(&format!("nodes[{i}].weight"), "must be at least 1"));
        }
        nodes.extend(
            node(n, p, &counts, dir, key, &name, lookup).map_err(|(k, m)| {
                if k.is_empty() {
                    (at.clone(), m)
                } else {
                    (k, m)
                }
            })?,
        );
    }
    if nodes.len() > u16::MAX as usize {
        return Err(err("nodes", "too many nodes"));
    }
    let balance = match p.load_balancing.unwrap_or(LoadBalancing::RoundRobin) {
        LoadBalancing::RoundRobin => Balance::RoundRobin,
        LoadBalancing::LeastRequests => Balance::LeastRequests,
        LoadBalancing::Random => Balance::Random,
        LoadBalancing::Hash => {
            let src = p
                .hash_key
                .ok_or_else(|| err("hashKey", "`loadBalancing: hash` needs `hashKey`"))?;
            let key =
                Template::parse(src, &TemplateScope::default()).map_err(|m| err("hashKey", m))?;
            let labels: Vec<(&str, u32)> = nodes.iter().map(|n| (&*n.label, n.weight)).collect();
            Balance::Hash {
                key,
                ring: hash_ring(&labels),
            }
        }
    };
    if p.hash_key.is_some() && !matches!(balance, Balance::Hash { .. }) {
        return Err(err("hashKey", "`hashKey` goes with `loadBalancing: hash`"));
    }
    let health = p.health_check;
    let active = match health.and_then(|h| h.active.as_ref()) {
        None => None,
        Some(a) => {
            if !a.path.starts_with('/') {
                return Err(err("healthCheck.active.path", "must start with `/`"));
            }
            let expect = match &a.expect_status {
                None => vec![(200, 399)],
                Some(s) => statuses(s).map_err(|m| err("healthCheck.active.expectStatus", m))?,
            };
            let positive = |v: Option<u32>, d: u32, k: &str| match v {
                Some(0) => Err(err(
                    &format!("healthCheck.active.{k}"),
                    "must be at least 1",
                )),
                v => Ok(v.unwrap_or(d)),
            };
            Some(ActiveCheck {
                path: a.path.clone(),
                interval: a.interval.map_or(Duration::from_secs(2), |d| d.0),
                timeout: a.timeout.map_or(Duration::from_secs(1), |d| d.0),
                healthy_threshold: positive(a.healthy_threshold, 2, "healthyThreshold")?,
                unhealthy_threshold: positive(a.unhealthy_threshold, 3, "unhealthyThreshold")?,
                expect,
            })
        }
    };
    let passive = match health.and_then(|h| h.passive.as_ref()) {
        None => None,
        Some(s) => {
            let pct = s.max_ejected_percent.unwrap_or(50);
            if pct > 100 {
                return Err(err(
                    "healthCheck.passive.maxEjectedPercent",
                    "is a percentage (0 to 100)",
                ));
            }
            if s.consecutive_failures == Some(0) {
                return Err(err(
                    "healthCheck.passive.consecutiveFailures",
                    "must be at least 1",
                ));
            }
            Some(Passive {
                consecutive_failures: s.consecutive_failures.unwrap_or(3),
                failure_status: s
                    .failure_status
                    .clone()
                    .unwrap_or_else(|| vec![502, 503, 504]),
                eject_for: s.eject_for.map_or(Duration::from_secs(30), |d| d.0),
                max_ejected_percent: pct,
            })
        }
    };
    let panic_threshold = match health.and_then(|h| h.panic_threshold.as_deref()) {
        None => 0.5,
        Some(p) => percent(p).map_err(|m| err("healthCheck.panicThreshold", m))?,
    };
    let retries = match p.retries {
        None => None,
        Some(r) => Some(retry_policy(r)?),
    };
    if p.dns_refresh.is_some_and(|d| d.0 < Duration::from_secs(1)) {
        return Err(err("dnsRefresh", "must be at least 1s"));
    }
    let t = p.timeouts;
    if let Some(b) = &breaker {
        for (v, k) in [
            (b.connections.max_open, "maxConnections"),
            (b.connections.max_pending, "maxPendingRequests"),
            (b.max_requests, "maxRequests"),
        ] {
            if v == Some(0) {
                return Err(err(&format!("circuitBreaker.{k}"), "must be at least 1"));
            }
        }
    }
    let total_weight = nodes.iter().map(|n| n.weight).sum();
    let admission = match p.concurrency {
        Some(c) => Some(crate::admission::compile(c).map_err(|(k, m)| err(&k, m))?),
        None => None,
    };
    Ok(Upstream {
        id: next_upstream_id(),
        stats: turnpike_telemetry::stats::upstream(&name),
        name,
        nodes,
        balance,
        active,
        passive,
        panic_threshold,
        retries,
        connect_timeout: t.and_then(|t| t.connect).map(|d| d.0),
        response_timeout: t.and_then(|t| t.response).map(|d| d.0),
        idle_timeout: t.and_then(|t| t.idle).map(|d| d.0),
        breaker,
        admission,
        dns_refresh: p.dns_refresh.map_or(DNS_REFRESH, |d| d.0),
        total_weight,
    })
}

/// Compiles one node of a pool (`key` identifies the pool across reloads): with
/// [`Lookup::Expand`], a host name becomes a node per address it has now (one node, looked up
/// when connecting, when the lookup fails).
fn node(
    n: &NodeConfig,
    p: &PoolSettings<'_>,
    counts: &Option<Arc<ConnLimits>>,
    dir: &Path,
    key: &str,
    upstream: &str,
    lookup: Lookup<'_>,
) -> Result<Vec<Node>, Error> {
    let (ssl, http2) = (p.ssl, p.http2);
    let url = &n.url;
    let uri: Uri = url
        .parse()
        .map_err(|e| err("", format!("`{url}` is not a URL: {e}")))?;
    let scheme = uri
        .scheme()
        .cloned()
        .ok_or_else(|| err("", format!("`{url}` has no scheme")))?;
    if scheme != Scheme::HTTP && scheme != Scheme::HTTPS {
        return Err(err("", format!("unsupported scheme `{scheme}`")));
    }
    let authority = uri
        .authority()
        .cloned()
        .ok_or_else(|| err("", format!("`{url}` has no host")))?;
    if uri.query().is_some() {
        return Err(err("", "a target URL cannot have a query"));
    }
    // `Host` as written (without a default port); the pool key and connects use host:port.
    let host_header = HeaderValue::from_str(authority.as_str())
        .map_err(|_| err("host", "not a valid Host header"))?;
    let authority: Authority = if authority.port().is_none() {
        let port = if scheme == Scheme::HTTPS { 443 } else { 80 };
        format!("{}:{port}", authority.as_str())
            .parse()
            .map_err(|_| err("", "not a valid host"))?
    } else {
        authority
    };
    let tls = if scheme == Scheme::HTTPS {
        let label = authority.as_str().to_owned();
        let cfg =
            turnpike_tls::client_config(ssl, dir, http2, &label).map_err(|m| err("ssl", m))?;
        let name = ssl.and_then(|s| s.server_name.clone()).unwrap_or_else(|| {
            authority
                .host()
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned()
        });
        let server_name = ServerName::try_from(name.clone())
            .map_err(|_| err("ssl.serverName", format!("`{name}` is not a server name")))?;
        Some((cfg, server_name))
    } else {
        None
    };
    // Connections are shared by every pool that reaches the node in the same way; a pool
    // with connection limits keeps its own.
    let transport_key = format!(
        "{scheme}://{authority}|{ssl:?}|{}|{http2}|{:?}|{:?}|{}",
        if ssl.is_some() {
            dir.display().to_string()
        } else {
            String::new()
        },
        p.timeouts.map(|t| (t.connect, t.idle)),
        p.dns_refresh,
        if counts.is_some() { key } else { "" },
    );
    let dns_refresh = p.dns_refresh.map_or(DNS_REFRESH, |d| d.0);
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let port = authority.port_u16().unwrap_or(80);
    let dns = lookup.dns();
    // `None`: one node that looks its name up when connecting.
    let expanded: Option<(Vec<IpAddr>, Arc<DnsOrigin>)> = match lookup {
        Lookup::Expand(_) if host.parse::<IpAddr>().is_err() => {
            let mut addrs: Vec<IpAddr> = match dns.lookup_blocking(host, port) {
                Ok(found) => found.iter().map(|a| a.ip()).collect(),
                Err(e) => {
                    tracing::warn!(
                        "upstream {upstream}: `{host}` has no address now ({e}); it is looked up again when connecting, and its addresses become nodes once it has some"
                    );
                    Vec::new()
                }
            };
            let resolved = addrs.clone();
            addrs.sort_unstable();
            let origin = Arc::new(DnsOrigin {
                host: host.into(),
                port,
                refresh: dns_refresh,
                addrs: addrs.into(),
                dns: dns.clone(),
            });
            Some((resolved, origin))
        }
        _ => None,
    };
    let parts = |addr: Option<IpAddr>, several: bool, origin: Option<Arc<DnsOrigin>>| {
        let label = match (addr, several) {
            (Some(ip), true) => format!("{authority}@{ip}"),
            _ => authority.as_str().to_owned(),
        };
        let pin = addr.map(|ip| format!("@{ip}")).unwrap_or_default();
        NodeParts {
            scheme: scheme.clone(),
            authority: authority.clone(),
            host_header: host_header.clone(),
            base_path: uri.path().to_owned(),
            tls: tls.clone(),
            http2,
            weight: n.weight.unwrap_or(1),
            connect_timeout: p.timeouts.and_then(|t| t.connect).map(|d| d.0),
            idle_timeout: p.timeouts.and_then(|t| t.idle).map(|d| d.0),
            dns_refresh,
            transport_key: format!("{transport_key}{pin}|{dns:?}"),
            stats: turnpike_telemetry::stats::node(upstream, &label),
            counts: counts.clone(),
            key: format!("{key}|{url}|{ssl:?}|{http2}|{}{pin}", dir.display()),
            addr: addr.map(|ip| SocketAddr::new(ip, port)),
            dns: dns.clone(),
            origin,
            label: Some(label),
            tls_warnings: p
                .ssl
                .and_then(|s| s.show_ssl_exceptions)
                .is_none_or(|f| f.0),
        }
    };
    Ok(match expanded {
        Some((addrs, origin)) if !addrs.is_empty() => {
            let several = addrs.len() > 1;
            addrs
                .into_iter()
                .map(|ip| Node::new(parts(Some(ip), several, Some(Arc::clone(&origin)))))
                .collect()
        }
        Some((_, origin)) => vec![Node::new(parts(None, false, Some(origin)))],
        None => vec![Node::new(parts(None, false, None))],
    })
}

fn retry_policy(r: &turnpike_config::Retries) -> Result<RetryPolicy, Error> {
    if r.attempts > 10 {
        return Err(err("retries.attempts", "at most 10"));
    }
    let mut p = RetryPolicy {
        attempts: r.attempts,
        on_connect_failure: false,
        on_reset: false,
        on_timeout: false,
        on_status: Vec::new(),
        methods: Vec::new(),
        per_try_timeout: r.per_try_timeout.map(|d| d.0),
        budget: match &r.budget {
            None => 0.2,
            Some(b) => percent(b).map_err(|m| err("retries.budget", m))?,
        },
        max_body_size: r.max_body_size.map_or(64 << 10, |s| s.0),
    };
    match &r.on {
        None => {
            p.on_connect_failure = true;
            p.on_reset = true;
            p.on_timeout = true;
            p.on_status = vec![502, 503, 504];
        }
        Some(list) => {
            for (i, on) in list.iter().enumerate() {
                match on {
                    RetryOn::Status(s) if (100..=599).contains(s) => p.on_status.push(*s),
                    RetryOn::Failure(f) if f == "connect-failure" => p.on_connect_failure = true,
                    RetryOn::Failure(f) if f == "reset" => p.on_reset = true,
                    RetryOn::Failure(f) if f == "timeout" => p.on_timeout = true,
                    _ => {
                        return Err(err(
                            &format!("retries.on[{i}]"),
                            "expected `connect-failure`, `reset`, `timeout` or a status",
                        ))
                    }
                }
            }
        }
    }
    p.methods = match &r.methods {
        None => vec![
            Method::GET,
            Method::HEAD,
            Method::OPTIONS,
            Method::PUT,
            Method::DELETE,
        ],
        Some(list) => list
            .iter()
            .enumerate()
            .map(|(i, m)| {
                Method::from_bytes(m.trim().to_ascii_uppercase().as_bytes()).map_err(|_| {
                    err(
                        &format!("retries.methods[{i}]"),
                        format!("`{m}` is not an HTTP method"),
                    )
                })
            })
            .collect::<Result<_, _>>()?,
    };
    Ok(p)
}

/// `50%` (or `0.5`) as a share.
fn percent(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let v = match t.strip_suffix('%') {
        Some(n) => n.trim().parse::<f64>().map(|v| v / 100.0),
        None => t.parse::<f64>(),
    }
    .map_err(|_| format!("`{s}` is not a percentage (`50%`)"))?;
    if !(0.0..=1.0).contains(&v) {
        return Err(format!("`{s}` is not between 0% and 100%"));
    }
    Ok(v)
}

/// `200-399`, `200`, `200,204` as inclusive ranges.
fn statuses(s: &str) -> Result<Vec<(u16, u16)>, String> {
    s.split(',')
        .map(|part| {
            let part = part.trim();
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            let a: u16 = a
                .trim()
                .parse()
                .map_err(|_| format!("`{part}` is not a status or range"))?;
            let b: u16 = b
                .trim()
                .parse()
                .map_err(|_| format!("`{part}` is not a status or range"))?;
            if !(100..=599).contains(&a) || a > b || b > 599 {
                return Err(format!(
                    "`{part}` is not a status range between 100 and 599"
                ));
            }
            Ok((a, b))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::uri::PathAndQuery;
    use turnpike_config::units::Flag;

    fn t(url: Option<&str>, host: Option<&str>, port: Option<u16>) -> Result<Target, Error> {
        compile_target(
            &TargetConfig {
                url: url.map(Into::into),
                host: host.map(Into::into),
                port,
                adjust_host_header: Some(Flag(true)),
                ..TargetConfig::default()
            },
            Path::new("."),
            &Upstreams::new(),
            "test",
            "test",
            Some(&TemplateScope {
                path_params: vec!["id".into()],
                ..Default::default()
            }),
        )
    }

    #[test]
    fn a_url_with_a_path_is_sent_to_as_it_is() {
        let pq = PathAndQuery::from_static("/items/1?x=2");
        let target = t(Some("http://127.0.0.1:2010/base/"), None, None).unwrap();
        assert!(matches!(&target.path, TargetPath::Exact(p) if p == "/base/"));
        let target = t(Some("https://catfact.ninja/fact?max=5"), None, None).unwrap();
        assert!(matches!(&target.path, TargetPath::Exact(p) if p == "/fact?max=5"));
        assert_eq!(target.first().base_path(), "/fact");
        for url in ["http://127.0.0.1:2010", "http://127.0.0.1:2010/"] {
            let target = t(Some(url), None, None).unwrap();
            assert!(matches!(target.path, TargetPath::Join), "{url}");
            assert_eq!(
                target.first().upstream_uri(Some(&pq)).unwrap().to_string(),
                "/items/1?x=2"
            );
        }
        let target = t(
            Some("http://127.0.0.1:3000/shop/v2/products/${pathParam.id}"),
            None,
            None,
        )
        .unwrap();
        assert!(matches!(target.path, TargetPath::Template(_)));
        assert_eq!(target.first().base_path(), "");
        assert_eq!(
            t(Some("http://${header.h}:80/a"), None, None)
                .unwrap_err()
                .0,
            "url"
        );
        assert_eq!(
            t(Some("http://a/${path.nope}"), None, None).unwrap_err().0,
            "url"
        );
    }

    #[test]
    fn joins_base_path() {
        let pq = PathAndQuery::from_static("/items/1?x=2");
        let target = t(None, Some("localhost"), Some(8080)).unwrap();
        assert_eq!(
            target.first().upstream_uri(Some(&pq)).unwrap().to_string(),
            "/items/1?x=2"
        );
        assert_eq!(target.first().host_header(), "localhost:8080");
        let v6 = t(None, Some("::1"), Some(81)).unwrap();
        assert_eq!(v6.first().authority().as_str(), "[::1]:81");
    }

    #[test]
    fn rejects_bad_targets() {
        assert_eq!(t(None, None, None).unwrap_err().0, "");
        assert_eq!(t(Some("http://a"), Some("b"), None).unwrap_err().0, "url");
        assert_eq!(
            t(Some("https://a"), None, None)
                .unwrap()
                .first()
                .authority()
                .as_str(),
            "a:443"
        );
        assert_eq!(t(Some("ftp://a"), None, None).unwrap_err().0, "url");
        assert_eq!(t(Some("http://a?q=1"), None, None).unwrap_err().0, "url");
        assert_eq!(t(Some("/relative"), None, None).unwrap_err().0, "url");
    }

    #[test]
    fn percentages_and_status_ranges() {
        assert_eq!(percent("50%"), Ok(0.5));
        assert_eq!(percent("0.2"), Ok(0.2));
        assert!(percent("150%").is_err());
        assert_eq!(statuses("200-399, 404"), Ok(vec![(200, 399), (404, 404)]));
        assert!(statuses("399-200").is_err());
    }
}
