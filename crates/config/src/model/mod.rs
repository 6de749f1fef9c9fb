//! The configuration model: one struct per YAML document kind and per policy, with the user-facing
//! names Membrane users know. Doc comments here become the descriptions in the JSON Schema.
//!
//! One file per concern: `api.rs` (APIs, paths, targets), `gateway.rs` (process settings),
//! `flow.rs` (the basic flow policies), `soap.rs` (SOAP and XML). New policies add their settings in a file of their own
//! and one variant to [`PolicyConfig`].

mod api;
mod flow;
mod gateway;
mod soap;

pub use api::*;
pub use flow::*;
pub use gateway::*;
pub use soap::*;

use schemars::JsonSchema;
use serde::Deserialize;

/// One YAML document: exactly one of these keys at its top level.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Document {
    /// An API: where it listens, which requests it takes, its policy flow and its target.
    Api(ApiConfig),
    /// Policies run before every API's own flow.
    Global(Vec<PolicyConfig>),
    /// Further files or folders to load, relative to this file.
    Include(Vec<String>),
    /// Process-level settings (threads, access log, limits, timeouts).
    Gateway(GatewaySettings),
    /// A SOAP API whose path and target come from a WSDL, which it also publishes at `?wsdl`.
    SoapProxy(SoapProxyConfig),
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
            PolicyConfig::XmlProtection(_) => "xmlProtection",
            PolicyConfig::Validator(_) => "validator",
            PolicyConfig::Wsdl2openapi(_) => "wsdl2openapi",
        }
    }
}
