//! Process-level settings, with defaults applied when the configuration is compiled.

use std::sync::Arc;
use std::time::Duration;

/// HTTP/2 limits, with defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Http2Limits {
    /// Concurrent streams per client connection.
    pub max_concurrent_streams: u32,
    /// Initial stream window.
    pub initial_stream_window_size: u32,
    /// Initial connection window.
    pub initial_connection_window_size: u32,
    /// Largest header list.
    pub max_header_list_size: u32,
}

/// An HTTP proxy that backend connections go through, each as a `CONNECT` tunnel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboundProxy {
    /// The proxy's host name or address.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// `Proxy-Authorization` for it (Basic).
    pub authorization: Option<http::HeaderValue>,
}

/// Process-level settings, with defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Worker threads.
    pub threads: usize,
    /// The access log (none when off).
    pub access_log: Option<Arc<AccessLogSettings>>,
    /// Count requests, tries, rejections and connections for `/metrics`.
    pub metrics: bool,
    /// Which requests are traced (none when tracing is off).
    pub tracing: Option<turnpike_telemetry::trace::Sampling>,
    /// Where spans are exported.
    pub trace_export: Option<turnpike_telemetry::trace::ExportSettings>,
    /// The store of recent exchanges: how many, and how many bytes of each body (none: off).
    pub exchange_store: Option<(usize, usize)>,
    /// Largest request head.
    pub max_header_size: usize,
    /// Most request headers.
    pub max_headers: usize,
    /// Largest request body.
    pub max_body_size: u64,
    /// Longest request target (path and query).
    pub max_uri_length: usize,
    /// Request trailers go on to the backend (`gateway.forwardTrailers`; without forbidden
    /// fields); else they are dropped.
    pub forward_trailers: bool,
    /// Most connections per client IP on each worker (`None`: no limit).
    pub max_connections_per_ip: Option<u32>,
    /// The header of the request id.
    pub request_id_header: http::HeaderName,
    /// Take the request id from the request when it has one.
    pub trust_incoming_request_id: bool,
    /// How backend host names are looked up.
    pub dns: turnpike_dns::Dns,
    /// The HTTP proxy every backend connection is tunnelled through.
    pub outbound_proxy: Option<OutboundProxy>,
    /// Backend connect timeout.
    pub connect_timeout: Duration,
    /// Backend response-head timeout.
    pub upstream_timeout: Duration,
    /// Client request-head timeout.
    pub header_read_timeout: Duration,
    /// Longest pause of a client sending a request body.
    pub body_read_timeout: Duration,
    /// Longest wait of a response write for a client that does not read.
    pub response_write_timeout: Duration,
    /// Idle time of pooled backend connections.
    pub upstream_idle_timeout: Duration,
    /// Grace period for in-flight requests at shutdown.
    pub shutdown_timeout: Duration,
    /// HTTP/2 limits.
    pub http2: Http2Limits,
}

/// How the access log is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessLogSettings {
    /// The line format.
    pub format: LogFormat,
    /// With [`LogFormat::Json`]: the fields, in order.
    pub fields: Vec<LogField>,
    /// Where lines go.
    pub output: LogOutput,
    /// Errors (status ≥ 400) are logged when a 53-bit random number is below this.
    pub errors_threshold: u64,
    /// Other requests are logged when a 53-bit random number is below this.
    pub successes_threshold: u64,
}

/// Every request: the threshold of a share of 100%.
pub const ALL: u64 = 1 << 53;

/// The format of access log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line.
    Json,
    /// NCSA common log format.
    Common,
    /// Common, with referer and user agent.
    Combined,
}

/// A field of JSON access log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogField {
    /// Seconds since the epoch.
    Ts,
    /// Client IP.
    Client,
    /// Request method.
    Method,
    /// Path and query as received.
    Uri,
    /// Status sent.
    Status,
    /// Milliseconds to the response head.
    DurationMs,
    /// The API's name.
    Api,
    /// The backend's status.
    UpstreamStatus,
    /// The node that answered.
    Upstream,
    /// The consumer.
    Consumer,
    /// The gateway's own error, if any.
    Error,
    /// The request id.
    RequestId,
    /// The `User-Agent` header.
    UserAgent,
    /// The `Referer` header.
    Referer,
    /// The request's HTTP version.
    Protocol,
}

impl LogField {
    /// Every field with its name, in the default order.
    pub const ALL: [(&'static str, LogField); 15] = [
        ("ts", LogField::Ts),
        ("client", LogField::Client),
        ("method", LogField::Method),
        ("uri", LogField::Uri),
        ("status", LogField::Status),
        ("durationMs", LogField::DurationMs),
        ("api", LogField::Api),
        ("upstreamStatus", LogField::UpstreamStatus),
        ("upstream", LogField::Upstream),
        ("consumer", LogField::Consumer),
        ("error", LogField::Error),
        ("requestId", LogField::RequestId),
        ("userAgent", LogField::UserAgent),
        ("referer", LogField::Referer),
        ("protocol", LogField::Protocol),
    ];

    /// The field's name.
    pub fn name(self) -> &'static str {
        LogField::ALL
            .iter()
            .find(|(_, f)| *f == self)
            .map_or("", |(n, _)| n)
    }
}

/// Where access log lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogOutput {
    /// Standard output.
    Stdout,
    /// A file, appended to.
    File(std::path::PathBuf),
}

impl AccessLogSettings {
    /// JSON lines with the fields that were always written, on standard output, every request.
    pub fn default_json() -> AccessLogSettings {
        AccessLogSettings {
            format: LogFormat::Json,
            fields: LogField::ALL[..12].iter().map(|(_, f)| *f).collect(),
            output: LogOutput::Stdout,
            errors_threshold: ALL,
            successes_threshold: ALL,
        }
    }
}
