#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use serde_json::{json, Value};
use turnpike_core::{Body, BodyNeed, CompileContext, Exchange, Outcome, Policy, PolicyFactory};

use super::JsonRpcProtection;
use crate::testutil::{exchange, plain};

/// A folder of schema files, new for each test that asks for one.
fn folder(name: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("turnpike-jsonrpc-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (f, text) in files {
        std::fs::write(dir.join(f), text).unwrap();
    }
    dir
}

fn compile_in(dir: &std::path::Path, settings: Value) -> Result<JsonRpcProtection, String> {
    let ctx = CompileContext {
        base_dir: dir,
        ..plain()
    };
    let kind = crate::registry::find("jsonRPCProtection").unwrap();
    // Through the registry, so that unknown settings are refused as at load.
    (kind.compile)(settings.clone(), &ctx)
        .map_err(|es| format!("{}: {}", es[0].key, es[0].message))?;
    JsonRpcProtection::compile(serde_json::from_value(settings).unwrap(), &ctx)
        .map_err(|e| format!("{}: {}", e.key, e.message))
}

fn policy(settings: Value) -> JsonRpcProtection {
    compile_in(std::path::Path::new("."), settings).unwrap()
}

/// The settings of Membrane's tutorial `security/json-rpc/10-…`.
fn tutorial10() -> JsonRpcProtection {
    policy(json!({
        "batch": {"enabled": true, "maxSize": 2},
        "methods": [{"allow": "ping"}, {"allow": "sum"}, {"deny": ".*"}]
    }))
}

fn post(body: &str) -> Exchange {
    exchange("POST", "/", &[("content-type", "application/json")], body)
}

/// `None` when the request passes, else the status and the JSON body.
fn request(p: &JsonRpcProtection, ex: &mut Exchange) -> Option<(u16, Value)> {
    match p.on_request(ex) {
        Outcome::Continue => None,
        Outcome::Respond(r) => Some(answer(r)),
        o => panic!("unexpected {o:?}"),
    }
}

fn answer(r: http::Response<Body>) -> (u16, Value) {
    assert_eq!(r.headers()["content-type"], "application/json");
    let status = r.status().as_u16();
    let Body::Full(Some(b)) = r.into_body() else {
        panic!("no body")
    };
    (status, serde_json::from_slice(&b).unwrap())
}

fn check(p: &JsonRpcProtection, body: &str) -> Option<(u16, Value)> {
    request(p, &mut post(body))
}

fn error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

