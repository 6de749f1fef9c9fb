//! `/metrics` after a scripted mix of requests: every counter matches what was sent, both
//! formats parse with the Prometheus client's own parsers (Python `prometheus_client`),
//! histograms are cumulative, and 10,000 distinct paths add no series.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Stdio};

use bytes::Bytes;
use common::*;
use http_body_util::Full;
use serde_json::Value;

fn config(dead: u16) -> String {
    format!(
        r#"gateway: {{ threads: 2, accessLog: false }}
---
admin: {{ listen: "127.0.0.1:0", hosts: [test.local] }}
---
api:
  name: m-ok
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /ok }}
  flow: [ {{ return: {{ status: 200, body: ok }} }} ]
---
api:
  name: m-auth
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /auth }}
  flow:
    - apiKey: {{ stores: [ {{ simple: [ {{ secret: {{ value: k-1 }} }} ] }} ] }}
    - return: {{ status: 200 }}
---
api:
  name: m-limit
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /limit }}
  flow:
    - rateLimiter: {{ requestLimit: 2, requestLimitDuration: PT1H }}
    - return: {{ status: 200 }}
---
api:
  name: m-up
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /up }}
  target: {{ url: "http://127.0.0.1:{dead}" }}
"#
    )
}

async fn call(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> u16 {
    let mut b = req(method, path);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    send(addr, b.body(Full::new(Bytes::new())).unwrap())
        .await
        .status
        .as_u16()
}

/// The samples of an exposition, parsed by prometheus_client (`text` or `openmetrics`).
fn parse(text: &str, format: &str) -> Vec<Value> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/parse_metrics.py");
    let mut child = Command::new("python3")
        .args([script, format])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{format} does not parse: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

fn value(samples: &[Value], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .find(|s| s["name"] == name && labels.iter().all(|(k, v)| s["labels"][*k] == *v))
        .map_or(0.0, |s| s["value"].as_f64().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scraped_counters_match_the_requests_sent() {
    if !python_has(&["prometheus_client"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gw.yaml");
    std::fs::write(&file, config(free_port())).unwrap();
    let control = turnpike::Control::start(vec![file]).unwrap();
    let t = control.gateway().listeners()[0].1;
    let admin = control.admin_addr().unwrap();
    for _ in 0..5 {
        assert_eq!(call(t, "GET", "/ok", &[]).await, 200);
    }
    for _ in 0..3 {
        assert_eq!(call(t, "POST", "/ok", &[]).await, 200);
    }
    for _ in 0..2 {
        assert_eq!(call(t, "GET", "/auth", &[]).await, 401);
    }
    assert_eq!(call(t, "GET", "/auth", &[("x-api-key", "k-1")]).await, 200);
    let limited: Vec<u16> = {
        let mut v = Vec::new();
        for _ in 0..4 {
            v.push(call(t, "GET", "/limit", &[]).await);
        }
        v
    };
    assert_eq!(limited, vec![200, 200, 429, 429]);
    for _ in 0..2 {
        assert_eq!(call(t, "GET", "/up", &[]).await, 502);
    }
    for _ in 0..3 {
        assert_eq!(call(t, "GET", "/nothing", &[]).await, 404);
    }
    assert_eq!(call(t, "BREW", "/ok", &[]).await, 200);

    let text = get(admin, "/metrics").await;
    assert_eq!(
        text.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let s = parse(&text.text(), "text");
    let requests = |api: &str, m: &str, c: &str| {
        value(
            &s,
            "turnpike_requests_total",
            &[("api", api), ("method", m), ("status_class", c)],
        )
    };
    assert_eq!(requests("m-ok", "GET", "2xx"), 5.0);
    assert_eq!(requests("m-ok", "POST", "2xx"), 3.0);
    assert_eq!(
        requests("m-ok", "OTHER", "2xx"),
        1.0,
        "unknown methods fold into OTHER"
    );
    assert_eq!(requests("m-auth", "GET", "4xx"), 2.0);
    assert_eq!(requests("m-auth", "GET", "2xx"), 1.0);
    assert_eq!(requests("m-limit", "GET", "2xx"), 2.0);
    assert_eq!(requests("m-limit", "GET", "4xx"), 2.0);
    assert_eq!(requests("m-up", "GET", "5xx"), 2.0);
    assert_eq!(requests("-", "GET", "4xx"), 3.0, "requests no API takes");
    let rej = |api: &str, p: &str, r: &str| {
        value(
            &s,
            "turnpike_policy_rejections_total",
            &[("api", api), ("policy", p), ("reason", r)],
        )
    };
    assert_eq!(rej("m-auth", "apiKey", "unauthorized"), 2.0);
    assert_eq!(rej("m-limit", "rateLimiter", "rate-limited"), 2.0);
    let node = value(
        &s,
        "turnpike_upstream_requests_total",
        &[("upstream", "m-up"), ("outcome", "connect_error")],
    );
    assert_eq!(node, 2.0);
    assert_eq!(
        value(
            &s,
            "turnpike_upstream_node_healthy",
            &[("upstream", "m-up")]
        ),
        1.0,
        "no health check: the node stays in"
    );
    // Histograms are cumulative, and the +Inf bucket is the count.
    let buckets: Vec<(f64, f64)> = s
        .iter()
        .filter(|x| {
            x["name"] == "turnpike_request_duration_seconds_bucket" && x["labels"]["api"] == "m-ok"
        })
        .map(|x| {
            let le = x["labels"]["le"].as_str().unwrap();
            (
                if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap()
                },
                x["value"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(buckets.len(), 15);
    assert!(
        buckets
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
        "{buckets:?}"
    );
    assert_eq!(buckets.last().unwrap().1, 9.0);
    assert_eq!(
        value(
            &s,
            "turnpike_request_duration_seconds_count",
            &[("api", "m-ok")]
        ),
        9.0
    );
    // Connections, the configuration and the build.
    let listener = control.gateway().listeners()[0].0.to_string();
    assert_eq!(
        value(
            &s,
            "turnpike_connections_accepted_total",
            &[("listener", &listener)]
        ),
        21.0
    );
    assert_eq!(value(&s, "turnpike_config_revision", &[]), 1.0);
    assert_eq!(value(&s, "turnpike_build_info", &[]), 1.0);

    // OpenMetrics on request: the same numbers.
    let om = get_with(
        admin,
        "/metrics",
        &[("accept", "application/openmetrics-text; version=1.0.0")],
    )
    .await;
    assert!(om
        .header("content-type")
        .unwrap()
        .starts_with("application/openmetrics-text"));
    let o = parse(&om.text(), "openmetrics");
    assert_eq!(
        value(
            &o,
            "turnpike_requests_total",
            &[("api", "m-ok"), ("method", "GET"), ("status_class", "2xx")]
        ),
        5.0
    );

    // 10,000 distinct paths (to one API and to none) add no series.
    let series = |text: &str| text.lines().filter(|l| !l.starts_with('#')).count();
    let before = series(&get(admin, "/metrics").await.text());
    let stream = tokio::net::TcpStream::connect(t).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    for i in 0..10_000 {
        let path = if i % 2 == 0 {
            format!("/ok/{i}")
        } else {
            format!("/nope/{i}?q={i}")
        };
        sender.ready().await.unwrap();
        let r = sender
            .send_request(req("GET", &path).body(Full::new(Bytes::new())).unwrap())
            .await
            .unwrap();
        let _ = http_body_util::BodyExt::collect(r.into_body()).await;
    }
    let after_text = get(admin, "/metrics").await.text();
    assert_eq!(series(&after_text), before, "series grew");
    let after = parse(&after_text, "text");
    assert_eq!(
        value(
            &after,
            "turnpike_requests_total",
            &[("api", "m-ok"), ("method", "GET"), ("status_class", "2xx")]
        ),
        5.0 + 5000.0
    );
    control.shutdown();
}
