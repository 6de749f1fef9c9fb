//! `llmGateway` over sockets, against a fake provider that records what it receives and answers
//! in the provider's shape with a `usage` (as JSON, or as server-sent events when asked to
//! stream): key replacement per provider, users and token quotas, limits and models, and
//! Membrane's tutorial configurations.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;

/// A fake LLM provider. The tokens it reports as used are taken from the request's
/// `x-fake-usage` header (default 100).
struct Provider {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Provider {
    async fn start() -> Provider {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let seen2 = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let seen = seen2.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| answer(req, seen.clone()));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Provider { addr, seen }
    }

    fn last(&self) -> Seen {
        self.seen
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("no request")
    }

    fn last_json(&self) -> Value {
        serde_json::from_slice(&self.last().body).unwrap()
    }

    fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

type BoxBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// The usage object of each API for `total` tokens (a quarter input).
fn usage_json(path: &str, total: i64) -> (&'static str, Value) {
    let input = total / 4;
    let output = total - input;
    if path.starts_with("/v1/chat/completions") {
        (
            "usage",
            json!({"prompt_tokens": input, "completion_tokens": output, "total_tokens": total}),
        )
    } else if path.starts_with("/v1/responses") {
        (
            "usage",
            json!({"input_tokens": input, "output_tokens": output, "total_tokens": total}),
        )
    } else if path.starts_with("/v1/messages") {
        (
            "usage",
            json!({"input_tokens": input, "output_tokens": output}),
        )
    } else {
        (
            "usageMetadata",
            json!({"promptTokenCount": input, "candidatesTokenCount": output, "totalTokenCount": total}),
        )
    }
}

/// The events of a streamed answer: text deltas, then the usage in the API's way.
fn events(path: &str, total: i64) -> Vec<String> {
    let input = total / 4;
    let output = total - input;
    if path.starts_with("/v1/messages") {
        vec![
            format!("event: message_start\ndata: {}\n\n", json!({"type": "message_start", "message": {"usage": {"input_tokens": input, "output_tokens": 1}}})),
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n\n".to_owned(),
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"lo\"}}\n\n".to_owned(),
            format!("event: message_delta\ndata: {}\n\n", json!({"type": "message_delta", "usage": {"output_tokens": output}})),
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n".to_owned(),
        ]
    } else {
        vec![
            "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}],\"usage\":null}\n\n".to_owned(),
            "data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}],\"usage\":null}\n\n".to_owned(),
            format!(
                "data: {}\n\n",
                json!({"choices": [], "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": total}})
            ),
            "data: [DONE]\n\n".to_owned(),
        ]
    }
}

async fn answer(
    req: Request<Incoming>,
    seen: Arc<Mutex<Vec<Seen>>>,
) -> Result<Response<BoxBody>, Infallible> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    seen.lock().unwrap().push(Seen {
        version: parts.version,
        method: parts.method.to_string(),
        uri: parts.uri.to_string(),
        headers: parts.headers.clone(),
        body: body.clone(),
    });
    let total: i64 = parts
        .headers
        .get("x-fake-usage")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let path = parts.uri.path().to_owned();
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if request["stream"] == true {
        // Server-sent events, one per chunk, with pauses between them.
        let chunks = events(&path, total);
        let stream = futures_util::stream::unfold(chunks.into_iter(), |mut it| async move {
            let next = it.next()?;
            tokio::time::sleep(Duration::from_millis(20)).await;
            Some((Ok::<_, Infallible>(Frame::data(Bytes::from(next))), it))
        });
        let mut r = Response::new(StreamBody::new(stream).boxed());
        r.headers_mut()
            .insert("content-type", "text/event-stream".parse().unwrap());
        return Ok(r);
    }
    let (field, usage) = usage_json(&path, total);
    let mut answer = json!({"id": "fake", "echo": request});
    answer[field] = usage;
    let mut r = Response::new(Full::new(Bytes::from(answer.to_string())).boxed());
    r.headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    Ok(r)
}

fn gateway(provider: &Provider, settings: &str) -> TestGateway {
    TestGateway::start(&format!(
        "api:\n  port: 0\n  ip: 127.0.0.1\n  flow:\n    - llmGateway:\n{settings}  target:\n    url: http://{}\n",
        provider.addr
    ))
}

