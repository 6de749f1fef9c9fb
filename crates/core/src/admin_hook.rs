//! The gateway's admin service as seen from a flow: the control plane installs it when it
//! starts, and Membrane's `adminConsole` policy answers requests through it on an API's own
//! port. One per process (the process runs one gateway).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};

use bytes::Bytes;

/// The answer of the admin service.
pub type AdminFuture = Pin<Box<dyn Future<Output = http::Response<Bytes>> + Send>>;

/// The admin API and console, answering one request.
pub trait AdminService: Send + Sync {
    /// Answers `req` (its body complete).
    fn call(&self, req: http::Request<Bytes>) -> AdminFuture;
}

static SERVICE: RwLock<Option<Arc<dyn AdminService>>> = RwLock::new(None);

/// Installs the process's admin service (replacing one installed before).
pub fn install(service: Arc<dyn AdminService>) {
    let mut s = SERVICE.write().unwrap_or_else(|e| e.into_inner());
    *s = Some(service);
}

/// The process's admin service, once the control plane installed it.
pub fn service() -> Option<Arc<dyn AdminService>> {
    SERVICE
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map(Arc::clone)
}
