//! The Redis store of a rate limiter: one limit for a whole fleet of gateways.
//!
//! - `exact`: every request runs one Lua script in Redis (fixed window, sliding window or token
//!   bucket, the same algorithms as the local store, with windows on Redis's clock), so the
//!   total admitted across gateways never exceeds the limit. Each worker has its own
//!   multiplexed connection (concurrent requests are pipelined on it), which reconnects with
//!   backoff.
//! - `local-sync`: requests are counted locally against the last count read from Redis; every
//!   `syncInterval` the local counts are added in Redis (one pipelined round trip) and the
//!   totals read back. Far fewer round trips; between two syncs each gateway may admit what it
//!   sees as left, so the fleet admits at most `limit + (gateways − 1) × (what one gateway
//!   admits in one interval)` per window. Fixed windows only, on the gateways' clocks.
//!
//! Keys are `turnpike:rl:<limiter>:{<key>}:<window>`: namespaced by the limiter's place in the
//! configuration and its settings (two limiters never share a counter), with the client key as
//! the cluster hash tag, and they expire after two windows. When Redis fails or is slower than
//! `timeout`, `onError` decides: `allow` (fail open) or `deny` (503); each such decision is
//! counted (`turnpike_ratelimit_store_errors_total`) and logged at most every 10 s.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use sha2::{Digest, Sha256};

use super::redis_server::{spawn_background, Conn, Server};
use super::store::Decision;
use super::RateAlgorithm;

/// What happens to a request when Redis fails or is late.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    /// Let it through (fail open).
    Allow,
    /// Refuse it with 503 (fail closed).
    Deny,
}

/// How counts reach Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One script per request.
    Exact,
    /// Local counts, synced every interval.
    LocalSync(Duration),
}

const FIXED: &str = r#"
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local limit = tonumber(ARGV[1])
local w = tonumber(ARGV[2])
local idx = math.floor(now / w)
local key = KEYS[1] .. ':' .. idx
local reset = w - (now % w)
local n = tonumber(redis.call('GET', key) or '0')
if n >= limit then
  return {0, 0, reset}
end
n = redis.call('INCR', key)
if n == 1 then redis.call('PEXPIRE', key, w * 2) end
return {1, limit - n, reset}
"#;

const SLIDING: &str = r#"
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local limit = tonumber(ARGV[1])
local w = tonumber(ARGV[2])
local idx = math.floor(now / w)
local cur = KEYS[1] .. ':' .. idx
local prev = KEYS[1] .. ':' .. (idx - 1)
local into = now % w
local c = tonumber(redis.call('GET', cur) or '0')
local p = tonumber(redis.call('GET', prev) or '0')
local weighted = math.floor(p * (1 - into / w))
local reset = w - into
if c + weighted >= limit then
  return {0, 0, reset}
end
c = redis.call('INCR', cur)
if c == 1 then redis.call('PEXPIRE', cur, w * 2) end
return {1, limit - c - weighted, reset}
"#;

const BUCKET: &str = r#"
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local limit = tonumber(ARGV[1])
local w = tonumber(ARGV[2])
local per = w / limit
local s = redis.call('HMGET', KEYS[1], 'used', 'at')
local used = tonumber(s[1] or '0')
local at = tonumber(s[2] or tostring(now))
used = math.max(0, used - (now - at) / per)
if used + 1 > limit then
  redis.call('HSET', KEYS[1], 'used', tostring(used), 'at', tostring(now))
  redis.call('PEXPIRE', KEYS[1], w * 2)
  return {0, 0, math.ceil((used + 1 - limit) * per)}
end
used = used + 1
redis.call('HSET', KEYS[1], 'used', tostring(used), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], w * 2)
return {1, math.floor(limit - used), math.ceil(used * per)}
"#;

