//! Documents as the admin API receives and returns them: parsed from YAML or JSON with the
//! position of every value (errors point into what the client sent), rendered as JSON or YAML
//! with secrets redacted, and identified by an entity tag of their stored text.

use std::collections::HashMap;

use serde_json::Value;
use sha2::{Digest, Sha256};
use turnpike_config::yaml::{self, Span};

use crate::store::Kind;

/// What a redacted secret reads as. Sent back unchanged in a `PUT`, it keeps the stored value.
pub const REDACTED: &str = "<redacted>";

/// Keys whose values are secrets: never returned in full.
const SECRET_KEYS: &[&str] = &[
    "password",
    "keyPassword",
    "token",
    "apiKey",
    "secret",
    "clientSecret",
];

/// A problem with a submitted document, at a line and column of it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DocError {
    /// The document (`<request>`, or a configuration file the change affects).
    pub file: String,
    /// 1-based line (0 when not about a place).
    pub line: u32,
    /// 1-based column.
    pub column: u32,
    /// Key path.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl DocError {
    fn at(span: Span, key: &str, message: impl Into<String>) -> DocError {
        DocError {
            file: REQUEST.into(),
            line: span.line,
            column: span.column,
            key: key.into(),
            message: message.into(),
        }
    }
}

/// The name errors give a submitted document.
pub const REQUEST: &str = "<request>";

/// One submitted document.
#[derive(Debug, Clone)]
pub struct Doc {
    /// Its kind.
    pub kind: Kind,
    /// Its name (`global` for the `global` list).
    pub name: String,
    /// The document (environment references kept as written).
    pub json: Value,
    /// Where each value is (key path → position).
    pub spans: HashMap<String, Span>,
}

/// Reads the documents of `text` (YAML, of which JSON is a subset), keeping `${NAME}` as
/// written. Each must be one of the kinds the admin API manages.
pub fn parse(text: &str) -> Result<Vec<Doc>, Vec<DocError>> {
    let keep = |name: &str| Some(format!("${{{name}}}"));
    let nodes = yaml::parse_documents(text, &keep).map_err(|errs| {
        errs.into_iter()
            .map(|e| DocError::at(e.span, &e.key, e.message))
            .collect::<Vec<_>>()
    })?;
    let mut docs = Vec::new();
    let mut errors = Vec::new();
    for node in &nodes {
        if node.value == yaml::Value::Null {
            continue;
        }
        let mut spans = HashMap::new();
        let json = yaml::to_json(node, &mut String::new(), &mut spans);
        let kind = match json.as_object().filter(|m| m.len() == 1) {
            Some(m) => m
                .keys()
                .next()
                .and_then(|k| Kind::from_key(k).map(|kind| (kind, k))),
            None => None,
        };
        let Some((kind, _)) = kind else {
            errors.push(DocError::at(
                node.span,
                "",
                "expected a document with one of the keys `api`, `upstream`, `consumer` or `global`",
            ));
            continue;
        };
        let name = match kind {
            Kind::Globals => Kind::GLOBALS.to_owned(),
            _ => match json[kind.key()].get("name").and_then(Value::as_str) {
                Some(n) => n.to_owned(),
                None => {
                    let at = spans.get(kind.key()).copied().unwrap_or(node.span);
                    errors.push(DocError::at(at, kind.key(), "needs a `name`"));
                    continue;
                }
            },
        };
        docs.push(Doc {
            kind,
            name,
            json,
            spans,
        });
    }
    if errors.is_empty() {
        Ok(docs)
    } else {
        Err(errors)
    }
}

/// The entity tag of a stored text (quoted, as in the `ETag` header).
pub fn etag(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    let hex: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}

/// Header names whose values are credentials (in `setHeader`-shaped `{name, value}` maps).
const SECRET_HEADERS: &[&str] = &["authorization", "proxy-authorization", "cookie"];

/// `value` with every secret replaced by [`REDACTED`]: values of secret keys, the `value` of a
/// `{name, value}` map naming a credential header, and the user information of URLs
/// (`redis://user:pass@host` reads `redis://<redacted>@host`).
pub fn redact(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let secret_header = map.get("name").and_then(Value::as_str).is_some_and(|n| {
                SECRET_HEADERS
                    .iter()
                    .any(|h| n.trim().eq_ignore_ascii_case(h))
            });
            Value::Object(
                map.iter()
                    .map(|(k, v)| {
                        let v = if SECRET_KEYS.contains(&k.as_str())
                            || (secret_header && k == "value")
                        {
                            hide(v)
                        } else {
                            redact(v)
                        };
                        (k.clone(), v)
                    })
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(redact).collect()),
        Value::String(s) => Value::String(hide_userinfo(s)),
        other => other.clone(),
    }
}

