//! Turnpike assembled: the compile stage (`turnpike-compile`) plugged into the data plane
//! (`turnpike-engine`). The binary and the integration tests start gateways through [`start`].

use std::path::PathBuf;
use std::sync::Arc;

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
    Gateway::start(sources, Arc::new(ConfigCompiler))
}
