//! The one body type that flows through the gateway in both directions: nothing, a buffer, or a
//! stream from hyper (optionally capped in size). Streams are passed on without copying.

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
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Body::Empty => true,
            Body::Full(b) => b.is_none(),
            Body::Incoming(inc) | Body::Limited { inner: inc, .. } => inc.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Empty => SizeHint::with_exact(0),
            Body::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Body::Incoming(inc) | Body::Limited { inner: inc, .. } => inc.size_hint(),
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
