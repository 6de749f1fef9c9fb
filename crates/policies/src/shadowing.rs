//! `shadowing`: Membrane's traffic shadowing. Sends a copy of each request (method, headers,
//! body, the original path and query) to every shadow target in the background, once the
//! request's body has passed on its way to the API's target; the client's request goes on
//! unchanged and never waits for the copies. Shadow answers are discarded: a 5xx answer is
//! logged at info level, a failure as a warning.
//!
//! The body is copied as it streams (up to the gateway's body size limit; a larger body is not
//! shadowed), so a request is shadowed only when its body was read whole. At most
//! [`MAX_IN_FLIGHT`] copies of one policy are in flight at once: further copies are dropped
//! (and logged). Each copy has the gateway's connect and upstream timeouts.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::{header, HeaderMap, HeaderValue, Method, Request};
use http_body::{Body as _, Frame};
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_config::TargetSsl;
use turnpike_core::body::BodyError;
use turnpike_core::{
    Body, CompileContext, CompileError, Exchange, Outcome, Phases, Policy, PolicyFactory,
};

use crate::err;
use crate::outbound::{self, Endpoint, Outbound, Tls};

/// The most copies of one `shadowing` policy in flight at once.
pub const MAX_IN_FLIGHT: usize = 256;

/// `shadowing`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShadowingSettings {
    /// Where copies go: a list of `target:` entries.
    pub targets: Vec<ShadowTargetEntry>,
}

/// One entry of `targets`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShadowTargetEntry {
    /// The shadow target.
    pub target: ShadowTarget,
}

/// A shadow target: `host` and `port` (the request's path and query are appended), or `url`
/// (used as it is).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShadowTarget {
    /// The host name or IP address.
    #[serde(default)]
    pub host: Option<String>,
    /// The port (default 80, or 443 with `ssl`).
    #[serde(default)]
    pub port: Option<u16>,
    /// A full `http://` or `https://` URL, sent to as it is (the request's path is not
    /// appended).
    #[serde(default)]
    pub url: Option<String>,
    /// TLS to the shadow target (its presence makes `host`/`port` https).
    #[serde(default)]
    pub ssl: Option<TargetSsl>,
}

#[derive(Debug)]
enum Dest {
    /// A fixed URL.
    Url(Endpoint),
    /// Host and port: the request's path and query are appended.
    HostPort {
        https: bool,
        host: String,
        port: u16,
        authority: String,
    },
}

#[derive(Debug)]
struct Shadow {
    dest: Dest,
    tls: Option<Tls>,
    /// Log TLS failures as warnings (else at debug level).
    show_tls_errors: bool,
}

impl Shadow {
    /// The endpoint a copy of a request for `path_and_query` goes to, and its text for logs.
    fn endpoint(&self, path_and_query: &str) -> Result<(Endpoint, String), String> {
        match &self.dest {
            Dest::Url(e) => Ok((e.clone(), format!("{e:?}"))),
            Dest::HostPort {
                https,
                host,
                port,
                authority,
            } => {
                let url = format!(
                    "{}://{authority}{path_and_query}",
                    if *https { "https" } else { "http" }
                );
                Ok((
                    Endpoint {
                        https: *https,
                        host: host.clone(),
                        port: *port,
                        authority: authority.clone(),
                        path_and_query: path_and_query.parse().map_err(|e| format!("{e}"))?,
                    },
                    url,
                ))
            }
        }
    }
}

#[derive(Debug)]
struct Shared {
    shadows: Vec<Shadow>,
    in_flight: Arc<tokio::sync::Semaphore>,
    limits: Outbound,
}

/// The compiled `shadowing` policy.
#[derive(Debug)]
pub struct Shadowing(Arc<Shared>);

