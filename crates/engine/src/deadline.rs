//! Coarse deadlines for the per-request timeouts of the data plane: the header-read timeout of a
//! keep-alive connection (hyper's [`Timer`](hyper::rt::Timer)) and the upstream response
//! timeout.
//!
//! Nearly every such deadline is cancelled long before it is due: the next request arrives, the
//! backend answers. Registering each one in tokio's timer wheel (a lock, an insert and a removal,
//! and for hyper also a boxed, cache-aligned `Sleep`) cost about 1,500 instructions per proxied
//! request. Instead each worker thread keeps a table of armed deadlines: arming takes a free slot,
//! cancelling frees it, and one ticker task per worker wakes the deadlines that are due. The
//! table remembers the earliest instant armed since its last scan (an estimate that may be early,
//! never late); the ticker sleeps until then, but at least a [`TICK`] between scans, so a
//! deadline never fires before its instant and at most about one tick after it. Only an armed
//! deadline earlier than the ticker's plan wakes the ticker; with one timeout length per kind,
//! that is rare, and an idle worker's ticker sleeps until something is due.
//!
//! On a thread without a table (outside a worker, in tests) a deadline falls back to a tokio
//! `Sleep`.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use smallvec::SmallVec;

/// The least time between two scans of a worker's deadlines: the most a deadline fires late
/// (plus scheduling).
pub const TICK: Duration = Duration::from_millis(10);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    Free,
    Armed,
    Fired,
}

struct Slot {
    at: Instant,
    waker: Option<Waker>,
    generation: u32,
    state: State,
}

/// One worker thread's armed deadlines.
struct Table {
    id: u32,
    slots: Vec<Slot>,
    free: Vec<u32>,
    armed: usize,
    /// No armed deadline is earlier (it may be later: released deadlines are not taken back).
    earliest: Option<Instant>,
    /// When the ticker plans its next scan (`None`: asleep until something is armed).
    planned: Option<Instant>,
    /// The ticker's waker.
    ticker: Option<Waker>,
    /// Scans of the slots so far.
    scans: u64,
}

thread_local! {
    static TABLE: RefCell<Option<Table>> = const { RefCell::new(None) };
}

static NEXT_TABLE: AtomicU32 = AtomicU32::new(1);

/// Where an armed deadline sits: its thread's table, the slot, and the slot's generation.
#[derive(Clone, Copy, Debug)]
struct Key {
    table: u32,
    index: u32,
    generation: u32,
}

impl Table {
    /// Notes a newly armed instant; returns the ticker's waker when it must plan again (it was
    /// asleep, or planned a later scan).
    fn note(&mut self, at: Instant) -> Option<Waker> {
        if self.earliest.is_none_or(|e| at < e) {
            self.earliest = Some(at);
        }
        if self.planned.is_none_or(|p| at < p) {
            self.ticker.take()
        } else {
            None
        }
    }

    /// Arms a slot; returns its key and, when the ticker must plan again, the ticker's waker.
    fn arm(&mut self, at: Instant, waker: &Waker) -> (Key, Option<Waker>) {
        let index = match self.free.pop() {
            Some(i) => i as usize,
            None => {
                self.slots.push(Slot {
                    at,
                    waker: None,
                    generation: 0,
                    state: State::Free,
                });
                self.slots.len() - 1
            }
        };
        let slot = &mut self.slots[index];
        slot.generation = slot.generation.wrapping_add(1);
        slot.at = at;
        slot.waker = Some(waker.clone());
        slot.state = State::Armed;
        self.armed += 1;
        let key = Key {
            table: self.id,
            index: index as u32,
            generation: slot.generation,
        };
        (key, self.note(at))
    }

    /// The slot of `key`, if it is in this table and still held by that key.
    fn index(&self, key: Key) -> Option<usize> {
        let i = key.index as usize;
        let slot = self.slots.get(i)?;
        (key.table == self.id && slot.generation == key.generation && slot.state != State::Free)
            .then_some(i)
    }