/// POSTs `body` as JSON with the given headers.
async fn post(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: Value) -> Reply {
    let mut b = req("POST", path).header("content-type", "application/json");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    send(
        addr,
        b.body(Full::new(Bytes::from(body.to_string()))).unwrap(),
    )
    .await
}

const OPENAI_STORE: &str = "        openai: {}
        apiKey: sk-real
        policies:
          maxInputTokens: 100
          maxOutputTokens: 200
          models:
            - gpt-5-nano
            - gpt-5-mini
        simpleStore:
          users:
            - name: alice
              apiKey: abc123
              tokens: 500
            - name: bob
              apiKey: qwertz
              tokens: 10000
          limitResetPeriod: 60
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_providers_key_replaces_the_clients_and_the_output_limit_is_written() {
    let p = Provider::start().await;
    for (provider, path, header, client, expected, body, limit) in [
        (
            "openai",
            "/v1/responses",
            "authorization",
            "Bearer client-key",
            "Bearer sk-real",
            json!({"model": "gpt-5-nano", "input": "Hi"}),
            "/max_output_tokens",
        ),
        (
            "openai",
            "/v1/chat/completions",
            "authorization",
            "Bearer client-key",
            "Bearer sk-real",
            json!({"model": "gpt-5-nano", "max_tokens": 5000, "messages": [{"role": "user", "content": "Hi"}]}),
            "/max_tokens",
        ),
        (
            "claude",
            "/v1/messages",
            "x-api-key",
            "client-key",
            "sk-real",
            json!({"model": "claude-sonnet-4-0", "max_tokens": 1024, "messages": [{"role": "user", "content": "Hi"}]}),
            "/max_tokens",
        ),
        (
            "google",
            "/v1beta/models/gemini-2.5-flash:generateContent",
            "x-goog-api-key",
            "client-key",
            "sk-real",
            json!({"contents": [{"parts": [{"text": "Hi"}]}]}),
            "/generationConfig/maxOutputTokens",
        ),
    ] {
        let gw = gateway(
            &p,
            &format!("        {provider}: {{}}\n        apiKey: sk-real\n        policies:\n          maxOutputTokens: 200\n"),
        );
        let r = post(gw.addr(), path, &[(header, client)], body).await;
        assert_eq!(r.status, 200, "{provider} {path}: {}", r.text());
        let seen = p.last();
        assert_eq!(seen.uri, path);
        assert_eq!(
            seen.headers.get_all(header).iter().collect::<Vec<_>>(),
            [expected],
            "{provider}"
        );
        let sent: Value = serde_json::from_slice(&seen.body).unwrap();
        assert_eq!(sent.pointer(limit), Some(&json!(200)), "{provider}: {sent}");
        // The provider's answer reaches the client unchanged.
        assert_eq!(r.json()["echo"], sent);
        if provider == "claude" {
            assert_eq!(seen.headers["accept-encoding"], "identity");
        }
    }
    // Without `apiKey` the client's key goes on; a GET is forwarded as it is.
    let gw = gateway(&p, "        openai: {}\n");
    let r = get_with(
        gw.addr(),
        "/v1/models",
        &[("authorization", "Bearer client-key")],
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(p.last().headers["authorization"], "Bearer client-key");
    assert_eq!(p.last().method, "GET");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_are_authenticated_and_their_quota_runs_out() {
    let p = Provider::start().await;
    let gw = gateway(&p, OPENAI_STORE);
    let addr = gw.addr();
    let req_body = || json!({"model": "gpt-5-nano", "input": "Tell me a joke"});

    // An unknown key, or none: 401 in OpenAI's format, nothing forwarded.
    for headers in [&[("authorization", "Bearer wrong")][..], &[][..]] {
        let r = post(addr, "/v1/responses", headers, req_body()).await;
        assert_eq!(r.status, 401);
        assert_eq!(r.header("www-authenticate"), Some("Bearer"));
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(
            r.json(),
            json!({"error": {"message": "Invalid authentication credentials", "type": "invalid_request_error", "param": null, "code": "invalid_authentication"}})
        );
    }
    assert_eq!(p.count(), 0);

    // Alice's first request goes out with the provider's key and uses 400 of her 500 tokens.
    let alice = [("authorization", "Bearer abc123"), ("x-fake-usage", "400")];
    let r = post(addr, "/v1/responses", &alice, req_body()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(p.last().headers["authorization"], "Bearer sk-real");
    assert_eq!(p.last_json()["max_output_tokens"], 200);
    // The next needs 4 + 200 more: refused, and not forwarded.
    let r = post(addr, "/v1/responses", &alice, req_body()).await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    let e = r.json();
    assert_eq!(e["error"]["type"], "rate_limit_error");
    assert_eq!(e["error"]["code"], "token_limit_exceeded");
    assert_eq!(e["error"]["param"], Value::Null);
    let m = e["error"]["message"].as_str().unwrap();
    assert!(
        m.starts_with("Token rate limit exceeded. Request requires 204 tokens but only -104 remain. Please wait "),
        "{m}"
    );
    assert!(m.ends_with(" seconds before retrying."), "{m}");
    assert_eq!(p.count(), 1);

    // Bob still passes.
    let bob = [("authorization", "Bearer qwertz")];
    let r = post(addr, "/v1/responses", &bob, req_body()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(p.count(), 2);

    // A model not allowed: 400.
    let r = post(
        addr,
        "/v1/responses",
        &bob,
        json!({"model": "gpt-4o", "input": "Hi"}),
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json(),
        json!({"error": {"message": "Model 'gpt-4o' is not allowed. Allowed models: gpt-5-nano, gpt-5-mini.", "type": "invalid_request_error", "param": null, "code": "model_not_allowed"}})
    );
    // Too many input tokens: 400 (Membrane's max-input sample is a long text).
    let long = "The quick brown fox jumps over the lazy dog. ".repeat(10);
    let r = post(
        addr,
        "/v1/responses",
        &bob,
        json!({"model": "gpt-5-mini", "input": long}),
    )
    .await;
    assert_eq!(r.status, 400);
    let e = r.json();
    assert_eq!(e["error"]["code"], "context_length_exceeded");
    assert_eq!(e["error"]["param"], "input");
    assert_eq!(
        e["error"]["message"],
        "This model's maximum context length is 100 tokens.\nYour request contains approximately 129 tokens."
    );
    assert_eq!(p.count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_and_google_answer_in_their_own_formats() {
    let p = Provider::start().await;
    let store = "        simpleStore:\n          users:\n            - name: alice\n              apiKey: abc123\n              tokens: 250\n";
    let gw = gateway(
        &p,
        &format!("        claude: {{}}\n        apiKey: sk-real\n        policies:\n          maxOutputTokens: 200\n{store}"),
    );
    let r = post(
        gw.addr(),
        "/v1/messages",
        &[("x-api-key", "nope")],
        json!({"messages": []}),
    )
    .await;
    assert_eq!(r.status, 401);
    let e = r.json();
    assert_eq!(e["type"], "error");
    assert_eq!(
        e["error"],
        json!({"type": "authentication_error", "message": "Invalid bearer token"})
    );
    assert!(e["request_id"].as_str().unwrap().starts_with("membrane_"));
    let alice = [("x-api-key", "abc123"), ("anthropic-version", "2023-06-01")];
    let body = || json!({"model": "claude-sonnet-4-0", "max_tokens": 1024, "messages": [{"role": "user", "content": "Hi"}]});
    assert_eq!(
        post(gw.addr(), "/v1/messages", &alice, body()).await.status,
        200
    );
    assert_eq!(p.last().headers["x-api-key"], "sk-real");
    assert_eq!(p.last().headers["anthropic-version"], "2023-06-01");
    let r = post(gw.addr(), "/v1/messages", &alice, body()).await;
    assert_eq!(r.status, 429);
    let e = r.json();
    assert_eq!(e["error"]["type"], "rate_limit_error");
    let m = e["error"]["message"].as_str().unwrap();
    assert!(
        m.starts_with("Token rate limit exceeded.\nRequest requires 200 tokens but only 0 remain.\nRetry after "),
        "{m}"
    );

    let gw = gateway(
        &p,
        &format!("        google: {{}}\n        policies:\n          maxInputTokens: 10\n          models: [gemini-2.5-flash]\n{store}"),
    );
    let g = [("x-goog-api-key", "abc123")];
    let r = post(
        gw.addr(),
        "/v1beta/models/gemini-2.5-pro:generateContent",
        &g,
        json!({"contents": []}),
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json(),
        json!({"error": {"code": 400, "message": "Model 'gemini-2.5-pro' is not allowed. Allowed models: gemini-2.5-flash.", "status": "INVALID_ARGUMENT"}})
    );
    let text = json!({"contents": [{"parts": [{"text": "x".repeat(100)}]}]});
    let r = post(
        gw.addr(),
        "/v1beta/models/gemini-2.5-flash:generateContent",
        &g,
        text,
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["error"]["message"],
        "The input token count (29) exceeds the maximum allowed (10)."
    );
    let r = post(
        gw.addr(),
        "/v1beta/models/gemini-2.5-flash:generateContent",
        &[("x-goog-api-key", "x")],
        json!({}),
    )
    .await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"]["status"], "UNAUTHENTICATED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_response_passes_unchanged_and_its_usage_counts() {
    let p = Provider::start().await;
    let gw = gateway(&p, OPENAI_STORE);
    let addr = gw.addr();
    let alice = [("authorization", "Bearer abc123"), ("x-fake-usage", "400")];
    let body = json!({"model": "gpt-5-mini", "stream": true, "messages": [{"role": "user", "content": "Hi"}]});
    let r = post(addr, "/v1/chat/completions", &alice, body.clone()).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert_eq!(r.text(), events("/v1/chat/completions", 400).concat());
    // The gateway asked for the usage and limited the output.
    let sent = p.last_json();
    assert_eq!(sent["stream_options"], json!({"include_usage": true}));
    assert_eq!(sent["max_tokens"], 200);
    // The 400 tokens the stream reported count: alice's next request is refused.
    let r = post(addr, "/v1/chat/completions", &alice, body.clone()).await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(p.count(), 1);

    // Claude's stream: input from message_start, output from message_delta.
    let gw = gateway(
        &p,
        "        claude: {}\n        policies:\n          maxOutputTokens: 100\n        simpleStore:\n          users:\n            - name: alice\n              apiKey: abc123\n              tokens: 500\n",
    );
    let alice = [("x-api-key", "abc123"), ("x-fake-usage", "420")];
    let body = json!({"model": "claude-sonnet-4-0", "stream": true, "messages": [{"role": "user", "content": "Hi"}]});
    let r = post(gw.addr(), "/v1/messages", &alice, body.clone()).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), events("/v1/messages", 420).concat());
    let r = post(gw.addr(), "/v1/messages", &alice, body).await;
    assert_eq!(r.status, 429, "{}", r.text());
    let m = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        m.contains("Request requires 100 tokens but only 0 remain."),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membranes_tutorial_configurations() {
    // 10-Basic-LLM-Gateway.yaml loads (with the target pointed at the fake provider) ...
    let p = Provider::start().await;
    let gw = TestGateway::start(&format!(
        "api:\n  port: 0\n  ip: 127.0.0.1\n  flow:\n    - llmGateway:\n        claude: {{}}\n        policies:\n          maxInputTokens: 100\n          maxOutputTokens: 200\n  target:\n    url: http://{}\n",
        p.addr
    ));
    let r = post(
        gw.addr(),
        "/v1/messages",
        &[("x-api-key", "my-key")],
        json!({"model": "claude-sonnet-4-0", "messages": [{"role": "user", "content": "Hi"}]}),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(p.last().headers["x-api-key"], "my-key");
    assert_eq!(p.last_json()["max_tokens"], 200);

    // ... and 20-Sharing-API-Keys.yaml fails until its placeholder is replaced, as in Membrane.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gateway.yaml");
    std::fs::write(
        &file,
        "api:
  port: 0
  flow:
    - llmGateway:
        apiKey: <<Replace with your API_KEY>>
        policies:
          maxInputTokens: 100
          maxOutputTokens: 200
          models:
            - gpt-5.4
            - gpt-5-nano
            - gpt-5-mini
        openai: {}
        simpleStore:
          users:
            - name: alice
              apiKey: abc123
              tokens: 500
            - name: bob
              apiKey: qwertz
              tokens: 10000
          limitResetPeriod: 60
  target:
    url: https://api.openai.com/
",
    )
    .unwrap();
    let e = match turnpike::start(vec![file]) {
        Ok(_) => panic!("the placeholder configuration loaded"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.contains("The configuration contains the replacement marker <<Replace with your API_KEY>>. Substitute it with the API key of the model."),
        "{e}"
    );
}
