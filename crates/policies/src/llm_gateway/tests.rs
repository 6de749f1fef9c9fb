use serde_json::{json, Value};

use super::*;
use crate::testutil::{exchange, plain};

fn compile(v: Value) -> Result<LlmGateway, Vec<CompileError>> {
    let s = turnpike_core::settings::parse_all::<LlmGatewaySettings>(v)?;
    LlmGateway::compile(s, &plain()).map_err(|e| vec![e])
}

fn gateway(v: Value) -> LlmGateway {
    match compile(v) {
        Ok(g) => g,
        Err(e) => panic!("{e:?}"),
    }
}

/// Runs the request phase on a POST with a JSON body held in memory.
fn post(g: &LlmGateway, path: &str, headers: &[(&str, &str)], body: Value) -> (Exchange, Outcome) {
    let mut h = vec![("content-type", "application/json")];
    h.extend_from_slice(headers);
    let mut ex = exchange("POST", path, &h, &body.to_string());
    let o = g.on_request(&mut ex);
    (ex, o)
}

fn sent(ex: &Exchange) -> Value {
    serde_json::from_slice(ex.request_bytes().expect("a body in memory")).unwrap()
}

/// The status and JSON body of an answer.
fn answer(o: Outcome) -> (u16, Value) {
    match o {
        Outcome::Respond(r) => {
            let status = r.status().as_u16();
            let body = match r.into_body() {
                Body::Full(Some(b)) => b,
                _ => panic!("no body"),
            };
            (status, serde_json::from_slice(&body).unwrap())
        }
        o => panic!("not an answer: {o:?}"),
    }
}

#[test]
fn llm_settings_errors() {
    let e = format!("{:?}", compile(json!({})).err().unwrap());
    assert!(e.contains("needs a provider"), "{e}");
    let e = format!(
        "{:?}",
        compile(json!({"openai": {}, "claude": {}})).err().unwrap()
    );
    assert!(e.contains("more than one provider"), "{e}");
    let e = compile(json!({"openai": {}, "apiKey": "<<Replace with your API_KEY>>"}))
        .err()
        .unwrap();
    assert_eq!(e[0].key, "apiKey");
    assert_eq!(
        e[0].message,
        "The configuration contains the replacement marker <<Replace with your API_KEY>>. Substitute it with the API key of the model."
    );
    let e = compile(json!({"google": {}, "policies": {"maxInputTokens": -1}}))
        .err()
        .unwrap();
    assert_eq!(e[0].message, "maxInputTokens must be >= 0");
    // Settings Turnpike does not have are load errors.
    let e = compile(json!({"openai": {}, "jdbcAiApiUsageStore": {}}))
        .err()
        .unwrap();
    assert!(e[0].at_key, "{e:?}");
    let e = compile(json!({"openai": {"url": "x"}})).err().unwrap();
    assert!(e[0].message.contains("unknown field"), "{e:?}");
    // The tutorials' basic configuration compiles.
    gateway(json!({"claude": {}, "policies": {"maxInputTokens": 100, "maxOutputTokens": 200}}));
    gateway(json!({"openai": {}, "systemPrompt": {"action": "append", "content": "x"}}));
}

#[test]
fn llm_key_is_replaced_in_the_providers_header() {
    for (provider, header, client, expected) in [
        ("openai", "authorization", "Bearer mine", "Bearer sk-real"),
        ("claude", "x-api-key", "mine", "sk-real"),
        ("google", "x-goog-api-key", "mine", "sk-real"),
    ] {
        let g = gateway(json!({provider: {}, "apiKey": "sk-real"}));
        let mut ex = exchange("GET", "/v1/models", &[(header, client)], "");
        assert!(matches!(g.on_request(&mut ex), Outcome::Continue));
        assert_eq!(ex.request.headers[header], expected, "{provider}");
        assert_eq!(ex.request.headers.get_all(header).iter().count(), 1);
        assert_eq!(g.secret_fields().headers, [header]);
    }
    // Without apiKey, the client's key goes on; Claude asks for uncompressed responses.
    let g = gateway(json!({"claude": {}}));
    let mut ex = exchange("GET", "/v1/models", &[("x-api-key", "mine")], "");
    g.on_request(&mut ex);
    assert_eq!(ex.request.headers["x-api-key"], "mine");
    assert_eq!(ex.request.headers["accept-encoding"], "identity");
}

