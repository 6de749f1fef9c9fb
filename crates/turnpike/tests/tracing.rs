//! OpenTelemetry traces against a collector in the test (an OTLP/HTTP receiver decoding the
//! protobuf messages): the caller's trace context is continued, the server span has a child
//! per policy step and per upstream try, the backend gets a `traceparent` of the same trace,
//! unsampled callers pass through untouched, exemplars carry trace ids, and a collector that
//! is down costs no request.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

/// An OTLP/HTTP collector: every span it receives, with its service name.
struct Collector {
    addr: SocketAddr,
    spans: Arc<Mutex<Vec<(String, Span)>>>,
}

impl Collector {
    async fn start() -> Collector {
        Collector::start_with(None).await
    }

    /// The collector behind TLS with `pki`'s server certificate, requiring a client certificate
    /// signed by `pki`'s CA.
    async fn start_tls(pki: &pki::Pki) -> Collector {
        use rustls::pki_types::pem::PemObject;
        let chain: Vec<rustls::pki_types::CertificateDer<'static>> =
            rustls::pki_types::CertificateDer::pem_file_iter(&pki.server.cert)
                .unwrap()
                .map(|c| c.unwrap())
                .collect();
        let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&pki.server.key).unwrap();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls::pki_types::CertificateDer::pem_file_iter(&pki.ca).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .unwrap();
        let cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .unwrap();
        Collector::start_with(Some(tokio_rustls::TlsAcceptor::from(Arc::new(cfg)))).await
    }

    async fn start_with(tls: Option<tokio_rustls::TlsAcceptor>) -> Collector {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let spans: Arc<Mutex<Vec<(String, Span)>>> = Arc::default();
        let store = spans.clone();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let store = store.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(
                        move |req: http::Request<hyper::body::Incoming>| {
                            let store = store.clone();
                            async move {
                                assert_eq!(req.uri().path(), "/v1/traces");
                                assert_eq!(req.headers()["x-collector-key"], "k");
                                let body = req.into_body().collect().await.unwrap().to_bytes();
                                let msg = ExportTraceServiceRequest::decode(body).unwrap();
                                for rs in msg.resource_spans {
                                    let service = rs
                                        .resource
                                        .iter()
                                        .flat_map(|r| r.attributes.iter())
                                        .find(|a| a.key == "service.name")
                                        .and_then(|a| a.value.as_ref())
                                        .map(|v| format!("{:?}", v.value))
                                        .unwrap_or_default();
                                    for ss in rs.scope_spans {
                                        for s in ss.spans {
                                            store.lock().unwrap().push((service.clone(), s));
                                        }
                                    }
                                }
                                Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::new())))
                            }
                        },
                    );
                    let http = hyper::server::conn::http1::Builder::new();
                    let _ = match tls {
                        None => {
                            http.serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                                .await
                        }
                        Some(tls) => match tls.accept(tcp).await {
                            Ok(tcp) => {
                                http.serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                                    .await
                            }
                            Err(_) => return,
                        },
                    };
                });
            }
        });
        Collector { addr, spans }
    }

    /// Waits until the spans of `trace` include `n` spans.
    async fn trace(&self, trace: &str, n: usize) -> Vec<Span> {
        let start = Instant::now();
        loop {
            let got: Vec<Span> = self
                .spans
                .lock()
                .unwrap()
                .iter()
                .filter(|(_, s)| hex(&s.trace_id) == trace)
                .map(|(_, s)| s.clone())
                .collect();
            if got.len() >= n {
                return got;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{} of {n} spans of {trace}",
                got.len()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn attr(s: &Span, key: &str) -> String {
    s.attributes
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| a.value.as_ref())
        .map(|v| format!("{:?}", v.value))
        .unwrap_or_default()
}

fn config(collector: SocketAddr, backend: u16) -> String {
    config_at(&format!("http://{collector}"), "", backend)
}

/// The gateway's configuration exporting to `endpoint`, with `extra` lines (indented) in
/// `telemetry.tracing`.
fn config_at(endpoint: &str, extra: &str, backend: u16) -> String {
    format!(
        r#"gateway: {{ threads: 1, accessLog: false }}
---
admin: {{ listen: "127.0.0.1:0", hosts: [test.local] }}
---
telemetry:
  tracing:
    endpoint: {endpoint}
    headers: {{ x-collector-key: k }}{extra}
    serviceName: edge
    resourceAttributes: {{ deployment.environment: test }}
    sampling: {{ ratio: 100%, parentBased: true }}
    timeout: 500ms
---
api:
  name: traced
  port: 0
  ip: 127.0.0.1
  flow: [ {{ setHeader: {{ name: X-Seen, value: yes }} }} ]
  target: {{ url: "http://127.0.0.1:{backend}" }}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_continue_the_callers_context_and_reach_the_collector() {
    let collector = Collector::start().await;
    let backend = Backend::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gw.yaml");
    std::fs::write(&file, config(collector.addr, backend.port())).unwrap();
    let control = turnpike::Control::start(vec![file]).unwrap();
    let t = control.gateway().listeners()[0].1;

    // A sampled caller: its trace goes on.
    let r = get_with(
        t,
        "/items/7",
        &[
            ("traceparent", &format!("00-{TRACE}-{PARENT}-01")),
            ("tracestate", "vendor=x"),
        ],
    )
    .await;
    assert_eq!(r.status, 200);
    let spans = collector.trace(TRACE, 3).await;
    let server = spans.iter().find(|s| s.kind == 2).expect("a server span");
    assert_eq!(hex(&server.parent_span_id), PARENT);
    assert_eq!(server.name, "GET traced");
    assert!(
        attr(server, "http.response.status_code").contains("200"),
        "{server:?}"
    );
    assert!(attr(server, "url.path").contains("/items/7"));
    let policy = spans
        .iter()
        .find(|s| s.name == "setHeader")
        .expect("a policy span");
    assert_eq!(policy.parent_span_id, server.span_id);
    let client = spans.iter().find(|s| s.kind == 3).expect("a client span");
    assert_eq!(client.parent_span_id, server.span_id);
    assert!(attr(client, "server.address").contains(&backend.port().to_string()));
    assert!(client.start_time_unix_nano >= server.start_time_unix_nano);
    assert!(client.end_time_unix_nano <= server.end_time_unix_nano);
    // The backend is told the client span is its parent, in the same trace.
    let seen = backend.last();
    let tp = seen.headers["traceparent"].to_str().unwrap().to_owned();
    assert_eq!(tp, format!("00-{TRACE}-{}-01", hex(&client.span_id)));
    assert_eq!(seen.headers["tracestate"], "vendor=x");
    let services: Vec<String> = collector
        .spans
        .lock()
        .unwrap()
        .iter()
        .map(|(s, _)| s.clone())
        .collect();
    assert!(services.iter().all(|s| s.contains("edge")), "{services:?}");

    // A caller that decided not to sample: nothing recorded, its context passes untouched.
    let unsampled = format!("00-{}-{PARENT}-00", "a".repeat(32));
    get_with(t, "/x", &[("traceparent", &unsampled)]).await;
    assert_eq!(backend.last().headers["traceparent"], unsampled.as_str());

    // No caller context: a new trace, and its id is the exemplar of the latency bucket.
    get(t, "/fresh").await;
    let fresh = backend.last().headers["traceparent"]
        .to_str()
        .unwrap()
        .to_owned();
    let fresh_trace = fresh.split('-').nth(1).unwrap().to_owned();
    assert_ne!(fresh_trace, TRACE);
    collector.trace(&fresh_trace, 3).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        collector
            .spans
            .lock()
            .unwrap()
            .iter()
            .all(|(_, s)| !hex(&s.trace_id).starts_with("aaaa")),
        "the unsampled request was recorded"
    );
    let om = get_with(
        control.admin_addr().unwrap(),
        "/metrics",
        &[("accept", "application/openmetrics-text")],
    )
    .await
    .text();
    assert!(om.contains(&format!("trace_id=\"{fresh_trace}\"")), "{om}");
    assert!(om.contains("turnpike_trace_spans_exported_total"));
    control.shutdown();
    // The exporter is one per process: the next cases run after this one.
    grpc_export_reaches_a_grpc_collector().await;
    a_collector_that_is_down_costs_no_request().await;
    export_over_mutual_tls_reaches_the_collector_and_a_wrong_ca_gets_nothing().await;
    grpc_export_over_mutual_tls().await;
}

/// The `ssl` lines of `telemetry.tracing` trusting `ca` and presenting `pki`'s client
/// certificate.
fn tls_lines(ca: &std::path::Path, pki: &pki::Pki) -> String {
    format!(
        "\n    ssl: {{ truststore: {{ location: \"{}\" }}, certificate: \"{}\", key: \"{}\" }}",
        ca.display(),
        pki.client.cert.display(),
        pki.client.key.display()
    )
}

/// OTLP/HTTP to a collector that requires TLS with a client certificate: spans arrive (with
/// the collector's header) when the gateway trusts the collector's CA and presents its
/// certificate; trusting another CA, nothing reaches the collector and the spans are counted as
/// dropped.
async fn export_over_mutual_tls_reaches_the_collector_and_a_wrong_ca_gets_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki::Pki::new(dir.path());
    let collector = Collector::start_tls(&pki).await;
    let backend = Backend::start().await;
    let file = dir.path().join("gw.yaml");
    let endpoint = format!("https://localhost:{}", collector.addr.port());
    std::fs::write(
        &file,
        config_at(&endpoint, &tls_lines(&pki.ca, &pki), backend.port()),
    )
    .unwrap();
    let control = turnpike::Control::start(vec![file.clone()]).unwrap();
    let t = control.gateway().listeners()[0].1;
    let trace = "5bf92f3577b34da6a3ce929d0e0e4736";
    let r = get_with(
        t,
        "/tls",
        &[("traceparent", &format!("00-{trace}-{PARENT}-01"))],
    )
    .await;
    assert_eq!(r.status, 200);
    let spans = collector.trace(trace, 2).await;
    assert!(spans.iter().any(|s| s.kind == 2), "no server span");
    control.shutdown();

    // Another CA: the collector's certificate is not trusted, no span is sent.
    let other_dir = tempfile::tempdir().unwrap();
    let other = pki::Pki::new(other_dir.path());
    std::fs::write(
        &file,
        config_at(&endpoint, &tls_lines(&other.ca, &pki), backend.port()),
    )
    .unwrap();
    let before = collector.spans.lock().unwrap().len();
    let control = turnpike::Control::start(vec![file]).unwrap();
    let admin = control.admin_addr().unwrap();
    // The counter is the process's: earlier cases counted theirs.
    let dropped = dropped_spans(admin).await;
    let t = control.gateway().listeners()[0].1;
    for i in 0..5 {
        assert_eq!(get(t, &format!("/untrusted/{i}")).await.status, 200);
    }
    until_dropped(admin, dropped + 5.0).await;
    assert_eq!(collector.spans.lock().unwrap().len(), before);
    control.shutdown();
}

/// OTLP/gRPC over TLS with a client certificate, to the Python `grpcio` collector started with
/// TLS credentials that require one.
async fn grpc_export_over_mutual_tls() {
    if !python_has(&[
        "grpc",
        "opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc",
    ]) {
        return;
    }
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let pki = pki::Pki::new(dir.path());
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/py/otlp_grpc_collector.py"
    );
    let mut child = std::process::Command::new("python3")
        .arg(script)
        .args([&pki.server.cert, &pki.server.key, &pki.ca])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let port: u16 = lines.next().unwrap().unwrap().trim().parse().unwrap();
    let backend = Backend::start().await;
    let file = dir.path().join("gw.yaml");
    let extra = format!("\n    protocol: grpc{}", tls_lines(&pki.ca, &pki));
    std::fs::write(
        &file,
        config_at(&format!("https://localhost:{port}"), &extra, backend.port()),
    )
    .unwrap();
    let control = turnpike::Control::start(vec![file]).unwrap();
    let t = control.gateway().listeners()[0].1;
    let trace = "6bf92f3577b34da6a3ce929d0e0e4736";
    get_with(
        t,
        "/g",
        &[("traceparent", &format!("00-{trace}-{PARENT}-01"))],
    )
    .await;
    let server = tokio::task::spawn_blocking(move || {
        for line in lines.by_ref() {
            let v: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
            if v["kind"] == 2 {
                return v;
            }
        }
        serde_json::Value::Null
    });
    let server = tokio::time::timeout(Duration::from_secs(15), server)
        .await
        .expect("no span over gRPC with TLS")
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(server["trace_id"], trace, "{server}");
    assert_eq!(server["service"], "edge", "{server}");
    control.shutdown();
}

/// The same over OTLP/gRPC, to the Python `opentelemetry-proto` + `grpcio` collector.
async fn grpc_export_reaches_a_grpc_collector() {
    if !python_has(&[
        "grpc",
        "opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc",
    ]) {
        return;
    }
    use std::io::BufRead;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/py/otlp_grpc_collector.py"
    );
    let mut child = std::process::Command::new("python3")
        .arg(script)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let port: u16 = lines.next().unwrap().unwrap().trim().parse().unwrap();
    let backend = Backend::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gw.yaml");
    let yaml = config(SocketAddr::from(([127, 0, 0, 1], port)), backend.port()).replace(
        "    headers: { x-collector-key: k }\n",
        "    protocol: grpc\n    headers: { x-collector-key: k }\n",
    );
    std::fs::write(&file, yaml).unwrap();
    let control = turnpike::Control::start(vec![file]).unwrap();
    let t = control.gateway().listeners()[0].1;
    get_with(
        t,
        "/g",
        &[("traceparent", &format!("00-{TRACE}-{PARENT}-01"))],
    )
    .await;
    let spans = tokio::task::spawn_blocking(move || {
        let mut got = Vec::new();
        for line in lines.by_ref() {
            let v: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
            let server = v["kind"] == 2;
            got.push(v);
            if server {
                break;
            }
        }
        got
    })
    .await
    .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        spans
            .iter()
            .all(|s| s["trace_id"] == TRACE && s["service"] == "edge"),
        "{spans:?}"
    );
    let server = spans.iter().find(|s| s["kind"] == 2);
    assert_eq!(
        server.map(|s| s["parent"].clone()),
        Some(PARENT.into()),
        "{spans:?}"
    );
    control.shutdown();
}

