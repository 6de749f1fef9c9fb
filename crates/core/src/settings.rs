//! Typed settings from JSON values (configuration documents, a policy's settings), reporting
//! every error with the key path it is about, not only the first one.

use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_path_to_error::Segment;

/// A setting that cannot be compiled: the key below the policy (`""` for the policy itself,
/// `algorithms[1]`) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileError {
    /// Key path below the policy's settings.
    pub key: String,
    /// What is wrong, in words a user can act on.
    pub message: String,
    /// The error is about the key itself (an unknown setting), not its value.
    pub at_key: bool,
}

impl CompileError {
    /// An error about the value at `key`.
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        CompileError {
            key: key.into(),
            message: message.into(),
            at_key: false,
        }
    }
}

impl std::fmt::Display for CompileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.key.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.key, self.message)
        }
    }
}

impl std::error::Error for CompileError {}

/// The most errors reported for one value (each costs one more parse).
const MAX_ERRORS: usize = 50;

/// Deserializes `value` as `T`. On failure every error is reported: after each one the
/// offending key (an unknown setting) or value (one of the wrong type) is taken out and the
/// value parsed again, until it parses or an error cannot be taken out (a value inside a list,
/// the whole value); a required setting reported missing because its wrong value was taken out
/// is not reported twice. Keys are paths below `value` (`jwks[0].url`); an unknown setting's
/// error names the setting and is about the key itself ([`CompileError::at_key`]).
pub fn parse_all<T: DeserializeOwned>(value: Value) -> Result<T, Vec<CompileError>> {
    match parse_recovering(value) {
        (Some(t), errors) if errors.is_empty() => Ok(t),
        (_, errors) => Err(errors),
    }
}

/// [`parse_all`], also returning what is left once every offending key and value was taken
/// out, when that parses: the caller checks it further (a document's policies and templates, a
/// policy's settings against each other), so that one run reports every error. The value is
/// `None` when an error could not be taken out.
pub fn parse_recovering<T: DeserializeOwned>(mut value: Value) -> (Option<T>, Vec<CompileError>) {
    let mut errors: Vec<CompileError> = Vec::new();
    let mut taken_out: Vec<String> = Vec::new();
    loop {
        let e = match serde_path_to_error::deserialize::<_, T>(&value) {
            Ok(t) => return (Some(t), errors),
            Err(e) => e,
        };
        let segments: Vec<Segment> = e.path().iter().cloned().collect();
        let path = key_path(&segments);
        let message = clean(e.inner().to_string());
        if let Some(field) = quoted_after(&message, "missing field `") {
            if taken_out.contains(&join(&path, field)) {
                return (None, errors);
            }
        }
        let unknown = quoted_after(&message, "unknown field `").map(str::to_owned);
        let error = match &unknown {
            Some(field) => {
                let key = if path == *field || path.ends_with(&format!(".{field}")) {
                    path.clone()
                } else {
                    join(&path, field)
                };
                CompileError {
                    key,
                    message,
                    at_key: true,
                }
            }
            None => CompileError::new(path.clone(), message),
        };
        let key = error.key.clone();
        errors.push(error);
        if errors.len() >= MAX_ERRORS {
            return (None, errors);
        }
        let removed = match &unknown {
            Some(field) => take_out(&mut value, &segments, Some(field)),
            None => take_out(&mut value, &segments, None),
        };
        if !removed {
            return (None, errors);
        }
        taken_out.push(key);
    }
}

/// The key path of serde's error path (`api.flow[0].return.status`).
pub fn key_path(segments: &[Segment]) -> String {
    let mut key = String::new();
    for seg in segments {
        match seg {
            Segment::Seq { index } => key.push_str(&format!("[{index}]")),
            Segment::Map { key: k } | Segment::Enum { variant: k } => {
                if !key.is_empty() {
                    key.push('.');
                }
                key.push_str(k);
            }
            Segment::Unknown => {}
        }
    }
    key
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_owned()
    } else {
        format!("{path}.{field}")
    }
}

/// serde_json appends " at line X column Y" of the intermediate JSON: meaningless here.
fn clean(message: String) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_owned(),
        None => message,
    }
}

fn quoted_after<'m>(message: &'m str, prefix: &str) -> Option<&'m str> {
    message.strip_prefix(prefix)?.split('`').next()
}

/// Removes `field` from the object at `segments` (an unknown setting), or the value at
/// `segments` from its object (a value of the wrong type). False when that is not possible.
fn take_out(value: &mut Value, segments: &[Segment], field: Option<&str>) -> bool {
    let (parent, last) = match field {
        // The path may end at the unknown key itself, or at the object that holds it.
        Some(f) => match segments.split_last() {
            Some((Segment::Map { key }, rest)) if key == f => (rest, Some(f.to_owned())),
            _ => (segments, Some(f.to_owned())),
        },
        None => match segments.split_last() {
            Some((Segment::Map { key }, rest)) | Some((Segment::Enum { variant: key }, rest)) => {
                (rest, Some(key.clone()))
            }
            _ => (segments, None),
        },
    };
    let Some(last) = last else {
        return false;
    };
    let mut at = value;
    for seg in parent {
        at = match (seg, at) {
            (Segment::Map { key } | Segment::Enum { variant: key }, Value::Object(m)) => {
                match m.get_mut(key) {
                    Some(v) => v,
                    None => return false,
                }
            }
            (Segment::Seq { index }, Value::Array(a)) => match a.get_mut(*index) {
                Some(v) => v,
                None => return false,
            },
            _ => return false,
        };
    }
    match at {
        Value::Object(m) => m.remove(&last).is_some(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    #[allow(dead_code)]
    struct S {
        port: u16,
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        inner: Option<Inner>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        #[serde(default)]
        a: Option<u8>,
    }

    #[test]
    fn every_error_is_reported_with_its_key() {
        let v = serde_json::json!({"port": 1, "name": 5, "bogus": 1, "inner": {"a": "x", "b": 2}});
        let errs = parse_all::<S>(v).unwrap_err();
        let mut keys: Vec<(&str, bool)> = errs.iter().map(|e| (&*e.key, e.at_key)).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                ("bogus", true),
                ("inner.a", false),
                ("inner.b", true),
                ("name", false)
            ],
            "{errs:?}"
        );
    }

    #[test]
    fn a_wrong_required_value_is_not_also_missing() {
        let errs = parse_all::<S>(serde_json::json!({"port": "x", "zz": 1})).unwrap_err();
        let keys: Vec<&str> = errs.iter().map(|e| &*e.key).collect();
        assert!(keys.contains(&"port") && keys.contains(&"zz"), "{errs:?}");
        assert!(
            !errs.iter().any(|e| e.message.contains("missing")),
            "{errs:?}"
        );
    }

    #[test]
    fn valid_values_parse() {
        let s = parse_all::<S>(serde_json::json!({"port": 8})).unwrap();
        assert_eq!(s.port, 8);
    }
}
