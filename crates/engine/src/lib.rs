//! Turnpike's data plane and control plane.
//!
//! The request path through this crate: [`listener`] (an `SO_REUSEPORT` socket per worker) →
//! [`worker`] (a current-thread runtime per core; hyper HTTP/1.1 connections, writing cleartext
//! sockets through [`plain_io`]) → [`request`]
//! (route in the snapshot, run the policy chain, forward through the worker's [`upstream`]
//! pool with [`headers`] hygiene, observed by the access log, traces, metrics and the console's
//! store). [`gateway`] starts the workers and swaps
//! snapshots on reload; the snapshots themselves come from a [`Compiler`] (the compile stage,
//! `turnpike-compile`), so the data plane never depends on the policies it runs.

pub mod access_log;
pub mod balance;
pub mod conn;
pub mod deadline;
pub mod exchanges;
pub mod exec;
pub mod forward_proxy;
pub mod gateway;
pub mod headers;
pub mod health;
pub mod listener;
pub mod passthrough;
pub mod plain_io;
pub mod request;
pub mod shutdown;
pub mod slow;
pub mod upstream;
pub mod worker;

pub use gateway::{ApplyError, Compiled, Compiler, Gateway};
pub use turnpike_snapshot::{Settings, Snapshot};
#[doc(hidden)]
pub use upstream::fuzzing;

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
