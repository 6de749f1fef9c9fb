//! The fast path of SOAP validation: a validator in Rust for the everyday message, in front of
//! libxml2.
//!
//! At load time [`FastPath::compile`] turns each global element declaration of a WSDL's
//! schemas whose whole type graph is in a supported subset (element declarations and
//! references, named and anonymous complex types with `sequence`/`choice`/`all`, attributes,
//! `nillable`, simple content extensions, the common built-in simple types with their facets
//! and patterns in a safe subset) into a small model ([`compile`]). At run time one forward
//! pass over the message's bytes ([`scan`]) checks it against that model ([`check`]), without
//! building a tree.
//!
//! The answer is only ever [`Fast::Valid`] or [`Fast::Unsure`]: "unsure" covers invalid
//! messages and everything outside the subset (comments, CDATA, unusual encodings, `xsi:type`,
//! elements that were not compiled, ...), and sends the message to libxml2, which gives the
//! authoritative verdict and its error messages. The one requirement is soundness: what the
//! fast path calls valid, libxml2 accepts. Each "unsure" says why ([`Miss`]) and is counted
//! per reason (`turnpike_soap_fast_path_misses_total{reason}`).

mod automaton;
mod check;
mod compile;
mod lexical;
mod pattern;
pub(crate) mod scan;
mod simple;
mod write;

#[cfg(test)]
mod differential;

use crate::names::QName;
use crate::xml::Element;
use automaton::Dfa;
use simple::Simple;
pub use write::WriteCheck;

/// The fast path's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fast {
    /// The message is valid (libxml2 would accept it).
    Valid,
    /// Not known: ask libxml2.
    Unsure(Miss),
}

/// Why the fast path left a message to libxml2 (an invalid message is one of these too). The
/// index of each is its place in `turnpike_telemetry::stats::SOAP_FAST_MISS_REASONS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Miss {
    /// Markup the scanner does not read (comments, CDATA, processing instructions, a DOCTYPE,
    /// entity references, an encoding other than UTF-8), or XML that is not well-formed.
    Markup = 0,
    /// An envelope other than an `Envelope` of `Header` then `Body` (or `xsi:` attributes on
    /// them).
    Envelope = 1,
    /// The body's first element is not an operation's element.
    Operation = 2,
    /// An element whose declaration is outside the compiled subset.
    NotCompiled = 3,
    /// An element its parent's content model has no place for here, or content left
    /// incomplete.
    Structure = 4,
    /// A text or attribute value its simple type does not accept (or a form the fast path
    /// does not read).
    Value = 5,
    /// An attribute the declaration lacks, a required one missing, or an `xsi:` attribute
    /// other than `xsi:nil` on a nillable element.
    Attribute = 6,
    /// Text where the content model has only elements.
    Text = 7,
    /// A SOAP response that the REST→SOAP streaming conversion to JSON does not read (it is
    /// converted through a tree instead).
    Conversion = 8,
}

impl Miss {
    /// Counts one miss of this kind.
    pub fn count(self) {
        if let Some(c) = turnpike_telemetry::stats::process()
            .soap_fast_misses
            .get(self as usize)
        {
            c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The reason's label.
    pub fn label(self) -> &'static str {
        turnpike_telemetry::stats::SOAP_FAST_MISS_REASONS[self as usize]
    }
}

impl Fast {
    /// The verdict of a check, counting a miss.
    fn of(valid: Result<(), Miss>) -> Fast {
        match valid {
            Ok(()) => Fast::Valid,
            Err(miss) => {
                miss.count();
                Fast::Unsure(miss)
            }
        }
    }
}

/// The compiled fast validator of a set of schemas.
#[derive(Debug, Default)]
pub struct FastPath {
    model: Model,
    /// Global elements left to libxml2, with the reason.
    skipped: Vec<(QName, String)>,
}

impl FastPath {
    /// Compiles the global element declarations of `schemas` that are in the supported subset.
    pub fn compile(schemas: &[Element]) -> FastPath {
        let (model, skipped) = compile::compile(schemas);
        FastPath { model, skipped }
    }

    /// True when the global element `{ns}local` was compiled.
    pub fn is_compiled(&self, ns: &str, local: &str) -> bool {
        self.model.global(ns.as_bytes(), local.as_bytes()).is_some()
    }

    /// The global elements that were not compiled, with the reason.
    pub fn skipped(&self) -> &[(QName, String)] {
        &self.skipped
    }

    /// Checks a SOAP 1.1 or 1.2 envelope: an optional leading `Header` (not validated), one
    /// `Body` and nothing else; the body's first element one of `allowed` (as (local name,
    /// namespace), sorted) and every body element valid against its global declaration.
    pub fn check_envelope(&self, message: &[u8], allowed: &[(String, String)]) -> Fast {
        Fast::of(check::envelope(&self.model, message, allowed))
    }

    /// Checks a document whose root is a global element of the schemas.
    pub fn check_element(&self, message: &[u8]) -> Fast {
        Fast::of(check::element_document(&self.model, message))
    }

    /// A check of an element the gateway writes itself, fed while it is written (see
    /// [`WriteCheck`]): the same verdict as [`FastPath::check_element`] on the written XML.
    pub fn write_check(&self) -> WriteCheck<'_> {
        WriteCheck::new(&self.model)
    }

    /// True when the fast path reads the namespace name `uri` as written (the writer's
    /// declarations must be such for [`FastPath::write_check`] to stand for the scan).
    pub fn plain_uri(uri: &str) -> bool {
        !uri.is_empty() && uri.bytes().all(scan::uri_byte)
    }
}

/// The compiled declarations.
#[derive(Debug, Default)]
struct Model {
    /// Compiled global elements, sorted by local name, then namespace.
    globals: Vec<Global>,
    elems: Vec<ElemDecl>,
    complexes: Vec<Complex>,
    simples: Vec<Simple>,
}

impl Model {
    fn global(&self, ns: &[u8], local: &[u8]) -> Option<usize> {
        self.globals
            .binary_search_by(|g| (&*g.local, &*g.ns).cmp(&(local, ns)))
            .ok()
            .map(|i| self.globals[i].decl)
    }
}

/// A compiled global element.
#[derive(Debug)]
struct Global {
    local: Box<[u8]>,
    ns: Box<[u8]>,
    decl: usize,
}

/// An element declaration.
#[derive(Debug)]
struct ElemDecl {
    nillable: bool,
    typ: TypeRef,
}

/// The type of an element: an index into [`Model::simples`] or [`Model::complexes`].
#[derive(Debug, Clone, Copy)]
enum TypeRef {
    Simple(usize),
    Complex(usize),
}

/// A complex type.
#[derive(Debug)]
struct Complex {
    attrs: Vec<AttrDecl>,
    content: Content,
}

/// The content of a complex type.
#[derive(Debug)]
enum Content {
    /// Nothing at all (not even whitespace, to be safe).
    Empty,
    /// Text of a simple type.
    Simple(usize),
    /// Child elements (whitespace between them).
    Elements(Dfa),
    /// `xsd:all`.
    All(AllGroup),
}

/// An element of an `xsd:all` group.
#[derive(Debug)]
struct AllItem {
    ns: Box<[u8]>,
    local: Box<[u8]>,
    decl: usize,
    required: bool,
}

/// An `xsd:all` group.
#[derive(Debug)]
struct AllGroup {
    items: Vec<AllItem>,
    /// `minOccurs="0"`: no children at all is fine too.
    optional: bool,
}

/// An attribute declaration.
#[derive(Debug)]
struct AttrDecl {
    ns: Box<[u8]>,
    local: Box<[u8]>,
    required: bool,
    simple: usize,
}
