//! The configuration model: one struct per YAML document kind and per policy, with the user-facing
//! names Membrane users know. Doc comments here become the descriptions in the JSON Schema.
//!
//! One file per concern: `admin.rs` (the admin API and its store), `api.rs` (APIs, paths,
//! targets), `gateway.rs` (process settings), `consumer.rs` (consumers and their credentials),
//! `tls.rs` (TLS settings), `openapi.rs` (`api.openapi`), `soap.rs` (the `soapProxy:`
//! document), `ssl_proxy.rs` (TLS passthrough), `upstream.rs` (pools of backend nodes), `telemetry.rs` (metrics, traces). A policy's settings are not here:
//! each policy module holds its own settings type, and a flow holds each policy as its name and
//! raw settings ([`PolicyConfig`]) until the compile stage checks them.

mod admin;
mod api;
mod consumer;
mod gateway;
mod openapi;
mod soap;
mod ssl_proxy;
mod telemetry;
mod tls;
mod upstream;

pub use admin::*;
pub use api::*;
pub use consumer::*;
pub use gateway::*;
pub use openapi::*;
pub use soap::*;
pub use ssl_proxy::*;
pub use telemetry::*;
pub use tls::*;
pub use upstream::*;

use std::borrow::Cow;

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
    Gateway(Box<GatewaySettings>),
    /// A consumer: credentials, groups and its own policies.
    Consumer(ConsumerConfig),
    /// A SOAP API whose path and target come from a WSDL, which it also publishes at `?wsdl`.
    SoapProxy(Box<SoapProxyConfig>),
    /// A pool of backend nodes that targets refer to by name.
    Upstream(Box<UpstreamConfig>),
    /// The admin REST API and its document store.
    Admin(Box<AdminConfig>),
    /// Metrics, traces and the store of recent exchanges.
    Telemetry(Box<TelemetryConfig>),
    /// An API without a port, reached only from other APIs' `internal://NAME` targets
    /// (Membrane's `internal:`).
    Internal(Box<InternalConfig>),
    /// A forward proxy on a port of its own (Membrane's `proxy:`): clients configured to use
    /// it send requests for any origin.
    Proxy(Box<ProxyConfig>),
    /// TLS passthrough (Membrane's `sslProxy:`): connections relayed, still encrypted, to the
    /// backend their server name (SNI) selects.
    SslProxy(Box<SslProxyConfig>),
    /// Membrane's `configuration:` (`production`, `httpClientConfig.proxy`).
    Configuration(Box<MembraneConfiguration>),
}

/// One policy of a flow: a map with exactly one key, the policy's name, whose value holds the
/// policy's settings. The settings are checked against the policy's own settings type when the
/// flow is compiled (`turnpike_policies::registry` lists the policies).
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyConfig {
    /// The policy's name as written (`setHeader`).
    pub name: String,
    /// Its settings, as written.
    pub settings: serde_json::Value,
}

impl PolicyConfig {
    /// The policy's name as written in YAML.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl<'de> Deserialize<'de> for PolicyConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = serde_json::Map::<String, serde_json::Value>::deserialize(d).map_err(|_| {
            serde::de::Error::custom("expected a map with exactly one key (the name of the policy)")
        })?;
        let mut entries = map.into_iter();
        match (entries.next(), entries.next()) {
            // `return:` with nothing after it is `return: {}`, as in Membrane.
            (Some((name, serde_json::Value::Null)), None) => Ok(PolicyConfig {
                name,
                settings: serde_json::Value::Object(serde_json::Map::new()),
            }),
            (Some((name, settings)), None) => Ok(PolicyConfig { name, settings }),
            _ => Err(serde::de::Error::custom(
                "expected a map with exactly one key (the name of the policy)",
            )),
        }
    }
}

impl JsonSchema for PolicyConfig {
    fn schema_name() -> Cow<'static, str> {
        "PolicyConfig".into()
    }

    /// A placeholder: the full schema (`turnpike schema`) replaces it with one alternative per
    /// registered policy.
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "One policy: a map with exactly one key, the policy's name.",
            "type": "object",
            "minProperties": 1,
            "maxProperties": 1
        })
    }
}
