//! Turnpike's control plane beyond the data plane's own: the configuration manager (files plus
//! the documents the admin API stores, compiled and applied as one), the admin REST API that
//! reads and changes them, and the document store (a folder, or etcd shared by a fleet).
//!
//! The admin API runs on its own thread with its own single-threaded runtime, so that nothing
//! it does (compiling a configuration, talking to etcd) touches a data-plane worker.

mod confine;
mod console;
pub mod dns_watch;
pub mod document;
pub mod etcd;
pub mod flow_service;
pub mod guard;
mod live;
pub mod manager;
mod routes;
pub mod store;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use http::HeaderMap;
use hyper_util::rt::{TokioExecutor, TokioIo};
use turnpike_compile::admin::AdminSettings;

pub use manager::Manager;
pub use routes::OPENAPI;

/// What the admin API serves from.
pub struct Admin {
    manager: Arc<Manager>,
    token: Option<String>,

    live: live::Live,
    /// Set when the gateway stops: `/readyz` answers 503.
    pub draining: AtomicBool,
}

impl Admin {
    /// The admin API over `manager`, requiring `token` when given.
    pub fn new(manager: Arc<Manager>, token: Option<String>) -> Admin {
        Admin {
            manager,
            token,

            live: live::Live::default(),
            draining: AtomicBool::new(false),
        }
    }

    /// Whether a request carries the token (always, when none is configured): as a bearer
    /// token, or, for reading (GET and HEAD, as the console does), in the `turnpike_admin`
    /// cookie the console's login page sets. The comparison takes the same time wherever the
    /// tokens differ.
    fn authorized(&self, method: &http::Method, headers: &HeaderMap) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        let bearer = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(|v| v.trim().to_owned());
        let reading = method == http::Method::GET || method == http::Method::HEAD;
        let cookie = || {
            headers
                .get_all(http::header::COOKIE)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(';'))
                .find_map(|c| c.trim().strip_prefix("turnpike_admin="))
                .map(|v| {
                    percent_encoding::percent_decode_str(v)
                        .decode_utf8_lossy()
                        .into_owned()
                })
        };
        match bearer.or_else(|| if reading { cookie() } else { None }) {
            Some(sent) => constant_time_eq(sent.as_bytes(), token.as_bytes()),
            None => false,
        }
    }

    fn store_kind(&self) -> &'static str {
        if self.manager.etcd().is_some() {
            "etcd"
        } else {
            "dir"
        }
    }

    fn status_extra(&self) -> Option<serde_json::Value> {
        let etcd = self.manager.etcd()?;
        serde_json::to_value(etcd.status()).ok()
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The running admin API; [`AdminServer::stop`] (or dropping it) stops it.
pub struct AdminServer {
    addr: SocketAddr,
    /// A duplicate of the listening socket, for a binary upgrade.
    socket: Option<std::net::TcpListener>,
    configured: SocketAddr,
    admin: Arc<Admin>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl AdminServer {
    /// Opens the admin listener of `settings` and serves `admin` on a thread of its own.
    pub fn start(settings: &AdminSettings, admin: Arc<Admin>) -> std::io::Result<AdminServer> {
        let inherited = turnpike_engine::listener::take_inherited("admin", settings.listen)
            .and_then(|mut v| (!v.is_empty()).then(|| v.remove(0)));
        let listener = match inherited {
            Some(l) => l,
            None => std::net::TcpListener::bind(settings.listen)?,
        };
        listener.set_nonblocking(true)?;
        let socket = listener.try_clone().ok();
        let addr = listener.local_addr()?;
        let tls = settings.tls.clone();
        let guard = Arc::new(guard::Guard::new(
            addr,
            settings.hosts.clone(),
            tls.is_some(),
        ));
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let serving = Arc::clone(&admin);
        let thread = std::thread::Builder::new()
            .name("turnpike-admin".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!("the admin API cannot start: {e}");
                        return;
                    }
                };
                rt.block_on(serve(listener, tls, guard, serving, stop_rx));
            })?;
        tracing::info!("admin API listening on {addr}");
        Ok(AdminServer {
            addr,
            socket,
            configured: settings.listen,
            admin,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The configured address and a duplicate of the listening socket (for a binary upgrade).
    pub fn socket(&self) -> Option<(SocketAddr, std::net::TcpListener)> {
        let s = self.socket.as_ref()?.try_clone().ok()?;
        Some((self.configured, s))
    }

    /// Marks the gateway as stopping (`/readyz` answers 503).
    pub fn draining(&self) {
        self.admin.draining.store(true, Ordering::Relaxed);
    }

    /// Stops serving and waits for the thread.
    pub fn stop(mut self) {
        self.shut();
    }

    fn shut(&mut self) {
        self.socket = None;
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        self.shut();
    }
}

async fn serve(
    listener: std::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    guard: Arc<guard::Guard>,
    admin: Arc<Admin>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("the admin API cannot listen: {e}");
            return;
        }
    };
    loop {
        let (tcp, peer) = tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("admin API accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let admin = Arc::clone(&admin);
        let tls = tls.clone();
        let guard = Arc::clone(&guard);
        tokio::spawn(async move {
            let service =
                hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let admin = Arc::clone(&admin);
                    let refused = {
                        let (parts, body) = req.into_parts();
                        match guard.check(&parts) {
                            Some(r) => Err(r),
                            None => Ok(http::Request::from_parts(parts, body)),
                        }
                    };
                    async move {
                        Ok::<_, std::convert::Infallible>(match refused {
                            Ok(req) => routes::handle(admin, req).await,
                            Err(r) => r,
                        })
                    }
                });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let result = match tls {
                Some(cfg) => match turnpike_tls::accept(cfg, tcp).await {
                    Ok(stream) => {
                        builder
                            .serve_connection(TokioIo::new(stream), service)
                            .await
                    }
                    Err(e) => {
                        tracing::info!(%peer, "admin API TLS handshake failed: {e}");
                        return;
                    }
                },
                None => builder.serve_connection(TokioIo::new(tcp), service).await,
            };
            if let Err(e) = result {
                tracing::debug!(%peer, "admin API connection ended: {e}");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens_compare_whole() {
        assert!(super::constant_time_eq(b"abc", b"abc"));
        assert!(!super::constant_time_eq(b"abc", b"abd"));
        assert!(!super::constant_time_eq(b"abc", b"abcd"));
    }

    #[test]
    fn the_openapi_document_is_json() {
        let v: serde_json::Value = serde_json::from_str(super::OPENAPI).unwrap();
        assert_eq!(v["openapi"], "3.1.0");
    }
}
