//! Membrane's OAuth2 policies: `oauth2authserver`, an authorization server (client credentials,
//! password and refresh token grants; opaque or JWT tokens; userinfo, revocation, discovery and
//! JWKS endpoints); `tokenValidator`, which asks an authorization server's userinfo endpoint
//! about every request's bearer token; and `oauth2Client`, which gets a token with the client
//! credentials grant and sends requests on with it.
//!
//! The endpoints answer errors in RFC 6749's JSON form (`{"error":"invalid_client", …}`) with
//! the statuses RFC 6749, 6750 and 7009 give, since OAuth2 clients read that form; everything
//! else the gateway refuses is a problem of the catalogue.

mod client;
pub(crate) mod keys;
mod server;
pub mod settings;
mod tokens;
mod users;
mod validator;

pub use client::{OAuth2Client, OAuth2ClientSettings};
pub use server::AuthServer;
pub use validator::TokenValidator;

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use turnpike_core::Body;

/// The largest form a token or revocation request may send.
const MAX_FORM: usize = 64 * 1024;

/// An error answered in RFC 6749's JSON form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OAuthError {
    pub status: StatusCode,
    /// The RFC's error code (`invalid_client`).
    pub error: &'static str,
    /// What was wrong, for the developer of the client.
    pub description: String,
    /// `WWW-Authenticate`, for 401 answers.
    pub challenge: Option<HeaderValue>,
}

impl OAuthError {
    /// A 400 answer with `error`.
    pub(crate) fn bad(error: &'static str, description: impl Into<String>) -> OAuthError {
        OAuthError {
            status: StatusCode::BAD_REQUEST,
            error,
            description: description.into(),
            challenge: None,
        }
    }

    /// 401 `invalid_client`, with the Basic challenge RFC 6749 (5.2) asks for.
    pub(crate) fn invalid_client(description: impl Into<String>) -> OAuthError {
        OAuthError {
            status: StatusCode::UNAUTHORIZED,
            error: "invalid_client",
            description: description.into(),
            challenge: Some(HeaderValue::from_static("Basic realm=\"oauth2\"")),
        }
    }

    /// The JSON response.
    pub(crate) fn response(self) -> Response<Body> {
        let body = serde_json::json!({
            "error": self.error,
            "error_description": self.description,
        });
        let mut r = json_response(self.status, body.to_string());
        if let Some(c) = self.challenge {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, c);
        }
        r
    }
}

/// A JSON response that caches and proxies must not keep (RFC 6749 5.1).
pub(crate) fn json_response(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Body::full(body.into()));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    r
}

/// The parameters of an `application/x-www-form-urlencoded` body.
#[derive(Debug, Default)]
pub(crate) struct Form(Vec<(String, String)>);

impl Form {
    /// Runs per token or revocation request: the parameters of `body`. Parameters without a
    /// value count as absent (RFC 6749 3.1); a parameter given twice is an error, except
    /// `resource` (RFC 8707).
    pub(crate) fn parse(body: &[u8]) -> Result<Form, OAuthError> {
        if body.len() > MAX_FORM {
            return Err(OAuthError::bad("invalid_request", "the form is too large"));
        }
        let mut params: Vec<(String, String)> = Vec::new();
        for pair in body.split(|&b| b == b'&').filter(|p| !p.is_empty()) {
            let (k, v) = match pair.iter().position(|&b| b == b'=') {
                Some(i) => (&pair[..i], &pair[i + 1..]),
                None => (pair, &b""[..]),
            };
            let (k, v) = (decode(k)?, decode(v)?);
            if v.is_empty() {
                continue;
            }
            if k != "resource" && params.iter().any(|(n, _)| *n == k) {
                return Err(OAuthError::bad(
                    "invalid_request",
                    format!("the parameter `{k}` is given more than once"),
                ));
            }
            params.push((k, v));
        }
        Ok(Form(params))
    }

    /// The value of `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `name`.
    pub(crate) fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Decodes one form-encoded name or value (`+` is a blank).
fn decode(raw: &[u8]) -> Result<String, OAuthError> {
    let plus: Vec<u8> = raw
        .iter()
        .map(|&b| if b == b'+' { b' ' } else { b })
        .collect();
    percent_encoding::percent_decode(&plus)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| OAuthError::bad("invalid_request", "the form is not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        let f = Form::parse(
            b"grant_type=password&username=j%C3%B6hn&password=a+b%2Bc&scope=&resource=a&resource=b",
        )
        .unwrap();
        assert_eq!(f.get("grant_type"), Some("password"));
        assert_eq!(f.get("username"), Some("jöhn"));
        assert_eq!(f.get("password"), Some("a b+c"));
        assert_eq!(f.get("scope"), None, "empty values count as absent");
        assert_eq!(f.all("resource").collect::<Vec<_>>(), ["a", "b"]);
        let e = Form::parse(b"a=1&a=2").unwrap_err();
        assert_eq!(
            (e.status, e.error),
            (StatusCode::BAD_REQUEST, "invalid_request")
        );
        assert!(Form::parse(b"a=%FF").is_err());
        assert!(Form::parse(&vec![b'a'; MAX_FORM + 1]).is_err());
    }

    #[test]
    fn errors_are_rfc_6749_json() {
        let r = OAuthError::invalid_client("wrong secret").response();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            r.headers()[header::WWW_AUTHENTICATE],
            "Basic realm=\"oauth2\""
        );
        assert_eq!(r.headers()[header::CACHE_CONTROL], "no-store");
        let body = match r.body() {
            Body::Full(Some(b)) => serde_json::from_slice::<serde_json::Value>(b).unwrap(),
            _ => panic!("a body in memory"),
        };
        assert_eq!(body["error"], "invalid_client");
        assert_eq!(body["error_description"], "wrong secret");
    }
}
