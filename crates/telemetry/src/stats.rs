//! Per-worker counters. A counter is an `AtomicU64` that only its worker writes (a load and a
//! store, no locked instruction) and that scrapes read; each worker's counters of one object
//! sit in their own 128-byte-aligned block, so workers never write the same cache line.
//!
//! Objects (an API's counters, a node's, a listener's) come from process-wide registries keyed
//! by their configuration name, so that a reload that keeps a name keeps its counters (scrapes
//! see monotonic counters). An object no snapshot holds any more is forgotten at the next
//! scrape.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Upper bounds of the latency histograms, in seconds.
pub const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The methods counted by name; any other is `OTHER`.
pub const METHODS: [&str; 8] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "OTHER",
];

/// Status classes.
pub const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// How a try to a node ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A response below 500.
    Ok,
    /// A 5xx response.
    ServerError,
    /// No connection.
    ConnectError,
    /// Reset or closed before a response head.
    Reset,
    /// No response head in time.
    Timeout,
    /// Anything else (an invalid response).
    Error,
}

impl Outcome {
    /// Every outcome, in label order.
    pub const ALL: [Outcome; 6] = [
        Outcome::Ok,
        Outcome::ServerError,
        Outcome::ConnectError,
        Outcome::Reset,
        Outcome::Timeout,
        Outcome::Error,
    ];

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::ServerError => "5xx",
            Outcome::ConnectError => "connect_error",
            Outcome::Reset => "reset",
            Outcome::Timeout => "timeout",
            Outcome::Error => "error",
        }
    }
}

/// The index of a method in [`METHODS`].
pub fn method_index(m: &str) -> usize {
    METHODS[..7].iter().position(|x| *x == m).unwrap_or(7)
}

/// The index of a status in [`CLASSES`] (clamped).
pub fn class_index(status: u16) -> usize {
    (usize::from(status / 100)).clamp(1, 5) - 1
}

/// A counter written by one worker.
#[derive(Debug, Default)]
pub struct Cell(AtomicU64);

impl Cell {
    /// Adds `n` (only the owning worker calls this).
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(self.0.load(Relaxed).wrapping_add(n), Relaxed);
    }

    /// The value.
    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// A gauge written by one worker (may go below zero per worker; the sum does not).
#[derive(Debug, Default)]
pub struct Level(AtomicU64);

impl Level {
    /// Adds one.
    #[inline]
    pub fn inc(&self) {
        self.0.store(self.0.load(Relaxed).wrapping_add(1), Relaxed);
    }

    /// Takes one away.
    #[inline]
    pub fn dec(&self) {
        self.0.store(self.0.load(Relaxed).wrapping_sub(1), Relaxed);
    }

    /// The value as a signed number.
    pub fn get(&self) -> i64 {
        self.0.load(Relaxed) as i64
    }
}

/// A latency histogram of one worker: counts per bucket (not cumulative), the sum in
/// microseconds, and the last traced observation per bucket (the exemplar).
#[derive(Debug, Default)]
pub struct Histogram {
    counts: [Cell; BUCKETS.len() + 1],
    sum_us: Cell,
    exemplars: Mutex<Vec<Option<Exemplar>>>,
}

/// A traced observation: its trace id, value and time.
#[derive(Debug, Clone, PartialEq)]
pub struct Exemplar {
    /// W3C trace id, 32 hex digits.
    pub trace_id: String,
    /// The observed value in seconds.
    pub value: f64,
    /// When (seconds since the Unix epoch).
    pub at: f64,
}

