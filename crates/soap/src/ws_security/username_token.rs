//! `wsse:UsernameToken` (WS-Security UsernameToken Profile 1.0): added with the password as
//! text or as a digest with a nonce and a creation time, and checked against configured users,
//! with the profile's defences against replay: a `wsu:Created` far from now is refused, and a
//! nonce is accepted once while its creation time is within the freshness window.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use base64::Engine;
use libxml::tree::{Document, Node};
use sha1::{Digest, Sha1};

use super::dom::{self, WSSE_NS, WSU_NS};
use super::fault::{Fault, WsseCode};
use super::time;

/// The `Type` of a password sent as text.
pub const PASSWORD_TEXT: &str = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0#PasswordText";
/// The `Type` of a password sent as a digest.
pub const PASSWORD_DIGEST: &str = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0#PasswordDigest";
/// The `EncodingType` of a Base64 nonce.
const BASE64_BINARY: &str = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-soap-message-security-1.0#Base64Binary";

/// The most nonces remembered at once; past that (after dropping expired ones) a token with a
/// nonce is refused rather than forgotten.
const MAX_NONCES: usize = 100_000;

/// The password digest of the UsernameToken profile: `Base64(SHA-1(nonce + created +
/// password))`, `nonce` as raw bytes, `created` as written in the token.
pub fn digest(nonce: &[u8], created: &str, password: &str) -> String {
    let mut h = Sha1::new();
    h.update(nonce);
    h.update(created.as_bytes());
    h.update(password.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(h.finalize())
}

/// Appends a `wsse:UsernameToken` to `security`: the password as text, or (`digest`) as the
/// profile's digest with a fresh 16-byte nonce and `now` as `wsu:Created`. Runs per message;
/// returns the element.
pub fn add(
    doc: &Document,
    security: &mut Node,
    username: &str,
    password: &str,
    use_digest: bool,
    now: SystemTime,
) -> Result<Node, Fault> {
    let wsse = dom::namespace_for(security, WSSE_NS, "wsse")?;
    let mut token =
        Node::new("UsernameToken", Some(wsse.clone()), doc).map_err(|_| dom::internal())?;
    security
        .add_child(&mut token)
        .map_err(|_| dom::internal())?;
    let wsu = dom::namespace_for(&mut token, WSU_NS, "wsu")?;
    token
        .set_attribute_ns("Id", &dom::new_id("UT")?, &wsu)
        .map_err(|_| dom::internal())?;
    dom::add_text(&mut token, &wsse, "Username", username)?;
    if use_digest {
        let nonce: [u8; 16] = dom::random()?;
        let created = time::format(now);
        let mut p = dom::add_text(
            &mut token,
            &wsse,
            "Password",
            &digest(&nonce, &created, password),
        )?;
        p.set_attribute("Type", PASSWORD_DIGEST)
            .map_err(|_| dom::internal())?;
        let mut n = dom::add_text(
            &mut token,
            &wsse,
            "Nonce",
            &base64::engine::general_purpose::STANDARD.encode(nonce),
        )?;
        n.set_attribute("EncodingType", BASE64_BINARY)
            .map_err(|_| dom::internal())?;
        dom::add_text(&mut token, &wsu, "Created", &created)?;
    } else {
        let mut p = dom::add_text(&mut token, &wsse, "Password", password)?;
        p.set_attribute("Type", PASSWORD_TEXT)
            .map_err(|_| dom::internal())?;
    }
    Ok(token)
}

/// Checks tokens against configured users, remembering the nonces it accepted.
#[derive(Debug)]
pub struct Validator {
    users: HashMap<String, String>,
    window: Duration,
    nonces: Mutex<Nonces>,
}

#[derive(Debug, Default)]
struct Nonces {
    /// `user|nonce` and until when it is remembered.
    seen: HashMap<String, SystemTime>,
    last_purge: Option<SystemTime>,
}

impl Nonces {
    fn purge(&mut self, now: SystemTime) {
        self.seen.retain(|_, until| *until >= now);
        self.last_purge = Some(now);
    }
}

/// Compares two strings in constant time for strings of equal length.
fn ct_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Validator {
    /// A validator for `users` (name → plain password) with the freshness window `window`.
    /// Built once per load.
    pub fn new(users: HashMap<String, String>, window: Duration) -> Validator {
        Validator {
            users,
            window,
            nonces: Mutex::new(Nonces::default()),
        }
    }

    /// Checks the one `wsse:UsernameToken` of `security` at `now`. Runs per message; returns
    /// the authenticated user name. A missing, ambiguous or malformed token is
    /// `wsse:InvalidSecurityToken`, an unknown password type `wsse:UnsupportedSecurityToken`,
    /// a wrong password, a `wsu:Created` outside the window or a replayed nonce
    /// `wsse:FailedAuthentication`.
    pub fn check(&self, security: &Node, now: SystemTime) -> Result<String, Fault> {
        let mut tokens = dom::children(security, WSSE_NS, "UsernameToken");
        let token = match tokens.len() {
            0 => {
                return Err(Fault::new(
                    WsseCode::InvalidSecurityToken,
                    "wsse:Security carries no wsse:UsernameToken",
                ))
            }
            1 => tokens.pop().ok_or_else(dom::internal)?,
            _ => {
                return Err(Fault::new(
                    WsseCode::InvalidSecurityToken,
                    "more than one wsse:UsernameToken",
                ))
            }
        };
        let username = dom::child(&token, WSSE_NS, "Username")
            .map(|n| dom::text(&n))
            .unwrap_or_default();
        let password = dom::child(&token, WSSE_NS, "Password").ok_or_else(|| {
            Fault::new(
                WsseCode::InvalidSecurityToken,
                "wsse:UsernameToken has no wsse:Password",
            )
        })?;
        let nonce = dom::child(&token, WSSE_NS, "Nonce").map(|n| dom::text(&n));
        let created_text = dom::child(&token, WSU_NS, "Created").map(|n| n.get_content());
        let created = match &created_text {
            Some(c) => Some(time::parse(c).ok_or_else(|| {
                Fault::new(
                    WsseCode::InvalidSecurityToken,
                    "wsu:Created is not an xs:dateTime",
                )
            })?),
            None => None,
        };
        let kind = password.get_attribute_no_ns("Type").unwrap_or_default();
        let sent = password.get_content();
        let expected = self.users.get(&username);
        let ok = if kind.is_empty() || kind == PASSWORD_TEXT {
            // Same work for an unknown user as for a known one.
            let reference = expected.map_or("\u{0}unknown", String::as_str);
            ct_eq(reference, &sent) && expected.is_some()
        } else if kind == PASSWORD_DIGEST {
            let (Some(nonce), Some(created_text)) = (&nonce, &created_text) else {
                return Err(Fault::new(
                    WsseCode::InvalidSecurityToken,
                    "a PasswordDigest needs wsse:Nonce and wsu:Created",
                ));
            };
            let raw = base64::engine::general_purpose::STANDARD
                .decode(nonce)
                .map_err(|_| {
                    Fault::new(WsseCode::InvalidSecurityToken, "wsse:Nonce is not Base64")
                })?;
            let reference = expected.map_or("\u{0}unknown", String::as_str);
            ct_eq(&digest(&raw, created_text, reference), sent.trim()) && expected.is_some()
        } else {
            return Err(Fault::new(
                WsseCode::UnsupportedSecurityToken,
                format!("unsupported wsse:Password Type `{kind}`"),
            ));
        };
        if !ok {
            return Err(Fault::new(
                WsseCode::FailedAuthentication,
                "unknown user name or wrong password",
            ));
        }
        if let Some(c) = created {
            if c + self.window < now || c > now + self.window {
                return Err(Fault::new(
                    WsseCode::FailedAuthentication,
                    format!(
                        "wsu:Created ({}) is outside the freshness window",
                        time::format(c)
                    ),
                ));
            }
            if let Some(n) = &nonce {
                self.remember(&username, n, c + self.window, now)?;
            }
        }
        Ok(username)
    }

    /// Records the nonce `nonce` of `user` until `until`; seen before is a replay.
    fn remember(
        &self,
        user: &str,
        nonce: &str,
        until: SystemTime,
        now: SystemTime,
    ) -> Result<(), Fault> {
        let mut n = self
            .nonces
            .lock()
            .map_err(|_| Fault::internal("the nonce cache is unusable"))?;
        let due = n
            .last_purge
            .is_none_or(|p| now.duration_since(p).unwrap_or_default() >= Duration::from_secs(1));
        if due {
            n.purge(now);
        }
        if n.seen.len() >= MAX_NONCES {
            n.purge(now);
            if n.seen.len() >= MAX_NONCES {
                return Err(Fault::new(
                    WsseCode::FailedAuthentication,
                    "too many recent nonces; the message is refused",
                ));
            }
        }
        let key = format!("{user}|{nonce}");
        if n.seen.get(&key).is_some_and(|u| *u >= now) {
            return Err(Fault::new(
                WsseCode::FailedAuthentication,
                "the nonce was used before (a replay)",
            ));
        }
        n.seen.insert(key, until);
        Ok(())
    }
}
