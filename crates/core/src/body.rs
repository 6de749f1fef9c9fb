//! The one body type that flows through the gateway in both directions: nothing, a buffer, a
//! stream from hyper (optionally capped in size), or another stream (a backend response read by
//! the gateway's own HTTP/1 client). Streams are passed on without copying.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;

/// Error type of [`Body`].
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// A request or response body.
#[derive(Debug, Default)]
pub enum Body {
    /// No body.
    #[default]
    Empty,
    /// A complete body held in memory (taken on the first poll).
    Full(Option<Bytes>),
    /// A body streamed from a peer.
    Incoming(Incoming),
    /// A body streamed from a peer that fails once more than `remaining` bytes arrive.
    Limited {
        /// The stream.
        inner: Incoming,
        /// Bytes still allowed.
        remaining: u64,
    },
    /// Any other stream of frames (such as a backend's response body).
    Stream(BoxStream),
}

/// A boxed body stream; see [`Body::Stream`].
pub struct BoxStream(pub Pin<Box<dyn http_body::Body<Data = Bytes, Error = BodyError> + Send>>);

impl std::fmt::Debug for BoxStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BoxStream")
    }
}

/// A stream that fails with [`BodyTooLarge`] once more than `remaining` bytes pass.
struct Capped {
    inner: BoxStream,
    remaining: u64,
}

impl http_body::Body for Capped {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        match this.inner.0.as_mut().poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let n = data.len() as u64;
                    if n > this.remaining {
                        this.remaining = 0;
                        return Poll::Ready(Some(Err(Box::new(BodyTooLarge))));
                    }
                    this.remaining -= n;
                }
                Poll::Ready(Some(Ok(frame)))
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.0.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.0.size_hint()
    }
}

/// The error a [`Body::Limited`] stream yields when the peer sends too much.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyTooLarge;

impl std::fmt::Display for BodyTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("body exceeds the configured size limit")
    }
}

impl std::error::Error for BodyTooLarge {}

impl Body {
    /// A body holding `bytes` (empty bytes give an empty body).
    pub fn full(bytes: impl Into<Bytes>) -> Self {
        let b = bytes.into();
        if b.is_empty() {
            Body::Empty
        } else {
            Body::Full(Some(b))
        }
    }
}

impl Body {
    /// Wraps any body stream (see [`Body::Stream`]).
    pub fn stream<B>(body: B) -> Self
    where
        B: http_body::Body<Data = Bytes, Error = BodyError> + Send + 'static,
    {
        Body::Stream(BoxStream(Box::pin(body)))
    }

    /// This body, failing with [`BodyTooLarge`] once more than `limit` bytes pass (a body held
    /// in memory is returned as it is: its size is known).
    pub fn capped(self, limit: u64) -> Self {
        match self {
            Body::Incoming(inner) => Body::Limited {
                inner,
                remaining: limit,
            },
            Body::Limited { inner, remaining } => Body::Limited {
                inner,
                remaining: remaining.min(limit),
            },
            Body::Stream(inner) => Body::stream(Capped {
                inner,
                remaining: limit,
            }),
            other => other,
        }
    }
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        match self.get_mut() {
            Body::Empty => Poll::Ready(None),
            Body::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Body::Incoming(inc) => Pin::new(inc).poll_frame(cx).map_err(Into::into),
            Body::Limited { inner, remaining } => match Pin::new(inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Some(data) = frame.data_ref() {
                        let n = data.len() as u64;
                        if n > *remaining {
                            *remaining = 0;
                            return Poll::Ready(Some(Err(Box::new(BodyTooLarge))));
                        }
                        *remaining -= n;
                    }
                    Poll::Ready(Some(Ok(frame)))
                }
                other => other.map_err(Into::into),
            },
            Body::Stream(s) => s.0.as_mut().poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Body::Empty => true,
            Body::Full(b) => b.is_none(),
            Body::Incoming(inc) | Body::Limited { inner: inc, .. } => inc.is_end_stream(),
            Body::Stream(s) => s.0.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Empty => SizeHint::with_exact(0),
            Body::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Body::Incoming(inc) | Body::Limited { inner: inc, .. } => inc.size_hint(),
            Body::Stream(s) => s.0.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn full_and_empty() {
        let b = Body::full("hello");
        assert_eq!(http_body::Body::size_hint(&b).exact(), Some(5));
        assert_eq!(b.collect().await.unwrap().to_bytes(), "hello");
        assert!(http_body::Body::is_end_stream(&Body::full("")));
    }
}

