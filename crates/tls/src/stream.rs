//! TLS over a tokio byte stream, driven through rustls's unbuffered API.
//!
//! Every connection has one incoming buffer and one outgoing buffer:
//! - records are read into the incoming buffer, and rustls decrypts them in place;
//! - rustls encrypts application data into the outgoing buffer, and that buffer goes to the
//!   socket with one write;
//! - a vectored write (a head and its body) becomes one record.
//!
//! `tokio-rustls` drives rustls's buffered API instead. That API queues every outgoing record
//! in its own allocation and sends the queue through an array of 64 `IoSlice`s. rustls 0.23
//! still allocates each record while it encrypts or decrypts it, in either API.
//!
//! Measured with TLS on both hops of a proxied request, this stream costs the gateway 2.3%
//! less CPU than tokio-rustls (see `docs/benchmarks.md`, run 7).
//!
//! [`accept`] and [`connect`] run the handshake and return a [`TlsStream`]. A `TlsStream`
//! implements tokio's `AsyncRead` and `AsyncWrite`:
//! - reads end with `UnexpectedEof` when the transport ends without the peer's `close_notify`
//!   (a truncation), and with end of stream after it;
//! - `poll_shutdown` sends `close_notify`, then shuts the transport down.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::pki_types::ServerName;
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::unbuffered::{
    ConnectionState, EncodeError, EncryptError, InsufficientSizeError, UnbufferedStatus,
    WriteTraffic,
};
use rustls::{ClientConfig, CommonState, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// First size of the incoming buffer. It is large enough for a request and its record, and
/// it doubles while a record does not fit, up to [`MAX_INCOMING`].
const INITIAL_INCOMING: usize = 4096;
/// Most TLS bytes held unprocessed. rustls keeps a handshake message that spans several
/// records in this buffer until the message is complete, so it must hold the largest
/// handshake message (2^16 bytes, a long certificate chain) plus the largest record TLS 1.2
/// allows (5-byte header, 2^14 bytes of plaintext, 2048 bytes of expansion).
const MAX_INCOMING: usize = (1 << 16) + 5 + 16384 + 2048;
/// Largest outgoing or gather buffer kept once its data has left: room for a full record.
/// Larger ones (bulk writes) are freed and grown again by the next bulk write.
const KEEP_BUFFER: usize = 5 + 16384 + 256;
/// Most plaintext taken by one write call. Larger writes return a short count, which bounds
/// the outgoing buffer.
const MAX_WRITE: usize = 64 * 1024;

/// One side of a TLS connection, as [`TlsStream`] drives it: rustls's unbuffered server or
/// client connection.
pub trait Side: Send + Unpin + 'static {
    /// rustls's per-side connection data.
    type Data;

    /// Processes the records in `incoming` until rustls needs the caller
    /// (`process_tls_records`).
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, Self::Data>;

    /// The connection's negotiated state: ALPN protocol, peer certificates, handshake progress.
    fn common(&self) -> &CommonState;
}

/// Implements [`Side`] for one of rustls's unbuffered connections: both have the same
/// `process_tls_records`, defined on their own connection data.
macro_rules! side {
    ($conn:ty, $data:ty) => {
        impl Side for $conn {
            type Data = $data;

            fn process<'c, 'i>(
                &'c mut self,
                incoming: &'i mut [u8],
            ) -> UnbufferedStatus<'c, 'i, $data> {
                self.process_tls_records(incoming)
            }

            fn common(&self) -> &CommonState {
                self
            }
        }
    };
}

side!(UnbufferedServerConnection, ServerConnectionData);
side!(UnbufferedClientConnection, ClientConnectionData);

/// What one write call hands to rustls.
#[derive(Clone, Copy)]
enum Out<'a> {
    /// Nothing: only process what has arrived.
    Nothing,
    /// Application data to encrypt.
    Data(&'a [u8]),
    /// A `close_notify` alert.
    CloseNotify,
}