/// `s` with the user information of a URL in it (`scheme://user:pass@`) hidden.
fn hide_userinfo(s: &str) -> String {
    let Some(start) = s.find("://").map(|i| i + 3) else {
        return s.to_owned();
    };
    let authority_end = s[start..]
        .find(['/', '?', '#'])
        .map_or(s.len(), |i| start + i);
    match s[start..authority_end].rfind('@') {
        Some(at) if !s[start..start + at].is_empty() && &s[start..start + at] != REDACTED => {
            format!("{}{REDACTED}{}", &s[..start], &s[start + at..])
        }
        _ => s.to_owned(),
    }
}

/// A secret's value hidden: strings (alone, in lists, or as an object's `value`) become
/// [`REDACTED`].
fn hide(v: &Value) -> Value {
    match v {
        Value::String(_) => Value::String(REDACTED.into()),
        Value::Array(items) => Value::Array(items.iter().map(hide).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = if k == "value" { hide(v) } else { redact(v) };
                    (k.clone(), v)
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Puts the stored secrets back where `submitted` holds [`REDACTED`] (a document read with
/// `GET` and sent back). Returns the key paths of redacted values with nothing stored to keep.
pub fn restore_secrets(submitted: &mut Value, stored: Option<&Value>, path: &str) -> Vec<String> {
    match submitted {
        Value::String(s) if s == REDACTED => match stored {
            Some(Value::String(orig)) => {
                *s = orig.clone();
                Vec::new()
            }
            _ => vec![path.to_owned()],
        },
        // A URL whose user information was hidden: the stored URL, if it is the same but that.
        Value::String(s) if s.contains(REDACTED) => match stored {
            Some(Value::String(orig)) if hide_userinfo(orig) == *s => {
                *s = orig.clone();
                Vec::new()
            }
            _ => vec![path.to_owned()],
        },
        Value::Object(map) => {
            let mut missing = Vec::new();
            for (k, v) in map.iter_mut() {
                let sub = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                missing.extend(restore_secrets(v, stored.and_then(|s| s.get(k)), &sub));
            }
            missing
        }
        Value::Array(items) => {
            let mut missing = Vec::new();
            for (i, v) in items.iter_mut().enumerate() {
                let sub = format!("{path}[{i}]");
                missing.extend(restore_secrets(v, stored.and_then(|s| s.get(i)), &sub));
            }
            missing
        }
        _ => Vec::new(),
    }
}

/// True when `value` holds a [`REDACTED`] string anywhere.
pub fn has_redacted(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains(REDACTED),
        Value::Object(m) => m.values().any(has_redacted),
        Value::Array(a) => a.iter().any(has_redacted),
        _ => false,
    }
}

/// `value` as YAML text.
pub fn to_yaml(value: &Value) -> String {
    let mut out = String::new();
    let mut emitter = yaml_rust2::YamlEmitter::new(&mut out);
    // A value that cannot be emitted cannot happen for JSON input; fall back to JSON, which
    // YAML reads too.
    if emitter.dump(&to_yaml_node(value)).is_err() {
        return serde_json::to_string_pretty(value).unwrap_or_default();
    }
    // The emitter starts with a document marker (`---`); files here do not.
    let text = out.strip_prefix("---\n").unwrap_or(&out);
    format!("{text}\n")
}

fn to_yaml_node(v: &Value) -> yaml_rust2::Yaml {
    use yaml_rust2::Yaml;
    match v {
        Value::Null => Yaml::Null,
        Value::Bool(b) => Yaml::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Yaml::Integer(i),
            None => Yaml::Real(n.to_string()),
        },
        Value::String(s) => Yaml::String(s.clone()),
        Value::Array(items) => Yaml::Array(items.iter().map(to_yaml_node).collect()),
        Value::Object(map) => Yaml::Hash(
            map.iter()
                .map(|(k, v)| (Yaml::String(k.clone()), to_yaml_node(v)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_yaml_and_json_with_positions() {
        let docs = parse("api:\n  name: orders\n  port: 2000\n").unwrap();
        assert_eq!((docs[0].kind, docs[0].name.as_str()), (Kind::Api, "orders"));
        assert_eq!(docs[0].spans["api.port"].line, 3);
        let docs = parse("{\"upstream\": {\"name\": \"o\", \"nodes\": []}}").unwrap();
        assert_eq!((docs[0].kind, docs[0].name.as_str()), (Kind::Upstream, "o"));
        let docs = parse("global:\n  - log: {}\n").unwrap();
        assert_eq!(docs[0].name, "global");
        // Environment references stay as written.
        let docs = parse("api: {name: a, port: 1, description: \"${HOME}\"}").unwrap();
        assert_eq!(docs[0].json["api"]["description"], "${HOME}");
    }

    #[test]
    fn rejects_what_it_does_not_manage() {
        let errs = parse("gateway: {threads: 1}\n").unwrap_err();
        assert!(errs[0].message.contains("one of the keys"), "{errs:?}");
        let errs = parse("api:\n  port: 1\n").unwrap_err();
        assert_eq!(
            (errs[0].line, errs[0].message.as_str()),
            (2, "needs a `name`")
        );
        let errs = parse("api: [\n").unwrap_err();
        assert!(errs[0].message.contains("invalid YAML"), "{errs:?}");
    }

    #[test]
    fn secrets_are_redacted_and_restored() {
        let stored = json!({"consumer": {"name": "a", "credentials": {
            "apiKey": "k-123", "basic": {"username": "a", "password": "pw"}}},
            "flow": [{"apiKey": {"stores": [{"simple": [{"secret": {"value": "s3", "scopes": ["x"]}}]}]}}]});
        let shown = redact(&stored);
        let text = shown.to_string();
        for secret in ["k-123", "pw", "s3"] {
            assert!(!text.contains(secret), "{text}");
        }
        assert_eq!(shown["consumer"]["credentials"]["basic"]["username"], "a");
        assert_eq!(
            shown["flow"][0]["apiKey"]["stores"][0]["simple"][0]["secret"]["scopes"][0],
            "x"
        );
        let mut back = shown.clone();
        assert!(has_redacted(&back));
        assert!(restore_secrets(&mut back, Some(&stored), "").is_empty());
        assert_eq!(back, stored);
        // A redacted value with nothing stored under it cannot be kept.
        let mut new = json!({"consumer": {"name": "b", "credentials": {"apiKey": REDACTED}}});
        assert_eq!(
            restore_secrets(&mut new, None, ""),
            vec!["consumer.credentials.apiKey".to_owned()]
        );
    }

    #[test]
    fn url_credentials_and_credential_headers_are_redacted() {
        let stored = json!({"api": {"name": "a", "flow": [
            {"setHeader": {"name": "Authorization", "value": "Basic c2VjcmV0"}},
            {"setHeader": {"name": "X-Plain", "value": "shown"}},
            {"rateLimiter": {"store": {"redis": {"url": "redis://user:pa55@10.0.0.9:6379/0"}}}}
        ], "target": {"url": "http://u:p@backend:8080/x@y"}}});
        let shown = redact(&stored);
        let text = shown.to_string();
        for secret in ["c2VjcmV0", "pa55", "user:", "u:p"] {
            assert!(!text.contains(secret), "{secret}: {text}");
        }
        assert_eq!(shown["api"]["flow"][1]["setHeader"]["value"], "shown");
        assert_eq!(
            shown["api"]["flow"][2]["rateLimiter"]["store"]["redis"]["url"],
            "redis://<redacted>@10.0.0.9:6379/0"
        );
        assert_eq!(
            shown["api"]["target"]["url"],
            "http://<redacted>@backend:8080/x@y"
        );
        // Sent back as read, the stored secrets are kept.
        let mut back = shown.clone();
        assert!(restore_secrets(&mut back, Some(&stored), "").is_empty());
        assert_eq!(back, stored);
        // A changed host with a hidden password cannot keep the old password.
        let mut moved = shown.clone();
        moved["api"]["target"]["url"] = json!("http://<redacted>@elsewhere:8080/");
        assert_eq!(
            restore_secrets(&mut moved, Some(&stored), ""),
            vec!["api.target.url".to_owned()]
        );
    }

    #[test]
    fn yaml_round_trip() {
        let v = json!({"api": {"name": "a", "port": 2000, "flag": "yes", "n": null,
            "list": [1, "two", {"x": 1.5}], "empty": {}}});
        let text = to_yaml(&v);
        let back = parse(&text).unwrap();
        assert_eq!(back[0].json, v, "{text}");
    }

    #[test]
    fn etags_follow_the_text() {
        assert_eq!(etag("a"), etag("a"));
        assert_ne!(etag("a"), etag("b"));
        assert!(etag("a").starts_with('"') && etag("a").len() == 26);
    }
}
