//! `paddingHeader`: Membrane's BREACH mitigation (CVE-2013-3587). In the phase it runs in, it
//! sets an `X-Padding` header of random length and random characters on the message, so that
//! the length of a compressed response no longer tells an attacker whether a guess matched.
//!
//! The length is `roundUp - (size % roundUp) + constant + r`, where `size` is the estimated
//! size of the message (start line, headers and body when its length is known) and `r` is drawn
//! uniformly from `0..random`; it is never below `constant + 1`. Lengths and characters come
//! from the operating system's cryptographic random source. The policy never rejects.

use http::header::{HeaderName, HeaderValue, CONTENT_LENGTH};
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::{Body, CompileContext, CompileError, Exchange, Outcome, Policy, PolicyFactory};

use crate::err;

/// The characters of the padding (Membrane's table: letters, digits, space and punctuation).
const CHARS: &[u8] =
    b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _:;.,\\/'?!(){}[]@<>=-+*#$&`|~^%";

/// The longest padding the settings may ask for (`roundUp + constant + random`).
const MAX_PADDING: u32 = 16 * 1024;

/// The header the padding goes into.
static X_PADDING: HeaderName = HeaderName::from_static("x-padding");

/// `paddingHeader`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PaddingHeaderSettings {
    /// The padding fills the message's size up to the next multiple of this (at least 1).
    #[serde(default = "default_round_up")]
    pub round_up: u32,
    /// Characters always added.
    #[serde(default = "default_constant")]
    pub constant: u32,
    /// Up to `random - 1` more characters, drawn at random (at least 1).
    #[serde(default = "default_random")]
    pub random: u32,
}

fn default_round_up() -> u32 {
    20
}

fn default_constant() -> u32 {
    5
}

fn default_random() -> u32 {
    10
}

/// The compiled `paddingHeader` policy.
#[derive(Debug)]
pub struct PaddingHeader {
    round_up: u64,
    constant: u64,
    random: u64,
}

impl PolicyFactory for PaddingHeader {
    const NAME: &'static str = "paddingHeader";
    type Settings = PaddingHeaderSettings;

    /// Checks the numbers; returns the policy, or an error naming the setting.
    fn compile(s: PaddingHeaderSettings, _: &CompileContext<'_>) -> Result<Self, CompileError> {
        if s.round_up == 0 {
            return Err(err("roundUp", "must be at least 1"));
        }
        if s.random == 0 {
            return Err(err(
                "random",
                "must be at least 1 (the random part is drawn from 0 to `random - 1`)",
            ));
        }
        let total = u64::from(s.round_up) + u64::from(s.constant) + u64::from(s.random);
        if total > u64::from(MAX_PADDING) {
            return Err(err(
                "",
                format!("`roundUp + constant + random` must be at most {MAX_PADDING}"),
            ));
        }
        Ok(PaddingHeader {
            round_up: s.round_up.into(),
            constant: s.constant.into(),
            random: s.random.into(),
        })
    }
}

/// Random bytes from the operating system, read in blocks.
struct SecureBytes {
    buf: [u8; 256],
    at: usize,
}

impl SecureBytes {
    fn new() -> Option<SecureBytes> {
        let mut s = SecureBytes {
            buf: [0; 256],
            at: 0,
        };
        getrandom::fill(&mut s.buf).ok()?;
        Some(s)
    }

    fn byte(&mut self) -> Option<u8> {
        if self.at == self.buf.len() {
            getrandom::fill(&mut self.buf).ok()?;
            self.at = 0;
        }
        let b = self.buf[self.at];
        self.at += 1;
        Some(b)
    }

    /// A uniform number in `0..n` (rejection sampling, no modulo bias).
    fn below(&mut self, n: u64) -> Option<u64> {
        if n <= 1 {
            return Some(0);
        }
        let zone = u64::MAX - (u64::MAX % n);
        loop {
            let mut v = 0u64;
            for _ in 0..8 {
                v = (v << 8) | u64::from(self.byte()?);
            }
            if v < zone {
                return Some(v % n);
            }
        }
    }

    /// A uniform character of [`CHARS`].
    fn char(&mut self) -> Option<u8> {
        let n = CHARS.len();
        // The largest multiple of the table's length that fits a byte.
        let zone = 256 - 256 % n;
        loop {
            let b = usize::from(self.byte()?);
            if b < zone {
                return CHARS.get(b % n).copied();
            }
        }
    }
}

impl PaddingHeader {
    /// The padding's length for a message of `size` bytes, given the random part `r`.
    fn length(&self, size: u64, r: u64) -> u64 {
        self.round_up - (size % self.round_up) + self.constant + r
    }

    /// A padding for a message of `size` bytes; `None` when the random source fails.
    fn padding(&self, size: u64) -> Option<HeaderValue> {
        let mut rng = SecureBytes::new()?;
        let r = rng.below(self.random)?;
        let n = self.length(size, r);
        let mut out = Vec::with_capacity(usize::try_from(n).ok()?);
        for _ in 0..n {
            out.push(rng.char()?);
        }
        HeaderValue::from_bytes(&out).ok()
    }
}

