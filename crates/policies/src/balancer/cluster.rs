//! The clusters of Membrane's `balancer`s and the status of their nodes, as Membrane's cluster
//! manager keeps them: nodes are `host:port`, each `up`, `down` or taken out (`takeout`); only
//! the nodes that are up take requests. Of a balancer's clusters, the only one takes the
//! traffic, or, when there are several, the one named `Default` (Membrane's rule).
//!
//! The configured clusters come from the balancer's settings; `clusterNotification` changes
//! node statuses at run time (adding nodes it does not know). Those changes outlive a reload
//! (they are kept per balancer, by its place in the configuration, while a snapshot uses it).
//! Every change hands the nodes that now take traffic to the compile stage's callback, which
//! builds the pool the data plane balances over; the request path never reads this module's
//! locks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use super::sessions::Sessions;

/// The name of a balancer or cluster that is not named, as in Membrane.
pub const DEFAULT_NAME: &str = "Default";

/// The most nodes changes at run time may add to one balancer.
const MAX_CHANGED_NODES: usize = 1000;

/// A node's status, as Membrane's cluster manager keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Takes requests.
    Up,
    /// Takes no requests (it failed, or was stopped).
    Down,
    /// Taken out of the balancing on purpose.
    TakeOut,
}

/// A node of a cluster: where requests go (`http://host:port` and the request's path).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodeAddr {
    /// The host name or IP address.
    pub host: String,
    /// The port.
    pub port: u16,
}

impl NodeAddr {
    /// Runs at load time and for each notification: checks that `host` and `port` make an
    /// authority (`host:port`), and returns the node or what is wrong.
    pub fn new(host: &str, port: u16) -> Result<NodeAddr, String> {
        let host = host.trim();
        if host.is_empty() {
            return Err("the host is empty".into());
        }
        if port == 0 {
            return Err("the port must be between 1 and 65535".into());
        }
        let node = NodeAddr {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port,
        };
        if node.host.contains(':') && node.host.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("`{host}` is not a host name or IP address"));
        }
        match http::uri::Authority::try_from(node.label().as_str()) {
            Ok(a) if a.port_u16() == Some(port) => Ok(node),
            _ => Err(format!("`{host}` is not a host name or IP address")),
        }
    }

    /// Runs when a pool is built: the node's authority, `host:port` (an IPv6 address in
    /// brackets), which is its label in logs and metrics and the `Host` of its requests.
    pub fn label(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// A configured cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// Its name.
    pub name: String,
    /// Its nodes, in order (each once).
    pub nodes: Vec<NodeAddr>,
}

/// A status change made at run time.
#[derive(Debug, Clone)]
struct Change {
    cluster: String,
    node: NodeAddr,
    status: Status,
}

/// What a balancer keeps across reloads: the changes made at run time (the latest status of
/// each node they touched, in the order the nodes first appeared) and its sessions.
#[derive(Default)]
pub(crate) struct Persisted {
    changes: Mutex<Vec<Change>>,
    pub(crate) sessions: Sessions,
}

/// Runs at load time: what the balancer at `key` kept, shared with the snapshot that uses it
/// now, or a new record.
fn persisted(key: &str) -> Arc<Persisted> {
    static ALL: Mutex<Option<HashMap<String, Weak<Persisted>>>> = Mutex::new(None);
    let mut all = ALL.lock().unwrap_or_else(|e| e.into_inner());
    let all = all.get_or_insert_with(HashMap::new);
    all.retain(|_, w| w.strong_count() > 0);
    if let Some(p) = all.get(key).and_then(Weak::upgrade) {
        return p;
    }
    let p = Arc::new(Persisted::default());
    all.insert(key.to_owned(), Arc::downgrade(&p));
    p
}

/// Called with the nodes that take traffic whenever they change.
pub type OnChange = Box<dyn Fn(&[NodeAddr]) + Send + Sync>;

/// One balancer of a loaded configuration: its configured clusters, the changes made at run
/// time, its sessions, and the callback that rebuilds its pool.
pub struct BalancerState {
    name: String,
    clusters: Vec<ClusterConfig>,
    persisted: Arc<Persisted>,
    on_change: OnceLock<OnChange>,
}

impl std::fmt::Debug for BalancerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BalancerState")
            .field("name", &self.name)
            .field("clusters", &self.clusters)
            .finish_non_exhaustive()
    }
}

impl BalancerState {
    /// Runs at load time: the balancer `name` with its configured clusters; `key` is its place
    /// in the configuration, under which run-time changes and sessions outlive a reload.
    pub fn new(name: &str, clusters: Vec<ClusterConfig>, key: &str) -> Arc<BalancerState> {
        Arc::new(BalancerState {
            name: name.to_owned(),
            clusters,
            persisted: persisted(key),
            on_change: OnceLock::new(),
        })
    }

