//! `validator`: validates messages in one of three modes, as Membrane's `validator` does.
//!
//! * `wsdl:` (or, inside a `soapProxy`, nothing): SOAP 1.1 and 1.2 requests and the backend's
//!   responses against a WSDL ([`WsdlValidator`]): the envelope (Envelope, optional Header,
//!   Body), the body element of a declared operation (request elements on the way in, response
//!   elements on the way out) and the full payload against the WSDL's XML Schemas with libxml2.
//!   A violation answers a SOAP fault in the message's SOAP version: "WSDL message validation
//!   failed" with the validator's messages in the detail.
//! * `schema:`: XML bodies against a standalone XML Schema
//!   ([`XsdValidator`](crate::xsd_validator::XsdValidator)).
//! * `jsonSchema:`: JSON bodies against a JSON Schema
//!   ([`JsonSchemaValidator`](crate::json_schema_validator::JsonSchemaValidator)).
//!
//! The last two answer problems (`validation` for requests, `response-validation` for
//! responses) with every violation in `errors`; [`Validator`] is the policy that dispatches.

use std::collections::HashSet;
use std::sync::Arc;

use libxml::parser::{Parser, ParserOptions};
use libxml::tree::{Document, Node};
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_config::units::Flag;
use turnpike_core::{
    BodyNeed, CompileContext, CompileError, Exchange, Outcome, Policy, PolicyFactory,
};

use crate::fault::{fault_response, FaultCode};
use crate::json_schema_validator::{JsonSchemaValidator, SchemaVersion};
use crate::names::{QName, SoapVersion};
use crate::quick::Fast;
use crate::schema::Checked;
use crate::validation::{log_failure, FailureHandler, SchemaMappings};
use crate::wsdl::Wsdl;
use crate::xml_input::{ascii_compatible, refused_before_parsing, PARSE_PADDING};
use crate::xsd_validator::XsdValidator;

/// The fault string of every validation failure.
pub const FAILURE: &str = "WSDL message validation failed";

/// `validator`: validates messages against a WSDL (SOAP), an XML Schema or a JSON Schema.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ValidatorSettings {
    /// The WSDL (a file relative to this config file, or an `http(s)://` URL fetched at load):
    /// validates SOAP messages. Inside a `soapProxy`, defaults to the proxy's WSDL when neither
    /// `schema` nor `jsonSchema` is set.
    #[serde(default)]
    pub wsdl: Option<String>,
    /// Which service of the WSDL to validate against, when it has several (default: all
    /// operations of all its SOAP bindings). Only with `wsdl`.
    #[serde(default)]
    pub service_name: Option<String>,
    /// An XML Schema (a file relative to this config file, or an `http(s)://` URL fetched at
    /// load): validates XML bodies.
    #[serde(default)]
    pub schema: Option<String>,
    /// A JSON Schema, in JSON or YAML (a file relative to this config file, or an
    /// `http(s)://` URL fetched at load): validates JSON bodies.
    #[serde(default)]
    pub json_schema: Option<String>,
    /// The JSON Schema draft: `04`, `05` (as `04`), `06`, `07`, `2019-09` or `2020-12`
    /// (default: the schema's `$schema`, else `2020-12`). Only with `jsonSchema`.
    #[serde(default)]
    pub schema_version: Option<SchemaVersion>,
    /// Local documents for the `$ref` ids of the JSON Schema (`urn:app:base_def`). Only with
    /// `jsonSchema`.
    #[serde(default)]
    pub schema_mappings: Option<SchemaMappings>,
    /// SOAP faults are not validated (in either direction). Only with `wsdl`.
    #[serde(default)]
    pub skip_faults: Flag,
    /// `response` (default): answer a failure; `log`: also log it.
    #[serde(default)]
    pub failure_handler: FailureHandler,
}

