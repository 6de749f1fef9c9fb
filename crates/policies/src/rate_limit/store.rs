//! Counters of a rate limiter, shared by all workers: 16 shards, each a mutex-guarded map, so
//! that decisions are exact under concurrency (no overshoot) and workers rarely meet on a lock.
//!
//! Memory is bounded: a shard holds at most `max_keys / 16` keys. When a shard is full, expired
//! entries are dropped first, then the tenth of entries closest to expiry — in one batch, so a
//! flood of distinct keys costs amortised O(1) per request.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::RateAlgorithm;

const SHARDS: usize = 16;

/// What requests are counted by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Key {
    /// A client address.
    Ip(IpAddr),
    /// Any other text (consumer, header value, expression).
    Text(Box<str>),
}

/// A key with its hash, computed once per request with the store's keyed (random) hasher: the
/// hash picks the shard and places the key in the shard's map.
#[derive(Debug, PartialEq, Eq)]
struct Hashed {
    hash: u64,
    key: Key,
}

impl Hash for Hashed {
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write_u64(self.hash);
    }
}

/// The hasher of a shard's map: passes the precomputed hash of a [`Hashed`] through.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used by `Hashed`; fold anything else in anyway.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type Shard = HashMap<Hashed, State, BuildHasherDefault<PassThrough>>;

#[derive(Debug, Clone, Copy)]
struct State {
    /// Fixed/sliding window: start of the current window. Token bucket: last refill.
    start: Instant,
    /// Requests counted in the current window, or tokens used (scaled by 1000).
    count: u64,
    /// Sliding window: requests of the previous window.
    previous: u64,
}

/// The verdict for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request may pass.
    pub allowed: bool,
    /// Requests left in the window.
    pub remaining: u64,
    /// Seconds until the window resets (or a token is available).
    pub reset_secs: u64,
}

/// A rate limiter's counters.
pub struct Store {
    shards: Vec<Mutex<Shard>>,
    hasher: std::collections::hash_map::RandomState,
    per_shard: usize,
    limit: u64,
    window: Duration,
    algorithm: RateAlgorithm,
}

impl Store {
    /// A store for `limit` requests per `window`, tracking at most `max_keys` keys.
    pub fn new(limit: u64, window: Duration, algorithm: RateAlgorithm, max_keys: usize) -> Self {
        Store {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            hasher: std::collections::hash_map::RandomState::new(),
            per_shard: (max_keys / SHARDS).max(1),
            limit,
            window,
            algorithm,
        }
    }

    /// Counts one request for `key` at `now` and says whether it may pass.
    pub fn hit(&self, key: Key, now: Instant) -> Decision {
        let hash = self.hasher.hash_one(&key);
        // Bits the map does not use: it takes the low bits for the bucket and the top 7 bits
        // as a tag, so the keys of a shard still spread over its whole table.
        let shard = ((hash >> 32) as usize) % SHARDS;
        let key = Hashed { hash, key };
        let Ok(mut map) = self.shards[shard].lock() else {
            // A poisoned lock means a panic elsewhere; fail open rather than block all traffic.
            return Decision {
                allowed: true,
                remaining: self.limit,
                reset_secs: 0,
            };
        };
        if map.len() >= self.per_shard && !map.contains_key(&key) {
            self.evict(&mut map, now);
        }
        let state = map.entry(key).or_insert(State {
            start: now,
            count: 0,
            previous: 0,
        });
        self.decide(state, now)
    }

    fn decide(&self, s: &mut State, now: Instant) -> Decision {
        let w = self.window;
        match self.algorithm {
            RateAlgorithm::FixedWindow | RateAlgorithm::SlidingWindow => {
                let elapsed = now.saturating_duration_since(s.start);
                if elapsed >= w {
                    let windows = (elapsed.as_nanos() / w.as_nanos().max(1)) as u32;
                    s.previous = if windows == 1 { s.count } else { 0 };
                    s.start += w * windows;
                    s.count = 0;
                }
                let into = now.saturating_duration_since(s.start);
                let reset_secs = (w - into.min(w)).as_secs_f64().ceil() as u64;
                let weighted_previous = if self.algorithm == RateAlgorithm::SlidingWindow {
                    let frac = 1.0 - into.as_secs_f64() / w.as_secs_f64().max(f64::MIN_POSITIVE);
                    (s.previous as f64 * frac).floor() as u64
                } else {
                    0
                };
                let used = s.count + weighted_previous;
                if used >= self.limit {
                    return Decision {
                        allowed: false,
                        remaining: 0,
                        reset_secs: reset_secs.max(1),
                    };
                }
                s.count += 1;
                Decision {
                    allowed: true,
                    remaining: self.limit - used - 1,
                    reset_secs,
                }
            }
            RateAlgorithm::TokenBucket => {
                // count = tokens used ×1000; refilled at limit per window.
                let scale = 1000u64;
                let capacity = self.limit * scale;
                let per_token = w.as_secs_f64() / self.limit.max(1) as f64;
                let refill = (now.saturating_duration_since(s.start).as_secs_f64() / per_token
                    * scale as f64) as u64;
                if refill > 0 {
                    s.count = s.count.saturating_sub(refill);
                    s.start = now;
                }
                if s.count + scale > capacity {
                    let missing = (s.count + scale - capacity) as f64 / scale as f64;
                    return Decision {
                        allowed: false,
                        remaining: 0,
                        reset_secs: (missing * per_token).ceil().max(1.0) as u64,
                    };
                }
                s.count += scale;
                let remaining = (capacity - s.count) / scale;
                Decision {
                    allowed: true,
                    remaining,
                    reset_secs: (s.count as f64 / scale as f64 * per_token).ceil() as u64,
                }
            }
        }
    }

