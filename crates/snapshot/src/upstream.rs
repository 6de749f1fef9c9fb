//! Upstreams: an API's target as a pool of nodes, with how a node is chosen, when a node is
//! taken out (health), when a request is tried again, and when the pool refuses more. The
//! compiler builds them; the data plane balances over them with per-worker counters, and reads
//! and writes the nodes' shared health ([`NodeState`]), which a reload keeps for nodes that stay.

use arc_swap::ArcSwap;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use turnpike_core::Template;

pub use crate::health::{now_ms, ActiveCheck, NodeState, Passive, MAX_EJECTION};
pub use crate::target::ConnLimits;
use crate::target::Node;

/// How a node is chosen for a request.
#[derive(Debug)]
pub enum Balance {
    /// Smooth weighted round robin.
    RoundRobin,
    /// The less busy of two nodes drawn at random (in-flight requests per weight).
    LeastRequests,
    /// Weighted random.
    Random,
    /// Consistent hashing of a template's value over a ring of points (each node has
    /// [`RING_POINTS`] points per unit of weight; a key goes to the first usable node at or
    /// after its hash).
    Hash {
        /// What is hashed.
        key: Template,
        /// (point, node index), sorted by point.
        ring: Vec<(u64, u16)>,
    },
}

/// Points a node has on a hash ring per unit of weight.
pub const RING_POINTS: u32 = 160;

/// The 64-bit FNV-1a hash of `bytes` (ring points and keys).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // Mix the high bits down: FNV's low bits are weak for short, similar keys.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

/// The ring of `nodes` (their labels and weights) for [`Balance::Hash`].
pub fn hash_ring(nodes: &[(&str, u32)]) -> Vec<(u64, u16)> {
    let mut ring = Vec::new();
    for (i, (label, weight)) in nodes.iter().enumerate() {
        for p in 0..RING_POINTS * weight.max(&1) {
            ring.push((fnv1a(format!("{label}#{p}").as_bytes()), i as u16));
        }
    }
    ring.sort_unstable();
    ring
}

/// Trying a failed request again.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Further tries after the first.
    pub attempts: u32,
    /// Connect failures are tried again.
    pub on_connect_failure: bool,
    /// Connections reset (or closed) before a response head are tried again.
    pub on_reset: bool,
    /// A try without a response head within its timeout is tried again.
    pub on_timeout: bool,
    /// Responses with these statuses are tried again.
    pub on_status: Vec<u16>,
    /// The methods tried again.
    pub methods: Vec<Method>,
    /// Time each try may take for its response head.
    pub per_try_timeout: Option<Duration>,
    /// The share of requests retries may add.
    pub budget: f64,
    /// Request bodies up to this size are held for sending again.
    pub max_body_size: u64,
}

/// The limits and counters of a circuit breaker (counters shared by every worker).
#[derive(Debug, Default)]
pub struct Breaker {
    /// Most requests in flight.
    pub max_requests: Option<u32>,
    /// Requests in flight now.
    pub requests: AtomicU32,
    /// The connection limits, which the nodes' transports check when they open a connection.
    pub connections: Arc<ConnLimits>,
}

/// An upstream: a pool of nodes and how requests are spread over them.
#[derive(Debug)]
pub struct Upstream {
    /// Unique per compiled upstream (the key of each worker's balancing counters).
    pub id: u64,
    /// The `upstream:` document's name, or the API's, for logs and metrics.
    pub name: Arc<str>,
    /// The nodes.
    pub nodes: Vec<Node>,
    /// How a node is chosen.
    pub balance: Balance,
    /// Active checks.
    pub active: Option<ActiveCheck>,
    /// Passive checks.
    pub passive: Option<Passive>,
    /// Below this share of usable nodes, every node is used (0: never).
    pub panic_threshold: f64,
    /// Retries.
    pub retries: Option<RetryPolicy>,
    /// Connect timeout (default: the gateway's).
    pub connect_timeout: Option<Duration>,
    /// Response-head timeout (default: the gateway's).
    pub response_timeout: Option<Duration>,
    /// Idle time of pooled connections (default: the gateway's).
    pub idle_timeout: Option<Duration>,
    /// The circuit breaker.
    pub breaker: Option<Breaker>,
    /// A concurrency limit with fair queues in front of it.
    pub admission: Option<Arc<crate::admission::Admission>>,
    /// How often host names are looked up again.
    pub dns_refresh: Duration,
    /// The sum of the nodes' weights.
    pub total_weight: u32,
    /// Its counters (tries' latency, retries).
    pub stats: Arc<turnpike_telemetry::stats::UpstreamStats>,
}

