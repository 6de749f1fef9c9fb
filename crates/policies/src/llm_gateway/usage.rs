//! Reads the tokens a provider's response reports as the response streams to the client,
//! without holding it back or changing it: a JSON body is copied aside (up to
//! [`MAX_JSON`]) and read when it ends; a server-sent event stream (`text/event-stream`) is
//! read event by event as it arrives, keeping only the event being read. The usage is counted
//! against the user's quota once: at the provider's last event, at the end of the body, or when
//! the body is dropped early (the client went away) with usage already seen.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use serde_json::Value;
use turnpike_core::body::BodyError;
use turnpike_core::Body;

use super::providers::Api;
use super::quota::{Store, Usage};

/// The largest JSON response read for its usage; a longer one is passed on uncounted.
pub const MAX_JSON: usize = 8 << 20;

/// The longest line of an event stream read; a stream with a longer one is no longer read.
const MAX_LINE: usize = 1 << 20;

/// The usage seen so far; missing numbers count as 0, a missing total as input plus output.
#[derive(Debug, Clone, Copy, Default)]
struct Seen {
    input: Option<i64>,
    output: Option<i64>,
    total: Option<i64>,
}

impl Seen {
    fn any(&self) -> bool {
        self.input.is_some() || self.output.is_some() || self.total.is_some()
    }

    fn usage(&self) -> Usage {
        let input = self.input.unwrap_or(0);
        let output = self.output.unwrap_or(0);
        Usage {
            input,
            output,
            total: self.total.unwrap_or(input + output),
        }
    }
}

fn int(v: Option<&Value>) -> Option<i64> {
    v.and_then(Value::as_i64)
}

/// OpenAI's usage object, in either spelling (`input_tokens` of the Responses API,
/// `prompt_tokens` of Chat Completions).
fn openai_usage(u: &Value) -> Seen {
    Seen {
        input: int(u.get("input_tokens")).or_else(|| int(u.get("prompt_tokens"))),
        output: int(u.get("output_tokens")).or_else(|| int(u.get("completion_tokens"))),
        total: int(u.get("total_tokens")),
    }
}

/// Gemini's `usageMetadata`: output is the candidates' plus the thoughts' tokens.
fn google_usage(u: &Value) -> Seen {
    let thoughts = int(u.get("thoughtsTokenCount"));
    let candidates = int(u.get("candidatesTokenCount"));
    Seen {
        input: int(u.get("promptTokenCount")),
        output: (thoughts.is_some() || candidates.is_some())
            .then(|| thoughts.unwrap_or(0) + candidates.unwrap_or(0)),
        total: int(u.get("totalTokenCount")),
    }
}

/// The usage a complete JSON response body of `api` reports.
fn from_json(api: Api, v: &Value) -> Seen {
    match api {
        Api::ChatCompletions | Api::Other => v.get("usage").map(openai_usage).unwrap_or_default(),
        Api::Responses => v
            .get("usage")
            .filter(|u| u.is_object())
            .or_else(|| v.get("response").and_then(|r| r.get("usage")))
            .map(openai_usage)
            .unwrap_or_default(),
        Api::Claude => match v.get("usage") {
            // Claude's total is input plus output.
            Some(u) => Seen {
                input: int(u.get("input_tokens")),
                output: int(u.get("output_tokens")),
                total: None,
            },
            None => Seen::default(),
        },
        Api::Google => match v {
            // `streamGenerateContent` without `alt=sse` answers a list of responses.
            Value::Array(items) => items
                .iter()
                .rev()
                .find_map(|i| i.get("usageMetadata"))
                .map(google_usage)
                .unwrap_or_default(),
            v => v.get("usageMetadata").map(google_usage).unwrap_or_default(),
        },
    }
}

/// Reads an event stream line by line.
#[derive(Debug, Default)]
struct Events {
    line: Vec<u8>,
    name: String,
    data: String,
    has_data: bool,
    /// A line was too long: the stream is not read any further.
    broken: bool,
}