    fn slot(&mut self, key: Key) -> Option<&mut Slot> {
        let i = self.index(key)?;
        self.slots.get_mut(i)
    }

    /// Frees a slot (its deadline was dropped).
    fn release(&mut self, key: Key) {
        let Some(i) = self.index(key) else { return };
        let slot = &mut self.slots[i];
        let was_armed = slot.state == State::Armed;
        slot.state = State::Free;
        slot.waker = None;
        if was_armed {
            self.armed -= 1;
        }
        self.free.push(key.index);
    }

    /// Marks every armed slot due at `now` as fired, collects its waker, and learns the
    /// earliest instant still armed.
    fn fire_due(&mut self, now: Instant, due: &mut SmallVec<[Waker; 8]>) {
        let mut earliest: Option<Instant> = None;
        if self.armed > 0 && self.earliest.is_none_or(|e| e <= now) {
            self.scans += 1;
            for slot in &mut self.slots {
                if slot.state != State::Armed {
                    continue;
                }
                if slot.at <= now {
                    slot.state = State::Fired;
                    self.armed -= 1;
                    if let Some(w) = slot.waker.take() {
                        due.push(w);
                    }
                } else if earliest.is_none_or(|e| slot.at < e) {
                    earliest = Some(slot.at);
                }
            }
            self.earliest = earliest;
        } else if self.armed == 0 {
            self.earliest = None;
        }
    }

    /// When the ticker should scan next, at least `TICK` after `last` (`None`: nothing armed).
    fn plan(&mut self, last: Instant) -> Option<Instant> {
        self.planned = if self.armed == 0 {
            None
        } else {
            // `earliest` is known whenever something is armed; without it, scan soon.
            Some(self.earliest.unwrap_or(last).max(last + TICK))
        };
        self.planned
    }
}

fn with_table<R>(f: impl FnOnce(&mut Table) -> R) -> Option<R> {
    TABLE
        .try_with(|t| t.try_borrow_mut().ok().and_then(|mut t| t.as_mut().map(f)))
        .ok()
        .flatten()
}

/// Gives the current thread its deadline table and spawns its ticker on the current
/// `LocalSet`. A worker calls this once, when it starts; the returned task runs until aborted.
pub fn install() -> tokio::task::JoinHandle<()> {
    let id = NEXT_TABLE.fetch_add(1, Ordering::Relaxed);
    TABLE.with(|t| {
        *t.borrow_mut() = Some(Table {
            id,
            slots: Vec::new(),
            free: Vec::new(),
            armed: 0,
            earliest: None,
            planned: None,
            ticker: None,
            scans: 0,
        });
    });
    tokio::task::spawn_local(ticker())
}

async fn ticker() {
    let mut due: SmallVec<[Waker; 8]> = SmallVec::new();
    let mut last = Instant::now();
    let mut sleep = Box::pin(tokio::time::sleep_until(tokio::time::Instant::from_std(
        last + TICK,
    )));
    loop {
        let go = std::future::poll_fn(|cx| {
            let plan = with_table(|t| {
                t.ticker = Some(cx.waker().clone());
                t.plan(last)
            });
            match plan {
                // The table is gone: nothing to do any more.
                None => Poll::Ready(false),
                // Nothing armed: arming wakes this task.
                Some(None) => Poll::Pending,
                Some(Some(at)) => {
                    let at = tokio::time::Instant::from_std(at);
                    if sleep.deadline() != at {
                        sleep.as_mut().reset(at);
                    }
                    sleep.as_mut().poll(cx).map(|()| true)
                }
            }
        });
        if !go.await {
            return;
        }
        last = Instant::now();
        with_table(|t| {
            t.planned = None;
            t.fire_due(last, &mut due);
        });
        for w in due.drain(..) {
            w.wake();
        }
    }
}

