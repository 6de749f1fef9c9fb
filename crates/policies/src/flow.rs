//! Compiles a configured flow into chain steps: each policy through its registry entry, the
//! `request:` and `response:` sub-flows that restrict the phases of what they hold, Membrane's
//! `abort:` flow (response policies for the gateway's own problems), the
//! `if:`/`choose:` conditions that hold flows of their own, and the rules of where a policy may
//! stand.

use turnpike_config::{ConfigErrors, Located, PolicyConfig};
use turnpike_core::chain::Step;
use turnpike_core::settings::parse_all;
use turnpike_core::{Chain, CompileContext, PolicyKind};

use crate::registry;
use crate::settings_errors::{join, push_errors};

/// In which phases a policy of a flow runs: the top-level flow runs policies both ways (as
/// Membrane does); `request:` and `response:` sub-flows restrict them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Request and response.
    Both,
    /// Request only.
    Request,
    /// Response only.
    Response,
}

impl Direction {
    fn name(self) -> &'static str {
        match self {
            Direction::Both => "flow",
            Direction::Request => "request",
            Direction::Response => "response",
        }
    }

    /// The phases a policy acting in `kind`'s phases runs in here.
    fn phases(self, kind: &PolicyKind) -> (bool, bool) {
        match self {
            Direction::Both => (kind.phases.request, kind.phases.response),
            Direction::Request => (kind.phases.request, false),
            Direction::Response => (false, kind.phases.response),
        }
    }
}

/// The step Membrane's `openapiValidator: {}` stands for in the flow of an API deployed from
/// `openapi:`. The compile stage puts it in [`CompileContext::shared`]; compiling the flow puts
/// the step where the entry stands (once), so that the validation runs after the policies before
/// it (the authentication that `validateSecurity` checks).
#[derive(Clone, Default)]
pub struct ValidatorSlot(pub std::sync::Arc<std::sync::Mutex<Option<Step>>>);

impl ValidatorSlot {
    /// Runs at load time: a slot holding `step`.
    pub fn new(step: Step) -> Self {
        ValidatorSlot(std::sync::Arc::new(std::sync::Mutex::new(Some(step))))
    }

    /// Runs at load time: takes the step out (`None` when it was taken already).
    pub fn take(&self) -> Option<Step> {
        self.0.lock().ok().and_then(|mut s| s.take())
    }
}

