//! Membrane's `json2Xml` and `xml2Json` through sockets, with configurations in the shapes of
//! Membrane's examples and tutorials: what the backend receives, what the client gets back,
//! both directions, and the refusals.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::Bytes;
use common::*;
use http_body_util::Full;

const DECL: &str = r#"<?xml version="1.0" encoding="UTF-8"?>"#;

async fn post(addr: std::net::SocketAddr, content_type: &str, body: &[u8]) -> Reply {
    send(
        addr,
        req("POST", "/")
            .header("content-type", content_type)
            .body(Full::new(Bytes::copy_from_slice(body)))
            .unwrap(),
    )
    .await
}

fn load_error(yaml: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gateway.yaml");
    std::fs::write(&file, yaml).unwrap();
    match turnpike::start(vec![file]) {
        Ok(_) => panic!("the configuration loaded:\n{yaml}"),
        Err(e) => e.to_string(),
    }
}

/// Membrane's `examples/message-transformation/json2xml/apis.yaml`: the converted request
/// goes to the echo API, whose `return` answers it with its `Content-Type`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json2xml_example_forwards_the_converted_request_to_the_echo_api() {
    let (proxy, echo) = (free_port(), free_port());
    let yaml = format!(
        r#"gateway: {{ accessLog: false }}
---
# yaml-language-server: $schema=https://www.membrane-api.io/v7.7.0.json
api:
  port: {proxy}
  ip: 127.0.0.1
  flow:
    - request:
        - json2Xml: {{}}
  target:
    url: http://localhost:{echo}

---

api:
  name: echo
  port: {echo}
  ip: 127.0.0.1
  flow:
    - log: {{}}
    - return: {{}}
"#
    );
    let gw = TestGateway::start(&yaml);
    let r = post(
        gw.addr_of(proxy),
        "application/json",
        br#"{"person":{"name":"Mike","tags":["a","b"],"age":42,"vip":true,"note":null}}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/xml"));
    assert_eq!(
        r.text(),
        format!("{DECL}<person><name>Mike</name><tags>a</tags><tags>b</tags><age>42</age><vip>true</vip><note>null</note></person>")
    );
    // Not JSON: passed on unchanged.
    let r = post(gw.addr_of(proxy), "text/plain", b"{\"a\":1}").await;
    assert_eq!(r.text(), "{\"a\":1}");
    assert_eq!(r.header("content-type"), Some("text/plain"));
}

/// What the backend receives, and what the client gets when the body cannot be converted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json2xml_sends_the_backend_xml_and_refuses_what_is_not_json() {
    let backend = Backend::start().await;
    let yaml = format!(
        "gateway: {{ accessLog: false }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  flow:\n    - request:\n        - json2Xml:\n            root: order\n  target:\n    url: http://127.0.0.1:{}\n",
        backend.port()
    );
    let gw = TestGateway::start(&yaml);
    let r = post(
        gw.addr(),
        "application/json",
        br#"[{"sku":"K-1","qty":2},{"sku":"Z","qty":1.50}]"#,
    )
    .await;
    assert_eq!(r.status, 200);
    let seen = backend.last();
    assert_eq!(seen.headers["content-type"], "application/xml");
    assert_eq!(
        seen.body,
        format!("{DECL}<order><item><sku>K-1</sku><qty>2</qty></item><item><sku>Z</sku><qty>1.5</qty></item></order>")
    );
    assert_eq!(
        seen.headers["content-length"],
        seen.body.len().to_string().as_str()
    );

    for (body, detail) in [
        ("{ invalid", "the body is not valid JSON (line 1, column 3)"),
        (
            "\"1\"",
            "a JSON string cannot be converted to XML: the body must be an object or an array",
        ),
        (
            r#"{"a":1,"a":2}"#,
            "an object of the JSON body has the same key twice",
        ),
    ] {
        let r = post(gw.addr(), "application/json", body.as_bytes()).await;
        assert_eq!(r.status, 400, "{body}");
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
        let p = r.json();
        assert_eq!(p["type"], "urn:turnpike:problem:bad-json");
        assert_eq!(p["title"], "The body is not JSON");
        assert_eq!(p["detail"], detail);
    }
    assert_eq!(
        backend.count(),
        1,
        "refused requests never reach the backend"
    );
}

/// Membrane's `tutorials/xml/10-JSON-to-XML.yaml`, unchanged but for the port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json2xml_tutorial_answers_the_beautified_xml() {
    let yaml = r#"gateway: { accessLog: false }
---
# yaml-language-server: $schema=https://www.membrane-api.io/v7.7.0.json
api:
  port: 0
  ip: 127.0.0.1
  flow:
    - request:
        - json2Xml:
            root: zoo # XML root element
        - beautifier: {} # Format
    - return:
        status: 200
