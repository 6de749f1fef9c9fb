//! Traffic policies through real sockets: rate limiting (exact under concurrency, reset,
//! per consumer, by header), CORS, IP rules (IPv4 and IPv6), path rewriting, size limits.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::Full;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rate_limit_is_exact_under_concurrency_with_headers() {
    let backend = Backend::start().await;
    let yaml = format!(
        "gateway: {{ accessLog: false, threads: 2 }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  flow:\n    - rateLimiter: {{ requestLimit: 50, requestLimitDuration: PT1H }}\n  target: {{ host: 127.0.0.1, port: {} }}\n",
        backend.port()
    );
    let gw = TestGateway::start(&yaml);
    let a = gw.addr();
    let tasks: Vec<_> = (0..100)
        .map(|i| tokio::spawn(async move { get(a, &format!("/r{i}")).await }))
        .collect();
    let mut ok = 0;
    let mut limited = 0;
    for t in tasks {
        let r = t.await.unwrap();
        match r.status.as_u16() {
            200 => {
                ok += 1;
                assert_eq!(r.header("x-ratelimit-limit"), Some("50"));
                assert!(r.header("x-ratelimit-remaining").is_some());
                assert!(r.header("x-ratelimit-reset").is_some());
            }
            429 => {
                limited += 1;
                assert_eq!(r.header("content-type"), Some("application/problem+json"));
                let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
                assert!(retry > 0 && retry <= 3600);
                assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
            }
            s => panic!("unexpected status {s}"),
        }
    }
    assert_eq!((ok, limited), (50, 50));
    assert_eq!(backend.count(), 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_resets_after_the_window_and_counts_per_key() {
    let backend = Backend::start().await;
    let p = backend.port();
    let yaml = format!(
        r#"
gateway: {{ accessLog: false }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /window }}
  flow:
    - rateLimiter: {{ requestLimit: 2, requestLimitDuration: 1s }}
  target: {{ host: 127.0.0.1, port: {p} }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /tenant }}
  flow:
    - rateLimiter: {{ requestLimit: 1, requestLimitDuration: PT1H, key: header, header: X-Tenant }}
  target: {{ host: 127.0.0.1, port: {p} }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /expr }}
  flow:
    - rateLimiter: {{ requestLimit: 1, requestLimitDuration: PT1H, keyExpression: "${{query.user}}" }}
  target: {{ host: 127.0.0.1, port: {p} }}