fn compile_target(
    t: &ShadowTarget,
    at: &str,
    ctx: &CompileContext<'_>,
) -> Result<Shadow, CompileError> {
    let key = |k: &str| format!("{at}.{k}");
    let dest = match (&t.url, &t.host) {
        (Some(_), Some(_)) => {
            return Err(err(
                at,
                "give either `url` or `host` (with `port`), not both",
            ))
        }
        (None, None) => return Err(err(at, "give `host` (with `port`) or `url`")),
        (Some(url), None) => {
            if t.port.is_some() {
                return Err(err(
                    &key("port"),
                    "`port` goes with `host`; `url` has its own",
                ));
            }
            let e = Endpoint::parse(url).map_err(|m| err(&key("url"), m))?;
            if t.ssl.is_some() && !e.https {
                return Err(err(&key("ssl"), "`ssl` needs an https:// URL"));
            }
            Dest::Url(e)
        }
        (None, Some(host)) => {
            let host = host.trim();
            if host.is_empty() || host.contains(['/', ' ', '@']) {
                return Err(err(&key("host"), "not a host name or IP address"));
            }
            let https = t.ssl.is_some();
            let port = t.port.unwrap_or(if https { 443 } else { 80 });
            let bare = host.trim_start_matches('[').trim_end_matches(']');
            let authority = if bare.contains(':') {
                format!("[{bare}]:{port}")
            } else {
                format!("{bare}:{port}")
            };
            authority
                .parse::<http::uri::Authority>()
                .map_err(|_| err(&key("host"), "not a host name or IP address"))?;
            Dest::HostPort {
                https,
                host: bare.to_owned(),
                port,
                authority,
            }
        }
    };
    let https = match &dest {
        Dest::Url(e) => e.https,
        Dest::HostPort { https, .. } => *https,
    };
    let tls = if https {
        let config = turnpike_tls::client_config(t.ssl.as_ref(), ctx.base_dir, false, "shadowing")
            .map_err(|m| err(&key("ssl"), m))?;
        Some(Tls {
            config,
            server_name: t.ssl.as_ref().and_then(|s| s.server_name.clone()),
        })
    } else {
        None
    };
    Ok(Shadow {
        dest,
        tls,
        show_tls_errors: t
            .ssl
            .as_ref()
            .and_then(|s| s.show_ssl_exceptions)
            .is_none_or(|f| f.0),
    })
}

impl PolicyFactory for Shadowing {
    const NAME: &'static str = "shadowing";
    const PHASES: Phases = Phases::REQUEST;
    type Settings = ShadowingSettings;

    /// Checks the targets and builds their TLS client configurations.
    fn compile(s: ShadowingSettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        if s.targets.is_empty() {
            return Err(err("targets", "name at least one shadow target"));
        }
        let shadows = s
            .targets
            .iter()
            .enumerate()
            .map(|(i, t)| compile_target(&t.target, &format!("targets[{i}].target"), ctx))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Shadowing(Arc::new(Shared {
            shadows,
            in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
            limits: Outbound::of(ctx),
        })))
    }
}

/// What a copy of the request is made of, apart from its body.
struct Head {
    method: Method,
    headers: HeaderMap,
    path_and_query: String,
    request_id: String,
}

impl Shared {
    /// Sends a copy of the request with `body` to every shadow target, each on a task of its
    /// own on `rt`.
    fn dispatch(self: &Arc<Self>, rt: &tokio::runtime::Handle, head: &Head, body: Bytes) {
        for (i, shadow) in self.shadows.iter().enumerate() {
            let (to, url) = match shadow.endpoint(&head.path_and_query) {
                Ok(e) => e,
                Err(m) => {
                    tracing::warn!(request_id = head.request_id, "shadowing: {m}");
                    continue;
                }
            };
            let Ok(permit) = Arc::clone(&self.in_flight).try_acquire_owned() else {
                tracing::warn!(
                    request_id = head.request_id,
                    url,
                    "shadowing: {MAX_IN_FLIGHT} copies in flight, this one is dropped"
                );
                continue;
            };
            let mut headers = head.headers.clone();
            if !headers.contains_key(header::HOST) {
                if let Ok(v) = HeaderValue::from_str(&to.authority) {
                    headers.insert(header::HOST, v);
                }
            }
            let mut req = Request::new(body.clone());
            *req.method_mut() = head.method.clone();
            *req.uri_mut() = http::Uri::from(to.path_and_query.clone());
            *req.headers_mut() = headers;
            let shared = Arc::clone(self);
            let request_id = head.request_id.clone();
            rt.spawn(async move {
                let _permit = permit;
                let Some(shadow) = shared.shadows.get(i) else {
                    return;
                };
                let limits = shared.limits;
                let sent = tokio::time::timeout(
                    limits.timeout,
                    outbound::send(&to, req, shadow.tls.as_ref(), limits),
                )
                .await;
                match sent {
                    Ok(Ok(reply)) if reply.head.status.is_server_error() => tracing::info!(
                        request_id,
                        "shadowing: {url} returned StatusCode {}",
                        reply.head.status.as_u16()
                    ),
                    Ok(Ok(reply)) => tracing::debug!(
                        request_id,
                        "shadowing: {url} returned StatusCode {}",
                        reply.head.status.as_u16()
                    ),
                    Ok(Err(outbound::Failure::Tls(m))) if !shadow.show_tls_errors => {
                        tracing::debug!(request_id, "shadowing: {url}: TLS failed: {m}")
                    }
                    Ok(Err(f)) => tracing::warn!(request_id, "shadowing: {url}: {f}"),
                    Err(_) => tracing::warn!(request_id, "shadowing: {url}: no answer in time"),
                }
            });
        }
    }
}

