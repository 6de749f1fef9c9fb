//! Turnpike's data plane and control plane.
//!
//! The request path through this crate: [`listener`] (an `SO_REUSEPORT` socket per worker) →
//! [`worker`] (a current-thread runtime per core; hyper HTTP/1.1 connections) → [`proxy`]
//! (route in the [`snapshot`], run the policy chain, forward through the worker's [`upstream`]
//! pool with [`headers`] hygiene) → [`access_log`]. [`gateway`] is the control plane that builds
//! snapshots and swaps them on reload.

pub mod access_log;
pub mod deadline;
pub mod gateway;
pub mod headers;
pub mod listener;
pub mod proxy;
pub mod shutdown;
pub mod snapshot;
pub mod target;
pub mod upstream;
pub mod worker;

pub use gateway::{ApplyError, Gateway};
pub use snapshot::{compile, load_and_compile, Settings, Snapshot};
