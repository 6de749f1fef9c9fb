//! `wsdl2openapi`'s JSON answer computed in one pass over the SOAP response with the
//! validator fast path's scanner (`quick::scan`), without building a tree: the same JSON as
//! [`crate::rest`]'s tree conversion (typed by the schema, arrays for
//! elements that may repeat, `null` for `xsi:nil`). It answers `None` for whatever it leaves to
//! the tree conversion — faults, messages that are not a SOAP envelope with a body, and
//! anything malformed — which then produces the answer or the error with its message.

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::values::{insert_generic, scalar_json};
use crate::names::XSI_NS;
use crate::quick::scan::{Attr, Event, Scanner};
use crate::wsdl::SoapVersion;
use crate::xml::resolve_reference;
use crate::xsd::{Model, Type};

/// Character data with its references resolved, as the tree parse reads it (line ends as
/// written). `None` for a reference the tree parse refuses.
fn unescape(raw: &[u8]) -> Option<Cow<'_, str>> {
    let text = std::str::from_utf8(raw).ok()?;
    if !text.contains('&') {
        return Some(Cow::Borrowed(text));
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let after = &rest[amp + 1..];
        let semi = after.find(';')?;
        out.push(resolve_reference(&after[..semi])?);
        rest = &after[semi + 1..];
    }
    out.push_str(rest);
    Some(Cow::Owned(out))
}

/// The next event, with the texts checked as the tree parse checks them.
fn next<'a>(sc: &mut Scanner<'a>) -> Option<Ev<'a>> {
    Some(match sc.next_event()? {
        Event::Start { ns, local } => Ev::Start { ns, local },
        Event::End => Ev::End,
        Event::Text(raw) => Ev::Text(unescape(raw)?),
        Event::Done => Ev::Done,
    })
}

/// One step through the document.
enum Ev<'a> {
    Start { ns: &'a [u8], local: &'a [u8] },
    End,
    Text(Cow<'a, str>),
    Done,
}

/// The JSON of the first element of the response's body, typed by `output` (the operation's
/// response element; untyped when `None`); `Value::Object` of nothing for an empty body.
pub(crate) fn response_json(model: &Model, output: Option<&Type>, bytes: &[u8]) -> Option<Value> {
    let mut sc = Scanner::new(bytes)?;
    // The root: a SOAP envelope.
    let Ev::Start { ns, local } = next(&mut sc)? else {
        return None;
    };
    let version = std::str::from_utf8(ns)
        .ok()
        .and_then(SoapVersion::from_envelope_ns)
        .filter(|_| local == b"Envelope")?;
    check_attributes(sc.attrs())?;
    let env = version.envelope_ns().as_bytes();
    // Its children up to the Body.
    loop {
        match next(&mut sc)? {
            Ev::Start { ns, local } => {
                check_attributes(sc.attrs())?;
                if ns == env && local == b"Body" {
                    break;
                }
                skip(&mut sc)?;
            }
            Ev::Text(_) => {}
            Ev::End | Ev::Done => return None,
        }
    }
    // The Body's first element.
    let value = loop {
        match next(&mut sc)? {
            Ev::Start { ns, local } => {
                if ns == env && local == b"Fault" {
                    return None;
                }
                break match output {
                    Some(t) => typed(&mut sc, t, model)?,
                    None => generic(&mut sc)?,
                };
            }
            // The Body ended without an element.
            Ev::End => return finish(&mut sc, 1).map(|()| Value::Object(Map::new())),
            Ev::Text(_) => {}
            Ev::Done => return None,
        }
    };
    finish(&mut sc, 2).map(|()| value)
}

