//! `discriminator`: the value of the discriminating property selects the one schema a value is
//! validated against, instead of trying every alternative (so that errors point into the selected
//! schema, and overlapping alternatives work).
//!
//! Three forms are handled, all turned into plain JSON Schema (an `allOf` of "the property is
//! there and has a known value" and one `if: {property: value} then: {$ref: schema}` per value):
//!
//! - beside a `oneOf`/`anyOf` of `$ref`s (done per schema by [`crate::convert`]);
//! - on a base schema that subtypes extend with `allOf: [{$ref: Base}, ...]` (inheritance): where
//!   the base is used (referenced, not extended), the value selects among the explicit `mapping`
//!   and the subtypes, named by their component name. Inside a subtype's `allOf`, the reference
//!   is to a plain copy of the base (under [`PLAIN`]), without the dispatch;
//! - on such a base, inherited by a `oneOf`/`anyOf` of `$ref`s to its subtypes that has no
//!   `discriminator` of its own.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use serde_json::{json, Map, Value};

use crate::marks::{BUNDLED, DISCRIMINATOR, PLAIN};
use crate::pointer::{escape, fragment_ref};

/// Keys whose values are literal data, not schemas.
const LITERAL: &[&str] = &["example", "examples", "enum", "const", "default"];
/// Keys whose values map names to schemas.
const NAME_MAPS: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
    "schemas",
];
/// Annotation keys a base keeps when its content is replaced by the dispatch.
const KEPT: &[&str] = &[
    "title",
    "description",
    "readOnly",
    "writeOnly",
    "nullable",
    "deprecated",
];

/// A `discriminator` found in the document.
struct Disc {
    prop: String,
    /// Explicit `mapping`: value → pointer of the target schema.
    mapping: Vec<(String, String)>,
    /// The `oneOf`/`anyOf` of `$ref`s beside it, when there is one (the dispatch is then over
    /// its alternatives, by [`crate::convert`]).
    alternatives: Option<&'static str>,
}