impl Histogram {
    /// Records one observation; with `trace_id`, it becomes its bucket's exemplar.
    #[inline]
    pub fn observe(&self, d: Duration, trace_id: Option<&str>) {
        let secs = d.as_secs_f64();
        let i = BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(BUCKETS.len());
        self.counts[i].add(1);
        self.sum_us.add(d.as_micros() as u64);
        if let Some(t) = trace_id {
            let mut ex = self.exemplars.lock().unwrap_or_else(|e| e.into_inner());
            if ex.is_empty() {
                ex.resize(BUCKETS.len() + 1, None);
            }
            ex[i] = Some(Exemplar {
                trace_id: t.to_owned(),
                value: secs,
                at: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64()),
            });
        }
    }

    fn add_into(&self, sum: &mut HistogramSum) {
        for (i, c) in self.counts.iter().enumerate() {
            sum.counts[i] += c.get();
        }
        sum.sum += self.sum_us.get() as f64 / 1e6;
        let ex = self.exemplars.lock().unwrap_or_else(|e| e.into_inner());
        for (i, e) in ex.iter().enumerate() {
            if let Some(e) = e {
                let newer = sum.exemplars[i].as_ref().is_none_or(|o| o.at < e.at);
                if newer {
                    sum.exemplars[i] = Some(e.clone());
                }
            }
        }
    }
}

/// A histogram summed over workers.
#[derive(Debug, Clone, Default)]
pub struct HistogramSum {
    /// Counts per bucket (the last is above every bound), not cumulative.
    pub counts: [u64; BUCKETS.len() + 1],
    /// Sum of observations in seconds.
    pub sum: f64,
    /// Newest exemplar per bucket.
    pub exemplars: [Option<Exemplar>; BUCKETS.len() + 1],
}

impl HistogramSum {
    /// The number of observations.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

#[repr(align(128))]
#[derive(Debug, Default)]
struct Padded<T>(T);

fn workers() -> usize {
    WORKERS.load(Relaxed).max(1)
}

static WORKERS: AtomicUsize = AtomicUsize::new(1);

/// Sets the number of workers (before the first object is made; objects made later by the
/// registries have one block per worker).
pub fn set_workers(n: usize) {
    WORKERS.store(n.max(1), Relaxed);
}

fn per_worker<T: Default>() -> Box<[Padded<T>]> {
    (0..workers()).map(|_| Padded::default()).collect()
}

/// The counters of one API.
#[derive(Debug)]
pub struct ApiStats {
    /// The API's name.
    pub name: Arc<str>,
    cells: Box<[Padded<ApiCells>]>,
}

#[derive(Debug, Default)]
struct ApiCells {
    requests: [[Cell; 5]; 8],
    duration: Histogram,
    /// Rejections by (policy, problem kind): rarer than requests, behind a lock nobody else
    /// takes on the hot path.
    rejections: Mutex<HashMap<(&'static str, &'static str), u64>>,
}

impl ApiStats {
    /// Records a request: method, final status, time from its head to its response head, and
    /// the trace id when it was traced.
    #[inline]
    pub fn request(
        &self,
        worker: usize,
        method: usize,
        status: u16,
        d: Duration,
        trace: Option<&str>,
    ) {
        let Some(c) = self.cells.get(worker) else {
            return;
        };
        c.0.requests[method.min(7)][class_index(status)].add(1);
        c.0.duration.observe(d, trace);
    }

    /// Records that `policy` refused a request with a problem of `kind`.
    pub fn rejection(&self, worker: usize, policy: &'static str, kind: &'static str) {
        let Some(c) = self.cells.get(worker) else {
            return;
        };
        let mut m = c.0.rejections.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry((policy, kind)).or_default() += 1;
    }

    /// Requests by method and status class, summed over workers.
    pub fn requests(&self) -> [[u64; 5]; 8] {
        let mut out = [[0u64; 5]; 8];
        for c in self.cells.iter() {
            for (m, row) in c.0.requests.iter().enumerate() {
                for (s, cell) in row.iter().enumerate() {
                    out[m][s] += cell.get();
                }
            }
        }
        out
    }

    /// The latency histogram, summed.
    pub fn duration(&self) -> HistogramSum {
        let mut sum = HistogramSum::default();
        for c in self.cells.iter() {
            c.0.duration.add_into(&mut sum);
        }
        sum
    }

