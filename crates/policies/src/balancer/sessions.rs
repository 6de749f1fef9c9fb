//! A balancer's session table: which node each session id is bound to, and when the session
//! was last used. Shared by every worker: 16 shards, each a mutex-guarded map held for one
//! lookup or insertion (as the rate limiter's counters are). Sessions unused for longer than
//! the balancer's `sessionTimeout` are gone. Memory is bounded: a shard holds at most
//! [`MAX_SESSIONS`]` / 16` sessions; a full shard drops its expired sessions, then its least
//! recently used one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// The most sessions a balancer keeps.
pub const MAX_SESSIONS: usize = 100_000;

const SHARDS: usize = 16;

/// Milliseconds since the first session was seen: the table's clock.
pub(crate) fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

#[derive(Debug)]
struct Bound {
    node: Arc<str>,
    used: u64,
}

/// The session table (see the module documentation).
pub(crate) struct Sessions {
    shards: Vec<Mutex<HashMap<String, Bound>>>,
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }
}

/// True when a session last used at `used` is over at `now` (`timeout` in milliseconds;
/// `None`: never).
fn expired(used: u64, now: u64, timeout: Option<u64>) -> bool {
    timeout.is_some_and(|t| now.saturating_sub(used) > t)
}

impl Sessions {
    fn shard(&self, id: &str) -> &Mutex<HashMap<String, Bound>> {
        // FNV-1a: the shard only spreads the ids (each shard's map hashes them again).
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in id.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        &self.shards[(h % SHARDS as u64) as usize]
    }

    /// Runs on a request with session id `id`: the node the session is bound to, marking it
    /// used at `now`; `None` when there is no such session (or it expired).
    pub(crate) fn node(&self, id: &str, now: u64, timeout: Option<u64>) -> Option<Arc<str>> {
        let mut shard = self.shard(id).lock().unwrap_or_else(|e| e.into_inner());
        match shard.get_mut(id) {
            Some(b) if !expired(b.used, now, timeout) => {
                b.used = now;
                Some(Arc::clone(&b.node))
            }
            Some(_) => {
                shard.remove(id);
                None
            }
            None => None,
        }
    }

    /// Runs on a response: binds session `id` to `node` (the node that answered), used at
    /// `now`.
    pub(crate) fn bind(&self, id: &str, node: &Arc<str>, now: u64, timeout: Option<u64>) {
        let mut shard = self.shard(id).lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = shard.get_mut(id) {
            if !Arc::ptr_eq(&b.node, node) && b.node != *node {
                b.node = Arc::clone(node);
            }
            b.used = now;
            return;
        }
        let max = MAX_SESSIONS / SHARDS;
        if shard.len() >= max {
            shard.retain(|_, b| !expired(b.used, now, timeout));
        }
        if shard.len() >= max {
            if let Some(oldest) = shard
                .iter()
                .min_by_key(|(_, b)| b.used)
                .map(|(k, _)| k.clone())
            {
                shard.remove(&oldest);
            }
        }
        shard.insert(
            id.to_owned(),
            Bound {
                node: Arc::clone(node),
                used: now,
            },
        );
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_stick_until_they_expire() {
        let s = Sessions::default();
        let a: Arc<str> = "localhost:4000".into();
        let b: Arc<str> = "localhost:4001".into();
        assert_eq!(s.node("1", 0, Some(100)), None);
        s.bind("1", &a, 0, Some(100));
        assert_eq!(
            s.node("1", 50, Some(100)).as_deref(),
            Some("localhost:4000")
        );
        // Used at 50: still there at 150.
        assert_eq!(
            s.node("1", 150, Some(100)).as_deref(),
            Some("localhost:4000")
        );
        s.bind("1", &b, 160, Some(100));
        assert_eq!(
            s.node("1", 170, Some(100)).as_deref(),
            Some("localhost:4001")
        );
        assert_eq!(s.node("1", 271, Some(100)), None, "expired");
        assert_eq!(s.len(), 0);
        // Without a timeout, never.
        s.bind("2", &a, 0, None);
        assert!(s.node("2", u64::MAX / 2, None).is_some());
    }

    #[test]
    fn a_full_table_drops_the_least_recently_used() {
        let s = Sessions::default();
        let a: Arc<str> = "a:1".into();
        for i in 0..MAX_SESSIONS + 500 {
            s.bind(&i.to_string(), &a, i as u64, None);
        }
        assert!(s.len() <= MAX_SESSIONS, "{}", s.len());
        assert!(s.node(&(MAX_SESSIONS + 499).to_string(), 0, None).is_some());
        assert!(s.node("0", 0, None).is_none());
    }
}
