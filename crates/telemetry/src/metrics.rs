//! The Prometheus exposition of [`crate::stats`]: computed at scrape time by a collector of the
//! `prometheus-client` crate, in the Prometheus text format (0.0.4) or in OpenMetrics (asked
//! for with `Accept: application/openmetrics-text`), which also carries the trace ids of
//! traced requests as exemplars of the request latency histogram.

use std::fmt::Write;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::stats::{self, HistogramSum, Outcome, BUCKETS, CLASSES, METHODS, PROTOCOLS};

/// The `Content-Type` of the Prometheus text format.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
/// The `Content-Type` of OpenMetrics text.
pub const OPENMETRICS_TEXT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Whether an `Accept` header asks for OpenMetrics.
pub fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| a.contains("application/openmetrics-text"))
}

/// Node health at scrape time: upstream, node, and whether it takes requests.
pub type Health = [(Arc<str>, Arc<str>, bool)];

/// An upstream's concurrency limit and queues at scrape time.
#[derive(Debug, Clone)]
pub struct QueueSeries {
    /// The upstream.
    pub upstream: Arc<str>,
    /// The concurrency limit now.
    pub limit: i64,
    /// Requests in flight.
    pub in_flight: i64,
    /// Requests waiting.
    pub queued: i64,
    /// Requests shed, by reason.
    pub shed: Vec<(&'static str, u64)>,
    /// How long admitted requests waited.
    pub wait: HistogramSum,
}

/// Every metric, in OpenMetrics text (`openmetrics`) or the Prometheus text format; `health`
/// gives the nodes' health and `queues` the upstreams' concurrency limits (the control plane
/// reads both from the running configuration).
pub fn render(openmetrics: bool, health: &Health, queues: &[QueueSeries]) -> String {
    let apis = stats::apis();
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape {
        apis: apis.clone(),
        health: health.to_vec(),
        queues: queues.to_vec(),
    }));
    let mut out = String::new();
    let written = if openmetrics {
        prometheus_client::encoding::text::encode(&mut out, &registry)
    } else {
        prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)
    };
    if written.is_err() {
        return String::new();
    }
    if openmetrics {
        add_exemplars(&out, &apis.iter().map(|a| a.duration()).collect::<Vec<_>>())
    } else {
        out
    }
}

/// Appends each bucket's exemplar to its line of `turnpike_request_duration_seconds` (the
/// collector writes the APIs' series in `sums` order: `_sum`, `_count`, then the buckets).
fn add_exemplars(text: &str, sums: &[HistogramSum]) -> String {
    let mut out = String::with_capacity(text.len() + 256);
    let mut series: Option<usize> = None;
    let mut bucket = 0;
    for line in text.lines() {
        out.push_str(line);
        if line.starts_with("turnpike_request_duration_seconds_sum") {
            series = Some(series.map_or(0, |s| s + 1));
            bucket = 0;
        } else if line.starts_with("turnpike_request_duration_seconds_bucket") {
            if let Some(e) = series
                .and_then(|s| sums.get(s))
                .and_then(|h| h.exemplars.get(bucket))
                .and_then(Option::as_ref)
            {
                let _ = write!(
                    out,
                    " # {{trace_id=\"{}\"}} {} {:.3}",
                    e.trace_id, e.value, e.at
                );
            }
            bucket += 1;
        }
        out.push('\n');
    }
    out
}

#[derive(Debug)]
struct Scrape {
    apis: Vec<Arc<stats::ApiStats>>,
    health: Vec<(Arc<str>, Arc<str>, bool)>,
    queues: Vec<QueueSeries>,
}

type Labels<'a> = Vec<(&'a str, &'a str)>;

fn counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(Labels<'_>, u64)],
) -> Result<(), std::fmt::Error> {
    let mut fam = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in series {
        fam.encode_family(labels)?
            .encode_counter::<NoLabelSet, u64, u64>(v, None)?;
    }
    Ok(())
}

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(Labels<'_>, i64)],
) -> Result<(), std::fmt::Error> {
    let mut fam = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in series {
        fam.encode_family(labels)?.encode_gauge(v)?;
    }
    Ok(())
}

