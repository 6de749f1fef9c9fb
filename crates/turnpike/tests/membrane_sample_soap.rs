//! Membrane's `sampleSoapService` (the demo CityService) through real sockets: the tutorial's
//! configuration, the WSDL-to-OpenAPI backend with `beautifier` and `log`, the WSDL it serves
//! loaded by a `soapProxy` and a `validator` in front of it, and a real SOAP client (zeep).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;

use bytes::Bytes;
use common::*;
use http_body_util::Full;

/// The request of Membrane's `invoke-sample-soap-service.sh`.
fn get_city(name: &str) -> String {
    format!(
        "<s11:Envelope xmlns:s11=\"http://schemas.xmlsoap.org/soap/envelope/\" xmlns:cs=\"https://predic8.de/cities\"><s11:Body><cs:getCity><name>{name}</name></cs:getCity></s11:Body></s11:Envelope>"
    )
}

async fn post_soap(addr: SocketAddr, path: &str, body: &str) -> Reply {
    send(
        addr,
        req("POST", path)
            .header("content-type", "text/xml")
            .header("soapaction", "https://predic8.de/cities")
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap(),
    )
    .await
}

/// `GET path` with `Host` set to the address the client used.
async fn get_as_client(addr: SocketAddr, path: &str) -> Reply {
    send(
        addr,
        http::Request::builder()
            .uri(path)
            .header("host", addr.to_string())
            .body(Full::new(Bytes::new()))
            .unwrap(),
    )
    .await
}

/// The text of the first `<tag>` in `xml`.
fn text_of<'a>(xml: &'a str, tag: &str) -> &'a str {
    let open = format!("<{tag}>");
    let start = xml
        .find(&open)
        .unwrap_or_else(|| panic!("no {open} in {xml}"))
        + open.len();
    let end = xml[start..].find('<').unwrap() + start;
    &xml[start..end]
}

/// The configuration of Membrane's `tutorials/soap/10-Sample-SOAP-Service.yaml`.
const TUTORIAL: &str = r#"gateway:
  accessLog: false
