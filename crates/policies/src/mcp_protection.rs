//! `mcpProtection`: Membrane's guard for Model Context Protocol servers. Ordered allow/deny rules
//! on tool names decide which tools a client may call and see: a `tools/call` of a tool the rules
//! deny is answered with a JSON-RPC error (403) and never reaches the server, and the server's
//! answers to `tools/list` — JSON, or events of a `text/event-stream`, filtered as they stream —
//! lose the tools the rules deny. MCP messages are JSON-RPC 2.0 sent with `POST`.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{header, Method, StatusCode};
use http_body::Frame;
use regex::Regex;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use turnpike_core::body::BodyError;
use turnpike_core::exchange::BufferResponse;
use turnpike_core::{Body, BodyNeed, CompileContext, CompileError, Exchange, Outcome, Phases};
use turnpike_core::{Policy, PolicyFactory};

use crate::err;
use crate::json_rpc_protection::validate::{
    compressed, is_json, looks_like_batch, RpcError, INTERNAL_ERROR, INVALID_PARAMS,
    INVALID_REQUEST, METHOD_NOT_FOUND,
};
use crate::json_rpc_protection::{compile_rules, MethodRule};

/// `mcpProtection`'s settings.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpProtectionSettings {
    /// Ordered allow/deny rules on tool names: the first rule whose regular expression matches
    /// the whole name decides; a tool no rule matches is allowed.
    pub tools: Vec<MethodRule>,
}

/// The compiled rules: (whole-name pattern, allows).
#[derive(Debug)]
struct Rules(Vec<(Regex, bool)>);

impl Rules {
    fn allows(&self, tool: &str) -> bool {
        self.0
            .iter()
            .find(|(re, _)| re.is_match(tool))
            .is_none_or(|(_, allows)| *allows)
    }
}

/// The compiled `mcpProtection` policy.
#[derive(Debug)]
pub struct McpProtection {
    rules: Arc<Rules>,
}

impl PolicyFactory for McpProtection {
    const NAME: &'static str = "mcpProtection";
    const PHASES: Phases = Phases::BOTH;
    type Settings = McpProtectionSettings;

    /// Compiles the rules; errors: no rule, a rule without exactly one of `allow`/`deny`, an
    /// empty or invalid pattern.
    fn compile(s: McpProtectionSettings, _: &CompileContext<'_>) -> Result<Self, CompileError> {
        if s.tools.is_empty() {
            return Err(err("tools", "name at least one rule"));
        }
        let rules = compile_rules(s.tools, "tools")?;
        Ok(McpProtection {
            rules: Arc::new(Rules(rules)),
        })
    }
}

/// The ids of the `tools/list` requests of this exchange, whose answers are filtered.
#[derive(Debug, Clone, Default)]
struct ToolsListed(Arc<Vec<Value>>);

impl McpProtection {
    /// Checks the messages of a request payload; returns the ids of its `tools/list` requests,
    /// or the error to answer with.
    fn check_request(&self, body: &[u8]) -> Result<Vec<Value>, RpcError> {
        let batch = looks_like_batch(body);
        let root: Value = turnpike_core::json_strict::parse_unique(body).map_err(|e| {
            // Two members of one name: parsers disagree on which counts, so it is refused.
            let message = if e.contains("duplicate member") {
                format!(
                    "Invalid JSON-RPC payload: {}",
                    e.split(" at line").next().unwrap_or(&e)
                )
            } else {
                "Invalid JSON-RPC payload".to_owned()
            };
            RpcError::new(batch, StatusCode::BAD_REQUEST, INVALID_REQUEST, message)
        })?;
        let messages: Vec<&Value> = match &root {
            Value::Array(items) => items.iter().collect(),
            v => vec![v],
        };
        let mut listed = Vec::new();
        for m in messages {
            let Some(o) = m.as_object() else {
                return Err(RpcError::new(
                    batch,
                    StatusCode::BAD_REQUEST,
                    INVALID_REQUEST,
                    "A JSON-RPC message must be an object.",
                ));
            };
            let variant =
                turnpike_core::json_strict::case_variant(o, &["jsonrpc", "method", "id", "params"])
                    .or_else(|| {
                        o.get("params").and_then(Value::as_object).and_then(|p| {
                            turnpike_core::json_strict::case_variant(p, &["name", "arguments"])
                        })
                    });
            if let Some(m) = variant {
                return Err(RpcError::new(
                    batch,
                    StatusCode::BAD_REQUEST,
                    INVALID_REQUEST,
                    format!("Invalid JSON-RPC request: {m}"),
                ));
            }

            match o.get("method").and_then(Value::as_str) {
                Some("tools/call") => {
                    let id = o.get("id");
                    let Some(name) = o
                        .get("params")
                        .and_then(|p| p.get("name"))
                        .and_then(Value::as_str)
                    else {
                        return Err(RpcError::new(
                            batch,
                            StatusCode::BAD_REQUEST,
                            INVALID_PARAMS,
                            "A tools/call request needs the tool's name in params.name.",
                        )
                        .with_id(id));
                    };
                    if !self.rules.allows(name) {
                        return Err(RpcError::new(
                            batch,
                            StatusCode::FORBIDDEN,
                            METHOD_NOT_FOUND,
                            format!("MCP tool '{name}' is not allowed."),
                        )
                        .with_id(id));
                    }
                }
                Some("tools/list") => {
                    if let Some(id) = o.get("id") {
                        listed.push(id.clone());
                    }
                }
                _ => {}
            }
        }
        Ok(listed)
    }
}

