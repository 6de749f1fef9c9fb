//! A runaway client against a backend of fixed capacity: with a concurrency limit and fair
//! queues per client, a well-behaved client's requests wait behind at most a round of the
//! others' (never behind the runaway's whole backlog), the runaway's overflow is shed with 429
//! and `Retry-After` while the well-behaved client gets no error, and an adaptive limit comes
//! down when the backend's latency grows. The backend counts the requests it starts, so "how
//! many requests went before mine" is read from its counter, not from clocks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use http_body_util::Full;

const TOKEN: &str = "overload-test-token-0123456789";

/// A backend that serves `capacity` requests at once (the rest wait in its own FIFO queue),
/// each for `service`; a request's response says, in `x-started`, how many requests the
/// backend had started before it.
struct CapacityBackend {
    addr: SocketAddr,
    started: Arc<AtomicU64>,
    /// The service time in milliseconds (changeable while running).
    service_ms: Arc<AtomicU64>,
}

impl CapacityBackend {
    async fn start(capacity: usize, service: Duration) -> CapacityBackend {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let started = Arc::new(AtomicU64::new(0));
        let service_ms = Arc::new(AtomicU64::new(service.as_millis() as u64));
        let slots = Arc::new(tokio::sync::Semaphore::new(capacity));
        let (s, ms) = (started.clone(), service_ms.clone());
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let (s, ms, slots) = (s.clone(), ms.clone(), slots.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |_req| {
                        let (s, ms, slots) = (s.clone(), ms.clone(), slots.clone());
                        async move {
                            let _slot = slots.acquire().await.unwrap();
                            let n = s.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(ms.load(Ordering::SeqCst)))
                                .await;
                            let mut r = http::Response::new(Full::new(Bytes::from("ok")));
                            r.headers_mut().insert("x-started", n.into());
                            Ok::<_, Infallible>(r)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                        .await;
                });
            }
        });
        CapacityBackend {
            addr,
            started,
            service_ms,
        }
    }
}

fn config(backend: SocketAddr, concurrency: &str) -> String {
    format!(
        r#"gateway: {{ threads: 2, accessLog: false }}
---
admin: {{ listen: "127.0.0.1:0", hosts: [test.local], token: {TOKEN} }}
---
upstream:
  name: capacity
  nodes: [ {{ url: "http://{backend}" }} ]
  timeouts: {{ response: 30s }}
{concurrency}
---
api:
  name: fair
  port: 0
  ip: 127.0.0.1
  target: {{ upstream: capacity }}
"#
    )
}