"#
    );
    let gw = TestGateway::start(&yaml);
    let a = gw.addr();
    assert_eq!(get(a, "/window").await.status, 200);
    assert_eq!(get(a, "/window").await.status, 200);
    assert_eq!(get(a, "/window").await.status, 429);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(get(a, "/window").await.status, 200, "the window must reset");

    assert_eq!(
        get_with(a, "/tenant", &[("x-tenant", "a")]).await.status,
        200
    );
    assert_eq!(
        get_with(a, "/tenant", &[("x-tenant", "a")]).await.status,
        429
    );
    assert_eq!(
        get_with(a, "/tenant", &[("x-tenant", "b")]).await.status,
        200
    );
    assert_eq!(get(a, "/expr?user=1").await.status, 200);
    assert_eq!(get(a, "/expr?user=1").await.status, 429);
    assert_eq!(get(a, "/expr?user=2").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_have_their_own_limits() {
    let backend = Backend::start().await;
    let yaml = format!(
        r#"
gateway: {{ accessLog: false }}
---
consumer:
  name: small
  credentials: {{ apiKey: small-key }}
  flow:
    - rateLimiter: {{ requestLimit: 2, requestLimitDuration: PT1H }}
---
consumer:
  name: big
  credentials: {{ apiKey: big-key }}
  flow:
    - rateLimiter: {{ requestLimit: 4, requestLimitDuration: PT1H }}
---
api:
  port: 0
  ip: 127.0.0.1
  flow:
    - apiKey: {{ stores: [ {{ consumers: {{}} }} ] }}
  target: {{ host: 127.0.0.1, port: {} }}
"#,
        backend.port()
    );
    let gw = TestGateway::start(&yaml);
    let a = gw.addr();
    let count = |key: &'static str| async move {
        let mut ok = 0;
        for _ in 0..6 {
            let r = get_with(a, "/", &[("x-api-key", key)]).await;
            if r.status == 200 {
                ok += 1;
                assert!(r.header("x-ratelimit-limit").is_some());
            } else {
                assert_eq!(r.status, 429);
            }
        }
        ok
    };
    assert_eq!(count("small-key").await, 2);
    assert_eq!(count("big-key").await, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_preflight_and_actual_requests() {
    let backend = Backend::start().await;
    let yaml = format!(
        r#"
gateway: {{ accessLog: false }}
---
api:
  port: 0
  ip: 127.0.0.1
  flow:
    - cors:
        origins: [ "https://app.example.com" ]
        methods: [ GET, POST, DELETE ]
        headers: [ Content-Type, X-Token ]
        exposeHeaders: [ X-Echo-Method ]
        credentials: true
        maxAge: 10m
  target: {{ host: 127.0.0.1, port: {} }}
"#,
        backend.port()
    );
    let gw = TestGateway::start(&yaml);
    let a = gw.addr();
    let preflight = |origin: &'static str, method: &'static str, headers: &'static str| async move {
        send(
            a,
            req("OPTIONS", "/items")
                .header("origin", origin)
                .header("access-control-request-method", method)
                .header("access-control-request-headers", headers)
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await
    };
    let r = preflight("https://app.example.com", "DELETE", "x-token, content-type").await;
    assert_eq!(r.status, 204, "{:?} {}", r.headers, r.text());
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.example.com")
    );
    assert_eq!(
        r.header("access-control-allow-methods"),
        Some("GET, POST, DELETE")
    );
    assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
    assert_eq!(r.header("access-control-max-age"), Some("600"));
    assert_eq!(backend.count(), 0, "preflight is answered by the gateway");
    assert_eq!(
        preflight("https://evil.example", "GET", "").await.status,
        403
    );
    assert_eq!(
        preflight("https://app.example.com", "PATCH", "")
            .await
            .status,
        403
    );
    assert_eq!(
        preflight("https://app.example.com", "GET", "x-other")
            .await
            .status,
        403
    );

    let r = get_with(a, "/items", &[("origin", "https://app.example.com")]).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.example.com")
    );
    assert_eq!(
        r.header("access-control-expose-headers"),
        Some("X-Echo-Method")
    );
    let r = get_with(a, "/items", &[("origin", "https://evil.example")]).await;
    assert!(r.header("access-control-allow-origin").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ip_rules_for_ipv4_and_ipv6_clients() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("skipping the IPv6 half: no IPv6 loopback on this machine");
    }
    let backend = Backend::start().await;
    let (p4, p6) = (free_port(), free_port());
    let yaml = format!(
        r#"
gateway: {{ accessLog: false }}
---
api:
  port: {p4}
  ip: 127.0.0.1
  path: {{ uri: /allowed }}
  flow: [ {{ accessControl: {{ allow: [ 127.0.0.0/8, "::1" ] }} }} ]
  target: {{ host: 127.0.0.1, port: {b} }}
---
api:
  port: {p4}
  ip: 127.0.0.1
  path: {{ uri: /denied }}
  flow: [ {{ accessControl: {{ deny: [ 127.0.0.1 ] }} }} ]
  target: {{ host: 127.0.0.1, port: {b} }}
---
api:
  port: {p4}
  ip: 127.0.0.1
  path: {{ uri: /only-other }}
  flow: [ {{ accessControl: {{ allow: [ 10.0.0.0/8 ] }} }} ]
  target: {{ host: 127.0.0.1, port: {b} }}
---
api:
  port: {p6}
  ip: "::1"
  path: {{ uri: /v6-denied }}
  flow: [ {{ accessControl: {{ deny: [ "::1/128" ] }} }} ]
  target: {{ host: 127.0.0.1, port: {b} }}
---
api:
  port: {p6}
  ip: "::1"
  path: {{ uri: /v6-allowed }}
  flow: [ {{ accessControl: {{ allow: [ "::/0" ], deny: [ "2001:db8::/32" ] }} }} ]
  target: {{ host: 127.0.0.1, port: {b} }}
"#,
        b = backend.port()
    );
    let gw = TestGateway::start(&yaml);
    let v4 = gw.addr_of(p4);
    assert_eq!(get(v4, "/allowed").await.status, 200);
    let r = get(v4, "/denied").await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["type"], "urn:turnpike:problem:ip-denied");
    assert_eq!(get(v4, "/only-other").await.status, 403);
    let v6: std::net::SocketAddr = format!("[::1]:{p6}").parse().unwrap();
    assert_eq!(get(v6, "/v6-denied").await.status, 403);
    assert_eq!(get(v6, "/v6-allowed").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewriter_and_request_size_limit() {
    let backend = Backend::start().await;
    let yaml = format!(
        r#"
gateway: {{ accessLog: false }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: "/old/{{rest}}" }}
  flow:
    - rewriter:
        mappings:
          - {{ from: "^/old/(?P<x>[^/]+)$", to: "/new/$x/v2" }}
    - request:
        - setHeader: {{ name: X-Param, value: "${{path.rest}}" }}
  target: {{ host: 127.0.0.1, port: {b} }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /upload }}
  flow:
    - requestSizeLimit: {{ maxSize: 100B }}
  target: {{ host: 127.0.0.1, port: {b} }}
"#,
        b = backend.port()
    );
    let gw = TestGateway::start(&yaml);
    let a = gw.addr();
    assert_eq!(get(a, "/old/thing?q=1").await.status, 200);
    let seen = backend.last();
    assert_eq!(seen.uri, "/new/thing/v2?q=1");
    assert_eq!(seen.headers["x-param"], "thing");

    let small = send(
        a,
        req("POST", "/upload")
            .body(Full::new(pattern(100)))
            .unwrap(),
    )
    .await;
    assert_eq!(small.status, 200);
    let big = send(
        a,
        req("POST", "/upload")
            .body(Full::new(pattern(101)))
            .unwrap(),
    )
    .await;
    assert_eq!(big.status, 413);
    assert_eq!(big.json()["type"], "urn:turnpike:problem:body-too-large");
}

