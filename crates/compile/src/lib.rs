//! The compile stage: turns a loaded configuration (`turnpike-config`) into the immutable
//! [`Snapshot`] the data plane serves from. Everything the hot path reads is built here, once
//! per (re)load: routers, compiled policy chains, targets, TLS configs, OpenAPI validators,
//! SOAP APIs and their fault format. Every error is reported with its file, line, column and
//! key, all of them at once.

mod access_log;
pub mod admin;
mod admission;
mod api;
mod balancer;
mod flow;
mod listener;
mod openapi_api;
pub mod proxy_rules;
mod settings;
mod soap_proxy;
mod ssl_proxy;
mod target;
mod target_body;
mod telemetry;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use turnpike_config::{ApiConfig, ConfigErrors, ConfigSet, Located};
use turnpike_core::router::PathSpec;
use turnpike_core::{Chain, RouteSpec, Router, Step};
use turnpike_openapi::docs::ApiDocs;
use turnpike_openapi::Spec;
use turnpike_policies::python::{Executors, PythonSetup};
pub use turnpike_policies::registry::json_schema;
use turnpike_policies::Consumers;
use turnpike_snapshot::{Api, ListenerRoutes, Snapshot};
use turnpike_soap::Wsdl;

pub use settings::settings;
pub use target::{compile_target, compile_upstream, target_path, Upstreams};

/// The address an API listens on, as configured.
pub fn listen_addr(api: &ApiConfig) -> SocketAddr {
    SocketAddr::new(
        api.ip.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
        api.port,
    )
}

/// Loads and compiles the configuration at `paths`, reporting every error of both stages (the
/// documents that fail to load are still left out of compilation, so their dependants are
/// checked too), sorted by file and line.
pub fn load_and_compile(
    paths: &[std::path::PathBuf],
) -> Result<(ConfigSet, Snapshot), ConfigErrors> {
    load_and_compile_with(paths, &turnpike_config::Overlay::new())
}

/// [`load_and_compile`] as if the files of `overlay` held its texts (a change checked before it
/// is written).
pub fn load_and_compile_with(
    paths: &[std::path::PathBuf],
    overlay: &turnpike_config::Overlay,
) -> Result<(ConfigSet, Snapshot), ConfigErrors> {
    let (set, mut errors) =
        turnpike_config::load::load_lenient_with(paths, overlay, &|name| std::env::var(name).ok());
    match compile(&set) {
        Ok(snap) if errors.is_empty() => return Ok((set, snap)),
        Ok(_) => {}
        Err(e) => errors.extend(e),
    }
    errors.sort();
    Err(errors)
}

