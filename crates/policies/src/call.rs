//! `call`: Membrane's orchestration callout. Sends an HTTP request to `url` (a template) with
//! the current request's headers (and, for POST, PUT and PATCH, its body), then replaces the
//! request's body with the callout's response body and sets the callout's response headers on
//! the request, for the policies after it (`setProperty`, `template`, another `call`) or the
//! target. The callout's status is not kept: any answer counts. As in Membrane it works on the
//! request in the response phase too.
//!
//! The callout runs on the worker's event loop ([`Outcome::Wait`]) within the gateway's
//! connect timeout (`timeouts.connect`) and upstream timeout (`timeouts.upstream`), and its
//! response body is read up to the gateway's body size limit (`limits.maxBodySize`).

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request};
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::jsonpath::Message;
use turnpike_core::problem::types as problems;
use turnpike_core::{
    BodyInspected, BodyNeed, CompileContext, CompileError, Exchange, Outcome, Policy,
    PolicyFactory, Problem, Resume, Template, Wait,
};

use crate::err;
use crate::language::{compile_template, ExpressionLanguage};
use crate::outbound::{self, Endpoint, Failure, Outbound, Reply, Tls};

/// `call`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CallSettings {
    /// The URL called: absolute `http://` or `https://`, with `${…}` placeholders in `language`.
    pub url: String,
    /// The method of the callout (default `GET`); the request's body is sent only with `POST`,
    /// `PUT` and `PATCH`.
    #[serde(default)]
    pub method: Option<String>,
    /// The language of the URL's placeholders: absent (or `spel`) for the built-in templates,
    /// `jsonpath` or `xpath` for expressions on the request's body.
    #[serde(default)]
    pub language: Option<ExpressionLanguage>,
    /// Send the client's `Authorization`, `Proxy-Authorization` and `Cookie` headers along
    /// (default: not; the called service gets no credentials it was not meant to have).
    #[serde(default)]
    pub forward_credentials: bool,
}

#[derive(Debug)]
enum Url {
    /// A URL without placeholders, checked at load.
    Fixed(String),
    /// A template rendered per request.
    Template(Template),
}

/// The compiled `call` policy.
#[derive(Debug)]
pub struct Call {
    url: Url,
    method: Method,
    /// Whether the client's credentials go along.
    forward_credentials: bool,
    /// The request's body goes with the callout (`POST`, `PUT`, `PATCH`).
    with_body: bool,
    limits: Outbound,
    /// TLS for `https` URLs (`None` when the URL is `http` only, or the configuration could
    /// not be built: `tls_error` says why).
    tls: Option<Tls>,
    tls_error: Option<String>,
}

/// Callout response headers never set on the request: the framing and hop-by-hop headers
/// (the body is replaced whole), and `Server` (as Membrane filters it).
fn skipped(name: &header::HeaderName) -> bool {
    name == header::SERVER || outbound::hop_by_hop(name)
}

impl PolicyFactory for Call {
    const NAME: &'static str = "call";
    type Settings = CallSettings;

    /// Compiles the URL (a load error when a URL without placeholders is not an absolute
    /// http(s) URL) and, when it may be `https`, the TLS client configuration.
    fn compile(c: CallSettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        let method = match c.method.as_deref().map(str::trim) {
            None | Some("") => Method::GET,
            Some(m) => Method::from_bytes(m.as_bytes())
                .map_err(|_| err("method", format!("`{m}` is not an HTTP method")))?,
        };
        let with_body = method == Method::POST || method == Method::PUT || method == Method::PATCH;
        let (url, https) = if let Some(at) = c.url.find("${") {
            fixed_origin(&c.url[..at]).map_err(|m| err("url", m))?;
            let t = compile_template(&c.url, c.language, ctx).map_err(|m| err("url", m))?;
            let https = !c
                .url
                .trim_start()
                .to_ascii_lowercase()
                .starts_with("http://");
            (Url::Template(t), https)
        } else {
            let e = Endpoint::parse(&c.url).map_err(|m| err("url", m))?;
            (Url::Fixed(c.url.trim().to_owned()), e.https)
        };
        let (tls, tls_error) = if https {
            match turnpike_tls::client_config(None, ctx.base_dir, false, "call") {
                Ok(config) => (
                    Some(Tls {
                        config,
                        server_name: None,
                    }),
                    None,
                ),
                Err(m) if matches!(url, Url::Fixed(_)) => return Err(err("url", m)),
                Err(m) => (None, Some(m)),
            }
        } else {
            (None, None)
        };
        Ok(Call {
            url,
            method,
            forward_credentials: c.forward_credentials,
            with_body,
            limits: Outbound::of(ctx),
            tls,
            tls_error,
        })
    }
}

