//! The checks of `jsonRPCProtection` on requests and responses, and its JSON-RPC error
//! answers (Membrane's codes, statuses and messages).

use std::collections::HashMap;

use http::{header, HeaderValue, Method, Response, StatusCode};
use serde_json::{json, Map, Value};
use turnpike_core::{json_strict, Body, Exchange, Outcome};

use super::JsonRpcProtection;

/// The request is not a valid JSON-RPC request.
pub(crate) const INVALID_REQUEST: i64 = -32600;
/// The method is not allowed.
pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
/// The params do not match the method's schema.
pub(crate) const INVALID_PARAMS: i64 = -32602;
/// The backend's response is not valid.
pub(crate) const INTERNAL_ERROR: i64 = -32603;

/// A failed check: answered with a JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RpcError {
    /// True when the payload was a batch: the error object is wrapped in an array.
    pub batch: bool,
    /// The request's id (`null` for notifications and structural errors).
    pub id: Value,
    /// The HTTP status.
    pub status: StatusCode,
    /// The JSON-RPC error code.
    pub code: i64,
    /// The error message.
    pub message: String,
}

impl RpcError {
    pub(crate) fn new(
        batch: bool,
        status: StatusCode,
        code: i64,
        message: impl Into<String>,
    ) -> Self {
        RpcError {
            batch,
            id: Value::Null,
            status,
            code,
            message: message.into(),
        }
    }

    pub(crate) fn with_id(mut self, id: Option<&Value>) -> Self {
        self.id = id.cloned().unwrap_or(Value::Null);
        self
    }

    /// The JSON body: `{"jsonrpc":"2.0","id":…,"error":{"code":…,"message":…}}`, in an array
    /// for a batch.
    pub fn body(&self) -> Value {
        let e = json!({
            "jsonrpc": "2.0",
            "id": self.id,
            "error": {"code": self.code, "message": self.message}
        });
        if self.batch {
            Value::Array(vec![e])
        } else {
            e
        }
    }

    /// The response with the error object (`Content-Type: application/json`).
    pub fn response(&self) -> Response<Body> {
        let mut r = Response::new(Body::full(self.body().to_string()));
        *r.status_mut() = self.status;
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        r
    }
}

/// What the response check needs to know about the request: batch or not, and the method of
/// each id (requests that are not notifications).
#[derive(Debug, Clone, Default)]
pub(crate) struct Sent {
    batch: bool,
    methods: HashMap<String, String>,
}

/// A parsed request object.
struct Request {
    /// `None` for a notification.
    id: Option<Value>,
    method: String,
    /// `null` when absent.
    params: Value,
}

/// The key of an id: its JSON text (so that `1` and `"1"` differ, as in Membrane).
fn id_key(id: &Value) -> String {
    id.to_string()
}

