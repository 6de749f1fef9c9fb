//! The fleet store: documents kept in etcd under a prefix (`<prefix>/apis/orders`), watched by
//! every gateway of the fleet. A change written through any gateway's admin API (or with
//! `etcdctl`) reaches all of them. Each gateway keeps the last configuration that compiled in
//! its store folder and serves it when etcd cannot be reached at start; when etcd goes away
//! later it keeps serving, reconnects with backoff and resumes the watch from the last revision
//! it saw (listing everything again when that revision was compacted), so no change is missed.
//!
//! etcd runs on a thread of its own with a single-threaded runtime; the admin API's writes
//! reach it through the runtime's handle.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, Txn, TxnOp, WatchOptions,
};
use turnpike_compile::admin::EtcdSettings;

use crate::store::{valid_name, Kind};

/// The documents of etcd: kind and name → text.
pub type Documents = BTreeMap<(Kind, String), String>;

/// What applies etcd's documents to the running gateway (the configuration manager).
pub trait Apply: Send + Sync {
    /// Makes the running configuration hold `docs`; returns the documents left out, with
    /// their errors.
    fn apply_documents(
        &self,
        docs: &Documents,
        trigger: &str,
    ) -> Vec<((Kind, String), Vec<String>)>;
}

/// Why an etcd operation failed.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// No connection to etcd.
    #[error("etcd cannot be reached: {0}")]
    Unavailable(String),
    /// The key changed since it was read (`If-Match`).
    #[error("the document changed in etcd")]
    Changed,
}

/// What `If-Match` / `If-None-Match` asked of a write.
#[derive(Debug, Clone, Copy)]
pub enum Expect {
    /// Whatever is there.
    Any,
    /// The key must not exist.
    Absent,
    /// The key must be at this modification revision.
    Revision(i64),
}

/// A stored document a gateway refused to apply (it does not compile with the rest).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Rejected {
    /// The etcd key.
    pub key: String,
    /// Its errors.
    pub errors: Vec<String>,
}

/// The fleet store's state, for `/admin/v1/status`.
#[derive(Debug, Clone, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetStatus {
    /// Client URLs.
    pub endpoints: Vec<String>,
    /// Key prefix.
    pub prefix: String,
    /// Whether the watch is running.
    pub connected: bool,
    /// The last etcd revision applied.
    pub revision: i64,
    /// True while serving the cached configuration because etcd was never reached.
    pub serving_cache: bool,
    /// The last connection error.
    pub last_error: Option<String>,
    /// Documents in etcd that do not compile, with their errors.
    pub rejected: Vec<Rejected>,
}

struct Shared {
    status: Mutex<FleetStatus>,
    applied: Mutex<i64>,
    cond: Condvar,
    client: Mutex<Option<Client>>,
}

/// A running link to etcd.
pub struct Etcd {
    settings: EtcdSettings,
    handle: tokio::runtime::Handle,
    shared: Arc<Shared>,
    stop: Mutex<Option<tokio::sync::watch::Sender<bool>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Etcd {
    /// Connects and starts watching; the documents found are applied through `manager`. Waits
    /// up to twice the etcd timeout for the first listing, so that a reachable etcd's
    /// configuration is the one served from the start.
    pub fn start(settings: EtcdSettings, manager: Weak<dyn Apply>) -> std::io::Result<Arc<Etcd>> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = rt.handle().clone();
        let shared = Arc::new(Shared {
            status: Mutex::new(FleetStatus {
                endpoints: settings.endpoints.clone(),
                prefix: settings.prefix.clone(),
                serving_cache: true,
                ..FleetStatus::default()
            }),
            applied: Mutex::new(0),
            cond: Condvar::new(),
            client: Mutex::new(None),
        });
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let (first_tx, first_rx) = std::sync::mpsc::channel();
        let s = settings.clone();
        let sh = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("turnpike-etcd".into())
            .spawn(move || rt.block_on(run(s, sh, manager, stop_rx, first_tx)))?;
        let etcd = Arc::new(Etcd {
            handle,
            shared,
            stop: Mutex::new(Some(stop_tx)),
            thread: Mutex::new(Some(thread)),
            settings,
        });
        if first_rx.recv_timeout(etcd.settings.timeout * 2).is_err() {
            tracing::warn!(
                endpoints = ?etcd.settings.endpoints,
                "etcd cannot be reached: serving the last configuration cached in the store folder; will keep trying"
            );
        }
        Ok(etcd)
    }

