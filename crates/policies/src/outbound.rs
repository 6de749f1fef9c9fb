//! HTTP requests that policies send themselves (`call`, `shadowing`): one HTTP/1.1 connection
//! per request (plain, or TLS with the project's rustls setup), opened on the worker's runtime
//! without blocking it, within the gateway's connect timeout, and a response body read into
//! memory up to the gateway's body size limit.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{Request, Response};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use turnpike_core::problem::types as problems;
use turnpike_core::{CompileContext, Problem};

/// The gateway's limits for requests policies send: put into the compile context by the
/// compile stage (from the `gateway:` document); the gateway's defaults otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outbound {
    /// Largest response body read (`limits.maxBodySize`).
    pub max_body_size: u64,
    /// Time to open a connection, TLS handshake included (`timeouts.connect`).
    pub connect_timeout: Duration,
    /// Time for the whole exchange (`timeouts.upstream`).
    pub timeout: Duration,
}

impl Default for Outbound {
    fn default() -> Self {
        Outbound {
            max_body_size: 100 << 20,
            connect_timeout: Duration::from_secs(5),
            timeout: Duration::from_secs(60),
        }
    }
}

impl Outbound {
    /// Runs at load time: the limits of the `gateway:` document, with the gateway's defaults.
    pub fn from_gateway(g: &turnpike_config::GatewaySettings) -> Self {
        let d = Outbound::default();
        let limits = g.limits.as_ref();
        let t = g.timeouts.as_ref();
        Outbound {
            max_body_size: limits
                .and_then(|l| l.max_body_size)
                .map_or(d.max_body_size, |s| s.0),
            connect_timeout: t.and_then(|t| t.connect).map_or(d.connect_timeout, |v| v.0),
            timeout: t.and_then(|t| t.upstream).map_or(d.timeout, |v| v.0),
        }
    }

    /// The limits the compile stage shared, or the defaults.
    pub(crate) fn of(ctx: &CompileContext<'_>) -> Self {
        ctx.get::<Outbound>().copied().unwrap_or_default()
    }
}

/// Why a request could not be sent or its response read. The text is for the log only.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The URL is not an absolute `http` or `https` URL with a host.
    BadUrl(String),
    /// No connection could be opened (name lookup, refused, connect timeout).
    Unreachable(String),
    /// The TLS handshake failed.
    Tls(String),
    /// The peer broke the exchange off or did not answer HTTP.
    Broken(String),
    /// The response body is larger than the limit.
    TooLarge(u64),
}

impl Failure {
    /// The problem a client is answered with: no addresses or library messages in it.
    pub(crate) fn problem(&self, what: &str) -> Problem {
        match self {
            Failure::BadUrl(_) => Problem::new(&problems::INTERNAL)
                .with_detail(format!("the URL of the {what} is not a valid http(s) URL")),
            Failure::Unreachable(_) => Problem::new(&problems::UPSTREAM_UNREACHABLE)
                .with_detail(format!("the {what} could not connect")),
            Failure::Tls(_) => Problem::new(&problems::UPSTREAM_TLS)
                .with_detail(format!("TLS for the {what} failed")),
            Failure::Broken(_) => {
                Problem::new(&problems::UPSTREAM_ERROR).with_detail(format!("the {what} failed"))
            }
            Failure::TooLarge(_) => Problem::new(&problems::UPSTREAM_ERROR).with_detail(format!(
                "the answer to the {what} is larger than the size limit"
            )),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::BadUrl(m) => write!(f, "invalid URL: {m}"),
            Failure::Unreachable(m) => write!(f, "cannot connect: {m}"),
            Failure::Tls(m) => write!(f, "TLS failed: {m}"),
            Failure::Broken(m) => write!(f, "exchange failed: {m}"),
            Failure::TooLarge(n) => write!(f, "response body larger than {n} bytes"),
        }
    }
}

