//! `rateLimiter`: counts requests per key (client IP, consumer, consumer group, header or
//! template) in a fixed window (Membrane's behaviour), a sliding window or a token bucket, in
//! the process (counters shared by its workers, kept across reloads while the limiter stays the
//! same) or in Redis (one limit for a fleet). Over the limit: 429 problem+json (or the
//! configured status and message) with `Retry-After`. Every response carries
//! `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset`.

pub mod redis;
pub mod redis_server;
pub mod store;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use http::{HeaderName, HeaderValue};
use ipnet::IpNet;
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_config::units::{Duration, Flag};
use turnpike_core::jsonpath::Message;
use turnpike_core::problems;
use turnpike_core::{BodyNeed, Exchange, Outcome, Policy, Problem, Resume, Template, Wait};
use turnpike_core::{CompileContext, CompileError, PolicyFactory};

use self::redis::{Mode, OnError, RedisStore};
use self::redis_server::{Sentinel, Server};
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
    /// Where counters live: in the process (default), or `redis` (shared by a fleet).
    #[serde(default)]
    pub store: Option<RateStoreSettings>,
    /// With a Redis store: `exact` (default; one Redis script per request) or `local-sync`
    /// (local counts synced every `syncInterval`).
    #[serde(default)]
    pub mode: Option<String>,
    /// With `mode: local-sync`: how often counts are synced (default 100ms).
    #[serde(default)]
    pub sync_interval: Option<Duration>,
    /// The status of a refused request (default 429; APISIX's `rejected_code`).
    #[serde(default)]
    pub reject_status: Option<u16>,
    /// The `detail` of a refused request's problem (APISIX's `rejected_msg`).
    #[serde(default)]
    pub reject_body: Option<String>,
}

/// Where a rate limiter's counters live.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RateStoreSettings {
    /// A Redis server shared by the gateways of a fleet.
    pub redis: RedisSettings,
}

/// The Redis a fleet's counters live in: one server (`url`), a Redis Cluster (`cluster`), or the
/// primary that Sentinels name (`sentinel`); exactly one of them.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RedisSettings {
    /// One server: `redis://[user:password@]host:port[/db]`, or `rediss://` for TLS.
    #[serde(default)]
    pub url: Option<String>,
    /// A Redis Cluster: the URLs of some of its nodes (all `redis://` or all `rediss://`).
    #[serde(default)]
    pub cluster: Vec<String>,
    /// The primary of a master monitored by Redis Sentinels.
    #[serde(default)]
    pub sentinel: Option<SentinelSettings>,
    /// User name (instead of in the URL).
    #[serde(default)]
    pub username: Option<String>,
    /// Password (instead of in the URL).
    #[serde(default)]
    pub password: Option<String>,
    /// With TLS: the CA certificates (PEM) the servers' certificates must chain to (default:
    /// the system's).
    #[serde(default)]
    pub ca: Option<String>,
    /// How long a request may wait for Redis (default 50ms).
    #[serde(default)]
    pub timeout: Option<Duration>,
    /// When Redis fails or is late: `allow` (default; fail open) or `deny` (fail closed: 503).
    #[serde(default)]
    pub on_error: Option<String>,
}

/// Redis Sentinels and the master they monitor.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SentinelSettings {
    /// The master's name in the Sentinels' configuration.
    pub master_name: String,
    /// The Sentinels: `redis://host:port`, or `rediss://` (then the primary is reached over TLS
    /// too).
    pub nodes: Vec<String>,
    /// The Sentinels' user name (default: none).
    #[serde(default)]
    pub username: Option<String>,
    /// The Sentinels' password (default: none).
    #[serde(default)]
    pub password: Option<String>,
    /// The primary's database number (default 0).
    #[serde(default)]
    pub db: Option<i64>,
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
    /// The consumer's group (its first `groups` entry): every consumer of a group shares one
    /// limit (APISIX's consumer groups).
    ConsumerGroup,
}

static LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
static REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
static RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
static XFF: HeaderName = HeaderName::from_static("x-forwarded-for");

enum KeySource {
    Ip { trusted: Option<Vec<IpNet>> },
    Consumer,
    ConsumerGroup,
    Header(HeaderName),
    Expression(Template),
}

/// Where a compiled limiter counts.
enum Backend {
    Local(Arc<Store>),
    Redis(Arc<RedisStore>),
}

