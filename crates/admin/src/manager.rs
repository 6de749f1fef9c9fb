//! The configuration manager: the one place that changes the running configuration. It loads
//! the configuration files together with the stored documents, compiles them, applies the
//! result to the gateway, and keeps what is running (revision, documents, the last change's
//! result) for the admin API. Changes are serialised: each is checked against the whole
//! configuration before it is written, so an invalid document never reaches the store.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;
use turnpike_config::{ConfigErrors, ConfigSet, Overlay};
use turnpike_engine::{Compiled, Gateway};

use crate::document::{self, Doc, DocError, REQUEST};
use crate::etcd::{Documents, Etcd, EtcdError, Expect};
use crate::store::{DirStore, Kind};

/// How long a change written to etcd may take to come back through the watch and be applied
/// before the API answers that it is stored but not applied yet.
const APPLY_WAIT: Duration = Duration::from_secs(5);

/// Why a change was refused.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// The document or the configuration it makes has errors.
    #[error("the configuration would have errors")]
    Invalid(Vec<DocError>),
    /// The document is defined in a configuration file, which the API does not change.
    #[error("`{0}` is defined in {1}, which the admin API does not change")]
    ReadOnly(String, String),
    /// A configuration file defines a document of that name already.
    #[error("`{0}` is defined in {1} already: a stored document cannot take its name")]
    Conflict(String, String),
    /// No store is configured.
    #[error("no `admin.store` is configured: documents cannot be changed through the API")]
    NoStore,
    /// The document does not exist.
    #[error("no such document")]
    NotFound,
    /// `If-Match` / `If-None-Match` did not hold.
    #[error("the document changed since it was read (its ETag is now {0})")]
    Stale(String),
    /// The change compiled but could not be applied (a port in use).
    #[error("{0}")]
    Apply(String),
    /// The store failed (disk, etcd).
    #[error("the store failed: {0}")]
    Store(String),
    /// Written to etcd, but not applied here within the wait (etcd revision).
    #[error("stored in etcd at revision {0}, not applied here yet")]
    Pending(i64),
}

impl From<EtcdError> for ChangeError {
    fn from(e: EtcdError) -> Self {
        match e {
            EtcdError::Changed => ChangeError::Stale("changed in etcd".into()),
            EtcdError::Unavailable(m) => ChangeError::Store(m),
        }
    }
}

/// Documents a gateway did not apply, with their errors.
pub type RejectedDocs = Vec<((Kind, String), Vec<String>)>;

/// The result of the last attempt to change the configuration.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LastChange {
    /// When (seconds since the Unix epoch).
    pub at: u64,
    /// What asked for it: `start`, `signal`, `files`, `admin`, `etcd`.
    pub trigger: String,
    /// Whether it was applied.
    pub ok: bool,
    /// Its errors, when it was not.
    pub errors: Vec<String>,
}

struct State {
    revision: u64,
    set: ConfigSet,
    last: LastChange,
}

/// A document of the running configuration.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Its kind.
    pub kind: Kind,
    /// Its name.
    pub name: String,
    /// `file` or `store`.
    pub source: &'static str,
    /// `file:line:column` of the document.
    pub location: String,
    /// The document as written (environment references kept).
    pub json: Value,
    /// Its entity tag.
    pub etag: String,
}

/// Which documents a change touches, and listeners it opens or closes.
#[derive(Debug, Default, Clone, serde::Serialize, PartialEq, Eq)]
pub struct Diff {
    /// Documents added, by kind (`apis`, ...).
    pub added: Vec<String>,
    /// Documents changed.
    pub changed: Vec<String>,
    /// Documents removed.
    pub removed: Vec<String>,
    /// Listening addresses opened.
    pub listeners_opened: Vec<String>,
    /// Listening addresses closed.
    pub listeners_closed: Vec<String>,
}

/// What a successful change did.
#[derive(Debug, Clone)]
pub struct Applied {
    /// The configuration revision after it.
    pub revision: u64,
    /// The document's entity tag after it (`None` when removed).
    pub etag: Option<String>,
    /// True when the document did not exist before.
    pub created: bool,
}

