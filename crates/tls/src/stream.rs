//! TLS over a tokio byte stream.
//!
//! rustls runs the handshake, through its unbuffered API (`handshake.rs`). Then it hands over
//! the traffic secrets (its `kernel` API), and the stream protects records itself
//! (`record.rs`):
//! - a read with room for a record of everyday size, when nothing waits in the stream, receives
//!   straight into the caller's buffer and opens the whole records there, each plaintext
//!   written where the previous one ends as it is decrypted (no copy); the start of a record
//!   that has not arrived whole moves to the incoming buffer, and reads go through that buffer
//!   until one ends where a record does (bulk data in large records would otherwise have the
//!   start of each record copied aside);
//! - otherwise records arrive in one incoming buffer and are decrypted in place, and a read
//!   copies their plaintext into the caller's buffer;
//! - a write seals its plaintext, in records of up to 16 KiB, in place in one outgoing buffer,
//!   which goes to the socket with one write; the slices of a vectored write (a head and its
//!   body) are gathered into the same record.
//!
//! rustls 0.23 allocates and copies every record it protects, in either of its APIs; this path
//! does neither. rustls keeps what only it can do after the handshake: it derives the secrets
//! of a TLS 1.3 key update and stores the session tickets a server sends.
//!
//! [`accept`] and [`connect`] run the handshake and return a [`TlsStream`]. A `TlsStream`
//! implements tokio's `AsyncRead` and `AsyncWrite`:
//! - reads end with `UnexpectedEof` when the transport ends without the peer's `close_notify`
//!   (a truncation), and with end of stream after it;
//! - `poll_shutdown` sends `close_notify`, then shuts the transport down;
//! - a protocol error sends the peer a fatal alert and fails the connection.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use rustls::client::UnbufferedClientConnection;
use rustls::kernel::KernelConnection;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::server::UnbufferedServerConnection;
use rustls::{
    AlertDescription, ClientConfig, ContentType, HandshakeKind, HandshakeType, ProtocolVersion,
    ServerConfig, SupportedCipherSuite,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

pub use crate::handshake::Side;
use crate::handshake::{tls_error, Handshake};
use crate::record::{
    announced_len, RecordError, RecordKey, Version, HEADER_LEN, MAX_CIPHERTEXT, MAX_PLAINTEXT,
};
use crate::transport::Transport;

/// Most plaintext taken by one write call. Larger writes return a short count, which bounds
/// the outgoing buffer.
const MAX_WRITE: usize = 64 * 1024;
/// Most bytes held unprocessed after the handshake: one record of the largest size.
const MAX_INCOMING: usize = HEADER_LEN + MAX_CIPHERTEXT;
/// Least room a reader's buffer must have for records to be received and opened in it
/// directly: more than a record of everyday size (a request, a small response).
const DIRECT_READ_MIN: usize = 2048;
/// Longest handshake message accepted after the handshake (a session ticket).
const MAX_POST_HANDSHAKE_MESSAGE: usize = 1 << 16;
/// Key updates a peer may ask for in a row without sending application data (BoringSSL's
/// and rustls's limit).
const MAX_KEY_UPDATES: u8 = 32;
/// Warning alerts a TLS 1.2 peer may send, and renegotiation requests it may make (each is
/// refused with a warning).
const MAX_WARNING_ALERTS: u8 = 4;
const MAX_RENEGOTIATION_REQUESTS: u8 = 1;
/// Records a TLS 1.2 connection keeps in hand before its confidentiality limit: below this
/// margin it is no longer offered for reuse, so that no request starts on a connection that must
/// close under it.
const TLS12_RETIRE_MARGIN: u64 = 1 << 12;
/// The TLS 1.3 KeyUpdate message that does not ask the peer to update its keys.
const KEY_UPDATE_NOT_REQUESTED: [u8; 5] = [24, 0, 0, 1, 0];
const ALERT_WARNING: u8 = 1;
const ALERT_FATAL: u8 = 2;

/// What a handshake settled, kept for the life of the connection.
#[derive(Debug)]
pub struct Session {
    alpn: Option<Vec<u8>>,
    peer_certificates: Option<Vec<CertificateDer<'static>>>,
    version: ProtocolVersion,
    suite: SupportedCipherSuite,
    kind: Option<HandshakeKind>,
}

impl Session {
    /// The ALPN protocol agreed on, if any.
    pub fn alpn_protocol(&self) -> Option<&[u8]> {
        self.alpn.as_deref()
    }

    /// The peer's certificate chain, end entity first: the server's, or a client's that was
    /// verified (mutual TLS).
    pub fn peer_certificates(&self) -> Option<&[CertificateDer<'static>]> {
        self.peer_certificates.as_deref()
    }

    /// TLS 1.2 or 1.3.
    pub fn protocol_version(&self) -> ProtocolVersion {
        self.version
    }

    /// The cipher suite agreed on.
    pub fn negotiated_cipher_suite(&self) -> SupportedCipherSuite {
        self.suite
    }

    /// Whether the handshake was a full one or resumed a session.
    pub fn handshake_kind(&self) -> Option<HandshakeKind> {
        self.kind
    }
}

/// A TLS connection over `IO`, after its handshake. It is made by [`accept`] or [`connect`].
///
/// Laid out in this order (`repr(C)`): what every read and write touches comes first and
/// shares a few cache lines, then the two keys, then what only the handshake, a key update or
/// a session ticket needs. A worker serves many connections in turn, so a connection's state
/// is usually out of the CPU's caches when its next record comes; each line it touches is a
/// miss.
#[repr(C)]
pub struct TlsStream<IO, S: Side> {
    /// Plaintext of the record being read, not taken yet: `t.incoming.buf[plain]`. The record
    /// is `plain_record` bytes long and is consumed once its plaintext is.
    plain: std::ops::Range<usize>,
    plain_record: usize,
    /// Application data that arrived with the end of the handshake: `early[early_pos..]`.
    early_pos: usize,
    /// Records one key seals before TLS 1.3 updates it (TLS 1.2 closes instead): the cipher
    /// suite's confidentiality limit.
    tx_limit: u64,
    version: Version,
    /// Reads may receive records into the reader's buffer. Off after such a read left a
    /// record half received (bulk data in large records: its start would be copied aside
    /// each time); on again once a read ends where a record does.
    direct: bool,
    /// The peer has sent `close_notify`.
    peer_closed: bool,
    /// Our `close_notify` (or fatal alert) is queued: nothing more is sealed.
    close_queued: bool,
    /// A protocol error ended the connection.
    failed: bool,
    /// What a peer may still do before it counts as misbehaving.
    key_updates_left: u8,
    warnings_left: u8,
    renegotiations_left: u8,
    early: Vec<u8>,
    /// A post-handshake message that continues in the next record.
    handshake: Vec<u8>,
    t: Transport<IO>,
    rx: RecordKey,
    tx: RecordKey,
    session: Session,
    kernel: KernelConnection<S::Data>,
}

/// Runs a server handshake on `io` with `config` and returns the connection once the
/// handshake is complete. The caller puts a timeout around it. A failed handshake sends the
/// peer its alert (as far as the socket takes it without waiting) and returns the error.
/// `config` must allow secret extraction ([`crate::server_config`]'s do).
pub async fn accept<IO>(
    config: Arc<ServerConfig>,
    io: IO,
) -> io::Result<TlsStream<IO, UnbufferedServerConnection>>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let conn = UnbufferedServerConnection::new(config).map_err(tls_error)?;
    let mut hs = Handshake::new(io, conn);
    std::future::poll_fn(|cx| hs.poll_handshake(cx)).await?;
    TlsStream::after(hs)
}

