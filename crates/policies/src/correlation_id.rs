//! `correlationId`: Membrane's correlation id. In the request phase, a request without the
//! header (or with a blank one) gets one — `default` rendered, or a random UUID — so that the
//! backend, and every API it passes through, sees the same id; a request that has one keeps it.
//! The id is also the exchange property `logField` (`${property.correlationId}` in `log`
//! messages), where Membrane puts it into its logging context.

use http::{HeaderName, HeaderValue};
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::properties::set_property;
use turnpike_core::{CompileContext, CompileError, Exchange, Outcome, Phases, Policy};
use turnpike_core::{PolicyFactory, Template};

use crate::err;
use crate::language::{compile_template, uuid_v4, ExpressionLanguage};

/// `correlationId`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CorrelationIdSettings {
    /// The header that carries the id (default `X-Correlation-Id`).
    #[serde(default)]
    pub header: Option<String>,
    /// The exchange property that holds the id (default `correlationId`).
    #[serde(default)]
    pub log_field: Option<String>,
    /// The id of a request without one: a template (default: a random UUID).
    #[serde(default)]
    pub default: Option<String>,
    /// The language of `default`'s placeholders (default `spel`: the built-in ones).
    #[serde(default)]
    pub language: Option<ExpressionLanguage>,
}

/// The compiled `correlationId` policy.
#[derive(Debug)]
pub struct CorrelationId {
    header: HeaderName,
    field: String,
    default: Option<Template>,
}

/// Longest id kept from a request (Membrane keeps 200 characters for its logs).
const MAX_ID: usize = 200;

impl PolicyFactory for CorrelationId {
    const NAME: &'static str = "correlationId";
    const PHASES: Phases = Phases::REQUEST;
    type Settings = CorrelationIdSettings;

    fn compile(c: CorrelationIdSettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        let name = c.header.as_deref().unwrap_or("X-Correlation-Id");
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| err("header", format!("`{name}` is not a header name")))?;
        let default = c
            .default
            .as_deref()
            .map(|d| compile_template(d, c.language, ctx))
            .transpose()
            .map_err(|m| err("default", m))?;
        if default.as_ref().is_some_and(Template::needs_body) {
            return Err(err("default", "the id cannot be read from the body"));
        }
        Ok(CorrelationId {
            header,
            field: c.log_field.unwrap_or_else(|| "correlationId".into()),
            default,
        })
    }
}

impl Policy for CorrelationId {
    fn name(&self) -> &'static str {
        "correlationId"
    }

    /// Keeps the request's id, or gives it one.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let given = ex
            .request
            .headers
            .get(&self.header)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned);
        let id = match given {
            Some(id) => id,
            None => {
                let id = match &self.default {
                    Some(t) => t.render(ex).into_owned(),
                    None => uuid_v4(),
                };
                match HeaderValue::from_str(&id) {
                    Ok(v) => {
                        ex.request.headers.insert(self.header.clone(), v);
                    }
                    Err(_) => {
                        tracing::debug!(header = %self.header, "the generated id is not a header value");
                    }
                }
                id
            }
        };
        let shown: String = id
            .chars()
            .take(MAX_ID)
            .map(|c| if c.is_control() { '?' } else { c })
            .collect();
        set_property(ex, &self.field, shown.into());
        Outcome::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{exchange, plain};
    use turnpike_core::properties::property;

    fn compile(yaml: serde_json::Value) -> CorrelationId {
        CorrelationId::compile(serde_json::from_value(yaml).unwrap(), &plain()).unwrap()
    }

    #[test]
    fn keeps_or_makes_the_id() {
        let p = compile(
            serde_json::json!({ "header": "X-Trace-Id", "default": "req-${T(java.util.UUID).randomUUID()}" }),
        );
        let mut ex = exchange("GET", "/", &[("x-trace-id", "1234-5678")], "");
        p.on_request(&mut ex);
        assert_eq!(ex.request.headers["x-trace-id"], "1234-5678");
        assert_eq!(
            property(&ex, "correlationId").unwrap().as_str(),
            Some("1234-5678")
        );
        let mut ex = exchange("GET", "/", &[], "");
        p.on_request(&mut ex);
        let id = ex.request.headers["x-trace-id"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(id.starts_with("req-") && id.len() == 40, "{id}");
        let p = compile(serde_json::json!({ "logField": "cid" }));
        let mut ex = exchange("GET", "/", &[("x-correlation-id", " ")], "");
        p.on_request(&mut ex);
        let id = ex.request.headers["x-correlation-id"]
            .to_str()
            .unwrap()
            .to_owned();
        assert_eq!(id.len(), 36);
        assert_eq!(property(&ex, "cid").unwrap().as_str(), Some(id.as_str()));
        assert!(CorrelationId::compile(
            serde_json::from_value(serde_json::json!({ "header": "bad header" })).unwrap(),
            &plain()
        )
        .is_err());
    }
}
