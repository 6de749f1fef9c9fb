//! Plain APIs (and the APIs `soapProxy` documents stand for): route, chain and target.

use std::sync::Arc;

use http::Method;
use turnpike_config::{ApiConfig, ConfigErrors, ConfigSet, Located};
use turnpike_core::router::{HostPattern, PathSpec};
use turnpike_core::{Chain, RouteSpec, Step, TemplateScope};
use turnpike_policies::python::Executors;
use turnpike_policies::{answers_itself, checks_soap, Consumers};
use turnpike_snapshot::Api;
use turnpike_soap::{Wsdl, WsdlPublisher};

use crate::flow::{compile_steps, compile_sub_flow, FlowParts};
use crate::target::Upstreams;
use crate::{api_name, base_dir, compile_target, target_key};

/// One route of a plain API: its method, its path, and the key of its own flow (`routes[i]`).
struct RoutePart<'a> {
    method: Option<Method>,
    path: PathSpec,
    /// `(key, flow)` of an entry of `routes`.
    own: Option<(String, &'a [turnpike_config::PolicyConfig])>,
    /// The path as written, for the prefix policies route below.
    uri: Option<&'a str>,
    regex: bool,
}

fn parse_method(
    located: &Located<ApiConfig>,
    key: &str,
    m: Option<&str>,
    errors: &mut ConfigErrors,
) -> Option<Method> {
    match m.map(str::trim) {
        None | Some("*") | Some("") => None,
        Some(m) => {
            let upper = m.to_ascii_uppercase();
            match Method::from_bytes(upper.as_bytes()) {
                Ok(method) => Some(method),
                Err(_) => {
                    errors.push(located.error(key, format!("`{m}` is not an HTTP method")));
                    None
                }
            }
        }
    }
}

/// The routes of a plain API: its `method` and `path`, or each entry of `routes`.
fn route_parts<'a>(
    located: &'a Located<ApiConfig>,
    errors: &mut ConfigErrors,
) -> Vec<RoutePart<'a>> {
    let api = &located.value;
    if api.routes.is_empty() {
        let path = match &api.path {
            None => PathSpec::Prefix(String::new()),
            Some(p) => {
                if !p.is_reg_exp.0 && !p.uri.starts_with('/') {
                    errors.push(located.error("path.uri", "must start with `/`"));
                }
                PathSpec::from_uri(&p.uri, p.is_reg_exp.0)
            }
        };
        return vec![RoutePart {
            method: parse_method(located, "method", api.method.as_deref(), errors),
            path,
            own: None,
            uri: api.path.as_ref().map(|p| p.uri.as_str()),
            regex: api.path.as_ref().is_some_and(|p| p.is_reg_exp.0),
        }];
    }
    for (key, set) in [
        ("path", api.path.is_some()),
        ("method", api.method.is_some()),
    ] {
        if set {
            errors.push(located.error(
                key,
                format!("an API with `routes` takes each route's `{key}` from its entry; remove `{key}`"),
            ));
        }
    }
    api.routes
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let key = format!("routes[{i}]");
            if !r.path.starts_with('/') {
                errors.push(located.error(&format!("{key}.path"), "must start with `/`"));
            }
            RoutePart {
                method: parse_method(
                    located,
                    &format!("{key}.method"),
                    r.method.as_deref(),
                    errors,
                ),
                path: PathSpec::from_uri(&r.path, false),
                own: Some((format!("{key}.flow"), r.flow.as_slice())),
                uri: Some(r.path.as_str()),
                regex: false,
            }
        })
        .collect()
}

/// The API's `test` (Membrane's routing condition), compiled; errors are reported.
pub(crate) fn route_test(
    located: &Located<ApiConfig>,
    errors: &mut ConfigErrors,
) -> Option<Arc<dyn turnpike_core::RouteTest>> {
    let api = &located.value;
    match (&api.test, &api.language) {
        (Some(t), language) => {
            let namespaces: Vec<(String, String)> = api
                .xml_config
                .iter()
                .flat_map(|x| x.namespaces.iter())
                .map(|n| (n.prefix.clone(), n.uri.clone()))
                .collect();
            match turnpike_policies::condition::route_test(t, language.as_deref(), &namespaces) {
                Ok(t) => Some(t),
                Err(m) => {
                    errors.push(located.error("test", m));
                    None
                }
            }
        }
        (None, Some(_)) => {
            errors.push(located.error("language", "the language of `test`, which is not given"));
            None
        }
        (None, None) => None,
    }
}

/// The target of an API without one whose flow converts to SOAP with `wsdl2openapi`: the
/// address of the WSDL's port (as Membrane does). `None` when there is no such policy, or its
/// WSDL cannot be read (the policy reports that).
fn wsdl2openapi_target(located: &Located<ApiConfig>) -> Option<turnpike_config::TargetConfig> {
    let p = located
        .value
        .flow
        .iter()
        .find(|p| p.name == "wsdl2openapi")?;
    let text = |k: &str| p.settings.get(k).and_then(|v| v.as_str());
    let location = turnpike_soap::Location::from_config(text("wsdl")?, base_dir(located));
    let wsdl = Wsdl::load(&location).ok()?;
    let port = wsdl.port(text("serviceName"), text("portName")).ok()?;
    let address = port.address.clone();
    (address.starts_with("http://") || address.starts_with("https://")).then(|| {
        turnpike_config::TargetConfig {
            url: Some(address),
            ..Default::default()
        }
    })
}

