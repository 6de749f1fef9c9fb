//! `balancer`: Membrane's load balancer, which is its API's target. The compile stage turns the
//! balancer's clusters into the API's pool (`turnpike-compile`'s `balancer` module): requests
//! are spread round robin over the nodes that are up, and a connection that fails is tried on
//! the next node (Membrane's failover). `clusterNotification` changes the nodes at run time
//! ([`cluster`]).
//!
//! With a session id extractor, sessions stick to a node: the id found in a request is looked
//! up in the balancer's session table ([`sessions`]) and the request goes to the node the
//! session is bound to, when that node is still in the pool; a session without a node goes
//! where round robin sends it. After the response, the session id of the request, and one found
//! in the response, are bound to the node that answered. Sessions unused for `sessionTimeout`
//! are forgotten.

pub mod cluster;
mod extract;
mod sessions;

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::exchange::NodeAffinity;
use turnpike_core::jsonpath::Message;
use turnpike_core::{BodyNeed, CompileContext, CompileError, Exchange, Outcome};
use turnpike_core::{Policy, PolicyFactory};

pub use cluster::{BalancerSlot, BalancerState, ClusterConfig, Directory, NodeAddr, Status};
use extract::Extractor;
use sessions::now_ms;

use crate::auth::api_key::EmptyMap;
use crate::err;
use crate::language::ExpressionLanguage;
use crate::throttle::Millis;

/// How long a session lasts unused when `sessionTimeout` is not set: one hour, as in Membrane.
const SESSION_TIMEOUT_MS: u64 = 3_600_000;

/// `balancer`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BalancerSettings {
    /// The balancer's name, by which `clusterNotification` finds it (default `Default`).
    #[serde(default)]
    pub name: Option<String>,
    /// The clusters and their nodes.
    #[serde(default)]
    pub clusters: Vec<ClusterEntry>,
    /// Membrane's older form of `clusters`: a list of `{clusters: [...]}`.
    #[serde(default)]
    pub clusters_from_spring: Vec<SpringClusters>,
    /// How long a session stays bound to its node unused: milliseconds (Membrane's form; `0`:
    /// forever) or a duration (default one hour).
    #[serde(default)]
    pub session_timeout: Option<Millis>,
    /// Membrane's `sessionIdExtractor`: the session id is the value of an expression.
    #[serde(default)]
    pub session_id_extractor: Option<SessionIdExtractorSettings>,
    /// Membrane's `xmlSessionIdExtractor`: the session id is the text of an XML element.
    #[serde(default)]
    pub xml_session_id_extractor: Option<XmlSessionIdExtractorSettings>,
    /// Membrane's `jSessionIdExtractor`: the session id is the `JSESSIONID` cookie.
    #[serde(default)]
    pub j_session_id_extractor: Option<EmptyMap>,
    /// Membrane's round robin dispatching strategy, the default (`{}`).
    #[serde(default)]
    pub round_robin_strategy: Option<EmptyMap>,
}

/// A cluster: as a map, or Membrane's `cluster:` wrapper.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ClusterEntry {
    /// `{name, nodes}`.
    Plain(ClusterSettings),
    /// `{cluster: {name, nodes}}`.
    Wrapped(WrappedCluster),
}

/// Membrane's `cluster:` wrapper.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WrappedCluster {
    /// The cluster.
    pub cluster: ClusterSettings,
}

/// One entry of `clustersFromSpring`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SpringClusters {
    /// The clusters.
    pub clusters: Vec<ClusterEntry>,
}

/// A cluster of nodes.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClusterSettings {
    /// Its name (default `Default`).
    #[serde(default)]
    pub name: Option<String>,
    /// Its nodes.
    #[serde(default)]
    pub nodes: Vec<NodeEntry>,
}

/// A node: as a map, or Membrane's `node:` wrapper.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum NodeEntry {
    /// `{host, port}`.
    Plain(NodeSettings),
    /// `{node: {host, port}}`.
    Wrapped(WrappedNode),
}

/// Membrane's `node:` wrapper.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WrappedNode {
    /// The node.
    pub node: NodeSettings,
}

/// A node: requests go to `http://host:port` with their path and query.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeSettings {
    /// Host name or IP address.
    pub host: String,
    /// Port (default 80).
    #[serde(default)]
    pub port: Option<u16>,
}

/// Membrane's `sessionIdExtractor`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SessionIdExtractorSettings {
    /// The expression whose value is the session id (`$.id` with `language: jsonpath`,
    /// `header['X-Session']` in SpEL).
    pub session_source: String,
    /// Its language: `spel` (default), `jsonpath` or `xpath`.
    #[serde(default)]
    pub language: Option<ExpressionLanguage>,
}