/// Compiles a loaded configuration; returns every error, each with its location.
pub fn compile(set: &ConfigSet) -> Result<Snapshot, ConfigErrors> {
    let mut errors = ConfigErrors::default();
    let mut settings = settings(&set.gateway);
    telemetry::apply(set, &mut settings, &mut errors);
    access_log::apply(set, &mut settings, &mut errors);
    // Counters have one block per worker: the number is known before any is made.
    turnpike_telemetry::stats::set_workers(settings.threads);
    if let Some(origin) = &set.gateway_origin {
        if settings.threads == 0 {
            errors.push(origin.error("gateway.threads", "must be at least 1"));
        }
        if settings.max_header_size < 8192 {
            errors.push(origin.error("gateway.limits.maxHeaderSize", "must be at least 8KB"));
        }
        if let Some(h) = set
            .gateway
            .request_id
            .as_ref()
            .and_then(|r| r.header.as_deref())
        {
            if http::HeaderName::from_bytes(h.as_bytes()).is_err() {
                errors.push(origin.error(
                    "gateway.requestId.header",
                    format!("`{h}` is not a header name"),
                ));
            }
        }
        if settings.max_uri_length < 256 {
            errors.push(origin.error("gateway.limits.maxUriLength", "must be at least 256 bytes"));
        }
        if settings.max_connections_per_ip == Some(0) {
            errors.push(origin.error("gateway.limits.maxConnectionsPerIp", "must be at least 1"));
        }
    }
    let python = Executors::new(python_setup(set, &mut errors));
    let consumers = Arc::new(flow::compile_consumers(set, &python, &mut errors));
    settings.dns = resolver(set, &mut errors);
    settings.outbound_proxy = outbound_proxy(set, &mut errors);
    let upstreams = compile_upstreams(set, &settings.dns, &mut errors);
    check_api_names(set, &mut errors);
    if let Err(e) = admin::admin_settings(set) {
        errors.extend(e);
    }
    let mut by_addr: HashMap<SocketAddr, Vec<(RouteSpec, Arc<Api>)>> = HashMap::new();
    let mut apis_at: HashMap<SocketAddr, Vec<&Located<ApiConfig>>> = HashMap::new();
    let mut specs_by_addr: HashMap<SocketAddr, Vec<Arc<Spec>>> = HashMap::new();
    let mut order: Vec<SocketAddr> = Vec::new();
    let soap_apis: Vec<(Located<ApiConfig>, Arc<Wsdl>)> = set
        .soap_proxies
        .iter()
        .filter_map(|p| soap_proxy::soap_proxy_api(p, &mut errors))
        .collect();
    // Each forward proxy's destination rules, by its port (a port of its own).
    let proxy_rules: HashMap<u16, Arc<turnpike_snapshot::proxy_rules::ProxyRules>> = set
        .proxies
        .iter()
        .map(|p| (p.value.port, proxy_rules::compile(p, &mut errors)))
        .collect();
    let proxy_apis: Vec<Located<ApiConfig>> = set
        .proxies
        .iter()
        .map(|p| Located {
            value: proxy_api(&p.value),
            origin: Arc::clone(&p.origin),
            key: p.key.clone(),
        })
        .collect();
    let apis = set
        .apis
        .iter()
        .map(|a| (a, None))
        .chain(soap_apis.iter().map(|(a, w)| (a, Some(w))))
        .chain(proxy_apis.iter().map(|a| (a, None)));
    // Where each route was first configured: two APIs that take the same requests are an error.
    let mut first_at: HashMap<(SocketAddr, String), turnpike_config::Location> = HashMap::new();
    // What `internal://NAME` reaches: `internal:` documents, then named APIs.
    let mut internal: HashMap<String, Arc<Api>> = HashMap::new();
    for located in &set.internals {
        let as_api = Located {
            value: internal_api(&located.value),
            origin: Arc::clone(&located.origin),
            key: located.key.clone(),
        };
        let compiled = compile_api(
            &as_api,
            None,
            set,
            &consumers,
            &python,
            &upstreams,
            &mut errors,
        );
        if let Some((_, api, _)) = compiled.into_iter().next() {
            if internal
                .insert(located.value.name.clone(), Arc::new(api))
                .is_some()
            {
                errors.push(located.error(
                    "name",
                    format!("a second internal API named `{}`", located.value.name),
                ));
            }
        }
    }
    for (located, wsdl) in apis {
        let addr = listen_addr(&located.value);
        apis_at.entry(addr).or_default().push(located);
        for (spec, api, openapi) in compile_api(
            located,
            wsdl,
            set,
            &consumers,
            &python,
            &upstreams,
            &mut errors,
        ) {
            let here = located.origin.key_at(&located.key);
            // An API with a `test` leaves the requests it does not take to the next one.
            let key = match &located.value.test {
                Some(t) => format!("{} test {t}", route_key(&spec)),
                None => route_key(&spec),
            };
            match first_at.entry((addr, key)) {
                std::collections::hash_map::Entry::Occupied(first) => {
                    errors.push(located.error(
                        "",
                        format!(
                            "this API takes the same requests (port, host, method and path) as the one at {}",
                            first.get()
                        ),
                    ));
                    continue;
                }
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(here);
                }
            }
            let mut api = api;
            if located.key == "proxy" {
                if let Some(rules) = proxy_rules.get(&located.value.port) {
                    api.backend = turnpike_snapshot::Backend::ForwardProxy(Arc::clone(rules));
                }
            }
            let api = Arc::new(api);
            if let Some(n) = &located.value.name {
                internal
                    .entry(n.clone())
                    .or_insert_with(|| Arc::clone(&api));
            }
            by_addr
                .entry(addr)
                .or_insert_with(|| {
                    order.push(addr);
                    Vec::new()
                })
                .push((spec, api));
            if let Some(s) = openapi {
                specs_by_addr.entry(addr).or_default().push(s);
            }
        }
    }
    // The Python policies' executors load every module and class (or say why not).
    python.start(&mut errors);
    // Every port with OpenAPI-deployed APIs serves their documents under `/api-docs`.
    for (addr, specs) in &specs_by_addr {
        let docs = ApiDocs::new(specs);
        if let Some(routes) = by_addr.get_mut(addr) {
            routes.push((
                RouteSpec {
                    hosts: Vec::new(),
                    method: None,
                    path: PathSpec::Prefix(turnpike_openapi::docs::PREFIX.to_owned()),
                },
                Arc::new(Api {
                    errors: None,
                    stats: turnpike_telemetry::stats::api("api-docs"),
                    name: "api-docs".into(),
                    chain: Chain::new(vec![Step {
                        policy: Box::new(docs),
                        request: true,
                        response: false,
                    }]),
                    backend: turnpike_snapshot::Backend::None,
                    websocket_target: None,
                    test: None,
                }),
            ));
        }
    }
    let mut listeners = HashMap::default();
    for addr in order {
        let routes = by_addr.remove(&addr).unwrap_or_default();
        let apis = apis_at.remove(&addr).unwrap_or_default();
        let tls = listener::listener_tls(addr, &apis, &mut errors);
        let body_routing = routes
            .iter()
            .any(|(_, api)| api.test.as_ref().is_some_and(|t| t.reads_body()));
        let forward_proxy = routes
            .iter()
            .find(|(_, api)| matches!(api.backend, turnpike_snapshot::Backend::ForwardProxy(_)))
            .map(|(_, api)| Arc::clone(api));
        if forward_proxy.is_some() && routes.len() > 1 {
            if let Some(p) = apis.iter().find(|a| a.key == "proxy") {
                errors.push(p.error(
                    "port",
                    "a forward proxy has its port to itself: no other API may listen on it",
                ));
            }
        }
        let h2c = apis.iter().any(|a| a.value.h2c.0);
        if h2c && tls.is_some() {
            if let Some(a) = apis.iter().find(|a| a.value.h2c.0) {
                errors.push(a.error(
                    "h2c",
                    "h2c is cleartext HTTP/2; on a TLS port HTTP/2 is negotiated with ALPN",
                ));
            }
        }
        match Router::build(routes) {
            Ok(router) => {
                listeners.insert(
                    addr,
                    ListenerRoutes {
                        router,
                        tls,
                        h2c,
                        // Quiet only when every API of the address asks for it.
                        tls_warnings: apis
                            .iter()
                            .any(|a| a.value.ssl.as_ref().is_none_or(|s| s.show_ssl_exceptions)),
                        body_routing,
                        forward_proxy,
                        passthrough: Arc::new([]),
                        stats: turnpike_telemetry::stats::listener(&addr.to_string()),
                        unrouted: turnpike_telemetry::stats::api("-"),
                    },
                );
            }
            // Paths were validated per API already; this is a safety net.
            Err((_, msg)) => errors.push(turnpike_config::ConfigError::new(
                turnpike_config::Location {
                    file: Default::default(),
                    line: 0,
                    column: 0,
                    key: format!("listener {addr}"),
                },
                msg,
            )),
        }
    }
    ssl_proxy::listeners(set, &mut listeners, &mut errors);
    let mut spec_files: Vec<std::path::PathBuf> = specs_by_addr
        .values()
        .flatten()
        .flat_map(|s| s.files.iter().cloned())
        .collect();
    spec_files.extend(set.apis.iter().flat_map(listener::tls_files));
    // Files policies read at load (WSDLs and schemas of validators, key sets, password files).
    for routes in listeners.values() {
        for api in routes.router.values() {
            spec_files.extend(api.chain.files());
        }
    }
    // soapProxy WSDLs and the documents they include are watched too.
    spec_files.extend(soap_apis.iter().flat_map(|(_, w)| w.files.iter().cloned()));
    spec_files.sort();
    spec_files.dedup();
    // Every upstream in use, once: the named ones and the targets' own.
    let mut in_use: Vec<Arc<turnpike_snapshot::Upstream>> = Vec::new();
    for routes in listeners.values() {
        for api in routes.router.values() {
            if let Some(t) = api.backend.target() {
                if !in_use.iter().any(|u| Arc::ptr_eq(u, &t.upstream)) {
                    in_use.push(Arc::clone(&t.upstream));
                }
            }
        }
    }
    // Every `internal://NAME` names an API.
    let targets = set
        .apis
        .iter()
        .map(|a| (a.value.target.as_ref(), a.error("target.url", "")))
        .chain(
            set.internals
                .iter()
                .map(|a| (a.value.target.as_ref(), a.error("target.url", ""))),
        );
    for (t, at) in targets {
        if let Some(name) = t.and_then(|t| t.url.as_deref()).and_then(internal_name) {
            if !internal.contains_key(name) {
                let mut known: Vec<&str> = internal.keys().map(String::as_str).collect();
                known.sort_unstable();
                errors.push(turnpike_config::ConfigError {
                    message: format!(
                        "no API is named `{name}` (internal APIs and named APIs: {})",
                        if known.is_empty() {
                            "none".to_owned()
                        } else {
                            known.join(", ")
                        }
                    ),
                    ..at
                });
            }
        }
    }
    errors.into_result(Snapshot {
        listeners,
        settings,
        spec_files,
        upstreams: in_use,
        internal,
    })
}

