//! `static`: sets the body of the message in the phase it runs in — the request's in the request
//! phase (a following `return` then answers with it), the response's in the response phase.

use http::{header, HeaderMap, HeaderValue};
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::{Body, Exchange, Outcome, Policy, Template};
use turnpike_core::{CompileContext, CompileError, PolicyFactory};

use crate::err;

/// `static`: sets the response body.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StaticSettings {
    /// The body; may hold templates.
    pub src: String,
    /// `Content-Type` of the body (default `text/plain; charset=utf-8`).
    #[serde(default)]
    pub content_type: Option<String>,
    /// Go on only after this long (a mock as slow as the real backend).
    #[serde(default)]
    pub delay: Option<turnpike_config::units::Duration>,
}

/// The compiled `static` policy.
#[derive(Debug)]
pub struct Static {
    src: Template,
    content_type: HeaderValue,
    delay: Option<std::time::Duration>,
}

impl PolicyFactory for Static {
    const NAME: &'static str = "static";
    type Settings = StaticSettings;

    /// Compiles the policy; `src` may hold templates.
    fn compile(c: StaticSettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        Ok(Static {
            src: Template::parse(&c.src, ctx.scope).map_err(|m| err("src", m))?,
            content_type: match &c.content_type {
                Some(ct) => HeaderValue::from_str(ct)
                    .map_err(|_| err("contentType", "not a valid header value"))?,
                None => HeaderValue::from_static("text/plain; charset=utf-8"),
            },
            delay: crate::delay::check(c.delay)?,
        })
    }
}

impl Static {
    fn set_type(&self, h: &mut HeaderMap) {
        h.remove(header::CONTENT_LENGTH);
        h.remove(header::TRANSFER_ENCODING);
        h.insert(header::CONTENT_TYPE, self.content_type.clone());
    }
}

impl Policy for Static {
    fn name(&self) -> &'static str {
        "static"
    }

    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        ex.request_body = Body::full(self.src.render(ex).into_owned());
        turnpike_core::json::forget_request_json(ex);
        ex.extensions.remove::<turnpike_core::BodyInspected>();
        self.set_type(&mut ex.request.headers);
        match self.delay {
            Some(d) => crate::delay::after(d, Outcome::Continue),
            None => Outcome::Continue,
        }
    }

    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        let body = self.src.render(ex).into_owned();
        if let Some(res) = ex.response.as_mut() {
            *res.body_mut() = Body::full(body);
            self.set_type(res.headers_mut());
        }
        turnpike_core::json::forget_response_json(ex);
        match self.delay {
            Some(d) => crate::delay::after(d, Outcome::Continue),
            None => Outcome::Continue,
        }
    }
}
