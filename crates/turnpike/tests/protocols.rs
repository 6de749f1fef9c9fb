//! WebSocket and gRPC through the gateway with real peers from PyPI (`websockets`, `grpcio`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use common::*;

const PY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py");

/// A python helper process that prints its port first; killed on drop.
struct PyServer {
    child: Child,
    port: u16,
}

impl PyServer {
    fn start(args: &[&str]) -> PyServer {
        let mut child = Command::new("python3")
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("no port from {args:?}: {line:?}"));
        PyServer { child, port }
    }
}

impl Drop for PyServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn py(args: &[&str]) -> (bool, String) {
    let out = Command::new("python3").args(args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    }
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_is_tunnelled_and_the_upgrade_request_runs_the_policies() {
    if !python_has(&["websockets"]) {
        return;
    }
    let server = PyServer::start(&[&format!("{PY}/ws_echo_server.py")]);
    let yaml = format!(
        r#"
gateway: {{ accessLog: false }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /ws/ }}
  flow:
    - apiKey: {{ stores: [ {{ simple: [ {{ secret: {{ value: ws-key }} }} ] }} ] }}
    - rateLimiter: {{ requestLimit: 1000, requestLimitDuration: PT1H }}
  target: {{ url: "http://127.0.0.1:{}" }}
"#,
        server.port
    );
    let gw = TestGateway::start(&yaml);
    let url = format!("ws://{}/ws/chat", gw.addr());
    let client = format!("{PY}/ws_client.py");
    let (ok, out) = tokio::task::spawn_blocking({
        let (client, url) = (client.clone(), url.clone());
        move || py(&[&client, &url, "X-Api-Key=ws-key"])
    })
    .await
    .unwrap();
    assert!(ok && out.starts_with("ok path:/ws/chat"), "{out}");
    let (ok, out) = tokio::task::spawn_blocking(move || py(&[&client, &url]))
        .await
        .unwrap();
    assert!(!ok && out.trim() == "refused 401", "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_url_takes_the_upgrades_and_the_target_the_rest() {
    // Membrane's `examples/websockets/websocket-stomp`: `webSocket.url` for the upgrades, the
    // target (a web server) for pages.
    if !python_has(&["websockets"]) {
        return;
    }
    let server = PyServer::start(&[&format!("{PY}/ws_echo_server.py")]);
    let pages = StaticServer::start("<h1>page</h1>").await;
    let gw = TestGateway::start(&format!(
        r#"
gateway: {{ accessLog: false }}
---
api:
  port: 0
  ip: 127.0.0.1
  flow:
    - log: {{}}
    - webSocket:
        url: ws://127.0.0.1:{}/
  target:
    url: http://{}
"#,
        server.port, pages.addr
    ));
    let r = get(gw.addr(), "/index.html").await;
    assert_eq!(
        (r.status.as_u16(), r.text()),
        (200, "<h1>page</h1>".to_owned())
    );
    let url = format!("ws://{}/stomp", gw.addr());
    let client = format!("{PY}/ws_client.py");
    let (ok, out) = tokio::task::spawn_blocking(move || py(&[&client, &url]))
        .await
        .unwrap();
    assert!(ok && out.starts_with("ok path:/stomp"), "{out}");
    assert_eq!(
        pages.hits.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the upgrade went to the pages"
    );
    // Frame interceptors cannot run: a load error that says so.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("apis.yaml");
    std::fs::write(
        &f,
        "api:\n  port: 2000\n  flow:\n    - webSocket:\n        flow:\n          - wsLog: {}\n  target:\n    url: http://localhost:8080\n",
    )
    .unwrap();
    let err = turnpike::start(vec![f]).err().unwrap().to_string();
    assert!(
        err.contains("api.flow[0].webSocket.flow") && err.contains("frame interceptors"),
        "{err}"
    );
}

fn grpc_gateway(server_port: u16, extra_flow: &str, listener: &str) -> String {
    format!(
        r#"
gateway: {{ accessLog: false }}
---
api:
  port: 0
  ip: 127.0.0.1
  {listener}
  path: {{ uri: /turnpike.test.Echo/ }}
  flow:
{extra_flow}    - rateLimiter: {{ requestLimit: 3, requestLimitDuration: PT1H, key: header, header: x-limit-key }}
  target: {{ url: "http://127.0.0.1:{server_port}", http2: true }}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_unary_and_streaming_over_h2c_with_trailers_and_grpc_errors() {
    if !python_has(&["grpc", "grpc_tools"]) {
        return;
    }
    let script = format!("{PY}/grpc_echo.py");
    let server = PyServer::start(&[&script, "server"]);
    let gw = TestGateway::start(&grpc_gateway(
        server.port,
        "    - apiKey: { stores: [ { simple: [ { secret: { value: grpc-key } } ] } ] }\n",
        "h2c: true",
    ));
    let target = gw.addr().to_string();
    let (ok, out) = tokio::task::spawn_blocking({
        let (s, t) = (script.clone(), target.clone());
        move || py(&[&s, "client", &t, "grpc-key"])
    })
    .await
    .unwrap();
    assert!(ok, "{out}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["say"], "echo: hi key=grpc-key");
    assert_eq!(
        v["trailers"]["x-served-by"], "python",
        "trailers must pass through: {v}"
    );
    assert_eq!(v["stream"], serde_json::json!(["0", "1", "2", "3", "4"]));
    assert_eq!(v["fail"]["code"], "NOT_FOUND");
    assert_eq!(v["fail"]["details"], "no such thing: x");

    // Errors the gateway itself generates are gRPC statuses.
    let status = |method: &'static str, key: &'static str| {
        let (s, t) = (script.clone(), target.clone());
        tokio::task::spawn_blocking(move || {
            let (_, out) = py(&[&s, "status", &t, method, key]);
            serde_json::from_str::<serde_json::Value>(out.trim()).unwrap()
        })
    };
    let v = status("Say", "").await.unwrap();
    assert_eq!(v["code"], "UNAUTHENTICATED", "{v}");
    let v = status("Say", "wrong").await.unwrap();
    assert_eq!(v["code"], "PERMISSION_DENIED", "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_over_tls_and_rate_limit_and_unreachable_backend_statuses() {
    if !python_has(&["grpc", "grpc_tools"]) {
        return;
    }
    let script = format!("{PY}/grpc_echo.py");
    let server = PyServer::start(&[&script, "server"]);
    let dir = tempfile::tempdir().unwrap();
    let pki = common::pki::Pki::new(dir.path());
    let yaml = grpc_gateway(
        server.port,
        "",
        &format!(
            "ssl: {{ certificate: {}, key: {} }}",
            pki.server.cert.display(),
            pki.server.key.display()
        ),
    );
    let gw = TestGateway::start(&yaml);
    let target = gw.addr().to_string();
    let ca = pki.ca.display().to_string();
    let run = move |args: Vec<String>| {
        let ca = ca.clone();
        tokio::task::spawn_blocking(move || {
            let out = Command::new("python3")
                .args(&args)
                .env("TP_GRPC_CA", &ca)
                .output()
                .unwrap();
            if !out.status.success() {
                eprintln!("{}", String::from_utf8_lossy(&out.stderr));
            }
            serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
        })
    };
    // Over TLS (ALPN h2): unary, streaming and trailers, with the limit key "a" (3 per hour:
    // the client makes three calls).
    let v = run(vec![
        script.clone(),
        "client".into(),
        target.clone(),
        "limit:a".into(),
    ])
    .await
    .unwrap();
    assert_eq!(v["say"], "echo: hi");
    assert_eq!(v["trailers"]["x-served-by"], "python");
    assert_eq!(v["stream"], serde_json::json!(["0", "1", "2", "3", "4"]));
    assert_eq!(v["fail"]["code"], "NOT_FOUND");
    // The fourth call of key "a" is rate limited: RESOURCE_EXHAUSTED.
    let v = run(vec![
        script.clone(),
        "status".into(),
        target.clone(),
        "Say".into(),
        "limit:a".into(),
    ])
    .await
    .unwrap();
    assert_eq!(v["code"], "RESOURCE_EXHAUSTED", "{v}");
    // The backend goes away: UNAVAILABLE.
    drop(server);
    let v = run(vec![
        script.clone(),
        "status".into(),
        target.clone(),
        "Say".into(),
        "limit:b".into(),
    ])
    .await
    .unwrap();
    assert_eq!(v["code"], "UNAVAILABLE", "{v}");
}
