//! Schemas of OpenAPI 3.0 turned into JSON Schema 2020-12, and `readOnly`/`writeOnly` applied per
//! direction (both versions).
//!
//! 3.0: `nullable: true` adds `"null"` to `type` (and to `enum`), boolean `exclusiveMinimum` /
//! `exclusiveMaximum` become the numeric form. A property declared `readOnly: true` must not be
//! sent in a request (and is not required there); a `writeOnly: true` one must not appear in a
//! response. 3.1 schemas are JSON Schema already.

use std::collections::HashSet;

use serde_json::{Map, Value};

pub use crate::marks::{DISCRIMINATOR, FORBIDDEN, PLAIN};
pub use crate::pointer::{escape, fragment_ref};

/// The OpenAPI major/minor version of a document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// 3.0.x: its own schema dialect.
    V30,
    /// 3.1.x: JSON Schema 2020-12.
    V31,
}

/// Which messages a converted document validates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Requests: `readOnly` properties are forbidden.
    Request,
    /// Responses: `writeOnly` properties are forbidden.
    Response,
}

const SCHEMA_MAPS: &[&str] = &[
    "properties",
    "patternProperties",
    "dependentSchemas",
    "$defs",
    "definitions",
];
const SCHEMA_ONE: &[&str] = &[
    "additionalProperties",
    "items",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
    "additionalItems",
];
const SCHEMA_LISTS: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems", "items"];

/// Converts every schema of `doc` (found from the `schema` members of parameters, media types and
/// headers, from `components.schemas`, and from the references between them) in place.
pub fn convert_doc(doc: &mut Value, version: Version, dir: Direction) {
    let mut work: Vec<String> = Vec::new();
    crate::discriminator::restructure(doc, &mut work);
    let orig = doc.clone();
    find_schema_sites(doc, &mut String::new(), &mut work);
    let mut seen: HashSet<String> = HashSet::new();
    while let Some(ptr) = work.pop() {
        if !seen.insert(ptr.clone()) {
            continue;
        }
        if let Some(s) = doc.pointer_mut(&ptr) {
            convert_schema(s, version, dir, &orig, &mut work);
        }
    }
}

/// Collects JSON pointers of schema positions outside schemas.
fn find_schema_sites(v: &Value, ptr: &mut String, out: &mut Vec<String>) {
    let Value::Object(m) = v else {
        if let Value::Array(a) = v {
            for (i, c) in a.iter().enumerate() {
                let len = ptr.len();
                ptr.push('/');
                ptr.push_str(&i.to_string());
                find_schema_sites(c, ptr, out);
                ptr.truncate(len);
            }
        }
        return;
    };
    for (k, c) in m {
        if k == "example" || k == "examples" {
            continue;
        }
        let len = ptr.len();
        ptr.push('/');
        ptr.push_str(&escape(k));
        if k == "schema" && c.is_object() {
            out.push(ptr.clone());
        } else if k == "schemas" && ptr.ends_with("/components/schemas") {
            if let Value::Object(s) = c {
                for name in s.keys() {
                    out.push(format!("{ptr}/{}", escape(name)));
                }
            }
        } else {
            find_schema_sites(c, ptr, out);
        }
        ptr.truncate(len);
    }
}

fn convert_schema(
    v: &mut Value,
    version: Version,
    dir: Direction,
    orig: &Value,
    refs: &mut Vec<String>,
) {
    let Value::Object(m) = v else { return };
    apply_discriminator(m);
    if let Some(Value::String(r)) = m.get("$ref") {
        if let Some(p) = r.strip_prefix('#') {
            refs.push(p.to_owned());
        }
    }
    for k in SCHEMA_MAPS {
        if let Some(Value::Object(props)) = m.get_mut(*k) {
            for (_, s) in props.iter_mut() {
                convert_schema(s, version, dir, orig, refs);
            }
        }
    }
    for k in SCHEMA_ONE {
        if let Some(s) = m.get_mut(*k) {
            if s.is_object() {
                convert_schema(s, version, dir, orig, refs);
            }
        }
    }
    for k in SCHEMA_LISTS {
        if let Some(Value::Array(a)) = m.get_mut(*k) {
            for s in a {
                convert_schema(s, version, dir, orig, refs);
            }
        }
    }
    apply_direction(m, dir, orig);
    apply_formats(m);
    if version == Version::V30 {
        convert_30(v);
    }
}

