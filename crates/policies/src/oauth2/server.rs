//! `oauth2authserver`: Membrane's OAuth2 authorization server. It answers every request of its
//! API: the token endpoint (`/oauth2/token`: client credentials, password and refresh token
//! grants), `/oauth2/userinfo`, `/oauth2/revoke` (RFC 7009), `/oauth2/certs` (the JWKS of JWT
//! tokens) and `/.well-known/openid-configuration`, each below the API's path; other paths
//! answer 404.
//!
//! Issued tokens are kept in a store shared by every worker (see [`super::tokens`]); the store
//! and generated keys outlive a reload that keeps the policy in its place with the same issuer.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use bytes::Bytes;
use http::{header, HeaderValue, Method, Response, StatusCode};
use serde_json::{Map, Value};
use turnpike_core::{problems, Body, BodyNeed, Exchange, Outcome, Policy, Problem};
use turnpike_core::{CompileContext, CompileError, Phases, PolicyFactory};

use super::keys::SigningKey;
use super::settings::{AuthServerSettings, BearerJwtToken};
use super::tokens::{random_token, Grant, Kind, Store, MAX_TOKENS};
use super::users::{words, Client, Clients, GrantType, User, Users};
use super::{json_response, Form, OAuthError};
use crate::auth::authorization;
use crate::err;

/// How tokens of one kind are made.
#[derive(Debug)]
enum Format {
    /// Random opaque tokens, valid until revoked or dropped from the store.
    Opaque,
    /// RS256 JWTs.
    Jwt {
        key: Arc<SigningKey>,
        /// `exp` after this long (`None`: no `exp`).
        lifetime: Option<Duration>,
    },
}

impl Format {
    fn lifetime(&self) -> Option<Duration> {
        match self {
            Format::Opaque => None,
            Format::Jwt { lifetime, .. } => *lifetime,
        }
    }
}

/// What a server keeps across reloads.
#[derive(Debug)]
struct Kept {
    store: Arc<Store>,
    /// Generated keys: access tokens, refresh tokens.
    keys: Mutex<[Option<Arc<SigningKey>>; 2]>,
}

static KEPT: Mutex<Option<HashMap<String, Weak<Kept>>>> = Mutex::new(None);

/// The state of the server standing at `identity`, or a new one.
fn kept(identity: String) -> Arc<Kept> {
    let mut all = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    let all = all.get_or_insert_with(HashMap::new);
    all.retain(|_, w| w.strong_count() > 0);
    if let Some(k) = all.get(&identity).and_then(Weak::upgrade) {
        return k;
    }
    let k = Arc::new(Kept {
        store: Arc::new(Store::new(MAX_TOKENS)),
        keys: Mutex::new([None, None]),
    });
    all.insert(identity, Arc::downgrade(&k));
    k
}

/// The compiled `oauth2authserver` policy.
#[derive(Debug)]
pub struct AuthServer {
    issuer: String,
    /// The API's path prefix, without a trailing `/`.
    prefix: String,
    users: Users,
    clients: Clients,
    access: Format,
    refresh: Format,
    /// Refresh tokens in the client credentials grant too.
    refresh_for_clients: bool,
    /// Scope → the claims it opens at `/oauth2/userinfo`.
    scope_claims: BTreeMap<String, Vec<String>>,
    kept: Arc<Kept>,
    discovery: Bytes,
    jwks: Bytes,
    files: Vec<PathBuf>,
}

