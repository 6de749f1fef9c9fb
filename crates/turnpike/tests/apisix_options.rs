//! The options APISIX users look for: credentials hidden from the backend (`hideCredentials`),
//! limits shared by a consumer group, slow mocks (`delay`), and OpenAPI APIs answered from
//! their spec (`mock: true`), checked by the gateway's own response validation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use base64::Engine;
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_hidden_from_the_backend() {
    let backend = Backend::start().await;
    let port = backend.port();
    let yaml = format!(
        r#"gateway: {{ threads: 1, accessLog: false }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /key }}
  flow:
    - apiKey:
        stores: [ {{ simple: [ {{ secret: {{ value: k-1 }} }} ] }} ]
        extractors: [ {{ header: X-Key }}, {{ query: key }} ]
        hideCredentials: true
  target: {{ url: "http://127.0.0.1:{port}" }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /keep }}
  flow:
    - apiKey: {{ stores: [ {{ simple: [ {{ secret: {{ value: k-1 }} }} ] }} ], extractors: [ {{ header: X-Key }} ] }}
  target: {{ url: "http://127.0.0.1:{port}" }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /basic }}
  flow:
    - basicAuthentication: {{ users: [ {{ username: alice, password: pw-1 }} ] }}
  target: {{ url: "http://127.0.0.1:{port}" }}
"#
    );
    let gw = TestGateway::start(&yaml);
    let a = gw.addr();
    assert_eq!(get_with(a, "/key/x", &[("x-key", "k-1")]).await.status, 200);
    assert!(
        !backend.last().headers.contains_key("x-key"),
        "the header went to the backend"
    );
    assert_eq!(get(a, "/key/x?a=1&key=k-1&b=2").await.status, 200);
    assert_eq!(backend.last().uri, "/key/x?a=1&b=2");
    assert_eq!(get(a, "/key/x?key=k-1").await.status, 200);
    assert_eq!(backend.last().uri, "/key/x");
    // Without the option the key goes on.
    assert_eq!(
        get_with(a, "/keep/x", &[("x-key", "k-1")]).await.status,
        200
    );
    assert_eq!(backend.last().headers["x-key"], "k-1");
    // Basic credentials never reach the backend (Membrane's behaviour).
    let auth = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("alice:pw-1")
    );
    assert_eq!(
        get_with(a, "/basic/x", &[("authorization", &auth)])
            .await
            .status,
        200
    );
    assert!(!backend.last().headers.contains_key("authorization"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_group_shares_one_limit() {
    let yaml = r#"gateway: { threads: 1, accessLog: false }
---
consumer: { name: alice, groups: [gold], credentials: { apiKey: k-alice } }
---
consumer: { name: bob, groups: [gold], credentials: { apiKey: k-bob } }
---
consumer: { name: carol, groups: [silver], credentials: { apiKey: k-carol } }
---
api:
  port: 0
  ip: 127.0.0.1
  flow:
    - apiKey: { stores: [ { consumers: {} } ] }
    - rateLimiter: { requestLimit: 3, requestLimitDuration: PT1H, key: consumerGroup }
    - return: { status: 200 }
"#;
    let gw = TestGateway::start(yaml);
    let a = gw.addr();
    let mut s = Vec::new();
    for key in ["k-alice", "k-bob", "k-alice", "k-bob", "k-carol"] {
        s.push(
            get_with(a, "/", &[("x-api-key", key)])
                .await
                .status
                .as_u16(),
        );
    }
    assert_eq!(
        s,
        vec![200, 200, 200, 429, 200],
        "gold shares three; silver has its own"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mocks_can_be_slow_and_hold_no_worker() {
    let yaml = "gateway: { threads: 1, accessLog: false }\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  path: { uri: /slow }\n  flow: [ { return: { status: 200, body: late, delay: 300ms } } ]\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  path: { uri: /fast }\n  flow: [ { return: { status: 200, body: now } } ]\n";
    let gw = TestGateway::start(yaml);
    let a = gw.addr();
    let t = Instant::now();
    let slow = tokio::spawn(async move { get(a, "/slow").await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The one worker answers others while the slow mock waits.
    let f = Instant::now();
    assert_eq!(get(a, "/fast").await.text(), "now");
    assert!(
        f.elapsed() < Duration::from_millis(200),
        "{:?}",
        f.elapsed()
    );
    let r = slow.await.unwrap();
    assert_eq!(r.text(), "late");
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_apis_answer_from_their_spec() {
    let spec = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/openapi/fruitshop-api-v2-openapi-3.yml"
    );
    let yaml = format!(
        "gateway: {{ threads: 1, accessLog: false }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  openapi: [ {{ location: \"{spec}\", validateRequests: yes, validateResponses: yes, mock: true }} ]\n"
    );
    let gw = TestGateway::start(&yaml);
    let a = gw.addr();
    for path in [
        "/shop/v2/products",
        "/shop/v2/products/7",
        "/shop/v2/vendors/1",
        "/shop/v2/orders/3/items",
        "/shop/v2/customers/2",
    ] {
        let r = get_with(a, path, &[("accept", "application/json")]).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        assert_eq!(r.header("x-turnpike-mock"), Some("true"));
        assert!(
            r.header("content-type")
                .unwrap()
                .starts_with("application/json"),
            "{path}"
        );
        let body = r.json();
        assert!(body.is_object() || body.is_array(), "{path}: {body}");
    }
    // The spec still rules: an invalid request is refused before the mock.
    assert_eq!(get(a, "/shop/v2/products/not-a-number").await.status, 400);
    assert_eq!(get(a, "/shop/v2/nothing").await.status, 404);
    let created = send(
        a,
        req("POST", "/shop/v2/products")
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(bytes::Bytes::from(
                r#"{"name":"Kiwi","price":1.5}"#,
            )))
            .unwrap(),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.text());
}
