//! A worker's connections to the executors: one Unix socket per executor and worker thread,
//! opened on first use, with many calls in flight matched by id.
//!
//! Frame (both ways): `[u32 length][u64 id][u32 JSON length][JSON][body]`, big-endian, the
//! length counting every byte after itself.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use super::executors::{Executor, Pool};

/// The largest frame an executor may send (a reply carrying a body).
const MAX_FRAME: usize = 64 << 20;

/// A frame from an executor: its JSON and its body.
#[derive(Debug)]
pub(crate) struct Frame {
    pub(crate) json: Bytes,
    pub(crate) body: Bytes,
}

/// Why a call got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallError {
    /// The executor went away with the call in flight.
    Lost,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CallError::Lost => "the Python executor went away with the request in flight",
        })
    }
}

struct Conn {
    generation: u64,
    /// Taken when the connection fails, which ends its writer task.
    tx: RefCell<Option<mpsc::UnboundedSender<Bytes>>>,
    pending: RefCell<HashMap<u64, oneshot::Sender<Frame>>>,
    next_id: Cell<u64>,
    dead: Cell<bool>,
}

impl Conn {
    fn fail_all(&self) {
        self.dead.set(true);
        self.tx.borrow_mut().take();
        self.pending.borrow_mut().clear();
    }
}

thread_local! {
    static CONNS: RefCell<HashMap<(u64, usize), Rc<Conn>>> = RefCell::new(HashMap::new());
    static NEXT: Cell<usize> = const { Cell::new(0) };
}

/// Encodes a frame.
pub(crate) fn encode(id: u64, json: &[u8], body: &[u8]) -> Bytes {
    let len = 8 + 4 + json.len() + body.len();
    let mut b = BytesMut::with_capacity(4 + len);
    b.put_u32(len as u32);
    b.put_u64(id);
    b.put_u32(json.len() as u32);
    b.put_slice(json);
    b.put_slice(body);
    b.freeze()
}

/// Decodes the frame after its length field: id and frame.
pub(crate) fn decode(mut frame: Bytes) -> Option<(u64, Frame)> {
    if frame.len() < 12 {
        return None;
    }
    let id = frame.get_u64();
    let json_len = frame.get_u32() as usize;
    if json_len > frame.len() {
        return None;
    }
    let json = frame.split_to(json_len);
    Some((id, Frame { json, body: frame }))
}

/// Removes a call from the pending ones when it is dropped (answered, timed out, or the client
/// went away).
struct PendingGuard {
    conn: Rc<Conn>,
    id: u64,
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        self.conn.pending.borrow_mut().remove(&self.id);
    }
}

/// How long a call waits before it looks again for an executor to take it (while one is being
/// started again).
const RETRY: std::time::Duration = std::time::Duration::from_millis(5);

/// Which executor holds a call that has been sent and not answered yet: what the watchdog
/// needs when the call outlives its timeout ([`InFlight::condemn`]).
#[derive(Default)]
pub(crate) struct InFlight(RefCell<Option<(Arc<Executor>, u64)>>);

impl InFlight {
    /// Called when the call's timeout fired with the call still unanswered: the executor that
    /// holds it (the process of that generation) is killed and started again by its
    /// supervisor, so that a policy stuck in a loop or a blocking call stops holding every
    /// request sent to it. Returns true when a call was in flight.
    pub(crate) fn condemn(&self) -> bool {
        match self.0.borrow_mut().take() {
            Some((executor, generation)) => {
                executor.condemn(generation);
                true
            }
            None => false,
        }
    }
}

/// Sends one call (JSON and body) to an executor of `pool` and waits for its answer. While no
/// executor can take the call (all are being started again, or a connection cannot be opened)
/// it waits: the caller's timeout bounds it. Once sent, a call whose executor goes away fails.
/// `in_flight` holds the executor while the call waits for its answer.
pub(crate) async fn call(
    pool: &Arc<Pool>,
    json: &[u8],
    body: &[u8],
    in_flight: &InFlight,
) -> Result<Frame, CallError> {
    let frame = encode_later(json, body);
    loop {
        let Some((index, executor)) = pick(pool) else {
            tokio::time::sleep(RETRY).await;
            continue;
        };
        let Ok(conn) = connection(pool.id, index, executor).await else {
            tokio::time::sleep(RETRY).await;
            continue;
        };
        let id = conn.next_id.get();
        conn.next_id.set(id.wrapping_add(1));
        let (tx, rx) = oneshot::channel();
        conn.pending.borrow_mut().insert(id, tx);
        let _guard = PendingGuard {
            conn: conn.clone(),
            id,
        };
        let sent = conn
            .tx
            .borrow()
            .as_ref()
            .is_some_and(|tx| tx.send(frame(id)).is_ok());
        if !sent {
            // Never left: another connection may take it.
            continue;
        }
        *in_flight.0.borrow_mut() = Some((executor.clone(), conn.generation));
        let answer = rx.await.map_err(|_| CallError::Lost);
        in_flight.0.borrow_mut().take();
        return answer;
    }
}

