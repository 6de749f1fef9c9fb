//! `wsdl2openapi`: REST/JSON in front of a SOAP service, from its WSDL alone.
//!
//! Each operation of the chosen port is offered as `POST <api path>/<operation in kebab-case>`
//! (or as mapped in `operations:`, with `{path}` parameters). The JSON object of the request
//! (plus path and query parameters) is the content of the operation's request element; it is
//! written as XML in the order and namespaces the schema gives, wrapped in a SOAP 1.1 or 1.2
//! envelope with its `SOAPAction`, validated with libxml2 against the WSDL's schemas (400
//! problem+json listing the violations) and sent to the target. The SOAP response is turned
//! back into JSON typed by the schema (numbers, booleans, arrays for elements that may repeat,
//! even when one occurs, `null` for `xsi:nil`); a fault becomes problem+json (400 for
//! client faults, 502 for server faults) with the fault's code, string and detail. The
//! OpenAPI 3.0 document generated from the WSDL is served at `<api path>/api-docs`.
//!
//! Everything — operation table, type model, namespace prefixes, the OpenAPI text — is built
//! at load time.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Arc;

use bytes::Bytes;
use http::uri::PathAndQuery;
use http::{header, HeaderValue, Method, Response, StatusCode};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use turnpike_core::exchange::FixedEndpoint;
use turnpike_core::problems;
use turnpike_core::{Body, BodyNeed, Exchange, Outcome, Policy, Problem};
use turnpike_core::{CompileContext, CompileError, Phases, PolicyFactory};

use crate::fetch::Location;
use crate::publish::address_path;
use crate::wsdl::{SoapVersion, Wsdl};
use crate::xml::{self, escape_into, Element};
use crate::xsd::{Builder, Kind, Model, Particle, Scalar, Type};

pub(crate) const XSI_NS: &str = "http://www.w3.org/2001/XMLSchema-instance";

/// `createPerson` → `create-person`, `getHTTPStatus` → `get-http-status`.
pub fn kebab_case(name: &str) -> String {
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if c == '_' || c == ' ' || c == '.' {
            if !out.ends_with('-') && !out.is_empty() {
                out.push('-');
            }
            continue;
        }
        if c.is_uppercase() && i > 0 {
            let prev = chars[i - 1];
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            if (prev.is_lowercase() || prev.is_ascii_digit() || (prev.is_uppercase() && next_lower))
                && !out.ends_with('-')
            {
                out.push('-');
            }
        }
        out.extend(c.to_lowercase());
    }
    out
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Lit(String),
    Param(String),
}

#[derive(Debug)]
struct RestOp {
    name: String,
    method: Method,
    path: String,
    segments: Vec<Seg>,
    soap_action: String,
    input: Particle,
    output: Option<Particle>,
    /// Namespace → prefix for the request, declared on its root element.
    prefixes: BTreeMap<String, String>,
    /// `xmlns:..` declarations for the request's root element, pre-rendered.
    declarations: String,
    /// The request element is checked by the validator's fast path while it is written (its
    /// namespace names are plain enough for the fast path to read as written).
    check_while_writing: bool,
}

/// What a JSON property of a request object stands for in its complex type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
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
struct Called {
    policy: u64,
    op: usize,
}

static NEXT_POLICY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// `wsdl2openapi`: offers the operations of a WSDL as a REST/JSON API and talks SOAP to the
/// target.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Wsdl2OpenApiSettings {
    /// The WSDL (a file relative to this config file, or an `http(s)://` URL fetched at load).
    pub wsdl: String,
    /// Which service of the WSDL to offer, when it has several.
    #[serde(default)]
    pub service_name: Option<String>,
    /// Which port of the service to use, when it has several (default: the first SOAP port).
    #[serde(default)]
    pub port_name: Option<String>,
    /// Per-operation REST mapping (default: `POST <api path>/<operation in kebab-case>`).
    #[serde(default)]
    pub operations: BTreeMap<String, RestOperation>,
}

/// How one WSDL operation is offered over REST.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RestOperation {
    /// HTTP method (default POST).
    #[serde(default)]
    pub method: Option<String>,
    /// Path below the API's path; `{name}` segments fill the request element's child `name`
    /// (default `/<operation in kebab-case>`). Query parameters fill children of the same name.
    #[serde(default)]
    pub path: Option<String>,
}

/// The compiled `wsdl2openapi` policy.
#[derive(Debug)]
pub struct Wsdl2OpenApi {
    id: u64,
    prefix: String,
    ops: Vec<RestOp>,
    model: Model,
    /// For each complex type of `model`: the JSON property names it knows (its elements, its
    /// attributes and `$value`) with what each stands for, sorted by length, then bytes (see
    /// [`by_length`]), for reading request objects in one pass.
    known: Vec<Vec<(String, Slot)>>,
    wsdl: Arc<Wsdl>,
    version: SoapVersion,
    endpoint: FixedEndpoint,
    openapi: Bytes,
}

impl PolicyFactory for Wsdl2OpenApi {
    const NAME: &'static str = "wsdl2openapi";
    const PHASES: Phases = Phases::BOTH;
    const TOP_LEVEL_ONLY: bool = true;
    type Settings = Wsdl2OpenApiSettings;

    /// Loads the WSDL and compiles the policy below the API's path prefix.
    fn compile(c: Wsdl2OpenApiSettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        let wsdl = Wsdl::load(&Location::from_config(&c.wsdl, ctx.base_dir))
            .map_err(|m| CompileError::new("wsdl", m))?;
        Wsdl2OpenApi::from_wsdl(&c, Arc::new(wsdl), ctx.path_prefix)
    }
}

