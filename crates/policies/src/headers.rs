//! `setHeader` and `removeHeader`: change a header of the request or of the response, depending
//! on the phase they run in.

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_config::units::Flag;
use turnpike_core::jsonpath::Message;
use turnpike_core::problems;
use turnpike_core::{BodyNeed, Exchange, Outcome, Policy, Problem, Template};
use turnpike_core::{CompileContext, CompileError, PolicyFactory};

use crate::err;
use crate::language::ExpressionLanguage;

/// `setHeader`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SetHeaderSettings {
    /// Header name.
    pub name: String,
    /// Value; may hold templates such as `${path.id}` or `${header.User-Agent}`.
    pub value: String,
    /// Only set the header when the message does not have it yet.
    #[serde(default)]
    pub if_absent: Flag,
    /// The language of the value's `${...}` placeholders: absent (or `spel`) for the built-in
    /// templates, `jsonpath` for RFC 9535 JSONPath on the JSON body (`${$.person.firstName}`),
    /// `xpath` for XPath 1.0 on the XML body (`${//country}`).
    #[serde(default)]
    pub language: Option<ExpressionLanguage>,
}

/// `removeHeader`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RemoveHeaderSettings {
    /// Header name.
    pub name: String,
}

/// A header value: built once when it has no placeholder, rendered per request otherwise.
#[derive(Debug, Clone)]
pub(crate) enum ValueTemplate {
    Literal(HeaderValue),
    Dynamic(Template),
}

impl ValueTemplate {
    pub(crate) fn compile(src: &str, ctx: &CompileContext<'_>) -> Result<Self, String> {
        Self::compile_in(src, ctx, None)
    }

    /// Compiles `src` with the placeholders of `language` (built-in templates when `None`).
    pub(crate) fn compile_in(
        src: &str,
        ctx: &CompileContext<'_>,
        language: Option<ExpressionLanguage>,
    ) -> Result<Self, String> {
        let t = crate::language::compile_template(src, language, ctx)?;
        Ok(match t.as_literal() {
            Some(l) => ValueTemplate::Literal(
                HeaderValue::from_str(l)
                    .map_err(|_| format!("`{l}` is not a valid header value"))?,
            ),
            None => ValueTemplate::Dynamic(t),
        })
    }

    /// The value for this exchange; `None` when the rendered text cannot be a header value.
    pub(crate) fn render(&self, ex: &Exchange) -> Option<HeaderValue> {
        self.render_for(ex, Message::Request)
    }

    /// The value, with JSONPath placeholders read from `msg`'s body.
    pub(crate) fn render_for(&self, ex: &Exchange, msg: Message) -> Option<HeaderValue> {
        match self {
            ValueTemplate::Literal(v) => Some(v.clone()),
            ValueTemplate::Dynamic(t) => HeaderValue::from_str(&t.render_for(ex, msg)).ok(),
        }
    }

    /// True when rendering reads the request head.
    pub(crate) fn reads_request(&self) -> bool {
        matches!(self, ValueTemplate::Dynamic(t) if t.reads_request())
    }

    /// True when rendering reads the message body.
    pub(crate) fn needs_body(&self) -> bool {
        matches!(self, ValueTemplate::Dynamic(t) if t.needs_body())
    }

    /// Parses the body of `msg` if the template reads it.
    pub(crate) fn prepare(&self, ex: &mut Exchange, msg: Message) {
        if let ValueTemplate::Dynamic(t) = self {
            t.prepare(ex, msg);
        }
    }
}

pub(crate) fn header_name(name: &str) -> Result<HeaderName, CompileError> {
    HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| err("name", format!("`{name}` is not a valid header name")))
}

/// `setHeader`: sets (or, with `ifAbsent`, adds when missing) one header.
#[derive(Debug)]
pub struct SetHeader {
    name: HeaderName,
    value: ValueTemplate,
    if_absent: bool,
}

impl PolicyFactory for SetHeader {
    const NAME: &'static str = "setHeader";
    type Settings = SetHeaderSettings;