    /// The key of a document.
    pub fn key(&self, kind: Kind, name: &str) -> String {
        format!("{}/{}/{name}", self.settings.prefix, kind.collection())
    }

    /// The fleet store's state.
    pub fn status(&self) -> FleetStatus {
        lock(&self.shared.status).clone()
    }

    fn client(&self) -> Result<Client, EtcdError> {
        lock(&self.shared.client)
            .clone()
            .ok_or_else(|| EtcdError::Unavailable("not connected".into()))
    }

    /// The document stored at `key` and its modification revision.
    pub fn current(&self, key: &str) -> Result<Option<(String, i64)>, EtcdError> {
        let mut client = self.client()?;
        let timeout = self.settings.timeout;
        self.handle.block_on(async move {
            let resp = tokio::time::timeout(timeout, client.get(key, None))
                .await
                .map_err(|_| EtcdError::Unavailable("timed out".into()))?
                .map_err(|e| EtcdError::Unavailable(e.to_string()))?;
            Ok(resp.kvs().first().map(|kv| {
                (
                    String::from_utf8_lossy(kv.value()).into_owned(),
                    kv.mod_revision(),
                )
            }))
        })
    }

    /// Writes `text` at `key` (or removes it, for `None`) if `expect` holds; returns the
    /// revision of the write.
    pub fn write(&self, key: &str, text: Option<&str>, expect: Expect) -> Result<i64, EtcdError> {
        let mut client = self.client()?;
        let timeout = self.settings.timeout;
        let compare = match expect {
            Expect::Any => None,
            Expect::Absent => Some(Compare::create_revision(key, CompareOp::Equal, 0)),
            Expect::Revision(r) => Some(Compare::mod_revision(key, CompareOp::Equal, r)),
        };
        let op = match text {
            Some(t) => TxnOp::put(key, t, None),
            None => TxnOp::delete(key, None),
        };
        let txn = match compare {
            Some(c) => Txn::new().when([c]).and_then([op]),
            None => Txn::new().and_then([op]),
        };
        self.handle.block_on(async move {
            let resp = tokio::time::timeout(timeout, client.txn(txn))
                .await
                .map_err(|_| EtcdError::Unavailable("timed out".into()))?
                .map_err(|e| EtcdError::Unavailable(e.to_string()))?;
            if !resp.succeeded() {
                return Err(EtcdError::Changed);
            }
            Ok(resp.header().map_or(0, |h| h.revision()))
        })
    }

    /// Waits until this gateway has applied etcd's revision `revision` (true), or `timeout`.
    pub fn wait_applied(&self, revision: i64, timeout: Duration) -> bool {
        let guard = lock(&self.shared.applied);
        let (guard, _) = self
            .shared
            .cond
            .wait_timeout_while(guard, timeout, |applied| *applied < revision)
            .unwrap_or_else(|e| e.into_inner());
        *guard >= revision
    }

