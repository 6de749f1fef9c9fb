//! Membrane's `transform` (XSLT with libxslt) through real sockets, with configurations in the
//! shapes of Membrane's examples and tutorials (`examples/xml/xslt`, `tutorials/xml/35`, `40`,
//! `41`, `examples/web-services-soap/versioning-soap-xslt`) and stylesheets of our own written
//! beside them: request and response bodies, parameters from exchange properties, the problems
//! answered, and the load errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;

use bytes::Bytes;
use common::*;
use http_body_util::Full;

/// Writes `files` and `yaml` (as `gateway.yaml`) into a new folder and starts the gateway from
/// it, so that stylesheets are found relative to the configuration, as Membrane finds them.
fn start_with(files: &[(&str, &str)], yaml: &str) -> TestGateway {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let file = dir.path().join("gateway.yaml");
    std::fs::write(&file, yaml).unwrap();
    let gateway = turnpike::start(vec![file.clone()]).unwrap_or_else(|e| panic!("{e}"));
    TestGateway {
        gateway: Some(gateway),
        dir,
        file,
    }
}

/// The error of a configuration that does not load.
fn load_error(files: &[(&str, &str)], yaml: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let file = dir.path().join("gateway.yaml");
    std::fs::write(&file, yaml).unwrap();
    match turnpike::start(vec![file]) {
        Ok(_) => panic!("the configuration loaded:\n{yaml}"),
        Err(e) => e.to_string(),
    }
}

async fn post(addr: SocketAddr, content_type: &str, body: &str) -> Reply {
    send(
        addr,
        req("POST", "/")
            .header("content-type", content_type)
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap(),
    )
    .await
}

const BOOKS: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<books>
  <book id="3"><title>Learning XSLT</title><author>Ann</author><category>xml</category></book>
  <book id="1"><title>Rust in Action</title><author>Tim</author><category>code</category></book>
  <book id="2"><title>XPath Basics</title><author>Bea</author><category> xml </category></book>
</books>"#;

/// Books to JSON as text output, in the manner of Membrane's `to-json.xsl`.
const TO_JSON: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
  <xsl:output method="text" encoding="UTF-8"/>
  <xsl:template match="/books">{"books":[<xsl:apply-templates select="book"/>]}</xsl:template>
  <xsl:template match="book">{"id":<xsl:value-of select="@id"/>,"title":"<xsl:value-of select="title"/>"}<xsl:if test="position() != last()">,</xsl:if></xsl:template>
</xsl:stylesheet>"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tutorial_35_xml_to_json_then_beautifier() {
    let gw = start_with(
        &[("to-json.xsl", TO_JSON)],
        r#"gateway:
  accessLog: false
---
api:
  port: 0
  ip: 127.0.0.1
  flow:
    - request:
        - transform:
            # The stylesheet to use for the transformation
            xslt: to-json.xsl
        - setHeader:
            name: Content-Type
            value: application/json
        - beautifier: {}
    - return:
        status: 200
"#,
    );
    // `curl -d @books.xml` sends a form content type: the body is transformed all the same.
    let r = post(gw.addr(), "application/x-www-form-urlencoded", BOOKS).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert!(
        r.text().contains("\n  \"books\": ["),
        "beautified: {}",
        r.text()
    );
    assert_eq!(
        r.json(),
        serde_json::json!({"books": [
            {"id": 3, "title": "Learning XSLT"},
            {"id": 1, "title": "Rust in Action"},
            {"id": 2, "title": "XPath Basics"}
        ]})
    );
}

/// Grouping with a key (Muenchian), as Membrane's `group-by-category.xsl` does.
const GROUP: &str = r#"<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
  <xsl:output method="xml" omit-xml-declaration="yes"/>
  <xsl:strip-space elements="*"/>
  <xsl:key name="by-category" match="book" use="normalize-space(category)"/>
  <xsl:template match="/books">
    <categories>
      <xsl:for-each select="book[generate-id() = generate-id(key('by-category', normalize-space(category))[1])]">
        <xsl:sort select="normalize-space(category)"/>
        <category name="{normalize-space(category)}">
          <xsl:for-each select="key('by-category', normalize-space(category))">
            <xsl:sort select="number(@id)"/>
            <xsl:copy-of select="title"/>
          </xsl:for-each>
        </category>
      </xsl:for-each>
    </categories>
  </xsl:template>
