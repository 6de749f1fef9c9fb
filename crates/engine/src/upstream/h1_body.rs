//! A backend's response body read by the gateway's own HTTP/1.1 client: delimited by length,
//! by chunked coding or by the end of the connection. Data frames are slices of the read
//! buffer (no copy). When the body ends on a connection that may be reused, the connection goes
//! back to its pool.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http_body::{Frame, SizeHint};
use turnpike_core::body::BodyError;

use super::h1::{poll_fill, Conn, ResponseFraming};

/// Longest chunk-size line (with extensions) accepted.
const MAX_CHUNK_LINE: usize = 4096;
/// Largest trailer section accepted.
const MAX_TRAILERS: usize = 16 * 1024;
/// Most trailer fields accepted.
const MAX_TRAILER_FIELDS: usize = 64;

/// A malformed chunked body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid chunked body from the backend: {0}")]
pub struct ChunkError(&'static str);

/// What [`ChunkedDecoder::decode`] found.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// Body bytes.
    Data(Bytes),
    /// The trailer section (the body has ended).
    Trailers(HeaderMap),
    /// The body has ended (no trailers, or after them).
    End,
    /// More bytes are needed.
    NeedMore,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Size,
    Data(u64),
    DataEnd,
    Trailers,
    Done,
}

/// Decodes the chunked transfer coding (RFC 9112 §7.1) incrementally.
#[derive(Debug)]
pub struct ChunkedDecoder {
    state: State,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        ChunkedDecoder { state: State::Size }
    }
}

impl ChunkedDecoder {
    /// Decodes from the front of `buf`, removing what it used.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Step, ChunkError> {
        loop {
            match self.state {
                State::Size => {
                    let Some(lf) = memchr::memchr(b'\n', &buf[..buf.len().min(MAX_CHUNK_LINE)])
                    else {
                        if buf.len() >= MAX_CHUNK_LINE {
                            return Err(ChunkError("chunk-size line too long"));
                        }
                        return Ok(Step::NeedMore);
                    };
                    if lf == 0 || buf[lf - 1] != b'\r' {
                        return Err(ChunkError("chunk-size line does not end with CRLF"));
                    }
                    let line = &buf[..lf - 1];
                    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
                    if digits == 0 || digits > 16 {
                        return Err(ChunkError("bad chunk size"));
                    }
                    let rest = &line[digits..];
                    let ws = rest
                        .iter()
                        .take_while(|b| matches!(b, b' ' | b'\t'))
                        .count();
                    let rest_ok = ws == rest.len()
                        || (rest[ws] == b';'
                            && rest
                                .iter()
                                .all(|b| *b == b'\t' || (*b >= 0x20 && *b != 0x7f)));
                    if !rest_ok {
                        return Err(ChunkError("bad chunk extension"));
                    }
                    let size = line[..digits].iter().fold(0u64, |acc, d| {
                        let v = match d {
                            b'0'..=b'9' => d - b'0',
                            b'a'..=b'f' => d - b'a' + 10,
                            _ => d - b'A' + 10,
                        };
                        (acc << 4) | u64::from(v)
                    });
                    let _ = buf.split_to(lf + 1);
                    self.state = if size == 0 {
                        State::Trailers
                    } else {
                        State::Data(size)
                    };
                }
                State::Data(left) => {
                    if buf.is_empty() {
                        return Ok(Step::NeedMore);
                    }
                    let take = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
                    let data = buf.split_to(take).freeze();
                    let left = left - take as u64;
                    self.state = if left == 0 {
                        State::DataEnd
                    } else {
                        State::Data(left)
                    };
                    return Ok(Step::Data(data));
                }
                State::DataEnd => {
                    if buf.len() < 2 {
                        return Ok(Step::NeedMore);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(ChunkError("chunk data not followed by CRLF"));
                    }
                    let _ = buf.split_to(2);
                    self.state = State::Size;
                }
                State::Trailers => {
                    if buf.len() >= 2 && &buf[..2] == b"\r\n" {
                        let _ = buf.split_to(2);
                        self.state = State::Done;
                        return Ok(Step::End);
                    }
                    let window = &buf[..buf.len().min(MAX_TRAILERS)];
                    let Some(end) = memchr::memmem::find(window, b"\r\n\r\n") else {
                        if buf.len() >= MAX_TRAILERS {
                            return Err(ChunkError("trailer section too large"));
                        }
                        return Ok(Step::NeedMore);
                    };
                    let section = buf.split_to(end + 4);
                    let mut fields = [httparse::EMPTY_HEADER; MAX_TRAILER_FIELDS];
                    let parsed = httparse::parse_headers(&section, &mut fields)
                        .map_err(|_| ChunkError("bad trailer field"))?;
                    if !parsed.is_complete() {
                        return Err(ChunkError("bad trailer section"));
                    }
                    let mut map = HeaderMap::new();
                    for f in fields.iter().take_while(|f| !f.name.is_empty()) {
                        let name = http::HeaderName::from_bytes(f.name.as_bytes())
                            .map_err(|_| ChunkError("bad trailer name"))?;
                        let value = http::HeaderValue::from_bytes(f.value)
                            .map_err(|_| ChunkError("bad trailer value"))?;
                        map.append(name, value);
                    }
                    self.state = State::Done;
                    return Ok(Step::Trailers(map));
                }
                State::Done => return Ok(Step::End),
            }
        }
    }
}