/// The configuration manager.
pub struct Manager {
    gateway: Arc<Gateway>,
    files: Vec<PathBuf>,
    store: Option<DirStore>,
    state: Mutex<State>,
    started: Instant,
    etcd: OnceLock<Arc<Etcd>>,
    /// Folders `webServer` policies of stored documents may serve (none until set).
    doc_bases: OnceLock<Vec<PathBuf>>,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn compiled(set: &ConfigSet, snapshot: turnpike_engine::Snapshot) -> Compiled {
    let mut files = set.files.clone();
    files.extend(snapshot.spec_files.iter().cloned());
    Compiled { snapshot, files }
}

/// The compile stage for the gateway's own reloads (`Gateway::reload`): files and store alike.
struct StoreCompiler;

impl turnpike_engine::Compiler for StoreCompiler {
    fn compile(
        &self,
        sources: &[PathBuf],
    ) -> Result<Compiled, Box<dyn std::error::Error + Send + Sync>> {
        let (set, snapshot) = turnpike_compile::load_and_compile(sources)?;
        Ok(compiled(&set, snapshot))
    }
}

impl Manager {
    /// Loads and compiles `files` and the documents of `store`, and starts the gateway.
    pub fn start(
        files: Vec<PathBuf>,
        store: Option<DirStore>,
    ) -> Result<Manager, Box<dyn std::error::Error + Send + Sync>> {
        let sources = sources(&files, store.as_ref());
        let (set, snapshot) = turnpike_compile::load_and_compile(&sources)?;
        turnpike_telemetry::stats::process()
            .revision
            .store(1, std::sync::atomic::Ordering::Relaxed);
        let gateway =
            Gateway::start_compiled(compiled(&set, snapshot), sources, Arc::new(StoreCompiler))?;
        Ok(Manager {
            gateway: Arc::new(gateway),
            files,
            store,
            state: Mutex::new(State {
                revision: 1,
                set,
                last: LastChange {
                    at: now_secs(),
                    trigger: "start".into(),
                    ok: true,
                    errors: Vec::new(),
                },
            }),
            started: Instant::now(),
            etcd: OnceLock::new(),
            doc_bases: OnceLock::new(),
        })
    }

    /// Lets `webServer` policies of documents written through the API serve the folders
    /// `dirs` (canonical paths; `admin.allowedDocBases`). Without it they may serve none.
    pub fn allow_doc_bases(&self, dirs: Vec<PathBuf>) {
        let _ = self.doc_bases.set(dirs);
    }

    /// The errors of a document about to be stored that opens what the operator did not allow.
    fn confined(&self, store: &DirStore, doc: &Doc) -> Vec<DocError> {
        let allowed = self.doc_bases.get().map_or(&[][..], Vec::as_slice);
        crate::confine::check(doc, store.root(), allowed)
    }

    /// Makes etcd the store: changes are written there, and arrive through its watch.
    pub fn attach_etcd(&self, etcd: Arc<Etcd>) {
        let _ = self.etcd.set(etcd);
    }

    /// The etcd link, when documents live in etcd.
    pub fn etcd(&self) -> Option<&Arc<Etcd>> {
        self.etcd.get()
    }

