//! The TLS stream against OpenSSL's command-line peers (`openssl s_server`, `openssl
//! s_client`): another implementation's records, session tickets, key updates and
//! renegotiation requests.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Seek, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{
    ClientConfig, HandshakeKind, ProtocolVersion, ServerConfig, SupportedProtocolVersion,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

struct Pki {
    dir: tempfile::TempDir,
    cert: CertificateDer<'static>,
    key: Vec<u8>,
}

impl Pki {
    fn new() -> Self {
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cert.pem"), ck.cert.pem()).unwrap();
        std::fs::write(dir.path().join("key.pem"), ck.signing_key.serialize_pem()).unwrap();
        Pki {
            dir,
            cert: ck.cert.der().clone(),
            key: ck.signing_key.serialize_der(),
        }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_str().unwrap().to_string()
    }

    fn client(&self, version: &'static SupportedProtocolVersion) -> Arc<ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.cert.clone()).unwrap();
        let mut cfg = ClientConfig::builder_with_provider(Arc::new(turnpike_tls::provider()))
            .with_protocol_versions(&[version])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        cfg.enable_secret_extraction = true;
        Arc::new(cfg)
    }

    fn server(&self, version: &'static SupportedProtocolVersion) -> Arc<ServerConfig> {
        let mut cfg = ServerConfig::builder_with_provider(Arc::new(turnpike_tls::provider()))
            .with_protocol_versions(&[version])
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![self.cert.clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key.clone())),
            )
            .unwrap();
        cfg.enable_secret_extraction = true;
        Arc::new(cfg)
    }
}

/// Kills the OpenSSL process when the test ends, however it ends.
struct Peer(Child);

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn connect_when_up(port: u16) -> TcpStream {
    for _ in 0..200 {
        if let Ok(s) = TcpStream::connect(("127.0.0.1", port)).await {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("openssl s_server did not start on port {port}");
}

fn localhost() -> ServerName<'static> {
    ServerName::try_from("localhost").unwrap()
}

#[tokio::test]
async fn our_client_reads_openssl_servers_records_and_resumes_with_its_tickets() {
    let pki = Pki::new();
    for (version, flag, name) in [
        (&rustls::version::TLS13, "-tls1_3", "TLSv1.3"),
        (&rustls::version::TLS12, "-tls1_2", "TLSv1.2"),
    ] {
        let port = free_port();
        let _server = Peer(
            Command::new("openssl")
                .args(["s_server", "-www", flag, "-accept", &port.to_string()])
                .args(["-cert", &pki.path("cert.pem"), "-key", &pki.path("key.pem")])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("openssl CLI"),
        );
        let config = pki.client(version);
        for expected in [HandshakeKind::Full, HandshakeKind::Resumed] {
            let tcp = connect_when_up(port).await;
            let mut tls = turnpike_tls::connect(config.clone(), localhost(), tcp)
                .await
                .unwrap();
            assert_eq!(tls.session().handshake_kind(), Some(expected), "{name}");
            // Pieces of a request, the last one with a large body that spans records.
            tls.write_all(b"GET / HTTP/1.0\r\n").await.unwrap();
            tls.write_all(format!("X-Pad: {}\r\n\r\n", "p".repeat(40_000)).as_bytes())
                .await
                .unwrap();
            tls.flush().await.unwrap();
            let mut page = Vec::new();
            match tls.read_to_end(&mut page).await {
                Ok(_) => {}
                // s_server may end without close_notify after its page.
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
                Err(e) => panic!("{name}: {e}"),
            }
            let page = String::from_utf8_lossy(&page);
            assert!(page.starts_with("HTTP/1.0 200 ok"), "{name}: {page}");
            assert!(
                page.contains(&format!("Protocol  : {name}")),
                "{name}: {page}"
            );
            let reused = if expected == HandshakeKind::Resumed {
                "Reused"
            } else {
                "New"
            };
            assert!(
                page.contains(&format!("{reused}, {name}")),
                "{name}: {page}"
            );
        }
    }
}

/// Runs `openssl s_client` against our echo server on `port`, typing `lines` one at a time,
/// and returns what it printed (on stdout, then on stderr).
fn s_client(port: u16, flag: &str, lines: &[&str]) -> String {
    let mut stderr = tempfile::tempfile().unwrap();
    let mut child = Peer(
        Command::new("openssl")
            .args(["s_client", "-connect", &format!("127.0.0.1:{port}"), flag])
            .args(["-servername", "localhost", "-no_ign_eof"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr.try_clone().unwrap())
            .spawn()
            .expect("openssl CLI"),
    );
    let mut stdin = child.0.stdin.take().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    for line in lines {
        // s_client may have given up already (after a refused renegotiation).
        if stdin.write_all(line.as_bytes()).is_err() || stdin.flush().is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    drop(stdin);
    // A peer that waits on a refused renegotiation is given up after a while.
    let pid = child.0.id();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(5));
        let _ = Command::new("kill")
            .arg(pid.to_string())
            .stderr(Stdio::null())
            .status();
    });
    let mut out = String::new();
    child
        .0
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let _ = child.0.wait();
    stderr.seek(std::io::SeekFrom::Start(0)).unwrap();
    stderr.read_to_string(&mut out).unwrap();
    out
}

/// Accepts one connection and echoes it until it ends; returns how it ended.
async fn echo_one(
    listener: TcpListener,
    config: Arc<ServerConfig>,
) -> Result<ProtocolVersion, String> {
    let (tcp, _) = listener.accept().await.unwrap();
    let mut tls = turnpike_tls::accept(config, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let version = tls.get_ref().1.protocol_version().unwrap();
    let mut buf = [0u8; 4096];
    loop {
        let n = tls.read(&mut buf).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Ok(version);
        }
        tls.write_all(&buf[..n]).await.map_err(|e| e.to_string())?;
        tls.flush().await.map_err(|e| e.to_string())?;
    }
}

#[tokio::test]
async fn openssl_client_key_updates_are_followed_and_renegotiation_is_refused() {
    let pki = Pki::new();

    // TLS 1.3: a key update that asks us to update ours too, then more data both ways.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(echo_one(listener, pki.server(&rustls::version::TLS13)));
    let out = tokio::task::spawn_blocking(move || {
        s_client(
            port,
            "-tls1_3",
            &["before-update\n", "K\n", "after-update\n"],
        )
    })
    .await
    .unwrap();
    let ended = server.await.unwrap();
    let at = |what: &str| out.find(what).unwrap_or_else(|| panic!("no {what}: {out}"));
    // s_client prints the echoes on stdout and KEYUPDATE on stderr; what was typed after
    // the update came back: both sides switched keys.
    at("before-update");
    at("after-update");
    at("KEYUPDATE");
    assert_eq!(ended, Ok(ProtocolVersion::TLSv1_3));

    // TLS 1.2: a renegotiation request is refused (rustls answers `no_renegotiation`): the
    // handshake OpenSSL asked for never happens, and no data flows after it.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(echo_one(listener, pki.server(&rustls::version::TLS12)));
    let out = tokio::task::spawn_blocking(move || {
        s_client(
            port,
            "-tls1_2",
            &["before-update\n", "R\n", "after-update\n"],
        )
    })
    .await
    .unwrap();
    assert!(out.contains("RENEGOTIATING"), "{out}");
    assert!(out.contains("before-update"), "{out}");
    assert!(
        !out.contains("after-update"),
        "data flowed after a refused renegotiation: {out}"
    );
    let ended = tokio::time::timeout(Duration::from_secs(10), server).await;
    assert!(
        ended.is_ok(),
        "the server side did not end when the peer went away"
    );
}
