//! `accessControl`: allow and deny lists of client IPs and CIDR ranges (IPv4 and IPv6;
//! IPv4-mapped IPv6 clients are matched as IPv4). Deny is checked first; a non-empty allow list
//! denies everyone not on it. 403 problem+json.

use ipnet::IpNet;
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::problems;
use turnpike_core::{CompileContext, CompileError, Phases, PolicyFactory};
use turnpike_core::{Exchange, Outcome, Policy, Problem};

use crate::err;
use crate::rate_limit::{canonical, parse_net};

/// `accessControl`: IP allow and deny lists.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AccessControlSettings {
    /// Clients allowed (IPs or CIDR ranges, IPv4 and IPv6); when given, everyone else is denied.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Clients denied (checked first).
    #[serde(default)]
    pub deny: Vec<String>,
}

/// The compiled policy.
pub struct AccessControl {
    allow: Vec<IpNet>,
    deny: Vec<IpNet>,
}

impl PolicyFactory for AccessControl {
    const NAME: &'static str = "accessControl";
    const PHASES: Phases = Phases::REQUEST;
    type Settings = AccessControlSettings;

    /// Compiles the policy; every entry must be an IP or CIDR range.
    fn compile(c: AccessControlSettings, _ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
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
        })
    }
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
        let denied = self.deny.iter().any(|n| n.contains(&ip))
            || (!self.allow.is_empty() && !self.allow.iter().any(|n| n.contains(&ip)));
        if denied {
            return Outcome::Reject(
                Problem::new(&problems::IP_DENIED)
                    .with_detail(format!("requests from {ip} are not allowed")),
            );
        }
        Outcome::Continue
    }
}