impl Policy for Shadowing {
    fn name(&self) -> &'static str {
        "shadowing"
    }

    fn response_needs_request(&self) -> bool {
        false
    }

    /// Takes a copy of the request head and sends the copies once the body has passed (at
    /// once when it is empty or already in memory).
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            tracing::debug!("shadowing: no runtime to send copies on");
            return Outcome::Continue;
        };
        let mut headers = HeaderMap::with_capacity(ex.request.headers.len());
        for (name, value) in &ex.request.headers {
            if !outbound::hop_by_hop(name) {
                headers.append(name.clone(), value.clone());
            }
        }
        if !headers.contains_key(header::HOST) {
            if let Some(v) = ex
                .original_uri
                .authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
            {
                headers.insert(header::HOST, v);
            }
        }
        let head = Head {
            method: ex.request.method.clone(),
            headers,
            path_and_query: ex
                .original_uri
                .path_and_query()
                .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned()),
            request_id: ex.request_id.to_str().unwrap_or("").to_owned(),
        };
        if let Some(b) = ex.request_bytes() {
            self.0.dispatch(&rt, &head, b.clone());
            return Outcome::Continue;
        }
        if ex.request_body.is_end_stream() {
            self.0.dispatch(&rt, &head, Bytes::new());
            return Outcome::Continue;
        }
        let shared = Arc::clone(&self.0);
        let limit = self.0.limits.max_body_size;
        let inner = std::mem::take(&mut ex.request_body);
        let expected = inner.size_hint().exact();
        ex.request_body = Body::stream(Tee {
            inner,
            buf: BytesMut::new(),
            limit,
            expected,
            on_end: Some(Box::new(move |body| shared.dispatch(&rt, &head, body))),
        });
        Outcome::Continue
    }
}

type OnEnd = Box<dyn FnOnce(Bytes) + Send>;

/// The request body on its way to the target, copied as it passes; once it has passed whole,
/// the copy goes to `on_end`.
struct Tee {
    inner: Body,
    buf: BytesMut,
    limit: u64,
    /// The body's length when known: reaching it is the end.
    expected: Option<u64>,
    on_end: Option<OnEnd>,
}

impl Tee {
    fn finish(&mut self) {
        if let Some(f) = self.on_end.take() {
            f(std::mem::take(&mut self.buf).freeze());
        }
    }
}

