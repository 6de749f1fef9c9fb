//! The gateway's own HTTP/1.1 client against a scripted backend that answers each path with
//! exact bytes: chunked bodies with trailers, bodies delimited by the end of the connection,
//! interim 100 responses, answers before the request body was read, HEAD, backends closing
//! idle connections, and broken answers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::Full;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A backend that answers with scripted bytes and counts its connections.
struct Scripted {
    port: u16,
    accepted: Arc<AtomicUsize>,
}

/// What the backend does after writing its answer.
enum After {
    KeepOpen,
    Close,
    CloseLater(Duration),
    /// Stop writing, then read and discard what the client still sends (lingering close).
    Linger,
}

fn script(method: &str, path: &str) -> (Vec<u8>, After, bool) {
    let read_body = true;
    match path {
        "/chunked" => (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nx-t: 1\r\n\r\n".to_vec(),
            After::KeepOpen,
            read_body,
        ),
        "/until-close" => (b"HTTP/1.1 200 OK\r\n\r\nread until the end".to_vec(), After::Close, read_body),
        "/then-close" => (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec(), After::Close, read_body),
        "/idle-close" => (
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec(),
            After::CloseLater(Duration::from_millis(50)),
            read_body,
        ),
        "/continue" => (
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec(),
            After::KeepOpen,
            read_body,
        ),
        "/early" => (
            b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 4\r\nconnection: close\r\n\r\nnope".to_vec(),
            After::Linger,
            false,
        ),
        "/head" if method == "HEAD" => (
            b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n".to_vec(),
            After::KeepOpen,
            read_body,
        ),
        "/big" => {
            let mut r = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", 3 << 20).into_bytes();
            r.extend_from_slice(&pattern(3 << 20));
            (r, After::KeepOpen, read_body)
        }
        "/garbage" => (b"SIP/2.0 200 OK\r\n\r\n".to_vec(), After::Close, read_body),
        "/truncated" => (
            b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nshort".to_vec(),
            After::Close,
            read_body,
        ),
        _ => (
            b"HTTP/1.1 200 OK\r\ncontent-length: 7\r\n\r\ndefault".to_vec(),
            After::KeepOpen,
            read_body,
        ),
    }
}

impl Scripted {
    async fn start() -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(serve(stream));
            }
        });
        Scripted { port, accepted }
    }

    fn connections(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

async fn serve(mut s: TcpStream) {
    let mut buf = Vec::new();
    loop {
        // Read one request head.
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 4096];
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
        buf.drain(..head_end);
        let mut words = head.split_whitespace();
        let method = words.next().unwrap_or("").to_owned();
        let path = words.next().unwrap_or("").to_owned();
        let length: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse().unwrap())
            })
            .unwrap_or(0);
        let (answer, after, read_body) = script(&method, &path);
        if read_body {
            while buf.len() < length {
                let mut chunk = [0u8; 65536];
                match s.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            buf.drain(..length);
        }
        if s.write_all(&answer).await.is_err() {
            return;
        }
        match after {
            After::KeepOpen => {}
            After::Close => return,
            After::CloseLater(d) => {
                tokio::time::sleep(d).await;
                return;
            }
            After::Linger => {
                let _ = s.shutdown().await;
                let mut sink = vec![0u8; 65536];
                while let Ok(n) = s.read(&mut sink).await {
                    if n == 0 {
                        break;
                    }
                }
                return;
            }
        }
    }
}

