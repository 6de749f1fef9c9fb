//! The byte buffers of a TLS connection and the transport under them: one incoming buffer,
//! where records arrive and are decrypted in place when they cannot be received into the
//! reader's own buffer (see `stream.rs`), and one outgoing buffer, which goes to the transport
//! with one write.
//!
//! After the handshake a connection holds a buffer only while bytes wait in it. An empty one
//! goes back to its thread, and the next read or write on the thread (usually another
//! connection's) borrows it. A worker with many keep-alive connections then reads and writes
//! through the same two buffers, which stay in the CPU's cache, instead of touching one cold
//! buffer per connection and direction for every request.

use std::cell::Cell;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::thread::LocalKey;

use rustls::unbuffered::InsufficientSizeError;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::record::{HEADER_LEN, MAX_PLAINTEXT};

/// First size of the incoming buffer. It is large enough for a request and its record, and
/// it doubles while a record does not fit.
const INITIAL_INCOMING: usize = 4096;
/// Largest outgoing buffer kept once its data has left: room for a full record. Larger ones
/// (bulk writes) are freed and grown again by the next bulk write.
pub(crate) const KEEP_BUFFER: usize = HEADER_LEN + MAX_PLAINTEXT + 256;

thread_local! {
    /// The thread's spare incoming buffer: empty, or an initialised buffer no connection holds.
    static SPARE_INCOMING: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
    /// The thread's spare outgoing buffer, likewise.
    static SPARE_OUTGOING: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// Puts the thread's spare buffer in `spare` into `buf` (whose own buffer is freed), if the
/// thread has one.
fn take_spare(spare: &'static LocalKey<Cell<Vec<u8>>>, buf: &mut Vec<u8>) {
    let taken = spare.with(Cell::take);
    if !taken.is_empty() {
        *buf = taken;
    }
}

/// Makes `buf` the thread's spare in `spare`; `buf` is left empty.
fn give_spare(spare: &'static LocalKey<Cell<Vec<u8>>>, buf: &mut Vec<u8>) {
    if !buf.is_empty() {
        let given = std::mem::take(buf);
        spare.with(|s| s.set(given));
    }
}

/// Where the thread's spare incoming and outgoing buffers start (null when it has none).
#[cfg(test)]
pub(crate) fn spare_ptrs() -> (*const u8, *const u8) {
    let peek = |spare: &Cell<Vec<u8>>| {
        let buf = spare.take();
        let ptr = if buf.is_empty() {
            std::ptr::null()
        } else {
            buf.as_ptr()
        };
        spare.set(buf);
        ptr
    };
    (SPARE_INCOMING.with(peek), SPARE_OUTGOING.with(peek))
}

/// Received bytes: `buf[start..end]` is not processed yet.
pub(crate) struct Incoming {
    pub(crate) buf: Vec<u8>,
    pub(crate) start: usize,
    end: usize,
}

impl Incoming {
    /// The bytes not processed yet.
    pub(crate) fn bytes(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.end]
    }

    /// Marks the first `n` unprocessed bytes as processed.
    pub(crate) fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start >= self.end {
            // Empty: the next read starts at the front, and nothing has to move.
            self.start = 0;
            self.end = 0;
        }
    }

    /// Makes room at the end of a full buffer: moves the unprocessed bytes to its front, or
    /// grows it, up to `max` bytes. Fails when a record would not fit in `max`.
    #[cold]
    #[inline(never)]
    fn make_room(&mut self, max: usize) -> io::Result<()> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        } else if self.buf.len() >= max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "TLS record larger than the protocol allows",
            ));
        } else {
            // A connection that lent its buffer back holds none: it starts small again.
            let size = (self.buf.len() * 2).max(INITIAL_INCOMING).min(max);
            self.buf.resize(size, 0);
        }
        Ok(())
    }

    /// True when no received bytes wait here.
    pub(crate) fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Keeps `bytes`, the start of a record that arrived in the reader's own buffer (see
    /// `TlsStream::poll_read_direct`), as the bytes not processed yet. Only called when no
    /// bytes wait here; borrows the thread's spare buffer for them if it has one.
    pub(crate) fn hold(&mut self, bytes: &[u8]) {
        debug_assert!(self.is_empty());
        self.borrow_spare();
        if self.buf.len() < bytes.len() {
            self.buf.resize(bytes.len().max(INITIAL_INCOMING), 0);
        }
        self.buf[..bytes.len()].copy_from_slice(bytes);
        self.start = 0;
        self.end = bytes.len();
    }

    /// Called before a read: when no bytes wait here, takes the thread's spare buffer (if it
    /// has one) in place of this one, which is freed.
    pub(crate) fn borrow_spare(&mut self) {
        if self.start == self.end {
            take_spare(&SPARE_INCOMING, &mut self.buf);
        }
    }

    /// Called after a read: when no bytes wait here, the buffer becomes the thread's spare
    /// and the connection holds none.
    pub(crate) fn return_spare(&mut self) {
        if self.start == self.end {
            give_spare(&SPARE_INCOMING, &mut self.buf);
        }
    }

    /// Size of the buffer the connection holds (tests check lending).
    #[cfg(test)]
    pub(crate) fn buffer_len(&self) -> usize {
        self.buf.len()
    }
}