/// Compiles the key of a JWT token format: the `jwk` file, or the key generated before (kept
/// across reloads), or a new one.
fn jwt_format(
    s: &BearerJwtToken,
    at: &str,
    slot: usize,
    kept: &Kept,
    ctx: &CompileContext<'_>,
    files: &mut Vec<PathBuf>,
) -> Result<Format, CompileError> {
    let key = match &s.jwk {
        Some(j) => {
            let path = ctx.base_dir.join(&j.location);
            let text = std::fs::read_to_string(&path).map_err(|e| {
                err(
                    &format!("{at}.jwk.location"),
                    format!("cannot read {}: {e}", path.display()),
                )
            })?;
            files.push(path);
            Arc::new(
                SigningKey::from_jwk_text(&text)
                    .map_err(|m| err(&format!("{at}.jwk.location"), m))?,
            )
        }
        None => {
            let mut keys = kept.keys.lock().unwrap_or_else(|e| e.into_inner());
            match &keys[slot] {
                Some(k) => k.clone(),
                None => {
                    let k = Arc::new(SigningKey::generate().map_err(|m| err(at, m))?);
                    if slot == 0 {
                        tracing::warn!(
                            "oauth2authserver: JWT tokens are signed with a key generated at start; tokens of other instances and of earlier runs are not accepted (give `bearerJwtToken.jwk` to share a key)"
                        );
                    }
                    keys[slot] = Some(k.clone());
                    k
                }
            }
        }
    };
    Ok(Format::Jwt {
        key,
        lifetime: (s.expiration > 0).then(|| Duration::from_secs(s.expiration)),
    })
}

impl PolicyFactory for AuthServer {
    const NAME: &'static str = "oauth2authserver";
    const PHASES: Phases = Phases::REQUEST;
    const ANSWERS: bool = true;
    type Settings = AuthServerSettings;