/// A future that completes at (or at most about one [`TICK`] after) an instant. Created per
/// request; it costs nothing until first polled, and dropping it disarms it.
#[derive(Debug)]
pub struct Deadline {
    at: Instant,
    key: Option<Key>,
    fallback: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Deadline {
    /// A deadline at `at`.
    pub fn at(at: Instant) -> Self {
        Deadline {
            at,
            key: None,
            fallback: None,
        }
    }

    /// A deadline `d` from now.
    pub fn after(d: Duration) -> Self {
        Deadline::at(Instant::now() + d)
    }

    /// Moves the deadline to `at` (re-arming it if it had fired).
    pub fn reset(&mut self, at: Instant) {
        self.at = at;
        if let Some(key) = self.key {
            let rearmed = with_table(|t| {
                let slot = t.slot(key)?;
                slot.at = at;
                if slot.state == State::Fired {
                    slot.state = State::Armed;
                    t.armed += 1;
                }
                Some(t.note(at))
            })
            .flatten();
            match rearmed {
                Some(Some(ticker)) => ticker.wake(),
                Some(None) => {}
                // Not this thread's table: start over here.
                None => self.key = None,
            }
        }
        if let Some(sleep) = self.fallback.as_mut() {
            sleep.as_mut().reset(tokio::time::Instant::from_std(at));
        }
    }

    fn poll_fallback(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let at = self.at;
        self.fallback
            .get_or_insert_with(|| {
                Box::pin(tokio::time::sleep_until(tokio::time::Instant::from_std(at)))
            })
            .as_mut()
            .poll(cx)
    }
}

impl Future for Deadline {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.fallback.is_some() {
            return this.poll_fallback(cx);
        }
        match this.key {
            None => {
                let at = this.at;
                match with_table(|t| t.arm(at, cx.waker())) {
                    Some((key, ticker)) => {
                        this.key = Some(key);
                        if let Some(w) = ticker {
                            w.wake();
                        }
                        Poll::Pending
                    }
                    None => this.poll_fallback(cx),
                }
            }
            Some(key) => {
                let state = with_table(|t| {
                    let slot = t.slot(key)?;
                    if slot.state == State::Fired {
                        return Some(true);
                    }
                    match &slot.waker {
                        Some(w) if w.will_wake(cx.waker()) => {}
                        _ => slot.waker = Some(cx.waker().clone()),
                    }
                    Some(false)
                })
                .flatten();
                match state {
                    Some(true) => Poll::Ready(()),
                    Some(false) => Poll::Pending,
                    // Polled on another thread than the one it was armed on (workers never
                    // move their tasks): wait with tokio's timer instead.
                    None => {
                        this.key = None;
                        this.poll_fallback(cx)
                    }
                }
            }
        }
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        if let Some(key) = self.key {
            with_table(|t| t.release(key));
        }
    }
}

/// The upstream call took longer than its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

pin_project_lite::pin_project! {
    /// `fut`, bounded by a [`Deadline`]: see [`timeout`].
    #[derive(Debug)]
    pub struct Timeout<F> {
        #[pin]
        fut: F,
        deadline: Deadline,
    }
}

/// Runs `fut` until it completes or `d` has passed (then `Err(Elapsed)`; `fut` is dropped with
/// the returned future). `fut` is moved once, into the returned future.
pub fn timeout<F: Future>(d: Duration, fut: F) -> Timeout<F> {
    Timeout {
        fut,
        deadline: Deadline::after(d),
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(v) = this.fut.poll(cx) {
            return Poll::Ready(Ok(v));
        }
        Pin::new(this.deadline).poll(cx).map(|()| Err(Elapsed))
    }
}

/// hyper's timer for HTTP/1.1 connections (the header-read timeout): its sleeps are
/// [`Deadline`]s on the worker's table.
#[derive(Clone, Copy, Debug, Default)]
pub struct CoarseTimer;

struct HyperSleep(Deadline);

impl Future for HyperSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.get_mut().0).poll(cx)
    }
}

impl hyper::rt::Sleep for HyperSleep {}

