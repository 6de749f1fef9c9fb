//! `graphQLProtection` and `jsonRPCProtection` over real sockets, with configurations in the
//! shapes of Membrane's examples and tutorials (`graphql/graphql-validation`,
//! `security/50-GraphQL-Protection`, `security/json-rpc/10-…` and `20-…`, `json/30-…`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::Bytes;
use common::*;
use http_body_util::Full;
use serde_json::{json, Value};

fn load_error(yaml: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gateway.yaml");
    std::fs::write(&file, yaml).unwrap();
    match turnpike::start(vec![file]) {
        Ok(_) => panic!("the configuration loaded:\n{yaml}"),
        Err(e) => e.to_string(),
    }
}

/// A gateway started from `yaml` written beside `files`, so that relative locations resolve
/// against the configuration's folder.
fn start_with_files(yaml: &str, files: &[(&str, &str)]) -> TestGateway {
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

async fn post(addr: std::net::SocketAddr, path: &str, content_type: &str, body: &str) -> Reply {
    send(
        addr,
        req("POST", path)
            .header("content-type", content_type)
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap(),
    )
    .await
}

/// `s` percent-encoded for a query string (every byte but letters and digits).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

async fn graphql_get(addr: std::net::SocketAddr, query: &str) -> Reply {
    get(addr, &format!("/graphql?query={}", encode(query))).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graphql_protection_as_in_membranes_tutorial() {
    let backend = Backend::start().await;
    // tutorials/security/50-GraphQL-Protection.yaml, with a local target.
    let gw = TestGateway::start(&format!(
        r#"api:
  port: 0
  ip: 127.0.0.1
  flow:
    - request:
        - graphQLProtection:
            maxRecursion: 1
            maxMutations: 5
            maxDepth: 3
            disallow:
              - mutation: updateCategory
              - introspection: {{}}
  target:
    url: http://127.0.0.1:{}
"#,
        backend.port()
    ));
    let addr = gw.addr();

    let r = graphql_get(addr, "{products{id}}").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(backend.last().uri, "/graphql?query=%7Bproducts%7Bid%7D%7D");

    for (query, detail) in [
        (
            "query{categories{products{vendors{id}}}}",
            "Max depth exceeded.",
        ),
        ("{products{vendor{products}}}", "Max recursion exceeded."),
        (
            "{ __schema{mutationType {fields{name}}}}",
            "Introspection is not permitted.",
        ),
    ] {
        let r = graphql_get(addr, query).await;
        assert_eq!(r.status, 400, "{query}");
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
        let p = r.json();
        assert_eq!(p["type"], "urn:turnpike:problem:validation");
        assert_eq!(p["detail"], detail);
    }
    let seen = backend.count();

    let r = post(
        addr,
        "/graphql",
        "application/json",
        r#"{"query":"mutation { updateCategory(id:6,name:\"Dry Fruits\"){id}}"}"#,
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["detail"],
        "Mutation \"updateCategory\" not permitted."
    );
    assert_eq!(r.json()["violation"], "disallow");

    // Other mutations go through by POST, the body unchanged; by GET they may not.
    let body = r#"{"query":"mutation { addCategory(name:\"Nuts\"){id}}","variables":{}}"#;
    let r = post(addr, "/graphql", "application/json", body).await;
    assert_eq!(r.status, 200);
    assert_eq!(backend.last().body, body.as_bytes());
    let r = graphql_get(addr, "mutation { addCategory(name:\"Nuts\"){id}}").await;
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("POST"));
    assert_eq!(r.json()["type"], "urn:turnpike:problem:method-not-allowed");

    let r = post(
        addr,
        "/graphql",
        "application/graphql",
        "{ products { id } }",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(backend.last().body, "{ products { id } }".as_bytes());

    let r = post(addr, "/graphql", "application/graphql", "{ products { id }").await;
    assert_eq!(r.status, 422);
    assert_eq!(r.json()["detail"], "Error parsing GraphQL request.");

    let r = post(addr, "/graphql", "text/plain", "{ products { id } }").await;
    assert_eq!(r.status, 400);

    let r = send(
        addr,
        req("PUT", "/graphql?query=%7Ba%7D")
            .body(Full::new(Bytes::new()))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, POST"));
    assert_eq!(r.json()["detail"], "Invalid method.");

    let r = get(addr, "/graphql").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["detail"], "No query parameters found.");
    // Of the requests since the refused GETs, two passed: only those reached the backend.
    assert_eq!(backend.count(), seen + 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graphql_validation_example_and_load_errors() {
    let backend = Backend::start().await;
    // examples/graphql/graphql-validation/apis.yaml: only maxRecursion.
    let gw = TestGateway::start(&format!(
        r#"api:
  port: 0
  ip: 127.0.0.1
  flow:
    - request:
        - graphQLProtection:
            maxRecursion: 2
  target:
    url: http://127.0.0.1:{}
"#,
        backend.port()
    ));
    let addr = gw.addr();
    assert_eq!(graphql_get(addr, "{a{a{b}}}").await.status, 200);
    let r = graphql_get(addr, "{a{a{a}}}").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["violation"], "maxRecursion");
    // The default depth is 7.
    assert_eq!(graphql_get(addr, "{a{b{c{d{e{f{g}}}}}}}").await.status, 200);
    assert_eq!(
        graphql_get(addr, "{a{b{c{d{e{f{g{h}}}}}}}}").await.status,
        400
    );
    // A large nested query in a body is refused without harm, and the gateway goes on.
    let deep = format!("{}{}", "{a".repeat(20_000), "}".repeat(20_000));
    let r = post(addr, "/graphql", "application/graphql", &deep).await;
    assert_eq!(r.status, 400);
    assert_eq!(graphql_get(addr, "{a}").await.status, 200);

    let e = load_error(
        "api:\n  port: 0\n  flow:\n    - graphQLProtection:\n        maxFragments: 3\n  target:\n    url: http://127.0.0.1:1\n",
    );
    assert!(e.contains("maxFragments"), "{e}");
    let e = load_error(
        "api:\n  port: 0\n  flow:\n    - graphQLProtection:\n        allowedMethods: GET,PUT\n  target:\n    url: http://127.0.0.1:1\n",
    );
    assert!(e.contains("GET or POST"), "{e}");
    // It acts on requests only.
    let e = load_error(
        "api:\n  port: 0\n  flow:\n    - response:\n        - graphQLProtection: {}\n  target:\n    url: http://127.0.0.1:1\n",
    );
    assert!(e.contains("graphQLProtection"), "{e}");
}

fn rpc(id: Value, method: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_rpc_allow_deny_and_batches_as_in_membranes_tutorial() {
    let backend = Backend::start().await;
    // The protected API of tutorials/security/json-rpc/10-JSON-RPC-Allow-Deny-and-Batch-Validation.yaml.
    let gw = TestGateway::start(&format!(
        r#"api:
  port: 0
  ip: 127.0.0.1
  flow:
    - jsonRPCProtection:
        batch:
          enabled: true
          maxSize: 2
        methods:
          - allow: ping
          - allow: sum
          - deny: .*
  target:
    url: http://127.0.0.1:{}
"#,
        backend.port()
    ));
    let addr = gw.addr();
    let json = "application/json";

    let ping = rpc(json!(1), "ping").to_string();
    let r = post(addr, "/", json, &ping).await;
    assert_eq!(r.status, 200);
    assert_eq!(backend.last().body, ping.as_bytes());

    let r = post(addr, "/", json, &rpc(json!(5), "shutdown").to_string()).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(
        r.json(),
        json!({"jsonrpc": "2.0", "id": 5, "error": {"code": -32601, "message": "JSON-RPC method 'shutdown' is not allowed."}})
    );

    let two = json!([rpc(json!(1), "ping"), rpc(json!(2), "sum")]).to_string();
    assert_eq!(post(addr, "/", json, &two).await.status, 200);
    let three = json!([
        rpc(json!(1), "ping"),
        rpc(json!(2), "sum"),
        rpc(json!(3), "ping")
    ]);
    let r = post(addr, "/", json, &three.to_string()).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json(),
        json!([{"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "Batch request exceeds maxSize of 2."}}])
    );
    let mixed = json!([rpc(json!(1), "ping"), rpc(json!("x"), "drop")]);
    let r = post(addr, "/", json, &mixed.to_string()).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()[0]["id"], "x");

    let r = post(addr, "/", "text/plain", &ping).await;
    assert_eq!(r.status, 415);
    assert_eq!(
        r.json()["error"]["message"],
        "Content-Type text/plain is not supported. Expected application/json."
    );
    let r = post(addr, "/", json, "{not json").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["message"], "Invalid JSON-RPC payload");
    // Parser differentials: a second `method`, or one differing only in case, is refused and
    // never reaches the backend.
    let seen = backend.count();
    for attack in [
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","method":"deleteAll"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","Method":"deleteAll"}"#,
        r#"[{"jsonrpc":"2.0","id":1,"method":"ping","METHOD":"deleteAll"}]"#,
    ] {
        let r = post(addr, "/", json, attack).await;
        assert_eq!(r.status, 400, "{attack}: {}", r.text());
    }
    assert_eq!(backend.count(), seen);

    let r = post(
        addr,
        "/",
        json,
        r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["error"]["message"],
        "Invalid JSON-RPC request: Unsupported or missing jsonrpc version: 1.0"
    );
    // GET requests are not JSON-RPC: they pass.
    assert_eq!(get(addr, "/status/204").await.status, 204);
}

const ECHO_RESULT: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["message"],
  "properties": {"message": {"type": "string", "minLength": 1}},
  "additionalProperties": false
}"#;

/// tutorials/security/json-rpc/20-JSON-RPC-Protection-with-Schema-Validation.yaml, with free
/// ports and the backend's answer as a parameter.
fn tutorial20(front: u16, back: u16, answer: &str) -> String {
    format!(
        r#"api:
  port: {front}
  ip: 127.0.0.1
  flow:
      - jsonRPCProtection:
          batch:
            enabled: true
            maxSize: 2 # At most two calls per batch
          methods:
            - allow: '^get.*' # Allow read-only methods following the get* naming convention
            - deny: '.*' # deny for everything else
          schemaValidation:
            methods:
              'getEcho':
                params:
                  schema: # Inline schema for getEcho params
                    type: object
                    required:
                      - message
                    properties:
                      message:
                        type: string
                response:
                  location: echo-result.schema.json # Validate result for getEcho
  target:
    url: http://127.0.0.1:{back}

---
api:
  port: {back}
  ip: 127.0.0.1
  flow:
    - request:
        - log:
            message: "Accepted JSON-RPC request reached the upstream."
    - response:
        - static:
            contentType: application/json
            pretty: true
            src: |
{answer}
    - return:
        status: 200
"#
    )
}

fn indented(json: &str) -> String {
    json.lines()
        .map(|l| format!("              {l}\n"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_rpc_schema_validation_as_in_membranes_tutorial() {
    let (front, back) = (free_port(), free_port());
    let hello = indented(
        r#"{
  "jsonrpc": "2.0",
  "id": 1,
  "result": {
    "message": "Hello"
  }
}"#,
    );
    let gw = start_with_files(
        &tutorial20(front, back, &hello),
        &[("echo-result.schema.json", ECHO_RESULT)],
    );
    let addr = gw.addr_of(front);
    let json = "application/json";

    let echo = r#"{"jsonrpc":"2.0","id":1,"method":"getEcho","params":{"message":"Hi"}}"#;
    let r = post(addr, "/", json, echo).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["result"]["message"], "Hello");

    let r = post(
        addr,
        "/",
        json,
        r#"{"jsonrpc":"2.0","id":1,"method":"getEcho","params":{"message":42}}"#,
    )
    .await;
    assert_eq!(r.status, 400);
    let v = r.json();
    assert_eq!(v["id"], 1);
    assert_eq!(v["error"]["code"], -32602);
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("Invalid params for method 'getEcho': "));

    let r = post(
        addr,
        "/",
        json,
        &rpc(json!(1), "deleteEverything").to_string(),
    )
    .await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["error"]["code"], -32601);

    // The backend answers id 1 to a request with id 2 (after one without the required params).
    let r = post(addr, "/", json, &rpc(json!(2), "getEcho").to_string()).await;
    assert_eq!(r.status, 400, "params are missing: {}", r.text());
    let r = post(
        addr,
        "/",
        json,
        r#"{"jsonrpc":"2.0","id":2,"method":"getEcho","params":{"message":"Hi"}}"#,
    )
    .await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.json(),
        json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "JSON-RPC response id '1' does not match any request."}})
    );

    // The backend's result does not hold the schema: the client gets a JSON-RPC error.
    let bad = indented(r#"{"jsonrpc": "2.0", "id": 1, "result": {"message": ""}}"#);
    gw.rewrite(&tutorial20(front, back, &bad));
    gw.gw().reload().unwrap();
    let r = post(addr, "/", json, echo).await;
    assert_eq!(r.status, 500, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], -32603);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("Invalid result for method 'getEcho': "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_rpc_params_and_result_maps_and_load_errors() {
    let (front, back) = (free_port(), free_port());
    // tutorials/json/30-JSON-RPC-Protection.yaml (Membrane 7.2's form).
    let yaml = format!(
        r#"api:
  port: {front}
  ip: 127.0.0.1
  flow:
      - jsonRPCProtection:
          batch:
            enabled: true
            maxSize: 2
          methods:
            - allow: '^rpc\.(health|echo)$'
            - deny: '.*'
          params:
            'rpc.echo': echo-params.schema.json
          result:
            'rpc.echo': echo-result.schema.json
  target:
    url: http://127.0.0.1:{back}

---
api:
  port: {back}
  ip: 127.0.0.1
  flow:
    - response:
        - static:
            contentType: application/json
            src: '{{"jsonrpc": "2.0", "id": 1, "result": {{"message": "Hello"}}}}'
    - return:
        status: 200
"#
    );
    let params = r#"{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
  "required": ["message"], "properties": {"message": {"type": "string", "minLength": 1, "maxLength": 100}},
  "additionalProperties": false}"#;
    let gw = start_with_files(
        &yaml,
        &[
            ("echo-params.schema.json", params),
            ("echo-result.schema.json", ECHO_RESULT),
        ],
    );
    let addr = gw.addr_of(front);
    let json = "application/json";
    let r = post(
        addr,
        "/",
        json,
        r#"{"jsonrpc":"2.0","id":1,"method":"rpc.echo","params":{"message":"Hello"}}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = post(
        addr,
        "/",
        json,
        r#"{"jsonrpc":"2.0","id":1,"method":"rpc.echo","params":{"message":"Hello","x":1}}"#,
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["code"], -32602);
    // `rpc.health` has no schemas; `rpc.admin` is denied.
    assert_eq!(
        post(addr, "/", json, &rpc(json!(1), "rpc.health").to_string())
            .await
            .status,
        200
    );
    assert_eq!(
        post(addr, "/", json, &rpc(json!(1), "rpc.admin").to_string())
            .await
            .status,
        403
    );

    for (settings, expect) in [
        ("batch:\n          maxSize: 0", "greater than 0"),
        (
            "methods:\n          - allow: '('",
            "not a regular expression",
        ),
        ("params:\n          m: missing.schema.json", "params"),
        ("maxBatch: 2", "maxBatch"),
        (
            "schemaValidation:\n          methods:\n            m:\n              params: {}",
            "exactly one of `location` and `schema`",
        ),
    ] {
        let e = load_error(&format!(
            "api:\n  port: 0\n  flow:\n    - jsonRPCProtection:\n        {settings}\n  target:\n    url: http://127.0.0.1:1\n"
        ));
        assert!(e.contains(expect), "{settings}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trim_in_an_if_test() {
    // The shape of the backend of tutorials/security/json-rpc/10-…: a batch-looking payload
    // gets a batch answer. Here the payload's first bytes come in a query parameter.
    let gw = TestGateway::start(
        r#"api:
  port: 0
  ip: 127.0.0.1
  flow:
    - if:
        test: params['p'].trim().startsWith('[')
        flow:
          - static:
              contentType: application/json
              src: '[{"jsonrpc": "2.0", "id": 1, "result": {"ok": true}}]'
          - return:
              status: 200
        else:
          - static:
              contentType: application/json
              src: '{"jsonrpc": "2.0", "id": 1, "result": {"ok": true}}'
          - return:
              status: 200
"#,
    );
    let addr = gw.addr();
    let r = get(addr, "/?p=%20%0A%09%5B%20%7B").await;
    assert!(r.json().is_array(), "{}", r.text());
    let r = get(addr, "/?p=%20%7B").await;
    assert!(r.json().is_object(), "{}", r.text());
}
