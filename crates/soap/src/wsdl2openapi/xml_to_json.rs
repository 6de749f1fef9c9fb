//! XML → JSON: the SOAP response read as the JSON the OpenAPI document describes (in one
//! pass with [`super::stream`] for everyday answers, on a tree for faults and anything
//! unusual).

use http::StatusCode;
use serde_json::{Map, Value};
use turnpike_core::problems;
use turnpike_core::Problem;

use super::compiled::{RestOp, Wsdl2OpenApi};
use super::values::{insert_generic, scalar_json};
use crate::names::XSI_NS;
use crate::wsdl::SoapVersion;
use crate::xml::{self, Element};
use crate::xsd::{Model, Type};

impl Wsdl2OpenApi {
    /// The JSON answer for the SOAP response `bytes` of operation `op`: converted in one pass
    /// ([`crate::rest_stream`]), or on a tree for faults and errors.
    pub(super) fn response_json(&self, op: &RestOp, bytes: &[u8]) -> Result<Value, Box<Problem>> {
        let output = op.output.as_ref().map(|p| &p.typ);
        match super::stream::response_json(&self.model, output, bytes) {
            Some(v) => Ok(v),
            None => {
                crate::quick::Miss::Conversion.count();
                self.response_json_tree(op, bytes)
            }
        }
    }

    /// [`Wsdl2OpenApi::response_json`] on a tree of the response.
    pub(super) fn response_json_tree(
        &self,
        op: &RestOp,
        bytes: &[u8],
    ) -> Result<Value, Box<Problem>> {
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
