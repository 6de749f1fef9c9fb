//! The gateway's own HTTP/1.1 client for one backend connection.
//!
//! It runs inside the task that serves the client's request: the request head is encoded once
//! (so that a request on a connection the backend had closed can be sent again on another), the
//! body is written while the response head is read (a backend may answer before it has read the
//! whole body), and a response whose body is already in the read buffer (the common case for
//! small answers) is handed back complete, with the connection free again at once. There is no
//! connection task, no channel and no waker between the client side and the backend side.

use std::future::{poll_fn, Future};
use std::io;
use std::mem::MaybeUninit;
use std::pin::{pin, Pin};
use std::task::{ready, Context, Poll};

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderName, HeaderValue};
use http::{HeaderMap, Method, StatusCode, Version};
use http_body::Body as _;
use smallvec::SmallVec;
use tokio::io::{AsyncReadExt, AsyncWrite};
use turnpike_core::body::BodyError;
use turnpike_core::Body;

use super::io::Io;
use crate::headers::Forwarded;

/// Most header fields read in a backend's response head.
const MAX_RESPONSE_HEADERS: usize = 128;
/// A request body held in memory up to this size is sent in the same write as the head.
const COALESCE_BODY: usize = 16 * 1024;
/// How much the read buffer grows by when it is full.
const READ_CHUNK: usize = 16 * 1024;

