#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use turnpike_core::properties::set_property;

const BOOKS: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<books>
  <book id="2"><title>XSLT</title><category>xml</category></book>
  <book id="1"><title>Rust</title><category>code</category></book>
</books>"#;

/// The shape of Membrane's `tutorials/xml/add-library.xsl`: parameters from properties.
const ADD_LIBRARY: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
  <xsl:output method="xml" omit-xml-declaration="yes"/>
  <xsl:param name="library"/>
  <xsl:param name="requestId" select="'none'"/>
  <xsl:template match="/books">
    <books library="{$library}" requestId="{$requestId}"><xsl:copy-of select="book/title"/></books>
  </xsl:template>
</xsl:stylesheet>"#;

/// Membrane's `tutorials/xml/to-json.xsl` in small: text output.
const TITLES_JSON: &str = r#"<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
  <xsl:output method="text"/>
  <xsl:template match="/books">{"titles":[<xsl:for-each select="book">"<xsl:value-of select="title"/>"<xsl:if test="position() != last()">,</xsl:if></xsl:for-each>]}</xsl:template>
</xsl:stylesheet>"#;

fn compile_in(dir: &Path, settings: serde_json::Value) -> Result<Transform, CompileError> {
    let settings: TransformSettings = serde_json::from_value(settings).unwrap();
    let ctx = CompileContext {
        base_dir: dir,
        ..CompileContext::standalone()
    };
    Transform::compile(settings, &ctx)
}

/// A folder with the stylesheets of these tests.
fn sheets() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("add-library.xsl"), ADD_LIBRARY).unwrap();
    std::fs::write(dir.path().join("titles.xsl"), TITLES_JSON).unwrap();
    dir
}

fn request(body: &str, headers: &[(&str, &str)]) -> Exchange {
    let mut b = http::Request::builder().method("POST").uri("/");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let (parts, _) = b.body(()).unwrap().into_parts();
    Exchange::new(
        parts,
        Body::full(body.to_owned()),
        "192.0.2.1:5000".parse().unwrap(),
        Default::default(),
    )
}

fn request_text(ex: &Exchange) -> String {
    String::from_utf8(ex.request_bytes().unwrap().to_vec()).unwrap()
}

fn rejected(o: Outcome) -> Problem {
    match o {
        Outcome::Reject(p) => p,
        other => panic!("not rejected: {other:?}"),
    }
}

