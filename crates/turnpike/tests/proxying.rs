//! Proxying through real sockets: header rules, bodies of every size in both directions,
//! 502/504, body limits, and many concurrent keep-alive connections.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;

fn proxy_yaml(backend_port: u16, extra_api: &str, gateway: &str) -> String {
    format!(
        "gateway:\n  accessLog: false\n{gateway}---\napi:\n  port: 0\n  ip: 127.0.0.1\n{extra_api}  target:\n    url: http://127.0.0.1:{backend_port}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_headers_and_hop_by_hop() {
    let backend = Backend::start().await;
    let gw = TestGateway::start(&proxy_yaml(backend.port(), "", ""));
    let r = send(
        gw.addr(),
        http::Request::builder()
            .uri("/p?q=1")
            .header("host", "front.example")
            .header("connection", "keep-alive, x-private")
            .header("x-private", "secret")
            .header("keep-alive", "timeout=5")
            .header("te", "gzip")
            .header("x-forwarded-for", "203.0.113.5")
            .header("x-custom", "kept")
            .body(Full::new(Bytes::new()))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200);
    let seen = backend.last();
    assert_eq!(seen.uri, "/p?q=1");
    assert_eq!(
        seen.headers["host"],
        format!("127.0.0.1:{}", backend.port())
    );
    assert_eq!(seen.headers["x-forwarded-for"], "203.0.113.5, 127.0.0.1");
    assert_eq!(seen.headers["x-forwarded-proto"], "http");
    assert_eq!(seen.headers["x-forwarded-host"], "front.example");
    assert_eq!(seen.headers["x-custom"], "kept");
    for h in ["x-private", "keep-alive", "te"] {
        assert!(!seen.headers.contains_key(h), "{h} must not be forwarded");
    }
    // Response side: the backend's hop-by-hop headers are not passed on.
    assert!(r.headers.get("x-hop").is_none());
    assert!(r.headers.get("keep-alive").is_none());
    assert_eq!(r.header("x-echo-method"), Some("GET"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_header_kept_when_asked_and_target_urls_follow_membrane() {
    let backend = Backend::start().await;
    let port = backend.port();
    let yaml = |url: &str| {
        format!(
            "gateway: {{ accessLog: false }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  path: {{ uri: \"/items/{{id}}\" }}\n  target:\n    url: \"{url}\"\n    adjustHostHeader: false\n"
        )
    };
    // A URL with a path is sent to as it is.
    let gw = TestGateway::start(&yaml(&format!("http://127.0.0.1:{port}/base/fact")));
    get(gw.addr(), "/items/1?x=y").await;
    let seen = backend.last();
    assert_eq!(seen.uri, "/base/fact");
    assert_eq!(seen.headers["host"], "test.local");
    drop(gw);
    // Without a path (or with `/`), the request's path and query follow.
    for url in [
        format!("http://127.0.0.1:{port}"),
        format!("http://127.0.0.1:{port}/"),
    ] {
        let gw = TestGateway::start(&yaml(&url));
        get(gw.addr(), "/items/1?x=y").await;
        assert_eq!(backend.last().uri, "/items/1?x=y", "{url}");
    }
    // Expressions in the path and query, each value escaped within its segment.
    let gw = TestGateway::start(&yaml(&format!(
        "http://127.0.0.1:{port}/shop/v2/products/${{pathParam.id}}?from=${{header.x-src}}"
    )));
    get_with(gw.addr(), "/items/7", &[("x-src", "a b/../c")]).await;
    assert_eq!(
        backend.last().uri,
        "/shop/v2/products/7?from=a%20b%2F..%2Fc"
    );
    get(gw.addr(), "/items/%2E%2E").await;
    assert_eq!(backend.last().uri, "/shop/v2/products/%2E%2E?from=");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_policies_in_both_directions() {
    let backend = Backend::start().await;
    let flow = r#"  path:
    uri: /users/{id}
  flow:
    - setHeader: { name: X-Both, value: "both ${method}" }
    - request:
        - setHeader: { name: X-User, value: "${path.id}" }
        - setHeader: { name: X-Agent, value: "${header.user-agent}/${query.v}" }
        - removeHeader: { name: X-Drop }
        - setHeader: { name: X-Keep, value: new, ifAbsent: true }
    - response:
        - setHeader: { name: X-Resp, value: "for ${client.ip}" }
        - removeHeader: { name: X-Echo-Uri }
"#;
    let gw = TestGateway::start(&proxy_yaml(backend.port(), flow, ""));
    let r = send(
        gw.addr(),
        req("GET", "/users/42?v=9")
            .header("user-agent", "ua")
            .header("x-drop", "1")
            .header("x-keep", "old")
            .body(Full::new(Bytes::new()))
            .unwrap(),
    )
    .await;
    let seen = backend.last();
    assert_eq!(seen.headers["x-user"], "42");
    assert_eq!(seen.headers["x-agent"], "ua/9");
    assert_eq!(seen.headers["x-both"], "both GET");
    assert_eq!(seen.headers["x-keep"], "old");
    assert!(!seen.headers.contains_key("x-drop"));
    assert_eq!(r.header("x-resp"), Some("for 127.0.0.1"));
    assert_eq!(r.header("x-both"), Some("both GET"));
    assert!(r.headers.get("x-echo-uri").is_none());
    assert!(!seen.headers.contains_key("x-resp"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn return_and_static_answer_without_backend() {
    let yaml = r#"
gateway: { accessLog: false }
---
api:
  port: 0
  ip: 127.0.0.1
  path: { uri: /static }
  flow:
    - static: { src: '{"ok":true,"m":"${method}"}', contentType: application/json }
    - return: { status: 202, headers: { X-Mock: yes } }
---
api:
  port: 0
  ip: 127.0.0.1
  path: { uri: /echo }
  flow:
    - return: {}
"#;
    let gw = TestGateway::start(yaml);
    let r = get(gw.addr(), "/static").await;
    assert_eq!(r.status, 202);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("x-mock"), Some("yes"));
    assert_eq!(r.json()["m"], "GET");
    // Membrane's `return` without a body answers with the request's body and type.
    let r = send(
        gw.addr(),
        req("POST", "/echo")
            .header("content-type", "text/csv")
            .body(Full::new(Bytes::from_static(b"a,b\n1,2\n")))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/csv"));
    assert_eq!(r.text(), "a,b\n1,2\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_of_every_size_pass_intact() {
    let backend = Backend::start().await;
    let gw = TestGateway::start(&proxy_yaml(backend.port(), "", ""));
    let a = gw.addr();
    for n in [0usize, 1024, 10 << 20] {
        // Request with Content-Length, echoed back.
        let data = pattern(n);
        let r = send(
            a,
            req("POST", "/echo").body(Full::new(data.clone())).unwrap(),
        )
        .await;
        assert_eq!(r.status, 200);
        assert_eq!(r.body.len(), n);
        assert!(r.body == data, "content-length body of {n} bytes changed");
        assert_eq!(backend.last().body.len(), n);

        // Chunked request (no length known up front).
        let chunks: Vec<Result<Frame<Bytes>, std::convert::Infallible>> = data
            .chunks(32 * 1024)
            .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
            .collect();
        let body = StreamBody::new(futures_util::stream::iter(chunks));
        let stream = tokio::net::TcpStream::connect(a).await.unwrap();
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(conn);
        let res = sender
            .send_request(req("POST", "/echo").body(body).unwrap())
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        let got = res.into_body().collect().await.unwrap().to_bytes();
        assert!(got == data, "chunked body of {n} bytes changed");

        // Responses with Content-Length and chunked.
        let r = get(a, &format!("/big/{n}")).await;
        assert!(r.body == data, "response of {n} bytes changed");
        let r = get(a, &format!("/chunked/{n}")).await;
        assert!(r.body == data, "chunked response of {n} bytes changed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_backend_is_502_and_slow_backend_is_504() {
    let dead = free_port();
    let yaml = format!(
        "gateway:\n  accessLog: false\n  timeouts: {{ upstream: 300ms, connect: 1s }}\n---\napi: {{ port: 0, ip: 127.0.0.1, path: {{ uri: /dead }}, target: {{ host: 127.0.0.1, port: {dead} }} }}\n"
    );
    let backend = Backend::start().await;
    let yaml = format!(
        "{yaml}---\napi: {{ port: 0, ip: 127.0.0.1, path: {{ uri: /slow }}, target: {{ host: 127.0.0.1, port: {} }} }}\n",
        backend.port()
    );
    let gw = TestGateway::start(&yaml);
    let r = get(gw.addr(), "/dead").await;
    assert_eq!(r.status, 502);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    assert_eq!(
        r.json()["type"],
        "urn:turnpike:problem:upstream-unreachable"
    );

    let r = get(gw.addr(), "/slow/2000").await;
    assert_eq!(r.status, 504);
    assert_eq!(r.json()["type"], "urn:turnpike:problem:upstream-timeout");
    // A fast request on the same API still works afterwards.
    assert_eq!(get(gw.addr(), "/slow/1").await.status, 200);
}

/// Reads until the gateway closes the connection (or answers and closes); returns when that
/// happened, measured from `start`, and what was read.
async fn until_closed(
    mut s: tokio::net::TcpStream,
    start: std::time::Instant,
) -> (std::time::Duration, Vec<u8>) {
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(std::time::Duration::from_secs(10), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (start.elapsed(), got),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => panic!("the gateway kept the connection open for 10 s"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_read_timeout_closes_slow_and_idle_connections() {
    use tokio::io::AsyncWriteExt;
    let yaml = "gateway: { accessLog: false, timeouts: { headerRead: 400ms } }\n---\n\
                api: { port: 0, ip: 127.0.0.1, flow: [ { return: { status: 200, body: ok } } ] }\n";
    let gw = TestGateway::start(yaml);
    // A client that sends half a request head and stops.
    let start = std::time::Instant::now();
    let mut slow = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let (after, got) = until_closed(slow, start).await;
    assert!(
        after >= std::time::Duration::from_millis(400),
        "closed after {after:?}, before the timeout"
    );
    assert!(
        !got.starts_with(b"HTTP/1.1 200"),
        "a partial head was answered"
    );
    // A keep-alive connection that goes quiet after one request.
    let mut idle = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    idle.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let answered = std::time::Instant::now();
    let (after, got) = until_closed(idle, answered).await;
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    assert!(
        after >= std::time::Duration::from_millis(350),
        "closed after {after:?}"
    );
    // Connections that keep talking are not affected.
    assert_eq!(get(gw.addr(), "/").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_limit_is_413_for_announced_and_streamed_bodies() {
    let backend = Backend::start().await;
    let gw = TestGateway::start(&proxy_yaml(
        backend.port(),
        "",
        "  limits: { maxBodySize: 1KB }\n",
    ));
    let r = send(
        gw.addr(),
        req("POST", "/x").body(Full::new(pattern(2048))).unwrap(),
    )
    .await;
    assert_eq!(r.status, 413);
    assert_eq!(r.json()["type"], "urn:turnpike:problem:body-too-large");
    assert_eq!(backend.count(), 0);
    let r = send(
        gw.addr(),
        req("POST", "/x").body(Full::new(pattern(1024))).unwrap(),
    )
    .await;
    assert_eq!(r.status, 200);

    let chunks: Vec<Result<Frame<Bytes>, std::convert::Infallible>> =
        (0..4).map(|_| Ok(Frame::data(pattern(512)))).collect();
    let stream = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let res = sender
        .send_request(
            req("POST", "/x")
                .body(StreamBody::new(futures_util::stream::iter(chunks)))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), 413);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_concurrent_keepalive_connections() {
    let backend = Backend::start().await;
    let gw = TestGateway::start(&proxy_yaml(backend.port(), "", "  threads: 2\n"));
    let a = gw.addr();
    let mut tasks = Vec::new();
    for c in 0..1000 {
        tasks.push(tokio::spawn(async move {
            let stream = tokio::net::TcpStream::connect(a).await?;
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
            tokio::spawn(conn);
            for i in 0..5 {
                sender.ready().await?;
                let res = sender
                    .send_request(req("GET", &format!("/c{c}/r{i}")).body(Full::new(Bytes::new()))?)
                    .await?;
                if res.status() != 200 {
                    return Err(format!("status {}", res.status()).into());
                }
                let echoed = res.headers()["x-echo-uri"].to_str()?.to_owned();
                res.into_body().collect().await?;
                if echoed != format!("/c{c}/r{i}") {
                    return Err(format!("wrong answer {echoed}").into());
                }
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }
    let mut failures = 0;
    for t in tasks {
        if let Err(e) = t.await.unwrap() {
            eprintln!("{e}");
            failures += 1;
        }
    }
    assert_eq!(failures, 0);
    assert_eq!(backend.count(), 5000);
}

/// A CONNECT proxy that records each request head and, when it carries `Proxy-Authorization:
/// Basic dTpw` (u:p), answers 200 and relays the tunnel; otherwise 407.
async fn connect_proxy() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = heads.clone();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if s.read(&mut b).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(b[0]);
                }
                let head = String::from_utf8(head).unwrap();
                seen.lock().unwrap().push(head.clone());
                if !head.contains("Proxy-Authorization: Basic dTpw\r\n") {
                    let _ = s.write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\ncontent-length: 0\r\n\r\n").await;
                    return;
                }
                let target = head.split_whitespace().nth(1).unwrap().to_owned();
                let mut up = tokio::net::TcpStream::connect(target).await.unwrap();
                s.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .unwrap();
                let _ = tokio::io::copy_bidirectional(&mut s, &mut up).await;
            });
        }
    });
    (port, heads)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_connections_go_through_an_outbound_proxy() {
    // Membrane's configuration/proxy.apis.yaml: `configuration.httpClientConfig.proxy`.
    let backend = Backend::start().await;
    let (proxy, heads) = connect_proxy().await;
    let b = backend.port();
    let gw = TestGateway::start(&format!(
        r#"gateway:
  threads: 1
---
configuration:
  production: true
  httpClientConfig:
    proxy:
      host: 127.0.0.1
      port: {proxy}
      authentication:
        username: u
        password: p
---
api:
  port: 0
  ip: 127.0.0.1
  target:
    url: http://127.0.0.1:{b}
"#
    ));
    for path in ["/a", "/b"] {
        let r = get(gw.addr(), path).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(backend.last().uri, path);
    }
    let seen = heads.lock().unwrap().clone();
    // The second request reused the tunnel.
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(
        seen[0].starts_with(&format!(
            "CONNECT 127.0.0.1:{b} HTTP/1.1\r\nHost: 127.0.0.1:{b}\r\n"
        )),
        "{seen:?}"
    );

    // The gateway's own forward proxy (`proxy:`) as the outbound proxy, set natively; wrong
    // credentials make the backend unreachable (502), without the proxy's words.
    let forward = free_port();
    let gw2 = TestGateway::start(&format!(
        r#"gateway:
  outboundProxy:
    host: localhost
    port: {forward}
---
proxy:
  port: {forward}
  ip: 127.0.0.1
  destinations:
    allow: [ {{ cidr: 127.0.0.1 }} ]
---
api:
  port: 0
  ip: 127.0.0.1
  target:
    url: http://127.0.0.1:{b}
"#
    ));
    let before = backend.count();
    let addr = gw2.addr_of(0);
    let r = get(addr, "/c").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        (backend.count(), backend.last().uri.as_str()),
        (before + 1, "/c")
    );
    let gw3 = TestGateway::start(&format!(
        "gateway:\n  outboundProxy: {{ host: 127.0.0.1, port: {proxy}, authentication: {{ username: u, password: wrong }} }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  target:\n    url: http://127.0.0.1:{b}\n"
    ));
    let r = get(gw3.addr(), "/d").await;
    assert_eq!(r.status, 502);
    assert!(!r.text().contains("407"), "{}", r.text());
    assert_eq!(backend.count(), before + 1);
}
