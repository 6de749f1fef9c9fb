//! The `gateway:` document: process-level settings.

use schemars::JsonSchema;
use serde::Deserialize;

use crate::units::{ByteSize, Duration, Flag};

/// Process-level settings (`gateway:` document). Every field is optional.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GatewaySettings {
    /// Worker threads of the data plane (default: the number of cores).
    #[serde(default)]
    pub threads: Option<usize>,
    /// The access log: `true` (default: one JSON line per request on standard output),
    /// `false`, or its settings.
    #[serde(default)]
    pub access_log: Option<AccessLog>,
    /// Size limits.
    #[serde(default)]
    pub limits: Option<Limits>,
    /// Timeouts.
    #[serde(default)]
    pub timeouts: Option<Timeouts>,
    /// HTTP/2 limits (clients and backends).
    #[serde(default)]
    pub http2: Option<Http2Settings>,
    /// The request id every response carries, the backend receives and the access log
    /// records.
    #[serde(default)]
    pub request_id: Option<RequestIdSettings>,
    /// The Python executors that run `python` policies.
    #[serde(default)]
    pub python: Option<PythonSettings>,
    /// An HTTP proxy that every backend connection goes through (a `CONNECT` tunnel each), as
    /// where a network lets traffic out only through an egress proxy.
    #[serde(default)]
    pub outbound_proxy: Option<OutboundProxySettings>,
    /// Name servers that backend host names are looked up with (default: the system's
    /// resolver).
    #[serde(default)]
    pub resolver: Option<ResolverSettings>,
    /// Send the trailer fields of a request's body on to the backend (default: dropped).
    /// Fields RFC 9110 §6.5.1 does not allow in trailers (framing, routing, authentication,
    /// controls, content processing) are dropped even then.
    #[serde(default)]
    pub forward_trailers: Flag,
}

/// `gateway.outboundProxy`: the HTTP proxy backend connections go through.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OutboundProxySettings {
    /// The proxy's host name or IP address.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// Basic credentials for the proxy (`Proxy-Authorization`).
    #[serde(default)]
    pub authentication: Option<ProxyCredentials>,
}

/// `outboundProxy.authentication`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProxyCredentials {
    /// The user name.
    pub username: String,
    /// The password.
    pub password: String,
}

/// Membrane's `configuration:` document: of its settings Turnpike takes `production: true`
/// (problem bodies never show internals anyway) and `httpClientConfig.proxy`, the same as
/// `gateway.outboundProxy`; the others have `gateway:` settings of their own.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MembraneConfiguration {
    /// Must be `true` when given: Turnpike never shows internals in error bodies.
    #[serde(default)]
    pub production: Option<bool>,
    /// The HTTP client: only its `proxy`.
    #[serde(default)]
    pub http_client_config: Option<MembraneHttpClientConfig>,
    /// Not available (a load error naming the alternative).
    #[serde(default)]
    pub jmx_router_name: Option<serde_json::Value>,
    /// Not available (a load error naming the alternative).
    #[serde(default)]
    pub uri_factory: Option<serde_json::Value>,
}

/// `configuration.httpClientConfig`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MembraneHttpClientConfig {
    /// The HTTP proxy backend connections go through (as `gateway.outboundProxy`).
    #[serde(default)]
    pub proxy: Option<OutboundProxySettings>,
    /// Not available (a load error naming the alternative).
    #[serde(default)]
    pub adjust_host_header: Option<serde_json::Value>,
    /// Not available (a load error naming the alternative).
    #[serde(default)]
    pub use_experimental_http2: Option<serde_json::Value>,
    /// Not available (a load error naming the alternative).
    #[serde(default)]
    pub connection: Option<serde_json::Value>,
    /// Not available (a load error naming the alternative).
    #[serde(default)]
    pub max_retries: Option<serde_json::Value>,
}

/// `gateway.resolver`: the name servers backend host names are looked up with, instead of the
/// system's resolver (as nginx's `resolver`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ResolverSettings {
    /// `ip` or `ip:port` (port 53 by default) of each name server, asked in turn.
    pub nameservers: Vec<String>,
    /// How long one query may take (default 2s).
    #[serde(default)]
    pub timeout: Option<Duration>,
}

