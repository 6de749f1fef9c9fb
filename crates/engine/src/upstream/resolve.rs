//! Backend addresses by host name, looked up at most once per refresh interval (the target's
//! `dnsRefresh`) per worker and host (a burst of new connections makes one lookup, not one
//! blocking thread each). IP literals are never looked up. The address that last accepted a
//! connection is tried first.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

struct Resolved {
    addrs: Vec<SocketAddr>,
    at: Instant,
    ttl: Duration,
}

impl Resolved {
    fn fresh(&self) -> bool {
        self.at.elapsed() < self.ttl
    }
}

type Entry = Rc<Mutex<Option<Resolved>>>;

/// One worker's cache of looked-up backend addresses, keyed by transport id.
#[derive(Default)]
pub struct Resolver {
    entries: RefCell<HashMap<u64, Entry>>,
}

impl Resolver {
    /// The addresses of `host:port` (looked up with `dns`), best first, looked up again when
    /// the last answer is older than `ttl`. Concurrent callers for the same key wait for one
    /// lookup.
    pub async fn addresses(
        &self,
        key: u64,
        host: &str,
        port: u16,
        ttl: Duration,
        dns: &turnpike_dns::Dns,
    ) -> io::Result<Vec<SocketAddr>> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        let entry = Rc::clone(self.entries.borrow_mut().entry(key).or_default());
        let mut slot = entry.lock().await;
        if let Some(r) = slot.as_ref().filter(|r| r.fresh()) {
            return Ok(r.addrs.clone());
        }
        let addrs = dns.lookup(host, port).await?;
        *slot = Some(Resolved {
            addrs: addrs.clone(),
            at: Instant::now(),
            ttl,
        });
        Ok(addrs)
    }

    /// Remembers that `addr` accepted a connection: it is tried first next time.
    pub fn prefer(&self, key: u64, addr: SocketAddr) {
        let Some(entry) = self.entries.borrow().get(&key).cloned() else {
            return;
        };
        let Ok(mut slot) = entry.try_lock() else {
            return;
        };
        if let Some(r) = slot.as_mut() {
            if let Some(i) = r.addrs.iter().position(|a| *a == addr) {
                r.addrs[..=i].rotate_right(1);
            }
        }
    }
}

impl Resolver {
    /// Forgets stale answers (and those of targets a reload removed, whose ids
    /// never come back). Called by the pool's sweep.
    pub fn sweep(&self) {
        self.entries
            .borrow_mut()
            .retain(|_, entry| match entry.try_lock() {
                Ok(slot) => slot.as_ref().is_some_and(Resolved::fresh),
                Err(_) => true, // a lookup is running
            });
    }
}

/// Connects to the first of `addrs` that accepts.
pub async fn connect(addrs: &[SocketAddr]) -> io::Result<tokio::net::TcpStream> {
    let mut last = None;
    for addr in addrs {
        match tokio::net::TcpStream::connect(addr).await {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(30);
    const SYSTEM: turnpike_dns::Dns = turnpike_dns::Dns::System;

    #[tokio::test]
    async fn literals_and_names() {
        let r = Resolver::default();
        assert_eq!(
            r.addresses(1, "127.0.0.1", 80, TTL, &SYSTEM).await.unwrap(),
            vec![SocketAddr::from(([127, 0, 0, 1], 80))]
        );
        assert_eq!(
            r.addresses(2, "::1", 81, TTL, &SYSTEM).await.unwrap()[0].port(),
            81
        );
        let first = r.addresses(3, "localhost", 82, TTL, &SYSTEM).await.unwrap();
        assert!(first.iter().all(|a| a.ip().is_loopback()));
        // Cached: the preferred address moves to the front.
        let last = *first.last().unwrap();
        r.prefer(3, last);
        assert_eq!(
            r.addresses(3, "localhost", 82, TTL, &SYSTEM).await.unwrap()[0],
            last
        );
        assert!(r
            .addresses(4, "no-such-host.invalid", 80, TTL, &SYSTEM)
            .await
            .is_err());
        // Fresh answers survive a sweep; the failed lookup's empty entry does not.
        r.sweep();
        assert_eq!(r.entries.borrow().len(), 1);
    }

    #[tokio::test]
    async fn answers_expire_after_the_refresh_interval() {
        let r = Resolver::default();
        let short = Duration::from_millis(20);
        r.addresses(5, "localhost", 83, short, &SYSTEM)
            .await
            .unwrap();
        assert!(r.entries.borrow()[&5]
            .try_lock()
            .unwrap()
            .as_ref()
            .unwrap()
            .fresh());
        tokio::time::sleep(Duration::from_millis(40)).await;
        r.sweep();
        assert!(r.entries.borrow().is_empty());
        // A new lookup stamps a new answer.
        r.addresses(5, "localhost", 83, short, &SYSTEM)
            .await
            .unwrap();
        assert_eq!(r.entries.borrow().len(), 1);
    }
}