#[test]
fn transforms_the_request_body_whatever_its_content_type() {
    let dir = sheets();
    let t = compile_in(dir.path(), serde_json::json!({"xslt": "titles.xsl"})).unwrap();
    let mut ex = request(
        BOOKS,
        &[
            ("content-type", "application/x-www-form-urlencoded"),
            ("content-length", "999"),
        ],
    );
    assert!(matches!(t.on_request(&mut ex), Outcome::Continue));
    assert_eq!(request_text(&ex), r#"{"titles":["XSLT","Rust"]}"#);
    // The Content-Type stays (Membrane sets none); the length is the new body's.
    assert_eq!(
        ex.request.headers["content-type"],
        "application/x-www-form-urlencoded"
    );
    assert!(ex.request.headers.get("content-length").is_none());
    assert_eq!(t.files(), [dir.path().join("titles.xsl")]);
}

#[test]
fn transforms_the_response_body() {
    let dir = sheets();
    let t = compile_in(dir.path(), serde_json::json!({"xslt": "./titles.xsl"})).unwrap();
    let mut ex = request("", &[]);
    ex.response = Some(
        http::Response::builder()
            .header("content-type", "text/xml")
            .body(Body::full(BOOKS))
            .unwrap(),
    );
    assert!(matches!(t.on_response(&mut ex), Outcome::Continue));
    assert_eq!(
        ex.response_bytes().unwrap().as_ref(),
        br#"{"titles":["XSLT","Rust"]}"#
    );
    assert_eq!(
        ex.response.as_ref().unwrap().headers()["content-type"],
        "text/xml"
    );
}

#[test]
fn text_properties_are_parameters() {
    let dir = sheets();
    let t = compile_in(dir.path(), serde_json::json!({"xslt": "add-library.xsl"})).unwrap();
    let mut ex = request(BOOKS, &[]);
    set_property(&mut ex, "library", "predic8 & <friends>".into());
    // Only text values are passed, as Membrane passes only its string properties.
    set_property(&mut ex, "requestId", serde_json::json!(42));
    set_property(&mut ex, "unused", "x".into());
    assert!(matches!(t.on_request(&mut ex), Outcome::Continue));
    assert_eq!(
        request_text(&ex),
        r#"<books library="predic8 &amp; &lt;friends&gt;" requestId="none"><title>XSLT</title><title>Rust</title></books>
"#
    );
    set_property(&mut ex, "requestId", "r-1".into());
    ex.request_body = Body::full(BOOKS);
    assert!(matches!(t.on_request(&mut ex), Outcome::Continue));
    assert!(
        request_text(&ex).contains(r#"requestId="r-1""#),
        "{}",
        request_text(&ex)
    );
}

#[test]
fn a_body_that_is_not_xml_is_refused() {
    let dir = sheets();
    let t = compile_in(dir.path(), serde_json::json!({"xslt": "titles.xsl"})).unwrap();
    for body in [r#"{"json": true}"#, "<books>", "<a/><b/>"] {
        let p = rejected(t.on_request(&mut request(body, &[])));
        assert_eq!(
            (p.kind(), p.to_json()["status"].as_u64()),
            ("bad-xml", Some(400)),
            "{body}"
        );
        assert_eq!(p.to_json()["detail"], "the body is not well-formed XML");
    }
    // A DTD is refused before parsing: no entity is ever expanded.
    let p = rejected(t.on_request(&mut request(
        r#"<!DOCTYPE books [<!ENTITY e SYSTEM "file:///etc/passwd">]><books>&e;</books>"#,
        &[],
    )));
    assert_eq!(p.kind(), "bad-xml");
    assert_eq!(p.to_json()["detail"], "the message must not contain a DTD");
    // A compressed body is not read.
    let p = rejected(t.on_request(&mut request(BOOKS, &[("content-encoding", "gzip")])));
    assert_eq!(p.kind(), "bad-xml");
    // On a response: 502.
    let mut ex = request("", &[]);
    ex.response = Some(http::Response::new(Body::full("not xml")));
    let p = rejected(t.on_response(&mut ex));
    assert_eq!(
        (p.kind(), p.to_json()["status"].as_u64()),
        ("bad-xml", Some(502))
    );
    // No body: nothing to do.
    let mut ex = request("", &[]);
    assert!(matches!(t.on_request(&mut ex), Outcome::Continue));
}

#[test]
fn a_failing_transformation_is_a_problem_without_internals() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("strict.xsl"),
        r#"<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
             <xsl:template match="/books"><ok/></xsl:template>
             <xsl:template match="*"><xsl:message terminate="yes">unexpected root <xsl:value-of select="name()"/></xsl:message></xsl:template>
           </xsl:stylesheet>"#,
    )
    .unwrap();
    let t = compile_in(dir.path(), serde_json::json!({"xslt": "strict.xsl"})).unwrap();
    let p = rejected(t.on_request(&mut request("<cars/>", &[])));
    let json = p.to_json();
    assert_eq!(
        (p.kind(), json["status"].as_u64()),
        ("policy-failed", Some(500))
    );
    assert_eq!(json["detail"], "the XSLT transformation failed");
    assert!(!json.to_string().contains("unexpected root"), "{json}");
    let mut ex = request("", &[]);
    ex.response = Some(http::Response::new(Body::full("<cars/>")));
    let p = rejected(t.on_response(&mut ex));
    assert_eq!(
        (p.kind(), p.to_json()["status"].as_u64()),
        ("policy-failed", Some(502))
    );
}

#[test]
fn load_errors_name_the_file_and_the_reason() {
    let dir = sheets();
    std::fs::write(
        dir.path().join("broken.xsl"),
        "<xsl:stylesheet version=\"1.0\" xmlns:xsl=\"http://www.w3.org/1999/XSL/Transform\">\n<xsl:template match=\"/\">\n<xsl:value-of select=\"book[\"/>\n</xsl:template></xsl:stylesheet>",
    )
    .unwrap();
    let e = compile_in(dir.path(), serde_json::json!({"xslt": "broken.xsl"})).unwrap_err();
    assert_eq!(e.key, "xslt");
    let file = dir.path().join("broken.xsl").display().to_string();
    assert!(
        e.message.starts_with(&format!("{file} does not compile: ")),
        "{e}"
    );
    assert!(e.message.contains("line 3"), "{e}");
    assert!(e.message.contains("book["), "{e}");
    std::fs::write(dir.path().join("bad.xml"), "<xsl:stylesheet").unwrap();
    let e = compile_in(dir.path(), serde_json::json!({"xslt": "bad.xml"})).unwrap_err();
    assert!(
        e.message.contains("bad.xml does not compile: line 1"),
        "{e}"
    );
    let e = compile_in(dir.path(), serde_json::json!({"xslt": "missing.xsl"})).unwrap_err();
    assert!(
        e.message.starts_with("cannot read ") && e.message.contains("missing.xsl"),
        "{e}"
    );
    for location in ["http://example.com/a.xsl", "classpath:/a.xsl"] {
        let e = compile_in(dir.path(), serde_json::json!({ "xslt": location })).unwrap_err();
        assert!(e.message.contains(location), "{e}");
    }
    // Unknown settings are refused.
    assert!(serde_json::from_value::<TransformSettings>(
        serde_json::json!({"xslt": "a.xsl", "mode": 2})
    )
    .is_err());
    // A `file:` URL and an absolute path.
    let abs = dir.path().join("titles.xsl");
    for location in [
        format!("file://{}", abs.display()),
        abs.display().to_string(),
    ] {
        compile_in(Path::new("/"), serde_json::json!({ "xslt": location })).unwrap();
    }
}

