//! Zero-downtime binary upgrades, as HAProxy and Envoy do them: the running process starts the
//! new binary and hands it its listening sockets over a Unix socket (`SCM_RIGHTS`), so the
//! connections waiting in their queues are accepted by the new process and none is refused.
//! Once the new process says it serves, the old one stops accepting and drains: its HTTP/1.1
//! connections answer their next request with `Connection: close`, HTTP/2 ones get GOAWAY.
//!
//! The handover socket lives in a fresh folder only this user can enter, and the old process
//! talks only to the process it started (checked with `SO_PEERCRED`).

use std::ffi::OsString;
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use rustix::net::{
    self, AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};

/// The environment variable that tells a new process where to take its sockets from.
pub const ENV: &str = "TURNPIKE_UPGRADE_SOCKET";

/// How long the new process may take to start serving.
const READY_WAIT: Duration = Duration::from_secs(120);

/// Sockets per message (below the kernel's `SCM_MAX_FD` of 253).
const PER_MESSAGE: usize = 64;

#[derive(serde::Serialize, serde::Deserialize)]
struct Group {
    role: String,
    configured: String,
    #[serde(default)]
    end: bool,
}

/// The new process's side of the handover, to report that it serves.
pub struct Handover {
    socket: OwnedFd,
}

impl Handover {
    /// Tells the old process that this one serves: it stops accepting and drains.
    pub fn ready(self) -> std::io::Result<()> {
        net::send(&self.socket, b"ready", SendFlags::empty())?;
        Ok(())
    }

    /// Tells the old process that this one failed to start: it goes on serving.
    pub fn failed(self, why: &str) {
        let msg = format!("failed: {why}");
        let _ = net::send(&self.socket, msg.as_bytes(), SendFlags::empty());
    }
}

/// In a process started by an upgrade (`TURNPIKE_UPGRADE_SOCKET` set): takes over the old
/// process's sockets, registering them for the gateway and the admin API to use.
pub fn inherit() -> anyhow::Result<Option<Handover>> {
    let Some(path) = std::env::var_os(ENV) else {
        return Ok(None);
    };
    let socket = net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    let addr = SocketAddrUnix::new(Path::new(&path))?;
    net::connect(&socket, &addr).context("cannot reach the process being replaced")?;
    let mut count = 0;
    loop {
        let mut data = vec![0u8; 4096];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(PER_MESSAGE))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let msg = net::recvmsg(
            &socket,
            &mut [IoSliceMut::new(&mut data)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        )?;
        if msg.bytes == 0 {
            bail!("the process being replaced closed the handover");
        }
        let group: Group =
            serde_json::from_slice(&data[..msg.bytes]).context("unreadable handover message")?;
        let mut sockets = Vec::new();
        for m in control.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = m {
                sockets.extend(fds.map(TcpListener::from));
            }
        }
        if group.end {
            break;
        }
        let configured: SocketAddr = group
            .configured
            .parse()
            .context("unreadable address in the handover")?;
        count += sockets.len();
        turnpike_engine::listener::inherit(&group.role, configured, sockets);
    }
    tracing::info!("took over {count} listening sockets from the previous process");
    Ok(Some(Handover { socket }))
}

/// In the running process: starts `exe` with `args`, hands it every listening socket, and
/// waits until it serves. Returns its process id; on error the new process is stopped and this
/// one goes on serving.
pub fn hand_over(control: &crate::Control, exe: &Path, args: &[OsString]) -> anyhow::Result<u32> {
    let dir = private_dir()?;
    let result = hand_over_in(control, exe, args, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn hand_over_in(
    control: &crate::Control,
    exe: &Path,
    args: &[OsString],
    dir: &Path,
) -> anyhow::Result<u32> {
    let path = dir.join("handover.sock");
    let listener = net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    net::bind(&listener, &SocketAddrUnix::new(&path)?)?;
    net::listen(&listener, 4)?;
    net::sockopt::set_socket_timeout(
        &listener,
        net::sockopt::Timeout::Recv,
        Some(Duration::from_millis(200)),
    )?;
    let mut child = std::process::Command::new(exe)
        .args(args)
        .env(ENV, &path)
        .spawn()
        .with_context(|| format!("cannot start {}", exe.display()))?;
    let pid = child.id();
    let outcome = (|| -> anyhow::Result<()> {
        let started = Instant::now();
        // The new process connects; anyone else is turned away.
        let conn = loop {
            match net::accept(&listener) {
                Ok(conn) => {
                    let peer = net::sockopt::socket_peercred(&conn)?;
                    if peer.pid.as_raw_nonzero().get() as u32 == pid {
                        break conn;
                    }
                    tracing::warn!(
                        pid = peer.pid.as_raw_nonzero().get(),
                        "upgrade: a stranger connected to the handover socket"
                    );
                }
                Err(e) if e == rustix::io::Errno::AGAIN || e == rustix::io::Errno::INTR => {}
                Err(e) => return Err(e.into()),
            }
            if let Some(status) = child.try_wait()? {
                bail!("the new process exited ({status}) before taking over");
            }
            if started.elapsed() > READY_WAIT {
                bail!("the new process did not connect within {READY_WAIT:?}");
            }
        };
        net::sockopt::set_socket_timeout(
            &conn,
            net::sockopt::Timeout::Recv,
            Some(Duration::from_millis(200)),
        )?;
        for (configured, _, sockets) in control.gateway().listening_sockets()? {
            send_group(&conn, "api", configured, &sockets)?;
        }
        if let Some((configured, socket)) = control.admin_socket() {
            send_group(&conn, "admin", configured, std::slice::from_ref(&socket))?;
        }
        let end = serde_json::to_vec(&Group {
            role: String::new(),
            configured: String::new(),
            end: true,
        })?;
        net::send(&conn, &end, SendFlags::empty())?;
        // It compiles its configuration and opens what is new; then it says so.
        let mut buf = [0u8; 1024];
        loop {
            match net::recv(&conn, &mut buf, RecvFlags::empty()) {
                Ok((0, _)) => bail!("the new process closed the handover before serving"),
                Ok((n, _)) => {
                    let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
                    if msg == "ready" {
                        return Ok(());
                    }
                    bail!(
                        "the new process could not start: {}",
                        msg.trim_start_matches("failed: ")
                    );
                }
                Err(e) if e == rustix::io::Errno::AGAIN || e == rustix::io::Errno::INTR => {}
                Err(e) => return Err(e.into()),
            }
            if let Some(status) = child.try_wait()? {
                bail!("the new process exited ({status}) before serving");
            }
            if started.elapsed() > READY_WAIT {
                bail!("the new process did not serve within {READY_WAIT:?}");
            }
        }
    })();
    match outcome {
        Ok(()) => Ok(pid),
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
    }
}

fn send_group(
    conn: &OwnedFd,
    role: &str,
    configured: SocketAddr,
    sockets: &[TcpListener],
) -> anyhow::Result<()> {
    for chunk in sockets.chunks(PER_MESSAGE) {
        let header = serde_json::to_vec(&Group {
            role: role.to_owned(),
            configured: configured.to_string(),
            end: false,
        })?;
        let fds: Vec<_> = chunk.iter().map(|s| s.as_fd()).collect();
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(PER_MESSAGE))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err(anyhow!("too many sockets for one handover message"));
        }
        net::sendmsg(
            conn,
            &[IoSlice::new(&header)],
            &mut control,
            SendFlags::empty(),
        )?;
    }
    Ok(())
}

/// A new folder only this user can enter, for the handover socket.
fn private_dir() -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!("turnpike-upgrade-{}-{nonce}", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}
