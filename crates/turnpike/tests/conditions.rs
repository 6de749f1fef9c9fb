//! Conditions (`if`, `choose` with CEL tests), the flows of single operations of an OpenAPI
//! API, and APIs with several routes, against a real backend.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::Bytes;
use common::*;
use http_body_util::Full;

const FRUITSHOP: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/data/openapi/fruitshop-v2-2-0.oas.yml"
);

/// The error `turnpike::start` gives for this configuration.
fn load_error(yaml: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gateway.yaml");
    std::fs::write(&file, yaml).unwrap();
    match turnpike::start(vec![file]) {
        Ok(_) => panic!("the configuration loaded:\n{yaml}"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn if_and_choose_pick_flows_by_cel_tests_in_each_phase() {
    let backend = Backend::start().await;
    let yaml = format!(
        r#"gateway: {{ accessLog: false }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: "/items/{{id}}" }}
  flow:
    - if:
        test: 'request.headers["x-tier"] == "gold" && request.method != "DELETE"'
        flow: [ {{ setHeader: {{ name: X-Lane, value: fast }} }} ]
        else: [ {{ setHeader: {{ name: X-Lane, value: slow }} }} ]
    - choose:
        - when: 'path.id == "0"'
          flow: [ {{ return: {{ status: 404, body: none }} }} ]
        - when: 'request.query["v"] == "2" || client.ip == "192.0.2.1"'
          flow: [ {{ setHeader: {{ name: X-Version, value: "2" }} }} ]
        - otherwise: [ {{ setHeader: {{ name: X-Version, value: "1" }} }} ]
    - response:
        - if:
            test: 'response.status >= 500 && request.method == "GET"'
            flow: [ {{ setHeader: {{ name: Retry-After, value: "3" }} }} ]
  target: {{ host: 127.0.0.1, port: {} }}
"#,
        backend.port()
    );
    let gw = TestGateway::start(&yaml);
    let addr = gw.addr();

    let r = get_with(addr, "/items/7?v=2", &[("x-tier", "gold")]).await;
    assert_eq!(r.status, 200);
    let seen = backend.last();
    assert_eq!(seen.headers["x-lane"], "fast");
    assert_eq!(seen.headers["x-version"], "2");

    // Same tier, but DELETE: the `else` flow.
    let r = send(
        addr,
        req("DELETE", "/items/7")
            .header("x-tier", "gold")
            .body(Full::new(Bytes::new()))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200);
    let seen = backend.last();
    assert_eq!(seen.headers["x-lane"], "slow");
    assert_eq!(seen.headers["x-version"], "1");

    // A missing header makes the test false (an evaluation error), never a failure.
    get(addr, "/items/8").await;
    assert_eq!(backend.last().headers["x-lane"], "slow");

    // The first `when` that holds answers; the backend never sees it.
    let before = backend.count();
    let r = get(addr, "/items/0").await;
    assert_eq!((r.status.as_u16(), r.text().as_str()), (404, "none"));
    assert_eq!(backend.count(), before);

    // The response phase evaluates its test on the response.
    let r = get(addr, "/items/status/503").await;
    assert_eq!(r.status, 404, "the template matches one segment only");
    let yaml = yaml
        .replace("\"/items/{id}\"", "\"/\"")
        .replace("path.id == \"0\"", "request.path == \"/items/0\"");
    gw.rewrite(&yaml);
    drop(gw);
    let gw = TestGateway::start(&yaml);
    let r = get(gw.addr(), "/status/503").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.header("retry-after"), Some("3"));
    let r = get(gw.addr(), "/status/200").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("retry-after"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_inside_a_branch_counts_that_branch_only() {
    let backend = Backend::start().await;
    let yaml = format!(
        r#"gateway: {{ accessLog: false }}
---
api:
  port: 0
  ip: 127.0.0.1
  flow:
    - if:
        test: '"gold" == request.headers["x-tier"]'
        flow: [ {{ rateLimiter: {{ requestLimit: 3, requestLimitDuration: PT1M, key: ip }} }} ]
        else: [ {{ rateLimiter: {{ requestLimit: 1, requestLimitDuration: PT1M, key: ip }} }} ]
  target: {{ host: 127.0.0.1, port: {} }}
"#,
        backend.port()
    );
    let gw = TestGateway::start(&yaml);
    let addr = gw.addr();
    let gold: Vec<u16> = futures_statuses(addr, &[("x-tier", "gold")], 4).await;
    assert_eq!(gold, [200, 200, 200, 429]);
    let other: Vec<u16> = futures_statuses(addr, &[], 2).await;
    assert_eq!(other, [200, 429]);
}

async fn futures_statuses(
    addr: std::net::SocketAddr,
    headers: &[(&str, &str)],
    n: usize,
) -> Vec<u16> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(get_with(addr, "/a", headers).await.status.as_u16());
    }
    out
}

#[test]
fn tests_are_type_checked_at_load_with_their_place() {
    let e = load_error(
        "api:\n  port: 0\n  flow:\n    - if:\n        test: 'request.method == 1'\n        flow: [ { return: { status: 200 } } ]\n",
    );
    assert!(e.contains("gateway.yaml:5:31"), "{e}");
    assert!(e.contains("a string is never equal to a int"), "{e}");
    let e = load_error(
        "api:\n  port: 0\n  flow:\n    - choose:\n        - when: request.colour == \"red\"\n          flow: [ { return: { status: 200 } } ]\n        - otherwise: [ { return: { status: 404 } } ]\n",
    );
    assert!(e.contains("gateway.yaml:5:24"), "{e}");
    assert!(e.contains("`request` has no field `colour`"), "{e}");
    // A policy inside a branch is checked like any other.
    let e = load_error(
        "api:\n  port: 0\n  flow:\n    - if:\n        test: 'true'\n        flow: [ { return: { status: 'x' } } ]\n        else: [ { nosuch: {} } ]\n",
    );
    assert!(e.contains("flow[0].if.flow[0].return.status"), "{e}");
    assert!(e.contains("unknown policy `nosuch`"), "{e}");
    let e = load_error(
        "api:\n  port: 0\n  flow:\n    - choose:\n        - otherwise: [ { return: { status: 404 } } ]\n        - when: 'true'\n          flow: []\n",
    );
    assert!(e.contains("`otherwise` must be the last entry"), "{e}");
}

fn fruitshop(backend: u16, operations: &str) -> String {
    format!(
        "gateway: {{ accessLog: false }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  openapi:\n    - location: {FRUITSHOP}\n      validateRequests: yes\n  flow: [ {{ setHeader: {{ name: X-Api, value: shop }} }} ]\n  operations:\n{operations}  target: {{ host: 127.0.0.1, port: {backend} }}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_get_their_own_flows_on_the_fruitshop_spec() {
    let backend = Backend::start().await;
    let ops = r#"    createProduct:
      flow: [ { rateLimiter: { requestLimit: 1, requestLimitDuration: PT1M, key: ip } } ]
    "DELETE /products/{id}":
      flow: [ { accessControl: { deny: [127.0.0.0/8] } } ]
    getProduct:
      flow:
        - if:
            test: 'path.id == "7"'
            flow: [ { setHeader: { name: X-Lucky, value: "yes" } } ]
"#;
    let gw = TestGateway::start(&fruitshop(backend.port(), ops));
    let addr = gw.addr();
    let post = || {
        send(
            addr,
            req("POST", "/shop/v2/products")
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from_static(
                    br#"{"name":"Kiwi","price":1.5}"#,
                )))
                .unwrap(),
        )
    };
    assert_eq!(post().await.status, 200);
    assert_eq!(backend.last().headers["x-api"], "shop");
    let r = post().await;
    assert_eq!(r.status, 429, "{}", r.text());
    // Other operations are not limited.
    for _ in 0..3 {
        assert_eq!(get(addr, "/shop/v2/products").await.status, 200);
    }
    let r = send(
        addr,
        req("DELETE", "/shop/v2/products/3")
            .body(Full::new(Bytes::new()))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 403);
    // Path parameters of the operation are seen by its conditions.
    get(addr, "/shop/v2/products/7").await;
    assert_eq!(backend.last().headers["x-lucky"], "yes");
    get(addr, "/shop/v2/products/8").await;
    assert!(backend.last().headers.get("x-lucky").is_none());
    assert_eq!(backend.last().headers["x-api"], "shop");
}

#[test]
fn unknown_operations_are_load_errors() {
    let e = load_error(&fruitshop(
        1,
        "    addFruit:\n      flow: []\n    \"PATCH /nowhere\":\n      flow: []\n",
    ));
    assert!(e.contains("no operation of the spec is `addFruit`"), "{e}");
    assert!(
        e.contains("no operation of the spec is `PATCH /nowhere`"),
        "{e}"
    );
    let e = load_error(
        "api:\n  port: 0\n  operations: { x: { flow: [] } }\n  flow: [ { return: { status: 200 } } ]\n",
    );
    assert!(e.contains("deploy the API from `openapi`"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_api_with_several_routes_shares_its_flow_and_target() {
    let backend = Backend::start().await;
    let yaml = format!(
        r#"gateway: {{ accessLog: false }}
---
api:
  name: orders
  port: 0
  ip: 127.0.0.1
  flow: [ {{ rateLimiter: {{ requestLimit: 3, requestLimitDuration: PT1M, key: ip }} }} ]
  routes:
    - method: GET
      path: "/orders/{{id}}"
      flow: [ {{ setHeader: {{ name: X-Order, value: "${{path.id}}" }} }} ]
    - method: POST
      path: /orders
      flow: [ {{ setHeader: {{ name: X-Create, value: "1" }} }} ]
    - path: /health
      flow: [ {{ return: {{ status: 200, body: up }} }} ]
  target: {{ host: 127.0.0.1, port: {} }}
"#,
        backend.port()
    );
    let gw = TestGateway::start(&yaml);
    let addr = gw.addr();
    assert_eq!(get(addr, "/orders/12").await.status, 200);
    assert_eq!(backend.last().headers["x-order"], "12");
    let r = send(
        addr,
        req("POST", "/orders")
            .body(Full::new(Bytes::new()))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(backend.last().headers["x-create"], "1");
    assert!(backend.last().headers.get("x-order").is_none());
    assert_eq!(get(addr, "/health").await.text(), "up");
    // No route takes DELETE /orders/1.
    let r = send(
        addr,
        req("DELETE", "/orders/1")
            .body(Full::new(Bytes::new()))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 404);
    // The API's limiter counts the requests of every route together.
    assert_eq!(get(addr, "/orders/13").await.status, 429);
    let e = load_error(
        "api:\n  port: 0\n  path: { uri: /a }\n  routes: [ { path: /b, flow: [ { return: { status: 200 } } ] } ]\n",
    );
    assert!(
        e.contains("takes each route's `path` from its entry"),
        "{e}"
    );
}
