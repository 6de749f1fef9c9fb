//! TLS passthrough (`sslProxy:`): reads a connection's ClientHello (parsed by rustls, never by
//! hand), picks the proxy of the port whose server-name patterns match its SNI (or the first
//! default one when it sends none), connects to that proxy's backend, replays the bytes read
//! and relays both directions until either side closes. The gateway never decrypts anything;
//! the client sees the backend's certificate.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use turnpike_snapshot::Passthrough;

/// Largest ClientHello read before giving up: TLS records are at most 16 KiB plus header,
/// and a ClientHello may span a few of them (post-quantum key shares).
const MAX_HELLO: usize = 64 * 1024;

/// TLS alert `unrecognized_name`, fatal (sent when no proxy takes the server name).
const UNRECOGNIZED_NAME: [u8; 7] = [21, 3, 1, 0, 2, 2, 112];

/// Reads the ClientHello: the bytes read, and the server name (lower case) if it sent one.
/// `None` when the client closes, stalls past `timeout`, or sends something that is not TLS.
async fn client_hello(
    stream: &mut TcpStream,
    timeout: Duration,
) -> Option<(Vec<u8>, Option<String>)> {
    let mut acceptor = rustls::server::Acceptor::default();
    let mut seen = Vec::with_capacity(1024);
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let n = match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return None,
            Ok(Ok(n)) => n,
        };
        seen.extend_from_slice(&buf[..n]);
        let mut chunk = &buf[..n];
        while !chunk.is_empty() {
            if acceptor.read_tls(&mut chunk).is_err() {
                return None;
            }
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                let name = accepted
                    .client_hello()
                    .server_name()
                    .map(str::to_ascii_lowercase);
                return Some((seen, name));
            }
            Ok(None) if seen.len() < MAX_HELLO => {}
            Ok(None) => return None,
            Err((e, _)) => {
                tracing::debug!("TLS passthrough: not a ClientHello: {e}");
                return None;
            }
        }
    }
}

/// The proxy for `name`: the first whose patterns match, or without a name the first that is
/// a default.
fn pick<'p>(proxies: &'p [Passthrough], name: Option<&str>) -> Option<&'p Passthrough> {
    match name {
        Some(n) => proxies.iter().find(|p| p.matches(n)),
        None => proxies.iter().find(|p| p.use_as_default),
    }
}

/// Relays the TLS connection `client` from `peer` to the backend its server name selects.
pub async fn relay(
    mut client: TcpStream,
    peer: SocketAddr,
    proxies: Arc<[Passthrough]>,
    dns: &turnpike_dns::Dns,
    hello_timeout: Duration,
    connect_timeout: Duration,
) {
    let start = Instant::now();
    let Some((hello, name)) = client_hello(&mut client, hello_timeout).await else {
        tracing::debug!(%peer, "TLS passthrough: no ClientHello");
        return;
    };
    let Some(proxy) = pick(&proxies, name.as_deref()) else {
        tracing::info!(%peer, server_name = name.as_deref().unwrap_or("-"), "TLS passthrough: no sslProxy takes this server name");
        let _ = client.write_all(&UNRECOGNIZED_NAME).await;
        return;
    };
    let host = proxy.target_host.as_str();
    let port = proxy.target_port;
    let mut upstream = match crate::forward_proxy::connect_any(dns, host, port, connect_timeout)
        .await
    {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(%peer, proxy = %proxy.name, "TLS passthrough: cannot connect to {host}:{port}: {e}");
            return;
        }
    };
    if upstream.write_all(&hello).await.is_err() {
        return;
    }
    let result = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    if proxy.log {
        let (up, down) = result
            .as_ref()
            .map_or((0, 0), |&(u, d)| (u + hello.len() as u64, d));
        tracing::info!(
            target: "turnpike::ssl_log",
            client = %peer,
            server_name = name.as_deref().unwrap_or("-"),
            proxy = %proxy.name,
            backend = %format!("{host}:{port}"),
            bytes_up = up,
            bytes_down = down,
            duration_ms = start.elapsed().as_millis() as u64,
            "TLS connection relayed"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxy(hosts: &[&str], default: bool) -> Passthrough {
        Passthrough {
            name: hosts.join(" "),
            hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
            use_as_default: default,
            target_host: "127.0.0.1".into(),
            target_port: 1,
            log: false,
        }
    }

    #[test]
    fn server_names_pick_the_first_matching_proxy() {
        let ps = [
            proxy(&["a.test"], false),
            proxy(&["*.test"], true),
            proxy(&["b.test"], true),
        ];
        assert_eq!(pick(&ps, Some("a.test")).unwrap().name, "a.test");
        assert_eq!(pick(&ps, Some("b.test")).unwrap().name, "*.test");
        assert!(pick(&ps, Some("c.example")).is_none());
        assert_eq!(pick(&ps, None).unwrap().name, "*.test");
        assert!(pick(&ps[..1], None).is_none());
    }
}
