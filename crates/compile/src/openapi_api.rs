//! APIs deployed from OpenAPI documents: one route per spec (its base path), each with the
//! spec's validator in front of the API's flow.

use std::sync::Arc;

use turnpike_config::{ApiConfig, ConfigErrors, ConfigSet, Located, OpenApiSource, TargetConfig};
use turnpike_core::router::PathSpec;
use turnpike_core::{Chain, RouteSpec, Step, TemplateScope};
use turnpike_openapi::{load_spec, OpenApiValidator, Source, Spec};
use turnpike_policies::Consumers;
use turnpike_snapshot::{Api, Target};

use crate::flow::{api_hosts, compile_steps, FlowParts};
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
            let (requests, responses) = (src.validate_requests.0, src.validate_responses.0);
            // Always present: it routes to the spec's operations (404/405) even without validation.
            let built_in = vec![Step {
                policy: Box::new(OpenApiValidator::new(spec.clone(), requests, responses)),
                request: true,
                response: responses,
            }];
            let mut steps = compile_steps(
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
                    target,
                    errors: None,
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
    compile_target(
        &TargetConfig {
            url: Some(origin.to_owned()),
            ..TargetConfig::default()
        },
        std::path::Path::new("."),
        &Upstreams::new(),
        &spec.title,
        &format!("openapi server {url}"),
    )
    .map_err(|(_, m)| {
        format!("the spec's server `{url}` cannot be the target ({m}); add a `target:`")
    })
}
