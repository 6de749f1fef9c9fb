//! The TLS handshake, driven through rustls's unbuffered API over a [`Transport`]. Once it
//! is complete, rustls hands the traffic secrets over ([`Side::into_kernel`]) and the stream
//! protects records itself.

use std::io;
use std::task::{ready, Context, Poll};

use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::kernel::KernelConnection;
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::unbuffered::{ConnectionState, EncodeError, InsufficientSizeError, UnbufferedStatus};
use rustls::{CommonState, ExtractedSecrets};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::record::{HEADER_LEN, MAX_CIPHERTEXT};
use crate::transport::Transport;

/// Most TLS bytes held unprocessed during a handshake. rustls keeps a handshake message that
/// spans several records in the incoming buffer until the message is complete, so it must
/// hold the largest handshake message (2^16 bytes, a long certificate chain) plus the largest
/// record TLS 1.2 allows (5-byte header, 2^14 bytes of plaintext, 2048 bytes of expansion).
const MAX_HANDSHAKE_INCOMING: usize = (1 << 16) + HEADER_LEN + MAX_CIPHERTEXT;

/// One side of a TLS connection: rustls's unbuffered server or client connection, which runs
/// the handshake and then gives up its secrets.
pub trait Side: Send + Unpin + 'static {
    /// rustls's per-side connection data.
    type Data: Send + Sync + Unpin + 'static;

    /// Processes the records in `incoming` until rustls needs the caller
    /// (`process_tls_records`).
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, Self::Data>;

    /// The connection's negotiated state: ALPN protocol, peer certificates, handshake progress.
    fn common(&self) -> &CommonState;

    /// After the handshake: the traffic secrets with their sequence numbers, and what is left
    /// of the connection for key updates and session tickets.
    fn into_kernel(self)
        -> Result<(ExtractedSecrets, KernelConnection<Self::Data>), rustls::Error>;

    /// Stores a TLS 1.3 session ticket the server sent after the handshake (its payload,
    /// without the message header). Only a client accepts one.
    fn new_session_ticket(
        kernel: &mut KernelConnection<Self::Data>,
        payload: &[u8],
    ) -> Result<(), rustls::Error>;
}

/// Implements the parts of [`Side`] that rustls's two unbuffered connections have alike.
macro_rules! side_common {
    ($data:ty) => {
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

        fn into_kernel(self) -> Result<(ExtractedSecrets, KernelConnection<$data>), rustls::Error> {
            self.dangerous_into_kernel_connection()
        }
    };
}

impl Side for UnbufferedServerConnection {
    side_common!(ServerConnectionData);

    fn new_session_ticket(
        _: &mut KernelConnection<ServerConnectionData>,
        _: &[u8],
    ) -> Result<(), rustls::Error> {
        Err(rustls::Error::General(
            "a client sent a session ticket".into(),
        ))
    }
}

impl Side for UnbufferedClientConnection {
    side_common!(ClientConnectionData);

    fn new_session_ticket(
        kernel: &mut KernelConnection<ClientConnectionData>,
        payload: &[u8],
    ) -> Result<(), rustls::Error> {
        kernel.handle_new_session_ticket(payload)
    }
}

pub(crate) fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// What one call into rustls came to.
enum Step {
    /// Something was done; ask again.
    Again,
    /// rustls waits for the peer.
    NeedInput,
    /// rustls could encrypt application data now.
    Traffic,
    /// The peer sent `close_notify`.
    PeerClosed,
}

/// A connection during its handshake.
pub(crate) struct Handshake<IO, S> {
    pub(crate) t: Transport<IO>,
    pub(crate) conn: S,
    /// Application data that arrived with the end of the handshake.
    pub(crate) early: Vec<u8>,
    /// The peer sent `close_notify` right after the handshake.
    pub(crate) peer_closed: bool,
}

impl<IO, S> Handshake<IO, S>
where
    IO: AsyncRead + AsyncWrite + Unpin,
    S: Side,
{
    pub(crate) fn new(io: IO, conn: S) -> Self {
        Handshake {
            t: Transport::new(io),
            conn,
            early: Vec::new(),
            peer_closed: false,
        }
    }

    /// One call into rustls, and what it asked for done.
    fn step(&mut self) -> io::Result<Step> {
        let UnbufferedStatus { mut discard, state } = self.conn.process(self.t.incoming.bytes());
        let step = match state {
            Err(e) => Err(tls_error(e)),
            Ok(ConnectionState::ReadTraffic(mut records)) => {
                let mut step = Ok(Step::Again);
                while let Some(record) = records.next_record() {
                    match record {
                        Ok(record) => {
                            discard += record.discard;
                            self.early.extend_from_slice(record.payload);
                        }
                        Err(e) => {
                            step = Err(tls_error(e));
                            break;
                        }
                    }
                }
                step
            }
            Ok(ConnectionState::EncodeTlsData(mut data)) => self
                .t
                .outgoing
                .encode_with(|buf| data.encode(buf).map_err(encode_size))
                .map(|_| Step::Again),
            Ok(ConnectionState::TransmitTlsData(data)) => {
                // The encoded records are queued, and every path that waits for the peer
                // sends them first.
                data.done();
                Ok(Step::Again)
            }
            Ok(ConnectionState::BlockedHandshake) => Ok(Step::NeedInput),
            Ok(ConnectionState::WriteTraffic(_)) => Ok(Step::Traffic),
            Ok(ConnectionState::PeerClosed | ConnectionState::Closed) => {
                self.peer_closed = true;
                Ok(Step::PeerClosed)
            }
            Ok(ConnectionState::ReadEarlyData(_)) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "TLS early data is not accepted",
            )),
            Ok(_) => Err(io::Error::other("unexpected TLS connection state")),
        };
        self.t.incoming.consume(discard);
        step
    }

    /// Drives the handshake until it is complete and its last records are sent (a client's
    /// Finished, a server's session tickets). Application data that came with them waits in
    /// `early`.
    pub(crate) fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let step = match self.step() {
                Ok(step) => step,
                Err(e) => {
                    self.send_alert(cx);
                    return Poll::Ready(Err(e));
                }
            };
            let done = !self.conn.common().is_handshaking();
            match step {
                Step::Again => {}
                Step::Traffic | Step::PeerClosed if done => return self.t.poll_send(cx),
                Step::PeerClosed => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the peer closed the TLS connection during the handshake",
                    )))
                }
                Step::Traffic | Step::NeedInput => {
                    ready!(self.t.poll_send(cx))?;
                    if self.t.eof {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the peer closed the connection during the TLS handshake",
                        )));
                    }
                    ready!(self.t.poll_receive(cx, MAX_HANDSHAKE_INCOMING))?;
                }
            }
        }
    }

    /// After a TLS error: queues the alert rustls prepared for the peer and sends what the
    /// socket takes without waiting.
    fn send_alert(&mut self, cx: &mut Context<'_>) {
        // rustls hands out what it has queued (the alert) before it looks at new records.
        let UnbufferedStatus { state, .. } = self.conn.process(self.t.incoming.bytes());
        if let Ok(ConnectionState::EncodeTlsData(mut data)) = state {
            let _ = self
                .t
                .outgoing
                .encode_with(|buf| data.encode(buf).map_err(encode_size));
        }
        let _ = self.t.poll_send(cx);
    }
}

fn encode_size(e: EncodeError) -> Result<InsufficientSizeError, io::Error> {
    match e {
        EncodeError::InsufficientSize(s) => Ok(s),
        other => Err(io::Error::other(other)),
    }
}
