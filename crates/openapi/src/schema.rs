//! Compiling the schemas of a spec: the compile context (error locations, `$ref`s, the
//! converted documents) and the compiled [`Schema`].

use std::sync::Arc;

use jsonschema::Validator;
use serde_json::Value;

use crate::convert::{self, Direction};
use crate::load::{LoadedSpec, SpecError};

/// A compiled JSON schema and where it came from (for messages).
pub struct Schema {
    pub(crate) validator: Validator,
}

impl std::fmt::Debug for Schema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Schema")
    }
}

/// Compile context: the source for error locations and the converted documents.
pub(crate) struct Ctx<'a> {
    pub(crate) loaded: &'a LoadedSpec,
    pub(crate) req_doc: Arc<Value>,
    pub(crate) res_doc: Arc<Value>,
}

impl Ctx<'_> {
    pub(crate) fn err(&self, pointer: &str, msg: impl Into<String>) -> SpecError {
        SpecError {
            at: self.loaded.locate(pointer),
            message: msg.into(),
        }
    }

    /// Follows `$ref`s (of the original document) from `v` at `ptr`; returns the object and its
    /// pointer.
    pub(crate) fn resolve<'v>(
        &'v self,
        mut v: &'v Value,
        mut ptr: String,
    ) -> Result<(&'v Value, String), SpecError> {
        for _ in 0..32 {
            match v.get("$ref").and_then(Value::as_str) {
                Some(r) => {
                    let p = r.strip_prefix('#').unwrap_or(r);
                    let decoded = percent_encoding::percent_decode_str(p).decode_utf8_lossy();
                    let (found, p) = match self.loaded.doc.pointer(p) {
                        Some(found) => (found, p.to_owned()),
                        None => (
                            self.loaded.doc.pointer(&decoded).ok_or_else(|| {
                                self.err(&ptr, format!("`$ref: {r}` points nowhere"))
                            })?,
                            decoded.into_owned(),
                        ),
                    };
                    v = found;
                    ptr = p;
                }
                None => return Ok((v, ptr)),
            }
        }
        Err(self.err(&ptr, "`$ref` cycle"))
    }

    /// Compiles the schema at `ptr` of the converted document for `dir`.
    pub(crate) fn schema(&self, ptr: &str, dir: Direction) -> Result<Schema, SpecError> {
        let doc = match dir {
            Direction::Request => &self.req_doc,
            Direction::Response => &self.res_doc,
        };
        // Only the schema and what it references: compiling against the whole document would
        // index (and, during load, copy) all of it for every validator.
        let mut root = slim_doc(doc, ptr);
        if let Value::Object(m) = &mut root {
            m.insert("$ref".into(), Value::String(convert::fragment_ref(ptr)));
        }
        let validator = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .should_validate_formats(true)
            .build(&root)
            .map_err(|e| self.err(ptr, format!("invalid schema: {e}")))?;
        Ok(Schema { validator })
    }

    /// The JSON type a schema declares (following references), for reading parameters.
    pub(crate) fn schema_type(&self, v: &Value, ptr: &str) -> Option<String> {
        let (s, _) = self.resolve(v, ptr.to_owned()).ok()?;
        match s.get("type") {
            Some(Value::String(t)) => Some(t.clone()),
            Some(Value::Array(ts)) => ts
                .iter()
                .filter_map(Value::as_str)
                .find(|t| *t != "null")
                .map(str::to_owned),
            _ => {
                for k in ["allOf", "oneOf", "anyOf"] {
                    if let Some(Value::Array(a)) = s.get(k) {
                        for (i, sub) in a.iter().enumerate() {
                            if let Some(t) = self.schema_type(sub, &format!("{ptr}/{k}/{i}")) {
                                return Some(t);
                            }
                        }
                    }
                }
                None
            }
        }
    }
}

/// A document holding only the value at `ptr` and, transitively, every value its `$ref`s point
/// to, each at its original place (so that the references still resolve).
fn slim_doc(doc: &Value, ptr: &str) -> Value {
    let mut out = Value::Object(serde_json::Map::new());
    let mut work = vec![ptr.to_owned()];
    let mut seen = std::collections::HashSet::new();
    while let Some(p) = work.pop() {
        if !seen.insert(p.clone()) {
            continue;
        }
        let Some(v) = doc.pointer(&p) else { continue };
        collect_refs(v, &mut work);
        insert_at(&mut out, &p, v.clone());
    }
    out
}

fn collect_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                if k == "$ref" {
                    if let Some(frag) = c.as_str().and_then(|r| r.strip_prefix('#')) {
                        let decoded =
                            percent_encoding::percent_decode_str(frag).decode_utf8_lossy();
                        out.push(decoded.into_owned());
                    }
                } else {
                    collect_refs(c, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|c| collect_refs(c, out)),
        _ => {}
    }
}

/// Puts `v` at JSON pointer `ptr` of `out`, creating objects on the way (array indexes become
/// object keys, which JSON pointers resolve the same way).
fn insert_at(out: &mut Value, ptr: &str, v: Value) {
    let segs: Vec<String> = ptr
        .split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect();
    let Some((last, path)) = segs.split_last() else {
        *out = v;
        return;
    };
    let mut cur = out;
    for s in path {
        let Value::Object(m) = cur else { return };
        cur = m
            .entry(s.clone())
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Value::Array(_) = cur {
            // An ancestor was copied whole already: the value is in it.
            return;
        }
    }
    if let Value::Object(m) = cur {
        m.insert(last.clone(), v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slim_documents_keep_what_is_referenced() {
        let doc = serde_json::json!({
            "paths": {"/a": {"get": {"parameters": [{"schema": {"$ref": "#/components/schemas/A"}}]}}},
            "components": {"schemas": {
                "A": {"properties": {"b": {"$ref": "#/components/schemas/B"}}},
                "B": {"type": "string"},
                "Unused": {"type": "integer"}
            }}
        });
        let slim = slim_doc(&doc, "/paths/~1a/get/parameters/0/schema");
        assert_eq!(
            slim.pointer("/paths/~1a/get/parameters/0/schema/$ref")
                .unwrap(),
            "#/components/schemas/A"
        );
        assert_eq!(
            slim.pointer("/components/schemas/B/type").unwrap(),
            "string"
        );
        assert!(slim.pointer("/components/schemas/Unused").is_none());
    }
}
