//! `accessControl`: allow and deny lists of client IPs and CIDR ranges (IPv4 and IPv6;
//! IPv4-mapped IPv6 clients are matched as IPv4). Deny is checked first; a non-empty allow list
//! denies everyone not on it. Membrane's form, an ordered list of `allow`/`deny` rules, is read
//! as such: the first rule that matches decides, and a client no rule matches is denied.
//! 403 problem+json.

use ipnet::IpNet;
use schemars::JsonSchema;
use serde::Deserialize;
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

/// The compiled policy.
pub struct AccessControl {
    allow: Vec<IpNet>,
    deny: Vec<IpNet>,
    /// Membrane's ordered rules (nets, allow); when set, `allow` and `deny` are unused.
    rules: Option<Vec<(Vec<IpNet>, bool)>>,
}

/// The nets of one of Membrane's rule values: an IP, a CIDR range, or `localhost`.
fn rule_nets(value: &str) -> Result<Vec<IpNet>, String> {
    let v = value.trim();
    if matches!(v, "localhost" | "^localhost$") {
        return Ok(vec![
            "127.0.0.0/8".parse().map_err(|_| "loopback".to_owned())?,
            "::1/128".parse().map_err(|_| "loopback".to_owned())?,
        ]);
    }
    parse_net(v).map(|n| vec![n]).map_err(|_| {
        format!(
            "`{v}` is not an IP address or CIDR range: host name patterns would need a reverse DNS lookup per client, which Turnpike does not make (write the clients' address ranges)"
        )
    })
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
                    let nets = rule_nets(value).map_err(|m| err(&format!("[{i}].{which}"), m))?;
                    rules.push((nets, allow));
                }
                return Ok(AccessControl {
                    allow: Vec::new(),
                    deny: Vec::new(),
                    rules: Some(rules),
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
        let denied = match &self.rules {
            Some(rules) => !rules
                .iter()
                .find(|(nets, _)| nets.iter().any(|n| n.contains(&ip)))
                .is_some_and(|(_, allow)| *allow),
            None => {
                self.deny.iter().any(|n| n.contains(&ip))
                    || (!self.allow.is_empty() && !self.allow.iter().any(|n| n.contains(&ip)))
            }
        };
        if denied {
            return Outcome::Reject(
                Problem::new(&problems::IP_DENIED)
                    .with_detail(format!("requests from {ip} are not allowed")),
            );
        }
        Outcome::Continue
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
    fn host_name_patterns_and_bad_rules_are_load_errors() {
        for (v, says) in [
            (
                serde_json::json!([{"deny": ".*\\.example\\.com"}]),
                "reverse DNS",
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
}