/// TLS for `https` URLs: the client configuration and the name to verify (SNI), `None` for the
/// URL's host.
#[derive(Clone)]
pub(crate) struct Tls {
    pub(crate) config: Arc<rustls::ClientConfig>,
    pub(crate) server_name: Option<String>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

/// The parts of an absolute URL a connection needs.
#[derive(Clone)]
pub(crate) struct Endpoint {
    pub(crate) https: bool,
    /// The host without IPv6 brackets.
    pub(crate) host: String,
    pub(crate) port: u16,
    /// `host[:port]` as written, for the `Host` header.
    pub(crate) authority: String,
    /// Path and query (`/` when the URL has none).
    pub(crate) path_and_query: http::uri::PathAndQuery,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}://{}{}",
            if self.https { "https" } else { "http" },
            self.authority,
            self.path_and_query
        )
    }
}

impl Endpoint {
    /// Parses an absolute `http`/`https` URL; the error says what is wrong.
    pub(crate) fn parse(url: &str) -> Result<Endpoint, String> {
        let uri: http::Uri = url
            .trim()
            .parse()
            .map_err(|e| format!("`{url}` is not an absolute http:// or https:// URL: {e}"))?;
        let https = match uri.scheme_str() {
            Some(s) if s.eq_ignore_ascii_case("http") => false,
            Some(s) if s.eq_ignore_ascii_case("https") => true,
            _ => return Err(format!("`{url}` is not an http:// or https:// URL")),
        };
        let authority = uri
            .authority()
            .ok_or_else(|| format!("`{url}` has no host"))?;
        if authority.as_str().contains('@') {
            return Err(format!(
                "`{url}`: user information in the URL is not supported"
            ));
        }
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        if host.is_empty() {
            return Err(format!("`{url}` has no host"));
        }
        Ok(Endpoint {
            https,
            port: authority.port_u16().unwrap_or(if https { 443 } else { 80 }),
            authority: authority.as_str().to_owned(),
            host,
            path_and_query: uri
                .path_and_query()
                .cloned()
                .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/")),
        })
    }
}

/// A response read whole.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) head: http::response::Parts,
    pub(crate) body: Bytes,
}

/// Sends `req` (its URI in origin form: path and query) to `to` and reads the response with
/// its body, at most `limits.max_body_size` bytes. Runs on the caller's tokio runtime; the
/// caller bounds the whole exchange in time (`limits.timeout`).
pub(crate) async fn send(
    to: &Endpoint,
    req: Request<Bytes>,
    tls: Option<&Tls>,
    limits: Outbound,
) -> Result<Reply, Failure> {
    let tcp = tokio::time::timeout(limits.connect_timeout, connect(&to.host, to.port))
        .await
        .map_err(|_| Failure::Unreachable("connect timed out".into()))?
        .map_err(|e| Failure::Unreachable(e.to_string()))?;
    let _ = tcp.set_nodelay(true);
    let req = req.map(Full::new);
    if !to.https {
        return exchange(TokioIo::new(tcp), req, limits.max_body_size).await;
    }
    let Some(tls) = tls else {
        return Err(Failure::Tls("no TLS configuration for https".into()));
    };
    let name = tls.server_name.as_deref().unwrap_or(&to.host).to_owned();
    let name = ServerName::try_from(name)
        .map_err(|e| Failure::Tls(format!("invalid server name: {e}")))?;
    let stream = tokio::time::timeout(
        limits.connect_timeout,
        turnpike_tls::connect(Arc::clone(&tls.config), name, tcp),
    )
    .await
    .map_err(|_| Failure::Tls("handshake timed out".into()))?
    .map_err(|e| Failure::Tls(e.to_string()))?;
    exchange(TokioIo::new(stream), req, limits.max_body_size).await
}

/// Opens a TCP connection to the first address of `host` that accepts one.
async fn connect(host: &str, port: u16) -> std::io::Result<TcpStream> {
    let mut last = None;
    for addr in tokio::net::lookup_host((host, port)).await? {
        match TcpStream::connect(addr).await {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("`{host}` has no address"),
        )
    }))
}

