//! Writes to cleartext TCP sockets: one `send(2)` per write wherever that is cheaper than
//! `writev(2)`.
//!
//! A proxied request is written twice: the request head to the backend, and the response (head
//! and body, two buffers) to the client. tokio sends vectored writes with `writev(2)`, which
//! takes the file-system write path (`vfs_writev`, `rw_verify_area`, the iovec import and
//! `sock_write_iter`). `send(2)` goes straight to the socket: on these machines a 1.2 KB write
//! costs about 150 ns less that way, while copying 1.2 KB costs about 30 ns. So a write of a
//! single buffer is sent as it is, a write of several buffers of at most [`COALESCE_MAX`] bytes
//! in all is copied into one worker-local buffer and sent, and only larger writes use `writev`.
//! TLS streams need none of this: they seal records into one buffer and send that.

use std::cell::RefCell;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// The largest write that is copied into one buffer instead of going out with `writev`.
pub const COALESCE_MAX: usize = 4096;

thread_local! {
    /// The buffer small vectored writes are gathered in. It holds bytes only within one call.
    static GATHER: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(COALESCE_MAX));
}

/// How one vectored write goes to the socket.
#[derive(Debug, PartialEq, Eq)]
enum Plan<'a> {
    /// Nothing to write.
    Nothing,
    /// One non-empty buffer: `send` it as it is.
    Send(&'a [u8]),
    /// Several buffers, at most [`COALESCE_MAX`] bytes in all: copy them together, then `send`.
    Gather,
    /// Larger: `writev`, uncopied.
    Writev,
}