async fn a_collector_that_is_down_costs_no_request() {
    let backend = Backend::start().await;
    let dead = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gw.yaml");
    std::fs::write(&file, config(dead, backend.port())).unwrap();
    let control = turnpike::Control::start(vec![file]).unwrap();
    let t = control.gateway().listeners()[0].1;
    let start = Instant::now();
    for i in 0..200 {
        assert_eq!(get(t, &format!("/r/{i}")).await.status, 200);
    }
    assert!(start.elapsed() < Duration::from_secs(20));
    // The spans that could not be sent are counted.
    until_dropped(control.admin_addr().unwrap(), 1.0).await;
    control.shutdown();
}

/// `turnpike_trace_spans_dropped_total` as the admin listener at `admin` shows it.
async fn dropped_spans(admin: SocketAddr) -> f64 {
    get(admin, "/metrics")
        .await
        .text()
        .lines()
        .find(|l| l.starts_with("turnpike_trace_spans_dropped_total"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// Waits (up to 10 s) until at least `n` spans are counted as dropped.
async fn until_dropped(admin: SocketAddr, n: f64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let dropped = dropped_spans(admin).await;
        if dropped >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{dropped} spans counted as dropped, not {n}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[test]
fn tracing_settings_are_checked_at_load() {
    for (bad, says) in [
        ("{ endpoint: \"ftp://c\" }", "http:// or https:// URL"),
        (
            "{ endpoint: \"http://c:4318\", ssl: { serverName: c } }",
            "need an https:// endpoint",
        ),
        (
            "{ endpoint: \"https://c:4318\", ssl: { truststore: { location: missing.pem } } }",
            "missing.pem",
        ),
        (
            "{ endpoint: \"https://c:4318\", ssl: { insecureSkipVerify: true } }",
            "not supported for the trace collector",
        ),
        (
            "{ endpoint: \"http://c:4318\", protocol: thrift }",
            "not a protocol",
        ),
        (
            "{ endpoint: \"http://c:4318\", sampling: { ratio: 150% } }",
            "between 0 and 1",
        ),
        (
            "{ endpoint: \"http://c:4318\", sampling: { ratio: lots } }",
            "not a share",
        ),
        (
            "{ endpoint: \"http://c:4318\", queueSize: 0 }",
            "at least 1",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("t.yaml");
        std::fs::write(&f, format!("telemetry:\n  tracing: {bad}\n")).unwrap();
        let err = turnpike::load_and_compile(&[f])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains(says), "{bad}: {err}");
        assert!(err.contains("t.yaml:2:"), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membranes_open_telemetry_policy_turns_on_tracing() {
    // tutorials/operation/40-OpenTelemetry with the HTTP transport to the test's collector.
    let collector = Collector::start().await;
    let backend = Backend::start().await;
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gw.yaml");
    std::fs::write(
        &file,
        format!(
            r#"global:
  - openTelemetry:
      sampleRate: 1.0
      otlpExporter:
        host: 127.0.0.1
        port: {}
        transport: http
        headers:
          - name: x-collector-key
            value: k
      customAttribute:
        - name: env
          value: test
---
api:
  name: Gateway
  port: {}
  ip: 127.0.0.1
  target:
    url: http://127.0.0.1:{}
"#,
            collector.addr.port(),
            port,
            backend.port()
        ),
    )
    .unwrap();
    // A process of its own: the exporter is one per process, and this process's other cases
    // set theirs.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_turnpike"))
        .args(["run", "-c"])
        .arg(&file)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(t).is_err() {
        assert!(Instant::now() < deadline, "the gateway did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let own = "0af7651916cd43dd8448eb211c80319c";
    let r = get_with(
        t,
        "/items",
        &[("traceparent", &format!("00-{own}-{PARENT}-01"))],
    )
    .await;
    let sent = backend.last().headers["traceparent"]
        .to_str()
        .unwrap()
        .to_owned();
    let spans = collector.trace(own, 1).await;
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(r.status, 200);
    assert!(sent.starts_with(&format!("00-{own}-")), "{sent}");
    assert!(spans.iter().any(|s| s.kind == 2), "{spans:?}");
    let service = collector.spans.lock().unwrap()[0].0.clone();
    assert!(service.contains("Membrane"), "{service}");
    // In an API's flow it is a load error: tracing is the gateway's.
    std::fs::write(
        &file,
        "api:\n  port: 0\n  flow:\n    - openTelemetry: {}\n    - return: {}\n",
    )
    .unwrap();
    let e = turnpike::start(vec![file]).err().unwrap().to_string();
    assert!(e.contains("put `openTelemetry` in `global:`"), "{e}");
}
