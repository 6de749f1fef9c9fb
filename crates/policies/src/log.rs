//! `log`: writes a line to the gateway's log for each request and each response passing it
//! (Membrane's `log`): a template (`message`) or, by default, the method and path (the status
//! for a response) with the headers; with `body: true` the first 4KB of the body too. Lines go
//! to the log target `turnpike::log` at the configured level, with the request id.

use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_config::units::Flag;
use turnpike_core::jsonpath::Message;
use turnpike_core::{BodyNeed, CompileContext, CompileError, Exchange, Outcome, Policy};
use turnpike_core::{PolicyFactory, Template};

use crate::err;

/// How much of a body a line shows.
const BODY_SHOWN: usize = 4096;

/// The level of the lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum Level {
    /// `TRACE`
    Trace,
    /// `DEBUG`
    Debug,
    /// `INFO` (default)
    #[default]
    Info,
    /// `WARN`
    Warn,
    /// `ERROR` (Membrane's `FATAL` too)
    #[serde(alias = "FATAL")]
    Error,
}

/// `log`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LogSettings {
    /// The line: a template (`"${method} ${path} -> ${statusCode}"`); by default the method and
    /// path (a response: its status) and the headers.
    #[serde(default)]
    pub message: Option<String>,
    /// Put before the line.
    #[serde(default)]
    pub label: Option<String>,
    /// `TRACE`, `DEBUG`, `INFO` (default), `WARN` or `ERROR`.
    #[serde(default)]
    pub level: Level,
    /// Also show the body (its first 4KB; the body is read into memory for it).
    #[serde(default)]
    pub body: Flag,
    /// Membrane's logger name; shown as the line's `category`.
    #[serde(default)]
    pub category: Option<String>,
    /// The language of the message's placeholders: absent (or `spel`) for the built-in
    /// templates, `jsonpath` or `xpath` for expressions on the body.
    #[serde(default)]
    pub language: Option<crate::language::ExpressionLanguage>,
}

/// The compiled `log` policy.
#[derive(Debug)]
pub struct Log {
    message: Option<Template>,
    label: String,
    level: Level,
    body: bool,
    category: String,
}

impl PolicyFactory for Log {
    const NAME: &'static str = "log";
    type Settings = LogSettings;

    fn compile(c: LogSettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        let message = c
            .message
            .as_deref()
            .map(|m| crate::language::compile_template(m.trim_end(), c.language, ctx))
            .transpose()
            .map_err(|m| err("message", m))?;
        Ok(Log {
            message,
            label: c.label.unwrap_or_default(),
            level: c.level,
            body: c.body.0,
            category: c.category.unwrap_or_default(),
        })
    }
}

impl Log {
    fn line(&self, ex: &mut Exchange, msg: Message) -> String {
        let mut line = String::new();
        if !self.label.is_empty() {
            line.push_str(&self.label);
            line.push(' ');
        }
        match &self.message {
            Some(t) => {
                t.prepare(ex, msg);
                line.push_str(&t.render_for(ex, msg));
            }
            None => {
                let headers = match msg {
                    Message::Request => {
                        line.push_str(&format!("{} {}", ex.request.method, ex.request.uri));
                        &ex.request.headers
                    }
                    Message::Response => match &ex.response {
                        Some(r) => {
                            line.push_str(r.status().as_str());
                            r.headers()
                        }
                        None => return line,
                    },
                };
                for (k, v) in headers {
                    line.push_str(&format!(
                        " | {k}: {}",
                        String::from_utf8_lossy(v.as_bytes())
                    ));
                }
            }
        }
        if self.body {
            let b = match msg {
                Message::Request => ex.request_bytes(),
                Message::Response => ex.response_bytes(),
            };
            if let Some(b) = b {
                let shown = &b[..b.len().min(BODY_SHOWN)];
                line.push('\n');
                line.push_str(&String::from_utf8_lossy(shown));
                if b.len() > BODY_SHOWN {
                    line.push_str(&format!("… ({} bytes)", b.len()));
                }
            }
        }
        line
    }

    fn write(&self, ex: &mut Exchange, msg: Message) -> Outcome {
        let line = self.line(ex, msg);
        let id = ex.request_id.to_str().unwrap_or("");
        let phase = match msg {
            Message::Request => "request",
            Message::Response => "response",
        };
        let category = self.category.as_str();
        match self.level {
            Level::Trace => {
                tracing::trace!(target: "turnpike::log", request_id = id, phase, category, "{line}")
            }
            Level::Debug => {
                tracing::debug!(target: "turnpike::log", request_id = id, phase, category, "{line}")
            }
            Level::Info => {
                tracing::info!(target: "turnpike::log", request_id = id, phase, category, "{line}")
            }
            Level::Warn => {
                tracing::warn!(target: "turnpike::log", request_id = id, phase, category, "{line}")
            }
            Level::Error => {
                tracing::error!(target: "turnpike::log", request_id = id, phase, category, "{line}")
            }
        }
        Outcome::Continue
    }
}

impl Policy for Log {
    fn name(&self) -> &'static str {
        "log"
    }

    fn body_need(&self) -> BodyNeed {
        if self.body || self.message.as_ref().is_some_and(Template::needs_body) {
            BodyNeed::Buffer
        } else {
            BodyNeed::None
        }
    }

    fn response_body_need(&self) -> BodyNeed {
        self.body_need()
    }

    /// Logs the request.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        self.write(ex, Message::Request)
    }

    /// Logs the response.
    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        self.write(ex, Message::Response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{exchange, plain};

    fn compile(v: serde_json::Value) -> Log {
        Log::compile(serde_json::from_value(v).unwrap(), &plain()).unwrap()
    }

    #[test]
    fn lines_of_requests_and_responses() {
        let l =
            compile(serde_json::json!({ "message": "Path: ${path} ${statusCode}", "label": "**" }));
        let mut ex = exchange("GET", "/a?b=1", &[("x-a", "1")], "");
        assert_eq!(l.line(&mut ex, Message::Request), "** Path: /a ");
        ex.response = Some(
            http::Response::builder()
                .status(201)
                .body(turnpike_core::Body::Empty)
                .unwrap(),
        );
        assert_eq!(l.line(&mut ex, Message::Response), "** Path: /a 201");
        let d = compile(serde_json::json!({ "body": true, "level": "DEBUG" }));
        assert_eq!(d.body_need(), BodyNeed::Buffer);
        let mut ex = exchange("POST", "/x", &[("x-a", "1")], "hello");
        assert_eq!(d.line(&mut ex, Message::Request), "POST /x | x-a: 1\nhello");
        assert!(matches!(d.on_request(&mut ex), Outcome::Continue));
        let none = compile(serde_json::json!({}));
        assert_eq!(none.body_need(), BodyNeed::None);
    }

    #[test]
    fn membrane_levels_and_bad_templates() {
        let s: LogSettings =
            serde_json::from_value(serde_json::json!({ "level": "FATAL" })).unwrap();
        assert_eq!(s.level, Level::Error);
        let s: LogSettings =
            serde_json::from_value(serde_json::json!({ "message": "${nope}" })).unwrap();
        assert!(Log::compile(s, &plain()).is_err());
    }
}