fn plan<'a>(bufs: &'a [IoSlice<'_>]) -> Plan<'a> {
    let mut filled = bufs.iter().filter(|b| !b.is_empty());
    let Some(first) = filled.next() else {
        return Plan::Nothing;
    };
    if filled.next().is_none() {
        return Plan::Send(first);
    }
    if bufs.iter().map(|b| b.len()).sum::<usize>() > COALESCE_MAX {
        Plan::Writev
    } else {
        Plan::Gather
    }
}

/// Writes `bufs` to `stream` with one system call: `send` for one buffer, or for several small
/// ones copied together; `writev` otherwise. Runs for every write to a cleartext socket; returns
/// what `poll_write_vectored` would (bytes taken from the front of `bufs`, in order).
pub fn poll_write_gathered(
    stream: Pin<&mut TcpStream>,
    cx: &mut Context<'_>,
    bufs: &[IoSlice<'_>],
) -> Poll<io::Result<usize>> {
    match plan(bufs) {
        Plan::Nothing => Poll::Ready(Ok(0)),
        Plan::Send(one) => stream.poll_write(cx, one),
        Plan::Writev => stream.poll_write_vectored(cx, bufs),
        Plan::Gather => GATHER.with(|gather| match gather.try_borrow_mut() {
            Ok(mut gather) => {
                gather.clear();
                for b in bufs {
                    gather.extend_from_slice(b);
                }
                stream.poll_write(cx, &gather)
            }
            // Not reentrant in practice (the write does not call back); be correct regardless.
            Err(_) => stream.poll_write_vectored(cx, bufs),
        }),
    }
}

/// A client's cleartext TCP connection as hyper's server sees it: reads as they are, writes
/// through [`poll_write_gathered`]. It reports vectored writes, so hyper queues a response's head
/// and body buffers without flattening them itself (large bodies then go out with `writev`,
/// uncopied).
#[derive(Debug)]
pub struct PlainStream(pub TcpStream);

impl AsyncRead for PlainStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for PlainStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        poll_write_gathered(Pin::new(&mut self.get_mut().0), cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use tokio::io::AsyncReadExt;

    async fn pair() -> (TcpStream, TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (b, _) = l.accept().await.unwrap();
        (a, b)
    }

    /// Writes everything in `parts` with `poll_write_gathered`, as a caller of
    /// `poll_write_vectored` does: advancing over what each call took.
    async fn write_all(s: &mut TcpStream, parts: &[Vec<u8>]) {
        let mut owned: Vec<Vec<u8>> = parts.to_vec();
        loop {
            let slices: Vec<IoSlice<'_>> = owned.iter().map(|p| IoSlice::new(p)).collect();
            if slices.iter().all(|s| s.is_empty()) {
                return;
            }
            let mut n = poll_fn(|cx| poll_write_gathered(Pin::new(s), cx, &slices))
                .await
                .unwrap();
            assert!(n > 0);
            for p in owned.iter_mut() {
                let k = n.min(p.len());
                p.drain(..k);
                n -= k;
            }
        }
    }

    #[test]
    fn small_writes_are_sent_whole_and_only_large_ones_use_writev() {
        let s = |b: &'static [u8]| IoSlice::new(b);
        let head = [b'h'; 150];
        let body = [b'b'; 1024];
        let big = vec![b'x'; COALESCE_MAX];
        assert_eq!(plan(&[]), Plan::Nothing);
        assert_eq!(plan(&[s(b""), s(b"")]), Plan::Nothing);
        assert_eq!(plan(&[s(b""), s(b"one"), s(b"")]), Plan::Send(b"one"));
        // A response's head and body: one `send` of both.
        assert_eq!(
            plan(&[IoSlice::new(&head), IoSlice::new(&body)]),
            Plan::Gather
        );
        assert_eq!(
            plan(&[IoSlice::new(&big[..COALESCE_MAX - 1]), s(b"x")]),
            Plan::Gather
        );
        assert_eq!(plan(&[IoSlice::new(&big), s(b"x")]), Plan::Writev);
        // A single large buffer needs no copy and no `writev`.
        assert_eq!(plan(&[IoSlice::new(&big)]), Plan::Send(&big[..]));
    }

    #[test]
    fn every_shape_of_write_arrives_whole_and_in_order() {
        crate::test_support::local(async {
            let (mut a, mut b) = pair().await;
            // Empty, single, small gathered, exactly the limit, and larger than the limit
            // (several times the socket buffer, so that writes are partial).
            let shapes: Vec<Vec<Vec<u8>>> = vec![
                vec![vec![], vec![]],
                vec![b"one buffer".to_vec()],
                vec![vec![], b"head\r\n".to_vec(), vec![], b"body".to_vec()],
                vec![vec![1u8; 1000], vec![2u8; COALESCE_MAX - 1000]],
                vec![vec![3u8; 150], vec![4u8; 5000], vec![5u8; 3]],
                vec![vec![6u8; 10], vec![7u8; 3 << 20]],
            ];
            let expected: Vec<u8> = shapes.iter().flatten().flatten().copied().collect();
            let reader = tokio::task::spawn_local(async move {
                let mut got = Vec::new();
                b.read_to_end(&mut got).await.unwrap();
                got
            });
            for shape in &shapes {
                write_all(&mut a, shape).await;
            }
            drop(a);
            assert!(reader.await.unwrap() == expected);
        });
    }

    #[test]
    fn plain_stream_reports_vectored_writes_and_reads_through() {
        crate::test_support::local(async {
            let (a, mut b) = pair().await;
            let mut s = PlainStream(a);
            assert!(s.is_write_vectored());
            let n = poll_fn(|cx| {
                Pin::new(&mut s).poll_write_vectored(
                    cx,
                    &[
                        IoSlice::new(b"HTTP/1.1 200 OK\r\n\r\n"),
                        IoSlice::new(b"hi"),
                    ],
                )
            })
            .await
            .unwrap();
            assert_eq!(n, 21);
            let mut got = [0u8; 21];
            b.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"HTTP/1.1 200 OK\r\n\r\nhi");
            tokio::io::AsyncWriteExt::write_all(&mut b, b"ping")
                .await
                .unwrap();
            let mut back = [0u8; 4];
            s.read_exact(&mut back).await.unwrap();
            assert_eq!(&back, b"ping");
        });
    }
}
