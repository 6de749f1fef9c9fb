//! The settings of `oauth2authserver` and `tokenValidator`, in Membrane's shapes: users, clients
//! and scopes as plain maps or wrapped in `user:`, `client:` and `scope:`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use turnpike_config::units::Flag;

/// `oauth2authserver`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AuthServerSettings {
    /// The issuer: the `iss` of JWT tokens and the base of the URLs in the discovery document.
    pub issuer: String,
    /// The users of the password grant.
    #[serde(default)]
    pub static_user_data_provider: Option<StaticUsers>,
    /// The clients.
    pub static_client_list: StaticClients,
    /// Opaque random access tokens (the default).
    #[serde(default)]
    pub bearer_token: Option<BearerToken>,
    /// Signed JWT access tokens (RS256), verifiable with the keys at `/oauth2/certs`.
    #[serde(default)]
    pub bearer_jwt_token: Option<BearerJwtToken>,
    /// The kind of refresh tokens (opaque by default).
    #[serde(default)]
    pub refresh: Option<Refresh>,
    /// The claims the server knows and the scopes that name them.
    #[serde(default)]
    pub claims: Option<Claims>,
    /// Also issue refresh tokens in the client credentials grant (default false).
    #[serde(default)]
    pub issue_non_spec_refresh_tokens: Option<Flag>,
    /// ID tokens outside OpenID Connect's flows: only `false` is accepted.
    #[serde(default)]
    pub issue_non_spec_id_tokens: Option<Flag>,
    /// Membrane's login dialog folder: refused (see [`LoginFlowOnly`]).
    #[serde(default)]
    #[schemars(skip)]
    pub location: Option<LoginFlowOnly>,
    /// Membrane's consent page: refused.
    #[serde(default)]
    #[schemars(skip)]
    pub consent_file: Option<LoginFlowOnly>,
    /// Membrane's login path: refused.
    #[serde(default)]
    #[schemars(skip)]
    pub path: Option<LoginFlowOnly>,
    /// Membrane's login page message: refused.
    #[serde(default)]
    #[schemars(skip)]
    pub message: Option<LoginFlowOnly>,
    /// Membrane's `sessionManager` (login dialog): refused.
    #[serde(default)]
    #[schemars(skip)]
    pub session_manager: Option<LoginFlowOnly>,
    /// Membrane's account blocker of the login dialog: refused.
    #[serde(default)]
    #[schemars(skip)]
    pub account_blocker: Option<LoginFlowOnly>,
    /// Membrane's `exposeUserCredentialsToSession` (login dialog): refused.
    #[serde(default)]
    #[schemars(skip)]
    pub expose_user_credentials_to_session: Option<LoginFlowOnly>,
}

/// A setting that only Membrane's login dialog (the authorization code and implicit flows)
/// uses: reading one is always an error that says so.
#[derive(Debug, Clone)]
pub struct LoginFlowOnly;

impl<'de> Deserialize<'de> for LoginFlowOnly {
    fn deserialize<D: Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
        Err(serde::de::Error::custom(
            "belongs to the login dialog of the authorization code and implicit flows, which \
             Turnpike does not implement: clients get tokens with the client credentials, \
             password or refresh token grants (see docs/policies/oauth2authserver.md)",
        ))
    }
}

/// `staticUserDataProvider`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StaticUsers {
    /// The users: `{ username, password, …attributes }` or Membrane's `user: { … }`.
    #[serde(default, deserialize_with = "users")]
    #[schemars(with = "Vec<StaticUser>")]
    pub users: Vec<StaticUser>,
}

/// A user of `staticUserDataProvider`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct StaticUser {
    /// The user name: the `sub` of the user's tokens.
    pub username: Scalar,
    /// The password: plain text, or a bcrypt, SHA-crypt, Argon2 or `{SHA}` hash.
    pub password: Scalar,
    /// Other attributes: claims of the user's JWT tokens (`scopes` limits the scopes the user
    /// may be granted, `aud` adds audiences), and what `/oauth2/userinfo` answers.
    #[serde(flatten)]
    pub attributes: BTreeMap<String, Scalar>,
}

/// A text, number or boolean, read as text.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Scalar {
    /// A text.
    Text(String),
    /// A number.
    Number(serde_json::Number),
    /// A boolean.
    Bool(bool),
}

impl Scalar {
    /// Runs at load: the value as text (a number or boolean as YAML wrote it).
    pub fn text(&self) -> String {
        match self {
            Scalar::Text(s) => s.clone(),
            Scalar::Number(n) => n.to_string(),
            Scalar::Bool(b) => b.to_string(),
        }
    }
}

/// `staticClientList`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StaticClients {
    /// The clients: `{ clientId, clientSecret, … }` or Membrane's `client: { … }`.
    #[serde(default, deserialize_with = "clients")]
    #[schemars(with = "Vec<StaticClient>")]
    pub clients: Vec<StaticClient>,
}