#[test]
fn the_tutorials_allow_and_deny_rules_and_batches() {
    let p = tutorial10();
    assert_eq!(
        check(&p, r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
        None
    );
    assert_eq!(
        check(
            &p,
            r#"{"jsonrpc":"2.0","id":1,"method":"sum","params":[1,2]}"#
        ),
        None
    );
    assert_eq!(
        check(&p, r#"{"jsonrpc":"2.0","id":7,"method":"shutdown"}"#),
        Some((
            403,
            error(
                json!(7),
                -32601,
                "JSON-RPC method 'shutdown' is not allowed."
            )
        ))
    );
    // The whole name must match: `pings` is not `ping`.
    assert_eq!(
        check(&p, r#"{"jsonrpc":"2.0","id":"a","method":"pings"}"#)
            .unwrap()
            .1["id"],
        "a"
    );
    // A notification has no id to answer with.
    assert_eq!(
        check(&p, r#"{"jsonrpc":"2.0","method":"shutdown"}"#)
            .unwrap()
            .1["id"],
        Value::Null
    );
    assert_eq!(
        check(
            &p,
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"sum"}]"#
        ),
        None
    );
    assert_eq!(
        check(
            &p,
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"drop"}]"#
        ),
        Some((
            403,
            json!([error(
                json!(2),
                -32601,
                "JSON-RPC method 'drop' is not allowed."
            )])
        ))
    );
    let three = r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"},{"jsonrpc":"2.0","id":3,"method":"ping"}]"#;
    assert_eq!(
        check(&p, three),
        Some((
            400,
            json!([error(
                Value::Null,
                -32600,
                "Batch request exceeds maxSize of 2."
            )])
        ))
    );
    assert_eq!(
        check(&p, " []").unwrap().1[0]["error"]["message"],
        "Batch requests must not be empty."
    );
    assert_eq!(
        check(&p, "[1]").unwrap().1[0]["error"]["message"],
        "Each batch entry must be a JSON-RPC request object."
    );
    assert_eq!(
        check(&p, r#"[{"jsonrpc":"2.0","id":1,"method":3}]"#)
            .unwrap()
            .1[0]["error"]["message"],
        "Invalid JSON-RPC request in batch: 'method' must be a string"
    );
    let off = policy(json!({"batch": {"enabled": false}}));
    assert_eq!(
        check(&off, r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#),
        Some((
            400,
            json!([error(Value::Null, -32600, "Batch requests are disabled.")])
        ))
    );
    // Without rules every method passes; batches hold up to 100 requests by default.
    let open = policy(json!({}));
    let hundred: Vec<Value> = (0..100)
        .map(|i| json!({"jsonrpc": "2.0", "id": i, "method": "anything"}))
        .collect();
    assert_eq!(
        check(&open, &Value::Array(hundred.clone()).to_string()),
        None
    );
    let mut more = hundred;
    more.push(json!({"jsonrpc": "2.0", "method": "x"}));
    assert_eq!(
        check(&open, &Value::Array(more).to_string()).unwrap().0,
        400
    );
    assert_eq!(open.response_body_need(), BodyNeed::None);
    assert_eq!(open.body_need(), BodyNeed::Buffer);
}

#[test]
fn the_first_matching_rule_decides() {
    let p = policy(json!({"methods": [
        {"allow": {"pattern": "^rpc\\.(health|echo)$"}},
        {"deny": "^rpc\\..*"}
    ]}));
    assert_eq!(
        check(&p, r#"{"jsonrpc":"2.0","id":1,"method":"rpc.echo"}"#),
        None
    );
    assert_eq!(
        check(&p, r#"{"jsonrpc":"2.0","id":1,"method":"rpc.admin"}"#)
            .unwrap()
            .0,
        403
    );
    // No rule matches: allowed.
    assert_eq!(
        check(&p, r#"{"jsonrpc":"2.0","id":1,"method":"other"}"#),
        None
    );
}

#[test]
fn structure_of_requests() {
    let p = policy(json!({}));
    let message = |body: &str| {
        let (status, v) = check(&p, body).unwrap();
        assert_eq!(status, 400, "{body}");
        assert_eq!(v["error"]["code"], -32600, "{body}");
        v["error"]["message"].as_str().unwrap().to_owned()
    };
    assert_eq!(message("{"), "Invalid JSON-RPC payload");
    assert_eq!(
        message("3"),
        "JSON-RPC payload must be an object or batch array."
    );
    assert_eq!(
        message(r#"{"jsonrpc":"1.0","method":"a"}"#),
        "Invalid JSON-RPC request: Unsupported or missing jsonrpc version: 1.0"
    );
    assert_eq!(
        message(r#"{"method":"a"}"#),
        "Invalid JSON-RPC request: Unsupported or missing jsonrpc version: null"
    );
    assert_eq!(
        message(r#"{"jsonrpc":"2.0"}"#),
        "Invalid JSON-RPC request: 'method' must be a string"
    );
    assert_eq!(
        message(r#"{"jsonrpc":"2.0","method":"a","id":true}"#),
        "Invalid JSON-RPC request: 'id' must be string, number, or null"
    );
    assert_eq!(
        message(r#"{"jsonrpc":"2.0","method":"a","params":"x"}"#),
        "Invalid JSON-RPC request: 'params' must be array or object"
    );
    // A batch that is not JSON is answered as a batch.
    assert!(check(&p, "[{").unwrap().1.is_array());
    // Other methods, and empty bodies, pass unchecked.
    let mut get = exchange("GET", "/", &[], "nonsense");
    assert_eq!(request(&p, &mut get), None);
    assert_eq!(check(&p, ""), None);
    let mut text = exchange("POST", "/", &[("content-type", "text/plain")], "{}");
    assert_eq!(
        request(&p, &mut text),
        Some((
            415,
            error(
                Value::Null,
                -32600,
                "Content-Type text/plain is not supported. Expected application/json."
            )
        ))
    );
    let mut none = exchange("POST", "/", &[], "[]");
    let (status, v) = request(&p, &mut none).unwrap();
    assert_eq!(status, 415);
    assert_eq!(
        v[0]["error"]["message"],
        "Content-Type null is not supported. Expected application/json."
    );
    let mut plus = exchange(
        "POST",
        "/",
        &[("content-type", "application/rpc+json; charset=utf-8")],
        r#"{"jsonrpc":"2.0","method":"a"}"#,
    );
    assert_eq!(request(&p, &mut plus), None);
}

const ECHO_RESULT: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["message"],
  "properties": {"message": {"type": "string"}},
  "additionalProperties": false
}"#;

/// The settings of Membrane's tutorial `security/json-rpc/20-…`.
fn tutorial20(dir: &std::path::Path) -> JsonRpcProtection {
    compile_in(
        dir,
        json!({
            "batch": {"enabled": true, "maxSize": 2},
            "methods": [{"allow": "^get.*"}, {"deny": ".*"}],
            "schemaValidation": {"methods": {"getEcho": {
                "params": {"schema": {
                    "type": "object",
                    "required": ["message"],
                    "properties": {"message": {"type": "string"}}
                }},
                "response": {"location": "echo-result.schema.json"}
            }}}
        }),
    )
    .unwrap()
}

/// Runs a request that passes, then the response phase with `body` as the backend's answer.
fn round_trip(p: &JsonRpcProtection, req: &str, body: &str) -> Option<(u16, Value)> {
    let mut ex = post(req);
    assert_eq!(request(p, &mut ex), None, "{req}");
    let mut res = http::Response::new(Body::full(body.to_owned()));
    res.headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    ex.response = Some(res);
    match p.on_response(&mut ex) {
        Outcome::Continue => None,
        Outcome::Respond(r) => Some(answer(r)),
        o => panic!("unexpected {o:?}"),
    }
}

#[test]
fn params_and_results_against_schemas() {
    let dir = folder("t20", &[("echo-result.schema.json", ECHO_RESULT)]);
    let p = tutorial20(&dir);
    assert_eq!(p.response_body_need(), BodyNeed::Buffer);
    assert_eq!(p.files(), vec![dir.join("echo-result.schema.json")]);
    let echo = r#"{"jsonrpc":"2.0","id":1,"method":"getEcho","params":{"message":"Hello"}}"#;
    assert_eq!(check(&p, echo), None);
    let (status, v) = check(
        &p,
        r#"{"jsonrpc":"2.0","id":1,"method":"getEcho","params":{"message":3}}"#,
    )
    .unwrap();
    assert_eq!(status, 400);
    assert_eq!(v["id"], 1);
    assert_eq!(v["error"]["code"], -32602);
    let m = v["error"]["message"].as_str().unwrap();
    assert!(
        m.starts_with("Invalid params for method 'getEcho': "),
        "{m}"
    );
    assert!(m.contains("string"), "{m}");
    // Missing params are checked as null.
    assert_eq!(
        check(&p, r#"{"jsonrpc":"2.0","id":1,"method":"getEcho"}"#)
            .unwrap()
            .1["error"]["code"],
        -32602
    );
    // Methods without a schema are not checked.
    assert_eq!(
        check(
            &p,
            r#"{"jsonrpc":"2.0","id":1,"method":"getTime","params":[1]}"#
        ),
        None
    );

    let hello = r#"{"jsonrpc":"2.0","id":1,"result":{"message":"Hello"}}"#;
    assert_eq!(round_trip(&p, echo, hello), None);
    let (status, v) = round_trip(
        &p,
        echo,
        r#"{"jsonrpc":"2.0","id":1,"result":{"message":"Hello","extra":1}}"#,
    )
    .unwrap();
    assert_eq!(status, 500);
    assert_eq!(v["id"], 1);
    assert_eq!(v["error"]["code"], -32603);
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("Invalid result for method 'getEcho': "));
    assert_eq!(
        round_trip(
            &p,
            echo,
            r#"{"jsonrpc":"2.0","id":2,"result":{"message":"x"}}"#
        )
        .unwrap()
        .1["error"]["message"],
        "JSON-RPC response id '2' does not match any request."
    );
    // `1` and `"1"` are different ids.
    assert_eq!(
        round_trip(
            &p,
            echo,
            r#"{"jsonrpc":"2.0","id":"1","result":{"message":"x"}}"#
        )
        .unwrap()
        .0,
        500
    );
    // Error responses pass without an error schema.
    assert_eq!(
        round_trip(
            &p,
            echo,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"no"}}"#
        ),
        None
    );
    let message = |body: &str| {
        round_trip(&p, echo, body).unwrap().1["error"]["message"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(message(""), "JSON-RPC response must not be empty.");
    assert_eq!(message("{"), "Invalid JSON-RPC response payload");
    assert_eq!(message("[]"), "JSON-RPC response must be an object.");
    assert_eq!(
        message(r#"{"jsonrpc":"2.0","result":{}}"#),
        "Invalid JSON-RPC response: 'id' is required"
    );
    assert_eq!(
        message(r#"{"jsonrpc":"2.0","id":1,"result":{},"error":{}}"#),
        "Invalid JSON-RPC response: 'result' and 'error' are mutually exclusive"
    );
    assert_eq!(
        message(r#"{"jsonrpc":"2.0","id":1}"#),
        "Invalid JSON-RPC response: either 'result' or 'error' must be present"
    );
    assert_eq!(
        message(r#"{"jsonrpc":"2.0","id":1,"error":{"code":"x","message":"m"}}"#),
        "Invalid JSON-RPC response: 'code' must be an integer"
    );
    // A batch is answered by an array.
    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"getEcho","params":{"message":"a"}},{"jsonrpc":"2.0","id":2,"method":"getTime"}]"#;
    assert_eq!(
        round_trip(
            &p,
            batch,
            r#"[{"jsonrpc":"2.0","id":2,"result":5},{"jsonrpc":"2.0","id":1,"result":{"message":"a"}}]"#
        ),
        None
    );
    let (status, v) = round_trip(&p, batch, hello).unwrap();
    assert_eq!(status, 500);
    assert_eq!(
        v,
        json!([error(
            Value::Null,
            -32603,
            "JSON-RPC batch response must be an array."
        )])
    );
    // The gateway's own problems pass as they are.
    let mut ex = post(echo);
    assert_eq!(request(&p, &mut ex), None);
    let mut res = http::Response::new(Body::full("{}"));
    res.headers_mut()
        .insert("content-type", "application/problem+json".parse().unwrap());
    ex.response = Some(res);
    assert!(matches!(p.on_response(&mut ex), Outcome::Continue));
    // A refused request leaves nothing for the response phase.
    let mut ex = post(r#"{"jsonrpc":"2.0","id":1,"method":"deleteAll"}"#);
    assert!(request(&p, &mut ex).is_some());
    ex.response = Some(http::Response::new(Body::full("garbage")));
    assert!(matches!(p.on_response(&mut ex), Outcome::Continue));
}

#[test]
fn error_schemas_and_the_map_form() {
    let dir = folder(
        "maps",
        &[
            (
                "echo-params.schema.json",
                r#"{"type":"object","required":["message"],"properties":{"message":{"type":"string","minLength":1}},"additionalProperties":false}"#,
            ),
            (
                "echo-result.schema.yaml",
                "type: object\nrequired: [message]\n",
            ),
            (
                "error.schema.json",
                r#"{"type":"object","properties":{"code":{"maximum":-32000}}}"#,
            ),
        ],
    );
    // Membrane's older form: method name → schema file.
    let p = compile_in(
        &dir,
        json!({
            "methods": [{"allow": "^rpc\\.(health|echo)$"}, {"deny": ".*"}],
            "params": {"rpc.echo": "echo-params.schema.json"},
            "result": {"rpc.echo": "echo-result.schema.yaml"}
        }),
    )
    .unwrap();
    let echo = r#"{"jsonrpc":"2.0","id":1,"method":"rpc.echo","params":{"message":"hi"}}"#;
    assert_eq!(check(&p, echo), None);
    assert_eq!(
        check(
            &p,
            r#"{"jsonrpc":"2.0","id":1,"method":"rpc.echo","params":{"message":""}}"#
        )
        .unwrap()
        .1["error"]["code"],
        -32602
    );
    assert_eq!(
        round_trip(
            &p,
            echo,
            r#"{"jsonrpc":"2.0","id":1,"result":{"message":"hi"}}"#
        ),
        None
    );
    assert_eq!(
        round_trip(&p, echo, r#"{"jsonrpc":"2.0","id":1,"result":{}}"#)
            .unwrap()
            .0,
        500
    );
    let p = compile_in(
        &dir,
        json!({"schemaValidation": {"error": {"location": "error.schema.json"}}}),
    )
    .unwrap();
    let req = r#"{"jsonrpc":"2.0","id":1,"method":"x"}"#;
    assert_eq!(
        round_trip(
            &p,
            req,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"m"}}"#
        ),
        None
    );
    let (status, v) = round_trip(
        &p,
        req,
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"m"}}"#,
    )
    .unwrap();
    assert_eq!(status, 500);
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("Invalid error response: "));
    // Results are not checked without result schemas.
    assert_eq!(
        round_trip(&p, req, r#"{"jsonrpc":"2.0","id":9,"result":1}"#),
        None
    );
    // Notifications only: an empty answer is fine.
    assert_eq!(
        round_trip(&p, r#"{"jsonrpc":"2.0","method":"x"}"#, ""),
        None
    );
}

#[test]
fn settings_errors() {
    let dir = folder("errors", &[("s.json", "{}"), ("broken.json", "{")]);
    let e = |settings: Value| compile_in(&dir, settings).err().unwrap();
    assert_eq!(
        e(json!({"batch": {"maxSize": 0}})),
        "batch.maxSize: batch maxSize must be greater than 0"
    );
    assert!(e(json!({"methods": [{"allow": "a", "deny": "b"}]})).starts_with("methods[0]:"));
    assert!(e(json!({"methods": [{}]})).starts_with("methods[0]:"));
    assert!(e(json!({"methods": [{"deny": " "}]})).contains("must not be empty"));
    assert!(e(json!({"methods": [{"deny": "("}]})).contains("not a regular expression"));
    assert!(e(json!({"methods": [{"allow": {"pattern": "a", "x": 1}}]})).contains("methods"));
    assert!(e(json!({"maxBatch": 3})).contains("maxBatch"));
    assert!(
        e(json!({"schemaValidation": {"methods": {"m": {"params": {}}}}}))
            .contains("exactly one of `location` and `schema`")
    );
    assert!(e(json!({"schemaValidation": {"methods": {"m": {"params": {"location": "s.json", "schema": {"type": "object"}}}}}}))
        .contains("exactly one"));
    assert!(
        e(json!({"schemaValidation": {"methods": {"m": {"params": {"schema": {}}}}}}))
            .contains("must not be empty")
    );
    assert!(e(
        json!({"schemaValidation": {"methods": {"m": {"params": {"schema": {"type": 3}}}}}})
    )
    .contains("invalid JSON Schema"));
    assert!(e(
        json!({"schemaValidation": {"methods": {"m": {"response": {"location": "missing.json"}}}}})
    )
    .starts_with("schemaValidation.methods.m.response.location:"));
    assert!(e(json!({"params": {"m": "broken.json"}})).starts_with("params.m:"));
    assert!(
        e(json!({"schemaValidation": {"methods": {" ": {"params": {"location": "s.json"}}}}}))
            .contains("method name must not be empty")
    );
    assert!(e(json!({"params": {"m": "s.json"}, "schemaValidation": {"methods": {"m": {"params": {"location": "s.json"}}}}}))
        .contains("has a schema already"));
    assert!(e(
        json!({"schemaValidation": {"methods": {"m": {"results": {"location": "s.json"}}}}})
    )
    .contains("results"));
    assert!(compile_in(&dir, json!({"params": {"m": "s.json"}})).is_ok());
}
