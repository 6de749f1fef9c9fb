//! Test kit: a recording backend, a gateway started from YAML on free ports, and a small client.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use turnpike::Gateway;

pub mod etcd;
pub mod fault;
pub mod pki;
pub mod redis;

/// A request the backend received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub version: http::Version,
    pub method: String,
    pub uri: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// A real HTTP/1.1 backend on 127.0.0.1:0 that records what it gets.
///
/// Paths: `/slow/<ms>` answers after a delay; `/status/<code>` answers that status;
/// `/big/<n>` answers n bytes with Content-Length, `/chunked/<n>` n bytes chunked; anything else
/// echoes the request body with `x-echo-*` headers and hop-by-hop headers the gateway must strip.
pub struct Backend {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    accepted: Arc<std::sync::atomic::AtomicUsize>,
}

impl Backend {
    pub async fn start() -> Backend {
        Self::start_with(false).await
    }

    pub async fn start_half_close() -> Backend {
        Self::start_with(true).await
    }

    async fn start_with(half_close: bool) -> Backend {
        recording_backend(move |stream, seen| async move {
            let svc = service_fn(move |req| handle(req, seen.clone()));
            let _ = hyper::server::conn::http1::Builder::new()
                .half_close(half_close)
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        })
        .await
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn last(&self) -> Seen {
        self.seen
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("backend saw no request")
    }

    pub fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Listens on 127.0.0.1:0 and hands each accepted connection, with the shared record of seen
/// requests, to `serve` on its own task: the accept loop of every recording backend.
async fn recording_backend<F, Fut>(serve: F) -> Backend
where
    F: Fn(tokio::net::TcpStream, Arc<Mutex<Vec<Seen>>>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let accepted2 = accepted.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            accepted2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(serve(stream, seen2.clone()));
        }
    });
    Backend {
        addr,
        seen,
        accepted,
    }
}

type BoxBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

async fn handle(
    req: Request<Incoming>,
    seen: Arc<Mutex<Vec<Seen>>>,
) -> Result<Response<BoxBody>, Infallible> {
    let (parts, body) = req.into_parts();
    // Only complete messages count as received: a body that breaks off is not recorded.
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            let mut r = Response::new(Full::new(Bytes::new()).boxed());
            *r.status_mut() = StatusCode::BAD_REQUEST;
            return Ok(r);
        }
    };
    let uri = parts.uri.to_string();
    seen.lock().unwrap().push(Seen {
        version: parts.version,
        method: parts.method.to_string(),
        uri: uri.clone(),
        headers: parts.headers.clone(),
        body: body.clone(),
    });
    let path = parts.uri.path();
    let arg = |p: &str| path.strip_prefix(p).and_then(|r| r.parse::<u64>().ok());
    if let Some(ms) = arg("/slow/") {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        return Ok(Response::new(Full::new(Bytes::from("slow done")).boxed()));
    }
    if let Some(code) = arg("/status/") {
        let mut r = Response::new(Full::new(Bytes::from(format!("status {code}"))).boxed());
        *r.status_mut() = StatusCode::from_u16(code as u16).unwrap();
        return Ok(r);
    }
    if let Some(n) = arg("/big/") {
        return Ok(Response::new(Full::new(pattern(n as usize)).boxed()));
    }
    if let Some(n) = arg("/chunked/") {
        let data = pattern(n as usize);
        let chunks: Vec<Result<Frame<Bytes>, Infallible>> = data
            .chunks(64 * 1024)
            .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
            .collect();
        let stream = futures_stream(chunks);
        return Ok(Response::new(StreamBody::new(stream).boxed()));
    }
    let mut r = Response::new(Full::new(body).boxed());
    let h2 = parts.version == http::Version::HTTP_2;
    let h = r.headers_mut();
    h.insert("x-echo-method", parts.method.as_str().parse().unwrap());
    h.insert("x-echo-uri", uri.parse().unwrap());
    if !h2 {
        h.insert("connection", "keep-alive, x-hop".parse().unwrap());
        h.insert("x-hop", "must be removed".parse().unwrap());
        h.insert("keep-alive", "timeout=5".parse().unwrap());
    }
    Ok(r)
}

fn futures_stream(
    items: Vec<Result<Frame<Bytes>, Infallible>>,
) -> impl futures_util::Stream<Item = Result<Frame<Bytes>, Infallible>> + Send + Sync + 'static {
    futures_util::stream::iter(items)
}

/// Deterministic test content.
pub fn pattern(n: usize) -> Bytes {
    Bytes::from((0..n).map(|i| (i % 251) as u8).collect::<Vec<u8>>())
}

/// A gateway started in-process from YAML written to a temporary file.
pub struct TestGateway {
    pub gateway: Option<Gateway>,
    pub dir: tempfile::TempDir,
    pub file: PathBuf,
}

impl TestGateway {
    pub fn start(yaml: &str) -> TestGateway {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("gateway.yaml");
        std::fs::write(&file, yaml).unwrap();
        let gateway = turnpike::start(vec![file.clone()]).unwrap_or_else(|e| panic!("{e}"));
        TestGateway {
            gateway: Some(gateway),
            dir,
            file,
        }
    }

