//! The upstream connection pool of one worker: keep-alive HTTP/1.1 connections to each backend,
//! owned by that worker alone (no lock, no atomic on the hot path).
//!
//! A connection goes back into the pool as soon as the backend's response head has arrived; it
//! becomes usable again once hyper has read that response's body. Checkout takes the oldest
//! pooled connection first (it is the one most likely done with its last response), skips
//! connections still busy, and drops closed or expired ones. A request that a pooled connection
//! could not take (closed between checkout and send) is handed back by hyper and retried on
//! another connection, so a backend closing idle connections never fails a request.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use std::sync::Arc;

use http::uri::Authority;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioIo, TokioTimer};
use turnpike_core::Body;

use crate::snapshot::Settings;
use crate::target::Transport;
use crate::worker::LocalExec;

/// A connection's request sender.
enum SendRequest {
    H1(http1::SendRequest<Body>),
    H2(http2::SendRequest<Body>),
}

impl SendRequest {
    fn is_closed(&self) -> bool {
        match self {
            SendRequest::H1(s) => s.is_closed(),
            SendRequest::H2(s) => s.is_closed(),
        }
    }

    fn is_ready(&self) -> bool {
        match self {
            SendRequest::H1(s) => s.is_ready(),
            SendRequest::H2(s) => s.is_ready(),
        }
    }
}

/// Most idle connections kept per backend; more are closed when they come back.
const MAX_IDLE_PER_BACKEND: usize = 1024;

struct Pooled {
    sender: SendRequest,
    /// When it was last handed back, on the pool's coarse clock.
    since: Instant,
}

/// Why a request could not be sent to a backend.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// No connection could be opened.
    #[error("connecting to {authority} failed: {source}")]
    Connect {
        /// The backend.
        authority: Authority,
        /// The cause.
        source: std::io::Error,
    },
    /// The connection attempt took longer than the connect timeout.
    #[error("connecting to {authority} timed out after {timeout:?}")]
    ConnectTimeout {
        /// The backend.
        authority: Authority,
        /// The timeout.
        timeout: Duration,
    },
    /// The TLS handshake with the backend failed (certificate not trusted, wrong name, ...).
    #[error("TLS handshake with {authority} failed: {source}")]
    Tls {
        /// The backend.
        authority: Authority,
        /// The cause.
        source: std::io::Error,
    },
    /// The HTTP exchange failed.
    #[error("{0}")]
    Http(#[from] hyper::Error),
}

/// A worker's pool of backend connections.
pub struct UpstreamPool {
    idle: RefCell<HashMap<u64, VecDeque<Pooled>>>,
    connect_timeout: Duration,
    idle_timeout: Duration,
    opened: Cell<u64>,
    /// A clock advanced by [`UpstreamPool::sweep`]: idle expiry needs no precision, and reading
    /// the system clock twice per request is measurable.
    now: Cell<Instant>,
}

impl UpstreamPool {
    /// An empty pool using the connect and idle timeouts of `settings`.
    pub fn new(settings: &Settings) -> Self {
        UpstreamPool {
            idle: RefCell::new(HashMap::new()),
            connect_timeout: settings.connect_timeout,
            idle_timeout: settings.upstream_idle_timeout,
            opened: Cell::new(0),
            now: Cell::new(Instant::now()),
        }
    }

    /// How many connections this pool has opened since it was created.
    pub fn connections_opened(&self) -> u64 {
        self.opened.get()
    }

    /// Sends `req` (origin-form URI and `Host` for HTTP/1.1; absolute URI for HTTP/2) to the
    /// backend over a pooled connection, or a new one, and returns the response head with its
    /// streaming body.
    pub async fn send(
        &self,
        transport: &Arc<Transport>,
        mut req: Request<Body>,
    ) -> Result<Response<Incoming>, UpstreamError> {
        while let Some(sender) = self.checkout(transport) {
            let sent = match sender {
                SendRequest::H1(mut s) => {
                    let r = s.try_send_request(req).await;
                    if r.is_ok() {
                        self.checkin(transport.id, SendRequest::H1(s));
                    }
                    r
                }
                // HTTP/2 connections stay in the pool while in use (they multiplex).
                SendRequest::H2(mut s) => s.try_send_request(req).await,
            };
            match sent {
                Ok(res) => return Ok(res),
                Err(mut e) => match e.take_message() {
                    // Not sent: try the next connection.
                    Some(back) => req = back,
                    None => return Err(UpstreamError::Http(e.into_error())),
                },
            }
        }
        match self.connect(transport).await? {
            SendRequest::H1(mut s) => {
                let res = s.send_request(req).await?;
                self.checkin(transport.id, SendRequest::H1(s));
                Ok(res)
            }
            SendRequest::H2(mut s) => {
                self.checkin(transport.id, SendRequest::H2(s.clone()));
                Ok(s.send_request(req).await?)
            }
        }
    }

