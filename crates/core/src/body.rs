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
