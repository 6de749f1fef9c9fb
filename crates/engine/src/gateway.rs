//! The control plane: starts the workers, compiles configurations into snapshots, opens and
//! closes listeners, swaps snapshots atomically on reload, and shuts down gracefully.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use arc_swap::ArcSwap;
use tokio::sync::mpsc;
use turnpike_snapshot::{Settings, Snapshot};

use crate::listener::bind_group;
use crate::worker::{self, Command};

/// What the compile stage made of a configuration.
pub struct Compiled {
    /// The snapshot to serve.
    pub snapshot: Snapshot,
    /// Every local file the configuration read (config files, specs, WSDLs, key material):
    /// a change to one of them means a reload with `--watch`.
    pub files: Vec<PathBuf>,
}

/// The compile stage as the control plane sees it: called at start and on every reload, off
/// the request path.
pub trait Compiler: Send + Sync {
    /// Loads and compiles the configuration at `sources` (files or folders). The error lists
    /// every problem found, each with its location.
    fn compile(
        &self,
        sources: &[PathBuf],
    ) -> Result<Compiled, Box<dyn std::error::Error + Send + Sync>>;
}

/// Why a configuration could not be started or applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The configuration has errors (each with its location).
    #[error("{0}")]
    Config(Box<dyn std::error::Error + Send + Sync>),
    /// A listener could not be opened.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// A worker thread could not be started.
    #[error("cannot start a worker thread: {0}")]
    Thread(std::io::Error),
}

struct Control {
    /// Configured address → bound address, for every open listener.
    bound: HashMap<SocketAddr, SocketAddr>,
    /// A duplicate of every listening socket (the workers own the originals), handed to the
    /// process that replaces this one in a binary upgrade.
    sockets: HashMap<SocketAddr, Vec<std::net::TcpListener>>,
    settings: Settings,
    sources: Vec<PathBuf>,
    files: Vec<PathBuf>,
}

type Workers = Vec<(mpsc::UnboundedSender<Command>, JoinHandle<()>)>;

/// A running gateway. Dropping it stops the workers at once; [`Gateway::shutdown`] lets
/// in-flight requests finish first. Shared by the control plane's parts (signals, the admin
/// API) behind an `Arc`.
pub struct Gateway {
    compiler: Arc<dyn Compiler>,
    /// Probes the nodes of upstreams with active health checks.
    prober: Mutex<Option<crate::health::Prober>>,
    snapshot: Arc<ArcSwap<Snapshot>>,
    workers: Mutex<Workers>,
    /// How many workers were started.
    threads: usize,
    control: Mutex<Control>,
}

impl Gateway {
    /// Loads the configuration from `sources` (files or folders) with `compiler`, opens its
    /// listeners and starts the workers. [`Gateway::reload`] compiles `sources` again.
    pub fn start(sources: Vec<PathBuf>, compiler: Arc<dyn Compiler>) -> Result<Self, ApplyError> {
        let compiled = compiler.compile(&sources).map_err(ApplyError::Config)?;
        Gateway::start_compiled(compiled, sources, compiler)
    }