/// What the meter does with a body.
#[derive(Debug)]
enum Reader {
    Json { bytes: Vec<u8>, too_long: bool },
    Sse(Events),
}

/// Watches one response's body for its usage (see the module doc).
#[derive(Debug)]
pub struct Meter {
    store: Arc<Store>,
    user: usize,
    api: Api,
    reader: Reader,
    seen: Seen,
    done: bool,
    /// The body's length when its head announced it, and the bytes fed so far: the body is
    /// complete when they meet, whether or not it is polled again.
    length: Option<u64>,
    fed: u64,
}

impl Meter {
    /// A meter for a response of `api` to user `user`, reading an event stream when `sse`,
    /// else JSON; `length` is the body's announced length (`Content-Length`).
    pub fn new(store: Arc<Store>, user: usize, api: Api, sse: bool, length: Option<u64>) -> Meter {
        let reader = if sse {
            Reader::Sse(Events::default())
        } else {
            Reader::Json {
                bytes: Vec::new(),
                too_long: false,
            }
        };
        Meter {
            store,
            user,
            api,
            reader,
            seen: Seen::default(),
            done: false,
            length,
            fed: 0,
        }
    }

    /// Feeds the next bytes of the body.
    pub fn feed(&mut self, chunk: &[u8]) {
        if self.done {
            return;
        }
        self.fed += chunk.len() as u64;
        match &mut self.reader {
            Reader::Json { too_long: true, .. } => {}
            Reader::Json { bytes, too_long } => {
                if bytes.len() + chunk.len() > MAX_JSON {
                    *too_long = true;
                    *bytes = Vec::new();
                    tracing::debug!("llmGateway: the response is too long to read its usage");
                } else {
                    bytes.extend_from_slice(chunk);
                }
            }
            Reader::Sse(_) => self.feed_events(chunk),
        }
        if self.length.is_some_and(|n| self.fed >= n) {
            self.end();
        }
    }

    fn feed_events(&mut self, mut chunk: &[u8]) {
        while !chunk.is_empty() && !self.done {
            let Reader::Sse(ev) = &mut self.reader else {
                return;
            };
            if ev.broken {
                return;
            }
            let (part, rest, ended) = match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => (&chunk[..i], &chunk[i + 1..], true),
                None => (chunk, &[][..], false),
            };
            chunk = rest;
            if ev.line.len() + part.len() > MAX_LINE {
                ev.broken = true;
                tracing::debug!("llmGateway: an event of the stream is too long to read");
                return;
            }
            ev.line.extend_from_slice(part);
            if ended {
                let mut line = std::mem::take(&mut ev.line);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                self.line(&line);
            }
        }
    }

    /// One line of the event stream: a field, or (empty) the end of an event.
    fn line(&mut self, line: &[u8]) {
        let Reader::Sse(ev) = &mut self.reader else {
            return;
        };
        if line.is_empty() {
            let name = std::mem::take(&mut ev.name);
            let data = std::mem::take(&mut ev.data);
            let had = std::mem::replace(&mut ev.has_data, false);
            if had {
                self.event(&name, &data);
            }
            return;
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line.as_ref(), ""),
        };
        match field {
            "event" => ev.name = value.to_owned(),
            "data" => {
                if ev.has_data {
                    ev.data.push('\n');
                }
                ev.data.push_str(value);
                ev.has_data = true;
            }
            _ => {}
        }
    }

    /// One event: its usage is noted, and the provider's last event ends the count.
    fn event(&mut self, name: &str, data: &str) {
        if data.trim() == "[DONE]" {
            self.finish();
            return;
        }
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            return;
        };
        let kind = match v.get("type").and_then(Value::as_str) {
            Some(t) => t,
            None => name,
        };
        let mut last = false;
        match self.api {
            Api::ChatCompletions | Api::Other => {
                if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
                    self.seen = openai_usage(u);
                }
            }
            Api::Responses => {
                if let Some(u) = v
                    .get("response")
                    .and_then(|r| r.get("usage"))
                    .filter(|u| u.is_object())
                {
                    self.seen = openai_usage(u);
                }
                last = matches!(kind, "response.completed" | "response.incomplete");
            }
            Api::Claude => {
                // `message_start` has the input; `message_delta` the output so far (and, in
                // newer versions of the API, the input too).
                let u = match kind {
                    "message_start" => v.get("message").and_then(|m| m.get("usage")),
                    "message_delta" => v.get("usage"),
                    _ => None,
                };
                if let Some(u) = u {
                    if let Some(i) = int(u.get("input_tokens")) {
                        self.seen.input = Some(i);
                    }
                    if let Some(o) = int(u.get("output_tokens")) {
                        self.seen.output = Some(o);
                    }
                }
                last = kind == "message_stop";
            }
            Api::Google => {
                if let Some(u) = v.get("usageMetadata") {
                    self.seen = google_usage(u);
                }
            }
        }
        if last {
            self.finish();
        }
    }

    /// The body ended: reads what is left and counts the usage.
    pub fn end(&mut self) {
        if self.done {
            return;
        }
        match &mut self.reader {
            Reader::Json { bytes, too_long } => {
                if !*too_long {
                    if let Ok(v) = serde_json::from_slice::<Value>(bytes) {
                        self.seen = from_json(self.api, &v);
                    }
                }
            }
            Reader::Sse(ev) => {
                if !ev.line.is_empty() {
                    let line = std::mem::take(&mut ev.line);
                    self.line(&line);
                }
                self.line(b"");
            }
        }
        self.finish();
    }

    /// Counts the usage seen (once).
    fn finish(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        if self.seen.any() {
            self.store.record(self.user, self.seen.usage());
        } else {
            tracing::debug!("llmGateway: the response reports no usage");
        }
    }
}