/// Where [`TlsStream::advance`] stopped.
#[derive(Debug, PartialEq, Eq)]
enum Advance {
    /// Plaintext was delivered (into the caller's buffer or the stash).
    Readable,
    /// The [`Out`] was encrypted into the outgoing buffer.
    Written,
    /// Nothing more can happen until more bytes arrive from the peer.
    NeedInput,
    /// The peer sent `close_notify`: no more data will come.
    PeerClosed,
    /// Both sides sent `close_notify`.
    Closed,
}

/// A TLS connection over `IO`, after its handshake. It is made by [`accept`] or [`connect`].
pub struct TlsStream<IO, S> {
    io: IO,
    conn: S,
    /// Received TLS bytes that are not processed yet: `incoming[..incoming_len]`.
    incoming: Vec<u8>,
    incoming_len: usize,
    /// Encoded TLS bytes that are not sent yet: `outgoing[sent..outgoing_len]`. The vector
    /// stays allocated and initialised between writes, unless it grew beyond [`KEEP_BUFFER`].
    outgoing: Vec<u8>,
    outgoing_len: usize,
    sent: usize,
    /// Decrypted plaintext that a read has not taken yet: `stash[stash_pos..]`.
    stash: Vec<u8>,
    stash_pos: usize,
    /// Gathers the slices of a vectored write, so that they go out as one record.
    gather: Vec<u8>,
    /// The transport has ended.
    eof: bool,
    /// The peer has sent `close_notify`.
    peer_closed: bool,
    /// Our `close_notify` is queued.
    close_queued: bool,
    /// rustls reported an error; the connection is unusable.
    failed: bool,
    /// The last [`TlsStream::advance`] had nothing to write, left nothing unprocessed and
    /// needed input. Until new bytes arrive or something is written, asking rustls again would
    /// give the same answer, so a read goes straight to the transport.
    idle: bool,
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// Runs a server handshake on `io` with `config` and returns the connection once the
/// handshake is complete. The caller puts a timeout around it. A failed handshake sends the
/// peer its alert (as far as the socket takes it without waiting) and returns the error.
pub async fn accept<IO>(
    config: Arc<ServerConfig>,
    io: IO,
) -> io::Result<TlsStream<IO, UnbufferedServerConnection>>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let conn = UnbufferedServerConnection::new(config).map_err(tls_error)?;
    let mut stream = TlsStream::new(io, conn);
    std::future::poll_fn(|cx| stream.poll_handshake(cx)).await?;
    Ok(stream)
}

/// Runs a client handshake with `config` towards `name` (sent as SNI, and the name the
/// certificate is verified for) on `io`. Returns the connection once the handshake is
/// complete.
pub async fn connect<IO>(
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
    io: IO,
) -> io::Result<TlsStream<IO, UnbufferedClientConnection>>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let conn = UnbufferedClientConnection::new(config, name).map_err(tls_error)?;
    let mut stream = TlsStream::new(io, conn);
    std::future::poll_fn(|cx| stream.poll_handshake(cx)).await?;
    Ok(stream)
}