/// The estimated size of a message: its start line, its headers as written on the wire, and its
/// body when its length is known (held in memory, or announced by `Content-Length`).
fn size(start_line: u64, headers: &http::HeaderMap, body: &Body) -> u64 {
    let head: u64 = headers
        .iter()
        .map(|(k, v)| (k.as_str().len() + v.len() + 4) as u64)
        .sum();
    let body = match body {
        Body::Full(Some(b)) => b.len() as u64,
        Body::Empty | Body::Full(None) => 0,
        _ => headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    };
    start_line + head + 2 + body
}

fn failed() {
    tracing::error!("paddingHeader: the random source failed; the message goes without padding");
}

impl Policy for PaddingHeader {
    fn name(&self) -> &'static str {
        "paddingHeader"
    }

    fn response_needs_request(&self) -> bool {
        false
    }

    /// Sets `X-Padding` on the request; always continues.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let r = &ex.request;
        let line = (r.method.as_str().len() + r.uri.to_string().len() + 11) as u64;
        match self.padding(size(line, &r.headers, &ex.request_body)) {
            Some(v) => {
                ex.request.headers.insert(X_PADDING.clone(), v);
            }
            None => failed(),
        }
        Outcome::Continue
    }

    /// Sets `X-Padding` on the response; always continues.
    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        let Some(res) = ex.response.as_mut() else {
            return Outcome::Continue;
        };
        let line = (15 + res.status().canonical_reason().map_or(0, str::len)) as u64;
        match self.padding(size(line, res.headers(), res.body())) {
            Some(v) => {
                res.headers_mut().insert(X_PADDING.clone(), v);
            }
            None => failed(),
        }
        Outcome::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{exchange, plain};

    fn policy(round_up: u32, constant: u32, random: u32) -> PaddingHeader {
        PaddingHeader::compile(
            PaddingHeaderSettings {
                round_up,
                constant,
                random,
            },
            &plain(),
        )
        .unwrap()
    }

    #[test]
    fn the_length_rounds_up_and_adds_the_constant_and_random_part() {
        let p = policy(20, 5, 10);
        assert_eq!(p.length(0, 0), 25, "a multiple gets a full roundUp");
        assert_eq!(p.length(40, 0), 25);
        assert_eq!(p.length(39, 0), 6);
        assert_eq!(p.length(21, 9), 19 + 5 + 9);
        for size in [0u64, 1, 19, 20, 21, 1234] {
            for _ in 0..50 {
                let n = p.padding(size).unwrap().len() as u64;
                let base = p.length(size, 0);
                assert!((base..base + 10).contains(&n), "{size}: {n}");
                assert!(n > 5, "never below constant + 1");
            }
        }
        // random: 1 draws nothing.
        let p = policy(1, 0, 1);
        assert_eq!(p.padding(7).unwrap().len(), 1);
    }

    #[test]
    fn the_random_part_covers_its_range() {
        let p = policy(1, 0, 4);
        let mut seen = [false; 4];
        for _ in 0..400 {
            let n = p.padding(5).unwrap().len();
            seen[n - 1] = true;
        }
        assert_eq!(seen, [true; 4]);
    }

    #[test]
    fn characters_come_from_the_table_and_cover_it() {
        assert_eq!(CHARS.len(), 94);
        let p = policy(1, 4000, 1);
        let v = p.padding(0).unwrap();
        let bytes = v.as_bytes();
        assert_eq!(bytes.len(), 4001);
        assert!(bytes.iter().all(|b| CHARS.contains(b)));
        let distinct: std::collections::HashSet<u8> = bytes.iter().copied().collect();
        assert!(distinct.len() > 80, "{}", distinct.len());
        assert!(v.to_str().is_ok());
    }

    #[test]
    fn both_messages_get_the_header() {
        let p = policy(20, 5, 10);
        let mut ex = exchange("POST", "/a", &[("content-type", "text/plain")], "hello");
        p.on_request(&mut ex);
        let n = ex.request.headers.get("x-padding").unwrap().len();
        assert!((6..35).contains(&n), "{n}");
        ex.response = Some(http::Response::new(Body::full("world")));
        p.on_response(&mut ex);
        assert!(ex
            .response
            .as_ref()
            .unwrap()
            .headers()
            .contains_key("x-padding"));
    }

    #[test]
    fn settings_errors() {
        let c = |v: serde_json::Value| {
            let s: PaddingHeaderSettings = serde_json::from_value(v).map_err(|e| e.to_string())?;
            PaddingHeader::compile(s, &plain())
                .map(|_| ())
                .map_err(|e| e.key.clone())
        };
        assert_eq!(c(serde_json::json!({})), Ok(()));
        assert_eq!(c(serde_json::json!({"roundUp": 0})), Err("roundUp".into()));
        assert_eq!(c(serde_json::json!({"random": 0})), Err("random".into()));
        assert_eq!(c(serde_json::json!({"constant": 100000})), Err("".into()));
        assert!(c(serde_json::json!({"roundUp": -1})).is_err());
        assert!(c(serde_json::json!({"size": 1}))
            .unwrap_err()
            .contains("unknown field"));
    }
}
