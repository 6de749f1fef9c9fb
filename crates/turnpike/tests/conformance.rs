//! HTTP/1.1 conformance against llhttp's corpus (`shared/data/http1/llhttp_cases.json`): the
//! gateway must never forward a request message that a strict parser rejects (request smuggling
//! and desync defence), and must serve the valid ones.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CASES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/data/http1/llhttp_cases.json"
);

/// llhttp "rejects" that are its own pauses rather than invalid messages: CONNECT, protocol
/// upgrades and the HTTP/2 preface hand the connection over; a gateway may forward those.
fn is_pause(reason: &str) -> bool {
    reason.starts_with("Pause on")
}

/// Streams llhttp rejects as a whole although their first message is complete and valid on its
/// own: the gateway forwards that first message and then closes, never the data after it.
/// - "No restart when keep-alive is off (1.0)": an HTTP/1.0 request, then data after it;
/// - "CRLF between requests, implicit `keep-alive`": a POST, then a malformed second request;
/// - "Missing CR between headers": a bare LF ends a header line. RFC 9112 §2.2 lets a recipient
///   accept a bare LF as a line terminator; the message is re-serialised with CRLF and an explicit
///   `Content-Length`, so the backend frames it exactly as the gateway did and the "smuggled"
///   text stays inside the body (asserted below).
fn first_message_may_pass(name: &str) -> bool {
    matches!(
        name,
        "No restart when keep-alive is off (1.0)"
            | "CRLF between requests, implicit `keep-alive`"
            | "Missing CR between headers"
    )
}

async fn exchange(addr: std::net::SocketAddr, payload: &[u8]) -> Vec<u8> {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _ = s.write_all(payload).await;
    let _ = s.shutdown().await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_millis(400), s.read_to_end(&mut out)).await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_forwards_what_a_strict_parser_rejects() {
    let text = match std::fs::read_to_string(CASES) {
        Ok(t) => t,
        Err(e) => panic!("the llhttp corpus is expected beside the repository at {CASES}: {e}"),
    };
    let cases: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
    let backend = Backend::start().await;
    let yaml = format!(
        "gateway: {{ accessLog: false, timeouts: {{ headerRead: 1s }} }}\n---\napi: {{ port: 0, ip: 127.0.0.1, target: {{ host: 127.0.0.1, port: {} }} }}\n",
        backend.port()
    );
    let gw = TestGateway::start(&yaml);
    let mut smuggled = Vec::new();
    let mut checked = 0;
    for c in cases
        .iter()
        .filter(|c| c["type"] == "request" && c["strict_verdict"] == "reject")
    {
        let name = c["name"].as_str().unwrap();
        let reason = c["reason"].as_str().unwrap_or("");
        if is_pause(reason) {
            continue;
        }
        let payload: Vec<u8> = c["payload_latin1"]
            .as_str()
            .unwrap()
            .chars()
            .map(|ch| ch as u32 as u8)
            .collect();
        let before = backend.count();
        exchange(gw.addr(), &payload).await;
        tokio::time::sleep(Duration::from_millis(30)).await;
        let forwarded = backend.count() - before;
        let allowed = usize::from(first_message_may_pass(name));
        if name == "Missing CR between headers" && forwarded == 1 {
            let last = backend.last();
            assert_eq!(last.headers["content-length"], "23");
            assert_eq!(
                &last.body[..],
                b"GET / HTTP/1.1\r\nDummy: ",
                "the second request stays body"
            );
        }
        if forwarded > allowed {
            let last = backend.last();
            smuggled.push(format!(
                "{name} ({reason}): {forwarded} request(s) reached the backend, last: {} {}",
                last.method, last.uri
            ));
        }
        checked += 1;
    }
    assert!(checked > 40, "only {checked} cases checked");
    assert!(
        smuggled.is_empty(),
        "forwarded messages a strict parser rejects:\n{}",
        smuggled.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_the_valid_requests() {
    let text = std::fs::read_to_string(CASES).unwrap();
    let cases: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
    let yaml = "gateway: { accessLog: false, timeouts: { headerRead: 1s } }\n---\napi: { port: 0, ip: 127.0.0.1, flow: [ { return: { status: 200, body: ok } } ] }\n";
    let gw = TestGateway::start(yaml);
    let mut served = 0;
    let mut total = 0;
    let mut refused = Vec::new();
    for c in cases
        .iter()
        .filter(|c| c["type"] == "request" && c["strict_verdict"] == "accept")
    {
        let payload: Vec<u8> = c["payload_latin1"]
            .as_str()
            .unwrap()
            .chars()
            .map(|ch| ch as u32 as u8)
            .collect();
        // Only complete messages (headers ended) can be answered.
        if !payload.windows(4).any(|w| w == b"\r\n\r\n") {
            continue;
        }
        total += 1;
        let out = exchange(gw.addr(), &payload).await;
        if out.starts_with(b"HTTP/1.1 200") || out.starts_with(b"HTTP/1.0 200") {
            served += 1;
        } else {
            refused.push(format!(
                "{}: {}",
                c["name"],
                String::from_utf8_lossy(&out[..out.len().min(40)])
            ));
        }
    }
    eprintln!(
        "served {served} of {total} complete valid requests; refused:\n{}",
        refused.join("\n")
    );
    assert_eq!(
        served,
        total,
        "valid requests refused:\n{}",
        refused.join("\n")
    );
}
