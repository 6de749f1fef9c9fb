//! The configuration model: one struct per YAML document kind and per policy, with the user-facing
//! names Membrane users know. Doc comments here become the descriptions in the JSON Schema.
//!
//! One file per concern: `api.rs` (APIs, paths, targets), `gateway.rs` (process settings),
//! `flow.rs` (the basic flow policies), `auth.rs` (authentication, consumers), `traffic.rs`
//! (rate limits, CORS, IP rules, rewriting), `tls.rs` (TLS settings), `openapi.rs`
//! (`api.openapi`), `json.rs` (`jsonProtection`, expression languages), `soap.rs` (SOAP and
//! XML). New policies add their settings in a file of their own
//! and one variant to [`PolicyConfig`].

mod api;
mod auth;
mod flow;
mod gateway;
mod json;
mod openapi;
mod soap;
mod tls;
mod traffic;

pub use api::*;
pub use auth::*;
pub use flow::*;
pub use gateway::*;
pub use json::*;
pub use openapi::*;
pub use soap::*;
pub use tls::*;
pub use traffic::*;

use schemars::JsonSchema;
use serde::Deserialize;

/// One YAML document: exactly one of these keys at its top level.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Document {
    /// An API: where it listens, which requests it takes, its policy flow and its target.
    Api(Box<ApiConfig>),
    /// Policies run before every API's own flow.
    Global(Vec<PolicyConfig>),
    /// Further files or folders to load, relative to this file.
    Include(Vec<String>),
    /// Process-level settings (threads, access log, limits, timeouts).
    Gateway(GatewaySettings),
    /// A consumer: credentials, groups and its own policies.
    Consumer(ConsumerConfig),
    /// A SOAP API whose path and target come from a WSDL, which it also publishes at `?wsdl`.
    SoapProxy(Box<SoapProxyConfig>),
}

/// One policy of a flow: a map with exactly one key, the policy's name.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PolicyConfig {
    /// Answer the request without a backend.
    Return(ReturnPolicy),
    /// Set the response body (used with `return`, or in the response flow).
    Static(StaticPolicy),
    /// Policies run only on the request.
    Request(Vec<PolicyConfig>),
    /// Policies run only on the response.
    Response(Vec<PolicyConfig>),
    /// Set a header (request or response, depending on where the policy stands).
    SetHeader(SetHeaderPolicy),
    /// Remove a header (request or response, depending on where the policy stands).
    RemoveHeader(RemoveHeaderPolicy),
    /// HTTP Basic authentication.
    BasicAuthentication(BasicAuthPolicy),
    /// API key authentication.
    ApiKey(ApiKeyPolicy),
    /// JWT bearer token authentication.
    JwtAuth(JwtAuthPolicy),
    /// Rate limiting.
    RateLimiter(RateLimiterPolicy),
    /// CORS (answers preflight requests itself).
    Cors(CorsPolicy),
    /// IP allow and deny lists.
    AccessControl(AccessControlPolicy),
    /// Regex path rewriting.
    Rewriter(RewriterPolicy),
    /// Request body size limit.
    RequestSizeLimit(RequestSizeLimitPolicy),
    /// Reject JSON request bodies that are invalid or exceed size, depth and count limits.
    JsonProtection(JsonProtectionPolicy),
    /// Check XML bodies against size, depth and name limits; never expand entities.
    XmlProtection(XmlProtectionPolicy),
    /// Validate messages (SOAP requests and responses against a WSDL).
    Validator(ValidatorPolicy),
    /// Offer a WSDL's operations as a REST/JSON API and talk SOAP to the target.
    Wsdl2openapi(Wsdl2OpenApiPolicy),
}

impl PolicyConfig {
    /// The policy's name as written in YAML.
    pub fn name(&self) -> &'static str {
        match self {
            PolicyConfig::Return(_) => "return",
            PolicyConfig::Static(_) => "static",
            PolicyConfig::Request(_) => "request",
            PolicyConfig::Response(_) => "response",
            PolicyConfig::SetHeader(_) => "setHeader",
            PolicyConfig::RemoveHeader(_) => "removeHeader",
            PolicyConfig::BasicAuthentication(_) => "basicAuthentication",
            PolicyConfig::ApiKey(_) => "apiKey",
            PolicyConfig::JwtAuth(_) => "jwtAuth",
            PolicyConfig::RateLimiter(_) => "rateLimiter",
            PolicyConfig::Cors(_) => "cors",
            PolicyConfig::AccessControl(_) => "accessControl",
            PolicyConfig::Rewriter(_) => "rewriter",
            PolicyConfig::RequestSizeLimit(_) => "requestSizeLimit",
            PolicyConfig::JsonProtection(_) => "jsonProtection",
            PolicyConfig::XmlProtection(_) => "xmlProtection",
            PolicyConfig::Validator(_) => "validator",
            PolicyConfig::Wsdl2openapi(_) => "wsdl2openapi",
        }
    }
}
