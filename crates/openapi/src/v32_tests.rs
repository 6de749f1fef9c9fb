//! OpenAPI 3.2's `query` operations and `in: querystring` parameters, and `validateSecurity`,
//! through the validator step.

use std::sync::Arc;

use serde_json::json;
use turnpike_core::exchange::{AuthMethod, Authentication, PathParams};
use turnpike_core::{Body, Exchange, Outcome, Policy};

use crate::{load_spec, OpenApiValidator, Source, Spec};

fn spec_from(yaml: &str) -> Result<Spec, crate::SpecError> {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("spec.yaml");
    std::fs::write(&f, yaml).unwrap();
    load_spec(&Source::File(f))
}

fn ex(method: &str, uri: &str, headers: &[(&str, &str)], body: &str) -> Exchange {
    let mut b = http::Request::builder()
        .method(http::Method::from_bytes(method.as_bytes()).unwrap())
        .uri(uri);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let (parts, _) = b.body(()).unwrap().into_parts();
    Exchange::new(
        parts,
        Body::full(body.to_owned()),
        "192.0.2.1:1".parse().unwrap(),
        PathParams::new(),
    )
}

/// The request phase: `None` when the request passes, else the status and the violations'
/// locations and messages.
fn check(v: &OpenApiValidator, e: &mut Exchange) -> Option<(u16, Vec<(String, String)>)> {
    match v.on_request(e) {
        Outcome::Continue => None,
        Outcome::Reject(p) => {
            let j = p.to_json();
            let errs = j["errors"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|e| {
                            (
                                e["location"].as_str().unwrap().to_owned(),
                                e["message"].as_str().unwrap().to_owned(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            Some((p.status.as_u16(), errs))
        }
        _ => panic!("unexpected outcome"),
    }
}

const JSON: (&str, &str) = ("content-type", "application/json");

const QUERY_SPEC: &str = r#"
openapi: 3.2.0
info: {title: OpenAPI 3.2 QUERY Method, version: 1.0.0}
servers: [{url: "http://localhost:3000"}]
paths:
  /search:
    query:
      requestBody:
        content:
          application/json:
            schema:
              type: object
              required: [term]
              properties:
                term: {type: string}
                limit: {type: integer, minimum: 1}
      responses:
        '200': {description: Search results}
  /things:
    get:
      responses: {'200': {description: ok}}
    additionalOperations:
      LINK:
        responses: {'204': {description: linked}}
"#;

#[test]
fn query_operations_validate_their_bodies() {
    let spec = Arc::new(spec_from(QUERY_SPEC).unwrap());
    assert!(spec.has_body_schemas());
    let v = OpenApiValidator::new(spec, true, false);
    let mut e = ex("QUERY", "/search", &[JSON], r#"{"term":"shoes"}"#);
    assert_eq!(check(&v, &mut e), None);
    let mut e = ex("QUERY", "/search", &[JSON], "{}");
    let (status, errs) = check(&v, &mut e).unwrap();
    assert_eq!(status, 400);
    assert_eq!(errs[0].0, "#/body");
    assert!(
        errs[0].1.contains("\"term\" is a required property"),
        "{errs:?}"
    );
    let mut e = ex("QUERY", "/search", &[JSON], r#"{"term":"x","limit":0}"#);
    assert_eq!(check(&v, &mut e).unwrap().1[0].0, "#/body/limit");
    // The path has no GET; a path without a `query` operation refuses QUERY.
    let mut e = ex("GET", "/search", &[], "");
    let (status, _) = check(&v, &mut e).unwrap();
    assert_eq!(status, 405);
    let mut e = ex("QUERY", "/things", &[JSON], "{}");
    assert_eq!(check(&v, &mut e).unwrap().0, 405);
    // `additionalOperations` declares other methods.
    let mut e = ex("LINK", "/things", &[], "");
    assert_eq!(check(&v, &mut e), None);
    match v.on_request(&mut ex("DELETE", "/search", &[], "")) {
        Outcome::Reject(p) => {
            let allow = p.headers.iter().find(|(n, _)| n == http::header::ALLOW);
            assert_eq!(allow.map(|(_, v)| v.to_str().unwrap()), Some("QUERY"));
        }
        _ => panic!("405 expected"),
    }
}

#[test]
fn additional_operations_may_not_repeat_the_fixed_methods() {
    let e = spec_from(
        r#"
openapi: 3.2.0
info: {title: t, version: '1'}
paths:
  /a:
    additionalOperations:
      POST: {responses: {'200': {description: ok}}}
"#,
    )
    .unwrap_err();
    assert!(e.message.contains("`POST` has a field of its own"), "{e}");
}

const QUERYSTRING_SPEC: &str = r#"
openapi: 3.2.0
info: {title: qs, version: 1.0.0}
paths:
  /products:
    get:
      parameters:
        - name: filter
          in: querystring
          content:
            application/x-www-form-urlencoded:
              schema:
                $ref: '#/components/schemas/Filter'
      responses: {'200': {description: ok}}
  /strict:
    get:
      parameters:
        - name: q
          in: querystring
          content:
            application/x-www-form-urlencoded:
              schema:
                type: object
                additionalProperties: false
                properties:
                  tag: {type: array, items: {type: integer}}
                  on: {type: boolean}
                  where: {type: object, required: [x], properties: {x: {type: number}}}
      responses: {'200': {description: ok}}
  /free:
    get:
      parameters:
        - name: anything
          in: querystring
      responses: {'200': {description: ok}}
components:
  schemas:
    Filter:
      type: object
      required: [term]
      properties:
        term: {type: string}
        page: {type: integer, minimum: 1}
"#;

#[test]
fn querystring_is_validated_like_a_form() {
    let v = OpenApiValidator::new(Arc::new(spec_from(QUERYSTRING_SPEC).unwrap()), true, false);
    let run = |uri: &str| check(&v, &mut ex("GET", uri, &[], ""));
    assert_eq!(run("/products?term=boots&page=2"), None);
    assert_eq!(run("/products?term=red+boots&page=1&extra=x"), None);
    let (status, errs) = run("/products?page=2").unwrap();
    assert_eq!(status, 400);
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].0, "querystring.filter");
    assert!(
        errs[0].1.contains("\"term\" is a required property"),
        "{errs:?}"
    );
    // No query string at all is an empty form.
    assert_eq!(run("/products").unwrap().1[0].0, "querystring.filter");
    let (_, errs) = run("/products?term=a&page=0").unwrap();
    assert_eq!(errs[0].0, "querystring.filter/page");
    let (_, errs) = run("/products?term=a&page=two").unwrap();
    assert_eq!(errs[0].0, "querystring.filter/page");
    assert!(errs[0].1.contains("is not of type \"integer\""), "{errs:?}");
}

#[test]
fn querystring_arrays_objects_and_unknown_fields() {
    let v = OpenApiValidator::new(Arc::new(spec_from(QUERYSTRING_SPEC).unwrap()), true, false);
    let run = |uri: &str| check(&v, &mut ex("GET", uri, &[], ""));
    assert_eq!(run("/strict?tag=1&tag=2&on=true"), None);
    assert_eq!(run("/strict"), None);
    let (_, errs) = run("/strict?tag=1&tag=x").unwrap();
    assert_eq!(errs[0].0, "querystring.q/tag/1");
    let (_, errs) = run("/strict?other=1").unwrap();
    assert_eq!(errs[0].0, "querystring.q");
    assert!(errs[0].1.contains("other"), "{errs:?}");
    let (_, errs) = run("/strict?on=maybe").unwrap();
    assert_eq!(errs[0].0, "querystring.q/on");
    // An object field is JSON.
    assert_eq!(run("/strict?where=%7B%22x%22%3A1%7D"), None);
    let (_, errs) = run("/strict?where=%7B%7D").unwrap();
    assert_eq!(errs[0].0, "querystring.q/where");
    let (_, errs) = run("/strict?where=nojson").unwrap();
    assert_eq!(errs[0].0, "querystring.q/where");
    // Without `content` nothing is checked.
    assert_eq!(run("/free?a=1&b"), None);
}

const SECURED: &str = r#"
openapi: 3.0.3
info: {title: shop, version: '1'}
security:
  - http: []
paths:
  /products:
    get:
      responses: {'200': {description: ok}}
    post:
      security:
        - http: [write]
      requestBody:
        content:
          application/json:
            schema: {type: object, required: [name], properties: {name: {type: string}}}
      responses: {'201': {description: created}}
  /reports:
    get:
      security:
        - jwt: [inventory]
        - basic: []
      responses: {'200': {description: ok}}
components:
  securitySchemes:
    http: {type: apiKey, in: header, name: X-API-KEY}
    jwt: {type: oauth2, flows: {}}
    basic: {type: http, scheme: basic}
"#;

fn with_key(e: &mut Exchange, name: &str, scopes: &[&str]) {
    e.record_authentication(Authentication {
        method: AuthMethod::ApiKey {
            query: false,
            name: name.into(),
        },
        scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
    });
}

#[test]
fn security_requirements_answer_401_and_403() {
    let spec = Arc::new(spec_from(SECURED).unwrap());
    spec.check_security().unwrap();
    let v = OpenApiValidator::new(spec.clone(), true, false).with_security();

    let mut e = ex("GET", "/products", &[], "");
    assert_eq!(
        check(&v, &mut e),
        Some((
            401,
            vec![(
                "security.http".into(),
                "Authentication by API key is required.".into()
            )]
        ))
    );
    let mut e = ex("GET", "/products", &[], "");
    with_key(&mut e, "x-api-key", &[]);
    assert_eq!(check(&v, &mut e), None);

    let body = r#"{"name":"Mango"}"#;
    let mut e = ex("POST", "/products", &[JSON], body);
    with_key(&mut e, "x-api-key", &[]);
    assert_eq!(
        check(&v, &mut e),
        Some((
            403,
            vec![(
                "security.http".into(),
                "Caller is not in scope write".into()
            )]
        ))
    );
    let mut e = ex("POST", "/products", &[JSON], body);
    with_key(&mut e, "x-api-key", &["write"]);
    assert_eq!(check(&v, &mut e), None);
    // Security comes first; then the request is validated as usual.
    let mut e = ex("POST", "/products", &[JSON], "{}");
    with_key(&mut e, "x-api-key", &["write"]);
    assert_eq!(check(&v, &mut e).unwrap().0, 400);

    // The key must come from the header the scheme names.
    let mut e = ex("GET", "/products", &[], "");
    with_key(&mut e, "api-key", &[]);
    let (status, errs) = check(&v, &mut e).unwrap();
    assert_eq!(status, 403);
    assert_eq!(
        errs[0].1,
        "Name of api-key is api-key but should be X-API-KEY"
    );

    // Global AND operation: the global key, then a JWT with the scope or Basic.
    let mut e = ex("GET", "/reports", &[], "");
    with_key(&mut e, "X-Api-Key", &[]);
    let (status, errs) = check(&v, &mut e).unwrap();
    assert_eq!(status, 401);
    let msgs: Vec<&str> = errs.iter().map(|e| e.1.as_str()).collect();
    assert_eq!(
        msgs,
        [
            "OAuth2 or JWT authentication is required.",
            "Caller is not in scope inventory",
            "Caller is not authenticated with HTTP and BASIC."
        ]
    );
    e.record_authentication(Authentication {
        method: AuthMethod::Jwt,
        scopes: vec!["inventory".into()],
    });
    assert_eq!(check(&v, &mut e), None);

    // Without `with_security` nothing of this is checked.
    let plain = OpenApiValidator::new(spec, true, false);
    assert_eq!(check(&plain, &mut ex("GET", "/products", &[], "")), None);
    // Without details the body says no more than the type.
    let quiet = OpenApiValidator::new(Arc::new(spec_from(SECURED).unwrap()), true, false)
        .with_security()
        .without_details();
    match quiet.on_request(&mut ex("GET", "/products", &[], "")) {
        Outcome::Reject(p) => {
            let j = p.to_json();
            assert_eq!(j["status"], json!(401));
            assert!(j.get("errors").is_none());
        }
        _ => panic!("401 expected"),
    }
}

#[test]
fn unsupported_or_undefined_schemes_are_reported_with_their_name() {
    let spec = |schemes: &str, req: &str| {
        spec_from(&format!(
            "openapi: 3.1.0\ninfo: {{title: t, version: '1'}}\npaths:\n  /a:\n    get:\n      security: [{{{req}: []}}]\n      responses: {{'200': {{description: ok}}}}\ncomponents:\n  securitySchemes:\n{schemes}"
        ))
        .unwrap()
    };
    let e = spec("    tls: {type: mutualTLS}\n", "tls")
        .check_security()
        .unwrap_err();
    assert!(
        e.message.contains("`tls`") && e.message.contains("mutualTLS"),
        "{e}"
    );
    let e = spec("    dig: {type: http, scheme: digest}\n", "dig")
        .check_security()
        .unwrap_err();
    assert!(
        e.message.contains("`dig`") && e.message.contains("digest"),
        "{e}"
    );
    let e = spec("    k: {type: apiKey, in: header, name: k}\n", "nope")
        .check_security()
        .unwrap_err();
    assert!(e.message.contains("`nope` is not in"), "{e}");
    // Schemes nobody requires do not matter; bearer and openIdConnect are supported.
    let s = spec(
        "    tls: {type: mutualTLS}\n    b: {type: http, scheme: Bearer}\n",
        "b",
    );
    s.check_security().unwrap();
}

#[test]
fn x_membrane_validation_security_is_read() {
    let s = spec_from(
        "openapi: 3.0.3\ninfo: {title: t, version: '1'}\nx-membrane-validation:\n  security: true\npaths: {}\n",
    )
    .unwrap();
    assert_eq!(s.membrane_security, Some(true));
    let s = spec_from("openapi: 3.0.3\ninfo: {title: t, version: '1'}\npaths: {}\n").unwrap();
    assert_eq!(s.membrane_security, None);
}
