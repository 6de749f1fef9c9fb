//! `sslProxy:`: TLS passthrough (Membrane's `sslProxy`).

use std::net::IpAddr;

use schemars::JsonSchema;
use serde::Deserialize;

use super::PolicyConfig;

/// `sslProxy:`: forwards TLS connections to a backend without terminating them. The server
/// name the client sends (SNI) selects the `sslProxy` of the port; the bytes are relayed
/// unchanged, so the client sees the backend's certificate and the gateway never sees the
/// payload.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SslProxyConfig {
    /// The server names (SNI) this proxy takes, separated by spaces; `*` matches any run of
    /// characters (`*.example.com`).
    pub host: String,
    /// The port to accept TLS connections on (shared only with other `sslProxy` documents).
    pub port: u16,
    /// The address to bind; all addresses when absent.
    #[serde(default)]
    pub ip: Option<IpAddr>,
    /// Take connections that send no server name (the first such proxy of the port does).
    #[serde(default = "yes")]
    pub use_as_default: bool,
    /// What runs before a connection is relayed: `sslLog` (a log line per connection).
    #[serde(default)]
    pub interceptors: Vec<PolicyConfig>,
    /// The backend the connection is relayed to.
    pub target: SslProxyTarget,
}

fn yes() -> bool {
    true
}

/// `sslProxy.target`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SslProxyTarget {
    /// The backend's host name or IP address.
    pub host: String,
    /// Its port (default: the port the proxy listens on).
    #[serde(default)]
    pub port: Option<u16>,
}
