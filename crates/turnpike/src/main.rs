//! `turnpike`: the command line. Parses arguments and wires the config and engine crates
//! together; no gateway logic lives here.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

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
        Command::Run { config, watch } => {
            init_logging();
            match run(config, watch) {
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
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn validate(config: &[PathBuf]) -> ExitCode {
    match turnpike::load_and_compile(config) {
        Ok((_, snap)) => {
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
}

fn run(config: Vec<PathBuf>, watch: bool) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let signals = {
        let _guard = rt.enter();
        Signals {
            hup: signal(SignalKind::hangup())?,
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        }
    };
    let control = turnpike::Control::start(config)?;
    for (configured, bound) in control.gateway().listeners() {
        if configured == bound {
            tracing::info!("listening on {bound}");
        } else {
            tracing::info!("listening on {bound} (configured {configured})");
        }
    }
    rt.block_on(control_loop(&control.manager, watch, signals));
    tracing::info!("shutting down: finishing in-flight requests");
    control.shutdown();
    tracing::info!("stopped");
    Ok(())
}

/// Waits for signals (SIGHUP reloads; SIGTERM and SIGINT stop) and, with `--watch`, for changed
/// configuration files. Returns when the gateway should stop.
async fn control_loop(manager: &turnpike_admin::Manager, watch: bool, signals: Signals) {
    let Signals {
        mut hup,
        mut term,
        mut int,
    } = signals;
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    let mut seen = fingerprint(manager);
    loop {
        tokio::select! {
            _ = hup.recv() => {
                tracing::info!("SIGHUP: reloading configuration");
                reload(manager, "signal");
                seen = fingerprint(manager);
            }
            _ = term.recv() => return,
            _ = int.recv() => return,
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