impl Call {
    /// Starts the callout for the exchange's request; the outcome waits for it.
    fn call(&self, ex: &mut Exchange) -> Outcome {
        let url = match &self.url {
            Url::Fixed(u) => u.clone(),
            Url::Template(t) => {
                // Each value is one path segment or query value, encoded as in `target.url`.
                t.prepare(ex, Message::Request);
                t.render_uri(ex)
            }
        };
        let request_id = ex.request_id.to_str().unwrap_or("").to_owned();
        let to = match Endpoint::parse(&url) {
            Ok(e) => e,
            Err(m) => return fail(&request_id, &url, Failure::BadUrl(m)),
        };
        let tls = match (to.https, &self.tls) {
            (false, _) => None,
            (true, Some(t)) => Some(t.clone()),
            (true, None) => {
                let why = self.tls_error.clone().unwrap_or_default();
                return fail(&request_id, &url, Failure::Tls(why));
            }
        };
        let req = match self.request(ex, &to) {
            Ok(r) => r,
            Err(m) => return fail(&request_id, &url, Failure::BadUrl(m)),
        };
        tracing::debug!(request_id, %url, method = %self.method, "call");
        let limits = self.limits;
        let (rid, u) = (request_id.clone(), url.clone());
        let future = async move {
            let result = outbound::send(&to, req, tls.as_ref(), limits).await;
            Box::new(move |ex: &mut Exchange| match result {
                Ok(reply) => {
                    tracing::debug!(
                        request_id = rid,
                        url = u,
                        status = reply.head.status.as_u16(),
                        "call answered"
                    );
                    apply(ex, reply);
                    Outcome::Continue
                }
                Err(f) => fail(&rid, &u, f),
            }) as Resume
        };
        let timeout = self.limits.timeout;
        Outcome::Wait(Wait::new(future, timeout, move |_| {
            tracing::warn!(request_id, %url, ?timeout, "call: no answer in time");
            Outcome::Reject(
                Problem::new(&problems::UPSTREAM_TIMEOUT)
                    .with_detail("the callout did not answer in time"),
            )
        }))
    }

    /// The callout request: the method, every request header but the hop-by-hop ones (and
    /// `Content-Type` without a body), `Host` for the URL, the body for POST, PUT and PATCH.
    fn request(&self, ex: &Exchange, to: &Endpoint) -> Result<Request<Bytes>, String> {
        let mut headers = HeaderMap::with_capacity(ex.request.headers.len() + 1);
        for (name, value) in &ex.request.headers {
            if outbound::hop_by_hop(name)
                || name == header::HOST
                || (!self.forward_credentials && credential(name))
                // The answer is kept as it comes: ask for it uncompressed.
                || name == header::ACCEPT_ENCODING
                || (!self.with_body && name == header::CONTENT_TYPE)
            {
                continue;
            }
            headers.append(name.clone(), value.clone());
        }
        let host = HeaderValue::from_str(&to.authority).map_err(|e| e.to_string())?;
        headers.insert(header::HOST, host);
        let body = if self.with_body {
            ex.request_bytes().cloned().unwrap_or_default()
        } else {
            Bytes::new()
        };
        let mut req = Request::new(body);
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = http::Uri::from(to.path_and_query.clone());
        *req.headers_mut() = headers;
        Ok(req)
    }
}