/// OpenAPI's number formats, which JSON Schema does not know: `int32` and `int64` bound the
/// value, `byte` (base64) constrains the text.
fn apply_formats(m: &mut Map<String, Value>) {
    let extra = match m.get("format").and_then(Value::as_str) {
        Some("int32") => serde_json::json!({"minimum": i32::MIN, "maximum": i32::MAX}),
        Some("int64") => serde_json::json!({"minimum": i64::MIN, "maximum": i64::MAX}),
        Some("byte") => {
            serde_json::json!({"pattern": "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"})
        }
        _ => return,
    };
    match m.get_mut("allOf") {
        Some(Value::Array(a)) => a.push(extra),
        _ => {
            m.insert("allOf".into(), Value::Array(vec![extra]));
        }
    }
}

/// `oneOf`/`anyOf` of `$ref`s with a `discriminator`: the discriminating property selects the
/// one schema to validate against (explicit `mapping`, else the schema's name), instead of
/// trying every alternative. Becomes `allOf` of "the property is present and one of the known
/// values" and one `if: {property: value} then: {$ref}` per value (see [`crate::discriminator`]).
fn apply_discriminator(m: &mut Map<String, Value>) {
    use crate::discriminator::{dispatch, mapping_pointer, ref_alternatives};
    let Some(prop) = m
        .get("discriminator")
        .and_then(|d| d.get("propertyName"))
        .and_then(Value::as_str)
        .map(str::to_owned)
    else {
        return;
    };
    let Some((key, targets)) = ref_alternatives(m) else {
        return;
    };
    let mut pairs: Vec<(String, String)> = Vec::new();
    if let Some(Value::Object(mapping)) = m.get("discriminator").and_then(|d| d.get("mapping")) {
        for (value, target) in mapping {
            if let Some(p) = target.as_str().and_then(mapping_pointer) {
                pairs.push((value.clone(), p));
            }
        }
    }
    for t in targets {
        if !pairs.iter().any(|(_, p)| *p == t) {
            let name = t.rsplit('/').next().unwrap_or(&t);
            pairs.push((name.replace("~1", "/").replace("~0", "~"), t.clone()));
        }
    }
    m.remove(key);
    let all = dispatch(
        &prop,
        pairs
            .into_iter()
            .map(|(v, p)| (v, serde_json::json!({ "$ref": fragment_ref(&p) })))
            .collect(),
    );
    match m.get_mut("allOf") {
        Some(Value::Array(a)) => a.extend(all),
        _ => {
            m.insert("allOf".into(), Value::Array(all));
        }
    }
}

/// Replaces `readOnly` (request) or `writeOnly` (response) properties by a schema that forbids
/// them, and drops them from `required`.
fn apply_direction(m: &mut Map<String, Value>, dir: Direction, orig: &Value) {
    let flag = match dir {
        Direction::Request => "readOnly",
        Direction::Response => "writeOnly",
    };
    let mut forbidden = Vec::new();
    if let Some(Value::Object(props)) = m.get_mut("properties") {
        for (name, s) in props.iter_mut() {
            if has_flag(s, flag, orig) {
                forbidden.push(name.clone());
                let mut f = Map::new();
                f.insert("not".into(), Value::Object(Map::new()));
                f.insert(FORBIDDEN.into(), Value::String(flag.into()));
                *s = Value::Object(f);
            }
        }
    }
    if !forbidden.is_empty() {
        if let Some(Value::Array(req)) = m.get_mut("required") {
            req.retain(|r| !r.as_str().is_some_and(|r| forbidden.iter().any(|f| f == r)));
        }
    }
}

/// True when the schema, or the schema its `$ref` chain leads to, says `flag: true`.
fn has_flag(s: &Value, flag: &str, orig: &Value) -> bool {
    let mut s = s;
    for _ in 0..32 {
        if s.get(flag) == Some(&Value::Bool(true)) {
            return true;
        }
        match s
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix('#'))
            .and_then(|p| orig.pointer(p))
        {
            Some(next) => s = next,
            None => return false,
        }
    }
    false
}

