//! A real Redis server for tests (Debian's `redis-server`) on a free loopback port, optionally
//! with a password and TLS; no persistence; stopped when dropped. Also a Redis Cluster of three
//! primaries, and a primary with a replica watched by a Sentinel.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Redis {
    pub port: u16,
    password: Option<String>,
    tls: Option<(PathBuf, PathBuf, PathBuf)>,
    /// More arguments of `redis-server`.
    extra: Vec<String>,
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
            extra: Vec::new(),
            child: None,
        };
        r.run();
        r
    }

    /// A server on `port` with more `redis-server` arguments.
    pub fn start_with(port: u16, extra: Vec<String>) -> Redis {
        let mut r = Redis {
            port,
            password: None,
            tls: None,
            extra,
            child: None,
        };
        r.run();
        r
    }

    fn run(&mut self) {
        let port = self.port.to_string();
        let mut cmd = Command::new("redis-server");
        // A configuration file comes first.
        let (file, extra) = match self.extra.split_first() {
            Some((f, rest)) if !f.starts_with("--") => (Some(f), rest),
            _ => (None, &self.extra[..]),
        };
        cmd.args(file);
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
        cmd.args(extra);
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

/// Waits up to 30 s for `check` to hold.
fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A Redis Cluster of three primaries (no replicas), all slots assigned.
pub struct Cluster {
    pub nodes: Vec<Redis>,
    _dir: tempfile::TempDir,
}

impl Cluster {
    pub fn start() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let nodes: Vec<Redis> = (0..3)
            .map(|_| {
                let port = super::free_port();
                let conf = dir.path().join(format!("nodes-{port}.conf"));
                Redis::start_with(
                    port,
                    vec![
                        "--cluster-enabled".into(),
                        "yes".into(),
                        "--cluster-config-file".into(),
                        conf.display().to_string(),
                        "--cluster-node-timeout".into(),
                        "2000".into(),
                    ],
                )
            })
            .collect();
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for n in &nodes {
            create.arg(format!("127.0.0.1:{}", n.port));
        }
        let out = create
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        wait_until("the cluster did not come up", || {
            nodes
                .iter()
                .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"))
        });
        Cluster { nodes, _dir: dir }
    }
}

/// A primary, its replica, and one Sentinel watching them as `mymaster` (quorum 1).
pub struct Sentinels {
    pub primary: Redis,
    pub replica: Redis,
    pub sentinel: Redis,
    _dir: tempfile::TempDir,
}

impl Sentinels {
    pub fn start() -> Sentinels {
        let dir = tempfile::tempdir().unwrap();
        let primary = Redis::start_with(super::free_port(), Vec::new());
        let replica = Redis::start_with(
            super::free_port(),
            vec![
                "--replicaof".into(),
                "127.0.0.1".into(),
                primary.port.to_string(),
            ],
        );
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "sentinel monitor mymaster 127.0.0.1 {} 1\nsentinel down-after-milliseconds mymaster 1000\nsentinel failover-timeout mymaster 5000\n",
                primary.port
            ),
        )
        .unwrap();
        let sentinel = Redis::start_with(
            super::free_port(),
            vec![conf.display().to_string(), "--sentinel".into()],
        );
        wait_until("the replica did not sync", || {
            replica
                .cli(&["INFO", "replication"])
                .contains("master_link_status:up")
        });
        wait_until("the Sentinel does not see the replica", || {
            sentinel
                .cli(&["SENTINEL", "REPLICAS", "mymaster"])
                .contains(&replica.port.to_string())
        });
        Sentinels {
            primary,
            replica,
            sentinel,
            _dir: dir,
        }
    }

    /// The port the Sentinel names as the primary's.
    pub fn primary_port(&self) -> u16 {
        self.sentinel
            .cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster"])
            .lines()
            .nth(1)
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Makes the replica the primary, and waits until it is.
    pub fn fail_over(&self) {
        let out = self.sentinel.cli(&["SENTINEL", "FAILOVER", "mymaster"]);
        assert!(out.contains("OK"), "SENTINEL FAILOVER: {out}");
        wait_until("the failover did not happen", || {
            self.primary_port() == self.replica.port
                && self.replica.cli(&["ROLE"]).starts_with("master")
        });
    }
}