    /// Rejections by policy and problem kind, summed.
    pub fn rejections(&self) -> Vec<((&'static str, &'static str), u64)> {
        let mut all: HashMap<(&'static str, &'static str), u64> = HashMap::new();
        for c in self.cells.iter() {
            let m = c.0.rejections.lock().unwrap_or_else(|e| e.into_inner());
            for (k, v) in m.iter() {
                *all.entry(*k).or_default() += v;
            }
        }
        let mut v: Vec<_> = all.into_iter().collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }
}

/// The counters of one upstream.
#[derive(Debug)]
pub struct UpstreamStats {
    /// The upstream's name.
    pub name: Arc<str>,
    cells: Box<[Padded<UpstreamCells>]>,
}

#[derive(Debug, Default)]
struct UpstreamCells {
    duration: Histogram,
    retries: Cell,
}

impl UpstreamStats {
    /// Records one try's time to its response head (or failure).
    #[inline]
    pub fn attempt(&self, worker: usize, d: Duration) {
        if let Some(c) = self.cells.get(worker) {
            c.0.duration.observe(d, None);
        }
    }

    /// Records a retry.
    pub fn retry(&self, worker: usize) {
        if let Some(c) = self.cells.get(worker) {
            c.0.retries.add(1);
        }
    }

    /// Retries, summed.
    pub fn retries(&self) -> u64 {
        self.cells.iter().map(|c| c.0.retries.get()).sum()
    }

    /// Try latency, summed.
    pub fn duration(&self) -> HistogramSum {
        let mut sum = HistogramSum::default();
        for c in self.cells.iter() {
            c.0.duration.add_into(&mut sum);
        }
        sum
    }
}

/// The counters of one node of an upstream.
#[derive(Debug)]
pub struct NodeStats {
    /// The upstream's name.
    pub upstream: Arc<str>,
    /// The node's label (`host:port`).
    pub node: Arc<str>,
    cells: Box<[Padded<[Cell; 6]>]>,
    /// Times passive checks ejected the node (any thread).
    ejections: AtomicU64,
}

impl NodeStats {
    /// Records a try's outcome.
    #[inline]
    pub fn outcome(&self, worker: usize, o: Outcome) {
        if let Some(c) = self.cells.get(worker) {
            c.0[o as usize].add(1);
        }
    }

    /// Records an ejection (rare: a shared atomic).
    pub fn ejected(&self) {
        self.ejections.fetch_add(1, Relaxed);
    }

    /// Tries by outcome, summed.
    pub fn outcomes(&self) -> [u64; 6] {
        let mut out = [0u64; 6];
        for c in self.cells.iter() {
            for (i, cell) in c.0.iter().enumerate() {
                out[i] += cell.get();
            }
        }
        out
    }

    /// Ejections so far.
    pub fn ejections(&self) -> u64 {
        self.ejections.load(Relaxed)
    }
}

/// The counters of one listening address.
#[derive(Debug)]
pub struct ListenerStats {
    /// The configured address.
    pub addr: Arc<str>,
    cells: Box<[Padded<ListenerCells>]>,
}

#[derive(Debug, Default)]
struct ListenerCells {
    accepted: Cell,
    open: [Level; 3],
    handshakes: Cell,
    handshake_failures: Cell,
}

/// The protocols of a connection.
pub const PROTOCOLS: [&str; 3] = ["http1", "h2", "h2c"];

impl ListenerStats {
    /// A connection was accepted.
    #[inline]
    pub fn accepted(&self, worker: usize) {
        if let Some(c) = self.cells.get(worker) {
            c.0.accepted.add(1);
        }
    }

    /// A connection speaking protocol `p` (index in [`PROTOCOLS`]) opens (`true`) or closes.
    #[inline]
    pub fn open(&self, worker: usize, p: usize, opens: bool) {
        if let Some(c) = self.cells.get(worker) {
            if opens {
                c.0.open[p.min(2)].inc();
            } else {
                c.0.open[p.min(2)].dec();
            }
        }
    }

    /// A TLS handshake ended.
    pub fn handshake(&self, worker: usize, ok: bool) {
        if let Some(c) = self.cells.get(worker) {
            c.0.handshakes.add(1);
            if !ok {
                c.0.handshake_failures.add(1);
            }
        }
    }