fn histogram(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(Labels<'_>, HistogramSum)],
) -> Result<(), std::fmt::Error> {
    let mut fam = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for (labels, h) in series {
        // Counts per bucket: the encoder makes them cumulative; the last bound is +Inf.
        let buckets: Vec<(f64, u64)> = h
            .counts
            .iter()
            .enumerate()
            .map(|(i, c)| (BUCKETS.get(i).copied().unwrap_or(f64::INFINITY), *c))
            .collect();
        fam.encode_family(labels)?.encode_histogram::<NoLabelSet>(
            h.sum,
            h.count(),
            &buckets,
            None,
        )?;
    }
    Ok(())
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let version = env!("CARGO_PKG_VERSION");
        gauge(
            &mut encoder,
            "turnpike_build_info",
            "The running build (value 1)",
            &[(vec![("version", version)], 1)],
        )?;
        // Requests per API.
        let requests: Vec<_> = self.apis.iter().map(|a| (a, a.requests())).collect();
        let mut series = Vec::new();
        for (a, r) in &requests {
            for (m, row) in r.iter().enumerate() {
                for (c, v) in row.iter().enumerate() {
                    if *v > 0 {
                        series.push((
                            vec![
                                ("api", &*a.name),
                                ("method", METHODS[m]),
                                ("status_class", CLASSES[c]),
                            ],
                            *v,
                        ));
                    }
                }
            }
        }
        counter(
            &mut encoder,
            "turnpike_requests",
            "Requests answered, by API, method and status class",
            &series,
        )?;
        let durations: Vec<_> = self
            .apis
            .iter()
            .map(|a| (vec![("api", &*a.name)], a.duration()))
            .collect();
        histogram(
            &mut encoder,
            "turnpike_request_duration_seconds",
            "Time from a request's head to its response head, by API",
            &durations,
        )?;
        let rejections: Vec<_> = self.apis.iter().map(|a| (a, a.rejections())).collect();
        let mut series = Vec::new();
        for (a, list) in &rejections {
            for ((policy, reason), v) in list {
                series.push((
                    vec![("api", &*a.name), ("policy", *policy), ("reason", *reason)],
                    *v,
                ));
            }
        }
        counter(
            &mut encoder,
            "turnpike_policy_rejections",
            "Requests a policy refused, by API, policy and problem type",
            &series,
        )?;
        // Upstreams.
        let nodes = stats::nodes();
        let outcomes: Vec<_> = nodes.iter().map(|n| (n, n.outcomes())).collect();
        let mut series = Vec::new();
        for (n, o) in &outcomes {
            for (i, v) in o.iter().enumerate() {
                if *v > 0 {
                    series.push((
                        vec![
                            ("upstream", &*n.upstream),
                            ("node", &*n.node),
                            ("outcome", Outcome::ALL[i].label()),
                        ],
                        *v,
                    ));
                }
            }
        }
        counter(
            &mut encoder,
            "turnpike_upstream_requests",
            "Tries sent to upstream nodes, by outcome",
            &series,
        )?;
        let ejections: Vec<_> = nodes
            .iter()
            .map(|n| {
                (
                    vec![("upstream", &*n.upstream), ("node", &*n.node)],
                    n.ejections(),
                )
            })
            .collect();
        counter(
            &mut encoder,
            "turnpike_upstream_ejections",
            "Times passive health checks took a node out",
            &ejections,
        )?;
        let healthy: Vec<_> = self
            .health
            .iter()
            .map(|(u, n, ok)| (vec![("upstream", &**u), ("node", &**n)], i64::from(*ok)))
            .collect();
        gauge(
            &mut encoder,
            "turnpike_upstream_node_healthy",
            "1 when the node takes requests, 0 when health checks took it out",
            &healthy,
        )?;
        let ups = stats::upstreams();
        let retries: Vec<_> = ups
            .iter()
            .map(|u| (vec![("upstream", &*u.name)], u.retries()))
            .collect();
        counter(
            &mut encoder,
            "turnpike_upstream_retries",
            "Tries sent again to another node",
            &retries,
        )?;
        let up_durations: Vec<_> = ups
            .iter()
            .map(|u| (vec![("upstream", &*u.name)], u.duration()))
            .collect();
        histogram(
            &mut encoder,
            "turnpike_upstream_duration_seconds",
            "Time from sending a try to its response head (or failure), by upstream",
            &up_durations,
        )?;
        // Concurrency limits and their queues.
        let q = &self.queues;
        let by_upstream = |f: fn(&QueueSeries) -> i64| -> Vec<(Labels<'_>, i64)> {
            q.iter()
                .map(|s| (vec![("upstream", &*s.upstream)], f(s)))
                .collect()
        };
        gauge(
            &mut encoder,
            "turnpike_concurrency_limit",
            "The upstream's concurrency limit now (fixed, or where the adaptive limit stands)",
            &by_upstream(|s| s.limit),
        )?;
        gauge(
            &mut encoder,
            "turnpike_concurrency_in_flight",
            "Requests holding a slot of the upstream's concurrency limit",
            &by_upstream(|s| s.in_flight),
        )?;
        gauge(
            &mut encoder,
            "turnpike_queue_length",
            "Requests waiting for a slot of the upstream's concurrency limit",
            &by_upstream(|s| s.queued),
        )?;
        let shed: Vec<_> = q
            .iter()
            .flat_map(|s| {
                s.shed
                    .iter()
                    .map(|(reason, n)| (vec![("upstream", &*s.upstream), ("reason", *reason)], *n))
            })
            .collect();
        counter(
            &mut encoder,
            "turnpike_queue_shed",
            "Requests shed instead of sent to the upstream, by reason (queue_full, overloaded, timeout)",
            &shed,
        )?;
        let waits: Vec<_> = q
            .iter()
            .map(|s| (vec![("upstream", &*s.upstream)], s.wait.clone()))
            .collect();
        histogram(
            &mut encoder,
            "turnpike_queue_wait_seconds",
            "Time requests waited for a slot of the upstream's concurrency limit (0 when admitted at once is not counted)",
            &waits,
        )?;
        // Connections.
        let listeners = stats::listeners();
        let accepted: Vec<_> = listeners
            .iter()
            .map(|l| (vec![("listener", &*l.addr)], l.accepted_total()))
            .collect();
        counter(
            &mut encoder,
            "turnpike_connections_accepted",
            "Client connections accepted, by listening address",
            &accepted,
        )?;
        let open: Vec<_> = listeners.iter().map(|l| (l, l.open_now())).collect();
        let mut series = Vec::new();
        for (l, o) in &open {
            for (i, v) in o.iter().enumerate() {
                series.push((vec![("listener", &*l.addr), ("protocol", PROTOCOLS[i])], *v));
            }
        }
        gauge(
            &mut encoder,
            "turnpike_connections_open",
            "Client connections open, by listening address and protocol",
            &series,
        )?;
        let hs: Vec<_> = listeners.iter().map(|l| (l, l.handshakes())).collect();
        let total: Vec<_> = hs
            .iter()
            .filter(|(_, (t, _))| *t > 0)
            .map(|(l, (t, _))| (vec![("listener", &*l.addr)], *t))
            .collect();
        counter(
            &mut encoder,
            "turnpike_tls_handshakes",
            "TLS handshakes with clients",
            &total,
        )?;
        let failed: Vec<_> = hs
            .iter()
            .filter(|(_, (t, _))| *t > 0)
            .map(|(l, (_, f))| (vec![("listener", &*l.addr)], *f))
            .collect();
        counter(
            &mut encoder,
            "turnpike_tls_handshake_failures",
            "TLS handshakes with clients that failed",
            &failed,
        )?;
        // The process.
        let p = stats::process();
        use std::sync::atomic::Ordering::Relaxed;
        counter(
            &mut encoder,
            "turnpike_config_reloads",
            "Configuration changes applied or refused",
            &[
                (vec![("result", "success")], p.reloads_ok.load(Relaxed)),
                (vec![("result", "failure")], p.reloads_failed.load(Relaxed)),
            ],
        )?;
        gauge(
            &mut encoder,
            "turnpike_config_revision",
            "The running configuration's revision (1 at start, one more per change)",
            &[(vec![], p.revision.load(Relaxed) as i64)],
        )?;
        counter(
            &mut encoder,
            "turnpike_ratelimit_store_errors",
            "Rate limit decisions taken by onError because Redis failed or was late",
            &[
                (
                    vec![("decision", "allow")],
                    p.ratelimit_store_allowed.load(Relaxed),
                ),
                (
                    vec![("decision", "deny")],
                    p.ratelimit_store_denied.load(Relaxed),
                ),
            ],
        )?;
        let misses: Vec<(Vec<(&str, &str)>, u64)> = crate::stats::SOAP_FAST_MISS_REASONS
            .iter()
            .zip(&p.soap_fast_misses)
            .map(|(reason, n)| (vec![("reason", *reason)], n.load(Relaxed)))
            .collect();
        counter(
            &mut encoder,
            "turnpike_soap_fast_path_misses",
            "SOAP messages the fast paths left to libxml2 (or to a tree), by reason",
            &misses,
        )?;
        counter(
            &mut encoder,
            "turnpike_trace_spans_exported",
            "Trace spans sent to the collector",
            &[(vec![], p.spans_exported.load(Relaxed))],
        )?;
        counter(
            &mut encoder,
            "turnpike_trace_spans_dropped",
            "Trace spans dropped because the export queue was full or the collector failed",
            &[(vec![], p.spans_dropped.load(Relaxed))],
        )?;
        counter(
            &mut encoder,
            "turnpike_access_log_dropped",
            "Access log lines dropped because the log writer fell behind (a worker never waits for it)",
            &[(vec![], p.log_lines_dropped.load(Relaxed))],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn both_formats_and_exemplars() {
        let a = stats::api("metrics-test");
        a.request(
            0,
            0,
            200,
            Duration::from_millis(2),
            Some("4bf92f3577b34da6a3ce929d0e0e4736"),
        );
        a.request(0, 0, 404, Duration::from_millis(20), None);
        let text = render(false, &[], &[]);
        assert!(
            text.contains("turnpike_requests_total{api=\"metrics-test\",method=\"GET\",status_class=\"2xx\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE turnpike_requests_total counter"),
            "{text}"
        );
        assert!(!text.contains("# EOF"));
        assert!(!text.contains("trace_id"));
        let om = render(true, &[], &[]);
        assert!(om.ends_with("# EOF\n"), "{om}");
        assert!(
            om.contains("turnpike_request_duration_seconds_bucket{le=\"0.0025\",api=\"metrics-test\"} 1 # {trace_id=\"4bf92f3577b34da6a3ce929d0e0e4736\"} 0.002 "),
            "{om}"
        );
        assert!(
            om.contains("turnpike_request_duration_seconds_count{api=\"metrics-test\"} 2"),
            "{om}"
        );
        assert!(wants_openmetrics(Some(
            "application/openmetrics-text;version=1.0.0"
        )));
        assert!(!wants_openmetrics(Some("text/plain")));
        drop(a);
    }
}