impl http_body::Body for Tee {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(data), true) = (frame.data_ref(), this.on_end.is_some()) {
                    if (this.buf.len() + data.len()) as u64 > this.limit {
                        tracing::debug!("shadowing: the body is larger than the limit, not copied");
                        this.on_end = None;
                        this.buf = BytesMut::new();
                    } else {
                        this.buf.extend_from_slice(data);
                    }
                }
                if this.inner.is_end_stream()
                    || this.expected.is_some_and(|n| this.buf.len() as u64 >= n)
                {
                    this.finish();
                }
            }
            Poll::Ready(None) => this.finish(),
            Poll::Ready(Some(Err(_))) => this.on_end = None,
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
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

    fn compile(v: serde_json::Value) -> Result<Shadowing, CompileError> {
        Shadowing::compile(serde_json::from_value(v).unwrap(), &plain())
    }

    #[test]
    fn targets() {
        let s = compile(serde_json::json!({"targets": [
            {"target": {"host": "localhost", "port": 3001}},
            {"target": {"url": "http://shadow.example/x?y=1"}},
            {"target": {"host": "::1"}}
        ]}))
        .unwrap();
        let (e, url) = s.0.shadows[0].endpoint("/products?a=1").unwrap();
        assert_eq!(url, "http://localhost:3001/products?a=1");
        assert_eq!((e.host.as_str(), e.port), ("localhost", 3001));
        let (_, url) = s.0.shadows[1].endpoint("/products").unwrap();
        assert_eq!(url, "http://shadow.example/x?y=1");
        let (e, url) = s.0.shadows[2].endpoint("/").unwrap();
        assert_eq!((e.host.as_str(), url.as_str()), ("::1", "http://[::1]:80/"));
        for bad in [
            serde_json::json!({"targets": []}),
            serde_json::json!({"targets": [{"target": {}}]}),
            serde_json::json!({"targets": [{"target": {"host": "a", "url": "http://a/"}}]}),
            serde_json::json!({"targets": [{"target": {"url": "ftp://a/"}}]}),
            serde_json::json!({"targets": [{"target": {"url": "http://a/", "ssl": {}}}]}),
            serde_json::json!({"targets": [{"target": {"host": "a b"}}]}),
        ] {
            assert!(compile(bad.clone()).is_err(), "{bad}");
        }
        let e: Result<ShadowingSettings, _> = serde_json::from_value(
            serde_json::json!({"targets": [{"target": {"host": "a", "method": "GET"}}]}),
        );
        assert!(e.is_err());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn copies_go_out_once_the_body_has_passed() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let tx = tx.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                        let tx = tx.clone();
                        async move {
                            let (p, b) = req.into_parts();
                            let body = b.collect().await.unwrap().to_bytes();
                            let _ = tx.send((p.method, p.uri.to_string(), p.headers, body));
                            Ok::<_, Infallible>(http::Response::new(http_body_util::Full::new(
                                Bytes::from("ignored"),
                            )))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        let s = compile(serde_json::json!({"targets": [
            {"target": {"host": "127.0.0.1", "port": addr.port()}}
        ]}))
        .unwrap();
        // A body in memory is copied at once.
        let mut ex = exchange(
            "POST",
            "/orders?x=1",
            &[
                ("host", "shop.example"),
                ("x-a", "b"),
                ("connection", "close"),
            ],
            "{\"n\":1}",
        );
        assert!(matches!(s.on_request(&mut ex), Outcome::Continue));
        let (method, uri, headers, body) = rx.recv().await.unwrap();
        assert_eq!((method.as_str(), uri.as_str()), ("POST", "/orders?x=1"));
        assert_eq!(headers["host"], "shop.example");
        assert_eq!(headers["x-a"], "b");
        assert!(headers.get("connection").is_none());
        assert_eq!(body.as_ref(), b"{\"n\":1}");
        // A streamed body: the copy goes out once the target read it whole.
        let mut ex = exchange("PUT", "/s", &[], "");
        let (sender, rx_frames) = tokio::sync::mpsc::channel::<Bytes>(4);
        ex.request_body = Body::stream(ChannelBody(rx_frames));
        s.on_request(&mut ex);
        let forwarded = tokio::spawn(async move {
            std::mem::take(&mut ex.request_body)
                .collect()
                .await
                .map(|c| c.to_bytes())
                .ok()
        });
        sender.send(Bytes::from("ab")).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(rx.try_recv().is_err());
        sender.send(Bytes::from("cd")).await.unwrap();
        drop(sender);
        assert_eq!(forwarded.await.unwrap().unwrap().as_ref(), b"abcd");
        let (method, _, _, body) = rx.recv().await.unwrap();
        assert_eq!((method.as_str(), body.as_ref()), ("PUT", &b"abcd"[..]));
    }

    /// A body whose chunks arrive through a channel.
    struct ChannelBody(tokio::sync::mpsc::Receiver<Bytes>);

    impl http_body::Body for ChannelBody {
        type Data = Bytes;
        type Error = BodyError;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
            self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
        }
    }
}
