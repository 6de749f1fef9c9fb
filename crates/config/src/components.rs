//! Membrane's `components:` documents and their `$ref`s, resolved while a file is read, before
//! its documents are checked against the model. A component is a map with one key: `chain` (a
//! list of flow entries), a policy, or any other setting (`ssl`, ...). A reference is
//! `$ref: "#/components/<name>"`:
//!
//! - a list entry that is only a `$ref` becomes the component (a `chain` is spliced in: its
//!   entries take the reference's place);
//! - a `$ref` key beside other keys of a map adds the component's key and value to the map
//!   (`api: { $ref: "#/components/myssl", port: 443 }` gets `ssl:`).
//!
//! Components are seen by the documents of the file that defines them (errors then point into
//! that file, at the component's own lines). Java beans (`bean:`) cannot run here and are load
//! errors where they are defined.

use std::collections::HashMap;

use crate::yaml::{Node, Span, Value};

/// How deep components may refer to other components.
const MAX_DEPTH: usize = 16;

/// The components that are API key stores (as `apiKey.stores` entries).
const KEY_STORES: &[&str] = &[
    "apiKeyFileStore",
    "simple",
    "databaseApiKeyStore",
    "mongoDBApiKeyStore",
];

/// Gives every XPath test in `node` (a map with `test` and `language: xpath`) without an
/// `xmlConfig` the one declared as a component, as Membrane's configuration-wide `xmlConfig`.
fn add_default_xml_config(node: &mut Node, xml: &Node) {
    match &mut node.value {
        Value::Map(entries) => {
            let key_is = |k: &Node, name: &str| matches!(&k.value, Value::Str(s) if s == name);
            let xpath_test = entries.iter().any(|(k, _)| key_is(k, "test"))
                && entries.iter().any(|(k, v)| {
                    key_is(k, "language")
                        && matches!(&v.value, Value::Str(s) if s.eq_ignore_ascii_case("xpath"))
                })
                && !entries.iter().any(|(k, _)| key_is(k, "xmlConfig"));
            if xpath_test {
                let span = node.span;
                entries.push((
                    Node {
                        value: Value::Str("xmlConfig".into()),
                        span,
                    },
                    xml.clone(),
                ));
            }
            for (_, v) in entries.iter_mut() {
                add_default_xml_config(v, xml);
            }
        }
        Value::Seq(items) => items
            .iter_mut()
            .for_each(|i| add_default_xml_config(i, xml)),
        _ => {}
    }
}

/// Gives every `apiKey` map in `node` that has no `stores` the list `stores`.
fn add_default_stores(node: &mut Node, stores: &[Node]) {
    match &mut node.value {
        Value::Map(entries) => {
            for (k, v) in entries.iter_mut() {
                if matches!(&k.value, Value::Str(s) if s == "apiKey") {
                    if let Value::Map(settings) = &mut v.value {
                        let has = settings
                            .iter()
                            .any(|(k, _)| matches!(&k.value, Value::Str(s) if s == "stores"));
                        if !has {
                            let span = v.span;
                            settings.push((
                                Node {
                                    value: Value::Str("stores".into()),
                                    span,
                                },
                                Node {
                                    value: Value::Seq(stores.to_vec()),
                                    span,
                                },
                            ));
                        }
                    }
                } else {
                    add_default_stores(v, stores);
                }
            }
        }
        Value::Seq(items) => items.iter_mut().for_each(|i| add_default_stores(i, stores)),
        _ => {}
    }
}

/// An error of a component or a reference: where, the key path (for the location), and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefError {
    /// Where the problem is.
    pub span: Span,
    /// The key of the component or the referencing document (`components.log`, `api`).
    pub key: String,
    /// What is wrong.
    pub message: String,
}

/// The `components:` documents of one file, by name.
#[derive(Debug, Default)]
pub struct Components {
    by_name: HashMap<String, Node>,
}

fn single_key(node: &Node) -> Option<(&str, &Node, Span)> {
    match &node.value {
        Value::Map(entries) if entries.len() == 1 => match &entries[0].0.value {
            Value::Str(k) => Some((k.as_str(), &entries[0].1, entries[0].0.span)),
            _ => None,
        },
        _ => None,
    }
}

/// True for a `components:` document.
pub fn is_components(doc: &Node) -> bool {
    single_key(doc).is_some_and(|(k, _, _)| k == "components")
}

