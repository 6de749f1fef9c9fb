//! Rate limits shared through a real Redis by three gateway processes: `exact` admits exactly
//! the limit under concurrent load, `local-sync` stays within its documented overshoot, Redis
//! stopped mid-test is handled by `onError` within the timeout and limits hold again once it is
//! back, keys expire, passwords and TLS work; a Redis Cluster spreads the keys over its nodes;
//! a Sentinel failover is followed; and local counters survive a reload.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::redis::{self, Redis};
use common::*;

const BIN: &str = env!("CARGO_BIN_EXE_turnpike");

/// A gateway process on `port` with one rate-limited API (`limiter`: the policy's settings).
struct Gateway {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Gateway {
    fn start(limiter: &str) -> Gateway {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let yaml = format!(
            "gateway: {{ threads: 2, accessLog: false }}\n---\napi:\n  name: orders\n  port: {port}\n  ip: 127.0.0.1\n  flow:\n    - rateLimiter: {limiter}\n    - return: {{ status: 200 }}\n"
        );
        let file = dir.path().join("gw.yaml");
        std::fs::write(&file, yaml).unwrap();
        let pid = dir.path().join("gw.pid");
        let child = Command::new(BIN)
            .args(["run", "-c"])
            .arg(&file)
            .arg("--pid-file")
            .arg(&pid)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("gw.log")).unwrap())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !pid.exists() {
            assert!(
                Instant::now() < deadline,
                "a gateway did not start: {}",
                std::fs::read_to_string(dir.path().join("gw.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Gateway {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            _dir: dir,
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `total` requests spread over `gateways` from `clients` concurrent keep-alive clients;
/// returns how many of each status came back, and how many each gateway took.
async fn load(
    gateways: &[SocketAddr],
    total: usize,
    clients: usize,
) -> (Vec<(u16, usize)>, Vec<usize>) {
    paced_load(gateways, total, clients, Duration::ZERO).await
}

/// [`load`] with each client pausing `pause` between requests.
async fn paced_load(
    gateways: &[SocketAddr],
    total: usize,
    clients: usize,
    pause: Duration,
) -> (Vec<(u16, usize)>, Vec<usize>) {
    let next = Arc::new(AtomicUsize::new(0));
    let per_gateway: Arc<Vec<AtomicUsize>> =
        Arc::new(gateways.iter().map(|_| AtomicUsize::new(0)).collect());
    let mut tasks = Vec::new();
    for c in 0..clients {
        let addr = gateways[c % gateways.len()];
        let g = c % gateways.len();
        let (next, per) = (next.clone(), per_gateway.clone());
        tasks.push(tokio::spawn(async move {
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (mut send, conn) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
                    .await
                    .unwrap();
            tokio::spawn(conn);
            let mut statuses = Vec::new();
            while next.fetch_add(1, SeqCst) < total {
                send.ready().await.unwrap();
                let r = send
                    .send_request(
                        req("GET", "/")
                            .body(http_body_util::Full::new(bytes::Bytes::new()))
                            .unwrap(),
                    )
                    .await
                    .unwrap();
                statuses.push(r.status().as_u16());
                per[g].fetch_add(1, SeqCst);
                let _ = http_body_util::BodyExt::collect(r.into_body()).await;
                if !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                }
            }
            statuses
        }));
    }
    let mut counts: std::collections::BTreeMap<u16, usize> = Default::default();
    for t in tasks {
        for s in t.await.unwrap() {
            *counts.entry(s).or_default() += 1;
        }
    }
    let per = per_gateway.iter().map(|a| a.load(SeqCst)).collect();
    (counts.into_iter().collect(), per)
}

fn count(c: &[(u16, usize)], status: u16) -> usize {
    c.iter().find(|(s, _)| *s == status).map_or(0, |(_, n)| *n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_mode_admits_exactly_the_limit_across_three_gateways() {
    if !redis::available() {
        return;
    }
    let r = Redis::start(Some("pw-1"), None);
    let limiter = format!(
        "{{ requestLimit: 1000, requestLimitDuration: PT1H, keyExpression: all, store: {{ redis: {{ url: \"redis://:pw-1@127.0.0.1:{}/0\", timeout: 500ms, onError: deny }} }} }}",
        r.port
    );
    let gws: Vec<Gateway> = (0..3).map(|_| Gateway::start(&limiter)).collect();
    let addrs: Vec<SocketAddr> = gws.iter().map(|g| g.addr).collect();
    let (counts, per) = load(&addrs, 1600, 24).await;
    assert_eq!(
        count(&counts, 200),
        1000,
        "{counts:?} keys: {}",
        r.cli(&["KEYS", "*"])
    );
    assert_eq!(count(&counts, 429), 600, "{counts:?}");
    assert!(
        per.iter().all(|n| *n > 300),
        "every gateway took a share: {per:?}"
    );
    // One key (the API is named alike on every gateway; the counter is namespaced by API
    // and limiter), and it expires with its window.
    let keys = r.cli(&["KEYS", "turnpike:rl:*"]);
    assert_eq!(keys.lines().count(), 1, "{keys}");
    let ttl: i64 = r
        .cli(&["PTTL", keys.lines().next().unwrap()])
        .trim()
        .parse()
        .unwrap();
    assert!(ttl > 0 && ttl <= 2 * 3_600_000, "{ttl}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_sync_stays_within_its_overshoot_bound() {
    if !redis::available() {
        return;
    }
    let r = Redis::start(None, None);
    let interval_ms = 100;
    let limiter = format!(
        "{{ requestLimit: 300, requestLimitDuration: PT1H, keyExpression: all, mode: local-sync, syncInterval: {interval_ms}ms, store: {{ redis: {{ url: \"redis://127.0.0.1:{}\", timeout: 200ms }} }} }}",
        r.port
    );
    let gws: Vec<Gateway> = (0..3).map(|_| Gateway::start(&limiter)).collect();
    let addrs: Vec<SocketAddr> = gws.iter().map(|g| g.addr).collect();
    let start = Instant::now();
    // Paced well below what one interval could admit on its own, as in production.
    let (counts, per) = paced_load(&addrs, 3000, 12, Duration::from_millis(5)).await;
    let secs = start.elapsed().as_secs_f64();
    let admitted = count(&counts, 200);
    // Each gateway admits at most what it sees left; between syncs the others may admit what
    // they see too: at most what one gateway receives in one interval, per other gateway
    // (with a second interval of slack for a sync in flight).
    let fastest = per.iter().copied().max().unwrap() as f64 / secs;
    let bound = 300
        + ((addrs.len() - 1) as f64 * fastest * 2.0 * interval_ms as f64 / 1000.0).ceil() as usize;
    assert!(admitted >= 300, "{admitted} admitted, {counts:?}");
    assert!(
        admitted <= bound,
        "{admitted} admitted, bound {bound}: {counts:?} over {secs:.2}s"
    );
    eprintln!(
        "local-sync: {admitted} admitted of limit 300 (bound {bound}), {:.0} req/s",
        3000.0 / secs
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_failures_follow_on_error_within_the_timeout_and_limits_return() {
    if !redis::available() {
        return;
    }
    let mut r = Redis::start(None, None);
    let limiter = |on_error: &str, port: u16| {
        format!(
            "{{ requestLimit: 5, requestLimitDuration: PT1H, keyExpression: all, store: {{ redis: {{ url: \"redis://127.0.0.1:{port}\", timeout: 100ms, onError: {on_error} }} }} }}"
        )
    };
    let deny = Gateway::start(&limiter("deny", r.port));
    let allow = Gateway::start(&limiter("allow", r.port));
    for _ in 0..5 {
        assert_eq!(get(deny.addr, "/").await.status, 200);
    }
    assert_eq!(get(deny.addr, "/").await.status, 429);
    r.stop();
    for _ in 0..5 {
        let t = Instant::now();
        let d = get(deny.addr, "/").await;
        assert_eq!(d.status, 503, "{}", d.text());
        assert_eq!(
            d.json()["type"],
            "urn:turnpike:problem:rate-limit-unavailable"
        );
        assert!(
            t.elapsed() < Duration::from_millis(1000),
            "{:?}",
            t.elapsed()
        );
        let t = Instant::now();
        assert_eq!(get(allow.addr, "/").await.status, 200);
        assert!(
            t.elapsed() < Duration::from_millis(1000),
            "{:?}",
            t.elapsed()
        );
    }
    // Redis is back (empty): the limit holds again.
    r.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if get(deny.addr, "/").await.status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the gateway never reconnected");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Each worker reconnects on its own: one may still answer 503 for a request or two.
    let mut statuses = Vec::new();
    while statuses.iter().filter(|s| **s == 429).count() < 4 {
        statuses.push(get(deny.addr, "/").await.status.as_u16());
        assert!(statuses.len() < 30, "{statuses:?}");
    }
    let admitted = statuses.iter().filter(|s| **s == 200).count();
    assert_eq!(admitted, 4, "five in all with the first one: {statuses:?}");
    let first_refusal = statuses.iter().position(|s| *s == 429).unwrap();
    assert!(
        statuses[first_refusal..].iter().all(|s| *s != 200),
        "{statuses:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_expire_tls_works_and_a_wrong_password_is_an_error() {
    if !redis::available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pki = pki::Pki::new(dir.path());
    let r = Redis::start(
        Some("pw-2"),
        Some((
            pki.server.cert.clone(),
            pki.server.key.clone(),
            pki.ca.clone(),
        )),
    );
    let ca = pki.ca.display().to_string();
    let limiter = format!(
        "{{ requestLimit: 2, requestLimitDuration: 1s, algorithm: slidingWindow, keyExpression: all, store: {{ redis: {{ url: \"rediss://localhost:{}\", password: pw-2, ca: \"{ca}\", timeout: 500ms, onError: deny }} }} }}",
        r.port
    );
    let g = Gateway::start(&limiter);
    assert_eq!(get(g.addr, "/").await.status, 200);
    assert_eq!(get(g.addr, "/").await.status, 200);
    assert_eq!(get(g.addr, "/").await.status, 429);
    assert!(r.cli(&["DBSIZE"]).trim().parse::<u64>().unwrap() >= 1);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        r.cli(&["DBSIZE"]).trim(),
        "0",
        "keys expire after two windows"
    );
    // A wrong password: Redis refuses, onError decides.
    let wrong = Gateway::start(&limiter.replace("pw-2", "nope"));
    assert_eq!(get(wrong.addr, "/").await.status, 503);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_counters_survive_a_reload_and_settings_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gw.yaml");
    let yaml = |limit: u32| {
        format!("gateway: {{ threads: 1, accessLog: false }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  flow:\n    - rateLimiter: {{ requestLimit: {limit}, requestLimitDuration: PT1H }}\n    - return: {{ status: 200 }}\n")
    };
    std::fs::write(&file, yaml(2)).unwrap();
    let control = turnpike::Control::start(vec![file.clone()]).unwrap();
    let t = control.gateway().listeners()[0].1;
    assert_eq!(get(t, "/").await.status, 200);
    assert_eq!(get(t, "/").await.status, 200);
    assert_eq!(get(t, "/").await.status, 429);
    control.manager.reload("signal").unwrap();
    assert_eq!(
        get(t, "/").await.status,
        429,
        "the reload kept the counters"
    );
    std::fs::write(&file, yaml(3)).unwrap();
    control.manager.reload("signal").unwrap();
    assert_eq!(
        get(t, "/").await.status,
        200,
        "a changed limiter starts fresh"
    );
    control.shutdown();
    for (bad, says) in [
        ("{ requestLimit: 1, requestLimitDuration: 1m, mode: local-sync }", "only with a Redis `store`"),
        ("{ requestLimit: 1, requestLimitDuration: 1m, store: { redis: { url: \"http://x\" } } }", "redis:// or rediss://"),
        ("{ requestLimit: 1, requestLimitDuration: 1m, algorithm: tokenBucket, mode: local-sync, store: { redis: { url: \"redis://x\" } } }", "counts fixed windows"),
        ("{ requestLimit: 1, requestLimitDuration: 1m, store: { redis: { url: \"redis://x\", onError: maybe } } }", "not `allow` or `deny`"),
        ("{ requestLimit: 1, requestLimitDuration: 1m, rejectStatus: 200 }", "error status"),
        ("{ requestLimit: 1, requestLimitDuration: 1m, store: { redis: { url: \"redis://x\", cluster: [\"redis://y\"] } } }", "exactly one of `url`"),
        ("{ requestLimit: 1, requestLimitDuration: 1m, store: { redis: { } } }", "exactly one of `url`"),
        ("{ requestLimit: 1, requestLimitDuration: 1m, store: { redis: { cluster: [\"redis://a\", \"rediss://b\"] } } }", "all redis:// or all rediss://"),
        ("{ requestLimit: 1, requestLimitDuration: 1m, store: { redis: { sentinel: { masterName: m, nodes: [] } } } }", "at least one Sentinel"),
        ("{ requestLimit: 1, requestLimitDuration: 1m, store: { redis: { sentinel: { masterName: m, nodes: [\"redis://a:26379\"] }, ca: ca.pem } } }", "only with rediss://"),
    ] {
        let f = dir.path().join("bad.yaml");
        std::fs::write(&f, format!("api:\n  port: 1\n  flow:\n    - rateLimiter: {bad}\n")).unwrap();
        let err = turnpike::load_and_compile(&[f]).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains(says), "{bad}: {err}");
        assert!(err.contains("bad.yaml:4:"), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_status_and_message_are_configurable() {
    let yaml = "gateway: { threads: 1, accessLog: false }\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  flow:\n    - rateLimiter: { requestLimit: 1, requestLimitDuration: PT1H, rejectStatus: 503, rejectBody: \"slow down\" }\n    - return: { status: 200 }\n";
    let gw = TestGateway::start(yaml);
    assert_eq!(get(gw.addr(), "/").await.status, 200);
    let r = get(gw.addr(), "/").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["detail"], "slow down");
    assert_eq!(r.json()["type"], "urn:turnpike:problem:rate-limited");
    assert!(r.header("retry-after").is_some());
    let _ = Path::new(".");
}

/// Sends a GET with `X-User: user` to `addr`; the status.
async fn as_user(addr: SocketAddr, user: &str) -> u16 {
    get_with(addr, "/", &[("x-user", user)])
        .await
        .status
        .as_u16()
}

/// The values of the rate limit keys on a node (by `redis-cli`).
fn counts_on(r: &Redis) -> Vec<u64> {
    r.cli(&["KEYS", "turnpike:rl:*"])
        .lines()
        .filter(|k| !k.is_empty())
        .map(|k| r.cli(&["GET", k]).trim().parse().unwrap_or(0))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_holds_the_counters_of_both_modes_spread_over_its_nodes() {
    if !redis::available() {
        return;
    }
    let cluster = redis::Cluster::start();
    let seeds: Vec<String> = cluster.nodes[..2]
        .iter()
        .map(|n| format!("\"redis://127.0.0.1:{}\"", n.port))
        .collect();
    let limiter = |mode: &str| {
        format!(
            "{{ requestLimit: 3, requestLimitDuration: PT24H, keyExpression: \"${{header.X-User}}\", mode: {mode}, store: {{ redis: {{ cluster: [{}], timeout: 500ms, onError: deny }} }} }}",
            seeds.join(", ")
        )
    };
    // exact: one script per request, each on the node owning its key's slot (two seeds are
    // enough to find the third node).
    let g = Gateway::start(&limiter("exact"));
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for round in 0..5 {
        for user in 0..30 {
            let s = as_user(g.addr, &format!("u{user}")).await;
            *statuses.entry(s).or_default() += 1;
            if round < 3 {
                assert_eq!(s, 200, "user {user}, request {round}");
            }
        }
    }
    assert_eq!(statuses.get(&200), Some(&90), "{statuses:?}");
    assert_eq!(statuses.get(&429), Some(&60), "{statuses:?}");
    let per_node: Vec<Vec<u64>> = cluster.nodes.iter().map(counts_on).collect();
    assert!(
        per_node.iter().all(|c| !c.is_empty()),
        "every node holds some of the 30 keys: {per_node:?}"
    );
    assert_eq!(per_node.iter().flatten().count(), 30, "{per_node:?}");
    assert!(per_node.iter().flatten().all(|n| *n == 3), "{per_node:?}");
    drop(g);
    // local-sync: per-key pipelines reach every node.
    let g = Gateway::start(&limiter("local-sync, syncInterval: 50ms"));
    for user in 0..20 {
        for _ in 0..2 {
            assert_eq!(as_user(g.addr, &format!("s{user}")).await, 200);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let synced: u64 = cluster.nodes.iter().flat_map(counts_on).sum();
        // 90 counted by the exact limiter, 40 by this one.
        if synced == 130 {
            break;
        }
        assert!(Instant::now() < deadline, "synced {synced} of 130");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_moves_the_counters_to_the_new_primary() {
    if !redis::available() {
        return;
    }
    let set = redis::Sentinels::start();
    assert_eq!(set.primary_port(), set.primary.port);
    let limiter = format!(
        "{{ requestLimit: 30, requestLimitDuration: PT24H, keyExpression: all, store: {{ redis: {{ sentinel: {{ masterName: mymaster, nodes: [\"redis://127.0.0.1:{}\"] }}, timeout: 500ms, onError: deny }} }} }}",
        set.sentinel.port
    );
    let g = Gateway::start(&limiter);
    for i in 0..10 {
        assert_eq!(get(g.addr, "/").await.status, 200, "request {i}");
    }
    assert_eq!(counts_on(&set.primary), vec![10]);
    set.fail_over();
    // The gateway asks the Sentinel every second (and at once after a failure): give it two.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut statuses = Vec::new();
    for _ in 0..30 {
        statuses.push(get(g.addr, "/").await.status);
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        20,
        "the count replicated to the new primary goes on: {statuses:?}"
    );
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 429),
        "{statuses:?}"
    );
    assert_eq!(
        counts_on(&set.replica),
        vec![30],
        "the new primary holds the count"
    );
}
