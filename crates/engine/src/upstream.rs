//! The upstream HTTP client of one worker: a keep-alive connection pool owned by that worker
//! alone, so that the hot path never shares a pool across threads.

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use turnpike_core::Body;

use crate::snapshot::Settings;

/// A worker's pooled HTTP client.
pub type UpstreamClient = Client<HttpConnector, Body>;

/// Builds a worker's client from the connect and idle timeouts of `settings`.
pub fn client(settings: &Settings) -> UpstreamClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(settings.connect_timeout));
    connector.enforce_http(true);
    Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(settings.upstream_idle_timeout)
        .pool_max_idle_per_host(usize::MAX)
        .set_host(false)
        .build(connector)
}

/// True when the upstream client settings of `a` and `b` differ (the pool must be rebuilt).
pub fn client_settings_changed(a: &Settings, b: &Settings) -> bool {
    a.connect_timeout != b.connect_timeout || a.upstream_idle_timeout != b.upstream_idle_timeout
}
