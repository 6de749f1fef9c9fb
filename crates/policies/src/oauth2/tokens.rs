//! The tokens an authorization server issued: a store shared by every worker, keyed by the
//! SHA-256 of each token (the store never holds a token itself), with expiry and a bound on its
//! size, and the random source of opaque tokens.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use sha2::{Digest, Sha256};

/// The most tokens one server keeps; past it the oldest are dropped (and answer as unknown).
pub(crate) const MAX_TOKENS: usize = 100_000;

/// How often expired tokens are swept out.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// Access or refresh token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Sent to resource servers.
    Access,
    /// Exchanged for new tokens at the token endpoint.
    Refresh,
}

/// What a token was issued for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grant {
    /// Access or refresh.
    pub kind: Kind,
    /// The client the token was issued to.
    pub client_id: Arc<str>,
    /// The user of a password grant, `None` for a client's own token.
    pub user: Option<Arc<str>>,
    /// The scopes granted.
    pub scope: Vec<String>,
    /// The audiences granted (`aud`).
    pub audience: Vec<String>,
    /// When the token stops being valid (`None`: never).
    pub expires: Option<Instant>,
}

impl Grant {
    /// The subject: the user, or else the client.
    pub(crate) fn subject(&self) -> &str {
        self.user.as_deref().unwrap_or(&self.client_id)
    }

    fn expired(&self, now: Instant) -> bool {
        self.expires.is_some_and(|e| e <= now)
    }
}

type Key = [u8; 32];

fn key(token: &str) -> Key {
    Sha256::digest(token.as_bytes()).into()
}

struct Inner {
    map: HashMap<Key, (u64, Grant)>,
    /// Insertion order, for dropping the oldest when full; entries removed since are skipped.
    order: VecDeque<(u64, Key)>,
    seq: u64,
    next_sweep: Instant,
}

/// The issued tokens of one authorization server.
pub(crate) struct Store {
    inner: Mutex<Inner>,
    max: usize,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

impl Store {
    /// An empty store keeping at most `max` tokens.
    pub(crate) fn new(max: usize) -> Store {
        Store {
            inner: Mutex::new(Inner {
                map: HashMap::new(),
                order: VecDeque::new(),
                seq: 0,
                next_sweep: Instant::now() + SWEEP_EVERY,
            }),
            max: max.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs when a token is issued: records it; sweeps expired tokens once a minute, and drops
    /// the oldest tokens when the store is full.
    pub(crate) fn insert(&self, token: &str, grant: Grant) {
        let now = Instant::now();
        let mut inner = self.lock();
        if now >= inner.next_sweep || inner.map.len() >= self.max {
            inner.map.retain(|_, (_, g)| !g.expired(now));
            let Inner { map, order, .. } = &mut *inner;
            order.retain(|(seq, k)| map.get(k).is_some_and(|(s, _)| s == seq));
            inner.next_sweep = now + SWEEP_EVERY;
        }
        while inner.map.len() >= self.max {
            let Some((seq, k)) = inner.order.pop_front() else {
                break;
            };
            if inner.map.get(&k).is_some_and(|(s, _)| *s == seq) {
                inner.map.remove(&k);
            }
        }
        inner.seq += 1;
        let seq = inner.seq;
        let k = key(token);
        inner.map.insert(k, (seq, grant));
        inner.order.push_back((seq, k));
    }

    /// Runs per lookup: the grant of a token that is known and not expired.
    pub(crate) fn get(&self, token: &str) -> Option<Grant> {
        let now = Instant::now();
        let k = key(token);
        let mut inner = self.lock();
        match inner.map.get(&k) {
            Some((_, g)) if !g.expired(now) => Some(g.clone()),
            Some(_) => {
                inner.map.remove(&k);
                None
            }
            None => None,
        }
    }

    /// Runs on revocation and refresh: forgets a token, returning its grant when it was known
    /// and not expired.
    pub(crate) fn remove(&self, token: &str) -> Option<Grant> {
        let now = Instant::now();
        let removed = self.lock().map.remove(&key(token));
        removed.map(|(_, g)| g).filter(|g| !g.expired(now))
    }

    /// How many tokens are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().map.len()
    }
}

/// Runs per issued opaque token and JWT id: 32 bytes from the operating system's random
/// source, base64url without padding (43 characters).
pub(crate) fn random_token() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(expires: Option<Instant>) -> Grant {
        Grant {
            kind: Kind::Access,
            client_id: "abc".into(),
            user: None,
            scope: vec![],
            audience: vec![],
            expires,
        }
    }

    #[test]
    fn tokens_are_found_until_they_expire_or_are_removed() {
        let s = Store::new(10);
        s.insert("t1", grant(None));
        s.insert("t2", grant(Some(Instant::now() - Duration::from_secs(1))));
        assert_eq!(s.get("t1").unwrap().subject(), "abc");
        assert!(s.get("t2").is_none(), "expired");
        assert!(s.get("t3").is_none());
        assert!(s.remove("t1").is_some());
        assert!(s.get("t1").is_none());
        assert!(s.remove("t1").is_none());
    }

    #[test]
    fn a_full_store_drops_expired_then_oldest_tokens() {
        let s = Store::new(3);
        s.insert("a", grant(None));
        s.insert("b", grant(Some(Instant::now() - Duration::from_secs(1))));
        s.insert("c", grant(None));
        s.insert("d", grant(None));
        assert!(s.get("a").is_some(), "the expired one made room");
        s.insert("e", grant(None));
        assert!(s.get("a").is_none(), "then the oldest goes");
        assert!(s.get("c").is_some() && s.get("d").is_some() && s.get("e").is_some());
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn random_tokens_differ() {
        let a = random_token().unwrap();
        assert_eq!(a.len(), 43);
        assert_ne!(a, random_token().unwrap());
    }
}
