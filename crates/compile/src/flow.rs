//! An API's chain (the global policies, the gateway's own steps, the API's flow) and the
//! consumers with their own flows; shared by every kind of API.

use std::sync::Arc;

use turnpike_config::{ApiConfig, ConfigErrors, ConfigSet, Located};
use turnpike_core::router::HostPattern;
use turnpike_core::{Chain, CompileContext, Step, TemplateScope};
use turnpike_policies::python::Executors;
use turnpike_policies::{compile_flow, Consumers, Direction};
use turnpike_soap::Wsdl;

use crate::base_dir;

/// What an API's chain is compiled against.
#[derive(Clone, Copy)]
pub(crate) struct FlowParts<'a> {
    pub(crate) set: &'a ConfigSet,
    pub(crate) consumers: &'a Arc<Consumers>,
    pub(crate) scope: &'a TemplateScope,
    pub(crate) wsdl: Option<&'a Arc<Wsdl>>,
    pub(crate) path_prefix: &'a str,
    pub(crate) python: &'a Arc<Executors>,
    /// For an API deployed from `openapi:` whose flow places Membrane's `openapiValidator`:
    /// the validator step it stands for.
    pub(crate) validator: Option<&'a turnpike_policies::ValidatorSlot>,
    /// The load's balancers (for `clusterNotification`).
    pub(crate) balancers: &'a Arc<turnpike_policies::balancer::Directory>,
    /// For an API whose top-level flow holds a `balancer`: the state the compile stage built
    /// with the API's target.
    pub(crate) balancer: Option<&'a turnpike_policies::balancer::BalancerSlot>,
}

/// The steps of an API's chain: the global policies, then the gateway's own steps for this
/// kind of API (`built_in`: OpenAPI validation, WSDL publishing), then the API's `flow`.
pub(crate) fn compile_steps(
    located: &Located<ApiConfig>,
    parts: &FlowParts<'_>,
    built_in: Vec<Step>,
    errors: &mut ConfigErrors,
) -> Vec<Step> {
    let mut steps = Vec::new();
    let shared = shared(parts);
    let api_site = format!("api {}", crate::api_name(located));
    for (n, g) in parts.set.globals.iter().enumerate() {
        let site = format!("{api_site}|global {n}");
        let ctx = CompileContext {
            scope: parts.scope,
            in_consumer_flow: false,
            base_dir: base_dir(g),
            path_prefix: "",
            shared: &shared,
            site: &site,
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
        site: &api_site,
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

/// What the compile stage shares with an API's policies: the consumers, the WSDL.
fn shared(parts: &FlowParts<'_>) -> http::Extensions {
    let mut shared = http::Extensions::new();
    shared.insert(Arc::clone(parts.consumers));
    shared.insert(Arc::clone(parts.python));
    shared.insert(turnpike_policies::outbound::Outbound::from_gateway(
        &parts.set.gateway,
    ));
    if let Some(w) = parts.wsdl {
        shared.insert(Arc::clone(w));
    }
    if let Some(v) = parts.validator {
        shared.insert(v.clone());
    }
    shared.insert(Arc::clone(parts.balancers));
    if let Some(b) = parts.balancer {
        shared.insert(b.clone());
    }
    shared
}

/// Compiles the flow at `key` of an API (a route's or an operation's own flow) into steps
/// appended to `steps`, with the API's consumers and the scope in `parts`.
pub(crate) fn compile_sub_flow(
    located: &Located<ApiConfig>,
    parts: &FlowParts<'_>,
    flow: &[turnpike_config::PolicyConfig],
    key: &str,
    steps: &mut Vec<Step>,
    errors: &mut ConfigErrors,
) {
    let shared = shared(parts);
    let site = format!("api {}|{key}", crate::api_name(located));
    let ctx = CompileContext {
        scope: parts.scope,
        in_consumer_flow: false,
        base_dir: base_dir(located),
        path_prefix: parts.path_prefix,
        shared: &shared,
        site: &site,
    };
    compile_flow(flow, located, key, Direction::Both, &ctx, steps, errors);
}

pub(crate) fn compile_consumers(
    set: &ConfigSet,
    python: &Arc<Executors>,
    errors: &mut ConfigErrors,
) -> Consumers {
    let mut none = http::Extensions::new();
    none.insert(Arc::clone(python));
    none.insert(turnpike_policies::outbound::Outbound::from_gateway(
        &set.gateway,
    ));
    let scope = TemplateScope::default();
    Consumers::compile(
        &set.consumers,
        |c, errors| {
            let site = format!("consumer {}", c.value.name);
            let ctx = CompileContext {
                scope: &scope,
                in_consumer_flow: true,
                base_dir: base_dir(c),
                path_prefix: "",
                shared: &none,
                site: &site,
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
