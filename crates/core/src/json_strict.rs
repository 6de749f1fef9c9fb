//! JSON read the way a policy that decides on member names must read it: an object with two
//! members of the same name is an error (parsers disagree on which one counts, so a backend
//! may act on the one the policy did not check), and so are members that differ from a
//! decisive name only in case (`"Method"` beside `"method"`), which case-insensitive backends
//! read as the same member.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Parses `body` as JSON, refusing objects with duplicate member names. The error says which
/// member, or what else is wrong.
pub fn parse_unique(body: &[u8]) -> Result<Value, String> {
    serde_json::from_slice::<Unique>(body)
        .map(|u| u.0)
        .map_err(|e| e.to_string())
}

/// The first member of `o` whose name equals one of `names` but for case, as
/// "`Method` differs from `method` only in case".
pub fn case_variant(o: &Map<String, Value>, names: &[&str]) -> Option<String> {
    o.keys().find_map(|k| {
        names
            .iter()
            .find(|n| k.eq_ignore_ascii_case(n) && k != *n)
            .map(|n| format!("member `{k}` differs from `{n}` only in case"))
    })
}

struct Unique(Value);

impl<'de> Deserialize<'de> for Unique {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UniqueVisitor).map(Unique)
    }
}

struct UniqueVisitor;

impl<'de> Visitor<'de> for UniqueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Unique(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            let Unique(v) = map.next_value()?;
            if out.contains_key(&k) {
                return Err(de::Error::custom(format!("duplicate member `{k}`")));
            }
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn duplicates_anywhere_are_refused() {
        assert!(parse_unique(br#"{"method":"a","method":"b"}"#)
            .unwrap_err()
            .contains("duplicate member `method`"));
        assert!(parse_unique(br#"[{"p":{"x":1,"x":2}}]"#).is_err());
        assert_eq!(
            parse_unique(br#"{"a":[1,2.5,"x",null,true],"b":{"a":1}}"#).unwrap(),
            serde_json::json!({"a":[1,2.5,"x",null,true],"b":{"a":1}})
        );
        assert!(parse_unique(b"{").is_err());
    }

    #[test]
    fn case_variants_of_decisive_names() {
        let v = parse_unique(br#"{"method":"getX","Method":"deleteAll"}"#).unwrap();
        let m = case_variant(v.as_object().unwrap(), &["jsonrpc", "method", "id"]).unwrap();
        assert!(m.contains("`Method`"), "{m}");
        let v = parse_unique(br#"{"method":"getX","Params":{}}"#).unwrap();
        assert!(case_variant(v.as_object().unwrap(), &["method"]).is_none());
    }

    proptest! {
        /// Whatever serde_json reads without duplicates, this reads alike.
        #[test]
        fn agrees_with_serde_json(v in any::<Vec<(String, i64)>>()) {
            let mut m = serde_json::Map::new();
            for (k, n) in v {
                m.insert(k, Value::from(n));
            }
            let text = serde_json::to_vec(&Value::Object(m.clone())).unwrap();
            prop_assert_eq!(parse_unique(&text).unwrap(), Value::Object(m));
        }
    }
}
