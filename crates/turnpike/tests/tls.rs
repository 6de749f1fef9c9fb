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
        rustls::crypto::aws_lc_rs::default_provider(),
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

/// Loads the test server certificate and key for a rustls server config.
fn server_config(pki: &Pki, alpn: &[&[u8]]) -> std::sync::Arc<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    let chain: Vec<rustls::pki_types::CertificateDer<'static>> =
        rustls::pki_types::CertificateDer::pem_file_iter(&pki.server.cert)
            .unwrap()
            .map(|c| c.unwrap())
            .collect();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&pki.server.key).unwrap();
    let mut cfg = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .unwrap();
    cfg.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    std::sync::Arc::new(cfg)
}

/// A TLS backend that answers `GET /big/<n>` with an n-byte body (in records of 16 KiB: the last
/// one is full when n is a multiple of 16 KiB), and sends one more response nobody asked for
/// right behind it, in the same flight; any other request gets `good`. Returns its port and how many connections it accepted.
async fn poisoning_backend(pki: &Pki) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let acceptor = tokio_rustls::TlsAcceptor::from(server_config(pki, &[b"http/1.1"]));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            // The extra response leaves right behind the body (no Nagle delay).
            tcp.set_nodelay(true).unwrap();
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut pending = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match tls.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => pending.extend_from_slice(&buf[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&pending[..end]).to_string();
                    pending.drain(..end + 4);
                    if let Some(n) = head
                        .strip_prefix("GET /big/")
                        .and_then(|r| r.split(' ').next())
                        .and_then(|n| n.parse::<usize>().ok())
                    {
                        // All three are sealed (head, body in 16 KiB records, the extra
                        // response in a record of its own) before any byte leaves, and the
                        // flush below sends them in one go: the extra response is already on
                        // its way when the body's last record arrives, whatever the scheduling.
                        // (A backend that sends it later, once the connection was reused, is a
                        // race no HTTP/1.1 client can tell from a response.)
                        use std::io::Write;
                        let conn = tls.get_mut().1;
                        conn.set_buffer_limit(None);
                        let h = format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n");
                        conn.writer().write_all(h.as_bytes()).unwrap();
                        conn.writer().write_all(&vec![b'b'; n]).unwrap();
                        conn.writer()
                            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nEVIL!")
                            .unwrap();
                    } else {
                        tls.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ngood")
                            .await
                            .unwrap();
                    }
                    if tls.flush().await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, accepted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_tls_connection_with_bytes_the_backend_sent_unasked_is_not_reused() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let (port, accepted) = poisoning_backend(&pki).await;
    let yaml = format!(
        "gateway: {{ accessLog: false, threads: 1 }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  target: {{ url: \"https://localhost:{port}\", ssl: {{ truststore: {{ location: {ca} }} }} }}\n",
        ca = p(&pki.ca),
    );
    let gw = TestGateway::start(&yaml);
    let a = gw.addr();
    for round in 0..24 {
        let n = [16384, 32768, 65536, 131072, 1 << 20, 16384 * 3 + 100][round % 6];
        let big = get(a, &format!("/big/{n}")).await;
        assert_eq!(
            (big.status.as_u16(), big.body.len()),
            (200, n),
            "round {round}"
        );
        for i in 0..3 {
            let r = get(a, &format!("/small/{i}")).await;
            assert_eq!(
                (r.status.as_u16(), r.text()),
                (200, "good".to_owned()),
                "round {round}: a client got bytes the backend sent after another's response"
            );
        }
    }
    // Each poisoned connection was given up; the clean ones were reused.
    assert!(accepted.load(std::sync::atomic::Ordering::SeqCst) <= 48);
}

