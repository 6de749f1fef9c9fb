//! A real etcd server for tests (Debian's `etcd-server`), on free loopback ports with its data
//! in a temporary folder; stopped when dropped. `etcdctl` drives it from outside the gateway.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Etcd {
    pub client: SocketAddr,
    peer: SocketAddr,
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// With TLS: the CA, the server's certificate and key, and a client certificate and key
    /// (for etcdctl); clients must present a certificate signed by the CA.
    tls: Option<Tls>,
}

/// PEM files of a TLS etcd.
pub struct Tls {
    pub ca: std::path::PathBuf,
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
    pub client_cert: std::path::PathBuf,
    pub client_key: std::path::PathBuf,
}

/// True when etcd and etcdctl are installed; under CI their absence is a failure.
pub fn available() -> bool {
    let ok = [("etcd", "--version"), ("etcdctl", "version")]
        .iter()
        .all(|(b, arg)| {
            Command::new(b)
                .arg(arg)
                .output()
                .is_ok_and(|o| o.status.success())
        });
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "etcd is missing under CI");
        eprintln!("SKIPPED: etcd is not installed (scripts/setup.sh --test installs etcd-server)");
    }
    ok
}

impl Etcd {
    pub fn start() -> Etcd {
        Etcd::start_with(None)
    }

    /// A server that speaks only TLS to clients and requires their certificates
    /// (`--client-cert-auth`).
    pub fn start_tls(tls: Tls) -> Etcd {
        Etcd::start_with(Some(tls))
    }

    fn start_with(tls: Option<Tls>) -> Etcd {
        let client = SocketAddr::from(([127, 0, 0, 1], super::free_port()));
        let peer = SocketAddr::from(([127, 0, 0, 1], super::free_port()));
        let mut e = Etcd {
            client,
            peer,
            dir: tempfile::tempdir().unwrap(),
            child: None,
            tls,
        };
        e.run();
        e
    }

    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.client)
    }

    fn tls_args(&self, server: bool) -> Vec<String> {
        let Some(t) = &self.tls else {
            return Vec::new();
        };
        let p = |p: &std::path::Path| p.display().to_string();
        if server {
            vec![
                "--cert-file".into(),
                p(&t.cert),
                "--key-file".into(),
                p(&t.key),
                "--client-cert-auth".into(),
                "--trusted-ca-file".into(),
                p(&t.ca),
            ]
        } else {
            vec![
                "--cacert".into(),
                p(&t.ca),
                "--cert".into(),
                p(&t.client_cert),
                "--key".into(),
                p(&t.client_key),
            ]
        }
    }

    fn run(&mut self) {
        let child = Command::new("etcd")
            .args([
                "--name",
                "test",
                "--data-dir",
                &self.dir.path().join("data").display().to_string(),
                "--listen-client-urls",
                &self.url(),
                "--advertise-client-urls",
                &self.url(),
                "--listen-peer-urls",
                &format!("http://{}", self.peer),
                "--initial-advertise-peer-urls",
                &format!("http://{}", self.peer),
                "--initial-cluster",
                &format!("test=http://{}", self.peer),
            ])
            .args(self.tls_args(true))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if self.ctl(&["endpoint", "health"]).0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("etcd did not become healthy");
    }

    /// Stops the server (its data stays).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same ports and data.
    pub fn restart(&mut self) {
        self.kill();
        self.run();
    }

    /// Runs etcdctl against this server: success and stdout.
    pub fn ctl(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &self.url(), "--dial-timeout", "2s"])
            .args(self.tls_args(false))
            .args(args)
            .output()
            .expect("etcdctl runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    /// The current revision.
    pub fn revision(&self) -> i64 {
        let (_, out) = self.ctl(&["get", "/", "--prefix", "--keys-only", "-w", "json"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["header"]["revision"].as_i64().unwrap()
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
    }
}