    /// The balancer's name, as configured (for lookups and logs).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The balancer's sessions.
    pub(crate) fn sessions(&self) -> &Sessions {
        &self.persisted.sessions
    }

    /// Runs at load time (by the compile stage, once its pool is built): `f` is called with
    /// the nodes that take traffic each time they change. Only the first callback counts.
    pub fn on_change(&self, f: OnChange) {
        let _ = self.on_change.set(f);
    }

    /// Runs at load time and on each change: the nodes that take traffic now.
    pub fn serving(&self) -> Vec<NodeAddr> {
        let changes = self
            .persisted
            .changes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        serving(&self.clusters, &changes)
    }

    /// Runs for a notification: sets the status of `node` in `cluster` (adding the node, and
    /// the cluster, when they are new) and rebuilds the pool. Errs when run-time changes
    /// already added the most nodes a balancer may have.
    pub fn set(&self, cluster: &str, node: NodeAddr, status: Status) -> Result<(), String> {
        let mut changes = self
            .persisted
            .changes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let known = changes
            .iter()
            .position(|c| c.cluster == cluster && c.node == node);
        match known {
            Some(i) => changes[i].status = status,
            None if changes.len() >= MAX_CHANGED_NODES => {
                return Err(format!(
                    "the balancer `{}` has {MAX_CHANGED_NODES} nodes added at run time already",
                    self.name
                ))
            }
            None => changes.push(Change {
                cluster: cluster.to_owned(),
                node,
                status,
            }),
        }
        let now = serving(&self.clusters, &changes);
        // Still under the lock: two changes at once hand over their pools in order.
        if let Some(f) = self.on_change.get() {
            f(&now);
        }
        Ok(())
    }
}

/// The nodes that take traffic: the up nodes of the only cluster, or of the one named
/// `Default` when there are several (Membrane's rule), after the configured clusters (every
/// node up) took the run-time changes.
fn serving(configured: &[ClusterConfig], changes: &[Change]) -> Vec<NodeAddr> {
    // Without configured clusters, a balancer has the empty cluster `Default`.
    let mut clusters: Vec<(&str, Vec<(&NodeAddr, Status)>)> = if configured.is_empty() {
        vec![(DEFAULT_NAME, Vec::new())]
    } else {
        configured
            .iter()
            .map(|c| {
                (
                    c.name.as_str(),
                    c.nodes.iter().map(|n| (n, Status::Up)).collect(),
                )
            })
            .collect()
    };
    for c in changes {
        let at = match clusters.iter().position(|(name, _)| *name == c.cluster) {
            Some(at) => at,
            None => {
                clusters.push((&c.cluster, Vec::new()));
                clusters.len() - 1
            }
        };
        let nodes = &mut clusters[at].1;
        match nodes.iter_mut().find(|(n, _)| **n == c.node) {
            Some(entry) => entry.1 = c.status,
            None => nodes.push((&c.node, c.status)),
        }
    }
    let active = match clusters.as_slice() {
        [(_, only)] => Some(only),
        several => several
            .iter()
            .find(|(name, _)| *name == DEFAULT_NAME)
            .map(|(_, nodes)| nodes),
    };
    active
        .into_iter()
        .flatten()
        .filter(|(_, s)| *s == Status::Up)
        .map(|(n, _)| (*n).clone())
        .collect()
}

/// The balancers of one loaded configuration, in the order of the configuration:
/// `clusterNotification` finds them by name.
#[derive(Debug, Default)]
pub struct Directory {
    balancers: Mutex<Vec<Arc<BalancerState>>>,
}

impl Directory {
    /// Runs at load time: a directory without balancers.
    pub fn new() -> Directory {
        Directory::default()
    }

    /// Runs at load time: adds a balancer.
    pub fn add(&self, b: Arc<BalancerState>) {
        self.balancers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(b);
    }

    /// Runs for a notification: the first balancer named `name`, or else the only one whose
    /// name differs from it in case alone (Membrane's own example writes `balancer=default`).
    pub fn find(&self, name: &str) -> Option<Arc<BalancerState>> {
        let all = self.balancers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = all.iter().find(|b| b.name == name) {
            return Some(Arc::clone(b));
        }
        let mut like = all.iter().filter(|b| b.name.eq_ignore_ascii_case(name));
        match (like.next(), like.next()) {
            (Some(b), None) => Some(Arc::clone(b)),
            _ => None,
        }
    }

    /// Runs for a notification that names no balancer of the configuration: every balancer's
    /// name, for the error message.
    pub fn names(&self) -> Vec<String> {
        let all = self.balancers.lock().unwrap_or_else(|e| e.into_inner());
        all.iter().map(|b| b.name.clone()).collect()
    }
}

/// The state of the balancer that stands in an API's top-level flow, which the compile stage
/// built for it (with its pool as the API's target): put into the compile context of that
/// API's flows, and taken by the one `balancer` policy there.
#[derive(Debug, Clone)]
pub struct BalancerSlot(Arc<Mutex<Option<Arc<BalancerState>>>>);

