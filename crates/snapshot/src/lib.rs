//! The compiled configuration: everything the data plane reads while serving, built once per
//! (re)load by `turnpike-compile` and then never changed. Requests hold the snapshot they
//! started with. This crate holds only the types, so that the data plane (`turnpike-engine`)
//! and the compiler see the same snapshot without depending on each other.

pub mod admission;
mod api;
pub mod health;
pub mod proxy_rules;
pub mod settings;
mod target;
pub mod upstream;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use turnpike_core::Router;

pub use api::{Api, Backend};
pub use settings::{AccessLogSettings, LogField, LogFormat, LogOutput};
pub use settings::{Http2Limits, OutboundProxy, Settings};
pub use target::{DnsOrigin, Node, NodeParts, Transport};
pub use upstream::LivePool;
pub use upstream::{Target, TargetPath, Upstream};

/// The routes of one listening address.
pub struct ListenerRoutes {
    /// The matcher over the APIs of this address.
    pub router: Router<Arc<Api>>,
    /// TLS, when the APIs of this address have `ssl:` (certificates chosen by SNI).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Accept cleartext HTTP/2 with prior knowledge.
    pub h2c: bool,
    /// Log failed TLS handshakes as warnings (else at debug level).
    pub tls_warnings: bool,
    /// Some API's routing test reads the body: requests are read before they are routed.
    pub body_routing: bool,
    /// The forward proxy that has this port to itself, which takes every request.
    pub forward_proxy: Option<Arc<Api>>,
    /// TLS passthrough (`sslProxy:`): when not empty, the port relays TLS connections by their
    /// server name instead of serving HTTP.
    pub passthrough: Arc<[Passthrough]>,
    /// Its connection counters.
    pub stats: Arc<turnpike_telemetry::stats::ListenerStats>,
    /// The counters of requests no API of this address takes (`api="-"`).
    pub unrouted: Arc<turnpike_telemetry::stats::ApiStats>,
}

impl std::fmt::Debug for ListenerRoutes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenerRoutes")
            .field("routes", &self.router.len())
            .field("tls", &self.tls.is_some())
            .field("h2c", &self.h2c)
            .finish()
    }
}

/// A TLS passthrough of a port (`sslProxy:`): connections whose server name (SNI) matches are
/// relayed, still encrypted, to the target.
#[derive(Debug)]
pub struct Passthrough {
    /// For logs: `SSL <hosts>:<port>`.
    pub name: String,
    /// Server-name patterns, lower case; `*` matches any run of characters.
    pub hosts: Vec<String>,
    /// Takes connections without a server name.
    pub use_as_default: bool,
    /// The backend's host name or address.
    pub target_host: String,
    /// The backend's port.
    pub target_port: u16,
    /// Log a line per relayed connection (`sslLog`).
    pub log: bool,
}

impl Passthrough {
    /// True when `server_name` (lower case) matches one of the patterns.
    pub fn matches(&self, server_name: &str) -> bool {
        self.hosts
            .iter()
            .any(|p| glob(p.as_bytes(), server_name.as_bytes()))
    }
}

/// `*`-only glob matching (`*` any run of bytes, including none).
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    // Where the last `*` was, and the text position it stands for so far.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if p < pattern.len() && pattern[p] == text[t] {
            p += 1;
            t += 1;
        } else if let Some((sp, st)) = star {
            p = sp + 1;
            t = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&b| b == b'*')
}

/// Builds [`AddrHasher`]s for the listener map.
pub type AddrHash = std::hash::BuildHasherDefault<AddrHasher>;

/// A multiply-rotate hash for the listener map's socket addresses. Not keyed (no protection
/// against chosen keys), which is fine for keys that come from the configuration; it costs a
/// few instructions where SipHash costs about a hundred.
#[derive(Default, Debug, Clone, Copy)]
pub struct AddrHasher(u64);

impl AddrHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl std::hash::Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u16(&mut self, n: u16) {
        self.add(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
}

/// The whole compiled configuration.
#[derive(Debug)]
pub struct Snapshot {
    /// Routes per configured listening address (port 0 stays 0 here). Looked up on every
    /// request, with a fast hash: the keys come from the configuration, not from clients.
    pub listeners: HashMap<SocketAddr, ListenerRoutes, AddrHash>,
    /// Settings.
    pub settings: Settings,
    /// Other local files the configuration reads — OpenAPI specs, TLS certificates, keys and
    /// truststores, `soapProxy` WSDLs and schemas, files read by policies (validator and
    /// wsdl2openapi WSDLs, JWKS files, htpasswd files) — so that `--watch` reloads when they
    /// change (certificate rotation, key rollover, new users).
    pub spec_files: Vec<std::path::PathBuf>,
    /// Every upstream the APIs forward to (each once), for the health prober.
    pub upstreams: Vec<Arc<Upstream>>,
    /// The APIs `internal://NAME` targets reach, by name: the `internal:` documents and every
    /// named API.
    pub internal: HashMap<String, Arc<Api>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn addr_hash_separates_ports_and_addresses() {
        let addrs: Vec<SocketAddr> = (2000..2100)
            .map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
            .chain((2000..2100).map(|p| SocketAddr::from(([0, 0, 0, 0], p))))
            .chain((2000..2100).map(|p| SocketAddr::from(([0u16; 8], p))))
            .collect();
        let hashes: std::collections::HashSet<u64> = addrs
            .iter()
            .map(|a| AddrHash::default().hash_one(a))
            .collect();
        assert_eq!(hashes.len(), addrs.len());
        let map: HashMap<SocketAddr, usize, AddrHash> =
            addrs.iter().enumerate().map(|(i, a)| (*a, i)).collect();
        for (i, a) in addrs.iter().enumerate() {
            assert_eq!(map.get(a), Some(&i));
        }
    }
}

#[cfg(test)]
mod passthrough_tests {
    use super::*;

    #[test]
    fn server_names_match_their_patterns() {
        let p = Passthrough {
            name: "t".into(),
            hosts: vec!["api.example.com".into(), "*.test".into(), "a*b*c".into()],
            use_as_default: false,
            target_host: "x".into(),
            target_port: 1,
            log: false,
        };
        for yes in [
            "api.example.com",
            "x.test",
            ".test",
            "abc",
            "a-b-c",
            "aXbYbZc",
        ] {
            assert!(p.matches(yes), "{yes}");
        }
        for no in [
            "example.com",
            "api.example.comx",
            "test",
            "ab",
            "acb",
            "abcd",
        ] {
            assert!(!p.matches(no), "{no}");
        }
    }
}
