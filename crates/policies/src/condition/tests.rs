use std::collections::HashMap;
use std::sync::Arc;

use turnpike_core::exchange::{ClientCertificate, Identity, PathParams};
use turnpike_core::Exchange;

use super::Condition;
use crate::testutil::exchange;

fn env() -> Arc<HashMap<String, String>> {
    Arc::new(HashMap::from([("STAGE".to_owned(), "prod".to_owned())]))
}

fn cond(src: &str) -> Condition {
    Condition::compile(src, &["id".to_owned()], env()).unwrap_or_else(|e| panic!("{src}: {e:?}"))
}

fn error(src: &str) -> super::ExprError {
    match Condition::compile(src, &["id".to_owned()], env()) {
        Ok(_) => panic!("`{src}` compiled"),
        Err(e) => e,
    }
}

/// GET /items/42?page=2&q=a+b from 198.51.100.7, with an identity and a certificate.
fn full() -> Exchange {
    let mut ex = exchange(
        "GET",
        "/items/42?page=2&q=a+b",
        &[
            ("X-Tier", "gold"),
            ("host", "api.example.com:8443"),
            ("x-n", "7"),
        ],
        "",
    );
    ex.params = PathParams::from_slice(&[(7, 9)]);
    ex.tls = true;
    let claims: serde_json::Map<String, serde_json::Value> = serde_json::from_str(
        r#"{"sub":"u1","admin":true,"level":3,"roles":["a","b"],"org":{"name":"acme"}}"#,
    )
    .unwrap();
    ex.extensions.insert(Identity {
        consumer: Some("alice".into()),
        groups: vec!["gold".into(), "beta".into()],
        subject: Some("u1".into()),
        scopes: Vec::new(),
        claims: Some(Arc::new(claims)),
    });
    ex.extensions.insert(ClientCertificate {
        subject: "CN=client,O=Example".into(),
    });
    ex
}

#[test]
fn every_variable() {
    let ex = full();
    for src in [
        r#"request.method == "GET""#,
        r#"request.path == "/items/42""#,
        r#"request.path.startsWith("/items/")"#,
        r#"request.query["page"] == "2" && request.query.q == "a b""#,
        r#"request.headers["x-tier"] == "gold""#,
        r#"request.headers["X-Tier"] == "gold""#,
        r#""x-tier" in request.headers && !("x-none" in request.headers)"#,
        r#"has(request.headers.host)"#,
        r#"request.host == "api.example.com""#,
        r#"request.scheme == "https""#,
        r#"client.ip == "198.51.100.7""#,
        r#"client.certSubject.contains("CN=client")"#,
        r#"consumer.name == "alice" && "gold" in consumer.groups"#,
        r#"size(consumer.groups) == 2 && consumer.groups[1] == "beta""#,
        r#"jwt.sub == "u1" && jwt["admin"] && jwt.level >= 3"#,
        r#""b" in jwt.roles && jwt.org.name == "acme""#,
        r#"path.id == "42" && int(path["id"]) > 40"#,
        r#"env.STAGE == "prod" && !("NOPE" in env)"#,
        r#"int(request.headers["x-n"]) * 2 == 14"#,
        r#"request.method in ["GET", "HEAD"]"#,
        r#"request.path.matches("^/items/[0-9]+$")"#,
        r#"request.headers["x-tier"].upperAscii() == "GOLD""#,
        r#"(request.method == "POST" ? 1 : 2) == 2"#,
        r#"string(jwt.level) + "x" == "3x""#,
        r#"-jwt.level < 0 && double(jwt.level) == 3.0 && jwt.level == 3u"#,
    ] {
        assert!(cond(src).holds(&ex), "{src}");
    }
    for src in [
        r#"request.method == "POST""#,
        r#"request.headers["x-tier"] == "silver""#,
        r#""admin" in consumer.groups"#,
        r#"request.path.endsWith("/43")"#,
    ] {
        assert!(!cond(src).holds(&ex), "{src}");
    }
}

