//! The admin API against a running gateway: documents created, replaced and removed through it
//! change traffic at once and persist in the store; ETags guard concurrent changes; every error
//! is located; secrets never leave in full; the token is enforced; the API holds to its own
//! OpenAPI document (schemathesis); and changes under `wrk` load fail no request.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;

use bytes::Bytes;
use common::*;
use http_body_util::Full;

const TOKEN: &str = "test-token-0123456789";

/// A gateway with an admin API and a store, from YAML in a temporary folder.
struct Harness {
    control: Option<turnpike::Control>,
    dir: tempfile::TempDir,
    file: PathBuf,
}

fn base_yaml(extra_admin: &str) -> String {
    format!(
        "gateway: {{ threads: 1, accessLog: false }}\n---\nadmin:\n  listen: 127.0.0.1:0\n  token: {TOKEN}\n  hosts: [test.local]\n  store: {{ dir: store }}\n{extra_admin}---\napi:\n  name: hello\n  port: 0\n  ip: 127.0.0.1\n  path: {{ uri: /hello }}\n  flow: [ {{ return: {{ status: 200, body: hi }} }} ]\n"
    )
}

impl Harness {
    fn start(yaml: &str) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("gateway.yaml");
        std::fs::write(&file, yaml).unwrap();
        let control =
            turnpike::Control::start(vec![file.clone()]).unwrap_or_else(|e| panic!("{e}"));
        Harness {
            control: Some(control),
            dir,
            file,
        }
    }

    fn control(&self) -> &turnpike::Control {
        self.control.as_ref().unwrap()
    }

    fn admin(&self) -> SocketAddr {
        self.control().admin_addr().unwrap()
    }

    fn traffic(&self) -> SocketAddr {
        self.control().gateway().listeners()[0].1
    }

    /// Stops the gateway and starts it again on the same files and store.
    fn restart(&mut self) {
        self.control.take().unwrap().shutdown();
        self.control = Some(turnpike::Control::start(vec![self.file.clone()]).unwrap());
    }

    async fn call(&self, method: &str, path: &str, body: &str, headers: &[(&str, &str)]) -> Reply {
        let mut b = req(method, path).header("authorization", format!("Bearer {TOKEN}"));
        if !body.is_empty() {
            b = b.header("content-type", "application/yaml");
        }
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        send(
            self.admin(),
            b.body(Full::new(Bytes::from(body.to_owned()))).unwrap(),
        )
        .await
    }
}

fn api(name: &str, path: &str, body: &str) -> String {
    format!(
        "api:\n  name: {name}\n  port: 0\n  ip: 127.0.0.1\n  path: {{ uri: {path} }}\n  flow: [ {{ return: {{ status: 200, body: {body} }} }} ]\n"
    )
}

#[test]
fn there_is_no_admin_listener_without_an_admin_document() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.yaml");
    std::fs::write(
        &file,
        "api: { port: 0, ip: 127.0.0.1, flow: [ { return: {} } ] }\n",
    )
    .unwrap();
    let control = turnpike::Control::start(vec![file]).unwrap();
    assert!(control.admin_addr().is_none());
    control.shutdown();
}

