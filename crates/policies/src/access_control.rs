//! `accessControl`: allow and deny lists of client IPs and CIDR ranges (IPv4 and IPv6;
//! IPv4-mapped IPv6 clients are matched as IPv4). Deny is checked first; a non-empty allow list
//! denies everyone not on it. Membrane's form, an ordered list of `allow`/`deny` rules, is read
//! as such: the first rule that matches decides, and a client no rule matches is denied. A
//! rule value that is not an IP, a CIDR range or `localhost` is a regular expression on the
//! client's host name, which the system's resolver gives for its address (`getnameinfo`, as
//! Membrane's `getCanonicalHostName`); a request that reaches such a rule waits for that lookup
//! once, and the name is kept for a minute per address. 403 problem+json.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ipnet::IpNet;
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::policy::{Resume, Wait};
use turnpike_core::problems;
use turnpike_core::{CompileContext, CompileError, Phases, PolicyFactory};
use turnpike_core::{Exchange, Outcome, Policy, Problem};

use crate::err;
use crate::rate_limit::{canonical, parse_net};

/// `accessControl`: IP allow and deny lists, or Membrane's ordered rules.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum AccessControlSettings {
    /// Allow and deny lists.
    Lists {
        /// Clients allowed (IPs or CIDR ranges, IPv4 and IPv6); when given, everyone else is
        /// denied.
        #[serde(default)]
        allow: Vec<String>,
        /// Clients denied (checked first).
        #[serde(default)]
        deny: Vec<String>,
    },
    /// Membrane's ordered rules: the first that matches decides; no match denies.
    Rules(Vec<AccessRule>),
}

/// One of Membrane's rules: exactly one of `allow` and `deny`, with an IP, a CIDR range, or
/// `localhost` (the loopback addresses).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AccessRule {
    /// Allow clients matching this.
    #[serde(default)]
    pub allow: Option<String>,
    /// Deny clients matching this.
    #[serde(default)]
    pub deny: Option<String>,
}

/// What one of Membrane's rules matches.
#[derive(Debug)]
enum Matcher {
    /// Addresses.
    Nets(Vec<IpNet>),
    /// The client's host name, in full.
    Host(regex::Regex),
}

/// Host names of client addresses, as long as they are fresh.
type NameCache = Mutex<HashMap<IpAddr, (Instant, Option<Arc<str>>)>>;

/// How long a looked-up host name is used, and how long a lookup may take.
const NAME_TTL: Duration = Duration::from_secs(60);
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);
/// Most addresses whose names are kept (beyond, the cache starts over).
const MAX_NAMES: usize = 65_536;

/// The compiled policy.
pub struct AccessControl {
    allow: Vec<IpNet>,
    deny: Vec<IpNet>,
    /// Membrane's ordered rules (what matches, allow); when set, `allow` and `deny` are unused.
    rules: Option<Arc<Vec<(Matcher, bool)>>>,
    names: Arc<NameCache>,
}

/// What one of Membrane's rule values matches: an IP, a CIDR range, `localhost`, or else a
/// regular expression on the host name.
fn rule_matcher(value: &str) -> Result<Matcher, String> {
    let v = value.trim();
    if matches!(v, "localhost" | "^localhost$") {
        return Ok(Matcher::Nets(vec![
            "127.0.0.0/8".parse().map_err(|_| "loopback".to_owned())?,
            "::1/128".parse().map_err(|_| "loopback".to_owned())?,
        ]));
    }
    if let Ok(n) = parse_net(v) {
        return Ok(Matcher::Nets(vec![n]));
    }
    regex::Regex::new(&format!("^(?:{v})$"))
        .map(Matcher::Host)
        .map_err(|e| {
            format!("`{v}` is neither an IP address, a CIDR range nor a host name pattern: {e}")
        })
}

