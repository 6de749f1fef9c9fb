//! The destinations a forward proxy (`proxy:`) may reach: compiled `allow` and `deny` rules,
//! and the addresses no destination may resolve to unless an `allow` rule names them.

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;

/// What one rule matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dest {
    /// Every host (a rule of ports only).
    Any,
    /// A host name (lowercase); with a leading `*.`, every name below the domain.
    Host(String),
    /// An address range.
    Net(IpNet),
}

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The hosts or addresses.
    pub dest: Dest,
    /// The ports (empty: all).
    pub ports: Vec<u16>,
}

impl Rule {
    fn matches(&self, host: &str, ip: Option<IpAddr>, port: u16) -> bool {
        if !self.ports.is_empty() && !self.ports.contains(&port) {
            return false;
        }
        match &self.dest {
            Dest::Any => true,
            Dest::Host(h) => match h.strip_prefix("*.") {
                Some(domain) => host
                    .strip_suffix(domain)
                    .is_some_and(|rest| rest.len() > 1 && rest.ends_with('.')),
                None => host == h,
            },
            Dest::Net(n) => ip.is_some_and(|ip| n.contains(&ip)),
        }
    }
}

/// A forward proxy's rules.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyRules {
    /// When not empty, only destinations one of these matches.
    pub allow: Vec<Rule>,
    /// Destinations never reached.
    pub deny: Vec<Rule>,
}

impl ProxyRules {
    /// Whether the name `host` may be looked up at all (a `deny` rule on the name, or an
    /// `allow` list no rule of which could match it, refuses it before any lookup).
    pub fn name_allowed(&self, host: &str, port: u16) -> bool {
        let host = host.to_ascii_lowercase();
        let ip = host.parse::<IpAddr>().ok();
        if self.deny.iter().any(|r| r.matches(&host, ip, port)) {
            return false;
        }
        // Address rules are checked on the addresses the name resolves to.
        self.allow.is_empty()
            || self
                .allow
                .iter()
                .any(|r| matches!(r.dest, Dest::Net(_)) || r.matches(&host, ip, port))
    }

    /// Whether `addr`, one address `host` resolved to, may be reached. `own` are the
    /// gateway's listening addresses.
    pub fn address_allowed(&self, host: &str, addr: SocketAddr, own: &[SocketAddr]) -> bool {
        let host = host.to_ascii_lowercase();
        let (ip, port) = (canonical(addr.ip()), addr.port());
        if self.deny.iter().any(|r| r.matches(&host, Some(ip), port)) {
            return false;
        }
        let named = self
            .allow
            .iter()
            .any(|r| r.dest != Dest::Any && r.matches(&host, Some(ip), port));
        if !self.allow.is_empty()
            && !named
            && !self.allow.iter().any(|r| r.matches(&host, Some(ip), port))
        {
            return false;
        }
        let own = own
            .iter()
            .any(|l| l.port() == port && (l.ip().is_unspecified() || canonical(l.ip()) == ip));
        if special(ip) || own {
            return named;
        }
        true
    }
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Loopback, link-local, private, shared (CGNAT), unspecified, multicast and broadcast
/// addresses: this machine and its networks, not the internet.
pub fn special(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                || o[0] == 0
                || (o[0] == 100 && (64..128).contains(&o[1]))
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn net(s: &str) -> Rule {
        Rule {
            dest: Dest::Net(s.parse().unwrap()),
            ports: vec![],
        }
    }

    #[test]
    fn this_machine_and_its_networks_need_an_explicit_allow() {
        let open = ProxyRules::default();
        let own = ["0.0.0.0:8080".parse().unwrap()];
        for a in [
            "127.0.0.1:80",
            "10.1.2.3:80",
            "169.254.169.254:80",
            "[::1]:80",
            "[fe80::1]:80",
            "[::ffff:127.0.0.1]:80",
            "100.64.0.1:80",
            "203.0.113.9:8080",
        ] {
            assert!(!open.address_allowed("x", a.parse().unwrap(), &own), "{a}");
        }
        assert!(open.address_allowed("x", "203.0.113.9:443".parse().unwrap(), &own));
        let lan = ProxyRules {
            allow: vec![net("10.0.0.0/8")],
            deny: vec![],
        };
        assert!(lan.address_allowed("x", "10.1.2.3:80".parse().unwrap(), &own));
        assert!(!lan.address_allowed("x", "203.0.113.9:443".parse().unwrap(), &own));
        assert!(!lan.address_allowed("x", "127.0.0.1:80".parse().unwrap(), &own));
    }

    #[test]
    fn host_rules_and_ports() {
        let rules = ProxyRules {
            allow: vec![Rule {
                dest: Dest::Host("*.example.com".into()),
                ports: vec![443],
            }],
            deny: vec![Rule {
                dest: Dest::Host("admin.example.com".into()),
                ports: vec![],
            }],
        };
        assert!(rules.name_allowed("API.example.com", 443));
        assert!(!rules.name_allowed("api.example.com", 80));
        assert!(!rules.name_allowed("admin.example.com", 443));
        assert!(!rules.name_allowed("example.com", 443));
        assert!(!rules.name_allowed("evil.com", 443));
        // A name the operator allowed may resolve to a private address.
        assert!(rules.address_allowed("api.example.com", "10.0.0.5:443".parse().unwrap(), &[]));
    }
}
