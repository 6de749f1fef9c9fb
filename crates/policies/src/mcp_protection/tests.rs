use super::*;
use crate::testutil::{exchange, plain};
use http_body_util::BodyExt;

/// A body that yields its chunks one frame each.
struct Chunks(std::collections::VecDeque<Bytes>);

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        Poll::Ready(self.get_mut().0.pop_front().map(|c| Ok(Frame::data(c))))
    }
}

fn policy(v: Value) -> McpProtection {
    let s: McpProtectionSettings = serde_json::from_value(v).unwrap();
    McpProtection::compile(s, &plain()).unwrap()
}

/// Membrane's tutorial: two tools allowed, every other denied.
fn tutorial() -> McpProtection {
    policy(serde_json::json!({"tools": [
        {"allow": "^(listProxies|getStatistics)$"},
        {"deny": ".*"}
    ]}))
}

fn call(name: &str, id: i64) -> Value {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                       "params": {"name": name, "arguments": {}}})
}

fn post(p: &McpProtection, body: &str) -> (Outcome, Exchange) {
    let mut ex = exchange(
        "POST",
        "/mcp",
        &[("content-type", "application/json")],
        body,
    );
    (p.on_request(&mut ex), ex)
}

fn refused(o: Outcome) -> (u16, Value) {
    match o {
        Outcome::Respond(r) => {
            let status = r.status().as_u16();
            let body = match r.into_body() {
                Body::Full(Some(b)) => b,
                other => panic!("{other:?}"),
            };
            (status, serde_json::from_slice(&body).unwrap())
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn rules_decide_in_order_and_unmatched_tools_pass() {
    let p = tutorial();
    assert!(p.rules.allows("listProxies"));
    assert!(!p.rules.allows("listProxiesX"));
    assert!(!p.rules.allows("deleteProxy"));
    let open = policy(serde_json::json!({"tools": [{"deny": "delete.*"}]}));
    assert!(open.rules.allows("read"));
    assert!(!open.rules.allows("deleteAll"));
}

#[test]
fn a_denied_tool_call_is_a_json_rpc_error() {
    let p = tutorial();
    let (o, _) = post(&p, &call("listProxies", 1).to_string());
    assert!(matches!(o, Outcome::Continue));
    let (o, _) = post(&p, &call("deleteProxy", 7).to_string());
    let (status, body) = refused(o);
    assert_eq!(status, 403);
    assert_eq!(body["id"], 7);
    assert_eq!(body["error"]["code"], -32601);
    assert_eq!(
        body["error"]["message"],
        "MCP tool 'deleteProxy' is not allowed."
    );
    // In a batch, one denied call refuses the batch (an array answer).
    let batch = Value::Array(vec![call("listProxies", 1), call("shutdown", 2)]);
    let (status, body) = refused(post(&p, &batch.to_string()).0);
    assert_eq!(status, 403);
    assert_eq!(body[0]["id"], 2);
    // Other methods are not the rules' business.
    let (o, _) = post(
        &p,
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
    );
    assert!(matches!(o, Outcome::Continue));
}

#[test]
fn malformed_calls_are_refused_rather_than_guessed() {
    let p = tutorial();
    let (status, body) = refused(post(&p, "{not json").0);
    assert_eq!(
        (status, body["error"]["code"].as_i64()),
        (400, Some(-32600))
    );
    let (status, body) = refused(
        post(
            &p,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":5}}"#,
        )
        .0,
    );
    assert_eq!((status, body["id"].as_i64()), (400, Some(3)));
    assert_eq!(body["error"]["code"], -32602);
    let mut ex = exchange("POST", "/mcp", &[("content-type", "text/plain")], "{}");
    assert_eq!(refused(p.on_request(&mut ex)).0, 415);
    let mut ex = exchange(
        "POST",
        "/mcp",
        &[
            ("content-type", "application/json"),
            ("content-encoding", "gzip"),
        ],
        "{}",
    );
    assert_eq!(refused(p.on_request(&mut ex)).0, 415);
    // GET opens the server's event stream: nothing to check.
    let mut ex = exchange("GET", "/mcp", &[], "");
    assert!(matches!(p.on_request(&mut ex), Outcome::Continue));
}

fn tools_list_answer(id: i64) -> Value {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [
        {"name": "listProxies", "description": "lists"},
        {"name": "deleteProxy", "description": "deletes"},
        {"name": "getStatistics"}
    ]}})
}

