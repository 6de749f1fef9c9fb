//! A TCP fault proxy for tests, in front of a real backend: it passes connections through, or
//! refuses them (its port closed, as when a node dies), resets them, stalls them, sends the
//! backend's bytes slowly, or closes after some bytes. Modes change while a test runs; killing
//! the node also ends the connections it has open.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// What the proxy does with connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Pass bytes both ways.
    Pass,
    /// Accept, then reset the connection at once.
    Reset,
    /// Accept, read the request, and answer nothing.
    Stall,
    /// Pass the backend's bytes one small piece at a time.
    Slow,
    /// Close the connection after this many bytes of the backend's answer.
    CloseAfter(usize),
}

struct State {
    mode: Mode,
    listening: bool,
    connections: JoinSet<()>,
    accept: Option<tokio::task::JoinHandle<()>>,
}

/// A fault proxy on 127.0.0.1 in front of `backend`.
pub struct FaultProxy {
    pub addr: SocketAddr,
    backend: SocketAddr,
    state: Arc<Mutex<State>>,
    /// Connections accepted since the start.
    pub accepted: Arc<AtomicUsize>,
}

impl FaultProxy {
    pub async fn start(backend: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let p = FaultProxy {
            addr,
            backend,
            state: Arc::new(Mutex::new(State {
                mode: Mode::Pass,
                listening: false,
                connections: JoinSet::new(),
                accept: None,
            })),
            accepted: Arc::new(AtomicUsize::new(0)),
        };
        p.listen(listener);
        p
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    fn listen(&self, listener: TcpListener) {
        let state = Arc::clone(&self.state);
        let backend = self.backend;
        let accepted = Arc::clone(&self.accepted);
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                accepted.fetch_add(1, Ordering::SeqCst);
                let mut s = state.lock().unwrap();
                let mode = s.mode;
                s.connections.spawn(serve(client, backend, mode));
            }
        });
        let mut s = self.state.lock().unwrap();
        s.listening = true;
        s.accept = Some(task);
    }

    /// Sets what happens to new connections (open ones keep theirs).
    pub fn set(&self, mode: Mode) {
        self.state.lock().unwrap().mode = mode;
    }

    /// The node dies: its port is closed (connections are refused) and its open connections
    /// end.
    pub fn kill(&self) {
        let mut s = self.state.lock().unwrap();
        if let Some(a) = s.accept.take() {
            a.abort();
        }
        s.connections.abort_all();
        s.listening = false;
    }

    /// The node comes back on the same port.
    pub async fn revive(&self) {
        let listener = loop {
            match TcpListener::bind(self.addr).await {
                Ok(l) => break l,
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        self.listen(listener);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn serve(mut client: TcpStream, backend: SocketAddr, mode: Mode) {
    match mode {
        Mode::Reset => {
            let _ = socket2::SockRef::from(&client).set_linger(Some(Duration::ZERO));
            drop(client);
        }
        Mode::Stall => {
            let mut buf = [0u8; 4096];
            while let Ok(n) = client.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
        }
        Mode::Pass | Mode::Slow | Mode::CloseAfter(_) => {
            let Ok(upstream) = TcpStream::connect(backend).await else {
                return;
            };
            let (mut cr, mut cw) = client.into_split();
            let (mut ur, mut uw) = upstream.into_split();
            let up = tokio::spawn(async move {
                let _ = tokio::io::copy(&mut cr, &mut uw).await;
                let _ = uw.shutdown().await;
            });
            let mut buf = [0u8; 16384];
            let mut sent = 0usize;
            loop {
                let n = match ur.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let chunk = &buf[..n];
                let ok = match mode {
                    Mode::Slow => {
                        let mut ok = true;
                        for piece in chunk.chunks(8) {
                            if cw.write_all(piece).await.is_err() {
                                ok = false;
                                break;
                            }
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                        ok
                    }
                    Mode::CloseAfter(limit) => {
                        let take = limit.saturating_sub(sent).min(n);
                        let ok = cw.write_all(&chunk[..take]).await.is_ok();
                        sent += take;
                        if sent >= limit {
                            break;
                        }
                        ok
                    }
                    _ => cw.write_all(chunk).await.is_ok(),
                };
                if !ok {
                    break;
                }
            }
            up.abort();
        }
    }
}
