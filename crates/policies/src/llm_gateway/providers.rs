//! What differs between the providers: where the API key travels, which requests carry model
//! input, how a request body names its model, output limit and system prompt, and the
//! provider's JSON format for errors.

use http::{header, HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use serde::Serialize;
use serde_json::{Map, Value};
use turnpike_core::Body;

/// The provider an `llmGateway` talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// OpenAI: `Authorization: Bearer <key>`.
    OpenAi,
    /// Anthropic: `x-api-key`.
    Claude,
    /// Google Gemini: `x-goog-api-key`.
    Google,
}

/// The API a request is for, as its provider and path tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// OpenAI Chat Completions (`/v1/chat/completions`).
    ChatCompletions,
    /// OpenAI Responses (`/v1/responses`).
    Responses,
    /// Anthropic Messages (every Claude request).
    Claude,
    /// Gemini (every Google request; the model is in the path).
    Google,
    /// Another OpenAI endpoint (models, files, embeddings, ...): only the key is handled.
    Other,
}

impl Api {
    /// True when a POST to this API carries model input (a JSON body the policies check).
    pub fn is_model(self) -> bool {
        !matches!(self, Api::Other)
    }
}

const X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");
const X_GOOG_API_KEY: HeaderName = HeaderName::from_static("x-goog-api-key");

impl Provider {
    /// The header the provider reads its API key from.
    pub fn key_header(self) -> HeaderName {
        match self {
            Provider::OpenAi => header::AUTHORIZATION,
            Provider::Claude => X_API_KEY,
            Provider::Google => X_GOOG_API_KEY,
        }
    }

    /// The API of a request to `path`.
    pub fn api(self, path: &str) -> Api {
        match self {
            Provider::OpenAi if path.starts_with("/v1/responses") => Api::Responses,
            Provider::OpenAi if path.starts_with("/v1/chat/completions") => Api::ChatCompletions,
            Provider::OpenAi => Api::Other,
            Provider::Claude => Api::Claude,
            Provider::Google => Api::Google,
        }
    }

    /// The key the client sent: OpenAI's bearer token (the scheme matched in any case,
    /// trimmed), Claude's `x-api-key`, Google's `x-goog-api-key`; `None` when absent or empty.
    pub fn client_key(self, headers: &HeaderMap) -> Option<&str> {
        let v = headers.get(self.key_header())?.to_str().ok()?;
        let key = match self {
            Provider::OpenAi => {
                let scheme = v.get(..7)?;
                if !scheme.eq_ignore_ascii_case("bearer ") {
                    return None;
                }
                v[7..].trim()
            }
            Provider::Claude | Provider::Google => v,
        };
        (!key.is_empty()).then_some(key)
    }

    /// The header value that carries `key` to the provider; an error when `key` cannot be a
    /// header value.
    pub fn key_value(self, key: &str) -> Result<HeaderValue, http::header::InvalidHeaderValue> {
        let mut v = match self {
            Provider::OpenAi => HeaderValue::from_str(&format!("Bearer {key}"))?,
            Provider::Claude | Provider::Google => HeaderValue::from_str(key)?,
        };
        v.set_sensitive(true);
        Ok(v)
    }

    /// Replaces every key header of the request with `value` (from [`Provider::key_value`]).
    pub fn set_key(self, headers: &mut HeaderMap, value: &HeaderValue) {
        headers.insert(self.key_header(), value.clone());
    }
}

/// A JSON value as text, as Jackson's `asText` gives it (`null` for JSON null, empty for
/// arrays and objects).
fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => "null".to_owned(),
        Value::Array(_) | Value::Object(_) => String::new(),
    }
}

