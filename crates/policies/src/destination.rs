//! `destination`: Membrane's choice of where a request goes, made in the flow (content-based
//! routing inside one API: `if` tests, each with a `destination`). With an `internal://NAME`
//! URL, the API of that name (an `internal:` document or a named API) runs in-process instead of
//! the target when the request phase ends without an answer; the last `destination` that ran
//! wins.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::PolicyFactory;
use turnpike_core::{CompileContext, CompileError, Exchange, Outcome, Phases, Policy};

use crate::err;

/// `destination`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DestinationSettings {
    /// Where the request goes: `internal://NAME`.
    pub url: String,
}

/// The compiled `destination` policy.
#[derive(Debug)]
pub struct Destination {
    name: Arc<str>,
}

impl PolicyFactory for Destination {
    const NAME: &'static str = "destination";
    const PHASES: Phases = Phases::REQUEST;
    type Settings = DestinationSettings;

    fn compile(c: DestinationSettings, _: &CompileContext<'_>) -> Result<Self, CompileError> {
        let Some(rest) = c.url.strip_prefix("internal://") else {
            return Err(err(
                "url",
                "a destination is an internal API (`internal://NAME`); a backend is the API's `target`",
            ));
        };
        let name = rest.split(['/', '?']).next().unwrap_or(rest);
        if name.is_empty() {
            return Err(err("url", "`internal://` needs the API's name"));
        }
        Ok(Destination { name: name.into() })
    }
}

impl Destination {
    /// The internal API it chooses.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Policy for Destination {
    fn name(&self) -> &'static str {
        "destination"
    }

    /// Chooses the internal API.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        ex.directives.destination = Some(Arc::clone(&self.name));
        Outcome::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{exchange, plain};

    #[test]
    fn internal_urls_only() {
        let compile = |url: &str| {
            Destination::compile(
                serde_json::from_value(serde_json::json!({ "url": url })).unwrap(),
                &plain(),
            )
        };
        let d = compile("internal://express").unwrap();
        let mut ex = exchange("POST", "/", &[], "");
        d.on_request(&mut ex);
        assert_eq!(ex.directives.destination.as_deref(), Some("express"));
        assert!(compile("http://example.com").is_err());
        assert!(compile("internal://").is_err());
    }
}
