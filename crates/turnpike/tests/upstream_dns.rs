//! A pool's host name is one node per address, looked up with the name servers of
//! `gateway.resolver`: a real name server on a loopback UDP port answers for `svc.test`, two
//! backends listen on 127.0.0.1 and 127.0.0.2 (same port); the pool balances over both, follows
//! the answers when they change (the control plane reloads), keeps its nodes when the name
//! server fails, and sends the name (not the address) as `Host`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the test name server answers for `svc.test`: addresses, or SERVFAIL when `None`.
type Answers = Arc<Mutex<Option<Vec<Ipv4Addr>>>>;

/// A name server on 127.0.0.1 answering A queries for `svc.test.` from `answers` (no AAAA).
fn name_server(answers: Answers) -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        loop {
            let Ok((n, from)) = socket.recv_from(&mut buf) else {
                return;
            };
            let Ok(query) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            let mut reply = Message::new();
            reply
                .set_id(query.id())
                .set_message_type(MessageType::Response)
                .set_op_code(query.op_code())
                .set_recursion_desired(query.recursion_desired())
                .set_recursion_available(true)
                .set_authoritative(true);
            for q in query.queries() {
                reply.add_query(q.clone());
                match answers.lock().unwrap().as_ref() {
                    None => {
                        reply.set_response_code(ResponseCode::ServFail);
                    }
                    Some(ips) => {
                        if q.query_type() == RecordType::A
                            && q.name().to_ascii().eq_ignore_ascii_case("svc.test.")
                        {
                            for ip in ips {
                                reply.add_answer(Record::from_rdata(
                                    q.name().clone(),
                                    1,
                                    RData::A(A(*ip)),
                                ));
                            }
                        }
                    }
                }
            }
            let _ = socket.send_to(&reply.to_vec().unwrap(), from);
        }
    });
    addr
}

/// An HTTP/1.1 backend on `addr` answering `<name> <Host header>` to every request.
async fn backend(addr: SocketAddr, name: &'static str) {
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).to_string();
                        buf.drain(..end + 4);
                        let host = head
                            .lines()
                            .find_map(|l| {
                                l.split_once(':')
                                    .filter(|(k, _)| k.eq_ignore_ascii_case("host"))
                                    .map(|(_, v)| v.trim().to_owned())
                            })
                            .unwrap_or_default();
                        let body = format!("{name} {host}");
                        let reply = format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if s.write_all(reply.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
}

/// Who answered `n` requests: (answers of "one", of "two"), checking the `Host` each saw.
async fn who(gw: SocketAddr, n: usize, host: &str) -> (usize, usize) {
    let (mut one, mut two) = (0, 0);
    for _ in 0..n {
        let r = get(gw, "/").await;
        assert_eq!(r.status, 200, "{}", r.text());
        let t = r.text();
        let (name, seen) = t.split_once(' ').unwrap();
        assert_eq!(seen, host, "the backend sees the name, not the address");
        match name {
            "one" => one += 1,
            "two" => two += 1,
            other => panic!("{other}"),
        }
    }
    (one, two)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_address_of_a_name_is_a_node_and_changes_are_followed() {
    let answers: Answers = Arc::new(Mutex::new(Some(vec![
        Ipv4Addr::new(127, 0, 0, 1),
        Ipv4Addr::new(127, 0, 0, 2),
    ])));
    let dns = name_server(Arc::clone(&answers));
    let port = free_port();
    backend(SocketAddr::from(([127, 0, 0, 1], port)), "one").await;
    backend(SocketAddr::from(([127, 0, 0, 2], port)), "two").await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gw.yaml");
    std::fs::write(
        &file,
        format!(
            "gateway:\n  threads: 1\n  accessLog: false\n  resolver: {{ nameservers: [\"{dns}\"], timeout: 500ms }}\n---\nupstream:\n  name: svc\n  nodes: [ {{ url: \"http://svc.test:{port}\" }} ]\n  dnsRefresh: 1s\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  target: {{ upstream: svc }}\n"
        ),
    )
    .unwrap();
    let control = turnpike::Control::start(vec![file]).unwrap();
    let gw = control.gateway().listeners()[0].1;
    let host = format!("svc.test:{port}");
    let snap = control.gateway().snapshot();
    let labels: Vec<String> = snap.upstreams[0]
        .nodes
        .iter()
        .map(|n| n.label.to_string())
        .collect();
    assert_eq!(
        labels,
        [format!("{host}@127.0.0.1"), format!("{host}@127.0.0.2")]
    );
    // Round robin over the two addresses.
    assert_eq!(who(gw, 20, &host).await, (10, 10));

    // The name loses an address: within a refresh or two, every request goes to the other.
    *answers.lock().unwrap() = Some(vec![Ipv4Addr::new(127, 0, 0, 2)]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while who(gw, 6, &host).await != (0, 6) {
        assert!(Instant::now() < deadline, "the new answer was not followed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(control.gateway().snapshot().upstreams[0].nodes.len(), 1);

    // The name server fails: the nodes of the last answer stay.
    *answers.lock().unwrap() = None;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(who(gw, 6, &host).await, (0, 6));

    // It answers both again: both serve again.
    *answers.lock().unwrap() = Some(vec![
        Ipv4Addr::new(127, 0, 0, 2),
        Ipv4Addr::new(127, 0, 0, 1),
    ]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (one, two) = who(gw, 10, &host).await;
        if one == 5 && two == 5 {
            break;
        }
        assert!(Instant::now() < deadline, "{one} / {two}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    control.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_target_url_is_looked_up_when_connecting_and_settings_are_checked() {
    let answers: Answers = Arc::new(Mutex::new(Some(vec![Ipv4Addr::new(127, 0, 0, 2)])));
    let dns = name_server(answers);
    let port = free_port();
    backend(SocketAddr::from(([127, 0, 0, 2], port)), "two").await;
    let gw = TestGateway::start(&format!(
        "gateway:\n  accessLog: false\n  resolver: {{ nameservers: [\"{dns}\"] }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  target: {{ url: \"http://svc.test:{port}\" }}\n"
    ));
    assert_eq!(
        who(gw.addr(), 3, &format!("svc.test:{port}")).await,
        (0, 3),
        "the target's name is looked up with the configured name server"
    );
    let dir = tempfile::tempdir().unwrap();
    for (resolver, says) in [
        ("{ nameservers: [\"nope\"] }", "`nope` is not an IP address"),
        ("{ nameservers: [] }", "needs at least one name server"),
        (
            "{ nameservers: [\"127.0.0.1\"], timeout: 0s }",
            "longer than zero",
        ),
    ] {
        let f = dir.path().join("bad.yaml");
        std::fs::write(
            &f,
            format!("gateway:\n  resolver: {resolver}\n---\napi:\n  port: 1\n  target: {{ url: \"http://a.test\" }}\n"),
        )
        .unwrap();
        let err = turnpike::load_and_compile(&[f])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains(says), "{resolver}: {err}");
        assert!(err.contains("bad.yaml:"), "{err}");
    }
}