impl Wsdl2OpenApi {
    /// Compiles the policy for `wsdl`; `api_prefix` is the API's path prefix (`""` for all).
    pub fn from_wsdl(
        c: &Wsdl2OpenApiSettings,
        wsdl: Arc<Wsdl>,
        api_prefix: &str,
    ) -> Result<Self, CompileError> {
        let port = wsdl
            .port(c.service_name.as_deref(), c.port_name.as_deref())
            .map_err(|m| {
                let key = if c.port_name.is_some() {
                    "portName"
                } else {
                    "wsdl"
                };
                CompileError::new(key, m)
            })?;
        for name in c.operations.keys() {
            if !port.operations.iter().any(|o| &o.name == name) {
                return Err(CompileError::new(
                    format!("operations.{name}"),
                    format!(
                        "the WSDL has no operation `{name}` (it has: {})",
                        port.operations
                            .iter()
                            .map(|o| o.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
        }
        let mut builder = Builder::new(&wsdl.schemas);
        let mut ops = Vec::new();
        for op in &port.operations {
            let key = |k: &str| format!("operations.{}.{k}", op.name);
            let mapping = c.operations.get(&op.name);
            let method = match mapping.and_then(|m| m.method.as_deref()) {
                None => Method::POST,
                Some(m) => {
                    Method::from_bytes(m.trim().to_ascii_uppercase().as_bytes()).map_err(|_| {
                        CompileError::new(key("method"), format!("`{m}` is not an HTTP method"))
                    })?
                }
            };
            let path = match mapping.and_then(|m| m.path.clone()) {
                Some(p) if p.starts_with('/') => p,
                Some(p) => {
                    return Err(CompileError::new(
                        key("path"),
                        format!("`{p}` must start with `/`"),
                    ))
                }
                None => format!("/{}", kebab_case(&op.name)),
            };
            let segments = path
                .split('/')
                .skip(1)
                .map(
                    |s| match s.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                        Some(p) => Seg::Param(p.to_owned()),
                        None => Seg::Lit(s.to_owned()),
                    },
                )
                .collect();
            let particle =
                |b: &mut Builder<'_>, output: bool| -> Result<Option<Particle>, String> {
                    let spec = if output { &op.output } else { &op.input };
                    let Some(spec) = spec else { return Ok(None) };
                    let Some((ns, name)) = op.body_element(output) else {
                        return Ok(None);
                    };
                    match op.style {
                        crate::wsdl::Style::Rpc => b.wrapper(&ns, &name, &spec.parts).map(Some),
                        crate::wsdl::Style::Document => b.global_element(&(ns, name)).map(Some),
                    }
                };
            let input = particle(&mut builder, false)
                .map_err(|m| CompileError::new("wsdl", format!("operation `{}`: {m}", op.name)))?
                .ok_or_else(|| {
                    CompileError::new(
                        "wsdl",
                        format!("operation `{}` has no request message", op.name),
                    )
                })?;
            let output = particle(&mut builder, true)
                .map_err(|m| CompileError::new("wsdl", format!("operation `{}`: {m}", op.name)))?;
            ops.push(RestOp {
                name: op.name.clone(),
                method,
                path,
                segments,
                soap_action: op.soap_action.clone(),
                input,
                output,
                prefixes: BTreeMap::new(),
                declarations: String::new(),
                check_while_writing: false,
            });
        }
        let model = builder.model;
        let known = model
            .types
            .iter()
            .map(|c| {
                // Elements first: a name that is both an element and an attribute is the element.
                let mut names: Vec<(String, Slot)> = c
                    .particles
                    .iter()
                    .enumerate()
                    .map(|(i, p)| (p.name.clone(), Slot::Element(i)))
                    .chain(
                        c.attributes
                            .iter()
                            .enumerate()
                            .map(|(i, a)| (a.name.clone(), Slot::Attribute(i))),
                    )
                    .chain([("$value".to_owned(), Slot::Value)])
                    .collect();
                names.sort_by(|a, b| by_length(&a.0, &b.0));
                names.dedup_by(|b, a| a.0 == b.0);
                names
            })
            .collect();
        for op in &mut ops {
            let mut namespaces = BTreeSet::new();
            collect_namespaces(&op.input, &model, &mut namespaces, &mut BTreeSet::new());
            let mut decl = format!(" xmlns:xsi=\"{XSI_NS}\"");
            for (i, ns) in namespaces.into_iter().enumerate() {
                let p = format!("ns{i}");
                decl.push_str(&format!(" xmlns:{p}=\""));
                escape_into(&mut decl, &ns, true);
                decl.push('"');
                op.prefixes.insert(ns, p);
            }
            op.declarations = decl;
            op.check_while_writing = op
                .prefixes
                .keys()
                .all(|ns| crate::quick::FastPath::plain_uri(ns));
        }
        let prefix = api_prefix.trim_end_matches('/').to_owned();
        let service = wsdl.service_of(port).unwrap_or("SOAP service").to_owned();
        let openapi = openapi(&service, &prefix, &ops, &model, port.version);
        let endpoint = PathAndQuery::try_from(address_path(&port.address))
            .unwrap_or(PathAndQuery::from_static("/"));
        Ok(Wsdl2OpenApi {
            id: NEXT_POLICY.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            prefix,
            ops,
            model,
            known,
            version: port.version,
            wsdl: Arc::clone(&wsdl),
            endpoint: FixedEndpoint(endpoint),
            openapi: Bytes::from(openapi.to_string()),
        })
    }

    fn find(&self, method: &Method, path: &str) -> Result<(usize, Vec<(String, String)>), bool> {
        let segs: Vec<&str> = path.split('/').skip(1).collect();
        let mut path_matched = false;
        for (i, op) in self.ops.iter().enumerate() {
            if op.segments.len() != segs.len() {
                continue;
            }
            let mut params = Vec::new();
            let ok = op.segments.iter().zip(&segs).all(|(s, v)| match s {
                Seg::Lit(l) => l == v,
                Seg::Param(p) => {
                    let dec = percent_decode(v);
                    params.push((p.clone(), dec));
                    !v.is_empty()
                }
            });
            if ok {
                if op.method == method {
                    return Ok((i, params));
                }
                path_matched = true;
            }
        }
        Err(path_matched)
    }

    /// Builds the SOAP envelope for a request to operation `op` from its JSON content.
    #[cfg(test)]
    fn request_xml(&self, op: &RestOp, content: &Value) -> Result<String, Vec<String>> {
        let payload = self.request_element(op, content)?;
        String::from_utf8(self.envelope(payload.as_bytes())).map_err(|e| vec![e.to_string()])
    }

    /// The request element (the content of the SOAP Body) for operation `op` from its JSON
    /// content; it declares every namespace it uses.
    #[cfg(test)]
    fn request_element(&self, op: &RestOp, content: &Value) -> Result<String, Vec<String>> {
        self.request_element_checked(op, content)
            .map(|(xml, _)| xml)
    }

    /// [`Wsdl2OpenApi::request_element`] and the validator fast path's verdict on it, checked
    /// while it was written ([`crate::quick::WriteCheck`]).
    fn request_element_checked(
        &self,
        op: &RestOp,
        content: &Value,
    ) -> Result<(String, crate::quick::Fast), Vec<String>> {
        let mut errors = Vec::new();
        // Room for a typical element and the parser's padding (see `parse_element_in`).
        let mut out = String::with_capacity(2048);
        let mut check = self.wsdl.schema_set.fast().write_check();
        if !op.check_while_writing {
            check.fail();
        }
        let w = Writer {
            model: &self.model,
            known: &self.known,
            prefixes: &op.prefixes,
            check: std::cell::RefCell::new(check),
        };
        w.element(
            &mut out,
            &op.input,
            content,
            &At::ROOT,
            Some(&op.declarations),
            &mut errors,
        );
        if !errors.is_empty() {
            return Err(errors);
        }
        let verdict = w.check.borrow().verdict();
        Ok((out, verdict))
    }

    /// `element` in a SOAP envelope of the port's version.
    fn envelope(&self, element: &[u8]) -> Vec<u8> {
        const HEAD: &[u8] = b"<soapenv:Envelope xmlns:soapenv=\"";
        const BODY: &[u8] = b"\"><soapenv:Body>";
        const TAIL: &[u8] = b"</soapenv:Body></soapenv:Envelope>";
        let ns = self.version.envelope_ns().as_bytes();
        let mut out =
            Vec::with_capacity(HEAD.len() + ns.len() + BODY.len() + element.len() + TAIL.len());
        for part in [HEAD, ns, BODY, element, TAIL] {
            out.extend_from_slice(part);
        }
        out
    }

    /// The JSON answer for the SOAP response `bytes` of operation `op`: converted in one pass
    /// ([`crate::rest_stream`]), or on a tree for faults and errors.
    fn response_json(&self, op: &RestOp, bytes: &[u8]) -> Result<Value, Box<Problem>> {
        let output = op.output.as_ref().map(|p| &p.typ);
        match crate::rest_stream::response_json(&self.model, output, bytes) {
            Some(v) => Ok(v),
            None => self.response_json_tree(op, bytes),
        }
    }

    /// [`Wsdl2OpenApi::response_json`] on a tree of the response.
    fn response_json_tree(&self, op: &RestOp, bytes: &[u8]) -> Result<Value, Box<Problem>> {
        let bad = |d: String| Box::new(Problem::new(&problems::SOAP_RESPONSE).with_detail(d));
        let root = xml::parse(bytes).map_err(|e| bad(format!("not XML: {e}")))?;
        let version = SoapVersion::from_envelope_ns(&root.ns)
            .filter(|_| root.local == "Envelope")
            .ok_or_else(|| bad("not a SOAP envelope".into()))?;
        let body = root
            .element(version.envelope_ns(), "Body")
            .ok_or_else(|| bad("the envelope has no Body".into()))?;
        let Some(first) = body.elements().next() else {
            return Ok(Value::Object(Map::new()));
        };
        if first.is(version.envelope_ns(), "Fault") {
            return Err(Box::new(fault_problem(first, version)));
        }
        match &op.output {
            Some(p) => Ok(to_json(first, &p.typ, &self.model)),
            None => Ok(generic_json(first)),
        }
    }
}

/// Orders names by length first: most comparisons then end without comparing bytes.
fn by_length(a: &str, b: &str) -> std::cmp::Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

fn collect_namespaces(
    p: &Particle,
    model: &Model,
    out: &mut BTreeSet<String>,
    seen: &mut BTreeSet<usize>,
) {
    if !p.ns.is_empty() {
        out.insert(p.ns.clone());
    }
    if let Type::Complex(i) = p.typ {
        if seen.insert(i) {
            if let Some(c) = model.types.get(i) {
                for q in &c.particles {
                    collect_namespaces(q, model, out, seen);
                }
            }
        }
    }
}

/// Where in the JSON request a value is (`$.person.hobby[1]`), built on the stack and rendered
/// only for error messages.
#[derive(Clone, Copy)]
struct At<'a> {
    parent: Option<&'a At<'a>>,
    seg: AtSeg<'a>,
}

#[derive(Clone, Copy)]
enum AtSeg<'a> {
    Root,
    Key(&'a str),
    Index(usize),
}

impl<'a> At<'a> {
    const ROOT: At<'static> = At {
        parent: None,
        seg: AtSeg::Root,
    };

    fn key(&'a self, k: &'a str) -> At<'a> {
        At {
            parent: Some(self),
            seg: AtSeg::Key(k),
        }
    }

