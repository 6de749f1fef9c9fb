//! The Python executor processes of one compiled configuration: started when the configuration
//! is compiled (a policy whose module or class is missing, or whose constructor raises, is a
//! load error), supervised (a process that dies is started again, with the same socket), and
//! stopped when the configuration is dropped (their standard input is closed; a process that
//! does not exit within 2 s is killed).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use turnpike_config::{ConfigError, ConfigErrors, Location};

/// How long an executor may take to import the policies and say it is ready.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How often a supervisor looks at its process.
const POLL: Duration = Duration::from_millis(20);

/// What `gateway.python` configures, resolved.
#[derive(Debug, Clone)]
pub struct PythonSetup {
    /// The interpreter (found on `PATH` when not a path).
    pub interpreter: String,
    /// Folders put in front of `sys.path`, absolute.
    pub path: Vec<PathBuf>,
    /// Executor processes.
    pub workers: usize,
    /// Where `gateway.python` is written, for errors about starting the executors.
    pub place: Option<Location>,
}

impl Default for PythonSetup {
    fn default() -> Self {
        PythonSetup {
            interpreter: "python3".into(),
            path: Vec::new(),
            workers: 1,
            place: None,
        }
    }
}

/// One configured `python` policy.
#[derive(Debug)]
struct Spec {
    module: String,
    class: String,
    config: serde_json::Value,
    site: String,
    place: Option<Location>,
}

/// The Python policies of one configuration and, once started, their executors.
#[derive(Debug)]
pub struct Executors {
    setup: PythonSetup,
    specs: Mutex<Vec<Spec>>,
    pool: OnceLock<Arc<Pool>>,
}

/// The phases a policy implements, as the executor reported them.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Phases {
    pub(crate) request: bool,
    pub(crate) response: bool,
}

/// Running executors.
#[derive(Debug)]
pub(crate) struct Pool {
    /// Unique in the process (a worker's connections are keyed by it).
    pub(crate) id: u64,
    pub(crate) executors: Vec<Arc<Executor>>,
    /// By policy id.
    pub(crate) phases: Vec<Phases>,
    dir: PathBuf,
    shutdown: Arc<AtomicBool>,
}

/// One executor process.
#[derive(Debug)]
pub(crate) struct Executor {
    pub(crate) socket: PathBuf,
    /// Bumped each time the process is started again: connections to an older one are stale.
    pub(crate) generation: AtomicU64,
    /// False while the process is being started again.
    pub(crate) ready: AtomicBool,
    /// The generation + 1 of a process a call outlived its timeout on (0: none): its
    /// supervisor kills it and starts it again.
    condemned: AtomicU64,
    stdin: Mutex<Option<ChildStdin>>,
}

impl Executor {
    /// Asks the supervisor to kill and start again the process of `generation` (a call to it
    /// outlived its timeout); new calls go to other executors meanwhile. Nothing happens when
    /// that process was replaced already.
    pub(crate) fn condemn(&self, generation: u64) {
        if self.generation.load(Ordering::Acquire) == generation {
            self.condemned.store(generation + 1, Ordering::Release);
            self.ready.store(false, Ordering::Release);
        }
    }

    fn is_condemned(&self) -> bool {
        self.condemned.load(Ordering::Acquire) == self.generation.load(Ordering::Acquire) + 1
    }
}

impl Executors {
    /// The policies of a configuration compiled with `setup`; none registered yet.
    pub fn new(setup: PythonSetup) -> Arc<Self> {
        Arc::new(Executors {
            setup,
            specs: Mutex::new(Vec::new()),
            pool: OnceLock::new(),
        })
    }

    /// Adds a policy; returns its id.
    pub(crate) fn register(
        &self,
        module: &str,
        class: &str,
        config: serde_json::Value,
        site: &str,
    ) -> usize {
        let mut specs = self.specs.lock().unwrap_or_else(|e| e.into_inner());
        specs.push(Spec {
            module: module.into(),
            class: class.into(),
            config,
            site: site.into(),
            place: None,
        });
        specs.len() - 1
    }

