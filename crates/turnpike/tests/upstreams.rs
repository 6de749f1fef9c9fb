//! Upstream pools against real backends and real failures: balancing per strategy, health
//! checks (active and passive), retries and their budget, circuit breaking, and reloads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::fault::{FaultProxy, Mode};
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

/// A backend that answers every request with `status` (changeable) and `GET /health` with
/// `health` (changeable); it counts the requests it answers (not the health checks).
struct Node {
    addr: SocketAddr,
    status: Arc<AtomicU16>,
    health: Arc<AtomicU16>,
    hits: Arc<AtomicUsize>,
}

impl Node {
    async fn start(status: u16) -> Node {
        Node::serve(status, false).await
    }

    /// A node that speaks HTTP/2 with prior knowledge (h2c).
    async fn start_h2(status: u16) -> Node {
        Node::serve(status, true).await
    }

    async fn serve(status: u16, http2: bool) -> Node {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let status = Arc::new(AtomicU16::new(status));
        let health = Arc::new(AtomicU16::new(200));
        let hits = Arc::new(AtomicUsize::new(0));
        let (s, h, c) = (status.clone(), health.clone(), hits.clone());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (s, h, c) = (s.clone(), h.clone(), c.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let (s, h, c) = (s.clone(), h.clone(), c.clone());
                        async move {
                            let path = req.uri().path().to_owned();
                            let _ = req.into_body().collect().await;
                            let code = if path == "/health" {
                                h.load(SeqCst)
                            } else {
                                c.fetch_add(1, SeqCst);
                                if let Some(ms) = path.strip_prefix("/slow/") {
                                    let ms: u64 = ms.parse().unwrap_or(0);
                                    tokio::time::sleep(Duration::from_millis(ms)).await;
                                }
                                s.load(SeqCst)
                            };
                            let mut r = http::Response::new(Full::new(Bytes::from(format!(
                                "{}",
                                addr.port()
                            ))));
                            *r.status_mut() = http::StatusCode::from_u16(code).unwrap();
                            Ok::<_, Infallible>(r)
                        }
                    });
                    if http2 {
                        let _ = hyper::server::conn::http2::Builder::new(
                            hyper_util::rt::TokioExecutor::new(),
                        )
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                    } else {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), svc)
                            .await;
                    }
                });
            }
        });
        Node {
            addr,
            status,
            health,
            hits,
        }
    }

    fn hits(&self) -> usize {
        self.hits.load(SeqCst)
    }
}

/// A keep-alive HTTP/1.1 client on one connection.
struct Client(hyper::client::conn::http1::SendRequest<Full<Bytes>>);

impl Client {
    async fn new(addr: SocketAddr) -> Client {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .unwrap();
        tokio::spawn(conn);
        Client(send)
    }

    async fn call(&mut self, method: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
        self.0.ready().await.unwrap();
        let mut b = req(method, path);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let r = self
            .0
            .send_request(b.body(Full::new(Bytes::from_static(b"{}"))).unwrap())
            .await
            .unwrap();
        let status = r.status().as_u16();
        let body = r.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }
}

fn pool_yaml(gateway: &str, target: &str) -> String {
    format!(
        "gateway: {{ accessLog: false, threads: 1{gateway} }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  target:\n{target}"
    )
}

fn nodes_yaml(nodes: &[(u16, u32)]) -> String {
    let mut s = String::from("    nodes:\n");
    for (port, weight) in nodes {
        s.push_str(&format!(
            "      - {{ url: \"http://127.0.0.1:{port}\", weight: {weight} }}\n"
        ));
    }
    s
}