/// The resident memory of this process (the in-process gateway's included), in KiB.
/// A child process killed and reaped when the test ends, whether or not it passed.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Floods the gateway at `addr` with TLS 1.3 KeyUpdate requests (each asks for a KeyUpdate
/// back), each followed by a little application data (an HTTP/2 PING, or an HTTP/1.1 request)
/// so that the peer cannot count them as key updates in a row, on `connections` connections
/// that never read; returns how many connections the gateway ended within 10 s.
fn key_update_flood(
    addr: std::net::SocketAddr,
    ca: &std::path::Path,
    alpn: &[u8],
    connections: usize,
) -> usize {
    use rustls::pki_types::pem::PemObject;
    use std::io::{Read, Write};
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_file(ca).unwrap())
        .unwrap();
    let mut cfg = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    cfg.alpn_protocols = vec![alpn.to_vec()];
    let cfg = std::sync::Arc::new(cfg);
    let mut ended = 0;
    for _ in 0..connections {
        let mut sock = std::net::TcpStream::connect(addr).unwrap();
        let mut conn =
            rustls::ClientConnection::new(cfg.clone(), "localhost".try_into().unwrap()).unwrap();
        while conn.is_handshaking() {
            conn.complete_io(&mut sock).unwrap();
        }
        sock.set_write_timeout(Some(std::time::Duration::from_secs(3)))
            .unwrap();
        let h2 = alpn == b"h2";
        if h2 {
            // The connection preface and an empty SETTINGS frame.
            let mut preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
            preface.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
            conn.writer().write_all(&preface).unwrap();
        }
        // A PING frame, or a request for an empty answer.
        let app: &[u8] = if h2 {
            &[0, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]
        } else {
            b"GET /k HTTP/1.1\r\nHost: x\r\n\r\n"
        };
        let started = std::time::Instant::now();
        for _ in 0..200_000 {
            if started.elapsed() > std::time::Duration::from_secs(4)
                || conn.refresh_traffic_keys().is_err()
                || conn.writer().write_all(app).is_err()
            {
                break;
            }
            let mut failed = false;
            while conn.wants_write() {
                if conn.write_tls(&mut sock).is_err() {
                    failed = true;
                    break;
                }
            }
            if failed {
                break;
            }
        }
        // The gateway ends a connection that only asks for key updates.
        sock.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut buf = [0u8; 65536];
        loop {
            match sock.read(&mut buf) {
                Ok(0) => {
                    ended += 1;
                    break;
                }
                Ok(_) => continue,
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    break
                }
                Err(_) => {
                    ended += 1;
                    break;
                }
            }
        }
    }
    ended
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_update_floods_keep_memory_bounded_over_http1_and_h2() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let port = free_port();
    // The gateway runs as its own process, so that only its memory is measured; it answers
    // itself, as a recording backend would keep every flooding request.
    let yaml = format!(
        "gateway: {{ threads: 1, accessLog: false, timeouts: {{ responseWrite: 2s }} }}\n---\napi:\n  port: {port}\n  ip: 127.0.0.1\n  ssl: {{ certificate: {cert}, key: {key} }}\n  flow: [ {{ return: {{ status: 200 }} }} ]\n",
        cert = p(&pki.server.cert),
        key = p(&pki.server.key),
    );
    std::fs::write(dir.path().join("gw.yaml"), yaml).unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_turnpike"))
        .args(["run", "-c"])
        .arg(dir.path().join("gw.yaml"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let child = Reaped(child);
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the gateway did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // One ordinary exchange first, so that what the first request allocates is not counted.
    {
        let mut client = tls_client(addr, &pki.ca).await;
        client.ready().await.unwrap();
        let r = client
            .send_request(
                req("GET", "/before")
                    .body(http_body_util::Full::new(bytes::Bytes::new()))
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let pid = child.0.id();
    let before = rss_kib(pid);
    let ca = pki.ca.clone();
    let ended = tokio::task::spawn_blocking(move || {
        let h1 = key_update_flood(addr, &ca, b"http/1.1", 1);
        // An HTTP/2 connection whose client reads again after the flood is simply idle.
        key_update_flood(addr, &ca, b"h2", 1);
        h1
    })
    .await
    .unwrap();
    let grown = rss_kib(pid).saturating_sub(before);
    eprintln!("the gateway grew by {grown} KiB from {before} KiB");
    assert_eq!(ended, 1, "the flooding HTTP/1.1 connection is ended");
    assert!(
        grown < 16 * 1024,
        "the gateway's memory grew by {grown} KiB during the flood"
    );
    // The gateway still serves.
    let mut client = tls_client(addr, &pki.ca).await;
    client.ready().await.unwrap();
    let r = client
        .send_request(
            req("GET", "/after")
                .body(http_body_util::Full::new(bytes::Bytes::new()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membranes_client_auth_modes_with_a_truststore_beside_them() {
    // examples/security/ssl-tls: `clientAuth: need|want` with `truststore` in `ssl`, and
    // `showSSLExceptions`; a truststore without `clientAuth` asks for nothing (as in Membrane).
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let trust = pki.truststore("trustpw");
    let (need, want, none) = (free_port(), free_port(), free_port());
    let api = |port: u16, client_auth: &str| {
        format!(
            "api:\n  port: {port}\n  ip: 127.0.0.1\n  ssl:\n    showSSLExceptions: false\n    certificate: {}\n    key: {}\n{client_auth}    truststore: {{ location: {}, password: trustpw }}\n  flow: [ {{ return: {{ status: 204 }} }} ]\n",
            p(&pki.server.cert),
            p(&pki.server.key),
            p(&trust)
        )
    };
    let yaml = format!(
        "{}---\n{}---\n{}",
        api(need, "    clientAuth: need\n"),
        api(want, "    clientAuth: want\n"),
        api(none, "")
    );
    let _gw = TestGateway::start(&yaml);
    let ca = p(&pki.ca);
    let call = |port: u16, with_cert: bool| {
        let resolve = format!("localhost:{port}:127.0.0.1");
        let url = format!("https://localhost:{port}/");
        let mut args = vec![
            "--cacert".to_owned(),
            ca.clone(),
            "--resolve".into(),
            resolve,
        ];
        if with_cert {
            args.extend([
                "--cert".into(),
                p(&pki.client.cert),
                "--key".into(),
                p(&pki.client.key),
            ]);
        }
        args.push(url);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        curl(&refs).0
    };
    assert_eq!(call(need, false), 0, "need: refused without a certificate");
    assert_eq!(call(need, true), 204);
    assert_eq!(call(want, false), 204, "want: let through without one");
    assert_eq!(call(want, true), 204);
    assert_eq!(call(none, false), 204, "no clientAuth: nothing asked");
    let dir2 = tempfile::tempdir().unwrap();
    let file = dir2.path().join("g.yaml");
    std::fs::write(&file, api(free_port(), "    clientAuth: maybe\n")).unwrap();
    let e = turnpike::start(vec![file]).err().unwrap().to_string();
    assert!(e.contains("`need`, `want`"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_passthrough_relays_connections_by_server_name() {
    // Membrane's tutorial ssl-tls/30-TLS-Passthrough: the gateway relays TLS unchanged, so
    // the client sees each backend's own certificate.
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let a = start_tls_backend(&pki.server.cert, &pki.server.key, false).await;
    let b = start_tls_backend(&pki.alt_host.cert, &pki.alt_host.key, false).await;
    let port = free_port();
    let yaml = format!(
        r#"gateway: {{ accessLog: false }}
---
sslProxy:
  host: localhost
  port: {port}
  ip: 127.0.0.1
  interceptors:
    - sslLog: {{}}
  target:
    host: 127.0.0.1
    port: {a}
---
sslProxy:
  host: "*.localhost other.test"
  port: {port}
  ip: 127.0.0.1
  useAsDefault: false
  target:
    host: localhost
    port: {b}
"#,
        a = a.port(),
        b = b.port()
    );
    let _gw = TestGateway::start(&yaml);
    let ca = p(&pki.ca);
    let fetch = |host: &str, path: &str| {
        let resolve = format!("{host}:{port}:127.0.0.1");
        let url = format!("https://{host}:{port}{path}");
        let (ca, resolve) = (ca.clone(), resolve.clone());
        tokio::task::spawn_blocking(move || curl(&["--cacert", &ca, "--resolve", &resolve, &url]))
    };
    let (code, _, _, err) = fetch("localhost", "/one").await.unwrap();
    assert_eq!(code, 200, "{err}");
    assert_eq!((a.count(), b.count()), (1, 0));
    assert_eq!(a.last().uri, "/one");
    // The backend's certificate for alt.localhost reaches the client untouched.
    let (code, _, _, err) = fetch("alt.localhost", "/two").await.unwrap();
    assert_eq!(code, 200, "{err}");
    assert_eq!((a.count(), b.count()), (1, 1));
    // No sslProxy takes this name: the handshake fails with an alert.
    let (code, _, _, err) = fetch("nobody.example", "/").await.unwrap();
    assert_eq!(code, 0, "{err}");
    // Without a server name (an IP address), the first default proxy takes it.
    let url = format!("https://127.0.0.1:{port}/three");
    let ca2 = ca.clone();
    let (code, _, _, err) = tokio::task::spawn_blocking(move || curl(&["--cacert", &ca2, &url]))
        .await
        .unwrap();
    assert_eq!(code, 200, "{err}");
    assert_eq!((a.count(), b.count()), (2, 1));
    // Not TLS at all: the connection is closed without reaching a backend.
    let r = try_send(
        std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        req("GET", "/")
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap(),
    )
    .await;
    assert!(r.is_err());
    assert_eq!((a.count(), b.count()), (2, 1));

    // A port with APIs cannot pass TLS through, and only `sslLog` runs on it.
    for (extra, want) in [
        (
            format!("api:\n  port: {port}\n  ip: 127.0.0.1\n  flow: [ {{ return: {{}} }} ]\n"),
            "cannot also serve APIs",
        ),
        (String::new(), "only `sslLog`"),
    ] {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("gateway.yaml");
        let proxy = if want == "only `sslLog`" {
            "sslProxy:\n  host: a.test\n  port: 1\n  interceptors: [ { log: {} } ]\n  target: { host: 127.0.0.1 }\n".to_owned()
        } else {
            format!("sslProxy:\n  host: a.test\n  port: {port}\n  ip: 127.0.0.1\n  target: {{ host: 127.0.0.1 }}\n")
        };
        std::fs::write(&file, format!("{extra}---\n{proxy}")).unwrap();
        match turnpike::start(vec![file]) {
            Ok(_) => panic!("loaded: {extra}{proxy}"),
            Err(e) => assert!(e.to_string().contains(want), "{e}"),
        }
    }
}
