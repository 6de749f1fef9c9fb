//! `tokenValidator`: Membrane's remote token check. Every request's bearer token is sent to the
//! authorization server's userinfo `endpoint` (`GET`, the request's `Authorization` header
//! as it came); a 200 answer lets the request pass, with the answer's `sub` as the caller.
//!
//! A request without a bearer token answers 401 at once. The server's 400 or 401 answers 401
//! with `WWW-Authenticate: Bearer error="invalid_token"`, its 403 answers 403, and any other
//! status, or no answer, 502 (504 past the gateway's upstream timeout). Membrane answers an
//! empty 400 in each of these cases.

use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderValue, Request};
use turnpike_core::exchange::Identity;
use turnpike_core::{problems, Exchange, Outcome, Policy, Problem, Resume, Wait};
use turnpike_core::{CompileContext, CompileError, Phases, PolicyFactory};

use super::settings::TokenValidatorSettings;
use crate::auth::{authorization, forbidden, unauthorized};
use crate::err;
use crate::outbound::{self, Endpoint, Outbound, Reply, Tls};

/// The compiled `tokenValidator` policy.
#[derive(Debug)]
pub struct TokenValidator {
    endpoint: Arc<Endpoint>,
    url: Arc<str>,
    limits: Outbound,
    tls: Option<Tls>,
    challenge: HeaderValue,
    invalid: HeaderValue,
}

impl PolicyFactory for TokenValidator {
    const NAME: &'static str = "tokenValidator";
    const PHASES: Phases = Phases::REQUEST;
    const AUTHENTICATES: bool = true;
    type Settings = TokenValidatorSettings;

    /// Compiles the policy: the endpoint must be an absolute http(s) URL; `https` gets the
    /// gateway's TLS client configuration.
    fn compile(c: TokenValidatorSettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        let endpoint = Endpoint::parse(&c.endpoint).map_err(|m| err("endpoint", m))?;
        let tls = if endpoint.https {
            let config = turnpike_tls::client_config(None, ctx.base_dir, false, "tokenValidator")
                .map_err(|m| err("endpoint", m))?;
            Some(Tls {
                config,
                server_name: None,
            })
        } else {
            None
        };
        Ok(TokenValidator {
            endpoint: Arc::new(endpoint),
            url: c.endpoint.trim().into(),
            limits: Outbound::of(ctx),
            tls,
            challenge: HeaderValue::from_static("Bearer"),
            invalid: HeaderValue::from_static("Bearer error=\"invalid_token\""),
        })
    }
}

impl TokenValidator {
    /// The userinfo request for `authorization`.
    fn request(&self, authorization: HeaderValue) -> Result<Request<Bytes>, String> {
        let host = HeaderValue::from_str(&self.endpoint.authority).map_err(|e| e.to_string())?;
        let mut req = Request::new(Bytes::new());
        *req.uri_mut() = http::Uri::from(self.endpoint.path_and_query.clone());
        let h = req.headers_mut();
        h.insert(header::HOST, host);
        h.insert(header::AUTHORIZATION, authorization);
        h.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        Ok(req)
    }
}

impl Policy for TokenValidator {
    fn name(&self) -> &'static str {
        "tokenValidator"
    }

    fn response_needs_request(&self) -> bool {
        false
    }

    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        if authorization(ex, b"bearer").is_none_or(|t| t.is_empty()) {
            return unauthorized("a bearer token is required", Some(&self.challenge));
        }
        let Some(auth) = ex.request.headers.get(header::AUTHORIZATION).cloned() else {
            return unauthorized("a bearer token is required", Some(&self.challenge));
        };
        let req = match self.request(auth) {
            Ok(r) => r,
            Err(m) => {
                tracing::warn!(url = %self.url, "tokenValidator: {m}");
                return Outcome::Reject(
                    Problem::new(&problems::INTERNAL)
                        .with_detail("the token validation request could not be made"),
                );
            }
        };
        let endpoint = Arc::clone(&self.endpoint);
        let tls = self.tls.clone();
        let limits = self.limits;
        let url = Arc::clone(&self.url);
        let invalid = self.invalid.clone();
        let future = async move {
            let result = outbound::send(&endpoint, req, tls.as_ref(), limits).await;
            Box::new(move |ex: &mut Exchange| match result {
                Ok(reply) => decide(&url, &invalid, ex, &reply),
                Err(f) => {
                    tracing::warn!(%url, "tokenValidator: {f}");
                    Outcome::Reject(f.problem("token validation request"))
                }
            }) as Resume
        };
        Outcome::Wait(Wait::new(future, self.limits.timeout, |_| {
            Outcome::Reject(
                Problem::new(&problems::POLICY_TIMEOUT)
                    .with_detail("the authorization server did not answer in time"),
            )
        }))
    }
}

/// What the server's answer means for the request.
fn decide(url: &str, invalid: &HeaderValue, ex: &mut Exchange, reply: &Reply) -> Outcome {
    match reply.head.status.as_u16() {
        200 => {
            let info: Option<serde_json::Value> = serde_json::from_slice(&reply.body).ok();
            let subject = info
                .as_ref()
                .and_then(|i| i.get("sub"))
                .and_then(|s| s.as_str())
                .map(str::to_owned);
            ex.extensions.insert(Identity {
                subject,
                ..Default::default()
            });
            Outcome::Continue
        }
        400 | 401 => unauthorized(
            "invalid token: the authorization server does not accept it",
            Some(invalid),
        ),
        403 => forbidden("the authorization server refuses the token"),
        status => {
            tracing::warn!(url, status, "tokenValidator: unexpected answer");
            Outcome::Reject(
                Problem::new(&problems::UPSTREAM_ERROR)
                    .with_detail("the authorization server could not check the token"),
            )
        }
    }
}
