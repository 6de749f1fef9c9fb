//! The compiled configuration: everything the data plane reads while serving, built once per
//! (re)load and then never changed. Requests hold the snapshot they started with.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use turnpike_config::{
    ApiConfig, ConfigErrors, ConfigSet, GatewaySettings, Located, OpenApiSource, PathConfig,
    SoapProxyConfig, TargetConfig,
};
use turnpike_core::router::{HostPattern, PathSpec};
use turnpike_core::{Chain, Problem, RouteSpec, Router, Step, TemplateScope};
use turnpike_openapi::docs::ApiDocs;
use turnpike_openapi::{load_spec, OpenApiValidator, Source, Spec};
use turnpike_policies::{answers_itself, compile_flow, Consumers, Direction, FlowContext};
use turnpike_soap::{Wsdl, WsdlPublisher};

use crate::target::Target;

/// A compiled API.
#[derive(Debug)]
pub struct Api {
    /// Name for logs (`name`, or `port path` when unnamed).
    pub name: Arc<str>,
    /// Global policies followed by the API's own flow.
    pub chain: Chain,
    /// Where requests go when the flow does not answer.
    pub target: Option<Target>,
    /// How the problems the gateway generates for this API are rendered.
    pub error_format: ErrorFormat,
}

/// How an API answers with the problems the gateway itself generates (a policy's `Reject`,
/// backend unreachable or late, bodies too large): RFC 9457 problem+json for HTTP APIs, a SOAP
/// fault for SOAP APIs (`soapProxy`), whose clients only understand faults. The one place the
/// engine turns a [`Problem`] into a response once the API is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorFormat {
    /// `application/problem+json`.
    #[default]
    ProblemJson,
    /// A SOAP fault in the request's SOAP version (from its `Content-Type`).
    SoapFault,
}

impl ErrorFormat {
    /// Renders `problem`; `content_type` is the request's (read for SOAP faults only).
    pub fn render(
        self,
        problem: Problem,
        content_type: Option<&http::HeaderValue>,
    ) -> http::Response<turnpike_core::Body> {
        match self {
            ErrorFormat::ProblemJson => problem.into_response(),
            ErrorFormat::SoapFault => turnpike_soap::problem_to_fault(
                problem,
                turnpike_soap::SoapVersion::from_content_type(content_type),
            ),
        }
    }
}

/// The routes of one listening address.
pub struct ListenerRoutes {
    /// The matcher over the APIs of this address.
    pub router: Router<Arc<Api>>,
    /// TLS, when the APIs of this address have `ssl:` (certificates chosen by SNI).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Accept cleartext HTTP/2 with prior knowledge.
    pub h2c: bool,
}

impl std::fmt::Debug for ListenerRoutes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenerRoutes")
            .field("routes", &self.router.len())
            .field("tls", &self.tls.is_some())
            .field("h2c", &self.h2c)
            .finish()
    }
}

/// HTTP/2 limits, with defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Http2Limits {
    /// Concurrent streams per client connection.
    pub max_concurrent_streams: u32,
    /// Initial stream window.
    pub initial_stream_window_size: u32,
    /// Initial connection window.
    pub initial_connection_window_size: u32,
    /// Largest header list.
    pub max_header_list_size: u32,
}

/// Process-level settings, with defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Worker threads.
    pub threads: usize,
    /// One JSON line per request on stdout.
    pub access_log: bool,
    /// Largest request head.
    pub max_header_size: usize,
    /// Most request headers.
    pub max_headers: usize,
    /// Largest request body.
    pub max_body_size: u64,
    /// Backend connect timeout.
    pub connect_timeout: Duration,
    /// Backend response-head timeout.
    pub upstream_timeout: Duration,
    /// Client request-head timeout.
    pub header_read_timeout: Duration,
    /// Idle time of pooled backend connections.
    pub upstream_idle_timeout: Duration,
    /// Grace period for in-flight requests at shutdown.
    pub shutdown_timeout: Duration,
    /// HTTP/2 limits.
    pub http2: Http2Limits,
}

