//! JSON → XML: the request object written as the operation's request element, in schema
//! order, checked while it is written.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Map, Value};

use super::compiled::{by_length, RestOp, Slot, Wsdl2OpenApi};
use crate::xml::escape_into;
use crate::xsd::{Model, Particle, Type};

impl Wsdl2OpenApi {
    /// Builds the SOAP envelope for a request to operation `op` from its JSON content.
    #[cfg(test)]
    pub(super) fn request_xml(&self, op: &RestOp, content: &Value) -> Result<String, Vec<String>> {
        let payload = self.request_element(op, content)?;
        String::from_utf8(self.envelope(payload.as_bytes())).map_err(|e| vec![e.to_string()])
    }

    /// The request element (the content of the SOAP Body) for operation `op` from its JSON
    /// content; it declares every namespace it uses.
    #[cfg(test)]
    pub(super) fn request_element(
        &self,
        op: &RestOp,
        content: &Value,
    ) -> Result<String, Vec<String>> {
        self.request_element_checked(op, content)
            .map(|(xml, _)| xml)
    }

    /// [`Wsdl2OpenApi::request_element`] and the validator fast path's verdict on it, checked
    /// while it was written ([`crate::quick::WriteCheck`]).
    pub(super) fn request_element_checked(
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
    pub(super) fn envelope(&self, element: &[u8]) -> Vec<u8> {
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
