//! `turnpike`: the command line. Parses arguments and wires the config and engine crates
//! together; no gateway logic lives here.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use clap::{Parser, Subcommand};

// Rust's allocations go to mimalloc, which also replaces malloc and free for the C libraries
// linked in (libxml2): see crates/alloc.
#[global_allocator]
static GLOBAL: turnpike_alloc::MiMalloc = turnpike_alloc::MiMalloc;

#[derive(Parser)]
#[command(name = "turnpike", version, about = "Turnpike API gateway")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start the gateway.
    Run {
        /// Configuration file or folder (repeatable).
        #[arg(short = 'c', long = "config", required = true)]
        config: Vec<PathBuf>,
        /// Reload when a configuration file changes (SIGHUP always reloads).
        #[arg(long)]
        watch: bool,
        /// Write the process id here (a binary upgrade writes the new one).
        #[arg(long)]
        pid_file: Option<PathBuf>,
    },
    /// Replace a running gateway by this binary without dropping a connection: the running
    /// process starts the binary it was started from (replace that file first), hands it its
    /// listening sockets, and drains. Same as sending it SIGUSR2.
    Upgrade {
        /// The running gateway's `--pid-file`.
        #[arg(long)]
        pid_file: PathBuf,
        /// How long to wait for the new process to serve.
        #[arg(long, default_value = "120")]
        timeout_secs: u64,
    },
    /// Check a configuration: exit 0, or print every error with file:line:column and key.
    Validate {
        /// Configuration file or folder (repeatable).
        #[arg(short = 'c', long = "config", required = true)]
        config: Vec<PathBuf>,
    },
    /// Print the JSON Schema of configuration documents.
    Schema,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Schema => {
            println!(
                "{}",
                serde_json::to_string_pretty(&turnpike::json_schema()).unwrap_or_default()
            );
            ExitCode::SUCCESS
        }
        Command::Validate { config } => validate(&config),
        Command::Upgrade {
            pid_file,
            timeout_secs,
        } => match upgrade(&pid_file, Duration::from_secs(timeout_secs)) {
            Ok(pid) => {
                println!("upgraded: process {pid} serves");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        },
        Command::Run {
            config,
            watch,
            pid_file,
        } => {
            init_logging();
            match run(config, watch, pid_file) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TURNPIKE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only for a person at a terminal, not in files or journald.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .init();
}

fn validate(config: &[PathBuf]) -> ExitCode {
    match turnpike::load_and_compile(config) {
        Ok((set, snap)) => {
            let proxies = turnpike_compile::proxy_rules::warnings(&set);
            for w in turnpike_compile::admin::warnings(&set)
                .into_iter()
                .chain(proxies)
            {
                eprintln!("warning: {w}");
            }
            let apis: usize = snap.listeners.values().map(|l| l.router.len()).sum();
            println!(
                "configuration OK: {apis} APIs on {} listeners",
                snap.listeners.len()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// The signals the control loop reacts to, registered before the gateway starts so that a
/// signal sent as soon as it listens is never lost (or fatal).
struct Signals {
    hup: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    usr2: tokio::signal::unix::Signal,
    usr1: tokio::signal::unix::Signal,
}

/// Why the control loop ended.
enum Exit {
    /// SIGTERM or SIGINT.
    Stop,
    /// A new process took over the listeners.
    Upgraded,
}

fn run(config: Vec<PathBuf>, watch: bool, pid_file: Option<PathBuf>) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    // What a binary upgrade starts: the binary this process was started from (replaced on disk
    // by then), with the same arguments.
    let exe = std::env::current_exe()?;
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let signals = {
        let _guard = rt.enter();
        Signals {
            hup: signal(SignalKind::hangup())?,
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            usr2: signal(SignalKind::user_defined2())?,
            usr1: signal(SignalKind::user_defined1())?,
        }
    };
    let handover = turnpike::upgrade::inherit()?;
    let mut control = match turnpike::Control::start(config) {
        Ok(c) => c,
        Err(e) => {
            if let Some(h) = handover {
                h.failed(&e.to_string());
            }
            return Err(e);
        }
    };
    for (configured, bound) in control.gateway().listeners() {
        if configured == bound {
            tracing::info!("listening on {bound}");
        } else {
            tracing::info!("listening on {bound} (configured {configured})");
        }
    }
    if let Some(p) = &pid_file {
        write_pid(p)?;
    }
    // systemd learns the new main process before the old one may exit.
    notify(&if handover.is_some() {
        vec![
            sd_notify::NotifyState::MainPid(std::process::id()),
            sd_notify::NotifyState::Ready,
        ]
    } else {
        vec![sd_notify::NotifyState::Ready]
    });
    if let Some(h) = handover {
        h.ready()?;
    }
    let exit = rt.block_on(control_loop(
        &control,
        watch,
        signals,
        &exe,
        &args,
        pid_file.as_deref(),
    ));
    match exit {
        Exit::Upgraded => {
            tracing::info!("the new process serves: draining this one");
            control.stop_accepting();
        }
        Exit::Stop => {
            notify(&[sd_notify::NotifyState::Stopping]);
            if let Some(p) = &pid_file {
                let _ = std::fs::remove_file(p);
            }
            tracing::info!("shutting down: finishing in-flight requests");
        }
    }
    control.shutdown();
    tracing::info!("stopped");
    Ok(())
}

/// Tells systemd (`Type=notify`) about the process's state; nothing without systemd.
fn notify(states: &[sd_notify::NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(false, states) {
        tracing::debug!("sd_notify: {e}");
    }
}

fn write_pid(path: &Path) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{}\n", std::process::id()))
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
}

fn read_pid(path: &Path) -> anyhow::Result<i32> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    text.trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("{} holds no process id", path.display()))
}

/// Where a failed upgrade's reason is written, beside the pid file.
fn outcome_file(pid_file: &Path) -> PathBuf {
    let mut name = pid_file.as_os_str().to_owned();
    name.push(".upgrade-failed");
    PathBuf::from(name)
}

/// `turnpike upgrade`: signals the running gateway and waits for its successor to serve.
fn upgrade(pid_file: &Path, timeout: Duration) -> anyhow::Result<i32> {
    let old = read_pid(pid_file)?;
    let failed = outcome_file(pid_file);
    let _ = std::fs::remove_file(&failed);
    let pid = rustix::process::Pid::from_raw(old)
        .ok_or_else(|| anyhow::anyhow!("{} holds no process id", pid_file.display()))?;
    rustix::process::kill_process(pid, rustix::process::Signal::USR2)
        .map_err(|e| anyhow::anyhow!("cannot signal process {old}: {e}"))?;
    let start = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(100));
        if let Ok(new) = read_pid(pid_file) {
            if new != old {
                return Ok(new);
            }
        }
        if let Ok(why) = std::fs::read_to_string(&failed) {
            let _ = std::fs::remove_file(&failed);
            anyhow::bail!(
                "the upgrade failed, process {old} goes on serving: {}",
                why.trim()
            );
        }
        if start.elapsed() > timeout {
            anyhow::bail!(
                "no new process serves after {timeout:?}; process {old} goes on serving (its log says why)"
            );
        }
    }
}

