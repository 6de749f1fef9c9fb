//! `simpleStore`: the users of an `llmGateway`, found by the key they send, and the tokens each
//! used in the current period. One store is shared by every worker; the period starts again
//! (every user's count back to 0) at the first check after it ran out, as in Membrane.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use turnpike_core::CompileError;

use super::settings::SimpleStoreSettings;
use crate::err;

/// Tokens a response used, as the provider reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Input (prompt) tokens.
    pub input: i64,
    /// Output tokens (with reasoning).
    pub output: i64,
    /// What is counted against the quota: the provider's total, or input plus output.
    pub total: i64,
}

/// One user.
#[derive(Debug)]
struct User {
    name: String,
    key: String,
    /// Tokens per period; 0 is no limit.
    tokens: i64,
    used: AtomicI64,
}

/// The users and their counts (see the module doc).
#[derive(Debug)]
pub struct Store {
    users: Vec<User>,
    period: Duration,
    /// When the current period ends; `None` before the first check.
    next_reset: Mutex<Option<Instant>>,
}

impl Store {
    /// The store for `simpleStore`; two users with the same key are a load error.
    pub fn new(s: &SimpleStoreSettings) -> Result<Store, CompileError> {
        let mut users: Vec<User> = Vec::with_capacity(s.users.len());
        for (i, u) in s.users.iter().enumerate() {
            if u.api_key.is_empty() {
                return Err(err(
                    &format!("simpleStore.users[{i}].apiKey"),
                    "must not be empty",
                ));
            }
            if users.iter().any(|o| o.key == u.api_key) {
                return Err(err(
                    &format!("simpleStore.users[{i}].apiKey"),
                    "another user has the same key",
                ));
            }
            users.push(User {
                name: u.name.clone(),
                key: u.api_key.clone(),
                tokens: i64::try_from(u.tokens.unwrap_or(0)).unwrap_or(i64::MAX),
                used: AtomicI64::new(0),
            });
        }
        Ok(Store {
            users,
            period: Duration::from_secs(s.limit_reset_period.unwrap_or(60)),
            next_reset: Mutex::new(None),
        })
    }

    /// The user whose key is `key` (compared in constant time), by index.
    pub fn user(&self, key: Option<&str>) -> Option<usize> {
        let key = key?;
        self.users
            .iter()
            .position(|u| crate::auth::ct_eq(u.key.as_bytes(), key.as_bytes()))
    }

    /// The name of user `user`.
    pub fn name(&self, user: usize) -> &str {
        self.users.get(user).map_or("", |u| u.name.as_str())
    }

    /// Starts a new period when the current one ran out at `now` (or none started yet).
    fn roll(&self, now: Instant) {
        let mut next = self.next_reset.lock().unwrap_or_else(|e| e.into_inner());
        if next.is_none_or(|n| now > n) {
            *next = Some(now + self.period);
            for u in &self.users {
                u.used.store(0, Ordering::Relaxed);
            }
            tracing::debug!("llmGateway: token usage of every user starts again");
        }
    }

    /// The tokens user `user` would have left after a request that needs `needed` tokens, at
    /// `now` (`i64::MAX` for a user without a limit). Called before each model request; 0 or
    /// less refuses it.
    pub fn check(&self, user: usize, needed: i64, now: Instant) -> i64 {
        self.roll(now);
        let Some(u) = self.users.get(user) else {
            return 0;
        };
        if u.tokens == 0 {
            return i64::MAX;
        }
        u.tokens
            .saturating_sub(u.used.load(Ordering::Relaxed))
            .saturating_sub(needed)
    }

    /// Whole seconds from `now` until the current period ends (0 before the first check).
    pub fn seconds_until_reset(&self, now: Instant) -> i64 {
        let next = self.next_reset.lock().unwrap_or_else(|e| e.into_inner());
        next.map_or(0, |n| {
            i64::try_from(n.saturating_duration_since(now).as_millis() / 1000).unwrap_or(i64::MAX)
        })
    }