impl Components {
    /// Collects the components of a `components:` document; errors for malformed or
    /// unsupported ones.
    pub fn add(&mut self, doc: &Node, errors: &mut Vec<RefError>) {
        let Some((_, body, span)) = single_key(doc) else {
            return;
        };
        let Value::Map(entries) = &body.value else {
            errors.push(RefError {
                span,
                key: "components".into(),
                message: "expected a map of components by name".into(),
            });
            return;
        };
        for (k, v) in entries {
            let name = match &k.value {
                Value::Str(s) => s.clone(),
                _ => continue,
            };
            let key = format!("components.{name}");
            match single_key(v) {
                None => errors.push(RefError {
                    span: v.span,
                    key,
                    message: "a component is a map with one key: `chain` (a list of flow entries), a policy, or a setting such as `ssl`".into(),
                }),
                Some(("bean", _, s)) => errors.push(RefError {
                    span: s,
                    key,
                    message: "Membrane's Java beans cannot run in Turnpike: write the policy it stands for, or a `python` policy (see docs/membrane.md)".into(),
                }),
                Some(("chain", list, s)) if !matches!(list.value, Value::Seq(_)) => {
                    errors.push(RefError {
                        span: s,
                        key,
                        message: "`chain` is a list of flow entries".into(),
                    })
                }
                Some(_) => {
                    if self.by_name.insert(name.clone(), v.clone()).is_some() {
                        errors.push(RefError {
                            span: k.span,
                            key,
                            message: format!("a second component named `{name}`"),
                        });
                    }
                }
            }
        }
    }

    /// Replaces every `$ref` in `doc`; `key` is the key path of `doc` (`""` for a document).
    /// An `apiKey` without `stores` gets the API key stores defined as components, as in
    /// Membrane, where such a policy uses every key store the configuration declares.
    pub fn resolve(&self, doc: &mut Node, key: &str, errors: &mut Vec<RefError>) {
        self.walk(doc, key, 0, errors);
        let stores: Vec<Node> = self
            .by_name
            .values()
            .filter(|c| single_key(c).is_some_and(|(k, _, _)| KEY_STORES.contains(&k)))
            .cloned()
            .collect();
        if !stores.is_empty() {
            add_default_stores(doc, &stores);
        }
        let xml = self.by_name.values().find_map(|c| match single_key(c) {
            Some(("xmlConfig", v, _)) => Some(v.clone()),
            _ => None,
        });
        if let Some(xml) = xml {
            add_default_xml_config(doc, &xml);
        }
    }

    /// The component `$ref` names, or an error at `span`.
    fn target(&self, r: &Node, key: &str) -> Result<&Node, RefError> {
        let fail = |message: String| RefError {
            span: r.span,
            key: key.to_owned(),
            message,
        };
        let Value::Str(text) = &r.value else {
            return Err(fail("`$ref` is a string: \"#/components/<name>\"".into()));
        };
        let Some(name) = text.strip_prefix("#/components/") else {
            return Err(fail(format!(
                "`{text}` is not a reference to a component of this file (\"#/components/<name>\")"
            )));
        };
        self.by_name.get(name).ok_or_else(|| {
            let mut known: Vec<&str> = self.by_name.keys().map(String::as_str).collect();
            known.sort_unstable();
            fail(format!(
                "no component named `{name}` in this file (components: {})",
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ))
        })
    }

