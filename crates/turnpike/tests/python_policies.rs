//! `python` policies run by real executor processes (the repository's `python/` package):
//! header, path and body changes seen by a real backend, early answers, `async` policies,
//! exceptions, timeouts, an executor killed under load, the watchdog that restarts an executor
//! a hanging call holds, reloads of changed code, load errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use http_body_util::Full;

const POLICIES: &str = r#"
import asyncio
import time
from turnpike_policy import Policy, Response


class AddTenant(Policy):
    def __init__(self, config):
        self.header = config["header"]

    def on_request(self, request):
        if request.headers.get("x-block") == "1":
            return Response(status=418, body=b"blocked", headers={"x-why": "asked"})
        request.headers[self.header] = "t-" + request.path.rsplit("/", 1)[-1]
        if "move" in request.query_params:
            request.path = "/moved" + request.path
            request.query = ""

    def on_response(self, request, response):
        response.headers["x-seen"] = request.method


class Upper(Policy):
    def on_request(self, request):
        request.body = request.body.upper()

    def on_response(self, request, response):
        response.body = response.body + b"!"
        response.status = 201


class Sleepy(Policy):
    async def on_request(self, request):
        await asyncio.sleep(float(request.headers.get("x-sleep", "0")))
        request.headers["x-async"] = "yes"


class Hang(Policy):
    def on_request(self, request):
        if request.headers.get("x-hang") == "1":
            time.sleep(60)


class Boom(Policy):
    def on_request(self, request):
        raise ValueError("boom")


class Raising(Policy):
    def __init__(self, config):
        raise RuntimeError("no database")
"#;

const VERSIONED: &str = r#"
from turnpike_policy import Policy


class Version(Policy):
    def on_request(self, request):
        request.headers["x-code"] = "VERSION"
"#;

/// An interpreter that finds the repository's `turnpike_policy` package.
fn interpreter(dir: &Path) -> String {
    let package = concat!(env!("CARGO_MANIFEST_DIR"), "/../../python");
    let path = dir.join("python");
    std::fs::write(
        &path,
        // `-X` marks the executors of this test, for `executor_pids`.
        format!(
            "#!/bin/sh\nPYTHONPATH={package} exec python3 -X turnpike_test={} \"$@\"\n",
            dir.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

fn python_available() -> bool {
    let ok = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "CI needs python3");
        eprintln!("skipped: no python3");
    }
    ok
}

fn config(gw_dir: &Path, backend: u16, workers: usize) -> String {
    let policies = gw_dir.join("policies");
    std::fs::create_dir_all(&policies).unwrap();
    std::fs::write(policies.join("shop.py"), POLICIES).unwrap();
    if !policies.join("versioned.py").exists() {
        std::fs::write(
            policies.join("versioned.py"),
            VERSIONED.replace("VERSION", "v1"),
        )
        .unwrap();
    }
    let python = interpreter(gw_dir);
    format!(
        r#"gateway:
  accessLog: false
  python: {{ interpreter: "{python}", path: [ policies ], workers: {workers} }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /t/ }}
  flow: [ {{ python: {{ module: shop, class: AddTenant, config: {{ header: X-Tenant }} }} }} ]
  target: {{ host: 127.0.0.1, port: {backend} }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /u/ }}
  flow: [ {{ python: {{ module: shop, class: Upper, body: buffer }} }} ]
  target: {{ host: 127.0.0.1, port: {backend} }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /s/ }}
  flow: [ {{ python: {{ module: shop, class: Sleepy, timeout: 300ms }} }} ]
  target: {{ host: 127.0.0.1, port: {backend} }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /hang/ }}
  flow: [ {{ python: {{ module: shop, class: Hang, timeout: 300ms }} }} ]
  target: {{ host: 127.0.0.1, port: {backend} }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /patient/ }}
  flow: [ {{ python: {{ module: shop, class: AddTenant, config: {{ header: X-Tenant }}, timeout: 5s }} }} ]
  target: {{ host: 127.0.0.1, port: {backend} }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /boom/ }}
  flow: [ {{ python: {{ module: shop, class: Boom }} }} ]
  target: {{ host: 127.0.0.1, port: {backend} }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /skip/ }}
  flow: [ {{ python: {{ module: shop, class: Boom, onError: skip }} }} ]
  target: {{ host: 127.0.0.1, port: {backend} }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /v/ }}
  flow: [ {{ python: {{ module: versioned, class: Version }} }} ]
  target: {{ host: 127.0.0.1, port: {backend} }}
"#
    )
}

/// A gateway whose config file lives in its own folder with the policies.
fn start(backend: u16, workers: usize) -> TestGateway {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gateway.yaml");
    std::fs::write(&file, config(dir.path(), backend, workers)).unwrap();
    let gateway = turnpike::start(vec![file.clone()]).unwrap_or_else(|e| panic!("{e}"));
    TestGateway {
        gateway: Some(gateway),
        dir,
        file,
    }
}

