//! `oauth2Client`: Membrane's token fetcher. Gets an access token from an authorization
//! server's token endpoint with the client credentials grant, keeps it until shortly before it
//! expires, and sends each request on with `Authorization: Bearer <token>`.
//!
//! One fetch runs at a time: requests that need a token while it runs wait for it. A token
//! answer without `expires_in` is used for the requests waiting for it and not kept, as in
//! Membrane. A failed fetch answers 502 (504 past the gateway's upstream timeout).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use http::{header, HeaderValue, Method, Request};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::watch;
use turnpike_core::{problems, Exchange, Outcome, Policy, Problem, Resume, Wait};
use turnpike_core::{CompileContext, CompileError, Phases, PolicyFactory};

use crate::err;
use crate::outbound::{self, Endpoint, Outbound, Tls};

/// `oauth2Client`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OAuth2ClientSettings {
    /// The authorization server's token endpoint.
    pub token_url: String,
    /// The client's id.
    pub client_id: String,
    /// The client's secret.
    pub client_secret: String,
    /// The scopes asked for, separated by blanks.
    #[serde(default)]
    pub scope: Option<String>,
}

/// The token, or the fetch under way.
enum Slot {
    Empty,
    /// `Authorization` value, and until when it is used.
    Valid(HeaderValue, Instant),
    /// A fetch runs; its result (`None`: failed) arrives on the channel.
    Fetching(watch::Receiver<Option<HeaderValue>>),
}

/// The compiled `oauth2Client` policy.
pub struct OAuth2Client {
    endpoint: Arc<Endpoint>,
    url: Arc<str>,
    /// The token request: `Authorization: Basic …` and the form.
    basic: HeaderValue,
    form: Bytes,
    limits: Outbound,
    tls: Option<Tls>,
    slot: Arc<Mutex<Slot>>,
}

impl std::fmt::Debug for OAuth2Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuth2Client")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// Form-encodes a value (RFC 6749 2.3.1 asks it of Basic credentials too).
fn form_encode(s: &str) -> String {
    const SET: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(s, SET).to_string()
}

/// How long a token that expires in `expires_in` seconds is used: until shortly before it
/// expires (a tenth of its lifetime, between 1 and 30 seconds); `None` without a lifetime.
fn keep_for(expires_in: Option<u64>) -> Option<Duration> {
    let secs = expires_in.filter(|s| *s > 0)?;
    let margin = (secs / 10).clamp(1, 30);
    Some(Duration::from_secs(secs.saturating_sub(margin).max(1)))
}

impl PolicyFactory for OAuth2Client {
    const NAME: &'static str = "oauth2Client";
    const PHASES: Phases = Phases::REQUEST;
    type Settings = OAuth2ClientSettings;

    /// Compiles the policy: the token URL must be an absolute http(s) URL; `https` gets the
    /// gateway's TLS client configuration.
    fn compile(c: OAuth2ClientSettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        let endpoint = Endpoint::parse(&c.token_url).map_err(|m| err("tokenUrl", m))?;
        let tls = if endpoint.https {
            let config = turnpike_tls::client_config(None, ctx.base_dir, false, "oauth2Client")
                .map_err(|m| err("tokenUrl", m))?;
            Some(Tls {
                config,
                server_name: None,
            })
        } else {
            None
        };
        if c.client_id.is_empty() {
            return Err(err("clientId", "must not be empty"));
        }
        let credentials = format!(
            "{}:{}",
            form_encode(&c.client_id),
            form_encode(&c.client_secret)
        );
        let basic = HeaderValue::from_str(&format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(credentials)
        ))
        .map_err(|_| err("clientSecret", "not usable in a header"))?;
        let mut form = "grant_type=client_credentials".to_owned();
        if let Some(scope) = c.scope.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
            form.push_str("&scope=");
            form.push_str(&form_encode(scope));
        }
        Ok(OAuth2Client {
            endpoint: Arc::new(endpoint),
            url: c.token_url.trim().into(),
            basic,
            form: Bytes::from(form),
            limits: Outbound::of(ctx),
            tls,
            slot: Arc::new(Mutex::new(Slot::Empty)),
        })
    }
}

/// What a fetch needs, owned by the request that runs it.
struct Fetch {
    endpoint: Arc<Endpoint>,
    url: Arc<str>,
    request: Request<Bytes>,
    limits: Outbound,
    tls: Option<Tls>,
}

impl Fetch {
    /// The `Authorization` value of a new token and how long to keep it, or `None` (logged).
    async fn run(self) -> Option<(HeaderValue, Option<Duration>)> {
        let reply = match outbound::send(
            &self.endpoint,
            self.request,
            self.tls.as_ref(),
            self.limits,
        )
        .await
        {
            Ok(r) => r,
            Err(f) => {
                tracing::warn!(url = %self.url, "oauth2Client: no token: {f}");
                return None;
            }
        };
        if reply.head.status != http::StatusCode::OK {
            tracing::warn!(url = %self.url, status = reply.head.status.as_u16(), "oauth2Client: the token endpoint refused");
            return None;
        }
        let answer: serde_json::Value = serde_json::from_slice(&reply.body).ok()?;
        let token = answer
            .get("access_token")
            .and_then(|t| t.as_str())
            .filter(|t| !t.trim().is_empty());
        let Some(value) = token.and_then(|t| HeaderValue::from_str(&format!("Bearer {t}")).ok())
        else {
            tracing::warn!(url = %self.url, "oauth2Client: the answer holds no usable access_token");
            return None;
        };
        Some((
            value,
            keep_for(answer.get("expires_in").and_then(|e| e.as_u64())),
        ))
    }
}