/// An id as Membrane writes it in messages: strings without quotes.
fn id_text(id: &Value) -> String {
    match id {
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

fn version_ok(o: &Map<String, Value>) -> Result<(), String> {
    match o.get("jsonrpc") {
        Some(Value::String(v)) if v == "2.0" => Ok(()),
        Some(Value::String(v)) => Err(format!("Unsupported or missing jsonrpc version: {v}")),
        None | Some(Value::Null) => Err("Unsupported or missing jsonrpc version: null".into()),
        Some(v) => Err(format!("Unsupported or missing jsonrpc version: {v}")),
    }
}

fn parse_request(o: &Map<String, Value>) -> Result<Request, String> {
    if let Some(m) = json_strict::case_variant(o, DECISIVE) {
        return Err(m);
    }
    version_ok(o)?;
    let Some(Value::String(method)) = o.get("method") else {
        return Err("'method' must be a string".into());
    };
    let id = match o.get("id") {
        None => None,
        Some(v @ (Value::Null | Value::String(_) | Value::Number(_))) => Some(v.clone()),
        Some(_) => return Err("'id' must be string, number, or null".into()),
    };
    let params = match o.get("params") {
        None | Some(Value::Null) => Value::Null,
        Some(v @ (Value::Array(_) | Value::Object(_))) => v.clone(),
        Some(_) => return Err("'params' must be array or object".into()),
    };
    Ok(Request {
        id,
        method: method.clone(),
        params,
    })
}

/// The members a request is judged by: a case variant of one of them beside it is refused.
pub(crate) const DECISIVE: &[&str] = &["jsonrpc", "method", "id", "params"];

/// True for `application/json` and `application/…+json`.
pub(crate) fn is_json(ct: &str) -> bool {
    let essence = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// The first `Content-Encoding` that is not `identity`.
pub(crate) fn compressed(headers: &http::HeaderMap) -> Option<String> {
    headers
        .get_all(header::CONTENT_ENCODING)
        .iter()
        .find(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"))
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
}

/// True when a payload looks like a batch (Membrane decides this on the text, before parsing).
pub(crate) fn looks_like_batch(body: &[u8]) -> bool {
    body.iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'[')
}

impl JsonRpcProtection {
    /// Checks one request object; remembers its method for the response check.
    fn check_one(
        &self,
        o: &Map<String, Value>,
        batch: bool,
        sent: &mut Sent,
    ) -> Result<(), RpcError> {
        let req = parse_request(o).map_err(|reason| {
            let what = if batch {
                "Invalid JSON-RPC request in batch"
            } else {
                "Invalid JSON-RPC request"
            };
            RpcError::new(
                batch,
                StatusCode::BAD_REQUEST,
                INVALID_REQUEST,
                format!("{what}: {reason}"),
            )
        })?;
        if let Some((_, allows)) = self.rules.iter().find(|(re, _)| re.is_match(&req.method)) {
            if !allows {
                return Err(RpcError::new(
                    batch,
                    StatusCode::FORBIDDEN,
                    METHOD_NOT_FOUND,
                    format!("JSON-RPC method '{}' is not allowed.", req.method),
                )
                .with_id(req.id.as_ref()));
            }
        }
        if let Some(schema) = self.params.get(&req.method) {
            let errors = schema.errors(&req.params);
            if !errors.is_empty() {
                return Err(RpcError::new(
                    batch,
                    StatusCode::BAD_REQUEST,
                    INVALID_PARAMS,
                    format!(
                        "Invalid params for method '{}': {}",
                        req.method,
                        errors.join("; ")
                    ),
                )
                .with_id(req.id.as_ref()));
            }
        }
        if let Some(id) = &req.id {
            sent.methods.entry(id_key(id)).or_insert(req.method);
        }
        Ok(())
    }

    /// Checks a request payload. Returns what the response check needs, or the error.
    pub(crate) fn check_request(&self, body: &[u8]) -> Result<Sent, RpcError> {
        let batch_text = looks_like_batch(body);
        let root: Value = json_strict::parse_unique(body).map_err(|e| {
            // Two members of one name: parsers disagree on which counts, so it is refused.
            let message = if e.contains("duplicate member") {
                format!(
                    "Invalid JSON-RPC payload: {}",
                    e.split(" at line").next().unwrap_or(&e)
                )
            } else {
                "Invalid JSON-RPC payload".to_owned()
            };
            RpcError::new(
                batch_text,
                StatusCode::BAD_REQUEST,
                INVALID_REQUEST,
                message,
            )
        })?;
        match root {
            Value::Object(o) => {
                let mut sent = Sent::default();
                self.check_one(&o, false, &mut sent)?;
                Ok(sent)
            }
            Value::Array(entries) => {
                let invalid =
                    |m: String| RpcError::new(true, StatusCode::BAD_REQUEST, INVALID_REQUEST, m);
                if !self.batch_enabled {
                    return Err(invalid("Batch requests are disabled.".into()));
                }
                if entries.is_empty() {
                    return Err(invalid("Batch requests must not be empty.".into()));
                }
                if entries.len() > self.batch_max {
                    return Err(invalid(format!(
                        "Batch request exceeds maxSize of {}.",
                        self.batch_max
                    )));
                }
                let mut sent = Sent {
                    batch: true,
                    methods: HashMap::new(),
                };
                for e in &entries {
                    let Value::Object(o) = e else {
                        return Err(invalid(
                            "Each batch entry must be a JSON-RPC request object.".into(),
                        ));
                    };
                    self.check_one(o, true, &mut sent)?;
                }
                Ok(sent)
            }
            _ => Err(RpcError::new(
                batch_text,
                StatusCode::BAD_REQUEST,
                INVALID_REQUEST,
                "JSON-RPC payload must be an object or batch array.",
            )),
        }
    }

    /// The request phase: `POST` requests with a body are checked.
    pub(crate) fn request(&self, ex: &mut Exchange) -> Outcome {
        if ex.request.method != Method::POST {
            return Outcome::Continue;
        }
        let body = ex.request_bytes().cloned().unwrap_or_default();
        if body.is_empty() {
            return Outcome::Continue;
        }
        let ct = ex
            .request
            .headers
            .get(header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let batch_text = looks_like_batch(&body);
        if !ct.as_deref().is_some_and(is_json) {
            let e = RpcError::new(
                batch_text,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                INVALID_REQUEST,
                format!(
                    "Content-Type {} is not supported. Expected application/json.",
                    ct.as_deref().unwrap_or("null")
                ),
            );
            return self.refuse(e);
        }
        if let Some(enc) = compressed(&ex.request.headers) {
            let e = RpcError::new(
                batch_text,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                INVALID_REQUEST,
                format!("Content-Encoding {enc} is not supported."),
            );
            return self.refuse(e);
        }
        if body.iter().all(u8::is_ascii_whitespace) {
            return Outcome::Continue;
        }
        match self.check_request(&body) {
            Ok(sent) => {
                if self.checks_responses() && (!sent.methods.is_empty() || self.error.is_some()) {
                    ex.extensions.insert(sent);
                }
                Outcome::Continue
            }
            Err(e) => self.refuse(e),
        }
    }

    fn refuse(&self, e: RpcError) -> Outcome {
        tracing::debug!("jsonRPCProtection: {}", e.message);
        Outcome::Respond(e.response())
    }

    /// Checks one response object.
    fn check_response_one(
        &self,
        o: &Map<String, Value>,
        sent: &Sent,
        batch: bool,
    ) -> Result<(), RpcError> {
        let fail = |id: Option<&Value>, m: String| {
            RpcError::new(batch, StatusCode::INTERNAL_SERVER_ERROR, INTERNAL_ERROR, m).with_id(id)
        };
        let invalid = |m: &str| fail(None, format!("Invalid JSON-RPC response: {m}"));
        version_ok(o).map_err(|m| invalid(&m))?;
        let id = match o.get("id") {
            None => return Err(invalid("'id' is required")),
            Some(v @ (Value::Null | Value::String(_) | Value::Number(_))) => v,
            Some(_) => return Err(invalid("'id' must be string, number, or null")),
        };
        match (o.get("result"), o.get("error")) {
            (Some(_), Some(_)) => Err(invalid("'result' and 'error' are mutually exclusive")),
            (None, None) => Err(invalid("either 'result' or 'error' must be present")),
            (None, Some(error)) => {
                let Value::Object(eo) = error else {
                    return Err(invalid("'error' must be a JSON object"));
                };
                if !eo.get("code").is_some_and(|c| c.is_i64() || c.is_u64()) {
                    return Err(invalid("'code' must be an integer"));
                }
                if !eo.get("message").is_some_and(Value::is_string) {
                    return Err(invalid("'message' must be a string"));
                }
                let Some(schema) = &self.error else {
                    return Ok(());
                };
                let errors = schema.errors(error);
                if errors.is_empty() {
                    return Ok(());
                }
                Err(fail(
                    Some(id),
                    format!("Invalid error response: {}", errors.join("; ")),
                ))
            }
            (Some(result), None) => {
                if self.results.is_empty() || sent.methods.is_empty() {
                    return Ok(());
                }
                let Some(method) = sent.methods.get(&id_key(id)) else {
                    return Err(fail(
                        Some(id),
                        format!(
                            "JSON-RPC response id '{}' does not match any request.",
                            id_text(id)
                        ),
                    ));
                };
                let Some(schema) = self.results.get(method) else {
                    return Ok(());
                };
                let errors = schema.errors(result);
                if errors.is_empty() {
                    return Ok(());
                }
                Err(fail(
                    Some(id),
                    format!(
                        "Invalid result for method '{method}': {}",
                        errors.join("; ")
                    ),
                ))
            }
        }
    }

    /// Checks a response body against what was sent.
    pub(crate) fn check_response(&self, body: &[u8], sent: &Sent) -> Result<(), RpcError> {
        let batch = sent.batch;
        let fail =
            |m: &str| RpcError::new(batch, StatusCode::INTERNAL_SERVER_ERROR, INTERNAL_ERROR, m);
        if body.iter().all(u8::is_ascii_whitespace) {
            if sent.methods.is_empty() {
                // Only notifications were sent: no answer is due.
                return Ok(());
            }
            return Err(fail("JSON-RPC response must not be empty."));
        }
        let root: Value =
            serde_json::from_slice(body).map_err(|_| fail("Invalid JSON-RPC response payload"))?;
        if !batch {
            let Value::Object(o) = root else {
                return Err(fail("JSON-RPC response must be an object."));
            };
            return self.check_response_one(&o, sent, false);
        }
        let Value::Array(entries) = root else {
            return Err(fail("JSON-RPC batch response must be an array."));
        };
        if entries.is_empty() {
            return Err(fail("Batch responses must not be empty."));
        }
        for e in &entries {
            let Value::Object(o) = e else {
                return Err(fail("Each batch entry must be a JSON-RPC response object."));
            };
            self.check_response_one(o, sent, true)?;
        }
        Ok(())
    }

    /// The response phase: the backend's answer to a request that passed.
    pub(crate) fn response(&self, ex: &mut Exchange) -> Outcome {
        let Some(sent) = ex.extensions.get::<Sent>() else {
            return Outcome::Continue;
        };
        let Some(res) = ex.response.as_ref() else {
            return Outcome::Continue;
        };
        // The gateway's own problems (the backend could not be reached) pass as they are.
        if res
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/problem+json"))
        {
            return Outcome::Continue;
        }
        let result = match compressed(res.headers()) {
            Some(enc) => Err(RpcError::new(
                sent.batch,
                StatusCode::INTERNAL_SERVER_ERROR,
                INTERNAL_ERROR,
                format!("The JSON-RPC response is compressed (Content-Encoding: {enc}) and cannot be checked."),
            )),
            None => {
                let body = ex.response_bytes().cloned().unwrap_or_default();
                self.check_response(&body, sent)
            }
        };
        match result {
            Ok(()) => Outcome::Continue,
            Err(e) => {
                tracing::info!(
                    "jsonRPCProtection: refused the backend's response: {}",
                    e.message
                );
                Outcome::Respond(e.response())
            }
        }
    }
}
