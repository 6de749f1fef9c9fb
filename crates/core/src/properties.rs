//! Exchange properties: named values a flow computes once and reads later (Membrane's
//! `setProperty` and `${property.NAME}`). They live in the exchange's extensions, so an exchange
//! that sets none allocates nothing for them.

use std::borrow::Cow;

use crate::exchange::Exchange;

/// The properties set on one exchange, in the order they were first set.
#[derive(Debug, Clone, Default)]
pub struct Properties(Vec<(Box<str>, serde_json::Value)>);

impl Properties {
    /// The value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&serde_json::Value> {
        self.0.iter().find(|(n, _)| &**n == name).map(|(_, v)| v)
    }

    /// Sets `name` to `value`, replacing a value set before.
    pub fn set(&mut self, name: &str, value: serde_json::Value) {
        match self.0.iter_mut().find(|(n, _)| &**n == name) {
            Some((_, v)) => *v = value,
            None => self.0.push((name.into(), value)),
        }
    }

    /// The names set, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(n, _)| &**n)
    }
}

/// The property `name` of `ex`: one set by `setProperty`, or else, for `jwt`, the claims of
/// the verified JWT (the property Membrane's `jwtAuth` sets).
pub fn property<'a>(ex: &'a Exchange, name: &str) -> Option<Cow<'a, serde_json::Value>> {
    if let Some(v) = ex.extensions.get::<Properties>().and_then(|p| p.get(name)) {
        return Some(Cow::Borrowed(v));
    }
    if name == "jwt" {
        let claims = ex.identity()?.claims.as_ref()?;
        return Some(Cow::Owned(serde_json::Value::Object((**claims).clone())));
    }
    None
}

/// Sets the property `name` of `ex`.
pub fn set_property(ex: &mut Exchange, name: &str, value: serde_json::Value) {
    match ex.extensions.get_mut::<Properties>() {
        Some(p) => p.set(name, value),
        None => {
            let mut p = Properties::default();
            p.set(name, value);
            ex.extensions.insert(p);
        }
    }
}

/// The value at `path` inside `v` (object members by name, array items by index).
pub fn value_at<'v>(v: &'v serde_json::Value, path: &[String]) -> Option<&'v serde_json::Value> {
    path.iter().try_fold(v, |node, seg| match node {
        serde_json::Value::Object(o) => o.get(seg),
        serde_json::Value::Array(a) => seg.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

/// `value` as template text: a string as it is, `null` as nothing, anything else as JSON.
pub fn value_text(value: &serde_json::Value, out: &mut String) {
    match value {
        serde_json::Value::String(s) => out.push_str(s),
        serde_json::Value::Null => {}
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::tests::exchange;

    #[test]
    fn set_get_replace() {
        let mut ex = exchange("GET", "/", &[]);
        assert!(property(&ex, "a").is_none());
        set_property(&mut ex, "a", "1".into());
        set_property(&mut ex, "b", serde_json::json!([1, 2]));
        set_property(&mut ex, "a", "2".into());
        assert_eq!(property(&ex, "a").as_deref(), Some(&serde_json::json!("2")));
        let p = ex.extensions.get::<Properties>().unwrap();
        assert_eq!(p.names().collect::<Vec<_>>(), ["a", "b"]);
        let mut s = String::new();
        value_text(&serde_json::json!([1, 2]), &mut s);
        value_text(&serde_json::Value::Null, &mut s);
        value_text(&serde_json::json!("x"), &mut s);
        assert_eq!(s, "[1,2]x");
    }
}
