//! Listening sockets: one `SO_REUSEPORT` socket per worker for each address, so that the kernel
//! spreads connections over the workers and no accept crosses threads.

use std::io;
use std::net::{SocketAddr, TcpListener};

use socket2::{Domain, Protocol, Socket, Type};

/// Binds `count` sockets to `addr` (port 0: the first socket picks a free port, the others take
/// the same). Returns the bound address and the sockets, non-blocking and listening.
pub fn bind_group(addr: SocketAddr, count: usize) -> io::Result<(SocketAddr, Vec<TcpListener>)> {
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