impl hyper::rt::Timer for CoarseTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(HyperSleep(Deadline::after(duration)))
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(HyperSleep(Deadline::at(deadline)))
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>, new_deadline: Instant) {
        match sleep.as_mut().downcast_mut_pin::<HyperSleep>() {
            Some(s) => s.get_mut().0.reset(new_deadline),
            None => *sleep = self.sleep_until(new_deadline),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::local;

    #[test]
    fn fires_not_before_its_instant_and_within_a_few_ticks() {
        local(async {
            let ticker = install();
            for ms in [0u64, 5, 30, 120] {
                let start = Instant::now();
                Deadline::after(Duration::from_millis(ms)).await;
                let took = start.elapsed();
                assert!(
                    took >= Duration::from_millis(ms),
                    "{ms} ms fired after {took:?}"
                );
                // Generous: CI machines are noisy; this checks the ticker runs at all.
                assert!(took < Duration::from_millis(ms + 2_000), "{took:?}");
            }
            ticker.abort();
        });
    }

    #[test]
    fn dropped_deadlines_free_their_slots_and_never_wake() {
        local(async {
            let ticker = install();
            for _ in 0..1000 {
                let mut d = Deadline::after(Duration::from_millis(1));
                let polled = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut d).poll(cx)));
                assert!(polled.await.is_pending());
            }
            let (slots, armed) = with_table(|t| (t.slots.len(), t.armed)).unwrap();
            assert_eq!(armed, 0);
            // Each deadline reused the slot the previous one freed.
            assert_eq!(slots, 1);
            ticker.abort();
        });
    }

    #[test]
    fn the_ticker_sleeps_until_the_earliest_deadline() {
        local(async {
            let ticker = install();
            let mut far = Deadline::after(Duration::from_secs(30));
            let polled = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut far).poll(cx)));
            assert!(polled.await.is_pending());
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(
                with_table(|t| t.scans),
                Some(0),
                "no scan before anything is due"
            );
            // An earlier deadline makes the ticker plan again.
            let start = Instant::now();
            Deadline::after(Duration::from_millis(20)).await;
            assert!(start.elapsed() >= Duration::from_millis(20));
            let (scans, armed) = with_table(|t| (t.scans, t.armed)).unwrap();
            assert!(scans >= 1);
            assert_eq!(armed, 1, "the far deadline is still armed");
            drop(far);
            ticker.abort();
        });
    }

    #[test]
    fn timeout_returns_the_value_or_elapsed() {
        local(async {
            let ticker = install();
            assert_eq!(timeout(Duration::from_secs(5), async { 7 }).await, Ok(7));
            let slow = tokio::time::sleep(Duration::from_secs(5));
            assert_eq!(timeout(Duration::from_millis(20), slow).await, Err(Elapsed));
            ticker.abort();
        });
    }

    #[test]
    fn reset_moves_a_fired_deadline_back() {
        local(async {
            let ticker = install();
            let mut d = Deadline::after(Duration::from_millis(1));
            (&mut d).await;
            let later = Instant::now() + Duration::from_millis(50);
            d.reset(later);
            (&mut d).await;
            assert!(Instant::now() >= later);
            ticker.abort();
        });
    }

    #[test]
    fn without_a_table_it_uses_tokio_timers() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let start = Instant::now();
            Deadline::after(Duration::from_millis(20)).await;
            assert!(start.elapsed() >= Duration::from_millis(20));
            assert_eq!(
                timeout(Duration::from_millis(10), std::future::pending::<()>()).await,
                Err(Elapsed)
            );
        });
    }

    #[test]
    fn hyper_timer_reset_keeps_the_boxed_sleep() {
        use hyper::rt::Timer;
        local(async {
            let ticker = install();
            let timer = CoarseTimer;
            let mut s = timer.sleep(Duration::from_secs(60));
            let later = Instant::now() + Duration::from_millis(30);
            timer.reset(&mut s, later);
            assert!(s.as_mut().downcast_mut_pin::<HyperSleep>().is_some());
            s.await;
            assert!(Instant::now() >= later);
            ticker.abort();
        });
    }
}