    fn index(&'a self, i: usize) -> At<'a> {
        At {
            parent: Some(self),
            seg: AtSeg::Index(i),
        }
    }
}

impl std::fmt::Display for At<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(p) = self.parent {
            p.fmt(f)?;
        }
        match self.seg {
            AtSeg::Root => f.write_str("$"),
            AtSeg::Key(k) => write!(f, ".{k}"),
            AtSeg::Index(i) => write!(f, "[{i}]"),
        }
    }
}

struct Writer<'a> {
    model: &'a Model,
    /// [`Wsdl2OpenApi::known`].
    known: &'a [Vec<(String, Slot)>],
    prefixes: &'a BTreeMap<String, String>,
    /// The validator's fast path, told what is written.
    check: std::cell::RefCell<crate::quick::WriteCheck<'a>>,
}

impl Writer<'_> {
    /// Writes `p`'s name with its prefix; returns the namespace it is written in: its own, or
    /// none when it has no prefix.
    fn push_name<'p>(&self, out: &mut String, p: &'p Particle) -> &'p str {
        let mut ns = "";
        if !p.ns.is_empty() {
            if let Some(pre) = self.prefixes.get(&p.ns) {
                out.push_str(pre);
                out.push(':');
                ns = &p.ns;
            }
        }
        out.push_str(&p.name);
        ns
    }

    fn close(&self, out: &mut String, p: &Particle) {
        out.push_str("</");
        self.push_name(out, p);
        out.push('>');
    }

    fn element(
        &self,
        out: &mut String,
        p: &Particle,
        v: &Value,
        at: &At<'_>,
        decls: Option<&str>,
        errors: &mut Vec<String>,
    ) {
        match v {
            Value::Array(items) => {
                if !p.repeated() {
                    errors.push(format!(
                        "{at}: an array is not allowed here (`{}` occurs at most once)",
                        p.name
                    ));
                    return;
                }
                if items.len() as u64 > u64::from(p.max) {
                    errors.push(format!("{at}: at most {} items are allowed", p.max));
                    return;
                }
                for (i, item) in items.iter().enumerate() {
                    self.one(out, p, item, &at.index(i), decls, errors);
                }
            }
            v => self.one(out, p, v, at, decls, errors),
        }
    }

    fn one(
        &self,
        out: &mut String,
        p: &Particle,
        v: &Value,
        at: &At<'_>,
        decls: Option<&str>,
        errors: &mut Vec<String>,
    ) {
        out.push('<');
        let ns = self.push_name(out, p);
        if let Some(d) = decls {
            out.push_str(d);
        }
        if v.is_null() {
            if !p.nillable {
                errors.push(format!(
                    "{at}: null is not allowed (`{}` is not nillable)",
                    p.name
                ));
            }
            out.push_str(" xsi:nil=\"true\"/>");
            let mut check = self.check.borrow_mut();
            check.start(ns, &p.name, true, &[]);
            check.end();
            return;
        }
        match &p.typ {
            Type::Scalar(_) => {
                out.push('>');
                self.check.borrow_mut().start(ns, &p.name, false, &[]);
                self.checked_scalar(out, v, at, errors);
            }
            Type::Any => {
                self.check.borrow_mut().fail();
                out.push('>');
                match v {
                    Value::Object(m) => self.generic(out, m, errors, at),
                    v => self.scalar(out, v, at, errors),
                }
            }
            Type::Complex(i) => {
                let Some(c) = self.model.types.get(*i) else {
                    self.check.borrow_mut().fail();
                    out.push('>');
                    return;
                };
                let obj = match v {
                    Value::Object(m) => m,
                    v if c.text.is_some() => {
                        out.push('>');
                        self.check.borrow_mut().start(ns, &p.name, false, &[]);
                        self.checked_scalar(out, v, at, errors);
                        self.close(out, p);
                        return;
                    }
                    _ => {
                        self.check.borrow_mut().fail();
                        errors.push(format!("{at}: must be an object"));
                        out.push('>');
                        return;
                    }
                };
                // One pass over the object: each property to its place in the type.
                let names = self.known.get(*i).map_or(&[][..], Vec::as_slice);
                let mut elements: smallvec::SmallVec<[Option<&Value>; 16]> =
                    smallvec::smallvec![None; c.particles.len()];
                let mut attributes: smallvec::SmallVec<[Option<&Value>; 4]> =
                    smallvec::smallvec![None; c.attributes.len()];
                let mut text = None;
                let mut extra: Option<Map<String, Value>> = None;
                for (k, v) in obj {
                    let slot = names
                        .binary_search_by(|(n, _)| by_length(n, k))
                        .ok()
                        .and_then(|j| names.get(j))
                        .map(|(_, s)| *s);
                    match slot {
                        Some(Slot::Element(j)) => {
                            if let Some(e) = elements.get_mut(j) {
                                *e = Some(v);
                            }
                        }
                        Some(Slot::Attribute(j)) => {
                            if let Some(a) = attributes.get_mut(j) {
                                *a = Some(v);
                            }
                        }
                        Some(Slot::Value) => text = Some(v),
                        // Properties beyond the declared ones fill the `xsd:any` wildcard.
                        None if c.any => {
                            extra
                                .get_or_insert_with(Map::new)
                                .insert(k.clone(), v.clone());
                        }
                        None => errors.push(format!(
                            "{at}.{k}: unknown property (expected: {})",
                            c.particles
                                .iter()
                                .map(|q| q.name.as_str())
                                .chain(c.attributes.iter().map(|a| a.name.as_str()))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )),
                    }
                }
                let mut written: smallvec::SmallVec<[(&str, Cow<'_, str>); 4]> =
                    smallvec::SmallVec::new();
                for (a, av) in c.attributes.iter().zip(&attributes) {
                    if let Some(av) = av {
                        out.push(' ');
                        out.push_str(&a.name);
                        out.push_str("=\"");
                        let mut s = String::new();
                        self.scalar(&mut s, av, &at.key(&a.name), errors);
                        out.push_str(&s.replace('"', "&quot;"));
                        out.push('"');
                        written.push((&a.name, unescaped(av)));
                    }
                }
                out.push('>');
                self.check.borrow_mut().start(ns, &p.name, false, &written);
                if let Some(t) = text {
                    self.checked_scalar(out, t, &at.key("$value"), errors);
                }
                for (q, cv) in c.particles.iter().zip(&elements) {
                    if let Some(cv) = cv {
                        self.element(out, q, cv, &at.key(&q.name), None, errors);
                    }
                }
                if let Some(extra) = extra {
                    self.check.borrow_mut().fail();
                    self.generic(out, &extra, errors, at);
                }
            }
        }
        self.check.borrow_mut().end();
        self.close(out, p);
    }

    /// [`Writer::scalar`], telling the check the text.
    fn checked_scalar(&self, out: &mut String, v: &Value, at: &At<'_>, errors: &mut Vec<String>) {
        let before = out.len();
        self.scalar(out, v, at, errors);
        let mut check = self.check.borrow_mut();
        match v {
            Value::String(s) => check.text(s),
            Value::Number(_) | Value::Bool(_) => check.text(out.get(before..).unwrap_or("")),
            Value::Null => {}
            _ => check.fail(),
        }
    }

    fn scalar(&self, out: &mut String, v: &Value, at: &At<'_>, errors: &mut Vec<String>) {
        match v {
            Value::String(s) => escape_into(out, s, false),
            Value::Number(n) => {
                // Writing to a String cannot fail.
                let _ = write!(out, "{n}");
            }
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Null => {}
            _ => errors.push(format!("{at}: must be a string, number or boolean")),
        }
    }

    fn generic(
        &self,
        out: &mut String,
        m: &Map<String, Value>,
        errors: &mut Vec<String>,
        at: &At<'_>,
    ) {
        for (k, v) in m {
            if k.is_empty()
                || !k
                    .chars()
                    .all(|c| c.is_alphanumeric() || c == '_' || c == '-' || c == '.')
            {
                errors.push(format!("{at}.{k}: not an XML name"));
                continue;
            }
            let items: Vec<&Value> = match v {
                Value::Array(a) => a.iter().collect(),
                v => vec![v],
            };
            for item in items {
                out.push_str(&format!("<{k}>"));
                match item {
                    Value::Object(inner) => self.generic(out, inner, errors, &at.key(k)),
                    v => self.scalar(out, v, at, errors),
                }
                out.push_str(&format!("</{k}>"));
            }
        }
    }
}

/// The text a scalar is written as, before escaping.
fn unescaped(v: &Value) -> Cow<'_, str> {
    match v {
        Value::String(s) => Cow::Borrowed(s),
        Value::Bool(true) => Cow::Borrowed("true"),
        Value::Bool(false) => Cow::Borrowed("false"),
        Value::Number(n) => Cow::Owned(n.to_string()),
        _ => Cow::Borrowed(""),
    }
}

