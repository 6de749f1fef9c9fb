//! `api:` documents: where an API listens, what it matches, where it forwards.

use std::net::IpAddr;

use schemars::JsonSchema;
use serde::Deserialize;

use super::{
    CircuitBreaker, HealthCheck, LoadBalancing, NodeConfig, OpenApiSource, PolicyConfig,
    PoolSettings, PoolTimeouts, Retries, SslConfig, TargetSsl,
};
use crate::units::Flag;

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
    /// A condition on the request head this API needs besides its route (Membrane's `test`):
    /// when it does not hold, the next API whose route matches (in file order) takes the request.
    #[serde(default)]
    pub test: Option<String>,
    /// The language of `test`: CEL, or Membrane's SpEL (`spel`, also tried when `test` is not
    /// CEL), or `xpath` / `jsonpath` on the request's body (read before routing then).
    #[serde(default)]
    pub language: Option<String>,
    /// Namespace prefixes of an XPath `test` (Membrane's `xmlConfig`).
    #[serde(default)]
    pub xml_config: Option<XmlConfig>,
    /// The ordered list of policies run for each request (and, in reverse, each response).
    #[serde(default)]
    pub flow: Vec<PolicyConfig>,
    /// Where requests are forwarded.
    #[serde(default)]
    pub target: Option<TargetConfig>,
    /// Serve this API over TLS (all APIs of a port must agree; each may bring its certificate,
    /// chosen by SNI from its `host`).
    #[serde(default)]
    pub ssl: Option<SslConfig>,
    /// Accept cleartext HTTP/2 with prior knowledge (h2c) on this API's port, besides HTTP/1.1.
    #[serde(default)]
    pub h2c: Flag,
    /// Deploy this API from OpenAPI documents: paths, methods and base path come from each spec
    /// (one route per spec); without `target`, the spec's first `servers` URL is the target.
    #[serde(default)]
    pub openapi: Vec<OpenApiSource>,
    /// Membrane's newer spelling of `openapi`: a list of `{ openapi: { … } }` (merged into
    /// `openapi` when the document is read).
    #[serde(default)]
    pub specs: Vec<SpecEntry>,
    /// Flows of single operations of an API deployed from `openapi`, keyed by `operationId` or
    /// by `"METHOD /path"` as the spec writes the path; each runs after the API's `flow`.
    #[serde(default)]
    pub operations: std::collections::BTreeMap<String, OperationConfig>,
    /// Several routes of one API (one name, one target, the API's `flow` shared), each with its
    /// own method, path and flow; instead of `method` and `path`.
    #[serde(default)]
    pub routes: Vec<RouteConfig>,
}

/// The flow of one operation (`api.operations`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OperationConfig {
    /// Policies run for this operation only, after the API's `flow`.
    #[serde(default)]
    pub flow: Vec<PolicyConfig>,
}

/// One route of an API (`api.routes`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RouteConfig {
    /// The HTTP method (any when absent or `*`).
    #[serde(default)]
    pub method: Option<String>,
    /// A prefix (`/shop/`) or a template with parameters (`/items/{id}`, matched in full).
    pub path: String,
    /// Policies run for this route only, after the API's `flow`.
    #[serde(default)]
    pub flow: Vec<PolicyConfig>,
}

/// `proxy:`: a forward proxy. Requests in absolute form (`GET http://host/path`) go on to the
/// origin they name; `CONNECT host:port` opens a tunnel to it. The flow runs for each request
/// (for CONNECT, before the tunnel opens).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProxyConfig {
    /// A name for logs and metrics (default `proxy <port>`).
    #[serde(default)]
    pub name: Option<String>,
    /// Free text.
    #[serde(default)]
    pub description: Option<String>,
    /// The port to listen on: a port of its own.
    pub port: u16,
    /// The address to bind; all addresses when `destinations` are given, else 127.0.0.1.
    #[serde(default)]
    pub ip: Option<IpAddr>,
    /// TLS between clients and the proxy.
    #[serde(default)]
    pub ssl: Option<SslConfig>,
    /// The policies run for each request (and, in reverse, each response).
    #[serde(default)]
    pub flow: Vec<PolicyConfig>,
    /// Where the proxy may forward to. Loopback, link-local and private addresses and the
    /// gateway's own listeners are refused unless an `allow` rule names them.
    #[serde(default)]
    pub destinations: Option<ProxyDestinations>,
}

/// `proxy.destinations`: rules on the origins a forward proxy reaches, checked for the name
/// asked for and for every address it resolves to.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProxyDestinations {
    /// When given, only destinations matching one of these rules.
    #[serde(default)]
    pub allow: Vec<DestinationRule>,
    /// Destinations never reached (checked first).
    #[serde(default)]
    pub deny: Vec<DestinationRule>,
}

/// One destination rule: a host name (`*.example.com` for the names below it) or a CIDR
/// (`203.0.113.0/24`, or one address), and optionally ports; a rule with ports alone matches
/// every host on them.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DestinationRule {
    /// A host name, or `*.` and a domain.
    #[serde(default)]
    pub host: Option<String>,
    /// An address range or address.
    #[serde(default)]
    pub cidr: Option<String>,
    /// The ports the rule covers (default: all).
    #[serde(default)]
    pub ports: Vec<u16>,
}

/// One entry of `specs`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SpecEntry {
    /// An OpenAPI document, as an entry of `openapi`.
    pub openapi: OpenApiSource,
}

