//! The compiled configuration: everything the data plane reads while serving, built once per
//! (re)load and then never changed. Requests hold the snapshot they started with.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use turnpike_config::{
    ApiConfig, ConfigErrors, ConfigSet, GatewaySettings, Located, PathConfig, SoapProxyConfig,
    TargetConfig,
};
use turnpike_core::chain::Step;
use turnpike_core::router::{HostPattern, PathSpec};
use turnpike_core::{Chain, Problem, RouteSpec, Router, TemplateScope};
use turnpike_policies::{answers_itself, compile_flow, Direction, FlowContext};
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
#[derive(Debug)]
pub struct ListenerRoutes {
    /// The matcher over the APIs of this address.
    pub router: Router<Arc<Api>>,
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
        }
    }
}

/// The whole compiled configuration.
#[derive(Debug)]
pub struct Snapshot {
    /// Routes per configured listening address (port 0 stays 0 here).
    pub listeners: HashMap<SocketAddr, ListenerRoutes>,
    /// Settings.
    pub settings: Settings,
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
    let mut by_addr: HashMap<SocketAddr, Vec<(RouteSpec, Arc<Api>)>> = HashMap::new();
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
        if let Some((spec, api)) = compile_api(located, wsdl, set, &mut errors) {
            let addr = listen_addr(&located.value);
            by_addr
                .entry(addr)
                .or_insert_with(|| {
                    order.push(addr);
                    Vec::new()
                })
                .push((spec, Arc::new(api)));
        }
    }
    let mut listeners = HashMap::new();
    for addr in order {
        let routes = by_addr.remove(&addr).unwrap_or_default();
        match Router::build(routes) {
            Ok(router) => {
                listeners.insert(addr, ListenerRoutes { router });
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
    errors.into_result(Snapshot {
        listeners,
        settings,
    })
}

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
            let Some(rest) = port.address.strip_prefix("http://") else {
                errors.push(located.error(
                    "wsdl",
                    format!(
                        "the service address `{}` is not an http:// URL; set `target:`",
                        port.address
                    ),
                ));
                return None;
            };
            let authority = rest.split('/').next().unwrap_or(rest);
            TargetConfig {
                url: Some(format!("http://{authority}")),
                host: None,
                port: None,
                adjust_host_header: None,
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
        Some(t) => match Target::compile(t) {
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
    let ctx = FlowContext {
        scope: &scope,
        wsdl,
        path_prefix,
    };
    let mut steps = Vec::new();
    for g in &set.globals {
        compile_flow(&g.value, g, "", Direction::Both, &ctx, &mut steps, errors);
    }
    if let Some(w) = wsdl {
        // A soapProxy publishes its WSDL at `?wsdl` before its own flow runs.
        steps.push(Step {
            policy: Box::new(WsdlPublisher::new(w)),
            request: true,
            response: false,
        });
    }
    compile_flow(
        &api.flow,
        located,
        "flow",
        Direction::Both,
        &ctx,
        &mut steps,
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
