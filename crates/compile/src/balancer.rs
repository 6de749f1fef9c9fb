//! Membrane's `balancer` as an API's target: the compile stage turns the balancer's clusters
//! into a pool of the upstream machinery (round robin over the nodes that are up, a connection
//! that fails tried on the next node, as Membrane fails over), and makes that pool the target
//! of the API whose top-level flow holds the balancer.
//!
//! `clusterNotification` changes a balancer's nodes at run time, while snapshots are immutable.
//! The design that keeps the request path lock-free: the pool is a [`LivePool`], and each change
//! builds a whole new pool (nodes looked up when connecting, so building never waits for DNS)
//! and swaps it in atomically; a request loads the current pool once and keeps it to its end.
//! Nodes that stay keep their pooled connections and counters (they are found by key). A
//! change is made by the notification's request, never by requests to the balancer; a reload
//! builds the pool again from the configured clusters and the changes made at run time, which
//! the balancer keeps (`turnpike_policies::balancer::cluster`).

use std::sync::Arc;
use std::time::Duration;

use http::uri::{Authority, Scheme};
use http::{HeaderValue, Method};
use turnpike_config::{ApiConfig, ConfigErrors, Located};
use turnpike_policies::balancer::{BalancerSettings, BalancerSlot, BalancerState, NodeAddr};
use turnpike_snapshot::upstream::{Balance, RetryPolicy, Target, TargetPath, Upstream};
use turnpike_snapshot::{LivePool, Node, NodeParts};

use crate::target::{next_upstream_id, Upstreams};

/// What a `balancer` in an API's top-level flow compiles to.
pub(crate) struct CompiledBalancer {
    /// The API's target: the balancer's live pool.
    pub(crate) target: Target,
    /// The balancer's state, for the `balancer` policy of the flow (compiled once per route).
    pub(crate) state: Arc<BalancerState>,
}

impl CompiledBalancer {
    /// Runs at load time, once per route of the API: the slot its flow's `balancer` takes.
    pub(crate) fn slot(&self) -> BalancerSlot {
        BalancerSlot::new(Arc::clone(&self.state))
    }
}

/// Runs at load time: the target of an API whose top-level flow holds a `balancer`, and the
/// state the policy takes. `None` when there is no balancer, or its settings are wrong (the
/// policy reports them). A `target:` beside the balancer is an error.
pub(crate) fn compile_balancer(
    located: &Located<ApiConfig>,
    upstreams: &Upstreams,
    errors: &mut ConfigErrors,
) -> Option<CompiledBalancer> {
    let api = &located.value;
    let p = api.flow.iter().find(|p| p.name == "balancer")?;
    let settings: BalancerSettings = turnpike_core::settings::parse_all(p.settings.clone()).ok()?;
    let clusters = settings.clusters().ok()?;
    if api.target.is_some() {
        errors.push(located.error(
            "target",
            "the `balancer` in the flow is this API's target: remove `target`",
        ));
    }
    let name: Arc<str> = crate::api_name(located).into();
    // The balancer's place: its run-time changes and sessions outlive a reload under it.
    let key = format!(
        "balancer|{}|{}|{}",
        located.origin.file.display(),
        name,
        settings.name()
    );
    let state = BalancerState::new(settings.name(), clusters, &key);
    upstreams.balancers.add(Arc::clone(&state));
    let build = {
        let (name, key, dns) = (Arc::clone(&name), key.clone(), upstreams.dns.clone());
        move |nodes: &[NodeAddr]| pool(&name, &key, &dns, nodes)
    };
    let live = Arc::new(LivePool::new(build(&state.serving())));
    let upstream = live.current();
    let swap = Arc::clone(&live);
    state.on_change(Box::new(move |nodes| swap.replace(build(nodes))));
    Some(CompiledBalancer {
        target: Target {
            upstream,
            // Membrane sends `Host: host:port` of the node.
            adjust_host: true,
            path: TargetPath::Join,
            method: None,
            live: Some(live),
        },
        state,
    })
}

