//! TLS on both hops and HTTP/2, with real clients (curl) and TLS backends: PKCS#12 and PEM
//! keys, SNI, protocol floor, mutual TLS, certificate reload, upstream verification, h2 and h2c,
//! large bodies and connection reuse with TLS on both hops.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::pki::{curl, Pki};
use common::*;

fn p(path: &std::path::Path) -> String {
    path.display().to_string()
}

/// An HTTP/1.1 client over TLS (tokio-rustls, trusting `ca`): one connection for every request
/// it sends.
async fn tls_client(
    addr: std::net::SocketAddr,
    ca: &std::path::Path,
) -> hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let cfg = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg))
        .connect(
            rustls::pki_types::ServerName::try_from("localhost").unwrap(),
            tcp,
        )
        .await
        .unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminates_tls_with_pkcs12_and_pem_selected_by_sni() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let p12 = pki.pkcs12(&pki.server, "gateway", "changeit");
    let backend = Backend::start().await;
    let port = free_port();
    std::env::set_var("TP_TEST_KEYSTORE_PASSWORD", "changeit");
    let yaml = format!(
        r#"
gateway: {{ accessLog: false }}
---
api:
  port: {port}
  ip: 127.0.0.1
  host: localhost
  ssl:
    keystore:
      location: {ks}
      password: "${{TP_TEST_KEYSTORE_PASSWORD}}"
      keyPassword: "${{TP_TEST_KEYSTORE_PASSWORD}}"
  target: {{ host: 127.0.0.1, port: {b} }}
---
api:
  port: {port}
  ip: 127.0.0.1
  host: alt.localhost
  ssl:
    certificate: {alt_cert}
    key: {alt_key}
  flow: [ {{ return: {{ body: alt }} }} ]
"#,
        ks = p(&p12),
        b = backend.port(),
        alt_cert = p(&pki.alt_host.cert),
        alt_key = p(&pki.alt_host.key),
    );
    let gw = TestGateway::start(&yaml);
    let ca = p(&pki.ca);
    let resolve = |h: &str| format!("{h}:{port}:127.0.0.1");
    let url = |h: &str, path: &str| format!("https://{h}:{port}{path}");

    let (code, version, _, err) = curl(&[
        "--cacert",
        &ca,
        "--resolve",
        &resolve("localhost"),
        "--http2",
        &url("localhost", "/x"),
    ]);
    assert_eq!((code, version.as_str()), (200, "2"), "{err}");
    let seen = backend.last();
    assert_eq!(seen.headers["x-forwarded-proto"], "https");
    assert_eq!(
        seen.version,
        http::Version::HTTP_11,
        "HTTP/2 from the client, HTTP/1.1 to the backend"
    );

    let (code, version, _, err) = curl(&[
        "--cacert",
        &ca,
        "--resolve",
        &resolve("localhost"),
        "--http1.1",
        &url("localhost", "/x"),
    ]);
    assert_eq!((code, version.as_str()), (200, "1.1"), "{err}");

    // SNI picks the alt certificate (curl verifies the name).
    let (code, _, body, err) = curl(&[
        "--cacert",
        &ca,
        "--resolve",
        &resolve("alt.localhost"),
        &url("alt.localhost", "/"),
    ]);
    assert_eq!((code, body.as_str()), (200, "alt"), "{err}");

    // A client that only speaks TLS 1.0 is refused; the gateway keeps serving others.
    let (code, _, _, _) = curl(&[
        "--cacert",
        &ca,
        "--resolve",
        &resolve("localhost"),
        "--tlsv1.0",
        "--tls-max",
        "1.0",
        &url("localhost", "/"),
    ]);
    assert_eq!(code, 0, "a TLS 1.0 handshake must fail");
    let (code, _, _, err) = curl(&[
        "--cacert",
        &ca,
        "--resolve",
        &resolve("localhost"),
        &url("localhost", "/"),
    ]);
    assert_eq!(code, 200, "{err}");
    drop(gw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_and_certificates_reloaded_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let trust = pki.truststore("trustpw");
    let cert = dir.path().join("live.pem");
    let key = dir.path().join("live.key");
    std::fs::copy(&pki.server.cert, &cert).unwrap();
    std::fs::copy(&pki.server.key, &key).unwrap();
    let backend = Backend::start().await;
    let port = free_port();
    let yaml = format!(
        r#"
gateway: {{ accessLog: false }}
---
api:
  port: {port}
  ip: 127.0.0.1
  ssl:
    certificate: {cert}
    key: {key}
    protocols: [ TLSv1.3 ]
    clientAuth:
      truststore: {{ location: {trust}, password: trustpw }}
  flow:
    - request:
        - setHeader: {{ name: X-Client-Cert, value: "${{client.certSubject}}" }}
  target: {{ host: 127.0.0.1, port: {b} }}
"#,
        cert = p(&cert),
        key = p(&key),
        trust = p(&trust),
        b = backend.port()
    );
    let gw = TestGateway::start(&yaml);
    let ca = p(&pki.ca);
    let resolve = format!("localhost:{port}:127.0.0.1");
    let url = format!("https://localhost:{port}/m");
    let (code, _, _, _) = curl(&["--cacert", &ca, "--resolve", &resolve, &url]);
    assert_eq!(code, 0, "no client certificate: refused");
    let (code, _, _, err) = curl(&[
        "--cacert",
        &ca,
        "--resolve",
        &resolve,
        "--cert",
        &p(&pki.client.cert),
        "--key",
        &p(&pki.client.key),
        &url,
    ]);
    assert_eq!(code, 200, "{err}");
    let subject = backend.last().headers["x-client-cert"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(subject.contains("CN=client-one"), "{subject}");

    // `--watch` watches the key material too (certificate rotation).
    let watched = gw.gw().files();
    for f in [&cert, &key, &trust] {
        assert!(
            watched.contains(f),
            "{} not watched: {watched:?}",
            f.display()
        );
    }

    // Replace the certificate on disk and reload: the new one is served.
    std::fs::copy(&pki.other_name.cert, &cert).unwrap();
    std::fs::copy(&pki.other_name.key, &key).unwrap();
    gw.gw().reload().unwrap();
    let args = [
        "--cacert",
        &ca,
        "--resolve",
        &resolve,
        "--cert",
        &p(&pki.client.cert),
        "--key",
        &p(&pki.client.key),
    ];
    let (code, _, _, err) = curl(&[&args[..], &[url.as_str()]].concat());
    assert_eq!(
        code, 0,
        "the reloaded certificate is for other.example, so curl must refuse it"
    );
    assert!(err.contains("certificate") || err.contains("SSL"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_backends_verifies_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let good = start_tls_backend(&pki.server.cert, &pki.server.key, false).await;
    let wrong_name = start_tls_backend(&pki.other_name.cert, &pki.other_name.key, false).await;
    let expired = start_tls_backend(&pki.expired.cert, &pki.expired.key, false).await;
    let h2 = start_tls_backend(&pki.server.cert, &pki.server.key, true).await;
    let h2c = start_h2c_backend().await;
    let ca = p(&pki.ca);
    let yaml = format!(
        r#"
gateway: {{ accessLog: false }}
---
api: {{ port: 0, ip: 127.0.0.1, path: {{ uri: /good }}, target: {{ url: "https://localhost:{g}", ssl: {{ truststore: {{ location: {ca} }} }} }} }}
---
api: {{ port: 0, ip: 127.0.0.1, path: {{ uri: /wrong-name }}, target: {{ url: "https://localhost:{w}", ssl: {{ truststore: {{ location: {ca} }} }} }} }}
---
api: {{ port: 0, ip: 127.0.0.1, path: {{ uri: /expired }}, target: {{ url: "https://localhost:{e}", ssl: {{ truststore: {{ location: {ca} }} }} }} }}
---
api: {{ port: 0, ip: 127.0.0.1, path: {{ uri: /insecure }}, target: {{ url: "https://localhost:{e}", ssl: {{ insecureSkipVerify: true }} }} }}
---
api: {{ port: 0, ip: 127.0.0.1, path: {{ uri: /system-roots }}, target: {{ url: "https://localhost:{g}" }} }}
---
api: {{ port: 0, ip: 127.0.0.1, path: {{ uri: /h2 }}, target: {{ url: "https://localhost:{h}", http2: true, ssl: {{ truststore: {{ location: {ca} }} }} }} }}
---
api: {{ port: 0, ip: 127.0.0.1, path: {{ uri: /h2c }}, target: {{ url: "http://127.0.0.1:{c}", http2: true }} }}
"#,
        g = good.port(),
        w = wrong_name.port(),
        e = expired.port(),
        h = h2.port(),
        c = h2c.port(),
    );
    let gw = TestGateway::start(&yaml);
    let a = gw.addr();
    assert_eq!(get(a, "/good").await.status, 200);
    assert_eq!(
        good.last().headers["host"],
        format!("localhost:{}", good.port())
    );
    for path in ["/wrong-name", "/expired", "/system-roots"] {
        let r = get(a, path).await;
        assert_eq!(r.status, 502, "{path}");
        assert_eq!(
            r.json()["type"],
            "urn:turnpike:problem:upstream-tls",
            "{path}: {}",
            r.text()
        );
    }
    assert_eq!(get(a, "/insecure").await.status, 200);
    let body = pattern(300_000);
    let r = send(
        a,
        req("POST", "/h2/upload")
            .body(http_body_util::Full::new(body.clone()))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(r.body == body);
    assert_eq!(h2.last().version, http::Version::HTTP_2);
    assert_eq!(get(a, "/h2c/x").await.status, 200);
    assert_eq!(h2c.last().version, http::Version::HTTP_2);
    assert_eq!(
        h2c.last().uri,
        format!("http://127.0.0.1:{}/h2c/x", h2c.port())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleartext_http2_with_prior_knowledge_beside_http1() {
    let backend = Backend::start().await;
    let port = free_port();
    let yaml = format!(
        "gateway: {{ accessLog: false }}\n---\napi: {{ port: {port}, ip: 127.0.0.1, h2c: true, target: {{ host: 127.0.0.1, port: {} }} }}\n",
        backend.port()
    );
    let _gw = TestGateway::start(&yaml);
    let url = format!("http://127.0.0.1:{port}/p");
    let (code, version, _, err) = curl(&["--http2-prior-knowledge", &url]);
    assert_eq!((code, version.as_str()), (200, "2"), "{err}");
    let (code, version, _, err) = curl(&["--http1.1", &url]);
    assert_eq!((code, version.as_str()), (200, "1.1"), "{err}");
    // h2load as a real HTTP/2 load client, when installed.
    if std::process::Command::new("h2load")
        .arg("--version")
        .output()
        .is_ok()
    {
        let out = std::process::Command::new("h2load")
            .args(["-n", "2000", "-c", "10", "-m", "10", &url])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("2000 succeeded"), "{text}");
    } else {
        assert!(
            std::env::var_os("CI").is_none(),
            "h2load (nghttp2-client) is missing under CI"
        );
    }
}

#[test]
fn tls_settings_are_checked_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let cert = p(&pki.server.cert);
    let key = p(&pki.server.key);
    let cases = [
        (format!("ssl: {{ certificate: {cert} }}"), "api.ssl"),
        (
            format!("ssl: {{ certificate: {cert}, key: {key}, protocols: [ TLSv1.0 ] }}"),
            "api.ssl",
        ),
        (
            format!("ssl: {{ certificate: {cert}, key: {key}, ciphers: [ RC4 ] }}"),
            "api.ssl",
        ),
        (
            format!(
                "ssl: {{ certificate: {cert}, key: {} }}",
                p(&pki.client.key)
            ),
            "api.ssl",
        ),
        (
            "target: { url: \"https://x\", ssl: { truststore: { location: /nope.pem } } }"
                .to_string(),
            "api.target.ssl",
        ),
        (
            format!("ssl: {{ certificate: {cert}, key: {key} }}\n  h2c: true"),
            "api.h2c",
        ),
    ];
    for (extra, key_path) in cases {
        let f = dir.path().join("c.yaml");
        std::fs::write(
            &f,
            format!("api:\n  port: 1\n  {extra}\n  flow: [ {{ return: {{}} }} ]\n"),
        )
        .unwrap();
        let err = match turnpike::load_and_compile(&[f]) {
            Ok(_) => panic!("accepted: {extra}"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(key_path), "{extra}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_on_both_hops_carries_large_bodies_over_one_backend_connection() {
    use http_body_util::BodyExt;
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let backend = start_tls_backend(&pki.server.cert, &pki.server.key, false).await;
    let yaml = format!(
        r#"
gateway: {{ accessLog: false, threads: 1 }}
---
api:
  port: 0
  ip: 127.0.0.1
  ssl: {{ certificate: {cert}, key: {key} }}
  target: {{ url: "https://localhost:{b}", ssl: {{ truststore: {{ location: {ca} }} }} }}
"#,
        cert = p(&pki.server.cert),
        key = p(&pki.server.key),
        b = backend.port(),
        ca = p(&pki.ca),
    );
    let gw = TestGateway::start(&yaml);
    let mut client = tls_client(gw.addr(), &pki.ca).await;
    let mut call = async |method: &str, path: &str, body: bytes::Bytes| {
        client.ready().await.unwrap();
        let r = client
            .send_request(
                req(method, path)
                    .body(http_body_util::Full::new(body))
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = r.status();
        (status, r.into_body().collect().await.unwrap().to_bytes())
    };

    // 10 MB up (echoed back), 10 MB down with a length, 3 MB down chunked.
    let up = pattern(10_000_000);
    let (status, echoed) = call("POST", "/upload", up.clone()).await;
    assert_eq!(status, 200);
    assert!(
        echoed == up,
        "10 MB echo differs ({} bytes back)",
        echoed.len()
    );
    let (status, down) = call("GET", "/big/10000000", bytes::Bytes::new()).await;
    assert_eq!(status, 200);
    assert!(down == pattern(10_000_000), "10 MB download differs");
    let (status, chunked) = call("GET", "/chunked/3000000", bytes::Bytes::new()).await;
    assert_eq!(status, 200);
    assert!(chunked == pattern(3_000_000), "chunked download differs");
    for i in 0..30 {
        let (status, body) = call("GET", &format!("/small/{i}"), bytes::Bytes::new()).await;
        assert_eq!((status.as_u16(), body.len()), (200, 0));
    }
    assert_eq!(backend.count(), 33);
    assert_eq!(
        backend.connections(),
        1,
        "one worker, requests one after another: one pooled TLS connection to the backend"
    );
}