pub(crate) fn scalar_json(text: &str, s: &Scalar) -> Value {
    let t = text.trim();
    match s.kind {
        Kind::Integer => {
            if let Ok(i) = t.parse::<i64>() {
                return Value::from(i);
            }
            if let Ok(u) = t.parse::<u64>() {
                return Value::from(u);
            }
            Value::String(text.to_owned())
        }
        Kind::Number => match t.parse::<f64>() {
            Ok(f) if f.is_finite() => {
                if !t.contains(['.', 'e', 'E']) {
                    if let Ok(i) = t.parse::<i64>() {
                        return Value::from(i);
                    }
                }
                serde_json::Number::from_f64(f)
                    .map_or(Value::String(text.to_owned()), Value::Number)
            }
            _ => Value::String(text.to_owned()),
        },
        Kind::Boolean => match t {
            "true" | "1" => Value::Bool(true),
            "false" | "0" => Value::Bool(false),
            _ => Value::String(text.to_owned()),
        },
        _ => Value::String(text.to_owned()),
    }
}

fn is_nil(e: &Element) -> bool {
    e.attrs.iter().any(|(k, v)| {
        k.ends_with(":nil")
            && (v == "true" || v == "1")
            && e.resolve_qname(k).is_ok_and(|(ns, _)| ns == XSI_NS)
    })
}

/// The JSON form of `e`, typed by `typ`.
fn to_json(e: &Element, typ: &Type, model: &Model) -> Value {
    if is_nil(e) {
        return Value::Null;
    }
    match typ {
        Type::Scalar(s) => scalar_json(&e.text(), s),
        Type::Any => generic_json(e),
        Type::Complex(i) => {
            let Some(c) = model.types.get(*i) else {
                return generic_json(e);
            };
            let mut obj = Map::new();
            for (k, v) in &e.attrs {
                if k.starts_with("xsi:") || k.contains(':') {
                    continue;
                }
                let val = match c.attributes.iter().find(|a| &a.name == k) {
                    Some(a) => scalar_json(v, &a.scalar),
                    None => Value::String(v.clone()),
                };
                obj.insert(k.clone(), val);
            }
            if let Some(s) = &c.text {
                obj.insert("$value".into(), scalar_json(&e.text(), s));
            }
            for p in c.particles.iter().filter(|p| p.repeated()) {
                obj.entry(p.name.clone())
                    .or_insert_with(|| Value::Array(Vec::new()));
            }
            for child in e.elements() {
                match c.particles.iter().find(|p| p.name == child.local) {
                    Some(p) => {
                        let v = to_json(child, &p.typ, model);
                        if p.repeated() {
                            if let Some(Value::Array(a)) = obj.get_mut(&p.name) {
                                a.push(v);
                            }
                        } else {
                            obj.insert(p.name.clone(), v);
                        }
                    }
                    None => insert_generic(&mut obj, &child.local, generic_json(child)),
                }
            }
            Value::Object(obj)
        }
    }
}

pub(crate) fn insert_generic(obj: &mut Map<String, Value>, k: &str, v: Value) {
    match obj.get_mut(k) {
        Some(Value::Array(a)) => a.push(v),
        Some(old) => {
            let prev = old.take();
            *old = Value::Array(vec![prev, v]);
        }
        None => {
            obj.insert(k.to_owned(), v);
        }
    }
}

/// The JSON form of an element without type information: text, or an object of its children
/// and attributes (repeated children become arrays).
fn generic_json(e: &Element) -> Value {
    if is_nil(e) {
        return Value::Null;
    }
    let attrs: Vec<&(String, String)> = e.attrs.iter().filter(|(k, _)| !k.contains(':')).collect();
    if e.elements().next().is_none() && attrs.is_empty() {
        return Value::String(e.text());
    }
    let mut obj = Map::new();
    for (k, v) in attrs {
        obj.insert(k.clone(), Value::String(v.clone()));
    }
    let text = e.text();
    if !text.trim().is_empty() {
        obj.insert("$value".into(), Value::String(text));
    }
    for c in e.elements() {
        insert_generic(&mut obj, &c.local, generic_json(c));
    }
    Value::Object(obj)
}

fn fault_problem(fault: &Element, version: SoapVersion) -> Problem {
    let env = version.envelope_ns();
    let (code, reason, detail) = match version {
        SoapVersion::V11 => (
            fault
                .elements()
                .find(|e| e.local == "faultcode")
                .map(|e| e.text().trim().to_owned())
                .unwrap_or_default(),
            fault
                .elements()
                .find(|e| e.local == "faultstring")
                .map(|e| e.text())
                .unwrap_or_default(),
            fault.elements().find(|e| e.local == "detail"),
        ),
        SoapVersion::V12 => (
            fault
                .element(env, "Code")
                .and_then(|c| c.element(env, "Value"))
                .map(|e| e.text().trim().to_owned())
                .unwrap_or_default(),
            fault
                .element(env, "Reason")
                .and_then(|r| r.element(env, "Text"))
                .map(|e| e.text())
                .unwrap_or_default(),
            fault.element(env, "Detail"),
        ),
    };
    let local_code = code.rsplit(':').next().unwrap_or("").to_owned();
    let client = matches!(local_code.split('.').next(), Some("Client" | "Sender"));
    let status = if client {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::BAD_GATEWAY
    };
    let mut p = Problem::new(&problems::SOAP_FAULT)
        .with_status(status)
        .with_detail(reason.clone())
        .with_member("faultcode", Value::String(code))
        .with_member("faultstring", Value::String(reason));
    if let Some(d) = detail {
        let mut m = Map::new();
        for c in d.elements() {
            insert_generic(&mut m, &c.local, generic_json(c));
        }
        let v = if m.is_empty() {
            Value::String(d.text())
        } else {
            Value::Object(m)
        };
        p = p.with_member("faultdetail", v);
    }
    p
}

fn scalar_schema(s: &Scalar) -> Value {
    let mut v = match s.kind {
        Kind::Integer => json!({"type": "integer"}),
        Kind::Number => json!({"type": "number"}),
        Kind::Boolean => json!({"type": "boolean"}),
        Kind::Date => json!({"type": "string", "format": "date"}),
        Kind::DateTime => json!({"type": "string", "format": "date-time"}),
        Kind::String => json!({"type": "string"}),
    };
    if !s.enumeration.is_empty() {
        v["enum"] = json!(s.enumeration);
    }
    v
}

