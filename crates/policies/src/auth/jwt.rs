//! `jwtAuth`: bearer JWTs verified against JSON Web Key Sets from files or URLs.
//!
//! URL key sets are fetched at load and then refreshed by a background thread. A token that names
//! a `kid` no key set has makes the request wait ([`Outcome::Wait`]) while its key sets are
//! fetched again, at most once per `refetchInterval` (default 30 s) however many such tokens
//! arrive: requests that come while a fetch is under way wait for that one, and the others are
//! answered at once. Only the listed
//! algorithms are accepted, each only with a key of its family (so an HS256 token "signed" with
//! an RSA public key fails); `none` is never accepted. Verified claims go into the exchange's
//! [`Identity`] for later policies and templates (`${jwt.sub}`).

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use http::HeaderValue;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::watch;
use turnpike_config::fetch::{http_get_text, Wanted};
use turnpike_core::exchange::{AuthMethod, Authentication, Identity};
use turnpike_core::{problems, Exchange, Outcome, Policy, Problem, Resume, Wait};
use turnpike_core::{CompileContext, CompileError, PolicyFactory};

use super::AllowList;
use super::{admit, authorization, unauthorized, Allow};
use crate::consumers::{self, Consumers};
use crate::err;

/// `jwtAuth`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JwtAuthSettings {
    /// Key sets: files (`location`) or URLs (`url`, fetched in the background).
    pub jwks: JwksSetting,
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
    pub leeway: Option<turnpike_config::units::Duration>,
    /// Restrict access to these consumers or groups (consumers are matched by `sub`).
    #[serde(default)]
    pub allow: Option<AllowList>,
    /// Require every one of these scopes (from `scope` or `scp`).
    #[serde(default)]
    pub required_scopes: Vec<String>,
    /// How long a request whose token names an unknown `kid` waits for its key sets to be
    /// fetched again (default 5s); past it the answer is 504.
    #[serde(default)]
    pub key_fetch_timeout: Option<turnpike_config::units::Duration>,
    /// Remove `Authorization` (the token) before the request goes to the backend (default
    /// false; APISIX's `hide_credentials`).
    #[serde(default)]
    pub hide_credentials: turnpike_config::units::Flag,
}

/// The key sets: a list, or Membrane's `{ jwks: [...], jwksUris: "url url" }`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum JwksSetting {
    /// The key sets.
    List(Vec<JwksSource>),
    /// Membrane's form.
    Membrane(MembraneJwks),
}

/// Membrane's `jwks:` map.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MembraneJwks {
    /// Key sets by file (`location`) or URL.
    #[serde(default)]
    pub jwks: Vec<JwksSource>,
    /// Space-separated JWKS URLs.
    #[serde(default)]
    pub jwks_uris: Option<String>,
}

impl JwksSetting {
    /// Every key set source, in order (Membrane's `jwksUris` after its `jwks`), and the key
    /// prefix of the `i`th for errors.
    fn sources(&self) -> Vec<(String, JwksSource)> {
        match self {
            JwksSetting::List(l) => l
                .iter()
                .enumerate()
                .map(|(i, s)| (format!("jwks[{i}]"), s.clone()))
                .collect(),
            JwksSetting::Membrane(m) => {
                let mut out: Vec<(String, JwksSource)> = m
                    .jwks
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (format!("jwks.jwks[{i}]"), s.clone()))
                    .collect();
                for url in m.jwks_uris.iter().flat_map(|u| u.split_whitespace()) {
                    out.push((
                        "jwks.jwksUris".to_owned(),
                        JwksSource {
                            location: None,
                            url: Some(url.to_owned()),
                            jwk: None,
                            refresh: None,
                            refetch_interval: None,
                        },
                    ));
                }
                out
            }
        }
    }
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
    /// Membrane's `jwk: { location }` item: a key (or key set) file, as `location`.
    #[serde(default)]
    pub jwk: Option<crate::oauth2::settings::JwkLocation>,
    /// How often a URL is fetched again (default 10m).
    #[serde(default)]
    pub refresh: Option<turnpike_config::units::Duration>,
    /// The shortest time between two fetches of a URL asked for by tokens with an unknown
    /// `kid` (default 30s).
    #[serde(default)]
    pub refetch_interval: Option<turnpike_config::units::Duration>,
}