---
api:
  port: 0
  ip: 127.0.0.1
  path:
    uri: /city-service
  flow:
    - sampleSoapService: {}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tutorial_answers_cities_faults_and_its_wsdl() {
    let gw = TestGateway::start(TUTORIAL);
    let addr = gw.addr();

    let r = post_soap(addr, "/city-service", &get_city("Berlin")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/xml"));
    let t = r.text();
    assert!(t.contains("<cs:getCityResponse>"), "{t}");
    assert_eq!(text_of(&t, "country"), "Germany");
    assert_eq!(text_of(&t, "population"), "3897000");

    // The README's request with the old namespace: the namespace is not looked at.
    let old = get_city("London").replace(
        "https://predic8.de/cities",
        "https://predic8.de/city-service",
    );
    let t = post_soap(addr, "/city-service", &old).await.text();
    assert_eq!(text_of(&t, "country"), "England");
    let t = post_soap(addr, "/city-service", &get_city("São Paulo"))
        .await
        .text();
    assert_eq!(text_of(&t, "population"), "22990000");

    // An unknown city: a SOAP fault with status 200, the name escaped.
    let r = post_soap(addr, "/city-service", &get_city("&lt;Atlantis&gt;")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/xml"));
    let t = r.text();
    assert_eq!(text_of(&t, "faultcode"), "s11:Client");
    assert_eq!(text_of(&t, "faultstring"), "Not Found");
    assert_eq!(text_of(&t, "errorcode"), "404");
    assert_eq!(
        text_of(&t, "errormessage"),
        "Do not know &lt;Atlantis&gt;. Try Bonn, London or New York"
    );

    // Not a SOAP message.
    let r = post_soap(addr, "/city-service", "{\"name\":\"Bonn\"}").await;
    assert_eq!(r.status, 200);
    assert_eq!(text_of(&r.text(), "faultstring"), "Resource Not Found");
    let r = post_soap(addr, "/city-service", "").await;
    assert_eq!(text_of(&r.text(), "faultstring"), "Resource Not Found");

    // Another method.
    let r = get(addr, "/city-service").await;
    assert_eq!(r.status, 200);
    assert_eq!(text_of(&r.text(), "faultstring"), "Method GET not allowed");
    assert_eq!(text_of(&r.text(), "errorcode"), "405");

    // The WSDL, its address pointing where the client went.
    let r = get(addr, "/city-service?wsdl").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/xml;charset=UTF-8"));
    assert!(
        r.text()
            .contains("<s:address location=\"http://test.local/city-service\"/>"),
        "{}",
        r.text()
    );
    let r = get_as_client(addr, "/city-service/sub?WSDL").await;
    assert!(r
        .text()
        .contains(&format!("location=\"http://{addr}/city-service/sub\"")));

    // Outside the API's path: no route.
    assert_eq!(get(addr, "/other?wsdl").await.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wsdl_to_openapi_backend_beautifies_logs_and_limits_bodies() {
    // The backend API of Membrane's `tutorials/wsdl-to-openapi/10-WSDL-to-OpenAPI.yaml`.
    let gw = TestGateway::start(
        r#"gateway:
  accessLog: false
  limits: { maxBodySize: 1KB }
---
api:
  port: 0
  ip: 127.0.0.1
  name: City SOAP Service Backend
  path:
    uri: /city-service
  flow:
    - beautifier: {}
    - log:
        label: "****** SOAP Message *******"
    - sampleSoapService: {}
"#,
    );
    let addr = gw.addr();
    let r = post_soap(addr, "/city-service", &get_city("Tokyo")).await;
    assert_eq!(r.status, 200);
    let t = r.text();
    assert_eq!(text_of(&t, "country"), "Japan");
    assert_eq!(text_of(&t, "population"), "37036200");
    let r = post_soap(addr, "/city-service", &get_city("Atlantis")).await;
    assert_eq!(text_of(&r.text(), "faultstring"), "Not Found");
    // A body over the gateway's limit is refused before the service reads it, as a SOAP fault.
    let r = post_soap(addr, "/city-service", &get_city(&"x".repeat(2048))).await;
    assert_eq!(r.status, 500, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("text/xml; charset=utf-8"));
    assert!(r.text().contains("body-too-large"), "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_acts_on_requests_and_has_no_settings() {
    // In a `response:` flow it cannot stand (it acts on requests only); it has no settings.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gateway.yaml");
    std::fs::write(
        &file,
        "api:\n  port: 0\n  flow:\n    - response:\n        - sampleSoapService: {}\n",
    )
    .unwrap();
    let e = turnpike::start(vec![file.clone()])
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("`sampleSoapService` acts on requests only"),
        "{e}"
    );
    std::fs::write(
        &file,
        "api:\n  port: 0\n  flow:\n    - sampleSoapService: { city: Bonn }\n",
    )
    .unwrap();
    let e = turnpike::start(vec![file]).err().unwrap().to_string();
    assert!(e.contains("city"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn its_wsdl_drives_a_soap_proxy_and_a_validator() {
    // The sample service as the backend of Membrane's `soap-wsdl-validation` example.
    let backend = TestGateway::start(TUTORIAL);
    let service = backend.addr();

    // Its WSDL, as a client reads it, written to a file for a `validator`.
    let wsdl = get_as_client(service, "/city-service?wsdl").await;
    assert_eq!(wsdl.status, 200);
    let dir = tempfile::tempdir().unwrap();
    let wsdl_file = dir.path().join("city-service.wsdl");
    std::fs::write(&wsdl_file, &wsdl.body).unwrap();

    // A soapProxy reading the WSDL from the service itself (it routes to the WSDL's address,
    // which is the service), and an API validating against the saved copy.
    let gw = TestGateway::start(&format!(
        r#"gateway:
  accessLog: false
---
soapProxy:
  port: 0
  ip: 127.0.0.1
  wsdl: http://{service}/city-service?wsdl
  flow:
    - validator: {{}}
---
api:
  port: 0
  ip: 127.0.0.1
  path:
    uri: /validated
  flow:
    - validator:
        wsdl: {}
  target:
    url: http://{service}/city-service
"#,
        wsdl_file.display()
    ));
    let addr = gw.addr();

    for path in ["/city-service", "/validated"] {
        // A valid request passes, and so does the service's answer.
        let r = post_soap(addr, path, &get_city("Bonn")).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        let t = r.text();
        assert_eq!(text_of(&t, "country"), "Germany", "{path}");
        assert_eq!(text_of(&t, "population"), "327000", "{path}");
        // The service's fault passes the response validation.
        let r = post_soap(addr, path, &get_city("Atlantis")).await;
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(text_of(&r.text(), "faultstring"), "Not Found", "{path}");
        // A request the WSDL does not allow never reaches the service.
        let bad = get_city("Bonn").replace("<name>Bonn</name>", "<city>Bonn</city>");
        let r = post_soap(addr, path, &bad).await;
        assert_eq!(r.status, 500, "{path}: {}", r.text());
        assert!(
            r.text().contains("WSDL message validation failed"),
            "{path}: {}",
            r.text()
        );
    }

    // The soapProxy publishes the WSDL with its own address.
    let r = get_as_client(addr, "/city-service?wsdl").await;
    assert!(
        r.text()
            .contains(&format!("location=\"http://{addr}/city-service\"")),
        "{}",
        r.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zeep_calls_the_sample_service_from_its_wsdl() {
    if !python_has(&["zeep"]) {
        return;
    }
    let gw = TestGateway::start(TUTORIAL);
    let addr = gw.addr();
    let script = r#"
import json, sys
import zeep
from zeep.exceptions import Fault
client = zeep.Client(sys.argv[1])
out = {"address": client.service._binding_options["address"]}
city = client.service.getCity("Bonn")
out["bonn"] = {"country": city.country, "population": int(city.population)}
try:
    client.service.getCity("Atlantis")
    out["fault"] = None
except Fault as f:
    out["fault"] = {"message": f.message, "detail": "".join(f.detail.itertext()).split()}
print(json.dumps(out), flush=True)
"#;
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .args(["-c", script, &format!("http://{addr}/city-service?wsdl")])
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
    assert_eq!(v["address"], format!("http://{addr}/city-service"));
    assert_eq!(
        v["bonn"],
        serde_json::json!({"country": "Germany", "population": 327000})
    );
    assert_eq!(v["fault"]["message"], "Not Found");
    assert_eq!(
        v["fault"]["detail"],
        serde_json::json!([
            "404",
            "Do",
            "not",
            "know",
            "Atlantis.",
            "Try",
            "Bonn,",
            "London",
            "or",
            "New",
            "York"
        ])
    );
}