impl Upstream {
    /// True when passive checks may take one more node out at `now` (`maxEjectedPercent`).
    pub fn may_eject(&self, now: u64) -> bool {
        let Some(p) = &self.passive else {
            return false;
        };
        let out = self.nodes.iter().filter(|n| n.state.ejected(now)).count();
        (out + 1) * 100 <= self.nodes.len() * p.max_ejected_percent as usize
    }
}

/// An API's target: its upstream, and whether `Host` becomes the node's authority.
#[derive(Debug, Clone)]
pub struct Target {
    /// The pool of nodes (shared with every API that names the same `upstream:`).
    pub upstream: Arc<Upstream>,
    /// Rewrite `Host` to the node's authority.
    pub adjust_host: bool,
    /// What the request is sent to on the node.
    pub path: TargetPath,
    /// The method requests are sent with, instead of the client's.
    pub method: Option<http::Method>,
    /// For a pool whose nodes change at run time (a `balancer`'s): where the current pool is;
    /// `upstream` is then the pool as loaded, whose settings every later pool shares.
    pub live: Option<Arc<LivePool>>,
}

/// The path and query a target sends requests to.
#[derive(Debug, Clone)]
pub enum TargetPath {
    /// The node's base path joined with the request's path and query (a target without a path:
    /// `host`/`port`, a `url` without a path or with `/`, upstream nodes).
    Join,
    /// Always this path and query: a target `url` with a path, as Membrane sends it.
    Exact(http::uri::PathAndQuery),
    /// The path and query of a target `url` with `${…}` expressions, rendered per request.
    Template(turnpike_core::Template),
}

impl Target {
    /// The first node (the only one of a target written as `url` or `host`).
    pub fn first(&self) -> &Node {
        &self.upstream.nodes[0]
    }
}

/// A pool whose nodes can be replaced at run time: Membrane's `balancer` clusters, whose nodes
/// register and leave over HTTP (`clusterNotification`) between reloads.
///
/// The rest of a snapshot never changes, and a pool of it is no exception: a change of nodes
/// builds a whole new [`Upstream`] (off the request path, where the change is made) and swaps it
/// in atomically. A request loads the current pool once, without a lock (an atomic reference
/// count), and balances over that pool to its end, retries included; requests that started
/// before a swap finish on the pool they loaded. Nothing on the request path waits for a change.
pub struct LivePool {
    current: ArcSwap<Upstream>,
}

impl std::fmt::Debug for LivePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let current = self.current.load();
        f.debug_struct("LivePool")
            .field("name", &current.name)
            .field("nodes", &current.nodes.len())
            .finish()
    }
}

impl LivePool {
    /// Runs at load time: a live pool starting with `up`.
    pub fn new(up: Upstream) -> LivePool {
        LivePool {
            current: ArcSwap::from_pointee(up),
        }
    }

    /// Runs once per forwarded request: the pool as it is now (lock-free), which the request
    /// keeps to its end.
    pub fn current(&self) -> Arc<Upstream> {
        self.current.load_full()
    }

    /// Runs when the nodes change (never on the request path): `up` takes the place of the
    /// current pool for the requests that start from now on.
    pub fn replace(&self, up: Upstream) {
        self.current.store(Arc::new(up));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_limits_say_which_is_exceeded() {
        use std::sync::atomic::Ordering::Relaxed;
        let l = ConnLimits {
            max_open: Some(2),
            max_pending: Some(1),
            ..ConnLimits::default()
        };
        assert_eq!(l.exceeded(), None);
        l.pending.store(1, Relaxed);
        assert_eq!(l.exceeded(), Some("requests waiting for a connection"));
        l.open.store(2, Relaxed);
        assert_eq!(l.exceeded(), Some("connections"));
        l.open.store(1, Relaxed);
        l.pending.store(0, Relaxed);
        assert_eq!(l.exceeded(), None);
        assert_eq!(ConnLimits::default().exceeded(), None);
    }

    #[test]
    fn a_ring_moves_only_the_keys_of_a_node_that_leaves() {
        let three = hash_ring(&[("a", 1), ("b", 1), ("c", 1)]);
        let two = hash_ring(&[("a", 1), ("b", 1)]);
        let find = |ring: &[(u64, u16)], k: u64| {
            let i = ring.partition_point(|&(p, _)| p < k) % ring.len();
            ring[i].1
        };
        let mut moved = 0;
        let mut per = [0u32; 3];
        for k in 0..3000u32 {
            let h = fnv1a(&k.to_le_bytes());
            let before = find(&three, h);
            per[before as usize] += 1;
            if before != 2 && find(&two, h) != before {
                moved += 1;
            }
        }
        assert_eq!(moved, 0, "keys of the nodes that stay never move");
        assert!(per.iter().all(|&n| (800..=1200).contains(&n)), "{per:?}");
    }
}
