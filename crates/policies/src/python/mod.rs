//! `python`: a custom policy written in Python (a subclass of `turnpike_policy.Policy`), run by
//! executor processes the gateway starts and supervises ([`executors`]). Each phase the class
//! implements is one call over a Unix socket ([`conn`]): the request's method, path, query,
//! headers (and body with `body: buffer`) go out, the changes or an early answer come back.
//! The data plane never waits longer than `timeout`; an exception, a crash or a late answer is
//! handled by `onError`.

mod conn;
pub mod executors;

use std::sync::Arc;
use std::time::Duration as StdDuration;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use turnpike_config::units::Duration;
use turnpike_core::{problems, Body, BodyNeed, Exchange, Outcome, Policy, Problem, Resume, Wait};
use turnpike_core::{CompileContext, CompileError, PolicyFactory};

pub use executors::{Executors, PythonSetup};

use crate::err;

/// Whether the policy sees the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum BodyMode {
    /// The body streams past the policy (`request.body` is `None` in Python).
    #[default]
    None,
    /// The body is read into memory (up to `gateway.limits.maxBodySize`) and passed along.
    Buffer,
}

/// What happens when the policy raises, its executor dies, or it does not answer in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum OnError {
    /// Answer with a problem: 500 (`policy-failed`), or 504 (`policy-timeout`) when late.
    #[default]
    Reject,
    /// Go on as if the policy had not run.
    Skip,
}

/// `python`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PythonSettings {
    /// The module: `NAME.py` or a package in a folder of `gateway.python.path`.
    pub module: String,
    /// The class in the module, a subclass of `turnpike_policy.Policy`.
    pub class: String,
    /// Passed to the class's constructor (a dict; `{}` by default).
    #[serde(default)]
    pub config: Option<serde_json::Value>,
    /// `none` (default) or `buffer`: whether the policy sees the body.
    #[serde(default)]
    pub body: BodyMode,
    /// How long each call may take (default `1s`).
    #[serde(default)]
    pub timeout: Option<Duration>,
    /// `reject` (default) or `skip`.
    #[serde(default)]
    pub on_error: OnError,
}

/// A compiled `python` policy.
#[derive(Debug)]
pub struct Python {
    id: usize,
    handle: Arc<Handle>,
    executors: Arc<Executors>,
    body: BodyMode,
    path_params: Arc<[String]>,
    files: Vec<std::path::PathBuf>,
}

impl PolicyFactory for Python {
    const NAME: &'static str = "python";
    type Settings = PythonSettings;

    fn compile(c: PythonSettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        let Some(executors) = ctx.get::<Arc<Executors>>().cloned() else {
            return Err(err("", "Python policies are not available here"));
        };
        if c.module.is_empty() || !c.module.split('.').all(is_identifier) {
            return Err(err("module", "not a Python module name"));
        }
        if !is_identifier(&c.class) {
            return Err(err("class", "not a Python class name"));
        }
        let config = c.config.unwrap_or_else(|| serde_json::json!({}));
        if !config.is_object() {
            return Err(err("config", "must be a map"));
        }
        let timeout = c.timeout.map_or(StdDuration::from_secs(1), |d| d.0);
        if timeout.is_zero() {
            return Err(err("timeout", "must be more than 0"));
        }
        if c.on_error == OnError::Skip {
            // Fail-open: a crash, an exception or a timeout lets the request through unchecked.
            tracing::warn!(
                site = ctx.site,
                "python {}.{}: `onError: skip` lets requests through unchecked when the policy \
                 fails or is late; do not use it for a policy that authenticates or authorizes",
                c.module,
                c.class
            );
        }
        let id = executors.register(&c.module, &c.class, config, ctx.site);
        Ok(Python {
            id,
            handle: Arc::new(Handle {
                name: format!("{}.{}", c.module, c.class).into(),
                on_error: c.on_error,
                timeout,
            }),
            files: executors.module_files(&c.module),
            executors,
            body: c.body,
            path_params: ctx.scope.path_params.clone().into(),
        })
    }
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || c == '_')
}

/// The request as the executor reads it.
#[derive(Serialize)]
struct Call<'a> {
    policy: usize,
    phase: &'static str,
    method: &'a str,
    path: &'a str,
    query: &'a str,
    headers: Vec<(&'a str, &'a str)>,
    client: String,
    consumer: Option<ConsumerJson<'a>>,
    jwt: Option<&'a serde_json::Map<String, serde_json::Value>>,
    #[serde(rename = "pathParams")]
    path_params: serde_json::Map<String, serde_json::Value>,
    body: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    response: Option<ResponseJson<'a>>,
    #[serde(rename = "responseBody", skip_serializing_if = "Option::is_none")]
    response_body: Option<bool>,
}

#[derive(Serialize)]
struct ConsumerJson<'a> {
    name: &'a str,
    groups: Vec<&'a str>,
}

#[derive(Serialize)]
struct ResponseJson<'a> {
    status: u16,
    headers: Vec<(&'a str, &'a str)>,
}

