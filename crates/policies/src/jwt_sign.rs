//! `jwtSign`: Membrane's policy that turns the JSON object in the message's body into a signed
//! JWT (RS256, with the RSA private key of a JSON Web Key file). The claims get `iat` (now),
//! `exp` (`iat` + `expirySeconds`) and `nbf` (`iat` − `clockSkewSeconds`). The token replaces
//! the body (`Content-Type: application/jwt`), or, with `property`, is stored in that exchange
//! property and the body is left as it is. A body that is not a JSON object is refused with
//! `bad-json` (400; 502 for a backend's response).

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::StatusCode;
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::{problems, Body, BodyNeed, CompileContext, CompileError, Exchange, Outcome};
use turnpike_core::{Policy, PolicyFactory, Problem};

use crate::err;
use crate::oauth2::keys::SigningKey;
use crate::oauth2::settings::JwkLocation;

/// `jwtSign`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JwtSignSettings {
    /// The RSA private key as a JSON Web Key file (a key, or a set whose first private key is
    /// taken).
    pub jwk: JwkLocation,
    /// Seconds until the token expires (default 300).
    #[serde(default = "default_expiry")]
    pub expiry_seconds: u64,
    /// Seconds `nbf` lies before `iat`, for clocks that run behind (default 120).
    #[serde(default = "default_skew")]
    pub clock_skew_seconds: u64,
    /// Store the token in this exchange property instead of the body.
    #[serde(default)]
    pub property: Option<String>,
}

fn default_expiry() -> u64 {
    300
}

fn default_skew() -> u64 {
    120
}

/// The compiled `jwtSign` policy.
#[derive(Debug)]
pub struct JwtSign {
    key: SigningKey,
    file: std::path::PathBuf,
    expiry: u64,
    skew: u64,
    property: Option<String>,
}

impl PolicyFactory for JwtSign {
    const NAME: &'static str = "jwtSign";
    type Settings = JwtSignSettings;

    fn compile(c: JwtSignSettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        let file = ctx.base_dir.join(&c.jwk.location);
        let text = std::fs::read_to_string(&file).map_err(|e| {
            err(
                "jwk.location",
                format!("cannot read {}: {e}", file.display()),
            )
        })?;
        let key = SigningKey::from_jwk_text(&text).map_err(|m| err("jwk.location", m))?;
        if c.property.as_deref().is_some_and(str::is_empty) {
            return Err(err("property", "a property name cannot be empty"));
        }
        Ok(JwtSign {
            key,
            file,
            expiry: c.expiry_seconds,
            skew: c.clock_skew_seconds,
            property: c.property,
        })
    }
}

impl JwtSign {
    /// The token for `body`, or why there is none (for the client, and for the log).
    fn token(&self, body: &[u8]) -> Result<String, (&'static str, String)> {
        let mut claims: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(body)
            .map_err(|e| {
            (
                "the body is not a JSON object (the claims of the token)",
                e.to_string(),
            )
        })?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        claims.insert("iat".into(), now.into());
        claims.insert("exp".into(), now.saturating_add(self.expiry).into());
        claims.insert("nbf".into(), now.saturating_sub(self.skew).into());
        self.key
            .sign(&claims)
            .map_err(|e| ("the token could not be signed", e))
    }

    fn run(&self, ex: &mut Exchange, response: bool) -> Outcome {
        let body = if response {
            ex.response_bytes()
        } else {
            ex.request_bytes()
        };
        let token = match self.token(body.map_or(&[][..], |b| b.as_ref())) {
            Ok(t) => t,
            Err((detail, why)) => {
                let request_id = ex.request_id.to_str().unwrap_or("");
                tracing::info!(
                    policy = "jwtSign",
                    request_id,
                    "cannot sign the body: {why}"
                );
                let status = if response {
                    StatusCode::BAD_GATEWAY
                } else {
                    StatusCode::BAD_REQUEST
                };
                return Outcome::Reject(
                    Problem::new(&problems::BAD_JSON)
                        .with_detail(detail)
                        .with_status(status),
                );
            }
        };
        if let Some(p) = &self.property {
            turnpike_core::properties::set_property(ex, p, token.into());
            return Outcome::Continue;
        }
        let jwt = http::HeaderValue::from_static("application/jwt");
        if response {
            turnpike_core::json::forget_response_json(ex);
            if let Some(res) = ex.response.as_mut() {
                *res.body_mut() = Body::full(Bytes::from(token));
                let h = res.headers_mut();
                h.remove(http::header::CONTENT_LENGTH);
                h.insert(http::header::CONTENT_TYPE, jwt);
            }
        } else {
            ex.request_body = Body::full(Bytes::from(token));
            turnpike_core::json::forget_request_json(ex);
            ex.extensions.remove::<turnpike_core::BodyInspected>();
            ex.request.headers.remove(http::header::CONTENT_LENGTH);
            ex.request.headers.insert(http::header::CONTENT_TYPE, jwt);
        }
        Outcome::Continue
    }
}