/// Puts the callout's answer into the request: its body, and its headers (each replacing the
/// request's headers of that name).
fn apply(ex: &mut Exchange, reply: Reply) {
    let Reply { head, body } = reply;
    let h = &mut ex.request.headers;
    for name in head.headers.keys() {
        if !skipped(name) {
            h.remove(name);
        }
    }
    for (name, value) in &head.headers {
        if !skipped(name) {
            h.append(name.clone(), value.clone());
        }
    }
    h.remove(header::CONTENT_LENGTH);
    h.remove(header::TRANSFER_ENCODING);
    ex.request_body = turnpike_core::Body::full(body);
    turnpike_core::json::forget_request_json(ex);
    ex.extensions.remove::<BodyInspected>();
}

/// Whether `name` carries the client's credentials.
fn credential(name: &header::HeaderName) -> bool {
    name == header::AUTHORIZATION || name == header::PROXY_AUTHORIZATION || name == header::COOKIE
}

/// Checks that the text before a URL template's first placeholder fixes the scheme, host and
/// port (`http://host:port/` or `…?`): no value a request sends can choose where the callout
/// goes.
fn fixed_origin(prefix: &str) -> Result<(), String> {
    let lower = prefix.trim_start().to_ascii_lowercase();
    let rest = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"))
        .ok_or("a placeholder in the scheme: the URL must start with `http://` or `https://` as written")?;
    match rest.find(['/', '?']) {
        Some(end) if end > 0 => Ok(()),
        _ => Err("a placeholder in the host or port: write `scheme://host:port/` before the first placeholder (values go into the path and query only)".to_owned()),
    }
}

/// Logs a failed callout with the request id and answers with its problem.
fn fail(request_id: &str, url: &str, f: Failure) -> Outcome {
    tracing::warn!(request_id, url, "call failed: {f}");
    Outcome::Reject(f.problem("callout"))
}