/// Runs at load time and for each change: the pool of `nodes` (`http://host:port`, each looked
/// up when connecting), balanced round robin, a failed connection tried on the next node.
fn pool(name: &Arc<str>, key: &str, dns: &turnpike_dns::Dns, nodes: &[NodeAddr]) -> Upstream {
    let nodes: Vec<Node> = nodes
        .iter()
        .filter_map(|n| {
            let label = n.label();
            let authority = Authority::try_from(label.as_str()).ok()?;
            let host_header = HeaderValue::from_str(&label).ok()?;
            Some(Node::new(NodeParts {
                scheme: Scheme::HTTP,
                authority,
                host_header,
                base_path: String::new(),
                tls: None,
                http2: false,
                weight: 1,
                connect_timeout: None,
                idle_timeout: None,
                dns_refresh: Duration::from_secs(30),
                counts: None,
                key: format!("{key}|{label}"),
                stats: turnpike_telemetry::stats::node(name, &label),
                transport_key: format!("balancer|http://{label}|{dns:?}"),
                addr: None,
                dns: dns.clone(),
                origin: None,
                label: Some(label),
                tls_warnings: true,
            }))
        })
        .collect();
    let retries = RetryPolicy {
        // Membrane tries every other node when one cannot be reached.
        attempts: (nodes.len().saturating_sub(1)).min(10) as u32,
        on_connect_failure: true,
        on_reset: false,
        on_timeout: false,
        on_status: Vec::new(),
        methods: [
            Method::GET,
            Method::HEAD,
            Method::OPTIONS,
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
        ]
        .into(),
        per_try_timeout: None,
        budget: 1.0,
        max_body_size: 64 << 10,
    };
    Upstream {
        id: next_upstream_id(),
        name: Arc::clone(name),
        total_weight: nodes.len() as u32,
        nodes,
        balance: Balance::RoundRobin,
        active: None,
        passive: None,
        panic_threshold: 0.0,
        retries: Some(retries),
        connect_timeout: None,
        response_timeout: None,
        idle_timeout: None,
        breaker: None,
        admission: None,
        dns_refresh: Duration::from_secs(30),
        stats: turnpike_telemetry::stats::upstream(name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use turnpike_config::load::load_str;

    fn compiled(
        yaml: &str,
        upstreams: &Upstreams,
        errors: &mut ConfigErrors,
    ) -> Option<CompiledBalancer> {
        let set = load_str("balancer-test.yaml", yaml, &|_| None).unwrap();
        compile_balancer(&set.apis[0], upstreams, errors)
    }

    fn labels(t: &Target) -> Vec<String> {
        let live = t.live.as_ref().unwrap().current();
        live.nodes.iter().map(|n| n.label.to_string()).collect()
    }

    #[test]
    fn the_clusters_become_the_apis_live_pool() {
        let upstreams = Upstreams::new();
        let mut errors = ConfigErrors::default();
        let b = compiled(
            "api:\n  port: 0\n  flow:\n    - balancer:\n        name: b1\n        clusters:\n          - name: Production\n            nodes:\n              - host: localhost\n                port: 4000\n              - host: 127.0.0.1\n                port: 4001\n",
            &upstreams,
            &mut errors,
        )
        .unwrap();
        assert!(errors.is_empty(), "{errors}");
        assert_eq!(labels(&b.target), ["localhost:4000", "127.0.0.1:4001"]);
        assert_eq!(b.target.upstream.nodes.len(), 2);
        assert_eq!(b.target.first().host_header(), "localhost:4000");
        let up = b.target.live.as_ref().unwrap().current();
        assert!(matches!(up.balance, Balance::RoundRobin));
        assert_eq!(up.retries.as_ref().unwrap().attempts, 1);
        // A notification swaps the pool.
        let state = upstreams.balancers.find("b1").unwrap();
        state
            .set(
                "Production",
                NodeAddr::new("localhost", 4002).unwrap(),
                turnpike_policies::balancer::Status::Up,
            )
            .unwrap();
        assert_eq!(
            labels(&b.target),
            ["localhost:4000", "127.0.0.1:4001", "localhost:4002"]
        );
        assert!(b.slot().take().is_some());
    }

    #[test]
    fn a_balancer_is_the_target() {
        let upstreams = Upstreams::new();
        let mut errors = ConfigErrors::default();
        // Without nodes: an empty pool, filled by notifications.
        let b = compiled(
            "api:\n  port: 0\n  flow:\n    - balancer: {}\n",
            &upstreams,
            &mut errors,
        )
        .unwrap();
        assert!(b.target.upstream.nodes.is_empty());
        assert!(upstreams.balancers.find("Default").is_some());
        compiled(
            "api:\n  port: 0\n  flow:\n    - balancer: {}\n  target:\n    url: http://127.0.0.1:1\n",
            &upstreams,
            &mut errors,
        );
        assert_eq!(errors.0.len(), 1, "a target beside the balancer");
        assert!(compiled(
            "api:\n  port: 0\n  flow:\n    - return: {}\n",
            &upstreams,
            &mut errors
        )
        .is_none());
    }
}