impl Policy for JwtSign {
    fn name(&self) -> &'static str {
        "jwtSign"
    }

    fn body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    fn response_body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    fn files(&self) -> Vec<std::path::PathBuf> {
        vec![self.file.clone()]
    }

    /// Signs the request's body.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        self.run(ex, false)
    }

    /// Signs the response's body.
    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        self.run(ex, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{exchange, plain};
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;
    use rsa::traits::{PrivateKeyParts, PublicKeyParts};

    /// A JWK file with a new RSA key, and its public key for checking.
    fn key_file(dir: &std::path::Path) -> jsonwebtoken::DecodingKey {
        use aws_lc_rs::encoding::AsDer;
        use rsa::pkcs8::DecodePrivateKey;
        let pair = aws_lc_rs::rsa::KeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).unwrap();
        let k = rsa::RsaPrivateKey::from_pkcs8_der(pair.as_der().unwrap().as_ref()).unwrap();
        let b = |v: &rsa::BigUint| URL_SAFE_NO_PAD.encode(v.to_bytes_be());
        let jwk = serde_json::json!({
            "kty": "RSA", "kid": "k1", "n": b(k.n()), "e": b(k.e()), "d": b(k.d()),
            "p": b(&k.primes()[0]), "q": b(&k.primes()[1])
        });
        std::fs::write(dir.join("jwk.json"), jwk.to_string()).unwrap();
        jsonwebtoken::DecodingKey::from_rsa_components(&b(k.n()), &b(k.e())).unwrap()
    }

    fn compile(dir: &std::path::Path, yaml: serde_json::Value) -> Result<JwtSign, CompileError> {
        let ctx = turnpike_core::CompileContext {
            base_dir: dir,
            ..plain()
        };
        JwtSign::compile(serde_json::from_value(yaml).unwrap(), &ctx)
    }

    fn claims(token: &str, key: &jsonwebtoken::DecodingKey) -> serde_json::Value {
        let mut v = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
        v.set_audience(&["shop"]);
        let head = jsonwebtoken::decode_header(token).unwrap();
        assert_eq!(head.kid.as_deref(), Some("k1"));
        jsonwebtoken::decode::<serde_json::Value>(token, key, &v)
            .unwrap()
            .claims
    }

    #[test]
    fn signs_the_body_or_stores_the_token_in_a_property() {
        let dir = tempfile::tempdir().unwrap();
        let public = key_file(dir.path());
        let p = compile(
            dir.path(),
            serde_json::json!({ "jwk": { "location": "jwk.json" } }),
        )
        .unwrap();
        let mut ex = exchange("POST", "/", &[], r#"{"sub":"alice","aud":"shop"}"#);
        assert!(matches!(p.on_request(&mut ex), Outcome::Continue));
        assert_eq!(ex.request.headers["content-type"], "application/jwt");
        let token = String::from_utf8(ex.request_bytes().unwrap().to_vec()).unwrap();
        let c = claims(&token, &public);
        assert_eq!(c["sub"], "alice");
        let iat = c["iat"].as_u64().unwrap();
        assert_eq!(c["exp"].as_u64().unwrap(), iat + 300);
        assert_eq!(c["nbf"].as_u64().unwrap(), iat - 120);

        let p = compile(
            dir.path(),
            serde_json::json!({ "jwk": { "location": "jwk.json" }, "property": "token", "expirySeconds": 60 }),
        )
        .unwrap();
        let body = r#"{"sub":"bob","aud":"shop"}"#;
        let mut ex = exchange("POST", "/", &[], body);
        assert!(matches!(p.on_request(&mut ex), Outcome::Continue));
        assert_eq!(ex.request_bytes().unwrap().as_ref(), body.as_bytes());
        let token = turnpike_core::properties::property(&ex, "token").unwrap();
        let c = claims(token.as_str().unwrap(), &public);
        assert_eq!(c["exp"].as_u64().unwrap(), c["iat"].as_u64().unwrap() + 60);
    }

    #[test]
    fn a_body_that_is_not_an_object_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        key_file(dir.path());
        let p = compile(
            dir.path(),
            serde_json::json!({ "jwk": { "location": "jwk.json" } }),
        )
        .unwrap();
        for body in ["[1]", "not json", ""] {
            let mut ex = exchange("POST", "/", &[], body);
            match p.on_request(&mut ex) {
                Outcome::Reject(pr) => {
                    assert_eq!((pr.kind(), pr.status.as_u16()), ("bad-json", 400))
                }
                _ => panic!("{body} was signed"),
            }
        }
    }

    #[test]
    fn key_errors_are_load_errors() {
        let dir = tempfile::tempdir().unwrap();
        let e = compile(
            dir.path(),
            serde_json::json!({ "jwk": { "location": "none.json" } }),
        )
        .unwrap_err();
        assert_eq!(e.key, "jwk.location");
        std::fs::write(
            dir.path().join("pub.json"),
            r#"{"kty":"RSA","n":"AQAB","e":"AQAB"}"#,
        )
        .unwrap();
        let e = compile(
            dir.path(),
            serde_json::json!({ "jwk": { "location": "pub.json" } }),
        )
        .unwrap_err();
        assert!(e.message.contains("private"), "{e:?}");
    }
}