#[test]
fn response_variables_in_the_response_phase_only() {
    let mut ex = full();
    let c = cond(r#"response.status >= 500 && response.headers["retry-after"] == "3""#);
    // In the request phase there is no response: the test is false.
    assert!(!c.holds(&ex));
    ex.response = Some(
        http::Response::builder()
            .status(503)
            .header("Retry-After", "3")
            .body(turnpike_core::Body::Empty)
            .unwrap(),
    );
    assert!(c.holds(&ex));
}

#[test]
fn evaluation_errors_are_false_and_logic_short_circuits() {
    let ex = exchange("GET", "/", &[], "");
    // A missing header is an error: false, either way round.
    assert!(!cond(r#"request.headers["x-tier"] == "gold""#).holds(&ex));
    assert!(!cond(r#"request.headers["x-tier"] != "gold""#).holds(&ex));
    // CEL's commutative && and ||: a false (true) side decides even when the other fails.
    assert!(!cond(r#"request.headers["x"] == "1" && false"#).holds(&ex));
    assert!(cond(r#"request.headers["x"] == "1" || true"#).holds(&ex));
    assert!(cond(r#"!("x" in request.headers) || int(request.headers["x"]) > 3"#).holds(&ex));
    assert!(!cond(r#"has(request.headers.x) && int(request.headers.x) > 3"#).holds(&ex));
    // No JWT: claims are missing.
    assert!(!cond(r#"jwt.sub == "u1""#).holds(&ex));
    // An overflow is an error.
    assert!(!cond("9223372036854775807 + size(request.path) > 0").holds(&ex));
}

#[test]
fn type_errors_at_load_point_into_the_expression() {
    let e = error(r#"request.method == 1"#);
    assert!(
        e.message.contains("string is never equal to a int"),
        "{e:?}"
    );
    assert_eq!((e.line, e.column), (1, 16), "{e:?}");
    let e = error(r#"request.method == "GET" && request.colour == "red""#);
    assert!(
        e.message.contains("`request` has no field `colour`"),
        "{e:?}"
    );
    assert_eq!(e.column, 35, "{e:?}");
    let e = error("requests.method == \"GET\"");
    assert!(e.message.contains("unknown variable `requests`"), "{e:?}");
    let e = error(r#"request.path"#);
    assert!(e.message.contains("must be a bool"), "{e:?}");
    let e = error(r#"request.headers && true"#);
    assert!(e.message.contains("needs a bool"), "{e:?}");
    let e = error(r#"path.name == "x""#);
    assert!(
        e.message.contains("no parameter `name` (it has: id)"),
        "{e:?}"
    );
    let e = error(r#"request.path.matches(request.method)"#);
    assert!(e.message.contains("string literal"), "{e:?}");
    let e = error(r#"request.path.matches("(")"#);
    assert!(e.message.contains("invalid pattern"), "{e:?}");
    let e = error(r#"request.path < 3"#);
    assert!(e.message.contains("cannot be ordered"), "{e:?}");
    let e = error(r#"request == 1"#);
    assert!(e.message.contains("not a value"), "{e:?}");
    let e = error(r#"consumer.groups.exists(g, g == "x")"#);
    assert!(e.message.contains("not supported"), "{e:?}");
    let e = error(r#"request.path.startsWith(1)"#);
    assert!(e.message.contains("does not take a int"), "{e:?}");
    let e = error(r#"1 in request.headers"#);
    assert!(e.message.contains("keys are strings"), "{e:?}");
    let e = error(r#"nosuch(1)"#);
    assert!(e.message.contains("unknown function `nosuch`"), "{e:?}");
    // A syntax error from the parser, with its place.
    let e = error("request.method ==");
    assert_eq!(e.line, 1, "{e:?}");
    // On the second line of the expression.
    let e = error("request.method == \"GET\" &&\n  request.nope");
    assert_eq!((e.line, e.column), (2, 10), "{e:?}");
}

#[test]
fn claims_are_dynamic() {
    let ex = full();
    // A claim's type is only known at run time: a wrong type is false, not a load error.
    assert!(!cond(r#"jwt.sub > 3"#).holds(&ex));
    assert!(cond(r#"jwt.roles == ["a", "b"]"#).holds(&ex));
}

fn spel(src: &str) -> Condition {
    Condition::compile_with_language(src, None, &["id".to_owned()], env())
        .unwrap_or_else(|e| panic!("{src}: {e:?}"))
}

#[test]
fn membranes_spel_tests_without_a_language() {
    let mut ex = full();
    for src in [
        "method == 'GET'",
        "header['X-Tier'] == 'gold'",
        "headers['x-tier'] != null and header['X-Nope'] == null",
        "path.startsWith('/items')",
        r"path matches '/items/\d+'",
        "params['page'] == '2'",
        "pathParam.id == '42'",
        "not (method == 'POST') or false",
    ] {
        assert!(spel(src).holds(&ex), "{src}");
    }
    for src in [
        "method == 'POST'",
        "header['X-Nope'] != null",
        "path matches '/items'",
    ] {
        assert!(!spel(src).holds(&ex), "{src}");
    }
    let c = spel(r"statusCode matches '5\d\d'");
    assert!(!c.holds(&ex));
    ex.response = Some(
        http::Response::builder()
            .status(503)
            .body(turnpike_core::Body::Empty)
            .unwrap(),
    );
    assert!(c.holds(&ex));
    // CEL stays CEL: `path` is the map of path parameters there.
    assert!(spel("path.id == '42' && request.method == 'GET'").holds(&ex));
    // Properties, in CEL and in SpEL.
    let mut ex = exchange("POST", "/", &[], "");
    turnpike_core::properties::set_property(&mut ex, "city", "Bonn".into());
    let cel =
        Condition::compile_with_language("property.city == 'Bonn'", None, &[], env()).unwrap();
    assert!(cel.holds(&ex));
    let spel_test =
        Condition::compile_with_language("property.city == 'Berlin'", Some("spel"), &[], env())
            .unwrap();
    assert!(!spel_test.holds(&ex));
    let e = Condition::compile_with_language("//order", Some("groovy"), &[], env()).unwrap_err();
    assert!(e.message.contains("`groovy` is not supported"), "{e:?}");
}

fn zoo_again() -> Exchange {
    exchange("POST", "/", &[], r#"{"a":1}"#)
}

#[test]
fn xpath_jsonpath_and_content_type_tests() {
    let ns = [(
        "s11".to_owned(),
        "http://schemas.xmlsoap.org/soap/envelope/".to_owned(),
    )];
    let xpath =
        |src: &str| Condition::compile_test(src, Some("XPath"), &ns, &[], "", env()).unwrap();
    let order = exchange(
        "POST",
        "/",
        &[("content-type", "application/xml")],
        "<order express='yes'><items/></order>",
    );
    assert!(xpath("//order[@express='yes']").holds(&order));
    assert!(!xpath("//order[@express='no']").holds(&order));
    assert!(xpath("not(/s11:Envelope)").holds(&order));
    assert!(xpath("//order").reads_body && xpath("//order").reads_response);
    assert!(Condition::compile_test("//[", Some("xpath"), &[], &[], "", env()).is_err());
    let jsonpath =
        |src: &str| Condition::compile_test(src, Some("jsonpath"), &[], &[], "", env()).unwrap();
    let zoo = exchange(
        "POST",
        "/",
        &[("content-type", "application/json")],
        r#"{"animals":[{"species":"cat"}],"off":false}"#,
    );
    assert!(jsonpath("$.animals[?(@.species == 'cat')]").holds(&zoo));
    assert!(!jsonpath("$.animals[?(@.species == 'dog')]").holds(&zoo));
    assert!(!jsonpath("$.off").holds(&zoo));
    assert!(!jsonpath("$.animals").holds(&order), "not JSON");
    let is = |src: &str| Condition::compile_with_language(src, Some("spel"), &[], env()).unwrap();
    assert!(is("isXML()").holds(&order) && !is("isJSON()").holds(&order));
    assert!(is("request.isJSON() and not isXML()").holds(&zoo));
    let mut answered = zoo;
    answered.response = Some(
        http::Response::builder()
            .header("content-type", "text/xml; charset=utf-8")
            .body(turnpike_core::Body::Empty)
            .unwrap(),
    );
    assert!(is("isXML()").holds(&answered), "the response is current");
    assert!(is("request.isJSON()").holds(&answered));
    assert!(is("isXML()").reads_response);
    let q = exchange("GET", "/?param1=value2&case=a", &[], "");
    assert!(is("params?.param1?.[0] == 'value2'").holds(&q));
    assert!(is("param?.case?.[0] == 'a'").holds(&q));
    assert!(!is("param?.case?.[0] == 'b'").holds(&q));
    let batch = exchange("POST", "/", &[], "  [1]");
    let c = is("body.toString().trim().startsWith('[')");
    assert!(c.holds(&batch) && c.reads_body);
    assert!(!c.holds(&zoo_again()));
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Any text compiles or fails with a message, as CEL or as SpEL, and what compiles
        /// evaluates without panicking.
        #[test]
        fn any_expression_compiles_or_fails_cleanly(src in "\\PC{0,60}") {
            let ex = full();
            for language in [None, Some("cel"), Some("spel")] {
                match Condition::compile_with_language(&src, language, &["id".to_owned()], env()) {
                    Ok(c) => {
                        let _ = c.holds(&ex);
                    }
                    Err(e) => prop_assert!(!e.message.is_empty()),
                }
            }
        }

        /// Expressions built from the grammar's pieces, which compile far more often.
        #[test]
        fn expressions_of_variables_and_operators_never_panic(
            parts in proptest::collection::vec(
                prop_oneof![
                    Just("request.method"), Just("request.headers['x-tier']"), Just("jwt.level"),
                    Just("consumer.groups"), Just("path.id"), Just("response.status"),
                    Just("'gold'"), Just("3"), Just("2.5"), Just("true"), Just("null"),
                    Just("["), Just("]"), Just("("), Just(")"), Just(","), Just("=="),
                    Just("!="), Just("<"), Just("&&"), Just("||"), Just("!"), Just("+"),
                    Just("in"), Just(".size()"), Just("int("), Just("and"), Just("matches"),
                ],
                0..12,
            )
        ) {
            let src = parts.join(" ");
            let ex = full();
            for language in [None, Some("spel")] {
                if let Ok(c) = Condition::compile_with_language(&src, language, &["id".to_owned()], env()) {
                    let _ = c.holds(&ex);
                }
            }
        }
    }
}

#[test]
fn trim_removes_blanks_as_java_does() {
    let mut ex = full();
    ex.request
        .headers
        .insert("x-pad", " \t[1] \t".parse().unwrap());
    for src in [
        r#"request.headers["x-pad"].trim().startsWith("[")"#,
        r#"request.headers["x-pad"].trim() == "[1]""#,
        r#"request.headers["x-pad"].trim().size() == 3"#,
        r#"request.headers["x-tier"].trim() == "gold""#,
        r#""".trim() == """#,
    ] {
        assert!(cond(src).holds(&ex), "{src}");
    }
    assert!(!cond(r#"request.headers["x-pad"].startsWith("[")"#).holds(&ex));
    // A member of strings only, without arguments.
    assert!(error("request.method.trim(1) == \"\"")
        .message
        .contains("argument"));
    assert!(error("trim(request.method) == \"\"")
        .message
        .contains("trim"));
}

#[test]
fn membranes_cookie_json_substring_and_comparison_words() {
    let mut ex = exchange(
        "POST",
        "/mcp",
        &[
            ("cookie", "SESSION=akj34; theme=\"dark\""),
            ("authorization", "Bearer abcdef123456"),
            ("content-type", "application/json"),
        ],
        r#"{"method": "tools/call", "params": {"name": "secretHello"}, "id": 7}"#,
    );
    for src in [
        "cookie.SESSION == 'akj34'",
        "cookie['theme'] == 'dark'",
        "cookie.nope == null",
        "isJSON() and json.method == 'tools/call' and json['params'] != null and json['params']['name'] == 'secretHello'",
        "json.id gt 6 and json.id lt 8 and json.id ge 7 and json.id le 7 and json.id eq 7 and json.id ne 8",
        "headers['Authorization'].substring(headers['Authorization'].length() - 6) == '123456'",
        "header['Authorization'].substring(0, 6) == 'Bearer'",
    ] {
        let c = spel(src);
        c.prepare(&mut ex);
        assert!(c.holds(&ex), "{src}");
    }
    for src in [
        "cookie.SESSION != 'akj34'",
        "json.method == 'tools/list'",
        // Out of range: the expression has no value, the test does not hold.
        "header['Authorization'].substring(3, 100) == ''",
    ] {
        assert!(!spel(src).holds(&ex), "{src}");
    }
    assert!(spel("json.method == 'x'").reads_body);
    let e = Condition::compile_with_language("path.substring('a') == ''", Some("spel"), &[], env())
        .unwrap_err();
    assert!(e.message.contains("int"), "{e:?}");
    // Written in SpEL's words, neither CEL nor SpEL: the SpEL error says what is wrong.
    let e = Condition::compile_with_language("request.getBody.getLength gt 64", None, &[], env())
        .unwrap_err();
    assert!(e.message.contains("getBody"), "{e:?}");
}