/// A rate limiter's Redis store.
pub struct RedisStore {
    id: u64,
    server: Arc<Server>,
    /// `turnpike:rl:<limiter>:`.
    prefix: String,
    timeout: Duration,
    on_error: OnError,
    mode: Mode,
    limit: u64,
    window_ms: u64,
    script: Arc<redis::Script>,
    /// local-sync: counts per key.
    local: Mutex<HashMap<String, Local>>,
    /// local-sync: the sync thread, started with the first request.
    syncing: OnceLock<()>,
    /// local-sync: when a sync last succeeded (ms since the epoch; 0: never).
    last_sync: AtomicU64,
    /// When a Redis failure was last logged.
    logged: Mutex<Option<Instant>>,
    /// Set when the store is dropped (stops the sync thread).
    stopped: Arc<std::sync::atomic::AtomicBool>,
    /// When the store was made (ms since the epoch).
    created_ms: u64,
}

#[derive(Debug, Clone, Copy)]
struct Local {
    window: u64,
    /// The fleet's count for `window` at the last sync.
    seen: u64,
    /// Admitted here since then.
    pending: u64,
    /// Pushed by a sync in flight.
    pushing: u64,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// Each worker's connections, per store, with their generation ([`Server::generation`]).
    static CONNS: RefCell<HashMap<u64, (u64, Conn)>> = RefCell::new(HashMap::new());
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl RedisStore {
    /// A store; `namespace` identifies the limiter (its place and settings).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        server: Server,
        namespace: &str,
        timeout: Duration,
        on_error: OnError,
        mode: Mode,
        limit: u64,
        window: Duration,
        algorithm: RateAlgorithm,
    ) -> RedisStore {
        let digest = Sha256::digest(namespace.as_bytes());
        let ns: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        let script = match algorithm {
            RateAlgorithm::FixedWindow => FIXED,
            RateAlgorithm::SlidingWindow => SLIDING,
            RateAlgorithm::TokenBucket => BUCKET,
        };
        RedisStore {
            id: NEXT_ID.fetch_add(1, Relaxed),
            server: Arc::new(server),
            prefix: format!("turnpike:rl:{ns}:"),
            timeout,
            on_error,
            mode,
            limit,
            window_ms: window.as_millis().max(1) as u64,
            script: Arc::new(redis::Script::new(script)),
            local: Mutex::new(HashMap::new()),
            syncing: OnceLock::new(),
            last_sync: AtomicU64::new(0),
            logged: Mutex::new(None),
            stopped: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            created_ms: now_ms(),
        }
    }

    /// How long a request may wait for Redis.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The store's mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The Redis key of a client key (the key as the hash tag; hashed when it could break the
    /// tag or is long).
    pub fn key(&self, client_key: &str) -> String {
        if client_key.len() > 64 || client_key.contains(['{', '}']) {
            let d = Sha256::digest(client_key.as_bytes());
            let hex: String = d[..16].iter().map(|b| format!("{b:02x}")).collect();
            format!("{}{{h:{hex}}}", self.prefix)
        } else {
            format!("{}{{{client_key}}}", self.prefix)
        }
    }