/// Membrane's `xmlSessionIdExtractor`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct XmlSessionIdExtractorSettings {
    /// The local name of the element whose text is the session id.
    pub local_name: String,
    /// Its namespace URI (any, when not set).
    #[serde(default)]
    pub namespace: Option<String>,
}

impl BalancerSettings {
    /// Runs at load time: the balancer's name (`Default` when not set).
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or(cluster::DEFAULT_NAME)
    }

    /// Runs at load time (by the policy, and by the compile stage, which builds the pool from
    /// them): the configured clusters, checked — each name once, each node a `host:port`.
    pub fn clusters(&self) -> Result<Vec<ClusterConfig>, CompileError> {
        if !self.clusters.is_empty() && !self.clusters_from_spring.is_empty() {
            return Err(err(
                "clustersFromSpring",
                "give the clusters either in `clusters` or in `clustersFromSpring`",
            ));
        }
        let entries: Vec<(String, &ClusterEntry)> = if self.clusters.is_empty() {
            self.clusters_from_spring
                .iter()
                .enumerate()
                .flat_map(|(i, s)| {
                    s.clusters
                        .iter()
                        .enumerate()
                        .map(move |(j, c)| (format!("clustersFromSpring[{i}].clusters[{j}]"), c))
                })
                .collect()
        } else {
            self.clusters
                .iter()
                .enumerate()
                .map(|(i, c)| (format!("clusters[{i}]"), c))
                .collect()
        };
        let mut out: Vec<ClusterConfig> = Vec::new();
        for (at, entry) in entries {
            let (c, at) = match entry {
                ClusterEntry::Plain(c) => (c, at),
                ClusterEntry::Wrapped(w) => (&w.cluster, format!("{at}.cluster")),
            };
            let name = c.name.as_deref().unwrap_or(cluster::DEFAULT_NAME).trim();
            if name.is_empty() {
                return Err(err(&format!("{at}.name"), "must not be empty"));
            }
            if out.iter().any(|o| o.name == name) {
                return Err(err(
                    &format!("{at}.name"),
                    format!("a second cluster named `{name}`"),
                ));
            }
            let mut nodes: Vec<NodeAddr> = Vec::new();
            for (k, n) in c.nodes.iter().enumerate() {
                let (n, key) = match n {
                    NodeEntry::Plain(n) => (n, format!("{at}.nodes[{k}]")),
                    NodeEntry::Wrapped(w) => (&w.node, format!("{at}.nodes[{k}].node")),
                };
                let node = NodeAddr::new(&n.host, n.port.unwrap_or(80))
                    .map_err(|m| err(&format!("{key}.host"), m))?;
                if !nodes.contains(&node) {
                    nodes.push(node);
                }
            }
            out.push(ClusterConfig {
                name: name.to_owned(),
                nodes,
            });
        }
        Ok(out)
    }

    /// `sessionTimeout` in milliseconds; `None`: forever.
    fn timeout(&self) -> Option<u64> {
        match &self.session_timeout {
            None => Some(SESSION_TIMEOUT_MS),
            Some(Millis::Number(0)) => None,
            Some(Millis::Number(ms)) => Some(*ms),
            Some(Millis::Duration(d)) if d.0.is_zero() => None,
            Some(Millis::Duration(d)) => Some(d.0.as_millis() as u64),
        }
    }
}

/// The session id a request had, kept for its response phase.
#[derive(Debug, Clone)]
struct RequestSession(String);

/// The compiled `balancer` policy: its part of the work is sticky sessions (the compile stage
/// made its pool the API's target).
#[derive(Debug)]
pub struct Balancer {
    state: Arc<BalancerState>,
    extractor: Option<Extractor>,
    timeout: Option<u64>,
}

impl PolicyFactory for Balancer {
    const NAME: &'static str = "balancer";
    type Settings = BalancerSettings;

