//! The `admin:` document compiled: where the admin API listens, who may call it, and where its
//! documents are stored. Checked with the rest of the configuration (so `turnpike validate`
//! reports its errors); the control plane reads it at start.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use turnpike_config::{AdminAuth, AdminConfig, ConfigErrors, ConfigSet, Located};

use crate::base_dir;

/// The address the admin API listens on when `listen` is not given.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9901";

/// The admin API's settings.
#[derive(Clone)]
pub struct AdminSettings {
    /// The listening address.
    pub listen: SocketAddr,
    /// The bearer token requests must carry (from `token` or `tokenFile`), if any.
    pub token: Option<String>,
    /// Host names `Host` may name beyond loopback and the listen address (lowercase;
    /// `*.example.com` for every name below `example.com`).
    pub hosts: Vec<String>,
    /// Folders that `webServer` policies of stored documents may serve (canonical paths).
    pub allowed_doc_bases: Vec<PathBuf>,
    /// TLS for the listener.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Where documents are stored.
    pub store: Option<StoreSettings>,
    /// Where the `admin:` document is (for messages).
    pub at: String,
}

impl std::fmt::Debug for AdminSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminSettings")
            .field("listen", &self.listen)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("tls", &self.tls.is_some())
            .field("store", &self.store)
            .finish()
    }
}

/// The document store.
#[derive(Clone, Debug)]
pub struct StoreSettings {
    /// The folder of documents (with etcd: the copy of the last configuration that compiled).
    pub dir: PathBuf,
    /// The etcd cluster, if documents live there.
    pub etcd: Option<EtcdSettings>,
}

/// An etcd cluster.
#[derive(Clone)]
pub struct EtcdSettings {
    /// Client URLs.
    pub endpoints: Vec<String>,
    /// Key prefix, without a trailing `/`.
    pub prefix: String,
    /// User name and password.
    pub user: Option<(String, String)>,
    /// Connect and request timeout.
    pub timeout: Duration,
    /// TLS to `https://` endpoints.
    pub tls: Option<EtcdTls>,
}

/// TLS to etcd, as PEM read at load time.
pub type EtcdTls = turnpike_tls::PemTls;

impl std::fmt::Debug for EtcdSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdSettings")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .finish()
    }
}

/// Compiles the `admin:` document, if there is one; every error is reported.
pub fn admin_settings(set: &ConfigSet) -> Result<Option<AdminSettings>, ConfigErrors> {
    let Some(a) = &set.admin else {
        return Ok(None);
    };
    let mut errors = ConfigErrors::default();
    let settings = compile_admin(a, &mut errors);
    errors.into_result(settings)
}

