//! What slow and greedy clients may hold: a request body that pauses too long ([`TimedBody`]),
//! a response the client does not read ([`WriteTimeout`]), and too many connections from one
//! IP ([`PerIp`]). Each bound costs nothing while clients keep up: a deadline is armed only
//! when a read or write has to wait.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body as _, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use turnpike_core::body::BodyError;
use turnpike_core::Body;

use crate::deadline::Deadline;

/// The error of a request body whose client paused longer than `timeouts.bodyRead`.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the client paused longer than the body read timeout while sending the body")]
pub struct BodyTimeout;

/// A request body that fails with [`BodyTimeout`] when no byte arrives for `timeout`.
pub struct TimedBody {
    inner: Body,
    timeout: Duration,
    waiting: Option<Deadline>,
}

impl TimedBody {
    /// Wraps a streamed request body (bodies in memory or empty need no timeout).
    pub fn wrap(inner: Body, timeout: Duration) -> Body {
        match inner {
            Body::Incoming(_) | Body::Limited { .. } if !inner.is_end_stream() => {
                Body::Stream(turnpike_core::body::BoxStream(Box::pin(TimedBody {
                    inner,
                    timeout,
                    waiting: None,
                })))
            }
            other => other,
        }
    }
}

impl http_body::Body for TimedBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => {
                let timeout = this.timeout;
                let deadline = this.waiting.get_or_insert_with(|| Deadline::after(timeout));
                match Pin::new(deadline).poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimeout)))),
                    Poll::Pending => Poll::Pending,
                }
            }
            ready => {
                this.waiting = None;
                ready
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

use std::future::Future;

/// A client connection whose writes fail with `TimedOut` when one waits longer than `timeout`
/// for the client to read: a client that stops reading a response cannot hold the connection
/// (and the response's buffers) forever.
pub struct WriteTimeout<IO> {
    io: IO,
    timeout: Duration,
    waiting: Option<Deadline>,
}

impl<IO> WriteTimeout<IO> {
    /// Wraps `io`.
    pub fn new(io: IO, timeout: Duration) -> Self {
        WriteTimeout {
            io,
            timeout,
            waiting: None,
        }
    }

    /// The connection inside.
    pub fn get_ref(&self) -> &IO {
        &self.io
    }

    /// What a write that could not proceed does: waits for the deadline, which it arms the
    /// first time.
    fn stalled<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let timeout = self.timeout;
        let deadline = self.waiting.get_or_insert_with(|| Deadline::after(timeout));
        match Pin::new(deadline).poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client did not read the response within the write timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn progressed<T>(
        &mut self,
        p: Poll<io::Result<T>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<T>> {
        match p {
            Poll::Pending => self.stalled(cx),
            ready => {
                self.waiting = None;
                ready
            }
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for WriteTimeout<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for WriteTimeout<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let p = Pin::new(&mut this.io).poll_write(cx, buf);
        this.progressed(p, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let p = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.progressed(p, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let p = Pin::new(&mut this.io).poll_flush(cx);
        this.progressed(p, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// The connections each client IP has open, shared by the workers of a process, for
/// `limits.maxConnectionsPerIp`.
#[derive(Debug, Default, Clone)]
pub struct PerIp(Arc<Mutex<HashMap<IpAddr, u32>>>);

/// One counted connection; dropping it gives its place back.
#[derive(Debug)]
pub struct Counted {
    table: PerIp,
    ip: IpAddr,
}

impl PerIp {
    /// Counts a connection from `ip`, or `None` when `ip` has `max` open already.
    pub fn admit(&self, ip: IpAddr, max: u32) -> Option<Counted> {
        let mut t = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = t.entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(Counted {
            table: self.clone(),
            ip,
        })
    }

    /// Connections `ip` has open.
    pub fn open(&self, ip: IpAddr) -> u32 {
        let t = self.0.lock().unwrap_or_else(|e| e.into_inner());
        t.get(&ip).copied().unwrap_or(0)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        let mut t = self.table.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = t.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                t.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_ip_counts_and_gives_places_back() {
        let t = PerIp::default();
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        let a = t.admit(ip, 2).unwrap();
        let _b = t.admit(ip, 2).unwrap();
        assert!(t.admit(ip, 2).is_none());
        assert!(t.admit("192.0.2.8".parse().unwrap(), 2).is_some());
        drop(a);
        assert_eq!(t.open(ip), 1);
        assert!(t.admit(ip, 2).is_some());
    }
}
