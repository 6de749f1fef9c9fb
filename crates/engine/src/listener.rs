//! Listening sockets: one `SO_REUSEPORT` socket per worker for each address, so that the kernel
//! spreads connections over the workers and no accept crosses threads. A process started by a
//! binary upgrade takes over its predecessor's sockets (with the connections waiting in their
//! queues) instead of binding new ones: they are registered with [`inherit`] before the
//! gateway starts.

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::Mutex;

use socket2::{Domain, Protocol, Socket, Type};

/// Sockets handed over by the process this one replaces, by role (`api`, `admin`) and
/// configured address.
static INHERITED: Mutex<Option<Inherited>> = Mutex::new(None);

/// Sockets by role and configured address.
type Inherited = HashMap<(String, SocketAddr), Vec<TcpListener>>;

/// Registers sockets handed over by a previous process for `role` and the configured `addr`.
pub fn inherit(role: &str, addr: SocketAddr, sockets: Vec<TcpListener>) {
    let mut map = INHERITED.lock().unwrap_or_else(|e| e.into_inner());
    map.get_or_insert_with(HashMap::new)
        .entry((role.to_owned(), addr))
        .or_default()
        .extend(sockets);
}

/// Takes the inherited sockets of `role` at the configured `addr`, if any.
pub fn take_inherited(role: &str, addr: SocketAddr) -> Option<Vec<TcpListener>> {
    let mut map = INHERITED.lock().unwrap_or_else(|e| e.into_inner());
    map.as_mut()?.remove(&(role.to_owned(), addr))
}

/// Closes the inherited sockets of `role` that no listener took (the new configuration
/// dropped their address); returns how many.
pub fn drop_unclaimed(role: &str) -> usize {
    let mut map = INHERITED.lock().unwrap_or_else(|e| e.into_inner());
    let Some(m) = map.as_mut() else { return 0 };
    let keys: Vec<(String, SocketAddr)> = m.keys().filter(|(r, _)| r == role).cloned().collect();
    keys.iter()
        .filter_map(|k| m.remove(k))
        .map(|v| v.len())
        .sum()
}

/// Binds `count` sockets to `addr` (port 0: the first socket picks a free port, the others take
/// the same), or takes the sockets inherited for it (all of them, binding more if there are
/// fewer than `count`). Returns the bound address and the sockets, non-blocking and listening.
pub fn bind_group(addr: SocketAddr, count: usize) -> io::Result<(SocketAddr, Vec<TcpListener>)> {
    if let Some(mut inherited) = take_inherited("api", addr).filter(|v| !v.is_empty()) {
        let bound = inherited[0].local_addr()?;
        for s in &inherited {
            s.set_nonblocking(true)?;
        }
        while inherited.len() < count {
            inherited.push(bind_one(bound)?);
        }
        return Ok((bound, inherited));
    }
    let first = bind_one(addr)?;
    let bound = first.local_addr()?;
    let mut all = Vec::with_capacity(count.max(1));
    all.push(first);
    for _ in 1..count {
        all.push(bind_one(bound)?);
    }
    Ok((bound, all))
}

fn bind_one(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        // `::` takes IPv4 clients too.
        socket.set_only_v6(false)?;
    }
    socket.set_nodelay(true)?;
    socket.bind(&addr.into())?;
    socket.listen(4096)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}
