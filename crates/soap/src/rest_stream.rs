//! `wsdl2openapi`'s JSON answer computed in one pass over the SOAP response, without building a
//! tree: the same JSON as [`crate::rest`]'s tree conversion (typed by the schema, arrays for
//! elements that may repeat, `null` for `xsi:nil`). It answers `None` for whatever it leaves to
//! the tree conversion — faults, messages that are not a SOAP envelope with a body, and
//! anything malformed — which then produces the answer or the error with its message.

use quick_xml::events::{BytesStart, Event};
use quick_xml::name::ResolveResult;
use quick_xml::NsReader;
use serde_json::{Map, Value};

use crate::rest::{insert_generic, scalar_json, XSI_NS};
use crate::wsdl::SoapVersion;
use crate::xml::resolve_reference;
use crate::xsd::{Model, Type};

type Reader<'a> = NsReader<&'a [u8]>;

/// One step through the document, with the checks of the tree parse applied: element names
/// resolve, attributes are well-formed and unescape, references are predefined or character
/// references, text is UTF-8.
enum Ev<'i> {
    /// A start tag; `in_env` when it is in the envelope's namespace.
    Start { s: BytesStart<'i>, in_env: bool },
    /// An end tag.
    End,
    /// Character data (text, CDATA or a reference), unescaped.
    Text(std::borrow::Cow<'i, str>),
    /// The end of the input.
    Eof,
}

/// The next step; `None` for anything left to the tree conversion.
fn read<'i>(r: &mut Reader<'i>, env: &[u8]) -> Option<Ev<'i>> {
    loop {
        let (res, ev) = r.read_resolved_event().ok()?;
        return Some(match ev {
            Event::Start(s) => {
                let in_env = namespace(&res)? == env;
                check_attributes(&s)?;
                Ev::Start { s, in_env }
            }
            Event::End(_) => Ev::End,
            Event::Text(t) => Ev::Text(t.decode().ok()?),
            Event::CData(t) => Ev::Text(t.decode().ok()?),
            Event::GeneralRef(g) => {
                let c = resolve_reference(&g.decode().ok()?)?;
                Ev::Text(std::borrow::Cow::Owned(c.to_string()))
            }
            Event::Comment(_) | Event::PI(_) => continue,
            Event::Eof => Ev::Eof,
            Event::Empty(_) | Event::Decl(_) | Event::DocType(_) => return None,
        });
    }
}

/// Checks what the tree parse checks of every attribute: it parses and its value unescapes.
fn check_attributes(s: &BytesStart<'_>) -> Option<()> {
    for a in s.attributes() {
        a.ok()?.unescape_value().ok()?;
    }
    Some(())
}

/// The namespace of a resolved name (`""` when unbound); `None` for an undeclared prefix.
fn namespace<'r>(r: &'r ResolveResult<'_>) -> Option<&'r [u8]> {
    match r {
        ResolveResult::Bound(ns) => Some(ns.as_ref()),
        ResolveResult::Unbound => Some(b""),
        ResolveResult::Unknown(_) => None,
    }
}

/// The JSON of the first element of the response's body, typed by `output` (the operation's
/// response element; untyped when `None`); `Value::Object` of nothing for an empty body.
pub(crate) fn response_json(model: &Model, output: Option<&Type>, bytes: &[u8]) -> Option<Value> {
    let mut r = NsReader::from_reader(bytes);
    r.config_mut().enable_all_checks(true);
    r.config_mut().expand_empty_elements = true;
    // The root: a SOAP envelope.
    let version = loop {
        let (res, ev) = r.read_resolved_event().ok()?;
        match ev {
            Event::Start(s) => {
                let ns = std::str::from_utf8(namespace(&res)?).ok()?;
                check_attributes(&s)?;
                break SoapVersion::from_envelope_ns(ns)
                    .filter(|_| s.local_name().as_ref() == b"Envelope")?;
            }
            Event::Decl(_) | Event::Comment(_) | Event::PI(_) => {}
            Event::Text(t) if t.iter().all(u8::is_ascii_whitespace) => {}
            _ => return None,
        }
    };
    let env = version.envelope_ns().as_bytes();
    // Its children up to the Body.
    loop {
        match read(&mut r, env)? {
            Ev::Start { s, in_env } => {
                if in_env && s.local_name().as_ref() == b"Body" {
                    break;
                }
                skip(&mut r, env)?;
            }
            Ev::Text(_) => {}
            Ev::End | Ev::Eof => return None,
        }
    }
    // The Body's first element.
    let value = loop {
        match read(&mut r, env)? {
            Ev::Start { s, in_env } => {
                if in_env && s.local_name().as_ref() == b"Fault" {
                    return None;
                }
                break match output {
                    Some(t) => typed(&mut r, env, &s, t, model)?,
                    None => generic(&mut r, env, &s)?,
                };
            }
            // The Body ended without an element.
            Ev::End => return finish(&mut r, env, 1).map(|()| Value::Object(Map::new())),
            Ev::Text(_) => {}
            Ev::Eof => return None,
        }
    };
    finish(&mut r, env, 2).map(|()| value)
}

