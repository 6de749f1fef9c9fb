//! The compiled `wsdl2openapi` policy's data: the operation table and the type model, built at
//! load time and read by both directions of the conversion.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use http::Method;

use crate::wsdl::{SoapVersion, Wsdl};
use crate::xsd::{Model, Particle};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seg {
    Lit(String),
    Param(String),
}

#[derive(Debug)]
pub(crate) struct RestOp {
    pub(crate) name: String,
    pub(crate) method: Method,
    pub(crate) path: String,
    /// Its tag in the generated OpenAPI document.
    pub(crate) tag: Option<String>,
    /// The status of a successful answer.
    pub(crate) status: http::StatusCode,
    pub(crate) segments: Vec<Seg>,
    pub(crate) soap_action: String,
    pub(crate) input: Particle,
    pub(crate) output: Option<Particle>,
    /// Namespace → prefix for the request, declared on its root element.
    pub(crate) prefixes: BTreeMap<String, String>,
    /// `xmlns:..` declarations for the request's root element, pre-rendered.
    pub(crate) declarations: String,
    /// The request element is checked by the validator's fast path while it is written (its
    /// namespace names are plain enough for the fast path to read as written).
    pub(crate) check_while_writing: bool,
}

/// What a JSON property of a request object stands for in its complex type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    /// The element `particles[i]`.
    Element(usize),
    /// The attribute `attributes[i]`.
    Attribute(usize),
    /// `$value`, the text of simple content.
    Value,
}

/// Which operation a request was turned into, by which policy (kept in the exchange for the
/// response phase).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Called {
    pub(crate) policy: u64,
    pub(crate) op: usize,
}

pub(crate) static NEXT_POLICY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// The compiled `wsdl2openapi` policy.
#[derive(Debug)]
pub struct Wsdl2OpenApi {
    pub(crate) id: u64,
    pub(crate) prefix: String,
    pub(crate) ops: Vec<RestOp>,
    pub(crate) model: Model,
    /// For each complex type of `model`: the JSON property names it knows (its elements, its
    /// attributes and `$value`) with what each stands for, sorted by length, then bytes (see
    /// [`by_length`]), for reading request objects in one pass.
    pub(crate) known: Vec<Vec<(String, Slot)>>,
    pub(crate) wsdl: Arc<Wsdl>,
    pub(crate) version: SoapVersion,
    pub(crate) endpoint: http::uri::PathAndQuery,
    pub(crate) openapi: Bytes,
}

/// Orders names by length first: most comparisons then end without comparing bytes.
pub(crate) fn by_length(a: &str, b: &str) -> std::cmp::Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}
