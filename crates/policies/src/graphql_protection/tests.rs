#![allow(clippy::unwrap_used, clippy::expect_used)]

use http::StatusCode;
use proptest::prelude::*;
use serde_json::json;
use turnpike_core::{BodyNeed, Outcome, Policy, PolicyFactory};

use super::document::{self, OperationType, ParseError, Selection};
use super::GraphQlProtection;
use crate::testutil::{exchange, plain};

fn policy(settings: serde_json::Value) -> GraphQlProtection {
    GraphQlProtection::compile(serde_json::from_value(settings).unwrap(), &plain()).unwrap()
}

/// The settings of Membrane's tutorial `security/50-GraphQL-Protection.yaml`.
fn tutorial() -> GraphQlProtection {
    policy(json!({
        "maxRecursion": 1,
        "maxMutations": 5,
        "maxDepth": 3,
        "disallow": [{"mutation": "updateCategory"}, {"introspection": {}}]
    }))
}

fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// The status, violation and detail of a GET with `query`, or `Ok`.
fn get(p: &GraphQlProtection, query: &str) -> Result<(), (u16, String, String)> {
    run(p, "GET", &format!("/graphql?query={}", enc(query)), &[], "")
}

fn post_json(p: &GraphQlProtection, body: &str) -> Result<(), (u16, String, String)> {
    run(
        p,
        "POST",
        "/graphql",
        &[("content-type", "application/json")],
        body,
    )
}

