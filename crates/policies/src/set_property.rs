//! `setProperty`: Membrane's exchange property. Sets the property `name` of the exchange, in the
//! phase it runs in, to `value` (a template in `language`), for later templates
//! (`${property.NAME}`) and conditions (`property.NAME`) of the same exchange. A value that is
//! one JSONPath placeholder keeps the JSON it selects (an array stays an array); any other value
//! is text.

use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_config::units::Flag;
use turnpike_core::jsonpath::{JsonPathExpr, Message};
use turnpike_core::properties::{property, set_property};
use turnpike_core::{json, BodyNeed, Template};
use turnpike_core::{CompileContext, CompileError, Exchange, Outcome, Policy, PolicyFactory};

use crate::err;
use crate::language::{compile_template, ExpressionLanguage};

/// `setProperty`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SetPropertySettings {
    /// The property's name.
    pub name: String,
    /// The value: text with placeholders in `language`.
    pub value: serde_json::Value,
    /// The language of the value's placeholders: absent (or `spel`) for the built-in templates,
    /// `jsonpath` or `xpath` for expressions on the body.
    #[serde(default)]
    pub language: Option<ExpressionLanguage>,
    /// Only set the property when it is not set yet.
    #[serde(default)]
    pub if_absent: Flag,
}

#[derive(Debug)]
enum Value {
    /// One JSONPath placeholder: the JSON it selects.
    Json(Box<JsonPathExpr>),
    /// Text.
    Text(Template),
    /// One placeholder of another kind: its value, typed (a SpEL number stays a number, an
    /// XPath result that is a number becomes one, a missing value is `null`), as Membrane keeps
    /// the object an expression evaluates to.
    Typed(Template),
}

/// The compiled `setProperty` policy.
#[derive(Debug)]
pub struct SetProperty {
    name: String,
    value: Value,
    if_absent: bool,
}

impl PolicyFactory for SetProperty {
    const NAME: &'static str = "setProperty";
    type Settings = SetPropertySettings;

    fn compile(c: SetPropertySettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        if c.name.trim().is_empty() {
            return Err(err("name", "the property needs a name"));
        }
        let src = match &c.value {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Bool(_) | serde_json::Value::Number(_) => c.value.to_string(),
            _ => return Err(err("value", "the value is text (with placeholders)")),
        };
        let single = src
            .trim()
            .strip_prefix("${")
            .and_then(|r| r.strip_suffix('}'))
            .filter(|inner| !inner.contains("${"));
        let value = match (c.language, single) {
            (Some(ExpressionLanguage::JsonPath), Some(expr)) => Value::Json(Box::new(
                JsonPathExpr::parse(expr).map_err(|m| err("value", m))?,
            )),
            (language, Some(_)) => {
                let t = compile_template(src.trim(), language, ctx).map_err(|m| err("value", m))?;
                // `${env.X}` is text once loaded.
                match t.as_literal() {
                    Some(_) => Value::Text(t),
                    None => Value::Typed(t.json()),
                }
            }
            (language, _) => {
                Value::Text(compile_template(&src, language, ctx).map_err(|m| err("value", m))?)
            }
        };
        Ok(SetProperty {
            name: c.name,
            value,
            if_absent: c.if_absent.0,
        })
    }
}

impl SetProperty {
    fn set(&self, ex: &mut Exchange, msg: Message) -> Outcome {
        if self.if_absent && property(ex, &self.name).is_some() {
            return Outcome::Continue;
        }
        let v = match &self.value {
            Value::Json(p) => {
                let parsed = match msg {
                    Message::Request => json::request_json(ex),
                    Message::Response => json::response_json(ex),
                };
                let selected = parsed.ok().map(|v| {
                    let nodes = p.select(&v);
                    match nodes.as_slice() {
                        [] => serde_json::Value::Null,
                        [one] => (*one).clone(),
                        many => {
                            serde_json::Value::Array(many.iter().map(|v| (*v).clone()).collect())
                        }
                    }
                });
                selected.unwrap_or(serde_json::Value::Null)
            }
            Value::Text(t) => {
                t.prepare(ex, msg);
                serde_json::Value::String(t.render_for(ex, msg).into_owned())
            }
            Value::Typed(t) => {
                t.prepare(ex, msg);
                let json = t.render_for(ex, msg);
                serde_json::from_str(&json).unwrap_or(serde_json::Value::String(json.into_owned()))
            }
        };
        set_property(ex, &self.name, v);
        Outcome::Continue
    }

    fn needs_body(&self) -> bool {
        match &self.value {
            Value::Json(_) => true,
            Value::Text(t) | Value::Typed(t) => t.needs_body(),
        }
    }
}

impl Policy for SetProperty {
    fn name(&self) -> &'static str {
        "setProperty"
    }

    fn body_need(&self) -> BodyNeed {
        if self.needs_body() {
            BodyNeed::Buffer
        } else {
            BodyNeed::None
        }
    }

    fn response_body_need(&self) -> BodyNeed {
        self.body_need()
    }

    /// Sets the property from the request.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        self.set(ex, Message::Request)
    }

    /// Sets the property from the response.
    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        self.set(ex, Message::Response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{exchange, plain};

    fn compile(yaml: serde_json::Value) -> Result<SetProperty, CompileError> {
        SetProperty::compile(serde_json::from_value(yaml).unwrap(), &plain())
    }

    fn prop(ex: &Exchange, name: &str) -> Option<serde_json::Value> {
        property(ex, name).map(|v| v.into_owned())
    }

    #[test]
    fn text_json_and_xpath_values() {
        let mut ex = exchange("POST", "/", &[("x-a", "b")], r#"{"items":[1,2],"id":7}"#);
        let p = compile(
            serde_json::json!({"name": "items", "value": "${$.items}", "language": "jsonpath"}),
        )
        .unwrap();
        assert_eq!(p.body_need(), BodyNeed::Buffer);
        p.on_request(&mut ex);
        assert_eq!(prop(&ex, "items"), Some(serde_json::json!([1, 2])));
        let p =
            compile(serde_json::json!({"name": "h", "value": "h=${header.x-a} ${property.items}"}))
                .unwrap();
        assert_eq!(p.body_need(), BodyNeed::None);
        p.on_request(&mut ex);
        assert_eq!(prop(&ex, "h"), Some(serde_json::json!("h=b [1,2]")));
        let p = compile(serde_json::json!({"name": "converted", "value": true})).unwrap();
        p.on_request(&mut ex);
        assert_eq!(prop(&ex, "converted"), Some(serde_json::json!("true")));
        let p =
            compile(serde_json::json!({"name": "h", "value": "other", "ifAbsent": true})).unwrap();
        p.on_request(&mut ex);
        assert_eq!(prop(&ex, "h"), Some(serde_json::json!("h=b [1,2]")));
        let mut ex = exchange("POST", "/", &[], "<a><country>Germany</country></a>");
        let p =
            compile(serde_json::json!({"name": "c", "value": "${//country}", "language": "xpath"}))
                .unwrap();
        p.on_request(&mut ex);
        assert_eq!(prop(&ex, "c"), Some(serde_json::json!("Germany")));
        assert!(compile(serde_json::json!({"name": "", "value": "x"})).is_err());
        assert!(compile(
            serde_json::json!({"name": "x", "value": "${$.a[}", "language": "jsonpath"})
        )
        .is_err());
    }
}