/// The name in an `internal://NAME` URL.
pub fn internal_name(url: &str) -> Option<&str> {
    url.strip_prefix("internal://")
        .map(|r| r.split(['/', '?']).next().unwrap_or(r))
}

/// A `proxy:` document as an API on its port that takes every request.
fn proxy_api(p: &turnpike_config::ProxyConfig) -> ApiConfig {
    ApiConfig {
        name: Some(
            p.name
                .clone()
                .unwrap_or_else(|| format!("proxy {}", p.port)),
        ),
        description: p.description.clone(),
        port: p.port,
        // Without destination rules a proxy reaches any public host: this machine only.
        ip: p.ip.or_else(|| {
            p.destinations
                .is_none()
                .then_some(std::net::IpAddr::from([127, 0, 0, 1]))
        }),
        host: None,
        method: None,
        path: None,
        flow: p.flow.clone(),
        target: None,
        ssl: p.ssl.clone(),
        h2c: Default::default(),
        openapi: Vec::new(),
        specs: Vec::new(),
        operations: Default::default(),
        routes: Vec::new(),
        test: None,
        language: None,
        xml_config: None,
    }
}

/// An `internal:` document as an API without a listener of its own.
fn internal_api(i: &turnpike_config::InternalConfig) -> ApiConfig {
    ApiConfig {
        name: Some(i.name.clone()),
        description: i.description.clone(),
        port: 0,
        ip: None,
        host: None,
        method: None,
        path: None,
        flow: i.flow.clone(),
        target: i.target.clone(),
        ssl: None,
        h2c: Default::default(),
        openapi: Vec::new(),
        specs: Vec::new(),
        operations: Default::default(),
        routes: Vec::new(),
        test: None,
        language: None,
        xml_config: None,
    }
}

