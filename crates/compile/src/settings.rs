//! `gateway:` settings with their defaults: the snapshot's [`Settings`].

use std::time::Duration;

use turnpike_config::GatewaySettings;
use turnpike_snapshot::{Http2Limits, Settings};

/// The process settings of a configuration, with defaults applied.
pub fn settings(g: &GatewaySettings) -> Settings {
    let limits = g.limits.clone().unwrap_or_default();
    let t = g.timeouts.clone().unwrap_or_default();
    let request_id = g.request_id.clone().unwrap_or_default();
    let d = |v: Option<turnpike_config::units::Duration>, def: u64| {
        v.map_or(Duration::from_secs(def), |d| d.0)
    };
    Settings {
        threads: g
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
        // Set from `accessLog` by the compiler (it resolves file paths).
        access_log: None,
        // Set from the `telemetry:` document by the compiler.
        metrics: true,
        tracing: None,
        trace_export: None,
        exchange_store: None,
        max_header_size: limits.max_header_size.map_or(64 << 10, |s| s.0 as usize),
        max_headers: limits.max_headers.unwrap_or(100),
        max_body_size: limits.max_body_size.map_or(100 << 20, |s| s.0),
        max_uri_length: limits.max_uri_length.map_or(8 << 10, |s| s.0 as usize),
        forward_trailers: g.forward_trailers.0,
        max_connections_per_ip: limits.max_connections_per_ip,
        request_id_header: request_id
            .header
            .as_deref()
            .and_then(|h| http::HeaderName::from_bytes(h.as_bytes()).ok())
            .unwrap_or(http::HeaderName::from_static("x-request-id")),
        trust_incoming_request_id: request_id.trust_incoming.0,
        // Set from `resolver` by the compiler (its errors have locations).
        dns: turnpike_dns::Dns::System,
        // Set from `outboundProxy` (or Membrane's `configuration:`) by the compiler.
        outbound_proxy: None,
        connect_timeout: d(t.connect, 5),
        upstream_timeout: d(t.upstream, 60),
        header_read_timeout: d(t.header_read, 30),
        body_read_timeout: d(t.body_read, 30),
        response_write_timeout: d(t.response_write, 30),
        upstream_idle_timeout: d(t.upstream_idle, 90),
        shutdown_timeout: d(t.shutdown, 30),
        http2: {
            let h = g.http2.clone().unwrap_or_default();
            let max_header = limits.max_header_size.map_or(64 << 10, |s| s.0);
            Http2Limits {
                max_concurrent_streams: h.max_concurrent_streams.unwrap_or(256),
                initial_stream_window_size: h
                    .initial_stream_window_size
                    .map_or(1 << 20, |s| s.0.min(u32::MAX as u64 >> 1) as u32),
                initial_connection_window_size: h
                    .initial_connection_window_size
                    .map_or(4 << 20, |s| s.0.min(u32::MAX as u64 >> 1) as u32),
                max_header_list_size: h
                    .max_header_list_size
                    .map_or(max_header, |s| s.0)
                    .min(u32::MAX as u64) as u32,
            }
        },
    }
}