#[test]
fn policy_settings_are_checked_at_load() {
    let bad = [
        ("rateLimiter: { requestLimit: 0, requestLimitDuration: 1s }", "api.flow[0].rateLimiter.requestLimit"),
        ("rateLimiter: { requestLimit: 1, requestLimitDuration: 1s, header: X-A }", "api.flow[0].rateLimiter.header"),
        ("cors: { origins: ['*'], credentials: true }", "api.flow[0].cors.credentials"),
        ("accessControl: { allow: [ 300.1.1.1 ] }", "api.flow[0].accessControl.allow[0]"),
        ("rewriter: { mappings: [ { from: '^/(a)$', to: '/$2' } ] }", "api.flow[0].rewriter.mappings[0].to"),
        ("apiKey: { stores: [ { simple: [ { secret: { value: k } } ] } ], allow: { consumers: [ ghost ] } }", "api.flow[0].apiKey.allow"),
        ("jwtAuth: { jwks: [ { location: /nonexistent.json } ] }", "api.flow[0].jwtAuth.jwks[0].location"),
        ("jwtAuth: { jwks: [ { location: a, url: 'http://b' } ] }", "api.flow[0].jwtAuth.jwks[0]"),
        ("jwtAuth: { jwks: [ { location: a } ], algorithms: [ none ] }", "api.flow[0].jwtAuth.algorithms[0]"),
        ("basicAuthentication: { users: [ { username: a, password: '$1$x$y' } ] }", "api.flow[0].basicAuthentication.users[0].password"),
        ("rateLimiter: { requestLimit: 1, requestLimitDuration: 1s, algorithm: leakyBucket }", "api.flow[0].rateLimiter.algorithm"),
    ];
    for (policy, key) in bad {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.yaml");
        std::fs::write(
            &f,
            format!("api:\n  port: 1\n  flow:\n    - {policy}\n    - return: {{}}\n"),
        )
        .unwrap();
        let err = match turnpike::load_and_compile(&[f]) {
            Ok(_) => panic!("`{policy}` was accepted"),
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains(key),
            "`{policy}`: expected an error at {key}, got: {err}"
        );
    }
}

/// `trustForwardedFor` behind a trusted proxy (the test client on 127.0.0.1): `ip:port` and
/// `[v6]:port` hops are read, and an unreadable entry ends the walk as the client, so garbage
/// cannot make each request look like another client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_for_hops_with_ports_and_garbage() {
    let gw = TestGateway::start(
        "api:\n  port: 0\n  ip: 127.0.0.1\n  flow:\n    - rateLimiter: { requestLimit: 1, requestLimitDuration: PT1M, key: ip, trustForwardedFor: true, trustedProxies: [127.0.0.1] }\n    - return: { status: 200 }\n",
    );
    let addr = gw.addr();
    let with =
        |xff: &'static str| async move { get_with(addr, "/", &[("x-forwarded-for", xff)]).await };
    // The same client, with and without its port.
    assert_eq!(with("203.0.113.7:1234").await.status, 200);
    assert_eq!(with("203.0.113.7").await.status, 429);
    assert_eq!(with("[2001:db8::1]:443").await.status, 200);
    assert_eq!(with("2001:db8::1").await.status, 429);
    // An unreadable entry right of a spoofed address is the client each time: the spoofed
    // addresses on its left do not give fresh budgets.
    assert_eq!(with("198.51.100.1, not-an-ip").await.status, 200);
    assert_eq!(with("198.51.100.2, not-an-ip").await.status, 429);
    assert_eq!(with("198.51.100.3, not-an-ip").await.status, 429);
}