/// Runs a client handshake with `config` towards `name` (sent as SNI, and the name the
/// certificate is verified for) on `io`. Returns the connection once the handshake is
/// complete. `config` must allow secret extraction ([`crate::client_config`]'s do).
pub async fn connect<IO>(
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
    io: IO,
) -> io::Result<TlsStream<IO, UnbufferedClientConnection>>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let conn = UnbufferedClientConnection::new(config, name).map_err(tls_error)?;
    let mut hs = Handshake::new(io, conn);
    std::future::poll_fn(|cx| hs.poll_handshake(cx)).await?;
    TlsStream::after(hs)
}

#[cold]
#[inline(never)]
fn record_io_error(e: RecordError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.message)
}

/// Takes the content of a record that is not application data: an alert is returned (level,
/// description), a piece of a post-handshake message is added to `handshake`; any other
/// record is an error.
#[cold]
#[inline(never)]
fn take_control(
    typ: ContentType,
    content: &[u8],
    handshake: &mut Vec<u8>,
) -> Result<Option<(u8, u8)>, RecordError> {
    match typ {
        ContentType::Alert => match *content {
            [level, desc] => Ok(Some((level, desc))),
            _ => Err(RecordError::new(
                AlertDescription::DecodeError,
                "malformed alert",
            )),
        },
        ContentType::Handshake if !content.is_empty() => {
            handshake.extend_from_slice(content);
            Ok(None)
        }
        other => Err(RecordError::new(
            AlertDescription::UnexpectedMessage,
            format!("unexpected {other:?} record after the handshake"),
        )),
    }
}

