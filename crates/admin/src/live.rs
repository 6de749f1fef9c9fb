//! What the console shows live: per API the request rate, error rate and latency percentiles
//! over the last few seconds (differences between two readings of the metrics counters), the
//! upstreams' node health, and the recent exchanges.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use serde_json::{json, Value};
use turnpike_telemetry::stats::{self, HistogramSum, BUCKETS};

/// A reading of every API's counters.
#[derive(Clone, Default)]
struct Reading {
    /// Per API: requests, answers ≥ 400, latency histogram.
    apis: HashMap<String, (u64, u64, HistogramSum)>,
}

fn read() -> Reading {
    let mut r = Reading::default();
    for a in stats::apis() {
        let counts = a.requests();
        let total: u64 = counts.iter().flatten().sum();
        let errors: u64 = counts.iter().map(|row| row[3] + row[4]).sum();
        r.apis
            .insert(a.name.to_string(), (total, errors, a.duration()));
    }
    r
}

/// Live figures between readings at least a second apart.
#[derive(Default)]
pub struct Live {
    state: Mutex<Option<(Instant, Reading, Value)>>,
}

impl Live {
    /// Per API: `requests` (since start), `rate` (per second), `errorRate` (share of answers
    /// with a status ≥ 400), `p50Ms` and `p99Ms` over the window since the previous reading
    /// (null without traffic in it).
    pub fn apis(&self) -> Value {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if let Some((at, _, last)) = state.as_ref() {
            if now.duration_since(*at).as_secs_f64() < 1.0 {
                return last.clone();
            }
        }
        let current = read();
        let (elapsed, before) = match state.as_ref() {
            Some((at, before, _)) => (now.duration_since(*at).as_secs_f64(), before.clone()),
            None => (0.0, Reading::default()),
        };
        let mut names: Vec<&String> = current.apis.keys().collect();
        names.sort();
        let list: Vec<Value> = names
            .into_iter()
            .filter(|n| n.as_str() != "-")
            .map(|name| {
                let (total, errors, hist) = &current.apis[name];
                let (t0, e0, h0) = before.apis.get(name).cloned().unwrap_or_default();
                let requests = total.saturating_sub(t0);
                let errs = errors.saturating_sub(e0);
                let mut delta = hist.clone();
                for (i, c) in delta.counts.iter_mut().enumerate() {
                    *c = c.saturating_sub(h0.counts[i]);
                }
                json!({
                    "name": name,
                    "requests": total,
                    "rate": if elapsed > 0.0 { requests as f64 / elapsed } else { 0.0 },
                    "errorRate": if requests > 0 { errs as f64 / requests as f64 } else { 0.0 },
                    "p50Ms": quantile(&delta, 0.5).map(|s| s * 1000.0),
                    "p99Ms": quantile(&delta, 0.99).map(|s| s * 1000.0),
                })
            })
            .collect();
        let value = Value::Array(list);
        *state = Some((now, current, value.clone()));
        value
    }
}

/// The `q` quantile of a histogram in seconds, interpolated within its bucket (none when
/// empty).
pub fn quantile(h: &HistogramSum, q: f64) -> Option<f64> {
    let count = h.count();
    if count == 0 {
        return None;
    }
    let rank = q * count as f64;
    let mut seen = 0.0;
    for (i, c) in h.counts.iter().enumerate() {
        let c = *c as f64;
        if c > 0.0 && seen + c >= rank {
            let lower = if i == 0 { 0.0 } else { BUCKETS[i - 1] };
            let upper = BUCKETS
                .get(i)
                .copied()
                .unwrap_or(BUCKETS[BUCKETS.len() - 1]);
            let within = ((rank - seen) / c).clamp(0.0, 1.0);
            return Some(lower + (upper - lower) * within);
        }
        seen += c;
    }
    Some(BUCKETS[BUCKETS.len() - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_within_buckets() {
        let mut h = HistogramSum::default();
        assert_eq!(quantile(&h, 0.5), None);
        // 100 observations in (1 ms, 2.5 ms].
        h.counts[2] = 100;
        let p50 = quantile(&h, 0.5).unwrap();
        assert!((p50 - 0.00175).abs() < 1e-9, "{p50}");
        let p99 = quantile(&h, 0.99).unwrap();
        assert!(p99 > 0.0024 && p99 <= 0.0025, "{p99}");
        // One slow outlier above every bound.
        h.counts[BUCKETS.len()] = 1;
        assert_eq!(quantile(&h, 1.0), Some(10.0));
    }
}