/// True when a `validator` with these (unchecked) settings checks SOAP messages, so that its
/// API answers SOAP requests with SOAP faults: every mode but `schema` and `jsonSchema`.
/// Called by the compile stage before the settings are parsed.
pub fn checks_soap(settings: &serde_json::Value) -> bool {
    settings.get("schema").is_none() && settings.get("jsonSchema").is_none()
}

/// The compiled `validator` policy: one of its three modes.
#[derive(Debug)]
pub enum Validator {
    /// `wsdl:` (SOAP).
    Wsdl(WsdlValidator),
    /// `schema:` (XML Schema).
    Xsd(XsdValidator),
    /// `jsonSchema:`.
    Json(JsonSchemaValidator),
}

impl PolicyFactory for Validator {
    const NAME: &'static str = "validator";
    const SOAP: bool = true;
    type Settings = ValidatorSettings;

    /// Loads and compiles the mode's document at config load: the WSDL (`wsdl:`, or inside a
    /// `soapProxy` the proxy's) and its schemas, the XML Schema, or the JSON Schema with its
    /// mapped documents. Returns a load error at the setting's key when a document is missing
    /// or broken, or when the settings mix modes.
    fn compile(c: ValidatorSettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        let log = c.failure_handler == FailureHandler::Log;
        let modes: Vec<&str> = [
            ("wsdl", c.wsdl.is_some()),
            ("schema", c.schema.is_some()),
            ("jsonSchema", c.json_schema.is_some()),
        ]
        .into_iter()
        .filter_map(|(k, set)| set.then_some(k))
        .collect();
        if let [_, second, ..] = modes[..] {
            return Err(CompileError::new(
                second,
                format!(
                    "`validator` takes exactly one of `wsdl`, `schema` and `jsonSchema` (here: {})",
                    modes
                        .iter()
                        .map(|m| format!("`{m}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        let wsdl_mode = c.schema.is_none() && c.json_schema.is_none();
        let json_mode = c.json_schema.is_some();
        if !wsdl_mode && c.skip_faults.0 {
            return Err(CompileError::new(
                "skipFaults",
                "`skipFaults` only makes sense with `wsdl` (SOAP faults)",
            ));
        }
        if !wsdl_mode && c.service_name.is_some() {
            return Err(CompileError::new(
                "serviceName",
                "`serviceName` only makes sense with `wsdl`",
            ));
        }
        if !json_mode {
            for (key, set) in [
                ("schemaVersion", c.schema_version.is_some()),
                ("schemaMappings", c.schema_mappings.is_some()),
            ] {
                if set {
                    return Err(CompileError::new(
                        key,
                        format!("`{key}` only makes sense with `jsonSchema`"),
                    ));
                }
            }
        }
        if let Some(xsd) = &c.schema {
            return XsdValidator::load(xsd, ctx.base_dir)
                .map(|v| Validator::Xsd(v.with_failure_log(log)))
                .map_err(|m| CompileError::new("schema", m));
        }
        if let Some(json) = &c.json_schema {
            let mappings = c.schema_mappings.map(|m| m.schemas).unwrap_or_default();
            return JsonSchemaValidator::load(json, c.schema_version, &mappings, ctx.base_dir)
                .map(|v| Validator::Json(v.with_failure_log(log)));
        }
        let wsdl = match (&c.wsdl, ctx.get::<Arc<Wsdl>>()) {
            (Some(w), _) => Arc::new(
                Wsdl::load(&crate::fetch::Location::from_config(w, ctx.base_dir))
                    .map_err(|m| CompileError::new("wsdl", m))?,
            ),
            (None, Some(w)) => Arc::clone(w),
            (None, None) => {
                return Err(CompileError::new(
                    "",
                    "`validator` needs `wsdl:`, `schema:` or `jsonSchema:` (only inside a `soapProxy` does it default to the proxy's WSDL)",
                ))
            }
        };
        let v = WsdlValidator::new(wsdl, c.service_name.as_deref())
            .map_err(|m| CompileError::new("serviceName", m))?;
        Ok(Validator::Wsdl(
            v.with_skip_faults(c.skip_faults.0).with_failure_log(log),
        ))
    }
}

impl Validator {
    fn policy(&self) -> &dyn Policy {
        match self {
            Validator::Wsdl(v) => v,
            Validator::Xsd(v) => v,
            Validator::Json(v) => v,
        }
    }
}

impl Policy for Validator {
    fn name(&self) -> &'static str {
        "validator"
    }

    fn files(&self) -> Vec<std::path::PathBuf> {
        self.policy().files()
    }

    fn body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    fn response_body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    fn response_needs_request(&self) -> bool {
        self.policy().response_needs_request()
    }

    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        self.policy().on_request(ex)
    }

    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        self.policy().on_response(ex)
    }
}

/// The `wsdl` mode of `validator`: SOAP messages against a WSDL.
#[derive(Debug)]
pub struct WsdlValidator {
    wsdl: Arc<Wsdl>,
    requests: HashSet<QName>,
    responses: HashSet<QName>,
    /// `requests` and `responses` as (local name, namespace), sorted: looked up by the bytes
    /// the parser reports, without copying them.
    sorted: (Vec<LocalFirst>, Vec<LocalFirst>),
    /// Some operation's request (`.0`) or response (`.1`) has an empty body.
    empty_ok: (bool, bool),
    /// `skipFaults`: a message whose body is a SOAP fault passes, requests too.
    skip_faults: bool,
    /// `failureHandler: log`.
    log_failures: bool,
}

/// A parsed SOAP message: its document, version and the body's element children.
pub struct Envelope {
    /// The libxml2 document (keep it alive while using the nodes).
    pub doc: Document,
    /// SOAP version of the envelope.
    pub version: SoapVersion,
    /// Element children of `Body`.
    pub body: Vec<Node>,
}

fn qname(n: &Node) -> QName {
    (
        n.get_namespace()
            .map(|ns| ns.get_href())
            .unwrap_or_default(),
        n.get_name(),
    )
}

fn show(q: &QName) -> String {
    if q.0.is_empty() {
        q.1.clone()
    } else {
        format!("{{{}}}{}", q.0, q.1)
    }
}

/// Parses a SOAP envelope (no DTD, no network, no entity expansion) and checks its structure.
/// On failure returns the message and the SOAP version to answer in, when known.
pub fn parse_envelope(bytes: &[u8]) -> Result<Envelope, (String, Option<SoapVersion>)> {
    if ascii_compatible(bytes) {
        let mut padded = Vec::with_capacity(bytes.len() + PARSE_PADDING);
        padded.extend_from_slice(bytes);
        return parse_envelope_in(&mut padded);
    }
    parse_xml(bytes)
}

/// [`parse_envelope`] for a message the caller owns: the padding goes into its spare capacity
/// (no copy) and is removed again before returning.
pub fn parse_envelope_in(message: &mut Vec<u8>) -> Result<Envelope, (String, Option<SoapVersion>)> {
    if !ascii_compatible(message) {
        return parse_xml(message);
    }
    let len = message.len();
    message.resize(len + PARSE_PADDING, b' ');
    let parsed = parse_xml(message);
    message.truncate(len);
    parsed
}

/// Parses an element the gateway wrote itself (`wsdl2openapi`'s request element, which
/// declares every namespace it uses), padded in place like [`parse_envelope_in`]. Returns the
/// document (keep it alive while using the node) and its root element; errors as
/// [`parse_envelope`]'s.
pub fn parse_element_in(xml: &mut Vec<u8>) -> Result<(Document, Node), String> {
    let len = xml.len();
    let pad = ascii_compatible(xml);
    if pad {
        xml.resize(len + PARSE_PADDING, b' ');
    }
    let parsed = parse_doc(xml);
    xml.truncate(len);
    let doc = parsed?;
    let root = doc
        .get_root_element()
        .ok_or_else(|| "the message has no root element".to_owned())?;
    Ok((doc, root))
}

/// Validates an element the gateway wrote itself (`wsdl2openapi`'s request element, which
/// declares every namespace it uses) against `schemas` in one streaming pass, padded in place
/// like [`parse_envelope_in`]. Returns the validator's messages on failure.
pub fn validate_element_in(
    schemas: &Arc<crate::schema::SchemaSet>,
    xml: &mut Vec<u8>,
) -> Result<(), Vec<String>> {
    if schemas.fast().check_element(xml) == Fast::Valid {
        return Ok(());
    }
    let len = xml.len();
    let pad = ascii_compatible(xml);
    if pad {
        xml.resize(len + PARSE_PADDING, b' ');
    }
    let checked = schemas.validate_message(xml, &mut turnpike_xmlstream::NoWatch);
    xml.truncate(len);
    match checked? {
        Checked::Valid => Ok(()),
        Checked::NotWellFormed => Err(vec!["the message is not well-formed XML".to_owned()]),
        Checked::Invalid(msgs) if msgs.is_empty() => Err(vec![
            "the message does not match the WSDL's schemas".to_owned(),
        ]),
        Checked::Invalid(msgs) => Err(msgs),
    }
}

/// libxml2's document of `bytes` (no DTD, no network, no entity expansion).
fn parse_doc(bytes: &[u8]) -> Result<Document, String> {
    if let Some(m) = refused_before_parsing(bytes) {
        return Err(m.into());
    }
    let options = ParserOptions {
        recover: false,
        no_net: true,
        no_error: true,
        no_warning: true,
        // short text is stored inside its node: fewer allocations
        compact: true,
        ..ParserOptions::default()
    };
    Parser::default()
        .parse_string_with_options(bytes, options)
        .map_err(|_| "the message is not well-formed XML".to_owned())
}

fn parse_xml(bytes: &[u8]) -> Result<Envelope, (String, Option<SoapVersion>)> {
    let doc = parse_doc(bytes).map_err(|m| (m, None))?;
    let root = doc
        .get_root_element()
        .ok_or_else(|| ("the message has no root element".to_owned(), None))?;
    let (ns, local) = qname(&root);
    let version = SoapVersion::from_envelope_ns(&ns)
        .filter(|_| local == "Envelope")
        .ok_or_else(|| {
            (
                format!(
                    "the root element {} is not a SOAP 1.1 or 1.2 Envelope",
                    show(&(ns.clone(), local.clone()))
                ),
                None,
            )
        })?;
    let env_ns = version.envelope_ns();
    let mut body = None;
    for (i, child) in root.get_child_elements().into_iter().enumerate() {
        let q = qname(&child);
        let is = |name: &str| q.0 == env_ns && q.1 == name;
        if i == 0 && is("Header") {
            continue;
        }
        if body.is_none() && is("Body") {
            body = Some(child);
            continue;
        }
        return Err((
            format!("unexpected element {} in the Envelope", show(&q)),
            Some(version),
        ));
    }
    let body = body.ok_or_else(|| ("the Envelope has no Body".to_owned(), Some(version)))?;
    let children = body.get_child_elements();
    Ok(Envelope {
        doc,
        version,
        body: children,
    })
}

/// A qualified name as (local name, namespace).
type LocalFirst = (String, String);

/// The root element of a message, as [`EnvelopeWatch`] saw it.
enum Root {
    Missing,
    Envelope(SoapVersion),
    Other(QName),
}

/// The first element of a message's body, as [`EnvelopeWatch`] saw it.
enum First {
    Missing,
    /// The envelope's own `Fault`.
    Fault,
    /// One of the body elements the WSDL declares for this direction.
    Allowed,
    /// Another element.
    Other(QName),
}

/// Notes, while a message streams through the parser, what [`WsdlValidator::check_streaming`]
/// checks beside the schemas: the root element, the parts of the envelope and the first
/// element of its body. Names are copied only for error messages.
struct EnvelopeWatch<'a> {
    /// The body elements allowed, as (local name, namespace), sorted.
    allowed: &'a [LocalFirst],
    root: Root,
    /// The first child of the envelope other than a leading `Header` and one `Body`.
    unexpected: Option<QName>,
    /// Children of the envelope seen.
    children: usize,
    /// A `Body` was seen.
    body: bool,
    /// The envelope child being read is the `Body`.
    in_body: bool,
    first: First,
}

fn owned(ns: &[u8], local: &[u8]) -> QName {
    (
        String::from_utf8_lossy(ns).into_owned(),
        String::from_utf8_lossy(local).into_owned(),
    )
}

impl turnpike_xmlstream::Watch for EnvelopeWatch<'_> {
    fn max_depth(&self) -> u32 {
        3
    }

    fn start(&mut self, depth: u32, ns: &[u8], local: &[u8]) {
        match depth {
            0 => {
                let version = std::str::from_utf8(ns)
                    .ok()
                    .and_then(SoapVersion::from_envelope_ns)
                    .filter(|_| local == b"Envelope");
                self.root = match version {
                    Some(v) => Root::Envelope(v),
                    None => Root::Other(owned(ns, local)),
                };
            }
            1 => {
                let Root::Envelope(version) = self.root else {
                    return;
                };
                let env = version.envelope_ns().as_bytes();
                let first = self.children == 0;
                self.children += 1;
                self.in_body = false;
                if ns == env && local == b"Header" && first {
                    return;
                }
                if ns == env && local == b"Body" && !self.body {
                    self.body = true;
                    self.in_body = true;
                    return;
                }
                if self.unexpected.is_none() {
                    self.unexpected = Some(owned(ns, local));
                }
            }
            _ => {
                if !self.in_body || !matches!(self.first, First::Missing) {
                    return;
                }
                let Root::Envelope(version) = self.root else {
                    return;
                };
                let allowed = self
                    .allowed
                    .binary_search_by(|(l, n)| (l.as_bytes(), n.as_bytes()).cmp(&(local, ns)))
                    .is_ok();
                self.first = if allowed {
                    First::Allowed
                } else if ns == version.envelope_ns().as_bytes() && local == b"Fault" {
                    First::Fault
                } else {
                    First::Other(owned(ns, local))
                };
            }
        }
    }
}

impl WsdlValidator {
    /// Builds the validator for the operations of `service` (all when `None`) of `wsdl`.
    pub fn new(wsdl: Arc<Wsdl>, service: Option<&str>) -> Result<Self, String> {
        let mut requests = HashSet::new();
        let mut responses = HashSet::new();
        let mut empty_ok = (false, false);
        for port in wsdl.ports(service)? {
            for op in &port.operations {
                requests.extend(op.body_element(false));
                responses.extend(op.body_element(true));
                let empty = |spec: &Option<crate::wsdl::MessageSpec>| {
                    op.style == crate::wsdl::Style::Document
                        && spec.as_ref().is_some_and(|m| m.parts.is_empty())
                };
                empty_ok.0 |= empty(&op.input);
                empty_ok.1 |= empty(&op.output);
            }
        }
        let sort = |set: &HashSet<QName>| {
            let mut v: Vec<LocalFirst> =
                set.iter().map(|(ns, l)| (l.clone(), ns.clone())).collect();
            v.sort();
            v
        };
        let sorted = (sort(&requests), sort(&responses));
        Ok(WsdlValidator {
            wsdl,
            requests,
            responses,
            sorted,
            empty_ok,
            skip_faults: false,
            log_failures: false,
        })
    }

