//! APIs deployed from OpenAPI documents: one route per spec (its base path), each with the
//! spec's validator in front of the API's flow.

use std::sync::Arc;

use turnpike_config::{
    ApiConfig, ConfigErrors, ConfigSet, Located, OpenApiSource, TargetConfig, YesNoOpenApi,
};
use turnpike_core::router::PathSpec;
use turnpike_core::{Chain, RouteSpec, Step, TemplateScope};
use turnpike_openapi::{load_spec_at, OpenApiValidator, Source, Spec};
use turnpike_policies::operations::OperationFlows;
use turnpike_policies::python::Executors;
use turnpike_policies::{Consumers, ValidatorSlot};
use turnpike_snapshot::{Api, Target};

use crate::flow::{api_hosts, compile_steps, compile_sub_flow, FlowParts};
use crate::target::Upstreams;
use crate::{api_name, base_dir, compile_target, target_key, CompiledRoute};

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
pub(crate) fn compile_openapi_api(
    located: &Located<ApiConfig>,
    set: &ConfigSet,
    consumers: &Arc<Consumers>,
    python: &Arc<Executors>,
    upstreams: &Upstreams,
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
    let test = crate::api::route_test(located, errors);
    let target = match &api.target {
        Some(t) => match compile_target(
            t,
            base_dir(located),
            upstreams,
            &api_name(located),
            &target_key(located),
            Some(&TemplateScope::default()),
        ) {
            Ok(t) => Some(t),
            Err((key, m)) => {
                errors.push(located.error(format!("target.{key}").trim_end_matches('.'), m));
                None
            }
        },
        None => None,
    };
    if !api.routes.is_empty() {
        errors.push(located.error(
            "routes",
            "an API deployed from `openapi` takes its routes from the spec; use `operations` for their flows",
        ));
    }
    let mut out = Vec::new();
    let mut used = std::collections::BTreeSet::new();
    for (i, src) in api.openapi.iter().enumerate() {
        let key = format!("openapi[{i}]");
        let (base_path, published) = match rewrite(src.rewrite.as_ref()) {
            Ok(r) => r,
            Err((k, m)) => {
                errors.push(located.error(&format!("{key}.rewrite.{k}"), m));
                continue;
            }
        };
        for source in spec_sources(located, i, src, errors) {
            let spec = match load_spec_at(&source, base_path.as_deref()) {
                Ok(mut s) => {
                    s.published_url = published
                        .as_ref()
                        .map(|origin| format!("{origin}{}", s.base_path));
                    Arc::new(s)
                }
                Err(e) => {
                    errors.push(located.error(&key, format!("invalid OpenAPI spec: {e}")));
                    continue;
                }
            };
            let target = match &target {
                Some(t) => Some(t.clone()),
                // A mock answers every operation itself.
                None if src.mock.0 => None,
                None => match server_target(&spec) {
                    Ok(t) => Some(t),
                    Err(m) => {
                        errors.push(located.error(&key, m));
                        continue;
                    }
                },
            };
            let scope = TemplateScope::default();
            let security = match src.validate_security {
                YesNoOpenApi::Yes => true,
                YesNoOpenApi::No => false,
                YesNoOpenApi::AsInOpenApi => spec.membrane_security.unwrap_or(false),
            };
            if security {
                if let Err(e) = spec.check_security() {
                    errors.push(located.error(
                        &format!("{key}.validateSecurity"),
                        format!("the spec's security cannot be checked: {e}"),
                    ));
                    continue;
                }
            }
            // Checking the security validates requests too (as Membrane does).
            let (requests, responses) = (
                src.validate_requests.0 || security,
                src.validate_responses.0,
            );
            let parts = FlowParts {
                set,
                consumers,
                scope: &scope,
                wsdl: None,
                path_prefix: "",
                python,
                validator: None,
                balancers: &upstreams.balancers,
                balancer: None,
            };
            let operations = operation_flows(located, &spec, &parts, &mut used, errors);
            // Always present: it routes to the spec's operations (404/405) even without validation.
            let mut validator = OpenApiValidator::new(spec.clone(), requests, responses);
            if operations.is_some() {
                validator = validator.with_operations();
            }
            if src.validation_details.is_some_and(|f| !f.0) {
                validator = validator.without_details();
            }
            if security {
                validator = validator.with_security();
            }
            let step = Step {
                policy: Box::new(validator),
                request: true,
                response: responses,
            };
            // Membrane's `openapiValidator: {}` in the flow places the validation there (after
            // the authentication `validateSecurity` checks); otherwise it runs first.
            let placed = api.flow.iter().any(|p| p.name == "openapiValidator");
            let mut steps = if placed {
                let slot = ValidatorSlot::new(step);
                let with_slot = FlowParts {
                    validator: Some(&slot),
                    ..parts
                };
                compile_steps(located, &with_slot, Vec::new(), errors)
            } else {
                compile_steps(located, &parts, vec![step], errors)
            };
            if let Some(flows) = operations {
                let (request, response) = flows.phases();
                steps.push(Step {
                    policy: Box::new(flows),
                    request,
                    response,
                });
            }
            if src.mock.0 {
                // Last: the API's own flow (auth, limits) runs before the mock answers.
                steps.push(Step {
                    policy: Box::new(turnpike_openapi::OpenApiMock::new(spec.clone())),
                    request: true,
                    response: false,
                });
            }
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
                    stats: turnpike_telemetry::stats::api(&name),
                    name,
                    chain: Chain::new(steps),
                    backend: target.map_or(
                        turnpike_snapshot::Backend::None,
                        turnpike_snapshot::Backend::Target,
                    ),
                    websocket_target: None,
                    errors: None,
                    test: test.clone(),
                },
                Some(spec),
            ));
        }
    }
    for name in api.operations.keys() {
        if !used.contains(name.as_str()) {
            errors.push(located.error_at_key(
                &format!("operations.{name}"),
                format!(
                    "no operation of the spec is `{name}` (give an operationId, or a method and the path as the spec writes it: `GET /items/{{id}}`)"
                ),
            ));
        }
    }
    if errors.0.len() > before {
        return Vec::new();
    }
    out
}