/// Compiles `flow` (found at key `key` below `owner`, e.g. `flow`) into `steps`, collecting
/// every error in `errors`.
pub fn compile_flow<T>(
    flow: &[PolicyConfig],
    owner: &Located<T>,
    key: &str,
    dir: Direction,
    ctx: &CompileContext<'_>,
    steps: &mut Vec<Step>,
    errors: &mut ConfigErrors,
) {
    for (i, p) in flow.iter().enumerate() {
        let at = format!("{key}[{i}].{}", p.name);
        let at = at.trim_start_matches('.');
        if p.name == "webSocket" || p.name == "wsdlRewriter" {
            // Settings of the API itself (where upgrades go, the address its published WSDL
            // shows), compiled by the API compiler.
            if dir != Direction::Both {
                errors.push(owner.error_at_key(
                    at,
                    format!(
                        "`{}` is a setting of the API: put it in the top-level `flow`",
                        p.name
                    ),
                ));
            }
            continue;
        }
        if p.name == "abort" {
            compile_abort(p, owner, at, dir, ctx, steps, errors);
            continue;
        }
        if let Some(sub_dir) = sub_flow(&p.name) {
            if dir != Direction::Both {
                errors.push(owner.error_at_key(
                    at,
                    format!("`{}:` cannot stand inside a `{}:` flow", p.name, dir.name()),
                ));
                continue;
            }
            match parse_all::<Vec<PolicyConfig>>(p.settings.clone()) {
                Ok(sub) => compile_flow(&sub, owner, at, sub_dir, ctx, steps, errors),
                Err(es) => {
                    for e in es {
                        errors.push(owner.error(&join(at, &e.key), e.message));
                    }
                }
            }
            continue;
        }
        if p.name == "for" {
            let nested = |flow: &[PolicyConfig], key: &str, errors: &mut ConfigErrors| {
                let mut inner = Vec::new();
                compile_flow(
                    flow,
                    owner,
                    key,
                    Direction::Request,
                    ctx,
                    &mut inner,
                    errors,
                );
                Chain::new(inner)
            };
            let in_response = dir == Direction::Response;
            if let Some(step) =
                crate::for_loop::compile_step(p, owner, at, in_response, errors, nested)
            {
                steps.push(step);
            }
            continue;
        }
        if p.name == "if" || p.name == "choose" {
            let nested = |flow: &[PolicyConfig], key: &str, errors: &mut ConfigErrors| {
                let mut inner = Vec::new();
                compile_flow(flow, owner, key, dir, ctx, &mut inner, errors);
                Chain::new(inner)
            };
            if let Some(c) = crate::condition::compile(p, owner, at, ctx, errors, nested) {
                let (request, response) = c.phases();
                steps.push(Step {
                    policy: Box::new(c),
                    request,
                    response,
                });
            }
            continue;
        }
        if p.name == "openapiValidator" {
            if let Some(slot) = ctx.get::<ValidatorSlot>() {
                if dir != Direction::Both {
                    errors.push(owner.error_at_key(
                        at,
                        "`openapiValidator` validates requests and responses: put it in the top-level `flow`",
                    ));
                } else if !p.settings.is_null()
                    && p.settings.as_object().is_none_or(|m| !m.is_empty())
                {
                    errors.push(owner.error_at_key(
                        at,
                        "`openapiValidator` takes no settings here (`{}`): the API's `openapi` entries set the validation",
                    ));
                } else {
                    match slot.take() {
                        Some(step) => steps.push(step),
                        None => errors.push(owner.error_at_key(
                            at,
                            "`openapiValidator` may stand only once in an API's flow",
                        )),
                    }
                }
                continue;
            }
        }
        let Some(kind) = registry::find(&p.name) else {
            let message = match crate::membrane::alternative(&p.name) {
                Some(instead) => format!(
                    "Membrane's `{}` is not supported: {instead} (see docs/membrane.md)",
                    p.name
                ),
                None => format!(
                    "unknown policy `{}`, expected one of {}",
                    p.name,
                    registry::names()
                ),
            };
            errors.push(owner.error_at_key(at, message));
            continue;
        };
        if let Some(m) = misplaced(kind, dir, ctx) {
            errors.push(owner.error_at_key(at, m));
            continue;
        }
        let site = format!("{}|{at}", ctx.site);
        let step_ctx = CompileContext {
            site: &site,
            ..*ctx
        };
        match (kind.compile)(p.settings.clone(), &step_ctx) {
            Ok(policy) => {
                if kind.name == "python" {
                    // Where the policy is written, for errors when its executor loads it.
                    if let Some(x) = ctx.get::<std::sync::Arc<crate::python::Executors>>() {
                        x.place(&site, owner.origin.at(&owner.join(at)));
                    }
                }
                let (request, response) = dir.phases(kind);
                steps.push(Step {
                    policy,
                    request,
                    response,
                });
            }
            Err(es) => push_errors(owner, at, es, errors),
        }
    }
}

/// Membrane's `abort:` flow: its policies, in the response direction, in one step that runs
/// them only on the gateway's own problems ([`crate::abort_flow`]).
fn compile_abort<T>(
    p: &PolicyConfig,
    owner: &Located<T>,
    at: &str,
    dir: Direction,
    ctx: &CompileContext<'_>,
    steps: &mut Vec<Step>,
    errors: &mut ConfigErrors,
) {
    if dir != Direction::Both {
        errors.push(owner.error_at_key(
            at,
            format!("`abort:` cannot stand inside a `{}:` flow", dir.name()),
        ));
        return;
    }
    match parse_all::<Vec<PolicyConfig>>(p.settings.clone()) {
        Ok(sub) => {
            let mut inner = Vec::new();
            compile_flow(
                &sub,
                owner,
                at,
                Direction::Response,
                ctx,
                &mut inner,
                errors,
            );
            steps.push(Step {
                policy: Box::new(crate::abort_flow::AbortFlow::new(Chain::new(inner))),
                request: false,
                response: true,
            });
        }
        Err(es) => {
            for e in es {
                errors.push(owner.error(&join(at, &e.key), e.message));
            }
        }
    }
}

