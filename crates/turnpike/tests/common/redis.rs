//! A real Redis server for tests (Debian's `redis-server`) on a free loopback port, optionally
//! with a password and TLS; no persistence; stopped when dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Redis {
    pub port: u16,
    password: Option<String>,
    tls: Option<(PathBuf, PathBuf, PathBuf)>,
    child: Option<Child>,
}

/// True when redis-server and redis-cli are installed; under CI their absence is a failure.
pub fn available() -> bool {
    let ok = ["redis-server", "redis-cli"].iter().all(|b| {
        Command::new(b)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "redis is missing under CI"
        );
        eprintln!("SKIPPED: redis-server is not installed (scripts/setup.sh --test installs it)");
    }
    ok
}

impl Redis {
    /// A server; with `tls`: (certificate, key, CA) files, and the server speaks only TLS.
    pub fn start(password: Option<&str>, tls: Option<(PathBuf, PathBuf, PathBuf)>) -> Redis {
        let mut r = Redis {
            port: super::free_port(),
            password: password.map(str::to_owned),
            tls,
            child: None,
        };
        r.run();
        r
    }

    fn run(&mut self) {
        let port = self.port.to_string();
        let mut cmd = Command::new("redis-server");
        cmd.args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]);
        match &self.tls {
            None => {
                cmd.args(["--port", &port]);
            }
            Some((cert, key, ca)) => {
                cmd.args([
                    "--port",
                    "0",
                    "--tls-port",
                    &port,
                    "--tls-auth-clients",
                    "no",
                ])
                .arg("--tls-cert-file")
                .arg(cert)
                .arg("--tls-key-file")
                .arg(key)
                .arg("--tls-ca-cert-file")
                .arg(ca);
            }
        }
        if let Some(p) = &self.password {
            cmd.args(["--requirepass", p]);
        }
        self.child = Some(
            cmd.stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server starts"),
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.cli(&["PING"]).trim() == "PONG" {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("redis did not start");
    }

    /// `redis-cli` against this server; its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let mut cmd = Command::new("redis-cli");
        cmd.args(["-h", "127.0.0.1", "-p", &self.port.to_string()]);
        if let Some(p) = &self.password {
            cmd.args(["-a", p, "--no-auth-warning"]);
        }
        if let Some((_, _, ca)) = &self.tls {
            cmd.arg("--tls").arg("--cacert").arg(ca);
        }
        cmd.args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn restart(&mut self) {
        self.stop();
        self.run();
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}
