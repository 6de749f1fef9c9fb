//! Password verification: plain text compared in constant time, or hashes (bcrypt,
//! SHA-256-crypt, SHA-512-crypt, Argon2 in its PHC string form, `{SHA}`) verified once and then
//! cached.
//!
//! The cache keeps, per user, a keyed SHA-256 digest of the last password that verified against
//! the hash (the key is random per process), so a correct password costs one SHA-256 instead of
//! a bcrypt run, and the cache never holds a password or anything usable without the key.

use std::sync::Mutex;

use base64::Engine;
use sha2::{Digest, Sha256};

use super::ct_eq;

/// How one user's password is checked.
#[derive(Debug)]
pub enum PasswordCheck {
    /// A plain-text password (its SHA-256, compared in constant time).
    Plain([u8; 32]),
    /// A crypt or Argon2 hash, with the digest of the last password that verified.
    Hashed {
        /// The hash as configured.
        hash: String,
        /// `$argon2…$` (PHC string) rather than a crypt hash.
        argon2: bool,
        /// Keyed digest of the last verified password.
        verified: Mutex<Option<[u8; 32]>>,
    },
    /// `{SHA}` + base64(SHA-1), as in Apache htpasswd.
    Sha1([u8; 20]),
}

fn cache_key() -> &'static [u8; 32] {
    static KEY: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
    KEY.get_or_init(|| {
        let mut k = [0u8; 32];
        if getrandom::fill(&mut k).is_err() {
            // No OS randomness: fall back to a per-process value the attacker cannot read.
            let seed = format!("{:?}{:?}", std::time::SystemTime::now(), std::process::id());
            k.copy_from_slice(&Sha256::digest(seed.as_bytes()));
        }
        k
    })
}

fn keyed(password: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(cache_key());
    h.update(password);
    h.finalize().into()
}

impl PasswordCheck {
    /// Classifies a configured password; an unsupported hash format is an error.
    pub fn new(configured: &str) -> Result<Self, String> {
        if let Some(b64) = configured.strip_prefix("{SHA}") {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|_| "`{SHA}` password is not valid base64".to_string())?;
            let arr: [u8; 20] = raw
                .try_into()
                .map_err(|_| "`{SHA}` password is not a SHA-1 digest".to_string())?;
            return Ok(PasswordCheck::Sha1(arr));
        }
        if configured.starts_with('$') {
            let argon2 = ["$argon2id$", "$argon2i$", "$argon2d$"]
                .iter()
                .any(|p| configured.starts_with(p));
            if argon2 {
                let parsed = argon2::PasswordHash::new(configured)
                    .map_err(|e| format!("the Argon2 password hash is malformed: {e}"))?;
                if parsed.salt.is_none() || parsed.hash.is_none() {
                    return Err("the Argon2 password hash has no salt or no hash".into());
                }
            }
            let supported = ["$2a$", "$2b$", "$2y$", "$5$", "$6$"];
            if !argon2 && !supported.iter().any(|p| configured.starts_with(p)) {
                return Err(format!(
                    "unsupported password hash `{}…` (use bcrypt $2y$, SHA-crypt $5$/$6$, Argon2 $argon2id$, or plain text)",
                    configured.get(..4).unwrap_or(configured)
                ));
            }
            return Ok(PasswordCheck::Hashed {
                hash: configured.to_owned(),
                argon2,
                verified: Mutex::new(None),
            });
        }
        Ok(PasswordCheck::Plain(
            Sha256::digest(configured.as_bytes()).into(),
        ))
    }

    /// True when `given` is the password.
    pub fn verify(&self, given: &str) -> bool {
        match self {
            PasswordCheck::Plain(expected) => {
                let d: [u8; 32] = Sha256::digest(given.as_bytes()).into();
                ct_eq(&d, expected)
            }
            PasswordCheck::Sha1(expected) => {
                let d: [u8; 20] = sha1::Sha1::digest(given.as_bytes()).into();
                ct_eq(&d, expected)
            }
            PasswordCheck::Hashed {
                hash,
                argon2,
                verified,
            } => {
                let digest = keyed(given.as_bytes());
                if let Ok(cached) = verified.lock() {
                    if cached.is_some_and(|c| ct_eq(&c, &digest)) {
                        return true;
                    }
                }
                let ok = if *argon2 {
                    verify_argon2(given, hash)
                } else {
                    pwhash::unix::verify(given, hash)
                };
                if ok {
                    if let Ok(mut cached) = verified.lock() {
                        *cached = Some(digest);
                    }
                }
                ok
            }
        }
    }
}

/// Verifies `given` against an Argon2 PHC string (`$argon2id$v=19$m=…,t=…,p=…$salt$hash`), with
/// the variant, version and cost the string names.
fn verify_argon2(given: &str, hash: &str) -> bool {
    use argon2::PasswordVerifier;
    argon2::PasswordHash::new(hash).is_ok_and(|parsed| {
        argon2::Argon2::default()
            .verify_password(given.as_bytes(), &parsed)
            .is_ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_hashes() {
        assert!(PasswordCheck::new("secret").unwrap().verify("secret"));
        assert!(!PasswordCheck::new("secret").unwrap().verify("secreT"));
        let bcrypt = pwhash::bcrypt::hash("s3cret").unwrap();
        let check = PasswordCheck::new(&bcrypt).unwrap();
        assert!(check.verify("s3cret"));
        assert!(check.verify("s3cret"), "second check comes from the cache");
        assert!(!check.verify("wrong"));
        let sha512 = pwhash::sha512_crypt::hash("pw").unwrap();
        assert!(PasswordCheck::new(&sha512).unwrap().verify("pw"));
        #[allow(deprecated)]
        let sha256 = pwhash::sha256_crypt::hash("pw").unwrap();
        assert!(PasswordCheck::new(&sha256).unwrap().verify("pw"));
        // htpasswd -s: {SHA}base64(sha1("password"))
        let sha1 = PasswordCheck::new("{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=").unwrap();
        assert!(sha1.verify("password"));
        assert!(!sha1.verify("Password"));
        assert!(PasswordCheck::new("$1$abc$def").is_err());
        // Membrane's tutorial hash of "abc123" (Argon2id, v19, 64 MiB, 3 rounds).
        let argon = PasswordCheck::new("$argon2id$v=19$m=65536,t=3,p=1$gJkRz2WT5QcamKhhhKTH0Q$RuP5LUCTiEiO4W4dwrJqgpd+Phrk77n1QcdjIcB2zas").unwrap();
        assert!(argon.verify("abc123"));
        assert!(argon.verify("abc123"), "second check comes from the cache");
        assert!(!argon.verify("abc124"));
        assert!(PasswordCheck::new("$argon2id$v=19$broken").is_err());
    }
}