impl Drop for Meter {
    /// A body dropped before its end (the client went away) still counts the usage seen.
    fn drop(&mut self) {
        if !self.done && self.seen.any() {
            self.finish();
        }
    }
}

/// A response body passed on unchanged while a [`Meter`] reads it.
pub struct Metered {
    inner: Body,
    meter: Meter,
}

impl Metered {
    /// `body`, read by `meter` as it streams.
    pub fn wrap(body: Body, meter: Meter) -> Body {
        Body::stream(Metered { inner: body, meter })
    }
}

impl http_body::Body for Metered {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.meter.feed(data);
                }
                // A body of known length may not be polled again once it is complete.
                if this.inner.is_end_stream() {
                    this.meter.end();
                }
            }
            Poll::Ready(None) => this.meter.end(),
            Poll::Ready(Some(Err(_))) | Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm_gateway::settings::{SimpleStoreSettings, UserSettings};

    fn store() -> Arc<Store> {
        Arc::new(
            Store::new(&SimpleStoreSettings {
                limit_reset_period: Some(60),
                users: vec![UserSettings {
                    name: "alice".into(),
                    api_key: "k".into(),
                    tokens: Some(1000),
                }],
            })
            .unwrap(),
        )
    }

    /// Feeds `body` in chunks of `size` bytes, then ends it; the tokens counted.
    fn counted(api: Api, sse: bool, body: &str, size: usize) -> i64 {
        let s = store();
        let mut m = Meter::new(Arc::clone(&s), 0, api, sse, None);
        for c in body.as_bytes().chunks(size) {
            m.feed(c);
        }
        m.end();
        s.used(0)
    }

    #[test]
    fn llm_usage_of_json_responses() {
        let chat = r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}"#;
        assert_eq!(counted(Api::ChatCompletions, false, chat, 7), 15);
        let responses = r#"{"output":[],"usage":{"input_tokens":20,"output_tokens":7}}"#;
        assert_eq!(counted(Api::Responses, false, responses, 100), 27);
        let claude =
            r#"{"content":[],"usage":{"input_tokens":12,"output_tokens":30,"total_tokens":1}}"#;
        assert_eq!(counted(Api::Claude, false, claude, 3), 42);
        let google = r#"{"candidates":[],"usageMetadata":{"promptTokenCount":8,"candidatesTokenCount":4,"thoughtsTokenCount":3,"totalTokenCount":15}}"#;
        assert_eq!(counted(Api::Google, false, google, 5), 15);
        let list = format!("[{google}]");
        assert_eq!(counted(Api::Google, false, &list, 5), 15);
        // Embeddings and other OpenAI endpoints report usage too.
        let emb = r#"{"data":[],"usage":{"prompt_tokens":9,"total_tokens":9}}"#;
        assert_eq!(counted(Api::Other, false, emb, 4), 9);
        // An error or a body that is not JSON counts nothing.
        assert_eq!(
            counted(Api::ChatCompletions, false, r#"{"error":{}}"#, 4),
            0
        );
        assert_eq!(counted(Api::ChatCompletions, false, "not json", 4), 0);
    }

    #[test]
    fn llm_a_body_of_announced_length_is_counted_when_complete() {
        let s = store();
        let text = r#"{"usage":{"total_tokens":8}}"#;
        let mut m = Meter::new(
            Arc::clone(&s),
            0,
            Api::ChatCompletions,
            false,
            Some(text.len() as u64),
        );
        m.feed(&text.as_bytes()[..10]);
        assert_eq!(s.used(0), 0);
        m.feed(&text.as_bytes()[10..]);
        assert_eq!(s.used(0), 8);
        m.end();
        assert_eq!(s.used(0), 8);
    }

    #[test]
    fn llm_usage_of_event_streams() {
        let chat = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n\
                    data: {\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":6,\"total_tokens\":17}}\r\n\r\n\
                    data: [DONE]\n\n";
        for size in [1, 5, 1000] {
            assert_eq!(
                counted(Api::ChatCompletions, true, chat, size),
                17,
                "{size}"
            );
        }
        let claude = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n\
                      event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"x\"}}\n\n\
                      event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n\
                      event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        assert_eq!(counted(Api::Claude, true, claude, 9), 40);
        let responses = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"usage\":null}}\n\n\
                         event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":4,\"total_tokens\":7}}}\n\n";
        assert_eq!(counted(Api::Responses, true, responses, 13), 7);
        // Gemini's last event has the final count; the stream simply ends (no blank line).
        let google = "data: {\"usageMetadata\":{\"promptTokenCount\":5,\"totalTokenCount\":6}}\n\n\
                      data: {\"usageMetadata\":{\"promptTokenCount\":5,\"candidatesTokenCount\":9,\"totalTokenCount\":14}}";
        assert_eq!(counted(Api::Google, true, google, 6), 14);
    }

    #[test]
    fn llm_usage_is_counted_once_and_on_drop() {
        let s = store();
        let mut m = Meter::new(Arc::clone(&s), 0, Api::ChatCompletions, true, None);
        m.feed(b"data: {\"usage\":{\"total_tokens\":5}}\n\ndata: [DONE]\n\n");
        assert_eq!(s.used(0), 5);
        m.end();
        drop(m);
        assert_eq!(s.used(0), 5);
        // A stream cut off after its usage arrived still counts it.
        let mut m = Meter::new(Arc::clone(&s), 0, Api::Claude, true, None);
        m.feed(
            b"data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":7}}}\n\n",
        );
        drop(m);
        assert_eq!(s.used(0), 12);
    }

    #[tokio::test]
    async fn llm_metered_body_is_passed_on_unchanged() {
        use http_body_util::BodyExt;
        let s = store();
        let text = r#"{"usage":{"prompt_tokens":1,"completion_tokens":2}}"#;
        let m = Meter::new(Arc::clone(&s), 0, Api::ChatCompletions, false, None);
        let body = Metered::wrap(Body::full(text), m);
        assert_eq!(
            http_body::Body::size_hint(&body).exact(),
            Some(text.len() as u64)
        );
        let got = body.collect().await.unwrap().to_bytes();
        assert_eq!(got, text);
        assert_eq!(s.used(0), 3);
    }
}