impl Policy for Call {
    fn name(&self) -> &'static str {
        "call"
    }

    fn body_need(&self) -> BodyNeed {
        let url = matches!(&self.url, Url::Template(t) if t.needs_body());
        if self.with_body || url {
            BodyNeed::Buffer
        } else {
            BodyNeed::None
        }
    }

    /// Calls the URL and replaces the request's body and headers with the answer's.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        self.call(ex)
    }

    /// As in the request phase (Membrane's `call` works on the request in both phases).
    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        self.call(ex)
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http_body_util::BodyExt;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;

    use super::*;
    use crate::testutil::{exchange, plain};

    fn compile(v: serde_json::Value) -> Result<Call, CompileError> {
        Call::compile(serde_json::from_value(v).unwrap(), &plain())
    }

    /// A server that records each request and answers JSON with a `Set-Cookie` and a
    /// `Server` header.
    async fn server() -> (
        std::net::SocketAddr,
        std::sync::Arc<std::sync::Mutex<Vec<(String, String, HeaderMap, Bytes)>>>,
    ) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let s = seen.clone();
        tokio::task::spawn_local(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let s = s.clone();
                tokio::task::spawn_local(async move {
                    let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                        let s = s.clone();
                        async move {
                            let (p, b) = req.into_parts();
                            let body = b.collect().await.unwrap().to_bytes();
                            s.lock().unwrap().push((
                                p.method.to_string(),
                                p.uri.to_string(),
                                p.headers.clone(),
                                body,
                            ));
                            let res = http::Response::builder()
                                .status(if p.uri.path() == "/missing" { 404 } else { 200 })
                                .header("content-type", "application/json")
                                .header("set-cookie", "SESSION=akj34")
                                .header("server", "test")
                                .body(http_body_util::Full::new(Bytes::from(
                                    r#"{"id":7,"name":"Bike"}"#,
                                )))
                                .unwrap();
                            Ok::<_, Infallible>(res)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        (addr, seen)
    }

    async fn run(p: &Call, ex: &mut Exchange) -> Outcome {
        match p.on_request(ex) {
            Outcome::Wait(w) => match tokio::time::timeout(w.timeout, w.future).await {
                Ok(resume) => resume(ex),
                Err(_) => (w.on_timeout)(ex),
            },
            o => o,
        }
    }

    /// A header or body value cannot leave its path segment: `../../admin?x=1` stays one
    /// segment, and a JSONPath value cannot add a host; credentials go only when asked.
    #[tokio::test(flavor = "current_thread")]
    async fn values_are_encoded_and_credentials_stay_home() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let (addr, seen) = server().await;
                let p = compile(serde_json::json!({
                    "url": format!("http://{addr}/c/${{header.X}}?q=${{header.X}}")
                }))
                .unwrap();
                let mut ex = exchange(
                    "GET",
                    "/in",
                    &[("x", "../../admin?x=1"), ("cookie", "s=1")],
                    "",
                );
                assert!(matches!(run(&p, &mut ex).await, Outcome::Continue));
                let (_, uri, headers, _) = seen.lock().unwrap()[0].clone();
                assert_eq!(uri, "/c/..%2F..%2Fadmin%3Fx%3D1?q=..%2F..%2Fadmin%3Fx%3D1");
                assert!(headers.get("cookie").is_none());
                let p = compile(serde_json::json!({
                    "url": format!("http://{addr}/j/${{$.key}}.json"),
                    "language": "jsonpath",
                    "method": "POST",
                    "forwardCredentials": true,
                }))
                .unwrap();
                let mut ex = exchange(
                    "POST",
                    "/in",
                    &[
                        ("content-type", "application/json"),
                        ("authorization", "Bearer t"),
                    ],
                    r#"{"key": "@evil.example:81/x"}"#,
                );
                assert!(matches!(run(&p, &mut ex).await, Outcome::Continue));
                let (_, uri, headers, _) = seen.lock().unwrap()[1].clone();
                assert_eq!(uri, "/j/%40evil.example%3A81%2Fx.json");
                assert_eq!(headers["authorization"], "Bearer t");
            })
            .await;
    }

    #[test]
    fn settings() {
        let p = compile(serde_json::json!({"url": "http://localhost:3000/login"})).unwrap();
        assert_eq!(p.method, Method::GET);
        assert_eq!(p.body_need(), BodyNeed::None);
        assert!(p.tls.is_none());
        let p = compile(
            serde_json::json!({"url": "http://x/${$.a}", "language": "jsonpath", "method": "POST"}),
        )
        .unwrap();
        assert!(p.with_body);
        assert_eq!(p.body_need(), BodyNeed::Buffer);
        let p = compile(serde_json::json!({"url": "http://x/${property.id}"})).unwrap();
        assert_eq!(p.body_need(), BodyNeed::None);
        for bad in [
            serde_json::json!({"url": "localhost:3000/x"}),
            serde_json::json!({"url": "/relative"}),
            serde_json::json!({"url": "http://x/", "method": "NO PE"}),
            serde_json::json!({"url": "http://x/${nope nope}"}),
            // Placeholders may not choose the scheme, host or port.
            serde_json::json!({"url": "${property.url}"}),
            serde_json::json!({"url": "http${property.s}://x/"}),
            serde_json::json!({"url": "http://${header.host}/x"}),
            serde_json::json!({"url": "http://x:${header.port}/x"}),
            serde_json::json!({"url": "http://127.0.0.1${$.key}.json", "language": "jsonpath"}),
        ] {
            assert!(compile(bad.clone()).is_err(), "{bad}");
        }
        let e: Result<CallSettings, _> =
            serde_json::from_value(serde_json::json!({"url": "http://x/", "timeout": 3}));
        assert!(e.is_err());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_answer_replaces_the_request_body_and_sets_headers() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let (addr, seen) = server().await;
                let p = compile(serde_json::json!({
                    "url": format!("http://{addr}/products/${{property.id}}")
                }))
                .unwrap();
                let mut ex = exchange(
                    "GET",
                    "/in",
                    &[
                        ("authorization", "Bearer t"),
                        ("content-type", "text/plain"),
                        ("accept-encoding", "gzip"),
                        ("connection", "x-hop"),
                    ],
                    "",
                );
                turnpike_core::properties::set_property(&mut ex, "id", serde_json::json!(7));
                assert!(matches!(run(&p, &mut ex).await, Outcome::Continue));
                let (method, uri, headers, body) = seen.lock().unwrap()[0].clone();
                assert_eq!((method.as_str(), uri.as_str()), ("GET", "/products/7"));
                assert!(
                    headers.get("authorization").is_none(),
                    "not sent unless asked"
                );
                assert_eq!(headers["host"], addr.to_string().as_str());
                assert!(headers.get("content-type").is_none());
                assert!(headers.get("accept-encoding").is_none());
                assert!(headers.get("connection").is_none());
                assert!(body.is_empty());
                assert_eq!(
                    ex.request_bytes().unwrap().as_ref(),
                    br#"{"id":7,"name":"Bike"}"#
                );
                assert_eq!(ex.request.headers["content-type"], "application/json");
                assert_eq!(ex.request.headers["set-cookie"], "SESSION=akj34");
                assert!(ex.request.headers.get("server").is_none());
                // The JSON of the new body is what templates read now.
                let v = turnpike_core::json::request_json(&mut ex).unwrap();
                assert_eq!(v["name"], "Bike");

                // POST sends the current body; a 404 answer is an answer too.
                let p = compile(serde_json::json!({
                    "url": format!("http://{addr}/missing"), "method": "POST"
                }))
                .unwrap();
                let mut ex = exchange(
                    "GET",
                    "/",
                    &[("content-type", "application/json")],
                    r#"{"a":1}"#,
                );
                assert!(matches!(run(&p, &mut ex).await, Outcome::Continue));
                let (method, _, headers, body) = seen.lock().unwrap()[1].clone();
                assert_eq!(method, "POST");
                assert_eq!(body.as_ref(), br#"{"a":1}"#);
                assert_eq!(headers["content-type"], "application/json");
                assert_eq!(headers["content-length"], "7");
            })
            .await;
    }

    #[tokio::test(flavor = "current_thread")]
    async fn failures_are_problems() {
        // Nothing listens on a port that was just free.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let p = compile(serde_json::json!({"url": format!("http://127.0.0.1:{port}/")})).unwrap();
        let mut ex = exchange("GET", "/", &[], "");
        match run(&p, &mut ex).await {
            Outcome::Reject(pr) => {
                assert_eq!(pr.kind(), "upstream-unreachable");
                assert!(!pr.detail.unwrap_or_default().contains("127.0.0.1"));
            }
            o => panic!("{o:?}"),
        }

        // A server that accepts and never answers: the timeout.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut p = compile(serde_json::json!({
            "url": format!("http://{}/", listener.local_addr().unwrap())
        }))
        .unwrap();
        p.limits.timeout = std::time::Duration::from_millis(200);
        match run(&p, &mut ex).await {
            Outcome::Reject(pr) => assert_eq!(pr.status.as_u16(), 504),
            o => panic!("{o:?}"),
        }
        // An answer larger than the body size limit.
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let (addr, _) = server().await;
                let mut p = compile(serde_json::json!({"url": format!("http://{addr}/")})).unwrap();
                p.limits.max_body_size = 5;
                match run(&p, &mut ex).await {
                    Outcome::Reject(pr) => assert_eq!(pr.kind(), "upstream-error"),
                    o => panic!("{o:?}"),
                }
            })
            .await;
    }
}