#[test]
fn beyond_loopback_the_admin_api_needs_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.yaml");
    std::fs::write(&file, "admin: { listen: \"0.0.0.0:0\" }\n").unwrap();
    let err = turnpike::load_and_compile(std::slice::from_ref(&file))
        .unwrap_err()
        .to_string();
    assert!(err.contains("it needs a `token`"), "{err}");
    assert!(err.contains("g.yaml:1:"), "{err}");
    std::fs::write(&file, "admin: { listen: \"127.0.0.1:0\", token: short }\n").unwrap();
    let err = turnpike::load_and_compile(&[file]).unwrap_err().to_string();
    assert!(err.contains("at least 16 characters"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_is_checked_and_the_probes_need_none() {
    let h = Harness::start(&base_yaml(""));
    let a = h.admin();
    let r = get(a, "/admin/v1/status").await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["type"], "urn:turnpike:problem:unauthorized");
    assert!(r.header("www-authenticate").unwrap().starts_with("Bearer"));
    let r = get_with(
        a,
        "/admin/v1/status",
        &[("authorization", "Bearer wrong-token-0123456789")],
    )
    .await;
    assert_eq!(r.status, 401);
    let r = h.call("GET", "/admin/v1/status", "", &[]).await;
    assert_eq!(r.status, 200);
    let s = r.json();
    assert_eq!(s["revision"], 1);
    assert_eq!(s["workers"], 1);
    assert_eq!(s["lastReload"]["ok"], true);
    assert_eq!(get(a, "/healthz").await.status, 200);
    assert_eq!(get(a, "/readyz").await.json()["status"], "ready");
    let spec = h
        .call("GET", "/admin/v1/openapi.json", "", &[])
        .await
        .json();
    assert_eq!(spec["openapi"], "3.1.0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_change_traffic_at_once_and_survive_a_restart() {
    let mut h = Harness::start(&base_yaml(""));
    let t = h.traffic();
    assert_eq!(get(t, "/orders").await.status, 404);
    let r = h
        .call(
            "PUT",
            "/admin/v1/apis/orders",
            &api("orders", "/orders", "v1"),
            &[],
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.json()["revision"], 2);
    let etag1 = r.header("etag").unwrap().to_owned();
    assert_eq!(get(t, "/orders").await.text(), "v1");
    // GET gives the same ETag; a listing shows where each document comes from.
    let r = h.call("GET", "/admin/v1/apis/orders", "", &[]).await;
    assert_eq!(r.header("etag"), Some(etag1.as_str()));
    assert_eq!(r.json()["api"]["name"], "orders");
    let list = h.call("GET", "/admin/v1/apis", "", &[]).await.json();
    let sources: Vec<(&str, &str)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["name"].as_str().unwrap(), i["source"].as_str().unwrap()))
        .collect();
    assert_eq!(sources, vec![("hello", "file"), ("orders", "store")]);
    // Optimistic concurrency: a stale ETag, or create-only on an existing document, fails.
    let v2 = api("orders", "/orders", "v2");
    let r = h
        .call(
            "PUT",
            "/admin/v1/apis/orders",
            &v2,
            &[("if-match", "\"stale\"")],
        )
        .await;
    assert_eq!(r.status, 412);
    assert_eq!(r.json()["type"], "urn:turnpike:problem:precondition-failed");
    let r = h
        .call(
            "PUT",
            "/admin/v1/apis/orders",
            &v2,
            &[("if-none-match", "*")],
        )
        .await;
    assert_eq!(r.status, 412);
    assert_eq!(get(t, "/orders").await.text(), "v1", "nothing changed");
    let r = h
        .call("PUT", "/admin/v1/apis/orders", &v2, &[("if-match", &etag1)])
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_ne!(r.header("etag"), Some(etag1.as_str()));
    assert_eq!(get(t, "/orders").await.text(), "v2");
    // JSON works as well as YAML.
    let json = r#"{"api": {"name": "orders", "port": 0, "ip": "127.0.0.1", "path": {"uri": "/orders"}, "flow": [{"return": {"status": 200, "body": "v3"}}]}}"#;
    let r = send(
        h.admin(),
        req("PUT", "/admin/v1/apis/orders")
            .header("authorization", format!("Bearer {TOKEN}"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(json)))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(get(t, "/orders").await.text(), "v3");
    // The store survives a restart.
    h.restart();
    let t = h.traffic();
    assert_eq!(get(t, "/orders").await.text(), "v3");
    assert!(h.dir.path().join("store/api-orders.yaml").exists());
    // DELETE removes it from traffic and store.
    let r = h.call("DELETE", "/admin/v1/apis/orders", "", &[]).await;
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(get(t, "/orders").await.status, 404);
    assert_eq!(
        h.call("DELETE", "/admin/v1/apis/orders", "", &[])
            .await
            .status,
        404
    );
    assert_eq!(
        h.call("GET", "/admin/v1/apis/orders", "", &[]).await.status,
        404
    );
    // Upstreams, consumers and the global list are documents too.
    let r = h
        .call(
            "PUT",
            "/admin/v1/globals",
            "global:\n  - setHeader: { name: X-Global, value: yes }\n",
            &[],
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(get(t, "/hello").await.header("x-global"), Some("yes"));
    h.control.take().unwrap().shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_point_into_the_request_and_files_are_not_changed() {
    let h = Harness::start(&base_yaml(""));
    // An unknown key: line and column in the document sent.
    let bad = "api:\n  name: x\n  port: 0\n  ip: 127.0.0.1\n  flwo: []\n";
    let r = h.call("PUT", "/admin/v1/apis/x", bad, &[]).await;
    assert_eq!(r.status, 422);
    let p = r.json();
    assert_eq!(p["type"], "urn:turnpike:problem:invalid-document");
    let e = &p["errors"][0];
    assert_eq!(
        (e["file"].as_str(), e["line"].as_u64(), e["column"].as_u64()),
        (Some("<request>"), Some(5), Some(3))
    );
    assert_eq!(e["key"], "api.flwo");
    // A document that collides with a file's API: the error names both places.
    let r = h
        .call("PUT", "/admin/v1/apis/dup", &api("dup", "/hello", "x"), &[])
        .await;
    assert_eq!(r.status, 422);
    let text = r.text();
    assert!(text.contains("gateway.yaml"), "{text}");
    assert!(text.contains("same requests"), "{text}");
    // The URL's name and the document's must agree.
    let r = h
        .call("PUT", "/admin/v1/apis/one", &api("two", "/two", "x"), &[])
        .await;
    assert_eq!(r.status, 422);
    assert!(r.text().contains("differs from the URL"), "{}", r.text());
    // Names cannot leave the store's folder.
    let r = h
        .call(
            "PUT",
            "/admin/v1/apis/..%2Fescape",
            &api("../escape", "/e", "x"),
            &[],
        )
        .await;
    assert_eq!(r.status, 422, "{}", r.text());
    // A name a file defines: the document cannot be taken over (409) nor removed (405).
    let r = h
        .call(
            "PUT",
            "/admin/v1/apis/hello",
            &api("hello", "/hello2", "x"),
            &[],
        )
        .await;
    assert_eq!(r.status, 409, "{}", r.text());
    let r = h.call("DELETE", "/admin/v1/apis/hello", "", &[]).await;
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET"));
    // Media types other than JSON and YAML are refused.
    let r = send(
        h.admin(),
        req("PUT", "/admin/v1/apis/x")
            .header("authorization", format!("Bearer {TOKEN}"))
            .header("content-type", "text/html")
            .body(Full::new(Bytes::from("<p>")))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 415);
    // Nothing above changed the configuration.
    let s = h.call("GET", "/admin/v1/status", "", &[]).await.json();
    assert_eq!(s["revision"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_reports_the_diff_or_every_error() {
    let h = Harness::start(&base_yaml(""));
    let docs = format!(
        "{}---\nconsumer:\n  name: alice\n  credentials: {{ apiKey: k-alice-1 }}\n---\napi:\n  name: other\n  port: {}\n  ip: 127.0.0.1\n  flow: [ {{ return: {{}} }} ]\n",
        api("orders", "/orders", "v1"),
        free_port()
    );
    let r = h.call("POST", "/admin/v1/validate", &docs, &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let d = &r.json()["diff"];
    assert_eq!(
        d["added"],
        serde_json::json!(["apis/orders", "apis/other", "consumers/alice"])
    );
    assert_eq!(d["listeners_opened"].as_array().unwrap().len(), 1);
    // Nothing was stored or applied.
    assert_eq!(get(h.traffic(), "/orders").await.status, 404);
    // Errors in the second document point at its line in the request.
    let bad = format!(
        "{}---\nupstream:\n  name: u\n  nodes: []\n",
        api("orders", "/orders", "v1")
    );
    let r = h.call("POST", "/admin/v1/validate", &bad, &[]).await;
    assert_eq!(r.status, 422, "{}", r.text());
    let e = &r.json()["errors"][0];
    assert_eq!(e["file"], "<request>");
    assert_eq!(e["line"], 10, "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("at least one node"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_redacted_and_kept_when_sent_back() {
    let h = Harness::start(&base_yaml(""));
    let consumer = "consumer:\n  name: alice\n  credentials:\n    apiKey: k-alice-secret-1\n    basic: { username: alice, password: pw-alice-1 }\n";
    assert_eq!(
        h.call("PUT", "/admin/v1/consumers/alice", consumer, &[])
            .await
            .status,
        201
    );
    let guarded = "api:\n  name: guarded\n  port: 0\n  ip: 127.0.0.1\n  path: { uri: /guarded }\n  flow:\n    - apiKey: { stores: [ { consumers: {} } ] }\n    - return: { status: 200, body: ok }\n";
    assert_eq!(
        h.call("PUT", "/admin/v1/apis/guarded", guarded, &[])
            .await
            .status,
        201
    );
    let t = h.traffic();
    assert_eq!(
        get_with(t, "/guarded", &[("x-api-key", "k-alice-secret-1")])
            .await
            .status,
        200
    );
    for path in [
        "/admin/v1/consumers/alice",
        "/admin/v1/consumers",
        "/admin/v1/config",
    ] {
        let text = h.call("GET", path, "", &[]).await.text();
        assert!(
            !text.contains("k-alice-secret-1") && !text.contains("pw-alice-1"),
            "{path}: {text}"
        );
        assert!(text.contains("<redacted>"), "{path}: {text}");
    }
    // The redacted document sent back keeps the stored secrets.
    let shown = h.call("GET", "/admin/v1/consumers/alice", "", &[]).await;
    let r = send(
        h.admin(),
        req("PUT", "/admin/v1/consumers/alice")
            .header("authorization", format!("Bearer {TOKEN}"))
            .header("content-type", "application/json")
            .body(Full::new(shown.body.clone()))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        get_with(t, "/guarded", &[("x-api-key", "k-alice-secret-1")])
            .await
            .status,
        200
    );
    // YAML on request.
    let r = h
        .call(
            "GET",
            "/admin/v1/consumers/alice",
            "",
            &[("accept", "application/yaml")],
        )
        .await;
    assert_eq!(r.header("content-type"), Some("application/yaml"));
    assert!(r.text().contains("name: alice"), "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_changes_under_load_fail_no_request() {
    if std::process::Command::new("wrk")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(std::env::var_os("CI").is_none(), "wrk is missing under CI");
        eprintln!("SKIPPED: wrk is not installed");
        return;
    }
    let h = Harness::start(&base_yaml(""));
    let t = h.traffic();
    let url = format!("http://{t}/hello");
    let wrk = std::thread::spawn(move || {
        std::process::Command::new("wrk")
            .args(["-t1", "-c8", "-d6s", &url])
            .output()
            .unwrap()
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    for i in 0..100 {
        let r = h
            .call(
                "PUT",
                "/admin/v1/apis/orders",
                &api("orders", "/orders", &format!("v{i}")),
                &[],
            )
            .await;
        assert!(r.status.is_success(), "{}", r.text());
        // Applied before the answer: the next request sees it.
        assert_eq!(get(t, "/orders").await.text(), format!("v{i}"));
    }
    let out = wrk.join().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(!text.contains("Non-2xx"), "{text}");
    assert!(!text.contains("Socket errors"), "{text}");
    let requests: u64 = text
        .lines()
        .find_map(|l| {
            l.trim()
                .split(" requests in")
                .next()
                .filter(|_| l.contains(" requests in"))
        })
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(requests > 1000, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_holds_to_its_openapi_document() {
    let st = std::process::Command::new("schemathesis")
        .arg("--version")
        .output();
    if !st.is_ok_and(|o| o.status.success()) {
        assert!(
            std::env::var_os("CI").is_none(),
            "schemathesis is missing under CI"
        );
        eprintln!("SKIPPED: schemathesis is not installed");
        return;
    }
    let h = Harness::start(&base_yaml(""));
    let a = h.admin();
    let cwd = tempfile::tempdir().unwrap();
    let cwd_path = cwd.path().to_owned();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("schemathesis")
            .current_dir(&cwd_path)
            .args(["run", &format!("http://{a}/admin/v1/openapi.json"), "--url", &format!("http://{a}")])
            .args(["-H", &format!("Authorization: Bearer {TOKEN}")])
            .args([
                "--checks",
                "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance",
                "--phases",
                "examples,coverage,fuzzing",
                "--max-examples",
                "25",
                "--seed",
                "1",
                "--no-color",
            ])
            .env_remove("SCHEMATHESIS_HOOKS")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "schemathesis failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The attack of a DNS-rebinding page: its own name resolves to 127.0.0.1, so the browser
/// sends `Host: rebind.attacker.example` and its `Origin`. Refused before the token is looked
/// at, with nothing stored; a foreign `Origin` alone is refused too; the console likewise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_rebinding_and_cross_origin_requests_are_refused() {
    let h = Harness::start(&base_yaml(""));
    let a = h.admin();
    let own = format!("127.0.0.1:{}", a.port());
    let evil = "api:\n  name: evil\n  port: 0\n  ip: 127.0.0.1\n  flow: [ { return: { status: 200, body: owned } } ]\n";
    let put = |host: &str, origin: Option<&str>| {
        let mut b = http::Request::builder()
            .method("PUT")
            .uri("/admin/v1/apis/evil")
            .header("host", host)
            .header("authorization", format!("Bearer {TOKEN}"))
            .header("content-type", "application/yaml");
        if let Some(o) = origin {
            b = b.header("origin", o);
        }
        b.body(Full::new(Bytes::from(evil))).unwrap()
    };
    let r = send(
        a,
        put(
            "rebind.attacker.example:9901",
            Some("http://rebind.attacker.example:9901"),
        ),
    )
    .await;
    assert_eq!(r.status, 421, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    assert_eq!(r.json()["type"], "urn:turnpike:problem:misdirected");
    let r = send(a, put(&own, Some("http://rebind.attacker.example"))).await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(r.json()["type"], "urn:turnpike:problem:cross-origin");
    let r = send(a, put(&own, Some("null"))).await;
    assert_eq!(r.status, 403);
    assert_eq!(
        h.call("GET", "/admin/v1/apis/evil", "", &[]).await.status,
        404,
        "nothing was stored"
    );
    // The console and the metrics answer the same way.
    for path in ["/console", "/metrics", "/admin/v1/config"] {
        let r = get_with(a, path, &[("host", "rebind.attacker.example")]).await;
        assert_eq!(r.status, 421, "{path}");
    }
    // The probes answer whatever the name.
    let r = get_with(a, "/healthz", &[("host", "rebind.attacker.example")]).await;
    assert_eq!(r.status, 200);
    // The listener's own origin, and names of this machine, are served.
    let r = send(a, put(&own, Some(&format!("http://{own}")))).await;
    assert_eq!(r.status, 201, "{}", r.text());
    let r = send(a, put(&format!("localhost:{}", a.port()), None)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let mut h = h;
    h.control.take().unwrap().shutdown();
}

#[test]
fn a_writable_admin_api_needs_a_token_unless_auth_none() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.yaml");
    std::fs::write(
        &file,
        "admin:\n  listen: 127.0.0.1:0\n  store: { dir: store }\n",
    )
    .unwrap();
    let err = turnpike::load_and_compile(std::slice::from_ref(&file))
        .unwrap_err()
        .to_string();
    assert!(err.contains("g.yaml:3:"), "{err}");
    assert!(err.contains("needs a `token` or `tokenFile`"), "{err}");
    // `auth: none` is explicit, on loopback only, and `validate` warns about it.
    std::fs::write(
        &file,
        "admin:\n  listen: 127.0.0.1:0\n  auth: none\n  store: { dir: store }\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_turnpike"))
        .args(["validate", "-c"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning: ") && stderr.contains("g.yaml:3:9: admin.auth"),
        "{stderr}"
    );
    std::fs::write(&file, "admin:\n  listen: 0.0.0.0:0\n  auth: none\n").unwrap();
    let err = turnpike::load_and_compile(std::slice::from_ref(&file))
        .unwrap_err()
        .to_string();
    assert!(err.contains("loopback `listen` only"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_can_come_from_a_private_file() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("admin.token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let file = dir.path().join("g.yaml");
    std::fs::write(
        &file,
        "admin:\n  listen: 127.0.0.1:0\n  tokenFile: admin.token\n  store: { dir: store }\n",
    )
    .unwrap();
    let err = turnpike::load_and_compile(std::slice::from_ref(&file))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("mode 0644") && err.contains("chmod 600"),
        "{err}"
    );
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let control = turnpike::Control::start(vec![file]).unwrap();
    let a = control.admin_addr().unwrap();
    let host = format!("127.0.0.1:{}", a.port());
    assert_eq!(
        get_with(a, "/admin/v1/status", &[("host", &host)])
            .await
            .status,
        401
    );
    let bearer = format!("Bearer {TOKEN}");
    let r = get_with(
        a,
        "/admin/v1/status",
        &[("host", &host), ("authorization", &bearer)],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    control.shutdown();
}

/// A stored API may not publish the gateway's own files with `webServer`, nor may the API
/// write documents of the kinds that only files hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_documents_open_only_what_the_operator_allowed() {
    let site = tempfile::tempdir().unwrap();
    std::fs::write(site.path().join("index.html"), "public page").unwrap();
    let extra = format!("  allowedDocBases: [\"{}\"]\n", site.path().display());
    let h = Harness::start(&base_yaml(&extra));
    let t = h.traffic();
    let conf = h.dir.path().display().to_string();
    let serve = |base: &str| {
        format!("api:\n  name: files\n  port: 0\n  ip: 127.0.0.1\n  path: {{ uri: /files }}\n  flow:\n    - rewriter: {{ mappings: [ {{ from: \"^/files/?(.*)\", to: \"/$1\" }} ] }}\n    - webServer: {{ docBase: \"{base}\" }}\n")
    };
    for base in [conf.as_str(), "..", "/etc"] {
        let r = h
            .call("PUT", "/admin/v1/apis/files", &serve(base), &[])
            .await;
        assert_eq!(r.status, 422, "{base}: {}", r.text());
        let p = r.json();
        let e = &p["errors"][0];
        assert_eq!(e["key"], "api.flow[1].webServer.docBase", "{p}");
        assert_eq!(e["line"], 8, "{p}");
        assert!(
            e["message"].as_str().unwrap().contains("allowedDocBases"),
            "{p}"
        );
        let r = h
            .call("POST", "/admin/v1/validate", &serve(base), &[])
            .await;
        assert_eq!(r.status, 422, "{}", r.text());
    }
    let r = get(t, "/files/gateway.yaml").await;
    assert_eq!(r.status, 404, "the configuration is not served");
    // Inside an allowed folder it works.
    let r = h
        .call(
            "PUT",
            "/admin/v1/apis/files",
            &serve(&site.path().display().to_string()),
            &[],
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(get(t, "/files/index.html").await.text(), "public page");
    // Kinds that only files may hold.
    for doc in [
        "proxy:\n  port: 0\n",
        "gateway:\n  threads: 1\n",
        "admin:\n  listen: 127.0.0.1:0\n",
    ] {
        let r = h.call("PUT", "/admin/v1/apis/files", doc, &[]).await;
        assert_eq!(r.status, 422, "{doc}: {}", r.text());
    }
    let mut h = h;
    h.control.take().unwrap().shutdown();
}