/// A client of `staticClientList`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StaticClient {
    /// The client's id.
    pub client_id: Scalar,
    /// The client's secret: plain text, or a bcrypt, SHA-crypt, Argon2 or `{SHA}` hash.
    pub client_secret: Scalar,
    /// Membrane's redirect URL of the authorization code flow: kept, unused.
    #[serde(default)]
    pub callback_url: Option<String>,
    /// The grants the client may use, separated by commas or blanks (default: all the server
    /// implements).
    #[serde(default)]
    pub grant_types: Option<String>,
    /// The audiences the client may ask tokens for (RFC 8707 `resource`), separated by blanks.
    #[serde(default)]
    pub resources: Option<String>,
    /// The scopes the client may ask for, separated by blanks.
    #[serde(default)]
    pub scopes: Option<String>,
}

/// `bearerToken`: opaque tokens.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BearerToken {}

/// `bearerJwtToken`: signed JWT tokens.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BearerJwtToken {
    /// Lifetime in seconds; 0 (the default) gives tokens without `exp`.
    #[serde(default)]
    pub expiration: u64,
    /// The RSA private key as a JSON Web Key file (generated at load when absent).
    #[serde(default)]
    pub jwk: Option<JwkLocation>,
}

/// A JSON Web Key file.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JwkLocation {
    /// The file, relative to the config file.
    pub location: String,
}

/// `refresh`: the kind of refresh tokens.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Refresh {
    /// Opaque refresh tokens (the default).
    #[serde(default)]
    pub bearer_token: Option<BearerToken>,
    /// Signed JWT refresh tokens.
    #[serde(default)]
    pub bearer_jwt_token: Option<BearerJwtToken>,
}

/// `claims`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Claims {
    /// The claims the server supports, separated by blanks.
    #[serde(default)]
    pub value: String,
    /// Scopes and the claims each gives access to at `/oauth2/userinfo`: `{ id, claims }` or
    /// Membrane's `scope: { id, claims }`.
    #[serde(default, deserialize_with = "scopes")]
    #[schemars(with = "Vec<ScopeClaims>")]
    pub scopes: Vec<ScopeClaims>,
}

/// A scope of `claims.scopes`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ScopeClaims {
    /// The scope's name.
    pub id: String,
    /// The claims it gives access to, separated by blanks.
    #[serde(default)]
    pub claims: String,
}

/// `tokenValidator`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TokenValidatorSettings {
    /// The authorization server's userinfo URL, asked about every request's bearer token.
    pub endpoint: String,
}

/// A list whose entries are maps, or maps wrapped in `{ wrapper: map }` (Membrane's XML-shaped
/// YAML).
fn wrapped_list<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    d: D,
    wrapper: &str,
) -> Result<Vec<T>, D::Error> {
    let entries = Vec::<serde_json::Value>::deserialize(d)?;
    entries
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let v = match v {
                serde_json::Value::Object(mut o)
                    if o.len() == 1 && o.get(wrapper).is_some_and(|w| w.is_object()) =>
                {
                    o.remove(wrapper).unwrap_or_default()
                }
                v => v,
            };
            serde_json::from_value::<T>(v)
                .map_err(|e| serde::de::Error::custom(format!("entry {}: {e}", i + 1)))
        })
        .collect()
}

fn users<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<StaticUser>, D::Error> {
    wrapped_list(d, "user")
}

fn clients<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<StaticClient>, D::Error> {
    wrapped_list(d, "client")
}

fn scopes<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ScopeClaims>, D::Error> {
    wrapped_list(d, "scope")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_shapes_of_users_clients_and_scopes() {
        let s: AuthServerSettings = serde_json::from_value(serde_json::json!({
            "issuer": "http://localhost:7007",
            "staticUserDataProvider": {"users": [
                {"username": "john", "password": "password", "email": "john@predic8.de"},
                {"user": {"username": "ada", "password": 1234}}
            ]},
            "staticClientList": {"clients": [
                {"clientId": "abc", "clientSecret": "def", "callbackUrl": "http://localhost:2000/cb"},
                {"client": {"clientId": "x", "clientSecret": "y", "grantTypes": "password,refresh_token"}}
            ]},
            "bearerToken": {},
            "claims": {"value": "sub email", "scopes": [
                {"id": "profile", "claims": "email"},
                {"scope": {"id": "username", "claims": "username"}}
            ]}
        }))
        .unwrap();
        let users = s.static_user_data_provider.unwrap().users;
        assert_eq!(users[0].attributes["email"].text(), "john@predic8.de");
        assert_eq!(users[1].password.text(), "1234");
        assert_eq!(s.static_client_list.clients[1].client_id.text(), "x");
        assert_eq!(s.claims.unwrap().scopes[1].id, "username");
    }

    #[test]
    fn login_dialog_settings_are_refused_with_the_reason() {
        let e = serde_json::from_value::<AuthServerSettings>(serde_json::json!({
            "issuer": "http://localhost:7007",
            "location": "logindialog",
            "staticClientList": {"clients": []}
        }))
        .unwrap_err()
        .to_string();
        assert!(e.contains("authorization code"), "{e}");
        let e = serde_json::from_value::<AuthServerSettings>(serde_json::json!({
            "issuer": "i", "staticClientList": {"clients": [{"clientId": "a", "clientSecret": "b", "nope": 1}]}
        }))
        .unwrap_err()
        .to_string();
        assert!(e.contains("nope"), "{e}");
    }
}
