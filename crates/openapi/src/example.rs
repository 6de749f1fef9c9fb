//! Example values of media types and schemas: the declared `example`/`examples`, or a value
//! made from the schema (its examples, enums, defaults, bounds and formats; objects get every
//! property, arrays one item). Used to mock operations from their spec.

use serde_json::{Map, Value};

/// The example of a media type object (`example`, the first `examples` value, or one made from
/// `schema`), with `$ref`s resolved in `doc`.
pub fn media_example(media: &Value, doc: &Value) -> Option<Value> {
    if let Some(e) = media.get("example") {
        return Some(e.clone());
    }
    if let Some(Value::Object(examples)) = media.get("examples") {
        if let Some(first) = examples.values().next() {
            let first = resolve(first, doc);
            if let Some(v) = first.get("value") {
                return Some(v.clone());
            }
        }
    }
    media.get("schema").map(|s| from_schema(s, doc, 0))
}

fn resolve<'a>(v: &'a Value, doc: &'a Value) -> &'a Value {
    let mut v = v;
    for _ in 0..16 {
        match v.get("$ref").and_then(Value::as_str) {
            Some(r) if r.starts_with('#') => match doc.pointer(&r[1..]) {
                Some(target) => v = target,
                None => return v,
            },
            _ => return v,
        }
    }
    v
}

/// A value valid for `schema` (as far as examples, enums, bounds and formats tell).
pub fn from_schema(schema: &Value, doc: &Value, depth: usize) -> Value {
    let s = resolve(schema, doc);
    if depth > 8 {
        return Value::Null;
    }
    for key in ["example", "const", "default"] {
        if let Some(v) = s.get(key) {
            return v.clone();
        }
    }
    if let Some(Value::Array(e)) = s.get("examples") {
        if let Some(v) = e.first() {
            return v.clone();
        }
    }
    if let Some(Value::Array(e)) = s.get("enum") {
        if let Some(v) = e.iter().find(|v| !v.is_null()).or(e.first()) {
            return v.clone();
        }
    }
    if let Some(Value::Array(all)) = s.get("allOf") {
        let mut merged = Map::new();
        for part in all {
            match from_schema(part, doc, depth + 1) {
                Value::Object(m) => merged.extend(m),
                other if all.len() == 1 => return other,
                _ => {}
            }
        }
        return Value::Object(merged);
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(Value::Array(alts)) = s.get(key) {
            if let Some(first) = alts
                .iter()
                .find(|a| resolve(a, doc).get("type") != Some(&Value::from("null")))
            {
                return from_schema(first, doc, depth + 1);
            }
        }
    }
    let ty = match s.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("null"),
        _ if s.get("properties").is_some() => "object",
        _ if s.get("items").is_some() => "array",
        _ => "object",
    };
    match ty {
        "object" => {
            let mut m = Map::new();
            if let Some(Value::Object(props)) = s.get("properties") {
                for (k, p) in props {
                    let p = resolve(p, doc);
                    if p.get("writeOnly") == Some(&Value::Bool(true)) {
                        continue;
                    }
                    m.insert(k.clone(), from_schema(p, doc, depth + 1));
                }
            }
            Value::Object(m)
        }
        "array" => {
            let item = s
                .get("items")
                .map_or(Value::Null, |i| from_schema(i, doc, depth + 1));
            let n = s
                .get("minItems")
                .and_then(Value::as_u64)
                .unwrap_or(1)
                .clamp(1, 3);
            Value::Array(vec![item; n as usize])
        }
        "integer" => {
            let min = s.get("minimum").and_then(Value::as_i64);
            let max = s.get("maximum").and_then(Value::as_i64);
            let excl = s.get("exclusiveMinimum");
            let mut v = match (min, max) {
                (Some(lo), _) => lo,
                (None, Some(hi)) if hi < 1 => hi,
                _ => 1,
            };
            if excl == Some(&Value::Bool(true)) && min.is_some() {
                v += 1;
            } else if let Some(e) = excl.and_then(Value::as_i64) {
                v = v.max(e + 1);
            }
            Value::from(v)
        }
        "number" => {
            let min = s.get("minimum").and_then(Value::as_f64);
            let max = s.get("maximum").and_then(Value::as_f64);
            let v = match (min, max) {
                (Some(lo), Some(hi)) => (lo + hi) / 2.0,
                (Some(lo), None) => lo + 1.0,
                (None, Some(hi)) => hi - 1.0,
                (None, None) => 1.5,
            };
            Value::from(v)
        }
        "boolean" => Value::Bool(true),
        "null" => Value::Null,
        _ => Value::String(string_for(s)),
    }
}

