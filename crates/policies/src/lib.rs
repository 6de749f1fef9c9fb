//! Turnpike's policies. Each module holds one policy: its compiled form (built once when a config
//! is loaded) and its request/response behaviour. [`compile_flow`] turns a configured flow into
//! chain steps, rejecting every setting the policy does not implement.

pub mod access_control;
pub mod auth;
pub mod consumers;
pub mod cors;
mod headers;
mod json_protection;
mod json_quick;
pub mod rate_limit;
mod respond;
pub mod rewriter;
pub mod size_limit;
mod static_body;

use std::path::Path;
use std::sync::Arc;

use turnpike_config::{ConfigErrors, Located, PolicyConfig};
use turnpike_core::chain::Step;
use turnpike_core::{Policy, TemplateScope};
use turnpike_soap::{Wsdl, Wsdl2OpenApi, WsdlValidator, XmlProtection};

pub use consumers::{Consumer, Consumers};
pub use headers::{RemoveHeader, SetHeader};
pub use json_protection::{
    JsonProtection, Limits as JsonLimits, Scanner as JsonScanner, Violation as JsonViolation,
};
pub use respond::Return;
pub use static_body::Static;

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

/// What a policy is compiled against.
pub struct FlowContext<'a> {
    /// What templates may refer to.
    pub scope: &'a TemplateScope,
    /// Every consumer (auth policies identify callers among them).
    pub consumers: &'a Arc<Consumers>,
    /// True while compiling a consumer's own flow (auth policies are not allowed there, and
    /// `rateLimiter` counts per consumer by default).
    pub in_consumer_flow: bool,
    /// The folder of the config file the flow is in (relative file paths start there).
    pub base_dir: &'a Path,
    /// The WSDL of the `soapProxy` the flow belongs to (the default of `validator`).
    pub wsdl: Option<&'a Arc<Wsdl>>,
    /// The API's path prefix (`""` when it matches every path or a template/regex), for
    /// policies that route below it (`wsdl2openapi`).
    pub path_prefix: &'a str,
}

/// Compiles `flow` (found at key `key` below `owner`, e.g. `flow`) into `steps`, collecting
/// every error in `errors`.
pub fn compile_flow<T>(
    flow: &[PolicyConfig],
    owner: &Located<T>,
    key: &str,
    dir: Direction,
    ctx: &FlowContext<'_>,
    steps: &mut Vec<Step>,
    errors: &mut ConfigErrors,
) {
    for (i, p) in flow.iter().enumerate() {
        let at = format!("{key}[{i}].{}", p.name());
        let at = at.trim_start_matches('.');
        let (request, response) = match dir {
            Direction::Both => (true, true),
            Direction::Request => (true, false),
            Direction::Response => (false, true),
        };
        let compiled: Result<Box<dyn Policy>, (String, String)> = match p {
            PolicyConfig::Request(sub) | PolicyConfig::Response(sub) => {
                let sub_dir = if matches!(p, PolicyConfig::Request(_)) {
                    Direction::Request
                } else {
                    Direction::Response
                };
                if dir != Direction::Both && dir != sub_dir {
                    errors.push(owner.error(
                        at,
                        format!(
                            "`{}:` cannot stand inside a `{}:` flow",
                            p.name(),
                            dir_name(dir)
                        ),
                    ));
                } else {
                    compile_flow(sub, owner, at, sub_dir, ctx, steps, errors);
                }
                continue;
            }
            PolicyConfig::Return(c) => {
                if dir == Direction::Response {
                    Err((
                        String::new(),
                        "`return` answers a request: it cannot stand in a `response:` flow".into(),
                    ))
                } else {
                    Return::compile(c, ctx).map(|p| Box::new(p) as Box<dyn Policy>)
                }
            }
            PolicyConfig::Static(c) => Static::compile(c, ctx).map(|p| Box::new(p) as _),
            PolicyConfig::SetHeader(c) => SetHeader::compile(c, ctx).map(|p| Box::new(p) as _),
            PolicyConfig::RemoveHeader(c) => RemoveHeader::compile(c).map(|p| Box::new(p) as _),
            PolicyConfig::BasicAuthentication(_) | PolicyConfig::ApiKey(_) | PolicyConfig::JwtAuth(_)
                if ctx.in_consumer_flow =>
            {
                Err((String::new(), "authentication policies cannot stand in a consumer's flow (it runs after authentication)".into()))
            }
            PolicyConfig::BasicAuthentication(c) => auth::basic::BasicAuth::compile(c, ctx).map(|p| Box::new(p) as _),
            PolicyConfig::ApiKey(c) => auth::api_key::ApiKey::compile(c, ctx).map(|p| Box::new(p) as _),
            PolicyConfig::JwtAuth(c) => auth::jwt::JwtAuth::compile(c, ctx).map(|p| Box::new(p) as _),
            PolicyConfig::RateLimiter(c) => rate_limit::RateLimiter::compile(c, ctx).map(|p| Box::new(p) as _),
            PolicyConfig::Cors(c) => cors::Cors::compile(c).map(|p| Box::new(p) as _),
            PolicyConfig::AccessControl(c) => access_control::AccessControl::compile(c).map(|p| Box::new(p) as _),
            PolicyConfig::Rewriter(c) => rewriter::Rewriter::compile(c).map(|p| Box::new(p) as _),
            PolicyConfig::RequestSizeLimit(c) => size_limit::RequestSizeLimit::compile(c).map(|p| Box::new(p) as _),
            PolicyConfig::JsonProtection(c) => JsonProtection::compile(c).map(|p| Box::new(p) as _),
            PolicyConfig::XmlProtection(c) => {
                if dir == Direction::Response {
                    Err(err(
                        "",
                        "`xmlProtection` checks requests: it cannot stand in a `response:` flow",
                    ))
                } else {
                    XmlProtection::compile(c).map(|p| Box::new(p) as _)
                }
            }
            PolicyConfig::Validator(c) => {
                compile_validator(c, owner, ctx).map(|p| Box::new(p) as _)
            }
            PolicyConfig::Wsdl2openapi(c) => {
                if dir != Direction::Both {
                    Err(err(
                        "",
                        "`wsdl2openapi` converts both ways: put it in the top-level `flow`",
                    ))
                } else {
                    load_wsdl(&c.wsdl, owner)
                        .map_err(|m| err("wsdl", m))
                        .and_then(|w| Wsdl2OpenApi::compile(c, w, ctx.path_prefix))
                        .map(|p| Box::new(p) as _)
                }
            }
        };
        match compiled {
            Ok(policy) => steps.push(Step {
                policy,
                request,
                response,
            }),
            Err((sub, msg)) => {
                let key = if sub.is_empty() {
                    at.to_owned()
                } else {
                    format!("{at}.{sub}")
                };
                errors.push(owner.error(&key, msg));
            }
        }
    }
}

