//! `setBody`: Membrane's policy that sets the body of the message in the phase it runs in from
//! a template (`value`), as [`static`](crate::static_body) does with `src`.

use http::HeaderValue;
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::PolicyFactory;
use turnpike_core::{BodyNeed, CompileContext, CompileError, Exchange, Outcome, Policy};

use crate::err;
use crate::static_body::Static;

/// `setBody`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SetBodySettings {
    /// The body; may hold templates (Membrane's placeholder spellings included).
    pub value: String,
    /// `Content-Type` of the body (default `text/plain; charset=utf-8`).
    #[serde(default)]
    pub content_type: Option<String>,
    /// The language of the value's placeholders: absent (or `spel`) for the built-in
    /// templates, `jsonpath` or `xpath` for expressions on the body.
    #[serde(default)]
    pub language: Option<crate::language::ExpressionLanguage>,
}

/// The compiled `setBody` policy.
#[derive(Debug)]
pub struct SetBody(Static);

impl PolicyFactory for SetBody {
    const NAME: &'static str = "setBody";
    type Settings = SetBodySettings;

    fn compile(c: SetBodySettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        Ok(SetBody(Static {
            name: "setBody",
            src: crate::language::compile_template(&c.value, c.language, ctx)
                .map_err(|m| err("value", m))?,
            content_type: match &c.content_type {
                Some(ct) => HeaderValue::from_str(ct)
                    .map_err(|_| err("contentType", "not a valid header value"))?,
                None => HeaderValue::from_static("text/plain; charset=utf-8"),
            },
            delay: None,
            pretty: false,
            envelope: None,
        }))
    }
}

impl Policy for SetBody {
    fn name(&self) -> &'static str {
        "setBody"
    }

    fn body_need(&self) -> BodyNeed {
        self.0.body_need()
    }

    fn response_body_need(&self) -> BodyNeed {
        self.0.response_body_need()
    }

    /// Sets the request's body.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        self.0.on_request(ex)
    }

    /// Sets the response's body.
    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        self.0.on_response(ex)
    }
}
