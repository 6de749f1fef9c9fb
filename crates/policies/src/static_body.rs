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
    /// Re-indent the result when it is JSON (Membrane's `pretty`).
    #[serde(default)]
    pub pretty: turnpike_config::units::Flag,
}

/// The compiled `static` policy (and the body `template` sets, see [`crate::template`]).
#[derive(Debug)]
pub struct Static {
    pub(crate) name: &'static str,
    pub(crate) src: Template,
    pub(crate) content_type: HeaderValue,
    pub(crate) delay: Option<std::time::Duration>,
    /// Re-indent a JSON result (an XML one with `envelope`).
    pub(crate) pretty: bool,
    /// Wrap the result in a SOAP envelope (`soapBody`): (prefix, envelope namespace).
    pub(crate) envelope: Option<(&'static str, &'static str)>,
}

impl PolicyFactory for Static {
    const NAME: &'static str = "static";
    type Settings = StaticSettings;

    /// Compiles the policy; `src` may hold templates.
    fn compile(c: StaticSettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        Ok(Static {
            name: "static",
            pretty: c.pretty.0,
            envelope: None,
            src: crate::language::compile_template(&c.src, None, ctx).map_err(|m| err("src", m))?,
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
    /// The body for the message `msg`: the template rendered (re-indented when `pretty` and
    /// the result is JSON).
    fn body(&self, ex: &mut Exchange, msg: turnpike_core::jsonpath::Message) -> String {
        self.src.prepare(ex, msg);
        let text = self.src.render_for(ex, msg).into_owned();
        if let Some((prefix, ns)) = self.envelope {
            let soap = format!(
                "<{prefix}:Envelope xmlns:{prefix}=\"{ns}\"><{prefix}:Body>{text}</{prefix}:Body></{prefix}:Envelope>"
            );
            return match self.pretty.then(|| crate::pretty::xml(soap.as_bytes())) {
                Some(Some(x)) => String::from_utf8(x).unwrap_or(soap),
                _ => soap,
            };
        }
        if self.pretty && serde_json::from_str::<serde::de::IgnoredAny>(&text).is_ok() {
            return crate::pretty::reindent(&text);
        }
        text
    }

    fn set_type(&self, h: &mut HeaderMap) {
        h.remove(header::CONTENT_LENGTH);
        h.remove(header::TRANSFER_ENCODING);
        h.insert(header::CONTENT_TYPE, self.content_type.clone());
    }
}

impl Policy for Static {
    fn name(&self) -> &'static str {
        self.name
    }

    fn body_need(&self) -> turnpike_core::BodyNeed {
        if self.src.needs_body() {
            turnpike_core::BodyNeed::Buffer
        } else {
            turnpike_core::BodyNeed::None
        }
    }

    fn response_body_need(&self) -> turnpike_core::BodyNeed {
        self.body_need()
    }

    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        ex.request_body = Body::full(self.body(ex, turnpike_core::jsonpath::Message::Request));
        turnpike_core::json::forget_request_json(ex);
        ex.extensions.remove::<turnpike_core::BodyInspected>();
        self.set_type(&mut ex.request.headers);
        match self.delay {
            Some(d) => crate::delay::after(d, Outcome::Continue),
            None => Outcome::Continue,
        }
    }

    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        let body = self.body(ex, turnpike_core::jsonpath::Message::Response);
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

#[cfg(test)]
mod tests {
    #[test]
    fn reindents_keeping_member_order() {
        assert_eq!(
            crate::pretty::reindent(r#"{ "b": [1, {}], "a": "x, \"y\": {z}" ,"c":[]}"#),
            "{\n  \"b\": [\n    1,\n    {}\n  ],\n  \"a\": \"x, \\\"y\\\": {z}\",\n  \"c\": []\n}"
        );
    }
}