    pub fn gw(&self) -> &Gateway {
        self.gateway.as_ref().unwrap()
    }

    /// The bound address of the (only, or first) listener.
    pub fn addr(&self) -> SocketAddr {
        self.gw().listeners()[0].1
    }

    /// The bound address for a configured port on 127.0.0.1.
    pub fn addr_of(&self, port: u16) -> SocketAddr {
        self.gw()
            .bound_addr(SocketAddr::from(([127, 0, 0, 1], port)))
            .unwrap()
    }

    pub fn rewrite(&self, yaml: &str) {
        std::fs::write(&self.file, yaml).unwrap();
    }
}

/// A port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A response read in full.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }
}

/// Sends one request on a new connection.
pub async fn send(addr: SocketAddr, req: Request<Full<Bytes>>) -> Reply {
    try_send(addr, req).await.unwrap()
}

pub async fn try_send(
    addr: SocketAddr,
    req: Request<Full<Bytes>>,
) -> Result<Reply, Box<dyn std::error::Error + Send + Sync>> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let res = sender.send_request(req).await?;
    let (parts, body) = res.into_parts();
    let body = body.collect().await?.to_bytes();
    Ok(Reply {
        status: parts.status,
        headers: parts.headers,
        body,
    })
}

/// A request builder with a `Host` header.
pub fn req(method: &str, path: &str) -> http::request::Builder {
    Request::builder()
        .method(method)
        .uri(path)
        .header("host", "test.local")
}

pub async fn get(addr: SocketAddr, path: &str) -> Reply {
    send(
        addr,
        req("GET", path).body(Full::new(Bytes::new())).unwrap(),
    )
    .await
}

/// A server answering every request with a fixed body that tests can change.
pub struct StaticServer {
    pub addr: SocketAddr,
    pub body: Arc<Mutex<String>>,
    pub hits: Arc<std::sync::atomic::AtomicUsize>,
}

impl StaticServer {
    pub async fn start(body: &str) -> StaticServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let body = Arc::new(Mutex::new(body.to_owned()));
        let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (b, h) = (body.clone(), hits.clone());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (b, h) = (b.clone(), h.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |_req: Request<Incoming>| {
                        h.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let text = b.lock().unwrap().clone();
                        async move { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(text)))) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        StaticServer { addr, body, hits }
    }

    pub fn set(&self, body: &str) {
        *self.body.lock().unwrap() = body.to_owned();
    }
}

/// A request with extra headers (a `host` among them replaces the default), sent on a new
/// connection.
pub async fn get_with(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut b = req("GET", path);
    for (k, v) in headers {
        if k.eq_ignore_ascii_case("host") {
            // Replaces the default `Host`.
            if let Some(h) = b.headers_mut() {
                h.remove(http::header::HOST);
            }
        }
        b = b.header(*k, *v);
    }
    send(addr, b.body(Full::new(Bytes::new())).unwrap()).await
}

/// Starts the recording backend behind TLS with the given certificate; `h2` offers HTTP/2 by
/// ALPN (and serves it), else HTTP/1.1 only.
pub async fn start_tls_backend(cert: &std::path::Path, key: &std::path::Path, h2: bool) -> Backend {
    use rustls::pki_types::pem::PemObject;
    let chain: Vec<rustls::pki_types::CertificateDer<'static>> =
        rustls::pki_types::CertificateDer::pem_file_iter(cert)
            .unwrap()
            .map(|c| c.unwrap())
            .collect();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_file(key).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    cfg.alpn_protocols = if h2 {
        vec![b"h2".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(cfg));
    recording_backend(move |stream, seen| {
        let acceptor = acceptor.clone();
        async move {
            let Ok(tls) = acceptor.accept(stream).await else {
                return;
            };
            let svc = service_fn(move |req| handle(req, seen.clone()));
            if h2 {
                let _ =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
            } else {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            }
        }
    })
    .await
}

/// An h2c (cleartext HTTP/2, prior knowledge) recording backend.
pub async fn start_h2c_backend() -> Backend {
    recording_backend(|stream, seen| async move {
        let svc = service_fn(move |req| handle(req, seen.clone()));
        let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .serve_connection(TokioIo::new(stream), svc)
            .await;
    })
    .await
}

/// True when python3 can import every module; when not, tests print why they skip — except
/// under CI (`CI` set), where a missing client is a failure.
pub fn python_has(modules: &[&str]) -> bool {
    let code = modules
        .iter()
        .map(|m| format!("import {m}"))
        .collect::<Vec<_>>()
        .join("; ");
    let ok = std::process::Command::new("python3")
        .args(["-c", &code])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "python modules {modules:?} are missing under CI"
        );
        eprintln!(
            "SKIPPED: python3 modules {modules:?} are not installed (pip install {})",
            modules.join(" ")
        );
    }
    ok
}