    fn compile(c: BalancerSettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        c.clusters()?;
        if c.name().trim().is_empty() {
            return Err(err("name", "must not be empty"));
        }
        let given = [
            c.session_id_extractor.is_some(),
            c.xml_session_id_extractor.is_some(),
            c.j_session_id_extractor.is_some(),
        ];
        if given.iter().filter(|g| **g).count() > 1 {
            return Err(err(
                "sessionIdExtractor",
                "give one of `sessionIdExtractor`, `xmlSessionIdExtractor` and `jSessionIdExtractor`",
            ));
        }
        let extractor = if let Some(s) = &c.session_id_extractor {
            Some(
                Extractor::expression(&s.session_source, s.language, ctx)
                    .map_err(|m| err("sessionIdExtractor.sessionSource", m))?,
            )
        } else if let Some(x) = &c.xml_session_id_extractor {
            Some(
                Extractor::xml_element(&x.local_name, x.namespace.as_deref(), ctx)
                    .map_err(|(k, m)| err(&format!("xmlSessionIdExtractor.{k}"), m))?,
            )
        } else if c.j_session_id_extractor.is_some() {
            Some(Extractor::jsessionid().map_err(|m| err("jSessionIdExtractor", m))?)
        } else {
            None
        };
        let placed = "a `balancer` is its API's target: it stands once in the top-level `flow` of an `api:` or `internal:` document (not in `request:`, `response:`, conditions, `global:`, a consumer's flow or an API deployed from `openapi:`)";
        if ctx.in_consumer_flow || ctx.site.contains("|global ") {
            return Err(err("", placed));
        }
        let state = ctx
            .get::<BalancerSlot>()
            .and_then(BalancerSlot::take)
            .ok_or_else(|| err("", placed))?;
        Ok(Balancer {
            state,
            extractor,
            timeout: c.timeout(),
        })
    }
}

impl Balancer {
    /// The balancer's name (by which `clusterNotification` finds it); for logs and tools.
    pub fn balancer_name(&self) -> &str {
        self.state.name()
    }
}

