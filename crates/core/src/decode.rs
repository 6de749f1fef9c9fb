//! A message body as an inspecting policy must read it: the content codings of
//! `Content-Encoding` undone (`gzip`, `deflate`, `br`, `zstd`) and text converted from its
//! charset to UTF-8 (the `charset` parameter, a byte order mark, or the UTF-16/UTF-32 patterns
//! that JSON and XML documents announce themselves with). `sqlInjectionProtection`,
//! `jsonProtection`, `xmlProtection`, the validators and OpenAPI validation all read bodies
//! through this module, so that a body a backend decodes is never passed uninspected.
//!
//! Decoding is bounded: the decoded body may be at most [`MAX_RATIO`] times the coded one (at
//! least [`MIN_ALLOWANCE`]) and never more than [`MAX_DECODED`]; a body beyond that is a
//! [`DecodeError::TooLarge`] (413), a decompression bomb never becomes memory. A coding or
//! charset that is unknown, or bytes that are not what they claim, are a
//! [`DecodeError::Undecodable`] (415). A body without a coding, in UTF-8, is returned as it is,
//! without a copy.

use std::borrow::Cow;
use std::io::Read;

use http::header::{CONTENT_ENCODING, CONTENT_TYPE};
use http::HeaderMap;

use crate::problem::{types, Problem};

/// The largest decoded body, whatever its coded size (16 MiB).
pub const MAX_DECODED: u64 = 16 << 20;
/// The largest ratio of decoded to coded size beyond [`MIN_ALLOWANCE`].
pub const MAX_RATIO: u64 = 100;
/// A coded body may always decode to this many bytes (1 MiB), whatever its ratio: small bodies
/// of repetitive JSON compress far better than 100:1.
pub const MIN_ALLOWANCE: u64 = 1 << 20;

/// Why a body cannot be inspected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The decoded body would exceed its allowance (the bytes allowed).
    TooLarge(u64),
    /// An unknown coding or charset, or bytes that are not in the coding or charset they
    /// claim; what was wrong, for the client.
    Undecodable(String),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::TooLarge(n) => {
                write!(f, "the decoded body would exceed {n} bytes")
            }
            DecodeError::Undecodable(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for DecodeError {}

impl DecodeError {
    /// The rejection: 413 `body-too-large` or 415 `unsupported-media-type`, with what was
    /// wrong as the detail.
    pub fn problem(&self) -> Problem {
        match self {
            DecodeError::TooLarge(_) => Problem::new(&types::BODY_TOO_LARGE).with_detail(format!(
                "{self}; the gateway inspects decompressed bodies up to {MAX_RATIO} times their \
                 size and {MAX_DECODED} bytes"
            )),
            DecodeError::Undecodable(_) => Problem::new(&types::UNSUPPORTED_MEDIA_TYPE)
                .with_detail(format!("{self}: the body cannot be inspected")),
        }
    }
}

/// How a body's text announces its charset besides `charset=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextKind {
    /// JSON: a byte order mark, or RFC 4627's pattern of zero bytes in the first four.
    Json,
    /// XML: a byte order mark, or the patterns of `<?` in UTF-16/UTF-32 (XML 1.0 appendix F).
    Xml,
    /// Other text (forms, `text/plain`): a byte order mark only.
    Text,
}

/// The allowance for a body of `coded` bytes.
pub fn allowance(coded: usize) -> u64 {
    (coded as u64)
        .saturating_mul(MAX_RATIO)
        .clamp(MIN_ALLOWANCE, MAX_DECODED)
}

/// `body` with the codings of `headers`' `Content-Encoding` undone (the last one listed
/// first); the body itself when there is none or only `identity`.
pub fn content<'a>(headers: &HeaderMap, body: &'a [u8]) -> Result<Cow<'a, [u8]>, DecodeError> {
    let mut codings: Vec<String> = Vec::new();
    for v in headers.get_all(CONTENT_ENCODING) {
        let v = v.to_str().map_err(|_| {
            DecodeError::Undecodable("the Content-Encoding header is not ASCII".into())
        })?;
        for c in v.split(',') {
            let c = c.trim().to_ascii_lowercase();
            if !c.is_empty() && c != "identity" {
                codings.push(c);
            }
        }
    }
    if codings.is_empty() {
        return Ok(Cow::Borrowed(body));
    }
    let limit = allowance(body.len());
    let mut current: Vec<u8> = Vec::new();
    for (i, coding) in codings.iter().rev().enumerate() {
        let input: &[u8] = if i == 0 { body } else { &current };
        let next = undo(coding, input, limit)?;
        current = next;
    }
    Ok(Cow::Owned(current))
}

