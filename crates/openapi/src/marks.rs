//! The gateway's own keywords in the documents it bundles and converts (`x-turnpike-*`).

/// Marks a property schema replaced because of `readOnly`/`writeOnly`, so that the validator's
/// error can say why.
pub const FORBIDDEN: &str = "x-turnpike-forbidden";

/// Marks the check of a discriminator's value (the schema inside a `not`), so that the
/// validator's error can name the discriminating property and its known values.
pub const DISCRIMINATOR: &str = "x-turnpike-discriminator";

/// The key of a converted document's root under which "plain" copies of schemas with a
/// `discriminator` are kept: the schema without its dispatch, which is what a subtype's
/// `allOf: [{$ref: Base}]` means (the dispatch there would lead back to the subtype forever).
pub const PLAIN: &str = "x-turnpike-plain";

/// The key of the root object under which referenced files are stored.
pub const BUNDLED: &str = "x-turnpike-bundled";
