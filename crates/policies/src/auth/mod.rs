//! Authentication policies and what they share: identifying the consumer, checking `allow`
//! lists and scopes, and the 401/403 answers.

pub mod api_key;
pub mod basic;
pub mod jwt;
pub mod password;

use std::collections::HashSet;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::exchange::Identity;
use turnpike_core::problems;
use turnpike_core::{Exchange, Outcome, Problem};

use crate::consumers::{self, Consumer, Consumers};

/// Which consumers may pass an auth policy (any authenticated caller when absent).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AllowList {
    /// Consumer names allowed.
    #[serde(default)]
    pub consumers: Vec<String>,
    /// Consumer groups allowed.
    #[serde(default)]
    pub groups: Vec<String>,
}

/// A compiled `allow:` list.
#[derive(Debug, Default)]
pub struct Allow {
    consumers: HashSet<String>,
    groups: HashSet<String>,
}

impl Allow {
    /// Compiles the list; unknown consumer names are errors (a typo would lock everyone out).
    pub fn compile(a: &AllowList, all: &Consumers) -> Result<Option<Self>, String> {
        if a.consumers.is_empty() && a.groups.is_empty() {
            return Ok(None);
        }
        for c in &a.consumers {
            if all.by_name(c).is_none() {
                return Err(format!("allow.consumers: no consumer is named `{c}`"));
            }
        }
        Ok(Some(Allow {
            consumers: a.consumers.iter().cloned().collect(),
            groups: a.groups.iter().cloned().collect(),
        }))
    }

    fn permits(&self, consumer: Option<&Consumer>) -> bool {
        consumer.is_some_and(|c| {
            self.consumers.contains(&*c.name) || c.groups.iter().any(|g| self.groups.contains(&**g))
        })
    }
}

/// Runs per request for `basicAuthentication` and `jwt`: the credentials of the request's
/// `Authorization: <scheme> <credentials>` when its scheme is `scheme` (any case), with the
/// blanks around them trimmed. `None` without the header or with another scheme.
pub(crate) fn authorization<'a>(ex: &'a Exchange, scheme: &[u8]) -> Option<&'a [u8]> {
    let value = ex
        .request
        .headers
        .get(http::header::AUTHORIZATION)?
        .as_bytes();
    let space = value.iter().position(|&b| b == b' ')?;
    value[..space]
        .eq_ignore_ascii_case(scheme)
        .then(|| value[space + 1..].trim_ascii())
}

/// Removes query parameter `name` (every occurrence) from the request's URI.
pub(crate) fn remove_query_param(ex: &mut Exchange, name: &str) {
    let Some(pq) = ex.request.uri.path_and_query() else {
        return;
    };
    let Some(query) = pq.query() else { return };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| {
            let key = pair.split('=').next().unwrap_or("");
            percent_encoding::percent_decode_str(key).decode_utf8_lossy() != name
        })
        .collect();
    let path = pq.path();
    let rebuilt = if kept.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{}", kept.join("&"))
    };
    let mut parts = ex.request.uri.clone().into_parts();
    if let Ok(p) = http::uri::PathAndQuery::try_from(rebuilt) {
        parts.path_and_query = Some(p);
        if let Ok(uri) = http::Uri::from_parts(parts) {
            ex.request.uri = uri;
        }
    }
}

/// 401 with a problem body; `challenge` becomes `WWW-Authenticate`.
pub(crate) fn unauthorized(detail: &str, challenge: Option<&http::HeaderValue>) -> Outcome {
    let mut p = Problem::new(&problems::UNAUTHORIZED).with_detail(detail);
    if let Some(c) = challenge {
        p = p.with_header(http::header::WWW_AUTHENTICATE, c.clone());
    }
    Outcome::Reject(p)
}

/// 403 with a problem body.
pub(crate) fn forbidden(detail: &str) -> Outcome {
    Outcome::Reject(Problem::new(&problems::FORBIDDEN).with_detail(detail))
}

/// Records who the caller is, checks `allow` and the required scopes, and runs the consumer's
/// own flow. Called by every auth policy once the credentials are verified.
pub(crate) fn admit(
    ex: &mut Exchange,
    consumer: Option<&Arc<Consumer>>,
    mut identity: Identity,
    allow: Option<&Allow>,
    required_scopes: &[String],
) -> Outcome {
    if let Some(a) = allow {
        if !a.permits(consumer.map(|c| &**c)) {
            return forbidden("this consumer may not use this API");
        }
    }
    if let Some(missing) = required_scopes
        .iter()
        .find(|s| !identity.scopes.contains(s))
    {
        return forbidden(&format!("the scope `{missing}` is required"));
    }
    if let Some(c) = consumer {
        identity.consumer = Some(c.name.clone());
        identity.groups = c.groups.clone();
    }
    ex.extensions.insert(identity);
    match consumer {
        Some(c) => consumers::enter(ex, c),
        None => Outcome::Continue,
    }
}

/// The constant-time equality of two byte strings of equal length.
pub(crate) fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::authorization;
    use crate::testutil::exchange;

    fn creds(value: Option<&str>, scheme: &[u8]) -> Option<Vec<u8>> {
        let headers: Vec<(&str, &str)> = value.map(|v| ("authorization", v)).into_iter().collect();
        let ex = exchange("GET", "/", &headers, "");
        authorization(&ex, scheme).map(<[u8]>::to_vec)
    }

    #[test]
    fn the_credentials_of_the_named_scheme_are_found() {
        assert_eq!(
            creds(Some("Bearer abc.def"), b"bearer"),
            Some(b"abc.def".to_vec())
        );
        assert_eq!(
            creds(Some("bEaReR   abc  "), b"bearer"),
            Some(b"abc".to_vec())
        );
        assert_eq!(creds(Some("Basic dTpw"), b"basic"), Some(b"dTpw".to_vec()));
        assert_eq!(creds(Some("Bearer "), b"bearer"), Some(Vec::new()));
    }

    #[test]
    fn other_schemes_and_shapes_are_none() {
        assert_eq!(creds(None, b"bearer"), None);
        assert_eq!(creds(Some("Basic dTpw"), b"bearer"), None);
        assert_eq!(
            creds(Some("Bearer"), b"bearer"),
            None,
            "no space, no credentials"
        );
        assert_eq!(creds(Some("Bearerx abc"), b"bearer"), None);
        assert_eq!(
            creds(Some("Bearer\tabc"), b"bearer"),
            None,
            "the scheme ends at a space"
        );
    }
}