    /// [`Gateway::start`] with the configuration compiled already (from `sources`).
    pub fn start_compiled(
        compiled: Compiled,
        sources: Vec<PathBuf>,
        compiler: Arc<dyn Compiler>,
    ) -> Result<Self, ApplyError> {
        let Compiled {
            snapshot: snap,
            files,
        } = compiled;
        let settings = snap.settings.clone();
        let threads = settings.threads.max(1);
        let mut opened = Vec::new();
        let mut bound = HashMap::new();
        let mut dups = HashMap::new();
        for &key in snap.listeners.keys() {
            let (addr, sockets) = bind_group(key, threads)
                .map_err(|source| ApplyError::Bind { addr: key, source })?;
            bound.insert(key, addr);
            dups.insert(
                key,
                duplicates(&sockets).map_err(|source| ApplyError::Bind { addr: key, source })?,
            );
            opened.push((key, sockets));
        }
        let unclaimed = crate::listener::drop_unclaimed("api");
        if unclaimed > 0 {
            tracing::info!(
                "{unclaimed} inherited sockets closed: the configuration no longer listens there"
            );
        }
        configure_traces(&snap);
        let snapshot = Arc::new(ArcSwap::from_pointee(snap));
        let per_ip = crate::slow::PerIp::default();
        let mut workers = Vec::with_capacity(threads);
        for id in 0..threads {
            let (tx, rx) = mpsc::unbounded_channel();
            let snap = Arc::clone(&snapshot);
            let s = settings.clone();
            let per_ip = per_ip.clone();
            let handle = std::thread::Builder::new()
                .name(format!("turnpike-worker-{id}"))
                .spawn(move || {
                    if let Err(e) = worker::run(id, snap, s, per_ip, rx) {
                        tracing::error!(worker = id, "worker failed to start: {e}");
                    }
                })
                .map_err(ApplyError::Thread)?;
            workers.push((tx, handle));
        }
        let prober =
            crate::health::Prober::start(Arc::clone(&snapshot)).map_err(ApplyError::Thread)?;
        let gw = Gateway {
            compiler,
            prober: Mutex::new(Some(prober)),
            snapshot,
            threads: workers.len(),
            workers: Mutex::new(workers),
            control: Mutex::new(Control {
                bound,
                sockets: dups,
                settings,
                sources,
                files,
            }),
        };
        gw.distribute(opened);
        Ok(gw)
    }

    fn distribute(&self, opened: Vec<(SocketAddr, Vec<std::net::TcpListener>)>) {
        let mut per_worker: Vec<Vec<(SocketAddr, std::net::TcpListener)>> =
            (0..self.threads).map(|_| Vec::new()).collect();
        for (key, sockets) in opened {
            // More sockets than workers (inherited from a process with more): some workers
            // accept on two.
            for (i, s) in sockets.into_iter().enumerate() {
                if let Some(list) = per_worker.get_mut(i % self.threads.max(1)) {
                    list.push((key, s));
                }
            }
        }
        for ((tx, _), list) in self.workers().iter().zip(per_worker) {
            if !list.is_empty() {
                let _ = tx.send(Command::Open(list));
            }
        }
    }

    /// The address a configured listening address is bound to (they differ for port 0).
    pub fn bound_addr(&self, configured: SocketAddr) -> Option<SocketAddr> {
        self.lock().bound.get(&configured).copied()
    }

    /// Every open listener: configured address and bound address.
    pub fn listeners(&self) -> Vec<(SocketAddr, SocketAddr)> {
        let mut v: Vec<_> = self.lock().bound.iter().map(|(k, v)| (*k, *v)).collect();
        v.sort();
        v
    }

    /// Duplicates of every listening socket, by configured and bound address: what a binary
    /// upgrade hands to the new process.
    pub fn listening_sockets(
        &self,
    ) -> std::io::Result<Vec<(SocketAddr, SocketAddr, Vec<std::net::TcpListener>)>> {
        let control = self.lock();
        let mut out = Vec::new();
        for (key, sockets) in &control.sockets {
            let bound = control.bound.get(key).copied().unwrap_or(*key);
            out.push((*key, bound, duplicates(sockets)?));
        }
        Ok(out)
    }

    /// Stops accepting on every listener (a binary upgrade handed them over); open
    /// connections go on.
    pub fn stop_accepting(&self) {
        let mut control = self.lock();
        let keys: Vec<SocketAddr> = control.bound.keys().copied().collect();
        for (tx, _) in self.workers().iter() {
            let _ = tx.send(Command::Close(keys.clone()));
        }
        control.sockets.clear();
    }

    /// Every file the current configuration was read from.
    pub fn files(&self) -> Vec<PathBuf> {
        self.lock().files.clone()
    }

