//! The item of a `for` loop in templates: `${it}`, `${it.FIELD}`, `${it['FIELD']}`, and
//! `${toJSON(…)}` of the item or of a property, as JSON. Compiled at load; the item is the
//! exchange property `it` while the loop's flow runs.

use std::sync::Arc;

use turnpike_core::jsonpath::Message;
use turnpike_core::properties::{property, value_text};
use turnpike_core::template::Placeholder;
use turnpike_core::Exchange;

/// `property.a.b`, `properties['a'][0]`, `it`, `it.name`, `it["name"]` → the property's name
/// and the path into its value; `None` for anything else.
pub(crate) fn value_path(src: &str) -> Option<(String, Vec<String>)> {
    let src = src.trim();
    let (mut segs, rest) = if let Some(rest) = src.strip_prefix("it") {
        (vec!["it".to_owned()], rest)
    } else {
        let rest = src
            .strip_prefix("properties")
            .or_else(|| src.strip_prefix("property"))?;
        (Vec::new(), rest)
    };
    let mut r = rest;
    while !r.is_empty() {
        if let Some(after) = r.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let seg = &after[..end];
            if seg.is_empty()
                || !seg
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                return None;
            }
            segs.push(seg.to_owned());
            r = &after[end..];
        } else if let Some(after) = r.strip_prefix('[') {
            let end = after.find(']')?;
            let inner = after[..end].trim();
            let seg = inner
                .strip_prefix('\'')
                .and_then(|s| s.strip_suffix('\''))
                .or_else(|| inner.strip_prefix('"').and_then(|s| s.strip_suffix('"')))
                .unwrap_or(inner);
            if seg.is_empty() {
                return None;
            }
            segs.push(seg.to_owned());
            r = &after[end + 1..];
        } else {
            return None;
        }
    }
    if segs.is_empty() {
        return None;
    }
    let name = segs.remove(0);
    Some((name, segs))
}

pub(crate) use turnpike_core::properties::value_at as walk;

/// A template placeholder for the loop's item and Membrane's `toJSON(…)`: `${it['name']}`
/// renders the value as text (a string as it is, other values as JSON), `${toJSON(it)}` as
/// JSON (a string quoted).
#[derive(Debug)]
struct ValuePlaceholder {
    name: String,
    path: Vec<String>,
    json: bool,
}

impl Placeholder for ValuePlaceholder {
    fn render(&self, ex: &Exchange, _: Message, out: &mut String) {
        let v = property(ex, &self.name);
        let v = v.as_deref().and_then(|v| walk(v, &self.path));
        match (v, self.json) {
            (Some(v), true) => out.push_str(&v.to_string()),
            (None, true) => out.push_str("null"),
            (Some(v), false) => value_text(v, out),
            (None, false) => {}
        }
    }

    /// The value as JSON; `toJSON(…)` is a string (the JSON text), as Membrane's is.
    fn render_json(&self, ex: &Exchange, _: Message, out: &mut String) {
        let v = property(ex, &self.name);
        let v = v.as_deref().and_then(|v| walk(v, &self.path));
        match (v, self.json) {
            (Some(v), true) => turnpike_core::template::push_json_string(&v.to_string(), out),
            (None, true) => out.push_str("\"null\""),
            (Some(v), false) => out.push_str(&v.to_string()),
            (None, false) => out.push_str("null"),
        }
    }

    fn needs_body(&self) -> bool {
        false
    }
}

/// The placeholder a SpEL template writes as `it…` or `toJSON(…)` of `it…` or
/// `property.NAME…`; `None` for any other text. Runs at load time.
pub(crate) fn placeholder(
    name: &str,
) -> Option<Result<Arc<dyn turnpike_core::template::Placeholder>, String>> {
    let (inner, json) = match name
        .strip_prefix("toJSON(")
        .and_then(|r| r.strip_suffix(')'))
    {
        Some(inner) => (inner.trim(), true),
        None => (name, false),
    };
    if !(json || name == "it" || name.starts_with("it.") || name.starts_with("it[")) {
        return None;
    }
    Some(match value_path(inner) {
        Some((name, path)) => Ok(Arc::new(ValuePlaceholder { name, path, json })),
        None => Err(format!(
            "`${{{name}}}`: `toJSON` takes `it` or `property.NAME`, with `.FIELD` or `['FIELD']`"
        )),
    })
}