/// What the document holds about polymorphism.
#[derive(Default)]
struct Graph {
    /// Schema pointer → its discriminator.
    discs: BTreeMap<String, Disc>,
    /// Schema pointer → (index in its `allOf`, pointer of the referenced schema).
    parents: BTreeMap<String, Vec<(usize, String)>>,
    /// Schemas with a `oneOf`/`anyOf` of `$ref`s and no discriminator: (pointer, key, targets).
    unions: Vec<(String, &'static str, Vec<String>)>,
}

/// The decoded JSON pointer of a local reference (`#/a/b%20c` → `/a/b c`).
pub(crate) fn ref_pointer(r: &str) -> Option<String> {
    let frag = r.strip_prefix('#')?;
    Some(
        percent_encoding::percent_decode_str(frag)
            .decode_utf8_lossy()
            .into_owned(),
    )
}

/// The pointer a `mapping` value names: a reference (`#/...`), or a schema name of
/// `components.schemas`.
pub(crate) fn mapping_pointer(t: &str) -> Option<String> {
    if t.contains('#') || t.contains('/') {
        ref_pointer(t)
    } else {
        Some(format!("/components/schemas/{}", escape(t)))
    }
}

/// The `oneOf`/`anyOf` key of `m` and its targets when every alternative is a local `$ref`.
pub(crate) fn ref_alternatives(m: &Map<String, Value>) -> Option<(&'static str, Vec<String>)> {
    let key = ["oneOf", "anyOf"]
        .into_iter()
        .find(|k| m.get(*k).is_some_and(Value::is_array))?;
    let targets: Option<Vec<String>> = m.get(key)?.as_array()?.iter().map(ref_of).collect();
    targets.map(|t| (key, t))
}

fn ref_of(s: &Value) -> Option<String> {
    s.get("$ref").and_then(Value::as_str).and_then(ref_pointer)
}

/// The name a schema is known by for implicit discriminator values: its key in
/// `components.schemas` (or `$defs`, `definitions`), or at the top of a referenced file.
pub(crate) fn implicit_name(ptr: &str) -> Option<String> {
    let segs: Vec<&str> = ptr.split('/').collect();
    let n = segs.len();
    let named = (n >= 3 && matches!(segs[n - 2], "schemas" | "$defs" | "definitions"))
        || (n == 4 && segs[1] == BUNDLED);
    named.then(|| segs[n - 1].replace("~1", "/").replace("~0", "~"))
}

/// The `allOf` items of a dispatch on `prop`: the property must be there with one of the
/// values of `pairs`, and each value brings its schema.
pub(crate) fn dispatch(prop: &str, pairs: Vec<(String, Value)>) -> Vec<Value> {
    let values: Vec<Value> = pairs
        .iter()
        .map(|(v, _)| Value::String(v.clone()))
        .collect();
    let mut all = vec![json!({
        "type": "object",
        "required": [prop],
        // `not: {not: enum}` rather than `enum`: the error then carries the marked schema, and
        // the message can say that this is the discriminator.
        "properties": { prop: { "not": { "not": { "enum": values }, DISCRIMINATOR: prop } } }
    })];
    for (value, then) in pairs {
        all.push(json!({
            "if": { "type": "object", "properties": { prop: { "const": value } }, "required": [prop] },
            "then": then
        }));
    }
    all
}

fn plain_ptr(base: &str) -> String {
    format!("/{PLAIN}/{}", escape(base))
}

fn discover(v: &Value, ptr: &mut String, names: bool, g: &mut Graph) {
    match v {
        Value::Object(m) => {
            if !names {
                note(m, ptr, g);
            }
            for (k, c) in m {
                if !names && LITERAL.contains(&k.as_str()) {
                    continue;
                }
                let len = ptr.len();
                ptr.push('/');
                ptr.push_str(&escape(k));
                discover(c, ptr, !names && NAME_MAPS.contains(&k.as_str()), g);
                ptr.truncate(len);
            }
        }
        Value::Array(a) => {
            for (i, c) in a.iter().enumerate() {
                let len = ptr.len();
                ptr.push('/');
                ptr.push_str(&i.to_string());
                discover(c, ptr, false, g);
                ptr.truncate(len);
            }
        }
        _ => {}
    }
}

/// Records what a schema-like object says about polymorphism.
fn note(m: &Map<String, Value>, ptr: &str, g: &mut Graph) {
    let prop = m
        .get("discriminator")
        .and_then(|d| d.get("propertyName"))
        .and_then(Value::as_str);
    let alternatives = ref_alternatives(m);
    match prop {
        Some(prop) => {
            let mut mapping = Vec::new();
            if let Some(Value::Object(mp)) = m.get("discriminator").and_then(|d| d.get("mapping")) {
                for (value, t) in mp {
                    if let Some(p) = t.as_str().and_then(mapping_pointer) {
                        mapping.push((value.clone(), p));
                    }
                }
            }
            g.discs.insert(
                ptr.to_owned(),
                Disc {
                    prop: prop.to_owned(),
                    mapping,
                    alternatives: alternatives.map(|(k, _)| k),
                },
            );
        }
        None => {
            if let Some((k, targets)) = alternatives {
                g.unions.push((ptr.to_owned(), k, targets));
            }
        }
    }
    if let Some(Value::Array(all)) = m.get("allOf") {
        for (i, s) in all.iter().enumerate() {
            if let Some(p) = ref_of(s) {
                g.parents.entry(ptr.to_owned()).or_default().push((i, p));
            }
        }
    }
}

/// Every schema that extends `base` through `allOf`, directly or through other subtypes, in
/// breadth-first order.
fn descendants(base: &str, children: &HashMap<&str, Vec<&str>>) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut queue = VecDeque::from([base]);
    while let Some(p) = queue.pop_front() {
        for c in children.get(p).into_iter().flatten() {
            if *c != base && seen.insert(*c) {
                out.push((*c).to_owned());
                queue.push_back(c);
            }
        }
    }
    out
}