impl<IO, S> TlsStream<IO, S>
where
    IO: AsyncRead + AsyncWrite + Unpin,
    S: Side,
{
    fn new(io: IO, conn: S) -> Self {
        TlsStream {
            io,
            conn,
            incoming: vec![0; INITIAL_INCOMING],
            incoming_len: 0,
            outgoing: Vec::new(),
            outgoing_len: 0,
            sent: 0,
            stash: Vec::new(),
            stash_pos: 0,
            gather: Vec::new(),
            eof: false,
            peer_closed: false,
            close_queued: false,
            failed: false,
            idle: false,
        }
    }

    /// The transport and the TLS state (ALPN protocol, peer certificates).
    pub fn get_ref(&self) -> (&IO, &CommonState) {
        (&self.io, self.conn.common())
    }

    /// Processes received records until something happens that the caller must act on.
    /// Decrypted application data goes into `read` as far as it has room, the rest into the
    /// stash. With no `read` buffer, all of it goes into the stash, so that a write can reach
    /// the state where rustls encrypts.
    fn advance(&mut self, out: Out<'_>, mut read: Option<&mut ReadBuf<'_>>) -> io::Result<Advance> {
        if self.failed {
            return Err(io::Error::other("the TLS connection failed earlier"));
        }
        self.idle = false;
        loop {
            let UnbufferedStatus { mut discard, state } =
                self.conn.process(&mut self.incoming[..self.incoming_len]);
            let step = match state {
                Err(e) => Err(tls_error(e)),
                Ok(ConnectionState::ReadTraffic(mut records)) => {
                    let mut result = Ok(Some(Advance::Readable));
                    while records.peek_len().is_some() {
                        if let Some(buf) = read.as_deref_mut() {
                            if buf.remaining() == 0 || self.stash_pos < self.stash.len() {
                                // The caller's buffer is full: the other records stay in rustls.
                                break;
                            }
                        }
                        match records.next_record() {
                            Some(Ok(record)) => {
                                discard += record.discard;
                                let mut payload = record.payload;
                                if let Some(buf) = read.as_deref_mut() {
                                    let n = payload.len().min(buf.remaining());
                                    buf.put_slice(&payload[..n]);
                                    payload = &payload[n..];
                                }
                                if !payload.is_empty() {
                                    if self.stash_pos == self.stash.len() {
                                        self.stash.clear();
                                        self.stash_pos = 0;
                                    }
                                    self.stash.extend_from_slice(payload);
                                }
                            }
                            Some(Err(e)) => {
                                result = Err(tls_error(e));
                                break;
                            }
                            None => break,
                        }
                    }
                    result
                }
                Ok(ConnectionState::EncodeTlsData(mut data)) => {
                    grow_and_retry(&mut self.outgoing, &mut self.outgoing_len, |buf| {
                        data.encode(buf).map_err(encode_size)
                    })
                    .map(|_| None)
                }
                Ok(ConnectionState::TransmitTlsData(data)) => {
                    // The encoded records are queued in `outgoing`, ahead of anything written
                    // later, and every path that waits for the peer sends them first.
                    data.done();
                    Ok(None)
                }
                Ok(ConnectionState::BlockedHandshake) => Ok(Some(Advance::NeedInput)),
                Ok(ConnectionState::WriteTraffic(mut traffic)) => match out {
                    Out::Nothing => Ok(Some(Advance::NeedInput)),
                    Out::Data(data) => encrypt(
                        &mut traffic,
                        data,
                        &mut self.outgoing,
                        &mut self.outgoing_len,
                    )
                    .map(|_| Some(Advance::Written)),
                    Out::CloseNotify => {
                        grow_and_retry(&mut self.outgoing, &mut self.outgoing_len, |buf| {
                            traffic.queue_close_notify(buf).map_err(encrypt_size)
                        })
                        .map(|_| {
                            self.close_queued = true;
                            Some(Advance::Written)
                        })
                    }
                },
                Ok(ConnectionState::PeerClosed) => {
                    self.peer_closed = true;
                    Ok(Some(Advance::PeerClosed))
                }
                Ok(ConnectionState::Closed) => {
                    self.peer_closed = true;
                    Ok(Some(Advance::Closed))
                }
                Ok(ConnectionState::ReadEarlyData(_)) => Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "TLS early data is not accepted",
                )),
                Ok(_) => Err(io::Error::other("unexpected TLS connection state")),
            };
            if discard > 0 {
                self.incoming.copy_within(discard..self.incoming_len, 0);
                self.incoming_len -= discard;
            }
            match step {
                Ok(Some(Advance::NeedInput)) => {
                    self.idle = matches!(out, Out::Nothing) && self.incoming_len == 0;
                    return Ok(Advance::NeedInput);
                }
                Ok(Some(advance)) => return Ok(advance),
                Ok(None) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Sends the queued TLS bytes. `Ready(Ok)` once all are sent.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.outgoing_len {
            let n =
                ready!(Pin::new(&mut self.io)
                    .poll_write(cx, &self.outgoing[self.sent..self.outgoing_len]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.sent = 0;
        self.outgoing_len = 0;
        // A large write's buffer is not kept for the life of a mostly idle connection.
        if self.outgoing.len() > KEEP_BUFFER {
            self.outgoing = Vec::new();
        }
        Poll::Ready(Ok(()))
    }

    /// Reads more TLS bytes from the transport (one read call). Sets `eof` at its end.
    fn poll_receive(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.incoming_len == self.incoming.len() {
            if self.incoming.len() >= MAX_INCOMING {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "TLS record larger than the protocol allows",
                )));
            }
            let size = (self.incoming.len() * 2).min(MAX_INCOMING);
            self.incoming.resize(size, 0);
        }
        let mut buf = ReadBuf::new(&mut self.incoming[self.incoming_len..]);
        ready!(Pin::new(&mut self.io).poll_read(cx, &mut buf))?;
        let n = buf.filled().len();
        if n == 0 {
            self.eof = true;
        }
        self.incoming_len += n;
        Poll::Ready(Ok(()))
    }

    /// Encodes the handshake records and alerts rustls has queued (session tickets after a
    /// handshake, the alert after an error) into the outgoing buffer. Stops at anything else;
    /// received plaintext stays with rustls.
    fn queue_pending(&mut self) {
        self.idle = false;
        for _ in 0..8 {
            let UnbufferedStatus { discard, state } =
                self.conn.process(&mut self.incoming[..self.incoming_len]);
            let more = match state {
                Ok(ConnectionState::EncodeTlsData(mut data)) => {
                    grow_and_retry(&mut self.outgoing, &mut self.outgoing_len, |buf| {
                        data.encode(buf).map_err(encode_size)
                    })
                    .is_ok()
                }
                Ok(ConnectionState::TransmitTlsData(data)) => {
                    data.done();
                    true
                }
                _ => false,
            };
            if discard > 0 {
                self.incoming.copy_within(discard..self.incoming_len, 0);
                self.incoming_len -= discard;
            }
            if !more {
                break;
            }
        }
    }

    /// After a TLS error: queues the alert rustls prepared for the peer and sends what the
    /// socket takes without waiting. rustls is not asked to process anything after this.
    fn send_alert(&mut self, cx: &mut Context<'_>) {
        if self.failed {
            return;
        }
        self.failed = true;
        self.idle = false;
        // rustls hands out what it has queued (the alert) before it looks at new records.
        let UnbufferedStatus { state, .. } =
            self.conn.process(&mut self.incoming[..self.incoming_len]);
        if let Ok(ConnectionState::EncodeTlsData(mut data)) = state {
            let _ = grow_and_retry(&mut self.outgoing, &mut self.outgoing_len, |buf| {
                data.encode(buf).map_err(encode_size)
            });
        }
        let _ = self.poll_send(cx);
    }

    /// Drives the handshake until it is complete and its last records are sent.
    fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            if !self.conn.common().is_handshaking() {
                // The last flight (a client's Finished, a server's session tickets) goes now.
                self.queue_pending();
                return self.poll_send(cx);
            }
            match self.advance(Out::Nothing, None) {
                Ok(Advance::NeedInput) => {
                    if !self.conn.common().is_handshaking() {
                        // Complete with this flight: nothing more to wait for.
                        continue;
                    }
                    ready!(self.poll_send(cx))?;
                    if self.eof {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the peer closed the connection during the TLS handshake",
                        )));
                    }
                    ready!(self.poll_receive(cx))?;
                }
                Ok(Advance::Readable | Advance::Written) => {}
                Ok(Advance::PeerClosed | Advance::Closed) => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the peer closed the TLS connection during the handshake",
                    )));
                }
                Err(e) => {
                    self.send_alert(cx);
                    return Poll::Ready(Err(e));
                }
            }
        }
    }

    /// Encrypts as much of `data` as one call takes and starts sending it.
    fn poll_write_plain(&mut self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        // What earlier writes queued goes first; this also bounds the outgoing buffer.
        ready!(self.poll_send(cx))?;
        let data = &data[..data.len().min(MAX_WRITE)];
        loop {
            match self.advance(Out::Data(data), None) {
                Ok(Advance::Written) => break,
                Ok(Advance::Readable | Advance::PeerClosed) => {}
                Ok(Advance::Closed) => return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
                Ok(Advance::NeedInput) => {
                    return Poll::Ready(Err(io::Error::other(
                        "TLS connection cannot send application data",
                    )))
                }
                Err(e) => {
                    self.send_alert(cx);
                    return Poll::Ready(Err(e));
                }
            }
        }
        // Whatever the socket does not take now goes out with the next write or flush.
        if let Poll::Ready(Err(e)) = self.poll_send(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(data.len()))
    }
}