/// Membrane's `webSocket` entry of an API's flow (`{ url }`): where WebSocket upgrade requests
/// go instead of the target (`ws://`/`wss://` URLs are `http://`/`https://`). Its frame
/// interceptors (`flow`) are load errors: frames are relayed as they are.
fn websocket_target(
    located: &Located<ApiConfig>,
    upstreams: &Upstreams,
    errors: &mut ConfigErrors,
) -> Option<turnpike_snapshot::Target> {
    let mut entries = located
        .value
        .flow
        .iter()
        .enumerate()
        .filter(|(_, p)| p.name == "webSocket");
    let (i, p) = entries.next()?;
    let at = format!("flow[{i}].webSocket");
    if let Some((j, _)) = entries.next() {
        errors.push(located.error(
            &format!("flow[{j}].webSocket"),
            "`webSocket` may stand only once in an API's flow",
        ));
    }
    let settings = &p.settings;
    if let Some(keys) = settings.as_object().map(|o| o.keys()) {
        for k in keys.filter(|k| *k != "url" && *k != "flow") {
            errors.push(located.error(
                &format!("{at}.{k}"),
                format!("unknown field `{k}`, expected `url` or `flow`"),
            ));
        }
    } else if !settings.is_null() {
        errors.push(located.error(&at, "expected a map with `url`"));
        return None;
    }
    if settings
        .get("flow")
        .is_some_and(|f| !f.is_null() && f.as_array().is_none_or(|a| !a.is_empty()))
    {
        errors.push(located.error(
            &format!("{at}.flow"),
            "WebSocket frame interceptors (`wsLog`, `wsStompReassembler`, custom ones) are not supported: frames are relayed as they are; the upgrade request runs the API's flow (see docs/membrane.md)",
        ));
    }
    let url = match settings.get("url") {
        None => return None,
        Some(u) => match u.as_str() {
            Some(u) => u.to_owned(),
            None => {
                errors.push(located.error(&format!("{at}.url"), "the URL is a string"));
                return None;
            }
        },
    };
    let url = if let Some(rest) = url.strip_prefix("ws://") {
        format!("http://{rest}")
    } else if let Some(rest) = url.strip_prefix("wss://") {
        format!("https://{rest}")
    } else {
        url
    };
    let config = turnpike_config::TargetConfig {
        url: Some(url),
        ..Default::default()
    };
    let scope = TemplateScope::default();
    match compile_target(
        &config,
        base_dir(located),
        upstreams,
        &api_name(located),
        &format!("{}#webSocket", target_key(located)),
        Some(&scope),
    ) {
        Ok(t) => Some(t),
        Err((key, m)) => {
            errors.push(located.error(format!("{at}.{key}").trim_end_matches('.'), m));
            None
        }
    }
}