"#;
    let gw = TestGateway::start(yaml);
    let r = post(
        gw.addr(),
        "application/json",
        br#"{"animals":[{"name":"Skye","species":"Cat"},{"name":"Molly"}]}"#,
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/xml"));
    assert_eq!(
        r.text(),
        format!("{DECL}\n<zoo>\n  <animals>\n    <name>Skye</name>\n    <species>Cat</species>\n  </animals>\n  <animals>\n    <name>Molly</name>\n  </animals>\n</zoo>\n")
    );
}

/// Membrane's `examples/message-transformation/xml2json/apis.yaml` with the README's request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xml2json_example_forwards_the_converted_request_to_the_echo_api() {
    let (proxy, echo) = (free_port(), free_port());
    let yaml = format!(
        r#"gateway: {{ accessLog: false }}
---
# yaml-language-server: $schema=https://www.membrane-api.io/v6.3.11.json
api:
  port: {proxy}
  ip: 127.0.0.1
  flow:
    - request:
        - xml2Json: {{}}
  target:
    url: http://localhost:{echo}

---

api:
  name: echo
  port: {echo}
  ip: 127.0.0.1
  flow:
    - log: {{}}
    - return: {{}}
"#
    );
    let gw = TestGateway::start(&yaml);
    let jobs = r#"<?xml version="1.0" encoding="UTF-8"?>
<jobs>
  <job id="1" type="build">
    <name>Compile</name>
    <priority>5</priority>
  </job>
  <job id="2">
    <name>Test &amp; Deploy</name>
    <done>false</done>
  </job>
</jobs>
"#;
    let r = post(gw.addr_of(proxy), "application/xml", jobs.as_bytes()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.header("content-type"),
        Some("application/json; charset=utf-8")
    );
    assert_eq!(
        r.text(),
        r#"{"jobs":{"job":[{"id":1,"type":"build","name":"Compile","priority":5},{"id":2,"name":"Test & Deploy","done":false}]}}"#
    );
}

/// What the backend receives (settings honoured, the charset read), and the refusals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xml2json_sends_the_backend_json_and_refuses_what_is_not_xml() {
    let backend = Backend::start().await;
    let yaml = format!(
        r#"gateway: {{ accessLog: false }}
---
api:
  port: 0
  ip: 127.0.0.1
  flow:
    - request:
        - xml2Json:
            keepString: true
            convertNilAttributeToNull: true
            forceList:
              - item
  target:
    url: http://127.0.0.1:{}
"#,
        backend.port()
    );
    let gw = TestGateway::start(&yaml);
    let r = post(
        gw.addr(),
        "text/xml; charset=ISO-8859-1",
        b"<order xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\"><item>K\xE4se</item><qty>2</qty><note xsi:nil=\"true\"/></order>",
    )
    .await;
    assert_eq!(r.status, 200);
    let seen = backend.last();
    assert_eq!(
        seen.headers["content-type"],
        "application/json; charset=utf-8"
    );
    assert_eq!(
        seen.body,
        r#"{"order":{"xmlns:xsi":"http://www.w3.org/2001/XMLSchema-instance","item":["Käse"],"qty":"2","note":null}}"#
    );

    for (ct, body) in [
        ("application/xml", "<unclosed>"),
        ("application/xml", "<a>&xxe;</a>"),
        ("text/xml; charset=koi8-r", "<a/>"),
    ] {
        let r = post(gw.addr(), ct, body.as_bytes()).await;
        assert_eq!(r.status, 400, "{body}");
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
        let p = r.json();
        assert_eq!(p["type"], "urn:turnpike:problem:bad-xml", "{p}");
        assert_eq!(p["title"], "The body is not XML");
        assert!(p["detail"].is_string(), "{p}");
    }
    let r = post(gw.addr(), "application/xml", b"<a>b</c>").await;
    assert_eq!(r.json()["detail"], "the body is not well-formed XML");
    assert!(
        !r.text().contains("</c>"),
        "no parser message: {}",
        r.text()
    );
    assert_eq!(
        backend.count(),
        1,
        "refused requests never reach the backend"
    );
}

/// Membrane's `tutorials/xml/20-XML-to-JSON.yaml`, unchanged but for the port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xml2json_tutorial_answers_the_beautified_json() {
    let yaml = r#"gateway: { accessLog: false }
---
# yaml-language-server: $schema=https://www.membrane-api.io/v7.7.0.json
api:
  port: 0
  ip: 127.0.0.1
  flow:
    - request:
        - xml2Json: {}
        - beautifier: {} # Format
    - return:
        status: 200