/// Calls `f` with the free end of `buf` (from `*len`), growing `buf` once when `f` says how
/// much room it needs, and advances `*len` by what `f` wrote.
fn grow_and_retry(
    buf: &mut Vec<u8>,
    len: &mut usize,
    mut f: impl FnMut(&mut [u8]) -> Result<usize, Result<InsufficientSizeError, io::Error>>,
) -> io::Result<()> {
    let written = match f(&mut buf[*len..]) {
        Ok(n) => n,
        Err(Ok(InsufficientSizeError { required_size })) => {
            buf.resize(*len + required_size, 0);
            f(&mut buf[*len..]).map_err(|e| match e {
                Ok(s) => io::Error::other(format!(
                    "TLS output buffer still too small ({} bytes needed)",
                    s.required_size
                )),
                Err(e) => e,
            })?
        }
        Err(Err(e)) => return Err(e),
    };
    *len += written;
    Ok(())
}

fn encode_size(e: EncodeError) -> Result<InsufficientSizeError, io::Error> {
    match e {
        EncodeError::InsufficientSize(s) => Ok(s),
        other => Err(io::Error::other(other)),
    }
}

fn encrypt_size(e: EncryptError) -> Result<InsufficientSizeError, io::Error> {
    match e {
        EncryptError::InsufficientSize(s) => Ok(s),
        other => Err(io::Error::other(other)),
    }
}