/// The decision of `rules` for `ip` with host name `name` (`None`: not looked up yet),
/// starting at rule `from`: allowed, denied, or the index of a host rule that needs the name.
fn decide(
    rules: &[(Matcher, bool)],
    ip: IpAddr,
    name: Option<Option<&str>>,
    from: usize,
) -> Result<bool, usize> {
    for (i, (m, allow)) in rules.iter().enumerate().skip(from) {
        let hit = match m {
            Matcher::Nets(nets) => nets.iter().any(|n| n.contains(&ip)),
            Matcher::Host(re) => match name {
                None => return Err(i),
                Some(n) => n.is_some_and(|n| re.is_match(n)),
            },
        };
        if hit {
            return Ok(*allow);
        }
    }
    Ok(false)
}

fn denied(ip: IpAddr) -> Outcome {
    Outcome::Reject(
        Problem::new(&problems::IP_DENIED)
            .with_detail(format!("requests from {ip} are not allowed")),
    )
}

impl PolicyFactory for AccessControl {
    const NAME: &'static str = "accessControl";
    const PHASES: Phases = Phases::REQUEST;
    type Settings = AccessControlSettings;

    /// Compiles the policy; every entry must be an IP or CIDR range.
    fn compile(c: AccessControlSettings, _ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        let (allow, deny) = match c {
            AccessControlSettings::Lists { allow, deny } => (allow, deny),
            AccessControlSettings::Rules(list) => {
                if list.is_empty() {
                    return Err(err("", "needs at least one rule"));
                }
                let mut rules = Vec::with_capacity(list.len());
                for (i, r) in list.iter().enumerate() {
                    let (value, allow, which) = match (&r.allow, &r.deny) {
                        (Some(v), None) => (v, true, "allow"),
                        (None, Some(v)) => (v, false, "deny"),
                        _ => {
                            return Err(err(
                                &format!("[{i}]"),
                                "a rule has exactly one of `allow` and `deny`",
                            ))
                        }
                    };
                    let m = rule_matcher(value).map_err(|m| err(&format!("[{i}].{which}"), m))?;
                    rules.push((m, allow));
                }
                return Ok(AccessControl {
                    allow: Vec::new(),
                    deny: Vec::new(),
                    rules: Some(Arc::new(rules)),
                    names: Arc::default(),
                });
            }
        };
        let c = AccessControlSettingsLists { allow, deny };
        if c.allow.is_empty() && c.deny.is_empty() {
            return Err(err("", "give `allow` or `deny`"));
        }
        let parse = |list: &[String], key: &str| -> Result<Vec<IpNet>, CompileError> {
            list.iter()
                .enumerate()
                .map(|(i, s)| parse_net(s).map_err(|m| err(&format!("{key}[{i}]"), m)))
                .collect()
        };
        Ok(AccessControl {
            allow: parse(&c.allow, "allow")?,
            deny: parse(&c.deny, "deny")?,
            rules: None,
            names: Arc::default(),
        })
    }
}

/// The allow and deny lists.
struct AccessControlSettingsLists {
    allow: Vec<String>,
    deny: Vec<String>,
}