fn gateway(port: u16) -> TestGateway {
    TestGateway::start(&format!(
        "gateway:\n  accessLog: false\n  threads: 1\n  limits: {{ maxBodySize: 64MB }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  target:\n    url: http://127.0.0.1:{port}\n"
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_bodies_end_and_the_connection_is_reused() {
    let backend = Scripted::start().await;
    let gw = gateway(backend.port);
    for _ in 0..3 {
        let r = get(gw.addr(), "/chunked").await;
        assert_eq!(r.status, 200);
        assert_eq!(r.text(), "hello world");
    }
    let r = get(gw.addr(), "/other").await;
    assert_eq!(r.text(), "default");
    assert_eq!(backend.connections(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_delimited_by_close_and_large_bodies_arrive_whole() {
    let backend = Scripted::start().await;
    let gw = gateway(backend.port);
    let r = get(gw.addr(), "/until-close").await;
    assert_eq!(r.text(), "read until the end");
    let r = get(gw.addr(), "/big").await;
    assert_eq!(r.body, pattern(3 << 20));
    let r = get(gw.addr(), "/big").await;
    assert_eq!(r.body.len(), 3 << 20);
    // The close-delimited answer used up its connection; the large ones shared one.
    assert_eq!(backend.connections(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_the_backend_closed_are_not_used_again() {
    let backend = Scripted::start().await;
    let gw = gateway(backend.port);
    // The backend closes right after answering, without saying so.
    for _ in 0..5 {
        let r = get(gw.addr(), "/then-close").await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.text(), "ok");
    }
    // The backend closes idle connections after 50 ms.
    let r = get(gw.addr(), "/idle-close").await;
    assert_eq!(r.text(), "ok");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = get(gw.addr(), "/idle-close").await;
    assert_eq!(r.status, 200, "{}", r.text());
    // A POST with a body is also never sent on a connection known to be closed.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = send(
        gw.addr(),
        req("POST", "/idle-close")
            .body(Full::new(Bytes::from_static(b"{}")))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interim_responses_are_skipped_and_head_has_no_body() {
    let backend = Scripted::start().await;
    let gw = gateway(backend.port);
    let r = send(
        gw.addr(),
        req("POST", "/continue")
            .header("expect", "100-continue")
            .body(Full::new(Bytes::from_static(b"payload")))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "ok");
    for _ in 0..2 {
        let r = send(
            gw.addr(),
            req("HEAD", "/head").body(Full::new(Bytes::new())).unwrap(),
        )
        .await;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-length"), Some("1000"));
        assert!(r.body.is_empty());
    }
    assert_eq!(
        backend.connections(),
        1,
        "HEAD answers leave the connection usable"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_before_the_whole_body_is_forwarded() {
    let backend = Scripted::start().await;
    let gw = gateway(backend.port);
    // Larger than the socket buffers: the backend answers long before it could have read it.
    // A raw client reads while it writes (the gateway closes the client connection after the
    // answer, as the rest of the body will not be read).
    let stream = TcpStream::connect(gw.addr()).await.unwrap();
    let (mut rd, mut wr) = stream.into_split();
    let size = 24 << 20;
    tokio::spawn(async move {
        let head = format!("POST /early HTTP/1.1\r\nhost: x\r\ncontent-length: {size}\r\n\r\n");
        if wr.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        let _ = wr.write_all(&pattern(size)).await;
    });
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    while !answer.ends_with(b"nope") {
        match rd.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
        }
    }
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.ends_with("nope"), "{answer}");
    let r = get(gw.addr(), "/other").await;
    assert_eq!(r.text(), "default");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_answers_are_502_and_truncated_bodies_fail() {
    let backend = Scripted::start().await;
    let gw = gateway(backend.port);
    let r = get(gw.addr(), "/garbage").await;
    assert_eq!(r.status, 502);
    assert_eq!(r.json()["type"], "urn:turnpike:problem:upstream-error");
    let r = try_send(
        gw.addr(),
        req("GET", "/truncated")
            .body(Full::new(Bytes::new()))
            .unwrap(),
    )
    .await;
    assert!(r.is_err(), "a truncated body must not look complete: {r:?}");
    let r = get(gw.addr(), "/other").await;
    assert_eq!(r.text(), "default");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apis_with_the_same_backend_share_its_connections() {
    let backend = Scripted::start().await;
    let mut yaml = String::from("gateway: { accessLog: false, threads: 1 }\n");
    for i in 0..8 {
        yaml.push_str(&format!(
            "---\napi:\n  port: 0\n  ip: 127.0.0.1\n  path: {{ uri: /api{i} }}\n  target: {{ url: \"http://127.0.0.1:{}/\" }}\n",
            backend.port
        ));
    }
    let gw = TestGateway::start(&yaml);
    for round in 0..3 {
        for i in 0..8 {
            let r = get(gw.addr(), &format!("/api{i}/x")).await;
            assert_eq!(r.text(), "default", "round {round}, api {i}");
        }
    }
    // One connection served every API (the client's requests are sequential).
    assert_eq!(backend.connections(), 1);
}
