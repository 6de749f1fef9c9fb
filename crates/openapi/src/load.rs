//! Reading OpenAPI documents: files (YAML or JSON), folders, and `http(s)://` URLs, with every
//! `$ref` to another file pulled into one self-contained document ("bundling"): the referenced
//! file is stored under `x-turnpike-bundled/<n>` of the root and the reference rewritten to point
//! there, so that everything later resolves references inside one JSON value.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use turnpike_config::yaml::{self, Span};

/// The key of the root object under which referenced files are stored.
pub const BUNDLED: &str = "x-turnpike-bundled";

/// Where a spec (or a file it references) came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Source {
    /// A local file.
    File(PathBuf),
    /// An `http://` URL.
    Url(String),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::File(p) => write!(f, "{}", p.display()),
            Source::Url(u) => f.write_str(u),
        }
    }
}

/// An error in a spec: where (file, line and column when known, key path) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    /// `file:line:column: key` or as much of it as is known.
    pub at: String,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for SpecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.at.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.at, self.message)
        }
    }
}

/// One file of a spec, read into JSON, with the positions of its values (YAML only).
#[derive(Debug)]
struct RawDoc {
    source: Source,
    value: Value,
    spans: HashMap<String, Span>,
}

/// A loaded, bundled spec: one JSON document, plus what is needed to point at its parts.
#[derive(Debug)]
pub struct LoadedSpec {
    /// Where the root document came from.
    pub source: Source,
    /// The root document with every referenced file under [`BUNDLED`].
    pub doc: Value,
    /// The original text of the root file (served as the YAML form when it was YAML).
    pub text: String,
    files: Vec<(Source, HashMap<String, Span>)>,
}

impl LoadedSpec {
    /// The local files read (the root and every file it references).
    pub fn local_files(&self) -> Vec<PathBuf> {
        self.files
            .iter()
            .filter_map(|(s, _)| match s {
                Source::File(p) => Some(p.clone()),
                Source::Url(_) => None,
            })
            .collect()
    }

    /// Describes the place of a JSON pointer of the bundled document as `file:line:column: key`.
    pub fn locate(&self, pointer: &str) -> String {
        let mut segs: Vec<String> = pointer
            .trim_start_matches('#')
            .split('/')
            .skip(1)
            .map(|s| s.replace("~1", "/").replace("~0", "~"))
            .collect();
        let mut file = 0usize;
        if segs.first().map(String::as_str) == Some(BUNDLED) && segs.len() >= 2 {
            file = segs[1].parse::<usize>().map_or(usize::MAX, |n| n + 1);
            segs.drain(..2);
        }
        let Some((source, spans)) = self.files.get(file) else {
            return pointer.to_owned();
        };
        let mut key = String::new();
        for s in &segs {
            if s.chars().all(|c| c.is_ascii_digit()) && !s.is_empty() {
                key.push_str(&format!("[{s}]"));
            } else {
                if !key.is_empty() {
                    key.push('.');
                }
                key.push_str(s);
            }
        }
        let mut probe = key.as_str();
        let span = loop {
            if let Some(s) = spans.get(probe) {
                break Some(*s);
            }
            match probe.rfind(['.', '[']) {
                Some(i) => probe = &probe[..i],
                None => break spans.get("").copied(),
            }
        };
        match span {
            Some(s) => format!("{source}:{}:{}: {key}", s.line, s.column),
            None => format!("{source}: {key}"),
        }
    }
}

/// Lists the spec files of a folder (`*.yaml`, `*.yml`, `*.json`), in name order.
pub fn list_dir(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let rd = std::fs::read_dir(dir).map_err(|e| format!("cannot read `{}`: {e}", dir.display()))?;
    let mut files: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("yaml" | "yml" | "json")
                )
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(format!(
            "`{}` holds no *.yaml, *.yml or *.json file",
            dir.display()
        ));
    }
    Ok(files)
}

/// Resolves a configured `location` against the folder of the config file.
pub fn source_of(location: &str, base: &Path) -> Result<Source, String> {
    if location.starts_with("http://") || location.starts_with("https://") {
        return Ok(Source::Url(location.to_owned()));
    }
    Ok(Source::File(base.join(location)))
}