/// `gateway.python`, resolved: folders relative to the file it is written in.
fn python_setup(set: &ConfigSet, errors: &mut ConfigErrors) -> PythonSetup {
    let mut setup = PythonSetup::default();
    let (Some(p), Some(origin)) = (&set.gateway.python, &set.gateway_origin) else {
        return setup;
    };
    let dir = origin.file.parent().unwrap_or(std::path::Path::new("."));
    if let Some(i) = &p.interpreter {
        setup.interpreter = i.clone();
    }
    setup.path = p
        .path
        .iter()
        .map(|d| {
            let d = dir.join(d);
            std::fs::canonicalize(&d).unwrap_or(d)
        })
        .collect();
    for (i, d) in setup.path.iter().enumerate() {
        if !d.is_dir() {
            errors.push(origin.error(
                &format!("gateway.python.path[{i}]"),
                format!("{} is not a folder", d.display()),
            ));
        }
    }
    match p.workers {
        Some(0) => errors.push(origin.error("gateway.python.workers", "must be at least 1")),
        Some(n) => setup.workers = n,
        None => {}
    }
    setup.place = Some(origin.at("gateway.python"));
    setup
}

/// An API `name` is given to one API only (the admin API and the logs address APIs by it).
fn check_api_names(set: &ConfigSet, errors: &mut ConfigErrors) {
    let mut at: HashMap<&str, turnpike_config::Location> = HashMap::new();
    for a in &set.apis {
        let Some(name) = a.value.name.as_deref() else {
            continue;
        };
        match at.get(name) {
            Some(first) => errors.push(a.error(
                "name",
                format!("an API named `{name}` is defined at {first} already"),
            )),
            None => {
                at.insert(name, a.origin.key_at(&a.key));
            }
        }
    }
}

