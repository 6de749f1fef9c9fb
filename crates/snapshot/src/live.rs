//! Pools whose nodes change while the gateway runs: Membrane's `balancer` clusters, whose nodes
//! register and leave over HTTP (`clusterNotification`) between reloads.
//!
//! The rest of a snapshot never changes, and a pool of it is no exception: a change of nodes
//! builds a whole new [`Upstream`] (off the request path, where the change is made) and swaps it
//! in atomically. A request loads the current pool once, without a lock (an atomic reference
//! count), and balances over that pool to its end, retries included; requests that started
//! before a swap finish on the pool they loaded. Nothing on the request path waits for a change.

use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::upstream::Upstream;

/// A pool whose nodes can be replaced at run time (see the module documentation).
pub struct LivePool {
    current: ArcSwap<Upstream>,
}

impl std::fmt::Debug for LivePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let current = self.current.load();
        f.debug_struct("LivePool")
            .field("name", &current.name)
            .field("nodes", &current.nodes.len())
            .finish()
    }
}

impl LivePool {
    /// Runs at load time: a live pool starting with `up`.
    pub fn new(up: Upstream) -> LivePool {
        LivePool {
            current: ArcSwap::from_pointee(up),
        }
    }

    /// Runs once per forwarded request: the pool as it is now (lock-free), which the request
    /// keeps to its end.
    pub fn current(&self) -> Arc<Upstream> {
        self.current.load_full()
    }

    /// Runs when the nodes change (never on the request path): `up` takes the place of the
    /// current pool for the requests that start from now on.
    pub fn replace(&self, up: Upstream) {
        self.current.store(Arc::new(up));
    }
}