/// Removes the denied tools from a JSON-RPC response (or each of a batch) that answers one of
/// `ids` with `result.tools`; returns true when something was removed.
fn filter_message(v: &mut Value, ids: &[Value], rules: &Rules) -> bool {
    match v {
        Value::Array(items) => {
            // Every answer of a batch is filtered (no short cut).
            let mut changed = false;
            for m in items.iter_mut() {
                changed |= filter_message(m, ids, rules);
            }
            changed
        }
        Value::Object(o) => {
            if !o.get("id").is_some_and(|id| ids.contains(id)) {
                return false;
            }
            let Some(tools) = o
                .get_mut("result")
                .and_then(|r| r.get_mut("tools"))
                .and_then(Value::as_array_mut)
            else {
                return false;
            };
            let before = tools.len();
            tools.retain(|t| {
                t.get("name")
                    .and_then(Value::as_str)
                    .is_some_and(|n| rules.allows(n))
            });
            tools.len() != before
        }
        _ => false,
    }
}

/// An event stream's bytes with the `tools/list` answers among its events filtered. Events pass
/// one by one as they complete (a blank line ends one); an event that does not answer one of the
/// ids passes byte for byte.
struct SseFilter {
    inner: Body,
    pending: Vec<u8>,
    ids: Arc<Vec<Value>>,
    rules: Arc<Rules>,
    done: bool,
}

/// An event longer than this (without its blank line) fails the stream: it cannot be checked.
const MAX_EVENT: usize = 8 * 1024 * 1024;

/// The end of the first complete event of `buf` (after its blank line), if there is one.
fn event_end(buf: &[u8]) -> Option<usize> {
    let mut line_start = 0;
    let mut i = 0;
    while i < buf.len() {
        let eol = match buf[i] {
            b'\n' => 1,
            b'\r' if buf.get(i + 1) == Some(&b'\n') => 2,
            b'\r' if i + 1 < buf.len() => 1,
            // A lone `\r` at the end may be the start of `\r\n`: wait for more.
            b'\r' => return None,
            _ => {
                i += 1;
                continue;
            }
        };
        if i == line_start {
            return Some(i + eol);
        }
        i += eol;
        line_start = i;
    }
    None
}

/// One event, filtered: unchanged bytes, or the event with its data replaced by one `data:`
/// line holding the filtered JSON.
fn filter_event(event: &[u8], ids: &[Value], rules: &Rules) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(event).ok()?;
    let lines: Vec<&str> = text.lines().collect();
    let data: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| d.strip_prefix(' ').unwrap_or(d))
        .collect();
    if data.is_empty() {
        return None;
    }
    let mut v: Value = serde_json::from_str(&data.join("\n")).ok()?;
    if !filter_message(&mut v, ids, rules) {
        return None;
    }
    let mut out = String::new();
    let mut wrote_data = false;
    for l in lines.iter().filter(|l| !l.is_empty()) {
        if l.starts_with("data:") {
            if !wrote_data {
                out.push_str("data: ");
                out.push_str(&v.to_string());
                out.push('\n');
                wrote_data = true;
            }
        } else {
            out.push_str(l);
            out.push('\n');
        }
    }
    out.push('\n');
    Some(out.into_bytes())
}

impl SseFilter {
    /// The complete events in `pending`, filtered, taken out of it.
    fn take_events(&mut self) -> Option<Bytes> {
        let mut out = Vec::new();
        while let Some(end) = event_end(&self.pending) {
            let event: Vec<u8> = self.pending.drain(..end).collect();
            match filter_event(&event, &self.ids, &self.rules) {
                Some(filtered) => out.extend_from_slice(&filtered),
                None => out.extend_from_slice(&event),
            }
        }
        (!out.is_empty()).then(|| Bytes::from(out))
    }
}

