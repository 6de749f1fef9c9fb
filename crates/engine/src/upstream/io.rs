//! A backend connection's byte stream: plain TCP or TLS over TCP.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use turnpike_tls::ClientStream;

/// The stream of one backend connection.
pub enum Io {
    /// Cleartext TCP.
    Tcp(TcpStream),
    /// TLS over TCP (boxed: the TLS state is large and connections move between pool and body).
    Tls(Box<ClientStream>),
}

impl Io {
    fn tcp(&self) -> &TcpStream {
        match self {
            Io::Tcp(s) => s,
            Io::Tls(s) => s.tcp(),
        }
    }

    /// True when an idle connection can still carry a request: the backend has neither closed
    /// it nor sent anything unasked, and no byte of it waits anywhere (in the socket; for TLS
    /// also a record not received whole or plaintext not read, which would otherwise be taken
    /// for the start of the next response). Costs no system call unless the socket became
    /// readable while the connection sat in the pool (the reactor records that for free).
    pub fn is_reusable(&mut self) -> bool {
        if let Io::Tls(s) = self {
            // A TLS connection's socket is asked directly (one `recv(MSG_PEEK)`): what the
            // backend sent may be there although the reactor has not reported it yet, and the
            // TLS layer must see it before the connection is judged idle.
            if !s.is_idle() {
                return false;
            }
            let mut cx = Context::from_waker(Waker::noop());
            let mut byte = [0u8; 1];
            let mut peek = ReadBuf::new(&mut byte);
            return match s.tcp().poll_peek(&mut cx, &mut peek) {
                Poll::Pending => true,
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => false,
                // A post-handshake message (a session ticket) is consumed without data.
                Poll::Ready(Ok(_)) => s.read_would_wait() && s.is_idle(),
            };
        }
        let mut cx = Context::from_waker(Waker::noop());
        match self.tcp().poll_read_ready(&mut cx) {
            Poll::Pending => true,
            Poll::Ready(Err(_)) => false,
            Poll::Ready(Ok(())) => {
                // End of stream, or bytes nobody asked for.
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
