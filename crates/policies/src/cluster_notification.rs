//! `clusterNotification`: Membrane's HTTP interface that sets the status of a `balancer`'s
//! nodes at run time. `GET /clustermanager/up?host=H&port=P` (also `down`, `takeout`; optional
//! `balancer` and `cluster`, both `Default` by default) sets node `H:P` of the cluster up (adding
//! it when new), down, or takes it out, and answers `204`; other requests pass on. The
//! balancer is one of the same configuration, found by name.
//!
//! The change rebuilds the balancer's pool on this request (a few allocations per node: this is
//! a management call) and swaps it in: requests to the balancer never wait for it (see
//! `turnpike_snapshot::live`). With `timeout`, a notification must carry its time (`time`,
//! milliseconds since 1970) and is refused when older than that.

use std::sync::Arc;

use http::{Response, StatusCode};
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::problem::{types, Problem};
use turnpike_core::{Body, CompileContext, CompileError, Exchange, Outcome, Phases};
use turnpike_core::{Policy, PolicyFactory};

use crate::balancer::cluster::DEFAULT_NAME;
use crate::balancer::{Directory, NodeAddr, Status};
use crate::err;

/// `clusterNotification`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterNotificationSettings {
    /// Refuse notifications whose `time` parameter is older than this many milliseconds (`0`,
    /// the default: no check).
    #[serde(default)]
    pub timeout: Option<u64>,
}

/// The compiled `clusterNotification` policy.
#[derive(Debug)]
pub struct ClusterNotification {
    balancers: Arc<Directory>,
    timeout: u64,
}

impl PolicyFactory for ClusterNotification {
    const NAME: &'static str = "clusterNotification";
    const PHASES: Phases = Phases::REQUEST;
    const ANSWERS: bool = true;
    type Settings = ClusterNotificationSettings;

    fn compile(
        c: ClusterNotificationSettings,
        ctx: &CompileContext<'_>,
    ) -> Result<Self, CompileError> {
        let balancers = ctx.get::<Arc<Directory>>().cloned().ok_or_else(|| {
            err(
                "",
                "`clusterNotification` stands in the flow of an API (it reaches the balancers of the configuration)",
            )
        })?;
        Ok(ClusterNotification {
            balancers,
            timeout: c.timeout.unwrap_or(0),
        })
    }
}

/// The first value of query parameter `name` of `query`, percent-decoded (`+` is a space).
fn param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let k = percent_encoding::percent_decode_str(k).decode_utf8_lossy();
        (k == name).then(|| {
            percent_encoding::percent_decode_str(&v.replace('+', " "))
                .decode_utf8_lossy()
                .into_owned()
        })
    })
}

fn bad(detail: impl Into<String>) -> Outcome {
    Outcome::Reject(Problem::new(&types::BAD_REQUEST).with_detail(detail))
}

impl ClusterNotification {
    /// Membrane's check of the notification's age: the refusal, when it is too old (or, with a
    /// `timeout`, has no `time`).
    fn too_old(&self, query: &str) -> Option<Outcome> {
        if self.timeout == 0 {
            return None;
        }
        let Some(time) = param(query, "time").and_then(|t| t.trim().parse::<i64>().ok()) else {
            return Some(bad(
                "the notification needs its `time` (milliseconds since 1970)",
            ));
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        (now.saturating_sub(time) > self.timeout as i64).then(|| {
            Outcome::Reject(
                Problem::new(&types::FORBIDDEN).with_detail("the notification is too old"),
            )
        })
    }
}

impl Policy for ClusterNotification {
    fn name(&self) -> &'static str {
        "clusterNotification"
    }

    fn response_needs_request(&self) -> bool {
        false
    }