/// Where connections go back to when a streamed body ends: drained into the worker's pool at
/// its next checkout. (A body may be polled after its request's future is gone, so it cannot
/// borrow the pool.)
pub type Returns = Arc<Mutex<Vec<(u64, Conn)>>>;

enum Decode {
    Length(u64),
    Chunked(ChunkedDecoder),
    Close,
}

/// The body of a backend response that was not complete when its head arrived.
pub struct ResponseBody {
    conn: Option<Conn>,
    decode: Decode,
    /// The connection may carry another request once this body has ended.
    keep_alive: bool,
    pool_key: u64,
    returns: Returns,
}

/// The backend closed the connection before the end of the body.
#[derive(Debug, thiserror::Error)]
#[error("the backend closed the connection before the end of the response body")]
pub struct Truncated;

impl ResponseBody {
    /// Reads the body framed as `framing` from `conn` (whose read buffer may hold its start).
    pub fn new(
        conn: Conn,
        framing: ResponseFraming,
        keep_alive: bool,
        pool_key: u64,
        returns: Returns,
    ) -> Self {
        let decode = match framing {
            ResponseFraming::Empty => Decode::Length(0),
            ResponseFraming::Length(n) => Decode::Length(n),
            ResponseFraming::Chunked => Decode::Chunked(ChunkedDecoder::default()),
            ResponseFraming::Close => Decode::Close,
        };
        ResponseBody {
            conn: Some(conn),
            decode,
            keep_alive,
            pool_key,
            returns,
        }
    }

    /// The body has ended: hand the connection back when it is clean and reusable.
    fn finish(&mut self) {
        if let Some(conn) = self.conn.take() {
            if self.keep_alive && conn.rbuf.is_empty() {
                if let Ok(mut r) = self.returns.lock() {
                    r.push((self.pool_key, conn));
                }
            }
        }
    }
}