/// Checks what the tree parse checks of attributes: their values unescape.
fn check_attributes(attrs: &[Attr<'_>]) -> Option<()> {
    for a in attrs {
        unescape(a.raw)?;
    }
    Some(())
}

/// Reads the rest of the document (`depth` elements are open) with the tree parse's checks.
fn finish(sc: &mut Scanner<'_>, mut depth: usize) -> Option<()> {
    loop {
        match next(sc)? {
            Ev::Start { .. } => {
                check_attributes(sc.attrs())?;
                depth += 1;
            }
            Ev::End => depth = depth.checked_sub(1)?,
            Ev::Text(_) => {}
            Ev::Done => return (depth == 0).then_some(()),
        }
    }
}

/// Skips the content of an element whose start tag was read (with the tree parse's checks).
fn skip(sc: &mut Scanner<'_>) -> Option<()> {
    let mut depth = 1usize;
    loop {
        match next(sc)? {
            Ev::Start { .. } => {
                check_attributes(sc.attrs())?;
                depth += 1;
            }
            Ev::End => {
                depth -= 1;
                if depth == 0 {
                    return Some(());
                }
            }
            Ev::Text(_) => {}
            Ev::Done => return None,
        }
    }
}

/// The unprefixed attributes of the start tag just read, unescaped, and whether it is
/// `xsi:nil`.
fn attributes(sc: &Scanner<'_>) -> Option<(Vec<(String, String)>, bool)> {
    let mut out = Vec::new();
    let mut nil = false;
    for a in sc.attrs() {
        let value = unescape(a.raw)?;
        if a.ns.is_empty() {
            let name = std::str::from_utf8(a.local).ok()?;
            out.push((name.to_owned(), value.into_owned()));
        } else if a.ns == XSI_NS.as_bytes()
            && a.local == b"nil"
            && (value == "true" || value == "1")
        {
            nil = true;
        }
    }
    Some((out, nil))
}

/// Reads an element's content up to its next child, adding the direct text to `text`: the
/// child's local name (its start tag just read), `Some(None)` at the element's end, `None` when
/// the document ends first or is left to the tree conversion.
fn next_child<'a>(sc: &mut Scanner<'a>, text: &mut String) -> Option<Option<&'a str>> {
    loop {
        match next(sc)? {
            Ev::Start { local, .. } => return std::str::from_utf8(local).ok().map(Some),
            Ev::Text(t) => text.push_str(&t),
            Ev::End => return Some(None),
            Ev::Done => return None,
        }
    }
}

/// The element whose start tag was just read, typed by `typ`.
fn typed(sc: &mut Scanner<'_>, typ: &Type, model: &Model) -> Option<Value> {
    let (attrs, nil) = attributes(sc)?;
    if nil {
        skip(sc)?;
        return Some(Value::Null);
    }
    let c = match typ {
        Type::Complex(i) => match model.types.get(*i) {
            Some(c) => c,
            None => return untyped(sc, attrs),
        },
        Type::Any => return untyped(sc, attrs),
        Type::Scalar(scalar) => {
            let mut text = String::new();
            while next_child(sc, &mut text)?.is_some() {
                check_attributes(sc.attrs())?;
                skip(sc)?;
            }
            return Some(scalar_json(&text, scalar));
        }
    };
    let mut obj = Map::new();
    for (k, v) in attrs {
        let val = match c.attributes.iter().find(|a| a.name == k) {
            Some(a) => scalar_json(&v, &a.scalar),
            None => Value::String(v),
        };
        obj.insert(k, val);
    }
    for p in c.particles.iter().filter(|p| p.repeated()) {
        obj.entry(p.name.clone())
            .or_insert_with(|| Value::Array(Vec::new()));
    }
    let mut text = String::new();
    while let Some(local) = next_child(sc, &mut text)? {
        match c.particles.iter().find(|p| p.name == local) {
            Some(p) => {
                let v = typed(sc, &p.typ, model)?;
                if p.repeated() {
                    if let Some(Value::Array(a)) = obj.get_mut(&p.name) {
                        a.push(v);
                    }
                } else {
                    obj.insert(p.name.clone(), v);
                }
            }
            None => {
                let v = generic(sc)?;
                insert_generic(&mut obj, local, v);
            }
        }
    }
    if let Some(scalar) = &c.text {
        obj.insert("$value".into(), scalar_json(&text, scalar));
    }
    Some(Value::Object(obj))
}

/// The element whose start tag was just read, without type information.
fn generic(sc: &mut Scanner<'_>) -> Option<Value> {
    let (attrs, nil) = attributes(sc)?;
    if nil {
        skip(sc)?;
        return Some(Value::Null);
    }
    untyped(sc, attrs)
}

/// The rest of an element without type information: text, or an object of its children and
/// attributes (repeated children become arrays).
fn untyped(sc: &mut Scanner<'_>, attrs: Vec<(String, String)>) -> Option<Value> {
    let mut obj = Map::new();
    let mut plain = attrs.is_empty();
    for (k, v) in attrs {
        obj.insert(k, Value::String(v));
    }
    let mut text = String::new();
    while let Some(local) = next_child(sc, &mut text)? {
        plain = false;
        let v = generic(sc)?;
        insert_generic(&mut obj, local, v);
    }
    if plain {
        return Some(Value::String(text));
    }
    if !text.trim().is_empty() {
        obj.insert("$value".into(), Value::String(text));
    }
    Some(Value::Object(obj))
}
