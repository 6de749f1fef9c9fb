//! The upstream connection pool of one worker: keep-alive connections to each backend, owned
//! by that worker alone (no lock, no atomic on the hot path).
//!
//! HTTP/1.1 goes through the gateway's own client ([`h1`]), driven by the task that serves the
//! client's request. An idle connection sits in the pool; a request takes the most recently
//! used one, after checking (without a system call, from the reactor's readiness) that the
//! backend has not closed it meanwhile. The connection comes back when the response body has
//! been read: at once when the body arrived with the head, else when the streamed body ends.
//! A request whose body is in memory and that failed on a reused connection before any answer
//! arrived (the backend closed it while idle) is sent again on another connection, when its
//! method is idempotent.
//!
//! HTTP/2 connections are hyper's; one per backend is shared by all requests of the worker.
//! Requests that ask to switch protocols (WebSocket) go through hyper's HTTP/1.1 client, which
//! hands over the upgraded connection.

mod field_names;
mod h1;
mod h1_body;
mod io;
mod resolve;
mod tunnel;

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::uri::Authority;
use http::{Request, Response};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioIo, TokioTimer};
use turnpike_core::Body;

use crate::headers::{remove_hop_by_hop, Forwarded};
use turnpike_snapshot::{Settings, Transport};

use crate::exec::LocalExec;

pub use h1::H1Error;
pub use resolve::connect as connect_any;

/// Entry points of the HTTP/1.1 client's parsers, for the fuzzer.
#[doc(hidden)]
pub mod fuzzing {
    use bytes::BytesMut;

    /// Parses `bytes` as a response head; a head that parses has a framing and leaves the rest
    /// of `bytes` in place.
    pub fn response_head(bytes: &[u8], head_request: bool) {
        let mut buf = BytesMut::from(bytes);
        if let Ok(Some(_)) = super::h1::parse_head(&mut buf, head_request, 64 << 10) {
            assert!(buf.len() < bytes.len(), "a head was parsed from no bytes");
        }
    }

    /// Decodes `bytes` as a chunked body given in two pieces (cut at `cut`), and checks that
    /// the data decoded is never more than the bytes given.
    pub fn chunked_body(bytes: &[u8], cut: usize) {
        let cut = cut.min(bytes.len());
        let mut d = super::h1_body::ChunkedDecoder::default();
        let mut buf = BytesMut::from(&bytes[..cut]);
        let mut data = 0usize;
        for more in [&bytes[cut..], &[][..]] {
            loop {
                match d.decode(&mut buf) {
                    Ok(super::h1_body::Step::Data(b)) => data += b.len(),
                    Ok(super::h1_body::Step::NeedMore) => break,
                    Ok(_) | Err(_) => return assert!(data <= bytes.len()),
                }
            }
            buf.extend_from_slice(more);
        }
        assert!(data <= bytes.len());
    }
}
use h1::{Conn, Prepared, ResponseFraming};
use h1_body::{ResponseBody, Returns};
use io::Io;

/// Hashes the pool's keys (transport ids: sequential, not chosen by clients) with one multiply
/// instead of SipHash: the pool is looked up twice per request.
#[derive(Default, Clone, Copy)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type IdMap<V> = HashMap<u64, V, std::hash::BuildHasherDefault<IdHasher>>;

/// An idle (HTTP/1.1) or shared (HTTP/2) backend connection in the pool.
enum Idle {
    H1(Conn),
    H2(http2::SendRequest<Body>),
}

impl Idle {
    fn is_usable(&mut self) -> bool {
        match self {
            Idle::H1(c) => c.io.is_reusable(),
            Idle::H2(s) => !s.is_closed(),
        }
    }
}

/// Most idle connections kept per backend; more are closed when they come back.
const MAX_IDLE_PER_BACKEND: usize = 1024;