    /// Connections accepted, summed.
    pub fn accepted_total(&self) -> u64 {
        self.cells.iter().map(|c| c.0.accepted.get()).sum()
    }

    /// Connections open per protocol, summed.
    pub fn open_now(&self) -> [i64; 3] {
        let mut out = [0i64; 3];
        for c in self.cells.iter() {
            for (i, l) in c.0.open.iter().enumerate() {
                out[i] += l.get();
            }
        }
        out
    }

    /// TLS handshakes and failures, summed.
    pub fn handshakes(&self) -> (u64, u64) {
        self.cells.iter().fold((0, 0), |(a, b), c| {
            (a + c.0.handshakes.get(), b + c.0.handshake_failures.get())
        })
    }
}

/// Process-wide state: reloads, the configuration revision, spans dropped.
#[derive(Debug, Default)]
pub struct Process {
    /// Reloads applied.
    pub reloads_ok: AtomicU64,
    /// Reloads refused.
    pub reloads_failed: AtomicU64,
    /// The configuration revision.
    pub revision: AtomicU64,
    /// Trace spans dropped because the export queue was full.
    pub spans_dropped: AtomicU64,
    /// Trace spans exported.
    pub spans_exported: AtomicU64,
    /// Access log lines dropped because a worker's buffer for the log writer was full.
    pub log_lines_dropped: AtomicU64,
    /// Requests let through because a rate limiter's Redis failed (`onError: allow`).
    pub ratelimit_store_allowed: AtomicU64,
    /// Requests refused because a rate limiter's Redis failed (`onError: deny`).
    pub ratelimit_store_denied: AtomicU64,
    /// Messages the SOAP fast paths left to libxml2 (or to a tree), per reason (in the order
    /// of [`SOAP_FAST_MISS_REASONS`]).
    pub soap_fast_misses: [AtomicU64; SOAP_FAST_MISS_REASONS.len()],
}

/// The reasons the SOAP fast paths give for leaving a message to the full path, as metric
/// labels.
pub const SOAP_FAST_MISS_REASONS: [&str; 9] = [
    "markup",
    "envelope",
    "operation",
    "not-compiled",
    "structure",
    "value",
    "attribute",
    "text",
    "conversion",
];

/// The process-wide state.
pub fn process() -> &'static Process {
    static P: OnceLock<Process> = OnceLock::new();
    P.get_or_init(Process::default)
}

/// A registry of objects by name.
struct Registry<K, V> {
    map: Mutex<Option<HashMap<K, Arc<V>>>>,
}

impl<K: std::hash::Hash + Eq + Clone, V> Registry<K, V> {
    const fn new() -> Self {
        Registry {
            map: Mutex::new(None),
        }
    }
}

impl<K: std::hash::Hash + Eq + Clone + Ord, V> Registry<K, V> {
    fn get(&self, key: K, make: impl FnOnce() -> V) -> Arc<V> {
        let mut m = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let m = m.get_or_insert_with(HashMap::new);
        Arc::clone(m.entry(key).or_insert_with(|| Arc::new(make())))
    }

    /// The objects some snapshot still holds, in key order; the others are forgotten.
    fn live(&self) -> Vec<Arc<V>> {
        let mut m = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let m = m.get_or_insert_with(HashMap::new);
        m.retain(|_, v| Arc::strong_count(v) > 1);
        let mut v: Vec<(K, Arc<V>)> = m.iter().map(|(k, v)| (k.clone(), Arc::clone(v))).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v.into_iter().map(|(_, v)| v).collect()
    }
}

static APIS: Registry<String, ApiStats> = Registry::new();
static UPSTREAMS: Registry<String, UpstreamStats> = Registry::new();
static NODES: Registry<(String, String), NodeStats> = Registry::new();
static LISTENERS: Registry<String, ListenerStats> = Registry::new();

/// The counters of the API named `name`.
pub fn api(name: &str) -> Arc<ApiStats> {
    APIS.get(name.to_owned(), || ApiStats {
        name: name.into(),
        cells: per_worker(),
    })
}