    /// exact: asks Redis about one request for `key` (already a Redis key). The future uses
    /// this worker's connection (made on first use, and again after a Sentinel failover).
    pub fn ask(
        &self,
        key: String,
    ) -> impl std::future::Future<Output = redis::RedisResult<Decision>> + 'static {
        let id = self.id;
        let cached = CONNS.with(|c| c.borrow().get(&id).cloned());
        let server = Arc::clone(&self.server);
        let script = Arc::clone(&self.script);
        let (limit, window, timeout) = (self.limit, self.window_ms, self.timeout);
        async move {
            let mut conn = match cached.filter(|(g, _)| *g == server.generation()) {
                Some((_, conn)) => conn,
                None => {
                    let (generation, conn) = server.connect(timeout).await?;
                    CONNS.with(|c| c.borrow_mut().insert(id, (generation, conn.clone())));
                    conn
                }
            };
            let answer: redis::RedisResult<(i64, i64, i64)> = script
                .key(key)
                .arg(limit)
                .arg(window)
                .invoke_async(&mut conn)
                .await;
            let (allowed, remaining, reset_ms) = answer.inspect_err(|_| server.failed())?;
            Ok(Decision {
                allowed: allowed == 1,
                remaining: remaining.max(0) as u64,
                reset_secs: (reset_ms.max(0) as u64).div_ceil(1000).max(1),
            })
        }
    }

    /// local-sync: decides locally for `key`; `None` when Redis has not been reached for too
    /// long (then `onError` decides).
    pub fn decide_local(self: &Arc<Self>, key: String) -> Option<Decision> {
        let Mode::LocalSync(interval) = self.mode else {
            return None;
        };
        self.syncing.get_or_init(|| self.start_sync(interval));
        let now = now_ms();
        let window = now / self.window_ms;
        let reset_secs = (self.window_ms - now % self.window_ms)
            .div_ceil(1000)
            .max(1);
        // Without a recent sync, the count is a guess: `onError` decides, unless the guess
        // is only starting (the first sync of this store is under way).
        let last = self.last_sync.load(Relaxed);
        let stale = interval * 3 + self.timeout;
        let since = if last == 0 { self.created_ms } else { last };
        if now.saturating_sub(since) > stale.as_millis() as u64 {
            return None;
        }
        let mut map = self.local.lock().unwrap_or_else(|e| e.into_inner());
        let e = map.entry(key).or_insert(Local {
            window,
            seen: 0,
            pending: 0,
            pushing: 0,
        });
        if e.window != window {
            *e = Local {
                window,
                seen: 0,
                pending: 0,
                pushing: 0,
            };
        }
        let used = e.seen + e.pending + e.pushing;
        if used >= self.limit {
            return Some(Decision {
                allowed: false,
                remaining: 0,
                reset_secs,
            });
        }
        e.pending += 1;
        Some(Decision {
            allowed: true,
            remaining: self.limit - used - 1,
            reset_secs,
        })
    }

    fn start_sync(self: &Arc<Self>, interval: Duration) {
        let weak = Arc::downgrade(self);
        let stopped = Arc::clone(&self.stopped);
        spawn_background("turnpike-ratelimit-sync", move || async move {
            let mut conn: Option<(u64, Conn)> = None;
            while !stopped.load(Relaxed) {
                let Some(store) = weak.upgrade() else { return };
                if conn
                    .as_ref()
                    .is_none_or(|(g, _)| *g != store.server.generation())
                {
                    conn = tokio::time::timeout(
                        store.timeout.max(Duration::from_millis(200)),
                        store.server.connect(store.timeout),
                    )
                    .await
                    .ok()
                    .and_then(Result::ok);
                }
                if let Some((_, c)) = conn.as_mut() {
                    if let Err(e) = store.sync_once(c).await {
                        store.server.failed();
                        store.failed(&e);
                    }
                }
                drop(store);
                tokio::time::sleep(interval).await;
            }
        });
    }

    /// One sync: adds the local counts in Redis and reads the fleet's totals back (one pipeline;
    /// on a cluster, one per key, since a pipeline's keys must share a slot, sent together).
    async fn sync_once(&self, conn: &mut Conn) -> Result<(), String> {
        let now = now_ms();
        let window = now / self.window_ms;
        let batch: Vec<(String, u64, u64)> = {
            let mut map = self.local.lock().unwrap_or_else(|e| e.into_inner());
            map.retain(|_, e| e.window + 1 >= window);
            map.iter_mut()
                .filter(|(_, e)| e.window == window)
                .map(|(k, e)| {
                    e.pushing += e.pending;
                    let n = e.pending;
                    e.pending = 0;
                    (k.clone(), e.window, n)
                })
                .collect()
        };
        let pipeline = |items: &[(String, u64, u64)]| {
            let mut pipe = redis::pipe();
            for (k, w, n) in items {
                let key = format!("{k}:{w}");
                pipe.cmd("INCRBY").arg(&key).arg(*n);
                pipe.cmd("PEXPIRE")
                    .arg(&key)
                    .arg(self.window_ms * 2)
                    .ignore();
            }
            pipe
        };
        let send = async {
            if self.server.is_cluster() {
                let mut tasks = tokio::task::JoinSet::new();
                for (i, item) in batch.iter().enumerate() {
                    let (pipe, mut conn) = (pipeline(std::slice::from_ref(item)), conn.clone());
                    tasks.spawn(async move {
                        let totals: redis::RedisResult<Vec<u64>> =
                            pipe.query_async(&mut conn).await;
                        (i, totals)
                    });
                }
                let mut totals = vec![0; batch.len()];
                while let Some(done) = tasks.join_next().await {
                    let (i, t) = done.map_err(|e| {
                        redis::RedisError::from((redis::ErrorKind::Io, "sync task", e.to_string()))
                    })?;
                    totals[i] = t?.first().copied().unwrap_or(0);
                }
                Ok(totals)
            } else {
                pipeline(&batch).query_async(conn).await
            }
        };
        let result: Result<Vec<u64>, String> = if batch.is_empty() {
            Ok(Vec::new())
        } else {
            match tokio::time::timeout(self.timeout.max(Duration::from_millis(200)), send).await {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("timed out".into()),
            }
        };
        let mut map = self.local.lock().unwrap_or_else(|e| e.into_inner());
        match result {
            Ok(totals) => {
                for ((k, w, n), total) in batch.iter().zip(totals) {
                    if let Some(e) = map.get_mut(k).filter(|e| e.window == *w) {
                        e.pushing = e.pushing.saturating_sub(*n);
                        e.seen = total;
                    }
                }
                self.last_sync.store(now_ms(), Relaxed);
                Ok(())
            }
            Err(msg) => {
                // Not pushed: the counts go back to pending for the next sync.
                for (k, w, n) in &batch {
                    if let Some(e) = map.get_mut(k).filter(|e| e.window == *w) {
                        e.pushing = e.pushing.saturating_sub(*n);
                        e.pending += n;
                    }
                }
                Err(msg)
            }
        }
    }

    /// Records (and logs, at most every 10 s) a failure of Redis.
    pub fn failed(&self, why: &dyn std::fmt::Display) {
        let mut logged = self.logged.lock().unwrap_or_else(|e| e.into_inner());
        if logged.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
            *logged = Some(Instant::now());
            tracing::warn!(
                "rate limit store: Redis failed ({why}); requests are {} until it answers",
                match self.on_error {
                    OnError::Allow => "allowed",
                    OnError::Deny => "refused",
                }
            );
        }
    }

    /// What `onError` says.
    pub fn on_error(&self) -> OnError {
        self.on_error
    }
}

impl Drop for RedisStore {
    fn drop(&mut self) {
        self.stopped.store(true, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_namespaced_and_tagged() {
        let client = redis::Client::open("redis://127.0.0.1:1/").unwrap();
        let s = RedisStore::new(
            Server::Single(client.clone()),
            "api a|flow[0].rateLimiter|settings",
            Duration::from_millis(50),
            OnError::Allow,
            Mode::Exact,
            10,
            Duration::from_secs(1),
            RateAlgorithm::FixedWindow,
        );
        let other = RedisStore::new(
            Server::Single(client),
            "api b|flow[0].rateLimiter|settings",
            Duration::from_millis(50),
            OnError::Allow,
            Mode::Exact,
            10,
            Duration::from_secs(1),
            RateAlgorithm::FixedWindow,
        );
        let k = s.key("10.0.0.1");
        assert!(
            k.starts_with("turnpike:rl:") && k.ends_with(":{10.0.0.1}"),
            "{k}"
        );
        assert_ne!(k, other.key("10.0.0.1"), "limiters never share a counter");
        let odd = s.key("a{b}c");
        assert!(odd.contains("{h:") && !odd.contains("a{b"), "{odd}");
    }
}
