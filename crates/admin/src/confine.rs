//! What a document written through the admin API may not open beyond what the operator's own
//! files allow: a `webServer` policy serves files only from a folder inside one of
//! `admin.allowedDocBases` (none by default), so that a stored API cannot publish the
//! gateway's configuration files, keys or tokens. (Documents of other kinds than `api`,
//! `upstream`, `consumer` and `global` — `proxy:`, `admin:`, `gateway:` — are refused by
//! [`crate::document::parse`] already.)

use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use crate::document::{Doc, DocError, REQUEST};

/// The errors of `doc` (stored in the folder `store_dir`) against `allowed` (canonical
/// folders): one per `webServer` whose `docBase` lies outside all of them.
pub fn check(doc: &Doc, store_dir: &Path, allowed: &[PathBuf]) -> Vec<DocError> {
    let mut errors = Vec::new();
    walk(&doc.json, &mut String::new(), &mut |path, settings| {
        let base = settings
            .get("docBase")
            .and_then(Value::as_str)
            .unwrap_or("docBase");
        let dir = resolve(&store_dir.join(base));
        if allowed.iter().any(|a| dir.starts_with(a)) {
            return;
        }
        let key = if settings.get("docBase").is_some() {
            format!("{path}.docBase")
        } else {
            path.to_owned()
        };
        let at = doc.spans.get(&key).or_else(|| doc.spans.get(path));
        let listed = if allowed.is_empty() {
            "`admin.allowedDocBases` allows no folder".to_owned()
        } else {
            let names: Vec<String> = allowed.iter().map(|a| a.display().to_string()).collect();
            format!("`admin.allowedDocBases` allows {}", names.join(", "))
        };
        errors.push(DocError {
            file: REQUEST.into(),
            line: at.map_or(0, |s| s.line),
            column: at.map_or(0, |s| s.column),
            key,
            message: format!(
                "a document written through the admin API may not serve `{base}` with `webServer`: {listed}"
            ),
        });
    });
    errors
}

/// Calls `found` with the key path and settings of every `webServer` in `v`.
fn walk(v: &Value, path: &mut String, found: &mut dyn FnMut(&str, &Value)) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(k);
                if k == "webServer" {
                    found(path, child);
                }
                walk(child, path, found);
                path.truncate(len);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                walk(child, path, found);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// `p` with links resolved where it exists, else with `.` and `..` taken away as written.
fn resolve(p: &Path) -> PathBuf {
    if let Ok(c) = std::fs::canonicalize(p) {
        return c;
    }
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn web_servers_outside_the_allowed_folders_are_named() {
        let store = tempfile::tempdir().unwrap();
        let site = store.path().join("site");
        std::fs::create_dir(&site).unwrap();
        let site = std::fs::canonicalize(&site).unwrap();
        let docs = crate::document::parse(
            "api:\n  name: a\n  port: 1\n  flow:\n    - if:\n        test: 'true'\n        flow: [ { webServer: { docBase: /etc } } ]\n    - webServer: { docBase: site/../.. }\n",
        )
        .unwrap();
        let errs = check(&docs[0], store.path(), std::slice::from_ref(&site));
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert_eq!(errs[0].key, "api.flow[0].if.flow[0].webServer.docBase");
        assert_eq!(errs[0].line, 7);
        assert!(errs[1].message.contains("site/../.."), "{errs:?}");
        let ok = crate::document::parse(
            "api: { name: a, port: 1, flow: [ { webServer: { docBase: site } } ] }",
        )
        .unwrap();
        assert!(check(&ok[0], store.path(), &[site]).is_empty());
        // The default docBase is checked too, and no folder is allowed by default.
        let default =
            crate::document::parse("api: { name: a, port: 1, flow: [ { webServer: {} } ] }")
                .unwrap();
        let errs = check(&default[0], store.path(), &[]);
        assert!(errs[0].message.contains("allows no folder"), "{errs:?}");
    }
}
