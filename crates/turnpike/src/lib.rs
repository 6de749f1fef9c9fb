//! Turnpike assembled: the compile stage (`turnpike-compile`) plugged into the data plane
//! (`turnpike-engine`), and the control plane (`turnpike-admin`) around them. The binary starts
//! a [`Control`]; integration tests start gateways through [`start`] or [`Control::start`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use turnpike_admin::{store::DirStore, Admin, AdminServer, Manager};

pub mod upgrade;

pub use turnpike_compile::{compile, json_schema, load_and_compile};
pub use turnpike_engine::{ApplyError, Compiled, Gateway};

/// The compile stage as the engine's control plane calls it: loads the files and folders,
/// compiles them, and lists every file read (config, specs, WSDLs, keys) for `--watch`.
#[derive(Debug, Default, Clone, Copy)]
pub struct ConfigCompiler;

impl turnpike_engine::Compiler for ConfigCompiler {
    fn compile(
        &self,
        sources: &[PathBuf],
    ) -> Result<Compiled, Box<dyn std::error::Error + Send + Sync>> {
        let (set, snapshot) = load_and_compile(sources)?;
        let mut files = set.files;
        files.extend(snapshot.spec_files.iter().cloned());
        Ok(Compiled { snapshot, files })
    }
}

/// Loads the configuration at `sources` (files or folders), opens its listeners and starts
/// the workers; [`Gateway::reload`] reads `sources` again.
pub fn start(sources: Vec<PathBuf>) -> Result<Gateway, ApplyError> {
    turnpike_tls::install_provider();
    Gateway::start(sources, Arc::new(ConfigCompiler))
}

/// A running gateway with its control plane: the configuration manager (files and stored
/// documents), and the admin API when an `admin:` document configures one.
pub struct Control {
    /// Loads, checks and applies configurations.
    pub manager: Arc<Manager>,
    admin: Option<AdminServer>,
    /// Reloads when a pool's host names change addresses.
    _dns: turnpike_admin::dns_watch::DnsWatch,
    /// The admin service of flows (`adminConsole`), held here: the process-wide hook holds it
    /// weakly.
    _flow_admin: Arc<Admin>,
}

impl Control {
    /// Loads the configuration at `sources`, opens the document store and starts the gateway,
    /// then the admin API.
    pub fn start(sources: Vec<PathBuf>) -> anyhow::Result<Control> {
        turnpike_tls::install_provider();
        // The `admin:` document says where the store is, whose documents are part of the
        // configuration: read it first. A configuration with errors is reported in full by
        // the start below.
        let set = turnpike_config::load(&sources).ok();
        let settings = match &set {
            Some(set) => turnpike_compile::admin::admin_settings(set)?,
            None => None,
        };
        let store = match settings.as_ref().and_then(|s| s.store.as_ref()) {
            Some(s) => Some(DirStore::open(&s.dir).map_err(|e| {
                anyhow::anyhow!("cannot open the admin store {}: {e}", s.dir.display())
            })?),
            None => None,
        };
        let manager = Arc::new(Manager::start(sources, store).map_err(|e| anyhow::anyhow!("{e}"))?);
        if let Some(s) = &settings {
            manager.allow_doc_bases(s.allowed_doc_bases.clone());
        }
        let warnings = set.as_ref().map(|s| {
            let mut w = turnpike_compile::admin::warnings(s);
            w.extend(turnpike_compile::proxy_rules::warnings(s));
            w
        });
        for w in warnings.unwrap_or_default() {
            tracing::warn!("{w}");
        }
        if let Some(etcd) = settings
            .as_ref()
            .and_then(|s| s.store.as_ref())
            .and_then(|s| s.etcd.clone())
        {
            let apply: Arc<dyn turnpike_admin::etcd::Apply> = manager.clone();
            let link = turnpike_admin::etcd::Etcd::start(etcd, Arc::downgrade(&apply))
                .map_err(|e| anyhow::anyhow!("cannot start the etcd watch: {e}"))?;
            manager.attach_etcd(link);
        }
        // Flows reach the admin service too (Membrane's `adminConsole`), with the same token.
        let token = settings.as_ref().and_then(|s| s.token.clone());
        let shared_admin = Arc::new(Admin::new(Arc::clone(&manager), token));
        turnpike_admin::flow_service::install(&shared_admin);
        let admin = match &settings {
            Some(s) => {
                let admin = Arc::clone(&shared_admin);
                Some(AdminServer::start(s, admin).map_err(|e| {
                    anyhow::anyhow!("cannot listen on {} for the admin API: {e}", s.listen)
                })?)
            }
            None => None,
        };
        // An admin socket inherited from a process whose configuration had one, where this
        // configuration has none (or another address), is closed.
        turnpike_engine::listener::drop_unclaimed("admin");
        let dns = turnpike_admin::dns_watch::DnsWatch::start(Arc::downgrade(&manager))
            .map_err(|e| anyhow::anyhow!("cannot start the DNS watch: {e}"))?;
        Ok(Control {
            manager,
            admin,
            _dns: dns,
            _flow_admin: shared_admin,
        })
    }

    /// The gateway.
    pub fn gateway(&self) -> &Gateway {
        self.manager.gateway()
    }

    /// The admin API's bound address, when it runs.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().map(AdminServer::addr)
    }

    /// A duplicate of the admin API's listening socket, for a binary upgrade.
    pub fn admin_socket(&self) -> Option<(SocketAddr, std::net::TcpListener)> {
        self.admin.as_ref().and_then(AdminServer::socket)
    }

    /// Stops accepting (the listeners were handed to a new process); open connections go on.
    pub fn stop_accepting(&mut self) {
        self.manager.gateway().stop_accepting();
        if let Some(a) = self.admin.take() {
            a.stop();
        }
    }

    /// Lets in-flight requests finish, then stops the gateway and the admin API (which
    /// answers `/readyz` with 503 meanwhile).
    pub fn shutdown(self) {
        if let Some(a) = &self.admin {
            a.draining();
        }
        if let Some(etcd) = self.manager.etcd() {
            etcd.stop();
        }
        self.manager.gateway().shutdown();
        if let Some(a) = self.admin {
            a.stop();
        }
    }
}
