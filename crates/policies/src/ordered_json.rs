//! JSON values that keep the members of each object in the order they were written (this
//! workspace's `serde_json::Value` sorts them), for the policies that change a JSON body and
//! pass the rest on as it came: `replace` and `greaser`. Parsed by serde_json (with its nesting
//! limit) and written compactly, as Membrane's JSON libraries write.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Number, Value};

/// A JSON value whose objects keep their member order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Json {
    Null,
    Bool(bool),
    Number(Number),
    String(String),
    Array(Vec<Json>),
    /// Members in document order (a name given twice stays twice; lookups take the last, as
    /// `serde_json::Value` keeps the last).
    Object(Vec<(String, Json)>),
}

impl Json {
    /// Parses a whole JSON text; `None` when it is not one.
    pub(crate) fn parse(bytes: &[u8]) -> Option<Json> {
        serde_json::from_slice(bytes).ok()
    }

    /// The compact JSON text.
    pub(crate) fn to_vec(&self) -> Option<Vec<u8>> {
        serde_json::to_vec(self).ok()
    }

    /// The same value as a `serde_json::Value` (for JSONPath queries).
    pub(crate) fn to_value(&self) -> Value {
        match self {
            Json::Null => Value::Null,
            Json::Bool(b) => Value::Bool(*b),
            Json::Number(n) => Value::Number(n.clone()),
            Json::String(s) => Value::String(s.clone()),
            Json::Array(a) => Value::Array(a.iter().map(Json::to_value).collect()),
            Json::Object(m) => {
                Value::Object(m.iter().map(|(k, v)| (k.clone(), v.to_value())).collect())
            }
        }
    }

    /// The value a JSON Pointer (RFC 6901) names, to change it.
    pub(crate) fn pointer_mut(&mut self, pointer: &str) -> Option<&mut Json> {
        if pointer.is_empty() {
            return Some(self);
        }
        let rest = pointer.strip_prefix('/')?;
        rest.split('/').try_fold(self, |node, token| {
            let token = token.replace("~1", "/").replace("~0", "~");
            match node {
                Json::Object(m) => m
                    .iter_mut()
                    .rev()
                    .find(|(k, _)| *k == token)
                    .map(|(_, v)| v),
                Json::Array(a) => token.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
                _ => None,
            }
        })
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_none<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_bool<E>(self, b: bool) -> Result<Json, E> {
        Ok(Json::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Json, E> {
        Ok(Json::Number(n.into()))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Json, E> {
        Ok(Json::Number(n.into()))
    }

    fn visit_f64<E>(self, n: f64) -> Result<Json, E> {
        Ok(Number::from_f64(n).map_or(Json::Null, Json::Number))
    }

    fn visit_str<E>(self, s: &str) -> Result<Json, E> {
        Ok(Json::String(s.to_owned()))
    }

    fn visit_string<E>(self, s: String) -> Result<Json, E> {
        Ok(Json::String(s))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(v) = seq.next_element()? {
            items.push(v);
        }
        Ok(Json::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut members = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, Json>()? {
            members.push((k, v));
        }
        Ok(Json::Object(members))
    }
}

impl Serialize for Json {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Null => s.serialize_unit(),
            Json::Bool(b) => s.serialize_bool(*b),
            Json::Number(n) => n.serialize(s),
            Json::String(v) => s.serialize_str(v),
            Json::Array(a) => s.collect_seq(a),
            Json::Object(m) => {
                let mut out = s.serialize_map(Some(m.len()))?;
                for (k, v) in m {
                    out.serialize_entry(k, v)?;
                }
                out.end()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_kept_and_output_is_compact() {
        let src = br#"{ "z": 1, "a": [true, null, 1.5, "x"], "m": {"q": {}, "b": []} }"#;
        let j = Json::parse(src).unwrap();
        assert_eq!(
            String::from_utf8(j.to_vec().unwrap()).unwrap(),
            r#"{"z":1,"a":[true,null,1.5,"x"],"m":{"q":{},"b":[]}}"#
        );
        assert!(Json::parse(b"{\"a\":").is_none());
    }

    #[test]
    fn pointers_find_the_last_of_a_twice_given_name() {
        let mut j = Json::parse(br#"{"a":1,"a/b":{"c~":[0,1]},"a":2}"#).unwrap();
        assert_eq!(j.to_value()["a"], 2);
        assert_eq!(j.pointer_mut("/a"), Some(&mut Json::Number(2.into())));
        assert_eq!(
            j.pointer_mut("/a~1b/c~0/1"),
            Some(&mut Json::Number(1.into()))
        );
        assert!(j.pointer_mut("/a~1b/c~0/2").is_none());
        assert!(j.pointer_mut("x").is_none());
        assert!(j.pointer_mut("").is_some());
    }
}
