//! `rateLimiter`: counts requests per key (client IP, consumer, header or template) in a fixed
//! window (Membrane's behaviour), a sliding window or a token bucket. Over the limit: 429
//! problem+json with `Retry-After`. Every response carries `X-RateLimit-Limit`,
//! `X-RateLimit-Remaining` and `X-RateLimit-Reset`.

pub mod store;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use http::{HeaderName, HeaderValue};
use ipnet::IpNet;
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_config::units::{Duration, Flag};
use turnpike_core::jsonpath::Message;
use turnpike_core::problems;
use turnpike_core::{BodyNeed, Exchange, Outcome, Policy, Problem, Template};
use turnpike_core::{CompileContext, CompileError, PolicyFactory};

use self::store::{Decision, Key, Store};
use crate::err;
use crate::language::ExpressionLanguage;

/// `rateLimiter`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RateLimiterSettings {
    /// Requests allowed per window (per key).
    pub request_limit: u64,
    /// The window, e.g. `PT1H` or `1m`.
    pub request_limit_duration: Duration,
    /// `fixedWindow` (default, as Membrane), `slidingWindow` or `tokenBucket`.
    #[serde(default)]
    pub algorithm: Option<RateAlgorithm>,
    /// What requests are counted by: `ip` (default; `consumer` inside a consumer's flow),
    /// `consumer`, `header` (with `header`), or `expression` (with `keyExpression`).
    #[serde(default)]
    pub key: Option<RateKey>,
    /// The header counted by, with `key: header`.
    #[serde(default)]
    pub header: Option<String>,
    /// A template whose value is counted by (e.g. `${header.X-Tenant}-${path.id}`).
    #[serde(default)]
    pub key_expression: Option<String>,
    /// The language of `keyExpression`'s placeholders: absent for the built-in templates,
    /// `jsonpath` for RFC 9535 JSONPath on the JSON request body (`${$.tenant}`).
    #[serde(default)]
    pub language: Option<ExpressionLanguage>,
    /// With `key: ip`: take the client from `X-Forwarded-For` when the connection comes from one
    /// of `trustedProxies`.
    #[serde(default)]
    pub trust_forwarded_for: Flag,
    /// Proxies (IPs or CIDR ranges) whose `X-Forwarded-For` is trusted.
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
    /// Most keys tracked at once (default 100000); beyond, the keys closest to expiry are dropped.
    #[serde(default)]
    pub max_keys: Option<usize>,
}

/// Rate limiting algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum RateAlgorithm {
    /// Count per fixed window.
    FixedWindow,
    /// Weighted count over the current and the previous window.
    SlidingWindow,
    /// A bucket of `requestLimit` tokens refilled evenly over the window.
    TokenBucket,
}

/// What a rate limiter counts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum RateKey {
    /// The client IP.
    Ip,
    /// The consumer identified by an auth policy.
    Consumer,
    /// A request header.
    Header,
    /// `keyExpression`.
    Expression,
}

static LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
static REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
static RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
static XFF: HeaderName = HeaderName::from_static("x-forwarded-for");

enum KeySource {
    Ip { trusted: Option<Vec<IpNet>> },
    Consumer,
    Header(HeaderName),
    Expression(Template),
}

/// The compiled policy.
pub struct RateLimiter {
    store: Arc<Store>,
    key: KeySource,
    limit_header: HeaderValue,
}

/// The decision of a rate limiter, kept for the response phase.
#[derive(Clone, Copy)]
struct Verdict(Decision);

impl PolicyFactory for RateLimiter {
    const NAME: &'static str = "rateLimiter";
    type Settings = RateLimiterSettings;