/// The HTTP proxy backend connections go through: `gateway.outboundProxy`, or Membrane's
/// `configuration.httpClientConfig.proxy` (not both).
fn outbound_proxy(
    set: &ConfigSet,
    errors: &mut ConfigErrors,
) -> Option<turnpike_snapshot::OutboundProxy> {
    let native = set
        .gateway
        .outbound_proxy
        .as_ref()
        .zip(set.gateway_origin.as_ref())
        .map(|(p, o)| (p, o.error("gateway.outboundProxy", "")));
    let membrane = set.configuration.as_ref().and_then(|c| {
        let p = c.value.http_client_config.as_ref()?.proxy.as_ref()?;
        Some((p, c.error("httpClientConfig.proxy", "")))
    });
    let (p, at) = match (native, membrane) {
        (Some(_), Some((_, at))) => {
            errors.push(turnpike_config::ConfigError::new(
                at.location,
                "the outbound proxy is set in `gateway.outboundProxy` already",
            ));
            return None;
        }
        (Some(n), None) => n,
        (None, Some(m)) => m,
        (None, None) => return None,
    };
    let mut ok = true;
    if p.host.trim().is_empty() {
        errors.push(turnpike_config::ConfigError::new(
            at.location.clone(),
            "the proxy's host is missing",
        ));
        ok = false;
    }
    if p.port == 0 {
        errors.push(turnpike_config::ConfigError::new(
            at.location.clone(),
            "the proxy's port must not be 0",
        ));
        ok = false;
    }
    let authorization = match &p.authentication {
        None => None,
        Some(c) => {
            use base64::Engine;
            let token = base64::engine::general_purpose::STANDARD
                .encode(format!("{}:{}", c.username, c.password));
            match http::HeaderValue::from_str(&format!("Basic {token}")) {
                Ok(mut v) => {
                    v.set_sensitive(true);
                    Some(v)
                }
                Err(_) => {
                    errors.push(turnpike_config::ConfigError::new(
                        at.location.clone(),
                        "the proxy's credentials do not make a header value",
                    ));
                    ok = false;
                    None
                }
            }
        }
    };
    ok.then(|| turnpike_snapshot::OutboundProxy {
        host: p.host.trim().to_owned(),
        port: p.port,
        authorization,
    })
}