/// The flows of `api.operations` that name operations of `spec` (by `operationId`, or by
/// `METHOD /path` with the path as the spec writes it, with or without the base path); the names
/// found are added to `used`. `None` when no operation of this spec has a flow.
fn operation_flows(
    located: &Located<ApiConfig>,
    spec: &Spec,
    parts: &FlowParts<'_>,
    used: &mut std::collections::BTreeSet<String>,
    errors: &mut ConfigErrors,
) -> Option<OperationFlows> {
    let configured = &located.value.operations;
    if configured.is_empty() {
        return None;
    }
    let mut any = false;
    let mut flows = Vec::with_capacity(spec.paths.len());
    for item in &spec.paths {
        let mut ops = Vec::with_capacity(item.ops.len());
        for op in &item.ops {
            let by_path = format!("{} {}", op.method, item.template);
            let by_full_path = format!("{} {}{}", op.method, spec.base_path, item.template);
            let found = configured.iter().filter(|(name, _)| {
                op.id.as_deref() == Some(name.as_str())
                    || name.eq_ignore_ascii_case(&by_path)
                    || name.eq_ignore_ascii_case(&by_full_path)
            });
            let mut steps = Vec::new();
            let mut named = false;
            for (name, cfg) in found {
                used.insert(name.clone());
                named = true;
                let scope = TemplateScope {
                    path_params: template_params(&item.template),
                    api_name: parts.scope.api_name.clone(),
                };
                let op_parts = FlowParts {
                    scope: &scope,
                    ..*parts
                };
                compile_sub_flow(
                    located,
                    &op_parts,
                    &cfg.flow,
                    &format!("operations.{name}.flow"),
                    &mut steps,
                    errors,
                );
            }
            any |= named;
            ops.push(named.then(|| Arc::new(Chain::new(steps))));
        }
        flows.push(ops);
    }
    any.then(|| OperationFlows::new(flows))
}

/// The names of the parameters of a spec's path template (`/items/{id}` → `id`).
fn template_params(template: &str) -> Vec<String> {
    template
        .split('{')
        .skip(1)
        .filter_map(|p| p.split_once('}').map(|(name, _)| name.to_owned()))
        .collect()
}

/// Membrane's `rewrite`: the base path the operations are served under, and the origin
/// (`scheme://host[:port]`) the published document's `servers` URL names. The error names the
/// key below `rewrite`.
fn rewrite(
    r: Option<&turnpike_config::OpenApiRewrite>,
) -> Result<(Option<String>, Option<String>), (String, String)> {
    let Some(r) = r else {
        return Ok((None, None));
    };
    let fail = |k: &str, m: &str| (k.to_owned(), m.to_owned());
    if let Some(p) = &r.base_path {
        if !p.starts_with('/') || p.contains(['?', '#', '{']) {
            return Err(fail(
                "basePath",
                "a path starting with `/`, without a query or templates",
            ));
        }
    }
    let published = match (&r.host, r.port, r.protocol.as_deref()) {
        (None, None, None) => None,
        (None, _, _) => {
            return Err(fail(
                "host",
                "needed with `port` or `protocol`: the published address names a host",
            ))
        }
        (Some(host), port, protocol) => {
            let scheme = match protocol {
                Some("http") => "http",
                Some("https") => "https",
                None if port == Some(443) => "https",
                None => "http",
                Some(_) => return Err(fail("protocol", "`http` or `https`")),
            };
            let default = if scheme == "https" { 443 } else { 80 };
            let authority = match port {
                Some(p) if p != default => format!("{host}:{p}"),
                _ => host.clone(),
            };
            if authority.parse::<http::uri::Authority>().is_err() {
                return Err(fail("host", "not a host name"));
            }
            Some(format!("{scheme}://{authority}"))
        }
    };
    Ok((r.base_path.clone(), published))
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
    compile_target(
        &TargetConfig {
            url: Some(origin.to_owned()),
            ..TargetConfig::default()
        },
        std::path::Path::new("."),
        &Upstreams::new(),
        &spec.title,
        &format!("openapi server {url}"),
        Some(&TemplateScope::default()),
    )
    .map_err(|(_, m)| {
        format!("the spec's server `{url}` cannot be the target ({m}); add a `target:`")
    })
}
