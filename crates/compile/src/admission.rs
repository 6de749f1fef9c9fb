//! An upstream's `concurrency` settings compiled into its [`Admission`]: the limit (fixed or
//! adaptive) and the fair queues in front of it.

use std::sync::Arc;
use std::time::Duration;

use turnpike_config::{ConcurrencyConfig, ConcurrencyLimit};
use turnpike_core::{Template, TemplateScope};
use turnpike_snapshot::admission::{Admission, AdmissionSettings, Limit};

/// The admission of `c`, or the key below `concurrency` and what is wrong with it.
pub(crate) fn compile(c: &ConcurrencyConfig) -> Result<Arc<Admission>, (String, String)> {
    let err = |k: &str, m: &str| (format!("concurrency.{k}"), m.to_owned());
    let adaptive = c.adaptive.clone().unwrap_or_default();
    let limit = match &c.limit {
        ConcurrencyLimit::Fixed(0) => return Err(err("limit", "must be at least 1")),
        ConcurrencyLimit::Fixed(n) => {
            if c.adaptive.is_some() {
                return Err(err("adaptive", "goes with `limit: adaptive`"));
            }
            Limit::Fixed(*n)
        }
        ConcurrencyLimit::Named(s) if s == "adaptive" => {
            let min = adaptive.min.unwrap_or(1);
            let max = adaptive.max.unwrap_or(1000);
            if min == 0 {
                return Err(err("adaptive.min", "must be at least 1"));
            }
            if max < min {
                return Err(err("adaptive.max", "must be at least `min`"));
            }
            let tolerance = adaptive.tolerance.unwrap_or(1.5);
            if !(1.0..=10.0).contains(&tolerance) {
                return Err(err("adaptive.tolerance", "must be between 1 and 10"));
            }
            let smoothing = adaptive.smoothing.unwrap_or(0.2);
            if !(smoothing > 0.0 && smoothing <= 1.0) {
                return Err(err("adaptive.smoothing", "must be above 0 and at most 1"));
            }
            Limit::Adaptive {
                min,
                max,
                initial: adaptive.initial.unwrap_or(20).clamp(min, max),
                tolerance,
                smoothing,
                probe_interval: adaptive
                    .probe_interval
                    .map_or(Duration::from_secs(30), |d| d.0),
            }
        }
        ConcurrencyLimit::Named(other) => {
            return Err(err(
                "limit",
                &format!("`{other}` is not a limit: a number, or `adaptive`"),
            ))
        }
    };
    let q = c.queue.clone().unwrap_or_default();
    let key = Template::parse(
        q.key.as_deref().unwrap_or("${client.ip}"),
        &TemplateScope::default(),
    )
    .map_err(|m| err("queue.key", &m))?;
    for (k, w) in &q.weights {
        if *w == 0 {
            return Err(err(&format!("queue.weights.{k}"), "must be at least 1"));
        }
    }
    let positive = |v: Option<u32>, d: u32, k: &str| match v {
        Some(0) => Err(err(k, "must be at least 1")),
        v => Ok(v.unwrap_or(d) as usize),
    };
    let max_queue_per_key = positive(q.max_per_key, 100, "queue.maxPerKey")?;
    let max_queue = positive(q.max_total, 1000, "queue.maxTotal")?;
    if max_queue < max_queue_per_key {
        return Err(err("queue.maxTotal", "must be at least `maxPerKey`"));
    }
    let timeout = q.timeout.map_or(Duration::from_secs(10), |d| d.0);
    if timeout.is_zero() {
        return Err(err("queue.timeout", "must be above 0"));
    }
    Ok(Admission::new(AdmissionSettings {
        limit,
        key,
        weights: q.weights.into_iter().collect(),
        max_queue_per_key,
        max_queue,
        timeout,
        target_delay: q.target_delay.map_or(Duration::from_millis(100), |d| d.0),
        interval: q.interval.map_or(Duration::from_millis(500), |d| d.0),
    }))
}