/// Sets the token on the request, or answers 502.
fn apply(ex: &mut Exchange, token: Option<HeaderValue>) -> Outcome {
    match token {
        Some(v) => {
            ex.request.headers.insert(header::AUTHORIZATION, v);
            Outcome::Continue
        }
        None => Outcome::Reject(
            Problem::new(&problems::UPSTREAM_ERROR)
                .with_detail("no OAuth2 access token could be obtained"),
        ),
    }
}

impl OAuth2Client {
    fn lock(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn request(&self) -> Result<Request<Bytes>, String> {
        let host = HeaderValue::from_str(&self.endpoint.authority).map_err(|e| e.to_string())?;
        let mut req = Request::new(self.form.clone());
        *req.method_mut() = Method::POST;
        *req.uri_mut() = http::Uri::from(self.endpoint.path_and_query.clone());
        let h = req.headers_mut();
        h.insert(header::HOST, host);
        h.insert(header::AUTHORIZATION, self.basic.clone());
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        );
        h.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        Ok(req)
    }

    fn timeout() -> impl FnOnce(&mut Exchange) -> Outcome {
        |_| {
            Outcome::Reject(
                Problem::new(&problems::POLICY_TIMEOUT)
                    .with_detail("the authorization server did not answer in time"),
            )
        }
    }
}

impl Policy for OAuth2Client {
    fn name(&self) -> &'static str {
        "oauth2Client"
    }

    fn response_needs_request(&self) -> bool {
        false
    }

    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let mut slot = self.lock();
        match &*slot {
            Slot::Valid(v, until) if Instant::now() < *until => {
                let v = v.clone();
                drop(slot);
                return apply(ex, Some(v));
            }
            // A fetch runs (its request has not gone away): wait for its token.
            Slot::Fetching(rx) if rx.has_changed().is_ok() => {
                let mut rx = rx.clone();
                drop(slot);
                let future = async move {
                    let _ = rx.changed().await;
                    let token = rx.borrow().clone();
                    Box::new(move |ex: &mut Exchange| apply(ex, token)) as Resume
                };
                return Outcome::Wait(Wait::new(future, self.limits.timeout, Self::timeout()));
            }
            _ => {}
        }
        let request = match self.request() {
            Ok(r) => r,
            Err(m) => {
                tracing::warn!(url = %self.url, "oauth2Client: {m}");
                return apply(ex, None);
            }
        };
        let (tx, rx) = watch::channel(None);
        *slot = Slot::Fetching(rx);
        drop(slot);
        let fetch = Fetch {
            endpoint: Arc::clone(&self.endpoint),
            url: Arc::clone(&self.url),
            request,
            limits: self.limits,
            tls: self.tls.clone(),
        };
        let shared = Arc::clone(&self.slot);
        let future = async move {
            let result = fetch.run().await;
            let token = result.as_ref().map(|(v, _)| v.clone());
            {
                let mut slot = shared.lock().unwrap_or_else(|e| e.into_inner());
                *slot = match &result {
                    Some((v, Some(keep))) => Slot::Valid(v.clone(), Instant::now() + *keep),
                    _ => Slot::Empty,
                };
            }
            tx.send_replace(token.clone());
            Box::new(move |ex: &mut Exchange| apply(ex, token)) as Resume
        };
        Outcome::Wait(Wait::new(future, self.limits.timeout, Self::timeout()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_kept_until_shortly_before_they_expire() {
        assert_eq!(keep_for(None), None);
        assert_eq!(keep_for(Some(0)), None);
        assert_eq!(keep_for(Some(60)), Some(Duration::from_secs(54)));
        assert_eq!(keep_for(Some(3600)), Some(Duration::from_secs(3570)));
        assert_eq!(keep_for(Some(5)), Some(Duration::from_secs(4)));
        assert_eq!(keep_for(Some(1)), Some(Duration::from_secs(1)));
    }

    #[test]
    fn the_token_request() {
        let s: OAuth2ClientSettings = serde_json::from_value(serde_json::json!({
            "tokenUrl": "http://127.0.0.1:7007/oauth2/token",
            "clientId": "a b",
            "clientSecret": "p+w:d",
            "scope": "read write"
        }))
        .unwrap();
        let c = OAuth2Client::compile(s, &crate::testutil::plain()).unwrap();
        let r = c.request().unwrap();
        assert_eq!(r.method(), Method::POST);
        assert_eq!(r.uri(), "/oauth2/token");
        assert_eq!(r.headers()[header::HOST], "127.0.0.1:7007");
        let basic = r.headers()[header::AUTHORIZATION].to_str().unwrap();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(basic.strip_prefix("Basic ").unwrap())
            .unwrap();
        assert_eq!(decoded, b"a%20b:p%2Bw%3Ad");
        assert_eq!(
            r.body().as_ref(),
            b"grant_type=client_credentials&scope=read%20write"
        );
        let bad: OAuth2ClientSettings = serde_json::from_value(serde_json::json!({
            "tokenUrl": "/oauth2/token", "clientId": "a", "clientSecret": "b"
        }))
        .unwrap();
        assert!(OAuth2Client::compile(bad, &crate::testutil::plain()).is_err());
    }
}
