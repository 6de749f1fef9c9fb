//! The Redis a rate limit store talks to: one server, a Redis Cluster (each command goes to the
//! node that owns its key's slot; the client follows `MOVED` and topology changes), or the
//! primary that Redis Sentinels name for a master name. The primary is looked up by a thread of
//! the store's own every second and at once after a failed command, so a failover is followed
//! within about a second: connections made for an earlier primary are replaced on their next
//! use.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::sentinel::SentinelClient;
use redis::{Cmd, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use tokio::sync::{watch, Notify};

/// How often the Sentinels are asked for the primary when nothing failed.
const SENTINEL_POLL: Duration = Duration::from_secs(1);

/// Where a store's counters live.
pub enum Server {
    /// One server.
    Single(redis::Client),
    /// A Redis Cluster, found from its seed nodes.
    Cluster(ClusterClient),
    /// The primary named by Sentinels.
    Sentinel(Sentinel),
}

/// A connection to the store's Redis: it connects on first use and reconnects by itself.
#[derive(Clone)]
pub enum Conn {
    /// To one server (or a Sentinel-named primary).
    Single(ConnectionManager),
    /// To every node of a cluster.
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// The primary of a Sentinel-monitored master, kept current by a lookup thread (started with
/// the first connection, stopped when the store is dropped).
pub struct Sentinel {
    /// Given to the lookup thread when it starts.
    client: Mutex<Option<SentinelClient>>,
    master_name: String,
    /// The current primary and its generation (bumped each time the primary changes).
    primary: watch::Sender<Option<(u64, redis::Client)>>,
    /// Wakes the lookup thread after a failure.
    wake: Arc<Notify>,
    started: OnceLock<()>,
    stopped: Arc<AtomicBool>,
}

impl Sentinel {
    /// Primaries of `master_name` as `client` finds them.
    pub fn new(client: SentinelClient, master_name: String) -> Sentinel {
        Sentinel {
            client: Mutex::new(Some(client)),
            master_name,
            primary: watch::Sender::new(None),
            wake: Arc::new(Notify::new()),
            started: OnceLock::new(),
            stopped: Arc::new(AtomicBool::new(false)),
        }
    }

    fn start(&self) {
        let Some(mut client) = self.client.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        let (tx, wake, stopped) = (
            self.primary.clone(),
            Arc::clone(&self.wake),
            Arc::clone(&self.stopped),
        );
        let name = self.master_name.clone();
        spawn_background("turnpike-redis-sentinel", move || async move {
            let mut logged: Option<Instant> = None;
            let mut generation = 0u64;
            while !stopped.load(Relaxed) {
                match tokio::time::timeout(Duration::from_secs(2), client.async_get_client()).await
                {
                    Ok(Ok(found)) => {
                        let addr = found.get_connection_info().addr().to_string();
                        let same = tx.borrow().as_ref().is_some_and(|(_, c)| {
                            c.get_connection_info().addr().to_string() == addr
                        });
                        if !same {
                            generation += 1;
                            tracing::info!(
                                        "rate limit store: the Sentinels name {addr} as the primary of `{name}`"
                                    );
                            tx.send_replace(Some((generation, found)));
                        }
                    }
                    failed => {
                        if logged.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                            logged = Some(Instant::now());
                            let why = match failed {
                                Ok(Err(e)) => e.to_string(),
                                _ => "no Sentinel answered within 2s".into(),
                            };
                            tracing::warn!(
                                        "rate limit store: no primary of `{name}` from the Sentinels ({why})"
                                    );
                        }
                    }
                }
                tokio::select! {
                    () = wake.notified() => {}
                    () = tokio::time::sleep(SENTINEL_POLL) => {}
                }
            }
        });
    }
}

/// Runs the future `task` makes on a thread of its own with a single-threaded runtime: a store's
/// background work (syncs, Sentinel lookups), kept off the workers. Logs when the thread cannot
/// start.
pub fn spawn_background<F>(name: &str, task: impl FnOnce() -> F + Send + 'static)
where
    F: std::future::Future<Output = ()>,
{
    let spawned = std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt.block_on(task()),
                Err(e) => {
                    tracing::error!("a rate limit store's background thread has no runtime: {e}")
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!("cannot start {name}: {e}");
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.stopped.store(true, Relaxed);
        self.wake.notify_one();
    }
}

impl Server {
    /// Which connections are current: they are made again when this changes (a Sentinel
    /// failover); 0 for a single server or a cluster.
    pub fn generation(&self) -> u64 {
        match self {
            Server::Sentinel(s) => s.primary.borrow().as_ref().map_or(0, |(g, _)| *g),
            _ => 0,
        }
    }

    /// A connection (made without connecting yet) and its generation. For Sentinels, waits for
    /// the first lookup of the primary: the caller bounds the wait.
    pub async fn connect(&self, timeout: Duration) -> RedisResult<(u64, Conn)> {
        let timeout = timeout.max(Duration::from_millis(200));
        let manager = |client: redis::Client| {
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(Some(timeout))
                .set_number_of_retries(1)
                .set_min_delay(Duration::from_millis(50))
                .set_max_delay(Duration::from_secs(2));
            ConnectionManager::new_lazy_with_config(client, config).map(Conn::Single)
        };
        match self {
            Server::Single(client) => Ok((0, manager(client.clone())?)),
            Server::Cluster(client) => {
                let config = redis::cluster::ClusterConfig::new()
                    .set_connection_timeout(timeout)
                    .set_response_timeout(timeout);
                Ok((
                    0,
                    Conn::Cluster(client.get_pending_async_connection_with_config(config)),
                ))
            }
            Server::Sentinel(s) => {
                s.started.get_or_init(|| s.start());
                let mut rx = s.primary.subscribe();
                let found = rx
                    .wait_for(Option::is_some)
                    .await
                    .map_err(|_| {
                        RedisError::from((redis::ErrorKind::Io, "the Sentinel lookup stopped"))
                    })?
                    .clone();
                match found {
                    Some((generation, client)) => Ok((generation, manager(client)?)),
                    None => Err(RedisError::from((redis::ErrorKind::Io, "no primary known"))),
                }
            }
        }
    }

    /// A command failed: with Sentinels, the primary is looked up again at once.
    pub fn failed(&self) {
        if let Server::Sentinel(s) = self {
            s.wake.notify_one();
        }
    }

    /// True for a cluster, where a pipeline's keys must share a slot.
    pub fn is_cluster(&self) -> bool {
        matches!(self, Server::Cluster(_))
    }
}