/// `clients` connections of the runaway client sending back to back until `stop`; returns
/// the statuses it got, and checks that every refusal says when to come back.
fn runaway(
    gw: SocketAddr,
    clients: usize,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<u16>> {
    tokio::spawn(async move {
        let mut tasks = Vec::new();
        for _ in 0..clients {
            let stop = stop.clone();
            tasks.push(tokio::spawn(async move {
                let mut statuses = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    let r = get_with(gw, "/work", &[("x-client-id", "runaway")]).await;
                    if r.status != 200 {
                        assert!(r.header("retry-after").is_some(), "{}", r.text());
                        if r.status == 429 {
                            assert_eq!(r.json()["type"], "urn:turnpike:problem:queue-full");
                        }
                        // A shed client comes back soon, as runaway agents do.
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    statuses.push(r.status.as_u16());
                }
                statuses
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all
    })
}

/// A well-behaved client's `n` requests, one after the other: for each, how many requests
/// the backend started between sending it and starting it.
async fn well_behaved(gw: SocketAddr, backend: &CapacityBackend, n: usize) -> Vec<u64> {
    let mut behind = Vec::new();
    for i in 0..n {
        let before = backend.started.load(Ordering::SeqCst);
        let id = format!("good-{}", i % 3);
        let r = get_with(gw, "/work", &[("x-client-id", &id)]).await;
        assert_eq!(r.status, 200, "a well-behaved request failed: {}", r.text());
        let started: u64 = r.header("x-started").unwrap().parse().unwrap();
        behind.push(started.saturating_sub(before));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    behind
}

async fn status(control: &turnpike::Control) -> serde_json::Value {
    let r = get_with(
        control.admin_addr().unwrap(),
        "/admin/v1/status",
        &[("authorization", &format!("Bearer {TOKEN}"))],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn start(yaml: &str) -> (turnpike::Control, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gw.yaml");
    std::fs::write(&file, yaml).unwrap();
    (turnpike::Control::start(vec![file]).unwrap(), dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runaway_client_waits_behind_itself_and_is_shed_while_the_others_are_served() {
    let backend = CapacityBackend::start(2, Duration::from_millis(30)).await;

    // Without the protection: the runaway's backlog queues inside the backend, and every
    // request of the others waits behind all of it.
    let (control, _dir) = start(&config(backend.addr, ""));
    let gw = control.gateway().listeners()[0].1;
    let stop = Arc::new(AtomicBool::new(false));
    let flood = runaway(gw, 24, stop.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let unprotected = well_behaved(gw, &backend, 4).await;
    stop.store(true, Ordering::SeqCst);
    flood.await.unwrap();
    control.shutdown();
    let worst_unprotected = *unprotected.iter().max().unwrap();
    assert!(
        worst_unprotected >= 12,
        "without a limit the backend's own queue should hold the runaway's backlog: {unprotected:?}"
    );

    // With a limit at the backend's capacity and fair queues per client.
    let (control, _dir) = start(&config(
        backend.addr,
        "  concurrency:\n    limit: 2\n    queue: { key: \"${header.X-Client-Id}\", maxPerKey: 8, maxTotal: 64, timeout: 10s, targetDelay: 10s }",
    ));
    let gw = control.gateway().listeners()[0].1;
    let stop = Arc::new(AtomicBool::new(false));
    let flood = runaway(gw, 24, stop.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let protected = well_behaved(gw, &backend, 12).await;
    let s = status(&control).await;
    stop.store(true, Ordering::SeqCst);
    let statuses = flood.await.unwrap();
    // Round-robin over the keys with two slots: a well-behaved request has at most the two in
    // flight and a turn of the runaway's before it.
    let worst = *protected.iter().max().unwrap();
    assert!(worst <= 5, "waited behind {protected:?}");
    let served = statuses.iter().filter(|&&s| s == 200).count();
    let refused = statuses.iter().filter(|&&s| s == 429).count();
    assert!(
        served > 10,
        "the runaway gets the capacity left over: {served}"
    );
    assert!(refused > 0, "the runaway's overflow is shed");
    let c = &s["concurrency"][0];
    assert_eq!(c["upstream"], "capacity", "{s}");
    assert_eq!(c["limit"], 2, "{s}");
    assert!(c["shed"]["queue_full"].as_u64().unwrap() > 0, "{s}");
    let metrics = get_with(
        control.admin_addr().unwrap(),
        "/metrics",
        &[("authorization", &format!("Bearer {TOKEN}"))],
    )
    .await
    .text();
    for line in [
        "turnpike_concurrency_limit{upstream=\"capacity\"} 2",
        "turnpike_queue_shed_total{upstream=\"capacity\",reason=\"queue_full\"}",
        "turnpike_queue_wait_seconds_bucket{",
    ] {
        assert!(metrics.contains(line), "{line} not in:\n{metrics}");
    }
    control.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adaptive_limit_comes_down_when_the_backend_slows_and_the_queue_stays_bounded() {
    // The backend serves four at a time; requests past that wait inside it and its latency
    // grows with the load the gateway lets through.
    let backend = CapacityBackend::start(4, Duration::from_millis(10)).await;
    let (control, _dir) = start(&config(
        backend.addr,
        "  concurrency:\n    limit: adaptive\n    adaptive: { min: 2, max: 64, initial: 32, smoothing: 0.5, probeInterval: 1s }\n    queue: { key: \"${header.X-Client-Id}\", maxPerKey: 200, maxTotal: 400, timeout: 5s, targetDelay: 200ms, interval: 200ms }",
    ));
    let gw = control.gateway().listeners()[0].1;
    let stop = Arc::new(AtomicBool::new(false));
    let flood = runaway(gw, 48, stop.clone());
    // Slow down five times while loaded: the limit must come down from where it started.
    tokio::time::sleep(Duration::from_millis(500)).await;
    backend.service_ms.store(50, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut lowest = u64::MAX;
    while Instant::now() < deadline {
        let s = status(&control).await;
        lowest = lowest.min(s["concurrency"][0]["limit"].as_u64().unwrap());
        if lowest < 16 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::SeqCst);
    let statuses = flood.await.unwrap();
    assert!(lowest < 16, "the adaptive limit stayed at {lowest}");
    assert!(lowest >= 2);
    assert!(statuses.contains(&200));
    // Queueing delay is bounded: nothing waits past the queue timeout; the overflow was shed.
    let s = status(&control).await;
    let shed = &s["concurrency"][0]["shed"];
    assert_eq!(shed["timeout"], 0, "{s}");
    control.shutdown();
}

#[test]
fn concurrency_settings_are_checked_at_load() {
    for (bad, says) in [
        ("{ limit: 0 }", "must be at least 1"),
        ("{ limit: lots }", "not a limit"),
        (
            "{ limit: 4, adaptive: { min: 2 } }",
            "goes with `limit: adaptive`",
        ),
        (
            "{ limit: adaptive, adaptive: { min: 8, max: 4 } }",
            "at least `min`",
        ),
        ("{ limit: adaptive, adaptive: { smoothing: 0 } }", "above 0"),
        ("{ limit: 4, queue: { key: \"${nope}\" } }", "queue.key"),
        (
            "{ limit: 4, queue: { maxPerKey: 10, maxTotal: 5 } }",
            "at least `maxPerKey`",
        ),
        ("{ limit: 4, queue: { weights: { a: 0 } } }", "weights.a"),
        ("{ limit: 4, queue: { size: 3 } }", "size"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("t.yaml");
        std::fs::write(
            &f,
            format!(
                "api:\n  port: 0\n  target:\n    url: http://127.0.0.1:9\n    concurrency: {bad}\n"
            ),
        )
        .unwrap();
        let err = turnpike::load_and_compile(&[f])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains(says), "{bad}: {err}");
        assert!(err.contains("t.yaml:"), "{err}");
    }
}

/// `examples/overload.yaml` runs as it is, with its port, backend and capacity from the
/// environment: the limit is the backend's capacity and clients are told apart by
/// `X-Client-Id`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overload_example_runs_as_it_is() {
    let backend = CapacityBackend::start(3, Duration::from_millis(20)).await;
    let port = free_port();
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/overload.yaml");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_turnpike"))
        .args(["run", "-c", example])
        .env("PORT", port.to_string())
        .env("BACKEND_URL", format!("http://{}", backend.addr))
        .env("BACKEND_CONCURRENCY", "3")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let gw = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(gw).await.is_err() {
        assert!(Instant::now() < deadline, "the example did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let flood = runaway(gw, 16, stop.clone());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let behind = well_behaved(gw, &backend, 6).await;
    stop.store(true, Ordering::SeqCst);
    let statuses = flood.await.unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        *behind.iter().max().unwrap() <= 7,
        "waited behind {behind:?}"
    );
    assert!(statuses.contains(&200));
}