/// How a limiter answers (shared with the steps that wait for Redis).
struct Reply {
    limit: u64,
    limit_header: HeaderValue,
    reject_status: http::StatusCode,
    reject_body: Option<String>,
}

/// The compiled policy.
pub struct RateLimiter {
    backend: Backend,
    key: KeySource,
    reply: Arc<Reply>,
}

/// Local stores by the limiter's place and settings: a reload that keeps a limiter as it was
/// keeps its counters.
static LOCAL_STORES: Mutex<Option<HashMap<String, Weak<Store>>>> = Mutex::new(None);

fn local_store(identity: String, make: impl FnOnce() -> Store) -> Arc<Store> {
    let mut all = LOCAL_STORES.lock().unwrap_or_else(|e| e.into_inner());
    let all = all.get_or_insert_with(HashMap::new);
    all.retain(|_, w| w.strong_count() > 0);
    if let Some(s) = all.get(&identity).and_then(Weak::upgrade) {
        return s;
    }
    let s = Arc::new(make());
    all.insert(identity, Arc::downgrade(&s));
    s
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
        let reject_status = match c.reject_status {
            None => http::StatusCode::TOO_MANY_REQUESTS,
            Some(s) => match http::StatusCode::from_u16(s) {
                Ok(code) if (400..600).contains(&s) => code,
                _ => return Err(err("rejectStatus", "must be an error status (400 to 599)")),
            },
        };
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
            RateKey::ConsumerGroup => KeySource::ConsumerGroup,
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
                    // Membrane's form: the whole expression is one JSONPath (`$.user`) or XPath.
                    Some(l @ (ExpressionLanguage::JsonPath | ExpressionLanguage::XPath))
                        if !e.contains("${") =>
                    {
                        crate::language::compile_template(&format!("${{{e}}}"), Some(l), ctx)
                    }
                    l => crate::language::compile_template(e, l, ctx),
                }
                .map_err(|m| err("keyExpression", m))?;
                // A word (`all`) is one counter for every request, on purpose; other text without
                // placeholders is an expression of another language (Membrane's SpEL) read as text.
                let word = |l: &str| {
                    l.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                };
                if t.as_literal().is_some_and(|l| !word(l)) {
                    return Err(err(
                        "keyExpression",
                        format!(
                            "`{e}` has no placeholder, so it would be one counter for every request; write a template such as `${{header.X-Client}}`, a JSONPath with `language: jsonpath`, or a single word for one shared counter"
                        ),
                    ));
                }
                KeySource::Expression(t)
            }
        };
        let algorithm = c.algorithm.unwrap_or(RateAlgorithm::FixedWindow);
        // What makes two limiters the same one: their place and what they count.
        let identity = format!(
            "{}|{}|{:?}|{:?}|{:?}|{:?}|{:?}",
            ctx.site,
            c.request_limit,
            c.request_limit_duration.0,
            algorithm,
            kind,
            c.header,
            c.key_expression
        );
        let backend = match &c.store {
            None => {
                if c.mode.is_some() || c.sync_interval.is_some() {
                    return Err(err("mode", "only with a Redis `store`"));
                }
                let max_keys = c.max_keys.unwrap_or(100_000).max(16);
                Backend::Local(local_store(format!("{identity}|{max_keys}"), || {
                    Store::new(
                        c.request_limit,
                        c.request_limit_duration.0,
                        algorithm,
                        max_keys,
                    )
                }))
            }
            Some(s) => {
                if c.max_keys.is_some() {
                    return Err(err(
                        "maxKeys",
                        "keys in Redis expire by themselves: `maxKeys` is for the local store",
                    ));
                }
                Backend::Redis(Arc::new(redis_store(
                    &s.redis, &c, algorithm, &identity, ctx,
                )?))
            }
        };
        Ok(RateLimiter {
            backend,
            key,
            reply: Arc::new(Reply {
                limit: c.request_limit,
                limit_header: HeaderValue::from(c.request_limit),
                reject_status,
                reject_body: c.reject_body.clone(),
            }),
        })
    }
}