struct Key {
    kid: Option<String>,
    key: DecodingKey,
}

type KeySlot = Arc<ArcSwap<Vec<Key>>>;

/// A URL key set's background fetcher. Dropping it stops its thread.
struct Refresher {
    wake: Mutex<mpsc::Sender<()>>,
    /// When a token last asked for a fetch, for `refetchInterval`.
    last_asked: Mutex<Option<Instant>>,
    /// Asked for and not done yet.
    pending: Arc<AtomicBool>,
    /// Counts finished fetches (successful or not): a waiting request subscribes to it.
    fetched: Arc<watch::Sender<u64>>,
    refetch_interval: Duration,
}

impl Refresher {
    /// Asks for a fetch on behalf of a token with an unknown `kid`: returns a receiver that
    /// changes when a fetch finishes, or `None` when no fetch will come soon (one ran less than
    /// `refetchInterval` ago).
    fn refetch(&self) -> Option<watch::Receiver<u64>> {
        let rx = self.fetched.subscribe();
        if self.pending.load(Ordering::Acquire) {
            return Some(rx);
        }
        let mut last = self.last_asked.lock().ok()?;
        if last.is_some_and(|t| t.elapsed() < self.refetch_interval) {
            return None;
        }
        *last = Some(Instant::now());
        self.pending.store(true, Ordering::Release);
        let sent = self.wake.lock().ok().is_some_and(|tx| tx.send(()).is_ok());
        if !sent {
            self.pending.store(false, Ordering::Release);
            return None;
        }
        Some(rx)
    }
}

/// What verifying a token needs: shared with a request that waits for a refetch.
struct Inner {
    slots: Vec<KeySlot>,
    refreshers: Vec<Refresher>,
    validations: HashMap<Algorithm, Validation>,
    consumers: Arc<Consumers>,
    allow: Option<Allow>,
    required_scopes: Vec<String>,
    challenge: HeaderValue,
    invalid_challenge: HeaderValue,
    key_fetch_timeout: Duration,
}

/// The compiled policy.
pub struct JwtAuth {
    inner: Arc<Inner>,
    key_files: Vec<std::path::PathBuf>,
    hide: bool,
}

const DEFAULT_ALGS: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// The keys of a JSON Web Key Set, or of a single JSON Web Key (Membrane's key files hold one
/// key; a private key's public part is used).
fn parse_jwks(text: &str) -> Result<Vec<Key>, String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not a JSON Web Key Set: {e}"))?;
    let single = value.get("kty").is_some() && value.get("keys").is_none();
    let set: JwkSet = if single {
        let jwk = serde_json::from_value(value).map_err(|e| format!("not a JSON Web Key: {e}"))?;
        JwkSet { keys: vec![jwk] }
    } else {
        serde_json::from_value(value).map_err(|e| format!("not a JSON Web Key Set: {e}"))?
    };
    set.keys
        .iter()
        .map(|jwk| {
            DecodingKey::from_jwk(jwk)
                .map(|key| Key {
                    kid: jwk.common.key_id.clone(),
                    key,
                })
                .map_err(|e| format!("unusable key {:?}: {e}", jwk.common.key_id))
        })
        .collect()
}

/// Fetches and parses the key set at `url` (4 MB at most).
fn fetch(url: &str) -> Result<Vec<Key>, String> {
    let text = http_get_text(
        url,
        Wanted {
            accept: "application/jwk-set+json, application/json",
            max_bytes: 4 << 20,
        },
    )
    .map_err(|e| e.to_string())?;
    parse_jwks(&text)
}