/// One coding undone, reading at most `limit` bytes.
fn undo(coding: &str, input: &[u8], limit: u64) -> Result<Vec<u8>, DecodeError> {
    let corrupt = || DecodeError::Undecodable(format!("the body is not valid `{coding}` data"));
    match coding {
        "gzip" | "x-gzip" => read_limited(flate2::read::MultiGzDecoder::new(input), limit)
            .map_err(|e| e.or(corrupt())),
        // `deflate` is the zlib format (RFC 9110 §8.4.1.2); some clients send raw deflate.
        "deflate" => {
            read_limited(flate2::read::ZlibDecoder::new(input), limit).or_else(|e| match e {
                Failure::TooLarge(n) => Err(DecodeError::TooLarge(n)),
                Failure::Corrupt => read_limited(flate2::read::DeflateDecoder::new(input), limit)
                    .map_err(|e| e.or(corrupt())),
            })
        }
        "br" => read_limited(brotli_decompressor::Decompressor::new(input, 4096), limit)
            .map_err(|e| e.or(corrupt())),
        "zstd" => {
            let decoder = zstd::stream::read::Decoder::new(input).map_err(|_| corrupt())?;
            read_limited(decoder, limit).map_err(|e| e.or(corrupt()))
        }
        other => Err(DecodeError::Undecodable(format!(
            "the content coding `{other}` is not supported (gzip, deflate, br and zstd are)"
        ))),
    }
}

enum Failure {
    TooLarge(u64),
    Corrupt,
}

impl Failure {
    fn or(self, corrupt: DecodeError) -> DecodeError {
        match self {
            Failure::TooLarge(n) => DecodeError::TooLarge(n),
            Failure::Corrupt => corrupt,
        }
    }
}

fn read_limited(reader: impl Read, limit: u64) -> Result<Vec<u8>, Failure> {
    let mut out = Vec::new();
    reader
        .take(limit + 1)
        .read_to_end(&mut out)
        .map_err(|_| Failure::Corrupt)?;
    if out.len() as u64 > limit {
        return Err(Failure::TooLarge(limit));
    }
    Ok(out)
}

/// True when `headers` name no content coding (or only `identity`) and no charset but UTF-8
/// or US-ASCII: the body's bytes are what a reader of the body reads (unless a byte order mark
/// or, for JSON and XML, the first bytes show UTF-16 or UTF-32). The engine streams a body
/// through inspectors only then.
pub fn is_identity(headers: &HeaderMap) -> bool {
    let coded = headers.get_all(CONTENT_ENCODING).iter().any(|v| {
        v.as_bytes().split(|&b| b == b',').any(|c| {
            !c.trim_ascii().is_empty() && !c.trim_ascii().eq_ignore_ascii_case(b"identity")
        })
    });
    !coded
        && headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(charset)
            .is_none_or(|c| matches!(c.as_str(), "utf-8" | "utf8" | "us-ascii" | "ascii"))
}