impl Policy for Balancer {
    fn name(&self) -> &'static str {
        "balancer"
    }

    fn body_need(&self) -> BodyNeed {
        match &self.extractor {
            Some(x) if x.needs_body() => BodyNeed::Buffer,
            _ => BodyNeed::None,
        }
    }

    fn response_body_need(&self) -> BodyNeed {
        self.body_need()
    }

    fn response_needs_request(&self) -> bool {
        self.extractor
            .as_ref()
            .is_some_and(Extractor::reads_request)
    }

    /// With a session id extractor: asks the engine for the node the request's session is
    /// bound to. Always continues.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let Some(x) = &self.extractor else {
            return Outcome::Continue;
        };
        let id = x.session_id(ex, Message::Request);
        let preferred = id
            .as_deref()
            .and_then(|id| self.state.sessions().node(id, now_ms(), self.timeout));
        ex.directives.affinity = Some(NodeAffinity {
            preferred,
            answered: None,
        });
        if let Some(id) = id {
            ex.extensions.insert(RequestSession(id));
        }
        Outcome::Continue
    }

    /// With a session id extractor: binds the request's session id, and one the response
    /// carries, to the node that answered. Always continues.
    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        let Some(x) = &self.extractor else {
            return Outcome::Continue;
        };
        let Some(node) = ex
            .directives
            .affinity
            .as_ref()
            .and_then(|a| a.answered.clone())
        else {
            return Outcome::Continue;
        };
        let now = now_ms();
        if let Some(RequestSession(id)) = ex.extensions.remove::<RequestSession>() {
            self.state.sessions().bind(&id, &node, now, self.timeout);
        }
        if let Some(id) = x.session_id(ex, Message::Response) {
            self.state.sessions().bind(&id, &node, now, self.timeout);
        }
        Outcome::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{exchange, plain};

    fn settings(v: serde_json::Value) -> BalancerSettings {
        turnpike_core::settings::parse_all(v).unwrap()
    }

    fn compile_in_slot(key: &str, v: serde_json::Value) -> Result<Balancer, CompileError> {
        let s = settings(v);
        let state = BalancerState::new(s.name(), s.clusters()?, key);
        let mut shared = http::Extensions::new();
        shared.insert(BalancerSlot::new(state));
        let ctx = CompileContext {
            shared: &shared,
            site: "api a|flow[0].balancer",
            ..plain()
        };
        Balancer::compile(s, &ctx)
    }

    #[test]
    fn every_shape_of_clusters() {
        let one = settings(serde_json::json!({"clusters": [
            {"name": "Production", "nodes": [{"host": "localhost", "port": 4000}, {"host": "localhost", "port": 4001}, {"host": "localhost", "port": 4000}]}
        ]}));
        let c = one.clusters().unwrap();
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].name, "Production");
        assert_eq!(c[0].nodes.len(), 2, "a node given twice is one node");
        let spring = settings(
            serde_json::json!({"name": "balancer1", "clustersFromSpring": [
                {"clusters": [{"cluster": {"name": "Default", "nodes": [{"node": {"host": "localhost", "port": 4000}}, {"node": {"host": "h"}}]}}]}
            ]}),
        );
        assert_eq!(spring.name(), "balancer1");
        let c = spring.clusters().unwrap();
        assert_eq!(c[0].nodes[1].label(), "h:80");
        assert!(settings(serde_json::json!({}))
            .clusters()
            .unwrap()
            .is_empty());
        let e = settings(serde_json::json!({"clusters": [{"name": "a"}, {"name": "a"}]}))
            .clusters()
            .unwrap_err();
        assert_eq!(e.key, "clusters[1].name");
        let e =
            settings(serde_json::json!({"clusters": [{"nodes": [{"host": "a b", "port": 1}]}]}))
                .clusters()
                .unwrap_err();
        assert_eq!(e.key, "clusters[0].nodes[0].host");
        for bad in [
            serde_json::json!({"clusters": [{"nodes": [{"host": "a", "port": 1, "priority": 2}]}]}),
            serde_json::json!({"byThreadStrategy": {}}),
            serde_json::json!({"nodeOnlineChecker": {}}),
        ] {
            assert!(
                turnpike_core::settings::parse_all::<BalancerSettings>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn session_timeouts() {
        let t = |v: serde_json::Value| settings(v).timeout();
        assert_eq!(t(serde_json::json!({})), Some(3_600_000));
        assert_eq!(t(serde_json::json!({"sessionTimeout": 0})), None);
        assert_eq!(
            t(serde_json::json!({"sessionTimeout": 600000})),
            Some(600_000)
        );
        assert_eq!(
            t(serde_json::json!({"sessionTimeout": "10s"})),
            Some(10_000)
        );
    }

    #[test]
    fn it_stands_only_where_the_compile_stage_made_its_pool() {
        let e = Balancer::compile(settings(serde_json::json!({})), &plain()).unwrap_err();
        assert!(e.message.contains("top-level `flow`"), "{}", e.message);
        assert!(compile_in_slot("t|ok", serde_json::json!({})).is_ok());
        let e = compile_in_slot(
            "t|two",
            serde_json::json!({
                "sessionIdExtractor": {"sessionSource": "$.id", "language": "jsonpath"},
                "jSessionIdExtractor": {}
            }),
        )
        .unwrap_err();
        assert_eq!(e.key, "sessionIdExtractor");
    }

    #[test]
    fn sessions_go_to_their_node_and_bind_to_the_one_that_answered() {
        let b = compile_in_slot(
            "t|sticky",
            serde_json::json!({
                "sessionTimeout": 3600000,
                "sessionIdExtractor": {"sessionSource": "$.id", "language": "jsonpath"}
            }),
        )
        .unwrap();
        assert_eq!(b.body_need(), BodyNeed::Buffer);
        assert!(!b.response_needs_request());
        let mut ex = exchange("POST", "/", &[], r#"{"id":"1"}"#);
        assert!(matches!(b.on_request(&mut ex), Outcome::Continue));
        assert_eq!(ex.directives.affinity.as_ref().unwrap().preferred, None);
        // The engine forwarded it to a node.
        ex.directives.affinity.as_mut().unwrap().answered = Some("localhost:4001".into());
        ex.response = Some(http::Response::new(turnpike_core::Body::full("<html/>")));
        b.on_response(&mut ex);
        let mut again = exchange("POST", "/", &[], r#"{"id":"1"}"#);
        b.on_request(&mut again);
        assert_eq!(
            again
                .directives
                .affinity
                .as_ref()
                .unwrap()
                .preferred
                .as_deref(),
            Some("localhost:4001")
        );
        // A session id in the response binds too.
        let mut other = exchange("POST", "/", &[], "{}");
        b.on_request(&mut other);
        other.directives.affinity.as_mut().unwrap().answered = Some("localhost:4002".into());
        other.response = Some(http::Response::new(turnpike_core::Body::full(
            r#"{"id":"9"}"#,
        )));
        b.on_response(&mut other);
        let mut nine = exchange("POST", "/", &[], r#"{"id":"9"}"#);
        b.on_request(&mut nine);
        assert_eq!(
            nine.directives
                .affinity
                .as_ref()
                .unwrap()
                .preferred
                .as_deref(),
            Some("localhost:4002")
        );
        // Without an extractor the policy leaves requests alone.
        let plain_balancer = compile_in_slot("t|plain", serde_json::json!({})).unwrap();
        let mut ex = exchange("GET", "/", &[], "");
        plain_balancer.on_request(&mut ex);
        assert!(ex.directives.affinity.is_none());
    }
}