    fn evict(&self, map: &mut Shard, now: Instant) {
        let horizon = self.window * 2;
        map.retain(|_, s| now.saturating_duration_since(s.start) < horizon);
        if map.len() < self.per_shard {
            return;
        }
        let mut starts: Vec<Instant> = map.values().map(|s| s.start).collect();
        let cut = (starts.len() / 10).max(1);
        starts.select_nth_unstable(cut - 1);
        let threshold = starts[cut - 1];
        let mut removed = 0;
        map.retain(|_, s| {
            if removed < cut && s.start <= threshold {
                removed += 1;
                false
            } else {
                true
            }
        });
    }

    /// Keys tracked now (for tests and metrics).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().map_or(0, |m| m.len()))
            .sum()
    }

    /// True when no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The configured limit.
    pub fn limit(&self) -> u64 {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> Key {
        Key::Text(s.into())
    }

    #[test]
    fn fixed_window_exact_and_resets() {
        let s = Store::new(3, Duration::from_secs(10), RateAlgorithm::FixedWindow, 1000);
        let t0 = Instant::now();
        let d: Vec<bool> = (0..5).map(|_| s.hit(key("a"), t0).allowed).collect();
        assert_eq!(d, [true, true, true, false, false]);
        assert!(s.hit(key("b"), t0).allowed, "keys are independent");
        let later = t0 + Duration::from_secs(10);
        let d = s.hit(key("a"), later);
        assert!(d.allowed);
        assert_eq!(d.remaining, 2);
    }

    #[test]
    fn sliding_window_weighs_the_previous_window() {
        let s = Store::new(
            10,
            Duration::from_secs(10),
            RateAlgorithm::SlidingWindow,
            1000,
        );
        let t0 = Instant::now();
        for _ in 0..10 {
            assert!(s.hit(key("a"), t0).allowed);
        }
        // Halfway into the next window, half of the previous window still counts.
        let mid = t0 + Duration::from_secs(15);
        let allowed = (0..10).filter(|_| s.hit(key("a"), mid).allowed).count();
        assert_eq!(allowed, 5);
    }

    #[test]
    fn token_bucket_refills_evenly() {
        let s = Store::new(
            10,
            Duration::from_secs(10),
            RateAlgorithm::TokenBucket,
            1000,
        );
        let t0 = Instant::now();
        assert_eq!((0..12).filter(|_| s.hit(key("a"), t0).allowed).count(), 10);
        let t1 = t0 + Duration::from_secs(3);
        assert_eq!((0..12).filter(|_| s.hit(key("a"), t1).allowed).count(), 3);
    }

    #[test]
    fn every_key_has_its_own_counter() {
        let s = Store::new(
            1,
            Duration::from_secs(60),
            RateAlgorithm::FixedWindow,
            100_000,
        );
        let t0 = Instant::now();
        let ips: Vec<Key> = (0..2000u32)
            .map(|i| Key::Ip(IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i))))
            .collect();
        assert!(ips.iter().all(|k| s.hit(k.clone(), t0).allowed));
        assert!(ips.iter().all(|k| !s.hit(k.clone(), t0).allowed));
        assert!(
            s.hit(key("10.0.0.0"), t0).allowed,
            "text keys are apart from IP keys"
        );
        assert_eq!(s.len(), 2001);
    }

    #[test]
    fn memory_is_bounded_under_a_key_flood() {
        let s = Store::new(5, Duration::from_secs(60), RateAlgorithm::FixedWindow, 1600);
        let t0 = Instant::now();
        for i in 0..100_000u32 {
            s.hit(Key::Text(i.to_string().into()), t0);
        }
        assert!(s.len() <= 1600, "{} keys kept", s.len());
    }

    #[test]
    fn exact_under_threads() {
        let s = std::sync::Arc::new(Store::new(
            50,
            Duration::from_secs(60),
            RateAlgorithm::FixedWindow,
            1000,
        ));
        let t0 = Instant::now();
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || (0..100).filter(|_| s.hit(key("k"), t0).allowed).count())
            })
            .collect();
        let total: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(total, 50);
    }
}