/// Loads the spec at `source` and every file it references.
pub fn load(source: &Source) -> Result<LoadedSpec, SpecError> {
    let text = read(source).map_err(|m| SpecError {
        at: String::new(),
        message: m,
    })?;
    let root = parse(source, &text)?;
    let mut docs = vec![root];
    let mut index: HashMap<Source, usize> = HashMap::new();
    index.insert(source.clone(), 0);
    let mut i = 0;
    while i < docs.len() {
        let mut value = std::mem::take(&mut docs[i].value);
        let src = docs[i].source.clone();
        let mut pending = Vec::new();
        let result = rewrite_refs(
            &mut value,
            i,
            &src,
            &mut index,
            &mut pending,
            &mut String::new(),
        );
        docs[i].value = value;
        result.map_err(|(key, m)| SpecError {
            at: format!("{src}: {key}"),
            message: m,
        })?;
        for s in pending {
            let text = read(&s).map_err(|m| SpecError {
                at: format!("{src}"),
                message: m,
            })?;
            docs.push(parse(&s, &text)?);
        }
        i += 1;
    }
    let mut iter = docs.into_iter();
    let Some(first) = iter.next() else {
        return Err(SpecError {
            at: String::new(),
            message: "empty spec".into(),
        });
    };
    let mut files = vec![(first.source.clone(), first.spans)];
    let mut doc = first.value;
    let bundled: Vec<Value> = iter
        .map(|d| {
            files.push((d.source, d.spans));
            d.value
        })
        .collect();
    if !bundled.is_empty() {
        if let Value::Object(m) = &mut doc {
            m.insert(BUNDLED.into(), Value::Array(bundled));
        }
    }
    Ok(LoadedSpec {
        source: source.clone(),
        doc,
        text,
        files,
    })
}

fn read(source: &Source) -> Result<String, String> {
    match source {
        Source::File(p) => {
            std::fs::read_to_string(p).map_err(|e| format!("cannot read `{}`: {e}", p.display()))
        }
        Source::Url(u) => fetch(u),
    }
}

fn parse(source: &Source, text: &str) -> Result<RawDoc, SpecError> {
    let at = |line: u32, col: u32| format!("{source}:{line}:{col}");
    if text.trim_start().starts_with('{') {
        let value: Value = serde_json::from_str(text).map_err(|e| SpecError {
            at: at(e.line() as u32, e.column() as u32),
            message: format!("invalid JSON: {e}"),
        })?;
        return Ok(RawDoc {
            source: source.clone(),
            value,
            spans: HashMap::new(),
        });
    }
    // Specs are not config: `${NAME}` stays as written.
    let keep = |name: &str| Some(format!("${{{name}}}"));
    let nodes = yaml::parse_documents(text, &keep).map_err(|errs| {
        let e = errs.into_iter().next();
        SpecError {
            at: e
                .as_ref()
                .map_or_else(|| format!("{source}"), |e| at(e.span.line, e.span.column)),
            message: e.map_or_else(
                || "invalid YAML".into(),
                |e| format!("invalid YAML: {}", e.message),
            ),
        }
    })?;
    let Some(node) = nodes.first() else {
        return Err(SpecError {
            at: format!("{source}"),
            message: "the file holds no document".into(),
        });
    };
    let mut spans = HashMap::new();
    let value = yaml::to_json(node, &mut String::new(), &mut spans);
    Ok(RawDoc {
        source: source.clone(),
        value,
        spans,
    })
}

