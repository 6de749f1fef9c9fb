//! Reload under load and graceful shutdown, in-process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};

fn config(stable: u16, backend: u16, extra: usize, second_port: Option<u16>) -> String {
    let mut y = format!(
        "gateway: {{ accessLog: false }}\n---\napi: {{ name: stable, port: {stable}, ip: 127.0.0.1, path: {{ uri: /stable }}, target: {{ host: 127.0.0.1, port: {backend} }} }}\n---\napi: {{ port: {stable}, ip: 127.0.0.1, path: {{ uri: /mock }}, flow: [ {{ return: {{ body: mock }} }} ] }}\n"
    );
    for i in 0..extra {
        y.push_str(&format!(
            "---\napi: {{ port: {stable}, ip: 127.0.0.1, path: {{ uri: /extra{i} }}, flow: [ {{ return: {{ body: extra{i} }} }} ] }}\n"
        ));
    }
    if let Some(p) = second_port {
        y.push_str(&format!(
            "---\napi: {{ port: {p}, ip: 127.0.0.1, flow: [ {{ return: {{ body: second }} }} ] }}\n"
        ));
    }
    y
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_reloads_under_load_lose_no_request() {
    let backend = Backend::start().await;
    let (stable, second) = (free_port(), free_port());
    let gw = TestGateway::start(&config(stable, backend.port(), 0, None));
    let addr = gw.addr_of(stable);

    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let mut load = Vec::new();
    for worker in 0..8 {
        let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
        load.push(tokio::spawn(async move {
            // Half the clients keep their connection, half open a new one per request.
            let keepalive = worker % 2 == 0;
            let mut sender = None;
            while !stop.load(Ordering::Relaxed) {
                if sender.is_none() || !keepalive {
                    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
                    let (s, conn) =
                        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                            .await
                            .unwrap();
                    tokio::spawn(conn);
                    sender = Some(s);
                }
                let s = sender.as_mut().unwrap();
                let path = if worker % 4 < 2 { "/stable/x" } else { "/mock" };
                let result = async {
                    s.ready().await?;
                    let res = s
                        .send_request(req("GET", path).body(Full::new(Bytes::new())).unwrap())
                        .await?;
                    let status = res.status();
                    res.into_body().collect().await?;
                    Ok::<_, hyper::Error>(status)
                }
                .await;
                match result {
                    Ok(s) if s == 200 => ok.fetch_add(1, Ordering::Relaxed),
                    other => {
                        eprintln!("failed: {other:?}");
                        sender = None;
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        }));
    }

    for round in 0..20 {
        tokio::time::sleep(Duration::from_millis(60)).await;
        let with_port = round % 3 == 1;
        let yaml = if round == 10 {
            "api:\n  port: nope\n".to_string() // invalid: must change nothing
        } else {
            config(
                stable,
                backend.port(),
                round % 4,
                with_port.then_some(second),
            )
        };
        gw.rewrite(&yaml);
        let result = gw.gw().reload();
        if round == 10 {
            let err = result.unwrap_err().to_string();
            assert!(err.contains("gateway.yaml:2:9"), "{err}");
            continue;
        }
        result.unwrap();
        // The new configuration is in force at once.
        let extra = round % 4;
        if extra > 0 {
            let r = get(addr, &format!("/extra{}", extra - 1)).await;
            assert_eq!(r.text(), format!("extra{}", extra - 1));
        }
        assert_eq!(get(addr, &format!("/extra{extra}")).await.status, 404);
        let second_addr = std::net::SocketAddr::from(([127, 0, 0, 1], second));
        if with_port {
            assert_eq!(get(second_addr, "/").await.text(), "second");
        } else {
            // The listener is closed by the workers shortly after the swap.
            let mut closed = false;
            for _ in 0..50 {
                if try_send(
                    second_addr,
                    req("GET", "/").body(Full::new(Bytes::new())).unwrap(),
                )
                .await
                .is_err()
                {
                    closed = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert!(closed, "port {second} still open after it was removed");
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.await.unwrap();
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    eprintln!("{ok} requests during 20 reloads, {failed} failed");
    assert!(ok > 500, "too little load to mean anything: {ok}");
    assert_eq!(failed, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_in_flight_requests_and_stops_accepting() {
    let backend = Backend::start().await;
    let yaml = format!(
        "gateway: {{ accessLog: false, timeouts: {{ shutdown: 10s }} }}\n---\napi: {{ port: 0, ip: 127.0.0.1, target: {{ host: 127.0.0.1, port: {} }} }}\n",
        backend.port()
    );
    let mut gw = TestGateway::start(&yaml);
    let addr = gw.addr();
    let slow = tokio::spawn(async move { get(addr, "/slow/800").await });
    // Let the request reach the backend before shutting down.
    for _ in 0..100 {
        if backend.count() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let gateway = gw.gateway.take().unwrap();
    let started = std::time::Instant::now();
    let stopper = tokio::task::spawn_blocking(move || gateway.shutdown());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err()
            || try_send(addr, req("GET", "/").body(Full::new(Bytes::new())).unwrap())
                .await
                .is_err(),
        "new requests must not be served while shutting down"
    );
    let r = slow.await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "slow done");
    stopper.await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "shutdown waited for the grace period"
    );
}