/// A JSON value as a whole number, as Jackson's `asLong(default)` gives it.
fn as_long(v: Option<&Value>, default: i64) -> i64 {
    match v {
        Some(Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .unwrap_or(default),
        Some(Value::String(s)) => s.trim().parse().unwrap_or(default),
        Some(Value::Bool(b)) => i64::from(*b),
        _ => default,
    }
}

/// The text of a system prompt: a string, or the texts of a list of blocks joined by lines.
fn prompt_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| match b {
                Value::String(s) => Some(s.as_str()),
                b => b.get("text").and_then(Value::as_str),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Adjusts a request of `api` before the policies look at it: a streaming Chat Completions
/// request is asked to include its usage (`stream_options.include_usage`), so that the
/// gateway can count it.
pub fn prepare(api: Api, json: &mut Map<String, Value>) {
    if api != Api::ChatCompletions {
        return;
    }
    let streams = match json.get("stream") {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => s.eq_ignore_ascii_case("true"),
        _ => false,
    };
    if !streams {
        return;
    }
    let options = json
        .entry("stream_options")
        .or_insert_with(|| Value::Object(Map::new()));
    if !options.is_object() {
        *options = Value::Object(Map::new());
    }
    if let Value::Object(o) = options {
        o.insert("include_usage".into(), Value::Bool(true));
    }
}

/// The model a request names: in the body's `model`, or for Google in the path
/// (`/v1beta/models/gemini-2.5-flash:generateContent`); `None` when it names none.
pub fn model(api: Api, json: &Map<String, Value>, path: &str) -> Option<String> {
    if api == Api::Google {
        let at = path.find("/models/")?;
        let rest = &path[at + "/models/".len()..];
        let end = rest
            .find(':')
            .or_else(|| rest.to_ascii_lowercase().find("%3a"))
            .unwrap_or(rest.len());
        return Some(rest[..end].to_owned());
    }
    json.get("model").map(as_text)
}

/// The output tokens the request asks for at most (0 or less: it does not say).
pub fn requested_max_output(api: Api, json: &Map<String, Value>) -> i64 {
    match api {
        Api::ChatCompletions => {
            let v = as_long(json.get("max_completion_tokens"), 0);
            if v > 0 {
                v
            } else {
                as_long(json.get("max_tokens"), 0)
            }
        }
        Api::Responses => match json.get("max_output_tokens") {
            Some(v) => as_long(Some(v), 0),
            None => -1,
        },
        Api::Claude => as_long(json.get("max_tokens"), 0),
        Api::Google => as_long(
            json.get("generationConfig")
                .and_then(|g| g.get("maxOutputTokens")),
            0,
        ),
        Api::Other => -1,
    }
}

/// Writes `limit` as the request's output limit: Chat Completions `max_tokens` (or
/// `max_completion_tokens` when the request uses only that), Responses `max_output_tokens`,
/// Claude `max_tokens` (turning thinking off when the limit is below 2048, and keeping its
/// budget below the limit), Google `generationConfig.maxOutputTokens`.
pub fn set_max_output(api: Api, json: &mut Map<String, Value>, limit: i64) {
    match api {
        Api::ChatCompletions => {
            let completion = json
                .get("max_completion_tokens")
                .is_some_and(|v| !v.is_null());
            if completion {
                json.insert("max_completion_tokens".into(), limit.into());
            }
            if !completion || json.contains_key("max_tokens") {
                json.insert("max_tokens".into(), limit.into());
            }
        }
        Api::Responses => {
            json.insert("max_output_tokens".into(), limit.into());
        }
        Api::Claude => set_claude_max(json, limit),
        Api::Google => {
            let config = json
                .entry("generationConfig")
                .or_insert_with(|| Value::Object(Map::new()));
            if !config.is_object() {
                *config = Value::Object(Map::new());
            }
            if let Value::Object(c) = config {
                c.insert("maxOutputTokens".into(), limit.into());
            }
        }
        Api::Other => {}
    }
}

fn claude_thinking(json: &Map<String, Value>) -> bool {
    json.get("thinking")
        .filter(|t| t.is_object())
        .and_then(|t| t.get("type"))
        .and_then(Value::as_str)
        == Some("enabled")
}

fn set_claude_max(json: &mut Map<String, Value>, limit: i64) {
    // Thinking needs a certain number of tokens.
    if limit < 2048 && claude_thinking(json) {
        json.insert("thinking".into(), serde_json::json!({"type": "disabled"}));
    }
    json.insert("max_tokens".into(), limit.into());
    if claude_thinking(json) {
        if let Some(Value::Object(t)) = json.get_mut("thinking") {
            let budget = t.get("budget_tokens");
            if budget.is_some_and(|b| !b.is_null()) && as_long(budget, 0) >= limit {
                // The budget must stay below max_tokens.
                t.insert("budget_tokens".into(), (limit / 2).min(1024).into());
            }
        }
    }
}

/// The request's system prompt (empty when it has none).
pub fn system_prompt(api: Api, json: &Map<String, Value>) -> String {
    match api {
        Api::ChatCompletions => match json.get("messages") {
            Some(Value::Array(messages)) => messages
                .iter()
                .find(|m| m.get("role").and_then(Value::as_str) == Some("system"))
                .map(|m| prompt_text(m.get("content")))
                .unwrap_or_default(),
            _ => String::new(),
        },
        Api::Responses => prompt_text(json.get("instructions")),
        Api::Claude => prompt_text(json.get("system")),
        Api::Google => prompt_text(json.get("systemInstruction").and_then(|s| s.get("parts"))),
        Api::Other => String::new(),
    }
}

/// Replaces the request's system prompt with `prompts`: one system message each at the start
/// of Chat Completions `messages`; joined by lines into Responses `instructions`, Claude
/// `system` or Gemini `systemInstruction`.
pub fn set_system_prompts(api: Api, json: &mut Map<String, Value>, prompts: &[&str]) {
    match api {
        Api::ChatCompletions => {
            remove_system_prompt(api, json);
            let messages = json
                .entry("messages")
                .or_insert_with(|| Value::Array(Vec::new()));
            if !messages.is_array() {
                *messages = Value::Array(Vec::new());
            }
            if let Value::Array(m) = messages {
                let system = prompts
                    .iter()
                    .map(|p| serde_json::json!({"role": "system", "content": p}));
                m.splice(0..0, system);
            }
        }
        Api::Responses => {
            json.insert("instructions".into(), prompts.join("\n").into());
        }
        Api::Claude => {
            json.insert("system".into(), prompts.join("\n").into());
        }
        Api::Google => {
            json.insert(
                "systemInstruction".into(),
                serde_json::json!({"parts": [{"text": prompts.join("\n")}]}),
            );
        }
        Api::Other => {}
    }
}

/// Removes the request's system prompt.
pub fn remove_system_prompt(api: Api, json: &mut Map<String, Value>) {
    match api {
        Api::ChatCompletions => {
            if let Some(Value::Array(m)) = json.get_mut("messages") {
                m.retain(|m| m.get("role").and_then(Value::as_str) != Some("system"));
            }
        }
        Api::Responses => {
            json.remove("instructions");
        }
        Api::Claude => {
            json.remove("system");
        }
        Api::Google => {
            json.remove("systemInstruction");
        }
        Api::Other => {}
    }
}

/// Why the gateway answers a request itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure<'a> {
    /// The body is not a JSON object (400).
    Parse(&'a str),
    /// `simpleStore` knows no user with the key sent (401).
    Auth,
    /// The estimated input exceeds `maxInputTokens` (400).
    InputTooLong {
        /// `maxInputTokens`.
        max: i64,
        /// The estimate.
        estimated: i64,
    },
    /// The model is not in `models` (400).
    ModelNotAllowed {
        /// The model named (`None`: none).
        model: Option<&'a str>,
        /// `models`.
        allowed: &'a [String],
    },
    /// The user's quota would be exceeded (429).
    Quota {
        /// Estimated input plus the output limit.
        required: i64,
        /// What would remain after the request (0 or less).
        remaining: i64,
        /// Seconds until the quotas start again.
        reset_seconds: i64,
    },
}

#[derive(Serialize)]
struct OpenAiEnvelope<'a> {
    error: OpenAiError<'a>,
}

#[derive(Serialize)]
struct OpenAiError<'a> {
    message: String,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: &'a str,
}