impl Policy for AccessControl {
    fn name(&self) -> &'static str {
        "accessControl"
    }

    fn response_needs_request(&self) -> bool {
        false
    }

    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let ip = canonical(ex.client.ip());
        let Some(rules) = &self.rules else {
            let denied_here = self.deny.iter().any(|n| n.contains(&ip))
                || (!self.allow.is_empty() && !self.allow.iter().any(|n| n.contains(&ip)));
            return if denied_here {
                denied(ip)
            } else {
                Outcome::Continue
            };
        };
        let cached = {
            let names = self.names.lock().unwrap_or_else(|e| e.into_inner());
            names
                .get(&ip)
                .filter(|(at, _)| at.elapsed() < NAME_TTL)
                .map(|(_, n)| n.clone())
        };
        let at = match decide(rules, ip, cached.as_ref().map(|n| n.as_deref()), 0) {
            Ok(true) => return Outcome::Continue,
            Ok(false) => return denied(ip),
            Err(at) => at,
        };
        // A host name rule is reached and the name is not known: look it up, then go on from
        // that rule.
        let (rules, names) = (Arc::clone(rules), Arc::clone(&self.names));
        Outcome::Wait(Wait::new(
            async move {
                let name: Option<Arc<str>> = turnpike_dns::reverse(ip, LOOKUP_TIMEOUT)
                    .await
                    .map(Arc::from);
                {
                    let mut cache = names.lock().unwrap_or_else(|e| e.into_inner());
                    if cache.len() >= MAX_NAMES {
                        cache.clear();
                    }
                    cache.insert(ip, (Instant::now(), name.clone()));
                }
                Box::new(move |_: &mut Exchange| {
                    match decide(&rules, ip, Some(name.as_deref()), at) {
                        Ok(true) => Outcome::Continue,
                        _ => denied(ip),
                    }
                }) as Resume
            },
            LOOKUP_TIMEOUT + Duration::from_secs(1),
            move |_| denied(ip),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{exchange, plain};

    fn compile(v: serde_json::Value) -> Result<AccessControl, CompileError> {
        AccessControl::compile(serde_json::from_value(v).unwrap(), &plain())
    }

    fn allowed(p: &AccessControl, ip: &str) -> bool {
        let mut ex = exchange("GET", "/", &[], "");
        ex.client = format!("{ip}:1000").parse().unwrap();
        matches!(p.on_request(&mut ex), Outcome::Continue)
    }

    #[test]
    fn membranes_rules_decide_in_order_and_deny_the_rest() {
        let p = compile(serde_json::json!([
            {"deny": "127.0.0.1"}, {"allow": "localhost"}, {"allow": "10.0.0.0/8"}
        ]))
        .unwrap();
        assert!(
            !allowed(&p, "127.0.0.1"),
            "the first rule that matches decides"
        );
        assert!(allowed(&p, "127.0.0.2"));
        assert!(allowed(&p, "[::1]"));
        assert!(allowed(&p, "10.1.2.3"));
        assert!(!allowed(&p, "192.0.2.1"), "no rule matches: denied");
        let lists =
            compile(serde_json::json!({"deny": ["10.0.0.1"], "allow": ["10.0.0.0/8"]})).unwrap();
        assert!(allowed(&lists, "10.0.0.2") && !allowed(&lists, "10.0.0.1"));
    }

    #[test]
    fn bad_rules_are_load_errors() {
        for (v, says) in [
            (
                serde_json::json!([{"deny": "(unclosed"}]),
                "neither an IP address",
            ),
            (
                serde_json::json!([{"allow": "a", "deny": "b"}]),
                "exactly one of",
            ),
            (serde_json::json!([]), "at least one rule"),
        ] {
            let e = compile(v.clone()).err().unwrap();
            assert!(format!("{e:?}").contains(says), "{v}: {e:?}");
        }
    }

    #[test]
    fn host_name_rules_decide_once_the_name_is_known() {
        let rules = vec![
            (rule_matcher("127.0.0.0/8").unwrap(), false),
            (rule_matcher(".*\\.example\\.com").unwrap(), false),
            (rule_matcher("0.0.0.0/0").unwrap(), true),
        ];
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        assert_eq!(
            decide(&rules, ip, None, 0),
            Err(1),
            "the host rule needs the name"
        );
        assert_eq!(
            decide(&rules, ip, Some(Some("a.example.com")), 1),
            Ok(false)
        );
        assert_eq!(decide(&rules, ip, Some(Some("example.org")), 1), Ok(true));
        assert_eq!(
            decide(&rules, ip, Some(None), 1),
            Ok(true),
            "no name: the rule does not match"
        );
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(
            decide(&rules, local, None, 0),
            Ok(false),
            "decided before the host rule"
        );
    }

    #[tokio::test]
    async fn a_host_rule_waits_for_the_lookup_and_caches_it() {
        // 127.0.0.2's name by the system resolver: whatever it is, a pattern for "anything"
        // with a dot or none decides after one lookup.
        let p =
            compile(serde_json::json!([{"deny": "nothing-matches-this"}, {"allow": "0.0.0.0/0"}]))
                .unwrap();
        let mut ex = exchange("GET", "/", &[], "");
        ex.client = "127.0.0.2:5000".parse().unwrap();
        let Outcome::Wait(w) = p.on_request(&mut ex) else {
            panic!("a lookup first")
        };
        let resume = w.future.await;
        assert!(matches!(resume(&mut ex), Outcome::Continue));
        // The name is known now: no second lookup.
        assert!(matches!(p.on_request(&mut ex), Outcome::Continue));
    }
}
