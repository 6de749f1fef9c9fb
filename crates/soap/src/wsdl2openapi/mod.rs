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
//!
//! The module's parts: [`json_to_xml`] writes the request element, [`xml_to_json`] reads the
//! response (in one pass with [`stream`], on a tree otherwise), [`openapi`] builds the OpenAPI
//! document, [`values`] holds the JSON values both directions share.

mod compiled;
mod json_to_xml;
mod openapi;
mod stream;
#[cfg(test)]
mod tests;
mod values;
mod xml_to_json;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::Bytes;
use http::uri::PathAndQuery;
use http::{header, HeaderValue, Method, Response, StatusCode};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};
use turnpike_core::problems;
use turnpike_core::{Body, BodyNeed, Exchange, Outcome, Policy, Problem};
use turnpike_core::{CompileContext, CompileError, Phases, PolicyFactory};

use crate::fetch::Location;
pub(crate) use crate::names::XSI_NS;
use crate::publish::address_path;
use crate::wsdl::{SoapVersion, Wsdl};
use crate::xml::escape_into;
use crate::xsd::{Builder, Model, Particle, Type};
pub use compiled::Wsdl2OpenApi;
use compiled::{by_length, Called, RestOp, Seg, Slot, NEXT_POLICY};
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
    /// The description of the generated OpenAPI document.
    #[serde(default)]
    pub description: Option<String>,
    /// The version of the generated OpenAPI document (default `1.0`).
    #[serde(default)]
    pub version: Option<String>,
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
    /// The tag of the operation in the generated OpenAPI document (grouping in viewers).
    #[serde(default)]
    pub tag: Option<String>,
    /// The status of a successful answer (default 200).
    #[serde(default)]
    pub status: Option<u16>,
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
            let status = match mapping.and_then(|m| m.status) {
                None => StatusCode::OK,
                Some(s) => StatusCode::from_u16(s)
                    .ok()
                    .filter(|s| s.is_success())
                    .ok_or_else(|| {
                        CompileError::new(
                            key("status"),
                            format!("`{s}` is not a success status (2xx)"),
                        )
                    })?,
            };
            ops.push(RestOp {
                name: op.name.clone(),
                method,
                path,
                tag: mapping.and_then(|m| m.tag.clone()),
                status,
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
        let mut openapi = openapi::openapi(&service, &prefix, &ops, &model, port.version);
        if let Some(d) = &c.description {
            openapi["info"]["description"] = d.as_str().into();
        }
        if let Some(v) = &c.version {
            openapi["info"]["version"] = v.as_str().into();
        }
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
            endpoint,
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

impl Wsdl2OpenApi {
    /// Converts `content` into each operation's request element, and checks the result is
    /// well-formed XML or a list of violations (for the fuzzer).
    #[doc(hidden)]
    pub fn fuzz_request(&self, content: &serde_json::Value) {
        for op in &self.ops {
            if let Ok((xml, _)) = self.request_element_checked(op, content) {
                assert!(
                    crate::xml::parse(xml.as_bytes()).is_ok(),
                    "ill-formed request: {xml}"
                );
            }
        }
    }

    /// Reads `bytes` as each operation's response, in one pass and on a tree, and checks that
    /// the two agree whenever the one pass answers (for the fuzzer).
    #[doc(hidden)]
    pub fn fuzz_response(&self, bytes: &[u8]) {
        for op in &self.ops {
            let output = op.output.as_ref().map(|p| &p.typ);
            if let Some(fast) = stream::response_json(&self.model, output, bytes) {
                if let Ok(tree) = self.response_json_tree(op, bytes) {
                    assert_eq!(fast, tree, "the one-pass and the tree conversions differ");
                }
            }
        }
    }
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
                Err(turnpike_core::json::JsonBodyError::Undecodable(e)) => {
                    return Outcome::Reject(e.problem())
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
            crate::quick::Fast::Unsure(_) => {
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
        ex.directives.fixed_endpoint = Some(self.endpoint.clone());
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
            Ok(_) if status.is_success() && no_body(op.status) => {
                let mut r = Response::new(Body::Empty);
                *r.status_mut() = op.status;
                Outcome::Respond(r)
            }
            Ok(v) if status.is_success() => {
                let mut r = Response::new(Body::full(v.to_string()));
                *r.status_mut() = op.status;
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

/// Statuses whose answers have no body.
fn no_body(status: StatusCode) -> bool {
    status == StatusCode::NO_CONTENT || status == StatusCode::RESET_CONTENT
}

fn invalid(errors: Vec<String>) -> Problem {
    Problem::new(&problems::VALIDATION)
        .with_detail(errors.join("\n"))
        .with_member(
            "errors",
            Value::Array(errors.into_iter().map(Value::String).collect()),
        )
}
