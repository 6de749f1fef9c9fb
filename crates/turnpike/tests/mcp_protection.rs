//! `mcpProtection` over real sockets, configured as Membrane's tutorial
//! `mcp/20-MCP-Protection.yaml`, in front of a small MCP server that answers `tools/list` as
//! JSON or as an event stream it keeps open.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

type Events = Arc<Mutex<Option<tokio::sync::oneshot::Sender<()>>>>;

/// An MCP server on 127.0.0.1:0: `tools/list` answers three tools (as an event stream when the
/// client accepts one, which stays open until `close` fires), `tools/call` echoes the tool.
struct McpServer {
    addr: SocketAddr,
    calls: Arc<Mutex<Vec<String>>>,
    close: Events,
}

type Out = http_body_util::combinators::BoxBody<Bytes, Infallible>;

async fn answer(
    req: Request<Incoming>,
    calls: Arc<Mutex<Vec<String>>>,
    close: Events,
) -> Response<Out> {
    let sse = req
        .headers()
        .get("accept")
        .is_some_and(|v| v.to_str().unwrap_or("").contains("text/event-stream"));
    let body = req.into_body().collect().await.unwrap().to_bytes();
    let msg: Value = serde_json::from_slice(&body).unwrap();
    let id = msg["id"].clone();
    let json_response = |v: Value| {
        Response::builder()
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(v.to_string())).boxed())
            .unwrap()
    };
    match msg["method"].as_str() {
        Some("tools/call") => {
            let name = msg["params"]["name"].as_str().unwrap().to_owned();
            calls.lock().unwrap().push(name.clone());
            json_response(json!({"jsonrpc": "2.0", "id": id,
                "result": {"content": [{"type": "text", "text": format!("called {name}")}]}}))
        }
        Some("tools/list") => {
            let list = json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [
                {"name": "listProxies", "inputSchema": {"type": "object"}},
                {"name": "deleteProxy", "inputSchema": {"type": "object"}},
                {"name": "getStatistics", "inputSchema": {"type": "object"}}
            ]}});
            if !sse {
                return json_response(list);
            }
            let (tx, rx) = tokio::sync::oneshot::channel();
            *close.lock().unwrap() = Some(tx);
            let first = format!("event: message\ndata: {list}\n\n");
            let stream =
                futures_util::stream::unfold((Some(first), Some(rx)), |(first, rx)| async move {
                    if let Some(f) = first {
                        return Some((
                            Ok::<_, Infallible>(Frame::data(Bytes::from(f))),
                            (None, rx),
                        ));
                    }
                    let rx = rx?;
                    let _ = rx.await;
                    let last =
                        "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\n\n";
                    Some((Ok(Frame::data(Bytes::from(last))), (None, None)))
                });
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(http_body_util::StreamBody::new(stream).boxed())
                .unwrap()
        }
        _ => json_response(json!({"jsonrpc": "2.0", "id": id, "result": {}})),
    }
}

impl McpServer {
    async fn start() -> McpServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let calls = Arc::new(Mutex::new(Vec::new()));
        let close: Events = Arc::new(Mutex::new(None));
        let (c, cl) = (calls.clone(), close.clone());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (c, cl) = (c.clone(), cl.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req| {
                        let (c, cl) = (c.clone(), cl.clone());
                        async move { Ok::<_, Infallible>(answer(req, c, cl).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        McpServer { addr, calls, close }
    }
}

async fn rpc(addr: SocketAddr, body: Value) -> Reply {
    send(
        addr,
        req("POST", "/mcp")
            .header("content-type", "application/json")
            .header("accept", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap(),
    )
    .await
}

fn call(id: i64, tool: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": {}}})
}

fn tool_names(v: &Value) -> Vec<String> {
    v["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_protection_as_in_membranes_tutorial() {
    let server = McpServer::start().await;
    let gw = TestGateway::start(&format!(
        r#"api:
  port: 0
  name: Protected-MCP-Endpoint
  flow:
    - mcpProtection:
        tools:
          - allow: '^(listProxies|getStatistics)$'
          - deny: '.*'
  target:
    url: http://{}
"#,
        server.addr
    ));
    let addr = gw.addr();
    // An allowed tool is called; a denied one is answered by the gateway.
    let r = rpc(addr, call(1, "listProxies")).await;
    assert_eq!(r.status.as_u16(), 200);
    assert_eq!(
        r.json()["result"]["content"][0]["text"],
        "called listProxies"
    );
    let r = rpc(addr, call(2, "deleteProxy")).await;
    assert_eq!(r.status.as_u16(), 403);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(
        r.json(),
        json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32601, "message": "MCP tool 'deleteProxy' is not allowed."}})
    );
    assert_eq!(*server.calls.lock().unwrap(), ["listProxies"]);
    // The tool list as JSON: the denied tool is not shown.
    let r = rpc(
        addr,
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}),
    )
    .await;
    assert_eq!(r.status.as_u16(), 200);
    assert_eq!(tool_names(&r.json()), ["listProxies", "getStatistics"]);

    // The tool list as an event stream: the filtered event arrives while the server keeps the
    // stream open.
    let body = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}).to_string();
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(
        format!(
            "POST /mcp HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 8192];
    while !String::from_utf8_lossy(&seen).contains("getStatistics") {
        let n = s.read(&mut buf).await.unwrap();
        assert!(
            n > 0,
            "the stream ended early: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&seen).into_owned();
    assert!(text.contains("content-type: text/event-stream"), "{text}");
    assert!(
        text.contains("listProxies") && !text.contains("deleteProxy"),
        "{text}"
    );
    // The server ends the stream; its last event passes unchanged.
    server
        .close
        .lock()
        .unwrap()
        .take()
        .unwrap()
        .send(())
        .unwrap();
    while !String::from_utf8_lossy(&seen).contains("notifications/message") {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0);
        seen.extend_from_slice(&buf[..n]);
    }
}

/// Parser differentials: a second `name` (or `method`) member, or one that differs only in
/// case, would let a backend act on a tool the allow-list never saw. Each is refused with 400
/// and nothing reaches the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_and_case_variant_members_are_refused() {
    let server = McpServer::start().await;
    let gw = TestGateway::start(&format!(
        r#"api:
  port: 0
  flow:
    - mcpProtection:
        tools:
          - allow: '^listProxies$'
          - deny: '.*'
  target:
    url: http://{}
"#,
        server.addr
    ));
    let raw = |text: &'static str| {
        send(
            gw.addr(),
            req("POST", "/mcp")
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(text)))
                .unwrap(),
        )
    };
    for attack in [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"listProxies","name":"deleteProxy","arguments":{}}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"listProxies","Name":"deleteProxy","arguments":{}}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":{"name":"deleteProxy"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","Method":"tools/call","params":{"name":"deleteProxy"}}"#,
    ] {
        let r = raw(attack).await;
        assert_eq!(r.status.as_u16(), 400, "{attack}: {}", r.text());
        assert_eq!(r.json()["error"]["code"], -32600, "{attack}");
    }
    assert!(server.calls.lock().unwrap().is_empty());
}
