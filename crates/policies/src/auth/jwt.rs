//! `jwtAuth`: bearer JWTs verified against JSON Web Key Sets from files or URLs.
//!
//! URL key sets are fetched at load and then refreshed by a background thread (and early, at most
//! every 30 s, when a token names an unknown `kid`), never on the request path. Only the listed
//! algorithms are accepted, each only with a key of its family (so an HS256 token "signed" with
//! an RSA public key fails); `none` is never accepted. Verified claims go into the exchange's
//! [`Identity`] for later policies and templates (`${jwt.sub}`).

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use http::HeaderValue;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use turnpike_config::fetch::{http_get_text, Wanted};
use turnpike_core::exchange::Identity;
use turnpike_core::{Exchange, Outcome, Policy};

use super::{admit, authorization, unauthorized, Allow};
use crate::consumers::{self, Consumers};
use crate::err;

use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::{CompileContext, CompileError, PolicyFactory};

use super::AllowList;

/// `jwtAuth`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JwtAuthSettings {
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
    pub leeway: Option<turnpike_config::units::Duration>,
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
    pub refresh: Option<turnpike_config::units::Duration>,
}

struct Key {
    kid: Option<String>,
    key: DecodingKey,
}

type KeySlot = Arc<ArcSwap<Vec<Key>>>;

/// A background fetcher: dropping the sender stops its thread.
struct Refresher {
    wake: Mutex<mpsc::Sender<()>>,
    last_wake: Mutex<Option<Instant>>,
}

/// The compiled policy.
pub struct JwtAuth {
    slots: Vec<KeySlot>,
    refreshers: Vec<Refresher>,
    validations: HashMap<Algorithm, Validation>,
    consumers: Arc<Consumers>,
    allow: Option<Allow>,
    required_scopes: Vec<String>,
    challenge: HeaderValue,
    invalid_challenge: HeaderValue,
    key_files: Vec<std::path::PathBuf>,
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

fn parse_jwks(text: &str) -> Result<Vec<Key>, String> {
    let set: JwkSet =
        serde_json::from_str(text).map_err(|e| format!("not a JSON Web Key Set: {e}"))?;
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

fn spawn_refresher(url: String, slot: &KeySlot, every: Duration) -> Result<Refresher, String> {
    let (tx, rx) = mpsc::channel::<()>();
    let weak = Arc::downgrade(slot);
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
        })
        .map_err(|e| format!("cannot start the JWKS refresh thread: {e}"))?;
    Ok(Refresher {
        wake: Mutex::new(tx),
        last_wake: Mutex::new(None),
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
        if c.jwks.is_empty() {
            return Err(err("jwks", "at least one key set is needed"));
        }
        let mut slots = Vec::new();
        let mut refreshers = Vec::new();
        let mut key_files = Vec::new();
        for (i, src) in c.jwks.iter().enumerate() {
            let at = format!("jwks[{i}]");
            match (&src.location, &src.url) {
                (Some(loc), None) => {
                    if src.refresh.is_some() {
                        return Err(err(
                            &format!("{at}.refresh"),
                            "only URL key sets are refreshed",
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
                    refreshers
                        .push(spawn_refresher(url.clone(), &slot, every).map_err(|m| err(&at, m))?);
                    slots.push(slot);
                }
                _ => return Err(err(&at, "give exactly one of `location` and `url`")),
            }
        }
        let allow = match &c.allow {
            Some(a) => Allow::compile(a, &consumers).map_err(|m| err("allow", m))?,
            None => None,
        };
        Ok(JwtAuth {
            slots,
            refreshers,
            validations,
            consumers: consumers.clone(),
            allow,
            required_scopes: c.required_scopes.clone(),
            challenge: HeaderValue::from_static("Bearer"),
            invalid_challenge: HeaderValue::from_static("Bearer error=\"invalid_token\""),
            key_files,
        })
    }
}

impl JwtAuth {
    fn ask_for_refresh(&self) {
        for r in &self.refreshers {
            let Ok(mut last) = r.last_wake.lock() else {
                continue;
            };
            if last.is_some_and(|t| t.elapsed() < Duration::from_secs(30)) {
                continue;
            }
            *last = Some(Instant::now());
            if let Ok(tx) = r.wake.lock() {
                let _ = tx.send(());
            }
        }
    }

    fn verify(&self, token: &str) -> Result<serde_json::Map<String, serde_json::Value>, String> {
        let head =
            jsonwebtoken::decode_header(token).map_err(|e| format!("malformed token: {e}"))?;
        let validation = self
            .validations
            .get(&head.alg)
            .ok_or_else(|| format!("algorithm {:?} is not accepted", head.alg))?;
        let mut tried = false;
        let mut last_err = String::from("no key matches the token");
        for slot in &self.slots {
            let keys = slot.load();
            for k in keys.iter() {
                if head.kid.is_some() && k.kid.is_some() && head.kid != k.kid {
                    continue;
                }
                if k.key.family() != head.alg.family() {
                    continue;
                }
                tried = true;
                match jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(
                    token, &k.key, validation,
                ) {
                    Ok(data) => return Ok(data.claims),
                    Err(e) => last_err = format!("token rejected: {e}"),
                }
            }
        }
        if !tried && head.kid.is_some() {
            self.ask_for_refresh();
        }
        Err(last_err)
    }
}

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
        self.consumers.response_needs_request()
    }

    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let token = authorization(ex, b"bearer")
            .and_then(|t| std::str::from_utf8(t).ok())
            .filter(|t| t.is_ascii());
        let Some(token) = token else {
            return unauthorized("a bearer token is required", Some(&self.challenge));
        };
        let claims = match self.verify(token) {
            Ok(c) => c,
            Err(m) => return unauthorized(&m, Some(&self.invalid_challenge)),
        };
        let subject = claims
            .get("sub")
            .and_then(|v| v.as_str())
            .map(str::to_owned);
        let consumer = subject
            .as_deref()
            .and_then(|s| self.consumers.by_subject(s))
            .cloned();
        let identity = Identity {
            scopes: scopes(&claims),
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

    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        consumers::leave(ex)
    }
}
