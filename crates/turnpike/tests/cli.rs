//! The built binary: `validate`, `schema`, `--version`, and `run` with env substitution, SIGHUP
//! and `--watch` reloads, and SIGTERM graceful shutdown.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const BIN: &str = env!("CARGO_BIN_EXE_turnpike");

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn validate_reports_every_error_with_file_line_column_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        &dir,
        "bad.yaml",
        "api:\n  port: 2000\n  flow:\n    - setHeader:\n        name: X-A\n        value: ${path.nope}\n    - return: {}\n---\napi:\n  port: 2001\n  targte:\n    host: x\n---\napi:\n  port: 2002\n  target: { url: \"ftp://files.example\" }\n",
    );
    let out = Command::new(BIN)
        .args(["validate", "-c"])
        .arg(&f)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let file = f.display().to_string();
    assert!(
        err.contains(&format!(
            "{file}:6:16: api.flow[0].setHeader.value: `${{path.nope}}`"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!("{file}:11:3: api.targte: unknown field `targte`")),
        "{err}"
    );
    assert!(
        err.contains(&format!("{file}:16:18: api.target.url")),
        "{err}"
    );
    assert_eq!(err.lines().count(), 3, "{err}");

    // Every error of one document: a misspelt key hides neither the policy settings nor the
    // placeholder after it; two APIs taking the same requests name both places.
    let f = write(
        &dir,
        "many.yaml",
        "api:\n  port: 2000\n  targte:\n    url: http://localhost:9000\n  flow:\n    - rateLimiter:\n        requestLimit: many\n        requestLimitDuration: 10s\n    - setHeader:\n        name: X-A\n        value: ${nope.thing}\n---\napi:\n  port: 2001\n  path: /x\n  target: { url: \"http://localhost:9000\" }\n---\napi:\n  port: 2001\n  path: /x\n  target: { url: \"http://localhost:9001\" }\n",
    );
    let out = Command::new(BIN)
        .args(["validate", "-c"])
        .arg(&f)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let file = f.display().to_string();
    for want in [
        format!("{file}:3:3: api.targte: unknown field `targte`"),
        format!("{file}:7:23: api.flow[0].rateLimiter.requestLimit: "),
        format!("{file}:11:16: api.flow[1].setHeader.value: unknown template `${{nope.thing}}`"),
        format!("{file}:18:1: api: this API takes the same requests (port, host, method and path) as the one at {file}:13:1"),
    ] {
        assert!(err.contains(&want), "missing `{want}` in:\n{err}");
    }
    assert_eq!(err.lines().count(), 4, "{err}");

    let f = write(&dir, "lonely.yaml", "api:\n  port: 2000\n");
    let out = Command::new(BIN)
        .args(["validate", "-c"])
        .arg(&f)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("lonely.yaml:1:1: api: this API has no `target:`"),
        "{err}"
    );

    let good = write(
        &dir,
        "good.yaml",
        "api:\n  port: 2000\n  flow:\n    - return: { status: 204 }\n",
    );
    let out = Command::new(BIN)
        .args(["validate", "-c"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("configuration OK: 1 APIs"));
}

#[test]
fn validate_checks_the_examples() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    // examples/overload.yaml reads its port, backend and capacity from the environment.
    let out = Command::new(BIN)
        .args(["validate", "-c"])
        .arg(&root)
        .env("PORT", "8080")
        .env("BACKEND_URL", "http://127.0.0.1:9000")
        .env("BACKEND_CONCURRENCY", "16")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn schema_and_version() {
    let out = Command::new(BIN).arg("schema").output().unwrap();
    assert!(out.status.success());
    let schema: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert!(schema.to_string().contains("isRegExp"));
    let out = Command::new(BIN).arg("--version").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("turnpike "));
}

/// Starts `turnpike run` and waits until it logs that it listens.
fn spawn(args: &[&std::ffi::OsStr], envs: &[(&str, String)]) -> Child {
    let mut cmd = Command::new(BIN);
    cmd.arg("run")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("[turnpike] {line}");
            if !sent && line.contains("listening on") {
                let _ = tx.send(());
                sent = true;
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("gateway did not start");
    child
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

async fn wait_for(addr: std::net::SocketAddr, path: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(r) = try_send(addr, req("GET", path).body(Default::default()).unwrap()).await {
            if r.text() == want {
                return;
            }
        }
        assert!(Instant::now() < deadline, "{path} never answered {want}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_substitutes_env_reloads_on_sighup_and_watch_and_stops_gracefully() {
    let backend = Backend::start().await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = |body: &str| {
        format!(
            "gateway: {{ accessLog: false }}\n---\napi:\n  port: ${{GW_PORT}}\n  ip: 127.0.0.1\n  path: {{ uri: /v }}\n  flow: [ {{ return: {{ body: \"{body}\" }} }} ]\n---\napi:\n  port: ${{GW_PORT}}\n  ip: 127.0.0.1\n  target:\n    host: 127.0.0.1\n    port: ${{BACKEND_PORT}}\n"
        )
    };
    let f = write(&dir, "gw.yaml", &cfg("one"));
    let envs = [
        ("GW_PORT", port.to_string()),
        ("BACKEND_PORT", backend.port().to_string()),
    ];
    let mut child = spawn(&["-c".as_ref(), f.as_os_str(), "--watch".as_ref()], &envs);
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    wait_for(addr, "/v", "one").await;

    // SIGHUP reload.
    std::fs::write(&f, cfg("two")).unwrap();
    signal(&child, "-HUP");
    wait_for(addr, "/v", "two").await;

    // --watch reload (no signal).
    tokio::time::sleep(Duration::from_millis(1100)).await; // a distinct mtime
    std::fs::write(&f, cfg("three")).unwrap();
    wait_for(addr, "/v", "three").await;

    // An invalid file keeps the running config.
    std::fs::write(&f, "api: { port: [oops] }\n").unwrap();
    signal(&child, "-HUP");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(get(addr, "/v").await.text(), "three");

    // SIGTERM while a slow request is in flight: it completes, and the process exits 0.
    let slow = tokio::spawn(async move { get(addr, "/slow/700").await });
    let deadline = Instant::now() + Duration::from_secs(5);
    while backend.count() == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    signal(&child, "-TERM");
    let r = slow.await.unwrap();
    assert_eq!(r.text(), "slow done");
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "{status:?}");
}

#[test]
fn run_fails_clearly_on_a_missing_env_var_and_a_busy_port() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        &dir,
        "gw.yaml",
        "api:\n  port: ${SURELY_NOT_SET_42}\n  flow: [ { return: {} } ]\n",
    );
    let out = Command::new(BIN)
        .args(["run", "-c"])
        .arg(&f)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("gw.yaml:2:9") && err.contains("SURELY_NOT_SET_42"),
        "{err}"
    );

    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let f = write(
        &dir,
        "busy.yaml",
        &format!("api: {{ port: {port}, ip: 127.0.0.1, flow: [ {{ return: {{}} }} ] }}\n"),
    );
    let out = Command::new(BIN)
        .args(["run", "-c"])
        .arg(&f)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("cannot listen on 127.0.0.1:{port}")),
        "{err}"
    );
}
