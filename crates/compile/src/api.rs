//! Plain APIs (and the APIs `soapProxy` documents stand for): route, chain and target.

use std::sync::Arc;

use http::Method;
use turnpike_config::{ApiConfig, ConfigErrors, ConfigSet, Located};
use turnpike_core::router::{HostPattern, PathSpec};
use turnpike_core::{Chain, RouteSpec, Step, TemplateScope};
use turnpike_policies::{answers_itself, checks_soap, Consumers};
use turnpike_snapshot::Api;
use turnpike_soap::{Wsdl, WsdlPublisher};

use crate::flow::{compile_steps, FlowParts};
use crate::target::Upstreams;
use crate::{api_name, base_dir, compile_target, target_key};

pub(crate) fn compile_plain_api(
    located: &Located<ApiConfig>,
    wsdl: Option<&Arc<Wsdl>>,
    set: &ConfigSet,
    consumers: &Arc<Consumers>,
    upstreams: &Upstreams,
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
        Some(t) => match compile_target(
            t,
            base_dir(located),
            upstreams,
            &api_name(located),
            &target_key(located),
        ) {
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
            stats: turnpike_telemetry::stats::api(&name),
            name,
            chain: Chain::new(steps),
            target,
            errors: if wsdl.is_some() {
                Some(turnpike_soap::fault::soap_faults())
            } else if checks_soap(&api.flow) || set.globals.iter().any(|g| checks_soap(&g.value)) {
                Some(turnpike_soap::fault::soap_aware())
            } else {
                None
            },
        },
    ))
}
