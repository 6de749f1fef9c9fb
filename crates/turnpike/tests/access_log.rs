//! The access log of the real binary: the combined format to a file that SIGUSR1 reopens after
//! a rotation, sampling (every error, no success), JSON lines with chosen fields, and no line
//! lost when SIGTERM follows the last response.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const BIN: &str = env!("CARGO_BIN_EXE_turnpike");

fn start(dir: &Path, yaml: &str, stdout: Stdio) -> Child {
    std::fs::write(dir.join("gw.yaml"), yaml).unwrap();
    let child = Command::new(BIN)
        .args(["run", "-c"])
        .arg(dir.join("gw.yaml"))
        .arg("--pid-file")
        .arg(dir.join("gw.pid"))
        .stdout(stdout)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !dir.join("gw.pid").exists() {
        assert!(Instant::now() < deadline, "the gateway did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

fn lines_eventually(path: &Path, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        if lines.len() >= n || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn combined_lines_to_a_file_sampled_and_reopened_on_sigusr1() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let yaml = format!(
        "gateway:\n  threads: 1\n  accessLog: {{ format: combined, output: access.log, sample: {{ errors: 100%, successes: 0% }} }}\n---\napi:\n  port: {port}\n  ip: 127.0.0.1\n  path: {{ uri: /ok }}\n  flow: [ {{ return: {{ status: 200, body: fine }} }} ]\n"
    );
    let mut child = start(dir.path(), &yaml, Stdio::null());
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    for _ in 0..3 {
        assert_eq!(get(addr, "/ok").await.status, 200);
    }
    for _ in 0..2 {
        let r = get_with(
            addr,
            "/missing",
            &[("user-agent", "tester \"1\""), ("referer", "http://x/")],
        )
        .await;
        assert_eq!(r.status, 404);
    }
    let log = dir.path().join("access.log");
    let lines = lines_eventually(&log, 2);
    assert_eq!(lines.len(), 2, "only the errors: {lines:?}");
    for l in &lines {
        assert!(l.starts_with("127.0.0.1 - - ["), "{l}");
        assert!(l.contains("] \"GET /missing HTTP/1.1\" 404 "), "{l}");
        assert!(l.ends_with(" \"http://x/\" \"tester \\\"1\\\"\""), "{l}");
    }
    // logrotate moves the file and signals: the next lines go to a new file.
    std::fs::rename(&log, dir.path().join("access.log.1")).unwrap();
    let pid = std::fs::read_to_string(dir.path().join("gw.pid")).unwrap();
    assert!(Command::new("kill")
        .args(["-USR1", pid.trim()])
        .status()
        .unwrap()
        .success());
    let deadline = Instant::now() + Duration::from_secs(5);
    while !log.exists() {
        assert!(Instant::now() < deadline, "no new file after SIGUSR1");
        get(addr, "/again").await;
        std::thread::sleep(Duration::from_millis(50));
    }
    let fresh = lines_eventually(&log, 1);
    assert!(fresh.iter().all(|l| l.contains("/again")), "{fresh:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("access.log.1"))
            .unwrap()
            .lines()
            .count(),
        2
    );
    let _ = Command::new("kill").arg(pid.trim()).status();
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_hold_the_fields_chosen() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let yaml = format!(
        "gateway:\n  threads: 1\n  accessLog: {{ fields: [status, method, userAgent, protocol] }}\n---\napi:\n  port: {port}\n  ip: 127.0.0.1\n  flow: [ {{ return: {{ status: 201 }} }} ]\n"
    );
    let out = dir.path().join("stdout");
    let mut child = start(
        dir.path(),
        &yaml,
        Stdio::from(std::fs::File::create(&out).unwrap()),
    );
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    get_with(addr, "/x", &[("user-agent", "ua/1")]).await;
    let lines = lines_eventually(&out, 1);
    assert_eq!(
        lines[0],
        r#"{"status":201,"method":"GET","userAgent":"ua/1","protocol":"HTTP/1.1"}"#
    );
    let pid = std::fs::read_to_string(dir.path().join("gw.pid")).unwrap();
    let _ = Command::new("kill").arg(pid.trim()).status();
    let _ = child.wait();
}

#[test]
fn access_log_settings_are_checked_at_load() {
    for (bad, says) in [
        ("{ format: xml }", "not a format"),
        (
            "{ format: common, fields: [status] }",
            "fields choose what JSON lines hold",
        ),
        ("{ fields: [status, nope] }", "unknown field `nope`"),
        ("{ output: /no/such/folder/a.log }", "does not exist"),
        ("{ sample: { successes: 120% } }", "share from 0 to 1"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("g.yaml");
        std::fs::write(&f, format!("gateway:\n  accessLog: {bad}\n")).unwrap();
        let err = turnpike::load_and_compile(&[f])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains(says), "{bad}: {err}");
        assert!(err.contains("g.yaml:"), "{err}");
    }
}

/// Lines leave the workers through the log writer; a graceful stop (SIGTERM) right after the
/// last response still writes every line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_right_after_the_last_response_loses_no_line() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let yaml = format!(
        "gateway:\n  threads: 2\n  accessLog: {{ output: access.log, fields: [status, uri] }}\n---\napi:\n  port: {port}\n  ip: 127.0.0.1\n  flow: [ {{ return: {{ status: 200, body: fine }} }} ]\n"
    );
    let mut child = start(dir.path(), &yaml, Stdio::null());
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut tasks = Vec::new();
    for c in 0..8 {
        tasks.push(tokio::spawn(async move {
            for i in 0..250 {
                assert_eq!(get(addr, &format!("/c{c}/r{i}")).await.status, 200);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let pid = std::fs::read_to_string(dir.path().join("gw.pid")).unwrap();
    assert!(Command::new("kill")
        .args(["-TERM", pid.trim()])
        .status()
        .unwrap()
        .success());
    assert!(child.wait().unwrap().success());
    let text = std::fs::read_to_string(dir.path().join("access.log")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2000);
    for c in 0..8 {
        for i in [0, 249] {
            let want = format!(r#"{{"status":200,"uri":"/c{c}/r{i}"}}"#);
            assert!(lines.contains(&want.as_str()), "{want} missing");
        }
    }
}
