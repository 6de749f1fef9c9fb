//! The configuration model: one struct per YAML document kind and per policy, with the user-facing
//! names Membrane users know. Doc comments here become the descriptions in the JSON Schema.
//!
//! One file per concern: `api.rs` (APIs, paths, targets), `gateway.rs` (process settings),
//! `flow.rs` (the basic flow policies), `openapi.rs` (`api.openapi`), `json.rs` (`jsonProtection`,
//! expression languages). New policies add their settings in a file of their own
//! and one variant to [`PolicyConfig`].

mod api;
mod flow;
mod gateway;
mod json;
mod openapi;

pub use api::*;
pub use flow::*;
pub use gateway::*;
pub use json::*;
pub use openapi::*;

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
    /// Reject JSON request bodies that are invalid or exceed size, depth and count limits.
    JsonProtection(JsonProtectionPolicy),
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
            PolicyConfig::JsonProtection(_) => "jsonProtection",
        }
    }
}
