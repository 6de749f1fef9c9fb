//! `formValidation`: Membrane's check of form and query parameters against regular
//! expressions. Runs in the request phase: each configured field that the query string or an
//! `application/x-www-form-urlencoded` body holds must match its expression as a whole; a
//! field that is absent passes. A value that does not match answers 400 (`validation`
//! problem) with Membrane's text, `Parameter <name>=<value> didn't match <regex>`.

use std::borrow::Cow;
use std::fmt;

use regex::Regex;
use schemars::JsonSchema;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use turnpike_core::problems;
use turnpike_core::{BodyNeed, CompileContext, CompileError, Exchange, Outcome, Phases};
use turnpike_core::{Policy, PolicyFactory, Problem};

use crate::err;

/// One field to check.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FormField {
    /// The parameter's name.
    pub name: String,
    /// The regular expression its whole value must match.
    pub regex: String,
}

/// `formValidation`: the fields, as a list (Membrane's form) or under `fields`.
#[derive(Debug, Clone, JsonSchema)]
#[serde(untagged, deny_unknown_fields)]
pub enum FormValidationSettings {
    /// `{ fields: [...] }`.
    Map {
        /// The fields to check.
        fields: Vec<FormField>,
    },
    /// Membrane's list of fields.
    List(Vec<FormField>),
}

impl<'de> Deserialize<'de> for FormValidationSettings {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Shapes;
        impl<'de> Visitor<'de> for Shapes {
            type Value = FormValidationSettings;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of fields (`name` and `regex`), or a map with `fields`")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut fields = Vec::new();
                while let Some(f) = seq.next_element::<FormField>()? {
                    fields.push(f);
                }
                Ok(FormValidationSettings::List(fields))
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut fields = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key != "fields" {
                        return Err(de::Error::unknown_field(&key, &["fields"]));
                    }
                    fields = Some(map.next_value::<Vec<FormField>>()?);
                }
                match fields {
                    Some(fields) => Ok(FormValidationSettings::Map { fields }),
                    None => Err(de::Error::missing_field("fields")),
                }
            }
        }
        d.deserialize_any(Shapes)
    }
}

/// A compiled field.
#[derive(Debug)]
struct Field {
    name: String,
    /// The expression as written, for the error's text.
    source: String,
    /// The expression anchored at both ends.
    whole: Regex,
}

/// The compiled `formValidation` policy.
#[derive(Debug)]
pub struct FormValidation {
    fields: Vec<Field>,
}

impl PolicyFactory for FormValidation {
    const NAME: &'static str = "formValidation";
    const PHASES: Phases = Phases::REQUEST;
    type Settings = FormValidationSettings;

    /// Compiles every field's expression; returns the policy, or an error at the field.
    fn compile(s: FormValidationSettings, _: &CompileContext<'_>) -> Result<Self, CompileError> {
        let (at, fields) = match s {
            FormValidationSettings::Map { fields } => ("fields", fields),
            FormValidationSettings::List(fields) => ("", fields),
        };
        if fields.is_empty() {
            return Err(err(at, "name at least one field"));
        }
        let fields = fields
            .into_iter()
            .enumerate()
            .map(|(i, f)| {
                let whole = Regex::new(&format!(r"\A(?:{})\z", f.regex)).map_err(|e| {
                    err(
                        &format!("{at}[{i}].regex"),
                        format!("`{}` is not a regular expression: {e}", f.regex),
                    )
                })?;
                Ok(Field {
                    name: f.name,
                    source: f.regex,
                    whole,
                })
            })
            .collect::<Result<Vec<_>, CompileError>>()?;
        Ok(FormValidation { fields })
    }
}

/// The decoded `name=value` pairs of a query string or form body (`+` is a space).
pub(crate) fn pairs(text: &[u8]) -> impl Iterator<Item = (Cow<'_, str>, Cow<'_, str>)> {
    fn decode(b: &[u8]) -> Cow<'_, str> {
        if b.contains(&b'+') {
            let spaced: Vec<u8> = b
                .iter()
                .map(|&c| if c == b'+' { b' ' } else { c })
                .collect();
            Cow::Owned(
                percent_encoding::percent_decode(&spaced)
                    .decode_utf8_lossy()
                    .into_owned(),
            )
        } else {
            percent_encoding::percent_decode(b).decode_utf8_lossy()
        }
    }
    text.split(|&b| b == b'&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.iter().position(|&b| b == b'=') {
            Some(i) => (decode(&p[..i]), decode(&p[i + 1..])),
            None => (decode(p), Cow::Borrowed("")),
        })
}

pub(crate) fn is_form(headers: &http::HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|ct| ct.split(';').next())
        .is_some_and(|m| {
            m.trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        })
}