fn convert_30(v: &mut Value) {
    let Value::Object(m) = v else { return };
    for (bool_key, num_key) in [
        ("exclusiveMinimum", "minimum"),
        ("exclusiveMaximum", "maximum"),
    ] {
        match m.get(bool_key) {
            Some(Value::Bool(true)) => {
                if let Some(n) = m.remove(num_key) {
                    m.insert(bool_key.into(), n);
                } else {
                    m.remove(bool_key);
                }
            }
            Some(Value::Bool(false)) => {
                m.remove(bool_key);
            }
            _ => {}
        }
    }
    if m.remove("nullable") == Some(Value::Bool(true)) {
        if let Some(Value::Array(e)) = m.get_mut("enum") {
            if !e.contains(&Value::Null) {
                e.push(Value::Null);
            }
        }
        match m.get_mut("type") {
            Some(Value::String(t)) => {
                let t = std::mem::take(t);
                m.insert(
                    "type".into(),
                    Value::Array(vec![Value::String(t), "null".into()]),
                );
            }
            Some(_) => {}
            None => {
                // `nullable` beside `$ref` or a combinator: the value may also be null.
                let rest = std::mem::take(m);
                m.insert(
                    "anyOf".into(),
                    Value::Array(vec![
                        Value::Object(rest),
                        serde_json::json!({"type": "null"}),
                    ]),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn converts_30_dialect() {
        let mut doc = json!({"components": {"schemas": {
            "A": {"type": "object", "required": ["id", "n"], "properties": {
                "id": {"type": "integer", "readOnly": true},
                "n": {"type": "number", "minimum": 0, "exclusiveMinimum": true, "nullable": true},
                "e": {"type": "string", "enum": ["x"], "nullable": true},
                "r": {"$ref": "#/components/schemas/B", "nullable": true},
                "ro": {"$ref": "#/components/schemas/C"},
                "m": {"type": "number", "maximum": 5, "exclusiveMaximum": false}
            }},
            "B": {"type": "string", "writeOnly": true},
            "C": {"type": "integer", "readOnly": true}
        }}});
        convert_doc(&mut doc, Version::V30, Direction::Request);
        let a = &doc["components"]["schemas"]["A"];
        assert_eq!(a["required"], json!(["n"]));
        assert_eq!(a["properties"]["id"][FORBIDDEN], "readOnly");
        assert_eq!(a["properties"]["ro"][FORBIDDEN], "readOnly", "through $ref");
        assert_eq!(
            a["properties"]["n"],
            json!({"type": ["number", "null"], "exclusiveMinimum": 0})
        );
        assert_eq!(a["properties"]["e"]["enum"], json!(["x", null]));
        assert_eq!(a["properties"]["r"]["anyOf"][1], json!({"type": "null"}));
        assert_eq!(
            a["properties"]["m"],
            json!({"type": "number", "maximum": 5})
        );
    }

    #[test]
    fn discriminator_selects_one_schema() {
        let mut doc = json!({"components": {"schemas": {
            "Pet": {"oneOf": [{"$ref": "#/components/schemas/Cat"}, {"$ref": "#/components/schemas/Dog"}],
                    "discriminator": {"propertyName": "petType", "mapping": {"dog": "Dog"}}},
            "Cat": {"type": "object"},
            "Dog": {"type": "object"}
        }}});
        convert_doc(&mut doc, Version::V30, Direction::Request);
        let p = &doc["components"]["schemas"]["Pet"];
        assert!(p.get("oneOf").is_none());
        assert_eq!(
            p["allOf"][0]["properties"]["petType"]["not"]["not"]["enum"],
            json!(["dog", "Cat"])
        );
        assert_eq!(
            p["allOf"][0]["properties"]["petType"]["not"][DISCRIMINATOR],
            "petType"
        );
        assert_eq!(p["allOf"][1]["then"]["$ref"], "#/components/schemas/Dog");
        assert_eq!(p["allOf"][2]["if"]["properties"]["petType"]["const"], "Cat");
    }

    #[test]
    fn openapi_formats_become_constraints() {
        let mut doc = json!({"components": {"schemas": {
            "I": {"type": "integer", "format": "int32"},
            "B": {"type": "string", "format": "byte"}
        }}});
        convert_doc(&mut doc, Version::V31, Direction::Request);
        assert_eq!(
            doc["components"]["schemas"]["I"]["allOf"][0]["maximum"],
            i32::MAX
        );
        assert!(doc["components"]["schemas"]["B"]["allOf"][0]["pattern"].is_string());
    }

    #[test]
    fn direction_response_forbids_write_only() {
        let mut doc = json!({"paths": {"/a": {"get": {"responses": {"200": {"content": {
        "application/json": {"schema": {"type": "object", "properties": {
            "pw": {"type": "string", "writeOnly": true},
            "id": {"type": "integer", "readOnly": true}
        }}}}}}}}}});
        convert_doc(&mut doc, Version::V31, Direction::Response);
        let s =
            &doc["paths"]["/a"]["get"]["responses"]["200"]["content"]["application/json"]["schema"];
        assert_eq!(s["properties"]["pw"][FORBIDDEN], "writeOnly");
        assert_eq!(s["properties"]["id"]["readOnly"], true);
    }
}