impl Settings {
    /// Applies defaults to the configured settings.
    pub fn from_config(g: &GatewaySettings) -> Self {
        let limits = g.limits.clone().unwrap_or_default();
        let t = g.timeouts.clone().unwrap_or_default();
        let d = |v: Option<turnpike_config::units::Duration>, def: u64| {
            v.map_or(Duration::from_secs(def), |d| d.0)
        };
        Settings {
            threads: g
                .threads
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
            access_log: g.access_log.is_none_or(|f| f.0),
            max_header_size: limits.max_header_size.map_or(64 << 10, |s| s.0 as usize),
            max_headers: limits.max_headers.unwrap_or(100),
            max_body_size: limits.max_body_size.map_or(100 << 20, |s| s.0),
            connect_timeout: d(t.connect, 5),
            upstream_timeout: d(t.upstream, 60),
            header_read_timeout: d(t.header_read, 30),
            upstream_idle_timeout: d(t.upstream_idle, 90),
            shutdown_timeout: d(t.shutdown, 30),
            http2: {
                let h = g.http2.clone().unwrap_or_default();
                let max_header = limits.max_header_size.map_or(64 << 10, |s| s.0);
                Http2Limits {
                    max_concurrent_streams: h.max_concurrent_streams.unwrap_or(256),
                    initial_stream_window_size: h
                        .initial_stream_window_size
                        .map_or(1 << 20, |s| s.0.min(u32::MAX as u64 >> 1) as u32),
                    initial_connection_window_size: h
                        .initial_connection_window_size
                        .map_or(4 << 20, |s| s.0.min(u32::MAX as u64 >> 1) as u32),
                    max_header_list_size: h
                        .max_header_list_size
                        .map_or(max_header, |s| s.0)
                        .min(u32::MAX as u64) as u32,
                }
            },
        }
    }
}

/// Builds [`AddrHasher`]s for the listener map.
pub type AddrHash = std::hash::BuildHasherDefault<AddrHasher>;

/// A multiply-rotate hash for the listener map's socket addresses. Not keyed (no protection
/// against chosen keys), which is fine for keys that come from the configuration; it costs a
/// few instructions where SipHash costs about a hundred.
#[derive(Default, Debug, Clone, Copy)]
pub struct AddrHasher(u64);