async fn post(addr: std::net::SocketAddr, path: &str, body: &str) -> Reply {
    send(
        addr,
        req("POST", path)
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_change_requests_and_responses_answer_early_and_fail_safely() {
    if !python_available() {
        return;
    }
    let backend = Backend::start().await;
    let gw = start(backend.port(), 2);
    let addr = gw.addr();

    // Header changes reach the backend; the response phase sees the request.
    let r = get(addr, "/t/abc").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-seen"), Some("GET"));
    assert_eq!(backend.last().headers["x-tenant"], "t-abc");

    // Path and query changes.
    get(addr, "/t/x?move=1").await;
    assert_eq!(backend.last().uri, "/moved/t/x");

    // An early answer never reaches the backend; the response phase still runs.
    let before = backend.count();
    let r = get_with(addr, "/t/abc", &[("x-block", "1")]).await;
    assert_eq!(r.status, 418);
    assert_eq!(r.text(), "blocked");
    assert_eq!(r.header("x-why"), Some("asked"));
    assert_eq!(backend.count(), before);

    // The body, both ways.
    let r = post(addr, "/u/echo", "hello").await;
    assert_eq!(backend.last().body, "HELLO");
    assert_eq!(r.status, 201);
    assert_eq!(r.text(), "HELLO!");

    // async policies; one that sleeps past its timeout is answered 504 without waiting.
    get(addr, "/s/a").await;
    assert_eq!(backend.last().headers["x-async"], "yes");
    let started = Instant::now();
    let r = get_with(addr, "/s/a", &[("x-sleep", "2")]).await;
    assert_eq!(r.status, 504);
    assert_eq!(r.json()["type"], "urn:turnpike:problem:policy-timeout");
    assert!(started.elapsed() < Duration::from_millis(1500));
    // A sleeping call does not hold the others up.
    let slow = tokio::spawn(get_with(addr, "/s/b", &[("x-sleep", "0.25")]));
    let fast = get(addr, "/t/quick").await;
    assert_eq!(fast.status, 200);
    assert_eq!(slow.await.unwrap().status, 200);

    // Exceptions: rejected (500 problem+json, no internals), or skipped.
    let r = get(addr, "/boom/x").await;
    assert_eq!(r.status, 500);
    assert_eq!(r.json()["type"], "urn:turnpike:problem:policy-failed");
    assert!(!r.text().contains("boom"), "{}", r.text());
    let r = get(addr, "/skip/x").await;
    assert_eq!(r.status, 200);
}

/// The executors started for the gateway in `dir`.
fn executor_pids(dir: &Path) -> Vec<u32> {
    let out = std::process::Command::new("pgrep")
        .args(["-f", &format!("turnpike_test={} ", dir.display())])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_killed_under_load_is_back_within_a_second() {
    if !python_available() {
        return;
    }
    let backend = Backend::start().await;
    let gw = start(backend.port(), 1);
    let addr = gw.addr();
    assert_eq!(get(addr, "/t/a").await.status, 200);
    let pids = executor_pids(gw.dir.path());
    assert_eq!(pids.len(), 1, "{pids:?}");

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut loops = Vec::new();
    for _ in 0..4 {
        let stop = stop.clone();
        loops.push(tokio::spawn(async move {
            let mut statuses = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let r = get(addr, "/t/load").await;
                let ty = if r.status == 200 {
                    String::new()
                } else {
                    r.json()["type"].as_str().unwrap_or("").to_owned()
                };
                statuses.push((r.status.as_u16(), ty));
            }
            statuses
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let killed = Instant::now();
    assert!(std::process::Command::new("kill")
        .args(["-KILL", &pids[0].to_string()])
        .status()
        .unwrap()
        .success());
    // Back within a second: a request gets the policy's header again.
    let mut back = None;
    while killed.elapsed() < Duration::from_secs(5) {
        let r = get(addr, "/t/probe").await;
        if r.status == 200 && backend.last().headers.get("x-tenant").is_some() {
            back = Some(killed.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut all = Vec::new();
    for l in loops {
        all.extend(l.await.unwrap());
    }
    let back = back.expect("the executor did not come back");
    eprintln!(
        "the executor was back after {back:?}; {} requests",
        all.len()
    );
    assert!(back < Duration::from_secs(1), "back after {back:?}");
    // Every request was served, or failed by `onError` (reject: policy-failed).
    let failed: Vec<_> = all.iter().filter(|(s, _)| *s != 200).collect();
    assert!(
        failed
            .iter()
            .all(|(s, t)| *s == 500 && t == "urn:turnpike:problem:policy-failed"),
        "{failed:?}"
    );
    // Only calls in flight when it died failed (one per client loop and the probe, and those
    // queued on its connection before its end was read): the others waited for it to be back.
    assert!(
        failed.len() <= 10,
        "{} of {} failed",
        failed.len(),
        all.len()
    );
    let after = executor_pids(gw.dir.path());
    assert_eq!(after.len(), 1);
    assert_ne!(after[0], pids[0]);
}

/// A plain method that blocks (`time.sleep(60)`) holds its executor's event loop: the watchdog
/// kills that executor when the call outlives its timeout and starts it again, so the requests
/// after it are served instead of waiting behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_policy_is_killed_by_the_watchdog_and_the_rest_are_served() {
    if !python_available() {
        return;
    }
    let backend = Backend::start().await;
    let gw = start(backend.port(), 1);
    let addr = gw.addr();
    assert_eq!(get(addr, "/patient/a").await.status, 200);
    let pids = executor_pids(gw.dir.path());
    assert_eq!(pids.len(), 1, "{pids:?}");

    let started = Instant::now();
    let r = get_with(addr, "/hang/x", &[("x-hang", "1")]).await;
    assert_eq!(r.status, 504, "{}", r.text());
    assert_eq!(r.json()["type"], "urn:turnpike:problem:policy-timeout");
    assert!(started.elapsed() < Duration::from_secs(2));

    // 100 ordinary requests right after: each waits (within its 5 s timeout) for the executor
    // to be back, none waits for the sleeping one.
    let before = backend.count();
    let started = Instant::now();
    let mut calls = Vec::new();
    for i in 0..100 {
        calls.push(tokio::spawn(async move {
            get(addr, &format!("/patient/n{i}")).await.status.as_u16()
        }));
    }
    let mut statuses = Vec::new();
    for c in calls {
        statuses.push(c.await.unwrap());
    }
    let took = started.elapsed();
    eprintln!("100 requests after the hanging one took {took:?}");
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    assert_eq!(backend.count() - before, 100);
    assert!(took < Duration::from_secs(5), "{took:?}");
    let after = executor_pids(gw.dir.path());
    assert_eq!(after.len(), 1, "{after:?}");
    assert_ne!(after[0], pids[0], "the hanging executor still runs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_python_code_is_loaded_on_reload_and_old_executors_stop() {
    if !python_available() {
        return;
    }
    let backend = Backend::start().await;
    let gw = start(backend.port(), 1);
    let addr = gw.addr();
    get(addr, "/v/x").await;
    assert_eq!(backend.last().headers["x-code"], "v1");
    let before = executor_pids(gw.dir.path());
    std::fs::write(
        gw.dir.path().join("policies/versioned.py"),
        VERSIONED.replace("VERSION", "v2"),
    )
    .unwrap();
    gw.gw().reload().unwrap();
    get(addr, "/v/x").await;
    assert_eq!(backend.last().headers["x-code"], "v2");
    // The previous configuration's executors exit.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = executor_pids(gw.dir.path());
        if before.iter().all(|p| !now.contains(p)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "old executors still run: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[test]
fn modules_classes_and_constructors_that_fail_are_load_errors() {
    if !python_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let base = config(dir.path(), 1, 1);
    let file = dir.path().join("gateway.yaml");
    for (from, to, expect) in [
        (
            "module: versioned, class: Version",
            "module: nosuch, class: Version",
            "cannot load the Python policy `nosuch.Version`: ModuleNotFoundError",
        ),
        (
            "module: versioned, class: Version",
            "module: versioned, class: Nope",
            "cannot load the Python policy `versioned.Nope`",
        ),
        (
            "module: versioned, class: Version",
            "module: shop, class: Raising",
            "cannot load the Python policy `shop.Raising`: RuntimeError: no database",
        ),
    ] {
        let text = base.replace(from, to);
        let line = text.lines().position(|l| l.contains(to)).unwrap() + 1;
        std::fs::write(&file, text).unwrap();
        let e = match turnpike::start(vec![file.clone()]) {
            Ok(_) => panic!("loaded with {to}"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains(expect), "{e}");
        // At the policy's place.
        assert!(e.contains(&format!("gateway.yaml:{line}:")), "{e}");
    }
    let e = match turnpike::start(vec![{
        std::fs::write(
            &file,
            base.replace("path: [ policies ]", "path: [ nowhere ]"),
        )
        .unwrap();
        file.clone()
    }]) {
        Ok(_) => panic!("loaded"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("gateway.python.path[0]"), "{e}");
}

#[test]
fn the_python_package_passes_its_own_tests() {
    if !python_available() {
        return;
    }
    let out = std::process::Command::new("python3")
        .args(["-m", "unittest", "discover", "-s", "tests"])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../../python"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
