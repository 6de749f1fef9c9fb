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
    /// Largest request head.
    pub max_header_size: usize,
    /// Most request headers.
    pub max_headers: usize,
    /// Largest request body.
    pub max_body_size: u64,
    /// Backend connect timeout.
    pub connect_timeout: Duration,
    /// Backend response-head timeout.
    pub upstream_timeout: Duration,
    /// Client request-head timeout.
    pub header_read_timeout: Duration,
    /// Idle time of pooled backend connections.
    pub upstream_idle_timeout: Duration,
    /// Grace period for in-flight requests at shutdown.
    pub shutdown_timeout: Duration,
    /// HTTP/2 limits.
    pub http2: Http2Limits,
}
