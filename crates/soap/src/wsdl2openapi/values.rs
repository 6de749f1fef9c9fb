//! JSON values both ways of the conversion share.

use serde_json::{Map, Value};

use crate::xsd::{Kind, Scalar};

pub(crate) fn insert_generic(obj: &mut Map<String, Value>, k: &str, v: Value) {
    match obj.get_mut(k) {
        Some(Value::Array(a)) => a.push(v),
        Some(old) => {
            let prev = old.take();
            *old = Value::Array(vec![prev, v]);
        }
        None => {
            obj.insert(k.to_owned(), v);
        }
    }
}

pub(crate) fn scalar_json(text: &str, s: &Scalar) -> Value {
    let t = text.trim();
    match s.kind {
        Kind::Integer => {
            if let Ok(i) = t.parse::<i64>() {
                return Value::from(i);
            }
            if let Ok(u) = t.parse::<u64>() {
                return Value::from(u);
            }
            Value::String(text.to_owned())
        }
        Kind::Number => match t.parse::<f64>() {
            Ok(f) if f.is_finite() => {
                if !t.contains(['.', 'e', 'E']) {
                    if let Ok(i) = t.parse::<i64>() {
                        return Value::from(i);
                    }
                }
                serde_json::Number::from_f64(f)
                    .map_or(Value::String(text.to_owned()), Value::Number)
            }
            _ => Value::String(text.to_owned()),
        },
        Kind::Boolean => match t {
            "true" | "1" => Value::Bool(true),
            "false" | "0" => Value::Bool(false),
            _ => Value::String(text.to_owned()),
        },
        _ => Value::String(text.to_owned()),
    }
}