/// Builds the Redis store of a limiter, checking its settings.
fn redis_store(
    r: &RedisSettings,
    c: &RateLimiterSettings,
    algorithm: RateAlgorithm,
    identity: &str,
    ctx: &CompileContext<'_>,
) -> Result<RedisStore, CompileError> {
    let server = redis_server(r, ctx)?;
    let on_error = match r.on_error.as_deref() {
        None | Some("allow") => OnError::Allow,
        Some("deny") => OnError::Deny,
        Some(other) => {
            return Err(err(
                "store.redis.onError",
                format!("`{other}` is not `allow` or `deny`"),
            ))
        }
    };
    let mode = match c.mode.as_deref() {
        None | Some("exact") => {
            if c.sync_interval.is_some() {
                return Err(err("syncInterval", "only with `mode: local-sync`"));
            }
            Mode::Exact
        }
        Some("local-sync") => {
            if algorithm != RateAlgorithm::FixedWindow {
                return Err(err(
                    "mode",
                    "`local-sync` counts fixed windows: use `mode: exact` for `slidingWindow` and `tokenBucket`",
                ));
            }
            let i = c
                .sync_interval
                .map_or(std::time::Duration::from_millis(100), |d| d.0);
            if i < std::time::Duration::from_millis(10) {
                return Err(err("syncInterval", "must be at least 10ms"));
            }
            Mode::LocalSync(i)
        }
        Some(other) => {
            return Err(err(
                "mode",
                format!("`{other}` is not `exact` or `local-sync`"),
            ))
        }
    };
    let timeout = r
        .timeout
        .map_or(std::time::Duration::from_millis(50), |d| d.0);
    if timeout.is_zero() {
        return Err(err("store.redis.timeout", "must be longer than zero"));
    }
    Ok(RedisStore::new(
        server,
        identity,
        timeout,
        on_error,
        mode,
        c.request_limit,
        c.request_limit_duration.0,
        algorithm,
    ))
}

/// Whether `url` asks for TLS (`rediss://`), or an error naming `setting`.
fn redis_tls(url: &str, setting: &str) -> Result<bool, CompileError> {
    if url.starts_with("rediss://") {
        Ok(true)
    } else if url.starts_with("redis://") {
        Ok(false)
    } else {
        Err(err(
            setting,
            format!("`{url}` is not a redis:// or rediss:// URL"),
        ))
    }
}

