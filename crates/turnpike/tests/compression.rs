//! The `compress` policy with real clients: `curl --compressed` (which offers gzip, br and
//! zstd) gets zstd and decodes it; Python's `brotli` and `zstandard` decode what the gateway
//! sent for `br` and `zstd`; gzip is decoded by curl; a client offering nothing gets the
//! backend's bytes; an image passes untouched.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::Command;

use bytes::Bytes;
use common::*;
use http_body_util::Full;

/// A backend answering `/data.json` with `json` and `/logo.png` with bytes of an image type.
async fn backend(json: String) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let json = json.clone();
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let json = json.clone();
                        async move {
                            let (ty, body) = if req.uri().path() == "/logo.png" {
                                ("image/png", Bytes::from(vec![137u8; 4096]))
                            } else {
                                ("application/json", Bytes::from(json))
                            };
                            let r = http::Response::builder()
                                .header("content-type", ty)
                                .header("etag", "\"abc\"")
                                .body(Full::new(body))
                                .unwrap();
                            Ok::<_, Infallible>(r)
                        }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    addr
}

fn json() -> String {
    let items: Vec<String> = (0..400)
        .map(|i| {
            format!(
                "{{\"id\":{i},\"name\":\"fruit {i}\",\"price\":{}.5}}",
                i % 17
            )
        })
        .collect();
    format!("{{\"items\":[{}]}}", items.join(","))
}

/// Headers (lower-cased) and body of a curl run.
fn curl_headers(args: &[&str]) -> (String, Vec<u8>) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "-D", "-", "-o", "/dev/stderr"])
        .args(args)
        .output()
        .expect("curl");
    (
        String::from_utf8_lossy(&out.stdout).to_ascii_lowercase(),
        out.stderr,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_and_python_decode_what_the_gateway_compressed() {
    let body = json();
    let backend = backend(body.clone()).await;
    let gw = TestGateway::start(&format!(
        "gateway: {{ accessLog: false }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  flow: [ compress: {{}} ]\n  target: {{ url: \"http://{backend}\" }}\n"
    ));
    let url = format!("http://{}/data.json", gw.addr());

    // curl offers deflate, gzip, br and zstd: zstd is the policy's first choice.
    let (head, got) = curl_headers(&["--compressed", &url]);
    assert!(head.contains("content-encoding: zstd"), "{head}");
    assert!(head.contains("vary: accept-encoding"), "{head}");
    assert!(head.contains("etag: w/\"abc\""), "{head}");
    assert!(!head.contains("content-length"), "{head}");
    assert_eq!(String::from_utf8(got).unwrap(), body);

    // gzip, decoded by curl.
    let (head, got) = curl_headers(&["--compressed", "-H", "Accept-Encoding: gzip", &url]);
    assert!(head.contains("content-encoding: gzip"), "{head}");
    assert_eq!(String::from_utf8(got).unwrap(), body);

    // br and zstd, decoded by Python's brotli and zstandard.
    if python_has(&["brotli", "zstandard"]) {
        let script = r#"
import sys, urllib.request, brotli, zstandard
url, body = sys.argv[1], open(sys.argv[2]).read()
for coding, decode in (("br", brotli.decompress),
                       ("zstd", lambda b: zstandard.ZstdDecompressor().decompressobj().decompress(b))):
    r = urllib.request.urlopen(urllib.request.Request(url, headers={"Accept-Encoding": coding}))
    assert r.headers["Content-Encoding"] == coding, r.headers
    raw = r.read()
    assert len(raw) < len(body) / 4, (coding, len(raw))
    assert decode(raw).decode() == body, coding
print("ok")
"#;
        let dir = tempfile::tempdir().unwrap();
        let expected = dir.path().join("body.json");
        std::fs::write(&expected, &body).unwrap();
        let out = Command::new("python3")
            .args(["-c", script, &url, expected.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "ok",
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // Nothing offered: the backend's bytes, with their length.
    let (head, got) = curl_headers(&[&url]);
    assert!(!head.contains("content-encoding"), "{head}");
    assert!(
        head.contains(&format!("content-length: {}", body.len())),
        "{head}"
    );
    assert_eq!(String::from_utf8(got).unwrap(), body);

    // An image is not compressed, whatever the client offers.
    let (head, got) = curl_headers(&["--compressed", &format!("http://{}/logo.png", gw.addr())]);
    assert!(!head.contains("content-encoding"), "{head}");
    assert_eq!(got.len(), 4096);
}
