//! The streaming encoders: a response body wrapped so that each chunk goes into the encoder and
//! what the encoder has ready comes out, flushed whenever the backend pauses (so a slow stream
//! is not held back), finished at the end; trailers follow the encoded body.

use std::io::Write;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::Frame;
use turnpike_core::body::BodyError;
use turnpike_core::Body;

/// A content coding the policy produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// `gzip` (RFC 1952).
    Gzip,
    /// `br` (RFC 7932).
    Brotli,
    /// `zstd` (RFC 8878).
    Zstd,
}

impl Encoding {
    /// The coding named `name` in the settings.
    pub fn parse(name: &str) -> Option<Encoding> {
        match name.trim().to_ascii_lowercase().as_str() {
            "gzip" => Some(Encoding::Gzip),
            "br" | "brotli" => Some(Encoding::Brotli),
            "zstd" => Some(Encoding::Zstd),
            _ => None,
        }
    }

    /// Its token in `Content-Encoding` and `Accept-Encoding`.
    pub fn token(self) -> &'static str {
        match self {
            Encoding::Gzip => "gzip",
            Encoding::Brotli => "br",
            Encoding::Zstd => "zstd",
        }
    }
}

/// An encoder writing into memory.
enum Encoder {
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    Brotli(Box<brotli::CompressorWriter<Vec<u8>>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
}

impl Encoder {
    fn new(e: Encoding, level: i32) -> std::io::Result<Encoder> {
        Ok(match e {
            Encoding::Gzip => Encoder::Gzip(flate2::write::GzEncoder::new(
                Vec::new(),
                flate2::Compression::new(level.clamp(1, 9) as u32),
            )),
            // A 4 MiB window (lgwin 22), brotli's default.
            Encoding::Brotli => Encoder::Brotli(Box::new(brotli::CompressorWriter::new(
                Vec::new(),
                4096,
                level.clamp(0, 11) as u32,
                22,
            ))),
            Encoding::Zstd => Encoder::Zstd(zstd::stream::write::Encoder::new(Vec::new(), level)?),
        })
    }

    fn write(&mut self, data: &[u8]) -> std::io::Result<()> {
        match self {
            Encoder::Gzip(e) => e.write_all(data),
            Encoder::Brotli(e) => e.write_all(data),
            Encoder::Zstd(e) => e.write_all(data),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Encoder::Gzip(e) => e.flush(),
            Encoder::Brotli(e) => e.flush(),
            Encoder::Zstd(e) => e.flush(),
        }
    }

    /// The encoded bytes ready so far.
    fn take(&mut self) -> Vec<u8> {
        let out = match self {
            Encoder::Gzip(e) => e.get_mut(),
            Encoder::Brotli(e) => e.get_mut(),
            Encoder::Zstd(e) => e.get_mut(),
        };
        std::mem::take(out)
    }

    /// Ends the stream: the last encoded bytes.
    fn finish(self) -> std::io::Result<Vec<u8>> {
        match self {
            Encoder::Gzip(e) => e.finish(),
            Encoder::Brotli(e) => Ok(e.into_inner()),
            Encoder::Zstd(e) => e.finish(),
        }
    }
}

/// A body encoded as it streams.
pub(super) struct Encoded {
    inner: Body,
    encoder: Option<Encoder>,
    /// Bytes written into the encoder since it last gave any out.
    pending: bool,
    trailers: Option<http::HeaderMap>,
    failed: Option<std::io::Error>,
}

impl Encoded {
    /// `inner` encoded with `encoding` at `level`.
    pub(super) fn new(inner: Body, encoding: Encoding, level: i32) -> Encoded {
        let (encoder, failed) = match Encoder::new(encoding, level) {
            Ok(e) => (Some(e), None),
            Err(e) => (None, Some(e)),
        };
        Encoded {
            inner,
            encoder,
            pending: false,
            trailers: None,
            failed,
        }
    }
}

impl http_body::Body for Encoded {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        if let Some(e) = this.failed.take() {
            return Poll::Ready(Some(Err(Box::new(e))));
        }
        loop {
            let Some(encoder) = this.encoder.as_mut() else {
                return Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))));
            };
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        encoder.write(&data)?;
                        this.pending = true;
                        let out = encoder.take();
                        if !out.is_empty() {
                            this.pending = false;
                            return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                        }
                    }
                    Err(frame) => {
                        if let Ok(t) = frame.into_trailers() {
                            this.trailers = Some(t);
                        }
                    }
                },
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => {
                    let Some(encoder) = this.encoder.take() else {
                        continue;
                    };
                    let out = encoder.finish()?;
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                }
                Poll::Pending => {
                    // The backend pauses: what was written so far goes out now.
                    if this.pending {
                        this.pending = false;
                        encoder.flush()?;
                        let out = encoder.take();
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                        }
                    }
                    return Poll::Pending;
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.encoder.is_none() && self.trailers.is_none() && self.failed.is_none()
    }
}
