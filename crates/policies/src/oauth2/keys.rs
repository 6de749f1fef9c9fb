//! The RSA keys that sign JWT tokens (RS256): read from a JSON Web Key file, or generated at load
//! with the operating system's random source. Keys are only handled through the `rsa`,
//! `aws-lc-rs` and `jsonwebtoken` crates; nothing here computes a signature itself.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rsa::pkcs1::EncodeRsaPrivateKey;
use rsa::pkcs8::DecodePrivateKey;
use rsa::traits::PublicKeyParts;
use rsa::{BigUint, RsaPrivateKey};
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// A private key that signs tokens, with its key id and public JSON Web Key.
pub(crate) struct SigningKey {
    encoding: EncodingKey,
    kid: String,
    /// The public key as a JWK (`kty`, `n`, `e`, `kid`, `use`, `alg`).
    public: serde_json::Value,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

/// The members of an RSA private JWK that matter here.
#[derive(Deserialize)]
struct PrivateJwk {
    kty: String,
    n: String,
    e: String,
    #[serde(default)]
    d: Option<String>,
    #[serde(default)]
    p: Option<String>,
    #[serde(default)]
    q: Option<String>,
    #[serde(default)]
    kid: Option<String>,
}

fn number(member: &str, b64: &str) -> Result<BigUint, String> {
    let bytes = URL_SAFE_NO_PAD
        .decode(b64.trim_end_matches('='))
        .map_err(|_| format!("the JWK's `{member}` is not base64url"))?;
    Ok(BigUint::from_bytes_be(&bytes))
}

impl SigningKey {
    /// Runs at load: a new RSA 2048 key with a random key id.
    pub(crate) fn generate() -> Result<SigningKey, String> {
        use aws_lc_rs::encoding::AsDer;
        let pair = aws_lc_rs::rsa::KeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048)
            .map_err(|_| "cannot generate an RSA key".to_owned())?;
        let der = pair
            .as_der()
            .map_err(|_| "cannot encode the generated RSA key".to_owned())?;
        let key = RsaPrivateKey::from_pkcs8_der(der.as_ref())
            .map_err(|e| format!("cannot read the generated RSA key: {e}"))?;
        let mut id = [0u8; 16];
        getrandom::fill(&mut id).map_err(|e| format!("no random source for the key id: {e}"))?;
        Self::from_rsa(&key, URL_SAFE_NO_PAD.encode(id))
    }

    /// Runs at load: the RSA private key of a JWK file (a key, or a key set whose first key
    /// with a private part is taken). Its `kid` is kept; a key without one gets its RFC 7638
    /// thumbprint, so every instance reading the file names it the same.
    pub(crate) fn from_jwk_text(text: &str) -> Result<SigningKey, String> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let value = match value.get("keys").and_then(|k| k.as_array()) {
            Some(keys) => keys
                .iter()
                .find(|k| k.get("d").is_some())
                .cloned()
                .ok_or("the key set has no private key")?,
            None => value,
        };
        let jwk: PrivateJwk =
            serde_json::from_value(value).map_err(|e| format!("not an RSA JWK: {e}"))?;
        if jwk.kty != "RSA" {
            return Err(format!(
                "the key is of type `{}`; an RSA key is needed (RS256)",
                jwk.kty
            ));
        }
        let d = jwk
            .d
            .as_deref()
            .ok_or("the JWK has no private part (`d`)")?;
        let primes = match (&jwk.p, &jwk.q) {
            (Some(p), Some(q)) => vec![number("p", p)?, number("q", q)?],
            _ => Vec::new(),
        };
        let key = RsaPrivateKey::from_components(
            number("n", &jwk.n)?,
            number("e", &jwk.e)?,
            number("d", d)?,
            primes,
        )
        .map_err(|e| format!("not a valid RSA key: {e}"))?;
        key.validate()
            .map_err(|e| format!("not a valid RSA key: {e}"))?;
        if key.size() < 256 {
            return Err("the RSA key is shorter than 2048 bits".into());
        }
        let kid = match jwk.kid {
            Some(k) if !k.is_empty() => k,
            _ => thumbprint(&jwk.n, &jwk.e),
        };
        Self::from_rsa(&key, kid)
    }

    fn from_rsa(key: &RsaPrivateKey, kid: String) -> Result<SigningKey, String> {
        let der = key
            .to_pkcs1_der()
            .map_err(|e| format!("cannot encode the RSA key: {e}"))?;
        let n = URL_SAFE_NO_PAD.encode(key.n().to_bytes_be());
        let e = URL_SAFE_NO_PAD.encode(key.e().to_bytes_be());
        Ok(SigningKey {
            encoding: EncodingKey::from_rsa_der(der.as_bytes()),
            public: serde_json::json!({
                "kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid, "n": n, "e": e
            }),
            kid,
        })
    }

    /// Runs per token: the compact JWT of `claims`, signed with RS256 and naming this key.
    pub(crate) fn sign(
        &self,
        claims: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String, String> {
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding).map_err(|e| e.to_string())
    }

    /// The public key as a JSON Web Key.
    pub(crate) fn public_jwk(&self) -> &serde_json::Value {
        &self.public
    }
}