impl http_body::Body for SseFilter {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        loop {
            if let Some(events) = this.take_events() {
                return Poll::Ready(Some(Ok(Frame::data(events))));
            }
            if this.done {
                if this.pending.is_empty() {
                    return Poll::Ready(None);
                }
                // The last event, not ended by a blank line: checked as it is.
                let rest = std::mem::take(&mut this.pending);
                let out = filter_event(&rest, &this.ids, &this.rules).unwrap_or(rest);
                return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => this.done = true,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        this.pending.extend_from_slice(&data);
                        if this.pending.len() > MAX_EVENT && event_end(&this.pending).is_none() {
                            return Poll::Ready(Some(Err(
                                "mcpProtection: an event of the stream is too long to check".into(),
                            )));
                        }
                    }
                    Err(trailers) => return Poll::Ready(Some(Ok(trailers))),
                },
            }
        }
    }
}

/// The `type/subtype` of the message's `Content-Type`, in lower case (`""` without one).
fn media_type(headers: &http::HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(turnpike_openapi::media::essence)
        .unwrap_or_default()
}

impl Policy for McpProtection {
    fn name(&self) -> &'static str {
        "mcpProtection"
    }

    /// MCP requests are read in memory.
    fn body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    /// Checks the `tools/call` requests of a `POST` (other requests pass) and notes the
    /// `tools/list` ones; returns `Continue`, or `Respond` with a JSON-RPC error.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        if ex.request.method != Method::POST {
            return Outcome::Continue;
        }
        let body = ex.request_bytes().cloned().unwrap_or_default();
        if body.iter().all(u8::is_ascii_whitespace) {
            return Outcome::Continue;
        }
        let batch = looks_like_batch(&body);
        let refuse = |e: RpcError| {
            tracing::info!(
                request_id = ex.request_id.to_str().unwrap_or(""),
                "mcpProtection: {}",
                e.message
            );
            Outcome::Respond(e.response())
        };
        let ct = media_type(&ex.request.headers);
        if !is_json(&ct) {
            return refuse(RpcError::new(
                batch,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                INVALID_REQUEST,
                "MCP messages are JSON: expected Content-Type application/json.",
            ));
        }
        if let Some(enc) = compressed(&ex.request.headers) {
            return refuse(RpcError::new(
                batch,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                INVALID_REQUEST,
                format!("Content-Encoding {enc} is not supported."),
            ));
        }
        match self.check_request(&body) {
            Ok(listed) if listed.is_empty() => Outcome::Continue,
            Ok(listed) => {
                // The answer is read (JSON) or filtered as it streams (events); compressed
                // answers could not be.
                ex.request.headers.remove(header::ACCEPT_ENCODING);
                ex.extensions.insert(ToolsListed(Arc::new(listed)));
                ex.directives.buffer_response = Some(BufferResponse {
                    except_event_streams: true,
                });
                Outcome::Continue
            }
            Err(e) => refuse(e),
        }
    }

    /// Filters the answer to a `tools/list` request: a JSON body in memory, an event stream as
    /// it streams. The gateway's own problems pass.
    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        let Some(ToolsListed(ids)) = ex.extensions.get::<ToolsListed>().cloned() else {
            return Outcome::Continue;
        };
        let Some(res) = ex.response.as_mut() else {
            return Outcome::Continue;
        };
        let media = media_type(res.headers());
        if media == "application/problem+json" {
            return Outcome::Continue;
        }
        if compressed(res.headers()).is_some() {
            let e = RpcError::new(
                false,
                StatusCode::BAD_GATEWAY,
                INTERNAL_ERROR,
                "The MCP server's answer is compressed and cannot be checked.",
            );
            return Outcome::Respond(e.response());
        }
        if media == "text/event-stream" {
            let inner = std::mem::take(res.body_mut());
            *res.body_mut() = Body::stream(SseFilter {
                inner,
                pending: Vec::new(),
                ids,
                rules: self.rules.clone(),
                done: false,
            });
            res.headers_mut().remove(header::CONTENT_LENGTH);
            return Outcome::Continue;
        }
        if !is_json(&media) {
            return Outcome::Continue;
        }
        let Some(mut v) = ex
            .response_bytes()
            .and_then(|b| serde_json::from_slice::<Value>(b).ok())
        else {
            return Outcome::Continue;
        };
        if filter_message(&mut v, &ids, &self.rules) {
            if let Some(res) = ex.response.as_mut() {
                *res.body_mut() = Body::full(v.to_string());
                res.headers_mut().remove(header::CONTENT_LENGTH);
            }
            turnpike_core::json::forget_response_json(ex);
        }
        Outcome::Continue
    }
}

#[cfg(test)]
mod tests;
