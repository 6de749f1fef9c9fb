//! Validation rules against the Fruitshop spec and small specs written for one rule each.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{json, Value};
use turnpike_core::exchange::PathParams;
use turnpike_core::{Body, Exchange, Outcome, Policy};
use turnpike_openapi::{load_spec, OpenApiValidator, Source, Spec};

const FRUITSHOP: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/data/openapi/fruitshop-v2-2-0.oas.yml"
);

fn fruitshop() -> Arc<Spec> {
    Arc::new(load_spec(&Source::File(PathBuf::from(FRUITSHOP))).unwrap())
}

fn spec_from(yaml: &str) -> Arc<Spec> {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("spec.yaml");
    std::fs::write(&f, yaml).unwrap();
    Arc::new(load_spec(&Source::File(f)).unwrap())
}

fn ex(method: &str, uri: &str, headers: &[(&str, &str)], body: &str) -> Exchange {
    let mut b = http::Request::builder().method(method).uri(uri);
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

/// Runs the request phase; returns (status, errors) of a rejection, or None.
fn check(v: &OpenApiValidator, e: &mut Exchange) -> Option<(u16, Vec<(String, String)>)> {
    match v.on_request(e) {
        Outcome::Continue => None,
        Outcome::Reject(p) => {
            let j = p.to_json();
            let errs = j["errors"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| {
                    (
                        e["location"].as_str().unwrap().to_owned(),
                        e["message"].as_str().unwrap().to_owned(),
                    )
                })
                .collect();
            Some((p.status.as_u16(), errs))
        }
        Outcome::Respond(_) | Outcome::Wait(_) => panic!("unexpected response"),
    }
}

const JSON: (&str, &str) = ("content-type", "application/json");

#[test]
fn fruitshop_loads_with_base_path() {
    let s = fruitshop();
    assert_eq!(s.base_path, "/shop/v2");
    assert_eq!(s.id, "fruit-shop-api-v2-2-0");
    assert!(s.paths.len() > 15);
    assert!(s.has_body_schemas());
}

#[test]
fn fruitshop_bodies() {
    let v = OpenApiValidator::new(fruitshop(), true, false);
    let p = "/shop/v2/products";
    assert_eq!(
        check(
            &v,
            &mut ex("POST", p, &[JSON], r#"{"name":"Mangos","price":2.79}"#)
        ),
        None
    );
    let (st, errs) = check(
        &v,
        &mut ex("POST", p, &[JSON], r#"{"name":"Mangos","price":"cheap"}"#),
    )
    .unwrap();
    assert_eq!(st, 400);
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].0, "#/body/price");
    assert!(errs[0].1.contains("number"), "{errs:?}");
    let (_, errs) = check(&v, &mut ex("POST", p, &[JSON], r#"{"price":1}"#)).unwrap();
    assert_eq!(errs[0].0, "#/body");
    assert!(errs[0].1.contains("name"), "{errs:?}");
    // Every violation is listed.
    let (_, errs) = check(
        &v,
        &mut ex(
            "POST",
            p,
            &[JSON],
            r#"{"name":"a very long name that exceeds thirty","price":-1}"#,
        ),
    )
    .unwrap();
    assert_eq!(errs.len(), 2, "{errs:?}");
    // Messages quoting a huge value are cut.
    let long = format!(r#"{{"name":"{}","price":1}}"#, "x".repeat(100_000));
    let (_, errs) = check(&v, &mut ex("POST", p, &[JSON], &long)).unwrap();
    assert!(errs[0].1.len() < 400, "{}", errs[0].1.len());
    // readOnly properties must not be sent.
    let (_, errs) = check(
        &v,
        &mut ex(
            "POST",
            p,
            &[JSON],
            r#"{"name":"a","price":1,"image_link":"x"}"#,
        ),
    )
    .unwrap();
    assert_eq!(errs[0].0, "#/body/image_link");
    assert!(errs[0].1.contains("read-only"), "{errs:?}");
    let (st, errs) = check(
        &v,
        &mut ex("POST", p, &[("content-type", "text/plain")], "hi"),
    )
    .unwrap();
    assert_eq!(st, 415);
    assert_eq!(errs[0].0, "header.content-type");
    let (st, errs) = check(&v, &mut ex("POST", p, &[JSON], "{bad")).unwrap();
    assert_eq!(st, 400);
    assert!(errs[0].1.contains("not valid JSON"));
}

#[test]
fn fruitshop_paths_methods_params() {
    let v = OpenApiValidator::new(fruitshop(), true, false);
    assert_eq!(
        check(&v, &mut ex("GET", "/shop/v2/nope", &[], ""))
            .unwrap()
            .0,
        404
    );
    assert_eq!(
        check(&v, &mut ex("PATCH", "/shop/v2/products", &[], ""))
            .unwrap()
            .0,
        405
    );
    let status =
        |m: &str, uri: &str, h: &[(&str, &str)]| check(&v, &mut ex(m, uri, h, "")).map(|r| r.0);
    assert_eq!(status("OPTIONS", "/shop/v2/products", &[]), Some(405));
    // A CORS preflight passes on to the flow (a `cors` policy answers it).
    let preflight = [
        ("origin", "https://app.example"),
        ("access-control-request-method", "POST"),
    ];
    assert_eq!(status("OPTIONS", "/shop/v2/products", &preflight), None);
    // HEAD is taken as GET.
    assert_eq!(status("HEAD", "/shop/v2/products?limit=5", &[]), None);
    assert_eq!(status("HEAD", "/shop/v2/products?limit=x", &[]), Some(400));
    assert_eq!(
        check(
            &v,
            &mut ex(
                "GET",
                "/shop/v2/products?limit=5&start=2&sort=name",
                &[],
                ""
            )
        ),
        None
    );
    let (st, errs) = check(
        &v,
        &mut ex("GET", "/shop/v2/products?limit=abc&sort=color", &[], ""),
    )
    .unwrap();
    assert_eq!(st, 400);
    let locs: Vec<&str> = errs.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(locs, ["query.limit", "query.sort"], "{errs:?}");
    let (_, errs) = check(&v, &mut ex("GET", "/shop/v2/products?limit=0", &[], "")).unwrap();
    assert!(
        errs[0].1.contains("minimum") || errs[0].1.contains("less than"),
        "{errs:?}"
    );
    assert_eq!(
        check(&v, &mut ex("GET", "/shop/v2/products/7", &[], "")),
        None
    );
    let (_, errs) = check(&v, &mut ex("GET", "/shop/v2/products/x7", &[], "")).unwrap();
    assert_eq!(errs[0].0, "path.id");
    let (_, errs) = check(&v, &mut ex("GET", "/shop/v2/products/0", &[], "")).unwrap();
    assert_eq!(errs[0].0, "path.id");
    assert_eq!(
        check(
            &v,
            &mut ex(
                "GET",
                "/shop/v2/products?modified_since=2024-05-16T16:17:00%2B02:00",
                &[],
                ""
            )
        ),
        None
    );
    let (_, errs) = check(
        &v,
        &mut ex("GET", "/shop/v2/products?modified_since=yesterday", &[], ""),
    )
    .unwrap();
    assert_eq!(errs[0].0, "query.modified_since");
}

const SMALL: &str = r##"
openapi: 3.0.3
info: { title: Small, version: "1" }
servers: [ { url: "http://127.0.0.1:1/api" } ]
paths:
  /items/{id}:
    parameters:
      - { name: id, in: path, required: true, schema: { type: integer } }
    get:
      parameters:
        - { name: tags, in: query, schema: { type: array, items: { type: string, enum: [a, b] } } }
        - { name: X-Trace, in: header, required: true, schema: { type: string, pattern: "^[0-9a-f]+$" } }
        - { name: sid, in: cookie, schema: { type: integer } }
      responses:
        "200":
          description: ok
          headers:
            X-Rate: { schema: { type: integer, minimum: 0 } }
            Content-Type: { required: true, schema: { type: string, enum: [ignored] } }
          content:
            application/json:
              schema: { $ref: "#/components/schemas/Item" }
        "4XX":
          description: client error
          headers:
            X-Error-Id: { required: true, schema: { type: string } }
    put:
      requestBody:
        required: true
        content:
          application/json:
            schema: { $ref: "#/components/schemas/Item" }
      responses:
        "204": { description: done }
    post:
      requestBody:
        required: true
        content:
          application/x-www-form-urlencoded:
            schema:
              type: object
              required: [qty]
              properties:
                qty: { type: integer, minimum: 1 }
                tags: { type: array, items: { type: string }, maxItems: 2 }
                note: { type: string }
      responses:
        "201": { description: created }
components:
  schemas:
    Item:
      type: object
      additionalProperties: false
      required: [name]
      properties:
        name: { type: string }
        note: { type: string, nullable: true }
        count: { type: integer, format: int32 }
        blob: { type: string, format: byte }
        score: { type: number, minimum: 0, exclusiveMinimum: true }
        secret: { type: string, writeOnly: true }
        kind:
          oneOf:
            - { type: integer }
            - { type: string }
"##;

#[test]
fn small_spec_rules() {
    let spec = spec_from(SMALL);
    assert_eq!(spec.base_path, "/api");
    let v = OpenApiValidator::new(spec.clone(), true, true);
    let h = [("x-trace", "ab12")];
    assert_eq!(
        check(&v, &mut ex("GET", "/api/items/3?tags=a&tags=b", &h, "")),
        None
    );
    let (_, errs) = check(
        &v,
        &mut ex("GET", "/api/items/3?tags=c", &[("cookie", "sid=x")], ""),
    )
    .unwrap();
    let locs: Vec<&str> = errs.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(
        locs,
        ["query.tags/0", "header.x-trace", "cookie.sid"],
        "{errs:?}"
    );
    let (_, errs) = check(
        &v,
        &mut ex("GET", "/api/items/3", &[("x-trace", "XYZ")], ""),
    )
    .unwrap();
    assert_eq!(errs[0].0, "header.x-trace");
    let put = |body: &str| check(&v, &mut ex("PUT", "/api/items/1", &[JSON], body));
    assert_eq!(
        put(r#"{"name":"n","note":null,"score":0.5,"kind":"x","secret":"s"}"#),
        None
    );
    let (_, errs) = put(r#"{"name":"n","extra":1}"#).unwrap();
    assert_eq!(errs[0].0, "#/body", "{errs:?}");
    assert!(errs[0].1.contains("extra"), "{errs:?}");
    assert_eq!(
        put(r#"{"name":"n","count":2147483647,"blob":"aGk="}"#),
        None
    );
    let (_, errs) = put(r#"{"name":"n","count":2147483648,"blob":"a"}"#).unwrap();
    let locs: Vec<&str> = errs.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(locs, ["#/body/blob", "#/body/count"], "{errs:?}");
    let (_, errs) = put(r#"{"name":"n","score":0}"#).unwrap();
    assert_eq!(errs[0].0, "#/body/score");
    let (_, errs) = put(r#"{"name":"n","kind":1.5}"#).unwrap();
    assert_eq!(errs[0].0, "#/body/kind");
    // Form bodies: fields read as their declared types, repeated fields as arrays.
    let form = |body: &str| {
        let ct = ("content-type", "application/x-www-form-urlencoded");
        check(&v, &mut ex("POST", "/api/items/1", &[ct], body))
    };
    assert_eq!(form("qty=2&tags=a&tags=b&note=hi+there"), None);
    let (_, errs) = form("qty=0").unwrap();
    assert_eq!(errs[0].0, "#/body/qty");
    let (_, errs) = form("qty=x").unwrap();
    assert!(errs[0].1.contains("integer"), "{errs:?}");
    let (_, errs) = form("tags=a&tags=b&tags=c").unwrap();
    assert_eq!(errs.len(), 2, "{errs:?}");
    let (_, errs) = check(&v, &mut ex("PUT", "/api/items/1", &[], "")).unwrap();
    assert!(errs[0].1.contains("required"), "{errs:?}");
}

fn respond(
    v: &OpenApiValidator,
    e: &mut Exchange,
    status: u16,
    ct: Option<&str>,
    body: &str,
) -> Option<Value> {
    respond_with(v, e, status, ct, &[], body)
}

fn respond_with(
    v: &OpenApiValidator,
    e: &mut Exchange,
    status: u16,
    ct: Option<&str>,
    headers: &[(&str, &str)],
    body: &str,
) -> Option<Value> {
    assert!(matches!(v.on_request(e), Outcome::Continue));
    let mut r = http::Response::builder().status(status);
    if let Some(ct) = ct {
        r = r.header("content-type", ct);
    }
    for (k, val) in headers {
        r = r.header(*k, *val);
    }
    e.response = Some(r.body(Body::full(body.to_owned())).unwrap());
    match v.on_response(e) {
        Outcome::Continue => None,
        Outcome::Reject(p) => {
            assert_eq!(p.status, 502);
            Some(p.to_json())
        }
        Outcome::Respond(_) | Outcome::Wait(_) => panic!(),
    }
}

#[test]
fn response_rules() {
    let v = OpenApiValidator::new(spec_from(SMALL), false, true);
    let get = || ex("GET", "/api/items/3", &[("x-trace", "ab")], "");
    assert_eq!(
        respond(
            &v,
            &mut get(),
            200,
            Some("application/json"),
            r#"{"name":"x"}"#
        ),
        None
    );
    assert_eq!(
        respond_with(&v, &mut get(), 404, None, &[("x-error-id", "e1")], ""),
        None
    );
    // Declared response headers: required ones present, values of their type.
    let p = respond(&v, &mut get(), 404, None, "").unwrap();
    assert_eq!(p["errors"][0]["location"], "header.x-error-id");
    let ok = r#"{"name":"x"}"#;
    let json = Some("application/json");
    assert_eq!(
        respond_with(&v, &mut get(), 200, json, &[("x-rate", "5")], ok),
        None
    );
    let p = respond_with(&v, &mut get(), 200, json, &[("x-rate", "-1")], ok).unwrap();
    assert_eq!(p["errors"][0]["location"], "header.x-rate");
    let p = respond(&v, &mut get(), 500, None, "").unwrap();
    assert_eq!(p["errors"][0]["location"], "status");
    let p = respond(&v, &mut get(), 200, Some("text/html"), "<p>").unwrap();
    assert_eq!(p["errors"][0]["location"], "header.content-type");
    let p = respond(
        &v,
        &mut get(),
        200,
        Some("application/json"),
        r#"{"name":1,"secret":"s"}"#,
    )
    .unwrap();
    let errs = p["errors"].as_array().unwrap();
    assert_eq!(errs.len(), 2, "{p}");
    assert_eq!(p["errors"][0]["location"], "#/body/name");
    assert_eq!(
        json!(errs.iter().any(|e| e["location"] == "#/body/secret")),
        json!(true)
    );
}

#[test]
fn openapi_31_and_invalid_specs() {
    let s = spec_from(
        "openapi: 3.1.0\ninfo: {title: T, version: '1'}\npaths:\n  /a:\n    post:\n      requestBody:\n        content:\n          application/json:\n            schema: {type: [string, 'null'], maxLength: 2}\n      responses: {'200': {description: ok}}\n",
    );
    let v = OpenApiValidator::new(s, true, false);
    assert_eq!(check(&v, &mut ex("POST", "/a", &[JSON], "null")), None);
    assert_eq!(
        check(&v, &mut ex("POST", "/a", &[JSON], "\"abc\""))
            .unwrap()
            .0,
        400
    );
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bad.yaml");
    std::fs::write(&f, "openapi: 3.0.0\ninfo: {title: T, version: '1'}\npaths:\n  /a:\n    get:\n      parameters:\n        - {in: query, schema: {type: string}}\n      responses: {}\n").unwrap();
    let e = load_spec(&Source::File(f.clone())).unwrap_err();
    assert!(e.to_string().contains("bad.yaml:7:"), "{e}");
    assert!(e.message.contains("name"), "{e}");
    std::fs::write(&f, "swagger: '2.0'\n").unwrap();
    assert!(load_spec(&Source::File(f)).is_err());
}

#[test]
fn discriminator_dispatches_overlapping_alternatives() {
    let spec = spec_from(
        r##"
openapi: 3.0.3
info: { title: Pets, version: "1" }
paths:
  /pets:
    post:
      requestBody:
        content:
          application/json:
            schema:
              oneOf: [ { $ref: "#/components/schemas/Cat" }, { $ref: "#/components/schemas/Dog" } ]
              discriminator: { propertyName: petType }
      responses: { "201": { description: created } }
components:
  schemas:
    Pet:
      type: object
      required: [petType, name]
      properties: { petType: { type: string }, name: { type: string } }
    Cat:
      allOf:
        - $ref: "#/components/schemas/Pet"
        - type: object
          properties: { huntingSkill: { type: string, enum: [lazy, aggressive] } }
    Dog:
      allOf:
        - $ref: "#/components/schemas/Pet"
        - type: object
          properties: { packSize: { type: integer, minimum: 0 } }
"##,
    );
    let v = OpenApiValidator::new(spec, true, false);
    let post = |b: &str| check(&v, &mut ex("POST", "/pets", &[JSON], b));
    // Without the discriminator this Cat would also be a valid Dog, and `oneOf` would fail.
    assert_eq!(
        post(r#"{"petType":"Cat","name":"Tom","huntingSkill":"lazy"}"#),
        None
    );
    assert_eq!(post(r#"{"petType":"Dog","name":"Rex","packSize":3}"#), None);
    let (_, e) = post(r#"{"petType":"Cat","name":"Tom","huntingSkill":"sleepy"}"#).unwrap();
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].0, "#/body/huntingSkill");
    let (_, e) = post(r#"{"petType":"Bird","name":"Tweety"}"#).unwrap();
    assert_eq!(e[0].0, "#/body/petType", "{e:?}");
}

const INHERITANCE: &str = r##"
openapi: 3.0.3
info: { title: Zoo, version: "1" }
paths:
  /pets:
    post:
      requestBody:
        content:
          application/json:
            schema: { $ref: "#/components/schemas/Pet" }
      responses: { "201": { description: created } }
  /cats-or-dogs:
    post:
      requestBody:
        content:
          application/json:
            schema:
              anyOf: [ { $ref: "#/components/schemas/Cat" }, { $ref: "#/components/schemas/Dog" } ]
      responses: { "201": { description: created } }
  /animals:
    post:
      requestBody:
        content:
          application/json:
            schema: { $ref: "#/components/schemas/Animal" }
      responses: { "201": { description: created } }
components:
  schemas:
    Pet:
      type: object
      required: [petType, name]
      properties: { petType: { type: string }, name: { type: string, maxLength: 10 } }
      discriminator:
        propertyName: petType
        mapping: { doggie: "#/components/schemas/Dog" }
    Cat:
      allOf:
        - $ref: "#/components/schemas/Pet"
        - type: object
          required: [huntingSkill]
          properties: { huntingSkill: { type: string, enum: [lazy, aggressive] } }
    Dog:
      allOf:
        - $ref: "#/components/schemas/Pet"
        - type: object
          properties: { packSize: { type: integer, minimum: 0 } }
    Lion:
      allOf:
        - $ref: "#/components/schemas/Cat"
        - type: object
          properties: { mane: { type: boolean } }
    Animal:
      type: object
      required: [kind]
      properties: { kind: { type: string } }
      oneOf: [ { $ref: "#/components/schemas/Bird" }, { $ref: "#/components/schemas/Fish" } ]
      discriminator: { propertyName: kind }
    Bird:
      allOf:
        - $ref: "#/components/schemas/Animal"
        - properties: { wings: { type: integer, const: 2 } }
    Fish:
      allOf:
        - $ref: "#/components/schemas/Animal"
        - properties: { fins: { type: integer } }
"##;

#[test]
fn discriminator_inherited_through_all_of_selects_the_subtype() {
    let v = OpenApiValidator::new(spec_from(INHERITANCE), true, false);
    let post = |path: &str, b: &str| check(&v, &mut ex("POST", path, &[JSON], b));
    // The base used directly: the value names the subtype.
    assert_eq!(
        post(
            "/pets",
            r#"{"petType":"Cat","name":"Tom","huntingSkill":"lazy"}"#
        ),
        None
    );
    assert_eq!(
        post("/pets", r#"{"petType":"doggie","name":"Rex","packSize":2}"#),
        None,
        "explicit mapping"
    );
    assert_eq!(
        post(
            "/pets",
            r#"{"petType":"Lion","name":"Leo","huntingSkill":"aggressive","mane":true}"#
        ),
        None,
        "a subtype of a subtype"
    );
    // Cat's own violations, precisely (the base's too, once).
    let (st, e) = post(
        "/pets",
        r#"{"petType":"Cat","name":"Tom the eleventh","huntingSkill":"sleepy"}"#,
    )
    .unwrap();
    assert_eq!(st, 400);
    let locs: Vec<&str> = e.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(locs, ["#/body/name", "#/body/huntingSkill"], "{e:?}");
    let (_, e) = post("/pets", r#"{"petType":"Cat","name":"Tom"}"#).unwrap();
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].1.contains("huntingSkill"), "{e:?}");
    // A Dog's properties are not checked against Cat: the value selects.
    let (_, e) = post(
        "/pets",
        r#"{"petType":"doggie","name":"Rex","packSize":-1}"#,
    )
    .unwrap();
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].0, "#/body/packSize");
    // Unknown and missing values.
    let (_, e) = post("/pets", r#"{"petType":"Bird","name":"Tweety"}"#).unwrap();
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].0, "#/body/petType");
    assert!(
        e[0].1
            .contains("\"Bird\" is not a known value of the discriminator `petType`")
            && e[0].1.contains("known: doggie, Cat, Lion"),
        "{e:?}"
    );
    let (_, e) = post("/pets", r#"{"name":"Tweety"}"#).unwrap();
    assert_eq!(e[0].0, "#/body");
    assert!(
        e[0].1.contains("\"petType\" is a required property"),
        "{e:?}"
    );
    let (_, e) = post("/pets", r#""Tom""#).unwrap();
    assert_eq!(e[0].0, "#/body");
    assert!(e[0].1.contains("not of type \"object\""), "{e:?}");
    // A union of subtypes without a discriminator of its own inherits the base's.
    assert_eq!(
        post(
            "/cats-or-dogs",
            r#"{"petType":"Cat","name":"Tom","huntingSkill":"lazy"}"#
        ),
        None
    );
    let (_, e) = post(
        "/cats-or-dogs",
        r#"{"petType":"Cat","name":"Tom","packSize":1}"#,
    )
    .unwrap();
    assert_eq!(
        e.len(),
        1,
        "only Cat's violation, not a vague anyOf one: {e:?}"
    );
    assert!(e[0].1.contains("huntingSkill"), "{e:?}");
    let (_, e) = post("/cats-or-dogs", r#"{"petType":"Lion","name":"Leo"}"#).unwrap();
    assert_eq!(
        e[0].0, "#/body/petType",
        "Lion is not one of the union: {e:?}"
    );
    // A base with oneOf and a discriminator that its subtypes extend: no endless recursion.
    assert_eq!(post("/animals", r#"{"kind":"Bird","wings":2}"#), None);
    let (_, e) = post("/animals", r#"{"kind":"Bird","wings":3}"#).unwrap();
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].0, "#/body/wings");
    let (_, e) = post("/animals", r#"{"kind":"Cow"}"#).unwrap();
    assert_eq!(e[0].0, "#/body/kind");
}

#[test]
fn discriminator_in_responses_and_31() {
    let spec = spec_from(
        &INHERITANCE
            .replace("openapi: 3.0.3", "openapi: 3.1.0")
            .replace(
                "responses: { \"201\": { description: created } }\n  /cats-or-dogs",
                "responses:\n        \"201\": { description: created, content: { application/json: { schema: { $ref: \"#/components/schemas/Pet\" } } } }\n  /cats-or-dogs",
            ),
    );
    let v = OpenApiValidator::new(spec.clone(), true, true);
    assert_eq!(
        check(
            &v,
            &mut ex(
                "POST",
                "/pets",
                &[JSON],
                r#"{"petType":"Cat","name":"Tom","huntingSkill":"lazy"}"#
            )
        ),
        None
    );
    let e = check(
        &v,
        &mut ex(
            "POST",
            "/pets",
            &[JSON],
            r#"{"petType":"Cat","name":"Tom"}"#,
        ),
    )
    .unwrap()
    .1;
    assert!(e[0].1.contains("huntingSkill"), "{e:?}");
    let v = OpenApiValidator::new(spec.clone(), false, true);
    let cat = r#"{"petType":"Cat","name":"Tom","huntingSkill":"lazy"}"#;
    let mut e = ex("POST", "/pets", &[JSON], cat);
    assert_eq!(
        respond(&v, &mut e, 201, Some("application/json"), cat),
        None
    );
    let mut e = ex("POST", "/pets", &[JSON], cat);
    let p = respond(
        &v,
        &mut e,
        201,
        Some("application/json"),
        r#"{"petType":"Cow","name":"Tom"}"#,
    )
    .unwrap();
    assert_eq!(p["errors"][0]["location"], "#/body/petType", "{p}");
    // The spec served under /api-docs is the original (no dispatch rewriting).
    assert!(spec.doc.get("x-turnpike-plain").is_none());
    assert!(spec.doc["components"]["schemas"]["Pet"]
        .get("discriminator")
        .is_some());
}

/// OpenAPI 3.1 schemas with `$id`: references relative to the `$id`, to an `$id` by its URI
/// (absolute or relative to the document), and to an `$anchor`.
const IDS_31: &str = r##"
openapi: 3.1.0
info: { title: Ids, version: "1" }
paths:
  /orders:
    post:
      requestBody:
        required: true
        content:
          application/json:
            schema: { $ref: "https://shop.example/schemas/order" }
      responses: { "201": { description: created } }
  /items:
    post:
      requestBody:
        content:
          application/json:
            schema: { $ref: "schemas/item.json" }
      responses: { "201": { description: created } }
components:
  schemas:
    Order:
      $id: https://shop.example/schemas/order
      type: object
      required: [id, items]
      properties:
        id: { $ref: "common#/$defs/Id" }
        items: { type: array, items: { $ref: "item" } }
        status: { $ref: "common#status" }
    Item:
      $id: https://shop.example/schemas/item
      type: object
      required: [sku]
      properties:
        sku: { type: string, pattern: "^[A-Z]{3}-[0-9]+$" }
        qty: { $ref: "#/$defs/Qty" }
      $defs:
        Qty: { type: integer, minimum: 1 }
    LocalItem:
      $id: schemas/item.json
      allOf: [ { $ref: "https://shop.example/schemas/item" } ]
    Common:
      $id: https://shop.example/schemas/common
      $defs:
        Id: { type: integer, minimum: 1 }
        Status: { $anchor: status, enum: [open, paid] }
"##;

#[test]
fn openapi_31_id_relative_references() {
    let v = OpenApiValidator::new(spec_from(IDS_31), true, false);
    let post = |path: &str, b: &str| check(&v, &mut ex("POST", path, &[JSON], b));
    assert_eq!(
        post(
            "/orders",
            r#"{"id":1,"items":[{"sku":"ABC-1","qty":2}],"status":"paid"}"#
        ),
        None
    );
    let (st, e) = post(
        "/orders",
        r#"{"id":0,"items":[{"sku":"abc","qty":0}],"status":"lost"}"#,
    )
    .unwrap();
    assert_eq!(st, 400);
    let mut locs: Vec<&str> = e.iter().map(|e| e.0.as_str()).collect();
    locs.sort();
    assert_eq!(
        locs,
        [
            "#/body/id",
            "#/body/items/0/qty",
            "#/body/items/0/sku",
            "#/body/status"
        ],
        "{e:?}"
    );
    assert_eq!(post("/items", r#"{"sku":"XYZ-9"}"#), None);
    let (_, e) = post("/items", r#"{"qty":1}"#).unwrap();
    assert!(e[0].1.contains("\"sku\" is a required property"), "{e:?}");
}

const UPLOAD: &str = r##"
openapi: 3.0.3
info: { title: Upload, version: "1" }
paths:
  /upload:
    post:
      requestBody:
        required: true
        content:
          multipart/form-data:
            schema:
              type: object
              additionalProperties: false
              required: [name, count, file]
              properties:
                name: { type: string, maxLength: 8 }
                count: { type: integer, minimum: 1 }
                ratio: { type: number }
                public: { type: boolean }
                tags: { type: array, items: { type: string, enum: [a, b, c] } }
                sizes: { type: array, items: { type: integer } }
                meta: { $ref: "#/components/schemas/Meta" }
                file: { type: string, format: binary }
                avatar: { type: string, format: binary }
            encoding:
              avatar: { contentType: "image/png, image/jpeg" }
              file: { contentType: "application/octet-stream, text/*" }
      responses: { "201": { description: created } }
components:
  schemas:
    Meta:
      type: object
      required: [author]
      properties: { author: { type: string }, pages: { type: integer } }
"##;

/// A multipart body of (name, content type, content) parts, with boundary `XyZ`.
fn multipart_body(parts: &[(&str, Option<&str>, &str)]) -> String {
    let mut b = String::from("preamble\r\n");
    for (name, ct, content) in parts {
        b.push_str(&format!(
            "--XyZ\r\nContent-Disposition: form-data; name=\"{name}\""
        ));
        if *name == "file" || *name == "avatar" {
            b.push_str("; filename=\"x.bin\"");
        }
        b.push_str("\r\n");
        if let Some(ct) = ct {
            b.push_str(&format!("Content-Type: {ct}\r\n"));
        }
        b.push_str(&format!("\r\n{content}\r\n"));
    }
    b.push_str("--XyZ--\r\n");
    b
}

const MULTIPART: (&str, &str) = ("content-type", "multipart/form-data; boundary=XyZ");

#[test]
fn multipart_bodies_are_validated_part_by_part() {
    let v = OpenApiValidator::new(spec_from(UPLOAD), true, false);
    let valid: Vec<(&str, Option<&str>, &str)> = vec![
        ("name", None, "Ann"),
        ("count", None, "3"),
        ("ratio", Some("text/plain"), "0.5"),
        ("public", None, "true"),
        ("tags", None, "a"),
        ("tags", None, "b"),
        ("sizes", None, "1"),
        ("sizes", None, "20"),
        (
            "meta",
            Some("application/json"),
            r#"{"author":"Ann","pages":2}"#,
        ),
        ("file", Some("application/octet-stream"), "\u{1}\u{2}binary"),
        ("avatar", Some("image/png"), "PNG"),
    ];
    let post = |parts: &[(&str, Option<&str>, &str)]| {
        check(
            &v,
            &mut ex("POST", "/upload", &[MULTIPART], &multipart_body(parts)),
        )
    };
    assert_eq!(post(&valid), None);
    // Each change of the valid form is reported at its part.
    let with = |name: &str, part: (&'static str, Option<&'static str>, &'static str)| {
        let mut p: Vec<_> = valid
            .iter()
            .filter(|(n, _, _)| *n != name)
            .cloned()
            .collect();
        p.push(part);
        post(&p).map(|(st, e)| {
            assert_eq!(st, 400);
            e
        })
    };
    let e = with("count", ("count", None, "many")).unwrap();
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].0, "#/body/count");
    assert!(
        e[0].1.contains("\"many\" is not of type \"integer\""),
        "{e:?}"
    );
    let e = with("count", ("count", None, "0")).unwrap();
    assert_eq!(e[0].0, "#/body/count", "coerced to 0, below the minimum");
    let e = with("public", ("public", None, "yes")).unwrap();
    assert_eq!(e[0].0, "#/body/public");
    let e = with("tags", ("tags", None, "z")).unwrap();
    assert_eq!(e[0].0, "#/body/tags/0", "{e:?}");
    // One JSON part can carry a whole array.
    assert_eq!(
        with("sizes", ("sizes", Some("application/json"), "[1, 2, 3]")),
        None
    );
    let e = with("sizes", ("sizes", None, "x")).unwrap();
    assert_eq!(e[0].0, "#/body/sizes/0");
    // JSON parts: objects are JSON by default, and must match their schema.
    assert_eq!(with("meta", ("meta", None, r#"{"author":"B"}"#)), None);
    let e = with(
        "meta",
        ("meta", Some("application/json"), r#"{"pages":"2"}"#),
    )
    .unwrap();
    let locs: Vec<&str> = e.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(locs, ["#/body/meta", "#/body/meta/pages"], "{e:?}");
    let e = with("meta", ("meta", Some("application/json"), "{nope")).unwrap();
    assert_eq!(e[0].0, "#/body/meta");
    assert!(e[0].1.contains("not valid JSON"), "{e:?}");
    // The encoding's content types.
    let e = with("avatar", ("avatar", Some("text/plain"), "hi")).unwrap();
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].0, "#/body/avatar");
    assert!(
        e[0].1.contains(
            "Content-Type `text/plain` is not allowed here (allowed: image/png, image/jpeg)"
        ),
        "{e:?}"
    );
    assert_eq!(
        with("file", ("file", Some("text/csv"), "a,b")),
        None,
        "text/* covers it"
    );
    let e = with("avatar", ("avatar", None, "hi")).unwrap();
    assert!(
        e[0].1.contains("`text/plain`"),
        "the default of a part: {e:?}"
    );
    // Required parts, unknown parts, repeated scalars.
    let e = with("file", ("other", None, "x")).unwrap();
    let msgs: Vec<&str> = e.iter().map(|e| e.1.as_str()).collect();
    assert!(
        msgs.iter()
            .any(|m| m.contains("\"file\" is a required property"))
            && msgs.iter().any(|m| m.contains("other")),
        "{e:?}"
    );
    assert_eq!(with("name", ("name", None, "Bo")), None);
    let mut twice = valid.clone();
    twice.push(("name", None, "Bob"));
    let (_, e) = post(&twice).unwrap();
    assert_eq!(e[0].0, "#/body/name");
    assert!(e[0].1.contains("2 parts are named `name`"), "{e:?}");
}

#[test]
fn malformed_multipart_bodies_are_400() {
    let v = OpenApiValidator::new(spec_from(UPLOAD), true, false);
    let body = multipart_body(&[("name", None, "Ann")]);
    let (st, e) = check(
        &v,
        &mut ex(
            "POST",
            "/upload",
            &[("content-type", "multipart/form-data")],
            &body,
        ),
    )
    .unwrap();
    assert_eq!(st, 400);
    assert_eq!(e[0].0, "header.content-type");
    assert!(e[0].1.contains("`boundary`"), "{e:?}");
    let (st, e) = check(
        &v,
        &mut ex(
            "POST",
            "/upload",
            &[("content-type", "multipart/form-data; boundary=\"bad<b>\"")],
            &body,
        ),
    )
    .unwrap();
    assert_eq!(st, 400);
    assert_eq!(e[0].0, "header.content-type");
    for bad in [
        body.replace("--XyZ--", "--XyZ"),
        body.replace("XyZ", "Other"),
        body.replace(
            "Content-Disposition: form-data; ",
            "Content-Disposition: attachment; ",
        ),
    ] {
        let (st, e) = check(&v, &mut ex("POST", "/upload", &[MULTIPART], &bad)).unwrap();
        assert_eq!(st, 400);
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].0, "#/body");
        assert!(e[0].1.starts_with("malformed multipart body: "), "{e:?}");
    }
    // Another media type is still a 415.
    let (st, _) = check(
        &v,
        &mut ex("POST", "/upload", &[("content-type", "text/plain")], "x"),
    )
    .unwrap();
    assert_eq!(st, 415);
}

#[test]
fn fruitshop_image_upload_is_validated() {
    let v = OpenApiValidator::new(fruitshop(), true, false);
    let p = "/shop/v2/products/7/image";
    let auth = ("authorization", "Basic YTpi");
    let ok = multipart_body(&[("file", Some("image/png"), "PNG")]);
    assert_eq!(check(&v, &mut ex("PUT", p, &[MULTIPART, auth], &ok)), None);
    let none = multipart_body(&[("picture", Some("image/png"), "PNG")]);
    let (st, e) = check(&v, &mut ex("PUT", p, &[MULTIPART, auth], &none)).unwrap();
    assert_eq!(st, 400);
    assert!(e[0].1.contains("\"file\" is a required property"), "{e:?}");
}