/// RFC 7638's SHA-256 thumbprint of an RSA key.
fn thumbprint(n: &str, e: &str) -> String {
    let canonical = format!(r#"{{"e":"{e}","kty":"RSA","n":"{n}"}}"#);
    URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsa::traits::PrivateKeyParts;

    fn verify(key: &SigningKey, token: &str) -> serde_json::Value {
        let jwk: jsonwebtoken::jwk::Jwk = serde_json::from_value(key.public_jwk().clone()).unwrap();
        let decoding = jsonwebtoken::DecodingKey::from_jwk(&jwk).unwrap();
        let mut v = jsonwebtoken::Validation::new(Algorithm::RS256);
        v.required_spec_claims.clear();
        v.validate_exp = false;
        jsonwebtoken::decode::<serde_json::Value>(token, &decoding, &v)
            .unwrap()
            .claims
    }

    #[test]
    fn generated_keys_sign_tokens_their_public_key_verifies() {
        let key = SigningKey::generate().unwrap();
        let mut claims = serde_json::Map::new();
        claims.insert("sub".into(), "abc".into());
        let token = key.sign(&claims).unwrap();
        assert_eq!(verify(&key, &token)["sub"], "abc");
        let head = jsonwebtoken::decode_header(&token).unwrap();
        assert_eq!(head.kid.as_deref(), key.public_jwk()["kid"].as_str());
        assert_ne!(
            SigningKey::generate().unwrap().public_jwk()["kid"],
            key.public_jwk()["kid"]
        );
    }

    #[test]
    fn a_jwk_file_is_read_and_named_by_its_thumbprint() {
        use aws_lc_rs::encoding::AsDer;
        let pair = aws_lc_rs::rsa::KeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).unwrap();
        let der = pair.as_der().unwrap();
        let k = RsaPrivateKey::from_pkcs8_der(der.as_ref()).unwrap();
        let b = |v: &BigUint| URL_SAFE_NO_PAD.encode(v.to_bytes_be());
        let text = serde_json::json!({
            "kty": "RSA", "n": b(k.n()), "e": b(k.e()), "d": b(k.d()),
            "p": b(&k.primes()[0]), "q": b(&k.primes()[1])
        })
        .to_string();
        let a = SigningKey::from_jwk_text(&text).unwrap();
        let again = SigningKey::from_jwk_text(&format!("{{\"keys\":[{text}]}}")).unwrap();
        assert_eq!(a.public_jwk(), again.public_jwk());
        assert_eq!(
            a.public_jwk()["kid"],
            thumbprint(&b(k.n()), &b(k.e())).as_str()
        );
        let token = a.sign(&serde_json::Map::new()).unwrap();
        verify(&again, &token);
        // Without p and q the primes are recovered from n, e and d.
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v.as_object_mut().unwrap().remove("p");
        v.as_object_mut().unwrap().remove("q");
        v["kid"] = "k1".into();
        let c = SigningKey::from_jwk_text(&v.to_string()).unwrap();
        assert_eq!(c.public_jwk()["kid"], "k1");
        assert_eq!(c.public_jwk()["n"], a.public_jwk()["n"]);
        verify(&a, &c.sign(&serde_json::Map::new()).unwrap());
    }

    #[test]
    fn rfc_7638_thumbprint() {
        // The example key of RFC 7638, section 3.1.
        let n = "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw";
        assert_eq!(
            thumbprint(n, "AQAB"),
            "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"
        );
    }

    #[test]
    fn unusable_keys_are_refused() {
        for (text, expect) in [
            ("nope", "not JSON"),
            (r#"{"kty":"EC","n":"AQ","e":"AQAB"}"#, "RSA key is needed"),
            (r#"{"kty":"RSA","n":"AQ","e":"AQAB"}"#, "no private part"),
            (
                r#"{"keys":[{"kty":"RSA","n":"AQ","e":"AQAB"}]}"#,
                "no private key",
            ),
            (
                r#"{"kty":"RSA","n":"AQ","e":"AQAB","d":"AQ","p":"Aw","q":"BQ"}"#,
                "RSA key",
            ),
        ] {
            let e = SigningKey::from_jwk_text(text).unwrap_err();
            assert!(e.contains(expect), "{text}: {e}");
        }
    }
}