fn type_schema(t: &Type, model: &Model, stack: &mut Vec<usize>) -> Value {
    match t {
        Type::Scalar(s) => scalar_schema(s),
        Type::Any => json!({}),
        Type::Complex(i) => {
            let Some(c) = model.types.get(*i) else {
                return json!({});
            };
            if stack.contains(i) || stack.len() > 32 {
                return json!({"type": "object", "description": "recursive"});
            }
            stack.push(*i);
            let mut props = Map::new();
            let mut required = Vec::new();
            for a in &c.attributes {
                props.insert(a.name.clone(), scalar_schema(&a.scalar));
                if a.required {
                    required.push(Value::String(a.name.clone()));
                }
            }
            if let Some(s) = &c.text {
                props.insert("$value".into(), scalar_schema(s));
            }
            for p in &c.particles {
                props.insert(p.name.clone(), particle_schema(p, model, stack));
                if p.min > 0 {
                    required.push(Value::String(p.name.clone()));
                }
            }
            stack.pop();
            let mut v = json!({"type": "object", "properties": props});
            if !required.is_empty() {
                v["required"] = Value::Array(required);
            }
            if !c.any {
                v["additionalProperties"] = Value::Bool(false);
            }
            v
        }
    }
}

fn particle_schema(p: &Particle, model: &Model, stack: &mut Vec<usize>) -> Value {
    let mut item = type_schema(&p.typ, model, stack);
    if p.nillable {
        item["nullable"] = Value::Bool(true);
    }
    if p.repeated() {
        let mut v = json!({"type": "array", "items": item});
        if p.max != u32::MAX {
            v["maxItems"] = json!(p.max);
        }
        if p.min > 1 {
            v["minItems"] = json!(p.min);
        }
        v
    } else {
        item
    }
}

fn openapi(service: &str, prefix: &str, ops: &[RestOp], model: &Model, v: SoapVersion) -> Value {
    let problem_ref =
        json!({"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}});
    let mut paths = Map::new();
    for op in ops {
        let mut stack = Vec::new();
        let input = type_schema(&op.input.typ, model, &mut stack);
        let output = op
            .output
            .as_ref()
            .map_or(json!({}), |o| type_schema(&o.typ, model, &mut stack));
        let mut o = json!({
            "operationId": op.name,
            "summary": format!("SOAP operation {} (SOAPAction `{}`)", op.name, op.soap_action),
            "responses": {
                "200": {"description": "The operation's response", "content": {"application/json": {"schema": output}}},
                "400": {"description": "Invalid request, or a client fault of the service", "content": problem_ref},
                "502": {"description": "A server fault of the service, or an unreadable answer", "content": problem_ref},
            }
        });
        let mut params = Vec::new();
        for s in &op.segments {
            if let Seg::Param(p) = s {
                let schema = property_schema(&input, p);
                params.push(json!({"name": p, "in": "path", "required": true, "schema": schema}));
            }
        }
        if op.method == Method::GET || op.method == Method::DELETE {
            if let Some(props) = input.get("properties").and_then(Value::as_object) {
                for (name, schema) in props {
                    if op.segments.contains(&Seg::Param(name.clone()))
                        || schema.get("properties").is_some()
                    {
                        continue;
                    }
                    params.push(json!({"name": name, "in": "query", "schema": schema}));
                }
            }
        } else {
            o["requestBody"] =
                json!({"required": true, "content": {"application/json": {"schema": input}}});
        }
        if !params.is_empty() {
            o["parameters"] = Value::Array(params);
        }
        let entry = paths
            .entry(op.path.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        entry[op.method.as_str().to_ascii_lowercase()] = o;
    }
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": service,
            "version": "1.0",
            "description": format!("REST/JSON API generated by Turnpike from the WSDL of {service} (SOAP {}).", match v { SoapVersion::V11 => "1.1", SoapVersion::V12 => "1.2" }),
        },
        "servers": [{"url": if prefix.is_empty() { "/" } else { prefix }}],
        "paths": paths,
        "components": {"schemas": {"Problem": {
            "type": "object",
            "properties": {
                "type": {"type": "string"}, "title": {"type": "string"}, "status": {"type": "integer"},
                "detail": {"type": "string"}, "faultcode": {"type": "string"}, "faultstring": {"type": "string"},
                "faultdetail": {}, "errors": {"type": "array", "items": {"type": "string"}}
            }
        }}}
    })
}

fn property_schema(obj: &Value, name: &str) -> Value {
    obj.get("properties")
        .and_then(|p| p.get(name))
        .cloned()
        .unwrap_or(json!({"type": "string"}))
}

impl Policy for Wsdl2OpenApi {
    fn name(&self) -> &'static str {
        "wsdl2openapi"
    }

    fn files(&self) -> Vec<std::path::PathBuf> {
        self.wsdl.files.clone()
    }

    fn body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    fn response_body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let path = ex.request.uri.path();
        let rel = path.strip_prefix(self.prefix.as_str()).unwrap_or(path);
        let rel = if rel.is_empty() { "/" } else { rel };
        if rel == "/api-docs" && ex.request.method == Method::GET {
            let mut r = Response::new(Body::full(self.openapi.clone()));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            return Outcome::Respond(r);
        }
        let (i, params) = match self.find(&ex.request.method, rel) {
            Ok(found) => found,
            Err(path_matched) => {
                let ty = if path_matched {
                    &problems::METHOD_NOT_ALLOWED
                } else {
                    &problems::NOT_FOUND
                };
                let list: Vec<String> = self
                    .ops
                    .iter()
                    .map(|o| format!("{} {}{}", o.method, self.prefix, o.path))
                    .collect();
                return Outcome::Reject(Problem::new(ty).with_detail(format!(
                    "{} {rel}: operations are {}",
                    ex.request.method,
                    list.join(", ")
                )));
            }
        };
        let Some(op) = self.ops.get(i) else {
            return Outcome::Continue;
        };
        // The body as JSON, parsed once per exchange (JSONPath templates before may have).
        let blank = ex
            .request_bytes()
            .is_none_or(|b| b.iter().all(u8::is_ascii_whitespace));
        let parsed: Option<Arc<Value>> = if blank {
            None
        } else {
            match turnpike_core::json::request_json(ex) {
                Ok(v) => Some(v),
                Err(turnpike_core::json::JsonBodyError::NoBody) => None,
                Err(turnpike_core::json::JsonBodyError::Invalid(m)) => {
                    return Outcome::Reject(
                        Problem::new(&problems::BAD_JSON).with_detail(m.to_string()),
                    )
                }
            }
        };
        if parsed.as_ref().is_some_and(|v| !v.is_object()) {
            return Outcome::Reject(
                Problem::new(&problems::VALIDATION).with_detail("the body must be a JSON object"),
            );
        }
        // Path and query parameters fill the request too (the body wins for query names).
        let mut extra: Vec<(String, String)> = params;
        if let Some(q) = ex.request.uri.query() {
            for pair in q.split('&').filter(|p| !p.is_empty()) {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                let k = percent_decode(&k.replace('+', " "));
                let in_body = parsed.as_ref().is_some_and(|b| b.get(&k).is_some());
                if !in_body && !extra.iter().any(|(e, _)| *e == k) {
                    extra.push((k, percent_decode(&v.replace('+', " "))));
                }
            }
        }
        let empty = Value::Object(Map::new());
        let content: std::borrow::Cow<'_, Value> = match (&parsed, extra.is_empty()) {
            (Some(v), true) => std::borrow::Cow::Borrowed(v.as_ref()),
            (None, true) => std::borrow::Cow::Borrowed(&empty),
            (p, false) => {
                let mut v = p.as_ref().map_or_else(|| empty.clone(), |v| (**v).clone());
                if let Value::Object(m) = &mut v {
                    for (k, val) in extra {
                        m.insert(k, Value::String(val));
                    }
                }
                std::borrow::Cow::Owned(v)
            }
        };
        let (mut element, verdict) = match self.request_element_checked(op, &content) {
            Ok((x, verdict)) => (x.into_bytes(), verdict),
            Err(errors) => return Outcome::Reject(invalid(errors)),
        };
        // Full XML Schema validation of what will be sent (facets, choices, required
        // elements), with libxml2 in one streaming pass: the request element alone (the
        // envelope around it is the gateway's own).
        let checked = match verdict {
            crate::quick::Fast::Valid => Ok(()),
            crate::quick::Fast::Unsure => {
                crate::validator::validate_element_in(&self.wsdl.schema_set, &mut element)
            }
        };
        if let Err(errors) = checked {
            return Outcome::Reject(invalid(errors));
        }
        let envelope = self.envelope(&element);
        let len = envelope.len();
        ex.request_body = Body::full(envelope);
        turnpike_core::json::forget_request_json(ex);
        ex.extensions.remove::<turnpike_core::BodyInspected>();
        let h = &mut ex.request.headers;
        h.remove(header::ACCEPT_ENCODING);
        h.remove(header::TRANSFER_ENCODING);
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        match self.version {
            SoapVersion::V11 => {
                h.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/xml; charset=utf-8"),
                );
                if let Ok(v) = HeaderValue::from_str(&format!("\"{}\"", op.soap_action)) {
                    h.insert("soapaction", v);
                }
            }
            SoapVersion::V12 => {
                let ct = format!(
                    "application/soap+xml; charset=utf-8; action=\"{}\"",
                    op.soap_action
                );
                if let Ok(v) = HeaderValue::from_str(&ct) {
                    h.insert(header::CONTENT_TYPE, v);
                }
            }
        }
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/xml, application/soap+xml"),
        );
        ex.request.method = Method::POST;
        ex.extensions.insert(self.endpoint.clone());
        ex.extensions.insert(Called {
            policy: self.id,
            op: i,
        });
        Outcome::Continue
    }

    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        let Some(op) = ex
            .extensions
            .get::<Called>()
            .filter(|c| c.policy == self.id)
            .and_then(|c| self.ops.get(c.op))
        else {
            return Outcome::Continue;
        };
        let Some(res) = ex.response.as_ref() else {
            return Outcome::Continue;
        };
        if res
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/problem+json"))
        {
            return Outcome::Continue; // the gateway's own error (502, 504)
        }
        let status = res.status();
        let bytes = ex.response_bytes().cloned().unwrap_or_default();
        match self.response_json(op, &bytes) {
            Ok(v) if status.is_success() => {
                let mut r = Response::new(Body::full(v.to_string()));
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                Outcome::Respond(r)
            }
            Ok(_) => Outcome::Reject(
                Problem::new(&problems::SOAP_RESPONSE)
                    .with_detail(format!("status {status} without a fault")),
            ),
            Err(p) => Outcome::Reject(*p),
        }
    }
}

