//! The configuration model: one struct per YAML document kind and per policy, with the user-facing
//! names Membrane users know. Doc comments here become the descriptions in the JSON Schema.

use std::collections::BTreeMap;
use std::net::IpAddr;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::units::{ByteSize, Duration, Flag};

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

/// An API (`api:` document).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ApiConfig {
    /// A name for logs and the admin API.
    #[serde(default)]
    pub name: Option<String>,
    /// Free text.
    #[serde(default)]
    pub description: Option<String>,
    /// The port to listen on. APIs on the same `ip:port` share one listener.
    pub port: u16,
    /// The address to bind; all addresses when absent.
    #[serde(default)]
    pub ip: Option<IpAddr>,
    /// Space-separated host names this API answers for; `*.example.com` globs allowed.
    #[serde(default)]
    pub host: Option<String>,
    /// The HTTP method this API answers (any when absent or `*`).
    #[serde(default)]
    pub method: Option<String>,
    /// Which request paths this API takes.
    #[serde(default)]
    pub path: Option<PathConfig>,
    /// The ordered list of policies run for each request (and, in reverse, each response).
    #[serde(default)]
    pub flow: Vec<PolicyConfig>,
    /// Where requests are forwarded.
    #[serde(default)]
    pub target: Option<TargetConfig>,
}

/// The path an API matches.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PathConfig {
    /// A prefix (`/shop/`), a template with parameters (`/items/{id}`, matched in full), or a
    /// regular expression when `isRegExp` is set.
    pub uri: String,
    /// Treat `uri` as a regular expression matched against the path.
    #[serde(default)]
    pub is_reg_exp: Flag,
}

/// The backend an API forwards to.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TargetConfig {
    /// `http://host:port/base`: the base path is joined with the request path.
    #[serde(default)]
    pub url: Option<String>,
    /// Backend host (with `port`), instead of `url`.
    #[serde(default)]
    pub host: Option<String>,
    /// Backend port (default 80).
    #[serde(default)]
    pub port: Option<u16>,
    /// Rewrite the `Host` header to the target's authority (default true).
    #[serde(default)]
    pub adjust_host_header: Option<Flag>,
}

/// Process-level settings (`gateway:` document). Every field is optional.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GatewaySettings {
    /// Worker threads of the data plane (default: the number of cores).
    #[serde(default)]
    pub threads: Option<usize>,
    /// Write one JSON line per request to standard output (default true).
    #[serde(default)]
    pub access_log: Option<Flag>,
    /// Size limits.
    #[serde(default)]
    pub limits: Option<Limits>,
    /// Timeouts.
    #[serde(default)]
    pub timeouts: Option<Timeouts>,
}

/// Size limits applied to every request.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Limits {
    /// Largest request head (request line and headers) accepted; larger gets 431 (default 64KB).
    #[serde(default)]
    pub max_header_size: Option<ByteSize>,
    /// Largest request body accepted; larger gets 413 (default 100MB).
    #[serde(default)]
    pub max_body_size: Option<ByteSize>,
    /// Most request headers accepted (default 100).
    #[serde(default)]
    pub max_headers: Option<usize>,
}

/// Timeouts.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Timeouts {
    /// Time to open a connection to a backend; then 502 (default 5s).
    #[serde(default)]
    pub connect: Option<Duration>,
    /// Time for the backend to send its response head; then 504 (default 60s).
    #[serde(default)]
    pub upstream: Option<Duration>,
    /// Time for a client to send a request head (default 30s).
    #[serde(default)]
    pub header_read: Option<Duration>,
    /// How long an idle backend connection stays pooled (default 90s).
    #[serde(default)]
    pub upstream_idle: Option<Duration>,
    /// On SIGTERM/SIGINT, how long in-flight requests may take to finish (default 30s).
    #[serde(default)]
    pub shutdown: Option<Duration>,
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
        }
    }
}

/// `return`: answers the request.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReturnPolicy {
    /// Status code (default 200).
    #[serde(default)]
    pub status: Option<u16>,
    /// Response headers; values may hold templates.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Response body; may hold templates. A preceding `static` supplies it otherwise.
    #[serde(default)]
    pub body: Option<String>,
    /// `Content-Type` of the body (default `text/plain; charset=utf-8` when there is a body).
    #[serde(default)]
    pub content_type: Option<String>,
}

/// `static`: sets the response body.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StaticPolicy {
    /// The body; may hold templates.
    pub src: String,
    /// `Content-Type` of the body (default `text/plain; charset=utf-8`).
    #[serde(default)]
    pub content_type: Option<String>,
}

/// `setHeader`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SetHeaderPolicy {
    /// Header name.
    pub name: String,
    /// Value; may hold templates such as `${path.id}` or `${header.User-Agent}`.
    pub value: String,
    /// Only set the header when the message does not have it yet.
    #[serde(default)]
    pub if_absent: Flag,
}

/// `removeHeader`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RemoveHeaderPolicy {
    /// Header name.
    pub name: String,
}