</xsl:stylesheet>"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tutorial_40_groups_with_keys() {
    let gw = start_with(
        &[("group-by-category.xsl", GROUP)],
        "gateway:\n  accessLog: false\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  flow:\n    - request:\n        - transform:\n            xslt: group-by-category.xsl\n    - return:\n        status: 200\n",
    );
    let r = post(gw.addr(), "application/xml", BOOKS).await;
    assert_eq!(r.status, 200, "{}", r.text());
    // The request's Content-Type stays: `return` answers with it.
    assert_eq!(r.header("content-type"), Some("application/xml"));
    assert_eq!(
        r.text(),
        r#"<categories><category name="code"><title>Rust in Action</title></category><category name="xml"><title>XPath Basics</title><title>Learning XSLT</title></category></categories>
"#
    );
    // Every request is transformed by the worker's compiled copy.
    for _ in 0..5 {
        let r = post(gw.addr(), "application/xml", BOOKS).await;
        assert!(r.text().starts_with("<categories>"), "{}", r.text());
    }
}

/// Parameters from exchange properties, as Membrane's `add-library.xsl` reads them.
const ADD_LIBRARY: &str = r#"<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
  <xsl:output method="xml" omit-xml-declaration="yes"/>
  <xsl:param name="library"/>
  <xsl:param name="generated" select="'never'"/>
  <xsl:param name="requestId"/>
  <xsl:param name="client"/>
  <xsl:template match="/books">
    <books library="{$library}" generated="{$generated}" requestId="{$requestId}" client="{$client}">
      <xsl:copy-of select="book[1]/title"/>
    </books>
  </xsl:template>
</xsl:stylesheet>"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tutorial_41_properties_are_parameters() {
    let gw = start_with(
        &[("add-library.xsl", ADD_LIBRARY)],
        r#"gateway:
  accessLog: false
---
api:
  port: 0
  ip: 127.0.0.1
  flow:
    - request:
        - setProperty:
            name: library         # a static value
            value: predic8 & "friends"
        - setProperty:
            name: requestId
            value: ${header.X-Client-Id}
        - setProperty:
            name: client
            value: ${client.ip}
        - transform:
            xslt: add-library.xsl
    - return:
        status: 200
"#,
    );
    let r = send(
        gw.addr(),
        req("POST", "/")
            .header("content-type", "text/xml")
            .header("x-client-id", "c-42")
            .body(Full::new(Bytes::from(BOOKS)))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.text(),
        "<books library=\"predic8 &amp; &quot;friends&quot;\" generated=\"never\" requestId=\"c-42\" client=\"127.0.0.1\"><title>Learning XSLT</title></books>\n"
    );
}

/// Reformats a backend's answer, in the manner of `examples/xml/xslt/reformat.xsl`.
const REFORMAT: &str = r#"<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
  <xsl:output method="xml" indent="yes" encoding="UTF-8"/>
  <xsl:template match="/products"><catalog size="{count(product)}"><xsl:apply-templates/></catalog></xsl:template>
  <xsl:template match="product"><item name="{name}" price="{price}"/></xsl:template>
  <xsl:template match="text()"/>
