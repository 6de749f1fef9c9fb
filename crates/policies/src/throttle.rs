//! `throttle`: Membrane's policy that holds requests back: each request waits `delay` before it
//! goes on, and at most `maxThreads` requests pass it at once (over every worker); a request that
//! finds no free slot waits up to `busyDelay` for one, then is answered 503 `throttled`. A slot
//! is held until the exchange ends. Waiting holds no thread.

use std::sync::Arc;
use std::time::Duration;

use http::HeaderValue;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use turnpike_core::problems;
use turnpike_core::{CompileContext, CompileError, Exchange, Outcome, Policy, PolicyFactory};
use turnpike_core::{Problem, Resume, Wait};

use crate::err;

/// `throttle`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ThrottleSettings {
    /// How long each request waits before it goes on (a number is milliseconds, as in
    /// Membrane).
    #[serde(default)]
    pub delay: Option<Millis>,
    /// The most requests passing at once.
    #[serde(default)]
    pub max_threads: Option<u32>,
    /// How long a request waits for a free slot (default 0: answered at once).
    #[serde(default)]
    pub busy_delay: Option<Millis>,
}

/// A duration: a number of milliseconds (Membrane's form) or a duration (`250ms`, `PT1S`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Millis {
    /// Milliseconds.
    Number(u64),
    /// A duration.
    Duration(turnpike_config::units::Duration),
}

impl Millis {
    fn get(&self) -> Duration {
        match self {
            Millis::Number(ms) => Duration::from_millis(*ms),
            Millis::Duration(d) => d.0,
        }
    }
}

/// The compiled `throttle` policy.
#[derive(Debug)]
pub struct Throttle {
    delay: Duration,
    slots: Option<Arc<Semaphore>>,
    busy_delay: Duration,
}

/// The slot an exchange holds (released when the exchange ends).
#[derive(Clone)]
struct Slot(#[allow(dead_code)] Arc<OwnedSemaphorePermit>);

impl PolicyFactory for Throttle {
    const NAME: &'static str = "throttle";
    type Settings = ThrottleSettings;

    fn compile(c: ThrottleSettings, _: &CompileContext<'_>) -> Result<Self, CompileError> {
        let delay = c.delay.as_ref().map_or(Duration::ZERO, Millis::get);
        if delay > crate::delay::MAX {
            return Err(err("delay", "at most 5 minutes"));
        }
        let busy_delay = c.busy_delay.as_ref().map_or(Duration::ZERO, Millis::get);
        if busy_delay > crate::delay::MAX {
            return Err(err("busyDelay", "at most 5 minutes"));
        }
        let slots = match c.max_threads {
            Some(0) => return Err(err("maxThreads", "must be at least 1")),
            Some(n) => Some(Arc::new(Semaphore::new(n as usize))),
            None if c.busy_delay.is_some() => {
                return Err(err("busyDelay", "only with `maxThreads`"))
            }
            None => None,
        };
        if delay.is_zero() && slots.is_none() {
            return Err(err("", "needs `delay` or `maxThreads`"));
        }
        Ok(Throttle {
            delay,
            slots,
            busy_delay,
        })
    }
}

fn busy() -> Outcome {
    Outcome::Reject(
        Problem::new(&problems::THROTTLED)
            .with_detail("too many requests are in progress; retry shortly")
            .with_header(http::header::RETRY_AFTER, HeaderValue::from_static("1")),
    )
}

impl Policy for Throttle {
    fn name(&self) -> &'static str {
        "throttle"
    }

    /// Takes a slot (waiting up to `busyDelay`), then waits `delay`.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let after_slot = |ex: &mut Exchange, permit: Option<OwnedSemaphorePermit>| {
            if let Some(p) = permit {
                ex.extensions.insert(Slot(Arc::new(p)));
            }
            if self.delay.is_zero() {
                Outcome::Continue
            } else {
                crate::delay::after(self.delay, Outcome::Continue)
            }
        };
        let Some(slots) = &self.slots else {
            return after_slot(ex, None);
        };
        match Arc::clone(slots).try_acquire_owned() {
            Ok(permit) => return after_slot(ex, Some(permit)),
            Err(_) if self.busy_delay.is_zero() => return busy(),
            Err(_) => {}
        }
        // No free slot: wait for one, then for the delay.
        let (slots, busy_delay, delay) = (Arc::clone(slots), self.busy_delay, self.delay);
        Outcome::Wait(Wait::new(
            async move {
                let permit = tokio::time::timeout(busy_delay, slots.acquire_owned()).await;
                let Ok(Ok(permit)) = permit else {
                    return Box::new(|_: &mut Exchange| busy()) as Resume;
                };
                tokio::time::sleep(delay).await;
                Box::new(move |ex: &mut Exchange| {
                    ex.extensions.insert(Slot(Arc::new(permit)));
                    Outcome::Continue
                }) as Resume
            },
            busy_delay + delay + Duration::from_secs(1),
            |_| busy(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{exchange, plain};

    fn compile(v: serde_json::Value) -> Result<Throttle, CompileError> {
        Throttle::compile(serde_json::from_value(v).unwrap(), &plain())
    }

    #[test]
    fn slots_are_held_until_the_exchange_ends() {
        let t = compile(serde_json::json!({"maxThreads": 2})).unwrap();
        let mut a = exchange("GET", "/", &[], "");
        let mut b = exchange("GET", "/", &[], "");
        let mut c = exchange("GET", "/", &[], "");
        assert!(matches!(t.on_request(&mut a), Outcome::Continue));
        assert!(matches!(t.on_request(&mut b), Outcome::Continue));
        match t.on_request(&mut c) {
            Outcome::Reject(p) => assert_eq!(p.ty.status, http::StatusCode::SERVICE_UNAVAILABLE),
            _ => panic!("the third is refused"),
        }
        drop(a);
        assert!(matches!(t.on_request(&mut c), Outcome::Continue));
    }

    #[test]
    fn a_delay_alone_waits() {
        let t = compile(serde_json::json!({"delay": 10})).unwrap();
        let mut ex = exchange("GET", "/", &[], "");
        assert!(matches!(t.on_request(&mut ex), Outcome::Wait(_)));
    }

    #[test]
    fn settings_are_checked() {
        assert_eq!(
            compile(serde_json::json!({"delay": 1000})).unwrap().delay,
            Duration::from_secs(1)
        );
        assert_eq!(
            compile(serde_json::json!({"delay": "250ms"}))
                .unwrap()
                .delay,
            Duration::from_millis(250)
        );
        for (v, says) in [
            (serde_json::json!({}), "needs `delay` or `maxThreads`"),
            (serde_json::json!({"maxThreads": 0}), "at least 1"),
            (
                serde_json::json!({"busyDelay": 10}),
                "only with `maxThreads`",
            ),
            (serde_json::json!({"delay": 400000}), "at most 5 minutes"),
        ] {
            let e = compile(v.clone()).err().unwrap();
            assert!(format!("{e:?}").contains(says), "{v}: {e:?}");
        }
    }
}