    /// Compiles the policy; `ctx.in_consumer_flow` makes `consumer` the default key.
    fn compile(c: RateLimiterSettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        if c.request_limit == 0 {
            return Err(err("requestLimit", "must be at least 1"));
        }
        if c.request_limit_duration.0.is_zero() {
            return Err(err("requestLimitDuration", "must be longer than zero"));
        }
        let default_key = if ctx.in_consumer_flow {
            RateKey::Consumer
        } else {
            RateKey::Ip
        };
        let kind = c.key.unwrap_or(if c.key_expression.is_some() {
            RateKey::Expression
        } else {
            default_key
        });
        if kind != RateKey::Header && c.header.is_some() {
            return Err(err("header", "only with `key: header`"));
        }
        if kind != RateKey::Expression && c.key_expression.is_some() {
            return Err(err("keyExpression", "only with `key: expression`"));
        }
        if kind != RateKey::Expression && c.language.is_some() {
            return Err(err("language", "only with `key: expression`"));
        }
        if kind != RateKey::Ip && (c.trust_forwarded_for.0 || !c.trusted_proxies.is_empty()) {
            return Err(err("trustForwardedFor", "only with `key: ip`"));
        }
        let key = match kind {
            RateKey::Ip => {
                let nets: Vec<IpNet> = c
                    .trusted_proxies
                    .iter()
                    .enumerate()
                    .map(|(i, p)| parse_net(p).map_err(|m| err(&format!("trustedProxies[{i}]"), m)))
                    .collect::<Result<_, _>>()?;
                if c.trust_forwarded_for.0 && nets.is_empty() {
                    return Err(err(
                        "trustedProxies",
                        "`trustForwardedFor` needs the list of proxies to trust",
                    ));
                }
                if !c.trust_forwarded_for.0 && !nets.is_empty() {
                    return Err(err(
                        "trustedProxies",
                        "only used with `trustForwardedFor: true`",
                    ));
                }
                KeySource::Ip {
                    trusted: c.trust_forwarded_for.0.then_some(nets),
                }
            }
            RateKey::Consumer => KeySource::Consumer,
            RateKey::Header => {
                let h = c
                    .header
                    .as_deref()
                    .ok_or_else(|| err("header", "`key: header` needs `header`"))?;
                KeySource::Header(
                    HeaderName::from_bytes(h.as_bytes())
                        .map_err(|_| err("header", format!("`{h}` is not a header name")))?,
                )
            }
            RateKey::Expression => {
                let e = c.key_expression.as_deref().ok_or_else(|| {
                    err("keyExpression", "`key: expression` needs `keyExpression`")
                })?;
                let t = match c.language {
                    None => Template::parse(e, ctx.scope),
                    Some(ExpressionLanguage::JsonPath) => Template::parse_jsonpath(e),
                };
                KeySource::Expression(t.map_err(|m| err("keyExpression", m))?)
            }
        };
        let store = Store::new(
            c.request_limit,
            c.request_limit_duration.0,
            c.algorithm.unwrap_or(RateAlgorithm::FixedWindow),
            c.max_keys.unwrap_or(100_000).max(16),
        );
        Ok(RateLimiter {
            store: Arc::new(store),
            key,
            limit_header: HeaderValue::from(c.request_limit),
        })
    }
}

impl RateLimiter {
    fn key(&self, ex: &Exchange) -> Key {
        let ip = || Key::Ip(canonical(ex.client.ip()));
        match &self.key {
            KeySource::Ip { trusted: None } => ip(),
            KeySource::Ip {
                trusted: Some(nets),
            } => Key::Ip(forwarded_client(ex, nets)),
            KeySource::Consumer => match ex.identity().and_then(|i| i.consumer.as_deref()) {
                Some(c) => Key::Text(c.into()),
                None => ip(),
            },
            KeySource::Header(h) => match ex.request.headers.get(h).and_then(|v| v.to_str().ok()) {
                Some(v) => Key::Text(v.into()),
                None => ip(),
            },
            KeySource::Expression(t) => Key::Text(t.render(ex).into()),
        }
    }

    fn headers(&self, d: Decision) -> [(HeaderName, HeaderValue); 3] {
        [
            (LIMIT.clone(), self.limit_header.clone()),
            (REMAINING.clone(), HeaderValue::from(d.remaining)),
            (RESET.clone(), HeaderValue::from(d.reset_secs)),
        ]
    }
}

/// Parses an IP or CIDR range.
pub(crate) fn parse_net(s: &str) -> Result<IpNet, String> {
    s.parse::<IpNet>()
        .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| format!("`{s}` is not an IP address or CIDR range"))
}

/// IPv4-mapped IPv6 addresses as IPv4.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The client as seen by the nearest untrusted hop: walks `X-Forwarded-For` from the right while
/// the hops are trusted proxies.
fn forwarded_client(ex: &Exchange, trusted: &[IpNet]) -> IpAddr {
    let mut client = canonical(ex.client.ip());
    if !trusted.iter().any(|n| n.contains(&client)) {
        return client;
    }
    let list: Vec<IpAddr> = ex
        .request
        .headers
        .get_all(&XFF)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|s| s.trim().parse::<IpAddr>().ok())
        .collect();
    for hop in list.into_iter().rev() {
        client = canonical(hop);
        if !trusted.iter().any(|n| n.contains(&client)) {
            break;
        }
    }
    client
}

impl Policy for RateLimiter {
    fn name(&self) -> &'static str {
        "rateLimiter"
    }

    fn response_needs_request(&self) -> bool {
        false
    }

    fn body_need(&self) -> BodyNeed {
        match &self.key {
            KeySource::Expression(t) if t.needs_body() => BodyNeed::Buffer,
            _ => BodyNeed::None,
        }
    }

    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        if let KeySource::Expression(t) = &self.key {
            t.prepare(ex, Message::Request);
        }
        let d = self.store.hit(self.key(ex), Instant::now());
        if !d.allowed {
            let mut p = Problem::new(&problems::RATE_LIMITED)
                .with_detail(format!(
                    "the limit is {} requests per window; retry in {} s",
                    self.store.limit(),
                    d.reset_secs
                ))
                .with_header(http::header::RETRY_AFTER, HeaderValue::from(d.reset_secs));
            for (k, v) in self.headers(d) {
                p = p.with_header(k, v);
            }
            return Outcome::Reject(p);
        }
        ex.extensions.insert(Verdict(d));
        Outcome::Continue
    }

    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        let Some(Verdict(d)) = ex.extensions.get::<Verdict>().copied() else {
            return Outcome::Continue;
        };
        if let Some(res) = ex.response.as_mut() {
            for (k, v) in self.headers(d) {
                res.headers_mut().insert(k, v);
            }
        }
        Outcome::Continue
    }
}
