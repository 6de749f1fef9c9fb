//! Reading OpenAPI documents: files (YAML or JSON), folders, and `http(s)://` URLs, with every
//! `$ref` to another file pulled into one self-contained document ("bundling"): the referenced
//! file is stored under `x-turnpike-bundled/<n>` of the root and the reference rewritten to point
//! there, so that everything later resolves references inside one JSON value.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use turnpike_config::fetch::{http_get_text, Wanted};
use turnpike_config::yaml::{self, Span};

pub use crate::marks::BUNDLED;

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
    // `$id` and `$anchor` are schema keywords of 3.1 (JSON Schema 2020-12) only.
    let ids = root
        .value
        .get("openapi")
        .and_then(Value::as_str)
        .is_some_and(|v| v.starts_with("3.1"));
    let mut docs = vec![root];
    let mut by_source: HashMap<Source, usize> = HashMap::new();
    by_source.insert(source.clone(), 0);
    let mut index = Index::default();
    let mut sites: Vec<RefSite> = Vec::new();
    let mut scanned = 0;
    loop {
        while scanned < docs.len() {
            let doc = &docs[scanned];
            let base = source_uri(&doc.source);
            index
                .resources
                .entry(base.clone())
                .or_insert((scanned, String::new()));
            let mut scan = Scan {
                doc: scanned,
                ids,
                index: &mut index,
                sites: &mut sites,
            };
            scan.walk(
                &doc.value,
                &base,
                false,
                false,
                &mut String::new(),
                &mut String::new(),
            )
            .map_err(|(key, m)| SpecError {
                at: format!("{}: {key}", doc.source),
                message: m,
            })?;
            scanned += 1;
        }
        // References to no known document or `$id` are files or URLs to read. Those written
        // relative to a document come first: an absolute URI, or one inside a schema with an
        // `$id`, may be the `$id` of a schema in a file still to be read.
        let unknown: Vec<&RefSite> = sites
            .iter()
            .filter(|s| !index.resources.contains_key(&s.target))
            .collect();
        let first: Vec<&RefSite> = match unknown.iter().any(|s| !s.deferred) {
            true => unknown.into_iter().filter(|s| !s.deferred).collect(),
            false => unknown,
        };
        let mut pending: Vec<(Source, usize)> = Vec::new();
        for site in first {
            let from = &docs[site.doc].source;
            let src = uri_source(&site.target).map_err(|m| SpecError {
                at: format!("{from}: {}", site.key),
                message: format!("`{}`: {m}", site.text),
            })?;
            if !by_source.contains_key(&src) {
                by_source.insert(src.clone(), docs.len() + pending.len());
                pending.push((src, site.doc));
            }
        }
        if pending.is_empty() {
            break;
        }
        for (src, from) in pending {
            let text = read(&src).map_err(|m| SpecError {
                at: format!("{}", docs[from].source),
                message: m,
            })?;
            let doc = parse(&src, &text)?;
            docs.push(doc);
        }
    }
    for site in &sites {
        let (doc, ptr) = index.target(site, &docs).map_err(|m| SpecError {
            at: format!("{}: {}", docs[site.doc].source, site.key),
            message: format!("`{}`: {m}", site.text),
        })?;
        let r = if doc == 0 {
            format!("#{ptr}")
        } else {
            format!("#/{BUNDLED}/{}{ptr}", doc - 1)
        };
        if let Some(slot) = docs[site.doc].value.pointer_mut(&site.ptr) {
            *slot = Value::String(r);
        }
    }
    for d in &mut docs {
        drop_ids(&mut d.value, false);
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

/// Keys whose values are data (examples, constants), where `$id` and `$anchor` are no keywords.
const LITERAL: &[&str] = &["example", "examples", "enum", "const", "default"];

/// A reference found in a document: a `$ref`, or a `discriminator.mapping` value that is a URI
/// reference rather than a schema name.
#[derive(Debug)]
struct RefSite {
    /// The document it is in.
    doc: usize,
    /// The JSON pointer of the string, to rewrite.
    ptr: String,
    /// The key path for messages (`paths./a.get.$ref`).
    key: String,
    /// As written.
    text: String,
    /// The absolute URI it points to, without the fragment (normalized).
    target: String,
    /// The fragment as written (a JSON pointer, an anchor name, or none).
    fragment: Option<String>,
    /// Absolute, or inside a schema with an `$id`: it may name an `$id` not read yet, so it is
    /// read as a file or URL only when nothing else is left to read.
    deferred: bool,
}

/// What the references of the loaded documents can point to.
#[derive(Debug, Default)]
struct Index {
    /// The URI of each document and of each schema with an `$id` → (document, JSON pointer).
    resources: HashMap<String, (usize, String)>,
    /// (URI of the enclosing resource, `$anchor` name) → (document, JSON pointer).
    anchors: HashMap<(String, String), (usize, String)>,
}

impl Index {
    /// The document and JSON pointer a reference points to.
    fn target(&self, site: &RefSite, docs: &[RawDoc]) -> Result<(usize, String), String> {
        let (doc, base) = self
            .resources
            .get(&site.target)
            .ok_or_else(|| format!("`{}` was not read", site.target))?;
        match site.fragment.as_deref() {
            None | Some("") => Ok((*doc, base.clone())),
            Some(f) if f.starts_with('/') => {
                let decoded = percent_encoding::percent_decode_str(f).decode_utf8_lossy();
                let value = &docs[*doc].value;
                if !base.is_empty()
                    && value.pointer(&format!("{base}{decoded}")).is_none()
                    && value.pointer(&decoded).is_some()
                {
                    // `#/components/...` inside a schema with an `$id` means the resource's
                    // own root in JSON Schema, but is commonly meant as the document's: it is
                    // taken so when the resource has no such place.
                    return Ok((*doc, f.to_owned()));
                }
                Ok((*doc, format!("{base}{f}")))
            }
            Some(name) => {
                let name = percent_encoding::percent_decode_str(name).decode_utf8_lossy();
                self.anchors
                    .get(&(site.target.clone(), name.clone().into_owned()))
                    .cloned()
                    .ok_or_else(|| {
                        format!(
                            "no `$anchor: {name}` in `{}` (fragments are JSON pointers, `#/...`, or 3.1 anchors)",
                            site.target
                        )
                    })
            }
        }
    }
}

/// Collects the references, `$id`s and `$anchor`s of one document.
struct Scan<'a> {
    doc: usize,
    ids: bool,
    index: &'a mut Index,
    sites: &'a mut Vec<RefSite>,
}

