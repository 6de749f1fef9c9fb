//! TLS over a tokio byte stream, on rustls's own record layer (through `tokio-rustls`): rustls
//! runs the handshake and protects every record, answers key updates (keeping at most one
//! reply queued however many a peer asks for) and refuses renegotiation.
//!
//! [`accept`] and [`connect`] run the handshake and return the stream. Backend connections
//! carry a [`Framing`] under the TLS layer, which follows the record framing of what the
//! backend sent, so that [`ClientStream::is_idle`] can tell whether any byte of it is still
//! held anywhere (the socket, a record not received whole, plaintext not read): a pooled
//! connection is reused only when none is.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A client connection's TLS stream, after its handshake.
pub type ServerStream<IO> = tokio_rustls::server::TlsStream<IO>;

/// Runs the server side of a handshake on `io` with `config`.
pub async fn accept<IO>(config: Arc<ServerConfig>, io: IO) -> io::Result<ServerStream<IO>>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    tokio_rustls::TlsAcceptor::from(config).accept(io).await
}

/// A backend connection's TLS stream, after its handshake.
pub struct ClientStream(tokio_rustls::client::TlsStream<Framing<TcpStream>>);

/// Runs the client side of a handshake on `tcp` with `config`, for server `name`.
pub async fn connect(
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
    tcp: TcpStream,
) -> io::Result<ClientStream> {
    tokio_rustls::TlsConnector::from(config)
        .connect(name, Framing::new(tcp))
        .await
        .map(ClientStream)
}

impl ClientStream {
    /// The TCP stream under the TLS layer.
    pub fn tcp(&self) -> &TcpStream {
        &self.0.get_ref().0.io
    }

    /// The rustls side of the connection (ALPN, certificates, versions).
    pub fn session(&self) -> &rustls::ClientConnection {
        self.0.get_ref().1
    }

    /// True when nothing the backend sent waits anywhere in the connection: every byte read
    /// from the socket belongs to a record received whole, and rustls holds no plaintext that
    /// was not read. (Whether the socket itself has bytes is the caller's check.) A response
    /// read to its end leaves the connection idle; a backend that sent more than it was asked
    /// leaves it busy, and such a connection must not carry another request.
    pub fn is_idle(&mut self) -> bool {
        let (framing, conn) = self.0.get_mut();
        if !framing.at_record_boundary() {
            return false;
        }
        match conn.process_new_packets() {
            Ok(state) => state.plaintext_bytes_to_read() == 0 && !state.peer_has_closed(),
            Err(_) => false,
        }
    }

    /// Polls the stream for bytes once, without waiting: `true` when a read would be pending
    /// (nothing arrived), `false` when it yields data, an end or an error.
    pub fn read_would_wait(&mut self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        let mut scratch = [0u8; 64];
        let mut buf = ReadBuf::new(&mut scratch);
        matches!(
            Pin::new(&mut self.0).poll_read(&mut cx, &mut buf),
            Poll::Pending
        )
    }
}

impl AsyncRead for ClientStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

/// Bytes of a TLS record header: type, version, length.
const HEADER_LEN: usize = 5;

/// A byte stream that follows the TLS record framing of what it reads (each record is a
/// 5-byte header, whose last two bytes give the length of the fragment that follows), so
/// that it knows whether what it has handed to the TLS layer ends where a record does. It
/// only counts: the records themselves are rustls's to check.
pub struct Framing<IO> {
    io: IO,
    /// Bytes of the current record's header seen so far (0 between records).
    header: [u8; HEADER_LEN],
    header_seen: usize,
    /// Fragment bytes of the current record still to come.
    fragment_left: usize,
}

impl<IO> Framing<IO> {
    /// Wraps `io`, at a record boundary.
    pub fn new(io: IO) -> Self {
        Framing {
            io,
            header: [0; HEADER_LEN],
            header_seen: 0,
            fragment_left: 0,
        }
    }

    /// True when every byte read so far belongs to a record read whole.
    pub fn at_record_boundary(&self) -> bool {
        self.header_seen == 0 && self.fragment_left == 0
    }

    /// Follows the framing through `data`, the next bytes read.
    fn track(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.fragment_left > 0 {
                let n = self.fragment_left.min(data.len());
                self.fragment_left -= n;
                data = &data[n..];
                continue;
            }
            let n = (HEADER_LEN - self.header_seen).min(data.len());
            self.header[self.header_seen..self.header_seen + n].copy_from_slice(&data[..n]);
            self.header_seen += n;
            data = &data[n..];
            if self.header_seen == HEADER_LEN {
                self.fragment_left =
                    usize::from(u16::from_be_bytes([self.header[3], self.header[4]]));
                self.header_seen = 0;
            }
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Framing<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            this.track(&buf.filled()[before..]);
        }
        polled
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Framing<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn records(sizes: &[u16]) -> Vec<u8> {
        let mut out = Vec::new();
        for &n in sizes {
            out.extend_from_slice(&[23, 3, 3]);
            out.extend_from_slice(&n.to_be_bytes());
            out.extend(std::iter::repeat_n(0xAA, usize::from(n)));
        }
        out
    }

    proptest! {
        /// However the bytes of whole records are cut into reads, the framing ends at a
        /// boundary, and anywhere inside a record it does not.
        #[test]
        fn framing_follows_records_across_any_cuts(
            sizes in proptest::collection::vec(0u16..3000, 1..6),
            cuts in proptest::collection::vec(1usize..700, 1..40),
            extra in 1usize..200,
        ) {
            let whole = records(&sizes);
            let mut f = Framing::new(());
            let mut at = 0;
            for c in cuts.iter().cycle() {
                if at >= whole.len() {
                    break;
                }
                let end = (at + c).min(whole.len());
                f.track(&whole[at..end]);
                at = end;
            }
            prop_assert!(f.at_record_boundary());
            let more = records(&[sizes[0].max(1)]);
            f.track(&more[..extra.min(more.len() - 1)]);
            prop_assert!(!f.at_record_boundary());
        }
    }
}