struct Pooled {
    conn: Idle,
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
    /// The HTTP exchange failed (HTTP/2, or an upgrade through hyper's client).
    #[error("{0}")]
    Http(#[from] hyper::Error),
    /// The HTTP/1.1 exchange failed.
    #[error(transparent)]
    H1(#[from] H1Error),
    /// A new connection would exceed the upstream's circuit breaker (too many of what it says).
    #[error("the upstream has too many {0}")]
    Overloaded(&'static str),
}

/// A worker's pool of backend connections.
pub struct UpstreamPool {
    idle: RefCell<IdMap<VecDeque<Pooled>>>,
    /// Connections handed back by response bodies that ended after their request's future.
    returns: Returns,
    max_head: usize,
    resolver: resolve::Resolver,
    connect_timeout: Duration,
    idle_timeout: Duration,
    opened: Cell<u64>,
    /// The HTTP proxy every connection is tunnelled through, and how its name is looked up.
    outbound: Option<(turnpike_snapshot::OutboundProxy, turnpike_dns::Dns)>,
    /// A clock advanced by [`UpstreamPool::sweep`]: idle expiry needs no precision, and reading
    /// the system clock twice per request is measurable.
    now: Cell<Instant>,
}

impl UpstreamPool {
    /// An empty pool using the connect and idle timeouts of `settings`.
    pub fn new(settings: &Settings) -> Self {
        UpstreamPool {
            idle: RefCell::new(IdMap::default()),
            returns: Arc::new(Mutex::new(Vec::new())),
            max_head: settings.max_header_size,
            resolver: resolve::Resolver::default(),
            connect_timeout: settings.connect_timeout,
            idle_timeout: settings.upstream_idle_timeout,
            opened: Cell::new(0),
            outbound: settings
                .outbound_proxy
                .clone()
                .map(|p| (p, settings.dns.clone())),
            now: Cell::new(Instant::now()),
        }
    }

    /// How many connections this pool has opened since it was created.
    pub fn connections_opened(&self) -> u64 {
        self.opened.get()
    }

    /// Sends `req` (origin-form URI and `Host` for HTTP/1.1; absolute URI for HTTP/2) to the
    /// backend over a pooled connection, or a new one, and returns the response head with its
    /// streaming body, without hop-by-hop fields. `forwarded` are the `X-Forwarded-*` fields to
    /// add (they replace received ones). With `upgrade`, the request asks to switch protocols:
    /// it goes through hyper's client, whose response carries the upgraded connection and keeps
    /// its fields as the backend sent them (the caller passes `Upgrade` on).
    pub async fn send(
        &self,
        transport: &Arc<Transport>,
        mut req: Request<Body>,
        forwarded: Forwarded,
        upgrade: bool,
    ) -> Result<Response<Body>, UpstreamError> {
        if transport.http2 || upgrade {
            forwarded.insert_into(req.headers_mut());
            return if transport.http2 {
                let mut res = Box::pin(self.send_h2(transport, req)).await?;
                remove_hop_by_hop(res.headers_mut());
                Ok(res)
            } else {
                Box::pin(self.send_upgrade(transport, req)).await
            };
        }
        let (parts, body) = req.into_parts();
        let (prepared, mut body) = Prepared::new(&parts, body, &forwarded);
        let retry_allowed = Prepared::idempotent(&parts.method);
        loop {
            let (mut conn, pooled) = match self.checkout(transport) {
                Some(Idle::H1(c)) => (c, true),
                // Connecting (name lookup, TLS handshake) is rare: boxed, it does not
                // weigh on every request's future.
                Some(Idle::H2(_)) | None => (Box::pin(self.connect_h1(transport)).await?, false),
            };
            let replay = if pooled { body.replay() } else { None };
            let attempt = std::mem::replace(&mut body, h1::PreparedBody::None);
            match conn.exchange(&prepared, attempt, self.max_head).await {
                Ok((head, complete)) => {
                    let mut res = Response::new(Body::Empty);
                    *res.status_mut() = head.status;
                    *res.version_mut() = head.version;
                    let keep_alive = head.keep_alive && complete;
                    *res.headers_mut() = head.headers;
                    let body = match head.framing {
                        ResponseFraming::Empty => {
                            self.release(transport.id, conn, keep_alive);
                            Body::Empty
                        }
                        ResponseFraming::Length(n) if conn.rbuf.len() as u64 >= n => {
                            let bytes = conn.rbuf.split_to(n as usize).freeze();
                            self.release(transport.id, conn, keep_alive);
                            Body::full(bytes)
                        }
                        framing => Body::stream(ResponseBody::new(
                            conn,
                            framing,
                            keep_alive,
                            transport.id,
                            Arc::clone(&self.returns),
                        )),
                    };
                    *res.body_mut() = body;
                    return Ok(res);
                }
                Err(f) => match replay {
                    // The backend had closed this idle connection: try another one.
                    Some(again) if f.stale && retry_allowed => {
                        tracing::debug!("retrying on another connection: {}", f.error);
                        body = again;
                    }
                    _ => return Err(UpstreamError::H1(f.error)),
                },
            }
        }
    }

    /// Puts an HTTP/1.1 connection whose exchange is over back into the pool (or closes it).
    fn release(&self, id: u64, conn: Conn, keep_alive: bool) {
        if keep_alive && conn.rbuf.is_empty() {
            self.checkin(id, Idle::H1(conn));
        }
    }

    async fn send_h2(
        &self,
        transport: &Arc<Transport>,
        req: Request<Body>,
    ) -> Result<Response<Body>, UpstreamError> {
        let mut sender = match self.checkout(transport) {
            Some(Idle::H2(s)) => s,
            Some(Idle::H1(_)) | None => match self.connect(transport).await? {
                Idle::H2(s) => {
                    self.checkin(transport.id, Idle::H2(s.clone()));
                    s
                }
                Idle::H1(_) => {
                    return Err(UpstreamError::Tls {
                        authority: transport.authority.clone(),
                        source: std::io::Error::other("the backend did not agree to HTTP/2"),
                    })
                }
            },
        };
        let res = sender.send_request(req).await?;
        Ok(res.map(Body::Incoming))
    }

    /// A request asking to switch protocols: hyper's client takes the connection (it is not
    /// pooled again) and hands the upgraded stream to the proxy.
    async fn send_upgrade(
        &self,
        transport: &Arc<Transport>,
        req: Request<Body>,
    ) -> Result<Response<Body>, UpstreamError> {
        let conn = match self.checkout(transport) {
            Some(Idle::H1(c)) => c,
            Some(Idle::H2(_)) | None => self.connect_h1(transport).await?,
        };
        let (mut sender, connection) = http1::Builder::new()
            .handshake(TokioIo::new(conn.io))
            .await?;
        tokio::task::spawn_local(async move {
            if let Err(e) = connection.with_upgrades().await {
                tracing::debug!("backend connection ended: {e}");
            }
        });
        let res = sender.send_request(req).await?;
        Ok(res.map(Body::Incoming))
    }

    /// Takes a usable connection to the transport's backend: the most recently used idle
    /// HTTP/1.1 connection (its buffers are warm), or the HTTP/2 connection (which stays in the
    /// pool: it multiplexes).
    fn checkout(&self, transport: &Transport) -> Option<Idle> {
        self.collect_returns();
        let mut idle = self.idle.borrow_mut();
        let list = idle.get_mut(&transport.id)?;
        let now = self.now.get();
        while let Some(mut entry) = list.pop_back() {
            let idle_timeout = transport.idle_timeout.unwrap_or(self.idle_timeout);
            if now.duration_since(entry.since) > idle_timeout || !entry.conn.is_usable() {
                continue; // dropped: closes the connection
            }
            if let Idle::H2(s) = &entry.conn {
                let s = s.clone();
                list.push_back(Pooled {
                    since: now,
                    ..entry
                });
                return Some(Idle::H2(s));
            }
            return Some(entry.conn);
        }
        None
    }

    /// Moves connections handed back by finished response bodies into the idle lists.
    fn collect_returns(&self) {
        let returned = match self.returns.try_lock() {
            Ok(mut r) if !r.is_empty() => std::mem::take(&mut *r),
            _ => return,
        };
        for (id, conn) in returned {
            self.checkin(id, Idle::H1(conn));
        }
    }

    fn checkin(&self, id: u64, conn: Idle) {
        let mut idle = self.idle.borrow_mut();
        let list = idle.entry(id).or_default();
        if list.len() < MAX_IDLE_PER_BACKEND {
            list.push_back(Pooled {
                conn,
                since: self.now.get(),
            });
        }
    }

    async fn connect_h1(&self, transport: &Transport) -> Result<Conn, UpstreamError> {
        match self.connect(transport).await? {
            Idle::H1(c) => Ok(c),
            Idle::H2(_) => Err(UpstreamError::Tls {
                authority: transport.authority.clone(),
                source: std::io::Error::other("HTTP/2 was negotiated for an HTTP/1.1 target"),
            }),
        }
    }

    async fn connect(&self, transport: &Transport) -> Result<Idle, UpstreamError> {
        let connect_timeout = transport.connect_timeout.unwrap_or(self.connect_timeout);
        // Waiting for a new connection counts for a circuit breaker, and so does the connection.
        if let Some(limit) = transport.counts.as_ref().and_then(|c| c.exceeded()) {
            return Err(UpstreamError::Overloaded(limit));
        }
        let _pending = transport
            .counts
            .as_ref()
            .map(|c| h1::Counted::take(&c.pending));
        let mut idle = self.open(transport, connect_timeout).await?;
        if let (Idle::H1(c), Some(counts)) = (&mut idle, &transport.counts) {
            c.counted = Some(h1::Counted::take(&counts.open));
        }
        Ok(idle)
    }

    async fn open(
        &self,
        transport: &Transport,
        connect_timeout: Duration,
    ) -> Result<Idle, UpstreamError> {
        let authority = &transport.authority;
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        let port = authority.port_u16().unwrap_or(80);
        if let Some((proxy, dns)) = &self.outbound {
            let tunnel = tunnel::open(proxy, dns, host, port);
            return match tokio::time::timeout(connect_timeout, tunnel).await {
                Err(_) => Err(UpstreamError::ConnectTimeout {
                    authority: authority.clone(),
                    timeout: connect_timeout,
                }),
                Ok(Err(source)) => Err(UpstreamError::Connect {
                    authority: authority.clone(),
                    source,
                }),
                Ok(Ok(stream)) => self.over(transport, stream, connect_timeout).await,
            };
        }
        let open = async {
            let addrs = match transport.addr {
                Some(addr) => vec![addr],
                None => {
                    self.resolver
                        .addresses(
                            transport.id,
                            host,
                            port,
                            transport.dns_refresh,
                            &transport.dns,
                        )
                        .await?
                }
            };
            let stream = resolve::connect(&addrs).await?;
            if addrs.len() > 1 {
                if let Ok(peer) = stream.peer_addr() {
                    self.resolver.prefer(transport.id, peer);
                }
            }
            Ok::<_, std::io::Error>(stream)
        };
        let stream = match tokio::time::timeout(connect_timeout, open).await {
            Err(_) => {
                return Err(UpstreamError::ConnectTimeout {
                    authority: authority.clone(),
                    timeout: connect_timeout,
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
        self.over(transport, stream, connect_timeout).await
    }

    /// Speaks the transport's protocol on a connected stream: TLS when it has TLS, HTTP/2 when
    /// asked for.
    async fn over(
        &self,
        transport: &Transport,
        stream: tokio::net::TcpStream,
        connect_timeout: Duration,
    ) -> Result<Idle, UpstreamError> {
        let authority = &transport.authority;
        let _ = stream.set_nodelay(true);
        let conn = match &transport.tls {
            None if transport.http2 => self.handshake_h2(TokioIo::new(stream)).await?,
            None => Idle::H1(Conn::new(Io::Tcp(stream))),
            Some((cfg, name)) => {
                let tls = match tokio::time::timeout(
                    connect_timeout,
                    turnpike_tls::connect(cfg.clone(), name.clone(), stream),
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
                            timeout: connect_timeout,
                        })
                    }
                };
                let h2 = transport.http2 && tls.session().alpn_protocol() == Some(b"h2");
                if transport.http2 && !h2 {
                    return Err(UpstreamError::Tls {
                        authority: authority.clone(),
                        source: std::io::Error::other(
                            "the backend did not agree to HTTP/2 (ALPN h2)",
                        ),
                    });
                }
                if h2 {
                    self.handshake_h2(TokioIo::new(tls)).await?
                } else {
                    Idle::H1(Conn::new(Io::Tls(Box::new(tls))))
                }
            }
        };
        self.opened.set(self.opened.get() + 1);
        Ok(conn)
    }

    async fn handshake_h2<I>(&self, io: I) -> Result<Idle, UpstreamError>
    where
        I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let (sender, conn) = http2::Builder::new(LocalExec)
            .timer(TokioTimer::new())
            .handshake(io)
            .await?;
        tokio::task::spawn_local(async move {
            if let Err(e) = conn.await {
                tracing::debug!("backend HTTP/2 connection ended: {e}");
            }
        });
        Ok(Idle::H2(sender))
    }

    /// Advances the pool's clock and closes pooled connections that are closed or idle for
    /// longer than the idle timeout. Called by the worker every second.
    pub fn sweep(&self) {
        let now = Instant::now();
        self.now.set(now);
        self.collect_returns();
        self.resolver.sweep();
        let mut idle = self.idle.borrow_mut();
        for list in idle.values_mut() {
            list.retain_mut(|p| {
                now.duration_since(p.since) <= self.idle_timeout && p.conn.is_usable()
            });
        }
        idle.retain(|_, l| !l.is_empty());
    }
}

/// True when the pool settings of `a` and `b` differ (the pool must be rebuilt).
pub fn client_settings_changed(a: &Settings, b: &Settings) -> bool {
    a.connect_timeout != b.connect_timeout
        || a.upstream_idle_timeout != b.upstream_idle_timeout
        || a.outbound_proxy != b.outbound_proxy
        || (a.outbound_proxy.is_some() && a.dns != b.dns)
}