impl Scan<'_> {
    /// `base`: the URI references resolve against; `in_id`: inside a schema with an `$id`;
    /// `literal`: inside example data.
    fn walk(
        &mut self,
        v: &Value,
        base: &str,
        in_id: bool,
        literal: bool,
        ptr: &mut String,
        key: &mut String,
    ) -> Result<(), (String, String)> {
        match v {
            Value::Object(m) => {
                let mut base = std::borrow::Cow::Borrowed(base);
                let mut in_id = in_id;
                if self.ids && !literal {
                    if let Some(Value::String(id)) = m.get("$id") {
                        match id.strip_prefix('#') {
                            // A draft-7 style `$id: "#name"` is an anchor.
                            Some(name) if !name.is_empty() => {
                                self.anchor(&base, name, ptr);
                            }
                            Some(_) => {}
                            None => {
                                let uri = resolve(id, &base)
                                    .map_err(|m| (key.clone(), format!("`$id: {id}`: {m}")))?;
                                let uri = uri.split('#').next().unwrap_or("").to_owned();
                                self.index
                                    .resources
                                    .entry(uri.clone())
                                    .or_insert((self.doc, ptr.clone()));
                                base = std::borrow::Cow::Owned(uri);
                                in_id = true;
                            }
                        }
                    }
                    for k in ["$anchor", "$dynamicAnchor"] {
                        if let Some(Value::String(name)) = m.get(k) {
                            self.anchor(&base, name, ptr);
                        }
                    }
                }
                for (k, child) in m {
                    let (plen, klen) = (ptr.len(), key.len());
                    ptr.push('/');
                    ptr.push_str(&crate::pointer::escape(k));
                    if !key.is_empty() {
                        key.push('.');
                    }
                    key.push_str(k);
                    if let ("$ref", Value::String(r)) = (k.as_str(), child) {
                        self.site(r, &base, in_id, ptr, key)?;
                    } else {
                        if let ("discriminator", Value::Object(d)) = (k.as_str(), child) {
                            if !literal {
                                self.mapping(d, &base, in_id, ptr, key)?;
                            }
                        }
                        let literal = literal || LITERAL.contains(&k.as_str());
                        self.walk(child, &base, in_id, literal, ptr, key)?;
                    }
                    ptr.truncate(plen);
                    key.truncate(klen);
                }
            }
            Value::Array(a) => {
                for (i, child) in a.iter().enumerate() {
                    let (plen, klen) = (ptr.len(), key.len());
                    ptr.push('/');
                    ptr.push_str(&i.to_string());
                    key.push_str(&format!("[{i}]"));
                    self.walk(child, base, in_id, literal, ptr, key)?;
                    ptr.truncate(plen);
                    key.truncate(klen);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The `mapping` values of a discriminator that are URI references (not schema names).
    fn mapping(
        &mut self,
        d: &serde_json::Map<String, Value>,
        base: &str,
        in_id: bool,
        ptr: &str,
        key: &str,
    ) -> Result<(), (String, String)> {
        if !d.get("propertyName").is_some_and(Value::is_string) {
            return Ok(());
        }
        let Some(Value::Object(mapping)) = d.get("mapping") else {
            return Ok(());
        };
        for (value, t) in mapping {
            let Value::String(t) = t else { continue };
            if !t.contains(['/', '#', ':']) {
                continue; // a schema name
            }
            let p = format!("{ptr}/mapping/{}", crate::pointer::escape(value));
            let k = format!("{key}.mapping.{value}");
            self.site(t, base, in_id, &p, &k)?;
        }
        Ok(())
    }

    fn anchor(&mut self, base: &str, name: &str, ptr: &str) {
        self.index
            .anchors
            .entry((base.to_owned(), name.to_owned()))
            .or_insert((self.doc, ptr.to_owned()));
    }

    fn site(
        &mut self,
        r: &str,
        base: &str,
        in_id: bool,
        ptr: &str,
        key: &str,
    ) -> Result<(), (String, String)> {
        let (target, fragment) = match r.split_once('#') {
            Some(("", frag)) => (base.to_owned(), Some(frag.to_owned())),
            other => {
                let uri = resolve(r, base).map_err(|m| (key.to_owned(), format!("`{r}`: {m}")))?;
                let target = uri.split('#').next().unwrap_or("").to_owned();
                (target, other.map(|(_, f)| f.to_owned()))
            }
        };
        self.sites.push(RefSite {
            doc: self.doc,
            ptr: ptr.to_owned(),
            key: key.to_owned(),
            text: r.to_owned(),
            target,
            fragment,
            deferred: in_id || has_scheme(r),
        });
        Ok(())
    }
}

/// Removes the `$id` and `$anchor` keywords (outside example data), which the references no
/// longer need.
fn drop_ids(v: &mut Value, literal: bool) {
    match v {
        Value::Object(m) => {
            if !literal {
                if m.get("$id").is_some_and(Value::is_string) {
                    m.remove("$id");
                }
                if m.get("$anchor").is_some_and(Value::is_string) {
                    m.remove("$anchor");
                }
            }
            for (k, c) in m.iter_mut() {
                drop_ids(c, literal || LITERAL.contains(&k.as_str()));
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|c| drop_ids(c, literal)),
        _ => {}
    }
}

fn has_scheme(r: &str) -> bool {
    r.split_once(':').is_some_and(|(s, _)| {
        !s.is_empty()
            && s.starts_with(|c: char| c.is_ascii_alphabetic())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    })
}

/// Characters percent-encoded when a file path or a reference as written becomes a URI.
const URI_ESCAPE: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'<')
    .add(b'>')
    .add(b'\\')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}');

/// Resolves the URI reference `r` against the absolute URI `base`; the result is normalized.
fn resolve(r: &str, base: &str) -> Result<String, String> {
    let escaped = percent_encoding::utf8_percent_encode(r, URI_ESCAPE).to_string();
    let reference = fluent_uri::UriRef::parse(escaped.as_str())
        .map_err(|e| format!("not a URI reference: {e}"))?;
    let base = fluent_uri::Uri::parse(base).map_err(|e| format!("invalid base URI: {e}"))?;
    let uri = reference
        .resolve_against(&base)
        .map_err(|e| format!("cannot be resolved against `{base}`: {e}"))?;
    Ok(uri.normalize().as_str().to_owned())
}

/// The URI of a document: its URL, or the `file://` URI of its absolute path (normalized).
fn source_uri(s: &Source) -> String {
    let raw = match s {
        Source::Url(u) => u.split('#').next().unwrap_or("").to_owned(),
        Source::File(p) => {
            let abs = std::path::absolute(p).unwrap_or_else(|_| p.clone());
            let path = abs.to_string_lossy().replace('\\', "/");
            let path = percent_encoding::utf8_percent_encode(&path, URI_ESCAPE)
                .to_string()
                .replace('#', "%23")
                .replace('?', "%3F");
            if path.starts_with('/') {
                format!("file://{path}")
            } else {
                format!("file:///{path}")
            }
        }
    };
    match fluent_uri::Uri::parse(raw.as_str()) {
        Ok(u) => u.normalize().as_str().to_owned(),
        Err(_) => raw,
    }
}

/// The file or URL an absolute URI names.
fn uri_source(uri: &str) -> Result<Source, String> {
    if let Some(path) = uri.strip_prefix("file://") {
        let path = path.strip_prefix("localhost").unwrap_or(path);
        let path = percent_encoding::percent_decode_str(path).decode_utf8_lossy();
        return Ok(Source::File(PathBuf::from(path.as_ref())));
    }
    if uri.starts_with("http://") || uri.starts_with("https://") {
        return Ok(Source::Url(uri.to_owned()));
    }
    Err("names no `$id` of the spec, and is neither a file nor an http(s) URL".into())
}

/// Fetches an `http://` or `https://` URL (load time only: 16 MB at most). Returns the
/// document as text.
pub fn fetch(url: &str) -> Result<String, String> {
    http_get_text(
        url,
        Wanted {
            accept: "application/yaml, application/json, */*",
            max_bytes: 16 << 20,
        },
    )
    .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests;