fn share(n: usize, total: usize) -> f64 {
    n as f64 / total as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weighted_strategies_spread_requests_by_weight() {
    for strategy in ["roundRobin", "random", "leastRequests"] {
        let (a, b, c) = (
            Node::start(200).await,
            Node::start(200).await,
            Node::start(200).await,
        );
        let target = format!(
            "{}    loadBalancing: {strategy}\n",
            nodes_yaml(&[(a.addr.port(), 3), (b.addr.port(), 1), (c.addr.port(), 1)])
        );
        let gw = TestGateway::start(&pool_yaml("", &target));
        let mut client = Client::new(gw.addr()).await;
        let n = 10_000;
        for _ in 0..n {
            assert_eq!(client.call("GET", "/x", &[]).await.0, 200);
        }
        let (sa, sb, sc) = (share(a.hits(), n), share(b.hits(), n), share(c.hits(), n));
        let tolerance = if strategy == "roundRobin" {
            0.001
        } else {
            0.03
        };
        for (got, want) in [(sa, 0.6), (sb, 0.2), (sc, 0.2)] {
            assert!(
                (got - want).abs() <= tolerance,
                "{strategy}: shares {sa:.3} {sb:.3} {sc:.3}, want 0.6 0.2 0.2"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smooth_round_robin_does_not_burst() {
    let (a, b) = (Node::start(200).await, Node::start(200).await);
    let target = nodes_yaml(&[(a.addr.port(), 3), (b.addr.port(), 1)]);
    let gw = TestGateway::start(&pool_yaml("", &target));
    let mut client = Client::new(gw.addr()).await;
    let mut order = String::new();
    for _ in 0..8 {
        let (_, body) = client.call("GET", "/", &[]).await;
        order.push(if body == a.addr.port().to_string() {
            'a'
        } else {
            'b'
        });
    }
    // Smooth weighted round robin spreads the heavy node's turns: a a b a, never a a a b.
    assert_eq!(order, "aabaaaba", "{order}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hashing_is_sticky_and_a_leaving_node_moves_only_its_keys() {
    let nodes = [
        Node::start(200).await,
        Node::start(200).await,
        Node::start(200).await,
    ];
    let ports: Vec<u16> = nodes.iter().map(|n| n.addr.port()).collect();
    let target = |ps: &[u16]| {
        format!(
            "{}    loadBalancing: hash\n    hashKey: \"${{header.X-User-Id}}\"\n",
            nodes_yaml(&ps.iter().map(|p| (*p, 1)).collect::<Vec<_>>())
        )
    };
    let gw = TestGateway::start(&pool_yaml("", &target(&ports)));
    let mut client = Client::new(gw.addr()).await;
    let mut before = Vec::new();
    for user in 0..300 {
        let id = format!("user-{user}");
        let (_, first) = client.call("GET", "/", &[("x-user-id", &id)]).await;
        let (_, again) = client.call("GET", "/", &[("x-user-id", &id)]).await;
        assert_eq!(first, again, "{id} moved between two requests");
        before.push(first);
    }
    for p in &ports {
        let n = before.iter().filter(|b| **b == p.to_string()).count();
        assert!((60..=140).contains(&n), "node {p} took {n} of 300 keys");
    }
    // The third node leaves: only its keys move.
    gw.rewrite(&pool_yaml("", &target(&ports[..2])));
    gw.gw().reload().unwrap();
    let mut client = Client::new(gw.addr()).await;
    for (user, was) in before.iter().enumerate() {
        let id = format!("user-{user}");
        let (_, now) = client.call("GET", "/", &[("x-user-id", &id)]).await;
        if *was != ports[2].to_string() {
            assert_eq!(&now, was, "{id} moved though its node stayed");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_under_load_costs_no_failed_request() {
    let (a, b) = (Node::start(200).await, Node::start(200).await);
    let pa = FaultProxy::start(a.addr).await;
    let pb = FaultProxy::start(b.addr).await;
    let target = format!(
        "{}    retries: {{ attempts: 2 }}\n    healthCheck: {{ passive: {{ consecutiveFailures: 1, ejectFor: 30s }} }}\n",
        nodes_yaml(&[(pa.port(), 1), (pb.port(), 1)])
    );
    let gw = TestGateway::start(&pool_yaml("", &target));
    let addr = gw.addr();
    let failures = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut load = Vec::new();
    for _ in 0..8 {
        let (f, d) = (failures.clone(), done.clone());
        load.push(tokio::spawn(async move {
            let mut client = Client::new(addr).await;
            let mut n = 0;
            while !d.load(SeqCst) {
                if client.call("GET", "/x", &[]).await.0 != 200 {
                    f.fetch_add(1, SeqCst);
                }
                n += 1;
            }
            n
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    pa.kill();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    done.store(true, SeqCst);
    let mut total = 0;
    for t in load {
        total += t.await.unwrap();
    }
    assert!(total > 500, "only {total} requests");
    assert_eq!(failures.load(SeqCst), 0, "failed requests of {total}");
    assert!(b.hits() > a.hits());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_is_retried_only_when_listed() {
    let (a, b) = (Node::start(200).await, Node::start(200).await);
    let pa = FaultProxy::start(a.addr).await;
    pa.set(Mode::Reset);
    for (methods, want) in [("", 502), ("      methods: [GET, POST]\n", 200)] {
        // Round robin over two nodes of equal weight starts with the first: the resetting one.
        let target = format!(
            "{}    retries:\n      attempts: 1\n{methods}",
            nodes_yaml(&[(pa.port(), 1), (b.addr.port(), 1)])
        );
        let gw = TestGateway::start(&pool_yaml("", &target));
        let before = pa.accepted.load(SeqCst);
        let mut client = Client::new(gw.addr()).await;
        let (status, _) = client.call("POST", "/orders", &[]).await;
        assert!(
            pa.accepted.load(SeqCst) > before,
            "the first try went to the other node"
        );
        assert_eq!(status, want, "methods `{}`", methods.trim());
    }
    // GET is retried by default.
    let target = format!(
        "{}    retries: {{ attempts: 1 }}\n",
        nodes_yaml(&[(pa.port(), 1), (b.addr.port(), 1)])
    );
    let gw = TestGateway::start(&pool_yaml("", &target));
    let mut client = Client::new(gw.addr()).await;
    assert_eq!(client.call("GET", "/orders", &[]).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passive_checks_eject_a_failing_node_and_let_it_back() {
    let (a, b) = (Node::start(503).await, Node::start(200).await);
    let target = format!(
        "{}    healthCheck:\n      passive: {{ consecutiveFailures: 3, ejectFor: 1s, maxEjectedPercent: 50 }}\n",
        nodes_yaml(&[(a.addr.port(), 1), (b.addr.port(), 1)])
    );
    let gw = TestGateway::start(&pool_yaml("", &target));
    let mut client = Client::new(gw.addr()).await;
    for _ in 0..20 {
        client.call("GET", "/", &[]).await;
    }
    let a_before = a.hits();
    assert_eq!(a_before, 3, "three failures eject the node");
    for _ in 0..20 {
        assert_eq!(client.call("GET", "/", &[]).await.0, 200);
    }
    assert_eq!(a.hits(), a_before, "an ejected node gets no requests");
    // It recovers; after the ejection it takes requests again.
    a.status.store(200, SeqCst);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    for _ in 0..20 {
        assert_eq!(client.call("GET", "/", &[]).await.0, 200);
    }
    assert!(a.hits() > a_before + 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_checks_take_a_sick_node_out_and_back_and_all_down_is_503_at_once() {
    let (a, b) = (Node::start(200).await, Node::start(200).await);
    a.health.store(500, SeqCst);
    let target = format!(
        "{}    healthCheck:\n      active: {{ path: /health, interval: 100ms, timeout: 1s, healthyThreshold: 2, unhealthyThreshold: 2 }}\n      panicThreshold: 0%\n",
        nodes_yaml(&[(a.addr.port(), 1), (b.addr.port(), 1)])
    );
    let gw = TestGateway::start(&pool_yaml("", &target));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut client = Client::new(gw.addr()).await;
    for _ in 0..20 {
        assert_eq!(client.call("GET", "/", &[]).await.0, 200);
    }
    assert_eq!(
        a.hits(),
        0,
        "a node failing its health check gets no requests"
    );
    a.health.store(200, SeqCst);
    tokio::time::sleep(Duration::from_millis(500)).await;
    for _ in 0..20 {
        client.call("GET", "/", &[]).await;
    }
    assert!(a.hits() >= 5, "a node healthy again takes requests");
    // Every node sick: 503 at once, without trying.
    a.health.store(500, SeqCst);
    b.health.store(500, SeqCst);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t = Instant::now();
    let r = get(gw.addr(), "/").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["type"], "urn:turnpike:problem:no-healthy-upstream");
    assert!(t.elapsed() < Duration::from_millis(200));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_checks_speak_http2_to_http2_nodes() {
    let (a, b) = (Node::start_h2(200).await, Node::start_h2(200).await);
    a.health.store(500, SeqCst);
    let target = format!(
        "{}    http2: true\n    healthCheck:\n      active: {{ path: /health, interval: 100ms, healthyThreshold: 1, unhealthyThreshold: 1 }}\n      panicThreshold: 0%\n",
        nodes_yaml(&[(a.addr.port(), 1), (b.addr.port(), 1)])
    );
    let gw = TestGateway::start(&pool_yaml("", &target));
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut client = Client::new(gw.addr()).await;
    for _ in 0..10 {
        assert_eq!(client.call("GET", "/", &[]).await.0, 200);
    }
    assert_eq!(
        (a.hits(), b.hits()),
        (0, 10),
        "only the healthy node serves"
    );
    a.health.store(200, SeqCst);
    tokio::time::sleep(Duration::from_millis(400)).await;
    for _ in 0..10 {
        assert_eq!(client.call("GET", "/", &[]).await.0, 200);
    }
    assert!(a.hits() >= 3, "the node is back: {}", a.hits());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retry_budget_prevents_retry_storms() {
    let bad = Node::start(503).await;
    let other = Node::start(503).await;
    let target = format!(
        "{}    retries: {{ attempts: 3, budget: 20% }}\n",
        nodes_yaml(&[(bad.addr.port(), 1), (other.addr.port(), 1)])
    );
    let gw = TestGateway::start(&pool_yaml("", &target));
    let mut client = Client::new(gw.addr()).await;
    let n = 1000;
    let t = Instant::now();
    for _ in 0..n {
        assert_eq!(client.call("GET", "/", &[]).await.0, 503);
    }
    let load = bad.hits() + other.hits();
    let allowed = n as f64 * 1.2 + 3.0 * t.elapsed().as_secs_f64() + 10.0;
    assert!(
        (load as f64) <= allowed,
        "{load} backend requests for {n} client requests (at most {allowed:.0})"
    );
    assert!(load > n, "some requests were retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_circuit_breaker_refuses_instead_of_queueing() {
    let slow = Node::start(200).await;
    // Five slow requests at once: each needs a connection of its own, so either limit lets two
    // through.
    for limit in ["maxRequests: 2", "maxConnections: 2"] {
        let target = format!(
            "{}    circuitBreaker: {{ {limit} }}\n",
            nodes_yaml(&[(slow.addr.port(), 1)])
        );
        let gw = TestGateway::start(&pool_yaml("", &target));
        let addr = gw.addr();
        let mut calls = Vec::new();
        for _ in 0..5 {
            calls.push(tokio::spawn(async move { get(addr, "/slow/800").await }));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut ok = 0;
        let mut refused = 0;
        for c in calls {
            let r = c.await.unwrap();
            match r.status.as_u16() {
                200 => ok += 1,
                503 => {
                    assert_eq!(r.json()["type"], "urn:turnpike:problem:upstream-overloaded");
                    assert_eq!(r.header("retry-after"), Some("1"));
                    refused += 1;
                }
                s => panic!("{limit}: status {s}"),
            }
        }
        assert_eq!((ok, refused), (2, 3), "{limit}");
        // Once the slow requests are done, the pool has room again.
        assert_eq!(get(addr, "/slow/0").await.status, 200, "{limit}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_ejections_and_named_upstreams_are_shared() {
    let (a, b) = (Node::start(503).await, Node::start(200).await);
    let upstream = format!(
        "upstream:\n  name: orders\n{}  healthCheck:\n    passive: {{ consecutiveFailures: 2, ejectFor: 60s }}\n",
        nodes_yaml(&[(a.addr.port(), 1), (b.addr.port(), 1)]).replace("    ", "  ")
    );
    let yaml = |extra: &str| {
        format!(
            "gateway: {{ accessLog: false, threads: 1 }}\n---\n{upstream}---\napi: {{ port: 0, ip: 127.0.0.1, path: {{ uri: /a }}, target: {{ upstream: orders }} }}\n---\napi: {{ port: 0, ip: 127.0.0.1, path: {{ uri: /b }}, target: {{ upstream: orders }} }}\n{extra}"
        )
    };
    let gw = TestGateway::start(&yaml(""));
    let mut client = Client::new(gw.addr()).await;
    for _ in 0..10 {
        client.call("GET", "/a", &[]).await;
    }
    assert_eq!(a.hits(), 2);
    // The other API shares the upstream: the node is out for it too.
    for _ in 0..10 {
        assert_eq!(client.call("GET", "/b", &[]).await.0, 200);
    }
    assert_eq!(a.hits(), 2);
    gw.rewrite(&yaml(
        "---\napi: { port: 0, ip: 127.0.0.1, path: { uri: /c }, flow: [ { return: {} } ] }\n",
    ));
    gw.gw().reload().unwrap();
    let mut client = Client::new(gw.addr()).await;
    for _ in 0..10 {
        assert_eq!(client.call("GET", "/a", &[]).await.0, 200);
    }
    assert_eq!(a.hits(), 2, "the reload kept the ejection");
}

#[test]
fn pool_settings_are_checked_at_load() {
    for (bad, says) in [
        ("    nodes: [ { url: \"http://127.0.0.1:1\", weight: 0 } ]\n", "at least 1"),
        ("    nodes: [ { url: \"http://127.0.0.1:1\" } ]\n    loadBalancing: hash\n", "needs `hashKey`"),
        ("    nodes: [ { url: \"http://127.0.0.1:1\" } ]\n    loadBalancing: fastest\n", "unknown variant"),
        ("    nodes: [ { url: \"http://127.0.0.1:1\" } ]\n    retries: { attempts: 11 }\n", "at most 10"),
        ("    upstream: nope\n", "no `upstream:` document is named `nope`"),
        ("    nodes: []\n", "at least one node"),
        ("    url: http://127.0.0.1:1\n    nodes: [ { url: \"http://127.0.0.1:2\" } ]\n", "give one of"),
        ("    nodes: [ { url: \"http://127.0.0.1:1\" } ]\n    healthCheck: { panicThreshold: 120% }\n", "between 0% and 100%"),
        ("    nodes: [ { url: \"http://127.0.0.1:1\" } ]\n    healthCheck: { active: { path: /h, expectStatus: \"abc\" } }\n", "not a status"),
        ("    nodes: [ { url: \"http://127.0.0.1:1\" } ]\n    dnsRefresh: 100ms\n", "at least 1s"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("gw.yaml");
        std::fs::write(&f, pool_yaml("", bad)).unwrap();
        let err = match turnpike::load_and_compile(&[f]) {
            Ok(_) => panic!("accepted: {bad}"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(says), "{bad}: {err}");
        assert!(err.contains("gw.yaml:"), "{err}");
    }
}