fn encrypt<D>(
    traffic: &mut WriteTraffic<'_, D>,
    data: &[u8],
    outgoing: &mut Vec<u8>,
    len: &mut usize,
) -> io::Result<()> {
    grow_and_retry(outgoing, len, |buf| {
        traffic.encrypt(data, buf).map_err(encrypt_size)
    })
}

impl<IO, S> AsyncRead for TlsStream<IO, S>
where
    IO: AsyncRead + AsyncWrite + Unpin,
    S: Side,
{
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        if this.stash_pos < this.stash.len() {
            let n = (this.stash.len() - this.stash_pos).min(buf.remaining());
            buf.put_slice(&this.stash[this.stash_pos..this.stash_pos + n]);
            this.stash_pos += n;
            return Poll::Ready(Ok(()));
        }
        loop {
            if this.peer_closed {
                return Poll::Ready(Ok(()));
            }
            let step = if this.idle && this.incoming_len == 0 {
                Ok(Advance::NeedInput)
            } else {
                this.advance(Out::Nothing, Some(buf))
            };
            match step {
                Ok(Advance::Readable | Advance::PeerClosed | Advance::Closed) => {
                    return Poll::Ready(Ok(()))
                }
                Ok(Advance::NeedInput | Advance::Written) => {
                    // Records rustls answered on its own (a key update) leave now if they can.
                    if let Poll::Ready(Err(e)) = this.poll_send(cx) {
                        return Poll::Ready(Err(e));
                    }
                    if this.eof {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the peer closed the connection without a TLS close_notify",
                        )));
                    }
                    ready!(this.poll_receive(cx))?;
                }
                Err(e) => {
                    this.send_alert(cx);
                    return Poll::Ready(Err(e));
                }
            }
        }
    }
}

