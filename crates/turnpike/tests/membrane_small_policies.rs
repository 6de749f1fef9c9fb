//! Membrane's small policies through sockets, configured in the shapes of Membrane's examples:
//! `replace`, `paddingHeader`, `greaser`, `formValidation`, `sqlInjectionProtection`, `limit`,
//! `setCookies` with cookies in conditions, `json` in SpEL tests, JSON templates, `abort:`
//! flows, `sseDemoStream` behind a proxying API, and `webServer`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use http_body_util::Full;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn post(addr: SocketAddr, path: &str, content_type: &str, body: &str) -> Reply {
    send(
        addr,
        req("POST", path)
            .header("content-type", content_type)
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap(),
    )
    .await
}

/// What `turnpike validate` prints for `yaml` (written as `apis.yaml`), which must not load.
fn validate_errors(yaml: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("apis.yaml");
    std::fs::write(&f, yaml).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_turnpike"))
        .args(["validate", "-c"])
        .arg(&f)
        .output()
        .unwrap();
    assert!(!out.status.success(), "the configuration loaded:\n{yaml}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Sends `payload` on a new connection and reads until the gateway closes it or `within`
/// passes.
async fn raw(addr: SocketAddr, payload: &[u8], within: Duration) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(payload).await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    let end = Instant::now() + within;
    loop {
        match tokio::time::timeout_at(end.into(), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => {
                out.extend_from_slice(&buf[..n]);
                if out.windows(4).any(|w| w == b"\r\n\r\n") && out.ends_with(b"}") {
                    break;
                }
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A chunked POST of `chunks` chunks of `size` bytes each.
fn chunked_post(path: &str, content_type: &str, chunks: usize, size: usize) -> Vec<u8> {
    let mut p = format!(
        "POST {path} HTTP/1.1\r\nHost: test.local\r\nContent-Type: {content_type}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    .into_bytes();
    for _ in 0..chunks {
        p.extend_from_slice(format!("{size:x}\r\n").as_bytes());
        p.extend(std::iter::repeat_n(b'1', size));
        p.extend_from_slice(b"\r\n");
    }
    p.extend_from_slice(b"0\r\n\r\n");
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_sets_the_selected_json_values_as_membranes_example_does() {
    // `examples/message-transformation/replace/apis.yaml`.
    let gw = TestGateway::start(
        r#"api:
  port: 0
  ip: 127.0.0.1
  flow:
    - replace:
        jsonPath: $.user.name
        with: Bob
    - return: {}
"#,
    );
    let r = post(
        gw.addr(),
        "/",
        "application/json",
        r#"{"user": {"name": "Alice", "age": 30}, "id": 1}"#,
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), r#"{"user":{"name":"Bob","age":30},"id":1}"#);
    assert_eq!(r.header("content-length"), Some("39"));
    // No such member: unchanged, byte for byte.
    let r = post(
        gw.addr(),
        "/",
        "application/json",
        r#"{"shop": {"name": "x"}}"#,
    )
    .await;
    assert_eq!(r.text(), r#"{"shop": {"name": "x"}}"#);
    // Not JSON by its type: unchanged.
    let r = post(gw.addr(), "/", "text/plain", r#"{"user":{"name":"Alice"}}"#).await;
    assert_eq!(r.text(), r#"{"user":{"name":"Alice"}}"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_changes_the_backends_response_and_xml() {
    let backend = Backend::start().await;
    let yaml = format!(
        r#"gateway: {{ accessLog: false }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /json }}
  flow:
    - replace:
        expression: $.items[*].price
        language: jsonpath
        with: "0"
    - response:
        - setHeader: {{ name: Content-Type, value: application/json }}
  target: {{ url: "http://127.0.0.1:{}" }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /xml }}
  flow:
    - request:
        - replace:
            expression: //order/@customer | //note
            language: xpath
            with: anonymous & co
    - return: {{}}
"#,
        backend.port()
    );
    let gw = TestGateway::start(&yaml);
    // The request is text, so the backend gets it as sent; its echo is JSON by the time the
    // replace runs in the response phase.
    let sent = r#"{"items":[{"price":10,"n":"a"},{"price":2.5}]}"#;
    let r = post(gw.addr(), "/json", "text/plain", sent).await;
    assert_eq!(r.status, 200);
    assert_eq!(backend.last().body, sent);
    assert_eq!(
        r.text(),
        r#"{"items":[{"price":"0","n":"a"},{"price":"0"}]}"#
    );
    let r = post(
        gw.addr(),
        "/xml",
        "application/xml",
        r#"<order customer="Ann"><note>call first</note><item/></order>"#,
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.text(),
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<order customer=\"anonymous &amp; co\"><note>anonymous &amp; co</note><item/></order>\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn padding_header_pads_request_and_response_as_membranes_example_does() {
    // `examples/security/padding-header/api.yaml`, against a local backend.
    let backend = Backend::start().await;
    let gw = TestGateway::start(&format!(
        r#"api:
  port: 0
  ip: 127.0.0.1
  flow:
    - paddingHeader:
        roundUp: 20
        constant: 5
        random: 10
  target:
    url: http://127.0.0.1:{}
"#,
        backend.port()
    ));
    let mut lengths = std::collections::HashSet::new();
    for _ in 0..20 {
        let r = post(gw.addr(), "/products", "text/plain", "hello").await;
        assert_eq!(r.status, 200);
        // At most 19 + 5 + 9 characters; the HTTP parsers drop a leading or trailing space.
        let seen = backend.last();
        let sent = seen.headers.get("x-padding").unwrap().as_bytes().len();
        assert!((1..=33).contains(&sent), "{sent}");
        let back = r.headers.get("x-padding").unwrap().as_bytes().len();
        assert!((1..=33).contains(&back), "{back}");
        lengths.insert(back);
    }
    assert!(lengths.len() > 1, "the length varies: {lengths:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_greaser_greases_responses_as_membranes_example_does() {
    // `examples/api-testing/api-greasing/apis.yaml`.
    let gw = TestGateway::start(
        r#"api:
  port: 0
  ip: 127.0.0.1
  flow:
    - response:
        - beautifier: {}
        - greaser:
            strategies:
              - greaseJson:
                  shuffleFields: true
                  additionalProperties: true
    - return: {}
"#,
    );
    let sent = r#"{"id":1,"name":"Mango","price":2.5,"tags":[{"a":1,"b":2}]}"#;
    for _ in 0..10 {
        let r = post(gw.addr(), "/", "application/json", sent).await;
        assert_eq!(r.status, 200);
        assert_eq!(
            r.header("x-grease"),
            Some("JSON fields shuffled, Added random JSON fields")
        );
        let v = r.json();
        assert_eq!(v["grease"], "Field added by Membrane's Grease plugin");
        assert_eq!(
            v["tags"][0]["grease"],
            "Field added by Membrane's Grease plugin"
        );
        assert_eq!(v["name"], "Mango");
        assert_eq!(v["tags"][0]["b"], 2);
        // Response flows run last policy first: the greaser, then the beautifier.
        assert!(r.text().starts_with("{\n  \""), "{}", r.text());
        // The members are in another order than sent (with the grease member, in another one
        // than the sent members followed by it).
        let text = r.text();
        let at = |k: &str| text.find(&format!("\"{k}\"")).unwrap();
        assert!(
            !(at("id") < at("name")
                && at("name") < at("price")
                && at("price") < at("tags")
                && at("tags") < at("grease")),
            "{text}"
        );
    }
    // Not JSON: untouched, no header.
    let r = post(gw.addr(), "/", "text/plain", r#"{"a":1,"b":2}"#).await;
    assert_eq!(r.text(), r#"{"a":1,"b":2}"#);
    assert!(r.header("x-grease").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_greaser_at_rate_zero_never_greases() {
    let gw = TestGateway::start(
        r#"api:
  port: 0
  ip: 127.0.0.1
  flow:
    - greaser:
        rate: 0
        strategies:
          - greaseJson: {}
    - return: {}
"#,
    );
    for _ in 0..10 {
        let r = post(gw.addr(), "/", "application/json", r#"{"a":1,"b":2}"#).await;
        assert_eq!(r.text(), r#"{"a":1,"b":2}"#);
        assert!(r.header("x-grease").is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn form_validation_checks_query_and_form_fields_as_membranes_example_does() {
    // `examples/validation/form/apis.yaml`, against a local backend.
    let backend = Backend::start().await;
    let gw = TestGateway::start(&format!(
        r#"api:
  port: 0
  ip: 127.0.0.1
  flow:
    - formValidation:
        - name: name
          regex: '[a-zA-Z]+'
        - name: age
          regex: '\d{{1,3}}'
  target:
    url: http://127.0.0.1:{}/shop/v2/products
"#,
        backend.port()
    ));
    let r = get(gw.addr(), "/?name=abc").await;
    assert_eq!(r.status, 200);
    assert_eq!(backend.count(), 1);
    let r = get(gw.addr(), "/?name=abc1").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    let p = r.json();
    assert_eq!(p["type"], "urn:turnpike:problem:validation");
    assert_eq!(p["detail"], "Parameter name=abc1 didn't match [a-zA-Z]+");
    assert_eq!(backend.count(), 1, "a refused request is not forwarded");
    // Absent fields pass.
    assert_eq!(get(gw.addr(), "/?other=1").await.status, 200);
    // Form bodies count too; other bodies are not read as forms.
    let form = "application/x-www-form-urlencoded";
    let r = post(gw.addr(), "/", form, "name=Ann&age=42").await;
    assert_eq!(r.status, 200);
    assert_eq!(backend.last().body, "name=Ann&age=42");
    let r = post(gw.addr(), "/", form, "name=Ann&age=1000").await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["detail"],
        "Parameter age=1000 didn't match \\d{1,3}"
    );
    assert_eq!(
        post(gw.addr(), "/", "text/plain", "age=x").await.status,
        200
    );
    // The value is decoded, and escaped in the detail.
    let r = get(gw.addr(), "/?name=a%0Ab").await;
    assert_eq!(
        r.json()["detail"],
        "Parameter name=a\\nb didn't match [a-zA-Z]+"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_injection_protection_runs_membranes_tutorial() {
    // `tutorials/security/60-SQL-Injection-Protection.yaml`, unchanged but for the port.
    let gw = TestGateway::start(
        r#"api:
  port: 0
  flow:
    - limit:
        maxBodyLength: 100000
    - sqlInjectionProtection:
        level: 1
        onDetect: block
        inspectHeaders: false
    - return:
        status: 200
"#,
    );
    assert_eq!(
        get(gw.addr(), "/products?name=O%27Reilly").await.status,
        200
    );
    let r = get(gw.addr(), "/products?id=1%27%20OR%20%271%27%3D%271").await;
    assert_eq!(r.status.as_u16(), 400);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    let p = r.json();
    assert_eq!(p["type"], "urn:turnpike:problem:sql-injection");
    assert_eq!(p["detail"], "SQL injection in the query parameter `id`");
    assert_eq!(
        (p["in"].as_str(), p["name"].as_str()),
        (Some("query"), Some("id"))
    );
    assert!(
        !r.text().contains("OR"),
        "the value is not repeated: {}",
        r.text()
    );
    let r = post(
        gw.addr(),
        "/",
        "application/json",
        r#"{"user":{"name":"admin'--"}}"#,
    )
    .await;
    assert_eq!(
        (r.status.as_u16(), r.json()["name"].as_str()),
        (400, Some("$.user.name"))
    );
    // Headers are not read with `inspectHeaders: false`.
    let r = get_with(gw.addr(), "/", &[("user-agent", "1' OR '1'='1")]).await;
    assert_eq!(r.status.as_u16(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_injection_protection_in_front_of_a_backend() {
    let backend = Backend::start().await;
    let gw = TestGateway::start(&format!(
        r#"api:
  port: 0
  ip: 127.0.0.1
  flow:
    - sqlInjectionProtection:
        inspectHeaders: true
  target:
    url: http://127.0.0.1:{}
---
api:
  port: 0
  ip: 127.0.0.1
  path: /audit
  flow:
    - sqlInjectionProtection:
        onDetect: log
  target:
    url: http://127.0.0.1:{}
"#,
        backend.port(),
        backend.port()
    ));
    let addr = gw.addr();
    // Ordinary requests of every kind pass untouched.
    let form = "application/x-www-form-urlencoded";
    let r = post(
        addr,
        "/orders?note=It%27s+5+o%27clock",
        form,
        "name=Ann&city=K%C3%B6ln",
    )
    .await;
    assert_eq!(r.status.as_u16(), 200);
    assert_eq!(backend.last().body, "name=Ann&city=K%C3%B6ln");
    let xml = "<order id=\"7\"><item>Apple &amp; Pear</item></order>";
    assert_eq!(post(addr, "/", "application/xml", xml).await.status, 200);
    let seen = backend.count();
    // Attacks in a form field, an XML attribute, a path segment, a cookie and a header.
    let r = post(addr, "/", form, "name=x%27+or+%27a%27%3D%27a").await;
    assert_eq!(
        (r.status.as_u16(), r.json()["in"].as_str()),
        (400, Some("form"))
    );
    let r = post(
        addr,
        "/",
        "text/xml",
        "<order><item id=\"1 UNION SELECT 1,2--\"/></order>",
    )
    .await;
    assert_eq!(
        (r.status.as_u16(), r.json()["name"].as_str()),
        (400, Some("/order/item/@id"))
    );
    let r = get(addr, "/products/1%3B%20DROP%20TABLE%20users%3B%20--").await;
    assert_eq!(
        (r.status.as_u16(), r.json()["in"].as_str()),
        (400, Some("path"))
    );
    let r = get_with(addr, "/", &[("cookie", "theme=dark; SESSION=admin'--")]).await;
    assert_eq!(
        (r.status.as_u16(), r.json()["name"].as_str()),
        (400, Some("SESSION"))
    );
    let r = get_with(
        addr,
        "/",
        &[("referer", "1 UNION SELECT password FROM users--")],
    )
    .await;
    assert_eq!(
        (r.status.as_u16(), r.json()["name"].as_str()),
        (400, Some("referer"))
    );
    assert_eq!(backend.count(), seen, "refused requests are not forwarded");
    // A multipart form from curl: each field is read by its own type; a file is not read.
    let port = gw.addr().port().to_string();
    let (code, _, body, err) = tokio::task::spawn_blocking(move || {
        common::pki::curl(&[
            "-F",
            "title=Report",
            "-F",
            "query=1' OR '1'='1",
            &format!("http://127.0.0.1:{port}/upload"),
        ])
    })
    .await
    .unwrap();
    assert_eq!(code, 400, "{body} {err}");
    let p: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (p["in"].as_str(), p["name"].as_str()),
        (Some("multipart"), Some("query"))
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("data.bin");
    std::fs::write(&file, "admin'--").unwrap();
    let port = gw.addr().port().to_string();
    let (code, _, body, err) = tokio::task::spawn_blocking(move || {
        common::pki::curl(&[
            "-F",
            "title=Report",
            "-F",
            &format!("file=@{};type=application/octet-stream", file.display()),
            &format!("http://127.0.0.1:{port}/upload"),
        ])
    })
    .await
    .unwrap();
    assert_eq!(code, 200, "{body} {err}");
    assert!(String::from_utf8_lossy(&backend.last().body).contains("admin'--"));
    // `onDetect: log` forwards what it finds.
    let seen = backend.count();
    let r = get(addr, "/audit?id=1%27%20OR%20%271%27%3D%271").await;
    assert_eq!(r.status.as_u16(), 200);
    assert_eq!(backend.count(), seen + 1);
    assert_eq!(backend.last().uri, "/audit?id=1%27%20OR%20%271%27%3D%271");
}

#[test]
fn sql_injection_protection_levels_above_one_are_load_errors() {
    let err = validate_errors(
        "api:\n  port: 2000\n  flow:\n    - sqlInjectionProtection:\n        level: 3\n    - return:\n        status: 200\n",
    );
    assert!(
        err.contains("apis.yaml:5:16") && err.contains("paranoia level 3 is not supported"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_flow_shapes_the_gateways_own_errors_only() {
    let backend = Backend::start().await;
    let dead = free_port();
    let gw = TestGateway::start(&format!(
        r#"api:
  port: 0
  ip: 127.0.0.1
  path: /shop
  flow:
    - abort:
        - setHeader:
            name: X-Aborted
            value: "yes"
        - template:
            contentType: application/xml
            src: <error><status>${{statusCode}}</status></error>
    - apiKey:
        stores:
          - simple:
              - secret: {{ value: abc123 }}
    - request:
        - if:
            test: header['X-Case'] == 'return'
            flow:
              - return:
                  status: 418
  target:
    url: http://127.0.0.1:{}
---
api:
  port: 0
  ip: 127.0.0.1
  path: /down
  flow:
    - abort:
        - template:
            contentType: text/plain
            src: "backend down: ${{statusCode}}"
  target:
    url: http://127.0.0.1:{dead}
"#,
        backend.port()
    ));
    let addr = gw.addr();
    // A policy refuses: the abort flow rewrites the problem, keeping its status.
    let r = get(addr, "/shop/items").await;
    assert_eq!(r.status.as_u16(), 401);
    assert_eq!(r.header("content-type"), Some("application/xml"));
    assert_eq!(r.header("x-aborted"), Some("yes"));
    assert_eq!(r.text(), "<error><status>401</status></error>");
    // The backend's answer, and a policy's own `return`, are not aborted exchanges.
    let r = get_with(addr, "/shop/items", &[("x-api-key", "abc123")]).await;
    assert_eq!(r.status.as_u16(), 200);
    assert_eq!(r.header("x-aborted"), None);
    let r = get_with(
        addr,
        "/shop/items",
        &[("x-api-key", "abc123"), ("x-case", "return")],
    )
    .await;
    assert_eq!(r.status.as_u16(), 418);
    assert_eq!(r.header("x-aborted"), None);
    // A backend that cannot be reached is an aborted exchange too.
    let r = get(addr, "/down").await;
    assert_eq!(r.status.as_u16(), 502);
    assert_eq!(r.text(), "backend down: 502");
}

#[test]
fn abort_flows_stand_in_the_top_level_flow_with_response_policies() {
    let err = validate_errors(
        "api:\n  port: 2000\n  flow:\n    - request:\n        - abort: []\n    - abort:\n        - rewriter:\n            - from: a\n              to: b\n    - return: {}\n",
    );
    assert!(
        err.contains("`abort:` cannot stand inside a `request:` flow"),
        "{err}"
    );
    assert!(err.contains("`rewriter` acts on requests only"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_sent_events_stream_through_the_gateway_as_in_membranes_tutorial() {
    // `tutorials/sse/10-Server-Sent-Events.yaml`: an API with `log` in front of the demo
    // stream; the second event is an hour away, so the first one can only arrive streamed.
    let back = free_port();
    let gw = TestGateway::start(&format!(
        r#"api:
  port: 0
  ip: 127.0.0.1
  flow:
    - log: {{}}
  target:
    host: localhost
    port: {back}
---
api:
  port: {back}
  ip: 127.0.0.1
  path:
    uri: /stream
  flow:
    - sseDemoStream:
        totalEvents: 2
        interval: 1h
"#
    ));
    let mut s = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    s.write_all(b"GET /stream HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n\r\n")
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("\n\n")
        || !String::from_utf8_lossy(&seen).contains("data: ")
    {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&seen).into_owned();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.to_ascii_lowercase()
            .contains("content-type: text/event-stream"),
        "{text}"
    );
    assert!(
        text.contains("id: 1\nevent: demo\ndata: {\"event\":1,\"of\":2,"),
        "{text}"
    );
    assert!(!text.contains("id: 2"), "{text}");
    // The whole stream, with a short interval, ends after its events.
    let gw2 = TestGateway::start(
        "api:\n  port: 0\n  flow:\n    - sseDemoStream:\n        totalEvents: 3\n        interval: 10ms\n",
    );
    let r = get(gw2.addr(), "/").await;
    assert_eq!(r.status.as_u16(), 200);
    assert_eq!(r.text().matches("event: demo").count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_server_serves_its_folder_and_nothing_else() {
    // The file server of `examples/websockets/websocket-stomp` (`docBase: .`, `index`), with
    // the configuration beside the files.
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site");
    std::fs::create_dir_all(site.join("js")).unwrap();
    std::fs::write(site.join("index.html"), "<h1>STOMP</h1>").unwrap();
    let script = "x".repeat(200_000);
    std::fs::write(site.join("js/app.js"), &script).unwrap();
    std::fs::write(dir.path().join("secret.txt"), "secret").unwrap();
    let file = site.join("apis.yaml");
    std::fs::write(
        &file,
        "api:\n  port: 0\n  ip: 127.0.0.1\n  flow:\n    - webServer:\n        docBase: .\n        index: index.html\n",
    )
    .unwrap();
    let gw = turnpike::start(vec![file]).unwrap();
    let addr = gw.listeners()[0].1;
    let r = get(addr, "/").await;
    assert_eq!(r.status.as_u16(), 200);
    assert_eq!(r.text(), "<h1>STOMP</h1>");
    let r = get(addr, "/js/app.js").await;
    assert_eq!(r.status.as_u16(), 200);
    assert_eq!(
        r.header("content-type"),
        Some("text/javascript; charset=utf-8")
    );
    assert_eq!(r.text().len(), script.len());
    let etag = r.header("etag").unwrap().to_owned();
    let r = get_with(addr, "/js/app.js", &[("if-none-match", &etag)]).await;
    assert_eq!(r.status.as_u16(), 304);
    assert_eq!(get(addr, "/missing.html").await.status.as_u16(), 404);
    // The configuration file is served like any file of the folder, but nothing outside it,
    // however the path is written (sent raw: clients would clean it up).
    for path in [
        "/../secret.txt",
        "/%2e%2e/secret.txt",
        "/js/..%2f..%2fsecret.txt",
    ] {
        let text = raw(
            addr,
            format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
            Duration::from_secs(5),
        )
        .await;
        assert!(text.starts_with("HTTP/1.1 400"), "{path}: {text}");
        assert!(
            !text.contains("secret\n") && !text.ends_with("secret"),
            "{path}: {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_refuses_large_requests_announced_or_streamed() {
    let backend = Backend::start().await;
    let gw = TestGateway::start(&format!(
        r#"gateway: {{ accessLog: false }}
---
api:
  port: 0
  ip: 127.0.0.1
  flow:
    - limit:
        maxBodyLength: 100
  target:
    url: http://127.0.0.1:{}
"#,
        backend.port()
    ));
    let r = post(gw.addr(), "/", "text/plain", &"x".repeat(101)).await;
    assert_eq!(r.status, 413);
    let p = r.json();
    assert_eq!(p["type"], "urn:turnpike:problem:body-too-large");
    assert_eq!(
        p["detail"],
        "Message bodies must be smaller than 100 bytes."
    );
    assert_eq!(backend.count(), 0);
    let r = post(gw.addr(), "/", "text/plain", &"x".repeat(100)).await;
    assert_eq!(r.status, 200);
    assert_eq!(backend.last().body.len(), 100);
    // Chunked: counted as it streams.
    let reply = raw(
        gw.addr(),
        &chunked_post("/", "text/plain", 3, 60),
        Duration::from_secs(5),
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
    assert!(reply.contains("body-too-large"), "{reply}");
    assert_eq!(backend.count(), 1, "the backend got no complete request");
    let reply = raw(
        gw.addr(),
        &chunked_post("/", "text/plain", 2, 50),
        Duration::from_secs(5),
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert_eq!(backend.last().body.len(), 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_before_a_policy_that_reads_the_body_stops_reading_at_the_limit() {
    // The shape of `tutorials/security/60-SQL-Injection-Protection.yaml`, with `jsonProtection`
    // as the policy that reads the whole body.
    let gw = TestGateway::start(
        r#"gateway: { accessLog: false }
---
api:
  port: 0
  ip: 127.0.0.1
  flow:
    - limit:
        maxBodyLength: 100
    - request:
        - jsonProtection: {}
    - return:
        status: 200
"#,
    );
    let reply = raw(
        gw.addr(),
        &chunked_post("/", "application/json", 4, 64),
        Duration::from_secs(5),
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
    let r = post(
        gw.addr(),
        "/",
        "application/json",
        &format!("[{}]", "1,".repeat(60) + "1"),
    )
    .await;
    assert_eq!(r.status, 413);
    let r = post(gw.addr(), "/", "application/json", r#"{"a":[1,2,3]}"#).await;
    assert_eq!(r.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_on_responses_is_bad_gateway_or_a_closed_connection() {
    let backend = Backend::start().await;
    let gw = TestGateway::start(&format!(
        r#"gateway: {{ accessLog: false }}
---
api:
  port: 0
  ip: 127.0.0.1
  flow:
    - response:
        - limit:
            maxBodyLength: 1000
  target:
    url: http://127.0.0.1:{}
"#,
        backend.port()
    ));
    let r = get(gw.addr(), "/big/1000").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), 1000);
    let r = get(gw.addr(), "/big/1001").await;
    assert_eq!(r.status, 502);
    let p = r.json();
    assert_eq!(p["type"], "urn:turnpike:problem:upstream-error");
    assert_eq!(
        p["detail"],
        "the backend's response body is larger than the limit of 1000 bytes"
    );
    // Streamed without a length: cut off once past the limit.
    assert!(try_send(
        gw.addr(),
        req("GET", "/chunked/200000")
            .body(Full::new(Bytes::new()))
            .unwrap()
    )
    .await
    .is_err());
    // Requests are not limited by a response-only limit.
    let r = post(gw.addr(), "/", "text/plain", &"x".repeat(900)).await;
    assert_eq!(r.status, 200);
    let r = post(gw.addr(), "/", "text/plain", &"x".repeat(5000)).await;
    assert_eq!(r.status, 502, "the echo is too large");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateways_own_problems_pass_a_small_response_limit() {
    let gw = TestGateway::start(&format!(
        r#"gateway: {{ accessLog: false }}
---
api:
  port: 0
  ip: 127.0.0.1
  flow:
    - limit:
        maxBodyLength: 10
  target:
    url: http://127.0.0.1:{}
"#,
        free_port()
    ));
    let r = get(gw.addr(), "/").await;
    assert_eq!(r.status, 502);
    assert_eq!(
        r.json()["type"],
        "urn:turnpike:problem:upstream-unreachable"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_settings_are_load_errors() {
    for (policy, expect) in [
        (
            "replace: { jsonPath: $.a, with: b, replacement: c }",
            "replacement",
        ),
        ("replace: { expression: $.a, with: b }", "language"),
        ("paddingHeader: { roundUp: 0 }", "roundUp"),
        (
            "greaser: { rate: 1, strategies: [ { greaseXml: {} } ] }",
            "greaseXml",
        ),
        ("formValidation: [ { name: a, regex: '(' } ]", "regex"),
        (
            "limit: { maxBodyLength: 10, maxHeaderLength: 4 }",
            "maxHeaderLength",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("gateway.yaml");
        std::fs::write(
            &file,
            format!(
                "api:\n  port: 0\n  ip: 127.0.0.1\n  flow:\n    - {policy}\n    - return: {{}}\n"
            ),
        )
        .unwrap();
        let e = match turnpike::start(vec![file]) {
            Ok(_) => panic!("{policy} loaded"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains(expect), "{policy}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_cookie_from_a_login_call_opens_the_target() {
    // Membrane's tutorial orchestration/40-Authentication-Call: the gateway calls a login API
    // whose `setCookies` issues a session cookie, and forwards it to a target that tests
    // `cookie.SESSION`.
    let (gateway, login, target) = (free_port(), free_port(), free_port());
    let _gw = TestGateway::start(&format!(
        r#"api:
  port: {gateway}
  name: Gateway
  flow:
    - request:
        - call:
            url: http://127.0.0.1:{login}/login
        - log:
            message: "Got Cookie: ${{header['Set-Cookie']}}"
        - setHeader:
            name: Cookie
            value: ${{header['Set-Cookie']}}
        - headerFilter:
            - exclude: Set-Cookie
        - log:
            message: "Session ${{cookie.SESSION}}, token end ${{header['Cookie'].substring(header['Cookie'].length() - 3)}}"
  target:
    url: http://127.0.0.1:{target}
---
api:
  port: {login}
  name: Login API
  path:
    uri: /login
  flow:
    - response:
        - setCookies:
            - name: SESSION
              value: akj34
              httpOnly: true
    - return:
        status: 200
---
api:
  port: {target}
  name: Target API
  flow:
    - request:
        - if:
            test: cookie.SESSION != 'akj34'
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
    let at = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
    let r = get(at(login), "/login").await;
    assert_eq!(
        r.header("set-cookie"),
        Some("SESSION=akj34; Path=/; HttpOnly; SameSite=Lax")
    );
    let r = get(at(gateway), "/").await;
    assert_eq!((r.status.as_u16(), r.text().as_str()), (200, "Success!"));
    let r = get(at(target), "/").await;
    assert_eq!(
        (r.status.as_u16(), r.text().as_str()),
        (401, "Unauthorized!")
    );
    let r = get_with(at(target), "/", &[("cookie", "theme=dark; SESSION=other")]).await;
    assert_eq!(r.status, 401);
    let r = get_with(at(target), "/", &[("cookie", "theme=dark; SESSION=akj34")]).await;
    assert_eq!(r.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_tool_call_is_blocked_by_a_test_on_the_json_body() {
    // Membrane's example mcp: a JSON-RPC `tools/call` of one tool is answered by the gateway
    // with a JSON-RPC result; everything else goes to the MCP server.
    let backend = Backend::start().await;
    let b = backend.port();
    let gw = TestGateway::start(&format!(
        r#"api:
  name: demo-mcp-gateway
  port: 0
  path: /mcp
  flow:
    - request:
        - if:
            language: SpEL
            test: "isJSON() and json.method == 'tools/call' and json['params'] != null and json['params']['name'] == 'secretHello'"
            flow:
              - template:
                  contentType: application/json
                  src: |
                    {{
                      "jsonrpc": "2.0",
                      "id": ${{json.id}},
                      "result": {{
                        "content": [ {{ "type": "text", "text": "Blocked: tool secretHello is not allowed" }} ],
                        "isError": true
                      }}
                    }}
              - return:
                  status: 200
                  contentType: application/json
  target:
    host: 127.0.0.1
    port: {b}
"#
    ));
    let call = |tool: &str, id: u32| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{}}}}}}"#
        )
    };
    let r = post(
        gw.addr(),
        "/mcp",
        "application/json",
        &call("secretHello", 7),
    )
    .await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(
        (v["id"].as_u64(), v["result"]["isError"].as_bool()),
        (Some(7), Some(true))
    );
    assert_eq!(backend.count(), 0);
    let r = post(gw.addr(), "/mcp", "application/json", &call("hello", 8)).await;
    assert_eq!(r.status, 200);
    assert_eq!(backend.count(), 1);
    assert_eq!(backend.last().body, Bytes::from(call("hello", 8)));
    // Without params, or not JSON: forwarded.
    post(
        gw.addr(),
        "/mcp",
        "application/json",
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#,
    )
    .await;
    post(gw.addr(), "/mcp", "text/plain", &call("secretHello", 9)).await;
    assert_eq!(backend.count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_templates_write_json_values() {
    // Membrane's example templating/json: a query parameter and a property read from the
    // backend's XML answer, each written as a JSON value.
    let (port, logger) = (free_port(), free_port());
    let _gw = TestGateway::start(&format!(
        r#"api:
  port: {port}
  method: GET
  flow:
    - request:
        - template:
            contentType: application/json
            pretty: yes
            src: |
              {{
                "answer": ${{params.answer?[0]}},
                "quoted": "say \"${{params.answer}}\"",
                "missing": ${{params.nope}}
              }}
    - return:
        status: 200
---
api:
  port: {port}
  method: POST
  flow:
    - request:
        - template:
            contentType: application/xml
            src: <city>${{json.city}}</city>
    - response:
        - template:
            contentType: application/json
            src: |
              {{
                "city": ${{property.city}}
              }}
        - setProperty:
            name: city
            value: '${{/city}}'
            language: xpath
  target:
    host: 127.0.0.1
    port: {logger}
---
api:
  name: logger
  port: {logger}
  flow:
    - return:
        status: 200
"#
    ));
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let r = get(addr, "/?answer=4%222").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json(),
        serde_json::json!({ "answer": "4\"2", "quoted": "say \"4\"2\"", "missing": null })
    );
    let r = post(
        addr,
        "/",
        "application/json",
        r#"{"city": "Bonn \"am Rhein\""}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.json(), serde_json::json!({ "city": "Bonn \"am Rhein\"" }));
}