/// What the executor answers.
#[derive(Deserialize, Default)]
struct Reply {
    action: String,
    #[serde(default)]
    request: Option<Changes>,
    #[serde(default)]
    response: Option<Changes>,
    #[serde(default)]
    body: Option<bool>,
    #[serde(default)]
    status: Option<u16>,
    #[serde(default)]
    headers: Option<Vec<(String, String)>>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    traceback: Option<String>,
}

#[derive(Deserialize, Default)]
struct Changes {
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    query: Option<String>,
    #[serde(default)]
    headers: Option<Vec<(String, String)>>,
    #[serde(default)]
    status: Option<u16>,
}

fn header_pairs(h: &HeaderMap) -> Vec<(&str, &str)> {
    h.iter()
        .filter_map(|(k, v)| v.to_str().ok().map(|v| (k.as_str(), v)))
        .collect()
}

fn headers_from(pairs: Vec<(String, String)>) -> Result<HeaderMap, String> {
    let mut h = HeaderMap::with_capacity(pairs.len());
    for (k, v) in pairs {
        let name = HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| format!("`{k}` is not a header name"))?;
        let value =
            HeaderValue::from_str(&v).map_err(|_| format!("the value of `{k}` is not valid"))?;
        h.append(name, value);
    }
    Ok(h)
}

impl Python {
    fn call_json(&self, ex: &Exchange, response: bool) -> Vec<u8> {
        let id = ex.identity();
        let uri = &ex.request.uri;
        let mut path_params = serde_json::Map::new();
        for (i, n) in self.path_params.iter().enumerate() {
            path_params.insert(n.clone(), ex.param(i).into());
        }
        let call = Call {
            policy: self.id,
            phase: if response { "response" } else { "request" },
            method: ex.request.method.as_str(),
            path: uri.path(),
            query: uri.query().unwrap_or(""),
            headers: header_pairs(&ex.request.headers),
            client: ex.client.ip().to_string(),
            consumer: id.and_then(|i| {
                i.consumer.as_deref().map(|name| ConsumerJson {
                    name,
                    groups: i.groups.iter().map(|g| &**g).collect(),
                })
            }),
            jwt: id.and_then(|i| i.claims.as_deref()),
            path_params,
            body: !response && self.body == BodyMode::Buffer,
            response: if response {
                ex.response.as_ref().map(|r| ResponseJson {
                    status: r.status().as_u16(),
                    headers: header_pairs(r.headers()),
                })
            } else {
                None
            },
            response_body: response.then_some(self.body == BodyMode::Buffer),
        };
        serde_json::to_vec(&call).unwrap_or_default()
    }

    /// One phase: sends the exchange to an executor and applies its answer.
    fn run(&self, ex: &mut Exchange, response: bool) -> Outcome {
        let Some(pool) = self.executors.pool().cloned() else {
            return self.failed(ex, "the Python executors are not running", false);
        };
        let phases = pool.phases.get(self.id).copied().unwrap_or_default();
        if (response && !phases.response) || (!response && !phases.request) {
            return Outcome::Continue;
        }
        let json = self.call_json(ex, response);
        let body = match (self.body, response) {
            (BodyMode::None, _) => Bytes::new(),
            (BodyMode::Buffer, false) => ex.request_bytes().cloned().unwrap_or_default(),
            (BodyMode::Buffer, true) => ex.response_bytes().cloned().unwrap_or_default(),
        };
        let (me, late) = (self.handle.clone(), self.handle.clone());
        let in_flight = std::rc::Rc::new(conn::InFlight::default());
        let watch = in_flight.clone();
        Outcome::Wait(Wait::new(
            async move {
                let answer = conn::call(&pool, &json, &body, &in_flight).await;
                Box::new(move |ex: &mut Exchange| match answer {
                    Ok(frame) => me.apply(ex, frame, response),
                    Err(e) => me.failed(ex, &e.to_string(), false),
                }) as Resume
            },
            self.handle.timeout,
            move |ex| {
                // The executor holding the call is stuck or overloaded: the watchdog starts it
                // again rather than let it hold every later request.
                if watch.condemn() {
                    late.failed(
                        ex,
                        "it did not answer in time; its executor is started again",
                        true,
                    )
                } else {
                    late.failed(ex, "it did not answer in time", true)
                }
            },
        ))
    }

    fn failed(&self, ex: &mut Exchange, why: &str, late: bool) -> Outcome {
        self.handle.failed(ex, why, late)
    }
}

/// What applying an answer needs of the policy (the future owns it).
#[derive(Debug)]
struct Handle {
    name: Arc<str>,
    on_error: OnError,
    timeout: StdDuration,
}

impl Handle {
    fn failed(&self, ex: &mut Exchange, why: &str, late: bool) -> Outcome {
        let request_id = ex.request_id.to_str().unwrap_or("");
        tracing::warn!(policy = %self.name, request_id, timeout = ?self.timeout, "the Python policy failed: {why}");
        match self.on_error {
            OnError::Skip => Outcome::Continue,
            OnError::Reject if late => Outcome::Reject(Problem::new(&problems::POLICY_TIMEOUT)),
            OnError::Reject => Outcome::Reject(Problem::new(&problems::POLICY_FAILED)),
        }
    }