/// The direction a structural entry (`request:`, `response:`) restricts its policies to.
fn sub_flow(name: &str) -> Option<Direction> {
    match name {
        "request" => Some(Direction::Request),
        "response" => Some(Direction::Response),
        _ => None,
    }
}

/// Why `kind` cannot stand here, if it cannot.
fn misplaced(kind: &PolicyKind, dir: Direction, ctx: &CompileContext<'_>) -> Option<String> {
    let name = kind.name;
    if dir == Direction::Response && !kind.phases.response {
        return Some(format!(
            "`{name}` acts on requests only: it cannot stand in a `response:` flow"
        ));
    }
    if dir == Direction::Request && !kind.phases.request {
        return Some(format!(
            "`{name}` acts on responses only: it cannot stand in a `request:` flow"
        ));
    }
    if kind.top_level_only && dir != Direction::Both {
        return Some(format!(
            "`{name}` converts both ways: put it in the top-level `flow`"
        ));
    }
    if kind.authenticates && ctx.in_consumer_flow {
        return Some(
            "authentication policies cannot stand in a consumer's flow (it runs after authentication)"
                .into(),
        );
    }
    None
}

/// True when the flow has a policy that checks SOAP messages (in any phase), so that its API
/// answers SOAP requests with SOAP faults. A `validator` counts only in its WSDL mode (not with
/// `schema` or `jsonSchema`).
pub fn checks_soap(flow: &[PolicyConfig]) -> bool {
    flow.iter().any(|p| match sub_flow(&p.name) {
        Some(_) => {
            parse_all::<Vec<PolicyConfig>>(p.settings.clone()).is_ok_and(|sub| checks_soap(&sub))
        }
        None => {
            registry::find(&p.name).is_some_and(|k| k.soap)
                && (p.name != "validator" || turnpike_soap::validator::checks_soap(&p.settings))
        }
    })
}

/// The settings of every policy named `name` anywhere in the flow (in `request:`/`response:`
/// flows and in the branches of conditions too).
pub fn settings_of(flow: &[PolicyConfig], name: &str) -> Vec<serde_json::Value> {
    fn walk(v: &serde_json::Value, name: &str, out: &mut Vec<serde_json::Value>) {
        match v {
            serde_json::Value::Object(o) => {
                for (k, v) in o {
                    if k == name {
                        out.push(v.clone());
                    } else {
                        walk(v, name, out);
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, name, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    for p in flow {
        if p.name == name {
            out.push(p.settings.clone());
        } else {
            walk(&p.settings, name, &mut out);
        }
    }
    out
}

/// True when a policy named `name` stands anywhere in the flow.
pub fn mentions(flow: &[PolicyConfig], name: &str) -> bool {
    !settings_of(flow, name).is_empty()
}

/// True when the flow answers every request itself (a policy that always answers, in the
/// request direction), so that an API without a target is still complete.
pub fn answers_itself(flow: &[PolicyConfig]) -> bool {
    flow.iter().any(|p| match p.name.as_str() {
        "request" => {
            parse_all::<Vec<PolicyConfig>>(p.settings.clone()).is_ok_and(|sub| answers_itself(&sub))
        }
        "if" => {
            let branch = |k: &str| {
                p.settings
                    .get(k)
                    .cloned()
                    .and_then(|f| parse_all::<Vec<PolicyConfig>>(f).ok())
                    .is_some_and(|f| answers_itself(&f))
            };
            branch("flow") && branch("else")
        }
        "choose" => p.settings.as_array().is_some_and(|entries| {
            entries.iter().any(|e| e.get("otherwise").is_some())
                && entries.iter().all(|e| {
                    e.get("flow")
                        .or_else(|| e.get("otherwise"))
                        .or_else(|| e.get("case").and_then(|c| c.get("flow")))
                        .cloned()
                        .and_then(|f| parse_all::<Vec<PolicyConfig>>(f).ok())
                        .is_some_and(|f| answers_itself(&f))
                })
        }),
        name => registry::find(name).is_some_and(|k| k.answers),
    })
}
