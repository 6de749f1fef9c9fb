//! The code's layout rules, checked on the sources: no import loop between the files of a
//! crate, a data plane that does not depend on the policies it runs, no source file over 1,200
//! lines, and a request path that reads as its phases.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn crates() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.rs` file under `dir`, by module path (`quick::scan`; `` for lib.rs).
fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(src).unwrap().with_extension("");
                let mut name = rel.to_string_lossy().replace('/', "::");
                if let Some(n) = name.strip_suffix("::mod") {
                    name = n.to_owned();
                }
                if name == "lib" || name == "main" {
                    name = String::new();
                }
                out.insert(name, std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    out
}

/// The text of a file without its test module and comments.
fn code(text: &str) -> String {
    let text = [
        "#[cfg(test)]\nmod tests {",
        "#[cfg(test)]\npub(crate) mod tests {",
    ]
    .iter()
    .filter_map(|m| text.find(m))
    .min()
    .map_or(text, |i| &text[..i]);
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The other files of the crate that `module` refers to.
fn references(module: &str, text: &str, all: &BTreeMap<String, String>) -> BTreeSet<String> {
    let parent: Vec<&str> = match module.rsplit_once("::") {
        Some((p, _)) => p.split("::").collect(),
        None => Vec::new(),
    };
    let mut out = BTreeSet::new();
    let mut add = |base: &[&str], path: &str| {
        let mut full: Vec<&str> = base.to_vec();
        full.extend(path.split("::").filter(|s| !s.is_empty()));
        for k in (1..=full.len()).rev() {
            let cand = full[..k].join("::");
            if all.contains_key(&cand) {
                if cand != module && !module.starts_with(&format!("{cand}::")) {
                    out.insert(cand);
                }
                break;
            }
        }
    };
    let bytes = text.as_bytes();
    for (kw, base) in [("crate::", Vec::new()), ("super::", parent.clone())] {
        let mut from = 0;
        while let Some(i) = text[from..].find(kw) {
            let start = from + i;
            from = start + kw.len();
            if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
                continue;
            }
            let rest = &text[from..];
            if let Some(group) = rest.strip_prefix('{') {
                let inner = &group[..group.find('}').unwrap_or(0)];
                for item in inner.split(',') {
                    add(&base, item.trim().split("::").next().unwrap_or(""));
                }
                continue;
            }
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(rest.len());
            add(&base, rest[..end].trim_end_matches(':'));
        }
    }
    out
}

/// The strongly connected groups of more than one file.
fn loops(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let names: Vec<&String> = graph.keys().collect();
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(n) = todo.pop() {
            for m in graph.get(&n).into_iter().flatten() {
                if seen.insert(m.clone()) {
                    todo.push(m.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        names.iter().map(|n| (*n, reach(n))).collect();
    let mut done = BTreeSet::new();
    for n in &names {
        if done.contains(*n) || !reaches[n].contains(*n) {
            continue;
        }
        let group: Vec<String> = names
            .iter()
            .filter(|m| reaches[n].contains(**m) && reaches[*m].contains(*n))
            .map(|m| (*m).clone())
            .collect();
        done.extend(group.iter().cloned());
        if group.len() > 1 {
            found.push(group);
        }
    }
    found
}

#[test]
fn no_import_loop_between_the_files_of_a_crate() {
    let mut problems = Vec::new();
    for e in std::fs::read_dir(crates()).unwrap() {
        let src = e.unwrap().path().join("src");
        if !src.is_dir() {
            continue;
        }
        let all = modules(&src);
        let graph: BTreeMap<String, BTreeSet<String>> = all
            .iter()
            .map(|(m, t)| (m.clone(), references(m, &code(t), &all)))
            .collect();
        for group in loops(&graph) {
            problems.push(format!("{}: {}", src.display(), group.join(" <-> ")));
        }
    }
    assert!(
        problems.is_empty(),
        "import loops:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_loop_finder_finds_loops() {
    let all: BTreeMap<String, String> = [("a", ""), ("b", ""), ("c", ""), ("c::d", "")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let refs = |m: &str, t: &str| references(m, t, &all);
    assert_eq!(
        refs("a", "use crate::b::X;"),
        BTreeSet::from(["b".to_owned()])
    );
    assert_eq!(refs("c::d", "use super::X;"), BTreeSet::new());
    assert_eq!(
        refs("a", "use crate::{b, c::d::Y};"),
        BTreeSet::from(["b".to_owned(), "c".to_owned()])
    );
    let graph = BTreeMap::from([
        ("a".to_owned(), BTreeSet::from(["b".to_owned()])),
        ("b".to_owned(), BTreeSet::from(["a".to_owned()])),
        ("c".to_owned(), BTreeSet::from(["a".to_owned()])),
    ]);
    assert_eq!(loops(&graph), vec![vec!["a".to_owned(), "b".to_owned()]]);
}

#[test]
fn the_data_plane_does_not_depend_on_the_policies() {
    let manifest = std::fs::read_to_string(crates().join("engine/Cargo.toml")).unwrap();
    for forbidden in [
        "turnpike-policies",
        "turnpike-openapi",
        "turnpike-soap",
        "turnpike-compile",
        "turnpike-config",
    ] {
        assert!(
            !manifest.contains(forbidden),
            "crates/engine depends on {forbidden}"
        );
    }
}

/// Files small enough to read: no source file over 1,200 lines (tests in their own files
/// count too).
#[test]
fn no_source_file_is_over_1200_lines() {
    let mut long = Vec::new();
    for entry in std::fs::read_dir(crates()).unwrap() {
        let src = entry.unwrap().path().join("src");
        if !src.is_dir() {
            continue;
        }
        for (module, text) in modules(&src) {
            let n = text.lines().count();
            if n > 1200 {
                long.push(format!("{} {module}: {n} lines", src.display()));
            }
        }
    }
    assert!(long.is_empty(), "{long:#?}");
}

/// The request path reads as its phases: `serve` stays a short sequence of calls, each phase
/// in a module of `engine/src/request/`.
#[test]
fn serve_reads_as_the_sequence_of_phases() {
    let text = std::fs::read_to_string(crates().join("engine/src/request/mod.rs")).unwrap();
    let start = text
        .find("pub async fn serve(")
        .expect("serve is in request/mod.rs");
    let end = start + text[start..].find("\n}\n").expect("serve ends");
    let lines = text[start..end].lines().count() + 1;
    assert!(lines <= 80, "serve has {lines} lines");
}
