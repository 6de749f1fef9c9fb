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

/// `rewriter`: regex path rewriting.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RewriterSettings {
    /// Rules tried in order; the first whose `from` matches the path rewrites it.
    pub mappings: Vec<RewriteMapping>,
}

/// One rewrite rule.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RewriteMapping {
    /// Regular expression matched against the path.
    pub from: String,
    /// Replacement; `$1`, `${name}` refer to groups. The query string is kept.
    pub to: String,
}

/// The compiled policy.
pub struct Rewriter {
    rules: Vec<(Regex, String)>,
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
        if c.mappings.is_empty() {
            return Err(err("mappings", "give at least one mapping"));
        }
        let mut rules = Vec::new();
        for (i, m) in c.mappings.iter().enumerate() {
            let re = Regex::new(&m.from).map_err(|e| {
                err(
                    &format!("mappings[{i}].from"),
                    format!("invalid regular expression: {e}"),
                )
            })?;
            check_refs(&re, &m.to).map_err(|msg| err(&format!("mappings[{i}].to"), msg))?;
            rules.push((re, m.to.clone()));
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
        let Some((re, to)) = self.rules.iter().find(|(re, _)| re.is_match(path)) else {
            return Outcome::Continue;
        };
        let mut new = re.replace(path, to.as_str()).into_owned();
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