/// A value as the error shows it: control characters and backslashes escaped, at most 200
/// characters.
fn shown(v: &str) -> String {
    const MAX: usize = 200;
    let mut out = String::new();
    for (i, c) in v.chars().enumerate() {
        if i == MAX {
            out.push('…');
            break;
        }
        if c.is_control() || c == '\\' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

impl Policy for FormValidation {
    fn name(&self) -> &'static str {
        "formValidation"
    }

    fn body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    /// Checks every occurrence of each configured field in the query and the form body;
    /// continues, or rejects with 400 at the first value that does not match.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let query = ex.request.uri.query().unwrap_or("").as_bytes();
        let form: &[u8] = if is_form(&ex.request.headers) {
            ex.request_bytes().map_or(&[], |b| b.as_ref())
        } else {
            &[]
        };
        let params: Vec<(Cow<'_, str>, Cow<'_, str>)> = pairs(query).chain(pairs(form)).collect();
        for f in &self.fields {
            for (name, value) in &params {
                if *name == f.name && !f.whole.is_match(value) {
                    return Outcome::Reject(Problem::new(&problems::VALIDATION).with_detail(
                        format!(
                            "Parameter {}={} didn't match {}",
                            f.name,
                            shown(value),
                            f.source
                        ),
                    ));
                }
            }
        }
        Outcome::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{exchange, plain};

    fn policy(v: serde_json::Value) -> FormValidation {
        let s: FormValidationSettings = serde_json::from_value(v).unwrap();
        FormValidation::compile(s, &plain()).unwrap()
    }

    fn membranes() -> FormValidation {
        policy(serde_json::json!([{"name": "name", "regex": "[a-zA-Z]+"}]))
    }

    fn check(p: &FormValidation, uri: &str, ct: &str, body: &str) -> Result<(), String> {
        let mut ex = exchange("POST", uri, &[("content-type", ct)], body);
        match p.on_request(&mut ex) {
            Outcome::Continue => Ok(()),
            Outcome::Reject(pr) => {
                assert_eq!(pr.status, 400);
                assert_eq!(pr.kind(), "validation");
                Err(pr.detail.unwrap_or_default())
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn query_fields_match_as_a_whole() {
        let p = membranes();
        assert_eq!(check(&p, "/?name=abc", "text/plain", ""), Ok(()));
        assert_eq!(
            check(&p, "/?name=abc1", "text/plain", ""),
            Err("Parameter name=abc1 didn't match [a-zA-Z]+".into())
        );
        assert!(check(&p, "/?name=", "text/plain", "").is_err());
        assert!(check(&p, "/?name", "text/plain", "").is_err());
        assert!(check(&p, "/?name=1abc", "text/plain", "").is_err());
        assert_eq!(
            check(&p, "/?name=a+b", "text/plain", ""),
            Err("Parameter name=a b didn't match [a-zA-Z]+".into())
        );
        assert_eq!(
            check(&p, "/?n%61me=J%C3%BCrgen", "text/plain", ""),
            Err("Parameter name=Jürgen didn't match [a-zA-Z]+".into())
        );
        // An alternative matches as a whole too.
        let p = policy(serde_json::json!([{"name": "a", "regex": "x|yz"}]));
        assert_eq!(check(&p, "/?a=yz", "text/plain", ""), Ok(()));
        assert!(check(&p, "/?a=xyz", "text/plain", "").is_err());
    }

    #[test]
    fn absent_fields_pass() {
        let p = membranes();
        assert_eq!(check(&p, "/", "text/plain", ""), Ok(()));
        assert_eq!(check(&p, "/?other=1&names=2", "text/plain", ""), Ok(()));
        assert_eq!(
            check(&p, "/", "application/x-www-form-urlencoded", "age=3"),
            Ok(())
        );
    }

    #[test]
    fn form_body_fields_are_checked() {
        let p = policy(serde_json::json!({"fields": [
            {"name": "name", "regex": "[a-zA-Z]+"},
            {"name": "age", "regex": "\\d+"}
        ]}));
        let form = "application/x-www-form-urlencoded; charset=UTF-8";
        assert_eq!(check(&p, "/", form, "name=Ann&age=42"), Ok(()));
        assert_eq!(
            check(&p, "/", form, "name=Ann&age=4%32x"),
            Err("Parameter age=42x didn't match \\d+".into())
        );
        // Not a form: the body is not read as one.
        assert_eq!(check(&p, "/", "text/plain", "age=x"), Ok(()));
        // Query and body both count, and every occurrence is checked.
        assert!(check(&p, "/?age=x", form, "age=1").is_err());
        assert!(check(&p, "/?age=1", form, "age=1&age=y").is_err());
    }

    #[test]
    fn values_are_escaped_in_the_detail() {
        let p = membranes();
        let e = check(&p, "/?name=a%0Ab%5C", "text/plain", "").unwrap_err();
        assert_eq!(e, "Parameter name=a\\nb\\\\ didn't match [a-zA-Z]+");
        let long = "x1".repeat(300);
        let e = check(&p, &format!("/?name={long}"), "text/plain", "").unwrap_err();
        assert!(e.contains('…') && e.len() < 300, "{e}");
    }

    #[test]
    fn settings_errors() {
        let parse = |v: serde_json::Value| serde_json::from_value::<FormValidationSettings>(v);
        assert!(parse(serde_json::json!([{"name": "a"}])).is_err());
        assert!(parse(serde_json::json!([{"name": "a", "regex": "x", "min": 1}])).is_err());
        assert!(parse(serde_json::json!({"field": []})).is_err());
        assert!(parse(serde_json::json!({})).is_err());
        let compile = |v| {
            FormValidation::compile(parse(v).unwrap(), &plain())
                .map(|_| ())
                .map_err(|e| e.key)
        };
        assert_eq!(
            compile(serde_json::json!([{"name": "a", "regex": "x"}, {"name": "b", "regex": "("}])),
            Err("[1].regex".into())
        );
        assert_eq!(
            compile(serde_json::json!({"fields": [{"name": "b", "regex": "(?<=a)b"}]})),
            Err("fields[0].regex".into())
        );
        assert_eq!(compile(serde_json::json!([])), Err("".into()));
    }
}
