use super::*;
use crate::fetch::Location;
use crate::wsdl::tests::shared;
use turnpike_core::Body;
use turnpike_core::Problem;

const YEAR_XSD: &str = r#"<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema">
  <xs:element name="year" type="xs:gYear"/>
</xs:schema>"#;

const AGE_JSON: &str = r#"{"type": "object", "properties": {"age": {"type": "integer"}}}"#;

fn files() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("year.xsd"), YEAR_XSD).unwrap();
    std::fs::write(dir.path().join("age.json"), AGE_JSON).unwrap();
    dir
}

fn compile(dir: &std::path::Path, settings: serde_json::Value) -> Result<Validator, CompileError> {
    let settings: ValidatorSettings = serde_json::from_value(settings).unwrap();
    let ctx = CompileContext {
        base_dir: dir,
        ..CompileContext::standalone()
    };
    Validator::compile(settings, &ctx)
}

fn exchange(body: &str) -> Exchange {
    let (parts, _) = http::Request::builder()
        .method("POST")
        .uri("/")
        .body(())
        .unwrap()
        .into_parts();
    Exchange::new(
        parts,
        Body::full(body.to_owned()),
        "192.0.2.1:5000".parse().unwrap(),
        Default::default(),
    )
}

fn with_response(mut ex: Exchange, content_type: &str, body: &str) -> Exchange {
    ex.response = Some(
        http::Response::builder()
            .header(http::header::CONTENT_TYPE, content_type)
            .body(Body::full(body.to_owned()))
            .unwrap(),
    );
    ex
}

fn rejected(o: Outcome) -> Problem {
    match o {
        Outcome::Reject(p) => p,
        other => panic!("not rejected: {other:?}"),
    }
}

#[test]
fn xsd_mode_requests_and_responses() {
    let dir = files();
    let v = compile(dir.path(), serde_json::json!({"schema": "year.xsd"})).unwrap();
    assert!(matches!(v, Validator::Xsd(_)));
    assert!(!v.response_needs_request());
    // Any Content-Type (none here) is validated.
    assert!(matches!(
        v.on_request(&mut exchange("<year>2024</year>")),
        Outcome::Continue
    ));
    let p = rejected(v.on_request(&mut exchange("<year>\nsoon</year>")));
    assert_eq!(p.status, 400);
    assert_eq!(p.ty.kind, "validation");
    let errors = &p.extra.as_ref().unwrap()["errors"];
    assert_eq!(errors[0]["line"], 2, "{errors}");
    assert!(errors[0]["message"].as_str().unwrap().contains("soon"));
    assert!(p
        .headers
        .iter()
        .any(|(k, v)| k == "x-validation-error-source" && v == "REQUEST"));
    let p = rejected(v.on_request(&mut exchange("not xml")));
    assert!(p.extra.unwrap()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("not well-formed"));
    // Empty bodies pass.
    assert!(matches!(v.on_request(&mut exchange("")), Outcome::Continue));
    let mut ex = with_response(exchange(""), "text/plain", "");
    assert!(matches!(v.on_response(&mut ex), Outcome::Continue));
    // Responses: 502 `response-validation`.
    let mut ex = with_response(exchange(""), "application/xml", "<year>x</year>");
    let p = rejected(v.on_response(&mut ex));
    assert_eq!((p.status.as_u16(), p.ty.kind), (502, "response-validation"));
    assert!(p
        .headers
        .iter()
        .any(|(k, v)| k == "x-validation-error-source" && v == "RESPONSE"));
    let mut ex = with_response(exchange(""), "application/xml", "<year>1999</year>");
    assert!(matches!(v.on_response(&mut ex), Outcome::Continue));
    // The gateway's own problems pass.
    let mut ex = with_response(exchange(""), "application/problem+json", "{}");
    assert!(matches!(v.on_response(&mut ex), Outcome::Continue));
    // A compressed body cannot be read: refused rather than let through.
    let mut ex = exchange("\x1f\u{8b}");
    ex.request
        .headers
        .insert(http::header::CONTENT_ENCODING, "gzip".parse().unwrap());
    let p = rejected(v.on_request(&mut ex));
    assert!(p.extra.unwrap()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("compressed"));
}