    /// Records where the policy compiled at `site` is written (for errors when it is loaded).
    pub fn place(&self, site: &str, place: Location) {
        let mut specs = self.specs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = specs.iter_mut().rev().find(|s| s.site == site) {
            s.place = Some(place);
        }
    }

    /// The files a module is read from (`NAME.py` or `NAME/__init__.py` in the first folder of
    /// the path that has one).
    pub(crate) fn module_files(&self, module: &str) -> Vec<PathBuf> {
        let rel: PathBuf = module.split('.').collect();
        for dir in &self.setup.path {
            let file = dir.join(&rel).with_extension("py");
            if file.is_file() {
                return vec![file];
            }
            let init = dir.join(&rel).join("__init__.py");
            if init.is_file() {
                return vec![init];
            }
        }
        Vec::new()
    }

    /// The running executors (none before [`Executors::start`], or without policies).
    pub(crate) fn pool(&self) -> Option<&Arc<Pool>> {
        self.pool.get()
    }

    /// Starts the executors when there are policies; a policy that cannot be loaded is an
    /// error at its place.
    pub fn start(&self, errors: &mut ConfigErrors) {
        let specs = self.specs.lock().unwrap_or_else(|e| e.into_inner());
        if specs.is_empty() || self.pool.get().is_some() {
            return;
        }
        match start_pool(&self.setup, &specs) {
            Ok(pool) => {
                let _ = self.pool.set(Arc::new(pool));
            }
            Err(e) => {
                let place = e
                    .policy
                    .and_then(|i| specs.get(i))
                    .and_then(|s| s.place.clone())
                    .or_else(|| self.setup.place.clone())
                    .unwrap_or_else(|| Location {
                        file: PathBuf::new(),
                        line: 0,
                        column: 0,
                        key: "gateway.python".into(),
                    });
                errors.push(ConfigError::new(place, e.message));
            }
        }
    }
}

/// Why the executors did not start.
#[derive(Debug)]
struct StartError {
    /// The policy at fault, when one is.
    policy: Option<usize>,
    message: String,
}

impl StartError {
    fn general(message: impl Into<String>) -> Self {
        StartError {
            policy: None,
            message: message.into(),
        }
    }
}

static POOLS: AtomicU64 = AtomicU64::new(1);

