//! Membrane's orchestration policies over real sockets: `call` (the `call-get`, `call-post` and
//! `call-authentication` examples and the orchestration tutorial), `for` (loops calling a
//! service per item) and `shadowing`, in the shapes Membrane's examples write them, with local
//! services instead of the internet.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

/// What a route of a [`Service`] answers: status, headers, body.
type Answer = (u16, Vec<(&'static str, String)>, String);

/// A JSON service on 127.0.0.1:0 that records each request and answers from `route`.
struct Service {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Service {
    async fn start(route: impl Fn(&Seen) -> Answer + Send + Sync + 'static) -> Service {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (s, route) = (seen.clone(), Arc::new(route));
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (s, route) = (s.clone(), route.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let (s, route) = (s.clone(), route.clone());
                        async move {
                            let (p, b) = req.into_parts();
                            let body = b.collect().await.unwrap().to_bytes();
                            let seen = Seen {
                                version: p.version,
                                method: p.method.to_string(),
                                uri: p.uri.to_string(),
                                headers: p.headers,
                                body,
                            };
                            let (status, headers, body) = route(&seen);
                            s.lock().unwrap().push(seen);
                            let mut r = Response::builder().status(status);
                            for (k, v) in headers {
                                r = r.header(k, v);
                            }
                            Ok::<_, Infallible>(r.body(Full::new(Bytes::from(body))).unwrap())
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Service { addr, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn json(status: u16, body: &str) -> Answer {
    (
        status,
        vec![("content-type", "application/json".to_owned())],
        body.to_owned(),
    )
}

/// The shop of Membrane's examples: a product list, product details, and product creation.
async fn shop() -> Service {
    Service::start(|r| match (r.method.as_str(), r.uri.as_str()) {
        ("GET", "/shop/v2/products?sort=id&order=desc&limit=1") => json(
            200,
            r#"{"meta":{"count":1},"products":[{"id":14,"name":"Bike","self_link":"/shop/v2/products/14"}]}"#,
        ),
        ("GET", "/shop/v2/products?limit=3") => json(
            200,
            r#"{"products":[{"id":3,"name":"Apple","self_link":"/shop/v2/products/3"},{"id":4,"name":"Pear","self_link":"/shop/v2/products/4"},{"id":14,"name":"Bike","self_link":"/shop/v2/products/14"}]}"#,
        ),
        ("GET", "/shop/v2/products/3") => json(200, r#"{"id":3,"name":"Apple","price":1.5}"#),
        ("GET", "/shop/v2/products/4") => json(200, r#"{"id":4,"name":"Pear","price":2}"#),
        ("GET", "/shop/v2/products/14") => json(200, r#"{"id":14,"name":"Bike","price":5}"#),
        ("POST", "/shop/v2/products") => {
            let sent: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
            json(
                201,
                &serde_json::json!({"id": 100, "name": sent["name"], "price": sent["price"]})
                    .to_string(),
            )
        }
        _ => json(404, r#"{"error":"not found"}"#),
    })
    .await
}

async fn post_json(addr: SocketAddr, path: &str, body: &str) -> Reply {
    send(
        addr,
        req("POST", path)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap(),
    )
    .await
}

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
async fn call_get_returns_the_details_of_the_newest_product() {
    let shop = shop().await;
    let s = shop.addr;
    // Membrane's `examples/orchestration/call-get`.
    let gw = TestGateway::start(&format!(
        r#"api:
  port: 0
  flow:
    - request:
        # Gets the latest product by ID
        - call:
            url: http://{s}/shop/v2/products?sort=id&order=desc&limit=1
        # Extracts the ID of the newest product
        - setProperty:
            name: id
            value: ${{$.products[0].id}}
            language: jsonpath
        #  Fetches the full product details using the extracted ID
        - call:
            url: http://{s}/shop/v2/products/${{properties.id}}
    - return: {{}}
"#
    ));
    let r = send(
        gw.addr(),
        req("GET", "/")
            .header("authorization", "Bearer abc")
            .body(Full::new(Bytes::new()))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json(),
        serde_json::json!({"id": 14, "name": "Bike", "price": 5})
    );
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("application/json"));
    let seen = shop.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].uri, "/shop/v2/products/14");
    // The client's headers go along but for its credentials; `Host` is the called service's.
    for call in &seen {
        assert_eq!(call.method, "GET");
        assert!(call.headers.get("authorization").is_none());
        assert_eq!(call.headers["host"], s.to_string().as_str());
        assert!(call.body.is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_with_path_parameters_jsonpath_urls_and_a_template() {
    let books = Service::start(|r| match r.uri.as_str() {
        "/books/OL7353617M.json" => json(
            200,
            r#"{"title":"Fantastic Mr. Fox","authors":[{"key":"/authors/OL34184A"}]}"#,
        ),
        "/authors/OL34184A.json" => json(200, r#"{"name":"Roald Dahl"}"#),
        _ => json(404, "{}"),
    })
    .await;
    let b = books.addr;
    // Membrane's `tutorials/orchestration/30-Orchestration.yaml`.
    let gw = TestGateway::start(&format!(
        r#"api:
  port: 0
  path:
    uri: /books/{{id}}
  flow:
    - request:
        - call:
            url: http://{b}/books/${{pathParam.id}}.json
        - setProperty:
            name: title
            value: ${{$.title}}
            language: jsonpath
        # Each placeholder of a URL is one path segment (a link such as `/authors/OL1A` would
        # be encoded whole), so the author's id is taken out of the link first.
        - setProperty:
            name: author
            value: ${{jsonPath('$.authors[0].key').substring(9)}}
        - call:
            url: http://{b}/authors/${{property.author}}.json
        - template:
            contentType: application/json
            src: |
              {{
                "title": "${{property.title}}",
                "author": "${{jsonPath('$.name')}}"
              }}
    - return:
        status: 200
"#
    ));
    let r = get(gw.addr(), "/books/OL7353617M").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json(),
        serde_json::json!({"title": "Fantastic Mr. Fox", "author": "Roald Dahl"})
    );
    assert_eq!(r.header("content-type"), Some("application/json"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_post_creates_a_product_from_another() {
    let shop = shop().await;
    let s = shop.addr;
    // Membrane's `examples/orchestration/call-post` (the template quotes the name).
    let gw = TestGateway::start(&format!(
        r#"api:
  port: 0
  flow:
    - request:
        - call:
            url: http://{s}/shop/v2/products/14
        # Extracts name and price from the JSON response and add 1 to the price
        - setProperty:
            name: name
            value: ${{$.name}}
            language: jsonpath
        - setProperty:
            name: price
            value: ${{jsonPath('$.price')+1}}
        #  Creates a new JSON body with the name and modified price
        - template:
            contentType: application/json
            src: |
              {{
                "name": "${{property.name + ' Big Pack'}}",
                "price": ${{property.price}}
              }}
        - call:
            method: POST
            url: http://{s}/shop/v2/products
    - return: {{}}
"#
    ));
    let r = get(gw.addr(), "/").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json(),
        serde_json::json!({"id": 100, "name": "Bike Big Pack", "price": 6})
    );
    let seen = shop.seen();
    assert_eq!(seen.len(), 2);
    let post = &seen[1];
    assert_eq!(
        (post.method.as_str(), post.uri.as_str()),
        ("POST", "/shop/v2/products")
    );
    assert_eq!(post.headers["content-type"], "application/json");
    let sent: serde_json::Value = serde_json::from_slice(&post.body).unwrap();
    assert_eq!(
        sent,
        serde_json::json!({"name": "Bike Big Pack", "price": 6})
    );
    assert_eq!(
        post.headers["content-length"],
        post.body.len().to_string().as_str()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_authentication_forwards_the_session_cookie() {
    let (gateway, login, target) = (free_port(), free_port(), free_port());
    // Membrane's `examples/orchestration/call-authentication`, three APIs of one gateway
    // (listening on 127.0.0.1 for the test).
    let gw = TestGateway::start(&format!(
        r#"api:
  port: {gateway}
  ip: 127.0.0.1
  flow:
    - request:
        - log:
            message: Calling login API
        - call:
            url: http://localhost:{login}/login
        - log:
            message: "Got: ${{header['set-cookie']}}"
        # Inject received Set-Cookie header as Cookie
        - setHeader:
            name: Cookie
            value: ${{header['set-cookie']}}
  target:
    url: http://localhost:{target}

---
api:
  port: {login}
  ip: 127.0.0.1
  path:
    uri: /login
  flow:
    - response:
      - setHeader:
          name: Set-Cookie
          value: SESSION=akj34
      - log:
          message: Logged in. Cookie is set.
    - return:
        status: 200

---
api:
  port: {target}
  ip: 127.0.0.1
  flow:
    - request:
      - log:
          message: "Got: ${{header['set-cookie']}}"
      - if:
          test: header['Cookie'] != 'SESSION=akj34'
          flow:
            - static:
                src: Unauthorized!
            - return:
                status: 401
    - response:
      - static:
          src: Success!
    - return:
        status: 200
"#
    ));
    let r = get(gw.addr_of(gateway), "/").await;
    assert_eq!((r.status.as_u16(), r.text().as_str()), (200, "Success!"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_callouts_are_problems() {
    let dead = free_port();
    let hang = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let h = hang.local_addr().unwrap();
    let gw = TestGateway::start(&format!(
        r#"gateway:
  timeouts:
    upstream: 300ms
---
api:
  port: 0
  flow:
    - request:
        - if:
            test: header['X-Case'] == 'dead'
            flow:
              - call:
                  url: http://127.0.0.1:{dead}/x
            else:
              - call:
                  url: http://{h}/x
    - return: {{}}
"#
    ));
    let r = get_with(gw.addr(), "/", &[("x-case", "dead")]).await;
    assert_eq!(r.status, 502, "{}", r.text());
    let p = r.json();
    assert_eq!(p["type"], "urn:turnpike:problem:upstream-unreachable");
    assert!(!r.text().contains(&dead.to_string()), "{}", r.text());
    let started = Instant::now();
    let r = get(gw.addr(), "/").await;
    assert_eq!(r.status, 504, "{}", r.text());
    assert_eq!(r.json()["type"], "urn:turnpike:problem:upstream-timeout");
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(hang);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_for_loop_calls_the_service_per_item_and_collects_results() {
    let shop = shop().await;
    let s = shop.addr;
    // Membrane's `examples/orchestration/for-loop`, collecting with `setProperty` instead of
    // Groovy.
    let gw = TestGateway::start(&format!(
        r#"api:
  port: 0
  flow:
    - request:
        - call:
            url: http://{s}/shop/v2/products?limit=3
        # Iterate over each product to get additional details (price)
        - for:
            in: $.products
            language: jsonpath
            flow:
              - call:
                  url: http://{s}/shop/v2/products/${{property.it['id']}}
                  language: spel
              - setProperty:
                  name: result
                  value: "${{property.result}}${{it['name']}}=${{jsonPath('$.price')}};"
        - template:
            contentType: application/json
            src: |
              {{
                  "products": "${{property.result}}",
                  "last": ${{it}},
                  "lastText": ${{toJSON(it)}}
              }}
    - return:
        status: 200
"#
    ));
    let r = get(gw.addr(), "/").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json(),
        serde_json::json!({
            "products": "Apple=1.5;Pear=2;Bike=5;",
            "last": {"id": 14, "name": "Bike", "self_link": "/shop/v2/products/14"},
            // `toJSON` returns a string in Membrane; a JSON template quotes strings.
            "lastText": r#"{"id":14,"name":"Bike","self_link":"/shop/v2/products/14"}"#
        })
    );
    let uris: Vec<String> = shop.seen().into_iter().map(|s| s.uri).collect();
    assert_eq!(
        uris,
        [
            "/shop/v2/products?limit=3",
            "/shop/v2/products/3",
            "/shop/v2/products/4",
            "/shop/v2/products/14"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_for_loop_follows_the_links_of_the_items() {
    let shop = shop().await;
    let s = shop.addr;
    // Membrane's `tutorials/orchestration/50-Loop-get-Details.yaml` (collecting with
    // `setProperty` instead of Groovy), with the log of `10-For-Loop.yaml`.
    let gw = TestGateway::start(&format!(
        r#"api:
  port: 0
  flow:
    - request:
        - call:
            url: http://{s}/shop/v2/products?limit=3
        - for:
            in: $.products
            language: jsonpath
            flow:
              - log:
                  message: 'Fetching price for: ${{it["name"]}}'
              - call:
                  url: http://{s}/shop/v2/products/${{it['id']}}

              - setProperty:
                  name: res
                  value: "${{property.res}}${{jsonPath('$.price')}} "
        - template:
            contentType: text/plain
            src: "prices: ${{property.res}}"
    - return:
        status: 200
"#
    ));
    let r = get(gw.addr(), "/").await;
    assert_eq!(
        (r.status.as_u16(), r.text().as_str()),
        (200, "prices: 1.5 2 5 ")
    );
    assert_eq!(shop.seen().len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_for_loop_posts_each_item_of_the_request() {
    let shop = shop().await;
    let s = shop.addr;
    // Membrane's `tutorials/orchestration/20-For-Loop-Call.yaml`.
    let gw = TestGateway::start(&format!(
        r#"api:
  port: 0
  flow:
    - for:
        in: $.fruits
        language: jsonpath
        flow:
          - setBody:
              # Serialize the current item to a JSON string
              value: ${{toJSON(it)}}
          - call:
              method: POST
              url: http://{s}/shop/v2/products
          - log:
              message: "Created product: ${{it['name']}}"
    - return:
        status: 200
"#
    ));
    let r = post_json(
        gw.addr(),
        "/",
        r#"{"fruits":[{"name":"Mango","price":2.5},{"name":"Kiwi","price":0.5}]}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = shop.seen();
    assert_eq!(seen.len(), 2);
    let bodies: Vec<serde_json::Value> = seen
        .iter()
        .map(|s| serde_json::from_slice(&s.body).unwrap())
        .collect();
    assert_eq!(
        bodies,
        [
            serde_json::json!({"name": "Mango", "price": 2.5}),
            serde_json::json!({"name": "Kiwi", "price": 0.5})
        ]
    );
    assert!(seen.iter().all(|s| s.method == "POST"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_stops_when_a_callout_fails() {
    let dead = free_port();
    let gw = TestGateway::start(&format!(
        r#"api:
  port: 0
  flow:
    - for:
        in: $.ids
        language: jsonpath
        flow:
          - call:
              url: http://127.0.0.1:{dead}/items/${{it}}
    - return:
        status: 200
"#
    ));
    let r = post_json(gw.addr(), "/", r#"{"ids":[1,2]}"#).await;
    assert_eq!(r.status, 502, "{}", r.text());
}

/// Waits until `service` has seen `n` requests (or two seconds passed).
async fn wait_for(seen: &Arc<Mutex<Vec<Seen>>>, n: usize) -> Vec<Seen> {
    let until = Instant::now() + Duration::from_secs(2);
    loop {
        let now = seen.lock().unwrap().clone();
        if now.len() >= n || Instant::now() > until {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadowing_copies_requests_and_the_client_gets_the_targets_answer() {
    let main = Backend::start().await;
    let shadow = Backend::start().await;
    let fixed = Backend::start().await;
    let dead = free_port();
    // A shadow target that accepts connections and never answers.
    let hang = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let h = hang.local_addr().unwrap();
    // The shape of Membrane's `examples/routing-traffic/shadowing`.
    let gw = TestGateway::start(&format!(
        r#"api:
  port: 0
  flow:
    - shadowing:
        targets:
          - target:
              host: localhost
              port: {shadow}
          - target:
              host: 127.0.0.1
              port: {dead}
          - target:
              host: 127.0.0.1
              port: {hang}
          - target:
              url: http://127.0.0.1:{fixed}/fixed
  target:
    host: 127.0.0.1
    port: {main}
"#,
        shadow = shadow.port(),
        hang = h.port(),
        fixed = fixed.port(),
        main = main.port(),
    ));
    let started = Instant::now();
    let r = send(
        gw.addr(),
        req("POST", "/products?x=1")
            .header("x-trace", "t1")
            .body(Full::new(Bytes::from("hello shadow")))
            .unwrap(),
    )
    .await;
    // The client gets the main target's answer at once, whatever the shadows do.
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "hello shadow");
    assert_eq!(r.header("x-echo-uri"), Some("/products?x=1"));
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(main.count(), 1);
    let copies = wait_for(&shadow.seen, 1).await;
    assert_eq!(copies.len(), 1);
    let c = &copies[0];
    assert_eq!(
        (c.method.as_str(), c.uri.as_str()),
        ("POST", "/products?x=1")
    );
    assert_eq!(c.body.as_ref(), b"hello shadow");
    assert_eq!(c.headers["x-trace"], "t1");
    assert_eq!(c.headers["host"], "test.local");
    let copies = wait_for(&fixed.seen, 1).await;
    assert_eq!(copies[0].uri, "/fixed");
    assert_eq!(copies[0].body.as_ref(), b"hello shadow");

    // A request without a body, and a larger streamed one.
    let r = get(gw.addr(), "/a").await;
    assert_eq!(r.status, 200);
    let big = pattern(300_000);
    let r = send(
        gw.addr(),
        req("PUT", "/big").body(Full::new(big.clone())).unwrap(),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, big);
    let copies = wait_for(&shadow.seen, 3).await;
    assert_eq!(copies.len(), 3);
    assert_eq!(
        (copies[1].method.as_str(), copies[1].uri.as_str()),
        ("GET", "/a")
    );
    assert_eq!(copies[2].method, "PUT");
    assert_eq!(copies[2].body, big);

    // The dead and the hanging shadow cost the client nothing, request after request.
    let started = Instant::now();
    for _ in 0..5 {
        assert_eq!(get(gw.addr(), "/again").await.status, 200);
    }
    assert!(started.elapsed() < Duration::from_secs(2));
    drop(hang);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadowing_tutorial_with_apis_of_the_gateway() {
    let (shop, production, v2) = (free_port(), free_port(), free_port());
    // Membrane's `tutorials/routing/80-Shadowing-Traffic.yaml` (without the analytics API,
    // listening on 127.0.0.1 for the test).
    let gw = TestGateway::start(&format!(
        r#"api:
  name: Shop
  port: {shop}
  ip: 127.0.0.1
  flow:
    - shadowing:
        targets:
          - target:
              host: localhost
              port: {v2}
  target:
    host: localhost
    port: {production}

---
api:
  name: Production Backend
  port: {production}
  ip: 127.0.0.1
  flow:
    - template:
        src: Production backend answered ${{method}} ${{path}}
    - return:
        status: 200

---
api:
  name: Shop v2
  port: {v2}
  ip: 127.0.0.1
  flow:
    - request:
        - log:
            message: Shop v2 received ${{method}} ${{path}}
    - return:
        status: 200
"#
    ));
    let r = get(gw.addr_of(shop), "/products").await;
    assert_eq!(
        (r.status.as_u16(), r.text().as_str()),
        (200, "Production backend answered GET /products")
    );
}

#[test]
fn settings_that_cannot_work_are_load_errors() {
    let e = load_error(
        "api:\n  port: 0\n  flow:\n    - response:\n        - for:\n            in: $.a\n            language: jsonpath\n  target:\n    url: http://127.0.0.1:1\n",
    );
    assert!(e.contains("`for` acts on requests only"), "{e}");
    let e = load_error(
        "api:\n  port: 0\n  flow:\n    - for:\n        in: $.a\n        language: jsonpath\n        flow:\n          - response:\n              - log: {}\n    - return: {}\n",
    );
    assert!(e.contains("cannot stand inside"), "{e}");
    let e = load_error(
        "api:\n  port: 0\n  flow:\n    - call:\n        url: localhost/x\n    - return: {}\n",
    );
    assert!(e.contains("http://"), "{e}");
    let e = load_error(
        "api:\n  port: 0\n  flow:\n    - call:\n        url: http://localhost/x\n        timeout: 5\n    - return: {}\n",
    );
    assert!(e.contains("timeout"), "{e}");
    let e = load_error(
        "api:\n  port: 0\n  flow:\n    - shadowing:\n        targets:\n          - target:\n              port: 3000\n  target:\n    url: http://127.0.0.1:1\n",
    );
    assert!(e.contains("`host`"), "{e}");
    let e = load_error(
        "api:\n  port: 0\n  flow:\n    - for:\n        in: $.a\n        language: groovy\n    - return: {}\n",
    );
    assert!(e.contains("groovy"), "{e}");
}
