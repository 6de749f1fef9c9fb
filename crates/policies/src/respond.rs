//! `return`: answers the request without a backend.
//!
//! As in Membrane, the answer's body is the configured `body`, or else the current request's
//! body and `Content-Type` (which a preceding `static` may have set). The request body is passed
//! on as a stream, never copied.

use std::collections::BTreeMap;

use http::{header, HeaderName, HeaderValue, Response, StatusCode};
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::{Body, Exchange, Outcome, Policy, Template};
use turnpike_core::{CompileContext, CompileError, Phases, PolicyFactory};

use crate::err;
use crate::headers::{header_name, ValueTemplate};

/// `return`: answers the request.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReturnSettings {
    /// Status code (default 200); Membrane's `statusCode` too.
    #[serde(default, alias = "statusCode")]
    pub status: Option<u16>,
    /// Response headers; values may hold templates.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Response body; may hold templates. A preceding `static` supplies it otherwise.
    #[serde(default)]
    pub body: Option<String>,
    /// `Content-Type` of the body (default `text/plain; charset=utf-8` when there is a body).
    #[serde(default)]
    pub content_type: Option<String>,
    /// Answer only after this long (a mock as slow as the real backend).
    #[serde(default)]
    pub delay: Option<turnpike_config::units::Duration>,
}

/// The compiled `return` policy.
#[derive(Debug)]
pub struct Return {
    status: StatusCode,
    headers: Vec<(HeaderName, ValueTemplate)>,
    body: Option<Template>,
    content_type: Option<HeaderValue>,
    delay: Option<std::time::Duration>,
}

impl PolicyFactory for Return {
    const NAME: &'static str = "return";
    const PHASES: Phases = Phases::REQUEST;
    const ANSWERS: bool = true;
    type Settings = ReturnSettings;

    /// Compiles the policy; status, header names and templates are checked here.
    fn compile(c: ReturnSettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        let status = match c.status {
            None => StatusCode::OK,
            Some(s) => StatusCode::from_u16(s)
                .ok()
                .filter(|_| (200..=599).contains(&s))
                .ok_or_else(|| {
                    err(
                        "status",
                        format!("{s} is not a final HTTP status (200-599)"),
                    )
                })?,
        };
        let mut headers = Vec::new();
        for (k, v) in &c.headers {
            let name = header_name(k).map_err(|e| err(&format!("headers.{k}"), e.message))?;
            let value =
                ValueTemplate::compile(v, ctx).map_err(|m| err(&format!("headers.{k}"), m))?;
            headers.push((name, value));
        }
        let body = c
            .body
            .as_deref()
            .map(|b| Template::parse(b, ctx.scope))
            .transpose()
            .map_err(|m| err("body", m))?;
        let content_type = c
            .content_type
            .as_deref()
            .map(HeaderValue::from_str)
            .transpose()
            .map_err(|_| err("contentType", "not a valid header value"))?;
        Ok(Return {
            status,
            headers,
            body,
            content_type,
            delay: crate::delay::check(c.delay)?,
        })
    }
}

impl Policy for Return {
    fn name(&self) -> &'static str {
        "return"
    }

    fn response_needs_request(&self) -> bool {
        false
    }

    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let (body, content_type) = match &self.body {
            Some(t) => (
                Body::full(t.render(ex).into_owned()),
                Some(
                    self.content_type
                        .clone()
                        .unwrap_or(HeaderValue::from_static("text/plain; charset=utf-8")),
                ),
            ),
            None => (
                // A body in memory is shared (the request keeps it for the response phase's
                // policies, as in Membrane); a streamed one moves to the response.
                match ex.request_bytes() {
                    Some(b) => Body::full(b.clone()),
                    None => std::mem::take(&mut ex.request_body),
                },
                self.content_type
                    .clone()
                    .or_else(|| ex.request.headers.get(header::CONTENT_TYPE).cloned()),
            ),
        };
        let mut res = Response::new(body);
        *res.status_mut() = self.status;
        let h = res.headers_mut();
        if let Some(ct) = content_type {
            h.insert(header::CONTENT_TYPE, ct);
        }
        for (name, value) in &self.headers {
            if let Some(v) = value.render(ex) {
                res.headers_mut().insert(name.clone(), v);
            }
        }
        match self.delay {
            Some(d) => crate::delay::after(d, Outcome::Respond(res)),
            None => Outcome::Respond(res),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::exchange;
    use http_body_util::BodyExt;
    use std::collections::BTreeMap;
    use turnpike_core::TemplateScope;

    fn compile(
        status: Option<u16>,
        body: Option<&str>,
        ct: Option<&str>,
    ) -> Result<Return, CompileError> {
        let scope = TemplateScope::default();
        Return::compile(
            ReturnSettings {
                status,
                headers: BTreeMap::from([("X-M".to_string(), "${method}".to_string())]),
                body: body.map(str::to_owned),
                content_type: ct.map(str::to_owned),
                delay: None,
            },
            &crate::testutil::ctx(&scope),
        )
    }

    async fn run(p: &Return, ex: &mut Exchange) -> (Response<()>, String) {
        let Outcome::Respond(r) = p.on_request(ex) else {
            panic!("expected a response")
        };
        let (parts, body) = r.into_parts();
        let bytes = body.collect().await.unwrap().to_bytes();
        (
            Response::from_parts(parts, ()),
            String::from_utf8(bytes.to_vec()).unwrap(),
        )
    }

    #[tokio::test]
    async fn configured_body() {
        let p = compile(Some(201), Some("hi ${method}"), None).unwrap();
        let mut ex = exchange("PUT", "/", &[], "");
        let (r, body) = run(&p, &mut ex).await;
        assert_eq!(r.status(), 201);
        assert_eq!(body, "hi PUT");
        assert_eq!(r.headers()["content-type"], "text/plain; charset=utf-8");
        assert_eq!(r.headers()["x-m"], "PUT");
    }

    #[tokio::test]
    async fn echoes_request_body_and_type_like_membrane() {
        let p = compile(None, None, None).unwrap();
        let mut ex = exchange(
            "POST",
            "/",
            &[("content-type", "application/json")],
            "{\"a\":1}",
        );
        let (r, body) = run(&p, &mut ex).await;
        assert_eq!(r.status(), 200);
        assert_eq!(body, "{\"a\":1}");
        assert_eq!(r.headers()["content-type"], "application/json");
    }

    #[test]
    fn rejects_bad_status() {
        assert_eq!(compile(Some(99), None, None).unwrap_err().key, "status");
        assert_eq!(compile(Some(600), None, None).unwrap_err().key, "status");
        assert_eq!(compile(Some(101), None, None).unwrap_err().key, "status");
    }
}
