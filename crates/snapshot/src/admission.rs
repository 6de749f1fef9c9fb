//! Admission to an upstream pool: a concurrency limit (fixed, or adaptive: it follows the
//! backend's latency) with fair queues in front of it. Requests that find the limit reached
//! wait in a queue of their client's key (a header, the consumer, the IP); the queues are
//! served round-robin (a key with weight `w` gets `w` turns in a row), so a client that sends
//! far more than its share waits behind itself, not in front of the others. A key whose queue
//! is full has its own new requests shed; when every queue together is full, the newest request
//! of the largest queue is shed; when requests have waited longer than the target delay for a
//! whole interval (CoDel's rule), each late hand-over sheds the requests of the largest queue
//! that have waited longer than the target, until hand-overs are on time again.
//!
//! One [`Admission`] per compiled upstream, shared by every worker (a mutex held for a few
//! instructions per request, only on upstreams that configure it). A request holds its
//! [`Permit`] until the backend's response head arrives (a streamed response body does not
//! hold a slot); the permit's drop gives the slot to the next queued request and, with an
//! adaptive limit, records the latency the limit follows.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use turnpike_telemetry::stats::{HistogramSum, BUCKETS};

/// How many requests may be in flight to the upstream.
#[derive(Debug, Clone, PartialEq)]
pub enum Limit {
    /// A fixed number.
    Fixed(u32),
    /// A gradient limit (as Envoy's adaptive concurrency): every `probe_interval` the limit is
    /// held at `min` for a few requests to measure the backend's latency without queueing
    /// (the median of those requests); between probes, the ratio of that latency times
    /// `tolerance` to the mean latency of the last window (clamped to 0.5..2) scales the limit,
    /// plus a headroom of √limit, so the limit shrinks when requests start to queue inside the
    /// backend and grows while they do not.
    Adaptive {
        /// The limit never goes below this.
        min: u32,
        /// Nor above this.
        max: u32,
        /// Where it starts.
        initial: u32,
        /// Latency growth tolerated before the limit shrinks (1.5: 50% more than the long-term
        /// latency).
        tolerance: f64,
        /// How much of each new estimate is taken (0 to 1).
        smoothing: f64,
        /// How often the latency without queueing is measured again.
        probe_interval: Duration,
    },
}

/// Why a request was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shed {
    /// Its key's queue was full (or, every queue together being full, its key's was the
    /// largest).
    QueueFull,
    /// The queueing delay stayed over the target for an interval, and its queue was the
    /// largest.
    Overloaded,
    /// It waited longer than the queue timeout.
    Timeout,
}

impl Shed {
    /// Every reason, in label order.
    pub const ALL: [Shed; 3] = [Shed::QueueFull, Shed::Overloaded, Shed::Timeout];

