//! Every policy has its page in `docs/policies/`, and each page's settings table names exactly
//! the settings the policy's JSON Schema has: none undocumented, none documented that does not
//! exist.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::Value;
use turnpike_policies::registry::{json_schema, POLICIES};

fn docs() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/policies")
}

/// The setting paths of the page's `## Settings` table (first column, in backticks).
fn documented(page: &str) -> Vec<String> {
    let Some(start) = page.find("\n## Settings") else {
        return Vec::new();
    };
    let section = &page[start + 1..];
    let section = match section[3..].find("\n## ") {
        Some(end) => &section[..end + 3],
        None => section,
    };
    section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_owned)
        .collect()
}

/// Follows `$ref`s into the root's `$defs`.
fn resolve<'a>(root: &'a Value, mut s: &'a Value) -> &'a Value {
    while let Some(r) = s.get("$ref").and_then(Value::as_str) {
        let name = r.trim_start_matches("#/$defs/");
        s = &root["$defs"][name];
    }
    s
}

/// The schemas `s` may take: itself, or its alternatives (`anyOf`/`oneOf`/`allOf`, which is
/// how optional settings and enums appear), resolved.
fn alternatives<'a>(root: &'a Value, s: &'a Value) -> Vec<&'a Value> {
    let s = resolve(root, s);
    let mut out = vec![s];
    for k in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(a)) = s.get(k) {
            for alt in a {
                out.extend(alternatives(root, alt));
            }
        }
    }
    out
}

/// The schema at a documented path (`jwks[].url`, `stores[].simple[].secret.value`).
fn lookup<'a>(root: &'a Value, settings: &'a Value, path: &str) -> Option<&'a Value> {
    let mut here = vec![settings];
    for seg in path.split('.') {
        let (name, items) = match seg.strip_suffix("[]") {
            Some(n) => (n, true),
            None => (seg, false),
        };
        let mut next = Vec::new();
        for s in &here {
            for alt in alternatives(root, s) {
                if let Some(p) = alt.get("properties").and_then(|p| p.get(name)) {
                    next.push(p);
                }
            }
        }
        if items {
            next = next
                .into_iter()
                .flat_map(|s| alternatives(root, s))
                .filter_map(|s| s.get("items"))
                .collect();
        }
        if next.is_empty() {
            return None;
        }
        here = next;
    }
    here.first().copied()
}

#[test]
fn every_policy_page_documents_exactly_its_settings() {
    let root = json_schema();
    let alternatives_of_policies = root["$defs"]["PolicyConfig"]["oneOf"].as_array().unwrap();
    let mut problems = Vec::new();
    for kind in POLICIES {
        let path = docs().join(format!("{}.md", kind.name));
        let page = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (every policy needs a page)", path.display()));
        assert!(
            page.starts_with(&format!("# `{}`\n", kind.name)),
            "{} must start with its title",
            path.display()
        );
        assert!(
            page.contains("\n## Settings"),
            "{} has no `## Settings`",
            path.display()
        );
        let settings = alternatives_of_policies
            .iter()
            .find_map(|a| a["properties"].get(kind.name))
            .unwrap_or_else(|| panic!("{} is not in the schema", kind.name));
        // A policy whose settings are a list (`setCookies`) documents the keys of its items.
        let settings = resolve(&root, settings)
            .get("items")
            .filter(|_| resolve(&root, settings).get("type") == Some(&Value::from("array")))
            .unwrap_or(settings);
        // The settings' keys; a policy written in several shapes (a map, or a list) declares
        // the keys of every shape.
        let declared: BTreeSet<String> = alternatives(&root, settings)
            .into_iter()
            .filter_map(|a| a.get("properties").and_then(Value::as_object))
            .flat_map(|p| p.keys().cloned())
            .collect();
        let rows = documented(&page);
        let top: BTreeSet<String> = rows
            .iter()
            .map(|r| r.split(['.', '[']).next().unwrap_or("").to_owned())
            .collect();
        for missing in declared.difference(&top) {
            problems.push(format!("{}: `{missing}` is not documented", kind.name));
        }
        for row in &rows {
            if lookup(&root, settings, row).is_none() {
                problems.push(format!(
                    "{}: `{row}` is documented but not a setting",
                    kind.name
                ));
            }
        }
        if declared.is_empty() && !page.contains("This policy has no settings.") {
            problems.push(format!("{}: say that it has no settings", kind.name));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_index_lists_every_policy_page() {
    let index = std::fs::read_to_string(docs().join("README.md")).unwrap();
    for kind in POLICIES {
        assert!(
            index.contains(&format!("({}.md)", kind.name)),
            "docs/policies/README.md does not link {}.md",
            kind.name
        );
    }
}

#[test]
fn the_table_checks_itself() {
    let root = json_schema();
    let jwt = root["$defs"]["PolicyConfig"]["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|a| a["properties"].get("jwtAuth"))
        .unwrap();
    assert!(lookup(&root, jwt, "jwks[].url").is_some());
    assert!(lookup(&root, jwt, "jwks[].nope").is_none());
    assert!(lookup(&root, jwt, "allow.consumers").is_some());
    assert_eq!(
        documented("x\n## Settings\n\n| a | b |\n|---|---|\n| `one` | x |\n| `two.three` | y |\n\n## Example\n| `no` |"),
        ["one", "two.three"]
    );
}

/// Every Membrane policy Turnpike refuses is in the migration guide, with what to use instead,
/// and none of them is also a Turnpike policy.
#[test]
fn every_unsupported_membrane_policy_is_in_the_migration_guide() {
    let guide = std::fs::read_to_string(docs().join("../membrane.md")).expect("docs/membrane.md");
    let mut problems = Vec::new();
    for (name, instead) in turnpike_policies::membrane::UNSUPPORTED {
        if !guide.contains(&format!("`{name}`")) {
            problems.push(format!("`{name}` is not in docs/membrane.md"));
        }
        if POLICIES.iter().any(|k| k.name == *name) {
            problems.push(format!("`{name}` is a policy and listed as unsupported"));
        }
        if instead.trim().is_empty() {
            problems.push(format!("`{name}` has no alternative"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
