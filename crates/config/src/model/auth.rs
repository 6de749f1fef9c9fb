//! Authentication policies (`basicAuthentication`, `apiKey`, `jwtAuth`) and `consumer:`
//! documents.

use schemars::JsonSchema;
use serde::Deserialize;

use super::PolicyConfig;
use crate::units::{Duration, Flag};

/// A `consumer:` document: someone who calls APIs, with the credentials that identify them.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConsumerConfig {
    /// Unique name (in `${consumer.name}`, `allow.consumers` and the access log).
    pub name: String,
    /// The consumer's credentials.
    #[serde(default)]
    pub credentials: ConsumerCredentials,
    /// Groups the consumer belongs to (for `allow.groups`).
    #[serde(default)]
    pub groups: Vec<String>,
    /// Policies run for this consumer's requests once an auth policy identified it (typically
    /// its own `rateLimiter`, which then counts per consumer).
    #[serde(default)]
    pub flow: Vec<PolicyConfig>,
}

/// A consumer's credentials; any combination.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConsumerCredentials {
    /// An API key (for `apiKey` with the `consumers` store).
    #[serde(default)]
    pub api_key: Option<String>,
    /// User name and password (for `basicAuthentication`).
    #[serde(default)]
    pub basic: Option<BasicUser>,
    /// The JWT `sub` that identifies this consumer (for `jwtAuth`).
    #[serde(default)]
    pub jwt: Option<JwtCredential>,
}

/// A JWT credential of a consumer.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JwtCredential {
    /// The `sub` claim of this consumer's tokens.
    pub subject: String,
}

/// A user of `basicAuthentication`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BasicUser {
    /// User name.
    pub username: String,
    /// Password in plain text, or a crypt hash: bcrypt (`$2y$…`, `$2b$…`), SHA-512-crypt
    /// (`$6$…`), SHA-256-crypt (`$5$…`).
    pub password: String,
}

/// Which consumers may pass an auth policy (any authenticated caller when absent).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AllowList {
    /// Consumer names allowed.
    #[serde(default)]
    pub consumers: Vec<String>,
    /// Consumer groups allowed.
    #[serde(default)]
    pub groups: Vec<String>,
}

/// `basicAuthentication`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BasicAuthPolicy {
    /// Users listed here.
    #[serde(default)]
    pub users: Vec<BasicUser>,
    /// Users read from an htpasswd file (bcrypt, SHA-crypt or `{SHA}` lines).
    #[serde(default)]
    pub htpasswd_file_provider: Option<FileLocation>,
    /// Also accept the `basic` credentials of `consumer:` documents (default true).
    #[serde(default)]
    pub consumers: Option<Flag>,
    /// Realm in `WWW-Authenticate` (default `turnpike`).
    #[serde(default)]
    pub realm: Option<String>,
    /// Restrict access to these consumers or groups.
    #[serde(default)]
    pub allow: Option<AllowList>,
}

/// A file path, relative to the config file.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FileLocation {
    /// The path.
    pub location: String,
}

/// `apiKey`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ApiKeyPolicy {
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

/// `jwtAuth`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JwtAuthPolicy {
    /// Key sets: files (`location`) or URLs (`url`, fetched in the background).
    pub jwks: Vec<JwksSource>,
    /// Required `aud` (one of the token's audiences must equal it).
    #[serde(default)]
    pub expected_aud: Option<String>,
    /// Required `iss`.
    #[serde(default)]
    pub expected_iss: Option<String>,
    /// Accepted algorithms (default: RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384,
    /// EdDSA). `none` is never accepted; HS* only when listed.
    #[serde(default)]
    pub algorithms: Vec<String>,
    /// Clock skew allowed for `exp` and `nbf` (default 60s).
    #[serde(default)]
    pub leeway: Option<Duration>,
    /// Restrict access to these consumers or groups (consumers are matched by `sub`).
    #[serde(default)]
    pub allow: Option<AllowList>,
    /// Require every one of these scopes (from `scope` or `scp`).
    #[serde(default)]
    pub required_scopes: Vec<String>,
}

/// A JSON Web Key Set source.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JwksSource {
    /// A JWKS file, relative to the config file.
    #[serde(default)]
    pub location: Option<String>,
    /// A JWKS URL, fetched at load and refreshed in the background.
    #[serde(default)]
    pub url: Option<String>,
    /// How often a URL is fetched again (default 10m).
    #[serde(default)]
    pub refresh: Option<Duration>,
}
