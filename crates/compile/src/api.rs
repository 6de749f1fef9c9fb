//! Plain APIs (and the APIs `soapProxy` documents stand for): route, chain and target; and
//! consumers with their own flows.

use std::sync::Arc;

use http::Method;
use turnpike_config::{ApiConfig, ConfigErrors, ConfigSet, Located};
use turnpike_core::router::{HostPattern, PathSpec};
use turnpike_core::{Chain, CompileContext, RouteSpec, Step, TemplateScope};
use turnpike_policies::{answers_itself, compile_flow, Consumers, Direction};
use turnpike_snapshot::Api;
use turnpike_soap::{Wsdl, WsdlPublisher};

use crate::{base_dir, compile_target, CompiledRoute};

/// What an API's chain is compiled against.
pub(crate) struct FlowParts<'a> {
    pub(crate) set: &'a ConfigSet,
    pub(crate) consumers: &'a Arc<Consumers>,
    pub(crate) scope: &'a TemplateScope,
    pub(crate) wsdl: Option<&'a Arc<Wsdl>>,
    pub(crate) path_prefix: &'a str,
}

/// The steps of an API's chain: the global policies, then the gateway's own steps for this
/// kind of API (`built_in`: OpenAPI validation, WSDL publishing), then the API's `flow`.
pub(crate) fn compile_steps(
    located: &Located<ApiConfig>,
    parts: FlowParts<'_>,
    built_in: Vec<Step>,
    errors: &mut ConfigErrors,
) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut shared = http::Extensions::new();
    shared.insert(Arc::clone(parts.consumers));
    if let Some(w) = parts.wsdl {
        shared.insert(Arc::clone(w));
    }
    for g in &parts.set.globals {
        let ctx = CompileContext {
            scope: parts.scope,
            in_consumer_flow: false,
            base_dir: base_dir(g),
            path_prefix: "",
            shared: &shared,
        };
        compile_flow(&g.value, g, "", Direction::Both, &ctx, &mut steps, errors);
    }
    steps.extend(built_in);
    let ctx = CompileContext {
        scope: parts.scope,
        in_consumer_flow: false,
        base_dir: base_dir(located),
        path_prefix: parts.path_prefix,
        shared: &shared,
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

pub(crate) fn compile_consumers(set: &ConfigSet, errors: &mut ConfigErrors) -> Consumers {
    let none = http::Extensions::new();
    let scope = TemplateScope::default();
    Consumers::compile(
        &set.consumers,
        |c, errors| {
            let ctx = CompileContext {
                scope: &scope,
                in_consumer_flow: true,
                base_dir: base_dir(c),
                path_prefix: "",
                shared: &none,
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
pub(crate) fn compile_api(
    located: &Located<ApiConfig>,
    wsdl: Option<&Arc<Wsdl>>,
    set: &ConfigSet,
    consumers: &Arc<Consumers>,
    errors: &mut ConfigErrors,
) -> Vec<CompiledRoute> {
    if !located.value.openapi.is_empty() {
        return crate::openapi_api::compile_openapi_api(located, set, consumers, errors);
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
        Some(t) => match compile_target(t, base_dir(located)) {
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
            errors: wsdl.map(|_| turnpike_soap::fault::soap_faults()),
        },
    ))
}

/// The host patterns of an API (errors reported, empty list on error).
pub(crate) fn api_hosts(
    located: &Located<ApiConfig>,
    errors: &mut ConfigErrors,
) -> Vec<HostPattern> {
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
