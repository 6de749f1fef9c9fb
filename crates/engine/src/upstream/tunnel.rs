//! Backend connections through an outbound HTTP proxy (`gateway.outboundProxy`): each is a
//! `CONNECT` tunnel (RFC 9110 §9.3.6) to the backend, on which the connection then goes on as
//! if it were direct (TLS, HTTP/1.1 or HTTP/2). The proxy's answer is parsed with httparse.

use std::io;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use turnpike_snapshot::OutboundProxy;

/// Largest answer head accepted from the proxy.
const MAX_HEAD: usize = 16 * 1024;

/// A connection to `host:port` through `proxy`: connected to the proxy (each address of its name
/// in turn) and tunnelled with `CONNECT`. The error says what failed, for the log.
pub(super) async fn open(
    proxy: &OutboundProxy,
    dns: &turnpike_dns::Dns,
    host: &str,
    port: u16,
) -> io::Result<TcpStream> {
    let addrs = dns
        .lookup(&proxy.host, proxy.port)
        .await
        .map_err(|e| io::Error::other(format!("outbound proxy {}: {e}", proxy.host)))?;
    let mut stream = super::resolve::connect(&addrs).await.map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("outbound proxy {}:{}: {e}", proxy.host, proxy.port),
        )
    })?;
    let target = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let mut head = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n").into_bytes();
    if let Some(a) = &proxy.authorization {
        head.extend_from_slice(b"Proxy-Authorization: ");
        head.extend_from_slice(a.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    stream.write_all(&head).await?;
    // Read the answer's head, and nothing after it (the tunnel's first bytes are the backend's).
    let mut answer = Vec::with_capacity(256);
    let mut byte = [0u8; 1];
    while !answer.ends_with(b"\r\n\r\n") {
        if answer.len() >= MAX_HEAD {
            return Err(io::Error::other("outbound proxy: answer head too large"));
        }
        if stream.read(&mut byte).await? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "outbound proxy closed the connection before answering CONNECT",
            ));
        }
        answer.push(byte[0]);
    }
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut res = httparse::Response::new(&mut headers);
    match res.parse(&answer) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => {
            return Err(io::Error::other(
                "outbound proxy: not an HTTP answer to CONNECT",
            ))
        }
    }
    match res.code {
        Some(c) if (200..300).contains(&c) => Ok(stream),
        Some(407) => Err(io::Error::other(
            "outbound proxy: 407 proxy authentication required (check outboundProxy.authentication)",
        )),
        Some(c) => Err(io::Error::other(format!(
            "outbound proxy refused CONNECT {target}: {c}"
        ))),
        None => Err(io::Error::other("outbound proxy: no status in its answer")),
    }
}