/// How backend host names are looked up: `gateway.resolver`'s name servers, or the system's
/// resolver.
fn resolver(set: &ConfigSet, errors: &mut ConfigErrors) -> turnpike_dns::Dns {
    let (Some(r), Some(origin)) = (&set.gateway.resolver, &set.gateway_origin) else {
        return turnpike_dns::Dns::System;
    };
    let mut nameservers = Vec::new();
    for (i, ns) in r.nameservers.iter().enumerate() {
        let parsed = ns.parse::<SocketAddr>().or_else(|_| {
            ns.parse::<std::net::IpAddr>()
                .map(|ip| SocketAddr::new(ip, 53))
        });
        match parsed {
            Ok(a) => nameservers.push(a),
            Err(_) => errors.push(origin.error(
                &format!("gateway.resolver.nameservers[{i}]"),
                format!("`{ns}` is not an IP address, or `ip:port`"),
            )),
        }
    }
    if r.nameservers.is_empty() {
        errors.push(origin.error(
            "gateway.resolver.nameservers",
            "needs at least one name server",
        ));
    }
    let timeout = r.timeout.map_or(std::time::Duration::from_secs(2), |d| d.0);
    if timeout.is_zero() {
        errors.push(origin.error("gateway.resolver.timeout", "must be longer than zero"));
    }
    turnpike_dns::Dns::Servers(Arc::new(turnpike_dns::Servers {
        nameservers,
        timeout,
    }))
}

/// Compiles the `upstream:` documents (a name defined twice is an error).
fn compile_upstreams(
    set: &ConfigSet,
    dns: &turnpike_dns::Dns,
    errors: &mut ConfigErrors,
) -> Upstreams {
    let mut out = Upstreams {
        by_name: HashMap::new(),
        dns: dns.clone(),
        balancers: Default::default(),
    };
    let mut at: HashMap<&str, turnpike_config::Location> = HashMap::new();
    for u in &set.upstreams {
        if let Some(first) = at.get(u.value.name.as_str()) {
            errors.push(u.error(
                "name",
                format!(
                    "an upstream named `{}` is defined at {first} already",
                    u.value.name
                ),
            ));
            continue;
        }
        at.insert(&u.value.name, u.origin.key_at(&u.key));
        match target::compile_upstream(&u.value, base_dir(u), dns) {
            Ok(up) => {
                out.by_name.insert(u.value.name.clone(), Arc::new(up));
            }
            Err((key, m)) => errors.push(u.error(&key, m)),
        }
    }
    out
}

/// An API's name for logs: `name`, or `port path` when unnamed.
pub fn api_name(located: &Located<ApiConfig>) -> String {
    let api = &located.value;
    match &api.name {
        Some(n) => n.clone(),
        None => format!(
            "{}{}",
            api.port,
            api.path.as_ref().map_or("", |p| p.uri.as_str())
        ),
    }
}

/// What identifies an API's inline target across reloads: where it is written.
pub(crate) fn target_key(located: &Located<ApiConfig>) -> String {
    let at = located.origin.at(&located.join("target"));
    format!("{}:{}:{}", at.file.display(), at.line, at.column)
}

/// The folder of the file a value was read from.
pub(crate) fn base_dir<T>(l: &Located<T>) -> &std::path::Path {
    l.origin.file.parent().unwrap_or(std::path::Path::new("."))
}

/// The routes of one API: one for a plain API, one per spec for an OpenAPI-deployed one.
fn compile_api(
    located: &Located<ApiConfig>,
    wsdl: Option<&Arc<Wsdl>>,
    set: &ConfigSet,
    consumers: &Arc<Consumers>,
    python: &Arc<Executors>,
    upstreams: &Upstreams,
    errors: &mut ConfigErrors,
) -> Vec<CompiledRoute> {
    if !located.value.openapi.is_empty() {
        return openapi_api::compile_openapi_api(
            located, set, consumers, python, upstreams, errors,
        );
    }
    api::compile_plain_api(located, wsdl, set, consumers, python, upstreams, errors)
        .into_iter()
        .map(|(r, a)| (r, a, None))
        .collect()
}

/// What a route matches, as a comparable key: hosts (in any order), method and path.
fn route_key(spec: &RouteSpec) -> String {
    let mut hosts: Vec<String> = spec.hosts.iter().map(|h| format!("{h:?}")).collect();
    hosts.sort();
    format!("{hosts:?} {:?} {:?}", spec.method, spec.path)
}

/// One compiled route of an API: its route, the API, and the spec it was deployed from.
pub(crate) type CompiledRoute = (RouteSpec, Api, Option<Arc<Spec>>);