    /// The metric label and log word.
    pub fn label(self) -> &'static str {
        match self {
            Shed::QueueFull => "queue_full",
            Shed::Overloaded => "overloaded",
            Shed::Timeout => "timeout",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The compiled settings of an upstream's admission.
#[derive(Debug, Clone)]
pub struct AdmissionSettings {
    /// The concurrency limit.
    pub limit: Limit,
    /// What names a request's client, whose queue it waits in.
    pub key: turnpike_core::Template,
    /// Turns in a row per key (default 1).
    pub weights: HashMap<String, u32>,
    /// Requests one key may have waiting.
    pub max_queue_per_key: usize,
    /// Requests all keys together may have waiting.
    pub max_queue: usize,
    /// Longest wait in the queue.
    pub timeout: Duration,
    /// The queueing delay tolerated (CoDel's target).
    pub target_delay: Duration,
    /// How long the delay may stay over the target before the largest queue is shed (CoDel's
    /// interval).
    pub interval: Duration,
}

/// Counters of one upstream's admission, read by scrapes and the status.
#[derive(Debug, Default)]
pub struct AdmissionStats {
    /// Requests admitted at once.
    pub admitted_now: AtomicU64,
    /// Requests admitted after waiting.
    pub admitted_queued: AtomicU64,
    /// Requests shed, by [`Shed`] reason.
    pub shed: [AtomicU64; 3],
    /// Queue waits of admitted requests, by the bounds of the latency histograms
    /// (`turnpike_telemetry::stats::BUCKETS`; the last: above all).
    pub wait_buckets: [AtomicU64; BUCKETS.len() + 1],
    /// The sum of the queue waits, in microseconds.
    pub wait_sum_us: AtomicU64,
}

impl AdmissionStats {
    fn waited(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = BUCKETS
            .iter()
            .position(|&b| s <= b)
            .unwrap_or(BUCKETS.len());
        self.wait_buckets[i].fetch_add(1, Relaxed);
        self.wait_sum_us.fetch_add(d.as_micros() as u64, Relaxed);
    }

    /// Records a request shed for `why`.
    pub fn shed(&self, why: Shed) {
        self.shed[why.index()].fetch_add(1, Relaxed);
    }

    /// Requests shed for `why` so far.
    pub fn shed_count(&self, why: Shed) -> u64 {
        self.shed[why.index()].load(Relaxed)
    }

    /// The queue waits as a histogram for the exposition.
    pub fn waits(&self) -> HistogramSum {
        let mut h = HistogramSum::default();
        for (c, b) in h.counts.iter_mut().zip(&self.wait_buckets) {
            *c = b.load(Relaxed);
        }
        h.sum = self.wait_sum_us.load(Relaxed) as f64 / 1e6;
        h
    }
}

/// What the status and the metrics show of an admission now.
#[derive(Debug, Clone, PartialEq)]
pub struct AdmissionNow {
    /// The current limit.
    pub limit: u32,
    /// Requests in flight.
    pub in_flight: u32,
    /// Requests waiting.
    pub queued: usize,
    /// Keys with requests waiting.
    pub keys: usize,
}

/// One upstream's admission: its settings, queues and counters.
#[derive(Debug)]
pub struct Admission {
    /// The settings.
    pub settings: AdmissionSettings,
    /// The counters.
    pub stats: AdmissionStats,
    state: Mutex<State>,
    limit_now: AtomicU32,
}

/// A request waiting for a slot.
#[derive(Debug)]
struct Waiter {
    id: u64,
    since: Instant,
    tx: oneshot::Sender<Result<(), Shed>>,
}

/// One key's queue.
#[derive(Debug, Default)]
struct Flow {
    waiters: VecDeque<Waiter>,
    /// Turns taken in the current round.
    turns: u32,
    weight: u32,
}

#[derive(Debug)]
struct State {
    in_flight: u32,
    limit: f64,
    flows: HashMap<Arc<str>, Flow>,
    /// Keys with waiters, in service order.
    round: VecDeque<Arc<str>>,
    queued: usize,
    next_id: u64,
    /// Since when the delay has been over the target (CoDel).
    above_since: Option<Instant>,
    gradient: Gradient,
}

/// Requests measured by a probe of the latency without queueing.
const PROBE_SAMPLES: usize = 16;

/// The adaptive limit's measurements.
#[derive(Debug, Default)]
struct Gradient {
    window_sum: f64,
    window_n: u32,
    /// The latency without queueing, from the last probe.
    min_rtt: Option<f64>,
    /// While probing: the samples so far, the requests sent before the probe still to end
    /// (their latencies are not counted), and the limit to go back to.
    probe: Option<(Vec<f64>, u32, f64)>,
    next_probe: Option<Instant>,
}

/// A slot in the upstream's limit; dropping it frees the slot (and records the latency).
#[derive(Debug)]
pub struct Permit {
    admission: Arc<Admission>,
    start: Instant,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.admission.release(self.start.elapsed());
    }
}

/// A place in a queue: [`Ticket::admitted`] resolves when a slot is given to it or it is shed;
/// dropping it (the request timed out or went away) leaves the queue.
#[derive(Debug)]
pub struct Ticket {
    admission: Arc<Admission>,
    key: Arc<str>,
    id: u64,
    since: Instant,
    rx: Option<oneshot::Receiver<Result<(), Shed>>>,
}

impl Ticket {
    /// Waits for a slot; `Err` when the request was shed while it waited.
    pub async fn admitted(mut self) -> Result<Permit, Shed> {
        let outcome = match self.rx.as_mut() {
            Some(rx) => rx.await.unwrap_or(Err(Shed::Overloaded)),
            None => Err(Shed::Overloaded),
        };
        // Resolved: out of the queue, and the answer taken.
        self.id = u64::MAX;
        self.rx = None;
        match outcome {
            Ok(()) => {
                let stats = &self.admission.stats;
                stats.admitted_queued.fetch_add(1, Relaxed);
                stats.waited(self.since.elapsed());
                Ok(Permit {
                    admission: Arc::clone(&self.admission),
                    start: Instant::now(),
                })
            }
            Err(why) => {
                self.admission.stats.shed(why);
                Err(why)
            }
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.id == u64::MAX {
            return;
        }
        self.admission.leave(&self.key, self.id);
        // A slot given between the last poll and now goes to the next request.
        if let Some(Ok(Ok(()))) = self.rx.as_mut().map(|rx| rx.try_recv()) {
            let mut s = self.admission.state();
            s.in_flight = s.in_flight.saturating_sub(1);
            self.admission.dispatch(&mut s);
        }
    }
}

/// The answer to a request's arrival.
#[derive(Debug)]
pub enum Admit {
    /// A slot was free.
    Now(Permit),
    /// It waits in its key's queue.
    Queued(Ticket),
}

impl Admission {
    /// A new admission with nothing in flight.
    pub fn new(settings: AdmissionSettings) -> Arc<Admission> {
        let limit = match settings.limit {
            Limit::Fixed(n) => n,
            Limit::Adaptive { initial, .. } => initial,
        };
        Arc::new(Admission {
            settings,
            stats: AdmissionStats::default(),
            state: Mutex::new(State {
                in_flight: 0,
                limit: f64::from(limit),
                flows: HashMap::new(),
                round: VecDeque::new(),
                queued: 0,
                next_id: 0,
                above_since: None,
                gradient: Gradient::default(),
            }),
            limit_now: AtomicU32::new(limit),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current limit, requests in flight and waiting.
    pub fn now(&self) -> AdmissionNow {
        let s = self.state();
        AdmissionNow {
            limit: self.limit_now.load(Relaxed),
            in_flight: s.in_flight,
            queued: s.queued,
            keys: s.round.len(),
        }
    }

    /// A request of client `key` arrives: a slot now, a place in `key`'s queue, or shed
    /// (`key`'s queue is full).
    pub fn arrive(self: &Arc<Self>, key: &str) -> Result<Admit, Shed> {
        let mut s = self.state();
        if s.queued == 0 && s.in_flight < s.limit_slots() {
            s.in_flight += 1;
            drop(s);
            self.stats.admitted_now.fetch_add(1, Relaxed);
            return Ok(Admit::Now(Permit {
                admission: Arc::clone(self),
                start: Instant::now(),
            }));
        }
        let mine = s.flows.get(key).map_or(0, |f| f.waiters.len());
        if mine >= self.settings.max_queue_per_key {
            drop(s);
            self.stats.shed(Shed::QueueFull);
            return Err(Shed::QueueFull);
        }
        if s.queued >= self.settings.max_queue {
            // Every queue together is full: the largest gives up its newest request, unless
            // it is this key's own.
            match s.largest() {
                Some(k) if s.flows.get(&k).map_or(0, |f| f.waiters.len()) > mine + 1 => {
                    s.shed_from(&k, false, Shed::QueueFull, &self.stats);
                }
                _ => {
                    drop(s);
                    self.stats.shed(Shed::QueueFull);
                    return Err(Shed::QueueFull);
                }
            }
        }
        let key: Arc<str> = match s.flows.get_key_value(key) {
            Some((k, _)) => Arc::clone(k),
            None => Arc::from(key),
        };
        let (tx, rx) = oneshot::channel();
        let id = s.next_id;
        s.next_id += 1;
        let since = Instant::now();
        let weight = self
            .settings
            .weights
            .get(&*key)
            .copied()
            .unwrap_or(1)
            .max(1);
        let flow = s.flows.entry(Arc::clone(&key)).or_insert_with(|| Flow {
            weight,
            ..Flow::default()
        });
        let was_empty = flow.waiters.is_empty();
        flow.waiters.push_back(Waiter { id, since, tx });
        if was_empty {
            s.round.push_back(Arc::clone(&key));
        }
        s.queued += 1;
        // A slot may have freed while the queue was not empty.
        self.dispatch(&mut s);
        Ok(Admit::Queued(Ticket {
            admission: Arc::clone(self),
            key,
            id,
            since,
            rx: Some(rx),
        }))
    }

    /// A queued request gives up its place (it timed out or its client went away).
    fn leave(&self, key: &str, id: u64) {
        let mut s = self.state();
        let Some(flow) = s.flows.get_mut(key) else {
            return;
        };
        let Some(i) = flow.waiters.iter().position(|w| w.id == id) else {
            return;
        };
        flow.waiters.remove(i);
        let empty = flow.waiters.is_empty();
        s.queued -= 1;
        if empty {
            s.forget(key);
        }
    }

    /// A request ends after `rtt`: its slot goes to the next queued request.
    fn release(&self, rtt: Duration) {
        let mut s = self.state();
        s.in_flight = s.in_flight.saturating_sub(1);
        if let Some(limit) = s.sample(rtt, Instant::now(), &self.settings.limit) {
            self.limit_now.store(limit as u32, Relaxed);
        }
        self.dispatch(&mut s);
    }

    /// Gives free slots to queued requests, round-robin over the keys, shedding from the
    /// largest queue while the queueing delay stays over the target.
    fn dispatch(&self, s: &mut State) {
        let now = Instant::now();
        while s.in_flight < s.limit_slots() && s.queued > 0 {
            let Some(key) = s.round.front().cloned() else {
                break;
            };
            let Some(flow) = s.flows.get_mut(&key) else {
                s.round.pop_front();
                continue;
            };
            let Some(w) = flow.waiters.pop_front() else {
                s.forget(&key);
                continue;
            };
            flow.turns += 1;
            let (rotate, empty) = (flow.turns >= flow.weight, flow.waiters.is_empty());
            s.queued -= 1;
            if empty {
                s.forget(&key);
            } else if rotate {
                if let Some(f) = s.flows.get_mut(&key) {
                    f.turns = 0;
                }
                s.round.rotate_left(1);
            }
            let delay = now.saturating_duration_since(w.since);
            if delay > self.settings.target_delay {
                self.shed_while_late(s, now);
            } else {
                s.above_since = None;
            }
            if w.tx.send(Ok(())).is_ok() {
                s.in_flight += 1;
            }
        }
    }
}

impl Admission {
    /// CoDel's rule on a request handed a slot late: once the delay has been over the target
    /// for a whole interval, the largest queue gives up every request that has waited longer
    /// than the target (oldest first), at each late hand-over, until hand-overs are on time
    /// again. The delay stays near the target however far arrivals exceed what the backend
    /// serves, and the shedding falls on the clients with the most waiting.
    fn shed_while_late(&self, s: &mut State, now: Instant) {
        let Some(since) = s.above_since else {
            s.above_since = Some(now);
            return;
        };
        if now.saturating_duration_since(since) < self.settings.interval {
            return;
        }
        let Some(k) = s.largest() else {
            return;
        };
        let Some(cutoff) = now.checked_sub(self.settings.target_delay) else {
            return;
        };
        while s
            .flows
            .get(&k)
            .and_then(|f| f.waiters.front())
            .is_some_and(|w| w.since <= cutoff)
        {
            s.shed_from(&k, true, Shed::Overloaded, &self.stats);
        }
    }
}

impl State {
    fn limit_slots(&self) -> u32 {
        (self.limit as u32).max(1)
    }

    /// The key with the most waiters.
    fn largest(&self) -> Option<Arc<str>> {
        self.flows
            .iter()
            .filter(|(_, f)| !f.waiters.is_empty())
            .max_by_key(|(_, f)| f.waiters.len())
            .map(|(k, _)| Arc::clone(k))
    }

    /// Sheds one waiter of `key`'s queue: its oldest (`oldest`) or newest.
    fn shed_from(&mut self, key: &str, oldest: bool, why: Shed, stats: &AdmissionStats) {
        let Some(flow) = self.flows.get_mut(key) else {
            return;
        };
        let w = if oldest {
            flow.waiters.pop_front()
        } else {
            flow.waiters.pop_back()
        };
        let empty = flow.waiters.is_empty();
        if let Some(w) = w {
            self.queued -= 1;
            // Counted by the ticket when it learns; a ticket already gone is counted here.
            if w.tx.send(Err(why)).is_err() {
                stats.shed(why);
            }
        }
        if empty {
            self.forget(key);
        }
    }

    /// Drops an empty key from the queues and the round.
    fn forget(&mut self, key: &str) {
        self.flows.remove(key);
        if let Some(i) = self.round.iter().position(|k| &**k == key) {
            self.round.remove(i);
        }
    }

    /// Adds a latency sample (of a request that ended at `now`); returns the limit when it
    /// moved.
    fn sample(&mut self, rtt: Duration, now: Instant, limit: &Limit) -> Option<f64> {
        let Limit::Adaptive {
            min,
            max,
            tolerance,
            smoothing,
            probe_interval,
            ..
        } = *limit
        else {
            return None;
        };
        let (min, max) = (f64::from(min), f64::from(max));
        let rtt = rtt.as_secs_f64();
        let in_flight = self.in_flight;
        let g = &mut self.gradient;
        if let Some((samples, skip, resume)) = &mut g.probe {
            if *skip > 0 {
                *skip -= 1;
                return None;
            }
            samples.push(rtt);
            if samples.len() < PROBE_SAMPLES {
                return None;
            }
            samples.sort_by(f64::total_cmp);
            g.min_rtt = Some(samples[samples.len() / 2]);
            self.limit = *resume;
            g.probe = None;
            g.next_probe = Some(now + probe_interval);
            g.window_sum = 0.0;
            g.window_n = 0;
            return Some(self.limit);
        }
        if g.next_probe.is_none_or(|t| now >= t) {
            // Hold the limit at its minimum until the requests sent before have ended and
            // enough have been measured alone.
            g.probe = Some((Vec::with_capacity(PROBE_SAMPLES), in_flight, self.limit));
            self.limit = min;
            return Some(min);
        }
        g.window_sum += rtt;
        g.window_n += 1;
        // A window is as many samples as the limit (at least 10): one round of slots.
        if f64::from(g.window_n) < self.limit.max(10.0) {
            return None;
        }
        let sampled = g.window_sum / f64::from(g.window_n);
        g.window_sum = 0.0;
        g.window_n = 0;
        let base = g.min_rtt?;
        if sampled <= 0.0 {
            return None;
        }
        let gradient = (tolerance * base / sampled).clamp(0.5, 2.0);
        let estimate = self.limit * gradient + self.limit.sqrt();
        let next = (self.limit * (1.0 - smoothing) + estimate * smoothing).clamp(min, max);
        self.limit = next;
        Some(next)
    }
}

#[cfg(test)]
mod tests;