#[test]
fn llm_unknown_users_are_refused_in_the_providers_format() {
    let store = json!({"users": [{"name": "alice", "apiKey": "abc123", "tokens": 500}]});
    let g = gateway(json!({"google": {}, "apiKey": "real", "simpleStore": store}));
    let mut ex = exchange("GET", "/v1beta/models", &[("x-goog-api-key", "nope")], "");
    let (status, body) = answer(g.on_request(&mut ex));
    assert_eq!(status, 401);
    assert_eq!(
        body,
        json!({"error": {"code": 401, "message": "Invalid API key.", "status": "UNAUTHENTICATED"}})
    );
    // A known user passes; the provider's key replaces hers and she is named in a property.
    let mut ex = exchange("GET", "/v1beta/models", &[("x-goog-api-key", "abc123")], "");
    assert!(matches!(g.on_request(&mut ex), Outcome::Continue));
    assert_eq!(ex.request.headers["x-goog-api-key"], "real");
    let p = ex.extensions.get::<Properties>().unwrap();
    assert_eq!(p.get(USER_PROPERTY), Some(&json!("alice")));
}

#[test]
fn llm_output_limit_is_written_and_input_limit_enforced() {
    let g =
        gateway(json!({"openai": {}, "policies": {"maxInputTokens": 100, "maxOutputTokens": 200}}));
    let (ex, o) = post(
        &g,
        "/v1/responses",
        &[],
        json!({"model": "gpt-5-nano", "input": "Hi"}),
    );
    assert!(matches!(o, Outcome::Continue));
    assert_eq!(sent(&ex)["max_output_tokens"], 200);
    assert!(ex.request.headers.get("content-length").is_none());
    // A request asking for less keeps its limit.
    let (ex, _) = post(
        &g,
        "/v1/responses",
        &[],
        json!({"input": "Hi", "max_output_tokens": 50}),
    );
    assert_eq!(sent(&ex)["max_output_tokens"], 50);
    // 400 chars of input is about 115 tokens.
    let (_, o) = post(&g, "/v1/responses", &[], json!({"input": "x".repeat(400)}));
    let (status, body) = answer(o);
    assert_eq!(status, 400);
    assert_eq!(
        body["error"]["message"],
        "This model's maximum context length is 100 tokens.\nYour request contains approximately 115 tokens."
    );
    // Other endpoints and methods are not looked at.
    let (ex, o) = post(&g, "/v1/embeddings", &[], json!({"input": "x".repeat(400)}));
    assert!(matches!(o, Outcome::Continue));
    assert!(ex.request_bytes().is_some());
}

#[test]
fn llm_models_are_filtered() {
    let g = gateway(
        json!({"claude": {}, "policies": {"models": ["claude-sonnet-4-0", "claude-opus-4-0"]}}),
    );
    let (_, o) = post(
        &g,
        "/v1/messages",
        &[],
        json!({"model": "claude-sonnet-4-0", "messages": []}),
    );
    assert!(matches!(o, Outcome::Continue));
    let (_, o) = post(
        &g,
        "/v1/messages",
        &[],
        json!({"model": "Claude-Sonnet-4-0", "messages": []}),
    );
    let (status, body) = answer(o);
    assert_eq!(status, 400);
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(
        body["error"]["message"],
        "Model 'Claude-Sonnet-4-0' is not allowed. Allowed models: claude-sonnet-4-0, claude-opus-4-0."
    );
    let (_, o) = post(&g, "/v1/messages", &[], json!({"messages": []}));
    assert_eq!(
        answer(o).1["error"]["message"],
        "Model 'null' is not allowed. Allowed models: claude-sonnet-4-0, claude-opus-4-0."
    );
    // Google names the model in the path.
    let g = gateway(json!({"google": {}, "policies": {"models": ["gemini-2.5-flash"]}}));
    let (_, o) = post(
        &g,
        "/v1beta/models/gemini-2.5-flash:generateContent",
        &[],
        json!({"contents": []}),
    );
    assert!(matches!(o, Outcome::Continue));
    let (_, o) = post(
        &g,
        "/v1beta/models/gemini-2.5-pro:generateContent",
        &[],
        json!({"contents": []}),
    );
    assert_eq!(answer(o).1["error"]["status"], "INVALID_ARGUMENT");
}