    /// Sets a node's status for `/clustermanager/up|down|takeout` (answering 204, or a
    /// problem); continues with other requests.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let Some(rest) = ex.original_uri.path().strip_prefix("/clustermanager/") else {
            return Outcome::Continue;
        };
        // Membrane's pattern: the operation starts the rest of the path.
        let status = if rest.starts_with("up") {
            Status::Up
        } else if rest.starts_with("down") {
            Status::Down
        } else if rest.starts_with("takeout") {
            Status::TakeOut
        } else {
            return Outcome::Continue;
        };
        let query = ex.original_uri.query().unwrap_or("");
        if let Some(refused) = self.too_old(query) {
            return refused;
        }
        let Some(host) = param(query, "host") else {
            return bad("the notification needs `host`");
        };
        let Some(port) = param(query, "port").and_then(|p| p.trim().parse::<u16>().ok()) else {
            return bad("the notification needs `port` (1 to 65535)");
        };
        let node = match NodeAddr::new(&host, port) {
            Ok(n) => n,
            Err(m) => return bad(m),
        };
        let balancer = param(query, "balancer").unwrap_or_else(|| DEFAULT_NAME.to_owned());
        let cluster = param(query, "cluster").unwrap_or_else(|| DEFAULT_NAME.to_owned());
        let Some(b) = self.balancers.find(&balancer) else {
            let names = self.balancers.names();
            return Outcome::Reject(Problem::new(&types::NOT_FOUND).with_detail(format!(
                "no balancer is named `{balancer}` (balancers: {})",
                if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                }
            )));
        };
        if let Err(m) = b.set(&cluster, node.clone(), status) {
            return bad(m);
        }
        tracing::info!(
            balancer = %b.name(),
            cluster = %cluster,
            node = %node.label(),
            "node set {status:?} by a notification"
        );
        let mut r = Response::new(Body::Empty);
        *r.status_mut() = StatusCode::NO_CONTENT;
        Outcome::Respond(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balancer::BalancerState;
    use crate::testutil::{exchange, plain};

    fn policy(key: &str, timeout: Option<u64>) -> (ClusterNotification, Arc<BalancerState>) {
        let d = Arc::new(Directory::new());
        let b = BalancerState::new("balancer1", Vec::new(), key);
        d.add(Arc::clone(&b));
        let mut shared = http::Extensions::new();
        shared.insert(Arc::clone(&d));
        let ctx = CompileContext {
            shared: &shared,
            ..plain()
        };
        let p =
            ClusterNotification::compile(ClusterNotificationSettings { timeout }, &ctx).unwrap();
        (p, b)
    }

    fn status(o: Outcome) -> u16 {
        match o {
            Outcome::Respond(r) => r.status().as_u16(),
            Outcome::Reject(p) => p.status.as_u16(),
            Outcome::Continue => 0,
            Outcome::Wait(_) => 1,
        }
    }

    #[test]
    fn membranes_urls_set_node_statuses() {
        let (p, b) = policy("t|notify-urls", None);
        let call = |uri: &str| status(p.on_request(&mut exchange("GET", uri, &[], "")));
        assert_eq!(
            call("/clustermanager/up?balancer=balancer1&host=localhost&port=4000"),
            204
        );
        assert_eq!(
            call("/clustermanager/up/?balancer=Balancer1&host=localhost&port=4001"),
            204
        );
        let ports = || b.serving().iter().map(|n| n.port).collect::<Vec<_>>();
        assert_eq!(ports(), [4000, 4001]);
        assert_eq!(
            call("/clustermanager/down?balancer=balancer1&host=localhost&port=4000"),
            204
        );
        assert_eq!(ports(), [4001]);
        assert_eq!(
            call("/clustermanager/takeout?balancer=balancer1&host=localhost&port=4001"),
            204
        );
        assert!(ports().is_empty());
        // Other requests pass on.
        assert_eq!(call("/other"), 0);
        assert_eq!(call("/clustermanager/list"), 0);
        // Bad notifications.
        assert_eq!(call("/clustermanager/up?balancer=balancer1&port=1"), 400);
        assert_eq!(
            call("/clustermanager/up?balancer=balancer1&host=h&port=x"),
            400
        );
        assert_eq!(
            call("/clustermanager/up?balancer=balancer1&host=a%20b&port=1"),
            400
        );
        assert_eq!(
            call("/clustermanager/up?host=h&port=1"),
            404,
            "no balancer `Default`"
        );
        assert!(
            ClusterNotification::compile(ClusterNotificationSettings::default(), &plain()).is_err()
        );
    }

    #[test]
    fn old_notifications_are_refused() {
        let (p, _) = policy("t|notify-old", Some(60_000));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis();
        let call = |uri: String| status(p.on_request(&mut exchange("GET", &uri, &[], "")));
        let base = "/clustermanager/up?balancer=balancer1&host=h&port=1";
        assert_eq!(call(format!("{base}&time={now}")), 204);
        assert_eq!(call(format!("{base}&time={}", now - 120_000)), 403);
        assert_eq!(call(base.to_owned()), 400);
    }
}