/// The `charset` parameter of a media type, lowercased and unquoted.
pub fn charset(content_type: &str) -> Option<String> {
    content_type.split(';').skip(1).find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("charset")
            .then(|| v.trim().trim_matches('"').to_ascii_lowercase())
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wide {
    Utf16Le,
    Utf16Be,
    Utf32Le,
    Utf32Be,
}

/// The charset a byte order mark names, and the mark's length.
fn bom(b: &[u8]) -> Option<(Option<Wide>, usize)> {
    if b.starts_with(&[0xEF, 0xBB, 0xBF]) {
        Some((None, 3))
    } else if b.starts_with(&[0x00, 0x00, 0xFE, 0xFF]) {
        Some((Some(Wide::Utf32Be), 4))
    } else if b.starts_with(&[0xFF, 0xFE, 0x00, 0x00]) {
        Some((Some(Wide::Utf32Le), 4))
    } else if b.starts_with(&[0xFE, 0xFF]) {
        Some((Some(Wide::Utf16Be), 2))
    } else if b.starts_with(&[0xFF, 0xFE]) {
        Some((Some(Wide::Utf16Le), 2))
    } else {
        None
    }
}

/// The UTF-16/UTF-32 a document's first bytes show without a byte order mark.
fn sniff(kind: TextKind, b: &[u8]) -> Option<Wide> {
    let &[a, b2, c, d] = b.first_chunk::<4>()?;
    match kind {
        // RFC 4627 §3: the first two characters of JSON text are ASCII.
        TextKind::Json => match (a == 0, b2 == 0, c == 0, d == 0) {
            (true, true, true, false) => Some(Wide::Utf32Be),
            (true, false, true, false) => Some(Wide::Utf16Be),
            (false, true, true, true) => Some(Wide::Utf32Le),
            (false, true, false, true) => Some(Wide::Utf16Le),
            _ => None,
        },
        TextKind::Xml => match [a, b2, c, d] {
            [0, 0, 0, 0x3C] => Some(Wide::Utf32Be),
            [0x3C, 0, 0, 0] => Some(Wide::Utf32Le),
            [0, 0x3C, 0, 0x3F] => Some(Wide::Utf16Be),
            [0x3C, 0, 0x3F, 0] => Some(Wide::Utf16Le),
            _ => None,
        },
        TextKind::Text => None,
    }
}

fn wide_from_label(label: &str, b: &[u8]) -> Option<Wide> {
    let by_bom = bom(b).and_then(|(w, _)| w);
    match label {
        "utf-16le" => Some(Wide::Utf16Le),
        "utf-16be" => Some(Wide::Utf16Be),
        "utf-32le" => Some(Wide::Utf32Le),
        "utf-32be" => Some(Wide::Utf32Be),
        // Without a mark, RFC 2781 §4.3 and the Unicode standard read big-endian.
        "utf-16" => Some(match by_bom {
            Some(w @ (Wide::Utf16Le | Wide::Utf16Be)) => w,
            _ => Wide::Utf16Be,
        }),
        "utf-32" => Some(match by_bom {
            Some(w @ (Wide::Utf32Le | Wide::Utf32Be)) => w,
            _ => Wide::Utf32Be,
        }),
        _ => None,
    }
}

fn decode_wide(w: Wide, b: &[u8]) -> Result<String, DecodeError> {
    let bad = |name: &str| DecodeError::Undecodable(format!("the body is not valid {name}"));
    let b = match bom(b) {
        Some((Some(m), n)) if m == w => &b[n..],
        _ => b,
    };
    match w {
        Wide::Utf16Le | Wide::Utf16Be => {
            if b.len() % 2 != 0 {
                return Err(bad("UTF-16"));
            }
            let units = b.chunks_exact(2).map(|c| match w {
                Wide::Utf16Le => u16::from_le_bytes([c[0], c[1]]),
                _ => u16::from_be_bytes([c[0], c[1]]),
            });
            char::decode_utf16(units)
                .collect::<Result<String, _>>()
                .map_err(|_| bad("UTF-16"))
        }
        Wide::Utf32Le | Wide::Utf32Be => {
            if b.len() % 4 != 0 {
                return Err(bad("UTF-32"));
            }
            b.chunks_exact(4)
                .map(|c| {
                    let n = match w {
                        Wide::Utf32Le => u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                        _ => u32::from_be_bytes([c[0], c[1], c[2], c[3]]),
                    };
                    char::from_u32(n).ok_or_else(|| bad("UTF-32"))
                })
                .collect()
        }
    }
}

/// `body`'s text in UTF-8: converted from the `charset` of `content_type`, else from the
/// charset a byte order mark or (for JSON and XML) the first bytes show; a UTF-8 byte order
/// mark is dropped. UTF-8 and US-ASCII bodies are returned as they are (their bytes are not
/// checked here: the parser that reads them does).
pub fn text<'a>(
    content_type: &str,
    kind: TextKind,
    body: Cow<'a, [u8]>,
) -> Result<Cow<'a, [u8]>, DecodeError> {
    let label = charset(content_type);
    let wide = match label.as_deref() {
        None | Some("utf-8" | "utf8" | "us-ascii" | "ascii") => match bom(&body) {
            Some((Some(w), _)) if label.is_none() => Some(w),
            Some((None, n)) => {
                return Ok(match body {
                    Cow::Borrowed(b) => Cow::Borrowed(&b[n..]),
                    Cow::Owned(mut v) => {
                        v.drain(..n);
                        Cow::Owned(v)
                    }
                })
            }
            _ if label.is_none() => sniff(kind, &body),
            _ => None,
        },
        Some(l) => match wide_from_label(l, &body) {
            Some(w) => Some(w),
            None => return legacy(l, &body).map(|s| Cow::Owned(s.into_bytes())),
        },
    };
    match wide {
        Some(w) => decode_wide(w, &body).map(|s| Cow::Owned(s.into_bytes())),
        None => Ok(body),
    }
}

/// A body in another charset WHATWG's Encoding Standard knows (ISO-8859-1, windows-1252,
/// Shift_JIS, ...), converted without replacement characters.
fn legacy(label: &str, body: &[u8]) -> Result<String, DecodeError> {
    let enc = encoding_rs::Encoding::for_label(label.as_bytes()).ok_or_else(|| {
        DecodeError::Undecodable(format!("the charset `{label}` is not supported"))
    })?;
    enc.decode_without_bom_handling_and_without_replacement(body)
        .map(Cow::into_owned)
        .ok_or_else(|| DecodeError::Undecodable(format!("the body is not valid {}", enc.name())))
}

/// The body of a message with `headers` as an inspecting policy reads it: codings undone, and
/// text of `kind` in UTF-8 (see [`content`] and [`text`]).
pub fn body<'a>(
    headers: &HeaderMap,
    kind: TextKind,
    bytes: &'a [u8],
) -> Result<Cow<'a, [u8]>, DecodeError> {
    let decoded = content(headers, bytes)?;
    let ct = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    text(ct, kind, decoded)
}

#[cfg(test)]
mod tests;
