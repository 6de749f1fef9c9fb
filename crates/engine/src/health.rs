//! The active health prober: one thread per process that probes every node of every upstream
//! with an active check (a GET of its path, every `interval`), and records the verdicts in the
//! nodes' shared state, which every worker reads. It follows the current snapshot, so a reload
//! changes what it probes; nodes a reload keeps keep their state.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use turnpike_snapshot::upstream::{ActiveCheck, NodeState};
use turnpike_snapshot::{Node, Snapshot};

/// How often the prober looks for nodes due for a probe.
const TICK: Duration = Duration::from_millis(50);

/// The running prober; dropping it stops the thread.
pub struct Prober {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Prober {
    /// Starts probing the upstreams of the snapshots `snapshot` holds.
    pub fn start(snapshot: Arc<ArcSwap<Snapshot>>) -> std::io::Result<Prober> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("turnpike-health".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!("the health prober cannot start: {e}");
                        return;
                    }
                };
                let local = tokio::task::LocalSet::new();
                local.block_on(&rt, run(snapshot, flag));
            })?;
        Ok(Prober {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// When each node (by its state) is next due, and whether a probe of it is under way.
struct Due {
    at: Instant,
    busy: Arc<AtomicBool>,
}

async fn run(snapshot: Arc<ArcSwap<Snapshot>>, stop: Arc<AtomicBool>) {
    let mut due: HashMap<usize, Due> = HashMap::new();
    while !stop.load(Ordering::Relaxed) {
        let snap = snapshot.load_full();
        let now = Instant::now();
        let mut seen = Vec::new();
        for up in &snap.upstreams {
            let Some(check) = &up.active else { continue };
            for node in &up.nodes {
                let key = Arc::as_ptr(&node.state) as usize;
                seen.push(key);
                let d = due.entry(key).or_insert_with(|| Due {
                    at: now,
                    busy: Arc::new(AtomicBool::new(false)),
                });
                if d.at > now || d.busy.load(Ordering::Relaxed) {
                    continue;
                }
                d.at = now + check.interval;
                d.busy.store(true, Ordering::Relaxed);
                let busy = Arc::clone(&d.busy);
                let (node, check, name) = (node.clone(), check.clone(), Arc::clone(&up.name));
                tokio::task::spawn_local(async move {
                    let ok = probe(&node, &check).await;
                    record(&node.state, ok, &check, &name, &node.label);
                    busy.store(false, Ordering::Relaxed);
                });
            }
        }
        due.retain(|k, _| seen.contains(k));
        tokio::time::sleep(TICK).await;
    }
}

fn record(state: &NodeState, ok: bool, check: &ActiveCheck, upstream: &str, node: &str) {
    let before = state.healthy();
    let after = state.probed(ok, check);
    if before != after {
        if after {
            tracing::info!(upstream, node, "node healthy again");
        } else {
            tracing::warn!(upstream, node, "node unhealthy: its health check failed");
        }
    }
}

/// One probe: `GET path` on a new connection (HTTP/1.1, or HTTP/2 for an `http2` node, through
/// hyper's client), within the check's timeout; true when the status is one the check expects.
async fn probe(node: &Node, check: &ActiveCheck) -> bool {
    let attempt = async {
        let t = node.transport();
        let tcp = match t.addr {
            // One address of a host name: that address is the node.
            Some(addr) => tokio::net::TcpStream::connect(addr).await.ok()?,
            None => {
                let host = t
                    .authority
                    .host()
                    .trim_start_matches('[')
                    .trim_end_matches(']');
                let port = t.authority.port_u16().unwrap_or(80);
                let addrs = t.dns.lookup(host, port).await.ok()?;
                crate::upstream::connect_any(&addrs).await.ok()?
            }
        };
        let _ = tcp.set_nodelay(true);
        let http2 = node.transport().http2;
        match &node.transport().tls {
            Some((cfg, name)) => {
                let tls = turnpike_tls::connect(Arc::clone(cfg), name.clone(), tcp)
                    .await
                    .ok()?;
                get_status(tls, http2, node, &check.path).await
            }
            None => get_status(tcp, http2, node, &check.path).await,
        }
    };
    match tokio::time::timeout(check.timeout, attempt).await {
        Ok(Some(status)) => check.expects(status),
        _ => false,
    }
}

/// Sends `GET path` over `io` and returns the response's status.
async fn get_status<S>(io: S, http2: bool, node: &Node, path: &str) -> Option<u16>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    type Empty = http_body_util::Empty<bytes::Bytes>;
    let io = hyper_util::rt::TokioIo::new(io);
    let path = format!("{}{path}", node.base_path());
    let agent = (http::header::USER_AGENT, "turnpike-health-check");
    let response = if http2 {
        let (mut send, conn) = hyper::client::conn::http2::handshake::<_, _, Empty>(
            hyper_util::rt::TokioExecutor::new(),
            io,
        )
        .await
        .ok()?;
        tokio::spawn(conn);
        let uri = format!("{}://{}{path}", node.scheme(), node.authority());
        let req = http::Request::get(uri).header(agent.0, agent.1);
        send.send_request(req.body(Empty::new()).ok()?).await.ok()?
    } else {
        let (mut send, conn) = hyper::client::conn::http1::handshake::<_, Empty>(io)
            .await
            .ok()?;
        tokio::spawn(conn);
        let req = http::Request::get(path)
            .header(agent.0, agent.1)
            .header(http::header::HOST, node.host_header())
            .header(http::header::CONNECTION, "close");
        send.send_request(req.body(Empty::new()).ok()?).await.ok()?
    };
    Some(response.status().as_u16())
}
