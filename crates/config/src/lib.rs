//! Turnpike's configuration: YAML documents in Membrane's shape, read with their source positions,
//! checked against a typed model (unknown keys and wrong types are errors that name file, line,
//! column and key path) and described by a JSON Schema for editors.
//!
//! This crate only reads and checks data (files, and the documents a configuration names by URL:
//! [`fetch`]); `turnpike-engine` compiles it into a runtime snapshot.

mod components;
pub mod error;
pub mod fetch;
pub mod load;
pub mod model;
pub mod units;
pub mod yaml;

pub use error::{ConfigError, ConfigErrors, Location};
pub use load::{load, ConfigSet, Located, Origin, Overlay};
pub use model::*;
