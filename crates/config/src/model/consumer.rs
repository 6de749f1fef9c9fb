//! `consumer:` documents: who calls APIs, with the credentials that identify them.

use schemars::JsonSchema;
use serde::Deserialize;

use super::PolicyConfig;

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