    /// Compiles the server: users, clients, scopes, the token formats and their keys (read from
    /// `jwk` files or generated), and the discovery and JWKS documents.
    fn compile(c: AuthServerSettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        let issuer = c.issuer.trim().trim_end_matches('/').to_owned();
        if !(issuer.starts_with("http://") || issuer.starts_with("https://")) {
            return Err(err("issuer", "must be an http(s) URL"));
        }
        if c.issue_non_spec_id_tokens.is_some_and(|f| f.0) {
            return Err(err(
                "issueNonSpecIdTokens",
                "ID tokens are not issued by Turnpike's authorization server",
            ));
        }
        let users = match &c.static_user_data_provider {
            Some(p) => Users::compile(&p.users)?,
            None => Users::default(),
        };
        let clients = Clients::compile(&c.static_client_list.clients, !users.is_empty())?;
        let claims = c.claims.clone().unwrap_or_default();
        let supported = words(&claims.value);
        let mut scope_claims = BTreeMap::new();
        for (i, s) in claims.scopes.iter().enumerate() {
            if s.id.is_empty() || s.id.contains(char::is_whitespace) {
                return Err(err(&format!("claims.scopes[{i}].id"), "must be one word"));
            }
            // As in Membrane, a scope opens only claims the server supports.
            let open: Vec<String> = words(&s.claims)
                .into_iter()
                .filter(|c| supported.contains(c))
                .collect();
            scope_claims.insert(s.id.clone(), open);
        }
        scope_claims.entry("openid".to_owned()).or_default();

        let kept = kept(format!("{}|{issuer}", ctx.site));
        let mut files = Vec::new();
        let access = match (&c.bearer_token, &c.bearer_jwt_token) {
            (Some(_), Some(_)) => {
                return Err(err(
                    "bearerJwtToken",
                    "give one of `bearerToken` and `bearerJwtToken`",
                ))
            }
            (_, Some(j)) => jwt_format(j, "bearerJwtToken", 0, &kept, ctx, &mut files)?,
            _ => Format::Opaque,
        };
        let refresh = match c
            .refresh
            .as_ref()
            .map(|r| (&r.bearer_token, &r.bearer_jwt_token))
        {
            Some((Some(_), Some(_))) => {
                return Err(err(
                    "refresh.bearerJwtToken",
                    "give one of `bearerToken` and `bearerJwtToken`",
                ))
            }
            Some((_, Some(j))) => {
                jwt_format(j, "refresh.bearerJwtToken", 1, &kept, ctx, &mut files)?
            }
            _ => Format::Opaque,
        };
        if let (Format::Jwt { key: a, .. }, Format::Jwt { key: r, .. }) = (&access, &refresh) {
            if a.public_jwk()["n"] == r.public_jwk()["n"] {
                return Err(err(
                    "refresh.bearerJwtToken.jwk",
                    "refresh tokens need a key of their own: with the access tokens' key, resource servers would accept them as access tokens",
                ));
            }
        }
        for (i, cl) in c.static_client_list.clients.iter().enumerate() {
            if cl.callback_url.is_some() {
                tracing::info!(
                    "oauth2authserver: staticClientList.clients[{i}].callbackUrl is kept but unused: the authorization code flow is not implemented"
                );
            }
        }

        let base = format!("{issuer}/oauth2");
        let scopes: Vec<&String> = scope_claims.keys().collect();
        let grant_types: Vec<&str> = clients
            .grant_types()
            .into_iter()
            .filter(|g| *g != "password" || !users.is_empty())
            .collect();
        let discovery = serde_json::json!({
            "issuer": issuer,
            "token_endpoint": format!("{base}/token"),
            "userinfo_endpoint": format!("{base}/userinfo"),
            "revocation_endpoint": format!("{base}/revoke"),
            "jwks_uri": format!("{base}/certs"),
            "grant_types_supported": grant_types,
            "response_types_supported": [],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "scopes_supported": scopes,
            "claims_supported": supported,
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            "revocation_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        });
        let keys: Vec<&Value> = match &access {
            Format::Jwt { key, .. } => vec![key.public_jwk()],
            Format::Opaque => Vec::new(),
        };
        let jwks = serde_json::json!({ "keys": keys });
        Ok(AuthServer {
            issuer,
            prefix: ctx.path_prefix.trim_end_matches('/').to_owned(),
            users,
            clients,
            access,
            refresh,
            refresh_for_clients: c.issue_non_spec_refresh_tokens.is_some_and(|f| f.0),
            scope_claims,
            kept,
            discovery: Bytes::from(discovery.to_string()),
            jwks: Bytes::from(jwks.to_string()),
            files,
        })
    }
}

/// Seconds since the epoch.
fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The scopes of a request's `scope` parameter (RFC 6749 3.3: separated by blanks).
fn scope_words(s: &str) -> Vec<String> {
    s.split(' ')
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A list claim: one value as a string, several as an array.
fn one_or_many(values: &[String]) -> Value {
    match values {
        [one] => Value::String(one.clone()),
        many => Value::Array(many.iter().cloned().map(Value::String).collect()),
    }
}

/// The tokens of one grant, before they are answered.
struct Issued {
    access: String,
    expires_in: Option<u64>,
    scope: Vec<String>,
    refresh: Option<String>,
}

/// The answer of a request that is not one of the endpoints' methods.
fn method_not_allowed(allow: &'static str) -> Outcome {
    Outcome::Reject(
        Problem::new(&problems::METHOD_NOT_ALLOWED)
            .with_detail(format!("this endpoint takes {allow}"))
            .with_header(header::ALLOW, HeaderValue::from_static(allow)),
    )
}

fn respond(r: Result<Response<Body>, OAuthError>) -> Outcome {
    Outcome::Respond(r.unwrap_or_else(OAuthError::response))
}

impl AuthServer {
    /// The client of a token or revocation request: HTTP Basic (`client_secret_basic`) or
    /// `client_id` and `client_secret` in the form (`client_secret_post`), not both.
    fn client(&self, ex: &Exchange, form: &Form) -> Result<Arc<Client>, OAuthError> {
        let basic = match authorization(ex, b"basic") {
            None => None,
            Some(b) => {
                let malformed =
                    || OAuthError::invalid_client("the Basic credentials are malformed");
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(b)
                    .map_err(|_| malformed())?;
                let colon = decoded
                    .iter()
                    .position(|&c| c == b':')
                    .ok_or_else(malformed)?;
                // RFC 6749 2.3.1: both are form-encoded before they are joined.
                let id = super::decode(&decoded[..colon])?;
                let secret = super::decode(&decoded[colon + 1..])?;
                Some((id, secret))
            }
        };
        let (id, secret) =
            match basic {
                Some((id, secret)) => {
                    if form.get("client_secret").is_some() {
                        return Err(OAuthError::bad(
                            "invalid_request",
                            "authenticate the client in one way: Basic or the form, not both",
                        ));
                    }
                    if form.get("client_id").is_some_and(|f| f != id) {
                        return Err(OAuthError::bad(
                            "invalid_request",
                            "client_id differs from the Basic credentials",
                        ));
                    }
                    (id, secret)
                }
                None => match (form.get("client_id"), form.get("client_secret")) {
                    (Some(id), Some(secret)) => (id.to_owned(), secret.to_owned()),
                    (Some(_), None) => {
                        return Err(OAuthError::invalid_client(
                            "client_secret is missing: clients authenticate with their secret",
                        ))
                    }
                    _ => return Err(OAuthError::invalid_client(
                        "client authentication is required (Basic, or client_id and client_secret)",
                    )),
                },
            };
        self.clients
            .verify(&id, &secret)
            .ok_or_else(|| OAuthError::invalid_client("unknown client or wrong secret"))
    }

    /// The scopes to grant: the requested ones when every one is allowed, or all allowed ones
    /// when none is requested. `limits` are the client's and the user's lists; where neither
    /// has one, the scopes of `claims.scopes` are allowed.
    fn scope(
        &self,
        requested: Option<&str>,
        limits: &[Option<&Vec<String>>],
    ) -> Result<Vec<String>, OAuthError> {
        let mut limit: Option<Vec<String>> = None;
        for l in limits.iter().flatten() {
            limit = Some(match limit {
                None => (*l).clone(),
                Some(prev) => prev.into_iter().filter(|s| l.contains(s)).collect(),
            });
        }
        let Some(requested) = requested.map(scope_words).filter(|r| !r.is_empty()) else {
            return Ok(limit.unwrap_or_default());
        };
        let mut granted: Vec<String> = Vec::new();
        for s in requested {
            let allowed = match &limit {
                Some(l) => l.contains(&s),
                None => self.scope_claims.contains_key(&s),
            };
            if !allowed {
                return Err(OAuthError::bad(
                    "invalid_scope",
                    format!("the scope `{s}` is not allowed"),
                ));
            }
            if !granted.contains(&s) {
                granted.push(s);
            }
        }
        Ok(granted)
    }

    /// The audiences to grant (RFC 8707): the requested `resource`s when the client may have
    /// each, or all of the client's `resources`; and the user's `aud`.
    fn audience(
        form: &Form,
        client: &Client,
        user: Option<&User>,
    ) -> Result<Vec<String>, OAuthError> {
        let mut aud: Vec<String> = Vec::new();
        for r in form.all("resource") {
            if !client.resources.iter().any(|c| c == r) {
                return Err(OAuthError::bad(
                    "invalid_target",
                    format!("the client may not ask for the resource `{r}`"),
                ));
            }
            if !aud.iter().any(|a| a == r) {
                aud.push(r.to_owned());
            }
        }
        if aud.is_empty() {
            aud = client.resources.clone();
        }
        for a in user.map(|u| u.audience.as_slice()).unwrap_or_default() {
            if !aud.contains(a) {
                aud.push(a.clone());
            }
        }
        Ok(aud)
    }

    /// Makes one token of `format` for `grant`, with the JWT claims of the grant.
    fn token(
        &self,
        format: &Format,
        grant: &Grant,
        user: Option<&User>,
    ) -> Result<String, OAuthError> {
        let failed = |what: String| {
            tracing::error!("oauth2authserver: cannot issue a token: {what}");
            OAuthError {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                error: "server_error",
                description: "the token could not be issued".into(),
                challenge: None,
            }
        };
        let id = random_token().map_err(|e| failed(e.to_string()))?;
        let Format::Jwt { key, lifetime } = format else {
            return Ok(id);
        };
        let now = now_secs();
        let mut claims = Map::new();
        if let Some(u) = user {
            for (k, v) in &u.attributes {
                if k != "scopes" && k != "aud" {
                    claims.insert(k.clone(), Value::String(v.clone()));
                }
            }
        }
        claims.insert("sub".into(), grant.subject().into());
        claims.insert("clientId".into(), (*grant.client_id).into());
        claims.insert("iss".into(), self.issuer.clone().into());
        claims.insert("iat".into(), now.into());
        if let Some(l) = lifetime {
            claims.insert("exp".into(), (now + l.as_secs()).into());
        }
        if !grant.audience.is_empty() {
            claims.insert("aud".into(), one_or_many(&grant.audience));
        }
        if !grant.scope.is_empty() {
            claims.insert("scope".into(), grant.scope.join(" ").into());
        }
        if grant.kind == Kind::Refresh {
            claims.insert("token_use".into(), "refresh".into());
        }
        claims.insert("jti".into(), id.into());
        key.sign(&claims).map_err(failed)
    }

    /// Issues an access token (and a refresh token when `with_refresh`) and records them.
    fn issue(
        &self,
        client: &Client,
        user: Option<&Arc<User>>,
        scope: Vec<String>,
        audience: Vec<String>,
        with_refresh: bool,
    ) -> Result<Issued, OAuthError> {
        let now = Instant::now();
        let grant = |kind: Kind, lifetime: Option<Duration>| Grant {
            kind,
            client_id: client.id.clone(),
            user: user.map(|u| u.name.clone()),
            scope: scope.clone(),
            audience: audience.clone(),
            expires: lifetime.map(|l| now + l),
        };
        let user = user.map(|u| &**u);
        let a = grant(Kind::Access, self.access.lifetime());
        let access = self.token(&self.access, &a, user)?;
        let refresh = if with_refresh {
            let r = grant(Kind::Refresh, self.refresh.lifetime());
            let token = self.token(&self.refresh, &r, user)?;
            self.kept.store.insert(&token, r);
            Some(token)
        } else {
            None
        };
        self.kept.store.insert(&access, a);
        Ok(Issued {
            access,
            expires_in: self.access.lifetime().map(|l| l.as_secs()),
            scope,
            refresh,
        })
    }

    /// `/oauth2/token`.
    fn token_endpoint(&self, ex: &Exchange) -> Result<Response<Body>, OAuthError> {
        let form_type = ex
            .request
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|v| {
                v.trim()
                    .eq_ignore_ascii_case("application/x-www-form-urlencoded")
            });
        if !form_type {
            return Err(OAuthError::bad(
                "invalid_request",
                "send the parameters as application/x-www-form-urlencoded",
            ));
        }
        let form = Form::parse(ex.request_bytes().map_or(&b""[..], |b| b))?;
        let grant_type = form
            .get("grant_type")
            .ok_or_else(|| OAuthError::bad("invalid_request", "grant_type is missing"))?;
        let client = self.client(ex, &form)?;
        let grant = GrantType::parse(grant_type).ok_or_else(|| {
            let why = match grant_type {
                "authorization_code" => "the authorization code flow is not implemented",
                _ => "the grant types are client_credentials, password and refresh_token",
            };
            OAuthError::bad("unsupported_grant_type", why)
        })?;
        if !client.grants.contains(&grant) {
            return Err(OAuthError::bad(
                "unauthorized_client",
                format!("the client may not use the {} grant", grant.name()),
            ));
        }
        let may_refresh = client.grants.contains(&GrantType::RefreshToken);
        let issued = match grant {
            GrantType::ClientCredentials => {
                let scope = self.scope(form.get("scope"), &[client.scopes.as_ref()])?;
                let aud = Self::audience(&form, &client, None)?;
                self.issue(
                    &client,
                    None,
                    scope,
                    aud,
                    self.refresh_for_clients && may_refresh,
                )?
            }
            GrantType::Password => {
                if self.users.is_empty() {
                    return Err(OAuthError::bad(
                        "unsupported_grant_type",
                        "this server has no users",
                    ));
                }
                let (Some(name), Some(password)) = (form.get("username"), form.get("password"))
                else {
                    return Err(OAuthError::bad(
                        "invalid_request",
                        "username and password are required",
                    ));
                };
                let user = self.users.verify(name, password).ok_or_else(|| {
                    OAuthError::bad("invalid_grant", "unknown user or wrong password")
                })?;
                let scope = self.scope(
                    form.get("scope"),
                    &[client.scopes.as_ref(), user.scopes.as_ref()],
                )?;
                let aud = Self::audience(&form, &client, Some(&user))?;
                self.issue(&client, Some(&user), scope, aud, may_refresh)?
            }
            GrantType::RefreshToken => {
                let token = form.get("refresh_token").ok_or_else(|| {
                    OAuthError::bad("invalid_request", "refresh_token is missing")
                })?;
                let invalid = || OAuthError::bad("invalid_grant", "the refresh token is not valid");
                let old = self.kept.store.get(token).ok_or_else(invalid)?;
                if old.kind != Kind::Refresh || *old.client_id != *client.id {
                    return Err(invalid());
                }
                let user = match &old.user {
                    Some(name) => Some(self.users.get(name).cloned().ok_or_else(invalid)?),
                    None => None,
                };
                let scope = match form.get("scope") {
                    None => old.scope.clone(),
                    Some(s) => {
                        let asked = scope_words(s);
                        if let Some(extra) = asked.iter().find(|s| !old.scope.contains(s)) {
                            return Err(OAuthError::bad(
                                "invalid_scope",
                                format!("the scope `{extra}` was not granted"),
                            ));
                        }
                        asked
                    }
                };
                // The old refresh token is spent; a second use of it finds nothing.
                self.kept.store.remove(token).ok_or_else(invalid)?;
                self.issue(&client, user.as_ref(), scope, old.audience.clone(), true)?
            }
        };
        // The members in the order clients that split the text expect them.
        let mut body = format!(
            "{{\"access_token\":{},\"token_type\":\"Bearer\"",
            Value::String(issued.access)
        );
        if let Some(s) = issued.expires_in {
            body.push_str(&format!(",\"expires_in\":{s}"));
        }
        if !issued.scope.is_empty() {
            body.push_str(&format!(
                ",\"scope\":{}",
                Value::String(issued.scope.join(" "))
            ));
        }
        if let Some(r) = issued.refresh {
            body.push_str(&format!(",\"refresh_token\":{}", Value::String(r)));
        }
        body.push('}');
        Ok(json_response(StatusCode::OK, body))
    }

    /// The grant of an access token that is valid and whose client (and user) still exist.
    fn access_grant(&self, token: &str) -> Option<Grant> {
        let g = self.kept.store.get(token)?;
        let live = g.kind == Kind::Access
            && self.clients.contains(&g.client_id)
            && g.user.as_ref().is_none_or(|u| self.users.get(u).is_some());
        live.then_some(g)
    }

    /// `/oauth2/userinfo`: `sub`, and the claims the token's scopes open.
    fn userinfo(&self, ex: &Exchange) -> Result<Response<Body>, OAuthError> {
        let challenge = |error: Option<&str>| {
            let v = match error {
                Some(e) => format!("Bearer realm=\"oauth2\", error=\"{e}\""),
                None => "Bearer realm=\"oauth2\"".to_owned(),
            };
            HeaderValue::from_str(&v).ok()
        };
        let token = authorization(ex, b"bearer").and_then(|t| std::str::from_utf8(t).ok());
        let Some(token) = token.filter(|t| !t.is_empty()) else {
            return Err(OAuthError {
                status: StatusCode::UNAUTHORIZED,
                error: "invalid_request",
                description: "a bearer token is required".into(),
                challenge: challenge(None),
            });
        };
        let grant = self.access_grant(token).ok_or_else(|| OAuthError {
            status: StatusCode::UNAUTHORIZED,
            error: "invalid_token",
            description: "the access token is not valid".into(),
            challenge: challenge(Some("invalid_token")),
        })?;
        let mut info = Map::new();
        info.insert("sub".into(), grant.subject().into());
        if let Some(user) = grant.user.as_ref().and_then(|u| self.users.get(u)) {
            for scope in &grant.scope {
                for claim in self.scope_claims.get(scope).into_iter().flatten() {
                    let value = match claim.as_str() {
                        "username" => Some(user.name.to_string()),
                        c => user.attributes.get(c).cloned(),
                    };
                    if let Some(v) = value {
                        info.insert(claim.clone(), v.into());
                    }
                }
            }
        }
        Ok(json_response(
            StatusCode::OK,
            Value::Object(info).to_string(),
        ))
    }

    /// `/oauth2/revoke` (RFC 7009): forgets a token the authenticated client was issued.
    fn revoke(&self, ex: &Exchange) -> Result<Response<Body>, OAuthError> {
        let form = Form::parse(ex.request_bytes().map_or(&b""[..], |b| b))?;
        let client = self.client(ex, &form)?;
        let token = form
            .get("token")
            .ok_or_else(|| OAuthError::bad("invalid_request", "token is missing"))?;
        if let Some(g) = self.kept.store.get(token) {
            if *g.client_id != *client.id {
                return Err(OAuthError::bad(
                    "invalid_grant",
                    "the token was issued to another client",
                ));
            }
            self.kept.store.remove(token);
        }
        let mut r = Response::new(Body::Empty);
        r.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        Ok(r)
    }

    /// A public JSON document (discovery, JWKS).
    fn document(body: &Bytes) -> Outcome {
        let mut r = Response::new(Body::full(body.clone()));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Outcome::Respond(r)
    }
}

impl Policy for AuthServer {
    fn name(&self) -> &'static str {
        "oauth2authserver"
    }

    fn body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    fn response_needs_request(&self) -> bool {
        false
    }

    fn files(&self) -> Vec<PathBuf> {
        self.files.clone()
    }

    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let path = ex.request.uri.path();
        let rel = path.strip_prefix(self.prefix.as_str()).unwrap_or("");
        let method = &ex.request.method;
        let read = *method == Method::GET || *method == Method::HEAD;
        match rel {
            "/oauth2/token" if *method == Method::POST => respond(self.token_endpoint(ex)),
            "/oauth2/revoke" if *method == Method::POST => respond(self.revoke(ex)),
            "/oauth2/token" | "/oauth2/revoke" => method_not_allowed("POST"),
            "/oauth2/userinfo" if read || *method == Method::POST => respond(self.userinfo(ex)),
            "/oauth2/userinfo" => method_not_allowed("GET, POST"),
            "/oauth2/certs" if read => Self::document(&self.jwks),
            "/.well-known/openid-configuration" if read => Self::document(&self.discovery),
            "/oauth2/certs" | "/.well-known/openid-configuration" => {
                method_not_allowed("GET, HEAD")
            }
            "/oauth2/auth" | "/oauth2/authorize" => respond(Err(OAuthError::bad(
                "unsupported_response_type",
                "the authorization code and implicit flows are not implemented",
            ))),
            _ => Outcome::Reject(
                Problem::new(&problems::NOT_FOUND)
                    .with_detail("the authorization server has no endpoint at this path"),
            ),
        }
    }
}

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
