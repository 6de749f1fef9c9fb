//! `validator` with `schema:` (XML Schema) and `jsonSchema:` (JSON Schema), over sockets, with
//! configurations in the shapes of Membrane's examples (`examples/xml/xml-validation`,
//! `tutorials/xml/50-XSD-Schema-validation.yaml`, `examples/validation/json-schema`) and their
//! schema files beside the configuration.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use bytes::Bytes;
use common::*;
use http_body_util::Full;

/// Writes `files` and the configuration into a new folder and starts the gateway from it.
fn start_with(files: &[(&str, &str)], yaml: &str) -> TestGateway {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        let p = dir.path().join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let file = dir.path().join("apis.yaml");
    std::fs::write(&file, yaml).unwrap();
    let gateway = turnpike::start(vec![file.clone()]).unwrap_or_else(|e| panic!("{e}"));
    TestGateway {
        gateway: Some(gateway),
        dir,
        file,
    }
}

fn load_error(dir: &Path, yaml: &str) -> String {
    let file = dir.join("apis.yaml");
    std::fs::write(&file, yaml).unwrap();
    match turnpike::start(vec![file]) {
        Ok(_) => panic!("the configuration loaded:\n{yaml}"),
        Err(e) => e.to_string(),
    }
}

async fn post(addr: std::net::SocketAddr, content_type: &str, body: &str) -> Reply {
    send(
        addr,
        req("POST", "/")
            .header("content-type", content_type)
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap(),
    )
    .await
}

const YEAR_XSD: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema">
  <xs:element name="year" type="xs:gYear"/>
</xs:schema>
"#;

const AMOUNT_XSD: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema">
  <xs:element name="amount">
    <xs:simpleType>
      <xs:restriction base="xs:integer">
        <xs:minInclusive value="0"/>
      </xs:restriction>
    </xs:simpleType>
  </xs:element>
</xs:schema>
"#;

/// Membrane's `tutorials/xml/books.xsd`.
const BOOKS_XSD: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema"
           elementFormDefault="qualified"
           attributeFormDefault="unqualified">

  <xs:element name="books" type="BooksType"/>

  <xs:complexType name="BooksType">
    <xs:sequence>
      <xs:element name="book" type="BookType" minOccurs="0" maxOccurs="unbounded"/>
    </xs:sequence>
    <xs:attribute name="category" type="xs:string"/>
  </xs:complexType>

  <xs:complexType name="BookType">
    <xs:sequence>
      <xs:element name="title" type="xs:string"/>
      <xs:element name="subtitle" type="xs:string" minOccurs="0"/>
      <xs:element name="author" type="xs:string" maxOccurs="unbounded"/>
      <xs:element name="year" type="YearType" minOccurs="0"/>
      <xs:element name="category" type="xs:string"/>
    </xs:sequence>
    <xs:attribute name="id" type="xs:positiveInteger" use="required"/>
  </xs:complexType>

  <xs:simpleType name="YearType">
    <xs:restriction base="xs:gYear"/>
  </xs:simpleType>

</xs:schema>
"#;

const BOOK_VALID: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<books category="tech">
  <book id="1">
    <title>Enterprise Integration Patterns</title>
    <author>Gregor Hohpe</author>
    <author>Bobby Woolf</author>
    <year>2003</year>
    <category>Integration</category>
  </book>
</books>
"#;

const BOOK_INVALID: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<books category="tech">
  <book id="1">
    <title>Enterprise Integration Patterns</title>
    <author>Gregor Hohpe</author>
    <author>Bobby Woolf</author>
    <year>two thousand three</year>
    <category>Integration</category>
  </book>