impl AddrHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl std::hash::Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u16(&mut self, n: u16) {
        self.add(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
}

/// The whole compiled configuration.
#[derive(Debug)]
pub struct Snapshot {
    /// Routes per configured listening address (port 0 stays 0 here). Looked up on every
    /// request, with a fast hash: the keys come from the configuration, not from clients.
    pub listeners: HashMap<SocketAddr, ListenerRoutes, AddrHash>,
    /// Settings.
    pub settings: Settings,
    /// Other local files the configuration reads — OpenAPI specs, TLS certificates, keys and
    /// truststores, `soapProxy` WSDLs and schemas, files read by policies (validator and
    /// wsdl2openapi WSDLs, JWKS files, htpasswd files) — so that `--watch` reloads when they
    /// change (certificate rotation, key rollover, new users).
    pub spec_files: Vec<std::path::PathBuf>,
}

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
    let (set, mut errors) =
        turnpike_config::load::load_lenient(paths, &|name| std::env::var(name).ok());
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
    let settings = Settings::from_config(&set.gateway);
    if let Some(origin) = &set.gateway_origin {
        if settings.threads == 0 {
            errors.push(origin.error("gateway.threads", "must be at least 1"));
        }
        if settings.max_header_size < 8192 {
            errors.push(origin.error("gateway.limits.maxHeaderSize", "must be at least 8KB"));
        }
    }
    let consumers = Arc::new(compile_consumers(set, &mut errors));
    let mut by_addr: HashMap<SocketAddr, Vec<(RouteSpec, Arc<Api>)>> = HashMap::new();
    let mut apis_at: HashMap<SocketAddr, Vec<&Located<ApiConfig>>> = HashMap::new();
    let mut specs_by_addr: HashMap<SocketAddr, Vec<Arc<Spec>>> = HashMap::new();
    let mut order: Vec<SocketAddr> = Vec::new();
    let soap_apis: Vec<(Located<ApiConfig>, Arc<Wsdl>)> = set
        .soap_proxies
        .iter()
        .filter_map(|p| soap_proxy_api(p, &mut errors))
        .collect();
    let apis = set
        .apis
        .iter()
        .map(|a| (a, None))
        .chain(soap_apis.iter().map(|(a, w)| (a, Some(w))));
    for (located, wsdl) in apis {
        let addr = listen_addr(&located.value);
        apis_at.entry(addr).or_default().push(located);
        for (spec, api, openapi) in compile_api(located, wsdl, set, &consumers, &mut errors) {
            by_addr
                .entry(addr)
                .or_insert_with(|| {
                    order.push(addr);
                    Vec::new()
                })
                .push((spec, Arc::new(api)));
            if let Some(s) = openapi {
                specs_by_addr.entry(addr).or_default().push(s);
            }
        }
    }
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
                    error_format: ErrorFormat::ProblemJson,
                    name: "api-docs".into(),
                    chain: Chain::new(vec![Step {
                        policy: Box::new(docs),
                        request: true,
                        response: false,
                    }]),
                    target: None,
                }),
            ));
        }
    }
    let mut listeners = HashMap::default();
    for addr in order {
        let routes = by_addr.remove(&addr).unwrap_or_default();
        let apis = apis_at.remove(&addr).unwrap_or_default();
        let tls = listener_tls(addr, &apis, &mut errors);
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
                listeners.insert(addr, ListenerRoutes { router, tls, h2c });
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
    let mut spec_files: Vec<std::path::PathBuf> = specs_by_addr
        .values()
        .flatten()
        .flat_map(|s| s.files.iter().cloned())
        .collect();
    spec_files.extend(set.apis.iter().flat_map(tls_files));
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
    errors.into_result(Snapshot {
        listeners,
        settings,
        spec_files,
    })
}

/// Builds the TLS config of one listening address from its APIs' `ssl:` settings.
fn listener_tls(
    addr: SocketAddr,
    apis: &[&Located<ApiConfig>],
    errors: &mut ConfigErrors,
) -> Option<Arc<rustls::ServerConfig>> {
    let with: Vec<(&Located<ApiConfig>, &turnpike_config::SslConfig)> = apis
        .iter()
        .filter_map(|a| a.value.ssl.as_ref().map(|ssl| (*a, ssl)))
        .collect();
    if with.is_empty() {
        return None;
    }
    if let Some(plain) = apis.iter().find(|a| a.value.ssl.is_none()) {
        errors.push(plain.error(
            "",
            format!(
                "port {} mixes TLS and plain APIs: give this API `ssl:` too, or use another port",
                addr.port()
            ),
        ));
        return None;
    }
    let sites: Vec<turnpike_tls::SiteCert<'_>> = with
        .iter()
        .map(|(a, ssl)| turnpike_tls::SiteCert {
            hosts: a
                .value
                .host
                .as_deref()
                .map(|h| h.split_whitespace().map(str::to_owned).collect())
                .unwrap_or_default(),
            ssl,
            base: base_dir(a),
        })
        .collect();
    match turnpike_tls::server_config(&sites) {
        Ok(cfg) => Some(cfg),
        Err((i, msg)) => {
            errors.push(with[i.min(with.len() - 1)].0.error("ssl", msg));
            None
        }
    }
}

/// What an API's chain is compiled against.
struct FlowParts<'a> {
    set: &'a ConfigSet,
    consumers: &'a Arc<Consumers>,
    scope: &'a TemplateScope,
    wsdl: Option<&'a Arc<Wsdl>>,
    path_prefix: &'a str,
}