/// The bases `start` extends, nearest first.
fn ancestors(start: &str, g: &Graph) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut queue = VecDeque::from([start.to_owned()]);
    while let Some(p) = queue.pop_front() {
        for (_, parent) in g.parents.get(&p).into_iter().flatten() {
            if parent != start && seen.insert(parent.clone()) {
                out.push(parent.clone());
                queue.push_back(parent.clone());
            }
        }
    }
    out
}

/// Rewrites `doc` (before the dialect conversion) so that discriminators on base schemas, and
/// those inherited by unions, select the schema to validate against; pushes the pointers of the
/// schemas it adds to `work`.
pub(crate) fn restructure(doc: &mut Value, work: &mut Vec<String>) {
    let mut g = Graph::default();
    discover(doc, &mut String::new(), false, &mut g);
    if g.discs.is_empty() {
        return;
    }
    let mut plain_needed: HashSet<String> = HashSet::new();
    // A subtype's `allOf` reference to its base means the base without the dispatch.
    for (child, refs) in &g.parents {
        for (i, parent) in refs {
            let Some(d) = g.discs.get(parent) else {
                continue;
            };
            let named = implicit_name(child).is_some() || d.mapping.iter().any(|(_, t)| t == child);
            if !named || child == parent {
                continue;
            }
            if let Some(r) = doc.pointer_mut(&format!("{child}/allOf/{i}/$ref")) {
                *r = Value::String(fragment_ref(&plain_ptr(parent)));
                plain_needed.insert(parent.clone());
            }
        }
    }
    // Unions of subtypes inherit their base's discriminator.
    for (ptr, _, targets) in &g.unions {
        let Some(first) = targets.first() else {
            continue;
        };
        let base = ancestors(first, &g).into_iter().find(|b| {
            g.discs.contains_key(b) && targets.iter().all(|t| ancestors(t, &g).contains(b))
        });
        let Some(d) = base.as_ref().and_then(|b| g.discs.get(b)) else {
            continue;
        };
        let mapping: Map<String, Value> = d
            .mapping
            .iter()
            .filter(|(_, t)| targets.contains(t))
            .map(|(v, t)| (v.clone(), Value::String(fragment_ref(t))))
            .collect();
        if let Some(Value::Object(m)) = doc.pointer_mut(ptr) {
            m.insert(
                "discriminator".into(),
                json!({"propertyName": d.prop, "mapping": mapping}),
            );
        }
    }
    // Bases used directly: the value selects among the mapping and the named subtypes.
    let mut children: HashMap<&str, Vec<&str>> = HashMap::new();
    for (child, refs) in &g.parents {
        for (_, parent) in refs {
            children
                .entry(parent.as_str())
                .or_default()
                .push(child.as_str());
        }
    }
    let mut replaced: Vec<(String, Value)> = Vec::new();
    for (base, d) in &g.discs {
        if d.alternatives.is_some() {
            continue;
        }
        let subs = descendants(base, &children);
        let mut pairs: Vec<(String, Value)> = Vec::new();
        for (value, t) in &d.mapping {
            let then = if t == base {
                plain_needed.insert(base.clone());
                json!({"$ref": fragment_ref(&plain_ptr(base))})
            } else if subs.contains(t) {
                json!({"$ref": fragment_ref(t)})
            } else {
                // A mapped schema that does not extend the base: both apply.
                plain_needed.insert(base.clone());
                json!({"allOf": [{"$ref": fragment_ref(&plain_ptr(base))}, {"$ref": fragment_ref(t)}]})
            };
            pairs.push((value.clone(), then));
        }
        for s in &subs {
            let Some(name) = implicit_name(s) else {
                continue;
            };
            if d.mapping.iter().any(|(_, t)| t == s) || pairs.iter().any(|(v, _)| *v == name) {
                continue;
            }
            pairs.push((name, json!({"$ref": fragment_ref(s)})));
        }
        if pairs.is_empty() {
            continue;
        }
        let mut m = Map::new();
        if let Some(Value::Object(orig)) = doc.pointer(base) {
            for k in KEPT {
                if let Some(v) = orig.get(*k) {
                    m.insert((*k).to_owned(), v.clone());
                }
            }
        }
        m.insert("allOf".into(), Value::Array(dispatch(&d.prop, pairs)));
        replaced.push((base.clone(), Value::Object(m)));
    }
    // Plain copies, taken before the bases are replaced.
    let mut plain = Map::new();
    let mut needed: Vec<&String> = plain_needed.iter().collect();
    needed.sort();
    for base in needed {
        let Some(Value::Object(m)) = doc.pointer(base) else {
            continue;
        };
        let mut m = m.clone();
        m.remove("discriminator");
        if let Some(k) = g.discs.get(base).and_then(|d| d.alternatives) {
            m.remove(k);
        }
        plain.insert(base.clone(), Value::Object(m));
        work.push(plain_ptr(base));
    }
    for (base, v) in replaced {
        if let Some(slot) = doc.pointer_mut(&base) {
            *slot = v;
        }
    }
    if !plain.is_empty() {
        if let Value::Object(root) = doc {
            root.insert(PLAIN.into(), Value::Object(plain));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pets() -> Value {
        json!({"components": {"schemas": {
            "Pet": {"type": "object", "required": ["petType", "name"],
                    "properties": {"petType": {"type": "string"}, "name": {"type": "string"}},
                    "discriminator": {"propertyName": "petType", "mapping": {"doggo": "#/components/schemas/Dog"}}},
            "Cat": {"allOf": [{"$ref": "#/components/schemas/Pet"},
                              {"type": "object", "properties": {"lives": {"type": "integer"}}}]},
            "Dog": {"allOf": [{"$ref": "#/components/schemas/Pet"},
                              {"type": "object", "properties": {"bark": {"type": "boolean"}}}]},
            "Lion": {"allOf": [{"$ref": "#/components/schemas/Cat"}]},
            "Union": {"oneOf": [{"$ref": "#/components/schemas/Cat"}, {"$ref": "#/components/schemas/Dog"}]},
            "Other": {"oneOf": [{"$ref": "#/components/schemas/Cat"}, {"type": "string"}]}
        }}})
    }

    #[test]
    fn bases_dispatch_and_subtypes_extend_the_plain_base() {
        let mut doc = pets();
        let mut work = Vec::new();
        restructure(&mut doc, &mut work);
        let plain = "/x-turnpike-plain/~1components~1schemas~1Pet";
        assert_eq!(work, [plain]);
        let p = doc.pointer(plain).unwrap();
        assert!(p.get("discriminator").is_none());
        assert_eq!(p["required"], json!(["petType", "name"]));
        let s = &doc["components"]["schemas"];
        assert_eq!(
            s["Cat"]["allOf"][0]["$ref"],
            "#/x-turnpike-plain/~1components~1schemas~1Pet"
        );
        assert_eq!(s["Lion"]["allOf"][0]["$ref"], "#/components/schemas/Cat");
        let all = s["Pet"]["allOf"].as_array().unwrap();
        assert_eq!(
            all[0]["properties"]["petType"]["not"]["not"]["enum"],
            json!(["doggo", "Cat", "Lion"]),
            "mapping first, then the named subtypes (Dog is mapped)"
        );
        assert_eq!(all[1]["then"]["$ref"], "#/components/schemas/Dog");
        assert_eq!(all[3]["if"]["properties"]["petType"]["const"], "Lion");
        assert_eq!(
            s["Union"]["discriminator"],
            json!({"propertyName": "petType", "mapping": {"doggo": "#/components/schemas/Dog"}})
        );
        assert!(s["Other"].get("discriminator").is_none());
    }

    #[test]
    fn documents_without_discriminators_are_left_alone() {
        let mut doc = json!({"components": {"schemas": {
            "A": {"allOf": [{"$ref": "#/components/schemas/B"}]}, "B": {"type": "object"}}}});
        let before = doc.clone();
        restructure(&mut doc, &mut Vec::new());
        assert_eq!(doc, before);
        assert_eq!(
            implicit_name("/x-turnpike-bundled/0/Cat").as_deref(),
            Some("Cat")
        );
        assert_eq!(implicit_name("/paths/~1a/get"), None);
    }
}
