//! Zero-downtime binary upgrades of the real binary: `turnpike upgrade` while `wrk` runs costs
//! no request and no refused connection, the new process serves the admin API too, and a new
//! process that cannot start leaves the old one serving.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const BIN: &str = env!("CARGO_BIN_EXE_turnpike");

fn config(port: u16, admin: u16, body: &str) -> String {
    format!(
        "gateway: {{ threads: 2, accessLog: false }}\n---\nadmin: {{ listen: \"127.0.0.1:{admin}\" }}\n---\napi:\n  port: {port}\n  ip: 127.0.0.1\n  flow: [ {{ return: {{ status: 200, body: {body} }} }} ]\n"
    )
}

fn start(dir: &Path) -> Child {
    let child = Command::new(BIN)
        .args(["run", "-c"])
        .arg(dir.join("gw.yaml"))
        .arg("--pid-file")
        .arg(dir.join("gw.pid"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("gw.log")).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !dir.join("gw.pid").exists() {
        assert!(Instant::now() < deadline, "the gateway did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

fn pid(dir: &Path) -> i32 {
    std::fs::read_to_string(dir.join("gw.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

fn stop(pid: i32) {
    let _ = Command::new("kill").arg(pid.to_string()).status();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_under_load_fails_no_request_and_refuses_no_connection() {
    if Command::new("wrk").arg("--version").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "wrk is missing under CI");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (free_port(), free_port());
    std::fs::write(dir.path().join("gw.yaml"), config(port, admin, "old")).unwrap();
    let mut old = start(dir.path());
    let old_pid = pid(dir.path());
    let url = format!("http://127.0.0.1:{port}/");
    let wrk = std::thread::spawn(move || {
        Command::new("wrk")
            .args(["-t2", "-c16", "-d5s", &url])
            .output()
            .unwrap()
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // The new binary's configuration answers differently, to tell the processes apart.
    std::fs::write(dir.path().join("gw.yaml"), config(port, admin, "new")).unwrap();
    let up = Command::new(BIN)
        .args(["upgrade", "--pid-file"])
        .arg(dir.path().join("gw.pid"))
        .output()
        .unwrap();
    assert!(
        up.status.success(),
        "{}",
        String::from_utf8_lossy(&up.stderr)
    );
    let new_pid = pid(dir.path());
    assert_ne!(new_pid, old_pid);
    let out = wrk.join().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("Socket errors"), "{text}");
    assert!(!text.contains("Non-2xx"), "{text}");
    // The old process drained and exited; the new one serves traffic and the admin API.
    let deadline = Instant::now() + Duration::from_secs(10);
    while old.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the old process did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    assert_eq!(get(addr, "/").await.text(), "new");
    let status = get(
        std::net::SocketAddr::from(([127, 0, 0, 1], admin)),
        "/healthz",
    )
    .await;
    assert_eq!(status.status, 200);
    stop(new_pid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_process_that_cannot_start_leaves_the_old_one_serving() {
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (free_port(), free_port());
    std::fs::write(dir.path().join("gw.yaml"), config(port, admin, "old")).unwrap();
    let mut old = start(dir.path());
    let old_pid = pid(dir.path());
    std::fs::write(dir.path().join("gw.yaml"), "api: { port: nope }\n").unwrap();
    let up = Command::new(BIN)
        .args(["upgrade", "--pid-file"])
        .arg(dir.path().join("gw.pid"))
        .output()
        .unwrap();
    assert!(!up.status.success());
    let err = String::from_utf8_lossy(&up.stderr);
    assert!(err.contains("goes on serving"), "{err}");
    assert!(
        err.contains("gw.yaml:1:"),
        "the reason is the configuration error: {err}"
    );
    assert_eq!(pid(dir.path()), old_pid);
    assert!(alive(old_pid));
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    assert_eq!(get(addr, "/").await.text(), "old");
    stop(old_pid);
    let _ = old.wait();
}