/// `internal:`: an API without a port of its own, run in-process when another API's target (or
/// `destination`) is `internal://NAME`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct InternalConfig {
    /// The name the `internal://` URLs use.
    pub name: String,
    /// What the API is for.
    #[serde(default)]
    pub description: Option<String>,
    /// The policies run for each request (and, in reverse, each response).
    #[serde(default)]
    pub flow: Vec<PolicyConfig>,
    /// Where requests are forwarded (another `internal://` API, or a backend).
    #[serde(default)]
    pub target: Option<TargetConfig>,
}

/// Membrane's `xmlConfig`: the namespace prefixes XPath expressions use.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct XmlConfig {
    /// `{ prefix, uri }` pairs.
    #[serde(default)]
    pub namespaces: Vec<XmlNamespace>,
}

/// A namespace prefix.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct XmlNamespace {
    /// The prefix.
    pub prefix: String,
    /// The namespace URI.
    pub uri: String,
}

/// The path an API matches: `{ uri, isRegExp }`, or the `uri` alone (`path: /mcp`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(from = "PathInput")]
pub struct PathConfig {
    /// A prefix (`/shop/`), a template with parameters (`/items/{id}`, matched in full), or a
    /// regular expression when `isRegExp` is set.
    pub uri: String,
    /// Treat `uri` as a regular expression matched against the path.
    #[serde(default)]
    pub is_reg_exp: Flag,
}

/// `path:` as written.
#[derive(Debug, Clone, JsonSchema)]
#[serde(untagged)]
pub enum PathInput {
    /// The `uri` alone.
    Uri(String),
    /// `{ uri, isRegExp }`.
    Full(PathFields),
}

/// `path: { uri, isRegExp }`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PathFields {
    /// A prefix (`/shop/`), a template with parameters (`/items/{id}`, matched in full), or a
    /// regular expression when `isRegExp` is set.
    pub uri: String,
    /// Treat `uri` as a regular expression matched against the path.
    #[serde(default)]
    pub is_reg_exp: Flag,
}

impl<'de> Deserialize<'de> for PathInput {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Input;
        impl<'de> serde::de::Visitor<'de> for Input {
            type Value = PathInput;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a path (`/shop/`) or `{ uri, isRegExp }`")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<PathInput, E> {
                Ok(PathInput::Uri(v.to_owned()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<PathInput, A::Error> {
                PathFields::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(PathInput::Full)
            }
        }
        d.deserialize_any(Input)
    }
}

impl From<PathInput> for PathConfig {
    fn from(p: PathInput) -> Self {
        match p {
            PathInput::Uri(uri) => PathConfig {
                uri,
                is_reg_exp: Flag::default(),
            },
            PathInput::Full(f) => PathConfig {
                uri: f.uri,
                is_reg_exp: f.is_reg_exp,
            },
        }
    }
}

/// The backend an API forwards to.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
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
    /// Send requests with this method instead of the client's (Membrane's `target.method`).
    #[serde(default)]
    pub method: Option<String>,
    /// The language of the expressions in `url`'s path and query: the built-in placeholders
    /// (default, or `spel`), `jsonpath` or `xpath` on the request's body (Membrane's
    /// `target.language`).
    #[serde(default)]
    pub language: Option<String>,
    /// TLS to the backend (implied by an `https://` URL).
    #[serde(default)]
    pub ssl: Option<TargetSsl>,
    /// Speak HTTP/2 to the backend (over TLS with ALPN, or h2c with prior knowledge); needed
    /// for gRPC.
    #[serde(default)]
    pub http2: Flag,
    /// The name of an `upstream:` document to forward to, instead of `url` or `host`.
    #[serde(default)]
    pub upstream: Option<String>,
    /// A pool of nodes written inline, instead of `url` or `host` (the settings of an
    /// `upstream:` document may follow).
    #[serde(default)]
    pub nodes: Option<Vec<NodeConfig>>,
    /// With `nodes`: how a node is chosen (default `roundRobin`).
    #[serde(default)]
    pub load_balancing: Option<LoadBalancing>,
    /// With `nodes` and `loadBalancing: hash`: the template whose value picks the node.
    #[serde(default)]
    pub hash_key: Option<String>,
    /// Health checks of the target's nodes (also for a single `url`).
    #[serde(default)]
    pub health_check: Option<HealthCheck>,
    /// Trying a failed request again (on another node where there is one).
    #[serde(default)]
    pub retries: Option<Retries>,
    /// Timeouts to this target (default: the gateway's).
    #[serde(default)]
    pub timeouts: Option<PoolTimeouts>,
    /// Limits past which requests are refused with 503 instead of queued.
    #[serde(default)]
    pub circuit_breaker: Option<CircuitBreaker>,
    /// A concurrency limit with fair queues in front of it.
    #[serde(default)]
    pub concurrency: Option<crate::ConcurrencyConfig>,
    /// How often host names are looked up again (default 30s).
    #[serde(default)]
    pub dns_refresh: Option<crate::units::Duration>,
}

impl TargetConfig {
    /// The pool settings written in this target, for a pool of `nodes` (the `url`/`host` node,
    /// or the inline nodes).
    pub fn pool<'a>(&'a self, nodes: &'a [NodeConfig]) -> PoolSettings<'a> {
        PoolSettings {
            nodes,
            load_balancing: self.load_balancing,
            hash_key: self.hash_key.as_deref(),
            health_check: self.health_check.as_ref(),
            retries: self.retries.as_ref(),
            timeouts: self.timeouts.as_ref(),
            circuit_breaker: self.circuit_breaker.as_ref(),
            concurrency: self.concurrency.as_ref(),
            dns_refresh: self.dns_refresh,
            ssl: self.ssl.as_ref(),
            http2: self.http2.0,
        }
    }
}
