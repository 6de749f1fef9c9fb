//! Upstreams: pools of backend nodes, as `upstream:` documents that several APIs share or
//! written inline in a `target:`. Both spell the same settings ([`PoolSettings`] is the view the
//! compile stage reads).

use schemars::JsonSchema;
use serde::Deserialize;

use super::TargetSsl;
use crate::units::{Duration, Flag};

/// A named pool of backend nodes (`upstream:` document), which `target: { upstream: NAME }`
/// refers to.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UpstreamConfig {
    /// The name targets refer to; also the label of its metrics and logs.
    pub name: String,
    /// The nodes (at least one).
    pub nodes: Vec<NodeConfig>,
    /// How a node is chosen for a request (default `roundRobin`).
    #[serde(default)]
    pub load_balancing: Option<LoadBalancing>,
    /// With `loadBalancing: hash`: the template whose value picks the node (`${header.X-User-Id}`).
    #[serde(default)]
    pub hash_key: Option<String>,
    /// Active and passive health checks.
    #[serde(default)]
    pub health_check: Option<HealthCheck>,
    /// Trying a failed request again on another node.
    #[serde(default)]
    pub retries: Option<Retries>,
    /// Timeouts to this upstream's nodes (default: the gateway's).
    #[serde(default)]
    pub timeouts: Option<PoolTimeouts>,
    /// Limits beyond which requests are refused with 503 instead of queued.
    #[serde(default)]
    pub circuit_breaker: Option<CircuitBreaker>,
    /// A concurrency limit with fair queues in front of it.
    #[serde(default)]
    pub concurrency: Option<ConcurrencyConfig>,
    /// How often host names of node URLs are looked up again (default 30s).
    #[serde(default)]
    pub dns_refresh: Option<Duration>,
    /// TLS settings for `https://` nodes.
    #[serde(default)]
    pub ssl: Option<TargetSsl>,
    /// Speak HTTP/2 to the nodes.
    #[serde(default)]
    pub http2: Flag,
}

/// One backend node of a pool.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeConfig {
    /// `http://host:port` or `https://host:port` (a path is joined with the request path).
    pub url: String,
    /// Its share of the requests relative to the other nodes (default 1, at least 1).
    #[serde(default)]
    pub weight: Option<u32>,
}

/// How a node is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum LoadBalancing {
    /// Smooth weighted round robin (each node in turn, by weight, without bursts).
    RoundRobin,
    /// The less busy of two nodes picked at random (in-flight requests over weight).
    LeastRequests,
    /// A node at random, by weight.
    Random,
    /// Consistent hashing of `hashKey`: a node's removal moves only its own keys.
    Hash,
}

/// Health checks of a pool's nodes.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HealthCheck {
    /// Probes sent to every node by one prober per process.
    #[serde(default)]
    pub active: Option<ActiveHealthCheck>,
    /// Failures of real traffic that take a node out for a while.
    #[serde(default)]
    pub passive: Option<PassiveHealthCheck>,
    /// Below this share of usable nodes the pool balances over all nodes, as if all were
    /// healthy (default `50%`; `0%` turns it off).
    #[serde(default)]
    pub panic_threshold: Option<String>,
}

/// Probes of each node.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ActiveHealthCheck {
    /// The path probed with GET.
    pub path: String,
    /// Time between probes of a node (default 2s).
    #[serde(default)]
    pub interval: Option<Duration>,
    /// Time a probe may take (default 1s).
    #[serde(default)]
    pub timeout: Option<Duration>,
    /// Successful probes in a row that make an unhealthy node healthy (default 2).
    #[serde(default)]
    pub healthy_threshold: Option<u32>,
    /// Failed probes in a row that make a healthy node unhealthy (default 3).
    #[serde(default)]
    pub unhealthy_threshold: Option<u32>,
    /// Statuses that count as success: `200-399` (default), `200`, `200,204`.
    #[serde(default)]
    pub expect_status: Option<String>,
}

/// Ejection of nodes by their failures on real traffic.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PassiveHealthCheck {
    /// Failures in a row (connect errors, resets, timeouts, and the `failureStatus` statuses)
    /// that eject a node (default 3).
    #[serde(default)]
    pub consecutive_failures: Option<u32>,
    /// Response statuses that count as failures (default 502, 503, 504).
    #[serde(default)]
    pub failure_status: Option<Vec<u16>>,
    /// How long an ejected node stays out; doubled for each ejection in a row, up to 5 minutes
    /// (default 30s).
    #[serde(default)]
    pub eject_for: Option<Duration>,
    /// The most nodes out at once, as a share of the pool (default 50%).
    #[serde(default)]
    pub max_ejected_percent: Option<u32>,
}

/// Trying a failed request again.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Retries {
    /// Further tries after the first (at most 10), each on another node where there is one.
    pub attempts: u32,
    /// What is tried again: `connect-failure`, `reset`, `timeout`, and statuses (default: all
    /// three, and 502, 503, 504).
    #[serde(default)]
    pub on: Option<Vec<RetryOn>>,
    /// The methods tried again (default the idempotent ones: GET, HEAD, OPTIONS, PUT, DELETE).
    #[serde(default)]
    pub methods: Option<Vec<String>>,
    /// Time each try may take for its response head (default: the response timeout).
    #[serde(default)]
    pub per_try_timeout: Option<Duration>,
    /// Retries may add at most this share of the requests (default `20%`; at least 3 per
    /// second are allowed).
    #[serde(default)]
    pub budget: Option<String>,
    /// Request bodies up to this size are held in memory so that they can be sent again
    /// (default 64KB); larger ones are not retried.
    #[serde(default)]
    pub max_body_size: Option<crate::units::ByteSize>,
}

