//! The `admin:` document compiled: where the admin API listens, who may call it, and where its
//! documents are stored. Checked with the rest of the configuration (so `turnpike validate`
//! reports its errors); the control plane reads it at start.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use turnpike_config::{AdminConfig, ConfigErrors, ConfigSet, Located};

use crate::base_dir;

/// The address the admin API listens on when `listen` is not given.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9901";

/// The admin API's settings.
#[derive(Clone)]
pub struct AdminSettings {
    /// The listening address.
    pub listen: SocketAddr,
    /// The bearer token requests must carry, if any.
    pub token: Option<String>,
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
}

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
    let token = cfg.token.clone();
    if let Some(t) = &token {
        if t.len() < 16 {
            errors.push(a.error("token", "must be at least 16 characters"));
        } else if t.bytes().any(|b| !b.is_ascii_graphic()) {
            errors.push(a.error("token", "must be visible ASCII characters only"));
        }
    }
    if let Some(addr) = listen {
        if !addr.ip().is_loopback() && token.is_none() {
            errors.push(a.error(
                "token",
                format!("the admin API listens on {addr}, beyond this machine: it needs a `token`"),
            ));
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
                if ep.starts_with("https://") {
                    errors.push(a.error(
                        &format!("store.etcd.endpoints[{i}]"),
                        "TLS to etcd is not supported: use http:// on a trusted network, or a local etcd proxy",
                    ));
                    return None;
                }
            }
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
        tls,
        store,
        at: a.origin.key_at(&a.key).to_string(),
    })
}