impl<IO, S> AsyncWrite for TlsStream<IO, S>
where
    IO: AsyncRead + AsyncWrite + Unpin,
    S: Side,
{
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_write_plain(cx, data)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let mut nonempty = bufs.iter().filter(|b| !b.is_empty());
        let first = nonempty.next();
        if nonempty.next().is_none() {
            return this.poll_write_plain(cx, first.map_or(&[][..], |b| &b[..]));
        }
        // Several slices (a head and its body): one record instead of one per slice.
        let mut gather = std::mem::take(&mut this.gather);
        gather.clear();
        for b in bufs {
            let n = b.len().min(MAX_WRITE - gather.len());
            gather.extend_from_slice(&b[..n]);
            if gather.len() == MAX_WRITE {
                break;
            }
        }
        let result = this.poll_write_plain(cx, &gather);
        if gather.capacity() <= KEEP_BUFFER {
            this.gather = gather;
        }
        result
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.close_queued {
            ready!(this.poll_send(cx))?;
            // Plaintext still arriving is set aside until rustls is ready to encrypt; once
            // closed, or broken, there is no alert to send.
            while let Ok(Advance::Readable | Advance::PeerClosed) =
                this.advance(Out::CloseNotify, None)
            {}
            this.close_queued = true;
        }
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    use rustls::SupportedProtocolVersion;
    use tokio::io::{duplex, AsyncReadExt, AsyncWriteExt, DuplexStream};

    const TLS13: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13];
    const TLS12: &[&SupportedProtocolVersion] = &[&rustls::version::TLS12];

    struct Identity {
        cert: CertificateDer<'static>,
        key: Vec<u8>,
    }

    fn identity() -> Identity {
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        Identity {
            cert: ck.cert.der().clone(),
            key: ck.signing_key.serialize_der(),
        }
    }

    fn server_config(
        id: &Identity,
        versions: &[&'static SupportedProtocolVersion],
        alpn: &[&[u8]],
    ) -> Arc<ServerConfig> {
        let mut cfg = ServerConfig::builder_with_provider(Arc::new(crate::provider()))
            .with_protocol_versions(versions)
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![id.cert.clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(id.key.clone())),
            )
            .unwrap();
        cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(cfg)
    }

    fn client_config(
        trusted: &Identity,
        versions: &[&'static SupportedProtocolVersion],
        alpn: &[&[u8]],
    ) -> Arc<ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(trusted.cert.clone()).unwrap();
        let mut cfg = ClientConfig::builder_with_provider(Arc::new(crate::provider()))
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(cfg)
    }

    fn localhost() -> ServerName<'static> {
        ServerName::try_from("localhost").unwrap()
    }

    /// Deterministic sizes and bytes for the transfer tests.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    fn payload(len: usize, seed: u64) -> Vec<u8> {
        let mut rng = Rng(seed | 1);
        (0..len).map(|_| rng.next() as u8).collect()
    }

    /// Sends `data` in pieces of random sizes (some vectored, one larger than a write call
    /// takes), closes with close_notify, and reads the echo until the end of stream.
    async fn send_and_read_echo<T>(stream: T, data: Vec<u8>, seed: u64) -> Vec<u8>
    where
        T: AsyncRead + AsyncWrite + Unpin,
    {
        let (mut rd, mut wr) = tokio::io::split(stream);
        let writer = async move {
            let mut rng = Rng(seed);
            let mut pos = 0;
            let mut big_done = false;
            while pos < data.len() {
                let left = data.len() - pos;
                let n = if !big_done && left > MAX_WRITE + 10 {
                    big_done = true;
                    MAX_WRITE + 10
                } else {
                    (1 + rng.below(3000)).min(left)
                };
                let piece = &data[pos..pos + n];
                if n > 2 && rng.below(2) == 0 {
                    let (a, b) = piece.split_at(n / 3);
                    let mut slices = [io::IoSlice::new(a), io::IoSlice::new(b)];
                    let mut bufs = &mut slices[..];
                    let mut done = 0;
                    while done < n {
                        let w = wr.write_vectored(bufs).await.unwrap();
                        assert!(w > 0);
                        done += w;
                        io::IoSlice::advance_slices(&mut bufs, w);
                    }
                } else {
                    wr.write_all(piece).await.unwrap();
                }
                pos += n;
            }
            wr.shutdown().await.unwrap();
        };
        let reader = async move {
            let mut got = Vec::new();
            rd.read_to_end(&mut got).await.unwrap();
            got
        };
        let ((), got) = tokio::join!(writer, reader);
        got
    }

    /// Echoes what arrives, in reads of random sizes, until the peer's close_notify; then
    /// sends its own.
    async fn echo<T>(mut stream: T, seed: u64)
    where
        T: AsyncRead + AsyncWrite + Unpin,
    {
        let mut rng = Rng(seed);
        let mut buf = vec![0u8; 20_000];
        loop {
            let want = 1 + rng.below(buf.len());
            let n = stream.read(&mut buf[..want]).await.unwrap();
            if n == 0 {
                break;
            }
            stream.write_all(&buf[..n]).await.unwrap();
        }
        stream.shutdown().await.unwrap();
    }

    async fn handshake(
        server: Arc<ServerConfig>,
        client: Arc<ClientConfig>,
        pipe: usize,
    ) -> (
        io::Result<TlsStream<DuplexStream, UnbufferedServerConnection>>,
        io::Result<TlsStream<DuplexStream, UnbufferedClientConnection>>,
    ) {
        let (a, b) = duplex(pipe);
        tokio::join!(accept(server, a), connect(client, localhost(), b))
    }

    #[tokio::test]
    async fn both_sides_carry_data_each_way_over_tls13_and_tls12() {
        let id = identity();
        for (versions, seed) in [(TLS13, 7), (TLS12, 11), (TLS13, 13)] {
            let (server, client) = handshake(
                server_config(&id, versions, &[]),
                client_config(&id, versions, &[]),
                // A small pipe: writes and reads stop half way through records.
                1000,
            )
            .await;
            let (server, client) = (server.unwrap(), client.unwrap());
            let data = payload(300_000, seed);
            let (got, ()) = tokio::join!(
                send_and_read_echo(client, data.clone(), seed),
                echo(server, seed + 1)
            );
            assert!(
                got == data,
                "echo differs ({} of {} bytes)",
                got.len(),
                data.len()
            );
        }
    }

    #[tokio::test]
    async fn talks_to_tokio_rustls_on_either_side() {
        let id = identity();
        let data = payload(100_000, 3);

        // Our server, tokio-rustls's client.
        let (a, b) = duplex(4096);
        let connector = tokio_rustls::TlsConnector::from(client_config(&id, TLS13, &[b"h2"]));
        let (server, client) = tokio::join!(
            accept(server_config(&id, TLS13, &[b"h2", b"http/1.1"]), a),
            connector.connect(localhost(), b)
        );
        let (server, client) = (server.unwrap(), client.unwrap());
        assert_eq!(server.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let (got, ()) = tokio::join!(send_and_read_echo(client, data.clone(), 5), echo(server, 6));
        assert!(got == data);

        // tokio-rustls's server, our client.
        let (a, b) = duplex(4096);
        let acceptor = tokio_rustls::TlsAcceptor::from(server_config(&id, TLS12, &[]));
        let (server, client) = tokio::join!(
            acceptor.accept(a),
            connect(client_config(&id, TLS12, &[]), localhost(), b)
        );
        let (server, client) = (server.unwrap(), client.unwrap());
        let (got, ()) = tokio::join!(send_and_read_echo(client, data.clone(), 8), echo(server, 9));
        assert!(got == data);
    }

    /// A transport that keeps a copy of every byte written through it.
    struct Tap {
        inner: DuplexStream,
        written: Arc<std::sync::Mutex<Vec<u8>>>,
    }

    impl AsyncRead for Tap {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for Tap {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            data: &[u8],
        ) -> Poll<io::Result<usize>> {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, data))?;
            self.written.lock().unwrap().extend_from_slice(&data[..n]);
            Poll::Ready(Ok(n))
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_flush(cx)
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_shutdown(cx)
        }
    }

    /// Content types of the TLS records in `wire` (it holds whole records).
    fn record_types(wire: &[u8]) -> Vec<u8> {
        let mut types = Vec::new();
        let mut rest = wire;
        while rest.len() >= 5 {
            let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
            types.push(rest[0]);
            rest = &rest[5 + len..];
        }
        assert!(rest.is_empty(), "a partial record");
        types
    }

    #[tokio::test]
    async fn a_vectored_write_goes_out_as_one_record() {
        let id = identity();
        let written = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (a, b) = duplex(1 << 20);
        let tap = Tap {
            inner: b,
            written: written.clone(),
        };
        let (server, client) = tokio::join!(
            accept(server_config(&id, TLS13, &[]), a),
            connect(client_config(&id, TLS13, &[]), localhost(), tap)
        );
        let (mut server, mut client) = (server.unwrap(), client.unwrap());
        written.lock().unwrap().clear();
        let (head, body) = (
            &b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\n"[..],
            &b"body"[..],
        );
        let n = client
            .write_vectored(&[io::IoSlice::new(head), io::IoSlice::new(body)])
            .await
            .unwrap();
        assert_eq!(n, head.len() + body.len());
        client.flush().await.unwrap();
        // One application-data record (TLS 1.3 records all say 23 on the wire).
        assert_eq!(record_types(&written.lock().unwrap()), vec![23]);
        let mut got = vec![0u8; n];
        server.read_exact(&mut got).await.unwrap();
        assert_eq!(got, [head, body].concat());
    }

    #[tokio::test]
    async fn a_bulk_write_does_not_keep_its_buffer() {
        let id = identity();
        let (server, client) = handshake(
            server_config(&id, TLS13, &[]),
            client_config(&id, TLS13, &[]),
            1 << 20,
        )
        .await;
        let (mut server, mut client) = (server.unwrap(), client.unwrap());
        let data = payload(200_000, 21);
        let reader = async {
            let mut got = vec![0u8; data.len()];
            server.read_exact(&mut got).await.unwrap();
            got
        };
        let writer = async {
            client.write_all(&data).await.unwrap();
            client.flush().await.unwrap();
        };
        let (got, ()) = tokio::join!(reader, writer);
        assert!(got == data);
        assert!(
            client.outgoing.len() <= KEEP_BUFFER,
            "{}",
            client.outgoing.len()
        );
        client.write_all(b"small").await.unwrap();
        client.flush().await.unwrap();
        assert!(client.outgoing.len() <= KEEP_BUFFER);
        let mut small = [0u8; 5];
        server.read_exact(&mut small).await.unwrap();
        assert_eq!(&small, b"small");
    }

    #[tokio::test]
    async fn an_end_without_close_notify_is_a_truncation() {
        let id = identity();
        let (server, client) = handshake(
            server_config(&id, TLS13, &[]),
            client_config(&id, TLS13, &[]),
            8192,
        )
        .await;
        let (mut server, mut client) = (server.unwrap(), client.unwrap());
        client.write_all(b"partial").await.unwrap();
        client.flush().await.unwrap();
        drop(client);
        let mut buf = [0u8; 64];
        let n = server.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"partial");
        let err = server.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[tokio::test]
    async fn failed_handshakes_send_the_peer_an_alert() {
        let id = identity();
        let stranger = identity();

        // The client does not trust the server's certificate: the server hears why.
        let (server, client) = handshake(
            server_config(&id, TLS13, &[]),
            client_config(&stranger, TLS13, &[]),
            8192,
        )
        .await;
        let client_err = client.err().expect("untrusted certificate accepted");
        assert_eq!(client_err.kind(), io::ErrorKind::InvalidData);
        let server_err = server.err().expect("server handshake should fail");
        assert!(
            server_err.to_string().contains("alert"),
            "server error: {server_err}"
        );

        // No common protocol version: the client hears it from the server.
        let (server, client) = handshake(
            server_config(&id, TLS13, &[]),
            client_config(&id, TLS12, &[]),
            8192,
        )
        .await;
        assert!(server.is_err());
        let client_err = client.err().expect("version mismatch accepted");
        assert!(
            client_err.to_string().contains("alert"),
            "client error: {client_err}"
        );

        // The peer goes away in the middle of the handshake.
        let (a, b) = duplex(8192);
        drop(b);
        let err = accept(server_config(&id, TLS13, &[]), a)
            .await
            .err()
            .expect("handshake without a peer");
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[tokio::test]
    async fn garbage_instead_of_records_is_an_error() {
        let id = identity();
        let (mut a, b) = duplex(8192);
        a.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let err = accept(server_config(&id, TLS13, &[]), b)
            .await
            .err()
            .expect("plain HTTP accepted as TLS");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }
}