/// What went wrong in one request/response exchange with a backend.
#[derive(Debug, thiserror::Error)]
pub enum H1Error {
    /// Reading from or writing to the connection failed.
    #[error("connection error: {0}")]
    Io(#[from] io::Error),
    /// The backend closed the connection before its response head was complete.
    #[error("the backend closed the connection before answering")]
    Closed,
    /// The response head is not valid HTTP/1.x.
    #[error("invalid response head: {0}")]
    Parse(String),
    /// The response head is larger than the limit.
    #[error("the response head exceeds {0} bytes")]
    HeadTooLarge(usize),
    /// The backend switched protocols without being asked to.
    #[error("the backend answered 101 Switching Protocols to a request that asked for no upgrade")]
    UnexpectedUpgrade,
    /// The request body could not be read from the client.
    #[error("reading the request body failed")]
    RequestBody(#[source] BodyError),
    /// The request body did not match its announced length.
    #[error("the request body does not match its Content-Length")]
    RequestBodyLength,
}

impl H1Error {
    /// The backend's fault is a closed or reset connection: on a reused connection, the request
    /// may be sent again on another one.
    pub fn is_stale_connection(&self) -> bool {
        match self {
            H1Error::Closed => true,
            H1Error::Io(e) => matches!(
                e.kind(),
                io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::BrokenPipe
                    | io::ErrorKind::UnexpectedEof
            ),
            _ => false,
        }
    }
}

/// How the body of a response is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseFraming {
    /// No body (HEAD, 1xx, 204, 304, or a length of 0).
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Everything until the backend closes the connection.
    Close,
}

/// A parsed response head.
#[derive(Debug)]
pub struct ResponseHead {
    /// Status code.
    pub status: StatusCode,
    /// HTTP/1.0 or HTTP/1.1.
    pub version: Version,
    /// Header fields as received, except the hop-by-hop ones (`Connection` and the fields it
    /// names, `Keep-Alive`, `Transfer-Encoding` and the others of RFC 9110 §7.6.1): their
    /// meaning is in `framing` and `keep_alive`.
    pub headers: HeaderMap,
    /// How the body is delimited.
    pub framing: ResponseFraming,
    /// The connection may carry another request after this response's body.
    pub keep_alive: bool,
}

/// A request ready to be written: its encoded head, with a small body appended.
pub struct Prepared {
    /// The request line, header fields and, when small and in memory, the body.
    pub wire: Bytes,
    /// The request is `HEAD` (its response has no body whatever its headers say).
    pub head_request: bool,
}

impl PreparedBody {
    /// A copy for another attempt, when the body is in memory (a stream can be sent only once).
    pub fn replay(&self) -> Option<PreparedBody> {
        match self {
            PreparedBody::None => Some(PreparedBody::None),
            PreparedBody::Bytes(b) => Some(PreparedBody::Bytes(b.clone())),
            PreparedBody::Stream { .. } => None,
        }
    }
}

/// The part of a request body sent after the head.
pub enum PreparedBody {
    /// Nothing (the body was empty or is in the head's buffer).
    None,
    /// A large body held in memory.
    Bytes(Bytes),
    /// A stream, framed by length or chunked.
    Stream {
        /// The stream.
        body: Body,
        /// Chunked transfer coding (otherwise `Content-Length`).
        chunked: bool,
        /// The announced length.
        length: u64,
    },
}

impl Prepared {
    /// Encodes `parts` (origin-form URI, hop-by-hop headers already removed) with the
    /// `forwarded` fields (in place of received ones) and frames `body`: a body of known size
    /// gets a `Content-Length`, a stream of unknown size is chunked. Returns the request and the
    /// part of its body that goes after `wire`.
    pub fn new(
        parts: &http::request::Parts,
        body: Body,
        forwarded: &Forwarded,
    ) -> (Self, PreparedBody) {
        let had_length = parts.headers.contains_key(header::CONTENT_LENGTH);
        let (small, rest) = match body {
            Body::Empty | Body::Full(None) => (None, PreparedBody::None),
            Body::Full(Some(b)) if b.len() <= COALESCE_BODY => (Some(b), PreparedBody::None),
            Body::Full(Some(b)) => (None, PreparedBody::Bytes(b)),
            other => match other.size_hint().exact() {
                Some(0) if other.is_end_stream() => (None, PreparedBody::None),
                Some(n) => (
                    None,
                    PreparedBody::Stream {
                        body: other,
                        chunked: false,
                        length: n,
                    },
                ),
                None => (
                    None,
                    PreparedBody::Stream {
                        body: other,
                        chunked: true,
                        length: 0,
                    },
                ),
            },
        };
        let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let mut w = Vec::with_capacity(256 + small.as_ref().map_or(0, |b| b.len()));
        w.extend_from_slice(parts.method.as_str().as_bytes());
        w.push(b' ');
        w.extend_from_slice(pq.as_bytes());
        w.extend_from_slice(b" HTTP/1.1\r\n");
        for (name, value) in &parts.headers {
            if name == header::CONTENT_LENGTH
                || name == header::TRANSFER_ENCODING
                || forwarded.replaces(name)
            {
                continue;
            }
            push_field(&mut w, name, value);
        }
        for (name, value) in forwarded.fields() {
            push_field(&mut w, name, value);
        }
        let length = match (&small, &rest) {
            (Some(b), _) => Some(b.len() as u64),
            (None, PreparedBody::Bytes(b)) => Some(b.len() as u64),
            (
                None,
                PreparedBody::Stream {
                    chunked: false,
                    length,
                    ..
                },
            ) => Some(*length),
            (None, PreparedBody::Stream { chunked: true, .. }) => {
                w.extend_from_slice(b"transfer-encoding: chunked\r\n");
                None
            }
            (None, PreparedBody::None) => {
                let expects_content = matches!(parts.method, Method::POST | Method::PUT)
                    || parts.method.as_str() == "PATCH";
                (had_length || expects_content).then_some(0)
            }
        };
        if let Some(n) = length {
            w.extend_from_slice(b"content-length: ");
            w.extend_from_slice(itoa_u64(n, &mut [0u8; 20]));
            w.extend_from_slice(b"\r\n");
        }
        w.extend_from_slice(b"\r\n");
        if let Some(b) = small {
            w.extend_from_slice(&b);
        }
        (
            Prepared {
                wire: Bytes::from(w),
                head_request: parts.method == Method::HEAD,
            },
            rest,
        )
    }

