//! SOAP and XML through real sockets: xmlProtection against every attack file, WSDL validation
//! of requests and responses in both SOAP versions, soapProxy (WSDL at `?wsdl`, faults for
//! engine errors), a 10 MB message, and real SOAP peers from PyPI (a spyne service behind the
//! gateway, a zeep client in front of it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

const SHARED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data");

fn shared(path: &str) -> String {
    format!("{SHARED}/{path}")
}

/// A backend answering every request with a fixed status, content type and body; records the
/// request bodies and paths it saw.
struct FixedBackend {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<(String, Bytes)>>>,
    headers: Arc<Mutex<Vec<http::HeaderMap>>>,
}

impl FixedBackend {
    async fn start(status: u16, content_type: &'static str, body: String) -> FixedBackend {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let seen2 = seen.clone();
        let headers = Arc::new(Mutex::new(Vec::new()));
        let headers2 = headers.clone();
        let body = Bytes::from(body);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let seen = seen2.clone();
                let heads = headers2.clone();
                let body = body.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let seen = seen.clone();
                        let heads = heads.clone();
                        let body = body.clone();
                        async move {
                            let path = req.uri().to_string();
                            heads.lock().unwrap().push(req.headers().clone());
                            let got = req.into_body().collect().await.unwrap().to_bytes();
                            seen.lock().unwrap().push((path, got));
                            let mut r = http::Response::new(Full::new(body));
                            *r.status_mut() = http::StatusCode::from_u16(status).unwrap();
                            r.headers_mut()
                                .insert("content-type", content_type.parse().unwrap());
                            Ok::<_, Infallible>(r)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        FixedBackend {
            addr,
            seen,
            headers,
        }
    }

    fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    fn last(&self) -> (String, Bytes) {
        self.seen.lock().unwrap().last().cloned().unwrap()
    }

    fn last_headers(&self) -> http::HeaderMap {
        self.headers.lock().unwrap().last().cloned().unwrap()
    }
}

fn soap11(body: &str) -> String {
    format!("<s:Envelope xmlns:s=\"http://schemas.xmlsoap.org/soap/envelope/\"><s:Body>{body}</s:Body></s:Envelope>")
}

fn soap12(body: &str) -> String {
    format!("<s:Envelope xmlns:s=\"http://www.w3.org/2003/05/soap-envelope\"><s:Body>{body}</s:Body></s:Envelope>")
}

const CITY_RESPONSE: &str = "<c:getCityResponse xmlns:c=\"https://predic8.de/cities\"><country>Germany</country><population>3645000</population></c:getCityResponse>";

async fn post(addr: SocketAddr, path: &str, content_type: &str, body: impl Into<Bytes>) -> Reply {
    send(
        addr,
        req("POST", path)
            .header("content-type", content_type)
            .header("soapaction", "\"https://predic8.de/cities\"")
            .body(Full::new(body.into()))
            .unwrap(),
    )
    .await
}

fn api_yaml(flow: &str, backend: SocketAddr) -> String {
    format!(
        "gateway:\n  accessLog: false\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  flow:\n{flow}  target:\n    url: http://{backend}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xml_protection_neutralises_every_attack_file() {
    let backend = Backend::start().await;
    let gw = TestGateway::start(&api_yaml("    - xmlProtection: {}\n", backend.addr));
    let attacks = std::fs::read_dir(shared("xml-attacks")).unwrap();
    let mut checked = 0;
    for f in attacks {
        let path = f.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("xml") {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let doc = std::fs::read(&path).unwrap();
        let before = backend.count();
        let r = post(gw.addr(), "/x", "application/xml", doc.clone()).await;
        match name.as_str() {
            "simple.xml" | "simple-ns.xml" => {
                assert_eq!(r.status, 200, "{name}");
                assert_eq!(backend.last().body, doc, "{name} must pass unchanged");
            }
            "dtd.xml" => {
                assert_eq!(r.status, 200, "{name}");
                let seen = backend.last().body;
                let text = String::from_utf8_lossy(&seen);
                assert!(!text.contains("DOCTYPE"), "{text}");
                assert!(text.contains("<body>text</body>"));
                assert_eq!(
                    backend.last().headers["content-length"],
                    seen.len().to_string()
                );
            }
            _ => {
                assert_eq!(r.status, 400, "{name}: {}", r.text());
                assert_eq!(r.json()["type"], "urn:turnpike:problem:xml-protection");
                assert!(
                    r.json()["detail"].as_str().unwrap().contains("entit"),
                    "{name}"
                );
                assert_eq!(backend.count(), before, "{name} must not reach the backend");
            }
        }
        checked += 1;
    }
    assert_eq!(checked, 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xml_protection_limits_and_strict_dtd() {
    let backend = Backend::start().await;
    let flow = "    - xmlProtection:\n        maxAttributeCount: 2\n        maxElementNameLength: 10\n        maxDepth: 3\n        maxTextLength: 5\n        maxSize: 1KB\n        removeDTD: false\n";
    let gw = TestGateway::start(&api_yaml(flow, backend.addr));
    for (doc, status) in [
        ("<a x='1' y='2'><b>12345</b></a>", 200),
        ("<a x='1' y='2' z='3'/>", 400),
        ("<abcdefghijk/>", 400),
        ("<a><b><c><d/></c></b></a>", 400),
        ("<a>123456</a>", 400),
        ("<!DOCTYPE a><a/>", 400),
        ("<a>", 400),
    ] {
        let r = post(gw.addr(), "/", "application/xml", doc.to_owned()).await;
        assert_eq!(r.status, status, "{doc}: {}", r.text());
    }
    let big = format!("<a>{}</a>", "<b/>".repeat(300));
    assert_eq!(
        post(gw.addr(), "/", "application/xml", big).await.status,
        413
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wsdl_validation_of_requests_and_responses() {
    let good = FixedBackend::start(200, "text/xml", soap11(CITY_RESPONSE)).await;
    let flow = format!(
        "    - xmlProtection: {{}}\n    - validator:\n        wsdl: {}\n",
        shared("wsdl/cities.wsdl")
    );
    let gw = TestGateway::start(&api_yaml(&flow, good.addr));
    // `--watch` reloads when the validator's WSDL changes.
    let wsdl = std::path::PathBuf::from(shared("wsdl/cities.wsdl"));
    let watched = gw.gw().files();
    assert!(
        watched
            .iter()
            .any(|f| f.canonicalize().ok() == wsdl.canonicalize().ok()),
        "{watched:?}"
    );

    // The shared sample request passes; the backend's valid answer comes back.
    let ok = std::fs::read(shared("wsdl/city.soap.xml")).unwrap();
    let r = post(gw.addr(), "/city-service", "text/xml", ok).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("3645000"));
    assert_eq!(good.count(), 1);

    // The shared invalid request gets a SOAP 1.1 fault and never reaches the backend.
    let bad = std::fs::read(shared("wsdl/invalid-city.soap.xml")).unwrap();
    let r = post(gw.addr(), "/city-service", "text/xml", bad).await;
    assert_eq!(r.status, 500);
    assert!(r.header("content-type").unwrap().starts_with("text/xml"));
    let t = r.text();
    assert!(
        t.contains("http://schemas.xmlsoap.org/soap/envelope/"),
        "{t}"
    );
    assert!(t.contains("<faultcode>soapenv:Client</faultcode>"), "{t}");
    assert!(t.contains("<faultstring>WSDL message validation failed</faultstring>"));
    assert!(
        t.contains("INVALID"),
        "the validator's message is in the detail: {t}"
    );
    assert_eq!(good.count(), 1);

    // SOAP 1.2: valid passes, invalid gets a 1.2 fault (Sender, 400).
    let get = "<c:getCity xmlns:c=\"https://predic8.de/cities\"><name>Bonn</name></c:getCity>";
    let r = post(gw.addr(), "/", "application/soap+xml", soap12(get)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = post(
        gw.addr(),
        "/",
        "application/soap+xml",
        soap12("<c:getCity xmlns:c=\"https://predic8.de/cities\"/>"),
    )
    .await;
    assert_eq!(r.status, 400);
    let t = r.text();
    assert!(
        t.contains("http://www.w3.org/2003/05/soap-envelope") && t.contains("soapenv:Sender"),
        "{t}"
    );
    assert!(t.contains("WSDL message validation failed"));

    // Unknown operation, not a SOAP envelope.
    for body in [
        soap11("<c:deleteCity xmlns:c=\"https://predic8.de/cities\"/>"),
        "<hello/>".to_owned(),
    ] {
        let r = post(gw.addr(), "/", "text/xml", body.clone()).await;
        assert_eq!(r.status, 500, "{body}");
        assert!(r.text().contains("WSDL message validation failed"));
    }
    // Not XML at all: xmlProtection answers a SOAP request (text/xml) with a SOAP fault, as the
    // validator does, and any other request with problem+json.
    let r = post(gw.addr(), "/", "text/xml", "{\"json\":true}").await;
    assert_eq!(r.status, 500);
    assert!(
        r.text().contains("<faultcode>soapenv:Client</faultcode>"),
        "{}",
        r.text()
    );
    assert!(r.text().contains("urn:turnpike:problem:xml-protection"));
    let r = post(gw.addr(), "/", "application/json", "{\"json\":true}").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["type"], "urn:turnpike:problem:xml-protection");
    assert_eq!(good.count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_backend_responses_become_server_faults() {
    let wrong = CITY_RESPONSE.replace("3645000", "many");
    let backend = FixedBackend::start(200, "text/xml", soap11(&wrong)).await;
    let flow = format!(
        "    - validator:\n        wsdl: {}\n",
        shared("wsdl/cities.wsdl")
    );
    let gw = TestGateway::start(&api_yaml(&flow, backend.addr));
    let ok = std::fs::read(shared("wsdl/city.soap.xml")).unwrap();
    let r = post(gw.addr(), "/", "text/xml", ok).await;
    assert_eq!(r.status, 500);
    let t = r.text();
    assert!(
        t.contains("soapenv:Server") && t.contains("WSDL message validation failed"),
        "{t}"
    );
    assert!(t.contains("population"), "{t}");
    assert_eq!(backend.count(), 1);

    // A fault from the backend passes untouched.
    let fault =
        soap11("<s:Fault><faultcode>s:Server</faultcode><faultstring>down</faultstring></s:Fault>");
    let backend = FixedBackend::start(500, "text/xml", fault.clone()).await;
    let gw = TestGateway::start(&api_yaml(&flow, backend.addr));
    let ok = std::fs::read(shared("wsdl/city.soap.xml")).unwrap();
    let r = post(gw.addr(), "/", "text/xml", ok).await;
    assert_eq!(r.status, 500);
    assert_eq!(r.text(), fault);
}

/// A WSDL file in a temporary folder: cities.wsdl with its service address moved to `address`.
fn cities_wsdl_at(dir: &std::path::Path, address: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(shared("wsdl/cities.wsdl")).unwrap();
    let path = dir.join("cities.wsdl");
    std::fs::write(
        &path,
        text.replace("http://localhost:2001/city-service", address),
    )
    .unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_api_publishes_a_wsdl_as_membranes_manual_soap_proxy() {
    // `tutorials/soap/90-Manual-SOAPProxy.yaml` with a local WSDL and backend (and without its
    // web service explorer page).
    let backend = FixedBackend::start(200, "text/xml", soap11(CITY_RESPONSE)).await;
    let dir = tempfile::tempdir().unwrap();
    let wsdl = cities_wsdl_at(dir.path(), &format!("http://{}/city-service", backend.addr));
    let gw = TestGateway::start(&format!(
        r#"gateway: {{ accessLog: false }}
---
api:
  port: 0
  ip: 127.0.0.1
  path:
    uri: /my-service
  flow:
    - rewriter:
      - from: "/my-service/?(.*)"
        to: "/city-service$1"
    - wsdlPublisher:
        wsdl: {wsdl}
    - validator:
        wsdl: {wsdl}
  target:
    url: http://{addr}
"#,
        wsdl = wsdl.display(),
        addr = backend.addr
    ));
    let r = get(gw.addr(), "/my-service?wsdl").await;
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().starts_with("text/xml"));
    let t = r.text();
    assert!(
        t.contains("location=\"http://test.local/my-service\""),
        "{t}"
    );
    assert!(!t.contains(&backend.addr.to_string()), "{t}");
    // Other requests go on: validated, rewritten, forwarded.
    let ok = std::fs::read(shared("wsdl/city.soap.xml")).unwrap();
    let r = post(gw.addr(), "/my-service", "text/xml", ok).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(backend.last().0, "/city-service");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wsdl_rewriter_publishes_the_public_address() {
    // Membrane's `tutorials/soap/30-WSDL-Rewriter.yaml`, with a local WSDL: a gateway behind a
    // TLS terminator publishes that address.
    let backend = FixedBackend::start(200, "text/xml", soap11(CITY_RESPONSE)).await;
    let dir = tempfile::tempdir().unwrap();
    let wsdl = cities_wsdl_at(dir.path(), &format!("http://{}/city-service", backend.addr));
    let gw = TestGateway::start(&format!(
        "gateway:\n  accessLog: false\n---\nsoapProxy:\n  path:\n    uri: /my-service\n  port: 0\n  ip: 127.0.0.1\n  wsdl: {}\n  flow:\n    - wsdlRewriter:\n        host: my.host.example.com\n        protocol: https\n        port: 443\n    - validator: {{}}\n",
        wsdl.display()
    ));
    let r = get(gw.addr(), "/my-service?wsdl").await;
    assert_eq!(r.status, 200);
    let t = r.text();
    assert!(
        t.contains("location=\"https://my.host.example.com/my-service\""),
        "{t}"
    );
    assert!(
        !t.contains("test.local") && !t.contains(&backend.addr.to_string()),
        "{t}"
    );
    // The proxy itself works as before.
    let ok = std::fs::read(shared("wsdl/city.soap.xml")).unwrap();
    let r = post(gw.addr(), "/my-service", "text/xml", ok).await;
    assert_eq!(r.status, 200, "{}", r.text());
    // In a plain API there is no WSDL to rewrite.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("apis.yaml");
    std::fs::write(
        &f,
        "api:\n  port: 2000\n  flow:\n    - wsdlRewriter:\n        host: h\n    - return: {}\n",
    )
    .unwrap();
    let err = turnpike::start(vec![f]).err().unwrap().to_string();
    assert!(
        err.contains("api.flow[0].wsdlRewriter") && err.contains("soapProxy"),
        "{err}"
    );
    // Settings that cannot make an address.
    let f = dir.path().join("bad.yaml");
    std::fs::write(
        &f,
        format!(
            "soapProxy:\n  port: 2000\n  wsdl: {}\n  flow:\n    - wsdlRewriter:\n        protocol: ftp\n        port: 0\n        path: relative\n        rewriteEndpoint: true\n",
            wsdl.display()
        ),
    )
    .unwrap();
    let err = turnpike::start(vec![f]).err().unwrap().to_string();
    for key in ["protocol", "host", "port", "path", "rewriteEndpoint"] {
        assert!(
            err.contains(&format!("flow[0].wsdlRewriter.{key}")),
            "{key}: {err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soap_proxy_routes_publishes_and_faults() {
    let backend = FixedBackend::start(200, "text/xml", soap11(CITY_RESPONSE)).await;
    let dir = tempfile::tempdir().unwrap();
    let wsdl = cities_wsdl_at(dir.path(), &format!("http://{}/city-service", backend.addr));
    let dead = free_port();
    let dead_wsdl_dir = tempfile::tempdir().unwrap();
    let dead_wsdl = cities_wsdl_at(
        dead_wsdl_dir.path(),
        &format!("http://127.0.0.1:{dead}/dead-service"),
    );
    let metrics_port = free_port();
    let gw = TestGateway::start(&format!(
        "gateway:\n  accessLog: false\n---\nsoapProxy:\n  port: 0\n  ip: 127.0.0.1\n  wsdl: {}\n  flow:\n    - xmlProtection: {{}}\n    - validator: {{}}\n---\nsoapProxy:\n  port: 0\n  ip: 127.0.0.1\n  wsdl: {}\n---\napi:\n  port: {metrics_port}\n  ip: 127.0.0.1\n  flow: [ {{ prometheus: {{}} }} ]\n",
        wsdl.display(),
        dead_wsdl.display()
    ));
    let structure_misses = || async {
        let m = get(gw.addr_of(metrics_port), "/metrics").await.text();
        m.lines()
            .find_map(|l| {
                l.strip_prefix("turnpike_soap_fast_path_misses_total{reason=\"structure\"} ")
            })
            .unwrap_or_else(|| panic!("no structure misses in {m}"))
            .parse::<u64>()
            .unwrap()
    };
    let misses_before = structure_misses().await;
    let addr = gw.addr();

    // The WSDL, with the address rewritten to the gateway.
    let r = get(addr, "/city-service?wsdl").await;
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().starts_with("text/xml"));
    let t = r.text();
    assert!(
        t.contains("location=\"http://test.local/city-service\""),
        "{t}"
    );
    assert!(!t.contains(&backend.addr.to_string()));

    // Routed by the address's path to the address's host.
    let ok = std::fs::read(shared("wsdl/city.soap.xml")).unwrap();
    let r = post(addr, "/city-service", "text/xml", ok).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(backend.last().0, "/city-service");

    // `validator: {}` uses the proxy's WSDL.
    let bad = std::fs::read(shared("wsdl/invalid-city.soap.xml")).unwrap();
    let r = post(addr, "/city-service", "text/xml", bad).await;
    assert_eq!(r.status, 500);
    assert!(r.text().contains("WSDL message validation failed"));
    assert!(
        structure_misses().await > misses_before,
        "the fast path's miss is counted with its reason"
    );

    // A policy's rejection and engine errors are SOAP faults too, in the request's version.
    let r = post(
        addr,
        "/city-service",
        "text/xml",
        "<!DOCTYPE a [<!ENTITY e 'x'>]><a>&e;</a>",
    )
    .await;
    assert_eq!(r.status, 500);
    assert!(
        r.text().contains("<faultcode>soapenv:Client</faultcode>"),
        "{}",
        r.text()
    );
    let get12 =
        soap12("<c:getCity xmlns:c=\"https://predic8.de/cities\"><name>Bonn</name></c:getCity>");
    let r = post(
        addr,
        "/dead-service",
        "application/soap+xml; charset=utf-8",
        get12,
    )
    .await;
    assert_eq!(r.status, 502);
    let t = r.text();
    assert!(
        t.contains("http://www.w3.org/2003/05/soap-envelope") && t.contains("soapenv:Receiver"),
        "{t}"
    );
    assert!(
        t.contains("urn:turnpike:problem:upstream-unreachable"),
        "{t}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soap_proxy_config_errors_name_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let jms = dir.path().join("jms.wsdl");
    std::fs::write(
        &jms,
        std::fs::read_to_string(shared("wsdl/partner.wsdl"))
            .unwrap()
            .replace(
                "https://example.com/services/PartnerService",
                "jms:queue:partners",
            ),
    )
    .unwrap();
    let file = dir.path().join("g.yaml");
    std::fs::write(
        &file,
        format!(
            "soapProxy:\n  port: 0\n  wsdl: {}\n---\nsoapProxy:\n  port: 0\n  wsdl: nope.wsdl\n---\napi:\n  port: 0\n  flow:\n    - validator: {{}}\n  target:\n    url: http://127.0.0.1:1\n",
            jms.display()
        ),
    )
    .unwrap();
    let err = turnpike::start(vec![file]).err().unwrap().to_string();
    assert!(
        err.contains("soapProxy.wsdl") && err.contains("jms:queue:partners"),
        "{err}"
    );
    assert!(err.contains("nope.wsdl"), "{err}");
    assert!(
        err.contains("api.flow[0].validator") && err.contains("needs `wsdl:`"),
        "{err}"
    );
}

/// A getPartnersResponse of about `mb` megabytes.
fn partners_response(mb: usize) -> String {
    let entry = "<partners><id>1234567</id><name>Example Partner Company Limited</name></partners>";
    let n = mb * 1024 * 1024 / entry.len() + 1;
    soap11(&format!(
        "<p:getPartnersResponse xmlns:p=\"http://example.com/partner\">{}</p:getPartnersResponse>",
        entry.repeat(n)
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_megabyte_soap_message_is_validated() {
    let big = partners_response(10);
    assert!(big.len() >= 10 << 20);
    let backend = FixedBackend::start(200, "text/xml", big.clone()).await;
    let flow = format!(
        "    - xmlProtection: {{}}\n    - validator:\n        wsdl: {}\n",
        shared("wsdl/partner.wsdl")
    );
    let gw = TestGateway::start(&api_yaml(&flow, backend.addr));
    let req = soap11(
        "<p:getPartners xmlns:p=\"http://example.com/partner\"><city>Bonn</city></p:getPartners>",
    );
    let r = post(gw.addr(), "/", "text/xml", req).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), big.len());

    // The same 10 MB as a request: checked by xmlProtection, rejected by the validator at the
    // last element only.
    let mut broken = big.replacen("<id>1234567</id>", "<id>x</id>", 1);
    broken = broken.replace("getPartnersResponse", "getPartners");
    let r = post(gw.addr(), "/", "text/xml", broken).await;
    assert_eq!(r.status, 500);
    assert!(r.text().contains("WSDL message validation failed"));
}

fn python_soap_available() -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import spyne, zeep, lxml"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        if std::env::var_os("CI").is_some() {
            panic!("CI must have spyne, zeep and lxml (pip install spyne zeep lxml)");
        }
        eprintln!("NOTE: skipping: python3 with spyne, zeep and lxml is not installed (pip install spyne zeep lxml)");
    }
    ok
}

struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_spyne() -> (Child, u16) {
    start_spyne_version("1.1")
}

fn start_spyne_version(version: &str) -> (Child, u16) {
    use std::io::BufRead;
    let mut child = std::process::Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/python/spyne_service.py"
        ))
        .arg(version)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("spyne said {line:?}"));
    (Child(child), port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zeep_client_through_soap_proxy_to_spyne_service() {
    zeep_through_soap_proxy("1.1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zeep_client_through_soap_proxy_to_spyne_service_soap12() {
    zeep_through_soap_proxy("1.2").await;
}

async fn zeep_through_soap_proxy(version: &str) {
    if !python_soap_available() {
        return;
    }
    let (_spyne, port) = start_spyne_version(version);
    let gw = TestGateway::start(&format!(
        "gateway:\n  accessLog: false\n---\nsoapProxy:\n  port: 0\n  ip: 127.0.0.1\n  wsdl: http://127.0.0.1:{port}/?wsdl\n  flow:\n    - xmlProtection: {{}}\n    - validator: {{}}\n"
    ));
    let addr = gw.addr();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/python/zeep_client.py"
            ))
            .arg(format!("http://{addr}/?wsdl"))
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "zeep failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["address"], format!("http://{addr}/"));
    assert_eq!(v["getCity"]["name"], "Berlin");
    assert_eq!(v["getCity"]["country"], "Germany");
    assert_eq!(v["getCity"]["population"], 3645000);
    assert_eq!(v["listCities"], serde_json::json!(["Berlin", "Bonn"]));
    // Violations zeep does not check itself are caught by the gateway's XSD validation.
    assert_eq!(v["tooLong"]["message"], "WSDL message validation failed");
    assert!(
        v["tooLong"]["detail"].as_str().unwrap().contains("name"),
        "{v}"
    );
    assert_eq!(v["outOfRange"]["message"], "WSDL message validation failed");
    // The service's own fault passes through the response validation.
    assert_eq!(v["backendFault"]["message"], "no such city: Atlantis");
}

async fn post_json(addr: SocketAddr, path: &str, body: &str) -> Reply {
    send(
        addr,
        req("POST", path)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wsdl2openapi_cities_json_to_soap_and_back() {
    let backend = FixedBackend::start(200, "text/xml", soap11(CITY_RESPONSE)).await;
    let yaml = format!(
        "gateway:\n  accessLog: false\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  flow:\n    - wsdl2openapi:\n        wsdl: {}\n  target:\n    url: http://{}/person-service\n",
        shared("wsdl/cities.wsdl"),
        backend.addr
    );
    let gw = TestGateway::start(&yaml);
    let r = post_json(gw.addr(), "/get-city", r#"{"name":"Berlin"}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(
        r.json(),
        serde_json::json!({"country": "Germany", "population": 3645000})
    );
    // The backend got the SOAP request the WSDL describes, at the target's path.
    let (path, body) = backend.last();
    assert_eq!(path, "/person-service");
    let sent = String::from_utf8_lossy(&body).into_owned();
    assert!(
        sent.contains(
            "<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\">"
        ),
        "{sent}"
    );
    assert!(
        sent.contains("<ns0:getCity") && sent.contains("xmlns:ns0=\"https://predic8.de/cities\""),
        "{sent}"
    );
    assert!(sent.contains("<name>Berlin</name>"), "{sent}");

    // Invalid JSON requests never reach the backend.
    for (body, needle) in [
        (r#"{"nom":"Berlin"}"#, "unknown property"),
        (r#"{}"#, "name"),
        (r#"{"name":{"x":1}}"#, "string, number or boolean"),
        ("[1]", "JSON object"),
        ("{", "not JSON"),
    ] {
        let r = post_json(gw.addr(), "/get-city", body).await;
        assert_eq!(r.status, 400, "{body}");
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
        assert!(r.text().contains(needle), "{body}: {}", r.text());
    }
    assert_eq!(backend.count(), 1);
    let r = post_json(gw.addr(), "/delete-city", "{}").await;
    assert_eq!(r.status, 404);
    assert!(r.text().contains("POST /get-city"));
    assert_eq!(get(gw.addr(), "/get-city").await.status, 405);

    // The generated OpenAPI document.
    let r = get(gw.addr(), "/api-docs").await;
    assert_eq!(r.status, 200);
    let doc = r.json();
    assert_eq!(doc["openapi"], "3.0.3");
    assert_eq!(doc["info"]["title"], "CityService");
    let op = &doc["paths"]["/get-city"]["post"];
    assert_eq!(op["operationId"], "getCity");
    assert_eq!(
        op["requestBody"]["content"]["application/json"]["schema"]["required"],
        serde_json::json!(["name"])
    );
    assert_eq!(
        op["responses"]["200"]["content"]["application/json"]["schema"]["properties"]["population"]
            ["type"],
        "integer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wsdl2openapi_operation_mapping_faults_and_soap12() {
    // partner.wsdl with its SOAP binding turned into SOAP 1.2, behind an API path.
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(shared("wsdl/partner.wsdl")).unwrap();
    let wsdl = dir.path().join("partner12.wsdl");
    std::fs::write(
        &wsdl,
        text.replace(
            "http://schemas.xmlsoap.org/wsdl/soap/",
            "http://schemas.xmlsoap.org/wsdl/soap12/",
        ),
    )
    .unwrap();
    let fault = "<e:Envelope xmlns:e=\"http://www.w3.org/2003/05/soap-envelope\"><e:Body><e:Fault><e:Code><e:Value>e:Sender</e:Value></e:Code><e:Reason><e:Text xml:lang=\"en\">no partner 42</e:Text></e:Reason><e:Detail><id>42</id></e:Detail></e:Fault></e:Body></e:Envelope>";
    let backend = FixedBackend::start(400, "application/soap+xml", fault.to_owned()).await;
    let yaml = format!(
        "gateway:\n  accessLog: false\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  path:\n    uri: /crm/\n  flow:\n    - wsdl2openapi:\n        wsdl: {}\n        operations:\n          getPartner: {{ method: GET, path: '/partners/{{id}}' }}\n          getPartners: {{ method: GET, path: /partners }}\n  target:\n    host: 127.0.0.1\n    port: {}\n",
        wsdl.display(),
        backend.addr.port()
    );
    let gw = TestGateway::start(&yaml);
    let r = get(gw.addr(), "/crm/partners/42").await;
    assert_eq!(r.status, 400, "{}", r.text());
    let p = r.json();
    assert_eq!(p["type"], "urn:turnpike:problem:soap-fault");
    assert_eq!(p["faultcode"], "e:Sender");
    assert_eq!(p["faultstring"], "no partner 42");
    assert_eq!(p["faultdetail"]["id"], "42");
    let (path, body) = backend.last();
    // No base path in the target: the WSDL's address path.
    assert_eq!(path, "/services/PartnerService");
    let sent = String::from_utf8_lossy(&body).into_owned();
    assert!(
        sent.contains("http://www.w3.org/2003/05/soap-envelope"),
        "{sent}"
    );
    assert!(sent.contains("<id>42</id>"), "{sent}");

    // Query parameters fill the request; an enumeration is checked by the schema.
    let r = get(gw.addr(), "/crm/partners?city=Bonn&kind=ALIEN").await;
    assert_eq!(r.status, 400);
    assert!(r.text().contains("ALIEN"), "{}", r.text());
    let before = backend.count();
    let r = get(gw.addr(), "/crm/partners/x").await;
    assert_eq!(r.status, 400, "xsd:long is checked: {}", r.text());
    assert_eq!(backend.count(), before);
    let r = get(gw.addr(), "/crm/partners?city=Bonn&kind=PERSON").await;
    assert_eq!(r.status, 400);
    let sent = String::from_utf8_lossy(&backend.last().1).into_owned();
    assert!(
        sent.contains("<city>Bonn</city><kind>PERSON</kind>"),
        "{sent}"
    );

    // Other operations keep the default mapping; the OpenAPI shows both.
    let doc = get(gw.addr(), "/crm/api-docs").await.json();
    assert_eq!(doc["servers"][0]["url"], "/crm");
    assert!(doc["paths"]["/partners/{id}"]["get"].is_object());
    assert_eq!(
        doc["paths"]["/partners/{id}"]["get"]["parameters"][0]["schema"]["type"],
        "integer"
    );
    assert!(doc["paths"]["/create-partner"]["post"].is_object());

    // An unknown operation in the mapping is a load error.
    let dir2 = tempfile::tempdir().unwrap();
    let file = dir2.path().join("g.yaml");
    std::fs::write(&file, yaml.replace("getPartners:", "getPartnerz:")).unwrap();
    let err = turnpike::start(vec![file]).err().unwrap().to_string();
    assert!(err.contains("wsdl2openapi.operations.getPartnerz"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wsdl2openapi_json_client_against_spyne() {
    if !python_soap_available() {
        return;
    }
    let (_spyne, port) = start_spyne();
    let gw = TestGateway::start(&format!(
        "gateway:\n  accessLog: false\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  flow:\n    - wsdl2openapi:\n        wsdl: http://127.0.0.1:{port}/?wsdl\n  target:\n    url: http://127.0.0.1:{port}\n"
    ));
    let r = post_json(gw.addr(), "/get-city", r#"{"name":"Berlin"}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json(),
        serde_json::json!({"getCityResult": {"name": "Berlin", "country": "Germany", "population": 3645000}})
    );
    // Repeated elements are arrays, also with one item.
    let r = post_json(gw.addr(), "/list-cities", r#"{"limit":1}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json(),
        serde_json::json!({"listCitiesResult": {"string": ["Berlin"]}})
    );
    // The schema's facets (maxLength 20) are checked before the backend is called.
    let r = post_json(
        gw.addr(),
        "/get-city",
        &format!("{{\"name\":\"{}\"}}", "x".repeat(30)),
    )
    .await;
    assert_eq!(r.status, 400);
    // The service's fault (Client.NotFound) becomes a 400 problem.
    let r = post_json(gw.addr(), "/get-city", r#"{"name":"Atlantis"}"#).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["faultstring"], "no such city: Atlantis");
    assert!(r.json()["faultcode"]
        .as_str()
        .unwrap()
        .ends_with("Client.NotFound"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wsdl2openapi_with_json_protection_and_jsonpath_headers() {
    // The issue's example: jsonProtection, a JSONPath header, then REST to SOAP.
    let backend = FixedBackend::start(200, "text/xml", soap11(CITY_RESPONSE)).await;
    let yaml = format!(
        "gateway:\n  accessLog: false\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  flow:\n    - jsonProtection: {{}}\n    - request:\n        - setHeader:\n            name: X-Name\n            value: ${{$.name}}\n            language: jsonpath\n    - wsdl2openapi:\n        wsdl: {}\n  target:\n    url: http://{}/city-service\n",
        shared("wsdl/cities.wsdl"),
        backend.addr
    );
    let gw = TestGateway::start(&yaml);
    let r = post_json(gw.addr(), "/get-city", r#"{"name":"Berlin"}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["population"], 3645000);
    let h = backend.last_headers();
    assert_eq!(h["x-name"], "Berlin");
    assert_eq!(h["soapaction"], "\"https://predic8.de/cities\"");
    assert!(h["content-type"].to_str().unwrap().starts_with("text/xml"));
    let sent = String::from_utf8_lossy(&backend.last().1).into_owned();
    assert!(sent.contains("<name>Berlin</name>"), "{sent}");
    // jsonProtection rejects duplicate keys before any conversion.
    let r = post_json(gw.addr(), "/get-city", r#"{"name":"a","name":"b"}"#).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(backend.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_wsdl_with_imported_schema_is_usable_by_url() {
    // Gateway 1 publishes a WSDL whose types import a schema by a relative location; gateway 2
    // reads that WSDL by URL from gateway 1 (following `?xsd=0`) and validates with it.
    let backend = FixedBackend::start(200, "text/xml", soap11(CITY_RESPONSE)).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("xsd")).unwrap();
    std::fs::write(
        dir.path().join("xsd/name.xsd"),
        r#"<xsd:schema xmlns:xsd="http://www.w3.org/2001/XMLSchema" targetNamespace="urn:names"><xsd:simpleType name="Name"><xsd:restriction base="xsd:string"><xsd:maxLength value="8"/></xsd:restriction></xsd:simpleType></xsd:schema>"#,
    )
    .unwrap();
    let text = std::fs::read_to_string(shared("wsdl/cities.wsdl"))
        .unwrap()
        .replace(
            "<xsd:schema targetNamespace=\"https://predic8.de/cities\">",
            "<xsd:schema targetNamespace=\"https://predic8.de/cities\" xmlns:n=\"urn:names\"><xsd:import namespace=\"urn:names\" schemaLocation=\"xsd/name.xsd\"/>",
        )
        .replace(
            "<xsd:element name=\"name\" type=\"xsd:string\"/>",
            "<xsd:element name=\"name\" type=\"n:Name\"/>",
        )
        .replace(
            "http://localhost:2001/city-service",
            &format!("http://{}/city-service", backend.addr),
        );
    std::fs::write(dir.path().join("cities.wsdl"), text).unwrap();
    let gw1 = TestGateway::start(&format!(
        "gateway:\n  accessLog: false\n---\nsoapProxy:\n  port: 0\n  ip: 127.0.0.1\n  wsdl: {}\n",
        dir.path().join("cities.wsdl").display()
    ));
    let a1 = gw1.addr();
    let wsdl = get(a1, "/city-service?wsdl").await.text();
    assert!(wsdl.contains("schemaLocation=\"?xsd=0\""), "{wsdl}");
    assert!(get(a1, "/city-service?xsd=0")
        .await
        .text()
        .contains("maxLength"));
    let gw2 = tokio::task::spawn_blocking(move || {
        TestGateway::start(&format!(
            "gateway:\n  accessLog: false\n---\nsoapProxy:\n  port: 0\n  ip: 127.0.0.1\n  wsdl: http://{a1}/city-service?wsdl\n  flow:\n    - validator: {{}}\n"
        ))
    })
    .await
    .unwrap();
    // gateway 2 sends to the address gateway 1 published: gateway 1 itself.
    let get_city = |n: &str| {
        soap11(&format!(
            "<c:getCity xmlns:c=\"https://predic8.de/cities\"><name>{n}</name></c:getCity>"
        ))
    };
    let r = post(gw2.addr(), "/city-service", "text/xml", get_city("Bonn")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(backend.count(), 1);
    let r = post(
        gw2.addr(),
        "/city-service",
        "text/xml",
        get_city("Copenhagen"),
    )
    .await;
    assert_eq!(
        r.status,
        500,
        "the imported maxLength applies: {}",
        r.text()
    );
    assert_eq!(backend.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soap_proxy_over_tls_publishes_https_addresses() {
    let backend = FixedBackend::start(200, "text/xml", soap11(CITY_RESPONSE)).await;
    let dir = tempfile::tempdir().unwrap();
    let pki = common::pki::Pki::new(dir.path());
    let wsdl = cities_wsdl_at(dir.path(), &format!("http://{}/city-service", backend.addr));
    let gw = TestGateway::start(&format!(
        "gateway:\n  accessLog: false\n---\nsoapProxy:\n  port: 0\n  ip: 127.0.0.1\n  wsdl: {}\n  ssl:\n    certificate: {}\n    key: {}\n  flow:\n    - validator: {{}}\n",
        wsdl.display(),
        pki.server.cert.display(),
        pki.server.key.display()
    ));
    let port = gw.addr().port();
    let ca = pki.ca.display().to_string();
    let (code, _, body, err) = tokio::task::spawn_blocking({
        let ca = ca.clone();
        move || {
            common::pki::curl(&[
                "--cacert",
                &ca,
                &format!("https://localhost:{port}/city-service?wsdl"),
            ])
        }
    })
    .await
    .unwrap();
    assert_eq!(code, 200, "{err}");
    assert!(
        body.contains(&format!(
            "location=\"https://localhost:{port}/city-service\""
        )),
        "{body}"
    );
    let ok = std::fs::read_to_string(shared("wsdl/city.soap.xml")).unwrap();
    let (code, _, body, err) = tokio::task::spawn_blocking(move || {
        common::pki::curl(&[
            "--cacert",
            &ca,
            "-H",
            "Content-Type: text/xml",
            "--data-binary",
            &ok,
            &format!("https://localhost:{port}/city-service"),
        ])
    })
    .await
    .unwrap();
    assert_eq!(code, 200, "{err} {body}");
    assert!(body.contains("3645000"));
    assert_eq!(backend.count(), 1);
}
