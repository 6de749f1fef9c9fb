//! `apiKey`: an API key from a header or query parameter, checked against listed keys and the
//! consumers' keys. 401 when missing, 403 when unknown or lacking a required scope.

use std::collections::HashMap;
use std::sync::Arc;

use http::HeaderName;
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::exchange::Identity;
use turnpike_core::{CompileContext, CompileError, PolicyFactory};
use turnpike_core::{Exchange, Outcome, Policy};

use super::AllowList;
use super::{admit, forbidden, unauthorized, Allow};
use crate::consumers::{self, Consumers};
use crate::err;

/// `apiKey`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ApiKeySettings {
    /// Where valid keys come from.
    pub stores: Vec<ApiKeyStore>,
    /// Where keys are read from in the request (default: header `X-Api-Key`).
    #[serde(default)]
    pub extractors: Vec<ApiKeyExtractor>,
    /// Restrict access to these consumers or groups.
    #[serde(default)]
    pub allow: Option<AllowList>,
    /// Require every one of these scopes.
    #[serde(default)]
    pub required_scopes: Vec<String>,
    /// Remove the key (its header or query parameter) before the request goes to the
    /// backend (default false; APISIX's `hide_credentials`).
    #[serde(default)]
    pub hide_credentials: turnpike_config::units::Flag,
    /// A request without a key is refused (default); `false` lets it through without an
    /// identity (Membrane's `required`), while a key that is given must still be valid.
    #[serde(default)]
    pub required: Option<turnpike_config::units::Flag>,
}

/// A store of API keys.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ApiKeyStore {
    /// Keys listed here.
    Simple(Vec<SimpleKey>),
    /// The `apiKey` credentials of `consumer:` documents (`consumers: {}`).
    Consumers(EmptyMap),
}

/// An empty map (`{}`), for settings that are switched on by being present.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EmptyMap {}

/// A key in a `simple` store.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SimpleKey {
    /// A secret.
    Secret(Secret),
}

/// An API key with its scopes.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Secret {
    /// The key.
    pub value: String,
    /// Scopes granted with it.
    #[serde(default)]
    pub scopes: Vec<String>,
}

/// Where an API key is read from.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ApiKeyExtractor {
    /// A request header.
    Header(String),
    /// A query parameter.
    Query(String),
}

enum Extractor {
    Header(HeaderName),
    Query(String),
}

/// The compiled policy.
pub struct ApiKey {
    keys: HashMap<String, Vec<String>>,
    consumers: Option<Arc<Consumers>>,
    extractors: Vec<Extractor>,
    allow: Option<Allow>,
    required_scopes: Vec<String>,
    hide: bool,
    /// Refuse requests without a key.
    required: bool,
}

impl PolicyFactory for ApiKey {
    const NAME: &'static str = "apiKey";
    const AUTHENTICATES: bool = true;
    type Settings = ApiKeySettings;

    /// Compiles the policy.
    fn compile(c: ApiKeySettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        let all = crate::consumers::shared(ctx);
        let mut keys = HashMap::new();
        let mut from_consumers = None;
        if c.stores.is_empty() {
            return Err(err("stores", "at least one store is needed"));
        }
        for (i, store) in c.stores.iter().enumerate() {
            match store {
                ApiKeyStore::Simple(list) => {
                    for (j, SimpleKey::Secret(s)) in list.iter().enumerate() {
                        if s.value.is_empty() {
                            return Err(err(
                                &format!("stores[{i}].simple[{j}].secret.value"),
                                "must not be empty",
                            ));
                        }
                        keys.insert(s.value.clone(), s.scopes.clone());
                    }
                }
                ApiKeyStore::Consumers(_) => from_consumers = Some(all.clone()),
            }
        }
        let extractors = if c.extractors.is_empty() {
            vec![Extractor::Header(HeaderName::from_static("x-api-key"))]
        } else {
            c.extractors
                .iter()
                .enumerate()
                .map(|(i, e)| match e {
                    ApiKeyExtractor::Header(h) => HeaderName::from_bytes(h.as_bytes())
                        .map(Extractor::Header)
                        .map_err(|_| {
                            err(
                                &format!("extractors[{i}].header"),
                                format!("`{h}` is not a header name"),
                            )
                        }),
                    ApiKeyExtractor::Query(q) if !q.is_empty() => Ok(Extractor::Query(q.clone())),
                    ApiKeyExtractor::Query(_) => {
                        Err(err(&format!("extractors[{i}].query"), "must not be empty"))
                    }
                })
                .collect::<Result<_, _>>()?
        };
        let allow = match &c.allow {
            Some(a) => Allow::compile(a, &all).map_err(|m| err("allow", m))?,
            None => None,
        };
        Ok(ApiKey {
            keys,
            consumers: from_consumers,
            extractors,
            allow,
            required_scopes: c.required_scopes.clone(),
            hide: c.hide_credentials.0,
            required: c.required.is_none_or(|f| f.0),
        })
    }
}

impl ApiKey {
    fn extract(&self, ex: &Exchange) -> Option<String> {
        self.extractors.iter().find_map(|e| match e {
            Extractor::Header(h) => ex
                .request
                .headers
                .get(h)
                .and_then(|v| v.to_str().ok())
                .map(|s| s.trim().to_owned()),
            Extractor::Query(q) => ex.query(q).map(|v| v.into_owned()),
        })
    }
}

impl Policy for ApiKey {
    fn name(&self) -> &'static str {
        "apiKey"
    }

    fn secret_fields(&self) -> turnpike_core::policy::SecretFields {
        let mut f = turnpike_core::policy::SecretFields::default();
        for e in &self.extractors {
            match e {
                Extractor::Header(h) => f.headers.push(h.clone()),
                Extractor::Query(q) => f.query.push(q.clone()),
            }
        }
        f
    }

    fn response_needs_request(&self) -> bool {
        self.consumers
            .as_ref()
            .is_some_and(|c| c.response_needs_request())
    }

    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let Some(key) = self.extract(ex).filter(|k| !k.is_empty()) else {
            if !self.required {
                return Outcome::Continue;
            }
            return unauthorized("an API key is required", None);
        };
        if self.hide {
            for e in &self.extractors {
                match e {
                    Extractor::Header(h) => {
                        ex.request.headers.remove(h);
                    }
                    Extractor::Query(q) => super::remove_query_param(ex, q),
                }
            }
        }
        let (consumer, scopes) = if let Some(scopes) = self.keys.get(&key) {
            (None, scopes.clone())
        } else if let Some(c) = self.consumers.as_ref().and_then(|c| c.by_api_key(&key)) {
            (Some(c.clone()), Vec::new())
        } else {
            return forbidden("the API key is not valid");
        };
        let identity = Identity {
            scopes,
            ..Default::default()
        };
        admit(
            ex,
            consumer.as_ref(),
            identity,
            self.allow.as_ref(),
            &self.required_scopes,
        )
    }

    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        consumers::leave(ex)
    }
}