impl BalancerSlot {
    /// Runs at load time: a slot holding `state`.
    pub fn new(state: Arc<BalancerState>) -> BalancerSlot {
        BalancerSlot(Arc::new(Mutex::new(Some(state))))
    }

    /// Runs at load time: takes the state out (`None` when a policy took it already).
    pub fn take(&self) -> Option<Arc<BalancerState>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: u16) -> NodeAddr {
        NodeAddr::new(host, port).unwrap()
    }

    fn cluster(name: &str, ports: &[u16]) -> ClusterConfig {
        ClusterConfig {
            name: name.into(),
            nodes: ports.iter().map(|p| node("localhost", *p)).collect(),
        }
    }

    fn ports(nodes: &[NodeAddr]) -> Vec<u16> {
        nodes.iter().map(|n| n.port).collect()
    }

    #[test]
    fn nodes_are_host_and_port() {
        assert_eq!(node("localhost", 4000).label(), "localhost:4000");
        assert_eq!(node("::1", 80).label(), "[::1]:80");
        assert_eq!(node("[::1]", 80).host, "::1");
        assert!(NodeAddr::new("", 80).is_err());
        assert!(NodeAddr::new("a b", 80).is_err());
        assert!(NodeAddr::new("a/b", 80).is_err());
        assert!(NodeAddr::new("a:1", 80).is_err());
        assert!(NodeAddr::new("a", 0).is_err());
    }

    #[test]
    fn the_only_cluster_or_default_takes_the_traffic() {
        let one = BalancerState::new("b", vec![cluster("Production", &[1, 2])], "t|one");
        assert_eq!(ports(&one.serving()), [1, 2]);
        // A change in another cluster makes two clusters: `Default` takes the traffic.
        one.set("Default", node("localhost", 3), Status::Up)
            .unwrap();
        assert_eq!(ports(&one.serving()), [3]);
        let two = BalancerState::new(
            "b",
            vec![cluster("A", &[1]), cluster("Default", &[2])],
            "t|two",
        );
        assert_eq!(ports(&two.serving()), [2]);
        let none = BalancerState::new("b", vec![cluster("A", &[1]), cluster("B", &[2])], "t|n");
        assert!(none.serving().is_empty());
    }

    #[test]
    fn notifications_add_and_take_nodes_out() {
        let b = BalancerState::new("b", Vec::new(), "t|dyn");
        assert!(b.serving().is_empty());
        let seen: Arc<Mutex<Vec<Vec<u16>>>> = Arc::default();
        let s = Arc::clone(&seen);
        b.on_change(Box::new(move |n| s.lock().unwrap().push(ports(n))));
        b.set("Default", node("localhost", 1), Status::Up).unwrap();
        b.set("Default", node("localhost", 2), Status::Up).unwrap();
        b.set("Default", node("localhost", 1), Status::Down)
            .unwrap();
        b.set("Default", node("localhost", 3), Status::TakeOut)
            .unwrap();
        b.set("Default", node("localhost", 1), Status::Up).unwrap();
        assert_eq!(
            *seen.lock().unwrap(),
            [vec![1], vec![1, 2], vec![2], vec![2], vec![1, 2]]
        );
        // A reload of the same balancer keeps the changes, on the configured nodes.
        let again = BalancerState::new("b", vec![cluster("Default", &[5])], "t|dyn");
        assert_eq!(ports(&again.serving()), [5, 1, 2]);
    }

    #[test]
    fn run_time_nodes_are_bounded() {
        let b = BalancerState::new("b", Vec::new(), "t|bound");
        for p in 1..=MAX_CHANGED_NODES as u16 {
            b.set("Default", node("h", p), Status::Up).unwrap();
        }
        assert!(b.set("Default", node("h", 4000), Status::Up).is_err());
        // A node it knows still changes.
        b.set("Default", node("h", 1), Status::Down).unwrap();
    }

    #[test]
    fn balancers_are_found_by_name() {
        let d = Directory::new();
        d.add(BalancerState::new("Default", Vec::new(), "t|d1"));
        d.add(BalancerState::new("balancer1", Vec::new(), "t|d2"));
        d.add(BalancerState::new("Balancer1", Vec::new(), "t|d3"));
        assert_eq!(d.find("default").unwrap().name(), "Default");
        assert_eq!(d.find("Balancer1").unwrap().name(), "Balancer1");
        assert!(d.find("BALANCER1").is_none(), "two differ in case alone");
        assert!(d.find("nope").is_none());
        assert_eq!(d.names(), ["Default", "balancer1", "Balancer1"]);
        let slot = BalancerSlot::new(d.find("Default").unwrap());
        assert!(slot.clone().take().is_some());
        assert!(slot.take().is_none());
    }
}