#[test]
fn json_mode_requests_and_responses() {
    let dir = files();
    let v = compile(
        dir.path(),
        serde_json::json!({"jsonSchema": "age.json", "schemaVersion": "07", "failureHandler": "log"}),
    )
    .unwrap();
    assert!(matches!(v, Validator::Json(_)));
    assert!(matches!(
        v.on_request(&mut exchange(r#"{"age": 3}"#)),
        Outcome::Continue
    ));
    assert!(matches!(v.on_request(&mut exchange("")), Outcome::Continue));
    let p = rejected(v.on_request(&mut exchange(r#"{"age": "old"}"#)));
    assert_eq!((p.status.as_u16(), p.ty.kind), (400, "validation"));
    let errors = &p.extra.as_ref().unwrap()["errors"];
    assert_eq!(errors[0]["pointer"], "/age", "{errors}");
    assert_eq!(errors[0]["keyword"], "type", "{errors}");
    let p = rejected(v.on_request(&mut exchange("{")));
    assert!(p.extra.unwrap()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("not JSON"));
    let mut ex = with_response(exchange(""), "application/json", r#"{"age": 1.5}"#);
    let p = rejected(v.on_response(&mut ex));
    assert_eq!((p.status.as_u16(), p.ty.kind), (502, "response-validation"));
}

#[test]
fn settings_that_mix_modes_are_load_errors() {
    let dir = files();
    let e = compile(
        dir.path(),
        serde_json::json!({"schema": "year.xsd", "jsonSchema": "age.json"}),
    )
    .unwrap_err();
    assert_eq!(e.key, "jsonSchema");
    assert!(e.message.contains("exactly one"), "{}", e.message);
    let e = compile(
        dir.path(),
        serde_json::json!({"wsdl": "x.wsdl", "schema": "year.xsd"}),
    )
    .unwrap_err();
    assert_eq!(e.key, "schema");
    for (settings, key) in [
        (
            serde_json::json!({"schema": "year.xsd", "skipFaults": true}),
            "skipFaults",
        ),
        (
            serde_json::json!({"jsonSchema": "age.json", "skipFaults": true}),
            "skipFaults",
        ),
        (
            serde_json::json!({"schema": "year.xsd", "serviceName": "S"}),
            "serviceName",
        ),
        (
            serde_json::json!({"schema": "year.xsd", "schemaVersion": "07"}),
            "schemaVersion",
        ),
        (
            serde_json::json!({"schema": "year.xsd", "schemaMappings": {"schemas": []}}),
            "schemaMappings",
        ),
        (serde_json::json!({"schema": "missing.xsd"}), "schema"),
        (
            serde_json::json!({"jsonSchema": "missing.json"}),
            "jsonSchema",
        ),
        (serde_json::json!({}), ""),
    ] {
        let e = compile(dir.path(), settings.clone()).unwrap_err();
        assert_eq!(e.key, key, "{settings}: {}", e.message);
    }
    // `skipFaults: false` is fine with any mode.
    compile(
        dir.path(),
        serde_json::json!({"schema": "year.xsd", "skipFaults": false}),
    )
    .unwrap();
    assert!(serde_json::from_value::<ValidatorSettings>(
        serde_json::json!({"schema": "year.xsd", "failureHandler": "abort"})
    )
    .is_err());
}

#[test]
fn only_the_wsdl_mode_checks_soap() {
    assert!(checks_soap(&serde_json::json!({})));
    assert!(checks_soap(&serde_json::json!({"wsdl": "a.wsdl"})));
    assert!(!checks_soap(&serde_json::json!({"schema": "a.xsd"})));
    assert!(!checks_soap(&serde_json::json!({"jsonSchema": "a.json"})));
}

#[test]
fn skip_faults_lets_soap_faults_pass_in_requests_too() {
    let wsdl = Arc::new(Wsdl::load(&shared("cities.wsdl")).unwrap());
    let fault = "<s:Envelope xmlns:s=\"http://schemas.xmlsoap.org/soap/envelope/\"><s:Body><s:Fault><faultcode>s:Server</faultcode><faultstring>x</faultstring></s:Fault></s:Body></s:Envelope>";
    let strict = WsdlValidator::new(Arc::clone(&wsdl), None).unwrap();
    assert!(strict.check(fault.as_bytes(), false).is_err());
    strict.check(fault.as_bytes(), true).unwrap();
    let skipping = WsdlValidator::new(wsdl, None)
        .unwrap()
        .with_skip_faults(true);
    skipping.check(fault.as_bytes(), false).unwrap();
    skipping.check(fault.as_bytes(), true).unwrap();
    // Other messages are still validated.
    assert!(skipping.check(b"<a/>", false).is_err());
    // Through the settings.
    let dir = tempfile::tempdir().unwrap();
    let Location::File(path) = shared("cities.wsdl") else {
        panic!("not a file")
    };
    let v = compile(
        dir.path(),
        serde_json::json!({"wsdl": path.to_string_lossy(), "skipFaults": true}),
    )
    .unwrap();
    assert!(matches!(
        v.on_request(&mut exchange(fault)),
        Outcome::Continue
    ));
}
