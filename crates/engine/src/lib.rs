//! Turnpike's data plane and control plane.
//!
//! The request path through this crate: [`listener`] (an `SO_REUSEPORT` socket per worker) →
//! [`worker`] (a current-thread runtime per core; hyper HTTP/1.1 connections, writing cleartext
//! sockets through [`plain_io`]) → [`proxy`]
//! (route in the [`snapshot`], run the policy chain, forward through the worker's [`upstream`]
//! pool with [`headers`] hygiene) → [`access_log`]. [`gateway`] is the control plane that builds
//! snapshots and swaps them on reload.

pub mod access_log;
pub mod deadline;
pub mod gateway;
pub mod headers;
pub mod listener;
pub mod plain_io;
pub mod proxy;
pub mod shutdown;
pub mod snapshot;
pub mod target;
pub mod upstream;
pub mod worker;

pub use gateway::{ApplyError, Gateway};
pub use snapshot::{compile, load_and_compile, Settings, Snapshot};

#[cfg(test)]
mod test_support {
    /// Runs `f` on a current-thread runtime inside a `LocalSet`, as a worker runs its tasks.
    pub(crate) fn local<F: std::future::Future>(f: F) -> F::Output {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        tokio::task::LocalSet::new().block_on(&rt, f)
    }
}