/// The steps of an API's chain: the global policies, then the gateway's own steps for this
/// kind of API (`built_in`: OpenAPI validation, WSDL publishing), then the API's `flow`.
fn compile_steps(
    located: &Located<ApiConfig>,
    parts: FlowParts<'_>,
    built_in: Vec<Step>,
    errors: &mut ConfigErrors,
) -> Vec<Step> {
    let mut steps = Vec::new();
    for g in &parts.set.globals {
        let ctx = FlowContext {
            scope: parts.scope,
            consumers: parts.consumers,
            in_consumer_flow: false,
            base_dir: base_dir(g),
            wsdl: parts.wsdl,
            path_prefix: "",
        };
        compile_flow(&g.value, g, "", Direction::Both, &ctx, &mut steps, errors);
    }
    steps.extend(built_in);
    let ctx = FlowContext {
        scope: parts.scope,
        consumers: parts.consumers,
        in_consumer_flow: false,
        base_dir: base_dir(located),
        wsdl: parts.wsdl,
        path_prefix: parts.path_prefix,
    };
    compile_flow(
        &located.value.flow,
        located,
        "flow",
        Direction::Both,
        &ctx,
        &mut steps,
        errors,
    );
    steps
}

/// The TLS key material files an API reads (listener and target), resolved like the loader does.
fn tls_files(api: &Located<ApiConfig>) -> Vec<std::path::PathBuf> {
    let dir = base_dir(api);
    let mut names: Vec<&str> = Vec::new();
    if let Some(ssl) = &api.value.ssl {
        names.extend(ssl.keystore.as_ref().map(|k| k.location.as_str()));
        names.extend(ssl.certificate.as_deref());
        names.extend(ssl.key.as_deref());
        names.extend(
            ssl.client_auth
                .as_ref()
                .map(|c| c.truststore.location.as_str()),
        );
    }
    if let Some(ssl) = api.value.target.as_ref().and_then(|t| t.ssl.as_ref()) {
        names.extend(ssl.truststore.as_ref().map(|t| t.location.as_str()));
        names.extend(ssl.keystore.as_ref().map(|k| k.location.as_str()));
        names.extend(ssl.certificate.as_deref());
        names.extend(ssl.key.as_deref());
    }
    names.into_iter().map(|n| dir.join(n)).collect()
}

/// The folder of the file a value was read from.
fn base_dir<T>(l: &Located<T>) -> &std::path::Path {
    l.origin.file.parent().unwrap_or(std::path::Path::new("."))
}