    /// Makes the store folder hold `docs` (etcd's documents) and applies them. A document that
    /// does not compile with the rest is left out (its last good version, if any, stays) and
    /// returned with its errors; the others are applied.
    pub fn apply_etcd_documents(&self, docs: &Documents, trigger: &str) -> RejectedDocs {
        let Some(store) = &self.store else {
            return Vec::new();
        };
        let mut state = self.lock();
        let cached = match store.list() {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(
                    "cannot read the store folder {}: {e}",
                    store.root().display()
                );
                return Vec::new();
            }
        };
        let mut overlay = Overlay::new();
        let mut ids = std::collections::HashMap::new();
        for ((kind, name), text) in docs {
            let same = cached
                .iter()
                .any(|(k, n, t)| k == kind && n == name && t == text);
            if !same {
                let path = store.path(*kind, name);
                ids.insert(path.clone(), (*kind, name.clone()));
                overlay.insert(path, Some(text.clone()));
            }
        }
        for (kind, name, _) in &cached {
            if !docs.contains_key(&(*kind, name.clone())) {
                let path = store.path(*kind, name);
                ids.insert(path.clone(), (*kind, name.clone()));
                overlay.insert(path, None);
            }
        }
        let mut rejected: RejectedDocs = Vec::new();
        while !overlay.is_empty() {
            match turnpike_compile::load_and_compile_with(&self.sources(), &overlay) {
                Ok((set, snapshot)) => {
                    for (path, text) in &overlay {
                        let Some((kind, name)) = ids.get(path) else {
                            continue;
                        };
                        let written = match text {
                            Some(t) => store.write(*kind, name, t),
                            None => store.remove(*kind, name).map(|_| ()),
                        };
                        if let Err(e) = written {
                            tracing::error!("cannot update the store folder: {e}");
                        }
                    }
                    let applied = self
                        .gateway
                        .apply(compiled(&set, snapshot))
                        .map(|()| (set, None))
                        .map_err(|e| ChangeError::Apply(e.to_string()));
                    let _ = self.record(&mut state, trigger, applied);
                    break;
                }
                Err(errs) => {
                    let bad: Vec<PathBuf> = overlay
                        .keys()
                        .filter(|p| errs.0.iter().any(|e| &e.location.file == *p))
                        .cloned()
                        .collect();
                    let describe = |e: &turnpike_config::ConfigError| {
                        let mut e = e.clone();
                        if let Some((kind, name)) = ids.get(&e.location.file) {
                            e.location.file =
                                PathBuf::from(format!("{}/{name}", kind.collection()));
                        }
                        e.to_string()
                    };
                    if bad.is_empty() {
                        // The errors are elsewhere (a removal broke a reference): nothing of
                        // this change is applied.
                        let all: Vec<String> = errs.0.iter().map(describe).collect();
                        for path in overlay.keys() {
                            if let Some(id) = ids.get(path) {
                                rejected.push((id.clone(), all.clone()));
                            }
                        }
                        let _ = self.record(
                            &mut state,
                            trigger,
                            Err(ChangeError::Invalid(doc_errors(errs, &overlay))),
                        );
                        break;
                    }
                    for path in bad {
                        overlay.remove(&path);
                        if let Some(id) = ids.get(&path) {
                            let mine: Vec<String> = errs
                                .0
                                .iter()
                                .filter(|e| e.location.file == path)
                                .map(describe)
                                .collect();
                            tracing::error!(
                                document = %format!("{}/{}", id.0.collection(), id.1),
                                "not applied, the last good version stays: {}",
                                mine.join("; ")
                            );
                            rejected.push((id.clone(), mine));
                        }
                    }
                }
            }
        }
        rejected
    }

    /// The gateway.
    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// The store, if any.
    pub fn store(&self) -> Option<&DirStore> {
        self.store.as_ref()
    }

