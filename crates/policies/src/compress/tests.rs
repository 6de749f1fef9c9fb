use std::io::Read;

use http_body_util::BodyExt;

use super::*;
use crate::testutil::{exchange, plain};

fn policy(settings: serde_json::Value) -> Compress {
    Compress::compile(serde_json::from_value(settings).unwrap(), &plain()).unwrap()
}

fn decode(encoding: &str, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match encoding {
        "gzip" => {
            flate2::read::GzDecoder::new(bytes)
                .read_to_end(&mut out)
                .unwrap();
        }
        "br" => {
            brotli::Decompressor::new(bytes, 4096)
                .read_to_end(&mut out)
                .unwrap();
        }
        "zstd" => {
            out = zstd::stream::decode_all(bytes).unwrap();
        }
        other => panic!("{other}"),
    }
    out
}

fn json(n: usize) -> String {
    let items: Vec<String> = (0..n)
        .map(|i| format!("{{\"id\":{i},\"name\":\"item {i}\"}}"))
        .collect();
    format!("[{}]", items.join(","))
}

/// Runs both phases for a request with `accept` and a response with `headers` and `body`;
/// returns the response head and its body as sent.
fn run(
    p: &Compress,
    method: &str,
    accept: &str,
    status: u16,
    headers: &[(&str, &str)],
    body: Body,
) -> (http::response::Parts, Vec<u8>) {
    let mut ex = exchange(method, "/", &[("accept-encoding", accept)], "");
    assert!(matches!(p.on_request(&mut ex), Outcome::Continue));
    let mut r = http::Response::builder().status(status);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    ex.response = Some(r.body(body).unwrap());
    assert!(matches!(p.on_response(&mut ex), Outcome::Continue));
    let (parts, body) = ex.response.take().unwrap().into_parts();
    let bytes = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(body.collect())
        .unwrap()
        .to_bytes()
        .to_vec();
    (parts, bytes)
}

#[test]
fn the_encoding_follows_q_values_then_the_policys_order() {
    let p = policy(serde_json::json!({}));
    let chosen = |a: &str| p.choose(a).map(|(e, _)| e.token());
    assert_eq!(chosen("gzip, deflate, br, zstd"), Some("zstd"));
    assert_eq!(chosen("gzip, br;q=0.9"), Some("gzip"));
    assert_eq!(chosen("br, gzip"), Some("br"));
    assert_eq!(chosen("*"), Some("zstd"));
    assert_eq!(chosen("*, zstd;q=0"), Some("br"));
    assert_eq!(chosen("x-gzip"), Some("gzip"));
    assert_eq!(chosen("GZIP;Q=0.5"), Some("gzip"));
    assert_eq!(chosen("identity"), None);
    assert_eq!(chosen("gzip;q=0"), None);
    assert_eq!(chosen(""), None);
    // Two Accept-Encoding fields are one list: neither field alone gives these answers.
    for (first, second, want) in [
        ("gzip;q=0.5", "br", Encoding::Brotli),
        ("zstd", "gzip;q=0.1", Encoding::Zstd),
    ] {
        let mut ex = exchange(
            "GET",
            "/",
            &[("accept-encoding", first), ("accept-encoding", second)],
            "",
        );
        p.on_request(&mut ex);
        let got = ex
            .extensions
            .get::<Chosen>()
            .and_then(|c| c.0)
            .map(|(e, _)| e);
        assert_eq!(got, Some(want), "{first} + {second}");
    }
    assert!(p.compressible("Application/Vnd.Api+JSON; charset=utf-8"));
    assert!(p.compressible("TEXT/HTML"));
    assert!(!p.compressible("image/png"));
    let gzip_first = policy(serde_json::json!({"encodings": ["gzip", "br"]}));
    assert_eq!(
        gzip_first.choose("br, gzip, zstd").map(|(e, _)| e),
        Some(Encoding::Gzip)
    );
}

#[test]
fn json_is_encoded_in_each_coding_and_decodes_to_the_original() {
    let p = policy(serde_json::json!({}));
    let body = json(200);
    for coding in ["gzip", "br", "zstd"] {
        let (parts, bytes) = run(
            &p,
            "GET",
            coding,
            200,
            &[
                ("content-type", "application/json"),
                ("content-length", &body.len().to_string()),
                ("etag", "\"v1\""),
            ],
            Body::full(body.clone()),
        );
        assert_eq!(parts.headers["content-encoding"], coding);
        assert!(!parts.headers.contains_key("content-length"));
        assert_eq!(parts.headers["vary"], "Accept-Encoding");
        assert_eq!(parts.headers["etag"], "W/\"v1\"");
        assert!(
            bytes.len() < body.len() / 3,
            "{coding}: {} bytes",
            bytes.len()
        );
        assert_eq!(decode(coding, &bytes), body.as_bytes(), "{coding}");
    }
}