fn invalid(errors: Vec<String>) -> Problem {
    Problem::new(&problems::VALIDATION)
        .with_detail(errors.join("\n"))
        .with_member(
            "errors",
            Value::Array(errors.into_iter().map(Value::String).collect()),
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fetch::Location;

    fn compile(name: &str, prefix: &str) -> Wsdl2OpenApi {
        let w = Wsdl::load(&crate::wsdl::tests::shared(name)).unwrap();
        Wsdl2OpenApi::from_wsdl(&Wsdl2OpenApiSettings::default(), Arc::new(w), prefix).unwrap()
    }

    #[test]
    fn kebab() {
        assert_eq!(kebab_case("createPerson"), "create-person");
        assert_eq!(kebab_case("getCity"), "get-city");
        assert_eq!(kebab_case("getHTTPStatus"), "get-http-status");
        assert_eq!(kebab_case("Get_all2Items"), "get-all2-items");
    }

    #[test]
    fn json_to_soap_and_back() {
        let p = compile("cities.wsdl", "");
        let (i, _) = p.find(&Method::POST, "/get-city").unwrap();
        let x = p
            .request_xml(&p.ops[i], &json!({"name": "Berlin & Co"}))
            .unwrap();
        assert!(x.contains("<ns0:getCity"), "{x}");
        assert!(x.contains("<name>Berlin &amp; Co</name>"), "{x}");
        assert!(p.request_xml(&p.ops[i], &json!({"nom": "x"})).is_err());
        assert!(p
            .request_xml(&p.ops[i], &json!({"name": ["a", "b"]}))
            .is_err());
        let resp = b"<s:Envelope xmlns:s='http://schemas.xmlsoap.org/soap/envelope/'><s:Body><c:getCityResponse xmlns:c='https://predic8.de/cities'><country>Germany</country><population>3645000</population></c:getCityResponse></s:Body></s:Envelope>";
        let v = p.response_json(&p.ops[i], resp).unwrap();
        assert_eq!(v, json!({"country": "Germany", "population": 3645000}));
        assert!(p.find(&Method::GET, "/get-city").unwrap_err());
        assert!(!p.find(&Method::POST, "/nope").unwrap_err());
    }

    #[test]
    fn everyday_responses_convert_in_one_pass() {
        let p = compile("partner.wsdl", "");
        let (i, _) = p.find(&Method::POST, "/get-partners").unwrap();
        let op = &p.ops[i];
        let one = b"<?xml version='1.0' encoding='UTF-8'?><s:Envelope xmlns:s='http://schemas.xmlsoap.org/soap/envelope/'><s:Header/><s:Body><p:getPartnersResponse xmlns:p='http://example.com/partner'><partners><id>7</id><name>A &amp; B</name></partners></p:getPartnersResponse></s:Body></s:Envelope>";
        let output = op.output.as_ref().map(|o| &o.typ);
        let v = crate::rest_stream::response_json(&p.model, output, one).unwrap();
        assert_eq!(v, json!({"partners": [{"id": 7, "name": "A & B"}]}));
        // Faults and malformed messages are left to the tree conversion.
        let f = b"<s:Envelope xmlns:s='http://schemas.xmlsoap.org/soap/envelope/'><s:Body><s:Fault><faultcode>s:Client</faultcode></s:Fault></s:Body></s:Envelope>";
        assert!(crate::rest_stream::response_json(&p.model, output, f).is_none());
        assert!(crate::rest_stream::response_json(&p.model, output, b"<a><b></a>").is_none());
    }

    #[test]
    fn faults_become_problems() {
        let p = compile("cities.wsdl", "");
        let f = b"<s:Envelope xmlns:s='http://schemas.xmlsoap.org/soap/envelope/'><s:Body><s:Fault><faultcode>s:Client</faultcode><faultstring>bad city</faultstring><detail><reason>unknown</reason></detail></s:Fault></s:Body></s:Envelope>";
        let e = p.response_json(&p.ops[0], f).unwrap_err();
        assert_eq!(e.status, 400);
        let j = e.to_json();
        assert_eq!(j["faultstring"], "bad city");
        assert_eq!(j["faultdetail"]["reason"], "unknown");
        let f12 = b"<e:Envelope xmlns:e='http://www.w3.org/2003/05/soap-envelope'><e:Body><e:Fault><e:Code><e:Value>e:Receiver</e:Value></e:Code><e:Reason><e:Text xml:lang='en'>down</e:Text></e:Reason></e:Fault></e:Body></e:Envelope>";
        let e = p.response_json(&p.ops[0], f12).unwrap_err();
        assert_eq!(e.status, 502);
        assert_eq!(e.to_json()["faultcode"], "e:Receiver");
    }

    #[test]
    fn arrays_types_and_openapi() {
        let p = compile("partner.wsdl", "/api");
        let (i, _) = p.find(&Method::POST, "/get-partners").unwrap();
        let one = b"<s:Envelope xmlns:s='http://schemas.xmlsoap.org/soap/envelope/'><s:Body><p:getPartnersResponse xmlns:p='http://example.com/partner'><partners><id>7</id><name>A</name></partners></p:getPartnersResponse></s:Body></s:Envelope>";
        let v = p.response_json(&p.ops[i], one).unwrap();
        assert_eq!(v, json!({"partners": [{"id": 7, "name": "A"}]}));
        let (i, _) = p.find(&Method::POST, "/get-partner").unwrap();
        let full = b"<s:Envelope xmlns:s='http://schemas.xmlsoap.org/soap/envelope/'><s:Body><p:getPartnerResponse xmlns:p='http://example.com/partner'><partner><id>7</id><name>A</name><kind>COMPANY</kind><active>true</active><creditLimit>1500.50</creditLimit><address><street>s</street><houseNumber>1a</houseNumber><postalCode>53111</postalCode><city>Bonn</city><country>DE</country></address></partner></p:getPartnerResponse></s:Body></s:Envelope>";
        let v = p.response_json(&p.ops[i], full).unwrap();
        assert_eq!(v["partner"]["active"], true);
        assert_eq!(v["partner"]["creditLimit"], 1500.5);
        assert_eq!(v["partner"]["address"]["postalCode"], "53111");
        let doc: Value = serde_json::from_slice(&p.openapi).unwrap();
        assert_eq!(doc["servers"][0]["url"], "/api");
        let s = &doc["paths"]["/create-partner"]["post"]["requestBody"]["content"]
            ["application/json"]["schema"];
        assert_eq!(s["properties"]["kind"]["enum"][0], "PERSON");
        assert_eq!(s["properties"]["birthDate"]["format"], "date");
        assert!(s["required"].as_array().unwrap().contains(&json!("name")));
        let r = &doc["paths"]["/get-partners"]["post"]["responses"]["200"]["content"]
            ["application/json"]["schema"];
        assert_eq!(r["properties"]["partners"]["type"], "array");
    }

    /// The request element is validated alone: the verdicts and messages are those of the whole
    /// envelope's validation.
    #[test]
    fn element_validation_matches_envelope_validation() {
        let p = compile("partner.wsdl", "");
        let (i, _) = p.find(&Method::POST, "/create-partner").unwrap();
        let op = &p.ops[i];
        let mut failures = 0;
        for content in [
            json!({"name": "A", "birthDate": "1990-04-01", "kind": "PERSON", "address": {
                "street": "s", "houseNumber": "1", "postalCode": "53111", "city": "Bonn", "country": "DE"
            }}),
            json!({"name": "A", "kind": "PERSON"}),
            json!({"kind": "PERSON"}),
            json!({"name": "A", "kind": "ALIEN"}),
            json!({"name": "A", "kind": "PERSON", "birthDate": "yesterday"}),
            json!({"name": "A", "kind": "PERSON", "address": {"city": "Bonn"}}),
            json!({"name": 42, "kind": "COMPANY", "birthDate": "2020-02-30"}),
        ] {
            let via_envelope =
                crate::validator::parse_envelope(p.request_xml(op, &content).unwrap().as_bytes())
                    .map_err(|(m, _)| vec![m])
                    .and_then(|env| {
                        env.body
                            .iter()
                            .try_for_each(|el| p.wsdl.schema_set.validate(el))
                    });
            let mut element = p.request_element(op, &content).unwrap().into_bytes();
            let alone = crate::validator::parse_element_in(&mut element)
                .map_err(|m| vec![m])
                .and_then(|(_doc, root)| p.wsdl.schema_set.validate(&root));
            assert_eq!(via_envelope, alone, "{content}");
            failures += usize::from(alone.is_err());
            assert_eq!(
                element,
                p.request_element(op, &content).unwrap().into_bytes()
            );
        }
        assert_eq!(failures, 6);
        // Not well-formed (a wildcard property that is no XML name): the same message.
        let mut bad = b"<a><1x/></a>".to_vec();
        assert_eq!(
            crate::validator::parse_element_in(&mut bad).err().unwrap(),
            crate::validator::parse_envelope(b"<s:Envelope xmlns:s='http://schemas.xmlsoap.org/soap/envelope/'><s:Body><1x/></s:Body></s:Envelope>").err().unwrap().0
        );
    }

    #[test]
    fn rpc_literal_operations() {
        let wsdl = r#"<definitions xmlns="http://schemas.xmlsoap.org/wsdl/" xmlns:soap="http://schemas.xmlsoap.org/wsdl/soap/"
    xmlns:xsd="http://www.w3.org/2001/XMLSchema" xmlns:tns="urn:calc" targetNamespace="urn:calc">
  <message name="AddIn"><part name="a" type="xsd:int"/><part name="b" type="xsd:int"/></message>
  <message name="AddOut"><part name="sum" type="xsd:int"/></message>
  <portType name="PT"><operation name="addNumbers"><input message="tns:AddIn"/><output message="tns:AddOut"/></operation></portType>
  <binding name="B" type="tns:PT">
    <soap:binding style="rpc" transport="http://schemas.xmlsoap.org/soap/http"/>
    <operation name="addNumbers"><soap:operation soapAction="urn:add"/>
      <input><soap:body use="literal" namespace="urn:calc"/></input>
      <output><soap:body use="literal" namespace="urn:calc"/></output>
    </operation>
  </binding>
  <service name="Calc"><port name="P" binding="tns:B"><soap:address location="http://localhost:1/calc"/></port></service>
</definitions>"#;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("calc.wsdl");
        std::fs::write(&path, wsdl).unwrap();
        let w = Arc::new(Wsdl::load(&Location::File(path)).unwrap());
        let p = Wsdl2OpenApi::from_wsdl(&Wsdl2OpenApiSettings::default(), w, "").unwrap();
        let (i, _) = p.find(&Method::POST, "/add-numbers").unwrap();
        assert_eq!(p.ops[i].soap_action, "urn:add");
        let x = p
            .request_xml(&p.ops[i], &json!({"a": 1, "b": "2"}))
            .unwrap();
        assert!(
            x.contains("<ns0:addNumbers xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" xmlns:ns0=\"urn:calc\"><a>1</a><b>2</b></ns0:addNumbers>"),
            "{x}"
        );
        let resp = b"<s:Envelope xmlns:s='http://schemas.xmlsoap.org/soap/envelope/'><s:Body><c:addNumbersResponse xmlns:c='urn:calc'><sum>3</sum></c:addNumbersResponse></s:Body></s:Envelope>";
        assert_eq!(p.response_json(&p.ops[i], resp).unwrap(), json!({"sum": 3}));
    }

    #[test]
    fn wildcards_take_undeclared_properties() {
        let wsdl = r###"<definitions xmlns="http://schemas.xmlsoap.org/wsdl/" xmlns:soap="http://schemas.xmlsoap.org/wsdl/soap/"
    xmlns:xsd="http://www.w3.org/2001/XMLSchema" xmlns:t="urn:t" targetNamespace="urn:t">
  <types><xsd:schema targetNamespace="urn:t"><xsd:element name="put"><xsd:complexType><xsd:sequence>
    <xsd:element name="name" type="xsd:string"/><xsd:any namespace="##any" processContents="lax" minOccurs="0" maxOccurs="unbounded"/>
  </xsd:sequence><xsd:attribute name="v" type="xsd:int"/></xsd:complexType></xsd:element></xsd:schema></types>
  <message name="In"><part name="p" element="t:put"/></message>
  <portType name="PT"><operation name="put"><input message="t:In"/></operation></portType>
  <binding name="B" type="t:PT"><soap:binding style="document" transport="http://schemas.xmlsoap.org/soap/http"/>
    <operation name="put"><input><soap:body use="literal"/></input></operation></binding>
  <service name="S"><port name="P" binding="t:B"><soap:address location="http://localhost:1/s"/></port></service>
</definitions>"###;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("any.wsdl");
        std::fs::write(&path, wsdl).unwrap();
        let w = Arc::new(Wsdl::load(&Location::File(path)).unwrap());
        let p = Wsdl2OpenApi::from_wsdl(&Wsdl2OpenApiSettings::default(), w, "").unwrap();
        let x = p
            .request_xml(
                &p.ops[0],
                &json!({"name": "n", "v": 3, "extra": {"a": [1, 2]}}),
            )
            .unwrap();
        assert!(x.contains(" v=\"3\">"), "{x}");
        assert!(
            x.contains("<name>n</name><extra><a>1</a><a>2</a></extra>"),
            "{x}"
        );
    }

    /// The request element of benchmark scenario 6 takes the validator's fast path.
    #[test]
    fn the_benchmark_request_element_takes_the_fast_path() {
        let bench =
            |name: &str| format!("{}/../../bench/configs/{name}", env!("CARGO_MANIFEST_DIR"));
        let w = Wsdl::load(&Location::File(bench("person-service.wsdl").into())).unwrap();
        let p = Wsdl2OpenApi::from_wsdl(&Wsdl2OpenApiSettings::default(), Arc::new(w), "").unwrap();
        let lua = std::fs::read_to_string(bench("rest2soap.lua")).unwrap();
        let body = lua
            .lines()
            .find_map(|l| l.strip_prefix("wrk.body = '"))
            .and_then(|l| l.strip_suffix('\''))
            .unwrap();
        let (i, _) = p.find(&Method::POST, "/create-person").unwrap();
        let (element, verdict) = p
            .request_element_checked(&p.ops[i], &serde_json::from_str(body).unwrap())
            .unwrap();
        // Checked while written: no scan needed.
        assert_eq!(verdict, crate::quick::Fast::Valid, "{element}");
        let schemas = &p.wsdl.schema_set;
        assert_eq!(
            schemas.fast().check_element(element.as_bytes()),
            crate::quick::Fast::Valid,
            "{element}"
        );
        assert!(matches!(
            schemas.validate_message(element.as_bytes(), &mut turnpike_xmlstream::NoWatch),
            Ok(crate::schema::Checked::Valid)
        ));
    }

    /// A JSON request for `p` (of `model`), valid-looking or not, driven by `seed`.
    fn request_content(
        model: &Model,
        p: &Particle,
        seed: &mut dyn FnMut(u32) -> u32,
        depth: u32,
    ) -> Value {
        const SCALARS: [&str; 24] = [
            "Bonn",
            "53111",
            "PERSON",
            "COMPANY",
            "1990-04-01",
            "1990-4-1",
            "true",
            "0",
            "12a",
            "",
            " x ",
            "a\r\nb",
            "a\rb",
            "x&y<z>\"",
            "\u{1}",
            "\u{FFFE}",
            "FEMALE",
            "DE",
            "-1",
            "2147483648",
            "1.5",
            "1e3",
            "Ünïcödé",
            "t\tab",
        ];
        let scalar = |seed: &mut dyn FnMut(u32) -> u32| -> Value {
            match seed(8) {
                0 => Value::from(i64::from(seed(100)) - 10),
                1 => Value::from(2_147_483_648_i64),
                2 => Value::Bool(seed(2) == 0),
                3 => serde_json::Number::from_f64(1.25).map_or(Value::Null, Value::Number),
                4 if p.nillable || seed(4) == 0 => Value::Null,
                _ => Value::String(SCALARS[seed(SCALARS.len() as u32) as usize].to_owned()),
            }
        };
        let one = |seed: &mut dyn FnMut(u32) -> u32| -> Value {
            match &p.typ {
                Type::Complex(i) if depth < 4 && seed(10) != 0 => {
                    let Some(c) = model.types.get(*i) else {
                        return Value::Null;
                    };
                    let mut obj = Map::new();
                    for q in &c.particles {
                        if seed(6) != 0 {
                            obj.insert(q.name.clone(), request_content(model, q, seed, depth + 1));
                        }
                    }
                    for a in &c.attributes {
                        if seed(3) != 0 {
                            obj.insert(a.name.clone(), scalar(seed));
                        }
                    }
                    if c.text.is_some() && seed(3) != 0 {
                        obj.insert("$value".into(), scalar(seed));
                    }
                    if seed(12) == 0 {
                        obj.insert("unknown".into(), Value::from(1));
                    }
                    Value::Object(obj)
                }
                _ => scalar(seed),
            }
        };
        if p.repeated() || seed(15) == 0 {
            let n = seed(4);
            Value::Array((0..n).map(|_| one(seed)).collect())
        } else {
            one(seed)
        }
    }

    proptest::proptest! {
        /// What the validator's fast path accepts while the request element is written, libxml2
        /// accepts when it reads the written element, and so does the fast path's scan.
        #[test]
        fn checking_while_writing_agrees_with_libxml2(
            name in proptest::sample::select(vec!["cities.wsdl", "partner.wsdl", "qualified-elements.wsdl", "person"]),
            seeds in proptest::collection::vec(proptest::prelude::any::<u32>(), 64),
        ) {
            let p = if name == "person" {
                let bench = format!("{}/../../bench/configs/person-service.wsdl", env!("CARGO_MANIFEST_DIR"));
                let w = Wsdl::load(&Location::File(bench.into())).unwrap();
                Wsdl2OpenApi::from_wsdl(&Wsdl2OpenApiSettings::default(), Arc::new(w), "").unwrap()
            } else {
                compile(name, "")
            };
            let mut k = 0usize;
            let mut seed = |n: u32| {
                k += 1;
                seeds[k % seeds.len()].rotate_left((k / seeds.len()) as u32 * 7) % n.max(1)
            };
            for op in &p.ops {
                let mut content = request_content(&p.model, &op.input, &mut seed, 0);
                if !content.is_object() {
                    content = Value::Object(Map::new());
                }
                let Ok((xml, verdict)) = p.request_element_checked(op, &content) else { continue };
                if verdict == crate::quick::Fast::Valid {
                    let checked = p.wsdl.schema_set.validate_message(xml.as_bytes(), &mut turnpike_xmlstream::NoWatch);
                    proptest::prop_assert!(matches!(checked, Ok(crate::schema::Checked::Valid)), "{xml}: {checked:?}");
                    proptest::prop_assert_eq!(p.wsdl.schema_set.fast().check_element(xml.as_bytes()), crate::quick::Fast::Valid, "{}", xml);
                }
            }
        }

        /// Whenever the one-pass conversion answers, it answers what the tree conversion does.
        #[test]
        fn streamed_responses_convert_as_trees(
            name in proptest::sample::select(vec!["cities.wsdl", "partner.wsdl"]),
            parts in proptest::collection::vec(proptest::sample::select(vec![
                "<id>7</id>", "<id> 8 </id>", "<id>x</id>", "<name>A &amp; B</name>", "<name><![CDATA[<c>]]></name>",
                "<kind>COMPANY</kind>", "<active>1</active>", "<active>no</active>", "<creditLimit>1.5e3</creditLimit>",
                "<partners><id>1</id></partners>", "<partners/>", "<partner xsi:nil='true' xmlns:xsi='http://www.w3.org/2001/XMLSchema-instance'/>",
                "<partner><id>2</id><address><city>Bonn</city></address></partner>", "<country>DE</country>", "<population>12</population>",
                "<population>-1.0</population>", "<other a='1'>t<x>y</x></other>", "<other>1</other>", "text", "<!-- c -->",
                "<u:x xmlns:u='urn:u' u:a='1' b='&lt;'/>", "<bad:x/>", "&#65;", "&nope;", "<a></b>",
            ]), 0..6),
            wrap in 0usize..4,
        ) {
            let p = compile(name, "");
            for op in &p.ops {
                let (ns, el) = op.output.as_ref().map(|o| (o.ns.clone(), o.name.clone())).unwrap_or_default();
                let body = format!("<r:{el} xmlns:r='{ns}'>{}</r:{el}>", parts.concat());
                let doc = match wrap {
                    0 => format!("<s:Envelope xmlns:s='http://schemas.xmlsoap.org/soap/envelope/'><s:Body>{body}</s:Body></s:Envelope>"),
                    1 => format!("<?xml version='1.0'?><e:Envelope xmlns:e='http://www.w3.org/2003/05/soap-envelope'><e:Header><h>{}</h></e:Header><e:Body>{body}<x/></e:Body></e:Envelope>", parts.concat()),
                    2 => format!("<s:Envelope xmlns:s='http://schemas.xmlsoap.org/soap/envelope/'><s:Body>{}</s:Body></s:Envelope>", parts.concat()),
                    _ => format!("<s:Envelope xmlns:s='http://schemas.xmlsoap.org/soap/envelope/'><s:Body/></s:Envelope>{}", parts.concat()),
                };
                let output = op.output.as_ref().map(|o| &o.typ);
                if let Some(v) = crate::rest_stream::response_json(&p.model, output, doc.as_bytes()) {
                    let tree = p.response_json_tree(op, doc.as_bytes());
                    proptest::prop_assert!(tree.is_ok(), "{doc}: streamed {v}, tree failed");
                    proptest::prop_assert_eq!(&v, &tree.unwrap_or_default(), "{}", doc);
                }
            }
        }

        #[test]
        fn response_conversion_never_panics(input in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let p = compile("cities.wsdl", "");
            let _ = p.response_json(&p.ops[0], &input);
        }

        #[test]
        fn request_conversion_never_panics(s in "\\PC{0,40}", n in proptest::prelude::any::<i64>()) {
            let p = compile("partner.wsdl", "");
            for op in &p.ops {
                let _ = p.request_xml(op, &json!({"name": s.clone(), "id": n, "address": {"city": s.clone()}, "kind": [s.clone()]}));
            }
        }
    }
}
