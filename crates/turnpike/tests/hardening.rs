//! What a client acting as an attacker can and cannot do: bad body framing, oversized heads
//! and targets, slow and greedy clients, HTTP/2 floods; and what errors tell it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sends `payload` on a new connection and reads until the gateway closes it (at most
/// `within`); returns what came back and whether the gateway closed the connection.
async fn raw(addr: SocketAddr, payload: &[u8], within: Duration) -> (Vec<u8>, bool) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(payload).await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    let end = Instant::now() + within;
    loop {
        match tokio::time::timeout_at(end.into(), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (out, true),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => return (out, false),
        }
    }
}

fn status_of(reply: &[u8]) -> u16 {
    std::str::from_utf8(&reply[9..12.min(reply.len())])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn json_body(reply: &[u8]) -> serde_json::Value {
    let text = String::from_utf8_lossy(reply);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Held by the test that measures this process's memory and by the tests that build large
/// buffers in it (bodies over the limits, compression bombs), so that the measurement sees
/// only its own gateway's growth.
static MEMORY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn gateway(backend: u16, gateway: &str) -> TestGateway {
    TestGateway::start(&format!(
        "gateway: {{ accessLog: false{gateway} }}\n---\napi: {{ port: 0, ip: 127.0.0.1, target: {{ host: 127.0.0.1, port: {backend} }} }}\n"
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_body_with_bad_chunk_framing_is_a_client_error() {
    let backend = Backend::start().await;
    let gw = gateway(backend.port(), "");
    for (what, chunks) in [
        ("hex prefix", "0x5\r\nhello\r\n0\r\n\r\n"),
        ("overflowing size", "fffffffffffffffffff\r\nx\r\n0\r\n\r\n"),
        ("bad terminator", "5\r\nhelloXX0\r\n\r\n"),
    ] {
        let payload = format!(
            "POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{chunks}"
        );
        let (reply, closed) = raw(gw.addr(), payload.as_bytes(), Duration::from_secs(5)).await;
        assert_eq!(
            status_of(&reply),
            400,
            "{what}: {}",
            String::from_utf8_lossy(&reply)
        );
        assert_eq!(
            json_body(&reply)["type"],
            "urn:turnpike:problem:bad-body",
            "{what}"
        );
        assert!(closed, "{what}: the client's connection stays open");
    }
    // The backend never got a complete request.
    assert_eq!(backend.count(), 0);
    // And the gateway is fine.
    assert_eq!(get(gw.addr(), "/after").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heads_targets_and_bodies_over_their_limits_get_their_status() {
    let _memory = MEMORY.lock().await;
    let backend = Backend::start().await;
    let gw = gateway(
        backend.port(),
        ", limits: { maxHeaderSize: 8KB, maxHeaders: 20, maxUriLength: 1KB, maxBodySize: 1KB }",
    );
    let a = gw.addr();
    let big_head = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(10_000)
    );
    let (reply, _) = raw(a, big_head.as_bytes(), Duration::from_secs(3)).await;
    assert_eq!(
        status_of(&reply),
        431,
        "{}",
        String::from_utf8_lossy(&reply)
    );
    let many: String = (0..30).map(|i| format!("X-H{i}: v\r\n")).collect();

    let many_head = format!("GET / HTTP/1.1\r\nHost: x\r\n{many}\r\n");
    let (reply, _) = raw(a, many_head.as_bytes(), Duration::from_secs(3)).await;
    assert_eq!(
        status_of(&reply),
        431,
        "{}",
        String::from_utf8_lossy(&reply)
    );
    let long = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "p".repeat(2000));
    let (reply, _) = raw(a, long.as_bytes(), Duration::from_secs(3)).await;
    assert_eq!(
        status_of(&reply),
        414,
        "{}",
        String::from_utf8_lossy(&reply)
    );
    assert_eq!(
        json_body(&reply)["type"],
        "urn:turnpike:problem:uri-too-long"
    );
    let body = format!(
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n{}",
        "b".repeat(2000)
    );
    let (reply, _) = raw(a, body.as_bytes(), Duration::from_secs(3)).await;
    assert_eq!(
        status_of(&reply),
        413,
        "{}",
        String::from_utf8_lossy(&reply)
    );
    assert_eq!(backend.count(), 0);
    // The limit is exact: a head of 8KB passes, one byte more is 431 (hyper's read buffer
    // alone lets heads well beyond it through).
    for (extra, status) in [(0, 200), (1, 431)] {
        let frame = "GET / HTTP/1.1\r\nHost: x\r\nX-Big: \r\n\r\n".len();
        let head = format!(
            "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
            "a".repeat(8192 - frame + extra)
        );
        assert_eq!(head.len(), 8192 + extra);
        let (reply, _) = raw(a, head.as_bytes(), Duration::from_secs(3)).await;
        assert_eq!(status_of(&reply), status, "{extra}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_bodies_unread_responses_and_connection_floods_are_bounded() {
    let _memory = MEMORY.lock().await;
    let backend = Backend::start().await;
    let gw = gateway(
        backend.port(),
        ", timeouts: { bodyRead: 1s, responseWrite: 1s }, limits: { maxConnectionsPerIp: 8 }",
    );
    let a = gw.addr();
    // A body that stops halfway: 408, and the connection is closed.
    let started = Instant::now();
    let (reply, closed) = raw(
        a,
        b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly ten b",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(
        status_of(&reply),
        408,
        "{}",
        String::from_utf8_lossy(&reply)
    );
    assert_eq!(
        json_body(&reply)["type"],
        "urn:turnpike:problem:body-timeout"
    );
    assert!(closed);
    assert!(started.elapsed() >= Duration::from_secs(1));
    // A client that asks for 64 MB and reads none of it is cut off after the write timeout.
    let mut greedy = tokio::net::TcpStream::connect(a).await.unwrap();
    greedy
        .write_all(b"GET /big/67108864 HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut got = 0usize;
    let mut buf = vec![0u8; 1 << 20];
    let ended = loop {
        match tokio::time::timeout(Duration::from_secs(3), greedy.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            Ok(Ok(n)) => got += n,
            Err(_) => break false,
        }
    };
    assert!(
        ended,
        "the connection of a client that did not read is still open"
    );
    assert!(got < 64 << 20, "the whole response went out ({got} bytes)");
    // More connections from one IP than allowed: the extra ones are closed at once, the
    // others are served.
    let mut open = Vec::new();
    for _ in 0..8 {
        open.push(tokio::net::TcpStream::connect(a).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (reply, closed) = raw(
        a,
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        Duration::from_secs(2),
    )
    .await;
    assert!(reply.is_empty() && closed, "a 9th connection was served");
    let mut first = open.pop().unwrap();
    first
        .write_all(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 12];
    first.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"HTTP/1.1 200");
    drop(open);
    drop(first);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(get(a, "/again").await.status, 200);
}

/// Runs `slowhttptest` (Debian) with `args` against `url` while a well-behaved client requests
/// `url` every 100 ms; returns the well-behaved client's latencies.
async fn under_slowhttptest(url: String, args: &[&str]) -> Vec<Duration> {
    let dir = tempfile::tempdir().unwrap();
    let mut attack = std::process::Command::new("slowhttptest")
        .args(args)
        .args(["-u", &url, "-l", "12", "-o"])
        .arg(dir.path().join("report"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("slowhttptest");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let addr: SocketAddr = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let mut latencies = Vec::new();
    for i in 0..60 {
        let t = Instant::now();
        let r = get(addr, &format!("/probe/{i}")).await;
        assert_eq!(
            r.status, 200,
            "a well-behaved client was refused during {args:?}"
        );
        latencies.push(t.elapsed());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = attack.kill();
    let _ = attack.wait();
    latencies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowhttptest_attacks_do_not_slow_other_clients() {
    if std::process::Command::new("slowhttptest")
        .arg("-h")
        .output()
        .is_err()
    {
        eprintln!("slowhttptest is not installed (scripts/setup.sh --test installs it): skipped");
        return;
    }
    let backend = Backend::start().await;
    let gw = gateway(
        backend.port(),
        ", timeouts: { headerRead: 2s, bodyRead: 2s, responseWrite: 2s }",
    );
    let url = format!("http://{}/", gw.addr());
    for (name, args) in [
        (
            "slowloris",
            &["-H", "-c", "400", "-r", "200", "-i", "5"][..],
        ),
        (
            "slow body",
            &["-B", "-c", "400", "-r", "200", "-i", "5", "-s", "100000"][..],
        ),
        (
            "slow read",
            &[
                "-X", "-c", "200", "-r", "100", "-w", "1", "-y", "1", "-n", "5", "-z", "1",
            ][..],
        ),
    ] {
        let mut l = under_slowhttptest(url.clone(), args).await;
        l.sort();
        let p99 = l[l.len() * 99 / 100];
        assert!(
            p99 < Duration::from_millis(500),
            "{name}: the p99 of other clients' requests was {p99:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_carry_a_request_id_and_no_backend_internals() {
    let backend = Backend::start().await;
    let closed = free_port();
    let yaml = format!(
        "gateway: {{ accessLog: false }}\n---\napi: {{ port: 0, ip: 127.0.0.1, path: {{ uri: /up }}, target: {{ host: 127.0.0.1, port: {} }} }}\n---\napi: {{ port: 0, ip: 127.0.0.1, path: {{ uri: /down }}, target: {{ host: 127.0.0.1, port: {closed} }} }}\n",
        backend.port()
    );
    let gw = TestGateway::start(&yaml);
    let a = gw.addr();
    let r1 = get(a, "/up/a").await;
    let r2 = get(a, "/up/b").await;
    let id1 = r1.header("x-request-id").unwrap().to_owned();
    let id2 = r2.header("x-request-id").unwrap().to_owned();
    assert_ne!(id1, id2);
    assert_eq!(backend.last().headers["x-request-id"], id2.as_str());
    // A client's own id is not trusted by default.
    let r = get_with(a, "/up/c", &[("x-request-id", "mine")]).await;
    assert_ne!(r.header("x-request-id"), Some("mine"));
    assert_ne!(backend.last().headers["x-request-id"], "mine");
    let r = get(a, "/down").await;
    assert_eq!(r.status, 502);
    let j = r.json();
    assert_eq!(j["type"], "urn:turnpike:problem:upstream-unreachable");
    assert_eq!(j["title"], "Upstream unreachable");
    assert_eq!(j["requestId"], r.header("x-request-id").unwrap());
    let text = r.text();
    for leak in ["127.0.0.1", &closed.to_string(), "refused", "os error"] {
        assert!(!text.contains(leak), "the 502 says `{leak}`: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_request_id_is_passed_on() {
    let backend = Backend::start().await;
    let gw = gateway(
        backend.port(),
        ", requestId: { header: X-Correlation-Id, trustIncoming: true }",
    );
    let r = get_with(gw.addr(), "/x", &[("x-correlation-id", "lb-123")]).await;
    assert_eq!(r.header("x-correlation-id"), Some("lb-123"));
    assert_eq!(backend.last().headers["x-correlation-id"], "lb-123");
    // One that is not a sane id is replaced.
    let r = get_with(gw.addr(), "/x", &[("x-correlation-id", "a b")]).await;
    assert_ne!(r.header("x-correlation-id"), Some("a b"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_floods_are_cut_off_and_memory_stays_flat() {
    let _memory = MEMORY.lock().await;
    if !python_has(&["h2"]) {
        eprintln!("the Python h2 package is not installed (scripts/setup.sh --test): skipped");
        return;
    }
    let backend = Backend::start().await;
    let gw = TestGateway::start(&format!(
        "gateway: {{ accessLog: false, timeouts: {{ responseWrite: 2s }} }}\n---\napi: {{ port: 0, ip: 127.0.0.1, h2c: true, target: {{ host: 127.0.0.1, port: {} }} }}\n",
        backend.port()
    ));
    let a = gw.addr();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/h2_abuse.py");
    let rss = || {
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap()
    };
    let before = rss();
    for scenario in [
        "rapid-reset",
        "continuation-flood",
        "ping-flood",
        "settings-flood",
        "huge-headers",
    ] {
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new("python3")
                .args([script, "127.0.0.1", &a.port().to_string(), scenario])
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let r: serde_json::Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| {
            panic!(
                "{scenario}: {e}: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        match scenario {
            "rapid-reset" | "continuation-flood" => {
                assert!(
                    r["goaway"].is_u64() && r["closed"] == true,
                    "{scenario}: the connection must end with a GOAWAY: {r}"
                );
            }
            "huge-headers" => assert!(
                r["status"] == 431 || r["reset"] == true || r["goaway"].is_u64(),
                "{scenario}: an oversized header list must be refused: {r}"
            ),
            _ => {}
        }
        let grown = rss().saturating_sub(before);
        assert!(
            grown < 64 * 1024,
            "{scenario}: memory grew by {grown} KiB: {r}"
        );
    }
    assert_eq!(get(a, "/after").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xml_policies_in_a_plain_api_answer_soap_requests_with_faults() {
    let backend = Backend::start().await;
    let gw = TestGateway::start(&format!(
        "gateway: {{ accessLog: false }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  flow:\n    - xmlProtection: {{ maxDepth: 3, removeDTD: false }}\n  target: {{ host: 127.0.0.1, port: {} }}\n",
        backend.port()
    ));
    let deep = "<a><b><c><d><e/></d></c></b></a>";
    for (ct, fault) in [
        ("text/xml; charset=utf-8", true),
        ("application/soap+xml", true),
        ("application/xml", false),
    ] {
        let r = send(
            gw.addr(),
            req("POST", "/svc")
                .header("content-type", ct)
                .header("soapaction", "x")
                .body(http_body_util::Full::new(bytes::Bytes::from(deep)))
                .unwrap(),
        )
        .await;
        assert!(r.status == 400 || r.status == 500, "{ct}: {}", r.status);
        if fault {
            assert!(r.text().contains("Fault>"), "{ct}: {}", r.text());
            assert!(
                r.text().contains("urn:turnpike:problem:xml-protection"),
                "{ct}"
            );
        } else {
            assert_eq!(
                r.json()["type"],
                "urn:turnpike:problem:xml-protection",
                "{ct}"
            );
        }
    }
}

/// A backend that records the raw bytes of one chunked request and answers 200.
async fn raw_chunked_backend() -> (u16, tokio::sync::oneshot::Receiver<String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = s.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&got);
            if let Some(end) = text.find("\r\n0\r\n") {
                if text[end + 5..].contains("\r\n\r\n") || text[end + 5..].starts_with("\r\n") {
                    break;
                }
            }
        }
        s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            .await
            .unwrap();
        let _ = tx.send(String::from_utf8_lossy(&got).into_owned());
    });
    (port, rx)
}

/// Request trailers do not reach the backend unless `forwardTrailers`, and even then never
/// the fields RFC 9110 forbids in trailers (`Host`, `Authorization`, `Transfer-Encoding`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_trailers_are_dropped_or_filtered() {
    let request = "POST /t HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\nX-Checksum: abc\r\nAuthorization: Bearer smuggled\r\nHost: admin.internal\r\nTransfer-Encoding: gzip\r\n\r\n";
    for (forward, expect_checksum) in [("", false), (", forwardTrailers: true", true)] {
        let (port, seen) = raw_chunked_backend().await;
        let gw = gateway(port, forward);
        let (reply, _) = raw(gw.addr(), request.as_bytes(), Duration::from_secs(5)).await;
        assert_eq!(
            status_of(&reply),
            200,
            "{}",
            String::from_utf8_lossy(&reply)
        );
        let sent = seen.await.unwrap().to_ascii_lowercase();
        let trailers = &sent[sent.find("\r\n0\r\n").unwrap()..];
        assert_eq!(
            trailers.contains("x-checksum: abc"),
            expect_checksum,
            "{sent}"
        );
        for forbidden in ["authorization", "admin.internal", "transfer-encoding"] {
            assert!(!trailers.contains(forbidden), "{forbidden}: {sent}");
        }
    }
}

fn gzip(b: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

fn zlib(b: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

async fn post_bytes(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Reply {
    let mut r = req("POST", path);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    send(
        addr,
        r.body(http_body_util::Full::new(bytes::Bytes::from(body)))
            .unwrap(),
    )
    .await
}

/// Compressed bodies, UTF-16/UTF-32 JSON and multipart fields of any type are inspected as the
/// backend reads them; a decompression bomb is 413 and an unknown coding 415, never forwarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encoded_bodies_are_inspected_as_the_backend_reads_them() {
    let _memory = MEMORY.lock().await;
    let backend = Backend::start().await;
    let gw = TestGateway::start(&format!(
        r#"api:
  port: 0
  path: /sql
  flow:
    - sqlInjectionProtection: {{}}
  target:
    url: http://127.0.0.1:{0}
---
api:
  port: 0
  path: /json
  flow:
    - jsonProtection:
        maxDepth: 5
  target:
    url: http://127.0.0.1:{0}
"#,
        backend.port()
    ));
    let addr = gw.addr();
    let json = "application/json";
    let form = "application/x-www-form-urlencoded";
    let attack_json = br#"{"user":{"name":"1' OR '1'='1"}}"#;
    let attack_form = b"id=1%27%20OR%20%271%27%3D%271";
    // `attack_form` compressed by brotli 1.1 (Python's `brotli.compress`).
    let attack_form_br = hex("0b0e8069643d312532372532304f52253230253237312532372533442532373103");
    let utf16: Vec<u8> = std::str::from_utf8(attack_json)
        .unwrap()
        .encode_utf16()
        .flat_map(u16::to_le_bytes)
        .collect();
    let utf32: Vec<u8> = std::str::from_utf8(attack_json)
        .unwrap()
        .chars()
        .flat_map(|c| (c as u32).to_be_bytes())
        .collect();
    let multipart = b"--b\r\nContent-Disposition: form-data; name=\"id\"\r\n\
Content-Type: application/octet-stream\r\n\r\n1' OR '1'='1\r\n--b--\r\n"
        .to_vec();
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, Vec<u8>);
    let cases: Vec<Case> = vec![
        (
            "gzip JSON",
            vec![("content-type", json), ("content-encoding", "gzip")],
            gzip(attack_json),
        ),
        (
            "deflate form",
            vec![("content-type", form), ("content-encoding", "deflate")],
            zlib(attack_form),
        ),
        (
            "br form",
            vec![("content-type", form), ("content-encoding", "br")],
            attack_form_br,
        ),
        (
            "zstd JSON",
            vec![("content-type", json), ("content-encoding", "zstd")],
            zstd::encode_all(&attack_json[..], 3).unwrap(),
        ),
        (
            "gzip then zstd",
            vec![("content-type", json), ("content-encoding", "gzip, zstd")],
            zstd::encode_all(&gzip(attack_json)[..], 3).unwrap(),
        ),
        (
            "UTF-16 JSON without charset",
            vec![("content-type", json)],
            utf16.clone(),
        ),
        (
            "UTF-16 JSON with charset",
            vec![("content-type", "application/json; charset=utf-16le")],
            utf16,
        ),
        ("UTF-32 JSON", vec![("content-type", json)], utf32),
        (
            "multipart field of type octet-stream",
            vec![("content-type", "multipart/form-data; boundary=b")],
            multipart,
        ),
    ];
    for (what, headers, body) in cases {
        let r = post_bytes(addr, "/sql", &headers, body).await;
        assert_eq!(r.status, 400, "{what}: {}", r.text());
        assert_eq!(
            r.json()["type"],
            "urn:turnpike:problem:sql-injection",
            "{what}"
        );
    }
    assert_eq!(backend.count(), 0, "an attack reached the backend");

    // A bomb: 40 MiB of zeros in about 40 KB.
    let bomb = gzip(&vec![0u8; 40 << 20]);
    let r = post_bytes(
        addr,
        "/sql",
        &[("content-type", json), ("content-encoding", "gzip")],
        bomb,
    )
    .await;
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(r.json()["type"], "urn:turnpike:problem:body-too-large");
    for (headers, body) in [
        (
            vec![("content-type", json), ("content-encoding", "compress")],
            attack_json.to_vec(),
        ),
        (
            vec![("content-type", json), ("content-encoding", "gzip")],
            attack_json.to_vec(),
        ),
        (
            vec![("content-type", "text/plain; charset=x-unknown")],
            b"1' OR '1'='1".to_vec(),
        ),
    ] {
        let r = post_bytes(addr, "/sql", &headers, body).await;
        assert_eq!(r.status, 415, "{headers:?}: {}", r.text());
        assert_eq!(
            r.json()["type"],
            "urn:turnpike:problem:unsupported-media-type"
        );
    }
    assert_eq!(
        backend.count(),
        0,
        "an undecodable body reached the backend"
    );

    // An ordinary compressed body goes to the backend as it was sent.
    let benign = gzip(br#"{"user":{"name":"O'Reilly"}}"#);
    let r = post_bytes(
        addr,
        "/sql",
        &[("content-type", json), ("content-encoding", "gzip")],
        benign.clone(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = backend.last();
    assert_eq!(seen.body, benign);
    assert_eq!(seen.headers["content-encoding"], "gzip");

    // jsonProtection reads the decoded document too.
    let nested = format!("{}1{}", "[".repeat(10), "]".repeat(10));
    let r = post_bytes(
        addr,
        "/json",
        &[("content-type", json), ("content-encoding", "gzip")],
        gzip(nested.as_bytes()),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    let r = post_bytes(
        addr,
        "/json",
        &[("content-type", json), ("content-encoding", "br")],
        b"[1]".to_vec(),
    )
    .await;
    assert_eq!(r.status, 415, "{}", r.text());
    let r = post_bytes(
        addr,
        "/json",
        &[("content-type", json), ("content-encoding", "gzip")],
        gzip(b"[[1]]"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
}