/// Rewrites every `$ref` of document `doc` to a reference inside the bundled root; files not yet
/// known are numbered and queued in `pending`.
fn rewrite_refs(
    v: &mut Value,
    doc: usize,
    src: &Source,
    index: &mut HashMap<Source, usize>,
    pending: &mut Vec<Source>,
    key: &mut String,
) -> Result<(), (String, String)> {
    match v {
        Value::Object(m) => {
            for (k, child) in m.iter_mut() {
                let len = key.len();
                if !key.is_empty() {
                    key.push('.');
                }
                key.push_str(k);
                if k == "$ref" {
                    if let Value::String(r) = child {
                        *r = rewrite_one(r, doc, src, index, pending)
                            .map_err(|m| (key.clone(), m))?;
                    }
                } else {
                    rewrite_refs(child, doc, src, index, pending, key)?;
                }
                key.truncate(len);
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter_mut().enumerate() {
                let len = key.len();
                key.push_str(&format!("[{i}]"));
                rewrite_refs(child, doc, src, index, pending, key)?;
                key.truncate(len);
            }
        }
        _ => {}
    }
    Ok(())
}

fn rewrite_one(
    r: &str,
    doc: usize,
    src: &Source,
    index: &mut HashMap<Source, usize>,
    pending: &mut Vec<Source>,
) -> Result<String, String> {
    let (file, frag) = match r.split_once('#') {
        Some((f, frag)) => (f, frag),
        None => (r, ""),
    };
    let target = if file.is_empty() {
        doc
    } else {
        let s = resolve_relative(src, file)?;
        match index.get(&s) {
            Some(&n) => n,
            None => {
                let n = index.len();
                index.insert(s.clone(), n);
                pending.push(s);
                n
            }
        }
    };
    if !frag.is_empty() && !frag.starts_with('/') {
        return Err(format!(
            "`{r}`: only JSON-pointer fragments (`#/...`) are supported"
        ));
    }
    Ok(if target == 0 {
        format!("#{frag}")
    } else {
        format!("#/{BUNDLED}/{}{frag}", target - 1)
    })
}

fn resolve_relative(src: &Source, file: &str) -> Result<Source, String> {
    if file.starts_with("http://") || file.starts_with("https://") {
        return Ok(Source::Url(file.to_owned()));
    }
    Ok(match src {
        Source::File(p) => Source::File(p.parent().unwrap_or(Path::new(".")).join(file)),
        Source::Url(u) => {
            let base = u.rsplit_once('/').map_or(u.as_str(), |(b, _)| b);
            Source::Url(format!("{base}/{file}"))
        }
    })
}

/// Fetches an `http://` or `https://` URL (load time only: 10 s timeout, 16 MB at most).
pub fn fetch(url: &str) -> Result<String, String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let mut res = agent
        .get(url)
        .header("Accept", "application/yaml, application/json, */*")
        .call()
        .map_err(|e| format!("fetching `{url}` failed: {e}"))?;
    res.body_mut()
        .with_config()
        .limit(16 << 20)
        .read_to_string()
        .map_err(|e| format!("reading `{url}` failed: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn bundles_refs_to_other_files_and_locates_values() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("main.yaml"),
            "openapi: 3.0.3\npaths:\n  /a:\n    get:\n      responses:\n        '200':\n          $ref: 'common/defs.yaml#/responses/Ok'\n",
        )
        .unwrap();
        std::fs::create_dir(dir.path().join("common")).unwrap();
        std::fs::write(
            dir.path().join("common/defs.yaml"),
            "responses:\n  Ok:\n    description: ok\n    content:\n      application/json:\n        schema:\n          $ref: '#/schemas/Thing'\nschemas:\n  Thing:\n    type: object\n",
        )
        .unwrap();
        let spec = load(&Source::File(dir.path().join("main.yaml"))).unwrap();
        assert_eq!(
            spec.doc["paths"]["/a"]["get"]["responses"]["200"]["$ref"],
            "#/x-turnpike-bundled/0/responses/Ok"
        );
        assert_eq!(
            spec.doc[BUNDLED][0]["responses"]["Ok"]["content"]["application/json"]["schema"]
                ["$ref"],
            "#/x-turnpike-bundled/0/schemas/Thing"
        );
        let at = spec.locate("#/x-turnpike-bundled/0/schemas/Thing/type");
        assert!(at.ends_with("defs.yaml:10:11: schemas.Thing.type"), "{at}");
        let at = spec.locate("#/paths/~1a/get");
        assert!(
            at.contains("main.yaml:") && at.ends_with(": paths./a.get"),
            "{at}"
        );
    }

    #[test]
    fn missing_files_and_https_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("m.yaml"), "x:\n  $ref: 'nope.yaml'\n").unwrap();
        let e = load(&Source::File(dir.path().join("m.yaml"))).unwrap_err();
        assert!(e.message.contains("nope.yaml"), "{e}");
        assert_eq!(
            source_of("https://x/y.yaml", dir.path()).unwrap(),
            Source::Url("https://x/y.yaml".into())
        );
        assert!(list_dir(dir.path()).unwrap().len() == 1);
    }

    #[test]
    fn fetches_http_specs_and_their_references() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let mut paths = Vec::new();
            for _ in 0..2 {
                let (mut s, _) = listener.accept().unwrap();
                let mut req = Vec::new();
                let mut buf = [0u8; 1024];
                while !req.ends_with(b"\r\n\r\n") {
                    let n = s.read(&mut buf).unwrap();
                    assert!(n > 0);
                    req.extend_from_slice(&buf[..n]);
                }
                let req = String::from_utf8_lossy(&req).into_owned();
                let path = req.split_whitespace().nth(1).unwrap().to_owned();
                let body = if path == "/specs/main.yaml" {
                    "openapi: 3.0.3\npaths: {}\ncomponents:\n  schemas:\n    A: {$ref: 'common.yaml#/B'}\n"
                } else {
                    "B: {type: string}\n"
                };
                write!(
                    s,
                    "HTTP/1.0 200 OK\r\nContent-Type: application/yaml\r\n\r\n{body}"
                )
                .unwrap();
                paths.push(path);
            }
            paths
        });
        let spec = load(&Source::Url(format!(
            "http://127.0.0.1:{port}/specs/main.yaml"
        )))
        .unwrap();
        assert_eq!(
            spec.doc["components"]["schemas"]["A"]["$ref"],
            "#/x-turnpike-bundled/0/B"
        );
        assert_eq!(spec.doc[BUNDLED][0]["B"]["type"], "string");
        assert_eq!(
            server.join().unwrap(),
            ["/specs/main.yaml", "/specs/common.yaml"]
        );
        assert!(fetch(&format!("http://127.0.0.1:{port}/gone")).is_err());
    }
}