"#;
    let gw = TestGateway::start(yaml);
    let r = post(
        gw.addr(),
        "text/xml",
        br#"<animals><animal name="Skye"><legs>4</legs></animal><animal name="Tweety"><legs>2</legs></animal></animals>"#,
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("application/json; charset=utf-8")
    );
    assert_eq!(
        r.text(),
        "{\n  \"animals\": {\n    \"animal\": [\n      {\n        \"name\": \"Skye\",\n        \"legs\": 4\n      },\n      {\n        \"name\": \"Tweety\",\n        \"legs\": 2\n      }\n    ]\n  }\n}"
    );
}

/// In a `response:` flow each converts the backend's answer; a backend answer that cannot be
/// converted is the backend's fault (502).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_convert_the_backends_response() {
    let (to_json, to_xml, echo, broken_xml, broken_json) = (
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
    );
    let yaml = format!(
        r#"gateway: {{ accessLog: false }}
---
api:
  port: {to_json}
  ip: 127.0.0.1
  flow:
    - response:
        - xml2Json: {{}}
  target:
    url: http://localhost:{echo}
---
api:
  port: {to_xml}
  ip: 127.0.0.1
  flow:
    - response:
        - json2Xml:
            root: answer
  target:
    url: http://localhost:{echo}
---
api:
  name: echo
  port: {echo}
  ip: 127.0.0.1
  flow:
    - return: {{}}
---
api:
  port: {broken_xml}
  ip: 127.0.0.1
  flow:
    - response:
        - xml2Json: {{}}
    - return:
        body: "<unclosed>"
        contentType: application/xml
---
api:
  port: {broken_json}
  ip: 127.0.0.1
  flow:
    - response:
        - json2Xml: {{}}
    - return:
        body: "[1,"
        contentType: application/json
"#
    );
    let gw = TestGateway::start(&yaml);
    // The request passes unchanged; the echoed XML comes back as JSON.
    let r = post(gw.addr_of(to_json), "text/xml", b"<r><a>1</a><b>x</b></r>").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("application/json; charset=utf-8")
    );
    assert_eq!(r.text(), r#"{"r":{"a":1,"b":"x"}}"#);
    // The echoed JSON comes back as XML.
    let r = post(
        gw.addr_of(to_xml),
        "application/json",
        br#"{"z":1,"a":[2,3]}"#,
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/xml"));
    assert_eq!(
        r.text(),
        format!("{DECL}<answer><z>1</z><a>2</a><a>3</a></answer>")
    );
    // Other content types pass both ways unchanged.
    let r = post(gw.addr_of(to_xml), "text/plain", b"[1]").await;
    assert_eq!(
        (r.text().as_str(), r.header("content-type")),
        ("[1]", Some("text/plain"))
    );

    for (port, kind) in [(broken_xml, "bad-xml"), (broken_json, "bad-json")] {
        let r = post(gw.addr_of(port), "text/plain", b"").await;
        assert_eq!(r.status, 502, "{}", r.text());
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
        assert_eq!(r.json()["type"], format!("urn:turnpike:problem:{kind}"));
    }
}

/// At the top level of a flow a policy acts in both directions, as in Membrane: `xml2Json`
/// turns the client's XML into JSON for the backend, and the backend's XML answer into JSON for
/// the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_top_level_they_convert_both_ways() {
    let (front, back) = (free_port(), free_port());
    let yaml = format!(
        r#"gateway: {{ accessLog: false }}
---
api:
  port: {front}
  ip: 127.0.0.1
  flow:
    - xml2Json: {{}}
  target:
    url: http://localhost:{back}
---
api:
  port: {back}
  ip: 127.0.0.1
  flow:
    - json2Xml:
        root: echoed
    - return: {{}}
"#
    );
    let gw = TestGateway::start(&yaml);
    let r = post(
        gw.addr_of(front),
        "application/xml",
        br#"<order id="7"><item>a</item><item>b</item></order>"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    // The back API saw JSON, turned it into XML and echoed it; the front turned it back.
    assert_eq!(
        r.header("content-type"),
        Some("application/json; charset=utf-8")
    );
    assert_eq!(
        r.text(),
        r#"{"echoed":{"order":{"id":7,"item":["a","b"]}}}"#
    );
}

#[test]
fn settings_membrane_does_not_have_are_load_errors() {
    for (policy, expect) in [
        ("json2Xml: { rootElement: zoo }", "rootElement"),
        ("json2Xml: { root: 'my zoo' }", "not an XML element name"),
        ("xml2Json: { keepStrings: true }", "keepStrings"),
        ("xml2Json: { forceList: ['a b'] }", "forceList"),
    ] {
        let e = load_error(&format!(
            "api:\n  port: 0\n  flow:\n    - {policy}\n    - return: {{}}\n"
        ));
        assert!(e.contains(expect), "{policy}: {e}");
        assert!(e.contains("gateway.yaml:4:"), "{policy}: {e}");
    }
}
