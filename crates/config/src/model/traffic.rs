//! Traffic policies: `rateLimiter`, `cors`, `accessControl`, `rewriter`, `requestSizeLimit`.

use schemars::JsonSchema;
use serde::Deserialize;

use crate::units::{ByteSize, Duration, Flag};

/// `rateLimiter`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RateLimiterPolicy {
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
    pub language: Option<super::ExpressionLanguage>,
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

/// `cors`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CorsPolicy {
    /// Allowed origins (`https://app.example.com`), or `*`.
    pub origins: Vec<String>,
    /// Allowed methods (default GET, HEAD, POST).
    #[serde(default)]
    pub methods: Vec<String>,
    /// Allowed request headers (default: none beyond the CORS-safelisted ones).
    #[serde(default)]
    pub headers: Vec<String>,
    /// Response headers exposed to scripts.
    #[serde(default)]
    pub expose_headers: Vec<String>,
    /// Allow credentials (cookies, authorization); not with origin `*`.
    #[serde(default)]
    pub credentials: Flag,
    /// How long browsers may cache a preflight answer.
    #[serde(default)]
    pub max_age: Option<Duration>,
}

/// `accessControl`: IP allow and deny lists.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AccessControlPolicy {
    /// Clients allowed (IPs or CIDR ranges, IPv4 and IPv6); when given, everyone else is denied.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Clients denied (checked first).
    #[serde(default)]
    pub deny: Vec<String>,
}

/// `rewriter`: regex path rewriting.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RewriterPolicy {
    /// Rules tried in order; the first whose `from` matches the path rewrites it.
    pub mappings: Vec<RewriteMapping>,
}

/// One rewrite rule.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RewriteMapping {
    /// Regular expression matched against the path.
    pub from: String,
    /// Replacement; `$1`, `${name}` refer to groups. The query string is kept.
    pub to: String,
}

/// `requestSizeLimit`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RequestSizeLimitPolicy {
    /// Largest request body accepted; larger gets 413.
    pub max_size: ByteSize,
}