    /// The same validator, which lets messages whose body is a SOAP fault pass unvalidated
    /// in both directions (`skipFaults`; responses with a fault pass in any case).
    pub fn with_skip_faults(mut self, skip: bool) -> Self {
        self.skip_faults = skip;
        self
    }

    /// The same validator, which also logs each failure (`failureHandler: log`).
    pub fn with_failure_log(mut self, log: bool) -> Self {
        self.log_failures = log;
        self
    }

    /// Validates one message; `Err` carries the fault's detail and the version to answer in.
    pub fn check(&self, bytes: &[u8], response: bool) -> Result<(), (String, Option<SoapVersion>)> {
        if self.wsdl.schema_set.validates_envelopes() {
            self.check_streaming(bytes, response)
        } else {
            self.check_tree(bytes, response)
        }
    }

    /// The fast path's verdict on a request message beside libxml2's (on a tree, without the
    /// fast path): `(fast says valid, libxml2 accepts)`. For the fuzzer, which checks that the
    /// first implies the second.
    #[doc(hidden)]
    pub fn fast_path_against_libxml2(&self, bytes: &[u8]) -> (bool, bool) {
        let fast = refused_before_parsing(bytes).is_none()
            && self
                .wsdl
                .schema_set
                .fast()
                .check_envelope(bytes, &self.sorted.0)
                == Fast::Valid;
        (fast, self.check_tree(bytes, false).is_ok())
    }