    fn walk(&self, node: &mut Node, key: &str, depth: usize, errors: &mut Vec<RefError>) {
        if depth > MAX_DEPTH {
            errors.push(RefError {
                span: node.span,
                key: key.to_owned(),
                message: format!("components refer to each other more than {MAX_DEPTH} deep"),
            });
            return;
        }
        match &mut node.value {
            Value::Seq(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, mut item) in std::mem::take(items).into_iter().enumerate() {
                    let at = format!("{key}[{i}]");
                    let only_ref = single_key(&item)
                        .filter(|(k, _, _)| *k == "$ref")
                        .map(|(_, r, _)| r.clone());
                    let Some(r) = only_ref else {
                        self.walk(&mut item, &at, depth, errors);
                        out.push(item);
                        continue;
                    };
                    match self.target(&r, &format!("{at}.$ref")) {
                        Err(e) => errors.push(e),
                        Ok(component) => {
                            let mut component = component.clone();
                            self.walk(&mut component, &at, depth + 1, errors);
                            match single_key(&component) {
                                Some(("chain", list, _)) => {
                                    if let Value::Seq(entries) = &list.value {
                                        out.extend(entries.iter().cloned());
                                    }
                                }
                                _ => out.push(component),
                            }
                        }
                    }
                }
                *items = out;
            }
            Value::Map(entries) => {
                let mut i = 0;
                while i < entries.len() {
                    let is_ref = matches!(&entries[i].0.value, Value::Str(k) if k == "$ref");
                    if !is_ref {
                        let sub = match &entries[i].0.value {
                            Value::Str(k) if key.is_empty() => k.clone(),
                            Value::Str(k) => format!("{key}.{k}"),
                            _ => key.to_owned(),
                        };
                        self.walk(&mut entries[i].1, &sub, depth, errors);
                        i += 1;
                        continue;
                    }
                    let (_, r) = entries.remove(i);
                    match self.target(&r, &format!("{key}.$ref")) {
                        Err(e) => errors.push(e),
                        Ok(component) => {
                            let mut component = component.clone();
                            self.walk(&mut component, key, depth + 1, errors);
                            if let Value::Map(mut added) = component.value {
                                for (k, v) in added.drain(..) {
                                    let clash = entries.iter().any(|(e, _)| e.value == k.value);
                                    if clash {
                                        errors.push(RefError {
                                            span: r.span,
                                            key: format!("{key}.$ref"),
                                            message: format!(
                                                "the component adds `{}`, which is set here already",
                                                match &k.value {
                                                    Value::Str(s) => s.as_str(),
                                                    _ => "?",
                                                }
                                            ),
                                        });
                                    } else {
                                        entries.insert(i, (k, v));
                                        i += 1;
                                    }
                                }
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::yaml::parse_documents;

    fn read(text: &str) -> (Vec<Node>, Vec<RefError>) {
        let docs = parse_documents(text, &|_| None).unwrap();
        let mut c = Components::default();
        let mut errors = Vec::new();
        let mut out = Vec::new();
        for d in &docs {
            if is_components(d) {
                c.add(d, &mut errors);
            }
        }
        for mut d in docs.into_iter().filter(|d| !is_components(d)) {
            c.resolve(&mut d, "", &mut errors);
            out.push(d);
        }
        (out, errors)
    }

    fn json(n: &Node) -> serde_json::Value {
        crate::yaml::to_json(n, &mut String::new(), &mut HashMap::new())
    }

    #[test]
    fn chains_splice_policies_stand_and_settings_merge() {
        let (docs, errors) = read(
            "components:\n  log:\n    chain:\n      - log: {}\n      - setHeader: { name: a, value: b }\n  lim:\n    rateLimiter: { requestLimit: 1 }\n  tls:\n    ssl: { keystore: k }\n---\napi:\n  $ref: '#/components/tls'\n  port: 1\n  flow:\n    - $ref: '#/components/log'\n    - $ref: '#/components/lim'\n    - return: {}\n",
        );
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            json(&docs[0]),
            serde_json::json!({"api": {"ssl": {"keystore": "k"}, "port": 1, "flow": [
                {"log": {}}, {"setHeader": {"name": "a", "value": "b"}},
                {"rateLimiter": {"requestLimit": 1}}, {"return": {}}]}})
        );
        // The spliced entries keep their own lines (errors point at the component).
        let flow = match &docs[0].value {
            Value::Map(e) => match &e[0].1.value {
                Value::Map(api) => api[2].1.clone(),
                _ => unreachable!(),
            },
            _ => unreachable!(),
        };
        match flow.value {
            Value::Seq(items) => assert_eq!(items[0].span.line, 4),
            _ => unreachable!(),
        }
    }

    #[test]
    fn bad_references_and_components_are_errors_with_places() {
        let (_, errors) = read(
            "components:\n  j:\n    bean: { class: x.Y }\n  odd: 3\n---\napi:\n  flow:\n    - $ref: '#/components/nope'\n    - $ref: 'other.yaml#/x'\n  $ref: '#/components/j'\n",
        );
        let messages: Vec<String> = errors
            .iter()
            .map(|e| format!("{}:{} {} {}", e.span.line, e.span.column, e.key, e.message))
            .collect();
        assert_eq!(messages.len(), 5, "{messages:#?}");
        assert!(
            messages[0].starts_with("3:5 components.j Membrane's Java beans"),
            "{messages:#?}"
        );
        assert!(
            messages[1].starts_with("4:8 components.odd a component is a map"),
            "{messages:#?}"
        );
        assert!(
            messages[2].contains("api.flow[0].$ref no component named `nope` in this file"),
            "{messages:#?}"
        );
        assert!(
            messages[3].contains("is not a reference to a component of this file"),
            "{messages:#?}"
        );
        assert!(
            messages[4].contains("no component named `j`"),
            "{messages:#?}"
        );
    }

    #[test]
    fn api_keys_without_stores_get_the_store_components() {
        let (docs, errors) = read(
            "components:\n  keys:\n    apiKeyFileStore:\n      location: keys.txt\n---\nglobal:\n  - apiKey:\n      required: false\n---\napi:\n  flow:\n    - apiKey:\n        stores:\n          - simple: []\n",
        );
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            json(&docs[0]),
            serde_json::json!({"global": [{"apiKey": {"required": false, "stores": [{"apiKeyFileStore": {"location": "keys.txt"}}]}}]})
        );
        assert_eq!(
            json(&docs[1]),
            serde_json::json!({"api": {"flow": [{"apiKey": {"stores": [{"simple": []}]}}]}})
        );
    }

    #[test]
    fn cycles_stop() {
        let (_, errors) = read(
            "components:\n  a:\n    chain:\n      - $ref: '#/components/b'\n  b:\n    chain:\n      - $ref: '#/components/a'\n---\napi:\n  flow:\n    - $ref: '#/components/a'\n",
        );
        assert!(
            errors
                .iter()
                .any(|e| e.message.contains("more than 16 deep")),
            "{errors:?}"
        );
    }
}