/// The counters of the upstream named `name`.
pub fn upstream(name: &str) -> Arc<UpstreamStats> {
    UPSTREAMS.get(name.to_owned(), || UpstreamStats {
        name: name.into(),
        cells: per_worker(),
    })
}

/// The counters of node `node` of upstream `upstream`.
pub fn node(upstream: &str, node: &str) -> Arc<NodeStats> {
    NODES.get((upstream.to_owned(), node.to_owned()), || NodeStats {
        upstream: upstream.into(),
        node: node.into(),
        cells: per_worker(),
        ejections: AtomicU64::new(0),
    })
}

/// The counters of the listening address `addr` (as configured).
pub fn listener(addr: &str) -> Arc<ListenerStats> {
    LISTENERS.get(addr.to_owned(), || ListenerStats {
        addr: addr.into(),
        cells: per_worker(),
    })
}

/// Every API's counters in use.
pub fn apis() -> Vec<Arc<ApiStats>> {
    APIS.live()
}

/// Every upstream's counters in use.
pub fn upstreams() -> Vec<Arc<UpstreamStats>> {
    UPSTREAMS.live()
}

/// Every node's counters in use.
pub fn nodes() -> Vec<Arc<NodeStats>> {
    NODES.live()
}

/// Every listener's counters in use.
pub fn listeners() -> Vec<Arc<ListenerStats>> {
    LISTENERS.live()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes() {
        assert_eq!(method_index("GET"), 0);
        assert_eq!(method_index("PATCH"), 5);
        assert_eq!(method_index("BREW"), 7);
        assert_eq!(class_index(200), 1);
        assert_eq!(class_index(599), 4);
        assert_eq!(class_index(101), 0);
        assert_eq!(class_index(0), 0);
        assert_eq!(class_index(999), 4);
    }

    #[test]
    fn counters_sum_over_workers_and_histograms_bucket() {
        set_workers(2);
        let a = api("stats-test");
        a.request(0, 0, 200, Duration::from_micros(300), None);
        a.request(
            1,
            0,
            204,
            Duration::from_millis(3),
            Some("0af7651916cd43dd8448eb211c80319c"),
        );
        a.request(1, method_index("POST"), 503, Duration::from_secs(20), None);
        a.request(7, 0, 200, Duration::ZERO, None); // no such worker: ignored
        let r = a.requests();
        assert_eq!(r[0][1], 2);
        assert_eq!(r[2][4], 1);
        let h = a.duration();
        assert_eq!(h.count(), 3);
        assert_eq!(h.counts[0], 1); // ≤ 0.5 ms
        assert_eq!(h.counts[3], 1); // ≤ 5 ms
        assert_eq!(h.counts[BUCKETS.len()], 1); // above 10 s
        assert!((h.sum - 20.0033).abs() < 1e-9, "{}", h.sum);
        assert_eq!(
            h.exemplars[3].as_ref().unwrap().trace_id,
            "0af7651916cd43dd8448eb211c80319c"
        );
        a.rejection(0, "apiKey", "unauthorized");
        a.rejection(1, "apiKey", "unauthorized");
        assert_eq!(a.rejections(), vec![(("apiKey", "unauthorized"), 2)]);
        // The same name gives the same counters; unused ones are forgotten.
        assert!(Arc::ptr_eq(&a, &api("stats-test")));
        assert!(apis().iter().any(|x| &*x.name == "stats-test"));
        drop(a);
        // Another test's scrape may hold it for a moment.
        let gone = (0..100).any(|_| {
            let gone = !apis().iter().any(|x| &*x.name == "stats-test");
            std::thread::sleep(Duration::from_millis(5));
            gone
        });
        assert!(gone);
    }

    #[test]
    fn gauges_may_dip_per_worker_but_not_in_sum() {
        set_workers(2);
        let l = listener("127.0.0.1:1");
        l.open(0, 0, true);
        l.open(1, 0, false);
        l.open(1, 1, true);
        assert_eq!(l.open_now(), [0, 1, 0]);
    }
}
