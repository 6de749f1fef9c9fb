//! `headerFilter`: Membrane's policy that keeps or removes the headers of the message in the
//! phase it runs in by an ordered list of rules. Each header is checked against the rules in
//! order; the first rule whose regular expression matches the whole name (case-insensitively)
//! decides: `include` keeps it, `exclude` removes it. A header no rule matches is kept.

use http::HeaderMap;
use regex::Regex;
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::{CompileContext, CompileError, Exchange, Outcome, Policy, PolicyFactory};

use crate::err;

/// One rule.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HeaderRule {
    /// Keep headers whose name matches this regular expression.
    #[serde(default)]
    pub include: Option<String>,
    /// Remove headers whose name matches this regular expression.
    #[serde(default)]
    pub exclude: Option<String>,
}

/// `headerFilter`: the rules, as a list (Membrane's form) or under `rules`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum HeaderFilterSettings {
    /// `{ rules: [...] }`.
    Map {
        /// The rules, in order.
        rules: Vec<HeaderRule>,
    },
    /// Membrane's list of rules.
    List(Vec<HeaderRule>),
}

/// The compiled `headerFilter` policy.
#[derive(Debug)]
pub struct HeaderFilter {
    /// (whole-name pattern, keep).
    rules: Vec<(Regex, bool)>,
}

impl PolicyFactory for HeaderFilter {
    const NAME: &'static str = "headerFilter";
    type Settings = HeaderFilterSettings;

    fn compile(c: HeaderFilterSettings, _: &CompileContext<'_>) -> Result<Self, CompileError> {
        let (rules, key) = match c {
            HeaderFilterSettings::Map { rules } => (rules, "rules"),
            HeaderFilterSettings::List(rules) => (rules, ""),
        };
        if rules.is_empty() {
            return Err(err(key, "needs at least one rule"));
        }
        let mut out = Vec::with_capacity(rules.len());
        for (i, r) in rules.into_iter().enumerate() {
            let at = if key.is_empty() {
                format!("[{i}]")
            } else {
                format!("{key}[{i}]")
            };
            let (pattern, keep, which) = match (r.include, r.exclude) {
                (Some(p), None) => (p, true, "include"),
                (None, Some(p)) => (p, false, "exclude"),
                _ => {
                    return Err(err(
                        &at,
                        "a rule has exactly one of `include` and `exclude`",
                    ));
                }
            };
            let re = Regex::new(&format!("(?i)^(?:{pattern})$")).map_err(|e| {
                err(
                    &format!("{at}.{which}"),
                    format!("not a regular expression: {e}"),
                )
            })?;
            out.push((re, keep));
        }
        Ok(HeaderFilter { rules: out })
    }
}

impl HeaderFilter {
    fn filter(&self, headers: &mut HeaderMap) {
        let doomed: Vec<http::HeaderName> = headers
            .keys()
            .filter(|name| {
                self.rules
                    .iter()
                    .find(|(re, _)| re.is_match(name.as_str()))
                    .is_some_and(|(_, keep)| !keep)
            })
            .cloned()
            .collect();
        for name in doomed {
            headers.remove(&name);
        }
    }
}

impl Policy for HeaderFilter {
    fn name(&self) -> &'static str {
        "headerFilter"
    }

    fn response_needs_request(&self) -> bool {
        false
    }

    /// Filters the request's headers.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        self.filter(&mut ex.request.headers);
        Outcome::Continue
    }

    /// Filters the response's headers.
    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        if let Some(res) = ex.response.as_mut() {
            self.filter(res.headers_mut());
        }
        Outcome::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compile(v: serde_json::Value) -> Result<HeaderFilter, CompileError> {
        HeaderFilter::compile(
            serde_json::from_value(v).unwrap(),
            &crate::testutil::plain(),
        )
    }

    #[test]
    fn the_first_matching_rule_decides_case_insensitively() {
        let f = compile(serde_json::json!([
            {"include": "x-foo"}, {"exclude": ".*cookie.*"}, {"exclude": "x-.*"}
        ]))
        .unwrap();
        let mut h = HeaderMap::new();
        for name in [
            "X-Foo",
            "Cookie",
            "Set-Cookie",
            "X-Bar",
            "Accept",
            "x-foobar",
        ] {
            h.insert(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                "v".parse().unwrap(),
            );
        }
        f.filter(&mut h);
        let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        left.sort_unstable();
        assert_eq!(
            left,
            ["accept", "x-foo"],
            "whole names match; no rule keeps"
        );
    }

    #[test]
    fn bad_rules_are_load_errors() {
        for (v, says) in [
            (serde_json::json!([]), "at least one rule"),
            (
                serde_json::json!([{"include": "a", "exclude": "b"}]),
                "exactly one of",
            ),
            (serde_json::json!({"rules": [{}]}), "exactly one of"),
            (
                serde_json::json!([{"exclude": "("}]),
                "not a regular expression",
            ),
        ] {
            let e = compile(v.clone()).err().unwrap();
            assert!(format!("{e:?}").contains(says), "{v}: {e:?}");
        }
    }
}
