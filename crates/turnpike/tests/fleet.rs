//! Gateways sharing their documents through a real etcd: writes through any gateway's admin
//! API (or with etcdctl) reach every gateway; an etcd that goes away costs no request and the
//! changes made meanwhile arrive (also after a compaction); a gateway that starts while etcd is
//! down serves its cached configuration; a fleet reaches an etcd that requires mutual TLS, and
//! one that trusts another CA is refused with the reason.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::etcd::{self, Etcd};
use common::fault::FaultProxy;
use common::*;
use http_body_util::Full;

const TOKEN: &str = "fleet-token-0123456789";

struct Node {
    control: Option<turnpike::Control>,
    _dir: tempfile::TempDir,
    file: PathBuf,
}

impl Node {
    fn start(endpoint: &str) -> Node {
        Node::start_with(&format!(
            "{{ endpoints: [\"{endpoint}\"], prefix: /tp, timeout: 1s }}"
        ))
    }

    /// A gateway whose `admin.store.etcd` is `etcd` (a YAML flow map).
    fn start_with(etcd: &str) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("gateway.yaml");
        std::fs::write(
            &file,
            format!(
                "gateway: {{ threads: 1, accessLog: false }}\n---\nadmin:\n  listen: 127.0.0.1:0\n  token: {TOKEN}\n  hosts: [test.local]\n  store:\n    dir: cache\n    etcd: {etcd}\n---\napi:\n  name: hello\n  port: 0\n  ip: 127.0.0.1\n  path: {{ uri: /hello }}\n  flow: [ {{ return: {{ status: 200, body: hi }} }} ]\n"
            ),
        )
        .unwrap();
        let control =
            turnpike::Control::start(vec![file.clone()]).unwrap_or_else(|e| panic!("{e}"));
        Node {
            control: Some(control),
            _dir: dir,
            file,
        }
    }

    fn restart(&mut self) {
        self.control.take().unwrap().shutdown();
        self.control = Some(turnpike::Control::start(vec![self.file.clone()]).unwrap());
    }

    fn traffic(&self) -> SocketAddr {
        self.control.as_ref().unwrap().gateway().listeners()[0].1
    }

    fn admin(&self) -> SocketAddr {
        self.control.as_ref().unwrap().admin_addr().unwrap()
    }

    async fn call(&self, method: &str, path: &str, body: &str, headers: &[(&str, &str)]) -> Reply {
        let mut b = req(method, path)
            .header("authorization", format!("Bearer {TOKEN}"))
            .header("content-type", "application/yaml");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        send(
            self.admin(),
            b.body(Full::new(Bytes::from(body.to_owned()))).unwrap(),
        )
        .await
    }

    async fn status(&self) -> serde_json::Value {
        self.call("GET", "/admin/v1/status", "", &[]).await.json()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(c) = self.control.take() {
            c.shutdown();
        }
    }
}

fn api(name: &str, path: &str, body: &str) -> String {
    format!(
        "api:\n  name: {name}\n  port: 0\n  ip: 127.0.0.1\n  path: {{ uri: {path} }}\n  flow: [ {{ return: {{ status: 200, body: {body} }} }} ]\n"
    )
}

