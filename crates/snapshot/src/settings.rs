//! Process-level settings, with defaults applied when the configuration is compiled.

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

/// Process-level settings, with defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Worker threads.
    pub threads: usize,
    /// One JSON line per request on stdout.
    pub access_log: bool,
    /// Count requests, tries, rejections and connections for `/metrics`.
    pub metrics: bool,
    /// Which requests are traced (none when tracing is off).
    pub tracing: Option<turnpike_telemetry::trace::Sampling>,
    /// Where spans are exported.
    pub trace_export: Option<turnpike_telemetry::trace::ExportSettings>,
    /// Largest request head.
    pub max_header_size: usize,
    /// Most request headers.
    pub max_headers: usize,
    /// Largest request body.
    pub max_body_size: u64,
    /// Longest request target (path and query).
    pub max_uri_length: usize,
    /// Most connections per client IP on each worker (`None`: no limit).
    pub max_connections_per_ip: Option<u32>,
    /// The header of the request id.
    pub request_id_header: http::HeaderName,
    /// Take the request id from the request when it has one.
    pub trust_incoming_request_id: bool,
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
