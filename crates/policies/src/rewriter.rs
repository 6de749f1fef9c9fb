//! `rewriter`: rewrites the request path with regular expressions (first matching rule wins;
//! the query string is kept). Path parameters keep referring to the path as received.

use http::uri::PathAndQuery;
use regex::Regex;
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::problems;
use turnpike_core::{CompileContext, CompileError, Phases, PolicyFactory};
use turnpike_core::{Exchange, Outcome, Policy, Problem};

use crate::err;

/// `rewriter`: regex path rewriting; the rules under `mappings`, or the list itself
/// (Membrane's form).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RewriterSettings {
    /// `{ mappings: [...] }`
    Mappings {
        /// Rules tried in order; the first whose `from` matches the path rewrites it.
        mappings: Vec<RewriteMapping>,
    },
    /// `[ { from, to }, ... ]`
    List(Vec<RewriteMapping>),
}

/// What a rule does with the rewritten path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RewriteAction {
    /// The request goes on with the new path (default).
    #[default]
    Rewrite,
    /// Answer `302 Found` with `Location` set to the result.
    Redirect,
    /// Answer `301 Moved Permanently` with `Location` set to the result.
    #[serde(alias = "redirect-permanent")]
    RedirectPermanent,
}

/// One rewrite rule.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RewriteMapping {
    /// Regular expression matched against the path.
    pub from: String,
    /// Replacement; `$1`, `${name}` refer to groups. The query string is kept.
    pub to: String,
    /// `rewrite` (default), `redirect` (302) or `redirect_permanent` (301): answer with the
    /// result as `Location` (it may be an absolute URL).
    #[serde(default, rename = "do")]
    pub action: RewriteAction,
}

/// The compiled policy.
pub struct Rewriter {
    rules: Vec<(Regex, String, RewriteAction)>,
}

fn check_refs(re: &Regex, to: &str) -> Result<(), String> {
    let names: Vec<&str> = re.capture_names().flatten().collect();
    let groups = re.captures_len();
    let mut rest = to;
    while let Some(i) = rest.find('$') {
        rest = &rest[i + 1..];
        if rest.starts_with('$') {
            rest = &rest[1..];
            continue;
        }
        let name: String = if let Some(r) = rest.strip_prefix('{') {
            r.split('}').next().unwrap_or("").to_owned()
        } else {
            rest.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        };
        if name.is_empty() {
            continue;
        }
        match name.parse::<usize>() {
            Ok(n) if n >= groups => {
                return Err(format!(
                    "`${n}` refers to a group the expression does not have"
                ))
            }
            Ok(_) => {}
            Err(_) if !names.contains(&name.as_str()) => {
                return Err(format!(
                    "`${name}` refers to a group the expression does not have"
                ))
            }
            Err(_) => {}
        }
    }
    Ok(())
}

impl PolicyFactory for Rewriter {
    const NAME: &'static str = "rewriter";
    const PHASES: Phases = Phases::REQUEST;
    type Settings = RewriterSettings;

    /// Compiles the rules; a bad expression or a reference to a missing group is an error.
    fn compile(c: RewriterSettings, _ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        let (mappings, prefix) = match &c {
            RewriterSettings::Mappings { mappings } => (mappings, "mappings"),
            RewriterSettings::List(l) => (l, ""),
        };
        if mappings.is_empty() {
            return Err(err(prefix, "give at least one mapping"));
        }
        let mut rules = Vec::new();
        for (i, m) in mappings.iter().enumerate() {
            let key = format!("{prefix}[{i}]");
            let re = Regex::new(&m.from).map_err(|e| {
                err(
                    &format!("{key}.from"),
                    format!("invalid regular expression: {e}"),
                )
            })?;
            check_refs(&re, &m.to).map_err(|msg| err(&format!("{key}.to"), msg))?;
            rules.push((re, m.to.clone(), m.action));
        }
        Ok(Rewriter { rules })
    }
}

impl Policy for Rewriter {
    fn name(&self) -> &'static str {
        "rewriter"
    }

    fn response_needs_request(&self) -> bool {
        false
    }

    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let path = ex.request.uri.path();
        let Some((re, to, action)) = self.rules.iter().find(|(re, _, _)| re.is_match(path)) else {
            return Outcome::Continue;
        };
        let mut new = re.replace(path, to.as_str()).into_owned();
        if *action != RewriteAction::Rewrite {
            let status = if *action == RewriteAction::Redirect {
                http::StatusCode::FOUND
            } else {
                http::StatusCode::MOVED_PERMANENTLY
            };
            return match http::HeaderValue::from_str(&new) {
                Ok(location) => {
                    let mut r = http::Response::new(turnpike_core::Body::Empty);
                    *r.status_mut() = status;
                    r.headers_mut().insert(http::header::LOCATION, location);
                    Outcome::Respond(r)
                }
                Err(_) => Outcome::Reject(
                    Problem::new(&problems::BAD_REWRITE)
                        .with_detail("the redirect target is not a valid header value"),
                ),
            };
        }
        if !new.starts_with('/') {
            new.insert(0, '/');
        }
        if let Some(q) = ex.request.uri.query() {
            new.push('?');
            new.push_str(q);
        }
        let mut parts = ex.request.uri.clone().into_parts();
        match PathAndQuery::try_from(new) {
            Ok(pq) => parts.path_and_query = Some(pq),
            Err(e) => {
                return Outcome::Reject(
                    Problem::new(&problems::BAD_REWRITE).with_detail(e.to_string()),
                )
            }
        }
        match http::Uri::from_parts(parts) {
            Ok(uri) => {
                ex.request.uri = uri;
                Outcome::Continue
            }
            Err(e) => {
                Outcome::Reject(Problem::new(&problems::BAD_REWRITE).with_detail(e.to_string()))
            }
        }
    }
}