fn run(
    p: &GraphQlProtection,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<(), (u16, String, String)> {
    let mut ex = exchange(method, uri, headers, body);
    match p.on_request(&mut ex) {
        Outcome::Continue => Ok(()),
        Outcome::Reject(problem) => {
            let violation = problem.extra.as_ref().unwrap()["violation"]
                .as_str()
                .unwrap()
                .to_owned();
            Err((
                problem.status.as_u16(),
                violation,
                problem.detail.clone().unwrap(),
            ))
        }
        o => panic!("unexpected {o:?}"),
    }
}

fn status(r: Result<(), (u16, String, String)>) -> u16 {
    match r {
        Ok(()) => 200,
        Err((s, _, _)) => s,
    }
}

#[test]
fn the_tutorials_requests() {
    let p = tutorial();
    assert_eq!(get(&p, "{products{id}}"), Ok(()));
    assert_eq!(
        get(&p, "query{categories{products{vendors{id}}}}"),
        Err((400, "maxDepth".into(), "Max depth exceeded.".into()))
    );
    // Within the depth, but `products` twice on one path.
    assert_eq!(
        get(&p, "{products{vendor{products}}}"),
        Err((400, "maxRecursion".into(), "Max recursion exceeded.".into()))
    );
    assert_eq!(
        post_json(
            &p,
            r#"{"query":"mutation { updateCategory(id:6,name:\"Dry Fruits\"){id}}"}"#
        ),
        Err((
            400,
            "disallow".into(),
            "Mutation \"updateCategory\" not permitted.".into()
        ))
    );
    assert_eq!(
        get(&p, "{ __schema{mutationType {fields{name}}}}"),
        Err((
            400,
            "disallow".into(),
            "Introspection is not permitted.".into()
        ))
    );
    // Other mutations pass (by POST).
    assert_eq!(
        post_json(&p, r#"{"query":"mutation { addCategory(name:\"x\"){id}}"}"#),
        Ok(())
    );
}

#[test]
fn defaults_are_membranes() {
    let p = policy(json!({}));
    // maxDepth 7.
    assert_eq!(get(&p, "{a{b{c{d{e{f{g}}}}}}}"), Ok(()));
    assert_eq!(status(get(&p, "{a{b{c{d{e{f{g{h}}}}}}}}")), 400);
    // maxRecursion 3.
    assert_eq!(get(&p, "{a{a{a}}}"), Ok(()));
    assert_eq!(get(&p, "{a{a{a{a}}}}").unwrap_err().1, "maxRecursion");
    // maxMutations 5: top-level fields of mutation operations count.
    let five = r#"{"query":"mutation { a b c d e }"}"#;
    assert_eq!(post_json(&p, five), Ok(()));
    let six = r#"{"query":"mutation { a b c d e f }"}"#;
    assert_eq!(
        post_json(&p, six),
        Err((
            400,
            "maxMutations".into(),
            "Too many mutations defined in document.".into()
        ))
    );
    // Introspection and subscriptions are allowed without `disallow`.
    assert_eq!(get(&p, "{__schema{types{name}}}"), Ok(()));
    assert_eq!(
        post_json(&p, r#"{"query":"subscription { ticks }"}"#),
        Ok(())
    );
    assert_eq!(p.body_need(), BodyNeed::Buffer);
}

#[test]
fn allowed_methods() {
    let p = policy(json!({}));
    let mut ex = exchange("PUT", "/graphql?query=%7Ba%7D", &[], "");
    let Outcome::Reject(problem) = p.on_request(&mut ex) else {
        panic!()
    };
    assert_eq!(problem.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(problem.kind(), "method-not-allowed");
    assert_eq!(problem.detail.as_deref(), Some("Invalid method."));
    assert_eq!(problem.headers[0].1, "GET, POST");

    let get_only = policy(json!({"allowedMethods": "GET"}));
    assert_eq!(get_only.body_need(), BodyNeed::None);
    assert_eq!(get(&get_only, "{a}"), Ok(()));
    assert_eq!(status(post_json(&get_only, r#"{"query":"{a}"}"#)), 405);
    let post_only = policy(json!({"allowedMethods": "POST"}));
    assert_eq!(status(get(&post_only, "{a}")), 405);
    assert_eq!(post_json(&post_only, r#"{"query":"{a}"}"#), Ok(()));
    assert_eq!(
        get(&policy(json!({"allowedMethods": "GET, POST"})), "{a}"),
        Ok(())
    );
    for bad in ["PUT", "GET,PUT", "", "get"] {
        let e = GraphQlProtection::compile(
            serde_json::from_value(json!({ "allowedMethods": bad })).unwrap(),
            &plain(),
        )
        .unwrap_err();
        assert_eq!(e.key, "allowedMethods");
        assert!(e.message.contains("GET or POST"), "{}", e.message);
    }
}

#[test]
fn get_only_runs_queries() {
    let p = policy(json!({}));
    let mut ex = exchange(
        "GET",
        &format!("/graphql?query={}", enc("mutation { a }")),
        &[],
        "",
    );
    let Outcome::Reject(problem) = p.on_request(&mut ex) else {
        panic!()
    };
    assert_eq!(problem.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(
        problem.detail.as_deref(),
        Some("'GET' may only be used for GraphQL 'query's.")
    );
    assert_eq!(problem.headers[0].1, "POST");
    assert_eq!(status(get(&p, "subscription { a }")), 405);
    assert_eq!(get(&p, "query Q { a }"), Ok(()));
}

#[test]
fn get_parameters() {
    let p = policy(json!({}));
    let r = |uri: &str| run(&p, "GET", uri, &[], "");
    assert_eq!(
        r("/graphql"),
        Err((400, "request".into(), "No query parameters found.".into()))
    );
    assert_eq!(
        r("/graphql?query=%7Ba%7D&query=%7Bb%7D").unwrap_err().2,
        "Error decoding query string."
    );
    assert_eq!(
        r("/graphql?query=%zz").unwrap_err().2,
        "Error decoding query string."
    );
    assert_eq!(
        r("/graphql?x=1").unwrap_err().2,
        "Parameter 'query' is missing."
    );
    // `+` is a space.
    assert_eq!(r("/graphql?query=query+Q+%7Ba%7D"), Ok(()));
    let vars = |v: &str| format!("/graphql?query=%7Ba%7D&variables={}", enc(v));
    assert_eq!(r(&vars(r#"{"x":1}"#)), Ok(()));
    assert_eq!(r(&vars("null")), Ok(()));
    for bad in ["[1]", "{", r#"{"x":1,"x":2}"#, "3"] {
        assert_eq!(
            r(&vars(bad)),
            Err((
                422,
                "request".into(),
                "Error parsing variables or extensions from request JSON.".into()
            )),
            "{bad}"
        );
    }
    let ext = format!("/graphql?query=%7Ba%7D&extensions={}", enc(r#"{"p":1}"#));
    assert_eq!(
        r(&ext),
        Err((
            400,
            "allowExtensions".into(),
            "GraphQL 'extensions' are forbidden.".into()
        ))
    );
    let allowing = policy(json!({"allowExtensions": true}));
    assert_eq!(run(&allowing, "GET", &ext, &[], ""), Ok(()));
    // `operationName` picks the operation the limits apply to.
    let q = enc("query A { a { b { c } } } query B { a }");
    let p1 = policy(json!({"maxDepth": 2}));
    assert_eq!(
        run(
            &p1,
            "GET",
            &format!("/graphql?query={q}&operationName=B"),
            &[],
            ""
        ),
        Ok(())
    );
    assert_eq!(
        status(run(
            &p1,
            "GET",
            &format!("/graphql?query={q}&operationName=A"),
            &[],
            ""
        )),
        400
    );
    // Without a name, the first operation.
    assert_eq!(
        status(run(&p1, "GET", &format!("/graphql?query={q}"), &[], "")),
        400
    );
    assert_eq!(
        run(
            &p1,
            "GET",
            &format!("/graphql?query={q}&operationName=C"),
            &[],
            ""
        )
        .unwrap_err(),
        (
            400,
            "operationName".into(),
            "The operation named by 'operationName' could not be found.".into()
        )
    );
}

#[test]
fn post_bodies() {
    let p = policy(json!({}));
    let post =
        |uri: &str, headers: &[(&str, &str)], body: &str| run(&p, "POST", uri, headers, body);
    let json_ct = [("content-type", "application/json")];
    assert_eq!(post("/graphql", &json_ct, r#"{"query":"{a}"}"#), Ok(()));
    assert_eq!(
        post(
            "/graphql",
            &[("content-type", "application/json; charset=UTF-8")],
            r#"{"query":"{a}","variables":{"x":1},"operationName":null}"#
        ),
        Ok(())
    );
    assert_eq!(
        post(
            "/graphql",
            &[("content-type", "application/graphql")],
            "query { a { b } }"
        ),
        Ok(())
    );
    let detail = |r: Result<(), (u16, String, String)>| r.unwrap_err().2;
    assert_eq!(
        detail(post("/graphql?query=x", &json_ct, r#"{"query":"{a}"}"#)),
        "'query' is not allowed as query parameter while using POST."
    );
    // Other query parameters may be there.
    assert_eq!(
        post("/graphql?trace=1", &json_ct, r#"{"query":"{a}"}"#),
        Ok(())
    );
    assert_eq!(
        detail(post("/graphql", &[], r#"{"query":"{a}"}"#)),
        "No 'Content-Type' found."
    );
    assert_eq!(
        detail(post(
            "/graphql",
            &[
                ("content-type", "application/json"),
                ("content-type", "text/plain")
            ],
            r#"{"query":"{a}"}"#
        )),
        "Found multiple 'Content-Type' headers."
    );
    assert_eq!(
        detail(post("/graphql", &[("content-type", "text/plain")], "{a}")),
        "Expected 'Content-Type: application/json' or 'Content-Type: application/graphql'."
    );
    assert_eq!(
        detail(post("/graphql", &[("content-type", "nonsense")], "{a}")),
        "Could not parse 'Content-Type' header."
    );
    assert_eq!(
        detail(post(
            "/graphql",
            &[("content-type", "application/json; charset=ISO-8859-1")],
            r#"{"query":"{a}"}"#
        )),
        "Invalid charset in 'Content-Type': Expected 'utf-8'."
    );
    for bad in ["", "{", "[]", "null", r#"{"query":"{a}","query":"{b}"}"#] {
        assert_eq!(
            post("/graphql", &json_ct, bad),
            Err((400, "request".into(), "Error decoding JSON object.".into())),
            "{bad}"
        );
    }
    assert_eq!(
        detail(post("/graphql", &json_ct, r#"{"variables":{}}"#)),
        "Parameter 'query' is missing."
    );
    assert_eq!(
        detail(post("/graphql", &json_ct, r#"{"query":7}"#)),
        "Expected 'query' to be of type 'String'."
    );
    assert_eq!(
        detail(post(
            "/graphql",
            &json_ct,
            r#"{"query":"{a}","variables":[1]}"#
        )),
        "Expected 'variables' to be a JSON Object."
    );
    assert_eq!(
        detail(post(
            "/graphql",
            &json_ct,
            r#"{"query":"{a}","operationName":1}"#
        )),
        "Expected 'operationName' to be a String."
    );
    assert_eq!(
        detail(post(
            "/graphql",
            &json_ct,
            r#"{"query":"{a}","extensions":{}}"#
        )),
        "GraphQL 'extensions' are forbidden."
    );
    // `null` extensions are no extensions.
    assert_eq!(
        post("/graphql", &json_ct, r#"{"query":"{a}","extensions":null}"#),
        Ok(())
    );
    let allowing = policy(json!({"allowExtensions": "yes"}));
    assert_eq!(
        run(
            &allowing,
            "POST",
            "/graphql",
            &json_ct,
            r#"{"query":"{a}","extensions":{"x":1}}"#
        ),
        Ok(())
    );
    assert_eq!(
        run(
            &allowing,
            "POST",
            "/graphql",
            &json_ct,
            r#"{"query":"{a}","extensions":"x"}"#
        )
        .unwrap_err()
        .2,
        "Expected 'extensions' to be a JSON Object."
    );
    assert!(detail(post(
        "/graphql",
        &[
            ("content-type", "application/json"),
            ("content-encoding", "gzip")
        ],
        r#"{"query":"{a}"}"#
    ))
    .contains("compressed"));
}

#[test]
fn queries_that_do_not_parse() {
    let p = policy(json!({}));
    for q in [
        "{",
        "query {",
        "}",
        "",
        "{ a(x: ) }",
        "query Q($v: ) { a }",
        "{a}}",
    ] {
        assert_eq!(
            get(&p, q),
            Err((
                422,
                "syntax".into(),
                "Error parsing GraphQL request.".into()
            )),
            "{q}"
        );
    }
    // Type system definitions are not requests.
    let e = get(&p, "type Query { a: Int }").unwrap_err();
    assert_eq!((e.0, e.1.as_str()), (422, "syntax"));
    assert!(e.2.contains("only operations and fragments"));
    // Nested beyond what the parser accepts: refused without exhausting the stack.
    let deep = format!("{}{}", "{a".repeat(100_000), "}".repeat(100_000));
    let graphql = [("content-type", "application/graphql")];
    let e = run(&p, "POST", "/graphql", &graphql, &deep).unwrap_err();
    assert_eq!((e.0, e.1.as_str()), (400, "maxDepth"));
    let values = format!("{{a(x: {}1{})}}", "[".repeat(50_000), "]".repeat(50_000));
    assert_eq!(status(run(&p, "POST", "/graphql", &graphql, &values)), 400);
}

#[test]
fn global_names_must_be_unique() {
    let p = policy(json!({}));
    let detail = |q: &str| get(&p, q).unwrap_err().2;
    assert_eq!(
        detail("query A { a } query A { b }"),
        "Names of operationDefinitions must be unique."
    );
    assert_eq!(
        detail("{ a } query B { b }"),
        "If there is an anonymous operationDefinition, there may not be other operationDefinitions."
    );
    assert_eq!(
        detail("{ ...F } fragment F on T { a } fragment F on T { b }"),
        "Names of fragmentDefinitions must be unique."
    );
}

#[test]
fn fragments_are_expanded() {
    let p = policy(json!({"maxDepth": 3, "maxRecursion": 1}));
    assert_eq!(
        get(&p, "{ a { ...F } } fragment F on T { b { c } }"),
        Ok(())
    );
    assert_eq!(
        get(&p, "{ a { ...F } } fragment F on T { b { c { d } } }")
            .unwrap_err()
            .2,
        "Max depth exceeded."
    );
    // Inline fragments are not a level.
    assert_eq!(get(&p, "{ a { ... on T { b { ... { c } } } } }"), Ok(()));
    assert_eq!(
        get(&p, "{ a { ... on T { a } } }").unwrap_err().2,
        "Max recursion exceeded."
    );
    // Every branch is checked, not only the first.
    assert_eq!(
        get(&p, "{ a { b } x { y { z { w } } } }").unwrap_err().2,
        "Max depth exceeded."
    );
    // Aliases do not hide a field's name.
    assert_eq!(
        get(&p, "{ a { other: a } }").unwrap_err().2,
        "Max recursion exceeded."
    );
    assert_eq!(
        get(&p, "{ a { ...Missing } }").unwrap_err(),
        (
            400,
            "fragments".into(),
            "Did not find fragment 'Missing'.".into()
        )
    );
    assert_eq!(
        get(
            &p,
            "{ a { ...F } } fragment F on T { ...G } fragment G on T { ...F }"
        )
        .unwrap_err()
        .2,
        "Fragment spreads form cycle ('F')."
    );
    // The same fragment twice side by side is no cycle.
    assert_eq!(get(&p, "{ a { ...F ...F } } fragment F on T { b }"), Ok(()));
}

#[test]
fn exponential_fragments_are_refused_quickly() {
    let p = policy(json!({"maxDepth": 100, "maxRecursion": 100}));
    let mut q = String::from("{ ...F0 }");
    for i in 0..40 {
        q.push_str(&format!(
            " fragment F{i} on T {{ x ...F{n} ...F{n} }}",
            n = i + 1
        ));
    }
    q.push_str(" fragment F40 on T { y }");
    let started = std::time::Instant::now();
    assert_eq!(
        post_json(&p, &json!({ "query": q }).to_string()),
        Err((
            400,
            "complexity".into(),
            "The query is too complex to check.".into()
        ))
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    // A long chain of fragments without fields does not exhaust the stack.
    let mut q = String::from("{ ...F0 }");
    for i in 0..20_000 {
        q.push_str(&format!(" fragment F{i} on T {{ ...F{} }}", i + 1));
    }
    q.push_str(" fragment F20000 on T { y }");
    assert_eq!(post_json(&p, &json!({ "query": q }).to_string()), Ok(()));
}

#[test]
fn disallow_filters() {
    let p = policy(json!({"disallow": [{"mutations": {}}]}));
    assert_eq!(
        post_json(&p, r#"{"query":"mutation { a }"}"#)
            .unwrap_err()
            .2,
        "No mutations are permitted."
    );
    assert_eq!(get(&p, "{ a }"), Ok(()));
    let p = policy(json!({"disallow": [{"subscription": {}}]}));
    assert_eq!(
        post_json(&p, r#"{"query":"subscription { a }"}"#)
            .unwrap_err()
            .2,
        "Subscriptions are not permitted."
    );
    assert_eq!(post_json(&p, r#"{"query":"mutation { a }"}"#), Ok(()));
    let p = policy(json!({"disallow": [{"mutation": {"name": "drop"}}, {"introspection": null}]}));
    assert_eq!(
        post_json(&p, r#"{"query":"mutation { keep drop }"}"#)
            .unwrap_err()
            .2,
        "Mutation \"drop\" not permitted."
    );
    // Only top-level fields of mutations are mutations.
    assert_eq!(
        post_json(&p, r#"{"query":"mutation { keep { drop } }"}"#),
        Ok(())
    );
    assert_eq!(get(&p, "{ drop }"), Ok(()));
    // Introspection inside inline fragments counts; fragment spreads are not followed.
    assert_eq!(
        get(&p, "{ a { ... on T { __typename } } }").unwrap_err().2,
        "Introspection is not permitted."
    );
    assert_eq!(
        get(&p, "{ a { ...F } } fragment F on T { __typename }"),
        Ok(())
    );
    let e = GraphQlProtection::compile(
        serde_json::from_value(json!({"disallow": [{"mutation": " "}]})).unwrap(),
        &plain(),
    )
    .unwrap_err();
    assert_eq!(e.key, "disallow[0].mutation");
}

#[test]
fn unknown_settings_are_load_errors() {
    let kind = crate::registry::find("graphQLProtection").unwrap();
    for bad in [
        json!({"maxFragments": 3}),
        json!({"maxDepth": -1}),
        json!({"disallow": [{"directives": {}}]}),
        json!({"disallow": [{"mutation": {"name": "a", "x": 1}}]}),
        json!({"disallow": [{"introspection": {"x": 1}}]}),
    ] {
        assert!((kind.compile)(bad.clone(), &plain()).is_err(), "{bad}");
    }
    assert!((kind.compile)(json!({}), &plain()).is_ok());
}

#[test]
fn the_document_model() {
    let d = document::parse(
        "query Q { a: b { c ...F ... on T { d } } } mutation M { m1 m2 } fragment F on T { e }",
    )
    .unwrap();
    assert_eq!(d.operations.len(), 2);
    assert_eq!(d.operations[0].kind, OperationType::Query);
    assert_eq!(d.operations[0].name.as_deref(), Some("Q"));
    assert_eq!(
        d.operations[0].selections,
        vec![Selection::Field(
            "b".into(),
            vec![
                Selection::Field("c".into(), vec![]),
                Selection::Spread("F".into()),
                Selection::Inline(vec![Selection::Field("d".into(), vec![])]),
            ]
        )]
    );
    assert_eq!(d.mutation_count(), 2);
    assert_eq!(d.fragments[0].name, "F");
    assert!(!d.operations[0].explicit || d.operations[0].kind == OperationType::Query);
    assert!(!document::parse("{ a }").unwrap().operations[0].explicit);
    assert_eq!(document::parse("scalar X"), Err(ParseError::NotExecutable));
    assert_eq!(document::parse("# only a comment"), Err(ParseError::Syntax));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any text as a query, by GET and by POST, is accepted or refused with a problem; the
    /// check never panics.
    #[test]
    fn arbitrary_queries_never_panic(q in "\\PC{0,200}") {
        let p = policy(json!({"maxDepth": 4, "maxRecursion": 1, "disallow": [{"introspection": {}}, {"mutation": "a"}]}));
        let _ = get(&p, &q);
        let _ = post_json(&p, &json!({ "query": q }).to_string());
        let _ = run(&p, "POST", "/graphql", &[("content-type", "application/graphql")], &q);
        let _ = document::parse(&q);
    }

    /// Texts built from GraphQL's tokens, which parse far more often.
    #[test]
    fn token_soup_never_panics(
        parts in proptest::collection::vec(
            prop_oneof![
                Just("{"), Just("}"), Just("("), Just(")"), Just("["), Just("]"), Just("..."),
                Just("query"), Just("mutation"), Just("subscription"), Just("fragment"),
                Just("on"), Just("F"), Just("T"), Just("a"), Just("__schema"), Just(":"),
                Just("$v"), Just("1"), Just("\"s\""), Just("@skip"), Just("if"), Just("true"),
                Just("Q"), Just("!"), Just("="), Just(","),
            ],
            0..40,
        )
    ) {
        let q = parts.join(" ");
        let p = policy(json!({"maxDepth": 3, "maxRecursion": 1, "maxMutations": 1}));
        let _ = get(&p, &q);
        let _ = post_json(&p, &json!({ "query": q, "operationName": "Q" }).to_string());
        if let Ok(d) = document::parse(&q) {
            if let Some(op) = d.operations.first() {
                let _ = d.depth_error(op, 3, 1);
            }
        }
    }
}
