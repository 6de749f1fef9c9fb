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
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;

use turnpike_snapshot::{Settings, Snapshot};

use crate::balance::Balancers;
use crate::conn::ConnInfo;
use crate::exec::LocalExec;
use crate::plain_io::PlainStream;
use crate::request::{self, RequestContext};
use crate::shutdown::{until_done, Shutdown};
use crate::slow::{PerIp, WriteTimeout};
use crate::upstream::{self, UpstreamPool};

/// What the control plane tells a worker.
#[derive(Debug)]
pub enum Command {
    /// Start accepting on these sockets (keyed by their configured address).
    Open(Vec<(SocketAddr, std::net::TcpListener)>),
    /// Stop accepting on these addresses; their open connections finish normally.
    Close(Vec<SocketAddr>),
    /// New settings (the upstream pool is rebuilt when its settings changed).
    Settings(Box<Settings>),
    /// Stop accepting, let in-flight requests finish within the grace period, then exit.
    Shutdown(Duration),
}

struct Worker {
    /// Its index (the block of the counters it writes).
    id: usize,
    snapshot: Arc<ArcSwap<Snapshot>>,
    balancers: Balancers,
    per_ip: PerIp,
    client: RefCell<Rc<UpstreamPool>>,
    settings: RefCell<Settings>,
    shutdown: Rc<Shutdown>,
    active: Cell<usize>,
    idle: Notify,
}

/// Runs a worker on the current thread until it is told to shut down.
pub fn run(
    id: usize,
    snapshot: Arc<ArcSwap<Snapshot>>,
    settings: Settings,
    per_ip: PerIp,
    commands: mpsc::UnboundedReceiver<Command>,
) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, main_loop(id, snapshot, settings, per_ip, commands));
    Ok(())
}

