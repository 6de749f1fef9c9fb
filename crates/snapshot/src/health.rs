//! A node's health, shared by every worker of the process and kept across reloads: what the
//! active prober and the passive checks on real traffic decided, and the settings they follow.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

/// Milliseconds since the process started: the clock of ejections.
pub fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// The longest a node stays ejected, however often it was ejected.
pub const MAX_EJECTION: Duration = Duration::from_secs(300);

/// A node's health, shared by the workers of the process and kept across reloads.
#[derive(Debug)]
pub struct NodeState {
    /// The active check's verdict (true until a check says otherwise).
    healthy: AtomicBool,
    /// Until when (in [`now_ms`]) passive checks took the node out; 0 when they did not.
    ejected_until: AtomicU64,
    /// Failures of real traffic in a row.
    failures: AtomicU32,
    /// Ejections in a row (an ejection doubles the next one's length).
    ejections: AtomicU32,
    /// Probes in a row with the same verdict, for the active check's thresholds (positive:
    /// successes, negative: failures).
    streak: std::sync::atomic::AtomicI32,
}

impl Default for NodeState {
    fn default() -> Self {
        NodeState {
            healthy: AtomicBool::new(true),
            ejected_until: AtomicU64::new(0),
            failures: AtomicU32::new(0),
            ejections: AtomicU32::new(0),
            streak: std::sync::atomic::AtomicI32::new(0),
        }
    }
}

impl NodeState {
    /// The state of the node with this key: the one a snapshot in use already has, or a new
    /// one.
    pub fn shared(key: &str) -> Arc<NodeState> {
        static STATES: Mutex<Option<HashMap<String, Weak<NodeState>>>> = Mutex::new(None);
        let mut states = STATES.lock().unwrap_or_else(|e| e.into_inner());
        let states = states.get_or_insert_with(HashMap::new);
        states.retain(|_, w| w.strong_count() > 0);
        if let Some(s) = states.get(key).and_then(Weak::upgrade) {
            return s;
        }
        let s = Arc::new(NodeState::default());
        states.insert(key.to_owned(), Arc::downgrade(&s));
        s
    }

    /// True when the node may take requests at `now` (in [`now_ms`]).
    pub fn usable(&self, now: u64) -> bool {
        self.healthy.load(Ordering::Relaxed) && self.ejected_until.load(Ordering::Relaxed) <= now
    }

    /// The active check's verdict.
    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// True while passive checks keep the node out.
    pub fn ejected(&self, now: u64) -> bool {
        self.ejected_until.load(Ordering::Relaxed) > now
    }

    /// A request to the node succeeded.
    pub fn succeeded(&self) {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
        if self.ejections.load(Ordering::Relaxed) != 0 && !self.ejected(now_ms()) {
            self.ejections.store(0, Ordering::Relaxed);
        }
    }

    /// A request to the node failed; with passive checks, the node is ejected when the failures
    /// in a row reach the threshold and `may_eject` (the pool's share of ejected nodes allows
    /// it). Returns true when this failure ejected it.
    pub fn failed(&self, passive: Option<&Passive>, may_eject: impl FnOnce() -> bool) -> bool {
        let n = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        let Some(p) = passive else {
            return false;
        };
        if n < p.consecutive_failures || !may_eject() {
            return false;
        }
        self.failures.store(0, Ordering::Relaxed);
        let times = self.ejections.fetch_add(1, Ordering::Relaxed).min(16);
        let length = p.eject_for.saturating_mul(1u32 << times).min(MAX_EJECTION);
        self.ejected_until
            .store(now_ms() + length.as_millis() as u64, Ordering::Relaxed);
        true
    }

    /// An active probe's result; returns the node's verdict after it. A healthy verdict also
    /// ends a passive ejection (the node answers again).
    pub fn probed(&self, ok: bool, check: &ActiveCheck) -> bool {
        let streak = self.streak.load(Ordering::Relaxed);
        let streak = match (ok, streak) {
            (true, s) if s > 0 => s.saturating_add(1),
            (true, _) => 1,
            (false, s) if s < 0 => s.saturating_sub(1),
            (false, _) => -1,
        };
        self.streak.store(streak, Ordering::Relaxed);
        let healthy = self.healthy.load(Ordering::Relaxed);
        if !healthy && streak >= check.healthy_threshold as i32 {
            self.healthy.store(true, Ordering::Relaxed);
        } else if healthy && -streak >= check.unhealthy_threshold as i32 {
            self.healthy.store(false, Ordering::Relaxed);
        }
        if ok && self.ejected(now_ms()) && streak >= check.healthy_threshold as i32 {
            self.ejected_until.store(0, Ordering::Relaxed);
            self.failures.store(0, Ordering::Relaxed);
        }
        self.healthy.load(Ordering::Relaxed)
    }
}

/// Probes sent to every node.
#[derive(Debug, Clone)]
pub struct ActiveCheck {
    /// Path probed with GET.
    pub path: String,
    /// Time between probes of a node.
    pub interval: Duration,
    /// Time a probe may take.
    pub timeout: Duration,
    /// Successes in a row that make a node healthy.
    pub healthy_threshold: u32,
    /// Failures in a row that make a node unhealthy.
    pub unhealthy_threshold: u32,
    /// Statuses that count as success, as inclusive ranges.
    pub expect: Vec<(u16, u16)>,
}

impl ActiveCheck {
    /// True when `status` counts as success.
    pub fn expects(&self, status: u16) -> bool {
        self.expect.iter().any(|&(a, b)| (a..=b).contains(&status))
    }
}

/// Ejection by failures of real traffic.
#[derive(Debug, Clone)]
pub struct Passive {
    /// Failures in a row that eject a node.
    pub consecutive_failures: u32,
    /// Response statuses that count as failures.
    pub failure_status: Vec<u16>,
    /// Length of a first ejection.
    pub eject_for: Duration,
    /// The most nodes out at once, in percent of the pool.
    pub max_ejected_percent: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check() -> ActiveCheck {
        ActiveCheck {
            path: "/health".into(),
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            healthy_threshold: 2,
            unhealthy_threshold: 3,
            expect: vec![(200, 399)],
        }
    }

    #[test]
    fn active_thresholds_flip_the_verdict() {
        let s = NodeState::default();
        let c = check();
        assert!(s.probed(false, &c) && s.probed(false, &c));
        assert!(!s.probed(false, &c), "three failures make it unhealthy");
        assert!(!s.probed(true, &c), "one success is not enough");
        assert!(s.probed(true, &c), "two are");
    }

    #[test]
    fn passive_ejections_double_and_end() {
        let s = NodeState::default();
        let p = Passive {
            consecutive_failures: 2,
            failure_status: vec![502],
            eject_for: Duration::from_millis(100),
            max_ejected_percent: 100,
        };
        let now = now_ms();
        assert!(!s.failed(Some(&p), || true));
        assert!(s.failed(Some(&p), || true));
        assert!(!s.usable(now_ms()));
        let first = s.ejected_until.load(Ordering::Relaxed) - now;
        assert!((90..=200).contains(&first), "{first}");
        s.failed(Some(&p), || true);
        s.failed(Some(&p), || true);
        let second = s.ejected_until.load(Ordering::Relaxed) - now_ms();
        assert!(second >= 150, "the second ejection is longer: {second}");
        std::thread::sleep(Duration::from_millis(250));
        assert!(s.usable(now_ms()));
        // Not when the pool may not lose one more node.
        let t = NodeState::default();
        t.failed(Some(&p), || false);
        assert!(!t.failed(Some(&p), || false));
        assert!(t.usable(now_ms()));
    }
}