    fn checkout(&self, transport: &Transport) -> Option<SendRequest> {
        let mut idle = self.idle.borrow_mut();
        let list = idle.get_mut(&transport.id)?;
        let now = self.now.get();
        // Look at each pooled connection at most once.
        for _ in 0..list.len() {
            let entry = list.pop_front()?;
            if entry.sender.is_closed() || now.duration_since(entry.since) > self.idle_timeout {
                continue; // dropped: closes the connection
            }
            if let SendRequest::H2(s) = &entry.sender {
                let s = s.clone();
                list.push_back(Pooled {
                    since: now,
                    ..entry
                });
                return Some(SendRequest::H2(s));
            }
            if entry.sender.is_ready() {
                return Some(entry.sender);
            }
            list.push_back(entry); // still reading its last response
        }
        None
    }

    fn checkin(&self, id: u64, sender: SendRequest) {
        let mut idle = self.idle.borrow_mut();
        let list = idle.entry(id).or_default();
        if list.len() < MAX_IDLE_PER_BACKEND {
            list.push_back(Pooled {
                sender,
                since: self.now.get(),
            });
        }
    }

    async fn connect(&self, transport: &Transport) -> Result<SendRequest, UpstreamError> {
        let authority = &transport.authority;
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        let port = authority.port_u16().unwrap_or(80);
        let stream = match tokio::time::timeout(
            self.connect_timeout,
            tokio::net::TcpStream::connect((host, port)),
        )
        .await
        {
            Err(_) => {
                return Err(UpstreamError::ConnectTimeout {
                    authority: authority.clone(),
                    timeout: self.connect_timeout,
                })
            }
            Ok(Err(source)) => {
                return Err(UpstreamError::Connect {
                    authority: authority.clone(),
                    source,
                })
            }
            Ok(Ok(s)) => s,
        };
        let _ = stream.set_nodelay(true);
        let sender = match &transport.tls {
            None => {
                self.handshake(TokioIo::new(stream), transport.http2)
                    .await?
            }
            Some((cfg, name)) => {
                let connector = tokio_rustls::TlsConnector::from(cfg.clone());
                let tls = match tokio::time::timeout(
                    self.connect_timeout,
                    connector.connect(name.clone(), stream),
                )
                .await
                {
                    Ok(Ok(s)) => s,
                    Ok(Err(source)) => {
                        return Err(UpstreamError::Tls {
                            authority: authority.clone(),
                            source,
                        })
                    }
                    Err(_) => {
                        return Err(UpstreamError::ConnectTimeout {
                            authority: authority.clone(),
                            timeout: self.connect_timeout,
                        })
                    }
                };
                let h2 = transport.http2 && tls.get_ref().1.alpn_protocol() == Some(b"h2");
                if transport.http2 && !h2 {
                    return Err(UpstreamError::Tls {
                        authority: authority.clone(),
                        source: std::io::Error::other(
                            "the backend did not agree to HTTP/2 (ALPN h2)",
                        ),
                    });
                }
                self.handshake(TokioIo::new(tls), h2).await?
            }
        };
        self.opened.set(self.opened.get() + 1);
        Ok(sender)
    }

    async fn handshake<I>(&self, io: I, h2: bool) -> Result<SendRequest, UpstreamError>
    where
        I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        if h2 {
            let (sender, conn) = http2::Builder::new(LocalExec)
                .timer(TokioTimer::new())
                .handshake(io)
                .await?;
            tokio::task::spawn_local(async move {
                if let Err(e) = conn.await {
                    tracing::debug!("backend HTTP/2 connection ended: {e}");
                }
            });
            Ok(SendRequest::H2(sender))
        } else {
            let (sender, conn) = http1::Builder::new().handshake(io).await?;
            tokio::task::spawn_local(async move {
                if let Err(e) = conn.with_upgrades().await {
                    tracing::debug!("backend connection ended: {e}");
                }
            });
            Ok(SendRequest::H1(sender))
        }
    }

    /// Advances the pool's clock and closes pooled connections that are closed or idle for
    /// longer than the idle timeout. Called by the worker every second.
    pub fn sweep(&self) {
        let now = Instant::now();
        self.now.set(now);
        let mut idle = self.idle.borrow_mut();
        for list in idle.values_mut() {
            list.retain(|p| {
                !p.sender.is_closed()
                    && (!p.sender.is_ready() || now.duration_since(p.since) <= self.idle_timeout)
            });
        }
        idle.retain(|_, l| !l.is_empty());
    }
}

/// True when the pool settings of `a` and `b` differ (the pool must be rebuilt).
pub fn client_settings_changed(a: &Settings, b: &Settings) -> bool {
    a.connect_timeout != b.connect_timeout || a.upstream_idle_timeout != b.upstream_idle_timeout
}