fn compile_consumers(set: &ConfigSet, errors: &mut ConfigErrors) -> Consumers {
    let none = Arc::new(Consumers::default());
    let scope = TemplateScope::default();
    Consumers::compile(
        &set.consumers,
        |c, errors| {
            let ctx = FlowContext {
                scope: &scope,
                consumers: &none,
                in_consumer_flow: true,
                base_dir: base_dir(c),
                wsdl: None,
                path_prefix: "",
            };
            let mut steps = Vec::new();
            compile_flow(
                &c.value.flow,
                c,
                "flow",
                Direction::Both,
                &ctx,
                &mut steps,
                errors,
            );
            Chain::new(steps)
        },
        errors,
    )
}
/// One compiled route of an API: its route, the API, and the spec it was deployed from.
type CompiledRoute = (RouteSpec, Api, Option<Arc<Spec>>);
/// Turns a `soapProxy:` document into the API it stands for: path and target from the WSDL's
/// service address (unless given), named after the service. Returns the API and its WSDL.
fn soap_proxy_api(
    located: &Located<SoapProxyConfig>,
    errors: &mut ConfigErrors,
) -> Option<(Located<ApiConfig>, Arc<Wsdl>)> {
    let p = &located.value;
    let wsdl = match turnpike_policies::load_wsdl(&p.wsdl, located) {
        Ok(w) => w,
        Err(m) => {
            errors.push(located.error("wsdl", m));
            return None;
        }
    };
    let port = match wsdl.port(p.service_name.as_deref(), p.port_name.as_deref()) {
        Ok(port) => port,
        Err(m) => {
            let key = if p.port_name.is_some() {
                "portName"
            } else {
                "wsdl"
            };
            errors.push(located.error(key, m));
            return None;
        }
    };
    let path = p
        .path
        .clone()
        .unwrap_or_else(|| turnpike_soap::publish::address_path(&port.address).to_owned());
    let target = match &p.target {
        Some(t) => t.clone(),
        None => {
            let scheme_rest = ["http://", "https://"]
                .iter()
                .find_map(|sch| port.address.strip_prefix(sch).map(|r| (sch, r)));
            let Some((scheme, rest)) = scheme_rest else {
                errors.push(located.error(
                    "wsdl",
                    format!(
                        "the service address `{}` is not an http(s):// URL; set `target:`",
                        port.address
                    ),
                ));
                return None;
            };
            let authority = rest.split('/').next().unwrap_or(rest);
            TargetConfig {
                url: Some(format!("{scheme}{authority}")),
                host: None,
                port: None,
                adjust_host_header: None,
                ssl: None,
                http2: Default::default(),
            }
        }
    };
    let name = p
        .name
        .clone()
        .or_else(|| wsdl.service_of(port).map(str::to_owned));
    let api = ApiConfig {
        name,
        description: p.description.clone(),
        port: p.port,
        ip: p.ip,
        host: p.host.clone(),
        method: None,
        path: Some(PathConfig {
            uri: path,
            is_reg_exp: Default::default(),
        }),
        flow: p.flow.clone(),
        target: Some(target),
        ssl: p.ssl.clone(),
        h2c: p.h2c,
        openapi: Vec::new(),
    };
    Some((
        Located {
            value: api,
            origin: Arc::clone(&located.origin),
            key: located.key.clone(),
        },
        wsdl,
    ))
}

fn compile_api(
    located: &Located<ApiConfig>,
    wsdl: Option<&Arc<Wsdl>>,
    set: &ConfigSet,
    consumers: &Arc<Consumers>,
    errors: &mut ConfigErrors,
) -> Vec<CompiledRoute> {
    if !located.value.openapi.is_empty() {
        return compile_openapi_api(located, set, consumers, errors);
    }
    compile_plain_api(located, wsdl, set, consumers, errors)
        .map(|(r, a)| vec![(r, a, None)])
        .unwrap_or_default()
}

