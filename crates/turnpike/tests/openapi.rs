//! APIs deployed from OpenAPI specs, through real sockets: Fruitshop request validation,
//! response validation, `/api-docs`, JSON protection, JSONPath headers, and schemathesis.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use common::*;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

const FRUITSHOP: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/data/openapi/fruitshop-v2-2-0.oas.yml"
);

fn fruitshop_yaml(backend: u16, responses: bool) -> String {
    format!(
        "gateway: {{ accessLog: false }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  openapi:\n    - location: {FRUITSHOP}\n      validateRequests: yes\n      validateResponses: {}\n  target:\n    host: 127.0.0.1\n    port: {backend}\n",
        if responses { "yes" } else { "no" }
    )
}

async fn post(addr: SocketAddr, path: &str, ct: Option<&str>, body: &str) -> Reply {
    let mut r = req("POST", path);
    if let Some(ct) = ct {
        r = r.header("content-type", ct);
    }
    send(
        addr,
        r.body(Full::new(Bytes::from(body.to_owned()))).unwrap(),
    )
    .await
}

fn errors(r: &Reply) -> Vec<(String, String)> {
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    r.json()["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["location"].as_str().unwrap().to_owned(),
                e["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

const JSON: Option<&str> = Some("application/json");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fruitshop_valid_request_is_forwarded() {
    let backend = Backend::start().await;
    let gw = TestGateway::start(&fruitshop_yaml(backend.port(), false));
    let body = r#"{"name":"Mangos","price":2.79}"#;
    let r = post(gw.addr(), "/shop/v2/products", JSON, body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), body, "the backend's answer is returned");
    let seen = backend.last();
    assert_eq!(seen.uri, "/shop/v2/products");
    assert_eq!(seen.body, body);
    let r = get(
        gw.addr(),
        "/shop/v2/products?limit=10&sort=price&order=desc",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(backend.count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fruitshop_invalid_requests_are_rejected_precisely() {
    let backend = Backend::start().await;
    let gw = TestGateway::start(&fruitshop_yaml(backend.port(), false));
    let a = gw.addr();
    let r = post(
        a,
        "/shop/v2/products",
        JSON,
        r#"{"name":"Mangos","price":"cheap"}"#,
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["type"], "urn:turnpike:problem:validation");
    let e = errors(&r);
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].0, "#/body/price");
    assert!(
        e[0].1.contains("\"cheap\" is not of type \"number\""),
        "{e:?}"
    );

    let r = post(a, "/shop/v2/products", JSON, r#"{"price":2.79}"#).await;
    assert_eq!(r.status, 400);
    let e = errors(&r);
    assert_eq!(e[0].0, "#/body");
    assert!(e[0].1.contains("\"name\" is a required property"), "{e:?}");

    let r = post(a, "/shop/v2/products", Some("text/plain"), "Mangos").await;
    assert_eq!(r.status, 415);
    assert_eq!(errors(&r)[0].0, "header.content-type");

    let r = get(a, "/shop/v2/kiwis").await;
    assert_eq!(r.status, 404);
    assert_eq!(errors(&r)[0].0, "path");

    let r = send(
        a,
        req("DELETE", "/shop/v2/products")
            .body(Full::new(Bytes::new()))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, POST"));

    let r = get(a, "/shop/v2/products?limit=many&start=0").await;
    assert_eq!(r.status, 400);
    let locs: Vec<String> = errors(&r).into_iter().map(|e| e.0).collect();
    assert_eq!(locs, ["query.start", "query.limit"]);

    let r = get(a, "/shop/v2/products/abc").await;
    assert_eq!(r.status, 400);
    assert_eq!(errors(&r)[0].0, "path.id");
    assert_eq!(backend.count(), 0, "nothing invalid reached the backend");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn additional_properties_false_and_other_files() {
    let backend = Backend::start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("api.yaml"),
        "openapi: 3.0.3\ninfo: {title: Items, version: '1'}\nservers: [{url: /items-api}]\npaths:\n  /items:\n    post:\n      requestBody:\n        required: true\n        content:\n          application/json:\n            schema: {$ref: 'schemas.yaml#/Item'}\n      responses: {'200': {description: ok}}\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("schemas.yaml"),
        "Item:\n  type: object\n  additionalProperties: false\n  required: [name]\n  properties:\n    name: {type: string}\n    price: {type: number, nullable: true}\n",
    )
    .unwrap();
    let yaml = format!(
        "gateway: {{ accessLog: false }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  openapi:\n    - dir: {}\n      validateRequests: yes\n  target:\n    url: http://127.0.0.1:{}\n",
        dir.path().display(),
        backend.port()
    );
    std::fs::remove_file(dir.path().join("schemas.yaml")).ok();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    // Only the API spec lives in the deployed folder; the schemas sit beside it.
    std::fs::rename(
        dir.path().join("api.yaml"),
        dir.path().join("specs/api.yaml"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("specs/api.yaml"),
        std::fs::read_to_string(dir.path().join("specs/api.yaml"))
            .unwrap()
            .replace("schemas.yaml#", "../schemas.yaml#"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("schemas.yaml"),
        "Item:\n  type: object\n  additionalProperties: false\n  required: [name]\n  properties:\n    name: {type: string}\n    price: {type: number, nullable: true}\n",
    )
    .unwrap();
    let gw = TestGateway::start(&yaml.replace(
        &dir.path().display().to_string(),
        &dir.path().join("specs").display().to_string(),
    ));
    let r = post(
        gw.addr(),
        "/items-api/items",
        JSON,
        r#"{"name":"x","price":null}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = post(
        gw.addr(),
        "/items-api/items",
        JSON,
        r#"{"name":"x","colour":"red"}"#,
    )
    .await;
    assert_eq!(r.status, 400);
    let e = errors(&r);
    assert_eq!(e[0].0, "#/body");
    assert!(e[0].1.contains("colour"), "{e:?}");
}

/// A backend answering fixed JSON per path, for response validation.
async fn json_backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let svc = service_fn(|req: Request<Incoming>| async move {
                    let (status, ct, body) = match req.uri().path() {
                        "/api/things/1" => (200, "application/json", r#"{"id":1,"name":"one"}"#),
                        "/api/things/2" => (200, "application/json", r#"{"id":"two"}"#),
                        "/api/things/3" => (200, "text/html", "<p>three</p>"),
                        "/api/things/4" => (500, "text/plain", "boom"),
                        _ => (404, "application/json", r#"{"error":"none"}"#),
                    };
                    let mut r = Response::new(Full::new(Bytes::from(body)));
                    *r.status_mut() = http::StatusCode::from_u16(status).unwrap();
                    r.headers_mut().insert("content-type", ct.parse().unwrap());
                    Ok::<_, Infallible>(r)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_are_validated_and_target_comes_from_servers() {
    let backend = json_backend().await;
    let dir = tempfile::tempdir().unwrap();
    let spec = format!(
        "openapi: 3.1.0\ninfo: {{title: Things, version: '1.0'}}\nservers: [{{url: 'http://127.0.0.1:{}/api'}}]\npaths:\n  /things/{{id}}:\n    get:\n      parameters: [{{name: id, in: path, required: true, schema: {{type: integer}}}}]\n      responses:\n        '200':\n          description: ok\n          content:\n            application/json:\n              schema:\n                type: object\n                required: [id]\n                properties: {{id: {{type: integer}}, name: {{type: string}}}}\n        '404': {{description: none}}\n",
        backend.port()
    );
    std::fs::write(dir.path().join("things.yaml"), spec).unwrap();
    let yaml = format!(
        "gateway: {{ accessLog: false }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  openapi:\n    - location: {}\n      validateResponses: yes\n",
        dir.path().join("things.yaml").display()
    );
    let gw = TestGateway::start(&yaml);
    let a = gw.addr();
    let r = get(a, "/api/things/1").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), r#"{"id":1,"name":"one"}"#);
    let r = get(a, "/api/things/2").await;
    assert_eq!(r.status, 502);
    assert_eq!(r.json()["type"], "urn:turnpike:problem:response-validation");
    assert_eq!(errors(&r)[0].0, "#/body/id");
    let r = get(a, "/api/things/3").await;
    assert_eq!(r.status, 502);
    assert_eq!(errors(&r)[0].0, "header.content-type");
    let r = get(a, "/api/things/4").await;
    assert_eq!(r.status, 502);
    assert_eq!(errors(&r)[0].0, "status");
    let r = get(a, "/api/things/9").await;
    assert_eq!(r.status, 404, "a declared status passes");
    // Requests are not validated here: a bad id reaches the backend (which answers 404).
    assert_eq!(get(a, "/api/things/x").await.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_docs_list_json_yaml_and_ui() {
    let backend = Backend::start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("small.yaml"),
        "openapi: 3.0.3\ninfo: {title: Small API, version: '0.1'}\nservers: [{url: /small}]\npaths:\n  /ping:\n    get:\n      responses: {'200': {description: ok}}\n",
    )
    .unwrap();
    let yaml = format!(
        "gateway: {{ accessLog: false }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  openapi:\n    - location: {FRUITSHOP}\n      validateRequests: yes\n    - location: {}\n  target:\n    host: 127.0.0.1\n    port: {}\n",
        dir.path().join("small.yaml").display(),
        backend.port()
    );
    let gw = TestGateway::start(&yaml);
    let a = gw.addr();
    let list = get(a, "/api-docs").await.json();
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["fruit-shop-api-v2-2-0", "small-api-v0-1"]);
    let j = get(a, "/api-docs/fruit-shop-api-v2-2-0.json").await;
    assert_eq!(j.header("content-type"), Some("application/json"));
    assert_eq!(j.json()["servers"][0]["url"], "/shop/v2");
    assert_eq!(j.json()["info"]["title"], "Fruit Shop API");
    let y = get(a, "/api-docs/small-api-v0-1.yaml").await;
    assert_eq!(y.header("content-type"), Some("application/yaml"));
    assert!(y.text().contains("title: Small API"), "{}", y.text());
    let ui = get(a, "/api-docs/ui/small-api-v0-1").await;
    assert_eq!(ui.status, 200);
    assert!(ui.text().contains("<script>") && !ui.text().contains("https://"));
    assert_eq!(get(a, "/api-docs/nope.json").await.status, 404);
    // Both specs route on the one port; the second one's paths and methods are routed (404,
    // 405) though it validates nothing else.
    assert_eq!(get(a, "/small/ping").await.status, 200);
    assert_eq!(get(a, "/small/ping?unknown=1").await.status, 200);
    assert_eq!(get(a, "/small/anything").await.status, 404);
    let r = send(
        a,
        req("POST", "/small/ping")
            .body(Full::new(Bytes::from("x")))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 405);
    assert_eq!(get(a, "/shop/v2/anything").await.status, 404);
}

/// A `cors` policy in the flow of an OpenAPI-deployed API answers preflights; the spec's
/// operations still get validated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_preflight_reaches_the_flow() {
    let backend = Backend::start().await;
    let yaml = format!(
        "gateway: {{ accessLog: false }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  openapi:\n    - location: {FRUITSHOP}\n      validateRequests: yes\n  flow:\n    - cors:\n        origins: [https://app.example]\n        methods: [GET, POST]\n        headers: [Content-Type]\n  target:\n    host: 127.0.0.1\n    port: {}\n",
        backend.port()
    );
    let gw = TestGateway::start(&yaml);
    let r = send(
        gw.addr(),
        req("OPTIONS", "/shop/v2/products")
            .header("origin", "https://app.example")
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "content-type")
            .body(Full::new(Bytes::new()))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    let r = post(gw.addr(), "/shop/v2/products", JSON, r#"{"name":7}"#).await;
    assert_eq!(r.status, 400);
    assert_eq!(backend.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_specs_are_load_errors_that_say_where() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.yaml"),
        "openapi: 3.0.3\ninfo: {title: Bad, version: '1'}\npaths:\n  /a:\n    get:\n      parameters:\n        - {name: q, in: body}\n      responses: {}\n",
    )
    .unwrap();
    let cfg = dir.path().join("gw.yaml");
    std::fs::write(
        &cfg,
        "api:\n  port: 0\n  openapi:\n    - location: bad.yaml\n      validateRequests: yes\n  target: {host: 127.0.0.1, port: 1}\n---\napi:\n  port: 0\n  openapi:\n    - location: https://127.0.0.1:1/spec.yaml\n  target: {host: 127.0.0.1, port: 1}\n---\napi:\n  port: 0\n  openapi:\n    - location: bad.yaml\n      dir: x\n---\napi:\n  port: 0\n  openapi:\n    - location: bad.yaml\n      validateRequest: yes\n---\napi:\n  port: 0\n  flow:\n    - jsonProtection: {maxDepth: 2, maxNesting: 3}\n  target: {host: 127.0.0.1, port: 1}\n---\napi:\n  port: 0\n  flow:\n    - jsonProtection: {maxDepth: 0}\n  target: {host: 127.0.0.1, port: 1}\n",
    )
    .unwrap();
    let e = turnpike::load_and_compile(&[cfg]).unwrap_err().to_string();
    assert!(e.contains("gw.yaml:4:") && e.contains("bad.yaml:7:"), "{e}");
    assert!(
        e.contains("`in` must be path, query, header or cookie"),
        "{e}"
    );
    assert!(
        e.contains("fetching `https://127.0.0.1:1/spec.yaml` failed"),
        "{e}"
    );
    assert!(e.contains("exactly one of `location` and `dir`"), "{e}");
    assert!(e.contains("unknown field `validateRequest`"), "{e}");
    assert!(e.contains("unknown field `maxNesting`"), "{e}");
    assert!(
        e.contains("jsonProtection.maxDepth: must be at least 1"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_protection_rejects_deep_huge_and_duplicate() {
    let backend = Backend::start().await;
    let yaml = format!(
        "gateway: {{ accessLog: false }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  flow:\n    - jsonProtection:\n        maxStringLength: 1000\n        maxObjectSize: 100\n  target:\n    url: http://127.0.0.1:{}\n",
        backend.port()
    );
    let gw = TestGateway::start(&yaml);
    let a = gw.addr();
    assert_eq!(
        post(a, "/", JSON, r#"{"a":[1,2,{"b":null}]}"#).await.status,
        200
    );
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let r = post(a, "/", JSON, &deep).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["violation"], "maxDepth");
    let huge = format!("{{\"s\":\"{}\"}}", "x".repeat(1_000_000));
    let r = post(a, "/", JSON, &huge).await;
    assert_eq!(r.json()["violation"], "maxStringLength");
    let many: Vec<String> = (0..101).map(|i| format!("\"k{i}\":{i}")).collect();
    let r = post(a, "/", JSON, &format!("{{{}}}", many.join(","))).await;
    assert_eq!(r.json()["violation"], "maxObjectSize");
    let r = post(a, "/", JSON, r#"{"a":1,"a":2}"#).await;
    assert_eq!(r.json()["violation"], "duplicateKey");
    let r = post(a, "/", JSON, r#"{"a":1"#).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["violation"], "invalid");
    assert_eq!(backend.count(), 1);
}

/// The body is checked while it arrives: a violation in the first chunk is answered while the
/// client is still sending (the rest of the body never comes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_protection_rejects_before_the_body_ends() {
    let backend = Backend::start().await;
    let yaml = format!(
        "gateway: {{ accessLog: false }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  flow:\n    - jsonProtection: {{}}\n  target:\n    url: http://127.0.0.1:{}\n",
        backend.port()
    );
    let gw = TestGateway::start(&yaml);
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(hyper::body::Frame::data(b)), rx))
    });
    let body = http_body_util::StreamBody::new(stream);
    let conn = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    let (mut sender, c) = hyper::client::conn::http1::handshake(TokioIo::new(conn))
        .await
        .unwrap();
    tokio::spawn(c);
    tx.send(Bytes::from(vec![b'['; 60])).await.unwrap();
    let req = req("POST", "/")
        .header("content-type", "application/json")
        .body(body)
        .unwrap();
    let res = tokio::time::timeout(std::time::Duration::from_secs(5), sender.send_request(req))
        .await
        .expect("answered before the body ended")
        .unwrap();
    assert_eq!(res.status(), 400);
    drop(tx);
    assert_eq!(backend.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jsonpath_header_from_the_body() {
    let backend = Backend::start().await;
    let yaml = format!(
        "gateway: {{ accessLog: false }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  flow:\n    - request:\n        - setHeader:\n            name: X-First-Name\n            value: '${{$.person.firstName}}'\n            language: jsonpath\n  target:\n    url: http://127.0.0.1:{}\n",
        backend.port()
    );
    let gw = TestGateway::start(&yaml);
    let body = r#"{"person":{"firstName":"Ada","lastName":"Lovelace"}}"#;
    let r = post(gw.addr(), "/people", JSON, body).await;
    assert_eq!(r.status, 200);
    let seen = backend.last();
    assert_eq!(seen.headers["x-first-name"], "Ada");
    assert_eq!(seen.body, body, "the body is forwarded unchanged");
}

/// `rateLimiter` counts by a JSONPath key on the body (the body is parsed once for both the
/// limiter and the header).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limiter_keyed_by_jsonpath() {
    let backend = Backend::start().await;
    let yaml = format!(
        "gateway: {{ accessLog: false }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  flow:\n    - request:\n        - rateLimiter:\n            requestLimit: 1\n            requestLimitDuration: 1m\n            key: expression\n            keyExpression: '${{$.tenant}}'\n            language: jsonpath\n        - setHeader:\n            name: X-Tenant\n            value: '${{$.tenant}}'\n            language: jsonpath\n  target:\n    url: http://127.0.0.1:{}\n",
        backend.port()
    );
    let gw = TestGateway::start(&yaml);
    let a = gw.addr();
    assert_eq!(post(a, "/", JSON, r#"{"tenant":"a"}"#).await.status, 200);
    assert_eq!(backend.last().headers["x-tenant"], "a");
    assert_eq!(post(a, "/", JSON, r#"{"tenant":"a"}"#).await.status, 429);
    assert_eq!(post(a, "/", JSON, r#"{"tenant":"b"}"#).await.status, 200);
    assert_eq!(backend.last().headers["x-tenant"], "b");
}

fn schemathesis_installed() -> bool {
    let st = std::process::Command::new("schemathesis")
        .arg("--version")
        .output();
    if st.as_ref().is_ok_and(|o| o.status.success()) {
        return true;
    }
    eprintln!("NOTE: schemathesis is not installed (pip install schemathesis): test skipped");
    false
}

/// Runs schemathesis on the spec the gateway serves at `spec_url`, against `base_url`, with the
/// two checks that matter here: every invalid request is rejected (`negative_data_rejection`)
/// and every valid one accepted (`positive_data_acceptance`).
async fn schemathesis(spec_url: String, base_url: String, extra: &'static [&'static str]) {
    // Its caches (.hypothesis, .schemathesis) go to a temporary folder, not into the repo.
    let cwd = tempfile::tempdir().unwrap();
    let cwd_path = cwd.path().to_owned();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("schemathesis")
            .current_dir(&cwd_path)
            .args(["run", &spec_url, "--url", &base_url])
            .args([
                "--checks",
                "negative_data_rejection,positive_data_acceptance",
                "--phases",
                "examples,coverage,fuzzing",
                "--max-examples",
                "20",
                "--seed",
                "1",
                "--workers",
                "2",
                "--no-color",
            ])
            .args(extra)
            .env_remove("SCHEMATHESIS_HOOKS")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "schemathesis failed:\n{stdout}\n{stderr}"
    );
}

/// Fruitshop validated by the gateway in front of a backend that accepts everything.
/// Skipped (with a note) only when schemathesis is not installed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_accepted_invalid_or_rejected_valid_request() {
    if !schemathesis_installed() {
        return;
    }
    let backend = Backend::start().await;
    let gw = TestGateway::start(&fruitshop_yaml(backend.port(), false));
    let a = gw.addr();
    // The image upload declares an Authorization header parameter, which OpenAPI says to
    // ignore: schemathesis would expect a request without it to be refused.
    schemathesis(
        format!("http://{a}/api-docs/fruit-shop-api-v2-2-0.json"),
        format!("http://{a}/shop/v2"),
        &["--exclude-path-regex", "/image$"],
    )
    .await;
}

const STYLES: &str = r##"openapi: 3.0.3
info: { title: Styles, version: "1" }
servers: [ { url: /s } ]
paths:
  /items/{id}:
    parameters:
      - { name: id, in: path, required: true, schema: { type: integer, format: int32, minimum: 1 } }
    get:
      parameters:
        - { name: tags, in: query, schema: { type: array, items: { type: string, enum: [a, b, c] } } }
        - { name: csv, in: query, explode: false, schema: { type: array, items: { type: integer } } }
        - { name: limit, in: query, required: true, schema: { type: integer, minimum: 1, maximum: 100 } }
        - { name: flag, in: query, schema: { type: boolean } }
        - { name: X-Trace, in: header, required: true, schema: { type: string, pattern: "^[0-9a-f]{4,8}$" } }
        - { name: ratio, in: query, schema: { type: number, exclusiveMinimum: true, minimum: 0, nullable: true } }
        - { name: sid, in: cookie, schema: { type: integer } }
        - { name: filter, in: query, style: deepObject, explode: true, schema: { type: object, properties: { min: { type: integer }, name: { type: string, maxLength: 4 } }, additionalProperties: false } }
        - { name: pipes, in: query, style: pipeDelimited, explode: false, schema: { type: array, items: { type: integer, maximum: 9 } } }
        - { name: spaces, in: query, style: spaceDelimited, explode: false, schema: { type: array, items: { type: boolean } } }
        - { name: obj, in: query, explode: false, schema: { type: object, properties: { a: { type: integer } } } }
        - name: json
          in: query
          content:
            application/json:
              schema: { type: object, required: [k], properties: { k: { type: integer } } }
      responses: { "200": { description: ok } }
    put:
      requestBody:
        required: true
        content:
          application/json:
            schema:
              type: object
              additionalProperties: false
              required: [name, kind]
              properties:
                name: { type: string, minLength: 1, maxLength: 10 }
                note: { type: string, nullable: true }
                score: { type: number, minimum: 0, exclusiveMinimum: true }
                when: { type: string, format: date-time }
                kind: { type: string, enum: [x, y] }
                tags: { type: array, items: { type: integer }, maxItems: 3, uniqueItems: true }
      responses: { "204": { description: done } }
  /orders:
    post:
      requestBody:
        required: true
        content:
          application/x-www-form-urlencoded:
            schema:
              type: object
              required: [qty]
              properties:
                qty: { type: integer, minimum: 1, maximum: 50 }
                note: { type: string, maxLength: 8 }
                gift: { type: boolean }
      responses: { "201": { description: created } }
  /uploads:
    post:
      requestBody:
        required: true
        content:
          multipart/form-data:
            schema:
              type: object
              required: [title, copies]
              properties:
                title: { type: string, maxLength: 10 }
                copies: { type: integer, minimum: 1, maximum: 9 }
                flag: { type: boolean }
                meta: { type: object, required: [k], properties: { k: { type: integer } } }
      responses: { "201": { description: created } }
  /pets:
    post:
      requestBody:
        required: true
        content:
          application/json:
            schema:
              oneOf: [ { $ref: "#/components/schemas/Cat" }, { $ref: "#/components/schemas/Dog" } ]
              discriminator: { propertyName: petType }
      responses: { "201": { description: created } }
components:
  schemas:
    Pet:
      type: object
      required: [petType, name]
      properties: { petType: { type: string }, name: { type: string } }
    Cat:
      allOf:
        - $ref: "#/components/schemas/Pet"
        - type: object
          properties: { huntingSkill: { type: string, enum: [lazy, aggressive] } }
    Dog:
      allOf:
        - $ref: "#/components/schemas/Pet"
        - type: object
          properties: { packSize: { type: integer, minimum: 0 } }
"##;

/// Parameter styles (form, deepObject, pipe- and space-delimited, JSON content), types, headers,
/// cookies, 3.0 keywords, formats, a discriminator, and form and multipart bodies under
/// schemathesis. (Label and matrix arrays, and array parts of multipart bodies, are left out:
/// schemathesis cannot tell a one-element array from a scalar there. So is a discriminator on a
/// base schema used directly: schemathesis reads the schema as plain JSON Schema, where any value
/// of the property is valid, while OpenAPI allows only the subtypes' names.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_on_parameter_styles_and_3_0_keywords() {
    if !schemathesis_installed() {
        return;
    }
    let backend = Backend::start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("styles.yaml"), STYLES).unwrap();
    let yaml = format!(
        "gateway: {{ accessLog: false }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  openapi:\n    - location: {}\n      validateRequests: yes\n  target:\n    url: http://127.0.0.1:{}\n",
        dir.path().join("styles.yaml").display(),
        backend.port()
    );
    let gw = TestGateway::start(&yaml);
    let a = gw.addr();
    schemathesis(
        format!("http://{a}/api-docs/styles-v1.json"),
        format!("http://{a}/s"),
        &[],
    )
    .await;
}

/// A gateway deploying the spec `text` (written to `dir` as `name`) with request validation, in
/// front of `backend`; `gateway` adds to the gateway's settings.
fn deploy(
    dir: &std::path::Path,
    name: &str,
    text: &str,
    backend: u16,
    gateway: &str,
) -> TestGateway {
    std::fs::write(dir.join(name), text).unwrap();
    TestGateway::start(&format!(
        "gateway:\n  accessLog: false\n{gateway}---\napi:\n  port: 0\n  ip: 127.0.0.1\n  openapi:\n    - location: {}\n      validateRequests: yes\n  target:\n    url: http://127.0.0.1:{backend}\n",
        dir.join(name).display()
    ))
}

const ZOO: &str = r##"openapi: 3.0.3
info: { title: Zoo, version: "1" }
servers: [ { url: /zoo } ]
paths:
  /pets:
    post:
      requestBody:
        required: true
        content:
          application/json:
            schema: { $ref: "#/components/schemas/Pet" }
      responses: { "201": { description: created } }
components:
  schemas:
    Pet:
      type: object
      required: [petType, name]
      properties: { petType: { type: string }, name: { type: string } }
      discriminator: { propertyName: petType, mapping: { doggie: Dog } }
    Cat:
      allOf:
        - $ref: "#/components/schemas/Pet"
        - type: object
          required: [huntingSkill]
          properties: { huntingSkill: { type: string, enum: [lazy, aggressive] } }
    Dog:
      allOf:
        - $ref: "#/components/schemas/Pet"
        - type: object
          properties: { packSize: { type: integer, minimum: 0 } }
"##;

/// A discriminator on a base schema selects the subtype (`allOf` inheritance) over real sockets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discriminator_inherited_through_all_of() {
    let backend = Backend::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = deploy(dir.path(), "zoo.yaml", ZOO, backend.port(), "");
    let a = gw.addr();
    let cat = r#"{"petType":"Cat","name":"Tom","huntingSkill":"lazy"}"#;
    let r = post(a, "/zoo/pets", JSON, cat).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(backend.last().body, cat);
    let r = post(
        a,
        "/zoo/pets",
        JSON,
        r#"{"petType":"doggie","name":"Rex","packSize":4}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    // Cat's own rule, precisely: no vague "not valid under any of the schemas".
    let r = post(
        a,
        "/zoo/pets",
        JSON,
        r#"{"petType":"Cat","name":"Tom","huntingSkill":"sleepy"}"#,
    )
    .await;
    assert_eq!(r.status, 400);
    let e = errors(&r);
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].0, "#/body/huntingSkill");
    let r = post(a, "/zoo/pets", JSON, r#"{"petType":"Dog","name":"Rex"}"#).await;
    assert_eq!(r.status, 400);
    let e = errors(&r);
    assert_eq!(e[0].0, "#/body/petType");
    assert_eq!(
        e[0].1,
        "\"Dog\" is not a known value of the discriminator `petType` (known: doggie, Cat)"
    );
    assert_eq!(backend.count(), 2);
}

const SHOP_31: &str = r##"openapi: 3.1.0
info: { title: Shop31, version: "1" }
servers: [ { url: /shop31 } ]
paths:
  /orders:
    post:
      requestBody:
        required: true
        content:
          application/json:
            schema: { $ref: "https://shop.example/schemas/order" }
      responses: { "201": { description: created } }
components:
  schemas:
    Order:
      $id: https://shop.example/schemas/order
      type: object
      required: [id, items]
      properties:
        id: { $ref: "common#/$defs/Id" }
        items: { type: array, items: { $ref: "item" } }
        status: { $ref: "common#status" }
    Items:
      $ref: "items.yaml"
"##;

const SHOP_31_ITEMS: &str = r##"$id: https://shop.example/schemas/item
type: object
required: [sku]
properties:
  sku: { type: string, pattern: "^[A-Z]{3}-[0-9]+$" }
  qty: { $ref: "#/$defs/Qty" }
$defs:
  Qty: { type: integer, minimum: 1 }
  Common:
    $id: common
    $defs:
      Id: { type: integer, minimum: 1 }
      Status: { $anchor: status, enum: [open, paid] }
"##;

/// OpenAPI 3.1 references to `$id`s (one in another file) and to an `$anchor`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_31_id_and_anchor_references() {
    let backend = Backend::start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("items.yaml"), SHOP_31_ITEMS).unwrap();
    let gw = deploy(dir.path(), "shop31.yaml", SHOP_31, backend.port(), "");
    let a = gw.addr();
    let ok = r#"{"id":1,"items":[{"sku":"ABC-1","qty":2}],"status":"open"}"#;
    let r = post(a, "/shop31/orders", JSON, ok).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = post(
        a,
        "/shop31/orders",
        JSON,
        r#"{"id":0,"items":[{"sku":"abc","qty":0}],"status":"lost"}"#,
    )
    .await;
    assert_eq!(r.status, 400);
    let mut locs: Vec<String> = errors(&r).into_iter().map(|e| e.0).collect();
    locs.sort();
    assert_eq!(
        locs,
        [
            "#/body/id",
            "#/body/items/0/qty",
            "#/body/items/0/sku",
            "#/body/status"
        ]
    );
    // The served spec is bundled: references are JSON pointers, and no `$id` is left.
    let doc = get(a, "/api-docs/shop31-v1.json").await.json();
    assert_eq!(
        doc["components"]["schemas"]["Order"]["properties"]["items"]["items"]["$ref"],
        "#/x-turnpike-bundled/0"
    );
    assert!(doc["components"]["schemas"]["Order"].get("$id").is_none());
    assert_eq!(backend.count(), 1);
}

const UPLOAD: &str = r##"openapi: 3.0.3
info: { title: Upload, version: "1" }
servers: [ { url: /up } ]
paths:
  /files:
    post:
      requestBody:
        required: true
        content:
          multipart/form-data:
            schema:
              type: object
              required: [title, copies, file]
              properties:
                title: { type: string, maxLength: 10 }
                copies: { type: integer, minimum: 1 }
                tags: { type: array, items: { type: string, enum: [a, b] } }
                meta: { type: object, required: [author], properties: { author: { type: string } } }
                file: { type: string, format: binary }
            encoding:
              file: { contentType: "image/png, image/jpeg" }
      responses: { "201": { description: created } }
"##;

fn form(parts: &[(&str, Option<&str>, &str)]) -> String {
    let mut b = String::new();
    for (name, ct, content) in parts {
        b.push_str(&format!(
            "--b0und\r\nContent-Disposition: form-data; name=\"{name}\"\r\n"
        ));
        if let Some(ct) = ct {
            b.push_str(&format!("Content-Type: {ct}\r\n"));
        }
        b.push_str(&format!("\r\n{content}\r\n"));
    }
    b.push_str("--b0und--\r\n");
    b
}

/// `multipart/form-data` bodies are parsed and validated part by part; malformed ones and ones
/// over the body limit are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_bodies_are_validated() {
    let backend = Backend::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = deploy(
        dir.path(),
        "upload.yaml",
        UPLOAD,
        backend.port(),
        "  limits: { maxBodySize: 2KB }\n",
    );
    let a = gw.addr();
    let ct = Some("multipart/form-data; boundary=b0und");
    let body = form(&[
        ("title", None, "Holiday"),
        ("copies", None, "2"),
        ("tags", None, "a"),
        ("tags", None, "b"),
        ("meta", Some("application/json"), r#"{"author":"Ann"}"#),
        ("file", Some("image/png"), "\u{89}PNG"),
    ]);
    let r = post(a, "/up/files", ct, &body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(backend.last().body, body, "forwarded unchanged");
    let r = post(
        a,
        "/up/files",
        ct,
        &form(&[
            ("title", None, "Holiday"),
            ("copies", None, "none"),
            ("tags", None, "c"),
            ("meta", Some("application/json"), "{}"),
            ("file", Some("text/plain"), "hello"),
        ]),
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["type"], "urn:turnpike:problem:validation");
    let mut locs: Vec<String> = errors(&r).into_iter().map(|e| e.0).collect();
    locs.sort();
    assert_eq!(
        locs,
        [
            "#/body/copies",
            "#/body/file",
            "#/body/meta",
            "#/body/tags/0"
        ],
        "{:?}",
        errors(&r)
    );
    let r = post(a, "/up/files", ct, &form(&[("title", None, "x")])).await;
    assert_eq!(r.status, 400);
    assert!(
        errors(&r)[0].1.contains("required property"),
        "{:?}",
        errors(&r)
    );
    // Malformed: no boundary parameter, a body without the closing boundary line.
    let r = post(a, "/up/files", Some("multipart/form-data"), &body).await;
    assert_eq!(r.status, 400);
    assert_eq!(errors(&r)[0].0, "header.content-type");
    let r = post(a, "/up/files", ct, &body.replace("--b0und--", "--b0und")).await;
    assert_eq!(r.status, 400);
    assert!(
        errors(&r)[0].1.starts_with("malformed multipart body"),
        "{:?}",
        errors(&r)
    );
    // The body limit holds before anything is parsed.
    let big = form(&[("title", None, &"x".repeat(4096))]);
    let r = post(a, "/up/files", ct, &big).await;
    assert_eq!(r.status, 413);
    assert_eq!(backend.count(), 1);
}
