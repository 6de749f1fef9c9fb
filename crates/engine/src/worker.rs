//! A data-plane worker: one OS thread with a current-thread tokio runtime, its own listening
//! sockets (one per address, `SO_REUSEPORT`) and its own upstream pool. Nothing on its hot path is
//! shared with other workers except the immutable snapshot.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinHandle;

use crate::proxy::{self, RequestContext};
use crate::snapshot::{Settings, Snapshot};
use crate::upstream::{self, UpstreamPool};

/// What the control plane tells a worker.
#[derive(Debug)]
pub enum Command {
    /// Start accepting on these sockets (keyed by their configured address).
    Open(Vec<(SocketAddr, std::net::TcpListener)>),
    /// Stop accepting on these addresses; their open connections finish normally.
    Close(Vec<SocketAddr>),
    /// New settings (the upstream pool is rebuilt when its settings changed).
    Settings(Settings),
    /// Stop accepting, let in-flight requests finish within the grace period, then exit.
    Shutdown(Duration),
}

struct Worker {
    snapshot: Arc<ArcSwap<Snapshot>>,
    client: RefCell<Rc<UpstreamPool>>,
    settings: RefCell<Settings>,
    shutdown: watch::Receiver<bool>,
    active: Cell<usize>,
    idle: Notify,
}

/// Runs a worker on the current thread until it is told to shut down.
pub fn run(
    id: usize,
    snapshot: Arc<ArcSwap<Snapshot>>,
    settings: Settings,
    commands: mpsc::UnboundedReceiver<Command>,
) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, main_loop(id, snapshot, settings, commands));
    Ok(())
}

async fn main_loop(
    id: usize,
    snapshot: Arc<ArcSwap<Snapshot>>,
    settings: Settings,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let worker = Rc::new(Worker {
        snapshot,
        client: RefCell::new(Rc::new(UpstreamPool::new(&settings))),
        settings: RefCell::new(settings),
        shutdown: shutdown_rx,
        active: Cell::new(0),
        idle: Notify::new(),
    });
    let mut accepting: HashMap<SocketAddr, JoinHandle<()>> = HashMap::new();
    let sweeper = {
        let worker = worker.clone();
        tokio::task::spawn_local(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                let pool = Rc::clone(&worker.client.borrow());
                pool.sweep();
            }
        })
    };
    while let Some(cmd) = commands.recv().await {
        match cmd {
            Command::Open(list) => {
                for (key, std_listener) in list {
                    match TcpListener::from_std(std_listener) {
                        Ok(l) => {
                            let task =
                                tokio::task::spawn_local(accept_loop(worker.clone(), key, l));
                            if let Some(old) = accepting.insert(key, task) {
                                old.abort();
                            }
                        }
                        Err(e) => tracing::error!(worker = id, %key, "cannot use listener: {e}"),
                    }
                }
            }
            Command::Close(keys) => {
                for key in keys {
                    if let Some(task) = accepting.remove(&key) {
                        task.abort();
                    }
                }
            }
            Command::Settings(s) => {
                if upstream::client_settings_changed(&worker.settings.borrow(), &s) {
                    *worker.client.borrow_mut() = Rc::new(UpstreamPool::new(&s));
                }
                *worker.settings.borrow_mut() = s;
            }
            Command::Shutdown(grace) => {
                sweeper.abort();
                for (_, task) in accepting.drain() {
                    task.abort();
                }
                let _ = shutdown_tx.send(true);
                let drained = async {
                    while worker.active.get() > 0 {
                        worker.idle.notified().await;
                    }
                };
                if tokio::time::timeout(grace, drained).await.is_err() {
                    tracing::warn!(
                        worker = id,
                        connections = worker.active.get(),
                        "grace period over; closing connections still open"
                    );
                }
                return;
            }
        }
    }
}

async fn accept_loop(worker: Rc<Worker>, key: SocketAddr, listener: TcpListener) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(%key, "accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        tokio::task::spawn_local(serve_connection(worker.clone(), key, stream, peer));
    }
}

async fn serve_connection(
    worker: Rc<Worker>,
    key: SocketAddr,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
) {
    worker.active.set(worker.active.get() + 1);
    let mut shutdown = worker.shutdown.clone();
    let (max_buf, max_headers, header_timeout) = {
        let s = worker.settings.borrow();
        (s.max_header_size, s.max_headers, s.header_read_timeout)
    };
    let svc_worker = worker.clone();
    let peer_ip = Rc::new(crate::headers::client_ip_value(peer.ip()));
    let service = service_fn(move |req| {
        let w = svc_worker.clone();
        let peer_ip = peer_ip.clone();
        async move {
            let snap = w.snapshot.load_full();
            let client = Rc::clone(&w.client.borrow());
            let ctx = RequestContext {
                client: &client,
                listener: key,
                peer,
                peer_ip: &peer_ip,
            };
            Ok::<_, std::convert::Infallible>(proxy::serve(snap, ctx, req).await)
        }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .max_buf_size(max_buf)
        .max_headers(max_headers)
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let result = if *shutdown.borrow() {
        conn.as_mut().graceful_shutdown();
        conn.await
    } else {
        tokio::select! {
            r = conn.as_mut() => r,
            _ = shutdown.changed() => {
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        }
    };
    if let Err(e) = result {
        tracing::debug!(%peer, "connection ended with an error: {e}");
    }
    let n = worker.active.get() - 1;
    worker.active.set(n);
    if n == 0 {
        worker.idle.notify_waiters();
    }
}
