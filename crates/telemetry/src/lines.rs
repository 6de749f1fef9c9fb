//! Log lines leave the workers without a system call: each thread appends its lines to a buffer
//! of its own (a mutex no other thread takes but the writer, every 50 ms), and one writer thread
//! drains every buffer, giving each [`LineSink`] what was queued for it with one write. A
//! thread's buffer holding [`MAX_BUFFERED`] bytes drops further lines and counts them
//! (`turnpike_access_log_dropped_total`): a stuck disk never blocks a worker. [`flush`] drains
//! at once: before an output changes (a reload, SIGUSR1) and when the gateway stops, so a
//! graceful stop loses no line. Used by the access log, the `accessLog` policy and
//! `statisticsCSV`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

/// Bytes a thread may have waiting for the writer; lines past it are dropped and counted.
pub const MAX_BUFFERED: usize = 8 << 20;

/// How often the writer drains the buffers.
const INTERVAL: Duration = Duration::from_millis(50);

/// What a sink does with the bytes of its lines.
type Write = Box<dyn Fn(&[u8]) + Send + Sync>;

/// Where lines go: what the writer calls with the lines queued for it, in order, off the
/// workers.
pub struct LineSink {
    id: u64,
    write: Write,
}

impl std::fmt::Debug for LineSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineSink").field("id", &self.id).finish()
    }
}

impl LineSink {
    /// A sink that `write`s the bytes of the lines queued for it (called by the writer thread,
    /// or by [`flush`]'s caller).
    pub fn new(write: impl Fn(&[u8]) + Send + Sync + 'static) -> Arc<LineSink> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Arc::new(LineSink {
            id: NEXT.fetch_add(1, Relaxed),
            write: Box::new(write),
        })
    }
}

impl LineSink {
    /// A sink appending to `file` (opened for appending at `path`); a failed write is logged
    /// with `what` the file holds, at most once a minute.
    pub fn file(
        path: std::path::PathBuf,
        file: std::fs::File,
        what: &'static str,
    ) -> Arc<LineSink> {
        let file = Mutex::new((file, None::<std::time::Instant>));
        LineSink::new(move |bytes| {
            use std::io::Write;
            let mut f = file.lock().unwrap_or_else(|e| e.into_inner());
            if let Err(e) = f.0.write_all(bytes) {
                if f.1.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                    tracing::warn!(file = %path.display(), "cannot write {what}: {e}");
                    f.1 = Some(std::time::Instant::now());
                }
            }
        })
    }
}

/// One thread's waiting lines, per sink.
#[derive(Default)]
struct Buffer {
    lines: Vec<(Arc<LineSink>, Vec<u8>)>,
    bytes: usize,
}

/// Every thread's buffer (an ended thread's is dropped once drained).
static BUFFERS: Mutex<Vec<Arc<Mutex<Buffer>>>> = Mutex::new(Vec::new());
/// Held while buffers are written out, so that lines leave in the order they were drained.
static WRITING: Mutex<()> = Mutex::new(());

thread_local! {
    static MINE: Arc<Mutex<Buffer>> = register();
}

fn register() -> Arc<Mutex<Buffer>> {
    static WRITER: Once = Once::new();
    WRITER.call_once(|| {
        let started = std::thread::Builder::new()
            .name("turnpike-log".into())
            .spawn(|| loop {
                std::thread::sleep(INTERVAL);
                flush();
            });
        if let Err(e) = started {
            tracing::error!("cannot start the log writer: {e}");
        }
    });
    let b = Arc::new(Mutex::new(Buffer::default()));
    BUFFERS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Arc::clone(&b));
    b
}

/// Queues `line` (with its newline) for `sink`; the writer writes it within 50 ms. Returns
/// false when the thread's buffer is full and the line was dropped.
pub fn push(sink: &Arc<LineSink>, line: &[u8]) -> bool {
    MINE.with(|b| {
        let mut b = b.lock().unwrap_or_else(|e| e.into_inner());
        if b.bytes + line.len() > MAX_BUFFERED {
            crate::stats::process()
                .log_lines_dropped
                .fetch_add(1, Relaxed);
            return false;
        }
        b.bytes += line.len();
        match b.lines.iter_mut().find(|(s, _)| s.id == sink.id) {
            Some((_, bytes)) => bytes.extend_from_slice(line),
            None => b.lines.push((Arc::clone(sink), line.to_vec())),
        }
        true
    })
}

/// Writes every waiting line now, each sink's with one call.
pub fn flush() {
    let _writing = WRITING.lock().unwrap_or_else(|e| e.into_inner());
    let mut drained: Vec<(Arc<LineSink>, Vec<u8>)> = Vec::new();
    {
        let mut all = BUFFERS.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|shared| {
            // Only this list holds it: its thread has ended (after its last line).
            let ended = Arc::strong_count(shared) == 1;
            let mut b = shared.lock().unwrap_or_else(|e| e.into_inner());
            b.bytes = 0;
            for (sink, mut bytes) in b.lines.drain(..) {
                match drained.iter_mut().find(|(s, _)| s.id == sink.id) {
                    Some((_, all)) => all.append(&mut bytes),
                    None => drained.push((sink, bytes)),
                }
            }
            !ended
        });
    }
    for (sink, bytes) in drained {
        (sink.write)(&bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_many_threads_reach_their_sink_whole_and_in_each_threads_order() {
        let got: Arc<Mutex<Vec<u8>>> = Arc::default();
        let other: Arc<Mutex<Vec<u8>>> = Arc::default();
        let (g, o) = (got.clone(), other.clone());
        let sink = LineSink::new(move |b| g.lock().unwrap().extend_from_slice(b));
        let second = LineSink::new(move |b| o.lock().unwrap().extend_from_slice(b));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (sink, second) = (sink.clone(), second.clone());
                std::thread::spawn(move || {
                    for i in 0..500 {
                        assert!(push(&sink, format!("{t} {i}\n").as_bytes()));
                    }
                    push(&second, b"x\n");
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // The threads have ended: their lines are still written.
        flush();
        let text = String::from_utf8(got.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 2000);
        for t in 0..4 {
            let mine: Vec<usize> = text
                .lines()
                .filter_map(|l| l.strip_prefix(&format!("{t} ")))
                .map(|n| n.parse().unwrap())
                .collect();
            assert_eq!(mine, (0..500).collect::<Vec<_>>());
        }
        assert_eq!(other.lock().unwrap().as_slice(), b"x\nx\nx\nx\n");
    }

    #[test]
    fn a_full_buffer_drops_and_counts_instead_of_waiting() {
        let sink = LineSink::new(|_| {});
        let big = vec![b'a'; MAX_BUFFERED / 2 + 1];
        let before = crate::stats::process().log_lines_dropped.load(Relaxed);
        std::thread::spawn(move || {
            // Two lines fill the buffer, unless the writer drained it in between.
            assert!((0..4).any(|_| !push(&sink, &big)));
        })
        .join()
        .unwrap();
        assert!(crate::stats::process().log_lines_dropped.load(Relaxed) > before);
        flush();
    }
}