impl<IO, S> TlsStream<IO, S>
where
    IO: AsyncRead + AsyncWrite + Unpin,
    S: Side,
{
    /// Takes a completed handshake over: rustls gives up the traffic secrets.
    fn after(hs: Handshake<IO, S>) -> io::Result<Self> {
        let Handshake {
            mut t,
            conn,
            early,
            peer_closed,
        } = hs;
        // The handshake's buffers are not kept: from here on reads and writes borrow the
        // thread's (see transport.rs).
        t.incoming.return_spare();
        t.outgoing.return_spare();
        let common = conn.common();
        let session = Session {
            alpn: common.alpn_protocol().map(<[u8]>::to_vec),
            peer_certificates: common.peer_certificates().map(<[_]>::to_vec),
            version: common
                .protocol_version()
                .ok_or_else(|| io::Error::other("TLS version not negotiated"))?,
            suite: common
                .negotiated_cipher_suite()
                .ok_or_else(|| io::Error::other("TLS cipher suite not negotiated"))?,
            kind: common.handshake_kind(),
        };
        let (secrets, kernel) = conn.into_kernel().map_err(tls_error)?;
        let version = Version::of(session.version)
            .ok_or_else(|| io::Error::other("no record layer for the negotiated TLS version"))?;
        let tx = RecordKey::new(version, secrets.tx.0, &secrets.tx.1).map_err(record_io_error)?;
        let rx = RecordKey::new(version, secrets.rx.0, &secrets.rx.1).map_err(record_io_error)?;
        let tx_limit = match session.suite {
            SupportedCipherSuite::Tls12(s) => s.common.confidentiality_limit,
            SupportedCipherSuite::Tls13(s) => s.common.confidentiality_limit,
        };
        Ok(TlsStream {
            t,
            kernel,
            session,
            version,
            tx,
            rx,
            tx_limit,
            early,
            early_pos: 0,
            plain: 0..0,
            plain_record: 0,
            handshake: Vec::new(),
            direct: true,
            key_updates_left: MAX_KEY_UPDATES,
            warnings_left: MAX_WARNING_ALERTS,
            renegotiations_left: MAX_RENEGOTIATION_REQUESTS,
            peer_closed,
            close_queued: false,
            failed: false,
        })
    }

    /// The transport and what the handshake settled (ALPN protocol, peer certificates).
    pub fn get_ref(&self) -> (&IO, &Session) {
        (&self.t.io, &self.session)
    }

    /// True while the connection can take another request and its answer: it has not failed
    /// or been closed, and a TLS 1.2 connection is not near its cipher's confidentiality limit
    /// (TLS 1.2 has no key update; at the limit the connection is closed). A pool asks this
    /// before it reuses a connection.
    pub fn can_carry_more(&self) -> bool {
        !self.failed
            && !self.close_queued
            && !self.peer_closed
            && (self.version == Version::Tls13
                || self.tx.seq().saturating_add(TLS12_RETIRE_MARGIN) < self.tx_limit)
    }

    /// Seals one record of type `typ` carrying `plain` (at most one record's worth) into the
    /// outgoing queue.
    fn seal_record(&mut self, typ: ContentType, plain: &[u8]) -> Result<(), RecordError> {
        let (prefix, suffix) = (self.tx.prefix_len(), self.tx.suffix_len(plain.len()));
        let len = prefix + plain.len() + suffix;
        let record = self.t.outgoing.reserve(len);
        record[prefix..prefix + plain.len()].copy_from_slice(plain);
        self.tx.seal(typ, record, plain.len())?;
        self.t.outgoing.commit(len);
        Ok(())
    }

    /// Sends our KeyUpdate under the current key, then switches to the next one (TLS 1.3).
    #[cold]
    #[inline(never)]
    fn update_tx_key(&mut self) -> Result<(), RecordError> {
        self.seal_record(ContentType::Handshake, &KEY_UPDATE_NOT_REQUESTED)?;
        let (seq, secrets) = self
            .kernel
            .update_tx_secret()
            .map_err(|e| RecordError::new(AlertDescription::InternalError, e.to_string()))?;
        self.tx = RecordKey::new(self.version, seq, &secrets)?;
        Ok(())
    }

    /// Seals the first `total` bytes of `bufs` as application data, in records of up to
    /// [`MAX_PLAINTEXT`] bytes, gathering slices into the same record.
    fn seal_data(&mut self, bufs: &[io::IoSlice<'_>], total: usize) -> Result<(), RecordError> {
        let mut slices = bufs.iter();
        let mut current: &[u8] = &[];
        let mut left = total;
        while left > 0 {
            if self.tx.seq().saturating_add(1) >= self.tx_limit {
                match self.version {
                    Version::Tls13 => self.update_tx_key()?,
                    Version::Tls12 => {
                        // No key update in TLS 1.2: the connection ends here, cleanly.
                        self.seal_record(ContentType::Alert, &[ALERT_WARNING, 0])?;
                        self.close_queued = true;
                        return Err(RecordError {
                            alert: None,
                            message: "the TLS 1.2 connection reached its cipher's \
                                      confidentiality limit and was closed"
                                .into(),
                        });
                    }
                }
            }
            let n = left.min(MAX_PLAINTEXT);
            let (prefix, suffix) = (self.tx.prefix_len(), self.tx.suffix_len(n));
            let record = self.t.outgoing.reserve(prefix + n + suffix);
            let mut filled = 0;
            while filled < n {
                if current.is_empty() {
                    current = slices.next().map_or(&[][..], |s| &s[..]);
                    continue;
                }
                let k = current.len().min(n - filled);
                record[prefix + filled..prefix + filled + k].copy_from_slice(&current[..k]);
                current = &current[k..];
                filled += k;
            }
            self.tx.seal(ContentType::ApplicationData, record, n)?;
            self.t.outgoing.commit(prefix + n + suffix);
            left -= n;
        }
        Ok(())
    }

    /// Encrypts as much of `bufs` as one call takes and starts sending it.
    fn poll_write_slices(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let total = bufs
            .iter()
            .map(|b| b.len())
            .fold(0usize, usize::saturating_add)
            .min(MAX_WRITE);
        if total == 0 {
            return Poll::Ready(Ok(0));
        }
        if self.failed {
            return Poll::Ready(Err(io::Error::other("the TLS connection failed earlier")));
        }
        if self.close_queued {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        // What earlier writes queued goes first; this also bounds the outgoing buffer.
        ready!(self.t.poll_send(cx))?;
        self.t.outgoing.borrow_spare();
        if let Err(e) = self.seal_data(bufs, total) {
            return Poll::Ready(Err(self.fail(cx, e)));
        }
        // Whatever the socket does not take now goes out with the next write or flush.
        let sent = self.t.poll_send(cx);
        self.t.outgoing.return_spare();
        if let Poll::Ready(Err(e)) = sent {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(total))
    }

    /// Ends the connection after a protocol error: queues the alert for the peer (unless the
    /// peer's own alert ended it) and sends what the socket takes without waiting.
    #[cold]
    #[inline(never)]
    fn fail(&mut self, cx: &mut Context<'_>, e: RecordError) -> io::Error {
        if !self.failed {
            self.failed = true;
            if let Some(alert) = e.alert {
                if !self.close_queued {
                    self.close_queued = true;
                    let _ = self.seal_record(ContentType::Alert, &[ALERT_FATAL, u8::from(alert)]);
                }
            }
            // The alert, or the close_notify queued before the error, leaves now if it can.
            let _ = self.t.poll_send(cx);
        }
        record_io_error(e)
    }

    /// Opens the next record if all of it has arrived: application data becomes the plaintext
    /// to read, alerts and post-handshake messages are handled. `Ok(false)` when more bytes
    /// must arrive first.
    fn open_next(&mut self) -> Result<bool, RecordError> {
        let received = self.t.incoming.bytes();
        let Some(len) = announced_len(received)? else {
            return Ok(false);
        };
        if received.len() < len {
            return Ok(false);
        }
        let record = &mut received[..len];
        let (typ, plain) = self.rx.open(record)?;
        match typ {
            ContentType::ApplicationData => {
                self.on_application_data()?;
                if plain.is_empty() {
                    self.t.incoming.consume(len);
                } else {
                    let base = self.t.incoming.start;
                    self.plain = base + plain.start..base + plain.end;
                    self.plain_record = len;
                }
            }
            _ => self.on_control_record(typ, len, plain)?,
        }
        Ok(true)
    }

    /// Checks an application data record against the post-handshake state: it may not
    /// interrupt a handshake message, and it ends a run of key updates.
    fn on_application_data(&mut self) -> Result<(), RecordError> {
        if !self.handshake.is_empty() {
            return Err(RecordError::new(
                AlertDescription::UnexpectedMessage,
                "application data inside a handshake message",
            ));
        }
        self.key_updates_left = MAX_KEY_UPDATES;
        Ok(())
    }

    /// Acts on a record in the incoming buffer that is not application data: an alert or a
    /// post-handshake message (`plain` is where its plaintext lies in the `len` bytes of the
    /// record); anything else is an error. Rare, so kept out of the read path.
    #[cold]
    #[inline(never)]
    fn on_control_record(
        &mut self,
        typ: ContentType,
        len: usize,
        plain: std::ops::Range<usize>,
    ) -> Result<(), RecordError> {
        let content = &self.t.incoming.bytes()[plain];
        let alert = take_control(typ, content, &mut self.handshake)?;
        self.t.incoming.consume(len);
        self.on_control(alert)
    }

    /// Acts on what [`take_control`] took from a record: the peer's alert, or the
    /// post-handshake messages gathered so far.
    #[cold]
    #[inline(never)]
    fn on_control(&mut self, alert: Option<(u8, u8)>) -> Result<(), RecordError> {
        match alert {
            Some((level, desc)) => self.on_alert(level, desc),
            None => self.on_handshake(),
        }
    }

    /// Acts on an alert from the peer.
    #[cold]
    #[inline(never)]
    fn on_alert(&mut self, level: u8, desc: u8) -> Result<(), RecordError> {
        let desc = AlertDescription::from(desc);
        if level != ALERT_WARNING && level != ALERT_FATAL {
            return Err(RecordError::new(
                AlertDescription::IllegalParameter,
                "alert of an unknown level",
            ));
        }
        if desc == AlertDescription::CloseNotify {
            self.peer_closed = true;
            return Ok(());
        }
        if level == ALERT_WARNING {
            if self.warnings_left == 0 {
                return Err(RecordError::new(
                    AlertDescription::UnexpectedMessage,
                    "too many warning alerts",
                ));
            }
            self.warnings_left -= 1;
            if self.version == Version::Tls12 || desc == AlertDescription::UserCanceled {
                return Ok(());
            }
            return Err(RecordError::new(
                AlertDescription::DecodeError,
                format!("TLS 1.3 peer sent a warning alert: {desc:?}"),
            ));
        }
        Err(RecordError {
            alert: None,
            message: format!("the peer sent a fatal alert: {desc:?}"),
        })
    }

    /// Acts on the complete post-handshake messages gathered so far: session tickets, key
    /// updates, and TLS 1.2 renegotiation requests, which are refused.
    #[cold]
    #[inline(never)]
    fn on_handshake(&mut self) -> Result<(), RecordError> {
        while self.handshake.len() >= 4 {
            let h = &self.handshake;
            let len = usize::from(h[1]) << 16 | usize::from(h[2]) << 8 | usize::from(h[3]);
            if len > MAX_POST_HANDSHAKE_MESSAGE {
                return Err(RecordError::new(
                    AlertDescription::DecodeError,
                    "post-handshake message too long",
                ));
            }
            if h.len() < 4 + len {
                return Ok(());
            }
            let typ = HandshakeType::from(h[0]);
            let message: Vec<u8> = self.handshake.drain(..4 + len).collect();
            let body = &message[4..];
            match (self.version, typ) {
                (Version::Tls13, HandshakeType::NewSessionTicket) => {
                    S::new_session_ticket(&mut self.kernel, body).map_err(|e| {
                        RecordError::new(AlertDescription::UnexpectedMessage, e.to_string())
                    })?
                }
                (Version::Tls13, HandshakeType::KeyUpdate) => self.on_key_update(body)?,
                (Version::Tls12, HandshakeType::HelloRequest | HandshakeType::ClientHello) => {
                    if self.renegotiations_left == 0 {
                        return Err(RecordError::new(
                            AlertDescription::NoRenegotiation,
                            "renegotiation requested again",
                        ));
                    }
                    self.renegotiations_left -= 1;
                    self.seal_record(
                        ContentType::Alert,
                        &[ALERT_WARNING, u8::from(AlertDescription::NoRenegotiation)],
                    )?;
                }
                (_, other) => {
                    return Err(RecordError::new(
                        AlertDescription::UnexpectedMessage,
                        format!("unexpected {other:?} message after the handshake"),
                    ))
                }
            }
        }
        Ok(())
    }

    /// The peer switched to its next key (TLS 1.3); it may ask us to switch too.
    #[cold]
    #[inline(never)]
    fn on_key_update(&mut self, body: &[u8]) -> Result<(), RecordError> {
        let requested = match body {
            [0] => false,
            [1] => true,
            _ => {
                return Err(RecordError::new(
                    AlertDescription::DecodeError,
                    "malformed key update",
                ))
            }
        };
        if !self.handshake.is_empty() {
            // A key change must end its record.
            return Err(RecordError::new(
                AlertDescription::UnexpectedMessage,
                "key update not at the end of its record",
            ));
        }
        if self.key_updates_left == 0 {
            return Err(RecordError::new(
                AlertDescription::UnexpectedMessage,
                "too many key updates",
            ));
        }
        self.key_updates_left -= 1;
        let (seq, secrets) = self
            .kernel
            .update_rx_secret()
            .map_err(|e| RecordError::new(AlertDescription::InternalError, e.to_string()))?;
        self.rx = RecordKey::new(self.version, seq, &secrets)?;
        if requested && !self.close_queued {
            self.update_tx_key()?;
        }
        Ok(())
    }
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
        if this.reads_direct(buf) && ready!(this.poll_read_direct(cx, buf))? {
            return Poll::Ready(Ok(()));
        }
        this.t.incoming.borrow_spare();
        let read = this.poll_read_records(cx, buf);
        this.t.incoming.return_spare();
        read
    }
}

impl<IO, S> TlsStream<IO, S>
where
    IO: AsyncRead + AsyncWrite + Unpin,
    S: Side,
{
    /// Whether a read can receive records straight into the caller's buffer: nothing waits in
    /// the stream (early data, plaintext, received bytes, bytes to send), the connection is
    /// open, the last such read did not leave a record half received (see `direct`), and the
    /// caller has room for a record of everyday size.
    fn reads_direct(&self, buf: &ReadBuf<'_>) -> bool {
        self.direct
            && buf.remaining() >= DIRECT_READ_MIN
            && self.early_pos >= self.early.len()
            && self.plain.start == self.plain.end
            && self.t.incoming.is_empty()
            && !self.t.outgoing.is_pending()
            && !(self.t.eof || self.failed || self.peer_closed)
    }

    /// Reads from the transport into the caller's buffer and opens the whole records there,
    /// each one's plaintext written where the previous one's ends as it is decrypted: the
    /// plaintext is not copied again. The start of a record that has not arrived whole moves
    /// to the incoming buffer. `Ready(Ok(true))` when the caller got plaintext or the peer
    /// closed; `Ready(Ok(false))` when the read goes on in [`poll_read_records`]
    /// (part of a record waits, only records without data came, or the transport ended).
    ///
    /// [`poll_read_records`]: Self::poll_read_records
    fn poll_read_direct(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<bool>> {
        let start = buf.filled().len();
        ready!(Pin::new(&mut self.t.io).poll_read(cx, buf))?;
        let received = buf.filled().len() - start;
        if received == 0 {
            self.t.eof = true;
            return Poll::Ready(Ok(false));
        }
        let data = &mut buf.filled_mut()[start..];
        let mut taken = 0; // bytes of the whole records opened
        let mut out = 0; // plaintext placed in data[..out]
        let mut error = None;
        while !self.peer_closed {
            match self.open_into(data, taken, out) {
                Ok(Some((len, plain))) => {
                    taken += len;
                    out += plain;
                }
                Ok(None) => break,
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        // What follows the peer's close_notify, or a record that failed, is not read.
        if error.is_none() && !self.peer_closed && taken < received {
            self.t.incoming.hold(&data[taken..]);
            self.direct = false;
        }
        buf.set_filled(start + out);
        if let Some(e) = error {
            let e = self.fail(cx, e);
            return Poll::Ready(if out > 0 { Ok(true) } else { Err(e) });
        }
        // Records answered on our own (a key update) leave now if they can; an error shows
        // again on the next write.
        if self.t.outgoing.is_pending() {
            if let Poll::Ready(Err(e)) = self.t.poll_send(cx) {
                if out == 0 {
                    return Poll::Ready(Err(e));
                }
            }
        }
        Poll::Ready(Ok(out > 0 || self.peer_closed))
    }

    /// Opens the record at `data[at..]` if all of it is there, writing its plaintext to
    /// `data[out..]` (`out <= at`). Returns the record's length and how many bytes of
    /// application data it added; alerts and post-handshake messages are acted on and add
    /// none. `Ok(None)` when the record has not arrived whole.
    fn open_into(
        &mut self,
        data: &mut [u8],
        at: usize,
        out: usize,
    ) -> Result<Option<(usize, usize)>, RecordError> {
        let rest = &data[at..];
        let Some(len) = announced_len(rest)? else {
            return Ok(None);
        };
        if rest.len() < len {
            return Ok(None);
        }
        let mut header = [0u8; HEADER_LEN];
        header.copy_from_slice(&rest[..HEADER_LEN]);
        let (typ, plain) =
            self.rx
                .open_to(header, &mut data[out..at + len], at + HEADER_LEN - out)?;
        if typ == ContentType::ApplicationData {
            self.on_application_data()?;
            return Ok(Some((len, plain)));
        }
        let alert = take_control(typ, &data[out..out + plain], &mut self.handshake)?;
        self.on_control(alert)?;
        Ok(Some((len, 0)))
    }

    /// [`AsyncRead::poll_read`] on the incoming buffer the connection holds for the call:
    /// early data first, then the plaintext of the records received.
    fn poll_read_records(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self;
        if this.early_pos < this.early.len() {
            let n = (this.early.len() - this.early_pos).min(buf.remaining());
            buf.put_slice(&this.early[this.early_pos..this.early_pos + n]);
            this.early_pos += n;
            if this.early_pos == this.early.len() {
                this.early = Vec::new();
                this.early_pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        let mut delivered = false;
        loop {
            if this.plain.start < this.plain.end {
                let n = (this.plain.end - this.plain.start).min(buf.remaining());
                buf.put_slice(&this.t.incoming.buf[this.plain.start..this.plain.start + n]);
                this.plain.start += n;
                delivered = true;
                if this.plain.start < this.plain.end {
                    return Poll::Ready(Ok(()));
                }
                this.t.incoming.consume(this.plain_record);
                // All that arrived is read: the next read may receive into its buffer.
                this.direct |= this.t.incoming.is_empty();
                if buf.remaining() == 0 {
                    return Poll::Ready(Ok(()));
                }
            }
            if this.failed {
                if delivered {
                    return Poll::Ready(Ok(()));
                }
                return Poll::Ready(Err(io::Error::other("the TLS connection failed earlier")));
            }
            if this.peer_closed {
                return Poll::Ready(Ok(()));
            }
            match this.open_next() {
                Ok(true) => {}
                Ok(false) if delivered => return Poll::Ready(Ok(())),
                Ok(false) => {
                    // Records answered on our own (a key update) leave now if they can.
                    if this.t.outgoing.is_pending() {
                        if let Poll::Ready(Err(e)) = this.t.poll_send(cx) {
                            return Poll::Ready(Err(e));
                        }
                    }
                    if this.t.eof {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the peer closed the connection without a TLS close_notify",
                        )));
                    }
                    ready!(this.t.poll_receive(cx, MAX_INCOMING))?;
                }
                Err(e) => {
                    let e = this.fail(cx, e);
                    if delivered {
                        return Poll::Ready(Ok(()));
                    }
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
        self.get_mut()
            .poll_write_slices(cx, &[io::IoSlice::new(data)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_write_slices(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.t.poll_send(cx))?;
        Pin::new(&mut this.t.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.close_queued && !this.failed {
            ready!(this.t.poll_send(cx))?;
            if let Err(e) = this.seal_record(ContentType::Alert, &[ALERT_WARNING, 0]) {
                return Poll::Ready(Err(this.fail(cx, e)));
            }
            this.close_queued = true;
        }
        ready!(this.t.poll_send(cx))?;
        Pin::new(&mut this.t.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::{spare_ptrs, KEEP_BUFFER};
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
        cfg.enable_secret_extraction = true;
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
        cfg.enable_secret_extraction = true;
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

    /// Our server and our client over a pipe of `pipe` bytes, handshake done, with the test
    /// identity and `versions` on both sides.
    async fn connected(
        id: &Identity,
        versions: &[&'static SupportedProtocolVersion],
        pipe: usize,
    ) -> (
        TlsStream<DuplexStream, UnbufferedServerConnection>,
        TlsStream<DuplexStream, UnbufferedClientConnection>,
    ) {
        let (server, client) = handshake(
            server_config(id, versions, &[]),
            client_config(id, versions, &[]),
            pipe,
        )
        .await;
        (server.unwrap(), client.unwrap())
    }

    #[tokio::test]
    async fn both_sides_carry_data_each_way_over_tls13_and_tls12() {
        let id = identity();
        for (versions, seed) in [(TLS13, 7), (TLS12, 11), (TLS13, 13)] {
            // A small pipe: writes and reads stop half way through records.
            let (server, client) = connected(&id, versions, 1000).await;
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

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
        /// Whatever the pipe's size (records arrive whole, several at a time, or in pieces)
        /// and however the reader sizes its reads (some small enough for the incoming
        /// buffer, some large enough to receive into), the echo comes back intact. The pipe
        /// holds at least a TLS 1.3 server's session tickets (about 180 bytes here): the
        /// server's handshake ends once they are sent, and `connected` reads on neither side
        /// until both handshakes have ended.
        #[test]
        fn data_survives_any_pipe_and_read_sizes(
            tls13 in proptest::bool::ANY,
            pipe in 512usize..40_000,
            len in 0usize..120_000,
            seed in 1u64..u64::MAX,
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let got = rt.block_on(async {
                let id = identity();
                let versions = if tls13 { TLS13 } else { TLS12 };
                let (server, client) = connected(&id, versions, pipe).await;
                let data = payload(len, seed);
                let (got, ()) = tokio::join!(
                    send_and_read_echo(client, data.clone(), seed),
                    echo(server, seed ^ 0x5555)
                );
                (got, data)
            });
            proptest::prop_assert!(got.0 == got.1, "echo differs ({} of {} bytes)", got.0.len(), got.1.len());
        }
    }

    type RustlsClient = tokio_rustls::client::TlsStream<DuplexStream>;
    type RustlsServer = tokio_rustls::server::TlsStream<DuplexStream>;

    /// Our server and tokio-rustls's client over a pipe of `pipe` bytes, handshake done.
    async fn our_server_and_rustls_client(
        server: Arc<ServerConfig>,
        client: Arc<ClientConfig>,
        pipe: usize,
    ) -> (
        TlsStream<DuplexStream, UnbufferedServerConnection>,
        RustlsClient,
    ) {
        let (a, b) = duplex(pipe);
        let connector = tokio_rustls::TlsConnector::from(client);
        let (server, client) = tokio::join!(accept(server, a), connector.connect(localhost(), b));
        (server.unwrap(), client.unwrap())
    }

    /// tokio-rustls's server and our client over a pipe of `pipe` bytes, handshake done.
    async fn rustls_server_and_our_client(
        acceptor: &tokio_rustls::TlsAcceptor,
        client: Arc<ClientConfig>,
        pipe: usize,
    ) -> (
        RustlsServer,
        TlsStream<DuplexStream, UnbufferedClientConnection>,
    ) {
        let (a, b) = duplex(pipe);
        let (server, client) = tokio::join!(acceptor.accept(a), connect(client, localhost(), b));
        (server.unwrap(), client.unwrap())
    }

    #[tokio::test]
    async fn talks_to_tokio_rustls_on_either_side() {
        let id = identity();
        let data = payload(100_000, 3);

        // Our server, tokio-rustls's client.
        let (server, client) = our_server_and_rustls_client(
            server_config(&id, TLS13, &[b"h2", b"http/1.1"]),
            client_config(&id, TLS13, &[b"h2"]),
            4096,
        )
        .await;
        assert_eq!(server.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let (got, ()) = tokio::join!(send_and_read_echo(client, data.clone(), 5), echo(server, 6));
        assert!(got == data);

        // tokio-rustls's server, our client.
        let acceptor = tokio_rustls::TlsAcceptor::from(server_config(&id, TLS12, &[]));
        let (server, client) =
            rustls_server_and_our_client(&acceptor, client_config(&id, TLS12, &[]), 4096).await;
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
        let wire = written.lock().unwrap().clone();
        assert_eq!(record_types(&wire), vec![23]);
        // Its inner plaintext (42 bytes and the type byte) is padded to 3 AES blocks.
        assert_eq!(wire.len(), 5 + 48 + 16, "header, 3 blocks, tag");
        let mut got = vec![0u8; n];
        server.read_exact(&mut got).await.unwrap();
        assert_eq!(got, [head, body].concat());
    }

    #[tokio::test]
    async fn connections_read_and_write_through_the_threads_buffers() {
        let id = identity();
        let (mut s1, mut c1) = connected(&id, TLS13, 1 << 16).await;
        let (mut s2, mut c2) = connected(&id, TLS13, 1 << 16).await;
        let (mut s3, mut c3) = connected(&id, TLS12, 1 << 16).await;
        let answer = payload(1200, 5);
        // A completed handshake leaves no buffer with either end.
        for (s, c) in [(&s1, &c1), (&s2, &c2)] {
            assert_eq!(s.t.incoming.buffer_len() + s.t.outgoing.buffer_len(), 0);
            assert_eq!(c.t.incoming.buffer_len() + c.t.outgoing.buffer_len(), 0);
        }
        round_trip(&mut c1, &mut s1, b"GET / HTTP/1.1").await;
        round_trip(&mut s1, &mut c1, &answer).await;
        // All was read and sent: neither end holds a buffer, and the thread has both.
        let held = |s: &TlsStream<DuplexStream, UnbufferedServerConnection>,
                    c: &TlsStream<DuplexStream, UnbufferedClientConnection>| {
            [
                s.t.incoming.buffer_len(),
                s.t.outgoing.buffer_len(),
                c.t.incoming.buffer_len(),
                c.t.outgoing.buffer_len(),
            ]
        };
        assert_eq!(held(&s1, &c1), [0; 4]);
        let spares = spare_ptrs();
        assert!(!spares.0.is_null() && !spares.1.is_null());
        // The other connection borrows the same two buffers and gives them back; the ones
        // it had from its handshake are freed.
        round_trip(&mut c2, &mut s2, b"GET / HTTP/1.1").await;
        round_trip(&mut s2, &mut c2, &answer).await;
        assert_eq!(held(&s2, &c2), [0; 4]);
        assert_eq!(spare_ptrs(), spares);
        // The first connection goes on as before.
        round_trip(&mut c1, &mut s1, b"GET /again HTTP/1.1").await;
        assert_eq!(spare_ptrs(), spares);
        // TLS 1.2 records (an explicit nonce longer) lend and return the same way.
        round_trip(&mut c3, &mut s3, b"GET / HTTP/1.1").await;
        round_trip(&mut s3, &mut c3, &answer).await;
        assert_eq!(held(&s3, &c3), [0; 4]);
    }

    #[tokio::test]
    async fn a_connection_keeps_its_buffer_while_bytes_wait_in_it() {
        let id = identity();
        // A pipe smaller than the record: the write leaves most of it queued.
        let (mut server, mut client) = connected(&id, TLS13, 1000).await;
        let data = payload(5000, 9);
        let n = client.write(&data).await.unwrap();
        assert_eq!(n, data.len());
        assert!(client.t.outgoing.is_pending());
        assert!(client.t.outgoing.buffer_len() >= data.len());
        // Part of a record read: the rest of its plaintext stays with the connection.
        let mut first = vec![0u8; 10];
        let reader = async {
            server.read_exact(&mut first).await.unwrap();
        };
        let (_, flushed) = tokio::join!(reader, client.flush());
        flushed.unwrap();
        assert!(server.t.incoming.buffer_len() > 0);
        let mut rest = vec![0u8; data.len() - 10];
        server.read_exact(&mut rest).await.unwrap();
        assert_eq!([first, rest].concat(), data);
        assert_eq!(server.t.incoming.buffer_len(), 0);
        // Once its queue has left, the writer's next write gives the buffer back.
        client.write_all(b"more").await.unwrap();
        client.flush().await.unwrap();
        assert_eq!(client.t.outgoing.buffer_len(), 0);
        let mut more = [0u8; 4];
        server.read_exact(&mut more).await.unwrap();
        assert_eq!(&more, b"more");
    }

    /// TLS connections over loopback TCP, our server and our client, handshake done.
    async fn tcp_pair(
        id: &Identity,
    ) -> (
        TlsStream<tokio::net::TcpStream, UnbufferedServerConnection>,
        TlsStream<tokio::net::TcpStream, UnbufferedClientConnection>,
    ) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = async {
            let (sock, _) = listener.accept().await.unwrap();
            accept(server_config(id, TLS13, &[]), sock).await.unwrap()
        };
        let client = async {
            let sock = tokio::net::TcpStream::connect(addr).await.unwrap();
            connect(client_config(id, TLS13, &[]), localhost(), sock)
                .await
                .unwrap()
        };
        tokio::join!(server, client)
    }

    #[tokio::test]
    async fn connections_over_tcp_interleave_while_one_holds_a_half_read_record() {
        let id = identity();
        let mut pairs = Vec::new();
        for _ in 0..3 {
            pairs.push(tcp_pair(&id).await);
        }
        // The first server half-reads a record: the rest stays in the buffer it holds.
        let first = payload(3000, 31);
        {
            let (s, c) = &mut pairs[0];
            c.write_all(&first).await.unwrap();
            c.flush().await.unwrap();
            let mut head = vec![0u8; 100];
            s.read_exact(&mut head).await.unwrap();
            assert_eq!(head, first[..100]);
            assert!(s.t.incoming.buffer_len() > 0);
        }
        // Meanwhile the other connections carry requests and answers both ways, each
        // through the thread's buffers.
        for round in 0..20u64 {
            for (i, (s, c)) in pairs.iter_mut().enumerate().skip(1) {
                let request = payload(50 + 37 * i + round as usize, round * 7 + i as u64);
                round_trip(c, s, &request).await;
                let answer = payload(1200 + 100 * i, round * 11 + i as u64);
                round_trip(s, c, &answer).await;
            }
        }
        // The first connection's bytes were not touched by the others.
        let (s, c) = &mut pairs[0];
        let mut rest = vec![0u8; first.len() - 100];
        s.read_exact(&mut rest).await.unwrap();
        assert_eq!(rest, first[100..]);
        assert_eq!(s.t.incoming.buffer_len(), 0);
        round_trip(s, c, b"and back").await;
    }

    #[tokio::test]
    async fn a_bulk_write_does_not_keep_its_buffer() {
        let id = identity();
        let (mut server, mut client) = connected(&id, TLS13, 1 << 20).await;
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
            client.t.outgoing.buffer_len() <= KEEP_BUFFER,
            "{}",
            client.t.outgoing.buffer_len()
        );
        client.write_all(b"small").await.unwrap();
        client.flush().await.unwrap();
        assert!(client.t.outgoing.buffer_len() <= KEEP_BUFFER);
        let mut small = [0u8; 5];
        server.read_exact(&mut small).await.unwrap();
        assert_eq!(&small, b"small");
    }

    #[tokio::test]
    async fn an_end_without_close_notify_is_a_truncation() {
        let id = identity();
        let (mut server, mut client) = connected(&id, TLS13, 8192).await;
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
    /// Writes `msg` on `w` and reads as many bytes back from `r`.
    async fn round_trip<W, R>(w: &mut W, r: &mut R, msg: &[u8])
    where
        W: AsyncWrite + Unpin,
        R: AsyncRead + Unpin,
    {
        w.write_all(msg).await.unwrap();
        w.flush().await.unwrap();
        let mut got = vec![0u8; msg.len()];
        r.read_exact(&mut got).await.unwrap();
        assert_eq!(got, msg);
    }

    #[tokio::test]
    async fn key_updates_a_peer_asks_for_are_followed_and_answered() {
        let id = identity();

        // tokio-rustls's client updates its keys and asks ours to follow.
        let (mut server, mut client) = our_server_and_rustls_client(
            server_config(&id, TLS13, &[]),
            client_config(&id, TLS13, &[]),
            1 << 16,
        )
        .await;
        for i in 0..3u8 {
            client.get_mut().1.refresh_traffic_keys().unwrap();
            let msg = vec![i; 20_000];
            // The peer's new key opens what it sends; our new key seals what it reads.
            round_trip(&mut client, &mut server, &msg).await;
            round_trip(&mut server, &mut client, &msg).await;
            // Our reply went out under a fresh key: two records since the update.
            assert_eq!(server.tx.seq(), 2);
        }

        // tokio-rustls's server does the same to our client.
        let acceptor = tokio_rustls::TlsAcceptor::from(server_config(&id, TLS13, &[]));
        let (mut server, mut client) =
            rustls_server_and_our_client(&acceptor, client_config(&id, TLS13, &[]), 1 << 16).await;
        for i in 0..3u8 {
            server.get_mut().1.refresh_traffic_keys().unwrap();
            let msg = vec![i; 1000];
            round_trip(&mut server, &mut client, &msg).await;
            round_trip(&mut client, &mut server, &msg).await;
            assert_eq!(client.tx.seq(), 1);
        }
    }

    #[tokio::test]
    async fn a_key_wearing_out_is_replaced_by_a_key_update() {
        let id = identity();
        let (mut server, mut client) = our_server_and_rustls_client(
            server_config(&id, TLS13, &[]),
            client_config(&id, TLS13, &[]),
            1 << 16,
        )
        .await;
        // Pretend the cipher allows five records per key.
        server.tx_limit = 5;
        let data = payload(200_000, 31);
        let mut seqs = Vec::new();
        for chunk in data.chunks(10_000) {
            round_trip(&mut server, &mut client, chunk).await;
            seqs.push(server.tx.seq());
        }
        assert!(seqs.iter().all(|&s| s < 5), "{seqs:?}");
        // The peer took every key update: data still flows both ways.
        round_trip(&mut client, &mut server, b"still there").await;
    }

    #[tokio::test]
    async fn session_tickets_sent_after_the_handshake_resume_the_next_one() {
        let id = identity();
        let acceptor = tokio_rustls::TlsAcceptor::from(server_config(&id, TLS13, &[]));
        let client_cfg = client_config(&id, TLS13, &[]);
        for expected in [HandshakeKind::Full, HandshakeKind::Resumed] {
            let (mut server, mut client) =
                rustls_server_and_our_client(&acceptor, client_cfg.clone(), 1 << 16).await;
            assert_eq!(client.get_ref().1.handshake_kind(), Some(expected));
            // The tickets come after the handshake, ahead of the server's first data.
            round_trip(&mut client, &mut server, b"ping").await;
            round_trip(&mut server, &mut client, b"pong").await;
        }
    }

    #[tokio::test]
    async fn a_tampered_record_fails_and_the_sender_hears_why() {
        let id = identity();
        for versions in [TLS13, TLS12] {
            let (mut server, mut client) = connected(&id, versions, 1 << 16).await;
            round_trip(&mut client, &mut server, b"first").await;
            client.seal_data(&[io::IoSlice::new(b"second")], 6).unwrap();
            // Flip a ciphertext bit of the queued record.
            client.t.outgoing.flip_last_byte_for_test();
            client.flush().await.unwrap();
            let mut buf = [0u8; 16];
            let err = server.read(&mut buf).await.unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData);
            assert!(err.to_string().contains("decrypt"), "{err}");
            // The server sent bad_record_mac; the client's next read ends with it.
            let err = client.read(&mut buf).await.unwrap_err();
            assert!(err.to_string().contains("BadRecordMac"), "{err}");
            // Neither side goes on.
            assert!(server.write_all(b"x").await.is_err());
        }
    }

    #[tokio::test]
    async fn whole_records_are_opened_in_the_readers_own_buffer() {
        let id = identity();
        for versions in [TLS13, TLS12] {
            let (mut server, mut client) = connected(&id, versions, 1 << 16).await;
            // Three records (one per write), all received before the server reads.
            let parts = [payload(300, 1), payload(1200, 2), payload(40, 3)];
            for p in &parts {
                client.write_all(p).await.unwrap();
            }
            client.flush().await.unwrap();
            let mut buf = vec![0xa5u8; 8192];
            let n = server.read(&mut buf).await.unwrap();
            assert_eq!(buf[..n], parts.concat());
            // The records were received into this buffer and opened there: after the
            // plaintext lies what was left of them (the last tag), not the buffer's old bytes.
            assert!(buf[n..n + 16].iter().any(|&b| b != 0xa5));
            assert_eq!(server.t.incoming.buffer_len(), 0);

            // A good record and a tampered one arrive together: the good one is read, the
            // next read fails, and the peer hears why.
            client.seal_data(&[io::IoSlice::new(b"good")], 4).unwrap();
            client.seal_data(&[io::IoSlice::new(b"bad")], 3).unwrap();
            client.t.outgoing.flip_last_byte_for_test();
            client.flush().await.unwrap();
            let n = server.read(&mut buf).await.unwrap();
            assert_eq!(&buf[..n], b"good");
            assert!(server.read(&mut buf).await.is_err());
            let err = client.read(&mut buf).await.unwrap_err();
            assert!(err.to_string().contains("BadRecordMac"), "{err}");
        }
    }

    #[tokio::test]
    async fn a_record_split_across_reads_turns_direct_reads_off_until_one_ends_with_a_record() {
        let id = identity();
        // A pipe smaller than the record: it arrives in pieces.
        let (mut server, mut client) = connected(&id, TLS13, 1000).await;
        let data = payload(5000, 17);
        assert_eq!(client.write(&data).await.unwrap(), data.len());
        let mut buf = vec![0u8; 8192];
        let mut rb = ReadBuf::new(&mut buf);
        // One poll: the first piece goes to the reader's buffer, is not a whole record, and
        // moves to the stream's incoming buffer; the rest has not arrived.
        let first = std::future::poll_fn(|cx| {
            Poll::Ready(Pin::new(&mut server).poll_read(cx, &mut rb).is_pending())
        })
        .await;
        assert!(first);
        assert!(rb.filled().is_empty());
        assert!(!server.direct);
        assert!(server.t.incoming.buffer_len() > 0);
        let mut got = vec![0u8; data.len()];
        let (read, flushed) = tokio::join!(server.read_exact(&mut got), client.flush());
        read.unwrap();
        flushed.unwrap();
        assert_eq!(got, data);
        // The read ended where the record did: the next one may receive directly again.
        assert!(server.direct);
        round_trip(&mut client, &mut server, b"and on").await;
    }

    #[tokio::test]
    async fn data_and_close_notify_in_one_read_end_the_stream_after_the_data() {
        let id = identity();
        for versions in [TLS13, TLS12] {
            let (mut server, mut client) = connected(&id, versions, 1 << 16).await;
            client.write_all(b"last words").await.unwrap();
            client.shutdown().await.unwrap();
            let mut buf = vec![0u8; 8192];
            let n = server.read(&mut buf).await.unwrap();
            assert_eq!(&buf[..n], b"last words");
            assert_eq!(server.read(&mut buf).await.unwrap(), 0);
        }
    }

    #[tokio::test]
    async fn close_notify_ends_the_stream_in_both_versions() {
        let id = identity();
        for versions in [TLS13, TLS12] {
            let (mut server, mut client) = connected(&id, versions, 1 << 16).await;
            assert_eq!(
                client.get_ref().1.protocol_version(),
                if versions == TLS13 {
                    ProtocolVersion::TLSv1_3
                } else {
                    ProtocolVersion::TLSv1_2
                }
            );
            client.write_all(b"last words").await.unwrap();
            client.shutdown().await.unwrap();
            let mut got = Vec::new();
            server.read_to_end(&mut got).await.unwrap();
            assert_eq!(got, b"last words");
            // Writing after our close_notify is refused.
            assert!(client.write_all(b"more").await.is_err());
        }
    }

    #[tokio::test]
    async fn whatever_an_authenticated_peer_sends_after_the_handshake_ends_cleanly() {
        let id = identity();
        let mut rng = Rng(77);
        let (mut ended, mut failed) = (0, 0);
        for i in 0..120 {
            let versions = if i % 3 == 0 { TLS12 } else { TLS13 };
            let (mut server, mut client) = connected(&id, versions, 1 << 16).await;
            // A burst of records of any type, with random or message-shaped plaintext.
            for _ in 0..1 + rng.below(4) {
                let typ = [
                    ContentType::Handshake,
                    ContentType::Alert,
                    ContentType::ApplicationData,
                    ContentType::ChangeCipherSpec,
                    ContentType::Unknown(99),
                ][rng.below(5)];
                let mut plain: Vec<u8> = (0..rng.below(64)).map(|_| rng.next() as u8).collect();
                if typ == ContentType::Handshake && plain.len() >= 4 && rng.below(2) == 0 {
                    // A message header: a type that may come after a handshake, and a length
                    // that may or may not fit.
                    plain[0] = [4u8, 24, 0, 1, 13, 20][rng.below(6)];
                    plain[1] = 0;
                    plain[2] = 0;
                    plain[3] = rng.below(plain.len()) as u8;
                }
                server.seal_record(typ, &plain).unwrap();
            }
            server
                .seal_record(ContentType::ApplicationData, b"end")
                .unwrap();
            server.flush().await.unwrap();
            // The client reads through to the end, or fails: it neither hangs nor panics.
            let mut got = Vec::new();
            let mut buf = [0u8; 256];
            let read = async {
                loop {
                    match client.read(&mut buf).await {
                        Ok(0) => return Ok(()),
                        Ok(n) => {
                            got.extend_from_slice(&buf[..n]);
                            if got.ends_with(b"end") {
                                return Ok(());
                            }
                        }
                        Err(e) => return Err(e),
                    }
                }
            };
            let outcome = tokio::time::timeout(std::time::Duration::from_secs(5), read)
                .await
                .expect("the client hung");
            if outcome.is_err() {
                // A failed connection stays failed.
                assert!(client.read(&mut buf).await.is_err());
                assert!(client.write_all(b"x").await.is_err());
                failed += 1;
            } else {
                ended += 1;
            }
        }
        // Both ways out were taken.
        assert!(ended >= 3 && failed >= 10, "{ended} ended, {failed} failed");
    }

    #[tokio::test]
    async fn a_tls12_connection_near_its_limit_is_retired_before_it_must_close() {
        let id = identity();
        let (mut server, mut client) = connected(&id, TLS12, 1 << 16).await;
        assert!(client.can_carry_more());
        // Pretend the cipher allows a few records more than the margin.
        client.tx_limit = client.tx.seq() + TLS12_RETIRE_MARGIN + 3;
        for _ in 0..3 {
            assert!(client.can_carry_more());
            round_trip(&mut client, &mut server, b"request").await;
        }
        assert!(!client.can_carry_more());
        // Writes still work up to the limit itself; then the connection closes cleanly.
        client.tx_limit = client.tx.seq() + 1;
        assert!(client.write_all(b"one too many").await.is_err());
        let mut got = Vec::new();
        server.read_to_end(&mut got).await.unwrap();
        assert!(got.is_empty(), "{got:?}");

        // TLS 1.3 updates its key instead, and never retires for this reason.
        let (_server, mut client) = connected(&id, TLS13, 1 << 16).await;
        client.tx_limit = 2;
        assert!(client.can_carry_more());
    }

    #[tokio::test]
    async fn every_cipher_suite_interoperates_with_rustls_records() {
        let id = identity();
        let suites = rustls::crypto::aws_lc_rs::ALL_CIPHER_SUITES
            .iter()
            .filter(|s| match s {
                SupportedCipherSuite::Tls13(_) => true,
                // The test certificate has an ECDSA key.
                SupportedCipherSuite::Tls12(s) => s
                    .sign
                    .iter()
                    .any(|scheme| matches!(scheme, rustls::SignatureScheme::ECDSA_NISTP256_SHA256)),
            });
        let mut seen = 0;
        for (n, &suite) in suites.enumerate() {
            let versions = match suite {
                SupportedCipherSuite::Tls13(_) => TLS13,
                SupportedCipherSuite::Tls12(_) => TLS12,
            };
            // A client that offers this suite alone.
            let only = || {
                let provider = rustls::crypto::CryptoProvider {
                    cipher_suites: vec![suite],
                    ..crate::provider()
                };
                let mut roots = rustls::RootCertStore::empty();
                roots.add(id.cert.clone()).unwrap();
                let mut cfg = ClientConfig::builder_with_provider(Arc::new(provider))
                    .with_protocol_versions(versions)
                    .unwrap()
                    .with_root_certificates(roots)
                    .with_no_client_auth();
                cfg.enable_secret_extraction = true;
                Arc::new(cfg)
            };
            let data = payload(50_000, n as u64 + 40);

            let (server, client) =
                our_server_and_rustls_client(server_config(&id, versions, &[]), only(), 4096).await;
            assert_eq!(server.get_ref().1.negotiated_cipher_suite(), suite);
            let (got, ()) = tokio::join!(
                send_and_read_echo(client, data.clone(), n as u64),
                echo(server, 1)
            );
            assert!(got == data, "{suite:?}, our server");

            let acceptor = tokio_rustls::TlsAcceptor::from(server_config(&id, versions, &[]));
            let (server, client) = rustls_server_and_our_client(&acceptor, only(), 4096).await;
            assert_eq!(client.get_ref().1.negotiated_cipher_suite(), suite);
            let (got, ()) = tokio::join!(
                send_and_read_echo(client, data.clone(), n as u64),
                echo(server, 2)
            );
            assert!(got == data, "{suite:?}, our client");
            seen += 1;
        }
        assert_eq!(
            seen, 6,
            "three TLS 1.3 suites and three ECDSA TLS 1.2 suites"
        );
    }
}