/// Waits until `path` on `addr` answers `body` (or 404 for `None`); returns how long it took.
async fn until(addr: SocketAddr, path: &str, body: Option<&str>, within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let r = get(addr, path).await;
        let done = match body {
            Some(b) => r.status == 200 && r.text() == b,
            None => r.status == 404,
        };
        if done {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "{path} on {addr}: still {} {} after {within:?}",
            r.status,
            r.text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_gateways_on_one_etcd_converge_after_writes_through_any() {
    if !etcd::available() {
        return;
    }
    let etcd = Etcd::start();
    let nodes: Vec<Node> = (0..3).map(|_| Node::start(&etcd.url())).collect();
    // Written through the first: every gateway serves it within a second.
    let r = nodes[0]
        .call(
            "PUT",
            "/admin/v1/apis/orders",
            &api("orders", "/orders", "v1"),
            &[],
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text());
    let etag = r.header("etag").unwrap().to_owned();
    assert_eq!(
        get(nodes[0].traffic(), "/orders").await.text(),
        "v1",
        "applied before the answer"
    );
    for n in &nodes {
        let took = until(n.traffic(), "/orders", Some("v1"), Duration::from_secs(1)).await;
        eprintln!("converged in {took:?}");
    }
    // ETags are the same everywhere: a stale one is refused through another gateway.
    let v2 = api("orders", "/orders", "v2");
    let r = nodes[1]
        .call(
            "PUT",
            "/admin/v1/apis/orders",
            &v2,
            &[("if-match", "\"nope\"")],
        )
        .await;
    assert_eq!(r.status, 412);
    let r = nodes[1]
        .call("PUT", "/admin/v1/apis/orders", &v2, &[("if-match", &etag)])
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    for n in &nodes {
        until(n.traffic(), "/orders", Some("v2"), Duration::from_secs(1)).await;
    }
    // Removed through the third.
    let r = nodes[2]
        .call("DELETE", "/admin/v1/apis/orders", "", &[])
        .await;
    assert_eq!(r.status, 204, "{}", r.text());
    for n in &nodes {
        until(n.traffic(), "/orders", None, Duration::from_secs(1)).await;
    }
    // Written straight into etcd.
    assert!(
        etcd.ctl(&[
            "put",
            "/tp/apis/direct",
            &api("direct", "/direct", "etcdctl")
        ])
        .0
    );
    for n in &nodes {
        until(
            n.traffic(),
            "/direct",
            Some("etcdctl"),
            Duration::from_secs(1),
        )
        .await;
    }
    // A document that does not compile: reported, and the rest keeps serving.
    let broken = "api:\n  name: broken\n  port: 0\n  bogus: 1\n";
    assert!(etcd.ctl(&["put", "/tp/apis/broken", broken]).0);
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let s = nodes[1].status().await;
        let rejected = &s["fleet"]["rejected"];
        if rejected.as_array().is_some_and(|r| !r.is_empty()) {
            assert_eq!(rejected[0]["key"], "/tp/apis/broken");
            assert!(
                rejected[0]["errors"][0].as_str().unwrap().contains("bogus"),
                "{s}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "not reported: {s}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(get(nodes[1].traffic(), "/direct").await.text(), "etcdctl");
    assert_eq!(get(nodes[1].traffic(), "/hello").await.text(), "hi");
    let s = nodes[0].status().await;
    assert_eq!(s["store"]["kind"], "etcd");
    assert_eq!(s["fleet"]["connected"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_outage_costs_no_request_and_changes_made_meanwhile_arrive() {
    if !etcd::available() {
        return;
    }
    let mut etcd = Etcd::start();
    let proxy = FaultProxy::start(etcd.client).await;
    let node = Node::start(&format!("http://{}", proxy.addr));
    let r = node
        .call(
            "PUT",
            "/admin/v1/apis/orders",
            &api("orders", "/orders", "v1"),
            &[],
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text());
    // etcd out of reach: traffic goes on; writes are refused, nothing changes.
    proxy.kill();
    for _ in 0..50 {
        assert_eq!(get(node.traffic(), "/orders").await.text(), "v1");
    }
    let r = node
        .call(
            "PUT",
            "/admin/v1/apis/orders",
            &api("orders", "/orders", "lost"),
            &[],
        )
        .await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["type"], "urn:turnpike:problem:store-unavailable");
    // Meanwhile on etcd's side: a change, then enough churn and a compaction that the
    // revision the gateway saw last is gone.
    assert!(
        etcd.ctl(&["put", "/tp/apis/orders", &api("orders", "/orders", "v2")])
            .0
    );
    for i in 0..5 {
        assert!(etcd.ctl(&["put", "/tp/other/noise", &i.to_string()]).0);
    }
    let rev = etcd.revision();
    assert!(etcd.ctl(&["compact", &rev.to_string()]).0);
    let s = node.status().await;
    assert_eq!(s["fleet"]["connected"], false, "{s}");
    proxy.revive().await;
    until(
        node.traffic(),
        "/orders",
        Some("v2"),
        Duration::from_secs(15),
    )
    .await;
    // etcd itself restarts: the watch resumes and later changes arrive.
    etcd.restart();
    assert!(
        etcd.ctl(&["put", "/tp/apis/orders", &api("orders", "/orders", "v3")])
            .0
    );
    until(
        node.traffic(),
        "/orders",
        Some("v3"),
        Duration::from_secs(15),
    )
    .await;
    assert_eq!(node.status().await["fleet"]["connected"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_started_without_etcd_serves_its_cached_configuration() {
    if !etcd::available() {
        return;
    }
    let mut etcd = Etcd::start();
    let mut node = Node::start(&etcd.url());
    let r = node
        .call(
            "PUT",
            "/admin/v1/apis/orders",
            &api("orders", "/orders", "cached"),
            &[],
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text());
    etcd.kill();
    node.restart();
    assert_eq!(get(node.traffic(), "/orders").await.text(), "cached");
    let s = node.status().await;
    assert_eq!(s["fleet"]["servingCache"], true, "{s}");
    assert_eq!(s["fleet"]["connected"], false, "{s}");
    etcd.restart();
    assert!(
        etcd.ctl(&["put", "/tp/apis/orders", &api("orders", "/orders", "fresh")])
            .0
    );
    until(
        node.traffic(),
        "/orders",
        Some("fresh"),
        Duration::from_secs(15),
    )
    .await;
    assert_eq!(node.status().await["fleet"]["servingCache"], false);
}

/// etcd as production clusters run it: TLS only, client certificates required. Two gateways
/// with the CA and a client certificate converge; a gateway trusting another CA, and one
/// without a client certificate, are refused and say why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_converges_over_mutual_tls_and_a_wrong_ca_is_refused() {
    if !etcd::available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pki = pki::Pki::new(dir.path());
    let etcd = Etcd::start_tls(etcd::Tls {
        ca: pki.ca.clone(),
        cert: pki.server.cert.clone(),
        key: pki.server.key.clone(),
        client_cert: pki.client.cert.clone(),
        client_key: pki.client.key.clone(),
    });
    let url = etcd.url();
    assert!(url.starts_with("https://"));
    let ssl = format!(
        "ssl: {{ truststore: {{ location: \"{}\" }}, certificate: \"{}\", key: \"{}\" }}",
        pki.ca.display(),
        pki.client.cert.display(),
        pki.client.key.display()
    );
    let etcd_yaml = format!("{{ endpoints: [\"{url}\"], prefix: /tp, timeout: 1s, {ssl} }}");
    let a = Node::start_with(&etcd_yaml);
    let b = Node::start_with(&etcd_yaml);
    let r = a
        .call(
            "PUT",
            "/admin/v1/apis/tls",
            &api("tls", "/tls", "secure"),
            &[],
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text());
    until(b.traffic(), "/tls", Some("secure"), Duration::from_secs(10)).await;
    assert_eq!(b.status().await["fleet"]["connected"], true);
    // etcdctl, over TLS with its own client certificate, sees the same document.
    let (ok, keys) = etcd.ctl(&["get", "/tp", "--prefix", "--keys-only"]);
    assert!(ok && keys.contains("/tp/apis/tls"), "{keys}");

    // Another CA: the members' certificate is not trusted.
    let other_dir = tempfile::tempdir().unwrap();
    let other = pki::Pki::new(other_dir.path());
    let wrong = Node::start_with(&format!(
        "{{ endpoints: [\"{url}\"], prefix: /tp, timeout: 1s, ssl: {{ truststore: {{ location: \"{}\" }}, certificate: \"{}\", key: \"{}\" }} }}",
        other.ca.display(),
        pki.client.cert.display(),
        pki.client.key.display()
    ));
    // No client certificate: etcd refuses the handshake.
    let anonymous = Node::start_with(&format!(
        "{{ endpoints: [\"{url}\"], prefix: /tp, timeout: 1s, ssl: {{ truststore: {{ location: \"{}\" }} }} }}",
        pki.ca.display()
    ));
    for (node, what) in [(&wrong, "certificate"), (&anonymous, "")] {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let s = node.status().await;
            let err = s["fleet"]["lastError"].as_str().unwrap_or("").to_owned();
            if !err.is_empty() {
                assert_eq!(s["fleet"]["connected"], false, "{s}");
                assert!(err.to_lowercase().contains(what), "{err}");
                eprintln!("refused: {err}");
                break;
            }
            assert!(Instant::now() < deadline, "no error after 10 s: {s}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(get(node.traffic(), "/tls").await.status, 404);
    }

    // TLS settings are checked at load: a PKCS#12 keystore, plain http:// with `ssl`, mixed
    // schemes.
    for (etcd_yaml, want) in [
        (
            format!("{{ endpoints: [\"{url}\"], ssl: {{ keystore: {{ location: x.p12 }} }} }}"),
            "store.etcd.ssl.keystore",
        ),
        (
            format!("{{ endpoints: [\"http://127.0.0.1:1\"], {ssl} }}"),
            "TLS settings need https:// endpoints",
        ),
        (
            format!("{{ endpoints: [\"{url}\", \"http://127.0.0.1:1\"] }}"),
            "mixes http:// and https://",
        ),
    ] {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("gateway.yaml");
        std::fs::write(
            &f,
            format!("admin:\n  listen: 127.0.0.1:0\n  token: {TOKEN}\n  store:\n    dir: cache\n    etcd: {etcd_yaml}\n"),
        )
        .unwrap();
        let err = turnpike::Control::start(vec![f])
            .err()
            .expect("loaded")
            .to_string();
        assert!(err.contains(want), "{err}");
    }
}
