//! OpenAPI support: loading specs (files, folders, `http://` URLs, `$ref` across files, 3.0 and
//! 3.1), turning their schemas into compiled JSON Schema validators once at load time, validating
//! requests and responses, and serving the specs under `/api-docs`.
//!
//! `load` reads and bundles → `convert` rewrites the 3.0 schema dialect → `spec` compiles
//! operations, parameters and schemas → `validate` checks an exchange → `policy` is the chain
//! step → `docs` serves `/api-docs`.

pub mod convert;
mod discriminator;
pub mod docs;
pub mod example;
pub mod load;
pub mod marks;
pub mod media;
pub mod mock;
pub mod multipart;
pub mod params;
pub mod pointer;
pub mod policy;
pub mod schema;
pub mod security;
pub mod spec;
pub mod validate;
pub mod violation;

#[cfg(test)]
mod v32_tests;

pub use load::{LoadedSpec, Source, SpecError};
pub use mock::OpenApiMock;
pub use policy::OpenApiValidator;
pub use spec::Spec;

/// Loads and compiles the spec at `source`.
pub fn load_spec(source: &Source) -> Result<Spec, SpecError> {
    Spec::compile(load::load(source)?)
}

/// [`load_spec`] with the operations under `base_path` instead of the spec's `servers` path.
pub fn load_spec_at(source: &Source, base_path: Option<&str>) -> Result<Spec, SpecError> {
    Spec::compile_at(load::load(source)?, base_path)
}
