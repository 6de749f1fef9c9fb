//! A backend connection's byte stream: plain TCP or TLS over TCP.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use rustls::client::UnbufferedClientConnection;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use turnpike_tls::TlsStream;

/// The stream of one backend connection.
pub enum Io {
    /// Cleartext TCP.
    Tcp(TcpStream),
    /// TLS over TCP (boxed: the TLS state is large and connections move between pool and body).
    Tls(Box<TlsStream<TcpStream, UnbufferedClientConnection>>),
}

impl Io {
    fn tcp(&self) -> &TcpStream {
        match self {
            Io::Tcp(s) => s,
            Io::Tls(s) => s.get_ref().0,
        }
    }

    /// True when an idle connection can still carry a request: the backend has neither closed
    /// it nor sent anything unasked, and TLS does not have to close it soon. Costs no system
    /// call unless the socket became readable while the connection sat in the pool (the reactor
    /// records that for free).
    pub fn is_reusable(&mut self) -> bool {
        if let Io::Tls(s) = self {
            if !s.can_carry_more() {
                return false;
            }
        }
        let mut cx = Context::from_waker(Waker::noop());
        match self.tcp().poll_read_ready(&mut cx) {
            Poll::Pending => true,
            Poll::Ready(Err(_)) => false,
            Poll::Ready(Ok(())) => {
                // End of stream, bytes nobody asked for, or (TLS) a post-handshake message such
                // as a session ticket, which the TLS layer consumes without yielding data.
                let mut scratch = [0u8; 64];
                let mut buf = ReadBuf::new(&mut scratch);
                matches!(Pin::new(self).poll_read(&mut cx, &mut buf), Poll::Pending)
            }
        }
    }
}

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Tcp(s) => crate::plain_io::poll_write_gathered(Pin::new(s), cx, bufs),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Io::Tcp(_) => true,
            Io::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Tcp(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