/// One request on a new connection, the connection driven alongside until the response body
/// is read.
async fn exchange<IO>(
    io: TokioIo<IO>,
    req: Request<Full<Bytes>>,
    max: u64,
) -> Result<Reply, Failure>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| Failure::Broken(e.to_string()))?;
    let work = async move {
        let res: Response<hyper::body::Incoming> = sender
            .send_request(req)
            .await
            .map_err(|e| Failure::Broken(e.to_string()))?;
        let (head, body) = res.into_parts();
        let body = read_body(body, max).await?;
        Ok(Reply { head, body })
    };
    tokio::pin!(work);
    tokio::pin!(conn);
    let mut conn_done = false;
    loop {
        tokio::select! {
            r = &mut work => return r,
            c = &mut conn, if !conn_done => {
                // The response (or its error) still arrives through `work`.
                conn_done = true;
                if let Err(e) = c {
                    tracing::debug!("outbound connection ended: {e}");
                }
            }
        }
    }
}

/// Reads a body into memory, failing once it exceeds `max` bytes.
async fn read_body(mut body: hyper::body::Incoming, max: u64) -> Result<Bytes, Failure> {
    use http_body::Body as _;
    let mut buf = BytesMut::new();
    while let Some(frame) =
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
    {
        let frame = frame.map_err(|e| Failure::Broken(e.to_string()))?;
        if let Ok(data) = frame.into_data() {
            if (buf.len() + data.len()) as u64 > max {
                return Err(Failure::TooLarge(max));
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf.freeze())
}

/// Request headers never copied onto a request a policy sends: hop-by-hop headers, and the
/// framing, which the new request sets itself.
pub(crate) fn hop_by_hop(name: &http::HeaderName) -> bool {
    use http::header;
    name == header::CONNECTION
        || name == header::TRANSFER_ENCODING
        || name == header::CONTENT_LENGTH
        || name == header::TE
        || name == header::UPGRADE
        || name == header::TRAILER
        || name == header::PROXY_AUTHORIZATION
        || name == header::EXPECT
        || name.as_str() == "keep-alive"
        || name.as_str() == "proxy-connection"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        let e = Endpoint::parse("https://api.example.com/shop/v2/products?limit=1").unwrap();
        assert!(e.https);
        assert_eq!((e.host.as_str(), e.port), ("api.example.com", 443));
        assert_eq!(e.authority, "api.example.com");
        assert_eq!(e.path_and_query.as_str(), "/shop/v2/products?limit=1");
        let e = Endpoint::parse("http://[::1]:8080").unwrap();
        assert!(!e.https);
        assert_eq!((e.host.as_str(), e.port), ("::1", 8080));
        assert_eq!(e.path_and_query.as_str(), "/");
        assert!(Endpoint::parse("ftp://x/").is_err());
        assert!(Endpoint::parse("/relative").is_err());
        assert!(Endpoint::parse("http://u:p@x/").is_err());
        assert!(Endpoint::parse("http://x y/").is_err());
    }

    #[test]
    fn limits_from_the_gateway_document() {
        let g: turnpike_config::GatewaySettings = serde_json::from_value(serde_json::json!({
            "limits": {"maxBodySize": "1KB"},
            "timeouts": {"connect": "2s"}
        }))
        .unwrap();
        let o = Outbound::from_gateway(&g);
        assert_eq!(o.connect_timeout, Duration::from_secs(2));
        assert_eq!(o.timeout, Duration::from_secs(60));
        assert!(o.max_body_size >= 1000 && o.max_body_size <= 1024);
        assert_eq!(
            Outbound::from_gateway(&Default::default()),
            Outbound::default()
        );
    }

    #[test]
    fn problems_carry_no_internals() {
        for f in [
            Failure::BadUrl("x".into()),
            Failure::Unreachable("10.0.0.1:80 refused".into()),
            Failure::Tls("bad cert".into()),
            Failure::Broken("reset".into()),
            Failure::TooLarge(5),
        ] {
            let p = f.problem("callout");
            let d = p.detail.unwrap_or_default();
            assert!(!d.contains("10.0.0.1") && !d.contains("cert") && !d.contains("reset"));
        }
    }
}