/// A body of chunks that arrive one per poll, with a pause (`Pending`) between them.
struct Chunks {
    left: std::collections::VecDeque<bytes::Bytes>,
    paused: bool,
}

impl http_body::Body for Chunks {
    type Data = bytes::Bytes;
    type Error = turnpike_core::body::BodyError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        if !self.paused {
            self.paused = true;
            cx.waker().wake_by_ref();
            return std::task::Poll::Pending;
        }
        self.paused = false;
        std::task::Poll::Ready(self.left.pop_front().map(|b| Ok(http_body::Frame::data(b))))
    }
}

#[test]
fn a_stream_is_encoded_chunk_by_chunk() {
    let p = policy(serde_json::json!({"encodings": ["gzip"]}));
    let chunks: Vec<String> = (0..50).map(|i| format!("line {i}\n").repeat(20)).collect();
    let expected: String = chunks.concat();
    let body = Chunks {
        left: chunks.into_iter().map(bytes::Bytes::from).collect(),
        paused: false,
    };
    let (parts, bytes) = run(
        &p,
        "GET",
        "gzip",
        200,
        &[("content-type", "text/plain; charset=utf-8")],
        Body::stream(body),
    );
    assert_eq!(parts.headers["content-encoding"], "gzip");
    assert_eq!(decode("gzip", &bytes), expected.as_bytes());
}

#[test]
fn responses_that_do_not_qualify_are_left_alone() {
    let p = policy(serde_json::json!({}));
    let body = json(100);
    let len = body.len().to_string();
    for (method, status, headers, vary) in [
        // Too small: never encoded, so it does not vary.
        (
            "GET",
            200,
            vec![
                ("content-type", "application/json"),
                ("content-length", "20"),
            ],
            false,
        ),
        (
            "GET",
            200,
            vec![
                ("content-type", "image/png"),
                ("content-length", len.as_str()),
            ],
            false,
        ),
        (
            "GET",
            200,
            vec![
                ("content-type", "application/json"),
                ("content-encoding", "br"),
            ],
            false,
        ),
        (
            "GET",
            200,
            vec![
                ("content-type", "text/html"),
                ("cache-control", "public, no-transform"),
            ],
            false,
        ),
        (
            "GET",
            206,
            vec![
                ("content-type", "text/html"),
                ("content-range", "bytes 0-9/100"),
            ],
            false,
        ),
        ("GET", 304, vec![("content-type", "text/html")], false),
        ("GET", 200, vec![("content-length", len.as_str())], false),
        // HEAD: no body to encode, the same Vary as GET.
        (
            "HEAD",
            200,
            vec![
                ("content-type", "application/json"),
                ("content-length", len.as_str()),
            ],
            true,
        ),
    ] {
        let (parts, bytes) = run(
            &p,
            method,
            "gzip, br",
            status,
            &headers,
            Body::full(body.clone()),
        );
        let encoding = parts
            .headers
            .get("content-encoding")
            .map(|v| v.to_str().unwrap().to_owned());
        let given = headers
            .iter()
            .find(|(k, _)| *k == "content-encoding")
            .map(|(_, v)| v.to_string());
        assert_eq!(encoding, given, "{method} {status} {headers:?}");
        assert_eq!(bytes, body.as_bytes(), "{headers:?}");
        assert_eq!(parts.headers.contains_key("vary"), vary, "{headers:?}");
    }
    // A client that accepts nothing we offer gets identity, with Vary.
    let (parts, bytes) = run(
        &p,
        "GET",
        "deflate",
        200,
        &[("content-type", "application/xml"), ("vary", "Origin")],
        Body::full(body.clone()),
    );
    assert!(!parts.headers.contains_key("content-encoding"));
    assert_eq!(bytes, body.as_bytes());
    let vary: Vec<_> = parts.headers.get_all("vary").iter().collect();
    assert_eq!(vary, ["Origin", "Accept-Encoding"]);
}

#[test]
fn settings_are_checked() {
    for (bad, at) in [
        (
            serde_json::json!({"encodings": ["deflate"]}),
            "encodings[0]",
        ),
        (serde_json::json!({"encodings": []}), "encodings"),
        (
            serde_json::json!({"encodings": ["gzip", "gzip"]}),
            "encodings[1]",
        ),
        (serde_json::json!({"levels": {"gzip": 10}}), "levels.gzip"),
        (serde_json::json!({"levels": {"br": 12}}), "levels.br"),
        (serde_json::json!({"levels": {"zstd": 0}}), "levels.zstd"),
        (
            serde_json::json!({"contentTypes": ["json"]}),
            "contentTypes[0]",
        ),
        (
            serde_json::json!({"contentTypes": ["*/*"]}),
            "contentTypes[0]",
        ),
    ] {
        let e = Compress::compile(serde_json::from_value(bad.clone()).unwrap(), &plain())
            .err()
            .unwrap_or_else(|| panic!("{bad} compiled"));
        assert_eq!(e.key, at, "{bad}");
    }
}
