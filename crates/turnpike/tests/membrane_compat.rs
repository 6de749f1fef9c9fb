//! Membrane's semantics and policies, with configurations written in the shapes Membrane's
//! examples use: JSONPath rate-limit keys, body templates, logs, `*.apis.yaml` folders, and the
//! load errors of what Turnpike does not support.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::Bytes;
use common::*;
use http_body_util::Full;

fn load_error(dir: &std::path::Path, yaml: &str) -> String {
    let file = dir.join("gateway.yaml");
    std::fs::write(&file, yaml).unwrap();
    match turnpike::start(vec![file]) {
        Ok(_) => panic!("the configuration loaded:\n{yaml}"),
        Err(e) => e.to_string(),
    }
}

async fn post_json(addr: std::net::SocketAddr, path: &str, body: &str) -> Reply {
    send(
        addr,
        req("POST", path)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jsonpath_key_counts_each_user_apart() {
    // The shape of Membrane's rate-limiting example.
    let gw = TestGateway::start(
        r#"api:
  port: 0
  ip: 127.0.0.1
  path:
    uri: /reset-pwd
  flow:
    - rateLimiter:
        requestLimit: 2
        requestLimitDuration: PT30S
        language: jsonpath
        keyExpression: $.user
    - static:
        src: Success
    - return:
        status: 200
"#,
    );
    let addr = gw.addr();
    for _ in 0..2 {
        assert_eq!(
            post_json(addr, "/reset-pwd", r#"{"user":"alice"}"#)
                .await
                .status,
            200
        );
    }
    assert_eq!(
        post_json(addr, "/reset-pwd", r#"{"user":"alice"}"#)
            .await
            .status,
        429
    );
    // Another user has a counter of its own.
    let r = post_json(addr, "/reset-pwd", r#"{"user":"bob"}"#).await;
    assert_eq!((r.status.as_u16(), r.text().as_str()), (200, "Success"));
    // A key that is the same for every request is refused at load.
    let dir = tempfile::tempdir().unwrap();
    let e = load_error(
        dir.path(),
        "api:\n  port: 0\n  flow:\n    - rateLimiter: { requestLimit: 1, requestLimitDuration: PT1S, keyExpression: \"headers['X-Key']\" }\n    - return: {}\n",
    );
    assert!(e.contains("would be one counter for every request"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn templates_log_lines_and_apis_folders() {
    let dir = tempfile::tempdir().unwrap();
    let apis = dir.path().join("apis");
    std::fs::create_dir(&apis).unwrap();
    std::fs::write(
        apis.join("greeting.txt"),
        "{ \"hello\": \"${pathParam.name}\", \"agent\": \"${header['User-Agent']}\", \"n\": ${json.n} }",
    )
    .unwrap();
    std::fs::write(
        apis.join("shop.apis.yaml"),
        r#"api:
  port: 0
  ip: 127.0.0.1
  path:
    uri: /greet/{name}
  flow:
    - log:
        message: "Path: ${path}"
    - request:
        - template:
            location: greeting.txt
            contentType: application/json
            pretty: true
    - return:
        status: 200
"#,
    )
    .unwrap();
    // A spec beside it is not read as configuration.
    std::fs::write(apis.join("shop.oas.yaml"), "openapi: 3.0.3\ninfo: {}\n").unwrap();
    let gateway = turnpike::start(vec![apis.clone()]).unwrap_or_else(|e| panic!("{e}"));
    let addr = gateway.listeners()[0].1;
    let r = send(
        addr,
        req("POST", "/greet/ada")
            .header("user-agent", "curl")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(br#"{"n":3}"#)))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(
        r.text(),
        "{\n  \"hello\": \"ada\",\n  \"agent\": \"curl\",\n  \"n\": 3\n}"
    );
}

#[test]
fn what_turnpike_cannot_run_is_named_at_load_with_the_alternative() {
    let dir = tempfile::tempdir().unwrap();
    for (policy, expect) in [
        (
            "groovy: { src: 'exc.request.header.add(\"X\", \"1\")' }",
            "Membrane's `groovy` is not supported: scripts cannot run",
        ),
        ("ntlm: {}", "Membrane's `ntlm` is not supported"),
        (
            "oauth2Resource2: { membrane: { src: 'http://localhost:8000' } }",
            "use `jwtAuth` with the provider's JSON Web Key Set",
        ),
        (
            "template: { src: '<% out << 1 %>' }",
            "Groovy template code",
        ),
        (
            "template: { src: '${exc.request.header}' }",
            "Membrane's Java objects (`exc`, `exchange`) are not available",
        ),
    ] {
        let e = load_error(
            dir.path(),
            &format!("api:\n  port: 0\n  flow:\n    - {policy}\n    - return: {{}}\n"),
        );
        assert!(e.contains(expect), "{policy}: {e}");
        assert!(e.contains("gateway.yaml:4:"), "{policy}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membranes_shapes_of_cors_rewriter_return_and_prometheus() {
    let backend = Backend::start().await;
    let yaml = format!(
        r#"gateway: {{ accessLog: false }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /cors }}
  flow:
    - cors:
        allowAll: true
    - return:
        statusCode: 204
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /listed }}
  flow:
    - cors:
        origins: https://example.com null
        methods: GET, POST
        headers: Content-Type, X-Foo
    - return: {{}}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /fruits/ }}
  flow:
    - rewriter:
        - from: "/fruits/(.*)"
          to: "https://api.example.com/products/$1"
          do: redirect_permanent
  target: {{ host: 127.0.0.1, port: {port} }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /store/ }}
  flow:
    - rewriter:
        - from: ^/store/(.*)
          to: /shop/v2/$1
  target: {{ host: 127.0.0.1, port: {port} }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /metrics }}
  flow:
    - prometheus: {{}}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /if }}
  flow:
    - if:
        test: "header['X-Flag'] != null and method == 'GET'"
        flow: [ {{ return: {{ status: 202 }} }} ]
  target: {{ host: 127.0.0.1, port: {port} }}
"#,
        port = backend.port()
    );
    let gw = TestGateway::start(&yaml);
    let addr = gw.addr();
    let preflight = |path: &'static str, origin: &'static str, headers: &'static str| {
        send(
            addr,
            req("OPTIONS", path)
                .header("origin", origin)
                .header("access-control-request-method", "PUT")
                .header("access-control-request-headers", headers)
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
    };
    let r = preflight("/cors", "https://any.example", "X-Anything").await;
    assert_eq!(r.status, 204);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://any.example")
    );
    assert_eq!(r.header("access-control-allow-headers"), Some("X-Anything"));
    let r = get_with(addr, "/cors", &[("origin", "https://any.example")]).await;
    assert_eq!(r.status, 204, "`statusCode` as Membrane writes it");
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://any.example")
    );
    // Space- and comma-separated lists; `null` is an origin.
    let r = send(
        addr,
        req("OPTIONS", "/listed")
            .header("origin", "null")
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "x-foo")
            .body(Full::new(Bytes::new()))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 204);
    let r = preflight("/listed", "null", "x-foo").await;
    assert_eq!(r.status, 403, "PUT is not listed");
    // Rewriter: the list form, and redirects.
    let r = get(addr, "/fruits/7").await;
    assert_eq!(r.status, 301);
    assert_eq!(
        r.header("location"),
        Some("https://api.example.com/products/7")
    );
    get(addr, "/store/products?x=1").await;
    assert_eq!(backend.last().uri, "/shop/v2/products?x=1");
    // Metrics.
    let r = get(addr, "/metrics").await;
    assert_eq!(r.status, 200);
    assert!(r.text().contains("turnpike_requests_total"), "{}", r.text());
    // A SpEL test as Membrane writes it.
    assert_eq!(get_with(addr, "/if", &[("x-flag", "1")]).await.status, 202);
    assert_eq!(get(addr, "/if").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validation_details_can_be_left_out() {
    let spec = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/openapi/fruitshop-v2-2-0.oas.yml"
    );
    let yaml = |details: &str| {
        format!(
            "gateway: {{ accessLog: false }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  openapi:\n    - location: {spec}\n      validateRequests: yes\n      validationDetails: {details}\n      mock: yes\n"
        )
    };
    for (details, listed) in [("yes", true), ("no", false)] {
        let gw = TestGateway::start(&yaml(details));
        let r = post_json(gw.addr(), "/shop/v2/products", r#"{"name": 7}"#).await;
        assert_eq!(r.status, 400);
        assert_eq!(r.json().get("errors").is_some(), listed, "{}", r.text());
        assert_eq!(r.json()["type"], "urn:turnpike:problem:validation");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_body_and_the_target_method_reach_the_backend() {
    // Membrane's GET-to-POST tutorial shape.
    let backend = Backend::start().await;
    let yaml = format!(
        r#"gateway: {{ accessLog: false }}
---
api:
  port: 0
  ip: 127.0.0.1
  flow:
    - request:
        - setBody:
            value: '{{ "name": "${{param.name[0]}}" }}'
            contentType: application/json
  target:
    method: POST
    url: http://127.0.0.1:{}/products
"#,
        backend.port()
    );
    let gw = TestGateway::start(&yaml);
    assert_eq!(get(gw.addr(), "/anything?name=Kiwi").await.status, 200);
    let seen = backend.last();
    assert_eq!(seen.method, "POST");
    assert_eq!(seen.uri, "/products");
    assert_eq!(seen.body, r#"{ "name": "Kiwi" }"#);
    assert_eq!(seen.headers["content-type"], "application/json");
    let dir = tempfile::tempdir().unwrap();
    let e = load_error(
        dir.path(),
        "api:\n  port: 0\n  target: { url: http://127.0.0.1:1, method: \"GE T\" }\n",
    );
    assert!(e.contains("is not an HTTP method"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_3_2_specs_are_read_with_their_query_operations() {
    let dir = tempfile::tempdir().unwrap();
    let spec = |extra: &str| {
        format!(
            "openapi: 3.2.0\ninfo: {{ title: Items, version: '1' }}\nservers: [ {{ url: http://localhost/v1 }} ]\npaths:\n  /items:\n    post:\n      requestBody:\n        required: true\n        content:\n          application/json:\n            schema: {{ type: object, required: [name], properties: {{ name: {{ type: string }} }} }}\n      responses: {{ '200': {{ description: ok }} }}\n{extra}"
        )
    };
    std::fs::write(dir.path().join("items.yaml"), spec("")).unwrap();
    let yaml = format!(
        "gateway: {{ accessLog: false }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  openapi: [ {{ location: {}, validateRequests: yes, mock: yes }} ]\n",
        dir.path().join("items.yaml").display()
    );
    let gw = TestGateway::start(&yaml);
    assert_eq!(
        post_json(gw.addr(), "/v1/items", r#"{"name":"a"}"#)
            .await
            .status,
        200
    );
    assert_eq!(
        post_json(gw.addr(), "/v1/items", r#"{"name":7}"#)
            .await
            .status,
        400
    );
    drop(gw);
    std::fs::write(
        dir.path().join("items.yaml"),
        spec("    query:\n      responses: { '200': { description: ok } }\n"),
    )
    .unwrap();
    // 3.2's `query` operations are served (with the method QUERY).
    let gw = TestGateway::start(&yaml);
    let r = send(
        gw.addr(),
        req("QUERY", "/v1/items")
            .body(Full::new(Bytes::new()))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_lines_reach_the_gateways_log() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let file = dir.path().join("gw.yaml");
    std::fs::write(
        &file,
        format!(
            "gateway: {{ accessLog: false }}\n---\napi:\n  port: {port}\n  ip: 127.0.0.1\n  flow:\n    - log: {{ message: \"Path: ${{path}} status ${{statusCode}}\", label: shop, level: WARN }}\n    - return: {{ status: 201 }}\n"
        ),
    )
    .unwrap();
    let log = dir.path().join("stderr.log");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_turnpike"))
        .args(["run", "-c"])
        .arg(&file)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the gateway did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(get(addr, "/orders/7").await.status, 201);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("status 201") || std::time::Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let _ = child.kill();
    let _ = child.wait();
    // One line for the request (no status yet), one for the response.
    assert_eq!(
        text.matches("shop Path: /orders/7 status").count(),
        2,
        "{text}"
    );
    assert!(text.contains("shop Path: /orders/7 status 201"), "{text}");
    assert!(text.contains("WARN"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_beautifier_reindents_json_and_xml_in_both_directions() {
    let backend = Backend::start().await;
    let yaml = format!(
        "gateway: {{ accessLog: false }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  path: {{ uri: /in }}\n  flow:\n    - request:\n        - beautifier: {{}}\n  target: {{ url: \"http://127.0.0.1:{}\" }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  path: {{ uri: /out }}\n  flow:\n    - beautifier: {{}}\n    - static: {{ src: '<r><a>1</a><b x=\"2\"/></r>', contentType: application/xml }}\n    - return: {{ status: 200 }}\n",
        backend.port()
    );
    let gw = TestGateway::start(&yaml);
    let r = post_json(gw.addr(), "/in", r#"{"a":[1,2],"b":{"c":"d"}}"#).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        backend.last().body,
        "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {\n    \"c\": \"d\"\n  }\n}"
    );
    // Not JSON after all: passed on unchanged.
    let r = post_json(gw.addr(), "/in", "{\"a\":").await;
    assert_eq!(r.status, 200);
    assert_eq!(backend.last().body, "{\"a\":");
    let r = get(gw.addr(), "/out").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "<r>\n  <a>1</a>\n  <b x=\"2\"/>\n</r>\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn components_are_spliced_where_they_are_referenced() {
    let backend = Backend::start().await;
    let yaml = format!(
        r#"gateway: {{ accessLog: false }}
---
components:
  stamp:
    chain:
      - request:
          - setHeader: {{ name: X-Stamp, value: "one" }}
      - $ref: '#/components/second'
  second:
    setHeader: {{ name: X-Second, value: "two" }}
  target:
    target: {{ url: "http://127.0.0.1:{}" }}
---
api:
  port: 0
  ip: 127.0.0.1
  $ref: '#/components/target'
  flow:
    - $ref: '#/components/stamp'
"#,
        backend.port()
    );
    let gw = TestGateway::start(&yaml);
    assert_eq!(get(gw.addr(), "/x").await.status, 200);
    let seen = backend.last();
    assert_eq!(seen.headers["x-stamp"], "one");
    assert_eq!(seen.headers["x-second"], "two");
    let dir = tempfile::tempdir().unwrap();
    let e = load_error(
        dir.path(),
        "components:\n  j:\n    bean: { class: a.B }\n---\napi:\n  port: 0\n  flow:\n    - $ref: '#/components/j'\n",
    );
    assert!(
        e.contains("gateway.yaml:3:5") && e.contains("Java beans"),
        "{e}"
    );
    assert!(
        e.contains("gateway.yaml:8:") && e.contains("no component named `j`"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_header_filter_keeps_what_its_first_matching_rule_says() {
    let backend = Backend::start().await;
    let yaml = format!(
        "gateway: {{ accessLog: false }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  flow:\n    - request:\n        - headerFilter:\n            - include: accept.*\n            - include: x-keep\n            - exclude: .*\n  target: {{ url: \"http://127.0.0.1:{}\" }}\n",
        backend.port()
    );
    let gw = TestGateway::start(&yaml);
    let r = get_with(
        gw.addr(),
        "/h",
        &[
            ("accept", "text/plain"),
            ("x-keep", "1"),
            ("x-drop", "2"),
            ("cookie", "c=1"),
        ],
    )
    .await;
    assert_eq!(r.status, 200);
    let seen = backend.last().headers;
    assert_eq!(seen["accept"], "text/plain");
    assert_eq!(seen["x-keep"], "1");
    assert!(
        seen.get("x-drop").is_none() && seen.get("cookie").is_none(),
        "{seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soap_body_answers_an_envelope_of_its_version() {
    let yaml = "gateway: { accessLog: false }\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  flow:\n    - response:\n        - soapBody:\n            src: '<c:getCityResponse xmlns:c=\"https://predic8.de/cities\"><c:name>${query.city}</c:name></c:getCityResponse>'\n    - return: { status: 200 }\n";
    let gw = TestGateway::start(yaml);
    let r = get(gw.addr(), "/?city=Bonn").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type").unwrap(), "text/xml; charset=utf-8");
    assert_eq!(
        r.text(),
        "<s11:Envelope xmlns:s11=\"http://schemas.xmlsoap.org/soap/envelope/\"><s11:Body><c:getCityResponse xmlns:c=\"https://predic8.de/cities\"><c:name>Bonn</c:name></c:getCityResponse></s11:Body></s11:Envelope>"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttle_delays_and_limits_requests_in_progress() {
    let yaml = "gateway: { accessLog: false, threads: 2 }\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  path: { uri: /one }\n  flow:\n    - throttle: { maxThreads: 1, busyDelay: 100 }\n    - return: { status: 200, delay: 600ms }\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  path: { uri: /slow }\n  flow:\n    - throttle: { delay: 300 }\n    - return: { status: 200 }\n";
    let gw = TestGateway::start(yaml);
    let addr = gw.addr();
    let start = std::time::Instant::now();
    assert_eq!(get(addr, "/slow").await.status, 200);
    assert!(start.elapsed() >= std::time::Duration::from_millis(300));
    let first = tokio::spawn(async move { get(addr, "/one").await.status });
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    let second = get(addr, "/one").await;
    assert_eq!(second.status, 503, "{}", second.text());
    assert_eq!(second.json()["type"], "urn:turnpike:problem:throttled");
    assert_eq!(second.header("retry-after").unwrap(), "1");
    assert_eq!(first.await.unwrap(), 200);
    // The slot was given back when the first exchange ended.
    assert_eq!(get(addr, "/one").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_rewrite_moves_the_base_path_and_the_published_address() {
    let spec = format!(
        "{}/../../../shared/data/openapi/fruitshop-v2-2-0.oas.yml",
        env!("CARGO_MANIFEST_DIR")
    );
    let yaml = format!(
        "gateway: {{ accessLog: false }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  openapi:\n    - location: \"{spec}\"\n      mock: true\n      rewrite: {{ basePath: /boutique, host: shop.example.com, port: 8080 }}\n"
    );
    let gw = TestGateway::start(&yaml);
    assert_eq!(get(gw.addr(), "/boutique/products").await.status, 200);
    assert_eq!(get(gw.addr(), "/shop/v2/products").await.status, 404);
    let list = get(gw.addr(), "/api-docs").await.json();
    let id = list[0]["id"].as_str().unwrap().to_owned();
    let doc = get(gw.addr(), &format!("/api-docs/{id}.json")).await.json();
    assert_eq!(
        doc["servers"][0]["url"],
        "http://shop.example.com:8080/boutique"
    );
    let dir = tempfile::tempdir().unwrap();
    let e = load_error(
        dir.path(),
        &format!("api:\n  port: 0\n  openapi:\n    - location: \"{spec}\"\n      mock: true\n      rewrite: {{ port: 443 }}\n"),
    );
    assert!(
        e.contains("openapi[0].rewrite.host") && e.contains("names a host"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_test_routes_by_the_request_head_in_file_order() {
    let yaml = r#"gateway: { accessLog: false }
---
api:
  port: 0
  ip: 127.0.0.1
  test: header.SOAPAction == '"getCity"'
  flow:
    - static: { src: city }
    - return: { status: 200 }
---
api:
  port: 0
  ip: 127.0.0.1
  test: 'request.headers["x-tier"] == "gold" && request.method == "POST"'
  flow:
    - static: { src: gold }
    - return: { status: 200 }
---
api:
  port: 0
  ip: 127.0.0.1
  flow:
    - static: { src: other }
    - return: { status: 200 }
"#;
    let gw = TestGateway::start(yaml);
    let a = gw.addr();
    assert_eq!(
        get_with(a, "/", &[("soapaction", "\"getCity\"")])
            .await
            .text(),
        "city"
    );
    assert_eq!(
        get_with(a, "/", &[("soapaction", "\"other\"")])
            .await
            .text(),
        "other"
    );
    let gold = send(
        a,
        req("POST", "/")
            .header("x-tier", "gold")
            .body(Full::new(Bytes::new()))
            .unwrap(),
    )
    .await;
    assert_eq!(gold.text(), "gold");
    assert_eq!(
        get_with(a, "/", &[("x-tier", "gold")]).await.text(),
        "other"
    );
    let dir = tempfile::tempdir().unwrap();
    let e = load_error(
        dir.path(),
        "api:\n  port: 0\n  test: $.express[\n  language: jsonpath\n  flow: [ { return: {} } ]\n",
    );
    assert!(e.contains("api.test"), "{e}");
    let e = load_error(
        dir.path(),
        "api:\n  port: 0\n  test: response.status == 200\n  flow: [ { return: {} } ]\n",
    );
    assert!(e.contains("`response` is not known yet"), "{e}");
    let e = load_error(
        dir.path(),
        "api:\n  port: 0\n  flow: [ { return: {} } ]\n---\napi:\n  port: 0\n  flow: [ { return: {} } ]\n",
    );
    assert!(e.contains("takes the same requests"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membranes_shapes_of_static_pretty_and_soap_proxy_path() {
    let wsdl = format!(
        "{}/../../../shared/data/wsdl/cities.wsdl",
        env!("CARGO_MANIFEST_DIR")
    );
    let yaml = format!(
        "gateway: {{ accessLog: false }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  path: {{ uri: /p }}\n  flow:\n    - static: {{ src: '{{\"a\":[1,2]}}', contentType: application/json, pretty: true }}\n    - return: {{ status: 200 }}\n---\nsoapProxy:\n  port: 0\n  ip: 127.0.0.1\n  wsdl: \"{wsdl}\"\n  path: {{ uri: /my-cities }}\n"
    );
    let gw = TestGateway::start(&yaml);
    assert_eq!(
        get(gw.addr(), "/p").await.text(),
        "{\n  \"a\": [\n    1,\n    2\n  ]\n}"
    );
    let r = get(gw.addr(), "/my-cities?wsdl").await;
    assert_eq!(r.status, 200);
    assert!(r.text().contains("definitions"), "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_control_reads_membranes_ordered_rules() {
    let yaml = "gateway: { accessLog: false }\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  path: { uri: /in }\n  flow:\n    - accessControl:\n        - deny: 127.0.0.2\n        - allow: localhost\n    - return: { status: 200 }\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  path: { uri: /out }\n  flow:\n    - accessControl:\n        - deny: ^localhost$\n        - allow: 0.0.0.0/0\n    - return: { status: 200 }\n";
    let gw = TestGateway::start(yaml);
    assert_eq!(get(gw.addr(), "/in").await.status, 200);
    let r = get(gw.addr(), "/out").await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["type"], "urn:turnpike:problem:ip-denied");
}

async fn post_as(addr: std::net::SocketAddr, path: &str, content_type: &str, body: &str) -> Reply {
    send(
        addr,
        req("POST", path)
            .header("content-type", content_type)
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn properties_carry_xpath_and_jsonpath_values_to_templates_and_conditions() {
    // The shapes of Membrane's templating/json and rest2soap-template examples: properties
    // set from the body in one policy, read by a template and a condition later.
    let backend = StaticServer::start(
        "<s:Envelope xmlns:s=\"http://schemas.xmlsoap.org/soap/envelope/\"><s:Body><getCityResponse><country>Germany</country><population>327000</population></getCityResponse></s:Body></s:Envelope>",
    )
    .await;
    let gw = TestGateway::start(&format!(
        r#"api:
  port: 0
  ip: 127.0.0.1
  path:
    uri: /city
  flow:
    # Response flows run last to first, as in Membrane.
    - response:
        - template:
            contentType: application/json
            src: '{{"country":"${{property.country}}","population":${{property.population}}}}'
        - if:
            test: property.country == 'Germany'
            flow:
              - setHeader:
                  name: X-Country
                  value: ${{property.country}}
        - setProperty:
            name: population
            value: ${{xpath('//population')}}
        - setProperty:
            name: country
            value: ${{//country}}
            language: xpath
  target:
    url: http://{}
---
api:
  port: 0
  ip: 127.0.0.1
  path:
    uri: /items
  flow:
    - request:
        - setProperty:
            name: items
            value: ${{$.items}}
            language: jsonpath
        - setProperty:
            name: id
            value: ${{$.id}}
            language: jsonpath
        - template:
            contentType: application/json
            src: '{{"id":"${{properties[''id'']}}","items":${{property.items}},"first":${{property.items.0}}}}'
        - return:
            status: 200
"#,
        backend.addr
    ));
    let addr = gw.addr();
    let r = get(addr, "/city").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json(),
        serde_json::json!({"country": "Germany", "population": 327000})
    );
    assert_eq!(r.header("x-country"), Some("Germany"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    let r = post_json(addr, "/items", r#"{"id":7,"items":[{"n":1},{"n":2}]}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json(),
        serde_json::json!({"id": "7", "items": [{"n": 1}, {"n": 2}], "first": {"n": 1}})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xpath_jsonpath_and_content_type_tests_choose_the_branch() {
    // Membrane's tutorials/xml/30-XPath, advanced/70-Choose and the custom error messages.
    let gw = TestGateway::start(
        r#"api:
  port: 0
  ip: 127.0.0.1
  flow:
    - request:
        - if:
            test: //order[@express='yes']
            language: xpath
            flow:
              - return:
                  status: 201
        - if:
            test: not(/s11:Envelope)
            language: XPath
            xmlConfig:
              namespaces:
                - prefix: s11
                  uri: http://schemas.xmlsoap.org/soap/envelope/
            flow:
              - return:
                  status: 400
        - choose:
            - case:
                test: isJSON()
                flow:
                  - if:
                      test: $.animals[?(@.species == 'cat')]
                      language: jsonpath
                      flow:
                        - return:
                            status: 202
            - case:
                test: headers['X-Bar'] != null
                flow:
                  - return:
                      status: 203
            - otherwise:
                - return:
                    status: 204
        - return:
            status: 200
"#,
    );
    let addr = gw.addr();
    let xml = "application/xml";
    assert_eq!(
        post_as(addr, "/", xml, "<order express='yes'/>")
            .await
            .status,
        201
    );
    assert_eq!(
        post_as(addr, "/", xml, "<order express='no'/>")
            .await
            .status,
        400
    );
    let envelope = r#"<s11:Envelope xmlns:s11="http://schemas.xmlsoap.org/soap/envelope/"/>"#;
    // An envelope: not a non-envelope, not JSON, no X-Bar.
    assert_eq!(post_as(addr, "/", xml, envelope).await.status, 204);
    let cats = r#"{"animals":[{"species":"cat"}]}"#;
    assert_eq!(post_json(addr, "/", cats).await.status, 202);
    let dogs = r#"{"animals":[{"species":"dog"}]}"#;
    // JSON without a cat: the case holds, its `if` does not, and the flow goes on.
    assert_eq!(post_json(addr, "/", dogs).await.status, 200);
    let bar = send(
        addr,
        req("POST", "/")
            .header("x-bar", "1")
            .body(Full::new(Bytes::from_static(b"text")))
            .unwrap(),
    )
    .await;
    assert_eq!(bar.status, 203);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_policy_writes_a_line_per_exchange_with_its_fields() {
    // Membrane's tutorials/logging/31-Access-Log-Custom-Fields, with the lines in a file.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let gw = TestGateway::start(&format!(
        r#"global:
  - accessLog:
      dateTimePattern: dd/MMM/yyyy:HH:mm:ss Z
      output: {}
      additionalPatternList:
        - name: contentType
          expression: headers['Content-Type']
        - name: orderId
          expression: jsonPath('$.orderId')
        - name: api
          expression: exchange.proxy.name
        - name: type
          expression: response?.header['Content-Type']
---
api:
  name: orders
  port: 0
  ip: 127.0.0.1
  flow:
    - if:
        test: method == 'DELETE'
        flow:
          - return:
              status: 405
    - response:
        - static:
            src: '{{"ok":true}}'
            contentType: application/json
    - return:
        status: 200
"#,
        log.display()
    ));
    let addr = gw.addr();
    assert_eq!(
        post_json(addr, "/shop/orders", r#"{"orderId":"A-1042"}"#)
            .await
            .status,
        200
    );
    assert_eq!(
        send(
            addr,
            req("DELETE", "/shop/orders/1")
                .body(Full::new(Bytes::new()))
                .unwrap()
        )
        .await
        .status,
        405
    );
    // The lines are written by the log writer's thread, within 50 ms.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.lines().count() >= 2 || std::time::Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].starts_with("127.0.0.1 - - ["), "{}", lines[0]);
    assert!(
        lines[0].ends_with(
            "\"POST /shop/orders HTTP/1.1\" 200 11 contentType=\"application/json\" orderId=\"A-1042\" api=\"orders\" type=\"application/json\""
        ),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].contains("\"DELETE /shop/orders/1 HTTP/1.1\" 405 "),
        "{}",
        lines[1]
    );
    assert!(lines[1].contains("orderId=\"null\""), "{}", lines[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membranes_env_placeholders_and_argon2_passwords() {
    // tutorials/advanced/100-Environment-Variables and security/10-Basic-Authentication.
    let port = free_port();
    std::env::set_var("TURNPIKE_TEST_PORT", port.to_string());
    let gw = TestGateway::start(
        r##"api:
  port: "#{env.TURNPIKE_TEST_PORT}"
  ip: 127.0.0.1
  flow:
    - basicAuthentication:
        users:
          - username: bob
            password: "$argon2id$v=19$m=65536,t=3,p=1$gJkRz2WT5QcamKhhhKTH0Q$RuP5LUCTiEiO4W4dwrJqgpd+Phrk77n1QcdjIcB2zas"
    - static:
        src: "Hello from port #{env.TURNPIKE_TEST_PORT}"
    - return: {}
"##,
    );
    let addr = gw.addr_of(port);
    let auth = |pw: &str| {
        use base64::Engine;
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("bob:{pw}"))
        )
    };
    let ok = get_with(addr, "/", &[("authorization", &auth("abc123"))]).await;
    assert_eq!(ok.status, 200);
    assert_eq!(ok.text(), format!("Hello from port {port}"));
    let bad = get_with(addr, "/", &[("authorization", &auth("abc124"))]).await;
    assert_eq!(bad.status, 401);
    let dir = tempfile::tempdir().unwrap();
    let e = load_error(
        dir.path(),
        "api:\n  port: \"#{env.TURNPIKE_NOT_SET_ANYWHERE}\"\n  flow:\n    - return: {}\n",
    );
    assert!(e.contains("TURNPIKE_NOT_SET_ANYWHERE"), "{e}");
}

/// The gateway as its own process (the admin service is one per process), on `port`.
struct GatewayProcess {
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl GatewayProcess {
    fn start(yaml: &str, port: u16) -> GatewayProcess {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("gw.yaml");
        std::fs::write(&file, yaml).unwrap();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_turnpike"))
            .args(["run", "-c"])
            .arg(&file)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "the gateway did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        GatewayProcess { child, _dir: dir }
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_console_answers_on_an_apis_port_behind_its_flow() {
    // Membrane's tutorials/getting-started/70-Admin-Web-Console.
    let (console, other) = (free_port(), free_port());
    let _gw = GatewayProcess::start(
        &format!(
            r#"api:
  port: {console}
  ip: 127.0.0.1
  flow:
    - basicAuthentication:
        users:
          - username: admin
            password: admin
    - adminConsole:
        readOnly: true
---
api:
  port: {other}
  ip: 127.0.0.1
  path:
    uri: /jokes
  flow:
    - return:
        status: 204
"#
        ),
        console,
    );
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], console));
    let admin = [("authorization", "Basic YWRtaW46YWRtaW4=")];
    assert_eq!(
        get(addr, "/console").await.status,
        401,
        "the flow runs first"
    );
    let root = get_with(addr, "/", &admin).await;
    assert_eq!(root.status, 302);
    assert_eq!(root.header("location"), Some("/console"));
    let page = get_with(addr, "/console", &admin).await;
    assert_eq!(page.status, 200);
    assert!(page.text().contains("<html"), "{}", page.text());
    let status = get_with(addr, "/admin/v1/status", &admin).await;
    assert_eq!(status.status, 200);
    let listeners = status.json()["listeners"].to_string();
    assert!(listeners.contains(&format!(":{other}")), "{listeners}");
    let reload = send(
        addr,
        req("POST", "/admin/v1/reload")
            .header("authorization", "Basic YWRtaW46YWRtaW4=")
            .body(Full::new(Bytes::new()))
            .unwrap(),
    )
    .await;
    assert_eq!(reload.status, 405, "read-only");
    assert_eq!(reload.header("allow"), Some("GET, HEAD"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_urls_and_templates_speak_membranes_languages() {
    // tutorials/transformation/10-POST-to-GET, getting-started/100-SetBody and 110-Template,
    // and `path` written as a string (examples/mcp).
    let backend = Backend::start().await;
    let gw = TestGateway::start(&format!(
        r#"api:
  port: 0
  ip: 127.0.0.1
  path: /search
  target:
    method: GET
    url: http://{}/products?sort=${{$.sort}}&limit=${{$.limit}}
    language: jsonpath
---
api:
  port: 0
  ip: 127.0.0.1
  path:
    uri: /spel
  flow:
    - request:
      - setBody:
          value: "Path: ${{path}} Headers: ${{header.keySet()}} Scopes: ${{scopes()}}"
          language: spel
      - return:
          status: 200
---
api:
  port: 0
  ip: 127.0.0.1
  path: /now
  flow:
    - response:
      - template:
          src: "It is ${{new Date()}}"
    - return:
        status: 200
"#,
        backend.addr
    ));
    let addr = gw.addr();
    let r = post_json(addr, "/search", r#"{"sort":"name","limit":2}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = backend.last();
    assert_eq!(seen.method, "GET");
    assert_eq!(seen.uri, "/products?sort=name&limit=2");
    let r = get_with(addr, "/spel", &[("x-a", "1")]).await;
    assert!(
        r.text().starts_with("Path: /spel Headers: ["),
        "{}",
        r.text()
    );
    assert!(r.text().contains("\"x-a\""), "{}", r.text());
    assert!(r.text().ends_with("Scopes: []"), "{}", r.text());
    let r = get(addr, "/now").await;
    assert!(
        r.text().starts_with("It is ") && r.text().contains(" UTC 20"),
        "{}",
        r.text()
    );
    let dir = tempfile::tempdir().unwrap();
    let e = load_error(
        dir.path(),
        "api:\n  port: 0\n  target:\n    url: http://127.0.0.1:1/a\n    language: jsonpath\n",
    );
    assert!(e.contains("no `${…}` expression"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wsdl2openapi_without_a_target_calls_the_wsdls_address_with_tags_and_statuses() {
    // tutorials/wsdl-to-openapi/20-WSDL-to-OpenAPI-REST and 40-WSDL-Faults: no `target:`, the
    // service address of the WSDL; `tag` and `status` per operation.
    let backend = StaticServer::start(
        r#"<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/"><s:Body><p:createPartnerResponse xmlns:p="http://example.com/partner"><id>7</id></p:createPartnerResponse></s:Body></s:Envelope>"#,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/data/wsdl/partner.wsdl"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("partner.wsdl"),
        text.replace(
            "https://example.com/services/PartnerService",
            &format!("http://{}/services/PartnerService", backend.addr),
        ),
    )
    .unwrap();
    let file = dir.path().join("gateway.yaml");
    std::fs::write(
        &file,
        r#"api:
  port: 0
  ip: 127.0.0.1
  path:
    uri: /crm
  flow:
    - wsdl2openapi:
        wsdl: partner.wsdl
        description: Partners over REST
        version: 2.1.0
        operations:
          createPartner:
            method: POST
            path: /partners
            status: 201
            tag: Partner
"#,
    )
    .unwrap();
    let gw = turnpike::start(vec![file]).unwrap();
    let addr = gw.listeners()[0].1;
    let r = send(
        addr,
        req("POST", "/crm/partners")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(
                br#"{"name":"Alice","birthDate":"1990-01-02","kind":"PERSON","address":{"street":"Main","houseNumber":"1","postalCode":"53111","city":"Bonn","country":"DE"}}"#,
            )))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.json(), serde_json::json!({"id": 7}));
    assert_eq!(backend.hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    let doc = get(addr, "/crm/api-docs").await.json();
    assert_eq!(doc["info"]["description"], "Partners over REST");
    assert_eq!(doc["info"]["version"], "2.1.0");
    let op = &doc["paths"]["/partners"]["post"];
    assert_eq!(op["tags"], serde_json::json!(["Partner"]));
    assert!(op["responses"]["201"].is_object(), "{op}");
    gw.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apis_route_on_xpath_and_jsonpath_tests_of_the_body() {
    // tutorials/routing/30-Content-Based-Router and soap/70-Routing-by-Wrapper-Element, with the
    // namespace prefix from an `xmlConfig` component.
    let gw = TestGateway::start(
        r#"components:
  ns:
    xmlConfig:
      namespaces:
        - prefix: c
          uri: https://predic8.de/cities
---
api:
  name: Express Orders
  port: 0
  ip: 127.0.0.1
  test: $.express
  language: jsonpath
  flow:
    - request:
        - static:
            src: Express order received.
        - return:
            status: 200
---
api:
  name: City
  port: 0
  ip: 127.0.0.1
  test: //c:getCity
  language: xpath
  flow:
    - setBody:
        value: getCity
    - return:
        status: 200
---
api:
  name: Normal Orders
  port: 0
  ip: 127.0.0.1
  flow:
    - request:
        - static:
            src: Normal order received.
        - return:
            status: 200
"#,
    );
    let addr = gw.addr();
    let r = post_json(addr, "/", r#"{"express":true}"#).await;
    assert_eq!(r.text(), "Express order received.");
    let r = post_json(addr, "/", r#"{"express":false}"#).await;
    assert_eq!(r.text(), "Normal order received.");
    let city = r#"<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/"><s:Body><c:getCity xmlns:c="https://predic8.de/cities"><name>Bonn</name></c:getCity></s:Body></s:Envelope>"#;
    let r = post_as(addr, "/", "text/xml", city).await;
    assert_eq!(r.text(), "getCity");
    let other = city.replace("https://predic8.de/cities", "urn:other");
    let r = post_as(addr, "/", "text/xml", &other).await;
    assert_eq!(r.text(), "Normal order received.");
    let r = get(addr, "/").await;
    assert_eq!(r.text(), "Normal order received.");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_apis_run_in_process_for_targets_and_destinations() {
    // tutorials/routing/20-Internal-API and examples/routing-traffic/content-based-router.
    let backend = Backend::start().await;
    let gw = TestGateway::start(&format!(
        r#"api:
  port: 0
  ip: 127.0.0.1
  path: /hello
  flow:
    - response:
        - setHeader:
            name: X-Outer
            value: seen
  target:
    url: internal://api-a
---
internal:
  name: api-a
  flow:
    - request:
        - setHeader:
            name: X-Inner
            value: a
        - static:
            src: Hello from the internal API
        - return:
            status: 200
---
api:
  port: 0
  ip: 127.0.0.1
  path: /orders
  flow:
    - request:
        - if:
            test: //order
            language: xpath
            flow:
              - destination:
                  url: internal://order
        - if:
            test: //order[@express='yes']
            language: xpath
            flow:
              - destination:
                  url: internal://express
---
internal:
  name: order
  flow:
    - static:
        src: Normal order received.
    - return:
        status: 200
---
internal:
  name: express
  target:
    url: internal://backend
---
api:
  name: backend
  port: 0
  ip: 127.0.0.1
  path: /never
  target:
    url: http://{}
---
internal:
  name: loop
  target:
    url: internal://loop
---
api:
  port: 0
  ip: 127.0.0.1
  path: /loop
  target:
    url: internal://loop
"#,
        backend.addr
    ));
    let addr = gw.addr();
    let r = get(addr, "/hello").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "Hello from the internal API");
    assert_eq!(r.header("x-outer"), Some("seen"));
    let r = post_as(addr, "/orders", "application/xml", "<order express='no'/>").await;
    assert_eq!(r.text(), "Normal order received.");
    // Express: the last destination wins, and that internal API forwards to a named API,
    // whose target is a backend.
    let r = post_as(addr, "/orders", "application/xml", "<order express='yes'/>").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(backend.last().uri, "/orders");
    assert_eq!(backend.last().body, "<order express='yes'/>");
    let r = post_as(addr, "/orders", "application/xml", "<invoice/>").await;
    assert_eq!(r.status, 500);
    assert_eq!(r.json()["type"], "urn:turnpike:problem:no-target");
    let r = get(addr, "/loop").await;
    assert_eq!(r.status, 500);
    let dir = tempfile::tempdir().unwrap();
    let e = load_error(
        dir.path(),
        "api:\n  port: 0\n  target:\n    url: internal://nope\n",
    );
    assert!(e.contains("no API is named `nope`"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn correlation_ids_are_kept_or_made_and_passed_on() {
    // tutorials/operation/10-Correlation-Id and 20-Propagation.
    let backend = Backend::start().await;
    let gw = TestGateway::start(&format!(
        r#"global:
  - correlationId:
      header: X-Trace-Id
      default: "req-${{T(java.util.UUID).randomUUID()}}"
---
api:
  port: 0
  ip: 127.0.0.1
  flow:
    - response:
        - setHeader:
            name: X-Seen
            value: "${{request.header['X-Trace-Id']}}|${{property.correlationId}}"
  target:
    url: http://{}
"#,
        backend.addr
    ));
    let addr = gw.addr();
    let r = get(addr, "/a").await;
    let sent = backend.last().headers["x-trace-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(sent.starts_with("req-") && sent.len() == 40, "{sent}");
    assert_eq!(r.header("x-seen"), Some(format!("{sent}|{sent}").as_str()));
    let r = get_with(addr, "/b", &[("x-trace-id", "1234-5678")]).await;
    assert_eq!(backend.last().headers["x-trace-id"], "1234-5678");
    assert_eq!(r.header("x-seen"), Some("1234-5678|1234-5678"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_body_set_by_a_policy_is_sent_with_its_own_length() {
    // The backend announces 13 bytes; the beautifier makes more of them.
    let backend = StaticServer::start(r#"{"a":1,"b":2}"#).await;
    let gw = TestGateway::start(&format!(
        "api:\n  port: 0\n  ip: 127.0.0.1\n  flow:\n    - response:\n        - beautifier: {{}}\n        - setHeader: {{ name: Content-Type, value: application/json }}\n  target:\n    url: http://{}\n",
        backend.addr
    ));
    let r = get(gw.addr(), "/").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "{\n  \"a\": 1,\n  \"b\": 2\n}");
    assert_eq!(r.header("content-length"), Some("22"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membranes_other_spellings_of_settings_load() {
    // router/conf/apis.yaml (`specs:`, `user:` entries), examples/openapi/validation-security
    // (`keys:` store, `header: {}`), `return:` without settings, tutorials/advanced/40-Redirects.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("spec.yaml"),
        "openapi: 3.0.3\ninfo: { title: t, version: '1' }\nservers: [ { url: /shop } ]\npaths:\n  /items:\n    get:\n      responses: { '200': { description: ok } }\n",
    )
    .unwrap();
    let file = dir.path().join("gateway.yaml");
    std::fs::write(
        &file,
        r#"api:
  port: 0
  ip: 127.0.0.1
  specs:
    - openapi:
        location: spec.yaml
        validateRequests: true
        mock: true
---
api:
  port: 0
  ip: 127.0.0.1
  path: /admin
  flow:
    - basicAuthentication:
        users:
          - user:
              username: admin
              password: admin
    - apiKey:
        stores:
          - keys:
              - secret:
                  value: demo-key
        extractors:
          - header: {}
    - return:
---
api:
  port: 0
  ip: 127.0.0.1
  path: /fruits
  flow:
    - request:
      - rewriter:
          - from: "/fruits/(.*)"
            to: "https://shop.example.com/products/$1"
            do: redirect_permanent
"#,
    )
    .unwrap();
    let gw = turnpike::start(vec![file]).unwrap();
    let addr = gw.listeners()[0].1;
    assert_eq!(get(addr, "/shop/items").await.status, 200);
    assert_eq!(get(addr, "/shop/nothing").await.status, 404);
    let admin = [
        ("authorization", "Basic YWRtaW46YWRtaW4="),
        ("x-api-key", "demo-key"),
    ];
    assert_eq!(get_with(addr, "/admin", &admin).await.status, 200);
    assert_eq!(
        get_with(addr, "/admin", &admin[..1]).await.status,
        401,
        "no key"
    );
    let r = get(addr, "/fruits/7").await;
    assert_eq!(r.status, 301);
    assert_eq!(
        r.header("location"),
        Some("https://shop.example.com/products/7")
    );
    gw.shutdown();
}

/// Sends `raw` on a new connection to `addr` and reads until `until` appears in the answer.
async fn raw_exchange(stream: &mut tokio::net::TcpStream, raw: &str, until: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(raw.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !String::from_utf8_lossy(&got).contains(until) {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            String::from_utf8_lossy(&got)
        );
        let n = tokio::time::timeout(std::time::Duration::from_secs(5), stream.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_proxy_forwards_absolute_uris_and_tunnels_connect() {
    // tutorials/forward-proxy/10-Forward-Proxy and 30-Interceptor.
    let origin = Backend::start().await;
    let proxy = free_port();
    let gw = TestGateway::start(&format!(
        r#"proxy:
  port: {proxy}
  ip: 127.0.0.1
  destinations:
    allow: [ {{ cidr: 127.0.0.1 }} ]
  flow:
    - setHeader:
        name: X-Added-By
        value: Membrane
---
api:
  port: 0
  ip: 127.0.0.1
  flow:
    - return:
        status: 204
"#
    ));
    let addr = gw.addr_of(proxy);
    let o = origin.addr;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let r = raw_exchange(
        &mut s,
        &format!(
            "GET http://{o}/shop?q=1 HTTP/1.1\r\nHost: {o}\r\nProxy-Connection: keep-alive\r\n\r\n"
        ),
        "\r\n\r\n",
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let seen = origin.last();
    assert_eq!(seen.uri, "/shop?q=1", "origin form to the origin");
    assert_eq!(seen.headers["x-added-by"], "Membrane");
    assert!(!seen.headers.contains_key("proxy-connection"));
    // CONNECT: a tunnel, through which the client speaks to the origin itself.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let r = raw_exchange(
        &mut s,
        &format!("CONNECT {o} HTTP/1.1\r\nHost: {o}\r\n\r\n"),
        "\r\n\r\n",
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let r = raw_exchange(
        &mut s,
        &format!("GET /tunnelled HTTP/1.1\r\nHost: {o}\r\n\r\n"),
        "\r\n\r\n",
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert_eq!(origin.last().uri, "/tunnelled");
    assert!(
        !origin.last().headers.contains_key("x-added-by"),
        "the tunnel is opaque"
    );
    // An origin-form request is not for a proxy; a dead origin is 502.
    assert_eq!(get(addr, "/").await.status, 400);
    let dead = free_port();
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let r = raw_exchange(
        &mut s,
        &format!("GET http://127.0.0.1:{dead}/ HTTP/1.1\r\nHost: 127.0.0.1:{dead}\r\n\r\n"),
        "\r\n\r\n",
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 502"), "{r}");
    // The port is the proxy's alone.
    let dir = tempfile::tempdir().unwrap();
    let e = load_error(
        dir.path(),
        "proxy:\n  port: 3128\n---\napi:\n  port: 3128\n  ip: 127.0.0.1\n  path: /x\n  flow: [ { return: {} } ]\n",
    );
    assert!(e.contains("has its port to itself"), "{e}");
}

/// A forward proxy is not an open door into this machine: without rules it binds 127.0.0.1
/// and refuses loopback, private and link-local destinations, by address or by a name that
/// resolves to one (`localhost`), and its own ports; rules allow and deny names, ranges and
/// ports, checked on every address a name resolves to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_proxy_reaches_only_what_its_rules_allow() {
    let origin = Backend::start().await;
    let o = origin.addr;
    let (open, ruled) = (free_port(), free_port());
    let gw = TestGateway::start(&format!(
        r#"proxy:
  port: {open}
---
proxy:
  port: {ruled}
  ip: 127.0.0.1
  destinations:
    allow:
      - cidr: 127.0.0.0/8
        ports: [{port}]
    deny:
      - host: denied.localhost
"#,
        port = o.port()
    ));
    let ask = |proxy: u16, target: String| async move {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", proxy))
            .await
            .unwrap();
        raw_exchange(
            &mut s,
            &format!("GET http://{target}/x HTTP/1.1\r\nHost: {target}\r\n\r\n"),
            "\r\n\r\n",
        )
        .await
    };
    // Without rules: bound to loopback, and loopback, private, link-local and own ports refused.
    assert!(gw
        .gw()
        .listeners()
        .iter()
        .any(|(c, _)| c.port() == open && c.ip().is_loopback()));
    for target in [
        o.to_string(),
        format!("localhost:{}", o.port()),
        "10.0.0.1:80".to_owned(),
        "169.254.169.254".to_owned(),
        format!("[::1]:{}", o.port()),
        format!("127.0.0.1:{ruled}"),
    ] {
        let r = ask(open, target.clone()).await;
        assert!(r.starts_with("HTTP/1.1 403"), "{target}: {r}");
    }
    assert_eq!(origin.count(), 0);
    // With rules: the allowed range and port pass, by address or by name; others do not.
    let r = ask(ruled, o.to_string()).await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let r = ask(ruled, format!("localhost:{}", o.port())).await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let r = ask(ruled, format!("127.0.0.1:{ruled}")).await;
    assert!(r.starts_with("HTTP/1.1 403"), "another port: {r}");
    let r = ask(ruled, format!("denied.localhost:{}", o.port())).await;
    assert!(r.starts_with("HTTP/1.1 403"), "a denied name: {r}");
    assert_eq!(origin.count(), 2);
}