async fn main_loop(
    id: usize,
    snapshot: Arc<ArcSwap<Snapshot>>,
    settings: Settings,
    per_ip: PerIp,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let worker = Rc::new(Worker {
        id,
        snapshot,
        balancers: Balancers::default(),
        per_ip,
        client: RefCell::new(Rc::new(UpstreamPool::new(&settings))),
        settings: RefCell::new(settings),
        shutdown: Rc::new(Shutdown::default()),
        active: Cell::new(0),
        idle: Notify::new(),
    });
    let mut accepting: HashMap<SocketAddr, Vec<JoinHandle<()>>> = HashMap::new();
    let deadlines = crate::deadline::install();
    let sweeper = {
        let worker = worker.clone();
        tokio::task::spawn_local(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                let pool = Rc::clone(&worker.client.borrow());
                pool.sweep();
                worker.balancers.sweep();
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
                            accepting.entry(key).or_default().push(task);
                        }
                        Err(e) => tracing::error!(worker = id, %key, "cannot use listener: {e}"),
                    }
                }
            }
            Command::Close(keys) => {
                for key in keys {
                    for task in accepting.remove(&key).unwrap_or_default() {
                        task.abort();
                    }
                }
            }
            Command::Settings(s) => {
                if upstream::client_settings_changed(&worker.settings.borrow(), &s) {
                    *worker.client.borrow_mut() = Rc::new(UpstreamPool::new(&s));
                }
                *worker.settings.borrow_mut() = *s;
            }
            Command::Shutdown(grace) => {
                sweeper.abort();
                for task in accepting.drain().flat_map(|(_, tasks)| tasks) {
                    task.abort();
                }
                worker.shutdown.trigger();
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
                deadlines.abort();
                return;
            }
        }
    }
    deadlines.abort();
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
        let max = worker.settings.borrow().max_connections_per_ip;
        let counted = match max {
            None => None,
            Some(max) => match worker.per_ip.admit(peer.ip(), max) {
                Some(c) => Some(c),
                None => {
                    tracing::debug!(%peer, "connection refused: {max} open from this IP already");
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let worker = worker.clone();
        tokio::task::spawn_local(async move {
            serve_connection(worker, key, stream, peer).await;
            drop(counted);
        });
    }
}

/// How long an HTTP/1.1 connection may still carry requests once the worker shuts down (each
/// answered with `Connection: close`) before an idle one is closed.
const DRAIN_LINGER: Duration = Duration::from_secs(1);

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// True when the client starts with the HTTP/2 connection preface (h2c prior knowledge).
async fn starts_with_h2_preface(stream: &tokio::net::TcpStream, timeout: Duration) -> bool {
    let mut buf = [0u8; 24];
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let n = match tokio::time::timeout_at(deadline, stream.peek(&mut buf)).await {
            Ok(Ok(n)) => n,
            _ => return false,
        };
        if n == 0 || buf[..n] != H2_PREFACE[..n] {
            return false;
        }
        if n == H2_PREFACE.len() {
            return true;
        }
        // A partial preface: wait for more bytes.
        if stream.readable().await.is_err() {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn serve_connection(
    worker: Rc<Worker>,
    key: SocketAddr,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
) {
    worker.active.set(worker.active.get() + 1);
    let passthrough = {
        let snap = worker.snapshot.load();
        snap.listeners
            .get(&key)
            .filter(|l| !l.passthrough.is_empty())
            .map(|l| Arc::clone(&l.passthrough))
    };
    if let Some(proxies) = passthrough {
        let (dns, hello, connect) = {
            let s = worker.settings.borrow();
            (s.dns.clone(), s.header_read_timeout, s.connect_timeout)
        };
        crate::passthrough::relay(stream, peer, proxies, &dns, hello, connect).await;
        connection_done(&worker);
        return;
    }
    let (tls, h2c, stats, tls_warnings) = {
        let snap = worker.snapshot.load();
        let stats = snap
            .settings
            .metrics
            .then_some(())
            .and_then(|()| snap.listeners.get(&key).map(|l| Arc::clone(&l.stats)));
        snap.listeners
            .get(&key)
            .map_or((None, false, stats.clone(), true), |l| {
                (l.tls.clone(), l.h2c, stats, l.tls_warnings)
            })
    };
    let id = worker.id;
    if let Some(s) = &stats {
        s.accepted(id);
    }
    // Counted open while served, by protocol (0 HTTP/1.1, 1 h2, 2 h2c).
    let count_open = |p: usize, opens: bool| {
        if let Some(s) = &stats {
            s.open(id, p, opens);
        }
    };
    let (header_timeout, write_timeout) = {
        let s = worker.settings.borrow();
        (s.header_read_timeout, s.response_write_timeout)
    };
    let mut info = ConnInfo {
        peer,
        peer_ip: crate::headers::client_ip_value(peer.ip()),
        tls: tls.is_some(),
        client_cert: None,
    };
    match tls {
        Some(cfg) => {
            let io = WriteTimeout::new(stream, write_timeout);
            match tokio::time::timeout(header_timeout, turnpike_tls::accept(cfg, io)).await {
                Ok(Ok(tls_stream)) => {
                    if let Some(s) = &stats {
                        s.handshake(id, true);
                    }
                    let (_, session) = tls_stream.get_ref();
                    let h2 = session.alpn_protocol() == Some(b"h2");
                    info.client_cert = session
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .and_then(|c| turnpike_tls::certificate_subject(c))
                        .map(Rc::from);
                    count_open(usize::from(h2), true);
                    serve_io(&worker, key, TokioIo::new(tls_stream), info, h2).await;
                    count_open(usize::from(h2), false);
                }
                Ok(Err(e)) => {
                    if let Some(s) = &stats {
                        s.handshake(id, false);
                    }
                    if tls_warnings {
                        tracing::warn!(%peer, "TLS handshake failed: {e}");
                    } else {
                        tracing::debug!(%peer, "TLS handshake failed: {e}");
                    }
                }
                Err(_) => {
                    if let Some(s) = &stats {
                        s.handshake(id, false);
                    }
                    if tls_warnings {
                        tracing::warn!(%peer, "TLS handshake timed out");
                    } else {
                        tracing::debug!(%peer, "TLS handshake timed out");
                    }
                }
            }
        }
        None => {
            let h2 = h2c && starts_with_h2_preface(&stream, header_timeout).await;
            let io = WriteTimeout::new(PlainStream(stream), write_timeout);
            let p = if h2 { 2 } else { 0 };
            count_open(p, true);
            serve_io(&worker, key, TokioIo::new(io), info, h2).await;
            count_open(p, false);
        }
    }
    connection_done(&worker);
}

/// Counts a served connection out; the last one wakes a worker waiting to drain.
fn connection_done(worker: &Worker) {
    let n = worker.active.get() - 1;
    worker.active.set(n);
    if n == 0 {
        worker.idle.notify_waiters();
    }
}

/// Serves HTTP/1.1 (with upgrades) or HTTP/2 on an accepted connection until it ends or the
/// worker shuts down (then in-flight requests finish first).
async fn serve_io<I>(worker: &Rc<Worker>, key: SocketAddr, io: I, info: ConnInfo, h2: bool)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let shutdown = worker.shutdown.clone();
    let (max_buf, max_headers, header_timeout, h2s) = {
        let s = worker.settings.borrow();
        (
            s.max_header_size,
            s.max_headers,
            s.header_read_timeout,
            s.http2.clone(),
        )
    };
    let peer = info.peer;
    let svc_worker = worker.clone();
    let info = Rc::new(info);
    let service = service_fn(move |req| {
        let w = svc_worker.clone();
        let info = info.clone();
        async move {
            let snap = w.snapshot.load_full();
            let client = Rc::clone(&w.client.borrow());
            let ctx = RequestContext {
                client: &client,
                balancers: &w.balancers,
                listener: key,
                conn: &info,
                worker: w.id,
                metrics: snap.settings.metrics,
            };
            let mut res = request::serve(snap, ctx, req).await;
            // Shutting down: the client takes its next request elsewhere (HTTP/1.1; HTTP/2
            // has GOAWAY, and a 101 keeps its connection).
            if !h2 && w.shutdown.is_down() && res.status() != http::StatusCode::SWITCHING_PROTOCOLS
            {
                res.headers_mut().insert(
                    http::header::CONNECTION,
                    http::HeaderValue::from_static("close"),
                );
            }
            Ok::<_, std::convert::Infallible>(res)
        }
    });
    let result = if h2 {
        let mut builder = hyper::server::conn::http2::Builder::new(LocalExec);
        builder
            .timer(TokioTimer::new())
            .max_concurrent_streams(h2s.max_concurrent_streams)
            .initial_stream_window_size(h2s.initial_stream_window_size)
            .initial_connection_window_size(h2s.initial_connection_window_size)
            .max_header_list_size(h2s.max_header_list_size)
            .max_send_buf_size(h2s.initial_stream_window_size as usize);
        let conn = builder.serve_connection(io, service);
        tokio::pin!(conn);
        // HTTP/2's GOAWAY tells the client which requests were taken: no linger needed.
        until_done(conn, &shutdown, None, |c| c.graceful_shutdown()).await
    } else {
        let mut builder = http1::Builder::new();
        builder
            .timer(crate::deadline::CoarseTimer)
            .header_read_timeout(header_timeout)
            .max_buf_size(max_buf)
            .max_headers(max_headers)
            // A client that half-closes after sending its request still gets the answer.
            .half_close(true)
            .keep_alive(true);
        let conn = builder.serve_connection(io, service).with_upgrades();
        tokio::pin!(conn);
        until_done(conn, &shutdown, Some(DRAIN_LINGER), |c| {
            c.graceful_shutdown()
        })
        .await
    };
    if let Err(e) = result {
        tracing::debug!(%peer, "connection ended with an error: {e}");
    }
}