/// `gateway.python`: how the executors of `python` policies run.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PythonSettings {
    /// The interpreter, found on `PATH` unless a path (a virtualenv's `bin/python` works);
    /// `python3` by default. It must have the `turnpike_policy` package (`pip install ./python`).
    #[serde(default)]
    pub interpreter: Option<String>,
    /// Folders put in front of `sys.path`, relative to the file this is written in.
    #[serde(default)]
    pub path: Vec<String>,
    /// Executor processes (default 1).
    #[serde(default)]
    pub workers: Option<usize>,
}

/// `accessLog`: on, off, or how.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum AccessLog {
    /// On (JSON lines on standard output) or off.
    Flag(Flag),
    /// Format, fields, output and sampling.
    Settings(AccessLogSettings),
}

/// How the access log is written.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AccessLogSettings {
    /// `json` (default: one object per line), `common` (Apache/NCSA common log format) or
    /// `combined` (common, with referer and user agent).
    #[serde(default)]
    pub format: Option<String>,
    /// With `json`: the fields written, in this order (default all): `ts`, `client`,
    /// `method`, `uri`, `status`, `durationMs`, `api`, `upstreamStatus`, `upstream`,
    /// `consumer`, `error`, `requestId`, `userAgent`, `referer`, `protocol`.
    #[serde(default)]
    pub fields: Option<Vec<String>>,
    /// `stdout` (default), `off`, or a file path (relative to this file), appended to and
    /// reopened on SIGUSR1 (after `logrotate` moved it).
    #[serde(default)]
    pub output: Option<String>,
    /// Which requests are logged.
    #[serde(default)]
    pub sample: Option<LogSample>,
}

/// Which requests are logged: a share of the errors (status ≥ 400) and of the others.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LogSample {
    /// The share of errors logged (default `100%`).
    #[serde(default)]
    pub errors: Option<super::Ratio>,
    /// The share of successes logged (default `100%`).
    #[serde(default)]
    pub successes: Option<super::Ratio>,
}

/// The request id of every exchange.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RequestIdSettings {
    /// The header that carries it, to the backend and back to the client (default
    /// `X-Request-Id`).
    #[serde(default)]
    pub header: Option<String>,
    /// Take the id from the request's header when it has one (at most 200 visible ASCII
    /// characters), instead of generating one: only when every client is trusted, such as a
    /// load balancer in front that sets it (default false).
    #[serde(default)]
    pub trust_incoming: Flag,
}

/// HTTP/2 flow control and limits.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Http2Settings {
    /// Concurrent streams per client connection (default 256).
    #[serde(default)]
    pub max_concurrent_streams: Option<u32>,
    /// Initial stream flow-control window (default 1MB).
    #[serde(default)]
    pub initial_stream_window_size: Option<ByteSize>,
    /// Initial connection flow-control window (default 4MB).
    #[serde(default)]
    pub initial_connection_window_size: Option<ByteSize>,
    /// Largest header list a client may send (default: `limits.maxHeaderSize`).
    #[serde(default)]
    pub max_header_list_size: Option<ByteSize>,
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
    /// Most request headers accepted; more gets 431 (default 100).
    #[serde(default)]
    pub max_headers: Option<usize>,
    /// Longest request target (path and query) accepted; longer gets 414 (default 8KB).
    #[serde(default)]
    pub max_uri_length: Option<ByteSize>,
    /// Most connections one client IP may have open on each worker at once; more are closed
    /// as soon as they are accepted (default: no limit).
    #[serde(default)]
    pub max_connections_per_ip: Option<u32>,
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
    /// Time for a client to send a request head, and the longest a keep-alive connection
    /// waits for the next one (default 30s).
    #[serde(default)]
    pub header_read: Option<Duration>,
    /// The longest a client may pause while sending a request body; then 408 and the
    /// connection is closed (default 30s).
    #[serde(default)]
    pub body_read: Option<Duration>,
    /// The longest a response write may wait for a client that does not read; then the
    /// connection is closed (default 30s).
    #[serde(default)]
    pub response_write: Option<Duration>,
    /// How long an idle backend connection stays pooled (default 90s).
    #[serde(default)]
    pub upstream_idle: Option<Duration>,
    /// On SIGTERM/SIGINT, how long in-flight requests may take to finish (default 30s).
    #[serde(default)]
    pub shutdown: Option<Duration>,
}