    /// Time since start.
    pub fn uptime(&self) -> std::time::Duration {
        self.started.elapsed()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn sources(&self) -> Vec<PathBuf> {
        sources(&self.files, self.store.as_ref())
    }

    /// The configuration revision (1 at start, one more per applied change) and the last
    /// change's result.
    pub fn revision(&self) -> (u64, LastChange) {
        let s = self.lock();
        (s.revision, s.last.clone())
    }

    /// Every file the running configuration was read from.
    pub fn files(&self) -> Vec<PathBuf> {
        self.gateway.files()
    }

    /// Loads and applies the configuration again (files changed, or a signal). On error the
    /// running configuration stays and the errors are returned.
    pub fn reload(&self, trigger: &str) -> Result<u64, Vec<String>> {
        let mut state = self.lock();
        let result = self.compile_and_apply(&Overlay::new());
        self.record(&mut state, trigger, result.map(|set| (set, None)))
            .map(|a| a.revision)
            .map_err(|e| match e {
                ChangeError::Invalid(errs) => errs.iter().map(doc_error_text).collect(),
                other => vec![other.to_string()],
            })
    }

    fn record(
        &self,
        state: &mut State,
        trigger: &str,
        result: Result<(ConfigSet, Option<String>), ChangeError>,
    ) -> Result<Applied, ChangeError> {
        let process = turnpike_telemetry::stats::process();
        match result {
            Ok((set, etag)) => {
                state.revision += 1;
                process
                    .reloads_ok
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                process
                    .revision
                    .store(state.revision, std::sync::atomic::Ordering::Relaxed);
                state.set = set;
                state.last = LastChange {
                    at: now_secs(),
                    trigger: trigger.into(),
                    ok: true,
                    errors: Vec::new(),
                };
                Ok(Applied {
                    revision: state.revision,
                    etag,
                    created: false,
                })
            }
            Err(e) => {
                process
                    .reloads_failed
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                state.last = LastChange {
                    at: now_secs(),
                    trigger: trigger.into(),
                    ok: false,
                    errors: match &e {
                        ChangeError::Invalid(errs) => errs.iter().map(doc_error_text).collect(),
                        other => vec![other.to_string()],
                    },
                };
                Err(e)
            }
        }
    }

    /// Compiles the configuration as `overlay` changes it and applies it.
    fn compile_and_apply(&self, overlay: &Overlay) -> Result<ConfigSet, ChangeError> {
        let (set, snapshot) = self.check(overlay)?;
        self.gateway
            .apply(compiled(&set, snapshot))
            .map_err(|e| ChangeError::Apply(e.to_string()))?;
        Ok(set)
    }

    /// Compiles the configuration as `overlay` changes it, without applying it.
    fn check(
        &self,
        overlay: &Overlay,
    ) -> Result<(ConfigSet, turnpike_engine::Snapshot), ChangeError> {
        turnpike_compile::load_and_compile_with(&self.sources(), overlay)
            .map_err(|errs| ChangeError::Invalid(doc_errors(errs, overlay)))
    }

    /// Every document of the running configuration of `kind` (for `Globals`: the stored one).
    pub fn entries(&self, kind: Kind) -> Vec<Entry> {
        let state = self.lock();
        self.entries_of(&state.set, kind)
    }

    /// One document by kind and name.
    pub fn entry(&self, kind: Kind, name: &str) -> Option<Entry> {
        self.entries(kind).into_iter().find(|e| e.name == name)
    }

    fn entries_of(&self, set: &ConfigSet, kind: Kind) -> Vec<Entry> {
        let mut out = Vec::new();
        let mut push = |name: String, origin: &turnpike_config::Origin, key: &str| {
            let json = written(origin).unwrap_or_else(|| origin.raw.clone());
            let from_store = self.store.as_ref().is_some_and(|s| {
                s.document_of(&origin.file)
                    .is_some_and(|(k, n)| k == kind && n == name)
            });
            out.push(Entry {
                kind,
                etag: document::etag(&json.to_string()),
                name,
                source: if from_store { "store" } else { "file" },
                location: origin.key_at(key).to_string(),
                json,
            });
        };
        match kind {
            Kind::Api => {
                for a in &set.apis {
                    push(turnpike_compile::api_name(a), &a.origin, &a.key);
                }
            }
            Kind::Upstream => {
                for u in &set.upstreams {
                    push(u.value.name.clone(), &u.origin, &u.key);
                }
            }
            Kind::Consumer => {
                for c in &set.consumers {
                    push(c.value.name.clone(), &c.origin, &c.key);
                }
            }
            Kind::Globals => {
                for g in &set.globals {
                    push(Kind::GLOBALS.to_owned(), &g.origin, &g.key);
                }
            }
        }
        out
    }

    /// Every document of the running configuration (files and store), as written, with where
    /// it comes from.
    pub fn config(&self) -> Vec<(String, String, Value)> {
        let state = self.lock();
        let set = &state.set;
        let mut origins: Vec<(&str, &turnpike_config::Origin, String)> = Vec::new();
        if let Some(o) = &set.gateway_origin {
            origins.push(("gateway", o, "gateway".into()));
        }
        if let Some(a) = &set.admin {
            origins.push(("admin", &a.origin, "admin".into()));
        }
        for a in &set.apis {
            origins.push(("api", &a.origin, a.key.clone()));
        }
        for p in &set.soap_proxies {
            origins.push(("soapProxy", &p.origin, p.key.clone()));
        }
        for u in &set.upstreams {
            origins.push(("upstream", &u.origin, u.key.clone()));
        }
        for c in &set.consumers {
            origins.push(("consumer", &c.origin, c.key.clone()));
        }
        for g in &set.globals {
            origins.push(("global", &g.origin, g.key.clone()));
        }
        origins
            .into_iter()
            .map(|(kind, o, key)| {
                let json = written(o).unwrap_or_else(|| o.raw.clone());
                (kind.to_owned(), o.key_at(&key).to_string(), json)
            })
            .collect()
    }

    /// Creates or replaces a stored document from `text` (YAML or JSON). `if_match` is the
    /// `If-Match` header (an ETag or `*`), `if_none_match` the `If-None-Match` header (`*`).
    /// With etcd, the document is written there and this returns once the watch has brought
    /// it back and it is applied.
    pub fn put(
        &self,
        kind: Kind,
        name: &str,
        text: &str,
        if_match: Option<&str>,
        if_none_match: Option<&str>,
    ) -> Result<Applied, ChangeError> {
        let store = self.store.as_ref().ok_or(ChangeError::NoStore)?;
        check_name(name)?;
        let mut docs = document::parse(text).map_err(ChangeError::Invalid)?;
        if docs.len() != 1 {
            return Err(invalid(format!(
                "expected one document, found {}",
                docs.len()
            )));
        }
        let mut doc = docs.remove(0);
        if doc.kind != kind {
            return Err(invalid(format!(
                "expected an `{}` document, found `{}`",
                kind.key(),
                doc.kind.key()
            )));
        }
        if doc.name != name {
            let at = doc.spans.get(&format!("{}.name", kind.key())).copied();
            return Err(ChangeError::Invalid(vec![DocError {
                file: REQUEST.into(),
                line: at.map_or(0, |s| s.line),
                column: at.map_or(0, |s| s.column),
                key: format!("{}.name", kind.key()),
                message: format!("the name `{}` differs from the URL's `{name}`", doc.name),
            }]));
        }
        let refused = self.confined(store, &doc);
        if !refused.is_empty() {
            return Err(ChangeError::Invalid(refused));
        }
        let mut state = self.lock();
        let current = self.stored_for_write(&state, kind, name)?;
        let text = self.store_text(&mut doc, current.as_ref(), text)?;
        let path = store.path(kind, name);
        let overlay = Overlay::from([(path, Some(text.clone()))]);
        let etag = document::etag(&written_text(&text).to_string());
        if let Some(etcd) = self.etcd.get() {
            self.check(&overlay)?;
            drop(state);
            return self.write_etcd(
                etcd,
                kind,
                name,
                Some(&text),
                if_match,
                if_none_match,
                Some(etag),
            );
        }
        check_preconditions(
            current.as_ref().map(|c| c.etag.as_str()),
            if_match,
            if_none_match,
        )?;
        let previous = store
            .read(kind, name)
            .map_err(|e| ChangeError::Store(e.to_string()))?;
        let (set, snapshot) = self.check(&overlay)?;
        store
            .write(kind, name, &text)
            .map_err(|e| ChangeError::Store(e.to_string()))?;
        if let Err(e) = self.gateway.apply(compiled(&set, snapshot)) {
            // Put the store back as it was: what runs and what is stored stay the same.
            let _ = match &previous {
                Some(old) => store.write(kind, name, old),
                None => store.remove(kind, name).map(|_| ()),
            };
            return self.record(&mut state, "admin", Err(ChangeError::Apply(e.to_string())));
        }
        let mut applied = self.record(&mut state, "admin", Ok((set, Some(etag))))?;
        applied.created = current.is_none();
        Ok(applied)
    }

    /// Removes a stored document.
    pub fn delete(
        &self,
        kind: Kind,
        name: &str,
        if_match: Option<&str>,
    ) -> Result<Applied, ChangeError> {
        let store = self.store.as_ref().ok_or(ChangeError::NoStore)?;
        if !crate::store::valid_name(name) {
            return Err(ChangeError::NotFound);
        }
        let mut state = self.lock();
        let current = self.stored_entry(&state, kind, name)?;
        let path = store.path(kind, name);
        let overlay = Overlay::from([(path, None)]);
        if let Some(etcd) = self.etcd.get() {
            if current.is_some() {
                self.check(&overlay)?;
            }
            drop(state);
            return self.write_etcd(etcd, kind, name, None, if_match, None, None);
        }
        let Some(current) = current else {
            return Err(ChangeError::NotFound);
        };
        check_preconditions(Some(&current.etag), if_match, None)?;
        let previous = store
            .read(kind, name)
            .map_err(|e| ChangeError::Store(e.to_string()))?;
        let (set, snapshot) = self.check(&overlay)?;
        store
            .remove(kind, name)
            .map_err(|e| ChangeError::Store(e.to_string()))?;
        if let Err(e) = self.gateway.apply(compiled(&set, snapshot)) {
            if let Some(old) = previous {
                let _ = store.write(kind, name, &old);
            }
            return self.record(&mut state, "admin", Err(ChangeError::Apply(e.to_string())));
        }
        self.record(&mut state, "admin", Ok((set, None)))
    }

    /// Writes (or, for `None`, removes) a document in etcd under the preconditions, then waits
    /// for this gateway to apply it from the watch.
    #[allow(clippy::too_many_arguments)]
    fn write_etcd(
        &self,
        etcd: &Etcd,
        kind: Kind,
        name: &str,
        text: Option<&str>,
        if_match: Option<&str>,
        if_none_match: Option<&str>,
        etag: Option<String>,
    ) -> Result<Applied, ChangeError> {
        let key = etcd.key(kind, name);
        let current = etcd.current(&key)?;
        if text.is_none() && current.is_none() {
            return Err(ChangeError::NotFound);
        }
        let current_etag = current
            .as_ref()
            .map(|(t, _)| document::etag(&written_text(t).to_string()));
        check_preconditions(current_etag.as_deref(), if_match, if_none_match)?;
        let expect = match &current {
            Some((_, rev)) => Expect::Revision(*rev),
            None => Expect::Absent,
        };
        let revision = etcd.write(&key, text, expect)?;
        if !etcd.wait_applied(revision, APPLY_WAIT) {
            return Err(ChangeError::Pending(revision));
        }
        if let Some(r) = etcd.status().rejected.into_iter().find(|r| r.key == key) {
            return Err(ChangeError::Invalid(
                r.errors
                    .into_iter()
                    .map(|message| DocError {
                        file: key.clone(),
                        line: 0,
                        column: 0,
                        key: String::new(),
                        message,
                    })
                    .collect(),
            ));
        }
        Ok(Applied {
            revision: self.lock().revision,
            etag,
            created: current.is_none(),
        })
    }

    /// What applying the documents of `text` (each created or replaced in the store) would
    /// change, or every error it would cause.
    pub fn validate(&self, text: &str) -> Result<Diff, ChangeError> {
        let store = self.store.as_ref().ok_or(ChangeError::NoStore)?;
        let state = self.lock();
        let mut overlay = Overlay::new();
        let mut offsets = Vec::new();
        let mut errors = Vec::new();
        for (offset, slice) in document_slices(text) {
            let docs = match document::parse(slice) {
                Ok(d) => d,
                Err(errs) => {
                    errors.extend(errs.into_iter().map(|e| shifted(e, offset)));
                    continue;
                }
            };
            for mut doc in docs {
                check_name(&doc.name)?;
                let refused = self.confined(store, &doc);
                if !refused.is_empty() {
                    errors.extend(refused.into_iter().map(|e| shifted(e, offset)));
                    continue;
                }
                let current = self.stored_for_write(&state, doc.kind, &doc.name)?;
                let text = self.store_text(&mut doc, current.as_ref(), slice)?;
                let path = store.path(doc.kind, &doc.name);
                offsets.push((path.clone(), offset));
                overlay.insert(path, Some(text));
            }
        }
        if !errors.is_empty() {
            return Err(ChangeError::Invalid(errors));
        }
        let (set, snapshot) = turnpike_compile::load_and_compile_with(&self.sources(), &overlay)
            .map_err(|errs| ChangeError::Invalid(located_errors(errs, &offsets)))?;
        let mut diff = Diff::default();
        for kind in Kind::ALL {
            let before = self.entries_of(&state.set, kind);
            let after = self.entries_of(&set, kind);
            for a in &after {
                match before.iter().find(|b| b.name == a.name) {
                    None => diff.added.push(format!("{}/{}", kind.collection(), a.name)),
                    Some(b) if b.json != a.json => {
                        diff.changed
                            .push(format!("{}/{}", kind.collection(), a.name))
                    }
                    Some(_) => {}
                }
            }
            for b in &before {
                if !after.iter().any(|a| a.name == b.name) {
                    diff.removed
                        .push(format!("{}/{}", kind.collection(), b.name));
                }
            }
        }
        let running: Vec<std::net::SocketAddr> = self
            .gateway
            .listeners()
            .into_iter()
            .map(|(c, _)| c)
            .collect();
        for addr in snapshot.listeners.keys() {
            if !running.contains(addr) {
                diff.listeners_opened.push(addr.to_string());
            }
        }
        for addr in &running {
            if !snapshot.listeners.contains_key(addr) {
                diff.listeners_closed.push(addr.to_string());
            }
        }
        diff.listeners_opened.sort();
        diff.listeners_closed.sort();
        Ok(diff)
    }

    /// [`Manager::stored_entry`] for a document about to be written: a file document of that
    /// name is a conflict.
    fn stored_for_write(
        &self,
        state: &State,
        kind: Kind,
        name: &str,
    ) -> Result<Option<Entry>, ChangeError> {
        self.stored_entry(state, kind, name).map_err(|e| match e {
            ChangeError::ReadOnly(what, at) => ChangeError::Conflict(what, at),
            other => other,
        })
    }

    /// The stored entry of `kind`/`name`; a file document of that name is read-only.
    fn stored_entry(
        &self,
        state: &State,
        kind: Kind,
        name: &str,
    ) -> Result<Option<Entry>, ChangeError> {
        let entries = self.entries_of(&state.set, kind);
        let mut found = None;
        for e in entries.into_iter().filter(|e| e.name == name) {
            if e.source == "file" {
                return Err(ChangeError::ReadOnly(
                    format!("{}/{name}", kind.collection()),
                    e.location,
                ));
            }
            found = Some(e);
        }
        Ok(found)
    }

    /// The text to store for `doc`: as sent, or, when it holds redacted secrets, with the
    /// stored ones put back (as YAML).
    fn store_text(
        &self,
        doc: &mut Doc,
        current: Option<&Entry>,
        sent: &str,
    ) -> Result<String, ChangeError> {
        if !document::has_redacted(&doc.json) {
            return Ok(sent.to_owned());
        }
        let missing = document::restore_secrets(&mut doc.json, current.map(|c| &c.json), "");
        if !missing.is_empty() {
            return Err(ChangeError::Invalid(
                missing
                    .into_iter()
                    .map(|key| {
                        let at = doc.spans.get(&key).copied().unwrap_or_default();
                        DocError {
                            file: REQUEST.into(),
                            line: at.line,
                            column: at.column,
                            message: format!(
                                "`{}` stands for a stored secret, and none is stored here",
                                document::REDACTED
                            ),
                            key,
                        }
                    })
                    .collect(),
            ));
        }
        Ok(document::to_yaml(&doc.json))
    }
}

/// The documents of a YAML text (split at `---` lines), each with the number of lines before
/// it.
fn document_slices(text: &str) -> Vec<(u32, &str)> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut start_line = 0u32;
    let mut pos = 0;
    for (line, l) in (0u32..).zip(text.split_inclusive('\n')) {
        let trimmed = l.trim_end();
        if trimmed == "---" || trimmed.starts_with("--- ") {
            if !text[start..pos].trim().is_empty() {
                out.push((start_line, &text[start..pos]));
            }
            start = pos + l.len();
            start_line = line + 1;
        }
        pos += l.len();
    }
    if !text[start..].trim().is_empty() {
        out.push((start_line, &text[start..]));
    }
    out
}