</xsl:stylesheet>"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_reformats_the_backends_response() {
    let backend = StaticServer::start(
        "<products><product><name>Tea</name><price>3.50</price></product><product><name>Cake</name><price>2</price></product></products>",
    )
    .await;
    let gw = start_with(
        &[("reformat.xsl", REFORMAT)],
        &format!(
            "gateway:\n  accessLog: false\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  flow:\n    - response:\n        - transform:\n            xslt: ./reformat.xsl\n  target:\n    host: 127.0.0.1\n    port: {}\n",
            backend.addr.port()
        ),
    );
    let r = get(gw.addr(), "/shop/products").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.text(),
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<catalog size=\"2\">\n  <item name=\"Tea\" price=\"3.50\"/>\n  <item name=\"Cake\" price=\"2\"/>\n</catalog>\n"
    );
    assert_eq!(
        r.header("content-length"),
        Some(r.body.len().to_string().as_str())
    );
    // A backend answer that is not XML: 502, without libxslt's words.
    backend.set("{\"products\": []}");
    let r = get(gw.addr(), "/shop/products").await;
    assert_eq!(r.status, 502);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    let p = r.json();
    assert_eq!(p["type"], "urn:turnpike:problem:bad-xml");
    assert_eq!(p["detail"], "the body is not well-formed XML");
    assert!(!r.text().contains("line 1"), "{}", r.text());
    // An empty answer passes.
    backend.set("");
    assert_eq!(get(gw.addr(), "/shop/products").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_the_top_level_flow_both_directions_are_transformed() {
    let backend = Backend::start().await;
    let wrap = r#"<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
  <xsl:output omit-xml-declaration="yes"/>
  <xsl:template match="/"><wrapped><xsl:copy-of select="/*"/></wrapped></xsl:template>
</xsl:stylesheet>"#;
    let gw = start_with(
        &[("wrap.xsl", wrap)],
        &format!(
            "gateway:\n  accessLog: false\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  flow:\n    - transform:\n        xslt: wrap.xsl\n  target:\n    url: http://127.0.0.1:{}\n",
            backend.port()
        ),
    );
    let r = post(gw.addr(), "text/xml", "<a>1</a>").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = backend.last();
    assert_eq!(seen.body, "<wrapped><a>1</a></wrapped>\n");
    assert_eq!(
        seen.headers["content-length"],
        seen.body.len().to_string().as_str()
    );
    assert_eq!(seen.headers["content-type"], "text/xml");
    assert_eq!(r.text(), "<wrapped><wrapped><a>1</a></wrapped></wrapped>\n");
}

const NEW_NS: &str = "https://predic8.de/cities";
const OLD_NS: &str = "https://predic8.de/old";

/// Moves every element of the old namespace to the new one.
const TO_NEW: &str = r#"<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform"
    xmlns:old="https://predic8.de/old">
  <xsl:output omit-xml-declaration="yes"/>
  <xsl:template match="old:*">
    <xsl:element name="{local-name()}" namespace="https://predic8.de/cities"><xsl:apply-templates select="@*|node()"/></xsl:element>
  </xsl:template>
  <xsl:template match="@*|node()"><xsl:copy><xsl:apply-templates select="@*|node()"/></xsl:copy></xsl:template>
</xsl:stylesheet>"#;

/// The response's `getCityResponse` back in the old namespace; written `version="2.0"` as
/// Membrane's example is (XSLT 1.0's forwards-compatible mode runs it).
const TO_OLD: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<xsl:stylesheet version="2.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform"
    xmlns:new="https://predic8.de/cities">
  <xsl:output omit-xml-declaration="yes"/>
  <xsl:template match="new:getCityResponse">
    <xsl:element name="getCityResponse" namespace="https://predic8.de/old"><xsl:apply-templates select="*|@*"/></xsl:element>
  </xsl:template>
  <xsl:template match="*|@*|text()"><xsl:copy><xsl:apply-templates select="*|@*|text()"/></xsl:copy></xsl:template>
</xsl:stylesheet>"#;

fn get_city(ns: &str, name: &str) -> String {
    format!(
        r#"<s11:Envelope xmlns:s11="http://schemas.xmlsoap.org/soap/envelope/"><s11:Body><cs:getCity xmlns:cs="{ns}"><name>{name}</name></cs:getCity></s11:Body></s11:Envelope>"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versioning_soap_with_xslt() {
    // Membrane's `examples/web-services-soap/versioning-soap-xslt/apis.yaml`, as written.
    let gw = start_with(
        &[
            ("convert-request-to-new-version.xslt", TO_NEW),
            ("convert-response-to-old-version.xslt", TO_OLD),
        ],
        r#"gateway:
  accessLog: false
---
# Endpoint can accept request from old and new clients
api:
  port: 0
  ip: 127.0.0.1
  flow:
    - request:
        # If it is a request with the old namespace convert it to the new
        - if:
            test: //*[namespace-uri() = 'https://predic8.de/old']
            language: xpath
            flow:
              - transform:
                  xslt: convert-request-to-new-version.xslt
              # Mark as converted
              - setProperty:
                  name: converted
                  value: true
    - response:
        #  When it was converted transform response body back to old
        - if:
            test: properties['converted'] == 'true'
            flow:
              - transform:
                  xslt: convert-response-to-old-version.xslt
    # SOAP service implementation for new version
    - sampleSoapService: {}
"#,
    );
    // An old client gets its answer in the old namespace.
    let r = post(gw.addr(), "text/xml", &get_city(OLD_NS, "Bonn")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let t = r.text();
    assert!(
        t.contains(&format!(r#"<getCityResponse xmlns="{OLD_NS}">"#)),
        "{t}"
    );
    // `country` has no namespace, below an element with a default one.
    assert!(t.contains(r#"<country xmlns="">Germany</country>"#), "{t}");
    // The envelope keeps its declarations (`xsl:copy` copies them); no element is left in the
    // new namespace.
    assert!(!t.contains("<cs:"), "{t}");
    // A new client is answered in the new namespace, untouched.
    let t = post(gw.addr(), "text/xml", &get_city(NEW_NS, "London"))
        .await
        .text();
    assert!(t.contains(&format!("xmlns:cs=\"{NEW_NS}\"")), "{t}");
    assert!(t.contains("<country>England</country>"), "{t}");
    assert!(!t.contains(OLD_NS), "{t}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_problems_without_library_internals() {
    let outer = tempfile::tempdir().unwrap();
    std::fs::write(outer.path().join("secret.xml"), "<s>s3cret</s>").unwrap();
    let strict = format!(
        r#"<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
  <xsl:output method="text"/>
  <xsl:template match="order">ok <xsl:value-of select="@id"/></xsl:template>
  <xsl:template match="lookup"><xsl:value-of select="document('{}')"/></xsl:template>
  <xsl:template match="*"><xsl:message terminate="yes">unexpected root element</xsl:message></xsl:template>
</xsl:stylesheet>"#,
        outer.path().join("secret.xml").display()
    );
    let gw = start_with(
        &[("strict.xsl", &strict)],
        "gateway:\n  accessLog: false\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  flow:\n    - request:\n        - transform:\n            xslt: strict.xsl\n    - return: {}\n",
    );
    let addr = gw.addr();
    let r = post(addr, "text/xml", r#"<order id="7"/>"#).await;
    assert_eq!((r.status.as_u16(), r.text().as_str()), (200, "ok 7"));

    let problem = |r: &Reply| {
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
        let p = r.json();
        (
            r.status.as_u16(),
            p["type"]
                .as_str()
                .unwrap()
                .trim_start_matches("urn:turnpike:problem:")
                .to_owned(),
            p["detail"].as_str().unwrap().to_owned(),
        )
    };
    // Not XML.
    let r = post(addr, "text/xml", "<order id='7'>").await;
    assert_eq!(
        problem(&r),
        (
            400,
            "bad-xml".into(),
            "the body is not well-formed XML".into()
        )
    );
    // A DTD: refused before parsing, no entity expanded.
    let r = post(
        addr,
        "text/xml",
        r#"<!DOCTYPE order [<!ENTITY e SYSTEM "/etc/passwd">]><order id="&e;"/>"#,
    )
    .await;
    assert_eq!(
        problem(&r),
        (
            400,
            "bad-xml".into(),
            "the message must not contain a DTD".into()
        )
    );
    // The stylesheet stops: 500, the message only in the log.
    let r = post(addr, "text/xml", "<cars/>").await;
    assert_eq!(
        problem(&r),
        (
            500,
            "policy-failed".into(),
            "the XSLT transformation failed".into()
        )
    );
    assert!(!r.text().contains("unexpected"), "{}", r.text());
    // `document()` outside the stylesheet's folder.
    let r = post(addr, "text/xml", "<lookup/>").await;
    assert_eq!(problem(&r).0, 500);
    assert!(
        !r.text().contains("s3cret") && !r.text().contains("refused"),
        "{}",
        r.text()
    );
    // A request without a body passes.
    let r = get(addr, "/").await;
    assert_eq!(r.status, 200);
}

#[test]
fn load_errors_name_the_stylesheet() {
    let api = |xslt: &str| {
        format!("api:\n  port: 0\n  flow:\n    - transform:\n        xslt: {xslt}\n    - return: {{}}\n")
    };
    // Not a valid stylesheet: the file, the line, libxslt's reason.
    let broken = "<xsl:stylesheet version=\"1.0\" xmlns:xsl=\"http://www.w3.org/1999/XSL/Transform\">\n  <xsl:template match=\"/\">\n    <xsl:value-of select=\"books[\"/>\n  </xsl:template>\n</xsl:stylesheet>";
    let e = load_error(&[("broken.xsl", broken)], &api("broken.xsl"));
    assert!(e.contains("gateway.yaml:5:"), "{e}");
    assert!(e.contains("broken.xsl does not compile"), "{e}");
    assert!(e.contains("line 3"), "{e}");
    assert!(e.contains("books["), "{e}");
    // Not well-formed.
    let e = load_error(&[("cut.xsl", "<xsl:stylesheet")], &api("cut.xsl"));
    assert!(e.contains("cut.xsl does not compile: line 1"), "{e}");
    // Missing.
    let e = load_error(&[], &api("missing.xsl"));
    assert!(
        e.contains("cannot read") && e.contains("missing.xsl"),
        "{e}"
    );
    // Not a file.
    let e = load_error(&[], &api("https://example.com/a.xsl"));
    assert!(e.contains("stylesheets are read from files"), "{e}");
    // A setting Membrane does not have.
    let e = load_error(
        &[("to-json.xsl", TO_JSON)],
        "api:\n  port: 0\n  flow:\n    - transform:\n        xslt: to-json.xsl\n        saxon: true\n    - return: {}\n",
    );
    assert!(e.contains("saxon"), "{e}");
}