    /// Counts the `usage` of a response against user `user`'s quota, and logs it.
    pub fn record(&self, user: usize, usage: Usage) {
        let Some(u) = self.users.get(user) else {
            return;
        };
        u.used.fetch_add(usage.total, Ordering::Relaxed);
        tracing::info!(
            "user: {} Usage[inputTokens={}, outputTokens={}, totalTokens={}]",
            u.name,
            usage.input,
            usage.output,
            usage.total
        );
    }

    /// Tokens user `user` used in the current period.
    #[cfg(test)]
    pub fn used(&self, user: usize) -> i64 {
        self.users
            .get(user)
            .map_or(0, |u| u.used.load(Ordering::Relaxed))
    }
}

/// The output tokens a request is charged for before it goes out: what it asks for, at most
/// the configured limit, or the limit when it does not ask (Membrane's rule: without a limit,
/// 0).
pub fn effective_max_output(requested: i64, max_output: i64) -> i64 {
    if requested <= 0 {
        max_output
    } else {
        requested.min(max_output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm_gateway::settings::UserSettings;

    fn store(period: u64) -> Store {
        let user = |name: &str, key: &str, tokens: u64| UserSettings {
            name: name.into(),
            api_key: key.into(),
            tokens: Some(tokens),
        };
        Store::new(&SimpleStoreSettings {
            limit_reset_period: Some(period),
            users: vec![
                user("alice", "abc123", 500),
                user("bob", "qwertz", 10000),
                user("carol", "free", 0),
            ],
        })
        .unwrap()
    }

    fn usage(total: i64) -> Usage {
        Usage {
            input: total / 2,
            output: total - total / 2,
            total,
        }
    }

    #[test]
    fn llm_users_are_found_by_key() {
        let s = store(60);
        assert_eq!(s.user(Some("abc123")), Some(0));
        assert_eq!(s.user(Some("qwertz")), Some(1));
        assert_eq!(s.user(Some("abc12")), None);
        assert_eq!(s.user(None), None);
        assert_eq!(s.name(1), "bob");
    }

    #[test]
    fn llm_quota_is_counted_and_starts_again_after_the_period() {
        let s = store(60);
        let t0 = Instant::now();
        assert_eq!(s.check(0, 300, t0), 200);
        s.record(0, usage(300));
        assert_eq!(s.used(0), 300);
        // 500 - 300 - 200 = 0: refused (0 or less).
        assert_eq!(s.check(0, 200, t0), 0);
        assert_eq!(s.check(0, 100, t0), 100);
        // Bob has a count of his own; carol has no limit.
        assert_eq!(s.check(1, 300, t0), 9700);
        s.record(2, usage(1_000_000));
        assert_eq!(s.check(2, 1_000_000, t0), i64::MAX);
        assert_eq!(s.seconds_until_reset(t0 + Duration::from_millis(1500)), 58);
        // Within the period nothing starts again; after it, every count does.
        assert_eq!(s.check(0, 200, t0 + Duration::from_secs(60)), 0);
        assert_eq!(s.check(0, 200, t0 + Duration::from_millis(60_001)), 300);
        assert_eq!(s.used(0), 0);
        assert_eq!(s.used(2), 0);
        assert_eq!(
            s.seconds_until_reset(t0 + Duration::from_millis(60_001)),
            60
        );
    }

    #[test]
    fn llm_quota_settings_are_checked() {
        let dup = SimpleStoreSettings {
            limit_reset_period: None,
            users: vec![
                UserSettings {
                    name: "a".into(),
                    api_key: "k".into(),
                    tokens: None,
                },
                UserSettings {
                    name: "b".into(),
                    api_key: "k".into(),
                    tokens: None,
                },
            ],
        };
        let e = Store::new(&dup).unwrap_err();
        assert_eq!(e.key, "simpleStore.users[1].apiKey");
        let s = Store::new(&SimpleStoreSettings::default()).unwrap();
        assert_eq!(s.period, Duration::from_secs(60));
    }

    #[test]
    fn llm_effective_output_follows_membrane() {
        assert_eq!(effective_max_output(0, 200), 200);
        assert_eq!(effective_max_output(-1, 200), 200);
        assert_eq!(effective_max_output(500, 200), 200);
        assert_eq!(effective_max_output(100, 200), 100);
        // Without a configured limit, nothing is charged for output.
        assert_eq!(effective_max_output(100, 0), 0);
    }
}