fn compile_plain_api(
    located: &Located<ApiConfig>,
    wsdl: Option<&Arc<Wsdl>>,
    set: &ConfigSet,
    consumers: &Arc<Consumers>,
    errors: &mut ConfigErrors,
) -> Option<(RouteSpec, Api)> {
    let api = &located.value;
    let before = errors.0.len();
    let hosts = match api.host.as_deref().map(HostPattern::parse_list).transpose() {
        Ok(h) => h.unwrap_or_default(),
        Err(m) => {
            errors.push(located.error("host", m));
            Vec::new()
        }
    };
    let method = match api.method.as_deref().map(str::trim) {
        None | Some("*") | Some("") => None,
        Some(m) => {
            let upper = m.to_ascii_uppercase();
            match Method::from_bytes(upper.as_bytes()) {
                Ok(method) => Some(method),
                Err(_) => {
                    errors.push(located.error("method", format!("`{m}` is not an HTTP method")));
                    None
                }
            }
        }
    };
    let path = match &api.path {
        None => PathSpec::Prefix(String::new()),
        Some(p) => {
            if !p.is_reg_exp.0 && !p.uri.starts_with('/') {
                errors.push(located.error("path.uri", "must start with `/`"));
            }
            PathSpec::from_uri(&p.uri, p.is_reg_exp.0)
        }
    };
    let param_names = match path.param_names() {
        Ok(n) => n,
        Err(m) => {
            errors.push(located.error("path.uri", m));
            Vec::new()
        }
    };
    let target = match &api.target {
        Some(t) => match Target::compile(t, base_dir(located)) {
            Ok(t) => Some(t),
            Err((key, m)) => {
                errors.push(located.error(format!("target.{key}").trim_end_matches('.'), m));
                None
            }
        },
        None => {
            if !answers_itself(&api.flow) {
                errors.push(located.error(
                    "",
                    "this API has no `target:` and its flow never answers (add a target or a `return` policy)",
                ));
            }
            None
        }
    };
    let scope = TemplateScope {
        path_params: param_names,
    };
    let path_prefix = match &api.path {
        Some(p) if !p.is_reg_exp.0 && !p.uri.contains('{') => p.uri.as_str(),
        _ => "",
    };
    // A soapProxy publishes its WSDL at `?wsdl` before its own flow runs.
    let built_in: Vec<Step> = wsdl
        .map(|w| Step {
            policy: Box::new(WsdlPublisher::new(w, api.ssl.is_some())),
            request: true,
            response: false,
        })
        .into_iter()
        .collect();
    let steps = compile_steps(
        located,
        FlowParts {
            set,
            consumers,
            scope: &scope,
            wsdl,
            path_prefix,
        },
        built_in,
        errors,
    );
    if errors.0.len() > before {
        return None;
    }
    let name: Arc<str> = match &api.name {
        Some(n) => n.as_str().into(),
        None => format!(
            "{}{}",
            api.port,
            api.path.as_ref().map_or("", |p| p.uri.as_str())
        )
        .into(),
    };
    Some((
        RouteSpec {
            hosts,
            method,
            path,
        },
        Api {
            name,
            chain: Chain::new(steps),
            target,
            error_format: if wsdl.is_some() {
                ErrorFormat::SoapFault
            } else {
                ErrorFormat::ProblemJson
            },
        },
    ))
}

/// The host patterns of an API (errors reported, empty list on error).
fn api_hosts(located: &Located<ApiConfig>, errors: &mut ConfigErrors) -> Vec<HostPattern> {
    match located
        .value
        .host
        .as_deref()
        .map(HostPattern::parse_list)
        .transpose()
    {
        Ok(h) => h.unwrap_or_default(),
        Err(m) => {
            errors.push(located.error("host", m));
            Vec::new()
        }
    }
}

/// The spec files of one `openapi[i]` entry.
fn spec_sources(
    located: &Located<ApiConfig>,
    i: usize,
    src: &OpenApiSource,
    errors: &mut ConfigErrors,
) -> Vec<Source> {
    let base = located
        .origin
        .file
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    match (&src.location, &src.dir) {
        (Some(l), None) => match turnpike_openapi::load::source_of(l, &base) {
            Ok(s) => vec![s],
            Err(m) => {
                errors.push(located.error(&format!("openapi[{i}].location"), m));
                Vec::new()
            }
        },
        (None, Some(d)) => match turnpike_openapi::load::list_dir(&base.join(d)) {
            Ok(files) => files.into_iter().map(Source::File).collect(),
            Err(m) => {
                errors.push(located.error(&format!("openapi[{i}].dir"), m));
                Vec::new()
            }
        },
        _ => {
            errors.push(located.error(
                &format!("openapi[{i}]"),
                "give exactly one of `location` and `dir`",
            ));
            Vec::new()
        }
    }
}