    /// Methods whose request may be repeated without changing what it does (RFC 9110 §9.2.2).
    pub fn idempotent(method: &Method) -> bool {
        matches!(
            *method,
            Method::GET
                | Method::HEAD
                | Method::PUT
                | Method::DELETE
                | Method::OPTIONS
                | Method::TRACE
        )
    }
}

/// Appends `name: value\r\n`.
fn push_field(w: &mut Vec<u8>, name: &HeaderName, value: &HeaderValue) {
    w.extend_from_slice(name.as_str().as_bytes());
    w.extend_from_slice(b": ");
    w.extend_from_slice(value.as_bytes());
    w.extend_from_slice(b"\r\n");
}

fn itoa_u64(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

/// One HTTP/1.1 connection to a backend, idle between exchanges.
pub struct Conn {
    /// The stream.
    pub io: Io,
    /// Bytes read but not yet consumed (empty between exchanges).
    pub rbuf: BytesMut,
    /// The connection has carried a request before.
    pub reused: bool,
    /// Its place in its upstream's count of open connections (a circuit breaker's), given back
    /// when the connection closes.
    pub counted: Option<Counted>,
}

/// One unit of a shared count, given back on drop.
pub struct Counted(pub std::sync::Arc<std::sync::atomic::AtomicU32>);

impl Counted {
    /// Takes one unit of `count`.
    pub fn take(count: &std::sync::Arc<std::sync::atomic::AtomicU32>) -> Counted {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Counted(std::sync::Arc::clone(count))
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Why an exchange failed, and whether another connection may be tried.
#[derive(Debug)]
pub struct Failure {
    /// The error.
    pub error: H1Error,
    /// Nothing of a response arrived and the connection had carried requests before: the
    /// backend most likely closed it while idle.
    pub stale: bool,
}

/// What writing a request left behind.
enum Written {
    /// The whole request is on the wire.
    Complete,
    /// The backend answered before the request body was written; the rest is not sent.
    Partial,
}

/// Room for the head, a chunk's size line, its data and its CRLF, or the end of the body.
const OUT_SLOTS: usize = 4;

/// Writes the request: the head, then the body. Body data that is already at hand when the
/// head is written goes out in the same (vectored) write.
struct Writer {
    /// Buffers still to write, in order (empty ones are skipped).
    out: [Bytes; OUT_SLOTS],
    /// Slots of `out` in use.
    queued: usize,
    /// The body stream still to read, if any.
    stream: Option<Body>,
    chunked: bool,
    /// Bytes the stream may still yield (length framing).
    remaining: u64,
}

enum WriteError {
    Io(io::Error),
    Body(H1Error),
}

impl Writer {
    fn new(prepared: &Prepared, body: PreparedBody) -> Self {
        let mut w = Writer {
            out: Default::default(),
            queued: 0,
            stream: None,
            chunked: false,
            remaining: 0,
        };
        w.push(prepared.wire.clone());
        match body {
            PreparedBody::None => {}
            PreparedBody::Bytes(b) => w.push(b),
            PreparedBody::Stream {
                body,
                chunked,
                length,
            } => {
                w.stream = Some(body);
                w.chunked = chunked;
                w.remaining = length;
            }
        }
        w
    }

    fn push(&mut self, b: Bytes) {
        self.out[self.queued] = b;
        self.queued += 1;
    }

    fn room(&self) -> usize {
        OUT_SLOTS - self.queued
    }

    fn advance(&mut self, mut n: usize) {
        for b in &mut self.out[..self.queued] {
            let take = n.min(b.len());
            let _ = b.split_to(take);
            n -= take;
            if n == 0 {
                break;
            }
        }
        if self.out[..self.queued].iter().all(Bytes::is_empty) {
            self.queued = 0;
        }
    }

    /// Takes the body's frames that are ready while there is room for them. `Ready(Ok)` when it
    /// stopped for want of room or data (the stream's waker is then registered), or the body
    /// ended.
    fn gather(&mut self, cx: &mut Context<'_>) -> Result<(), WriteError> {
        // A data frame needs one slot (length framing) or three (chunked); the end one.
        let need = if self.chunked { 3 } else { 1 };
        while self.room() >= need {
            let Some(stream) = self.stream.as_mut() else {
                return Ok(());
            };
            let frame = match Pin::new(stream).poll_frame(cx) {
                Poll::Pending => return Ok(()),
                Poll::Ready(Some(Err(e))) => {
                    return Err(WriteError::Body(H1Error::RequestBody(e)));
                }
                Poll::Ready(None) => {
                    self.stream = None;
                    if self.chunked {
                        self.push(Bytes::from_static(b"0\r\n\r\n"));
                    } else if self.remaining != 0 {
                        return Err(WriteError::Body(H1Error::RequestBodyLength));
                    }
                    return Ok(());
                }
                Poll::Ready(Some(Ok(frame))) => frame,
            };
            match frame.into_data() {
                Ok(data) if data.is_empty() => {}
                Ok(data) if self.chunked => {
                    self.push(Bytes::from(format!("{:x}\r\n", data.len())));
                    self.push(data);
                    self.push(Bytes::from_static(b"\r\n"));
                }
                Ok(data) => {
                    let n = data.len() as u64;
                    if n > self.remaining {
                        return Err(WriteError::Body(H1Error::RequestBodyLength));
                    }
                    self.remaining -= n;
                    self.push(data);
                    if self.remaining == 0
                        && self.stream.as_ref().is_some_and(|s| s.is_end_stream())
                    {
                        self.stream = None;
                    }
                }
                Err(frame) => {
                    // Trailers end the body; they only exist on the wire with chunked coding.
                    self.stream = None;
                    if self.chunked {
                        let mut t = b"0\r\n".to_vec();
                        if let Some(fields) = frame.trailers_ref() {
                            for (name, value) in fields {
                                t.extend_from_slice(name.as_str().as_bytes());
                                t.extend_from_slice(b": ");
                                t.extend_from_slice(value.as_bytes());
                                t.extend_from_slice(b"\r\n");
                            }
                        }
                        t.extend_from_slice(b"\r\n");
                        self.push(Bytes::from(t));
                    } else if self.remaining != 0 {
                        return Err(WriteError::Body(H1Error::RequestBodyLength));
                    }
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Writes until everything is sent (`Ready(Ok)`), the socket or the body stream blocks
    /// (`Pending`), or something fails.
    fn poll(&mut self, io: &mut Io, cx: &mut Context<'_>) -> Poll<Result<(), WriteError>> {
        loop {
            if let Err(e) = self.gather(cx) {
                return Poll::Ready(Err(e));
            }
            if self.queued == 0 {
                if self.stream.is_none() {
                    return Pin::new(&mut *io).poll_flush(cx).map_err(WriteError::Io);
                }
                // The client's body is slow: push out what the TLS layer holds meanwhile.
                ready!(Pin::new(&mut *io).poll_flush(cx)).map_err(WriteError::Io)?;
                return Poll::Pending;
            }
            let slices: [io::IoSlice<'_>; OUT_SLOTS] =
                std::array::from_fn(|i| io::IoSlice::new(&self.out[i]));
            let first = slices[..self.queued]
                .iter()
                .position(|s| !s.is_empty())
                .unwrap_or(0);
            match ready!(Pin::new(&mut *io).poll_write_vectored(cx, &slices[first..self.queued])) {
                Ok(0) => return Poll::Ready(Err(WriteError::Io(io::ErrorKind::WriteZero.into()))),
                Ok(n) => self.advance(n),
                Err(e) => return Poll::Ready(Err(WriteError::Io(e))),
            }
        }
    }
}

impl Conn {
    /// A new connection.
    pub fn new(io: Io) -> Self {
        Conn {
            io,
            rbuf: BytesMut::new(),
            reused: false,
            counted: None,
        }
    }

    /// Sends `prepared` (with `body`, the part after the head) and reads the response head.
    /// Returns the head and whether the whole request went out; the response body, if any,
    /// starts in `self.rbuf`.
    pub async fn exchange(
        &mut self,
        prepared: &Prepared,
        body: PreparedBody,
        max_head: usize,
    ) -> Result<(ResponseHead, bool), Failure> {
        let reused = self.reused;
        self.reused = true;
        let mut writer = Writer::new(prepared, body);
        let mut written: Option<Result<(), io::Error>> = None;
        let mut received = false;
        let result = poll_fn(|cx| {
            if written.is_none() {
                match writer.poll(&mut self.io, cx) {
                    Poll::Ready(Ok(())) => written = Some(Ok(())),
                    // The backend may have answered and closed: read what it said.
                    Poll::Ready(Err(WriteError::Io(e))) => written = Some(Err(e)),
                    Poll::Ready(Err(WriteError::Body(e))) => return Poll::Ready(Err(e)),
                    Poll::Pending => {}
                }
            }
            loop {
                if !self.rbuf.is_empty() {
                    received = true;
                    match parse_head(&mut self.rbuf, prepared.head_request, max_head) {
                        Ok(Some(head)) => {
                            let done = match written {
                                Some(Ok(())) => Written::Complete,
                                _ => Written::Partial,
                            };
                            return Poll::Ready(Ok((head, done)));
                        }
                        Ok(None) => {}
                        Err(e) => return Poll::Ready(Err(e)),
                    }
                }
                match ready!(poll_fill(&mut self.io, &mut self.rbuf, cx)) {
                    Ok(0) => {
                        return Poll::Ready(Err(match written.take() {
                            Some(Err(e)) => H1Error::Io(e),
                            _ => H1Error::Closed,
                        }))
                    }
                    Ok(_) => {}
                    Err(e) => return Poll::Ready(Err(H1Error::Io(e))),
                }
            }
        })
        .await;
        match result {
            Ok((head, done)) => Ok((head, matches!(done, Written::Complete))),
            Err(error) => {
                let stale = reused && !received && error.is_stale_connection();
                Err(Failure { error, stale })
            }
        }
    }
}

/// Reads more bytes into `buf`, growing it when it is nearly full. `Ok(0)` is end of stream.
pub fn poll_fill(io: &mut Io, buf: &mut BytesMut, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
    if buf.capacity() - buf.len() < READ_CHUNK / 4 {
        buf.reserve(READ_CHUNK);
    }
    // `read_buf` fills the spare capacity without initialising it first; the future holds no
    // state beyond one poll, so it may be created for each poll.
    let fut = io.read_buf(buf);
    pin!(fut).poll(cx)
}

/// Parses a response head at the start of `buf`, skipping interim (1xx) responses. On success
/// the head's bytes are removed from `buf` (header values keep pointing into them, no copy).
/// `Ok(None)`: the head is not complete yet.
pub(crate) fn parse_head(
    buf: &mut BytesMut,
    head_request: bool,
    max_head: usize,
) -> Result<Option<ResponseHead>, H1Error> {
    loop {
        let mut slots =
            [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_RESPONSE_HEADERS];
        let mut res = httparse::Response::new(&mut []);
        let base = buf.as_ptr() as usize;
        let len = match httparse::ParserConfig::default()
            .parse_response_with_uninit_headers(&mut res, buf, &mut slots)
        {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => {
                return if buf.len() > max_head {
                    Err(H1Error::HeadTooLarge(max_head))
                } else {
                    Ok(None)
                }
            }
            Err(e) => return Err(H1Error::Parse(e.to_string())),
        };
        if len > max_head {
            return Err(H1Error::HeadTooLarge(max_head));
        }
        let code = res.code.unwrap_or(0);
        let version = if res.version == Some(0) {
            Version::HTTP_10
        } else {
            Version::HTTP_11
        };
        if code == 101 {
            return Err(H1Error::UnexpectedUpgrade);
        }
        if (100..200).contains(&code) {
            // 100 Continue, 103 Early Hints and the like: the final answer follows.
            let _ = buf.split_to(len);
            continue;
        }
        let status =
            StatusCode::from_u16(code).map_err(|_| H1Error::Parse(format!("status {code}")))?;
        let ranges: SmallVec<[(usize, usize, usize, usize); 16]> = res
            .headers
            .iter()
            .map(|h| {
                let n = h.name.as_ptr() as usize - base;
                let v = h.value.as_ptr() as usize - base;
                (n, n + h.name.len(), v, v + h.value.len())
            })
            .collect();
        let head = buf.split_to(len).freeze();
        // Room for the few headers response policies add (no regrowth).
        let mut headers = HeaderMap::with_capacity(ranges.len() + 4);
        let mut facts = HeadFacts::default();
        for (ns, ne, vs, ve) in ranges {
            let raw_name = &head[ns..ne];
            let name = match super::field_names::common(raw_name) {
                Some(name) => name,
                None => HeaderName::from_bytes(raw_name)
                    .map_err(|_| H1Error::Parse("invalid header name".into()))?,
            };
            let raw = &head[vs..ve];
            // The framing and connection fields are read here and, being hop-by-hop, not kept.
            if name == header::CONNECTION {
                facts.connection(raw);
                continue;
            }
            if name == header::TRANSFER_ENCODING {
                facts.transfer_encoding(raw);
                continue;
            }
            if name == header::CONTENT_LENGTH {
                facts.content_length(raw);
            } else if crate::headers::is_fixed_hop_by_hop(&name) {
                continue;
            }
            let value = HeaderValue::from_maybe_shared(head.slice(vs..ve))
                .map_err(|_| H1Error::Parse(format!("invalid value of header {name}")))?;
            headers.append(name, value);
        }
        // Fields the Connection header names are hop-by-hop too (RFC 9110 §7.6.1).
        for name in facts.named.drain(..) {
            headers.remove(name);
        }
        let (framing, mut keep_alive) = framing(&facts, status, head_request)?;
        keep_alive &= facts.persistent(version);
        // An HTTP/1.0 message with Transfer-Encoding may have been framed differently by
        // whoever sent it: the connection is closed after it (RFC 9112 §6.1).
        keep_alive &= !(version == Version::HTTP_10 && facts.transfer_encoding);
        return Ok(Some(ResponseHead {
            status,
            version,
            headers,
            framing,
            keep_alive,
        }));
    }
}

/// What a response head's framing and connection fields say, gathered while its fields are read.
#[derive(Default)]
struct HeadFacts {
    /// A Transfer-Encoding field was present.
    transfer_encoding: bool,
    /// The last transfer coding listed is `chunked`.
    chunked: bool,
    /// A Content-Length field was present.
    has_length: bool,
    /// The length, when every Content-Length value agrees.
    length: Option<u64>,
    /// What is wrong with the Content-Length fields (an error only without Transfer-Encoding).
    length_error: Option<&'static str>,
    /// `Connection: close` was listed.
    close: bool,
    /// `Connection: keep-alive` was listed.
    keep_alive: bool,
    /// Other fields the Connection header names.
    named: SmallVec<[HeaderName; 2]>,
}

impl HeadFacts {
    fn transfer_encoding(&mut self, value: &[u8]) {
        self.transfer_encoding = true;
        for coding in value.split(|b| *b == b',').map(<[u8]>::trim_ascii) {
            if !coding.is_empty() {
                self.chunked = coding.eq_ignore_ascii_case(b"chunked");
            }
        }
    }

    fn content_length(&mut self, value: &[u8]) {
        self.has_length = true;
        for part in value.split(|b| *b == b',') {
            let part = part.trim_ascii();
            if part.is_empty() || part.len() > 19 || !part.iter().all(u8::is_ascii_digit) {
                self.length_error.get_or_insert("invalid Content-Length");
                continue;
            }
            let n = part
                .iter()
                .fold(0u64, |acc, d| acc * 10 + u64::from(d - b'0'));
            if self.length.is_some_and(|l| l != n) {
                self.length_error
                    .get_or_insert("conflicting Content-Length values");
            }
            self.length = Some(n);
        }
    }

    fn connection(&mut self, value: &[u8]) {
        for token in value.split(|b| *b == b',').map(<[u8]>::trim_ascii) {
            if token.is_empty() {
                continue;
            }
            if token.eq_ignore_ascii_case(b"close") {
                self.close = true;
            } else if token.eq_ignore_ascii_case(b"keep-alive") {
                // Names the Keep-Alive field, which is dropped anyway.
                self.keep_alive = true;
            } else if let Ok(name) = HeaderName::from_bytes(token) {
                self.named.push(name);
            }
        }
    }

    /// Whether the connection persists after this response (RFC 9112 §9.3).
    fn persistent(&self, version: Version) -> bool {
        if version == Version::HTTP_11 {
            !self.close
        } else {
            self.keep_alive
        }
    }
}

/// The body framing of a response (RFC 9112 §6.3) and whether the framing lets the connection
/// be reused.
fn framing(
    facts: &HeadFacts,
    status: StatusCode,
    head_request: bool,
) -> Result<(ResponseFraming, bool), H1Error> {
    if head_request
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok((ResponseFraming::Empty, true));
    }
    if facts.transfer_encoding {
        // With both Transfer-Encoding and Content-Length the message may have been smuggled:
        // the coding wins and the connection is not reused (RFC 9112 §6.3).
        return Ok(if facts.chunked {
            (ResponseFraming::Chunked, !facts.has_length)
        } else {
            (ResponseFraming::Close, false)
        });
    }
    if let Some(e) = facts.length_error {
        return Err(H1Error::Parse(e.into()));
    }
    Ok(match facts.length {
        Some(0) => (ResponseFraming::Empty, true),
        Some(n) => (ResponseFraming::Length(n), true),
        None => (ResponseFraming::Close, false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: &str, head_request: bool) -> Result<Option<ResponseHead>, H1Error> {
        let mut buf = BytesMut::from(raw.as_bytes());
        parse_head(&mut buf, head_request, 8192)
    }

    #[test]
    fn frames_responses() {
        let h = parse("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello", false)
            .unwrap()
            .unwrap();
        assert_eq!(h.framing, ResponseFraming::Length(5));
        assert!(h.keep_alive);
        let h = parse("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n", true)
            .unwrap()
            .unwrap();
        assert_eq!(h.framing, ResponseFraming::Empty);
        let h = parse("HTTP/1.1 204 No Content\r\n\r\n", false)
            .unwrap()
            .unwrap();
        assert_eq!(h.framing, ResponseFraming::Empty);
        let h = parse(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.framing, ResponseFraming::Chunked);
        assert!(h.keep_alive);
        let h = parse(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.framing, ResponseFraming::Chunked);
        assert!(!h.keep_alive, "TE with CL must not be reused");
        let h = parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", false)
            .unwrap()
            .unwrap();
        assert_eq!(h.framing, ResponseFraming::Close);
        let h = parse("HTTP/1.1 200 OK\r\n\r\n", false).unwrap().unwrap();
        assert_eq!(h.framing, ResponseFraming::Close);
        assert!(!h.keep_alive);
        let h = parse(
            "HTTP/1.1 200 OK\r\nConnection: Close\r\nContent-Length: 1\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert!(!h.keep_alive);
        let h = parse("HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", false)
            .unwrap()
            .unwrap();
        assert!(!h.keep_alive);
        let h = parse(
            "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert!(h.keep_alive);
        assert_eq!(h.version, Version::HTTP_10);
        // HTTP/1.0 with Transfer-Encoding: read as chunked, never reused.
        let h = parse(
            "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.framing, ResponseFraming::Chunked);
        assert!(
            !h.keep_alive,
            "an HTTP/1.0 response with Transfer-Encoding must not be reused"
        );
        let h = parse("HTTP/1.1 200 OK\r\nContent-Length: 7, 7\r\n\r\n", false)
            .unwrap()
            .unwrap();
        assert_eq!(h.framing, ResponseFraming::Length(7));
    }

    #[test]
    fn drops_hop_by_hop_fields_while_reading_them() {
        let h = parse(
            "HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Secret\r\nKeep-Alive: timeout=5\r\n\
             X-Secret: 1\r\nProxy-Connection: x\r\nUpgrade: h2c\r\nX-Keep: 1\r\n\
             Content-Length: 2\r\n\r\nok",
            false,
        )
        .unwrap()
        .unwrap();
        let mut names: Vec<&str> = h.headers.keys().map(|n| n.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, ["content-length", "x-keep"]);
        assert!(h.keep_alive);
        assert_eq!(h.framing, ResponseFraming::Length(2));
        let h = parse(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: b\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert!(!h.headers.contains_key(header::TRANSFER_ENCODING));
        assert_eq!(h.framing, ResponseFraming::Chunked);
        // A coding wins over a broken length; the connection is not reused.
        let h = parse(
            "HTTP/1.1 200 OK\r\nContent-Length: x\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.framing, ResponseFraming::Chunked);
        assert!(!h.keep_alive);
    }

    #[test]
    fn rejects_bad_heads() {
        assert!(parse(
            "HTTP/1.1 200 OK\r\nContent-Length: 7\r\nContent-Length: 8\r\n\r\n",
            false
        )
        .is_err());
        assert!(parse("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", false).is_err());
        assert!(parse(
            "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
            false
        )
        .is_err());
        assert!(parse("HTTX/1.1 200 OK\r\n\r\n", false).is_err());
        assert!(matches!(
            parse("HTTP/1.1 101 Switching Protocols\r\n\r\n", false),
            Err(H1Error::UnexpectedUpgrade)
        ));
        let mut big = String::from("HTTP/1.1 200 OK\r\n");
        for i in 0..1000 {
            big.push_str(&format!("x-{i}: {}\r\n", "v".repeat(20)));
        }
        assert!(matches!(
            parse(&big, false),
            Err(H1Error::HeadTooLarge(_) | H1Error::Parse(_))
        ));
    }

    #[test]
    fn skips_interim_responses_and_keeps_the_body() {
        let mut buf = BytesMut::from(
            &b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 201 Created\r\nX-A: b\r\ncontent-length: 2\r\n\r\nok"[..],
        );
        let h = parse_head(&mut buf, false, 8192).unwrap().unwrap();
        assert_eq!(h.status, StatusCode::CREATED);
        assert_eq!(h.headers["x-a"], "b");
        assert_eq!(&buf[..], b"ok");
    }

    #[test]
    fn partial_heads_wait_for_more() {
        assert!(parse("HTTP/1.1 200 OK\r\ncontent-le", false)
            .unwrap()
            .is_none());
    }

    fn encode(
        method: Method,
        uri: &str,
        headers: &[(&str, &str)],
        body: Body,
    ) -> (Prepared, PreparedBody) {
        let mut req = http::Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let (parts, ()) = req.body(()).unwrap().into_parts();
        let client = HeaderValue::from_static("10.0.0.1");
        Prepared::new(
            &parts,
            body,
            &Forwarded::of(&parts.headers, &client, "http"),
        )
    }

    const FWD: &str = "x-forwarded-for: 10.0.0.1\r\nx-forwarded-proto: http\r\n";

    #[test]
    fn encodes_requests() {
        let (p, b) = encode(
            Method::GET,
            "/a?b=1",
            &[("host", "x"), ("x-y", "z")],
            Body::Empty,
        );
        assert_eq!(
            std::str::from_utf8(&p.wire).unwrap(),
            format!("GET /a?b=1 HTTP/1.1\r\nhost: x\r\nx-y: z\r\n{FWD}x-forwarded-host: x\r\n\r\n")
        );
        assert!(b.replay().is_some());
        let (p, _) = encode(
            Method::POST,
            "/",
            &[("content-length", "99")],
            Body::full("hi"),
        );
        assert_eq!(
            std::str::from_utf8(&p.wire).unwrap(),
            format!("POST / HTTP/1.1\r\n{FWD}content-length: 2\r\n\r\nhi")
        );
        let (p, _) = encode(Method::POST, "/", &[], Body::Empty);
        assert_eq!(
            std::str::from_utf8(&p.wire).unwrap(),
            format!("POST / HTTP/1.1\r\n{FWD}content-length: 0\r\n\r\n")
        );
        let big = vec![b'x'; COALESCE_BODY + 1];
        let (p, b) = encode(
            Method::PUT,
            "/",
            &[("transfer-encoding", "chunked")],
            Body::full(big),
        );
        assert_eq!(
            &p.wire[..],
            format!(
                "PUT / HTTP/1.1\r\n{FWD}content-length: {}\r\n\r\n",
                COALESCE_BODY + 1
            )
            .as_bytes()
        );
        assert!(matches!(b, PreparedBody::Bytes(_)));
        let (p, _) = encode(Method::HEAD, "/", &[], Body::Empty);
        assert!(p.head_request);
        // Received X-Forwarded-* fields are replaced, except the list, which is extended.
        let (p, _) = encode(
            Method::GET,
            "/",
            &[
                ("x-forwarded-proto", "gopher"),
                ("host", "h"),
                ("x-forwarded-for", "192.0.2.7"),
                ("x-forwarded-host", "spoofed"),
            ],
            Body::Empty,
        );
        assert_eq!(
            std::str::from_utf8(&p.wire).unwrap(),
            "GET / HTTP/1.1\r\nhost: h\r\nx-forwarded-for: 192.0.2.7, 10.0.0.1\r\n\
             x-forwarded-proto: http\r\nx-forwarded-host: h\r\n\r\n"
        );
        assert_eq!(itoa_u64(0, &mut [0; 20]), b"0");
        assert_eq!(
            itoa_u64(u64::MAX, &mut [0; 20]),
            u64::MAX.to_string().as_bytes()
        );
    }
}