fn start_pool(setup: &PythonSetup, specs: &[Spec]) -> Result<Pool, StartError> {
    let id = POOLS.fetch_add(1, Ordering::Relaxed);
    let dir = private_dir()?;
    let file = dir.join("policies.json");
    let doc = serde_json::json!({
        "path": setup.path,
        "policies": specs.iter().enumerate().map(|(i, s)| serde_json::json!({
            "id": i, "module": s.module, "class": s.class, "config": s.config,
        })).collect::<Vec<_>>(),
    });
    std::fs::write(&file, doc.to_string())
        .map_err(|e| StartError::general(format!("cannot write {}: {e}", file.display())))?;
    let shutdown = Arc::new(AtomicBool::new(false));
    let mut executors = Vec::new();
    let mut phases = vec![Phases::default(); specs.len()];
    let mut children = Vec::new();
    for i in 0..setup.workers.max(1) {
        let socket = dir.join(format!("executor-{i}.sock"));
        let started = spawn(setup, &socket, &file, specs);
        let (child, stdin, ready) = match started {
            Ok(s) => s,
            Err(e) => {
                shutdown.store(true, Ordering::Relaxed);
                for (mut c, _) in children {
                    stop(&mut c);
                }
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        phases = ready;
        let ex = Arc::new(Executor {
            socket,
            generation: AtomicU64::new(0),
            ready: AtomicBool::new(true),
            condemned: AtomicU64::new(0),
            stdin: Mutex::new(Some(stdin)),
        });
        children.push((child, ex.clone()));
        executors.push(ex);
    }
    for (child, ex) in children {
        let setup = setup.clone();
        let file = file.clone();
        let shutdown = shutdown.clone();
        let names: Vec<String> = specs
            .iter()
            .map(|s| format!("{}.{}", s.module, s.class))
            .collect();
        let spawned = std::thread::Builder::new()
            .name("python-supervisor".into())
            .spawn(move || supervise(child, &ex, &setup, &file, &names, &shutdown));
        if let Err(e) = spawned {
            return Err(StartError::general(format!(
                "cannot start a supervisor thread: {e}"
            )));
        }
    }
    Ok(Pool {
        id,
        executors,
        phases,
        dir,
        shutdown,
    })
}

/// A new folder for the executors' sockets and policy list: a random name (no other local user
/// can guess it and plant a file or link there first), mode 0700, under `$XDG_RUNTIME_DIR`
/// (the user's private runtime folder) when set, else the system's temporary folder.
fn private_dir() -> Result<PathBuf, StartError> {
    use std::os::unix::fs::PermissionsExt;
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::Builder::new()
        .prefix("turnpike-py-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(&base)
        .map_err(|e| {
            StartError::general(format!(
                "cannot create a folder for the Python executors in {}: {e}",
                base.display()
            ))
        })?;
    // The pool removes it when it stops (`Pool::drop`).
    Ok(dir.keep())
}

/// Starts one executor and waits for its ready line: the process, the write end of its
/// standard input, and the phases of each policy.
fn spawn(
    setup: &PythonSetup,
    socket: &Path,
    policies: &Path,
    specs: &[Spec],
) -> Result<(Child, ChildStdin, Vec<Phases>), StartError> {
    let mut child = Command::new(&setup.interpreter)
        .args(["-m", "turnpike_policy.executor", "--socket"])
        .arg(socket)
        .arg("--policies")
        .arg(policies)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| {
            StartError::general(format!(
                "cannot start the Python interpreter `{}`: {e}",
                setup.interpreter
            ))
        })?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        stop(&mut child);
        return Err(StartError::general("the executor's pipes are missing"));
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::Builder::new()
        .name("python-ready".into())
        .spawn(move || {
            let mut out = BufReader::new(stdout);
            let mut line = String::new();
            let r = out.read_line(&mut line).map(|_| line);
            let _ = tx.send(r);
            // Keep the pipe open while the executor lives (it writes nothing more).
            let mut rest = Vec::new();
            let _ = std::io::Read::read_to_end(&mut out, &mut rest);
        });
    if let Err(e) = reader {
        stop(&mut child);
        return Err(StartError::general(format!("cannot start a thread: {e}")));
    }
    let line = match rx.recv_timeout(START_TIMEOUT) {
        Ok(Ok(line)) => line,
        Ok(Err(e)) => {
            stop(&mut child);
            return Err(StartError::general(format!(
                "cannot read from the executor: {e}"
            )));
        }
        Err(_) => {
            stop(&mut child);
            return Err(StartError::general(format!(
                "the Python executor did not start within {} s",
                START_TIMEOUT.as_secs()
            )));
        }
    };
    let msg: serde_json::Value = match serde_json::from_str(line.trim()) {
        Ok(v) => v,
        Err(_) => {
            stop(&mut child);
            let hint = if line.trim().is_empty() {
                " (is the `turnpike_policy` package installed for this interpreter? `pip install ./python`)"
            } else {
                ""
            };
            return Err(StartError::general(format!(
                "the Python executor did not start{hint}"
            )));
        }
    };
    if let Some(e) = msg.get("error") {
        stop(&mut child);
        let policy = e
            .get("id")
            .and_then(serde_json::Value::as_u64)
            .map(|i| i as usize);
        let what = match policy.and_then(|i| specs.get(i)) {
            Some(s) => format!("cannot load the Python policy `{}.{}`", s.module, s.class),
            None => "the Python executor did not start".to_owned(),
        };
        let message = e
            .get("message")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("unknown error");
        if let Some(tb) = e.get("traceback").and_then(serde_json::Value::as_str) {
            tracing::error!(traceback = tb, "{what}: {message}");
        }
        return Err(StartError {
            policy,
            message: format!("{what}: {message}"),
        });
    }
    let mut phases = vec![Phases::default(); specs.len()];
    for p in msg
        .get("policies")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
    {
        let i = p
            .get("id")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(u64::MAX) as usize;
        if let Some(slot) = phases.get_mut(i) {
            *slot = Phases {
                request: p
                    .get("request")
                    .and_then(serde_json::Value::as_bool)
                    .unwrap_or(true),
                response: p
                    .get("response")
                    .and_then(serde_json::Value::as_bool)
                    .unwrap_or(true),
            };
        }
    }
    Ok((child, stdin, phases))
}

/// Ends an executor that failed to start.
fn stop(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Watches one executor: starts it again when it exits (after 100 ms, doubling up to 5 s while
/// it keeps failing), kills it and starts it again at once when a call outlived its timeout
/// (the watchdog: a policy stuck in a loop or a blocking call holds every call sent to its
/// process), and stops it on shutdown.
fn supervise(
    mut child: Child,
    ex: &Executor,
    setup: &PythonSetup,
    file: &Path,
    names: &[String],
    shutdown: &AtomicBool,
) {
    let mut backoff = Duration::from_millis(100);
    let mut since = Instant::now();
    let mut asked_to_stop: Option<Instant> = None;
    let mut killed = false;
    loop {
        match child.try_wait() {
            Ok(None) => {
                if ex.is_condemned() && !killed {
                    tracing::warn!(socket = %ex.socket.display(), "a Python executor did not answer a call within its timeout; killing it and starting it again");
                    let _ = child.kill();
                    killed = true;
                }
                if shutdown.load(Ordering::Relaxed) {
                    let at = *asked_to_stop.get_or_insert_with(Instant::now);
                    if at.elapsed() > Duration::from_secs(2) {
                        let _ = child.kill();
                    }
                }
                std::thread::sleep(POLL);
                continue;
            }
            Ok(Some(status)) => {
                ex.ready.store(false, Ordering::Release);
                if shutdown.load(Ordering::Relaxed) {
                    return;
                }
                tracing::warn!(socket = %ex.socket.display(), %status, "a Python executor exited; starting it again");
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot watch a Python executor");
                return;
            }
        }
        if since.elapsed() > Duration::from_secs(10) {
            backoff = Duration::from_millis(100);
        }
        // A process the watchdog killed comes back at once; one that failed by itself after
        // the back-off.
        let mut pause = if std::mem::take(&mut killed) {
            Duration::ZERO
        } else {
            backoff
        };
        loop {
            std::thread::sleep(pause);
            if shutdown.load(Ordering::Relaxed) {
                return;
            }
            // The specs are only needed for their names in errors.
            let specs: Vec<Spec> = names
                .iter()
                .map(|n| {
                    let (m, c) = n.rsplit_once('.').unwrap_or((n, ""));
                    Spec {
                        module: m.into(),
                        class: c.into(),
                        config: serde_json::Value::Null,
                        site: String::new(),
                        place: None,
                    }
                })
                .collect();
            match spawn(setup, &ex.socket, file, &specs) {
                Ok((c, stdin, _)) => {
                    child = c;
                    *ex.stdin.lock().unwrap_or_else(|e| e.into_inner()) = Some(stdin);
                    ex.generation.fetch_add(1, Ordering::AcqRel);
                    ex.ready.store(true, Ordering::Release);
                    since = Instant::now();
                    tracing::info!(socket = %ex.socket.display(), "the Python executor is back");
                    if shutdown.load(Ordering::Relaxed) {
                        // Dropped meanwhile: close its input again.
                        ex.stdin.lock().unwrap_or_else(|e| e.into_inner()).take();
                    }
                    break;
                }
                Err(e) => {
                    tracing::error!(error = %e.message, "a Python executor cannot be started again");
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    pause = backoff;
                }
            }
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shutdown.store(true, Ordering::Relaxed);
        for ex in &self.executors {
            // End of input: the executor exits.
            if let Some(mut stdin) = ex.stdin.lock().unwrap_or_else(|e| e.into_inner()).take() {
                let _ = stdin.flush();
            }
        }
        // Now, not later: a process about to exit (`turnpike validate`, a stop) leaves nothing
        // behind. The executors keep their open sockets; removing a socket's name only stops
        // new connections, and each executor tolerates finding its name gone.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