/// Waits for signals (SIGHUP reloads; SIGUSR1 reopens the access log; SIGUSR2 upgrades;
/// SIGTERM and SIGINT stop) and, with
/// `--watch`, for changed configuration files. Returns why the gateway should stop.
async fn control_loop(
    control: &turnpike::Control,
    watch: bool,
    signals: Signals,
    exe: &Path,
    args: &[OsString],
    pid_file: Option<&Path>,
) -> Exit {
    let Signals {
        mut hup,
        mut term,
        mut int,
        mut usr2,
        mut usr1,
    } = signals;
    let manager = &control.manager;
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    let mut seen = fingerprint(manager);
    loop {
        tokio::select! {
            _ = hup.recv() => {
                tracing::info!("SIGHUP: reloading configuration");
                notify(&[sd_notify::NotifyState::Reloading]);
                reload(manager, "signal");
                notify(&[sd_notify::NotifyState::Ready]);
                seen = fingerprint(manager);
            }
            _ = usr2.recv() => {
                tracing::info!("SIGUSR2: starting {} to take over", exe.display());
                match turnpike::upgrade::hand_over(control, exe, args) {
                    Ok(pid) => {
                        tracing::info!(pid, "upgrade: the new process serves");
                        return Exit::Upgraded;
                    }
                    Err(e) => {
                        tracing::error!("upgrade failed, this process goes on serving: {e:#}");
                        // `turnpike upgrade` is waiting: tell it why.
                        if let Some(p) = pid_file {
                            let _ = std::fs::write(outcome_file(p), format!("{e:#}\n"));
                        }
                    }
                }
            }
            _ = usr1.recv() => {
                // logrotate moved the access log file away: write to a new one.
                match turnpike_engine::access_log::reopen() {
                    Ok(()) => tracing::info!("SIGUSR1: access log reopened"),
                    Err(e) => tracing::error!("SIGUSR1: cannot reopen the access log: {e}"),
                }
            }
            _ = term.recv() => return Exit::Stop,
            _ = int.recv() => return Exit::Stop,
            _ = tick.tick(), if watch => {
                let now = fingerprint(manager);
                if now != seen {
                    tracing::info!("configuration changed on disk: reloading");
                    reload(manager, "files");
                    seen = fingerprint(manager);
                }
            }
        }
    }
}

fn reload(manager: &turnpike_admin::Manager, trigger: &str) {
    match manager.reload(trigger) {
        Ok(revision) => tracing::info!(revision, "configuration reloaded"),
        Err(errors) => {
            for line in errors {
                tracing::error!(
                    "reload rejected, still serving the previous configuration: {line}"
                );
            }
        }
    }
}

/// Names and modification times of every configuration file, and of the YAML files in the
/// folders given on the command line (so that new files are noticed).
fn fingerprint(manager: &turnpike_admin::Manager) -> Vec<(PathBuf, Option<SystemTime>)> {
    let mut files = manager.files();
    for src in manager.gateway().sources() {
        if let Ok(rd) = std::fs::read_dir(&src) {
            files.extend(rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| {
                matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
            }));
        }
    }
    files.sort();
    files.dedup();
    files
        .into_iter()
        .map(|p| {
            let m = std::fs::metadata(&p).and_then(|m| m.modified()).ok();
            (p, m)
        })
        .collect()
}