fn spawn_refresher(
    url: String,
    slot: &KeySlot,
    every: Duration,
    refetch_interval: Duration,
) -> Result<Refresher, String> {
    let (tx, rx) = mpsc::channel::<()>();
    let weak = Arc::downgrade(slot);
    let pending = Arc::new(AtomicBool::new(false));
    let fetched = Arc::new(watch::Sender::new(0u64));
    let (thread_pending, thread_fetched) = (Arc::clone(&pending), Arc::clone(&fetched));
    std::thread::Builder::new()
        .name("turnpike-jwks".into())
        .spawn(move || loop {
            match rx.recv_timeout(every) {
                Ok(()) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
            let Some(slot) = weak.upgrade() else { return };
            match fetch(&url) {
                Ok(keys) => {
                    tracing::info!(%url, keys = keys.len(), "JWKS refreshed");
                    slot.store(Arc::new(keys));
                }
                Err(e) => tracing::warn!("JWKS refresh failed, keeping the previous keys: {e}"),
            }
            thread_pending.store(false, Ordering::Release);
            thread_fetched.send_modify(|n| *n += 1);
        })
        .map_err(|e| format!("cannot start the JWKS refresh thread: {e}"))?;
    Ok(Refresher {
        wake: Mutex::new(tx),
        last_asked: Mutex::new(None),
        pending,
        fetched,
        refetch_interval,
    })
}

impl PolicyFactory for JwtAuth {
    const NAME: &'static str = "jwtAuth";
    const AUTHENTICATES: bool = true;
    type Settings = JwtAuthSettings;

    /// Compiles the policy: reads key files, fetches key URLs once, starts their refreshers.
    fn compile(c: JwtAuthSettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        let consumers = crate::consumers::shared(ctx);
        let algs: Vec<Algorithm> = if c.algorithms.is_empty() {
            DEFAULT_ALGS.to_vec()
        } else {
            c.algorithms
                .iter()
                .enumerate()
                .map(|(i, a)| {
                    if a.eq_ignore_ascii_case("none") {
                        return Err(err(&format!("algorithms[{i}]"), "`none` is never accepted"));
                    }
                    Algorithm::from_str(a).map_err(|_| {
                        err(
                            &format!("algorithms[{i}]"),
                            format!("unknown algorithm `{a}`"),
                        )
                    })
                })
                .collect::<Result<_, _>>()?
        };
        let leeway = c.leeway.map_or(60, |d| d.0.as_secs());
        let mut validations = HashMap::new();
        for alg in algs {
            let mut v = Validation::new(alg);
            v.leeway = leeway;
            v.validate_nbf = true;
            match &c.expected_aud {
                Some(aud) => v.set_audience(&[aud]),
                None => v.validate_aud = false,
            }
            if let Some(iss) = &c.expected_iss {
                v.set_issuer(&[iss]);
            }
            validations.insert(alg, v);
        }
        let sources = c.jwks.sources();
        if sources.is_empty() {
            return Err(err("jwks", "at least one key set is needed"));
        }
        let mut slots = Vec::new();
        let mut refreshers = Vec::new();
        let mut key_files = Vec::new();
        for (at, src) in &sources {
            let at = at.as_str();
            let mut src = src.clone();
            if let Some(j) = src.jwk.take() {
                if src.location.is_some() || src.url.is_some() {
                    return Err(err(at, "give one of `location`, `url` and `jwk`"));
                }
                src.location = Some(j.location);
            }
            let src = &src;
            match (&src.location, &src.url) {
                (Some(loc), None) => {
                    if src.refresh.is_some() || src.refetch_interval.is_some() {
                        let key = if src.refresh.is_some() {
                            "refresh"
                        } else {
                            "refetchInterval"
                        };
                        return Err(err(
                            &format!("{at}.{key}"),
                            "only URL key sets are fetched again",
                        ));
                    }
                    let path = ctx.base_dir.join(loc);
                    let text = std::fs::read_to_string(&path).map_err(|e| {
                        err(
                            &format!("{at}.location"),
                            format!("cannot read {}: {e}", path.display()),
                        )
                    })?;
                    let keys = parse_jwks(&text).map_err(|m| err(&format!("{at}.location"), m))?;
                    key_files.push(path.clone());
                    slots.push(Arc::new(ArcSwap::from_pointee(keys)));
                }
                (None, Some(url)) => {
                    if !(url.starts_with("https://") || url.starts_with("http://")) {
                        return Err(err(&format!("{at}.url"), "must be an http(s) URL"));
                    }
                    let keys = match fetch(url) {
                        Ok(k) => k,
                        Err(e) => {
                            tracing::warn!(
                                "{e}; tokens are rejected until the key set can be fetched"
                            );
                            Vec::new()
                        }
                    };
                    let slot: KeySlot = Arc::new(ArcSwap::from_pointee(keys));
                    let every = src.refresh.map_or(Duration::from_secs(600), |d| d.0);
                    let refetch = src
                        .refetch_interval
                        .map_or(Duration::from_secs(30), |d| d.0);
                    refreshers.push(
                        spawn_refresher(url.clone(), &slot, every, refetch)
                            .map_err(|m| err(at, m))?,
                    );
                    slots.push(slot);
                }
                _ => return Err(err(at, "give exactly one of `location` and `url`")),
            }
        }
        let allow = match &c.allow {
            Some(a) => Allow::compile(a, &consumers).map_err(|m| err("allow", m))?,
            None => None,
        };
        Ok(JwtAuth {
            inner: Arc::new(Inner {
                slots,
                refreshers,
                validations,
                consumers: consumers.clone(),
                allow,
                required_scopes: c.required_scopes.clone(),
                challenge: HeaderValue::from_static("Bearer"),
                invalid_challenge: HeaderValue::from_static("Bearer error=\"invalid_token\""),
                key_fetch_timeout: c.key_fetch_timeout.map_or(Duration::from_secs(5), |d| d.0),
            }),
            key_files,
            hide: c.hide_credentials.0,
        })
    }
}

/// Why a token was not accepted: what the client is told (which check failed, in the
/// gateway's words), or that no key set has the key it names.
enum Rejected {
    Invalid(&'static str),
    UnknownKey,
}

impl Inner {
    fn verify(&self, token: &str) -> Result<Claims, Rejected> {
        let head = jsonwebtoken::decode_header(token).map_err(|e| {
            tracing::debug!("JWT header: {e}");
            Rejected::Invalid("the token is malformed")
        })?;
        let validation = self
            .validations
            .get(&head.alg)
            .ok_or(Rejected::Invalid("the token's algorithm is not accepted"))?;
        let mut last = None;
        for slot in &self.slots {
            let keys = slot.load();
            for k in keys.iter() {
                if head.kid.is_some() && k.kid.is_some() && head.kid != k.kid {
                    continue;
                }
                if k.key.family() != head.alg.family() {
                    continue;
                }
                match jsonwebtoken::decode::<Claims>(token, &k.key, validation) {
                    Ok(data) => return Ok(data.claims),
                    Err(e) => last = Some(e),
                }
            }
        }
        match last {
            Some(e) => {
                tracing::debug!("JWT rejected: {e}");
                Err(Rejected::Invalid(check_failed(e.kind())))
            }
            None if head.kid.is_some() => Err(Rejected::UnknownKey),
            None => Err(Rejected::Invalid("no key matches the token")),
        }
    }

    /// Verifies the token and admits the caller; `waited` after the key sets were fetched again.
    fn authenticate(self: &Arc<Self>, ex: &mut Exchange, token: &str, waited: bool) -> Outcome {
        let claims = match self.verify(token) {
            Ok(c) => c,
            Err(Rejected::UnknownKey) if !waited => {
                let waits: Vec<watch::Receiver<u64>> = self
                    .refreshers
                    .iter()
                    .filter_map(Refresher::refetch)
                    .collect();
                // No fetch may run now: verify once more at once (one may just have finished).
                if waits.is_empty() {
                    return self.authenticate(ex, token, true);
                }
                return self.retry_after(waits, token);
            }
            Err(Rejected::UnknownKey) => {
                return unauthorized(
                    "invalid token: no key set has the token's key",
                    Some(&self.invalid_challenge),
                )
            }
            Err(Rejected::Invalid(m)) => {
                return unauthorized(
                    &format!("invalid token: {m}"),
                    Some(&self.invalid_challenge),
                )
            }
        };
        let subject = claims
            .get("sub")
            .and_then(|v| v.as_str())
            .map(str::to_owned);
        let consumer = subject
            .as_deref()
            .and_then(|s| self.consumers.by_subject(s))
            .cloned();
        let granted = scopes(&claims);
        ex.record_authentication(Authentication {
            method: AuthMethod::Jwt,
            scopes: granted.clone(),
        });
        let identity = Identity {
            scopes: granted,
            subject,
            claims: Some(Arc::new(claims)),
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

    /// A token names a key no key set has and its key sets are being fetched again: wait for
    /// the fetches (`waits`), then verify once more.
    fn retry_after(self: &Arc<Self>, waits: Vec<watch::Receiver<u64>>, token: &str) -> Outcome {
        let inner = Arc::clone(self);
        let token = token.to_owned();
        let future = async move {
            for mut rx in waits {
                let _ = rx.changed().await;
            }
            Box::new(move |ex: &mut Exchange| inner.authenticate(ex, &token, true)) as Resume
        };
        Outcome::Wait(Wait::new(future, self.key_fetch_timeout, |_| {
            Outcome::Reject(
                Problem::new(&problems::POLICY_TIMEOUT)
                    .with_detail("the token's key set could not be fetched in time"),
            )
        }))
    }
}

/// What the client is told about a token the JWT library refused: which check failed.
fn check_failed(kind: &jsonwebtoken::errors::ErrorKind) -> &'static str {
    use jsonwebtoken::errors::ErrorKind as K;
    match kind {
        K::ExpiredSignature => "the token has expired",
        K::ImmatureSignature => "the token is not valid yet (nbf)",
        K::InvalidAudience => "the token's audience is not accepted",
        K::InvalidIssuer => "the token's issuer is not accepted",
        K::InvalidSubject => "the token's subject is not accepted",
        K::InvalidSignature => "the token's signature is invalid",
        K::InvalidAlgorithm | K::InvalidAlgorithmName => "the token's algorithm is not accepted",
        K::MissingRequiredClaim(c) => match c.as_str() {
            "exp" => "the token has no expiry (exp)",
            "aud" => "the token has no audience (aud)",
            "iss" => "the token has no issuer (iss)",
            _ => "the token lacks a required claim",
        },
        _ => "the token is malformed",
    }
}

type Claims = serde_json::Map<String, serde_json::Value>;

fn scopes(claims: &serde_json::Map<String, serde_json::Value>) -> Vec<String> {
    match claims.get("scope").or_else(|| claims.get("scp")) {
        Some(serde_json::Value::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
        Some(serde_json::Value::Array(a)) => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

impl Policy for JwtAuth {
    fn name(&self) -> &'static str {
        "jwtAuth"
    }

    fn files(&self) -> Vec<std::path::PathBuf> {
        self.key_files.clone()
    }

    fn response_needs_request(&self) -> bool {
        self.inner.consumers.response_needs_request()
    }

    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let token = authorization(ex, b"bearer")
            .and_then(|t| std::str::from_utf8(t).ok())
            .filter(|t| t.is_ascii());
        let Some(token) = token else {
            return unauthorized("a bearer token is required", Some(&self.inner.challenge));
        };
        let token = token.to_owned();
        if self.hide {
            ex.request.headers.remove(http::header::AUTHORIZATION);
        }
        self.inner.authenticate(ex, &token, false)
    }

    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        consumers::leave(ex)
    }
}

#[cfg(test)]
mod key_file_tests {
    /// A JWK of RFC 7517's examples (its public part).
    const RSA_JWK: &str = r#"{"kty":"RSA","kid":"2011-04-29","n":"0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw","e":"AQAB","alg":"RS256"}"#;

    #[test]
    fn a_key_file_holds_a_set_or_one_key() {
        let one = super::parse_jwks(RSA_JWK).unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].kid.as_deref(), Some("2011-04-29"));
        let set = super::parse_jwks(&format!(r#"{{"keys":[{RSA_JWK},{RSA_JWK}]}}"#)).unwrap();
        assert_eq!(set.len(), 2);
        assert!(super::parse_jwks(r#"{"nope":1}"#).is_err());
    }

    #[test]
    fn membranes_jwk_items_name_a_key_file() {
        use turnpike_core::PolicyFactory;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("jwk.json"), RSA_JWK).unwrap();
        let ctx = turnpike_core::CompileContext {
            base_dir: dir.path(),
            ..crate::testutil::plain()
        };
        let compile = |v: serde_json::Value| {
            super::JwtAuth::compile(serde_json::from_value(v).unwrap(), &ctx)
        };
        let ok = compile(serde_json::json!({
            "expectedAud": "order",
            "jwks": { "jwks": [ { "jwk": { "location": "jwk.json" } } ] }
        }));
        assert!(ok.is_ok(), "{:?}", ok.err().map(|e| e.message));
        let both = compile(serde_json::json!({
            "jwks": { "jwks": [ { "jwk": { "location": "jwk.json" }, "location": "jwk.json" } ] }
        }));
        match both {
            Err(e) => assert!(e.message.contains("one of"), "{e:?}"),
            Ok(_) => panic!("`jwk` and `location` together compiled"),
        }
    }
}