#[test]
fn without_a_stylesheet_the_body_is_copied() {
    let dir = tempfile::tempdir().unwrap();
    let t = compile_in(dir.path(), serde_json::json!({})).unwrap();
    let mut ex = request("<a x='1'><!-- c --><b>t &amp; u</b></a>", &[]);
    assert!(matches!(t.on_request(&mut ex), Outcome::Continue));
    assert_eq!(
        request_text(&ex),
        "<?xml version=\"1.0\"?>\n<a x=\"1\"><!-- c --><b>t &amp; u</b></a>\n"
    );
    assert!(t.files().is_empty());
}

#[test]
fn document_reads_stay_in_the_stylesheet_folder() {
    let outer = tempfile::tempdir().unwrap();
    let dir = outer.path().join("conf");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("codes.xml"), "<codes><c>DE</c></codes>").unwrap();
    std::fs::write(outer.path().join("secret.xml"), "<s>s3cret</s>").unwrap();
    std::fs::write(
        dir.join("lookup.xsl"),
        r#"<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
             <xsl:output method="text"/>
             <xsl:template match="/a"><xsl:value-of select="document(string(@href))"/></xsl:template>
           </xsl:stylesheet>"#,
    )
    .unwrap();
    let t = compile_in(&dir, serde_json::json!({"xslt": "lookup.xsl"})).unwrap();
    let mut ex = request(r#"<a href="codes.xml"/>"#, &[]);
    assert!(matches!(t.on_request(&mut ex), Outcome::Continue));
    assert_eq!(request_text(&ex), "DE");
    for href in ["../secret.xml", "http://127.0.0.1:9/x.xml"] {
        let p = rejected(t.on_request(&mut request(&format!(r#"<a href="{href}"/>"#), &[])));
        assert_eq!(p.kind(), "policy-failed", "{href}");
        assert!(!p.to_json().to_string().contains("s3cret"));
    }
}

#[test]
fn workers_compile_their_own_copy() {
    let dir = sheets();
    let t = Arc::new(compile_in(dir.path(), serde_json::json!({"xslt": "titles.xsl"})).unwrap());
    let threads: Vec<_> = (0..3)
        .map(|_| {
            let t = t.clone();
            std::thread::spawn(move || {
                for _ in 0..50 {
                    let mut ex = request(BOOKS, &[]);
                    assert!(matches!(t.on_request(&mut ex), Outcome::Continue));
                    assert_eq!(request_text(&ex), r#"{"titles":["XSLT","Rust"]}"#);
                }
                COMPILED.with(|c| c.borrow().len())
            })
        })
        .collect();
    for th in threads {
        assert_eq!(th.join().unwrap(), 1);
    }
    // A dropped policy's copy goes when the thread compiles the next one.
    let first = Transform::compile(
        TransformSettings {
            xslt: Some("titles.xsl".into()),
        },
        &CompileContext {
            base_dir: dir.path(),
            ..CompileContext::standalone()
        },
    )
    .unwrap();
    assert!(matches!(
        first.on_request(&mut request(BOOKS, &[])),
        Outcome::Continue
    ));
    drop(first);
    assert!(matches!(
        t.on_request(&mut request(BOOKS, &[])),
        Outcome::Continue
    ));
    let live = COMPILED.with(|c| {
        c.borrow()
            .values()
            .filter(|c| c.owner.strong_count() > 0)
            .count()
    });
    let all = COMPILED.with(|c| c.borrow().len());
    assert_eq!((live, all), (1, 1));
}