    /// The body elements allowed in a request or a response.
    fn allowed(&self, response: bool) -> &HashSet<QName> {
        if response {
            &self.responses
        } else {
            &self.requests
        }
    }

    /// The message for a first body element `q` that is not one of the WSDL's.
    fn unexpected_body(&self, q: &QName, response: bool) -> String {
        let mut names: Vec<String> = self.allowed(response).iter().map(show).collect();
        names.sort();
        format!(
            "{} is not a {} element of the WSDL; expected one of: {}",
            show(q),
            if response { "response" } else { "request" },
            names.join(", ")
        )
    }

    /// [`WsdlValidator::check`] in one streaming pass: libxml2 parses the message and validates
    /// it against the schemas and the envelope schema of the set while [`EnvelopeWatch`] notes
    /// the envelope's parts and the body's elements; no tree is built. The verdicts and
    /// messages are those of [`WsdlValidator::check_tree`].
    fn check_streaming(
        &self,
        bytes: &[u8],
        response: bool,
    ) -> Result<(), (String, Option<SoapVersion>)> {
        if let Some(m) = refused_before_parsing(bytes) {
            return Err((m.into(), None));
        }
        let allowed = if response {
            &self.sorted.1
        } else {
            &self.sorted.0
        };
        // The everyday message is valid by the fast path; anything else goes to libxml2.
        if self.wsdl.schema_set.fast().check_envelope(bytes, allowed) == Fast::Valid {
            return Ok(());
        }
        let mut watch = EnvelopeWatch {
            allowed,
            root: Root::Missing,
            unexpected: None,
            children: 0,
            body: false,
            in_body: false,
            first: First::Missing,
        };
        let checked = if ascii_compatible(bytes) {
            let mut padded = Vec::with_capacity(bytes.len() + PARSE_PADDING);
            padded.extend_from_slice(bytes);
            padded.resize(bytes.len() + PARSE_PADDING, b' ');
            self.wsdl.schema_set.validate_message(&padded, &mut watch)
        } else {
            self.wsdl.schema_set.validate_message(bytes, &mut watch)
        }
        .map_err(|m| (m.join("\n"), None))?;
        if matches!(checked, Checked::NotWellFormed) {
            return Err(("the message is not well-formed XML".to_owned(), None));
        }
        let version = match watch.root {
            Root::Missing => return Err(("the message has no root element".to_owned(), None)),
            Root::Other(q) => {
                return Err((
                    format!(
                        "the root element {} is not a SOAP 1.1 or 1.2 Envelope",
                        show(&q)
                    ),
                    None,
                ))
            }
            Root::Envelope(v) => v,
        };
        if let Some(q) = watch.unexpected {
            return Err((
                format!("unexpected element {} in the Envelope", show(&q)),
                Some(version),
            ));
        }
        if !watch.body {
            return Err(("the Envelope has no Body".to_owned(), Some(version)));
        }
        match watch.first {
            First::Missing => return self.empty_body(response, Some(version)),
            First::Fault if response || self.skip_faults => return Ok(()),
            First::Fault => {
                let q = (version.envelope_ns().to_owned(), "Fault".to_owned());
                return Err((self.unexpected_body(&q, response), Some(version)));
            }
            First::Other(q) => return Err((self.unexpected_body(&q, response), Some(version))),
            First::Allowed => {}
        }
        match checked {
            Checked::Valid | Checked::NotWellFormed => Ok(()),
            Checked::Invalid(msgs) if msgs.is_empty() => Err((
                "the message does not match the WSDL's schemas".to_owned(),
                Some(version),
            )),
            Checked::Invalid(msgs) => Err((msgs.join("\n"), Some(version))),
        }
    }

