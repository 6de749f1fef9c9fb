//! `proxy.destinations` compiled into the forward proxy's [`ProxyRules`], and what `validate`
//! warns about forward proxies.

use std::sync::Arc;

use turnpike_config::{ConfigErrors, ConfigSet, DestinationRule, Located, ProxyConfig};
use turnpike_snapshot::proxy_rules::{Dest, ProxyRules, Rule};

/// The rules of the `proxy:` document `p`; every error is reported.
pub fn compile(p: &Located<ProxyConfig>, errors: &mut ConfigErrors) -> Arc<ProxyRules> {
    let Some(d) = &p.value.destinations else {
        return Arc::new(ProxyRules::default());
    };
    let mut list = |rules: &[DestinationRule], key: &str| -> Vec<Rule> {
        rules
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                let at = format!("destinations.{key}[{i}]");
                let dest = match (&r.host, &r.cidr) {
                    (Some(_), Some(_)) => {
                        errors.push(p.error(&at, "give `host` or `cidr`, not both"));
                        return None;
                    }
                    (Some(h), None) => {
                        let h = h.trim().to_ascii_lowercase();
                        let bare = h.strip_prefix("*.").unwrap_or(&h);
                        if bare.is_empty()
                            || !bare
                                .bytes()
                                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
                        {
                            errors.push(p.error(
                                &format!("{at}.host"),
                                format!("`{h}` is not a host name (or `*.` and a domain)"),
                            ));
                            return None;
                        }
                        Dest::Host(h)
                    }
                    (None, Some(c)) => match c
                        .parse::<ipnet::IpNet>()
                        .or_else(|_| c.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                    {
                        Ok(n) => Dest::Net(n),
                        Err(_) => {
                            errors.push(p.error(
                                &format!("{at}.cidr"),
                                format!("`{c}` is not an address or CIDR range"),
                            ));
                            return None;
                        }
                    },
                    (None, None) if !r.ports.is_empty() => Dest::Any,
                    (None, None) => {
                        errors.push(p.error(&at, "needs `host`, `cidr` or `ports`"));
                        return None;
                    }
                };
                Some(Rule {
                    dest,
                    ports: r.ports.clone(),
                })
            })
            .collect()
    };
    let allow = list(&d.allow, "allow");
    let deny = list(&d.deny, "deny");
    Arc::new(ProxyRules { allow, deny })
}

/// What is valid but unwise about forward proxies, each as `file:line:column: key: message`.
pub fn warnings(set: &ConfigSet) -> Vec<String> {
    set.proxies
        .iter()
        .filter(|p| p.value.destinations.is_none())
        .map(|p| {
            let bind = match p.value.ip {
                Some(ip) => format!("it listens on {ip}"),
                None => "it listens on 127.0.0.1 only".to_owned(),
            };
            format!(
                "{}: a forward proxy without `destinations` reaches any public host; {bind}. Add `destinations.allow` rules",
                p.origin.key_at(&p.key),
            )
        })
        .collect()
}