/// A condition of `retries.on`: a failure kind or a status.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RetryOn {
    /// A response status.
    Status(u16),
    /// `connect-failure`, `reset` or `timeout`.
    Failure(String),
}

/// Timeouts of one upstream.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PoolTimeouts {
    /// Connecting to a node.
    #[serde(default)]
    pub connect: Option<Duration>,
    /// Waiting for a response head.
    #[serde(default)]
    pub response: Option<Duration>,
    /// How long idle connections stay pooled.
    #[serde(default)]
    pub idle: Option<Duration>,
}

/// Limits past which requests to an upstream are refused with 503 `upstream-overloaded`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CircuitBreaker {
    /// Connections open to the upstream's nodes, by all workers.
    #[serde(default)]
    pub max_connections: Option<u32>,
    /// Requests waiting for a new connection.
    #[serde(default)]
    pub max_pending_requests: Option<u32>,
    /// Requests in flight to the upstream.
    #[serde(default)]
    pub max_requests: Option<u32>,
}

/// A concurrency limit on an upstream with fair queues in front of it: requests past the
/// limit wait in their client's queue, served round-robin, and are shed (429 for a client whose
/// own queue is full, 503 otherwise) instead of piling up inside the backend.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConcurrencyConfig {
    /// Requests in flight to the upstream at most: a number, or `adaptive` (the limit follows
    /// the backend's latency within `adaptive`'s bounds).
    pub limit: ConcurrencyLimit,
    /// With `limit: adaptive`: its bounds and how it moves.
    #[serde(default)]
    pub adaptive: Option<AdaptiveLimitConfig>,
    /// The queues in front of the limit.
    #[serde(default)]
    pub queue: Option<FairQueueConfig>,
}

/// A fixed limit or `adaptive`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ConcurrencyLimit {
    /// A fixed number of requests in flight.
    Fixed(u32),
    /// `adaptive`.
    Named(String),
}

/// The bounds and pace of an adaptive limit.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AdaptiveLimitConfig {
    /// The lowest limit (default 1).
    #[serde(default)]
    pub min: Option<u32>,
    /// The highest limit (default 1000).
    #[serde(default)]
    pub max: Option<u32>,
    /// The limit to start from (default 20, within min and max).
    #[serde(default)]
    pub initial: Option<u32>,
    /// Latency growth tolerated before the limit shrinks: 1.5 (default) lets the recent latency
    /// reach 1.5× the long-term one.
    #[serde(default)]
    pub tolerance: Option<f64>,
    /// How much of each new estimate is taken, from 0 to 1 (default 0.2).
    #[serde(default)]
    pub smoothing: Option<f64>,
    /// How often the backend's latency without queueing is measured, by holding the limit at
    /// `min` for a few requests (default 30s).
    #[serde(default)]
    pub probe_interval: Option<Duration>,
}

/// The fair queues in front of a concurrency limit.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FairQueueConfig {
    /// What names the client whose queue a request waits in: a template such as
    /// `${header.X-Client-Id}`, `${consumer.name}` (default `${client.ip}`).
    #[serde(default)]
    pub key: Option<String>,
    /// Turns in a row per round for some keys (default 1 each): `{ interactive: 4 }`.
    #[serde(default)]
    pub weights: std::collections::BTreeMap<String, u32>,
    /// Requests one key may have waiting (default 100); more of its requests get 429.
    #[serde(default)]
    pub max_per_key: Option<u32>,
    /// Requests all keys together may have waiting (default 1000); past it the largest queue
    /// gives up its newest request.
    #[serde(default)]
    pub max_total: Option<u32>,
    /// The longest a request waits for a slot (default 10s); then 503.
    #[serde(default)]
    pub timeout: Option<Duration>,
    /// The queueing delay tolerated (default 100ms): while requests have waited longer than
    /// this for a whole `interval`, the largest queue is shed from (CoDel).
    #[serde(default)]
    pub target_delay: Option<Duration>,
    /// See `targetDelay` (default 500ms).
    #[serde(default)]
    pub interval: Option<Duration>,
}

/// The pool settings of an `upstream:` document or of an inline `target: { nodes: ... }`.
#[derive(Debug, Clone, Copy)]
pub struct PoolSettings<'a> {
    /// The nodes.
    pub nodes: &'a [NodeConfig],
    /// `loadBalancing`.
    pub load_balancing: Option<LoadBalancing>,
    /// `hashKey`.
    pub hash_key: Option<&'a str>,
    /// `healthCheck`.
    pub health_check: Option<&'a HealthCheck>,
    /// `retries`.
    pub retries: Option<&'a Retries>,
    /// `timeouts`.
    pub timeouts: Option<&'a PoolTimeouts>,
    /// `circuitBreaker`.
    pub circuit_breaker: Option<&'a CircuitBreaker>,
    /// `concurrency`.
    pub concurrency: Option<&'a ConcurrencyConfig>,
    /// `dnsRefresh`.
    pub dns_refresh: Option<Duration>,
    /// `ssl`.
    pub ssl: Option<&'a TargetSsl>,
    /// `http2`.
    pub http2: bool,
}

impl UpstreamConfig {
    /// The pool settings.
    pub fn pool(&self) -> PoolSettings<'_> {
        PoolSettings {
            nodes: &self.nodes,
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
