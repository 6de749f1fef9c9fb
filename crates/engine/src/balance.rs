//! Choosing a node of an upstream for a request, with each worker's own counters (no lock or
//! shared cache line on the hot path): smooth weighted round robin, least requests (the less
//! busy of two random draws), weighted random, and consistent hashing over the upstream's ring.
//! Nodes out by health are skipped; below the upstream's panic threshold every node is used.
//! Also the worker's retry budget.

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Instant;

use smallvec::SmallVec;
use turnpike_core::Exchange;
use turnpike_snapshot::upstream::{fnv1a, now_ms, Balance, Upstream};

/// Retries allowed per second whatever the budget.
const MIN_RETRIES_PER_SECOND: f64 = 3.0;
/// The most retries a worker can save up.
const MAX_RETRY_TOKENS: f64 = 100.0;

/// One worker's counters for one upstream.
struct Counters {
    /// Smooth round robin's current weights.
    current: Vec<i64>,
    /// Requests in flight per node (for least requests).
    in_flight: Vec<u32>,
    /// Retries the budget allows now.
    tokens: f64,
    /// When `tokens` last grew with time.
    refilled: Instant,
    /// Unused since the last sweep (removed at the next one).
    idle: bool,
}

/// A worker's balancing state, per upstream (by its id).
#[derive(Default)]
pub struct Balancers {
    upstreams: RefCell<HashMap<u64, Counters>>,
    /// xorshift state for the random strategies.
    rng: std::cell::Cell<u64>,
}

/// Why no node could be chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoNode {
    /// Health took every node out.
    NoneHealthy,
    /// Every node was tried already.
    AllTried,
}

impl Balancers {
    fn random(&self) -> u64 {
        let mut x = self.rng.get();
        if x == 0 {
            x = (now_ms() ^ 0x9E37_79B9_7F4A_7C15) | 1;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.set(x);
        x
    }

    fn with<R>(&self, up: &Upstream, f: impl FnOnce(&mut Counters) -> R) -> R {
        let mut map = self.upstreams.borrow_mut();
        let c = map.entry(up.id).or_insert_with(|| Counters {
            current: vec![0; up.nodes.len()],
            in_flight: vec![0; up.nodes.len()],
            tokens: MAX_RETRY_TOKENS.min(10.0),
            refilled: Instant::now(),
            idle: false,
        });
        c.idle = false;
        f(c)
    }

    /// Chooses a node of `up` for `ex`, not one of `tried`.
    pub fn pick(&self, up: &Upstream, ex: &Exchange, tried: &[usize]) -> Result<usize, NoNode> {
        let n = up.nodes.len();
        let now = now_ms();
        if n == 1 {
            return match (tried.is_empty(), up.nodes[0].state.usable(now)) {
                (false, _) => Err(NoNode::AllTried),
                (true, true) => Ok(0),
                (true, false) => Err(NoNode::NoneHealthy),
            };
        }
        let healthy: SmallVec<[bool; 8]> = up.nodes.iter().map(|d| d.state.usable(now)).collect();
        let usable = healthy.iter().filter(|h| **h).count();
        if usable == 0 {
            return Err(NoNode::NoneHealthy);
        }
        // Below the panic threshold, balance over every node as if all were healthy.
        let panic = (usable as f64) < up.panic_threshold * n as f64;
        let candidates: SmallVec<[usize; 8]> = (0..n)
            .filter(|i| (panic || healthy[*i]) && !tried.contains(i))
            .collect();
        if candidates.is_empty() {
            return Err(NoNode::AllTried);
        }
        if candidates.len() == 1 {
            return Ok(candidates[0]);
        }
        Ok(match &up.balance {
            Balance::RoundRobin => self.with(up, |c| {
                let mut total = 0i64;
                let mut best = candidates[0];
                for &i in &candidates {
                    let w = i64::from(up.nodes[i].weight);
                    c.current[i] += w;
                    total += w;
                    if c.current[i] > c.current[best] {
                        best = i;
                    }
                }
                c.current[best] -= total;
                best
            }),
            Balance::Random => self.weighted(up, &candidates),
            Balance::LeastRequests => {
                let a = self.weighted(up, &candidates);
                let b = self.weighted(up, &candidates);
                self.with(up, |c| {
                    // Fewer in flight per unit of weight wins: a·wb < b·wa.
                    let load = |i: usize| u64::from(c.in_flight[i]);
                    let w = |i: usize| u64::from(up.nodes[i].weight);
                    if load(b) * w(a) < load(a) * w(b) {
                        b
                    } else {
                        a
                    }
                })
            }
            Balance::Hash { key, ring } => {
                let h = fnv1a(key.render(ex).as_bytes());
                let start = ring.partition_point(|&(p, _)| p < h);
                (0..ring.len())
                    .map(|k| usize::from(ring[(start + k) % ring.len()].1))
                    .find(|i| candidates.contains(i))
                    .unwrap_or(candidates[0])
            }
        })
    }

    /// A weighted random draw among `candidates`.
    fn weighted(&self, up: &Upstream, candidates: &[usize]) -> usize {
        let total: u64 = candidates
            .iter()
            .map(|&i| u64::from(up.nodes[i].weight))
            .sum();
        let mut r = self.random() % total.max(1);
        for &i in candidates {
            let w = u64::from(up.nodes[i].weight);
            if r < w {
                return i;
            }
            r -= w;
        }
        candidates[candidates.len() - 1]
    }

    /// A request to node `i` of `up` starts (least requests counts it) and ends.
    pub fn started(&self, up: &Upstream, i: usize) {
        if matches!(up.balance, Balance::LeastRequests) {
            self.with(up, |c| c.in_flight[i] += 1);
        }
    }

    /// See [`Balancers::started`].
    pub fn finished(&self, up: &Upstream, i: usize) {
        if matches!(up.balance, Balance::LeastRequests) {
            self.with(up, |c| c.in_flight[i] = c.in_flight[i].saturating_sub(1));
        }
    }

    /// A request that may be retried arrives: the budget grows by its share.
    pub fn budget_request(&self, up: &Upstream, share: f64) {
        self.with(up, |c| c.tokens = (c.tokens + share).min(MAX_RETRY_TOKENS));
    }

    /// Takes one retry from the budget, if it allows one.
    pub fn take_retry(&self, up: &Upstream) -> bool {
        self.with(up, |c| {
            let elapsed = c.refilled.elapsed().as_secs_f64();
            if elapsed > 0.0 {
                c.tokens = (c.tokens + elapsed * MIN_RETRIES_PER_SECOND).min(MAX_RETRY_TOKENS);
                c.refilled = Instant::now();
            }
            if c.tokens >= 1.0 {
                c.tokens -= 1.0;
                true
            } else {
                false
            }
        })
    }

    /// Drops the counters of upstreams no request used since the last sweep (those of an old
    /// configuration).
    pub fn sweep(&self) {
        let mut map = self.upstreams.borrow_mut();
        map.retain(|_, c| !c.idle);
        for c in map.values_mut() {
            c.idle = true;
        }
    }
}