#[derive(Serialize)]
struct ClaudeEnvelope<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    error: ClaudeError<'a>,
    request_id: String,
}

#[derive(Serialize)]
struct ClaudeError<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    message: String,
}

#[derive(Serialize)]
struct GoogleEnvelope<'a> {
    error: GoogleError<'a>,
}

#[derive(Serialize)]
struct GoogleError<'a> {
    code: u16,
    message: String,
    status: &'a str,
}

/// A random version 4 UUID, for Claude's `request_id`.
fn uuid() -> String {
    let mut b = [0u8; 16];
    if getrandom::fill(&mut b).is_err() {
        // No randomness: the id only has to look like one.
        b = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
            .to_le_bytes();
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

impl Failure<'_> {
    fn status(&self) -> StatusCode {
        match self {
            Failure::Auth => StatusCode::UNAUTHORIZED,
            Failure::Quota { .. } => StatusCode::TOO_MANY_REQUESTS,
            _ => StatusCode::BAD_REQUEST,
        }
    }

    fn model_message(model: Option<&str>, allowed: &[String]) -> String {
        format!(
            "Model '{}' is not allowed. Allowed models: {}.",
            model.unwrap_or("null"),
            allowed.join(", ")
        )
    }

    /// The quota message of Claude and Google (the remaining tokens shown as 0 or more).
    fn quota_lines(required: i64, remaining: i64, reset: i64) -> String {
        format!(
            "Token rate limit exceeded.\nRequest requires {required} tokens but only {} remain.\nRetry after {reset} seconds.",
            remaining.max(0)
        )
    }

    fn openai(&self) -> OpenAiEnvelope<'_> {
        let (message, kind, param, code) = match self {
            Failure::Parse(m) => (
                format!("Error parsing request: {m}"),
                "invalid_request_error",
                None,
                "bad_request",
            ),
            Failure::Auth => (
                "Invalid authentication credentials".to_owned(),
                "invalid_request_error",
                None,
                "invalid_authentication",
            ),
            Failure::InputTooLong { max, estimated } => (
                format!("This model's maximum context length is {max} tokens.\nYour request contains approximately {estimated} tokens."),
                "invalid_request_error",
                Some("input"),
                "context_length_exceeded",
            ),
            Failure::ModelNotAllowed { model, allowed } => (
                Self::model_message(*model, allowed),
                "invalid_request_error",
                None,
                "model_not_allowed",
            ),
            Failure::Quota { required, remaining, reset_seconds } => (
                format!("Token rate limit exceeded. Request requires {required} tokens but only {remaining} remain. Please wait {reset_seconds} seconds before retrying."),
                "rate_limit_error",
                None,
                "token_limit_exceeded",
            ),
        };
        OpenAiEnvelope {
            error: OpenAiError {
                message,
                kind,
                param,
                code,
            },
        }
    }

    fn claude(&self) -> ClaudeEnvelope<'_> {
        let (kind, message) = match self {
            Failure::Parse(m) => (
                "invalid_request_error",
                format!("Error parsing request: {m}"),
            ),
            Failure::Auth => ("authentication_error", "Invalid bearer token".to_owned()),
            Failure::InputTooLong { max, estimated } => (
                "invalid_request_error",
                format!("prompt is too long:\n{estimated} tokens > {max} maximum"),
            ),
            Failure::ModelNotAllowed { model, allowed } => (
                "invalid_request_error",
                Self::model_message(*model, allowed),
            ),
            Failure::Quota {
                required,
                remaining,
                reset_seconds,
            } => (
                "rate_limit_error",
                Self::quota_lines(*required, *remaining, *reset_seconds),
            ),
        };
        ClaudeEnvelope {
            kind: "error",
            error: ClaudeError { kind, message },
            request_id: format!("membrane_{}", uuid()),
        }
    }

    fn google(&self) -> GoogleEnvelope<'_> {
        let (message, status) = match self {
            Failure::Parse(m) => (format!("Error parsing request: {m}"), "INVALID_ARGUMENT"),
            Failure::Auth => ("Invalid API key.".to_owned(), "UNAUTHENTICATED"),
            Failure::InputTooLong { max, estimated } => (
                format!("The input token count ({estimated}) exceeds the maximum allowed ({max})."),
                "INVALID_ARGUMENT",
            ),
            Failure::ModelNotAllowed { model, allowed } => {
                (Self::model_message(*model, allowed), "INVALID_ARGUMENT")
            }
            Failure::Quota {
                required,
                remaining,
                reset_seconds,
            } => (
                Self::quota_lines(*required, *remaining, *reset_seconds),
                "RESOURCE_EXHAUSTED",
            ),
        };
        GoogleEnvelope {
            error: GoogleError {
                code: self.status().as_u16(),
                message,
                status,
            },
        }
    }

    /// The body of this failure in `provider`'s error format.
    pub fn body(&self, provider: Provider) -> String {
        let json = match provider {
            Provider::OpenAi => serde_json::to_string(&self.openai()),
            Provider::Claude => serde_json::to_string(&self.claude()),
            Provider::Google => serde_json::to_string(&self.google()),
        };
        json.unwrap_or_else(|_| r#"{"error":"Could not create JSON"}"#.to_owned())
    }

    /// The response for this failure in `provider`'s format: its status, `application/json`,
    /// and `WWW-Authenticate: Bearer` on 401.
    pub fn response(&self, provider: Provider) -> Response<Body> {
        let mut r = Response::new(Body::full(self.body(provider)));
        *r.status_mut() = self.status();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if *self == Failure::Auth {
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn llm_apis_by_provider_and_path() {
        assert_eq!(Provider::OpenAi.api("/v1/responses"), Api::Responses);
        assert_eq!(
            Provider::OpenAi.api("/v1/chat/completions"),
            Api::ChatCompletions
        );
        assert_eq!(Provider::OpenAi.api("/v1/models"), Api::Other);
        assert!(!Api::Other.is_model());
        assert_eq!(Provider::Claude.api("/v1/messages"), Api::Claude);
        assert_eq!(Provider::Google.api("/anything"), Api::Google);
    }

    #[test]
    fn llm_client_keys_per_provider() {
        let mut h = HeaderMap::new();
        h.insert("authorization", HeaderValue::from_static("bearer  abc "));
        h.insert("x-api-key", HeaderValue::from_static("claude-key"));
        h.insert("x-goog-api-key", HeaderValue::from_static("g-key"));
        assert_eq!(Provider::OpenAi.client_key(&h), Some("abc"));
        assert_eq!(Provider::Claude.client_key(&h), Some("claude-key"));
        assert_eq!(Provider::Google.client_key(&h), Some("g-key"));
        h.insert("authorization", HeaderValue::from_static("Basic abc"));
        assert_eq!(Provider::OpenAi.client_key(&h), None);
        h.insert("authorization", HeaderValue::from_static("Bearer "));
        assert_eq!(Provider::OpenAi.client_key(&h), None);

        let mut h = HeaderMap::new();
        h.append("authorization", HeaderValue::from_static("Bearer a"));
        h.append("authorization", HeaderValue::from_static("Bearer b"));
        let v = Provider::OpenAi.key_value("sk-1").unwrap();
        Provider::OpenAi.set_key(&mut h, &v);
        assert_eq!(
            h.get_all("authorization").iter().collect::<Vec<_>>(),
            ["Bearer sk-1"]
        );
        let v = Provider::Google.key_value("g").unwrap();
        Provider::Google.set_key(&mut h, &v);
        assert_eq!(h["x-goog-api-key"], "g");
        assert!(Provider::Claude.key_value("a\nb").is_err());
    }

    #[test]
    fn llm_openai_requests_are_rewritten() {
        // Chat Completions: streaming asks for usage; max_tokens is written.
        let mut j = obj(json!({"model": "gpt-5", "stream": true, "messages": []}));
        prepare(Api::ChatCompletions, &mut j);
        assert_eq!(j["stream_options"], json!({"include_usage": true}));
        assert_eq!(requested_max_output(Api::ChatCompletions, &j), 0);
        set_max_output(Api::ChatCompletions, &mut j, 200);
        assert_eq!(j["max_tokens"], 200);
        // max_completion_tokens is preferred, and written where the request put it.
        let mut j = obj(json!({"max_completion_tokens": 500, "max_tokens": 300}));
        assert_eq!(requested_max_output(Api::ChatCompletions, &j), 500);
        set_max_output(Api::ChatCompletions, &mut j, 200);
        assert_eq!(
            (j["max_completion_tokens"].clone(), j["max_tokens"].clone()),
            (json!(200), json!(200))
        );
        let mut j = obj(json!({"max_completion_tokens": 500}));
        set_max_output(Api::ChatCompletions, &mut j, 200);
        assert!(!j.contains_key("max_tokens"));
        // A non-streaming request is left as it is.
        let mut j = obj(json!({"stream": false}));
        prepare(Api::ChatCompletions, &mut j);
        assert!(!j.contains_key("stream_options"));
        // Responses: max_output_tokens (absent: -1).
        let mut j = obj(json!({"model": "gpt-5-mini", "input": "hi"}));
        assert_eq!(requested_max_output(Api::Responses, &j), -1);
        set_max_output(Api::Responses, &mut j, 200);
        assert_eq!(requested_max_output(Api::Responses, &j), 200);
        assert_eq!(
            model(Api::Responses, &j, "/v1/responses").as_deref(),
            Some("gpt-5-mini")
        );
        assert_eq!(model(Api::Responses, &Map::new(), "/v1/responses"), None);
        assert_eq!(
            model(Api::Responses, &obj(json!({"model": 5})), "/").as_deref(),
            Some("5")
        );
    }

    #[test]
    fn llm_claude_requests_are_rewritten() {
        let mut j = obj(json!({"model": "claude-sonnet-4-0", "max_tokens": "1000"}));
        assert_eq!(requested_max_output(Api::Claude, &j), 1000);
        set_max_output(Api::Claude, &mut j, 200);
        assert_eq!(j["max_tokens"], 200);
        // Thinking is turned off below 2048 tokens.
        let mut j = obj(json!({"thinking": {"type": "enabled", "budget_tokens": 4000}}));
        set_max_output(Api::Claude, &mut j, 1000);
        assert_eq!(j["thinking"], json!({"type": "disabled"}));
        // Above, its budget is kept below the limit.
        let mut j = obj(json!({"thinking": {"type": "enabled", "budget_tokens": 4000}}));
        set_max_output(Api::Claude, &mut j, 3000);
        assert_eq!(j["thinking"]["budget_tokens"], 1024);
        let mut j = obj(json!({"thinking": {"type": "enabled", "budget_tokens": 100}}));
        set_max_output(Api::Claude, &mut j, 3000);
        assert_eq!(j["thinking"]["budget_tokens"], 100);
    }

    #[test]
    fn llm_google_requests_are_rewritten() {
        let path = "/v1beta/models/gemini-2.5-flash:generateContent";
        let mut j = obj(json!({"contents": []}));
        assert_eq!(
            model(Api::Google, &j, path).as_deref(),
            Some("gemini-2.5-flash")
        );
        assert_eq!(
            model(
                Api::Google,
                &j,
                "/v1beta/models/gemini-2.0-flash%3AstreamGenerateContent"
            )
            .as_deref(),
            Some("gemini-2.0-flash")
        );
        assert_eq!(model(Api::Google, &j, "/v1beta/files"), None);
        assert_eq!(requested_max_output(Api::Google, &j), 0);
        set_max_output(Api::Google, &mut j, 200);
        assert_eq!(j["generationConfig"], json!({"maxOutputTokens": 200}));
        let mut j = obj(json!({"generationConfig": {"temperature": 1, "maxOutputTokens": 900}}));
        assert_eq!(requested_max_output(Api::Google, &j), 900);
        set_max_output(Api::Google, &mut j, 200);
        assert_eq!(
            j["generationConfig"],
            json!({"temperature": 1, "maxOutputTokens": 200})
        );
    }

    #[test]
    fn llm_system_prompts_per_api() {
        // Chat Completions: one system message per prompt, first; old ones removed.
        let mut j = obj(json!({"messages": [
            {"role": "system", "content": "old"},
            {"role": "user", "content": "hi"}
        ]}));
        assert_eq!(system_prompt(Api::ChatCompletions, &j), "old");
        set_system_prompts(Api::ChatCompletions, &mut j, &["a", "old"]);
        assert_eq!(
            j["messages"],
            json!([
                {"role": "system", "content": "a"},
                {"role": "system", "content": "old"},
                {"role": "user", "content": "hi"}
            ])
        );
        remove_system_prompt(Api::ChatCompletions, &mut j);
        assert_eq!(j["messages"], json!([{"role": "user", "content": "hi"}]));
        // The others join the prompts by lines into one field.
        let mut j = Map::new();
        set_system_prompts(Api::Responses, &mut j, &["a", "b"]);
        assert_eq!(j["instructions"], "a\nb");
        set_system_prompts(Api::Claude, &mut j, &["c"]);
        assert_eq!(j["system"], "c");
        set_system_prompts(Api::Google, &mut j, &["d", "e"]);
        assert_eq!(j["systemInstruction"], json!({"parts": [{"text": "d\ne"}]}));
        assert_eq!(system_prompt(Api::Google, &j), "d\ne");
        // Claude's system may be a list of text blocks.
        let j =
            obj(json!({"system": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]}));
        assert_eq!(system_prompt(Api::Claude, &j), "x\ny");
    }

    #[test]
    fn llm_error_bodies_per_provider() {
        let allowed = ["a".to_owned(), "b".to_owned()];
        let f = Failure::ModelNotAllowed {
            model: Some("x"),
            allowed: &allowed,
        };
        assert_eq!(
            f.body(Provider::OpenAi),
            r#"{"error":{"message":"Model 'x' is not allowed. Allowed models: a, b.","type":"invalid_request_error","param":null,"code":"model_not_allowed"}}"#
        );
        assert_eq!(
            f.body(Provider::Google),
            r#"{"error":{"code":400,"message":"Model 'x' is not allowed. Allowed models: a, b.","status":"INVALID_ARGUMENT"}}"#
        );
        let c: Value = serde_json::from_str(&Failure::Auth.body(Provider::Claude)).unwrap();
        assert_eq!(c["type"], "error");
        assert_eq!(
            c["error"],
            json!({"type": "authentication_error", "message": "Invalid bearer token"})
        );
        let id = c["request_id"].as_str().unwrap();
        assert!(id.starts_with("membrane_") && id.len() == 9 + 36, "{id}");

        let q = Failure::Quota {
            required: 300,
            remaining: -50,
            reset_seconds: 42,
        };
        let o: Value = serde_json::from_str(&q.body(Provider::OpenAi)).unwrap();
        assert_eq!(o["error"]["message"], "Token rate limit exceeded. Request requires 300 tokens but only -50 remain. Please wait 42 seconds before retrying.");
        let g: Value = serde_json::from_str(&q.body(Provider::Google)).unwrap();
        assert_eq!(g["error"]["message"], "Token rate limit exceeded.\nRequest requires 300 tokens but only 0 remain.\nRetry after 42 seconds.");
        assert_eq!(g["error"]["code"], 429);
        assert_eq!(g["error"]["status"], "RESOURCE_EXHAUSTED");

        let i = Failure::InputTooLong {
            max: 100,
            estimated: 150,
        };
        let o: Value = serde_json::from_str(&i.body(Provider::OpenAi)).unwrap();
        assert_eq!(o["error"]["param"], "input");
        assert_eq!(o["error"]["code"], "context_length_exceeded");
        let c: Value = serde_json::from_str(&i.body(Provider::Claude)).unwrap();
        assert_eq!(
            c["error"]["message"],
            "prompt is too long:\n150 tokens > 100 maximum"
        );
        let g: Value = serde_json::from_str(&i.body(Provider::Google)).unwrap();
        assert_eq!(
            g["error"]["message"],
            "The input token count (150) exceeds the maximum allowed (100)."
        );

        let r = Failure::Auth.response(Provider::OpenAi);
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(r.headers()["www-authenticate"], "Bearer");
        assert_eq!(r.headers()["content-type"], "application/json");
        let r = Failure::Parse("x").response(Provider::Google);
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        assert!(r.headers().get("www-authenticate").is_none());
    }
}