/// An error of a document that starts `offset` lines into the request.
fn shifted(mut e: DocError, offset: u32) -> DocError {
    if e.file == REQUEST && e.line > 0 {
        e.line += offset;
    }
    e
}

impl crate::etcd::Apply for Manager {
    fn apply_documents(&self, docs: &Documents, trigger: &str) -> RejectedDocs {
        self.apply_etcd_documents(docs, trigger)
    }
}

fn check_name(name: &str) -> Result<(), ChangeError> {
    if crate::store::valid_name(name) {
        Ok(())
    } else {
        Err(invalid(format!(
            "`{name}` is not a valid name: 1 to 128 letters, digits, `.`, `_` and `-`, starting with a letter or digit"
        )))
    }
}

fn invalid(message: String) -> ChangeError {
    ChangeError::Invalid(vec![DocError {
        file: REQUEST.into(),
        line: 0,
        column: 0,
        key: String::new(),
        message,
    }])
}

fn check_preconditions(
    current: Option<&str>,
    if_match: Option<&str>,
    if_none_match: Option<&str>,
) -> Result<(), ChangeError> {
    if let Some(want) = if_match {
        let ok = match current {
            None => false,
            Some(tag) => want.trim() == "*" || want.split(',').any(|w| w.trim() == tag),
        };
        if !ok {
            return Err(ChangeError::Stale(current.unwrap_or("absent").to_owned()));
        }
    }
    if if_none_match.is_some_and(|w| w.trim() == "*") {
        if let Some(tag) = current {
            return Err(ChangeError::Stale(tag.to_owned()));
        }
    }
    Ok(())
}