/// The first bytes of a body, kept as the body streams past (for the store of recent
/// exchanges). Cloning shares the same capture.
#[derive(Clone, Default)]
pub struct Capture(std::sync::Arc<std::sync::Mutex<Captured>>);

#[derive(Default)]
struct Captured {
    bytes: Vec<u8>,
    limit: usize,
    truncated: bool,
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Capture")
    }
}

impl Capture {
    /// A capture of at most `limit` bytes.
    pub fn new(limit: usize) -> Capture {
        Capture(std::sync::Arc::new(std::sync::Mutex::new(Captured {
            bytes: Vec::new(),
            limit,
            truncated: false,
        })))
    }

    fn record(&self, chunk: &[u8]) {
        let mut c = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let room = c.limit.saturating_sub(c.bytes.len());
        if chunk.len() > room {
            c.truncated = true;
        }
        let take = chunk.len().min(room);
        c.bytes.extend_from_slice(&chunk[..take]);
    }

    /// The bytes kept so far, and whether the body was longer.
    pub fn get(&self) -> (Vec<u8>, bool) {
        let c = self.0.lock().unwrap_or_else(|e| e.into_inner());
        (c.bytes.clone(), c.truncated)
    }
}

/// A body that records its first bytes in a [`Capture`] as it streams.
struct Tee {
    inner: Body,
    capture: Capture,
}

impl http_body::Body for Tee {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                this.capture.record(data);
            }
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

impl Body {
    /// This body, recording its first bytes in `capture` as it is read (a body in memory is
    /// recorded at once and stays as it is).
    pub fn tee(self, capture: &Capture) -> Body {
        match self {
            Body::Empty | Body::Full(None) => self,
            Body::Full(Some(b)) => {
                capture.record(&b);
                Body::Full(Some(b))
            }
            other => Body::Stream(BoxStream(Box::pin(Tee {
                inner: other,
                capture: capture.clone(),
            }))),
        }
    }
}

/// A request body on its way to a backend with its trailer fields dropped, or (`keep`) only
/// those RFC 9110 §6.5.1 does not forbid in trailers.
pub struct Trailers {
    inner: Body,
    keep: bool,
}

impl Trailers {
    /// `body` with its trailers dropped, or filtered when `keep`. Trailers come only with
    /// chunked HTTP/1.1 bodies and HTTP/2 streams (`may_trail`); other bodies, and bodies
    /// already at their end, are returned as they are (no wrapping, no allocation).
    pub fn filter(body: Body, may_trail: bool, keep: bool) -> Body {
        if !may_trail || http_body::Body::is_end_stream(&body) {
            return body;
        }
        Body::stream(Trailers { inner: body, keep })
    }
}

/// Whether a field may not be sent as a trailer (RFC 9110 §6.5.1): framing, routing, request
/// modifiers and controls, authentication, response control data, content processing.
pub fn forbidden_in_trailers(name: &http::HeaderName) -> bool {
    use http::header::*;
    matches!(
        *name,
        TRANSFER_ENCODING
            | CONTENT_LENGTH
            | HOST
            | CACHE_CONTROL
            | EXPECT
            | MAX_FORWARDS
            | PRAGMA
            | RANGE
            | TE
            | IF_MATCH
            | IF_NONE_MATCH
            | IF_MODIFIED_SINCE
            | IF_UNMODIFIED_SINCE
            | IF_RANGE
            | AUTHORIZATION
            | PROXY_AUTHORIZATION
            | WWW_AUTHENTICATE
            | PROXY_AUTHENTICATE
            | COOKIE
            | SET_COOKIE
            | AGE
            | EXPIRES
            | DATE
            | LOCATION
            | RETRY_AFTER
            | VARY
            | CONTENT_ENCODING
            | CONTENT_TYPE
            | CONTENT_RANGE
            | TRAILER
            | CONNECTION
            | UPGRADE
    ) || name.as_str() == "keep-alive"
        || name.as_str() == "proxy-connection"
}

impl http_body::Body for Trailers {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) if frame.is_trailers() => {
                if !this.keep {
                    return Poll::Ready(None);
                }
                let Ok(mut fields) = frame.into_trailers() else {
                    return Poll::Ready(None);
                };
                let names: Vec<http::HeaderName> = fields
                    .keys()
                    .filter(|n| forbidden_in_trailers(n))
                    .cloned()
                    .collect();
                for n in names {
                    fields.remove(n);
                }
                if fields.is_empty() {
                    Poll::Ready(None)
                } else {
                    Poll::Ready(Some(Ok(Frame::trailers(fields))))
                }
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