    /// Stops watching.
    pub fn stop(&self) {
        if let Some(tx) = lock(&self.stop).take() {
            let _ = tx.send(true);
        }
        if let Some(t) = lock(&self.thread).take() {
            let _ = t.join();
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.stop();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The kind and name of a key under `prefix`, if it names a document.
fn document_of(prefix: &str, key: &str) -> Option<(Kind, String)> {
    let rest = key.strip_prefix(prefix)?.strip_prefix('/')?;
    let (collection, name) = rest.split_once('/')?;
    let kind = Kind::from_collection(collection)?;
    match kind {
        Kind::Globals => (name == Kind::GLOBALS).then(|| (kind, name.to_owned())),
        _ => valid_name(name).then(|| (kind, name.to_owned())),
    }
}

/// The watch loop: connect, list, apply, watch; on any failure reconnect with backoff and
/// resume from the last revision seen.
async fn run(
    settings: EtcdSettings,
    shared: Arc<Shared>,
    manager: Weak<dyn Apply>,
    mut stop: tokio::sync::watch::Receiver<bool>,
    first: std::sync::mpsc::Sender<()>,
) {
    let mut docs = Documents::new();
    let mut revision: i64 = 0;
    let mut backoff = Duration::from_millis(250);
    let prefix = format!("{}/", settings.prefix);
    loop {
        if *stop.borrow() {
            return;
        }
        let attempt = session(
            &settings,
            &shared,
            &manager,
            &prefix,
            &mut docs,
            &mut revision,
            &mut stop,
            &first,
            &mut backoff,
        )
        .await;
        *lock(&shared.client) = None;
        match attempt {
            Ok(()) => return, // stopped
            Err(e) => {
                let mut st = lock(&shared.status);
                if st.connected || st.last_error.as_deref() != Some(e.as_str()) {
                    tracing::warn!(
                        "etcd: {e}; serving the current configuration, retrying in {backoff:?}"
                    );
                }
                st.connected = false;
                st.last_error = Some(e);
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.changed() => return,
        }
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}

/// An error with its causes (`transport error: … invalid peer certificate: UnknownIssuer`):
/// the operator reads it in the status and the log, where a TLS failure must say what failed.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

/// The client's TLS settings: the given CAs (else the system's roots), the client certificate,
/// the name to check.
fn tls_options(tls: &turnpike_compile::admin::EtcdTls) -> etcd_client::TlsOptions {
    let mut o = etcd_client::TlsOptions::new();
    o = match &tls.ca {
        Some(ca) => o.ca_certificate(etcd_client::Certificate::from_pem(ca)),
        None => o.with_native_roots(),
    };
    if let Some((cert, key)) = &tls.identity {
        o = o.identity(etcd_client::Identity::from_pem(cert, key));
    }
    if let Some(name) = &tls.server_name {
        o = o.domain_name(name.clone());
    }
    o
}

/// One connection: lists (when nothing was seen yet, or the last revision was compacted) and
/// watches until an error or a stop.
#[allow(clippy::too_many_arguments)]
async fn session(
    settings: &EtcdSettings,
    shared: &Arc<Shared>,
    manager: &Weak<dyn Apply>,
    prefix: &str,
    docs: &mut Documents,
    revision: &mut i64,
    stop: &mut tokio::sync::watch::Receiver<bool>,
    first: &std::sync::mpsc::Sender<()>,
    backoff: &mut Duration,
) -> Result<(), String> {
    let mut options = ConnectOptions::new()
        .with_connect_timeout(settings.timeout)
        .with_timeout(settings.timeout)
        .with_keep_alive(Duration::from_secs(5), settings.timeout);
    if let Some((u, p)) = &settings.user {
        options = options.with_user(u.clone(), p.clone());
    }
    if let Some(tls) = &settings.tls {
        options = options.with_tls(tls_options(tls));
    }
    let mut client = tokio::time::timeout(
        settings.timeout,
        Client::connect(settings.endpoints.clone(), Some(options)),
    )
    .await
    .map_err(|_| "connecting timed out".to_owned())?
    .map_err(|e| format!("cannot connect: {}", with_causes(&e)))?;
    *lock(&shared.client) = Some(client.clone());
    let mut must_list = *revision == 0;
    loop {
        if must_list {
            let resp = client
                .get(prefix, Some(GetOptions::new().with_prefix()))
                .await
                .map_err(|e| format!("cannot list {prefix}: {}", with_causes(&e)))?;
            docs.clear();
            for kv in resp.kvs() {
                let key = String::from_utf8_lossy(kv.key());
                match document_of(&settings.prefix, &key) {
                    Some(id) => {
                        docs.insert(id, String::from_utf8_lossy(kv.value()).into_owned());
                    }
                    None => tracing::debug!(%key, "etcd: not a document key; ignored"),
                }
            }
            *revision = resp.header().map_or(0, |h| h.revision());
            apply(shared, manager, settings, docs, *revision);
            let _ = first.send(());
        }
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(*revision + 1)
            .with_progress_notify();
        let mut stream = client
            .watch(prefix, Some(options))
            .await
            .map_err(|e| format!("cannot watch {prefix}: {}", with_causes(&e)))?;
        {
            let mut st = lock(&shared.status);
            st.connected = true;
            st.serving_cache = false;
            st.last_error = None;
        }
        *backoff = Duration::from_millis(250);
        loop {
            let msg = tokio::select! {
                m = stream.message() => m,
                _ = stop.changed() => return Ok(()),
            };
            let resp = match msg {
                Ok(Some(r)) => r,
                Ok(None) => return Err("the watch ended".into()),
                Err(e) => return Err(format!("the watch failed: {e}")),
            };
            if resp.canceled() {
                if resp.compact_revision() > 0 {
                    tracing::info!(
                        compacted = resp.compact_revision(),
                        "etcd: the last revision seen was compacted; listing again"
                    );
                    must_list = true;
                    break;
                }
                return Err(format!("the watch was cancelled: {}", resp.cancel_reason()));
            }
            let mut changed = false;
            for ev in resp.events() {
                let Some(kv) = ev.kv() else { continue };
                let key = String::from_utf8_lossy(kv.key()).into_owned();
                let Some(id) = document_of(&settings.prefix, &key) else {
                    continue;
                };
                changed = true;
                match ev.event_type() {
                    EventType::Put => {
                        docs.insert(id, String::from_utf8_lossy(kv.value()).into_owned());
                    }
                    EventType::Delete => {
                        docs.remove(&id);
                    }
                }
            }
            let rev = resp.header().map_or(*revision, |h| h.revision());
            *revision = rev.max(*revision);
            if changed {
                apply(shared, manager, settings, docs, *revision);
            } else {
                mark_applied(shared, *revision);
            }
        }
    }
}

/// Applies etcd's documents through the manager and records the outcome.
fn apply(
    shared: &Arc<Shared>,
    manager: &Weak<dyn Apply>,
    settings: &EtcdSettings,
    docs: &Documents,
    revision: i64,
) {
    let Some(m) = manager.upgrade() else { return };
    let rejected = m.apply_documents(docs, "etcd");
    {
        let mut st = lock(&shared.status);
        st.revision = revision;
        st.rejected = rejected
            .into_iter()
            .map(|((kind, name), errors)| Rejected {
                key: format!("{}/{}/{name}", settings.prefix, kind.collection()),
                errors,
            })
            .collect();
    }
    mark_applied(shared, revision);
}

fn mark_applied(shared: &Shared, revision: i64) {
    let mut applied = lock(&shared.applied);
    if revision > *applied {
        *applied = revision;
    }
    lock(&shared.status).revision = *applied;
    shared.cond.notify_all();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_documents() {
        assert_eq!(
            document_of("/tp", "/tp/apis/orders"),
            Some((Kind::Api, "orders".to_owned()))
        );
        assert_eq!(
            document_of("/tp", "/tp/globals/global"),
            Some((Kind::Globals, "global".to_owned()))
        );
        assert_eq!(document_of("/tp", "/tp/globals/other"), None);
        assert_eq!(document_of("/tp", "/tp/things/x"), None);
        assert_eq!(document_of("/tp", "/tpx/apis/x"), None);
        assert_eq!(document_of("/tp", "/tp/apis/a/b"), None);
    }
}