    /// Compiles the policy; the value's template is parsed here.
    fn compile(c: SetHeaderSettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        Ok(SetHeader {
            name: header_name(&c.name)?,
            value: ValueTemplate::compile_in(&c.value, ctx, c.language)
                .map_err(|m| err("value", m))?,
            if_absent: c.if_absent.0,
        })
    }
}

impl SetHeader {
    /// The value to set, or `None` when `ifAbsent` finds the header present. Rendered before the
    /// headers are changed, so that templates see the message as it arrived at this policy.
    fn value(
        &self,
        ex: &Exchange,
        current: &HeaderMap,
        msg: Message,
    ) -> Result<Option<HeaderValue>, InvalidValue> {
        if self.if_absent && current.contains_key(&self.name) {
            return Ok(None);
        }
        self.value.render_for(ex, msg).map(Some).ok_or(InvalidValue)
    }

    fn problem(&self, status: StatusCode) -> Problem {
        Problem::new(&problems::INVALID_HEADER)
            .with_status(status)
            .with_detail(format!(
                "the value computed for `{}` is not a valid header value",
                self.name
            ))
    }
}

impl Policy for SetHeader {
    fn name(&self) -> &'static str {
        "setHeader"
    }

    fn body_need(&self) -> BodyNeed {
        if self.value.needs_body() {
            BodyNeed::Buffer
        } else {
            BodyNeed::None
        }
    }

    fn response_body_need(&self) -> BodyNeed {
        self.body_need()
    }

    fn response_needs_request(&self) -> bool {
        // Literal values and JSONPath placeholders (on the response body) do not read it.
        self.value.reads_request()
    }

    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        self.value.prepare(ex, Message::Request);
        match self.value(ex, &ex.request.headers, Message::Request) {
            Ok(Some(v)) => {
                ex.request.headers.insert(self.name.clone(), v);
                Outcome::Continue
            }
            Ok(None) => Outcome::Continue,
            Err(InvalidValue) => Outcome::Reject(self.problem(StatusCode::BAD_REQUEST)),
        }
    }

    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        if ex.response.is_none() {
            return Outcome::Continue;
        }
        self.value.prepare(ex, Message::Response);
        let Some(res) = ex.response.as_ref() else {
            return Outcome::Continue;
        };
        match self.value(ex, res.headers(), Message::Response) {
            Ok(Some(v)) => {
                if let Some(res) = ex.response.as_mut() {
                    res.headers_mut().insert(self.name.clone(), v);
                }
                Outcome::Continue
            }
            Ok(None) => Outcome::Continue,
            Err(InvalidValue) => Outcome::Reject(self.problem(StatusCode::BAD_GATEWAY)),
        }
    }
}

/// A rendered template that cannot be a header value.
struct InvalidValue;

/// `removeHeader`: removes every value of one header.
#[derive(Debug)]
pub struct RemoveHeader {
    name: HeaderName,
}

impl PolicyFactory for RemoveHeader {
    const NAME: &'static str = "removeHeader";
    type Settings = RemoveHeaderSettings;

    /// Compiles the policy.
    fn compile(c: RemoveHeaderSettings, _ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        Ok(RemoveHeader {
            name: header_name(&c.name)?,
        })
    }
}