    fn apply(&self, ex: &mut Exchange, frame: conn::Frame, response: bool) -> Outcome {
        let reply: Reply = match serde_json::from_slice(&frame.json) {
            Ok(r) => r,
            Err(_) => return self.failed(ex, "its answer could not be read", false),
        };
        match reply.action.as_str() {
            "continue" => match self.changes(ex, reply, frame.body, response) {
                Ok(()) => Outcome::Continue,
                Err(m) => self.failed(ex, &m, false),
            },
            "respond" => {
                let status = reply
                    .status
                    .and_then(|s| StatusCode::from_u16(s).ok())
                    .unwrap_or(StatusCode::OK);
                let headers = match headers_from(reply.headers.unwrap_or_default()) {
                    Ok(h) => h,
                    Err(m) => return self.failed(ex, &m, false),
                };
                let mut r = http::Response::new(Body::full(frame.body));
                *r.status_mut() = status;
                *r.headers_mut() = headers;
                r.headers_mut().remove(header::CONTENT_LENGTH);
                r.headers_mut().remove(header::TRANSFER_ENCODING);
                Outcome::Respond(r)
            }
            _ => {
                let message = reply.message.unwrap_or_else(|| "unknown error".into());
                let request_id = ex.request_id.to_str().unwrap_or("");
                tracing::warn!(
                    policy = %self.name,
                    request_id,
                    traceback = reply.traceback.as_deref().unwrap_or(""),
                    "the Python policy raised {message}"
                );
                match self.on_error {
                    OnError::Skip => Outcome::Continue,
                    OnError::Reject => Outcome::Reject(Problem::new(&problems::POLICY_FAILED)),
                }
            }
        }
    }

    fn changes(
        &self,
        ex: &mut Exchange,
        reply: Reply,
        body: Bytes,
        response: bool,
    ) -> Result<(), String> {
        if response {
            let Some(res) = ex.response.as_mut() else {
                return Ok(());
            };
            if let Some(c) = reply.response {
                if let Some(s) = c.status {
                    *res.status_mut() =
                        StatusCode::from_u16(s).map_err(|_| format!("{s} is not a status"))?;
                }
                if let Some(h) = c.headers {
                    *res.headers_mut() = headers_from(h)?;
                }
            }
            if reply.body == Some(true) {
                *res.body_mut() = Body::full(body);
                res.headers_mut().remove(header::CONTENT_LENGTH);
                res.headers_mut().remove(header::TRANSFER_ENCODING);
                turnpike_core::json::forget_response_json(ex);
            }
            return Ok(());
        }
        if let Some(c) = reply.request {
            if let Some(m) = c.method {
                ex.request.method = Method::from_bytes(m.as_bytes())
                    .map_err(|_| format!("`{m}` is not a method"))?;
            }
            if c.path.is_some() || c.query.is_some() {
                let uri = &ex.request.uri;
                let path = c.path.as_deref().unwrap_or(uri.path());
                let query = c.query.as_deref().or(uri.query()).unwrap_or("");
                if !path.starts_with('/') {
                    return Err(format!("the path `{path}` does not start with /"));
                }
                let pq = if query.is_empty() {
                    path.to_owned()
                } else {
                    format!("{path}?{query}")
                };
                let mut parts = uri.clone().into_parts();
                parts.path_and_query = Some(
                    http::uri::PathAndQuery::try_from(pq.as_str())
                        .map_err(|_| format!("`{pq}` is not a valid path and query"))?,
                );
                ex.request.uri =
                    http::Uri::from_parts(parts).map_err(|_| "not a valid URI".to_owned())?;
            }
            if let Some(h) = c.headers {
                ex.request.headers = headers_from(h)?;
            }
        }
        if reply.body == Some(true) {
            ex.request_body = Body::full(body);
            ex.request.headers.remove(header::CONTENT_LENGTH);
            ex.request.headers.remove(header::TRANSFER_ENCODING);
            turnpike_core::json::forget_request_json(ex);
            ex.extensions.remove::<turnpike_core::BodyInspected>();
        }
        Ok(())
    }
}

impl Policy for Python {
    fn name(&self) -> &'static str {
        "python"
    }

    fn body_need(&self) -> BodyNeed {
        match self.body {
            BodyMode::None => BodyNeed::None,
            BodyMode::Buffer => BodyNeed::Buffer,
        }
    }

    fn response_body_need(&self) -> BodyNeed {
        self.body_need()
    }

    /// The module's file, so that `--watch` reloads when it changes.
    fn files(&self) -> Vec<std::path::PathBuf> {
        self.files.clone()
    }

    /// Asks the executor to run `on_request` (when the class has it).
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        self.run(ex, false)
    }

    /// Asks the executor to run `on_response` (when the class has it).
    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        self.run(ex, true)
    }
}