/// The folder of the file `owner` was read from: relative WSDL locations resolve against it.
fn base_dir<T>(owner: &Located<T>) -> std::path::PathBuf {
    owner
        .origin
        .file
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default()
}

/// Loads a WSDL named in a policy (`key` is the setting, for errors).
pub fn load_wsdl<T>(location: &str, owner: &Located<T>) -> Result<Arc<Wsdl>, String> {
    let loc = turnpike_soap::Location::from_config(location, &base_dir(owner));
    Wsdl::load(&loc).map(Arc::new)
}

fn compile_validator<T>(
    c: &turnpike_config::ValidatorPolicy,
    owner: &Located<T>,
    ctx: &FlowContext<'_>,
) -> Result<WsdlValidator, CompileError> {
    let wsdl = match (&c.wsdl, ctx.wsdl) {
        (Some(w), _) => load_wsdl(w, owner).map_err(|m| err("wsdl", m))?,
        (None, Some(w)) => Arc::clone(w),
        (None, None) => {
            return Err(err(
                "",
                "`validator` needs `wsdl:` (only inside a `soapProxy` does it default to the proxy's WSDL)",
            ))
        }
    };
    WsdlValidator::new(wsdl, c.service_name.as_deref()).map_err(|m| err("serviceName", m))
}

fn dir_name(d: Direction) -> &'static str {
    match d {
        Direction::Both => "flow",
        Direction::Request => "request",
        Direction::Response => "response",
    }
}

/// True when the flow answers every request itself (an unconditional `return` in the request
/// direction), so that an API without a target is still complete.
pub fn answers_itself(flow: &[PolicyConfig]) -> bool {
    flow.iter().any(|p| match p {
        PolicyConfig::Return(_) => true,
        PolicyConfig::Request(sub) => answers_itself(sub),
        _ => false,
    })
}

/// A compile error: the key below the policy (empty for the policy itself) and the message.
pub(crate) type CompileError = (String, String);

pub(crate) fn err(key: &str, msg: impl Into<String>) -> CompileError {
    (key.to_owned(), msg.into())
}

#[cfg(test)]
pub(crate) mod testutil {
    use std::sync::{Arc, OnceLock};

    use turnpike_core::TemplateScope;

    use crate::{Consumers, FlowContext};

    /// A compile context without consumers, for unit tests.
    pub fn ctx(scope: &TemplateScope) -> FlowContext<'_> {
        static NONE: OnceLock<Arc<Consumers>> = OnceLock::new();
        FlowContext {
            scope,
            consumers: NONE.get_or_init(|| Arc::new(Consumers::default())),
            in_consumer_flow: false,
            base_dir: std::path::Path::new("."),
            wsdl: None,
            path_prefix: "",
        }
    }

    use std::net::SocketAddr;

    use turnpike_core::exchange::PathParams;
    use turnpike_core::{Body, Exchange};

    pub fn exchange(method: &str, uri: &str, headers: &[(&str, &str)], body: &str) -> Exchange {
        let mut b = http::Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let (parts, _) = b.body(()).unwrap().into_parts();
        let addr: SocketAddr = "198.51.100.7:4000".parse().unwrap();
        Exchange::new(parts, Body::full(body.to_owned()), addr, PathParams::new())
    }
}