impl http_body::Body for ResponseBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        loop {
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            match &mut this.decode {
                Decode::Length(0) => {
                    this.finish();
                    return Poll::Ready(None);
                }
                Decode::Length(left) => {
                    if !conn.rbuf.is_empty() {
                        let take = usize::try_from(*left)
                            .unwrap_or(usize::MAX)
                            .min(conn.rbuf.len());
                        let data = conn.rbuf.split_to(take).freeze();
                        *left -= take as u64;
                        if *left == 0 {
                            this.finish();
                        }
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                }
                Decode::Close => {
                    if !conn.rbuf.is_empty() {
                        let data = conn.rbuf.split().freeze();
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                }
                Decode::Chunked(dec) => match dec.decode(&mut conn.rbuf) {
                    Err(e) => {
                        this.conn = None;
                        return Poll::Ready(Some(Err(Box::new(e))));
                    }
                    Ok(Step::Data(d)) => return Poll::Ready(Some(Ok(Frame::data(d)))),
                    Ok(Step::Trailers(t)) => {
                        this.finish();
                        return Poll::Ready(Some(Ok(Frame::trailers(t))));
                    }
                    Ok(Step::End) => {
                        this.finish();
                        return Poll::Ready(None);
                    }
                    Ok(Step::NeedMore) => {}
                },
            }
            match ready!(poll_fill(&mut conn.io, &mut conn.rbuf, cx)) {
                Ok(0) => {
                    this.conn = None;
                    return Poll::Ready(match this.decode {
                        Decode::Close => None,
                        _ => Some(Err(Box::new(Truncated))),
                    });
                }
                Ok(_) => {}
                Err(e) => {
                    this.conn = None;
                    return Poll::Ready(Some(Err(Box::new(e))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.conn.is_none() || matches!(self.decode, Decode::Length(0))
    }

    fn size_hint(&self) -> SizeHint {
        match self.decode {
            Decode::Length(n) if self.conn.is_some() => SizeHint::with_exact(n),
            _ => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decode_all(
        input: &[u8],
        splits: &[usize],
    ) -> Result<(Vec<u8>, Option<HeaderMap>), ChunkError> {
        let mut dec = ChunkedDecoder::default();
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        let mut pos = 0;
        let mut cuts: Vec<usize> = splits.iter().map(|s| s % (input.len() + 1)).collect();
        cuts.push(input.len());
        cuts.sort_unstable();
        for cut in cuts {
            buf.extend_from_slice(&input[pos..cut.max(pos)]);
            pos = cut.max(pos);
            loop {
                match dec.decode(&mut buf)? {
                    Step::Data(d) => out.extend_from_slice(&d),
                    Step::Trailers(t) => return Ok((out, Some(t))),
                    Step::End => return Ok((out, None)),
                    Step::NeedMore => break,
                }
            }
        }
        Err(ChunkError("incomplete"))
    }

    #[test]
    fn decodes_chunks_extensions_and_trailers() {
        let (body, t) = decode_all(b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n", &[]).unwrap();
        assert_eq!(body, b"hello world");
        assert!(t.is_none());
        let (body, t) =
            decode_all(b"3\r\nabc\r\n0\r\ngrpc-status: 0\r\nx: y\r\n\r\n", &[4, 9]).unwrap();
        assert_eq!(body, b"abc");
        let t = t.unwrap();
        assert_eq!(t["grpc-status"], "0");
        assert_eq!(t["x"], "y");
        let (body, _) = decode_all(b"A\r\n0123456789\r\n0\r\n\r\n", &[]).unwrap();
        assert_eq!(body, b"0123456789");
    }

    #[test]
    fn rejects_malformed_chunks() {
        for bad in [
            &b"x\r\n"[..],
            b"5\nhello\r\n0\r\n\r\n",
            b"5\r\nhelloXX0\r\n\r\n",
            b"11111111111111111\r\n",
            b"5 x\r\nhello\r\n0\r\n\r\n",
            b"0\r\nbad header\r\n\r\n",
        ] {
            assert!(
                decode_all(bad, &[]).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let long = vec![b'1'; MAX_CHUNK_LINE + 1];
        assert!(decode_all(&long, &[]).is_err());
    }

    fn encode(chunks: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        for c in chunks.iter().filter(|c| !c.is_empty()) {
            out.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
            out.extend_from_slice(c);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\n\r\n");
        out
    }

    proptest! {
        #[test]
        fn any_chunking_and_any_split_decode_to_the_body(
            chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..8),
            splits in proptest::collection::vec(any::<usize>(), 0..6),
        ) {
            let wire = encode(&chunks);
            let (body, trailers) = decode_all(&wire, &splits).unwrap();
            prop_assert_eq!(body, chunks.concat());
            prop_assert!(trailers.is_none());
        }

        #[test]
        fn arbitrary_bytes_never_panic(input in proptest::collection::vec(any::<u8>(), 0..200), splits in proptest::collection::vec(any::<usize>(), 0..4)) {
            let _ = decode_all(&input, &splits);
        }
    }
}