/// The Redis of a store: one server, a cluster or a Sentinel-named primary, with credentials
/// and TLS roots.
fn redis_server(r: &RedisSettings, ctx: &CompileContext<'_>) -> Result<Server, CompileError> {
    let parse = |url: &str, setting: &str| -> Result<::redis::ConnectionInfo, CompileError> {
        let mut info = ::redis::IntoConnectionInfo::into_connection_info(url)
            .map_err(|e| err(setting, format!("not a Redis URL: {e}")))?;
        if r.username.is_some() || r.password.is_some() {
            let mut redis_info = info.redis_settings().clone();
            if let Some(u) = &r.username {
                redis_info = redis_info.set_username(u.clone());
            }
            if let Some(p) = &r.password {
                redis_info = redis_info.set_password(p.clone());
            }
            info = info.set_redis_settings(redis_info);
        }
        Ok(info)
    };
    let ca = |tls: bool| -> Result<Option<Vec<u8>>, CompileError> {
        match (&r.ca, tls) {
            (None, _) => Ok(None),
            (Some(_), false) => Err(err("store.redis.ca", "only with rediss:// URLs")),
            (Some(ca), true) => {
                let path = ctx.base_dir.join(ca);
                std::fs::read(&path).map(Some).map_err(|e| {
                    err(
                        "store.redis.ca",
                        format!("cannot read {}: {e}", path.display()),
                    )
                })
            }
        }
    };
    let certs = |pem: Vec<u8>| ::redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(pem),
    };
    match (&r.url, r.cluster.is_empty(), &r.sentinel) {
        (Some(url), true, None) => {
            let tls = redis_tls(url, "store.redis.url")?;
            let info = parse(url, "store.redis.url")?;
            let client = match ca(tls)? {
                Some(pem) => ::redis::Client::build_with_tls(info, certs(pem))
                    .map_err(|e| err("store.redis.ca", format!("not usable: {e}")))?,
                None => ::redis::Client::open(info)
                    .map_err(|e| err("store.redis.url", format!("not usable: {e}")))?,
            };
            Ok(Server::Single(client))
        }
        (None, false, None) => {
            let mut tls = None;
            let mut nodes = Vec::new();
            for url in &r.cluster {
                let t = redis_tls(url, "store.redis.cluster")?;
                if tls.is_some_and(|before| before != t) {
                    return Err(err(
                        "store.redis.cluster",
                        "the nodes are all redis:// or all rediss://",
                    ));
                }
                tls = Some(t);
                nodes.push(parse(url, "store.redis.cluster")?);
            }
            let mut builder = ::redis::cluster::ClusterClient::builder(nodes);
            if let Some(pem) = ca(tls == Some(true))? {
                builder = builder.certs(certs(pem));
            }
            let client = builder
                .build()
                .map_err(|e| err("store.redis.cluster", format!("not usable: {e}")))?;
            Ok(Server::Cluster(client))
        }
        (None, true, Some(s)) => {
            if s.nodes.is_empty() {
                return Err(err(
                    "store.redis.sentinel.nodes",
                    "needs at least one Sentinel",
                ));
            }
            let mut tls = None;
            let mut addrs = Vec::new();
            for url in &s.nodes {
                let t = redis_tls(url, "store.redis.sentinel.nodes")?;
                if tls.is_some_and(|before| before != t) {
                    return Err(err(
                        "store.redis.sentinel.nodes",
                        "the Sentinels are all redis:// or all rediss://",
                    ));
                }
                tls = Some(t);
                let info = ::redis::IntoConnectionInfo::into_connection_info(url.as_str())
                    .map_err(|e| {
                        err(
                            "store.redis.sentinel.nodes",
                            format!("not a Redis URL: {e}"),
                        )
                    })?;
                addrs.push(info.addr().clone());
            }
            let tls = tls == Some(true);
            let mut b = ::redis::sentinel::SentinelClientBuilder::new(
                addrs,
                s.master_name.clone(),
                ::redis::sentinel::SentinelServerType::Master,
            )
            .map_err(|e| err("store.redis.sentinel", format!("not usable: {e}")))?;
            if tls {
                b = b
                    .set_client_to_sentinel_tls_mode(::redis::TlsMode::Secure)
                    .set_client_to_redis_tls_mode(::redis::TlsMode::Secure);
            }
            if let Some(pem) = ca(tls)? {
                b = b
                    .set_client_to_sentinel_certificates(certs(pem.clone()))
                    .set_client_to_redis_certificates(certs(pem));
            }
            if let Some(u) = &s.username {
                b = b.set_client_to_sentinel_username(u);
            }
            if let Some(p) = &s.password {
                b = b.set_client_to_sentinel_password(p);
            }
            if let Some(u) = &r.username {
                b = b.set_client_to_redis_username(u);
            }
            if let Some(p) = &r.password {
                b = b.set_client_to_redis_password(p);
            }
            if let Some(db) = s.db {
                b = b.set_client_to_redis_db(db);
            }
            let client = b
                .build()
                .map_err(|e| err("store.redis.sentinel", format!("not usable: {e}")))?;
            Ok(Server::Sentinel(Sentinel::new(
                client,
                s.master_name.clone(),
            )))
        }
        _ => Err(err(
            "store.redis",
            "needs exactly one of `url` (one server), `cluster` (its nodes) and `sentinel`",
        )),
    }
}

impl Reply {
    /// Applies a decision: the request passes (its headers kept for the response), or is
    /// refused.
    fn apply(&self, ex: &mut Exchange, d: Decision) -> Outcome {
        if !d.allowed {
            let detail = self.reject_body.clone().unwrap_or_else(|| {
                format!(
                    "the limit is {} requests per window; retry in {} s",
                    self.limit, d.reset_secs
                )
            });
            let mut p = Problem::new(&problems::RATE_LIMITED)
                .with_status(self.reject_status)
                .with_detail(detail)
                .with_header(http::header::RETRY_AFTER, HeaderValue::from(d.reset_secs));
            for (k, v) in self.headers(d) {
                p = p.with_header(k, v);
            }
            return Outcome::Reject(p);
        }
        ex.extensions.insert(Verdict(d));
        Outcome::Continue
    }

