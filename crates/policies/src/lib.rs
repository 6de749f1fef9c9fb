//! Turnpike's policies. Each module holds one policy: its settings type, its name and the
//! phases it acts in ([`turnpike_core::PolicyFactory`]), its compile function and its
//! request/response behaviour. [`registry`] lists every policy (the SOAP ones live in
//! `turnpike-soap`); [`flow`] compiles a configured flow into chain steps with it, rejecting
//! every setting a policy does not implement.

mod abort_flow;
pub mod access_control;
pub mod access_log;
pub mod admin_console;
pub mod auth;
pub mod balancer;
pub mod beautifier;
pub mod call;
pub mod cluster_notification;
pub mod compress;
pub mod condition;
pub mod consumers;
pub mod correlation_id;
pub mod cors;
pub mod counter;
pub mod delay;
pub mod destination;
pub mod flow;
pub mod for_loop;
pub mod form_validation;
pub mod graphql_protection;
pub mod greaser;
pub mod header_filter;
mod headers;
mod json_protection;
pub mod json_rpc_protection;
pub mod jwt_sign;
pub mod language;
pub mod limit;
pub mod llm_gateway;
pub mod log;
mod loop_item;
pub mod mcp_protection;
pub mod membrane;
mod nested;
pub mod oauth2;
pub mod open_telemetry;
pub mod operations;
mod ordered_json;
pub mod outbound;
pub mod padding_header;
mod pretty;
pub mod prometheus;
pub mod python;
pub mod rate_limit;
pub mod registry;
pub mod replace;
mod respond;
pub mod rewriter;
pub mod set_body;
pub mod set_cookies;
pub mod set_property;
mod settings_errors;
pub mod shadowing;
pub mod size_limit;
pub mod soap_body;
pub mod sql_injection_protection;
pub mod sse_demo_stream;
mod static_body;
pub mod statistics_csv;
pub mod template;
pub mod throttle;
pub mod web_server;
pub mod xml_json;

use turnpike_core::CompileError;

pub use consumers::{Consumer, Consumers};
pub use flow::{answers_itself, checks_soap, compile_flow, Direction, ValidatorSlot};
pub use headers::{RemoveHeader, SetHeader};
pub use json_protection::{
    JsonProtection, Limits as JsonLimits, Scanner as JsonScanner, Violation as JsonViolation,
};
pub use respond::Return;
pub use static_body::Static;

/// The quick pass of `jsonProtection` over a whole body: `Some(tokens)` when it accepts it
/// (exposed for the fuzzer, which checks that the full scanner agrees).
#[doc(hidden)]
pub fn json_quick_pass(body: &[u8], limits: &JsonLimits) -> Option<u64> {
    json_protection::quick_pass(body, limits)
}

/// A compile error about `key` (below the policy's settings; `""` for the policy itself).
pub(crate) fn err(key: &str, msg: impl Into<String>) -> CompileError {
    CompileError::new(key, msg)
}

#[cfg(test)]
pub(crate) mod testutil {
    use std::sync::OnceLock;

    use turnpike_core::{CompileContext, TemplateScope};

    /// A compile context without path parameters or consumers, for unit tests.
    pub fn plain() -> CompileContext<'static> {
        CompileContext::standalone()
    }

    /// A compile context without consumers, for unit tests.
    pub fn ctx(scope: &TemplateScope) -> CompileContext<'_> {
        static NONE: OnceLock<http::Extensions> = OnceLock::new();
        CompileContext {
            scope,
            in_consumer_flow: false,
            base_dir: std::path::Path::new("."),
            path_prefix: "",
            shared: NONE.get_or_init(http::Extensions::new),
            site: "",
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