#[test]
fn tools_list_answers_in_json_lose_denied_tools() {
    let p = tutorial();
    let (o, mut ex) = post(
        &p,
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{}}"#,
    );
    assert!(matches!(o, Outcome::Continue));
    assert!(ex.directives.buffer_response.is_some());
    let mut r = http::Response::new(Body::full(tools_list_answer(4).to_string()));
    r.headers_mut()
        .insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
    ex.response = Some(r);
    assert!(matches!(p.on_response(&mut ex), Outcome::Continue));
    let body = ex.response_bytes().unwrap().clone();
    let v: Value = serde_json::from_slice(&body).unwrap();
    let names: Vec<&str> = v["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["listProxies", "getStatistics"]);
    // An answer to another id is left alone.
    let mut other = tools_list_answer(5);
    assert!(!filter_message(
        &mut other,
        &[serde_json::json!(4)],
        &p.rules
    ));
}

#[tokio::test]
async fn tools_list_answers_in_event_streams_are_filtered_as_they_stream() {
    let p = tutorial();
    let (_, mut ex) = post(&p, r#"{"jsonrpc":"2.0","id":"a","method":"tools/list"}"#);
    let answer = serde_json::json!({"jsonrpc": "2.0", "id": "a", "result": {"tools": [
        {"name": "deleteProxy"}, {"name": "getStatistics"}]}});
    let stream = format!(
        ": comment\r\n\r\nevent: message\r\nid: 1\r\ndata: {}\r\n\r\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}}\n\n",
        answer
    );
    // Sent in small pieces, splitting events and line ends.
    let chunks = stream
        .as_bytes()
        .chunks(7)
        .map(Bytes::copy_from_slice)
        .collect();
    let body = Body::stream(Chunks(chunks));
    let mut r = http::Response::new(body);
    r.headers_mut()
        .insert(header::CONTENT_TYPE, "text/event-stream".parse().unwrap());
    ex.response = Some(r);
    assert!(matches!(p.on_response(&mut ex), Outcome::Continue));
    let out = ex
        .response
        .take()
        .unwrap()
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes();
    let out = String::from_utf8(out.to_vec()).unwrap();
    assert!(out.starts_with(": comment\r\n\r\n"), "{out}");
    assert!(out.contains("event: message\nid: 1\ndata: {"), "{out}");
    assert!(!out.contains("deleteProxy"), "{out}");
    assert!(out.contains("getStatistics"), "{out}");
    assert!(
        out.ends_with("data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n"),
        "{out}"
    );
}

#[test]
fn event_ends_are_found_with_any_line_end() {
    assert_eq!(event_end(b"data: x\n\nrest"), Some(9));
    assert_eq!(event_end(b"data: x\r\n\r\nrest"), Some(11));
    assert_eq!(event_end(b"data: x\r\rrest"), Some(9));
    assert_eq!(event_end(b"data: x\n"), None);
    assert_eq!(event_end(b"data: x\r"), None);
    assert_eq!(event_end(b"\n"), Some(1));
}

proptest::proptest! {
    /// Any stream, cut anywhere, comes out as it went in when nothing is filtered.
    #[test]
    fn unrelated_streams_pass_byte_for_byte(text in "[a-z:{} \\r\\n\"]{0,200}", cut in 1usize..20) {
        let filter = |input: &[u8]| {
            let mut f = SseFilter {
                inner: Body::Empty,
                pending: Vec::new(),
                ids: Arc::new(vec![serde_json::json!(1)]),
                rules: Arc::new(Rules(Vec::new())),
                done: false,
            };
            let mut out = Vec::new();
            for c in input.chunks(cut) {
                f.pending.extend_from_slice(c);
                if let Some(b) = f.take_events() {
                    out.extend_from_slice(&b);
                }
            }
            out.extend_from_slice(&f.pending);
            out
        };
        proptest::prop_assert_eq!(filter(text.as_bytes()), text.as_bytes().to_vec());
    }
}

#[test]
fn settings_errors() {
    let parse = |v: Value| serde_json::from_value::<McpProtectionSettings>(v);
    assert!(parse(serde_json::json!({})).is_err());
    assert!(parse(serde_json::json!({"tools": [], "resources": []})).is_err());
    let compile = |v| {
        McpProtection::compile(parse(v).unwrap(), &plain())
            .map(|_| ())
            .map_err(|e| e.key)
    };
    assert_eq!(
        compile(serde_json::json!({"tools": []})),
        Err("tools".into())
    );
    assert_eq!(
        compile(serde_json::json!({"tools": [{"allow": "a", "deny": "b"}]})),
        Err("tools[0]".into())
    );
    assert_eq!(
        compile(serde_json::json!({"tools": [{"deny": "("}]})),
        Err("tools[0].deny".into())
    );
    assert_eq!(
        compile(serde_json::json!({"tools": [{"allow": {"pattern": " "}}]})),
        Err("tools[0].allow".into())
    );
}