impl Policy for RemoveHeader {
    fn name(&self) -> &'static str {
        "removeHeader"
    }

    fn response_needs_request(&self) -> bool {
        false
    }

    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        ex.request.headers.remove(&self.name);
        Outcome::Continue
    }

    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        if let Some(res) = ex.response.as_mut() {
            res.headers_mut().remove(&self.name);
        }
        Outcome::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::exchange;
    use turnpike_config::units::Flag;
    use turnpike_core::{Body, TemplateScope};

    fn set(name: &str, value: &str, if_absent: bool) -> SetHeader {
        let scope = TemplateScope::default();
        SetHeader::compile(
            SetHeaderSettings {
                name: name.into(),
                value: value.into(),
                if_absent: Flag(if_absent),
                language: None,
            },
            &crate::testutil::ctx(&scope),
        )
        .unwrap()
    }

    #[test]
    fn sets_request_and_response_headers() {
        let p = set(
            "X-Client",
            "${client.ip} ${method} ${header.x-client}",
            false,
        );
        let mut ex = exchange("GET", "/", &[("x-client", "old")], "");
        assert!(matches!(p.on_request(&mut ex), Outcome::Continue));
        assert_eq!(ex.request.headers["x-client"], "198.51.100.7 GET old");
        ex.response = Some(http::Response::new(Body::Empty));
        p.on_response(&mut ex);
        assert_eq!(
            ex.response.unwrap().headers()["x-client"],
            "198.51.100.7 GET 198.51.100.7 GET old"
        );
    }

    #[test]
    fn if_absent_keeps_existing() {
        let p = set("X-A", "new", true);
        let mut ex = exchange("GET", "/", &[("x-a", "old")], "");
        p.on_request(&mut ex);
        assert_eq!(ex.request.headers["x-a"], "old");
        let mut ex = exchange("GET", "/", &[], "");
        p.on_request(&mut ex);
        assert_eq!(ex.request.headers["x-a"], "new");
    }

    #[test]
    fn invalid_rendered_value_is_a_400() {
        let p = set("X-Q", "${query.q}", false);
        let mut ex = exchange("GET", "/?q=a%0Ab", &[], "");
        match p.on_request(&mut ex) {
            Outcome::Reject(pr) => assert_eq!(pr.status, 400),
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn bad_names_and_values_fail_to_compile() {
        let scope = TemplateScope::default();
        let ctx = crate::testutil::ctx(&scope);
        let bad = |n: &str, v: &str| {
            SetHeader::compile(
                SetHeaderSettings {
                    name: n.into(),
                    value: v.into(),
                    if_absent: Flag(false),
                    language: None,
                },
                &ctx,
            )
            .unwrap_err()
        };
        assert_eq!(bad("a b", "x").key, "name");
        assert_eq!(bad("a", "${nope}").key, "value");
        assert_eq!(bad("a", "x\ny").key, "value");
    }

    #[test]
    fn jsonpath_values_from_request_and_response_bodies() {
        let scope = TemplateScope::default();
        let p = SetHeader::compile(
            SetHeaderSettings {
                name: "X-First".into(),
                value: "${$.person.firstName}".into(),
                if_absent: Flag(false),
                language: Some(ExpressionLanguage::JsonPath),
            },
            &crate::testutil::ctx(&scope),
        )
        .unwrap();
        assert_eq!(p.body_need(), BodyNeed::Buffer);
        assert!(!p.response_needs_request());
        assert!(set("X", "${method}", false).response_needs_request());
        assert!(!set("X", "literal", false).response_needs_request());
        let mut ex = exchange("POST", "/", &[], r#"{"person":{"firstName":"Ada"}}"#);
        assert!(matches!(p.on_request(&mut ex), Outcome::Continue));
        assert_eq!(ex.request.headers["x-first"], "Ada");
        ex.response = Some(http::Response::new(Body::full(
            r#"{"person":{"firstName":"Bob"}}"#,
        )));
        p.on_response(&mut ex);
        assert_eq!(ex.response.unwrap().headers()["x-first"], "Bob");
        let bad = SetHeader::compile(
            SetHeaderSettings {
                name: "X".into(),
                value: "${$.[}".into(),
                if_absent: Flag(false),
                language: Some(ExpressionLanguage::JsonPath),
            },
            &crate::testutil::ctx(&scope),
        );
        assert_eq!(bad.unwrap_err().key, "value");
    }

    #[test]
    fn removes() {
        let p = RemoveHeader::compile(
            RemoveHeaderSettings { name: "X-A".into() },
            &crate::testutil::plain(),
        )
        .unwrap();
        let mut ex = exchange("GET", "/", &[("x-a", "1"), ("x-a", "2")], "");
        p.on_request(&mut ex);
        assert!(!ex.request.headers.contains_key("x-a"));
    }
}