#[test]
fn llm_system_prompt_actions() {
    let run = |action: &str, body: Value| -> Value {
        let g = gateway(
            json!({"openai": {}, "systemPrompt": {"action": action, "content": "Be brief."}}),
        );
        let (ex, o) = post(&g, "/v1/chat/completions", &[], body);
        assert!(matches!(o, Outcome::Continue));
        sent(&ex)["messages"].clone()
    };
    let with = || json!({"messages": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hi"}]});
    let sys = |c: &str| json!({"role": "system", "content": c});
    let user = json!({"role": "user", "content": "Hi"});
    assert_eq!(run("OVERWRITE", with()), json!([sys("Be brief."), user]));
    assert_eq!(
        run("PREPEND", with()),
        json!([sys("Be brief."), sys("Be kind."), user])
    );
    assert_eq!(
        run("APPEND", with()),
        json!([sys("Be kind."), sys("Be brief."), user])
    );
    assert_eq!(run("REMOVE", with()), json!([user]));
    // The default action overwrites.
    let g = gateway(json!({"claude": {}, "systemPrompt": {"content": "Only German."}}));
    let (ex, _) = post(
        &g,
        "/v1/messages",
        &[],
        json!({"system": "x", "messages": []}),
    );
    assert_eq!(sent(&ex)["system"], "Only German.");
    let g = gateway(json!({"google": {}, "systemPrompt": {"action": "APPEND", "content": "b"}}));
    let (ex, _) = post(
        &g,
        "/v1beta/models/m:generateContent",
        &[],
        json!({"systemInstruction": {"parts": [{"text": "a"}]}}),
    );
    assert_eq!(
        sent(&ex)["systemInstruction"],
        json!({"parts": [{"text": "a\nb"}]})
    );
}

#[test]
fn llm_quota_refuses_when_used_up_and_counts_responses() {
    let g = gateway(json!({
        "openai": {},
        "policies": {"maxOutputTokens": 200},
        "simpleStore": {"users": [
            {"name": "alice", "apiKey": "abc123", "tokens": 500},
            {"name": "bob", "apiKey": "qwertz", "tokens": 10000}
        ]}
    }));
    let alice = [("authorization", "Bearer abc123")];
    // 1 input token + 200 output tokens needed of 500.
    let (mut ex, o) = post(
        &g,
        "/v1/responses",
        &alice,
        json!({"model": "m", "input": "Hi"}),
    );
    assert!(matches!(o, Outcome::Continue));
    // The response reports 350 tokens used.
    let mut res = http::Response::new(Body::full(
        r#"{"usage":{"input_tokens":50,"output_tokens":300,"total_tokens":350}}"#,
    ));
    res.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    ex.response = Some(res);
    assert!(matches!(g.on_response(&mut ex), Outcome::Continue));
    let body = ex.response.take().unwrap().into_body();
    drain(body);
    let store = g.shared.store.as_ref().unwrap();
    assert_eq!(store.used(0), 350);
    // 500 - 350 - 201 < 0: refused.
    let (_, o) = post(
        &g,
        "/v1/responses",
        &alice,
        json!({"model": "m", "input": "Hi"}),
    );
    let (status, body) = answer(o);
    assert_eq!(status, 429);
    assert_eq!(body["error"]["type"], "rate_limit_error");
    assert_eq!(body["error"]["code"], "token_limit_exceeded");
    let m = body["error"]["message"].as_str().unwrap();
    assert!(
        m.starts_with("Token rate limit exceeded. Request requires 201 tokens but only -51 remain. Please wait "),
        "{m}"
    );
    // Bob has his own quota.
    let (_, o) = post(
        &g,
        "/v1/responses",
        &[("authorization", "Bearer qwertz")],
        json!({"input": "Hi"}),
    );
    assert!(matches!(o, Outcome::Continue));
}

/// Polls a body to its end on a small runtime.
fn drain(body: Body) {
    use http_body_util::BodyExt;
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async move {
        body.collect().await.unwrap();
    });
}

#[test]
fn llm_bodies_that_are_not_json_objects_are_refused() {
    let g = gateway(json!({"claude": {}}));
    let mut ex = exchange(
        "POST",
        "/v1/messages",
        &[("content-type", "text/plain")],
        "{}",
    );
    let (status, body) = answer(g.on_request(&mut ex));
    assert_eq!(status, 400);
    assert_eq!(
        body["error"]["message"],
        "Error parsing request: Request is not JSON."
    );
    let mut ex = exchange(
        "POST",
        "/v1/messages",
        &[("content-type", "application/json")],
        "[1]",
    );
    let (_, body) = answer(g.on_request(&mut ex));
    assert_eq!(
        body["error"]["message"],
        "Error parsing request: Cannot parse input as JSON message."
    );
}

#[test]
fn llm_streaming_chat_requests_ask_for_usage() {
    let g = gateway(json!({"openai": {}}));
    let (ex, o) = post(
        &g,
        "/v1/chat/completions",
        &[],
        json!({"model": "m", "stream": true, "messages": []}),
    );
    assert!(matches!(o, Outcome::Continue));
    assert_eq!(sent(&ex)["stream_options"]["include_usage"], true);
}