</books>
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xsd_tutorial_rejects_an_invalid_book_with_its_line() {
    // `tutorials/xml/50-XSD-Schema-validation.yaml`, as Membrane ships it.
    let gw = start_with(
        &[("books.xsd", BOOKS_XSD)],
        r#"# yaml-language-server: $schema=https://www.membrane-api.io/v7.1.3.json
api:
  port: 0
  ip: 127.0.0.1
  flow:
    - request:
        - validator:
            schema: books.xsd
        - static:
            src: Ok
        - return:
            status: 200
"#,
    );
    let addr = gw.addr();
    // Membrane's tutorial test posts XML as a form (curl -d): no Content-Type check.
    let r = post(addr, "application/x-www-form-urlencoded", BOOK_VALID).await;
    assert_eq!((r.status.as_u16(), r.text().as_str()), (200, "Ok"));
    let r = post(addr, "application/x-www-form-urlencoded", BOOK_INVALID).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    assert_eq!(r.header("x-validation-error-source"), Some("REQUEST"));
    let p = r.json();
    assert_eq!(p["type"], "urn:turnpike:problem:validation");
    let errors = p["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{p}");
    assert_eq!(errors[0]["line"], 7, "{p}");
    let message = errors[0]["message"].as_str().unwrap();
    assert!(
        message.contains("year") && message.contains("two thousand three"),
        "{p}"
    );
    // Not XML: the parser's error, with line and column.
    let r = post(
        addr,
        "application/xml",
        "<books>\n  <book id=\"1\">\n</books>",
    )
    .await;
    assert_eq!(r.status, 400);
    let p = r.json();
    assert!(p["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("not well-formed"));
    assert_eq!(p["errors"][0]["line"], 3, "{p}");
    assert!(p["errors"][0]["column"].as_u64().is_some(), "{p}");
    // An empty body is not validated.
    let r = post(addr, "application/xml", "").await;
    assert_eq!((r.status.as_u16(), r.text().as_str()), (200, "Ok"));
    // A DTD is refused, never read.
    let bomb =
        "<?xml version=\"1.0\"?><!DOCTYPE books [<!ENTITY a \"aaaaaaaa\">]><books>&a;</books>";
    let r = post(addr, "application/xml", bomb).await;
    assert_eq!(r.status, 400);
    assert!(r.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("DTD"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xml_validation_example_checks_requests_and_responses_against_two_schemas() {
    // `examples/xml/xml-validation/apis.yaml`: requests against year.xsd, the backend's
    // responses against amount.xsd; a second API's backend answers what the test sets.
    let (front, back, other) = (free_port(), free_port(), free_port());
    let backend = StaticServer::start("<amount>7</amount>").await;
    let yaml = format!(
        r#"# yaml-language-server: $schema=https://www.membrane-api.io/v7.7.0.json
api:
  port: {front}
  ip: 127.0.0.1
  flow:
    - request:
        - validator:
            schema: year.xsd
    - response:
        - validator:
            schema: amount.xsd
  target:
    host: localhost
    port: {back}

---

api:
  port: {back}
  ip: 127.0.0.1
  flow:
    - template:
        contentType: application/xml
        src: |
          <amount>100</amount>
    - return: {{}}

---

api:
  port: {other}
  ip: 127.0.0.1
  flow:
    - request:
        - validator:
            schema: year.xsd
    - response:
        - validator:
            schema: amount.xsd
            failureHandler: log
  target:
    url: http://{}
"#,
        backend.addr
    );
    let gw = start_with(&[("year.xsd", YEAR_XSD), ("amount.xsd", AMOUNT_XSD)], &yaml);
    let addr = gw.addr_of(front);
    let r = post(addr, "application/xml", "<year>2025</year>").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text().trim(), "<amount>100</amount>");
    let r = post(addr, "application/xml", "<year>soon</year>").await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["errors"][0]["line"], 1);
    // A request against the response's schema is not valid either.
    let r = post(addr, "application/xml", "<amount>1</amount>").await;
    assert_eq!(r.status, 400);

    let addr = gw.addr_of(other);
    let r = post(addr, "application/xml", "<year>2025</year>").await;
    assert_eq!(
        (r.status.as_u16(), r.text().as_str()),
        (200, "<amount>7</amount>")
    );
    backend.set("<amount>\n-3</amount>");
    let r = post(addr, "application/xml", "<year>2025</year>").await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(r.header("x-validation-error-source"), Some("RESPONSE"));
    let p = r.json();
    assert_eq!(p["type"], "urn:turnpike:problem:response-validation");
    assert!(
        p["errors"][0]["message"].as_str().unwrap().contains("-3"),
        "{p}"
    );
    assert!(!r.text().contains("amount.xsd"), "no file names: {p}");
    // An empty response passes unvalidated.
    backend.set("");
    let r = post(addr, "application/xml", "<year>2025</year>").await;
    assert_eq!(r.status, 200);
}

const SCHEMA2000: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["name", "count"],
  "properties": {
    "name": {"type": "string", "minLength": 1},
    "count": {"type": "integer", "minimum": 1}
  },
  "additionalProperties": false
}"#;

/// Membrane's `examples/validation/json-schema/schemas/`.
const SCHEMA2001: &str = r##"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "$id": "urn:app:schema2001",
  "type": "object",
  "required": [
    "params",
    "meta"
  ],
  "properties": {
    "params": {
      "type": "array",
      "minItems": 2,
      "items": {
        "$ref": "urn:app:base_def#/$defs/BaseParameter"
      }
    },
    "meta": {
      "$ref": "urn:app:meta_def#/$defs/Meta"
    }
  },
  "additionalProperties": false
}"##;
const BASE: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "$id": "urn:app:base_def",
  "$defs": {
    "BaseParameter": {
      "type": "object",
      "additionalProperties": true
    }
  }
}"#;
const META: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "$id": "urn:app:meta_def",
  "$defs": {
    "Meta": {
      "type": "object",
      "required": [
        "source"
      ],
      "properties": {
        "source": {
          "type": "string",
          "minLength": 1
        },
        "requestId": {
          "type": "string"
        }
      },
      "additionalProperties": false
    }
  }
}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_schema_example_with_schema_mappings() {
    // `examples/validation/json-schema/apis.yaml`; its Groovy backend becomes `static`.
    let (p2000, p2001, p2002) = (free_port(), free_port(), free_port());
    let yaml = format!(
        r#"# yaml-language-server: $schema=https://www.membrane-api.io/v7.2.2.json
# Simple JSON Schema validation example
api:
  port: {p2000}
  ip: 127.0.0.1
  flow:
    - request:
        - validator:
            jsonSchema: schemas/schema2000.json
  target:
    host: localhost
    port: {p2002}

---
# JSON Schema with schemaMappings for resolving $ref URNs
api:
  port: {p2001}
  ip: 127.0.0.1
  flow:
    - request:
        - validator:
            jsonSchema: schemas/schema2001.json
            schemaMappings:
              schemas:
                - id: urn:app:base_def
                  location: schemas/base.json
                - id: urn:app:meta_def
                  location: schemas/meta.json
  target:
    host: localhost
    port: {p2002}

---
# Backend
api:
  port: {p2002}
  ip: 127.0.0.1
  flow:
    - static:
        src: <response>good request</response>
    - return:
        status: 200
"#
    );
    let gw = start_with(
        &[
            ("schemas/schema2000.json", SCHEMA2000),
            ("schemas/schema2001.json", SCHEMA2001),
            ("schemas/base.json", BASE),
            ("schemas/meta.json", META),
        ],
        &yaml,
    );
    let addr = gw.addr_of(p2000);
    // curl -d @good2000.json: no Content-Type check.
    let r = post(
        addr,
        "application/x-www-form-urlencoded",
        r#"{"name": "Ada", "count": 2}"#,
    )
    .await;
    assert_eq!(
        (r.status.as_u16(), r.text().as_str()),
        (200, "<response>good request</response>")
    );
    let r = post(
        addr,
        "application/json",
        r#"{"name": "", "count": 0, "x": 1}"#,
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    let p = r.json();
    assert_eq!(p["type"], "urn:turnpike:problem:validation");
    let pointers: Vec<&str> = p["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["pointer"].as_str().unwrap())
        .collect();
    assert!(pointers.contains(&"/name"), "{p}");
    assert!(pointers.contains(&"/count"), "{p}");
    assert!(
        pointers.contains(&""),
        "additionalProperties is at the root: {p}"
    );
    let r = post(addr, "application/json", "{\"name\": ").await;
    assert_eq!(r.status, 400);
    assert!(r.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("not JSON"));
    let r = post(addr, "application/json", "").await;
    assert_eq!(r.status, 200, "an empty body is not validated");

    let addr = gw.addr_of(p2001);
    let good = r#"{"params": [{"a": 1}, {"b": 2}], "meta": {"source": "web", "requestId": "r1"}}"#;
    let r = post(addr, "application/json", good).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let bad = r#"{"params": [{"a": 1}], "meta": {"source": "", "extra": true}}"#;
    let r = post(addr, "application/json", bad).await;
    assert_eq!(r.status, 400, "{}", r.text());
    let p = r.json();
    let pointers: Vec<&str> = p["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["pointer"].as_str().unwrap())
        .collect();
    assert!(pointers.contains(&"/params"), "{p}");
    assert!(pointers.contains(&"/meta/source"), "{p}");
    assert!(pointers.contains(&"/meta"), "{p}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_responses_against_another_schema_and_soap_requests_get_problems() {
    let backend = StaticServer::start(r#"{"total": 3}"#).await;
    let gw = start_with(
        &[
            (
                "request.json",
                r#"{"type": "object", "required": ["id"], "properties": {"id": {"type": "integer"}}}"#,
            ),
            (
                "response.yaml",
                "type: object\nrequired: [total]\nproperties:\n  total:\n    type: integer\n",
            ),
        ],
        &format!(
            r#"api:
  port: 0
  ip: 127.0.0.1
  flow:
    - request:
        - validator:
            jsonSchema: request.json
            schemaVersion: 07
    - response:
        - validator:
            jsonSchema: response.yaml
  target:
    url: http://{}
"#,
            backend.addr
        ),
    );
    let addr = gw.addr();
    let r = post(addr, "application/json", r#"{"id": 1}"#).await;
    assert_eq!(
        (r.status.as_u16(), r.text().as_str()),
        (200, r#"{"total": 3}"#)
    );
    backend.set(r#"{"total": "three"}"#);
    let r = post(addr, "application/json", r#"{"id": 1}"#).await;
    assert_eq!(r.status, 502, "{}", r.text());
    let p = r.json();
    assert_eq!(p["type"], "urn:turnpike:problem:response-validation");
    assert_eq!(p["errors"][0]["pointer"], "/total", "{p}");
    backend.set("not json");
    let r = post(addr, "application/json", r#"{"id": 1}"#).await;
    assert_eq!(r.status, 502);
    let hits = backend.hits.load(std::sync::atomic::Ordering::SeqCst);
    let r = post(addr, "application/json", r#"{"id": "1"}"#).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        backend.hits.load(std::sync::atomic::Ordering::SeqCst),
        hits,
        "an invalid request never reaches the backend"
    );
    // A `validator` with a JSON (or XML) Schema does not make the API a SOAP one: a SOAP-looking
    // request gets a problem, not a fault.
    let r = send(
        addr,
        req("POST", "/")
            .header("content-type", "text/xml; charset=utf-8")
            .header("soapaction", "\"urn:x\"")
            .body(Full::new(Bytes::from_static(
                b"<s:Envelope xmlns:s=\"http://schemas.xmlsoap.org/soap/envelope/\"><s:Body/></s:Envelope>",
            )))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
}

#[test]
fn missing_schemas_and_mixed_modes_are_load_errors() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("year.xsd"), YEAR_XSD).unwrap();
    std::fs::write(dir.path().join("broken.xsd"), "<xs:schema").unwrap();
    std::fs::write(dir.path().join("s.json"), r#"{"type": "object"}"#).unwrap();
    let api = |validator: &str| {
        format!("api:\n  port: 0\n  flow:\n    - validator:\n{validator}    - return: {{}}\n")
    };
    let e = load_error(dir.path(), &api("        schema: nope.xsd\n"));
    assert!(e.contains("schema") && e.contains("nope.xsd"), "{e}");
    let e = load_error(dir.path(), &api("        schema: broken.xsd\n"));
    assert!(e.contains("broken.xsd"), "{e}");
    let e = load_error(dir.path(), &api("        jsonSchema: nope.json\n"));
    assert!(e.contains("jsonSchema") && e.contains("nope.json"), "{e}");
    let e = load_error(
        dir.path(),
        &api("        schema: year.xsd\n        jsonSchema: s.json\n"),
    );
    assert!(e.contains("exactly one"), "{e}");
    let e = load_error(
        dir.path(),
        &api("        schema: year.xsd\n        skipFaults: true\n"),
    );
    assert!(e.contains("skipFaults") && e.contains("wsdl"), "{e}");
    let e = load_error(
        dir.path(),
        &api("        jsonSchema: s.json\n        schemaMappings:\n          schemas:\n            - id: urn:a\n              location: missing.json\n"),
    );
    assert!(e.contains("schemaMappings.schemas[0].location"), "{e}");
    let e = load_error(
        dir.path(),
        &api("        jsonSchema: s.json\n        schemaVersion: 2021-01\n"),
    );
    assert!(e.contains("schemaVersion"), "{e}");
    let e = load_error(
        dir.path(),
        &api("        jsonSchema: s.json\n        failureHandler: abort\n"),
    );
    assert!(e.contains("failureHandler"), "{e}");
}
