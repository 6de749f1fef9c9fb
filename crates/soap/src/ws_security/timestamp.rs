//! `wsu:Timestamp`: added with `Created` and `Expires` (`secure`), and checked against the
//! clock with a tolerance for the sender's clock (`validate`, and a signature's required
//! `TIMESTAMP`).

use std::time::{Duration, SystemTime};

use libxml::tree::{Document, Node};

use super::dom::{self, WSU_NS};
use super::fault::{Fault, WsseCode};
use super::time;

/// The default `ttl` of an added timestamp and `clockSkew` of a check: five minutes.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(300);

/// Adds a `wsu:Timestamp` valid from `now` for `ttl` as the first child of `security` (where
/// WS-Security wants it), replacing one already there. Runs per message; returns the element.
pub fn add(
    doc: &Document,
    security: &mut Node,
    now: SystemTime,
    ttl: Duration,
) -> Result<Node, Fault> {
    for mut old in dom::children(security, WSU_NS, "Timestamp") {
        old.unlink();
    }
    let mut ts = Node::new("Timestamp", None, doc).map_err(|_| dom::internal())?;
    match security.get_first_child() {
        Some(mut first) => first
            .add_prev_sibling(&mut ts)
            .map_err(|_| dom::internal())?,
        None => security.add_child(&mut ts).map_err(|_| dom::internal())?,
    }
    let wsu = dom::namespace_for(&mut ts, WSU_NS, "wsu")?;
    ts.set_namespace(&wsu).map_err(|_| dom::internal())?;
    ts.set_attribute_ns("Id", &dom::new_id("TS")?, &wsu)
        .map_err(|_| dom::internal())?;
    dom::add_text(&mut ts, &wsu, "Created", &time::format(now))?;
    dom::add_text(&mut ts, &wsu, "Expires", &time::format(now + ttl))?;
    Ok(ts)
}

/// The one `wsu:Timestamp` of `security`; none or several is `wsse:InvalidSecurity`.
pub fn single(security: &Node) -> Result<Node, Fault> {
    let mut all = dom::children(security, WSU_NS, "Timestamp");
    match all.len() {
        0 => Err(Fault::new(
            WsseCode::InvalidSecurity,
            "wsse:Security carries no wsu:Timestamp",
        )),
        1 => all.pop().ok_or_else(dom::internal),
        _ => Err(Fault::new(
            WsseCode::InvalidSecurity,
            "more than one wsu:Timestamp",
        )),
    }
}

/// Checks that `timestamp`'s window covers `now` give or take `skew`: `Created` must be
/// present and neither in the future nor older than `skew`, `Expires` (when present) not past.
/// Runs per message; a stale or expired one is `wsse:MessageExpired`, a malformed one or one
/// from the future `wsse:FailedCheck`.
pub fn check(timestamp: &Node, now: SystemTime, skew: Duration) -> Result<(), Fault> {
    let read = |local: &str| -> Result<Option<SystemTime>, Fault> {
        match dom::child(timestamp, WSU_NS, local) {
            None => Ok(None),
            Some(n) => time::parse(&n.get_content()).map(Some).ok_or_else(|| {
                Fault::new(
                    WsseCode::FailedCheck,
                    format!("wsu:Timestamp/wsu:{local} is not an xs:dateTime"),
                )
            }),
        }
    };
    let created = read("Created")?
        .ok_or_else(|| Fault::new(WsseCode::FailedCheck, "wsu:Timestamp has no wsu:Created"))?;
    let expires = read("Expires")?;
    if created > now + skew {
        return Err(Fault::new(
            WsseCode::FailedCheck,
            format!(
                "wsu:Timestamp Created ({}) lies in the future",
                time::format(created)
            ),
        ));
    }
    if created + skew < now {
        return Err(Fault::new(
            WsseCode::MessageExpired,
            format!(
                "wsu:Timestamp Created ({}) is older than the allowed clock skew",
                time::format(created)
            ),
        ));
    }
    if let Some(e) = expires {
        if e + skew < now {
            return Err(Fault::new(
                WsseCode::MessageExpired,
                format!("wsu:Timestamp has expired (Expires {})", time::format(e)),
            ));
        }
    }
    Ok(())
}