    /// The shared store failed: `onError` decides.
    fn store_failed(&self, store: &RedisStore) -> Outcome {
        let p = turnpike_telemetry::stats::process();
        match store.on_error() {
            OnError::Allow => {
                p.ratelimit_store_allowed
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Outcome::Continue
            }
            OnError::Deny => {
                p.ratelimit_store_denied
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Outcome::Reject(
                    Problem::new(&problems::RATE_LIMIT_UNAVAILABLE)
                        .with_detail("the shared rate limit store does not answer; retry shortly")
                        .with_header(http::header::RETRY_AFTER, HeaderValue::from_static("1")),
                )
            }
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

impl RateLimiter {
    fn key(&self, ex: &Exchange) -> Key {
        let ip = || Key::Ip(canonical(ex.client.ip()));
        match &self.key {
            KeySource::Ip { trusted: None } => ip(),
            KeySource::Ip {
                trusted: Some(nets),
            } => forwarded_client(ex, nets),
            KeySource::Consumer => match ex.identity().and_then(|i| i.consumer.as_deref()) {
                Some(c) => Key::Text(c.into()),
                None => ip(),
            },
            KeySource::ConsumerGroup => match ex.identity().and_then(|i| i.groups.first()) {
                Some(g) => Key::Text(format!("group:{g}").into()),
                None => ip(),
            },
            KeySource::Header(h) => match ex.request.headers.get(h).and_then(|v| v.to_str().ok()) {
                Some(v) => Key::Text(v.into()),
                None => ip(),
            },
            KeySource::Expression(t) => Key::Text(t.render(ex).into()),
        }
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
/// the hops are trusted proxies. Hops are `ip`, `ip:port`, `[v6]` or `[v6]:port`; any other
/// entry ends the walk and is the client (by its text), so that a client cannot hide behind
/// an entry the walk would skip.
fn forwarded_client(ex: &Exchange, trusted: &[IpNet]) -> Key {
    let mut client = canonical(ex.client.ip());
    if !trusted.iter().any(|n| n.contains(&client)) {
        return Key::Ip(client);
    }
    let hops: Vec<&str> = ex
        .request
        .headers
        .get_all(&XFF)
        .iter()
        .map(|v| v.to_str().unwrap_or("\u{fffd}"))
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    for hop in hops.into_iter().rev() {
        match hop_address(hop) {
            Some(ip) => client = canonical(ip),
            None => return Key::Text(format!("xff:{hop}").into_boxed_str()),
        }
        if !trusted.iter().any(|n| n.contains(&client)) {
            break;
        }
    }
    Key::Ip(client)
}

/// The address of one `X-Forwarded-For` entry: `ip`, `ip:port`, `[v6]` or `[v6]:port`.
fn hop_address(hop: &str) -> Option<IpAddr> {
    if let Ok(ip) = hop.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Some(rest) = hop.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        let port_ok = after.is_empty()
            || after
                .strip_prefix(':')
                .is_some_and(|p| !p.is_empty() && p.parse::<u16>().is_ok());
        return port_ok
            .then(|| v6.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6))
            .flatten();
    }
    let (v4, port) = hop.split_once(':')?;
    port.parse::<u16>().ok()?;
    v4.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
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
        let key = self.key(ex);
        let store = match &self.backend {
            Backend::Local(store) => return self.reply.apply(ex, store.hit(key, Instant::now())),
            Backend::Redis(store) => store,
        };
        let text = match &key {
            Key::Ip(ip) => ip.to_string(),
            Key::Text(t) => t.to_string(),
        };
        let redis_key = store.key(&text);
        if let Mode::LocalSync(_) = store.mode() {
            return match store.decide_local(redis_key) {
                Some(d) => self.reply.apply(ex, d),
                None => {
                    store.failed(&"no sync with Redis succeeded lately");
                    self.reply.store_failed(store)
                }
            };
        }
        let asked = store.ask(redis_key);
        let (reply, late_reply) = (Arc::clone(&self.reply), Arc::clone(&self.reply));
        let (s, late) = (Arc::clone(store), Arc::clone(store));
        Outcome::Wait(Wait::new(
            async move {
                let answer = asked.await;
                Box::new(move |ex: &mut Exchange| match answer {
                    Ok(d) => reply.apply(ex, d),
                    Err(e) => {
                        s.failed(&e);
                        reply.store_failed(&s)
                    }
                }) as Resume
            },
            store.timeout(),
            move |_| {
                late.failed(&"it did not answer in time");
                late_reply.store_failed(&late)
            },
        ))
    }

    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        let Some(Verdict(d)) = ex.extensions.get::<Verdict>().copied() else {
            return Outcome::Continue;
        };
        if let Some(res) = ex.response.as_mut() {
            for (k, v) in self.reply.headers(d) {
                res.headers_mut().insert(k, v);
            }
        }
        Outcome::Continue
    }
}
