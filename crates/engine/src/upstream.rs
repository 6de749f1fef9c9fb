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

use http::uri::Authority;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use turnpike_core::Body;

use crate::snapshot::Settings;

/// Most idle connections kept per backend; more are closed when they come back.
const MAX_IDLE_PER_BACKEND: usize = 1024;

struct Pooled {
    sender: SendRequest<Body>,
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
    /// The HTTP exchange failed.
    #[error("{0}")]
    Http(#[from] hyper::Error),
}

/// A worker's pool of backend connections.
pub struct UpstreamPool {
    idle: RefCell<HashMap<Authority, VecDeque<Pooled>>>,
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

    /// Sends `req` (origin-form URI, `Host` set) to `authority` over a pooled connection, or a
    /// new one, and returns the response head with its streaming body.
    pub async fn send(
        &self,
        authority: &Authority,
        mut req: Request<Body>,
    ) -> Result<Response<Incoming>, UpstreamError> {
        while let Some(mut sender) = self.checkout(authority) {
            match sender.try_send_request(req).await {
                Ok(res) => {
                    self.checkin(authority, sender);
                    return Ok(res);
                }
                Err(mut e) => match e.take_message() {
                    // Not sent: try the next connection.
                    Some(back) => req = back,
                    None => return Err(UpstreamError::Http(e.into_error())),
                },
            }
        }
        let mut sender = self.connect(authority).await?;
        let res = sender.send_request(req).await?;
        self.checkin(authority, sender);
        Ok(res)
    }

    fn checkout(&self, authority: &Authority) -> Option<SendRequest<Body>> {
        let mut idle = self.idle.borrow_mut();
        let list = idle.get_mut(authority)?;
        let now = self.now.get();
        // Look at each pooled connection at most once.
        for _ in 0..list.len() {
            let entry = list.pop_front()?;
            if entry.sender.is_closed() || now.duration_since(entry.since) > self.idle_timeout {
                continue; // dropped: closes the connection
            }
            if entry.sender.is_ready() {
                return Some(entry.sender);
            }
            list.push_back(entry); // still reading its last response
        }
        None
    }

    fn checkin(&self, authority: &Authority, sender: SendRequest<Body>) {
        let mut idle = self.idle.borrow_mut();
        let list = match idle.get_mut(authority) {
            Some(l) => l,
            None => idle.entry(authority.clone()).or_default(),
        };
        if list.len() < MAX_IDLE_PER_BACKEND {
            list.push_back(Pooled {
                sender,
                since: self.now.get(),
            });
        }
    }

    async fn connect(&self, authority: &Authority) -> Result<SendRequest<Body>, UpstreamError> {
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
        let (sender, conn) = http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await?;
        self.opened.set(self.opened.get() + 1);
        tokio::task::spawn_local(async move {
            if let Err(e) = conn.await {
                tracing::debug!("backend connection ended: {e}");
            }
        });
        Ok(sender)
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