fn compile_admin(a: &Located<AdminConfig>, errors: &mut ConfigErrors) -> Option<AdminSettings> {
    let cfg = &a.value;
    let listen_text = cfg.listen.as_deref().unwrap_or(DEFAULT_LISTEN);
    let listen: Option<SocketAddr> = match listen_text.parse() {
        Ok(addr) => Some(addr),
        Err(_) => {
            errors.push(a.error(
                "listen",
                format!("`{listen_text}` is not an ip:port address"),
            ));
            None
        }
    };
    let (token, token_key) = match (&cfg.token, &cfg.token_file) {
        (Some(_), Some(_)) => {
            errors.push(a.error("tokenFile", "give `token` or `tokenFile`, not both"));
            (None, "token")
        }
        (Some(t), None) => (Some(t.clone()), "token"),
        (None, Some(f)) => (read_token_file(a, f, errors), "tokenFile"),
        (None, None) => (None, "token"),
    };
    if let Some(t) = &token {
        if t.len() < 16 {
            errors.push(a.error(token_key, "must be at least 16 characters"));
        } else if t.bytes().any(|b| !b.is_ascii_graphic()) {
            errors.push(a.error(token_key, "must be visible ASCII characters only"));
        }
    }
    let open = cfg.auth == Some(AdminAuth::None);
    let has_token = cfg.token.is_some() || cfg.token_file.is_some();
    if open && has_token {
        errors.push(a.error(
            "auth",
            "`none` contradicts the token given: remove one of them",
        ));
    }
    if let Some(addr) = listen {
        if !addr.ip().is_loopback() {
            if open {
                errors.push(a.error(
                    "auth",
                    format!("`none` is for a loopback `listen` only, not {addr}"),
                ));
            } else if !has_token {
                errors.push(a.error(
                    "token",
                    format!("the admin API listens on {addr}, beyond this machine: it needs a `token` or `tokenFile`"),
                ));
            }
        }
    }
    if cfg.store.is_some() && !open && !has_token {
        errors.push(a.error(
            "store",
            "a writable admin API (with a `store`) needs a `token` or `tokenFile`, on loopback too: any local process or web page could change the gateway. `auth: none` turns this off (for a developer's laptop only)",
        ));
    }
    let mut hosts = Vec::new();
    for (i, h) in cfg.hosts.iter().enumerate() {
        let name = h.trim().to_ascii_lowercase();
        let bare = name.strip_prefix("*.").unwrap_or(&name);
        let valid = !bare.is_empty()
            && bare
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b));
        if !valid {
            errors.push(a.error(
                &format!("hosts[{i}]"),
                format!("`{h}` is not a host name (or `*.` and a domain)"),
            ));
            continue;
        }
        hosts.push(name);
    }
    let mut allowed_doc_bases = Vec::new();
    for (i, d) in cfg.allowed_doc_bases.iter().enumerate() {
        let dir = base_dir(a).join(d);
        match std::fs::canonicalize(&dir) {
            Ok(p) if p.is_dir() => allowed_doc_bases.push(p),
            Ok(_) => errors.push(a.error(
                &format!("allowedDocBases[{i}]"),
                format!("{} is not a folder", dir.display()),
            )),
            Err(e) => errors.push(a.error(
                &format!("allowedDocBases[{i}]"),
                format!("cannot open {}: {e}", dir.display()),
            )),
        }
    }
    let tls = cfg.ssl.as_ref().and_then(|ssl| {
        let site = turnpike_tls::SiteCert {
            hosts: Vec::new(),
            ssl,
            base: base_dir(a),
        };
        match turnpike_tls::server_config(&[site]) {
            Ok(c) => Some(c),
            Err((_, msg)) => {
                errors.push(a.error("ssl", msg));
                None
            }
        }
    });
    let store = cfg.store.as_ref().and_then(|s| {
        let etcd = s.etcd.as_ref().and_then(|e| {
            if e.endpoints.is_empty() {
                errors.push(a.error("store.etcd.endpoints", "needs at least one endpoint"));
                return None;
            }
            for (i, ep) in e.endpoints.iter().enumerate() {
                if !(ep.starts_with("http://") || ep.starts_with("https://")) {
                    errors.push(a.error(
                        &format!("store.etcd.endpoints[{i}]"),
                        format!("`{ep}` is not an http:// or https:// URL"),
                    ));
                    return None;
                }
            }
            let https = e.endpoints.iter().filter(|ep| ep.starts_with("https://")).count();
            if https != 0 && https != e.endpoints.len() {
                errors.push(a.error(
                    "store.etcd.endpoints",
                    "mixes http:// and https://: a cluster's members are all reached one way",
                ));
                return None;
            }
            let tls = match (https > 0, &e.ssl) {
                (false, None) => None,
                (false, Some(_)) => {
                    errors.push(a.error(
                        "store.etcd.ssl",
                        "TLS settings need https:// endpoints",
                    ));
                    return None;
                }
                (true, ssl) => match turnpike_tls::PemTls::read(ssl.as_ref(), base_dir(a), "etcd") {
                    Ok(t) => Some(t),
                    Err((key, msg)) => {
                        errors.push(a.error(&format!("store.etcd.ssl{key}"), msg));
                        return None;
                    }
                },
            };
            let prefix = e.prefix.as_deref().unwrap_or("/turnpike").trim_end_matches('/');
            if !prefix.starts_with('/') {
                errors.push(a.error("store.etcd.prefix", "must start with `/`"));
                return None;
            }
            let user = match (&e.username, &e.password) {
                (Some(u), Some(p)) => Some((u.clone(), p.clone())),
                (None, None) => None,
                _ => {
                    errors.push(a.error("store.etcd", "give both `username` and `password`"));
                    return None;
                }
            };
            Some(EtcdSettings {
                endpoints: e.endpoints.clone(),
                prefix: prefix.to_owned(),
                user,
                timeout: e.timeout.map_or(Duration::from_secs(2), |d| d.0),
                tls,
            })
        });
        let dir = match &s.dir {
            Some(d) => base_dir(a).join(d),
            None => {
                errors.push(a.error(
                    "store.dir",
                    "needs a folder for the documents (with etcd: for the copy of the last good configuration)",
                ));
                return None;
            }
        };
        if s.etcd.is_some() && etcd.is_none() {
            return None;
        }
        Some(StoreSettings { dir, etcd })
    });
    Some(AdminSettings {
        listen: listen?,
        token,
        hosts,
        allowed_doc_bases,
        tls,
        store,
        at: a.origin.key_at(&a.key).to_string(),
    })
}

/// Reads the token of `tokenFile`: its first line, from a file no other user may read.
fn read_token_file(
    a: &Located<AdminConfig>,
    file: &str,
    errors: &mut ConfigErrors,
) -> Option<String> {
    let path = base_dir(a).join(file);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            errors.push(a.error("tokenFile", format!("cannot read {}: {e}", path.display())));
            return None;
        }
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(&path) {
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                errors.push(a.error(
                    "tokenFile",
                    format!(
                        "{} has mode {mode:04o}: other users can read the token; `chmod 600` it",
                        path.display()
                    ),
                ));
                return None;
            }
        }
    }
    let token = text.lines().next().unwrap_or("").trim().to_owned();
    if token.is_empty() {
        errors.push(a.error("tokenFile", format!("{} holds no token", path.display())));
        return None;
    }
    Some(token)
}

/// What is valid but unwise in the `admin:` document, each as `file:line:column: key: message`
/// (`turnpike validate` prints them; `run` logs them).
pub fn warnings(set: &ConfigSet) -> Vec<String> {
    let Some(a) = &set.admin else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if a.value.auth == Some(AdminAuth::None) {
        let change = if a.value.store.is_some() {
            "change"
        } else {
            "reload"
        };
        out.push(format!(
            "{}: `auth: none`: any local process may read and {change} the configuration through the admin API; for a developer's laptop only",
            a.origin.at(&a.join("auth")),
        ));
    }
    out
}