/// An API deployed from OpenAPI documents: one route per spec (its base path), each with the
/// spec's validator in front of the API's flow.
fn compile_openapi_api(
    located: &Located<ApiConfig>,
    set: &ConfigSet,
    consumers: &Arc<Consumers>,
    errors: &mut ConfigErrors,
) -> Vec<CompiledRoute> {
    let api = &located.value;
    let before = errors.0.len();
    if api.path.is_some() {
        errors.push(located.error(
            "path",
            "an API deployed from `openapi` takes its paths from the spec; remove `path`",
        ));
    }
    if api.method.is_some() {
        errors.push(located.error(
            "method",
            "an API deployed from `openapi` takes its methods from the spec; remove `method`",
        ));
    }
    let hosts = api_hosts(located, errors);
    let target = match &api.target {
        Some(t) => match Target::compile(t, base_dir(located)) {
            Ok(t) => Some(t),
            Err((key, m)) => {
                errors.push(located.error(format!("target.{key}").trim_end_matches('.'), m));
                None
            }
        },
        None => None,
    };
    let mut out = Vec::new();
    for (i, src) in api.openapi.iter().enumerate() {
        let key = format!("openapi[{i}]");
        for source in spec_sources(located, i, src, errors) {
            let spec = match load_spec(&source) {
                Ok(s) => Arc::new(s),
                Err(e) => {
                    errors.push(located.error(&key, format!("invalid OpenAPI spec: {e}")));
                    continue;
                }
            };
            let target = match &target {
                Some(t) => t.clone(),
                None => match server_target(&spec) {
                    Ok(t) => t,
                    Err(m) => {
                        errors.push(located.error(&key, m));
                        continue;
                    }
                },
            };
            let scope = TemplateScope::default();
            let (requests, responses) = (src.validate_requests.0, src.validate_responses.0);
            // Always present: it routes to the spec's operations (404/405) even without validation.
            let built_in = vec![Step {
                policy: Box::new(OpenApiValidator::new(spec.clone(), requests, responses)),
                request: true,
                response: responses,
            }];
            let steps = compile_steps(
                located,
                FlowParts {
                    set,
                    consumers,
                    scope: &scope,
                    wsdl: None,
                    path_prefix: "",
                },
                built_in,
                errors,
            );
            let name: Arc<str> = match &api.name {
                Some(n) => n.as_str().into(),
                None => spec.title.as_str().into(),
            };
            out.push((
                RouteSpec {
                    hosts: hosts.clone(),
                    method: None,
                    path: PathSpec::Prefix(spec.base_path.clone()),
                },
                Api {
                    name,
                    chain: Chain::new(steps),
                    target: Some(target),
                    error_format: ErrorFormat::ProblemJson,
                },
                Some(spec),
            ));
        }
    }
    if errors.0.len() > before {
        return Vec::new();
    }
    out
}

/// The target named by a spec's first `servers` URL (scheme and authority; the base path stays
/// in the request path).
fn server_target(spec: &Spec) -> Result<Target, String> {
    let Some(url) = &spec.server_url else {
        return Err(format!(
            "the spec `{}` has no absolute `servers` URL to forward to; add a `target:`",
            spec.title
        ));
    };
    let origin = url
        .find("://")
        .map(|i| {
            let rest = &url[i + 3..];
            let end = rest.find('/').map_or(url.len(), |p| i + 3 + p);
            &url[..end]
        })
        .unwrap_or(url);
    Target::compile(
        &TargetConfig {
            url: Some(origin.to_owned()),
            host: None,
            port: None,
            adjust_host_header: None,
            ssl: None,
            http2: turnpike_config::units::Flag(false),
        },
        std::path::Path::new("."),
    )
    .map_err(|(_, m)| {
        format!("the spec's server `{url}` cannot be the target ({m}); add a `target:`")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn addr_hash_separates_ports_and_addresses() {
        let addrs: Vec<SocketAddr> = (2000..2100)
            .map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
            .chain((2000..2100).map(|p| SocketAddr::from(([0, 0, 0, 0], p))))
            .chain((2000..2100).map(|p| SocketAddr::from(([0u16; 8], p))))
            .collect();
        let hashes: std::collections::HashSet<u64> = addrs
            .iter()
            .map(|a| AddrHash::default().hash_one(a))
            .collect();
        assert_eq!(hashes.len(), addrs.len());
        let map: HashMap<SocketAddr, usize, AddrHash> =
            addrs.iter().enumerate().map(|(i, a)| (*a, i)).collect();
        for (i, a) in addrs.iter().enumerate() {
            assert_eq!(map.get(a), Some(&i));
        }
    }
}