    /// The paths given at start (files or folders).
    pub fn sources(&self) -> Vec<PathBuf> {
        self.lock().sources.clone()
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Control> {
        self.control.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn workers(&self) -> std::sync::MutexGuard<'_, Workers> {
        self.workers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The number of worker threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Reads the sources again and applies them. On any error nothing changes and the current
    /// configuration keeps serving.
    pub fn reload(&self) -> Result<(), ApplyError> {
        let sources = self.sources();
        let compiled = self
            .compiler
            .compile(&sources)
            .map_err(ApplyError::Config)?;
        self.apply(compiled)
    }

    /// Applies a compiled configuration: new listeners opened, the snapshot swapped atomically
    /// (requests in flight finish on the old one), removed listeners closed. On any error
    /// nothing changes.
    pub fn apply(&self, compiled: Compiled) -> Result<(), ApplyError> {
        let Compiled {
            snapshot: snap,
            files,
        } = compiled;
        let mut control = self.lock();
        let threads = self.threads;
        let mut opened = Vec::new();
        let mut new_bound = HashMap::new();
        let mut new_dups = HashMap::new();
        for &key in snap.listeners.keys() {
            if let Some(addr) = control.bound.get(&key) {
                new_bound.insert(key, *addr);
                continue;
            }
            let (addr, sockets) = bind_group(key, threads)
                .map_err(|source| ApplyError::Bind { addr: key, source })?;
            new_bound.insert(key, addr);
            new_dups.insert(
                key,
                duplicates(&sockets).map_err(|source| ApplyError::Bind { addr: key, source })?,
            );
            opened.push((key, sockets));
        }
        let closed: Vec<SocketAddr> = control
            .bound
            .keys()
            .filter(|k| !snap.listeners.contains_key(k))
            .copied()
            .collect();
        let settings = snap.settings.clone();
        if settings.threads != control.settings.threads {
            tracing::warn!(
                running = control.settings.threads,
                configured = settings.threads,
                "gateway.threads changes take effect after a restart"
            );
        }
        configure_traces(&snap);
        self.snapshot.store(Arc::new(snap));
        if settings != control.settings {
            for (tx, _) in self.workers().iter() {
                let _ = tx.send(Command::Settings(Box::new(settings.clone())));
            }
        }
        self.distribute(opened);
        if !closed.is_empty() {
            for (tx, _) in self.workers().iter() {
                let _ = tx.send(Command::Close(closed.clone()));
            }
        }
        control.bound = new_bound;
        for key in &closed {
            control.sockets.remove(key);
        }
        control.sockets.extend(new_dups);
        control.settings = settings;
        control.files = files;
        Ok(())
    }

    /// Stops accepting, lets in-flight requests finish within the configured grace period, and
    /// waits for the workers to end. Later calls return at once.
    pub fn shutdown(&self) {
        let grace = self.lock().settings.shutdown_timeout;
        self.stop(grace);
    }

    fn stop(&self, grace: std::time::Duration) {
        if self.snapshot.load().settings.trace_export.is_some() {
            // Sends the spans still queued.
            let _ = turnpike_telemetry::trace::configure(None);
        }
        self.prober.lock().unwrap_or_else(|e| e.into_inner()).take();
        let workers = std::mem::take(&mut *self.workers());
        for (tx, _) in &workers {
            let _ = tx.send(Command::Shutdown(grace));
        }
        for (_, handle) in workers {
            let _ = handle.join();
        }
        // The access log lines of the last requests.
        turnpike_telemetry::lines::flush();
    }
}

/// Starts, changes or stops the trace exporter, and opens the access log file, as the
/// configuration says.
fn configure_traces(snap: &Snapshot) {
    if let Err(e) = turnpike_telemetry::trace::configure(snap.settings.trace_export.clone()) {
        tracing::error!("{e}");
    }
    if let Err(e) = crate::access_log::set_output(snap.settings.access_log.as_deref()) {
        tracing::error!("cannot open the access log: {e}");
    }
    if snap.settings.exchange_store.is_none() {
        crate::exchanges::clear();
    }
}

fn duplicates(sockets: &[std::net::TcpListener]) -> std::io::Result<Vec<std::net::TcpListener>> {
    sockets
        .iter()
        .map(std::net::TcpListener::try_clone)
        .collect()
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.stop(std::time::Duration::ZERO);
    }
}