/// The configuration's sources: the files and folders given, then the store's folder.
fn sources(files: &[PathBuf], store: Option<&DirStore>) -> Vec<PathBuf> {
    let mut v = files.to_vec();
    if let Some(s) = store {
        v.push(s.root().to_owned());
    }
    v
}

/// The document at `origin` as written in its file (environment references kept), if it can
/// be read again.
fn written(origin: &turnpike_config::Origin) -> Option<Value> {
    let text = std::fs::read_to_string(&origin.file).ok()?;
    let keep = |name: &str| Some(format!("${{{name}}}"));
    let nodes = turnpike_config::yaml::parse_documents(&text, &keep).ok()?;
    let node = nodes.get(origin.document)?;
    Some(turnpike_config::yaml::to_json(
        node,
        &mut String::new(),
        &mut Default::default(),
    ))
}

/// The JSON of a stored text (environment references kept), for its entity tag.
fn written_text(text: &str) -> Value {
    document::parse(text)
        .ok()
        .and_then(|mut d| (!d.is_empty()).then(|| d.remove(0).json))
        .unwrap_or(Value::Null)
}

fn doc_errors(errs: ConfigErrors, overlay: &Overlay) -> Vec<DocError> {
    let offsets: Vec<(PathBuf, u32)> = overlay.keys().map(|p| (p.clone(), 0)).collect();
    located_errors(errs, &offsets)
}

/// Errors as the client sees them: those in a submitted document (one of `submitted`, which
/// starts so many lines into the request) point into the request.
fn located_errors(errs: ConfigErrors, submitted: &[(PathBuf, u32)]) -> Vec<DocError> {
    errs.0
        .into_iter()
        .map(|e| {
            let (file, line) = match submitted.iter().find(|(p, _)| *p == e.location.file) {
                Some((_, offset)) if e.location.line > 0 => {
                    (REQUEST.to_owned(), e.location.line + offset)
                }
                Some(_) => (REQUEST.to_owned(), 0),
                None => (display(&e.location.file), e.location.line),
            };
            DocError {
                file,
                line,
                column: e.location.column,
                key: e.location.key,
                message: e.message,
            }
        })
        .collect()
}

fn display(p: &Path) -> String {
    p.display().to_string()
}

fn doc_error_text(e: &DocError) -> String {
    let mut s = e.file.clone();
    if e.line > 0 {
        s.push_str(&format!(":{}:{}", e.line, e.column));
    }
    if !e.key.is_empty() {
        s.push_str(&format!(": {}", e.key));
    }
    format!("{s}: {}", e.message)
}