    /// The verdict on a message whose Body is empty: fine when an operation of the WSDL has an
    /// empty message in that direction.
    fn empty_body(
        &self,
        response: bool,
        version: Option<SoapVersion>,
    ) -> Result<(), (String, Option<SoapVersion>)> {
        let ok = if response {
            self.empty_ok.1
        } else {
            self.empty_ok.0
        };
        if ok {
            Ok(())
        } else {
            Err(("the Body is empty".into(), version))
        }
    }

    /// [`WsdlValidator::check`] on a libxml2 tree, for WSDLs whose schemas declare the SOAP
    /// envelope namespaces themselves: each body element is validated on its own.
    fn check_tree(
        &self,
        bytes: &[u8],
        response: bool,
    ) -> Result<(), (String, Option<SoapVersion>)> {
        let env = parse_envelope(bytes)?;
        let version = Some(env.version);
        let Some(first) = env.body.first() else {
            return self.empty_body(response, version);
        };
        let q = qname(first);
        let env_ns = env.version.envelope_ns();
        if (response || self.skip_faults) && q.0 == env_ns && q.1 == "Fault" {
            return Ok(());
        }
        if !self.allowed(response).contains(&q) {
            return Err((self.unexpected_body(&q, response), version));
        }
        for el in &env.body {
            self.wsdl
                .schema_set
                .validate(el)
                .map_err(|msgs| (msgs.join("\n"), version))?;
        }
        Ok(())
    }
}

impl Policy for WsdlValidator {
    fn name(&self) -> &'static str {
        "validator"
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
        let bytes = ex.request_bytes().map_or(&b""[..], |b| &b[..]);
        match self.check(bytes, false) {
            Ok(()) => Outcome::Continue,
            Err((msg, v)) => {
                if self.log_failures {
                    log_failure(false, "wsdl", std::slice::from_ref(&msg));
                }
                let v = v.unwrap_or_else(|| {
                    SoapVersion::from_content_type(
                        ex.request.headers.get(http::header::CONTENT_TYPE),
                    )
                });
                Outcome::Respond(fault_response(v, FaultCode::Client, FAILURE, Some(&msg)))
            }
        }
    }

    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        let Some(res) = ex.response.as_ref() else {
            return Outcome::Continue;
        };
        let ct = res.headers().get(http::header::CONTENT_TYPE);
        if ct.is_some_and(|v| v.as_bytes().starts_with(b"application/problem+json")) {
            return Outcome::Continue;
        }
        let bytes = ex.response_bytes().map_or(&b""[..], |b| &b[..]);
        match self.check(bytes, true) {
            Ok(()) => Outcome::Continue,
            Err((msg, v)) => {
                if self.log_failures {
                    log_failure(true, "wsdl", std::slice::from_ref(&msg));
                }
                let v = v.unwrap_or_else(|| {
                    SoapVersion::from_content_type(
                        ex.request.headers.get(http::header::CONTENT_TYPE),
                    )
                });
                Outcome::Respond(fault_response(
                    v,
                    FaultCode::Server,
                    FAILURE,
                    Some(&format!("the backend's response is invalid: {msg}")),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod mode_tests;