/// A plain API: one route (its `method` and `path`), or one per entry of `routes`, each with
/// the API's chain followed by the route's own flow.
pub(crate) fn compile_plain_api(
    located: &Located<ApiConfig>,
    wsdl: Option<&Arc<Wsdl>>,
    set: &ConfigSet,
    consumers: &Arc<Consumers>,
    python: &Arc<Executors>,
    upstreams: &Upstreams,
    errors: &mut ConfigErrors,
) -> Vec<(RouteSpec, Api)> {
    let api = &located.value;
    let before = errors.0.len();
    if !api.operations.is_empty() {
        errors.push(located.error(
            "operations",
            "`operations` names operations of an OpenAPI spec: deploy the API from `openapi`, or use `routes`",
        ));
    }
    let hosts = match api.host.as_deref().map(HostPattern::parse_list).transpose() {
        Ok(h) => h.unwrap_or_default(),
        Err(m) => {
            errors.push(located.error("host", m));
            Vec::new()
        }
    };
    let parts = route_parts(located, errors);
    let wsdl_target = match &api.target {
        None => wsdl2openapi_target(located),
        Some(_) => None,
    };
    // A `balancer` in the flow is the API's target: a pool of its cluster's nodes.
    let balancer = crate::balancer::compile_balancer(located, upstreams, errors);
    let internal_target: Option<Arc<str>> = api
        .target
        .as_ref()
        .and_then(|t| t.url.as_deref())
        .and_then(crate::internal_name)
        .map(Arc::from);
    let target = match api.target.as_ref().or(wsdl_target.as_ref()) {
        Some(_) if internal_target.is_some() => None,
        Some(t) => match compile_target(
            t,
            base_dir(located),
            upstreams,
            &api_name(located),
            &target_key(located),
            None,
        ) {
            Ok(t) => Some(t),
            Err((key, m)) => {
                errors.push(located.error(format!("target.{key}").trim_end_matches('.'), m));
                None
            }
        },
        None if api.flow.iter().any(|p| p.name == "balancer") => {
            balancer.as_ref().map(|b| b.target.clone())
        }
        None => {
            let routes_answer =
                !api.routes.is_empty() && api.routes.iter().all(|r| answers_itself(&r.flow));
            // A `destination` sends requests to an internal API; a redirecting `rewriter`
            // answers the requests it matches.
            let routes_on = turnpike_policies::flow::mentions(&api.flow, "destination")
                || turnpike_policies::flow::settings_of(&api.flow, "rewriter")
                    .iter()
                    .any(|r| r.to_string().contains("\"redirect"));
            // A forward proxy's target is each request's origin.
            let forward_proxy = located.key == "proxy";
            // A document with load errors (a misspelt `target:`) is not told again.
            let recovered = located.origin.recovered;
            if !answers_itself(&api.flow)
                && !routes_answer
                && !routes_on
                && !forward_proxy
                && !recovered
            {
                errors.push(located.error(
                    "",
                    "this API has no `target:` and its flow never answers (add a target or a `return` policy)",
                ));
            }
            None
        }
    };
    let websocket_target = websocket_target(located, upstreams, errors);
    let public_address = crate::soap_proxy::wsdl_rewriter(located, wsdl.is_some(), errors);
    let name: Arc<str> = match &api.name {
        Some(n) => n.as_str().into(),
        None => format!(
            "{}{}",
            api.port,
            api.path.as_ref().map_or("", |p| p.uri.as_str())
        )
        .into(),
    };
    let test = route_test(located, errors);
    let soap_errors = wsdl.is_some()
        || checks_soap(&api.flow)
        || api.routes.iter().any(|r| checks_soap(&r.flow))
        || set.globals.iter().any(|g| checks_soap(&g.value));
    let mut out = Vec::new();
    for part in parts {
        let param_names = match part.path.param_names() {
            Ok(n) => n,
            Err(m) => {
                let key = match &part.own {
                    Some((k, _)) => k.replace(".flow", ".path"),
                    None => "path.uri".to_owned(),
                };
                errors.push(located.error(&key, m));
                Vec::new()
            }
        };
        let scope = TemplateScope {
            path_params: param_names,
            api_name: api_name(located),
        };
        let path_prefix = match part.uri {
            Some(u) if !part.regex && !u.contains('{') => u,
            _ => "",
        };
        // A soapProxy publishes its WSDL at `?wsdl` before its own flow runs.
        let built_in: Vec<Step> = wsdl
            .map(|w| Step {
                policy: Box::new(WsdlPublisher::with_address(
                    w,
                    api.ssl.is_some(),
                    public_address.as_ref(),
                    Some(path_prefix).filter(|p| !p.is_empty()),
                )),
                request: true,
                response: false,
            })
            .into_iter()
            .collect();
        let balancer_slot = balancer
            .as_ref()
            .map(crate::balancer::CompiledBalancer::slot);
        let flow_parts = FlowParts {
            set,
            consumers,
            scope: &scope,
            wsdl,
            path_prefix,
            python,
            validator: None,
            balancers: &upstreams.balancers,
            balancer: balancer_slot.as_ref(),
        };
        let mut target = target.clone();
        if let (Some(t), Some(config)) = (&mut target, &api.target) {
            match crate::target_path(config, &scope) {
                Ok(p) => t.path = p,
                Err((key, m)) => errors.push(located.error(&format!("target.{key}"), m)),
            }
        }
        let mut steps = compile_steps(located, &flow_parts, built_in, errors);
        if let Some((key, flow)) = &part.own {
            compile_sub_flow(located, &flow_parts, flow, key, &mut steps, errors);
        }
        if let Some(turnpike_snapshot::TargetPath::Template(t)) = target.as_ref().map(|t| &t.path) {
            if t.needs_body() {
                steps.push(Step {
                    policy: Box::new(crate::target_body::TargetBody(t.clone())),
                    request: true,
                    response: false,
                });
            }
        }
        out.push((
            RouteSpec {
                hosts: hosts.clone(),
                method: part.method,
                path: part.path,
            },
            Api {
                stats: turnpike_telemetry::stats::api(&name),
                name: name.clone(),
                chain: Chain::new(steps),
                backend: match (target, &internal_target) {
                    (_, Some(name)) => turnpike_snapshot::Backend::Internal(Arc::clone(name)),
                    (Some(t), None) => turnpike_snapshot::Backend::Target(t),
                    (None, None) => turnpike_snapshot::Backend::None,
                },
                websocket_target: websocket_target.clone(),
                errors: if wsdl.is_some() {
                    Some(turnpike_soap::fault::soap_faults())
                } else if soap_errors {
                    Some(turnpike_soap::fault::soap_aware())
                } else {
                    None
                },
                test: test.clone(),
            },
        ));
    }
    if errors.0.len() > before {
        return Vec::new();
    }
    out
}
