//! A worker's shutdown signal for its connections.
//!
//! Every connection task waits for its connection to end or for the worker to start shutting
//! down. Polling a `watch` receiver beside every connection took a lock on every poll (twice per
//! proxied request); here a connection leaves its waker in a slot once (re-storing it only if the
//! task's waker changes) and checks a flag, and [`Shutdown::trigger`] wakes them all.

use std::cell::{Cell, RefCell};
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Poll, Waker};

/// One worker's shutdown flag and the wakers of the connections waiting on it.
#[derive(Debug, Default)]
pub struct Shutdown {
    down: Cell<bool>,
    waiters: RefCell<Vec<Option<Waker>>>,
    free: RefCell<Vec<usize>>,
}

impl Shutdown {
    /// Starts the shutdown: wakes every connection waiting in [`until_done`]. Idempotent.
    pub fn trigger(&self) {
        self.down.set(true);
        let wakers: Vec<Waker> = self
            .waiters
            .borrow_mut()
            .iter_mut()
            .filter_map(Option::take)
            .collect();
        for w in wakers {
            w.wake();
        }
    }

    /// True once [`Shutdown::trigger`] was called.
    pub fn is_down(&self) -> bool {
        self.down.get()
    }

    fn register(&self, waker: &Waker) -> usize {
        let mut waiters = self.waiters.borrow_mut();
        match self.free.borrow_mut().pop() {
            Some(i) => {
                waiters[i] = Some(waker.clone());
                i
            }
            None => {
                waiters.push(Some(waker.clone()));
                waiters.len() - 1
            }
        }
    }

    fn update(&self, slot: usize, waker: &Waker) {
        let mut waiters = self.waiters.borrow_mut();
        match &waiters[slot] {
            Some(w) if w.will_wake(waker) => {}
            _ => waiters[slot] = Some(waker.clone()),
        }
    }

    fn release(&self, slot: usize) {
        self.waiters.borrow_mut()[slot] = None;
        self.free.borrow_mut().push(slot);
    }
}

/// A connection's slot, given back when the connection's wait ends or is dropped.
struct Waiting<'a> {
    shutdown: &'a Shutdown,
    slot: Option<usize>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(i) = self.slot.take() {
            self.shutdown.release(i);
        }
    }
}

/// Drives `conn` to its end and returns its output. When the worker starts shutting down (or
/// already has), calls `graceful` once (hyper's graceful shutdown: finish in-flight requests,
/// then close) and keeps driving it. With `linger`, `graceful` waits that long first: an
/// HTTP/1.1 connection in use meanwhile gets its next response with `Connection: close` and
/// ends by itself, so that a client sending a request on it as the gateway closes it does not
/// lose that request.
pub async fn until_done<C, R>(
    mut conn: Pin<&mut C>,
    shutdown: &Shutdown,
    linger: Option<std::time::Duration>,
    graceful: impl Fn(Pin<&mut C>),
) -> R
where
    C: Future<Output = R>,
{
    let mut waiting = Waiting {
        shutdown,
        slot: None,
    };
    let mut asked = false;
    let mut timer: Option<Pin<Box<tokio::time::Sleep>>> = None;
    poll_fn(|cx| {
        if !asked && shutdown.is_down() {
            match linger {
                None => {
                    asked = true;
                    graceful(conn.as_mut());
                }
                Some(d) => {
                    let t = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(d)));
                    if t.as_mut().poll(cx).is_ready() {
                        asked = true;
                        graceful(conn.as_mut());
                    }
                }
            }
        }
        if let Poll::Ready(r) = conn.as_mut().poll(cx) {
            return Poll::Ready(r);
        }
        if !asked && timer.is_none() {
            match waiting.slot {
                Some(i) => shutdown.update(i, cx.waker()),
                None => waiting.slot = Some(shutdown.register(cx.waker())),
            }
        }
        Poll::Pending
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::local;
    use std::rc::Rc;
    use std::time::Duration;

    /// A connection that ends only after being asked to shut down.
    struct Conn {
        asked: Rc<Cell<bool>>,
    }

    impl Future for Conn {
        type Output = &'static str;
        fn poll(self: Pin<&mut Self>, _: &mut std::task::Context<'_>) -> Poll<&'static str> {
            if self.asked.get() {
                Poll::Ready("closed")
            } else {
                Poll::Pending
            }
        }
    }

    #[test]
    fn trigger_asks_every_waiting_connection_once() {
        local(async {
            let shutdown = Rc::new(Shutdown::default());
            let calls = Rc::new(Cell::new(0));
            let mut tasks = Vec::new();
            for _ in 0..3 {
                let (shutdown, calls) = (shutdown.clone(), calls.clone());
                tasks.push(tokio::task::spawn_local(async move {
                    let asked = Rc::new(Cell::new(false));
                    let conn = Conn {
                        asked: asked.clone(),
                    };
                    let conn = std::pin::pin!(conn);
                    until_done(conn, &shutdown, None, |_| {
                        calls.set(calls.get() + 1);
                        asked.set(true);
                    })
                    .await
                }));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert_eq!(calls.get(), 0);
            assert_eq!(shutdown.waiters.borrow().iter().flatten().count(), 3);
            shutdown.trigger();
            for t in tasks {
                assert_eq!(t.await.unwrap(), "closed");
            }
            assert_eq!(calls.get(), 3);
            // Every slot was given back.
            assert_eq!(shutdown.free.borrow().len(), 3);
        });
    }

    #[test]
    fn a_connection_started_after_the_trigger_is_asked_at_once() {
        local(async {
            let shutdown = Shutdown::default();
            shutdown.trigger();
            let asked = Rc::new(Cell::new(false));
            let conn = std::pin::pin!(Conn {
                asked: asked.clone()
            });
            let r = until_done(conn, &shutdown, None, |_| asked.set(true)).await;
            assert_eq!(r, "closed");
        });
    }

    #[test]
    fn finished_connections_free_their_slots() {
        local(async {
            let shutdown = Shutdown::default();
            for _ in 0..10 {
                let mut polled = false;
                let conn = std::pin::pin!(poll_fn(|cx| {
                    if polled {
                        Poll::Ready(())
                    } else {
                        polled = true;
                        cx.waker().wake_by_ref();
                        Poll::Pending
                    }
                }));
                until_done(conn, &shutdown, None, |_| {}).await;
            }
            assert_eq!(shutdown.waiters.borrow().len(), 1, "one slot, reused");
        });
    }
}
