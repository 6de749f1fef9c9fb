use super::*;
use crate::testutil::{exchange, plain};
use proptest::prelude::*;
use quick_xml::events::Event;
use quick_xml::Reader;
use serde_json::Value;

fn compile(name: &str, settings: Value) -> Result<Box<dyn Policy>, Vec<CompileError>> {
    let kind = crate::registry::find(name).unwrap();
    (kind.compile)(settings, &plain())
}

fn load_error(name: &str, settings: Value) -> String {
    match compile(name, settings) {
        Ok(_) => panic!("{name} compiled"),
        Err(e) => format!("{e:?}"),
    }
}

fn with_response(ex: &mut Exchange, content_type: &str, body: &str) {
    ex.response = Some(
        http::Response::builder()
            .header("content-type", content_type)
            .header("content-length", body.len())
            .body(Body::full(body.to_owned()))
            .unwrap(),
    );
}

fn response_body(ex: &Exchange) -> String {
    String::from_utf8(ex.response_bytes().unwrap().to_vec()).unwrap()
}

fn rejected(o: Outcome) -> Problem {
    match o {
        Outcome::Reject(p) => p,
        other => panic!("not rejected: {other:?}"),
    }
}

#[test]
fn json2xml_converts_the_request_and_the_response() {
    let p = compile("json2Xml", serde_json::json!({"root": "zoo"})).unwrap();
    assert_eq!(p.body_need(), BodyNeed::Buffer);
    assert_eq!(p.response_body_need(), BodyNeed::Buffer);
    let mut ex = exchange(
        "POST",
        "/",
        &[
            ("content-type", "application/json; charset=utf-8"),
            ("content-length", "19"),
        ],
        r#"{"b":1,"a":[true]}"#,
    );
    assert!(matches!(p.on_request(&mut ex), Outcome::Continue));
    assert_eq!(
        ex.request_bytes().unwrap(),
        r#"<?xml version="1.0" encoding="UTF-8"?><zoo><b>1</b><a>true</a></zoo>"#
    );
    assert_eq!(ex.request.headers["content-type"], "application/xml");
    assert!(!ex.request.headers.contains_key("content-length"));

    with_response(&mut ex, "application/problem+json", r#"{"title":"x"}"#);
    assert!(matches!(p.on_response(&mut ex), Outcome::Continue));
    assert_eq!(
        response_body(&ex),
        r#"<?xml version="1.0" encoding="UTF-8"?><zoo><title>x</title></zoo>"#
    );
    let res = ex.response.as_ref().unwrap();
    assert_eq!(res.headers()["content-type"], "application/xml");
    assert!(!res.headers().contains_key("content-length"));
}

#[test]
fn json2xml_passes_other_messages_and_refuses_what_it_cannot_convert() {
    let p = compile("json2Xml", serde_json::json!({})).unwrap();
    for (ct, body) in [("text/plain", "{\"a\":1}"), ("application/xml", "<a/>")] {
        let mut ex = exchange("POST", "/", &[("content-type", ct)], body);
        assert!(matches!(p.on_request(&mut ex), Outcome::Continue));
        assert_eq!(ex.request_bytes().unwrap(), body);
        assert_eq!(ex.request.headers["content-type"], ct);
    }
    let mut ex = exchange("GET", "/", &[("content-type", "application/json")], "");
    assert!(matches!(p.on_request(&mut ex), Outcome::Continue));
    // A compressed body is not read.
    let mut ex = exchange(
        "POST",
        "/",
        &[
            ("content-type", "application/json"),
            ("content-encoding", "gzip"),
        ],
        "\u{1f}\u{8b}",
    );
    assert!(matches!(p.on_request(&mut ex), Outcome::Continue));
    assert_eq!(ex.request.headers["content-type"], "application/json");
    let mut ex = exchange(
        "POST",
        "/",
        &[
            ("content-type", "application/json"),
            ("content-encoding", "identity"),
        ],
        "[]",
    );
    assert!(matches!(p.on_request(&mut ex), Outcome::Continue));
    assert_eq!(ex.request.headers["content-type"], "application/xml");

    let mut ex = exchange(
        "POST",
        "/",
        &[("content-type", "application/json")],
        "{ invalid",
    );
    let problem = rejected(p.on_request(&mut ex));
    assert_eq!(problem.kind(), "bad-json");
    assert_eq!(problem.status, 400);
    assert_eq!(
        problem.detail.as_deref(),
        Some("the body is not valid JSON (line 1, column 3)")
    );
    let mut ex = exchange("POST", "/", &[("content-type", "application/json")], "1");
    let problem = rejected(p.on_request(&mut ex));
    assert_eq!(
        problem.detail.as_deref(),
        Some("a JSON number cannot be converted to XML: the body must be an object or an array")
    );
    with_response(&mut ex, "application/json", "[1,");
    let problem = rejected(p.on_response(&mut ex));
    assert_eq!((problem.kind(), problem.status.as_u16()), ("bad-json", 502));
}

#[test]
fn xml2json_converts_the_request_and_the_response() {
    let p = compile(
        "xml2Json",
        serde_json::json!({"keepString": false, "convertNilAttributeToNull": "yes", "forceList": ["item"]}),
    )
    .unwrap();
    let mut ex = exchange(
        "POST",
        "/",
        &[("content-type", "text/xml; charset=ISO-8859-1")],
        "",
    );
    ex.request_body = Body::full(Bytes::from_static(
        b"<order id=\"7\"><item>K\xE4se</item></order>",
    ));
    assert!(matches!(p.on_request(&mut ex), Outcome::Continue));
    assert_eq!(
        ex.request_bytes().unwrap(),
        r#"{"order":{"id":7,"item":["Käse"]}}"#
    );
    assert_eq!(
        ex.request.headers["content-type"],
        "application/json; charset=utf-8"
    );
    with_response(&mut ex, "application/soap+xml", "<r><n>1.0</n></r>");
    assert!(matches!(p.on_response(&mut ex), Outcome::Continue));
    assert_eq!(response_body(&ex), r#"{"r":{"n":1.0}}"#);

    let kept = compile("xml2Json", serde_json::json!({"keepString": true})).unwrap();
    let mut ex = exchange(
        "POST",
        "/",
        &[("content-type", "application/xml")],
        "<r>1</r>",
    );
    assert!(matches!(kept.on_request(&mut ex), Outcome::Continue));
    assert_eq!(ex.request_bytes().unwrap(), r#"{"r":"1"}"#);
}

#[test]
fn xml2json_passes_other_messages_and_refuses_what_it_cannot_convert() {
    let p = compile("xml2Json", serde_json::json!({})).unwrap();
    let mut ex = exchange("POST", "/", &[("content-type", "application/json")], "<a/>");
    assert!(matches!(p.on_request(&mut ex), Outcome::Continue));
    assert_eq!(ex.request_bytes().unwrap(), "<a/>");

    let mut ex = exchange("POST", "/", &[("content-type", "text/xml")], "<unclosed>");
    let problem = rejected(p.on_request(&mut ex));
    assert_eq!((problem.kind(), problem.status.as_u16()), ("bad-xml", 400));
    assert_eq!(
        problem.detail.as_deref(),
        Some("the body is not well-formed XML")
    );
    let mut ex = exchange(
        "POST",
        "/",
        &[("content-type", "text/xml; charset=koi8-r")],
        "<a/>",
    );
    let problem = rejected(p.on_request(&mut ex));
    assert!(problem
        .detail
        .unwrap()
        .contains("encoding is not supported"));
    with_response(&mut ex, "application/xml", "<a>&ext;</a>");
    let problem = rejected(p.on_response(&mut ex));
    assert_eq!((problem.kind(), problem.status.as_u16()), ("bad-xml", 502));
}

#[test]
fn settings_are_checked_at_load() {
    let e = load_error("json2Xml", serde_json::json!({"rootElement": "x"}));
    assert!(e.contains("rootElement"), "{e}");
    let e = load_error("json2Xml", serde_json::json!({"root": "1 x"}));
    assert!(e.contains("not an XML element name"), "{e}");
    let e = load_error("xml2Json", serde_json::json!({"forceList": ["a b"]}));
    assert!(e.contains("forceList[0]"), "{e}");
    let e = load_error("xml2Json", serde_json::json!({"keepStrings": true}));
    assert!(e.contains("keepStrings"), "{e}");
    assert!(compile("xml2Json", serde_json::json!({"forceList": ["ns:item"]})).is_ok());
}

#[test]
fn content_types_and_charsets() {
    let mut h = HeaderMap::new();
    assert!(!is_json(&h) && !is_xml(&h));
    for (ct, json, xml) in [
        ("application/json", true, false),
        ("Application/JSON; charset=utf-8", true, false),
        ("application/problem+json", true, false),
        ("text/xml", false, true),
        ("application/soap+xml; action=x", false, true),
        ("text/plain", false, false),
    ] {
        h.insert(header::CONTENT_TYPE, ct.parse().unwrap());
        assert_eq!((is_json(&h), is_xml(&h)), (json, xml), "{ct}");
    }
    h.insert(
        header::CONTENT_TYPE,
        "text/xml; a=b; Charset=\"ISO-8859-1\"".parse().unwrap(),
    );
    assert_eq!(charset(&h).as_deref(), Some("ISO-8859-1"));
}

/// Checks with quick-xml that `xml` is one well-formed document whose names are all XML
/// names (quick-xml itself does not check name characters) and whose characters are all XML
/// characters.
fn well_formed(xml: &str) -> Result<(), String> {
    if let Some(c) = xml.chars().find(|c| !text::is_xml_char(*c)) {
        return Err(format!("character {c:?}"));
    }
    let mut reader = Reader::from_str(xml);
    reader.config_mut().check_end_names = true;
    let (mut depth, mut roots) = (0usize, 0usize);
    loop {
        match reader.read_event().map_err(|e| e.to_string())? {
            Event::Start(s) | Event::Empty(s) if depth == 0 && roots > 0 => {
                return Err(format!("second root {s:?}"));
            }
            Event::Start(s) => {
                let name = std::str::from_utf8(s.name().as_ref()).unwrap().to_owned();
                if !text::is_xml_name(&name) {
                    return Err(format!("name {name:?}"));
                }
                for a in s.attributes() {
                    a.map_err(|e| e.to_string())?;
                }
                roots += usize::from(depth == 0);
                depth += 1;
            }
            Event::Empty(s) => {
                let name = std::str::from_utf8(s.name().as_ref()).unwrap().to_owned();
                if !text::is_xml_name(&name) {
                    return Err(format!("name {name:?}"));
                }
                for a in s.attributes() {
                    a.map_err(|e| e.to_string())?;
                }
                roots += usize::from(depth == 0);
            }
            Event::End(_) => depth -= 1,
            Event::Text(t) if depth == 0 => return Err(format!("text outside: {t:?}")),
            Event::GeneralRef(r) => {
                let known = r.resolve_char_ref().map_err(|e| e.to_string())?.is_some()
                    || quick_xml::escape::resolve_predefined_entity(&r.decode().unwrap()).is_some();
                if !known {
                    return Err(format!("reference {r:?}"));
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if depth != 0 || roots != 1 {
        return Err(format!("depth {depth}, roots {roots}"));
    }
    Ok(())
}

#[test]
fn the_checker_finds_what_is_not_well_formed() {
    assert!(well_formed("<?xml version=\"1.0\"?><a>x<b/></a>").is_ok());
    for bad in [
        "<a>",
        "<a/><b/>",
        "<a b/>",
        "<1/>",
        "<a>&x;</a>",
        "<a>\u{1}</a>",
        "x",
    ] {
        assert!(well_formed(bad).is_err(), "{bad}");
    }
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,12}".prop_map(Value::String),
        Just(Value::String(String::new())),
    ];
    let key = prop_oneof![
        Just("content".to_owned()),
        Just("a".to_owned()),
        "[a-z:]{0,4}",
        ".{0,8}",
    ];
    leaf.prop_recursive(5, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any JSON document converts without panicking: objects and arrays to one well-formed XML
    /// document (which `xml2Json` reads back), other values to a refusal.
    #[test]
    fn any_json_converts_to_well_formed_xml(
        doc in arb_json(),
        root in prop_oneof![Just(None), Just(Some("r")), Just(Some("ns:r"))],
    ) {
        let text = serde_json::to_string(&doc).unwrap();
        match to_xml::convert(text.as_bytes(), root) {
            Ok(xml) => {
                prop_assert!(doc.is_object() || doc.is_array());
                prop_assert!(well_formed(&xml).is_ok(), "{:?}: {xml}", well_formed(&xml));
                let opts = Options { nil_to_null: true, ..Options::default() };
                let back = to_json::convert(xml.as_bytes(), Some("utf-8"), &opts);
                prop_assert!(back.is_ok(), "{back:?}: {xml}");
                let back = back.unwrap();
                prop_assert!(serde_json::from_str::<Value>(&back).is_ok(), "{back}");
            }
            Err(e) => {
                prop_assert!(!doc.is_object() && !doc.is_array(), "{e:?}: {text}");
            }
        }
    }

    /// Any bytes given to `xml2Json` give JSON or a refusal, never a panic.
    #[test]
    fn any_bytes_convert_to_json_or_are_refused(
        body in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..64),
            "(<[a-c]( [a-c]='[^'<]{0,3}')?>|</[a-c]>|<[a-c]/>|[ -~]{0,4}|&[a-z#0-9]{0,4};|<!\\[CDATA\\[x\\]\\]>)*"
                .prop_map(String::into_bytes),
        ],
        charset in prop_oneof![Just(None), Just(Some("utf-16")), Just(Some("windows-1252"))],
    ) {
        let opts = Options { nil_to_null: true, force_list: ["a".to_owned()].into(), ..Options::default() };
        if let Ok(json) = to_json::convert(&body, charset, &opts) {
            prop_assert!(serde_json::from_str::<Value>(&json).is_ok(), "{json}");
        }
    }
}
