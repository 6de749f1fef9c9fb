//! Routing through real sockets: the Membrane benchmark configs, host/method/path matching and
//! precedence, path parameters, and 404 problem+json.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membrane_benchmark_configs_behave_as_written() {
    let backend = Backend::start().await;
    let (p1, p2) = (free_port(), free_port());
    // The two documents exactly as in the Membrane benchmark, ports made free for the test.
    let yaml = format!(
        "gateway:\n  accessLog: false\n---\napi:\n  port: {p1}\n  flow:\n    - return:\n        status: 200\n---\napi:\n  port: {p2}\n  target:\n    host: 127.0.0.1\n    port: {}\n",
        backend.port()
    );
    let gw = TestGateway::start(&yaml);
    let r = get(([127, 0, 0, 1], p1).into(), "/anything").await;
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty());
    assert_eq!(backend.count(), 0, "the return API must not call a backend");

    let r = get(([127, 0, 0, 1], p2).into(), "/shop/v2/products?limit=3").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-echo-uri"), Some("/shop/v2/products?limit=3"));
    let seen = backend.last();
    assert_eq!(
        seen.headers["host"],
        format!("127.0.0.1:{}", backend.port())
    );
    drop(gw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn most_specific_path_then_file_order_and_method() {
    let yaml = r#"
gateway: { accessLog: false }
---
api: { port: 0, ip: 127.0.0.1, flow: [ { return: { body: root } } ] }
---
api: { port: 0, ip: 127.0.0.1, path: { uri: /items/ }, flow: [ { return: { body: items-prefix } } ] }
---
api: { port: 0, ip: 127.0.0.1, path: { uri: "/items/{id}" }, flow: [ { return: { body: "item ${path.id}" } } ] }
---
api: { port: 0, ip: 127.0.0.1, method: DELETE, path: { uri: "/items/{id}" }, flow: [ { return: { status: 204 } } ] }
---
api: { port: 0, ip: 127.0.0.1, path: { uri: "/items/{id}/reviews/{rid}" }, flow: [ { return: { body: "review ${path.rid} of ${path.id}" } } ] }
---
api: { port: 0, ip: 127.0.0.1, path: { uri: /items/special }, flow: [ { return: { body: special-first } } ] }
---
api: { port: 0, ip: 127.0.0.1, path: { uri: "^/re/[0-9]+$", isRegExp: true }, flow: [ { return: { body: regex } } ] }
"#;
    let gw = TestGateway::start(yaml);
    let a = gw.addr();
    let body = |p: &'static str| async move { get(a, p).await.text() };
    assert_eq!(body("/other").await, "root");
    assert_eq!(body("/items/").await, "items-prefix");
    assert_eq!(body("/items/42").await, "item 42");
    assert_eq!(body("/items/42/x").await, "items-prefix");
    assert_eq!(body("/items/42/reviews/7").await, "review 7 of 42");
    assert_eq!(body("/items/special").await, "special-first");
    assert_eq!(body("/re/123").await, "regex");
    assert_eq!(body("/re/abc").await, "root");
    // Same path specificity: file order decides, so the any-method API declared first takes
    // DELETE too, before the DELETE-only API declared after it.
    let r = send(
        a,
        req("DELETE", "/items/9").body(Default::default()).unwrap(),
    )
    .await;
    assert_eq!(r.text(), "item 9");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn method_restricted_apis_and_404() {
    let yaml = r#"
gateway: { accessLog: false }
---
api: { port: 0, ip: 127.0.0.1, method: POST, path: { uri: /orders }, flow: [ { return: { status: 201, body: created } } ] }
---
api: { port: 0, ip: 127.0.0.1, method: get, path: { uri: /orders }, flow: [ { return: { body: listed } } ] }
"#;
    let gw = TestGateway::start(yaml);
    let a = gw.addr();
    let r = send(a, req("POST", "/orders").body(Default::default()).unwrap()).await;
    assert_eq!((r.status.as_u16(), r.text().as_str()), (201, "created"));
    assert_eq!(get(a, "/orders").await.text(), "listed");
    let r = send(a, req("PUT", "/orders").body(Default::default()).unwrap()).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    let j = r.json();
    assert_eq!(j["status"], 404);
    assert_eq!(j["type"], "urn:turnpike:problem:not-found");
    assert!(j["detail"].as_str().unwrap().contains("PUT /orders"));
    assert_eq!(get(a, "/nope").await.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_exact_wildcard_and_default() {
    let yaml = r#"
gateway: { accessLog: false }
---
api: { port: 0, ip: 127.0.0.1, flow: [ { return: { body: default } } ] }
---
api: { port: 0, ip: 127.0.0.1, host: "*.example.com", flow: [ { return: { body: wildcard } } ] }
---
api: { port: 0, ip: 127.0.0.1, host: "api.example.com shop.example.org", flow: [ { return: { body: exact } } ] }
"#;
    let gw = TestGateway::start(yaml);
    let a = gw.addr();
    let with_host = |h: &'static str| async move {
        let r = http::Request::builder()
            .uri("/")
            .header("host", h)
            .body(Default::default())
            .unwrap();
        send(a, r).await.text()
    };
    assert_eq!(with_host("api.example.com").await, "exact");
    assert_eq!(with_host("SHOP.example.org:8080").await, "exact");
    assert_eq!(with_host("www.example.com").await, "wildcard");
    assert_eq!(with_host("example.com").await, "default");
    assert_eq!(with_host("other.net").await, "default");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apis_on_one_port_share_a_listener_and_ports_are_separate() {
    let (p1, p2) = (free_port(), free_port());
    let yaml = format!(
        "gateway: {{ accessLog: false }}\n---\napi: {{ port: {p1}, ip: 127.0.0.1, path: {{ uri: /a }}, flow: [ {{ return: {{ body: a1 }} }} ] }}\n---\napi: {{ port: {p1}, ip: 127.0.0.1, path: {{ uri: /b }}, flow: [ {{ return: {{ body: b1 }} }} ] }}\n---\napi: {{ port: {p2}, ip: 127.0.0.1, path: {{ uri: /a }}, flow: [ {{ return: {{ body: a2 }} }} ] }}\n"
    );
    let gw = TestGateway::start(&yaml);
    assert_eq!(gw.gw().listeners().len(), 2);
    assert_eq!(get(gw.addr_of(p1), "/a").await.text(), "a1");
    assert_eq!(get(gw.addr_of(p1), "/b").await.text(), "b1");
    assert_eq!(get(gw.addr_of(p2), "/a").await.text(), "a2");
    assert_eq!(get(gw.addr_of(p2), "/b").await.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_apis_route_correctly() {
    let backend = Backend::start().await;
    let mut yaml = String::from("gateway: { accessLog: false }\n");
    for i in 0..10_000 {
        yaml.push_str(&format!(
            "---\napi: {{ port: 0, ip: 127.0.0.1, path: {{ uri: /svc{i:05}/ }}, flow: [ {{ request: [ {{ setHeader: {{ name: X-Api, value: \"{i}\" }} }} ] }} ], target: {{ host: 127.0.0.1, port: {} }} }}\n",
            backend.port()
        ));
    }
    let started = std::time::Instant::now();
    let gw = TestGateway::start(&yaml);
    eprintln!("10,000 APIs loaded and compiled in {:?}", started.elapsed());
    for i in [0, 1, 4242, 9999] {
        let r = get(gw.addr(), &format!("/svc{i:05}/x")).await;
        assert_eq!(r.status, 200);
        assert_eq!(backend.last().headers["x-api"], i.to_string());
    }
    assert_eq!(get(gw.addr(), "/svc10000/").await.status, 404);
}
