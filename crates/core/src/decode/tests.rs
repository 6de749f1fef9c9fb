use std::io::Write;

use proptest::prelude::*;

use super::*;

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            http::HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

fn gzip(b: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

fn zlib(b: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

fn raw_deflate(b: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

const JSON: &[u8] = br#"{"q":"1 OR 1=1"}"#;
/// `JSON` compressed by brotli 1.1 (Python's `brotli.compress`).
const JSON_BR: &str = "8b07807b2271223a2231204f5220313d31227d03";
/// 50 MiB of zero bytes compressed by brotli 1.1 at quality 11: 93 bytes.
const BOMB_BR: &str = "cbffff3ff82700e2b14020f7fe8fffff7ff04f00c4611180eefd1fffffffe09f0088c30200ddfb3ffeffffc13f0110870500baf77ffcffff837f02200e0b0074effff8ffff07ff04401c1600e8deffe5ffff07fe0980382c00d0bdff00";

#[test]
fn no_coding_is_the_body_itself() {
    let h = headers(&[("content-type", "application/json")]);
    let d = body(&h, TextKind::Json, JSON).unwrap();
    assert!(matches!(d, Cow::Borrowed(_)));
    let h = headers(&[("content-encoding", "identity")]);
    assert!(matches!(content(&h, JSON).unwrap(), Cow::Borrowed(_)));
}

#[test]
fn every_coding_is_undone() {
    for (coding, coded) in [
        ("gzip", gzip(JSON)),
        ("x-gzip", gzip(JSON)),
        ("deflate", zlib(JSON)),
        ("deflate", raw_deflate(JSON)),
        ("br", hex(JSON_BR)),
        ("zstd", zstd::encode_all(JSON, 3).unwrap()),
        ("GZIP", gzip(JSON)),
    ] {
        let h = headers(&[("content-encoding", coding)]);
        assert_eq!(&*content(&h, &coded).unwrap(), JSON, "{coding}");
    }
}

#[test]
fn stacked_codings_are_undone_last_first() {
    let twice = zstd::encode_all(&gzip(JSON)[..], 3).unwrap();
    let h = headers(&[("content-encoding", "gzip, zstd")]);
    assert_eq!(&*content(&h, &twice).unwrap(), JSON);
    let h = headers(&[("content-encoding", "gzip"), ("content-encoding", "zstd")]);
    assert_eq!(&*content(&h, &twice).unwrap(), JSON);
    // The other order is corrupt data, refused.
    let h = headers(&[("content-encoding", "zstd, gzip")]);
    assert!(matches!(
        content(&h, &twice),
        Err(DecodeError::Undecodable(_))
    ));
}

#[test]
fn bombs_are_too_large_not_memory() {
    let bomb = gzip(&vec![0u8; 40 << 20]);
    assert!(bomb.len() < 100_000, "{}", bomb.len());
    let h = headers(&[("content-encoding", "gzip")]);
    let e = content(&h, &bomb).unwrap_err();
    assert_eq!(e, DecodeError::TooLarge(allowance(bomb.len())));
    assert_eq!(e.problem().status, http::StatusCode::PAYLOAD_TOO_LARGE);
    let h = headers(&[("content-encoding", "br")]);
    let bomb = hex(BOMB_BR);
    assert_eq!(
        content(&h, &bomb),
        Err(DecodeError::TooLarge(MIN_ALLOWANCE))
    );
    // A small body of repetitive text within the allowance decodes.
    let repetitive = vec![b'a'; 512 << 10];
    let h = headers(&[("content-encoding", "zstd")]);
    let coded = zstd::encode_all(&repetitive[..], 3).unwrap();
    assert_eq!(content(&h, &coded).unwrap().len(), repetitive.len());
}

#[test]
fn allowance_follows_the_ratio_within_bounds() {
    assert_eq!(allowance(10), MIN_ALLOWANCE);
    assert_eq!(allowance(100_000), 100_000 * MAX_RATIO);
    assert_eq!(allowance(10 << 20), MAX_DECODED);
}

#[test]
fn unknown_or_corrupt_codings_are_undecodable() {
    for (coding, body) in [
        ("compress", JSON.to_vec()),
        ("gzip", JSON.to_vec()),
        ("br", JSON.to_vec()),
        ("zstd", JSON.to_vec()),
        ("deflate", b"\xff\xff\xff".to_vec()),
    ] {
        let h = headers(&[("content-encoding", coding)]);
        let e = content(&h, &body).unwrap_err();
        assert!(matches!(e, DecodeError::Undecodable(_)), "{coding}: {e:?}");
        assert_eq!(e.problem().status, http::StatusCode::UNSUPPORTED_MEDIA_TYPE);
    }
}

fn utf16(s: &str, le: bool, mark: bool) -> Vec<u8> {
    let mut out = Vec::new();
    if mark {
        out.extend(if le { [0xFF, 0xFE] } else { [0xFE, 0xFF] });
    }
    for u in s.encode_utf16() {
        out.extend(if le { u.to_le_bytes() } else { u.to_be_bytes() });
    }
    out
}

fn utf32(s: &str, le: bool) -> Vec<u8> {
    s.chars()
        .flat_map(|c| {
            let n = c as u32;
            if le {
                n.to_le_bytes()
            } else {
                n.to_be_bytes()
            }
        })
        .collect()
}

#[test]
fn json_in_utf16_and_utf32_is_read_with_or_without_charset() {
    let s = r#"{"q":"1' OR '1'='1 ü"}"#;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("application/json", utf16(s, true, false)),
        ("application/json", utf16(s, false, false)),
        ("application/json", utf16(s, true, true)),
        ("application/json", utf16(s, false, true)),
        ("application/json", utf32(s, true)),
        ("application/json", utf32(s, false)),
        ("application/json; charset=utf-16", utf16(s, false, false)),
        ("application/json; charset=UTF-16", utf16(s, true, true)),
        (
            "application/json; charset=\"utf-16le\"",
            utf16(s, true, false),
        ),
        ("application/json;charset=utf-32le", utf32(s, true)),
        ("application/json; charset=utf-32be", utf32(s, false)),
    ];
    for (ct, b) in cases {
        let d = text(ct, TextKind::Json, Cow::Owned(b)).unwrap();
        assert_eq!(std::str::from_utf8(&d).unwrap(), s, "{ct}");
    }
    // A UTF-8 byte order mark is dropped.
    let mut b = vec![0xEF, 0xBB, 0xBF];
    b.extend(s.as_bytes());
    let d = text("application/json", TextKind::Json, Cow::Borrowed(&b)).unwrap();
    assert_eq!(&*d, s.as_bytes());
}

#[test]
fn xml_in_utf16_is_read_by_its_first_bytes() {
    let s = "<?xml version=\"1.0\" encoding=\"UTF-16\"?><a>x</a>";
    let d = text(
        "application/xml",
        TextKind::Xml,
        Cow::Owned(utf16(s, true, false)),
    )
    .unwrap();
    assert_eq!(&*d, s.as_bytes());
    // A form has no such pattern: its bytes stay as they are.
    let b = utf16("a=b", true, false);
    let d = text(
        "application/x-www-form-urlencoded",
        TextKind::Text,
        Cow::Borrowed(&b),
    )
    .unwrap();
    assert_eq!(&*d, &b[..]);
}

#[test]
fn legacy_charsets_convert_and_unknown_ones_are_refused() {
    let d = text(
        "application/x-www-form-urlencoded; charset=iso-8859-1",
        TextKind::Text,
        Cow::Borrowed(b"q=\xfc"),
    )
    .unwrap();
    assert_eq!(&*d, "q=ü".as_bytes());
    let e = text(
        "text/plain; charset=klingon",
        TextKind::Text,
        Cow::Borrowed(b"x"),
    )
    .unwrap_err();
    assert!(e.to_string().contains("klingon"), "{e}");
    // Bytes that are not the charset they claim are refused, not read leniently.
    for (ct, b) in [
        (
            "application/json; charset=utf-16le",
            vec![0x00, 0xD8, 0x41, 0x00],
        ),
        ("application/json; charset=utf-16le", vec![0x41]),
        (
            "application/json; charset=utf-32be",
            vec![0x00, 0x11, 0x00, 0x00],
        ),
        ("text/plain; charset=shift_jis", vec![0x82]),
    ] {
        assert!(
            matches!(
                text(ct, TextKind::Json, Cow::Owned(b)),
                Err(DecodeError::Undecodable(_))
            ),
            "{ct}"
        );
    }
}

#[test]
fn charset_parameter_is_found_anywhere() {
    assert_eq!(
        charset("application/json; a=b; Charset=\"UTF-16\""),
        Some("utf-16".into())
    );
    assert_eq!(charset("application/json"), None);
}

proptest! {
    #[test]
    fn any_bytes_decode_or_fail_within_bounds(
        b in proptest::collection::vec(any::<u8>(), 0..512),
        coding in prop::sample::select(vec!["gzip", "deflate", "br", "zstd", "identity"]),
        ct in prop::sample::select(vec![
            "application/json", "application/json; charset=utf-16", "text/xml; charset=utf-32",
            "text/plain; charset=windows-1252",
        ]),
    ) {
        let h = headers(&[("content-encoding", coding), ("content-type", ct)]);
        match body(&h, TextKind::Json, &b) {
            Ok(d) => prop_assert!(d.len() as u64 <= allowance(b.len()).max(4 * b.len() as u64)),
            Err(DecodeError::TooLarge(n)) => prop_assert_eq!(n, allowance(b.len())),
            Err(DecodeError::Undecodable(_)) => {}
        }
    }

    #[test]
    fn compressed_text_round_trips(s in "\\PC{0,200}") {
        let h = headers(&[("content-encoding", "gzip"), ("content-type", "text/plain; charset=utf-16le")]);
        let coded = gzip(&utf16(&s, true, false));
        let d = body(&h, TextKind::Text, &coded).unwrap();
        prop_assert_eq!(std::str::from_utf8(&d).unwrap(), s.as_str());
    }
}

#[test]
fn identity_means_no_coding_and_a_utf8_charset() {
    assert!(is_identity(&headers(&[(
        "content-type",
        "application/json"
    )])));
    assert!(is_identity(&headers(&[
        ("content-type", "application/json; charset=UTF-8"),
        ("content-encoding", "identity"),
    ])));
    assert!(!is_identity(&headers(&[("content-encoding", "gzip")])));
    assert!(!is_identity(&headers(&[(
        "content-encoding",
        "identity, br"
    )])));
    assert!(!is_identity(&headers(&[(
        "content-type",
        "application/json; charset=utf-16"
    )])));
}