/// Reads the rest of the document (`depth` elements are open) with the checks of the tree
/// parse, and no second root element.
fn finish(r: &mut Reader<'_>, env: &[u8], mut depth: usize) -> Option<()> {
    loop {
        match read(r, env)? {
            Ev::Start { .. } => {
                if depth == 0 {
                    return None;
                }
                depth += 1;
            }
            Ev::End => depth = depth.checked_sub(1)?,
            Ev::Text(_) => {}
            Ev::Eof => return (depth == 0).then_some(()),
        }
    }
}

/// Skips the content of an element whose start tag was read (with the tree parse's checks).
fn skip(r: &mut Reader<'_>, env: &[u8]) -> Option<()> {
    let mut depth = 1usize;
    loop {
        match read(r, env)? {
            Ev::Start { .. } => depth += 1,
            Ev::End => {
                depth -= 1;
                if depth == 0 {
                    return Some(());
                }
            }
            Ev::Text(_) => {}
            Ev::Eof => return None,
        }
    }
}

/// The attributes of `s` other than namespace declarations, unescaped, and whether it is
/// `xsi:nil`.
fn attributes(r: &Reader<'_>, s: &BytesStart<'_>) -> Option<(Vec<(String, String)>, bool)> {
    let mut out = Vec::new();
    let mut nil = false;
    for a in s.attributes() {
        let a = a.ok()?;
        let key = std::str::from_utf8(a.key.as_ref()).ok()?;
        if key == "xmlns" || key.starts_with("xmlns:") {
            continue;
        }
        let value = a.unescape_value().ok()?.into_owned();
        if key.ends_with(":nil") && (value == "true" || value == "1") {
            let (res, _) = r.resolve_attribute(a.key);
            nil |= matches!(res, ResolveResult::Bound(ns) if ns.as_ref() == XSI_NS.as_bytes());
        }
        out.push((key.to_owned(), value));
    }
    Some((out, nil))
}

/// The element whose start tag `s` was read, typed by `typ`.
fn typed(
    r: &mut Reader<'_>,
    env: &[u8],
    s: &BytesStart<'_>,
    typ: &Type,
    model: &Model,
) -> Option<Value> {
    let (attrs, nil) = attributes(r, s)?;
    if nil {
        skip(r, env)?;
        return Some(Value::Null);
    }
    let c = match typ {
        Type::Complex(i) => match model.types.get(*i) {
            Some(c) => c,
            None => return untyped(r, env, attrs),
        },
        Type::Any => return untyped(r, env, attrs),
        Type::Scalar(sc) => {
            let mut text = String::new();
            loop {
                match read(r, env)? {
                    Ev::Start { .. } => skip(r, env)?,
                    Ev::Text(t) => text.push_str(&t),
                    Ev::End => break,
                    Ev::Eof => return None,
                }
            }
            return Some(scalar_json(&text, sc));
        }
    };
    let mut obj = Map::new();
    for (k, v) in attrs {
        if k.contains(':') {
            continue;
        }
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
    loop {
        let child = match read(r, env)? {
            Ev::Start { s, .. } => s,
            Ev::Text(t) => {
                text.push_str(&t);
                continue;
            }
            Ev::End => break,
            Ev::Eof => return None,
        };
        let local = std::str::from_utf8(child.local_name().into_inner()).ok()?;
        match c.particles.iter().find(|p| p.name == local) {
            Some(p) => {
                let v = typed(r, env, &child, &p.typ, model)?;
                if p.repeated() {
                    if let Some(Value::Array(a)) = obj.get_mut(&p.name) {
                        a.push(v);
                    }
                } else {
                    obj.insert(p.name.clone(), v);
                }
            }
            None => {
                let v = generic(r, env, &child)?;
                insert_generic(&mut obj, local, v);
            }
        }
    }
    if let Some(sc) = &c.text {
        obj.insert("$value".into(), scalar_json(&text, sc));
    }
    Some(Value::Object(obj))
}

/// The element whose start tag `s` was read, without type information.
fn generic(r: &mut Reader<'_>, env: &[u8], s: &BytesStart<'_>) -> Option<Value> {
    let (attrs, nil) = attributes(r, s)?;
    if nil {
        skip(r, env)?;
        return Some(Value::Null);
    }
    untyped(r, env, attrs)
}

/// The rest of an element without type information: text, or an object of its children and
/// attributes (repeated children become arrays).
fn untyped(r: &mut Reader<'_>, env: &[u8], attrs: Vec<(String, String)>) -> Option<Value> {
    let mut obj = Map::new();
    let mut plain = true;
    for (k, v) in attrs {
        if !k.contains(':') {
            plain = false;
            obj.insert(k, Value::String(v));
        }
    }
    let mut text = String::new();
    loop {
        let child = match read(r, env)? {
            Ev::Start { s, .. } => s,
            Ev::Text(t) => {
                text.push_str(&t);
                continue;
            }
            Ev::End => break,
            Ev::Eof => return None,
        };
        plain = false;
        let local = std::str::from_utf8(child.local_name().into_inner()).ok()?;
        let v = generic(r, env, &child)?;
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
