//! `apiKey`: an API key from a header or query parameter, checked against listed keys and the
//! consumers' keys. 401 when missing, 403 when unknown or lacking a required scope.

use std::collections::HashMap;
use std::sync::Arc;

use http::HeaderName;
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::exchange::{AuthMethod, Authentication, Identity};
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
    /// Keys listed here (Membrane also calls this store `keys`).
    #[serde(alias = "keys")]
    Simple(Vec<SimpleKey>),
    /// The `apiKey` credentials of `consumer:` documents (`consumers: {}`).
    Consumers(EmptyMap),
    /// Keys listed in a file (Membrane's `apiKeyFileStore`): one key a line, optionally with
    /// its scopes (`222: write,delete`); `#` starts a comment line.
    ApiKeyFileStore(FileStore),
}

/// `apiKeyFileStore`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FileStore {
    /// The file, relative to the config file; read at load time (and on reload).
    pub location: String,
}

/// Runs at load time: the keys of an `apiKeyFileStore` file with their scopes, or what is
/// wrong with a line.
fn parse_key_file(text: &str) -> Result<Vec<(String, Vec<String>)>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, scopes) = line.split_once(':').unwrap_or((line, ""));
        let key = key.trim();
        if key.is_empty() {
            return Err(format!("line {}: no key before `:`", n + 1));
        }
        let scopes = scopes
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        out.push((key.to_owned(), scopes));
    }
    Ok(out)
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
    /// A request header: its name, or Membrane's `{ name }` (`{}`: `X-Api-Key`).
    #[serde(alias = "headerExtractor")]
    Header(ExtractorName),
    /// A query parameter: its name, or Membrane's `{ name }` (`{}`: `api-key`).
    #[serde(alias = "queryParamExtractor")]
    Query(ExtractorName),
}

/// The name of an extractor's header or query parameter, as a string or Membrane's map.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ExtractorName {
    /// The name.
    Name(String),
    /// `{ name }`, or `{}` for the default.
    Map(NamedExtractor),
}

/// Membrane's `{ name }` form of an extractor.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NamedExtractor {
    /// The header or query parameter (default: `X-Api-Key` for a header, `api-key` for a query
    /// parameter).
    #[serde(default)]
    pub name: Option<String>,
}

impl ExtractorName {
    fn or<'a>(&'a self, default: &'a str) -> &'a str {
        match self {
            ExtractorName::Name(n) => n,
            ExtractorName::Map(m) => m.name.as_deref().unwrap_or(default),
        }
    }
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
    /// The key files read (watched for reloads).
    files: Vec<std::path::PathBuf>,
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
        let mut files = Vec::new();
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
                ApiKeyStore::ApiKeyFileStore(f) => {
                    let at = format!("stores[{i}].apiKeyFileStore.location");
                    let path = ctx.base_dir.join(&f.location);
                    let text = std::fs::read_to_string(&path)
                        .map_err(|e| err(&at, format!("cannot read `{}`: {e}", path.display())))?;
                    for (key, scopes) in parse_key_file(&text).map_err(|m| err(&at, m))? {
                        keys.insert(key, scopes);
                    }
                    files.push(path);
                }
            }
        }
        let extractors = if c.extractors.is_empty() {
            vec![Extractor::Header(HeaderName::from_static("x-api-key"))]
        } else {
            c.extractors
                .iter()
                .enumerate()
                .map(|(i, e)| match e {
                    ApiKeyExtractor::Header(h) => {
                        let h = h.or("X-Api-Key");
                        HeaderName::from_bytes(h.as_bytes())
                            .map(Extractor::Header)
                            .map_err(|_| {
                                err(
                                    &format!("extractors[{i}].header"),
                                    format!("`{h}` is not a header name"),
                                )
                            })
                    }
                    ApiKeyExtractor::Query(q) => match q.or("api-key") {
                        "" => Err(err(&format!("extractors[{i}].query"), "must not be empty")),
                        q => Ok(Extractor::Query(q.to_owned())),
                    },
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
            files,
        })
    }
}

impl ApiKey {
    /// The key and the extractor that found it.
    fn extract(&self, ex: &Exchange) -> Option<(String, &Extractor)> {
        self.extractors.iter().find_map(|e| {
            let key = match e {
                Extractor::Header(h) => ex
                    .request
                    .headers
                    .get(h)
                    .and_then(|v| v.to_str().ok())
                    .map(|s| s.trim().to_owned()),
                Extractor::Query(q) => ex.query(q).map(|v| v.into_owned()),
            };
            key.map(|k| (k, e))
        })
    }
}

impl Policy for ApiKey {
    fn name(&self) -> &'static str {
        "apiKey"
    }

    fn files(&self) -> Vec<std::path::PathBuf> {
        self.files.clone()
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
        let Some((key, from)) = self.extract(ex).filter(|(k, _)| !k.is_empty()) else {
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
        ex.record_authentication(Authentication {
            method: match from {
                Extractor::Header(h) => AuthMethod::ApiKey {
                    query: false,
                    name: h.as_str().to_owned(),
                },
                Extractor::Query(q) => AuthMethod::ApiKey {
                    query: true,
                    name: q.clone(),
                },
            },
            scopes: scopes.clone(),
        });
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

#[cfg(test)]
mod tests {
    use super::parse_key_file;

    #[test]
    fn key_files_list_keys_with_their_scopes() {
        let keys = parse_key_file("# comment\n111\n\n222: write\n333: write, delete\n").unwrap();
        assert_eq!(
            keys,
            vec![
                ("111".to_owned(), vec![]),
                ("222".to_owned(), vec!["write".to_owned()]),
                (
                    "333".to_owned(),
                    vec!["write".to_owned(), "delete".to_owned()]
                ),
            ]
        );
        assert!(parse_key_file(": write").is_err());
    }
}
