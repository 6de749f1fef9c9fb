//! Looking up backend host names: with the system's resolver (`getaddrinfo`, so `/etc/hosts`
//! and the system's name servers), or with the name servers `gateway.resolver` lists, as
//! nginx's `resolver` does: those are asked for A and AAAA records directly, with no cache of
//! the gateway's own (how long an answer is used is the targets' `dnsRefresh`).
//!
//! Lookups run when a connection to a host name is opened and its last answer is older than
//! `dnsRefresh`, at load time (a pool's host names become one node per address), and in the
//! control plane's watch of those names.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use hickory_resolver::config::{
    LookupIpStrategy, NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts,
};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::proto::xfer::Protocol;
use hickory_resolver::TokioResolver;

/// Name servers to ask instead of the system's resolver.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Servers {
    /// Asked over UDP (TCP when an answer is truncated), in turn.
    pub nameservers: Vec<SocketAddr>,
    /// How long one query may take.
    pub timeout: Duration,
}

/// How host names are looked up.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum Dns {
    /// The system's resolver.
    #[default]
    System,
    /// The given name servers.
    Servers(Arc<Servers>),
}

fn not_found(host: &str) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("`{host}` has no address"))
}

impl Servers {
    fn resolver(&self) -> TokioResolver {
        let mut group = Vec::with_capacity(self.nameservers.len() * 2);
        for &addr in &self.nameservers {
            group.push(NameServerConfig::new(addr, Protocol::Udp));
            group.push(NameServerConfig::new(addr, Protocol::Tcp));
        }
        let config = ResolverConfig::from_parts(None, Vec::new(), group);
        let mut opts = ResolverOpts::default();
        opts.timeout = self.timeout;
        opts.attempts = 1;
        opts.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        opts.cache_size = 0;
        opts.use_hosts_file = ResolveHosts::Never;
        opts.ndots = 0;
        TokioResolver::builder_with_config(config, TokioConnectionProvider::default())
            .with_options(opts)
            .build()
    }
}

impl Dns {
    /// The addresses of `host` (an IP literal is its own address) with `port`, in the
    /// resolver's order, without duplicates; an error when there is none. Runs on the caller's
    /// tokio runtime.
    pub async fn lookup(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        let mut addrs: Vec<SocketAddr> = match self {
            Dns::System => tokio::net::lookup_host((host, port)).await?.collect(),
            Dns::Servers(s) => {
                // A fully qualified name: no search domains.
                let fqdn = format!("{}.", bare.trim_end_matches('.'));
                s.resolver()
                    .lookup_ip(fqdn.as_str())
                    .await
                    .map_err(|e| io::Error::other(format!("looking up `{host}`: {e}")))?
                    .iter()
                    .map(|ip| SocketAddr::new(ip, port))
                    .collect()
            }
        };
        let mut seen = std::collections::HashSet::new();
        addrs.retain(|a| seen.insert(*a));
        if addrs.is_empty() {
            return Err(not_found(host));
        }
        Ok(addrs)
    }

    /// [`Dns::lookup`] for callers outside an async runtime, or inside one that must not be
    /// blocked on: the lookup runs on a thread of its own (load time, the control plane).
    pub fn lookup_blocking(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()?;
                    rt.block_on(self.lookup(host, port))
                })
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("the lookup thread failed")))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn literals_and_the_system_resolver() {
        let d = Dns::System;
        assert_eq!(
            d.lookup("127.0.0.1", 80).await.unwrap(),
            vec![SocketAddr::from(([127, 0, 0, 1], 80))]
        );
        assert_eq!(d.lookup("[::1]", 81).await.unwrap()[0].port(), 81);
        let local = d.lookup("localhost", 82).await.unwrap();
        assert!(local.iter().all(|a| a.ip().is_loopback() && a.port() == 82));
        assert!(d.lookup("no-such-host.invalid", 80).await.is_err());
        assert_eq!(
            d.lookup_blocking("localhost", 83).unwrap()[0].port(),
            83,
            "the blocking form works inside a runtime too"
        );
    }

    #[test]
    fn a_name_server_that_does_not_answer_is_an_error_within_the_timeout() {
        // A bound UDP socket that never answers.
        let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let d = Dns::Servers(Arc::new(Servers {
            nameservers: vec![silent.local_addr().unwrap()],
            timeout: Duration::from_millis(200),
        }));
        let start = std::time::Instant::now();
        assert!(d.lookup_blocking("backend.test", 80).is_err());
        assert!(start.elapsed() < Duration::from_secs(3));
        assert_eq!(
            d.lookup_blocking("10.1.2.3", 80).unwrap(),
            vec![SocketAddr::from(([10, 1, 2, 3], 80))]
        );
    }
}

/// The host name of `ip` by the system's resolver (`getnameinfo`: `/etc/hosts`, then PTR
/// records), as Membrane's host name rules read it; `None` when it has none or the lookup does
/// not finish within `timeout`. The lookup blocks, so it runs on the runtime's blocking pool.
pub async fn reverse(ip: IpAddr, timeout: Duration) -> Option<String> {
    let lookup = tokio::task::spawn_blocking(move || dns_lookup::lookup_addr(&ip));
    match tokio::time::timeout(timeout, lookup).await {
        Ok(Ok(Ok(name))) if name.parse::<IpAddr>().is_err() => {
            Some(name.trim_end_matches('.').to_owned())
        }
        _ => None,
    }
}

#[cfg(test)]
mod reverse_tests {
    #[tokio::test]
    async fn loopback_has_a_name_and_a_timeout_is_none() {
        let name = super::reverse(
            "127.0.0.1".parse().unwrap(),
            std::time::Duration::from_secs(5),
        )
        .await;
        assert!(name.is_some_and(|n| !n.is_empty()));
        let none = super::reverse(
            "192.0.2.1".parse().unwrap(),
            std::time::Duration::from_millis(0),
        )
        .await;
        assert!(none.is_none());
    }
}