/// A frame builder for an id known later.
fn encode_later<'a>(json: &'a [u8], body: &'a [u8]) -> impl Fn(u64) -> Bytes + 'a {
    move |id| encode(id, json, body)
}

/// The next running executor, round robin per worker.
fn pick(pool: &Pool) -> Option<(usize, &Arc<Executor>)> {
    let n = pool.executors.len();
    let start = NEXT.with(|c| {
        let v = c.get();
        c.set(v.wrapping_add(1));
        v
    });
    (0..n).map(|k| (start.wrapping_add(k)) % n).find_map(|i| {
        let e = pool.executors.get(i)?;
        e.ready.load(Ordering::Acquire).then_some((i, e))
    })
}

async fn connection(pool: u64, index: usize, ex: &Executor) -> Result<Rc<Conn>, CallError> {
    let generation = ex.generation.load(Ordering::Acquire);
    let existing = CONNS.with(|c| c.borrow().get(&(pool, index)).cloned());
    if let Some(c) = existing {
        if !c.dead.get() && c.generation == generation {
            return Ok(c);
        }
        c.fail_all();
    }
    let stream = tokio::net::UnixStream::connect(&ex.socket)
        .await
        .map_err(|_| CallError::Lost)?;
    let (mut read, mut write) = stream.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Bytes>();
    let conn = Rc::new(Conn {
        generation,
        tx: RefCell::new(Some(tx)),
        pending: RefCell::new(HashMap::new()),
        next_id: Cell::new(1),
        dead: Cell::new(false),
    });
    CONNS.with(|c| c.borrow_mut().insert((pool, index), conn.clone()));
    let writer = Rc::downgrade(&conn);
    tokio::task::spawn_local(async move {
        let mut buf = BytesMut::new();
        while let Some(first) = rx.recv().await {
            buf.extend_from_slice(&first);
            // Every frame queued meanwhile goes out in the same write.
            while let Ok(more) = rx.try_recv() {
                buf.extend_from_slice(&more);
            }
            if write.write_all(&buf).await.is_err() {
                break;
            }
            buf.clear();
        }
        if let Some(c) = writer.upgrade() {
            c.fail_all();
        }
    });
    let reader = conn.clone();
    tokio::task::spawn_local(async move {
        let mut buf = BytesMut::with_capacity(16 * 1024);
        'read: loop {
            // Every complete frame in the buffer.
            while buf.len() >= 4 {
                let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
                if len > MAX_FRAME {
                    break 'read;
                }
                if buf.len() < 4 + len {
                    buf.reserve(4 + len - buf.len());
                    break;
                }
                buf.advance(4);
                let frame = buf.split_to(len).freeze();
                let Some((id, frame)) = decode(frame) else {
                    break 'read;
                };
                let waiter = reader.pending.borrow_mut().remove(&id);
                if let Some(w) = waiter {
                    let _ = w.send(frame);
                }
            }
            match read.read_buf(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if reader.dead.get() {
                break;
            }
        }
        reader.fail_all();
        CONNS.with(|c| {
            let mut c = c.borrow_mut();
            if c.get(&(pool, index))
                .is_some_and(|x| Rc::ptr_eq(x, &reader))
            {
                c.remove(&(pool, index));
            }
        });
    });
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let f = encode(7, br#"{"a":1}"#, b"body");
        assert_eq!(
            u32::from_be_bytes([f[0], f[1], f[2], f[3]]) as usize,
            f.len() - 4
        );
        let (id, frame) = decode(f.slice(4..)).unwrap();
        assert_eq!(id, 7);
        assert_eq!(&frame.json[..], br#"{"a":1}"#);
        assert_eq!(&frame.body[..], b"body");
        // A JSON length past the end is refused.
        let mut bad = BytesMut::new();
        bad.put_u64(1);
        bad.put_u32(100);
        assert!(decode(bad.freeze()).is_none());
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    proptest! {
        /// Frames from an executor are checked, never trusted: any bytes decode or are refused.
        #[test]
        fn any_frame_decodes_or_is_refused(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Some((_, f)) = super::decode(bytes::Bytes::from(bytes.clone())) {
                prop_assert_eq!(12 + f.json.len() + f.body.len(), bytes.len());
            }
        }

        #[test]
        fn frames_round_trip(id in any::<u64>(), json in "\\PC{0,40}", body in proptest::collection::vec(any::<u8>(), 0..40)) {
            let f = super::encode(id, json.as_bytes(), &body);
            let (got, frame) = super::decode(f.slice(4..)).unwrap();
            prop_assert_eq!(got, id);
            prop_assert_eq!(&frame.json[..], json.as_bytes());
            prop_assert_eq!(&frame.body[..], &body[..]);
        }
    }
}