/// Bytes to send: `buf[sent..len]`. The vector stays allocated and initialised between
/// writes, unless it grew beyond [`KEEP_BUFFER`].
pub(crate) struct Outgoing {
    buf: Vec<u8>,
    len: usize,
    sent: usize,
}

impl Outgoing {
    /// True while queued bytes have not all left.
    pub(crate) fn is_pending(&self) -> bool {
        self.sent < self.len
    }

    /// Called before a write: when nothing is queued, takes the thread's spare buffer (if it
    /// has one) in place of this one, which is freed.
    pub(crate) fn borrow_spare(&mut self) {
        if self.len == 0 {
            take_spare(&SPARE_OUTGOING, &mut self.buf);
        }
    }

    /// Called after a write: when everything queued has left, the buffer becomes the
    /// thread's spare and the connection holds none.
    pub(crate) fn return_spare(&mut self) {
        if self.len == 0 {
            give_spare(&SPARE_OUTGOING, &mut self.buf);
        }
    }

    /// Room for `n` more bytes at the end of the queue; [`commit`](Self::commit) queues them.
    pub(crate) fn reserve(&mut self, n: usize) -> &mut [u8] {
        if self.buf.len() < self.len + n {
            self.buf.resize(self.len + n, 0);
        }
        &mut self.buf[self.len..self.len + n]
    }

    /// Size of the buffer (tests check that bulk writes do not keep theirs).
    #[cfg(test)]
    pub(crate) fn buffer_len(&self) -> usize {
        self.buf.len()
    }

    /// Flips a bit of the last queued byte (tests tamper with records this way).
    #[cfg(test)]
    pub(crate) fn flip_last_byte_for_test(&mut self) {
        self.buf[self.len - 1] ^= 1;
    }

    /// Queues the first `n` bytes of the last [`reserve`](Self::reserve).
    pub(crate) fn commit(&mut self, n: usize) {
        self.len += n;
    }

    /// Calls `f` with the free end of the buffer, growing it once when `f` says how much room
    /// it needs, and queues what `f` wrote (rustls's encoders work this way).
    pub(crate) fn encode_with(
        &mut self,
        mut f: impl FnMut(&mut [u8]) -> Result<usize, Result<InsufficientSizeError, io::Error>>,
    ) -> io::Result<()> {
        let written = match f(&mut self.buf[self.len..]) {
            Ok(n) => n,
            Err(Ok(InsufficientSizeError { required_size })) => {
                self.buf.resize(self.len + required_size, 0);
                f(&mut self.buf[self.len..]).map_err(|e| match e {
                    Ok(s) => io::Error::other(format!(
                        "TLS output buffer still too small ({} bytes needed)",
                        s.required_size
                    )),
                    Err(e) => e,
                })?
            }
            Err(Err(e)) => return Err(e),
        };
        self.len += written;
        Ok(())
    }
}

/// A transport with the buffers of the TLS connection over it.
pub(crate) struct Transport<IO> {
    pub(crate) io: IO,
    pub(crate) incoming: Incoming,
    pub(crate) outgoing: Outgoing,
    /// The transport has ended.
    pub(crate) eof: bool,
}

impl<IO: AsyncRead + AsyncWrite + Unpin> Transport<IO> {
    pub(crate) fn new(io: IO) -> Self {
        Transport {
            io,
            incoming: Incoming {
                buf: vec![0; INITIAL_INCOMING],
                start: 0,
                end: 0,
            },
            outgoing: Outgoing {
                buf: Vec::new(),
                len: 0,
                sent: 0,
            },
            eof: false,
        }
    }

    /// Sends the queued bytes. `Ready(Ok)` once all are sent.
    pub(crate) fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let out = &mut self.outgoing;
        while out.sent < out.len {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &out.buf[out.sent..out.len]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            out.sent += n;
        }
        out.sent = 0;
        out.len = 0;
        // A large write's buffer is not kept for the life of a mostly idle connection.
        if out.buf.len() > KEEP_BUFFER {
            out.buf = Vec::new();
        }
        Poll::Ready(Ok(()))
    }

    /// Reads more bytes from the transport (one read call), after the unprocessed ones. When
    /// the buffer is full, they move to its front, or it grows, up to `max` bytes. Sets `eof`
    /// at the transport's end.
    pub(crate) fn poll_receive(
        &mut self,
        cx: &mut Context<'_>,
        max: usize,
    ) -> Poll<io::Result<()>> {
        let inc = &mut self.incoming;
        if inc.end == inc.buf.len() {
            inc.make_room(max)?;
        }
        let mut buf = ReadBuf::new(&mut inc.buf[inc.end..]);
        ready!(Pin::new(&mut self.io).poll_read(cx, &mut buf))?;
        let n = buf.filled().len();
        if n == 0 {
            self.eof = true;
        }
        inc.end += n;
        Poll::Ready(Ok(()))
    }
}
