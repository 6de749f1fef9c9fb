//! The body decoder: any bytes under any coding and charset decode or fail without a panic and
//! never beyond their allowance; gzip and zstd round-trip; text that is valid UTF-16 converts
//! to the same characters in UTF-8.
#![no_main]
use std::io::Write;

use libfuzzer_sys::fuzz_target;
use turnpike_core::decode::{self, DecodeError, TextKind};

const CODINGS: [&str; 7] = ["gzip", "deflate", "br", "zstd", "gzip, br", "compress", "identity"];
const TYPES: [&str; 6] = [
    "application/json",
    "application/json; charset=utf-16",
    "text/xml; charset=UTF-32LE",
    "application/x-www-form-urlencoded; charset=iso-8859-1",
    "text/plain; charset=shift_jis",
    "text/plain; charset=klingon",
];

fn headers(coding: &str, ct: &str) -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    h.insert("content-encoding", http::HeaderValue::from_str(coding).unwrap());
    h.insert("content-type", http::HeaderValue::from_str(ct).unwrap());
    h
}

fuzz_target!(|input: (&[u8], u8, u8)| {
    let (body, c, t) = input;
    let coding = CODINGS[usize::from(c) % CODINGS.len()];
    let ct = TYPES[usize::from(t) % TYPES.len()];
    let kind = [TextKind::Json, TextKind::Xml, TextKind::Text][usize::from(t) % 3];
    match decode::body(&headers(coding, ct), kind, body) {
        Ok(d) => assert!(d.len() as u64 <= decode::allowance(body.len()).max(4 * body.len() as u64)),
        Err(DecodeError::TooLarge(n)) => assert_eq!(n, decode::allowance(body.len())),
        Err(DecodeError::Undecodable(_)) => {}
    }

    // Round trips.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(body).unwrap();
    let gz = gz.finish().unwrap();
    let h = headers("gzip", "application/octet-stream");
    match decode::content(&h, &gz) {
        Ok(d) => assert_eq!(&*d, body),
        Err(e) => assert_eq!(e, DecodeError::TooLarge(decode::allowance(gz.len()))),
    }
    let zs = zstd::encode_all(body, 1).unwrap();
    let h = headers("zstd", "application/octet-stream");
    match decode::content(&h, &zs) {
        Ok(d) => assert_eq!(&*d, body),
        Err(e) => assert_eq!(e, DecodeError::TooLarge(decode::allowance(zs.len()))),
    }
    if let Ok(s) = std::str::from_utf8(body) {
        let wide: Vec<u8> = s.encode_utf16().flat_map(u16::to_le_bytes).collect();
        let d = decode::text("text/plain; charset=utf-16le", TextKind::Text, wide.into()).unwrap();
        assert_eq!(&*d, s.as_bytes());
    }
});