fn string_for(s: &Value) -> String {
    let base = match s.get("format").and_then(Value::as_str) {
        Some("date-time") => "2024-01-01T00:00:00Z",
        Some("date") => "2024-01-01",
        Some("time") => "12:00:00Z",
        Some("email") => "user@example.com",
        Some("uuid") => "3fa85f64-5717-4562-b3fc-2c963f66afa6",
        Some("uri") | Some("url") => "https://example.com/",
        Some("hostname") => "example.com",
        Some("ipv4") => "192.0.2.1",
        Some("ipv6") => "2001:db8::1",
        Some("byte") => "c3RyaW5n",
        _ => "string",
    };
    let min = s.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
    let max = s
        .get("maxLength")
        .and_then(Value::as_u64)
        .map(|m| m as usize);
    let mut out = base.to_owned();
    while out.chars().count() < min {
        out.push('x');
    }
    if let Some(m) = max {
        out = out.chars().take(m).collect();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_follow_the_schema() {
        let doc = json!({"components": {"schemas": {
            "Fruit": {"type": "object", "required": ["name"], "properties": {
                "name": {"type": "string", "minLength": 8},
                "id": {"type": "integer", "minimum": 3},
                "price": {"type": "number", "minimum": 0, "maximum": 10},
                "kind": {"type": "string", "enum": ["apple", "pear"]},
                "at": {"type": "string", "format": "date-time"},
                "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}},
                "secret": {"type": "string", "writeOnly": true},
                "vendor": {"$ref": "#/components/schemas/Vendor"}
            }},
            "Vendor": {"type": ["object", "null"], "properties": {"name": {"type": "string", "example": "Acme"}}}
        }}});
        let v = from_schema(&json!({"$ref": "#/components/schemas/Fruit"}), &doc, 0);
        assert_eq!(v["name"], "stringxx");
        assert_eq!(v["id"], 3);
        assert_eq!(v["price"], 5.0);
        assert_eq!(v["kind"], "apple");
        assert_eq!(v["at"], "2024-01-01T00:00:00Z");
        assert_eq!(v["tags"], json!(["str"]));
        assert!(v.get("secret").is_none());
        assert_eq!(v["vendor"]["name"], "Acme");
        assert_eq!(
            from_schema(
                &json!({"allOf": [{"properties": {"a": {"type": "boolean"}}}, {"properties": {"b": {"type": "integer", "maximum": -5}}}]}),
                &doc,
                0
            ),
            json!({"a": true, "b": -5})
        );
        // A schema that refers to itself stops.
        let doc2 = json!({"components": {"schemas": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/components/schemas/Node"}}}}}});
        let _ = from_schema(&json!({"$ref": "#/components/schemas/Node"}), &doc2, 0);
    }

    #[test]
    fn media_examples_win() {
        let doc = json!({"components": {"examples": {"one": {"value": {"x": 1}}}}});
        assert_eq!(
            media_example(
                &json!({"example": {"y": 2}, "schema": {"type": "integer"}}),
                &doc
            ),
            Some(json!({"y": 2}))
        );
        assert_eq!(
            media_example(
                &json!({"examples": {"a": {"$ref": "#/components/examples/one"}}}),
                &doc
            ),
            Some(json!({"x": 1}))
        );
        assert_eq!(media_example(&json!({}), &doc), None);
    }
}
