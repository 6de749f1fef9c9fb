//! Run time: a message checked against the [`Model`] in the [`Scanner`]'s single pass. Every
//! check answers `Ok(())` only for certainly valid input, and otherwise says why it leaves the
//! message to libxml2 ([`Miss`]).

use super::automaton::{same, Dfa};
use super::scan::{decode, is_xsi, Attr, Event, Scanner};
use super::simple::Simple;
use super::{AllGroup, AttrDecl, Content, ElemDecl, Miss, Model, TypeRef};
use crate::names::SoapVersion;

/// What an open element still expects; `T` holds the text of simple content (the raw bytes
/// while scanning, a flag while writing).
pub(super) enum Frame<'m, T> {
    Elements { dfa: &'m Dfa, state: u32 },
    All { group: &'m AllGroup, seen: u64 },
    Simple { simple: &'m Simple, text: T },
    Empty,
}

fn blank(raw: &[u8]) -> bool {
    raw.iter()
        .all(|&b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
}

/// Declaration `decl`, its attribute declarations and the frame of its content (`text`: the
/// empty text).
pub(super) fn parts<T>(
    model: &Model,
    decl: usize,
    text: T,
) -> Option<(&ElemDecl, &[AttrDecl], Frame<'_, T>)> {
    let d = model.elems.get(decl)?;
    Some(match d.typ {
        TypeRef::Simple(s) => (
            d,
            &[][..],
            Frame::Simple {
                simple: model.simples.get(s)?,
                text,
            },
        ),
        TypeRef::Complex(c) => {
            let c = model.complexes.get(c)?;
            let frame = match &c.content {
                Content::Empty => Frame::Empty,
                Content::Simple(s) => Frame::Simple {
                    simple: model.simples.get(*s)?,
                    text,
                },
                Content::Elements(dfa) => Frame::Elements { dfa, state: 0 },
                Content::All(group) => Frame::All { group, seen: 0 },
            };
            (d, &c.attrs[..], frame)
        }
    })
}

/// The declaration of the child `{ns}local` of an element in `frame`, which moves past it;
/// `None` when no such child may come here.
pub(super) fn child<T>(frame: &mut Frame<'_, T>, ns: &[u8], local: &[u8]) -> Option<usize> {
    match frame {
        Frame::Elements { dfa, state } => {
            let (to, child) = dfa.step(*state, ns, local)?;
            *state = to;
            Some(child)
        }
        Frame::All { group, seen } => {
            let i = group
                .items
                .iter()
                .position(|it| same(&it.local, local) && same(&it.ns, ns))?;
            if i >= 64 || *seen & (1 << i) != 0 {
                return None;
            }
            *seen |= 1 << i;
            Some(group.items.get(i)?.decl)
        }
        Frame::Simple { .. } | Frame::Empty => None,
    }
}

impl AllGroup {
    /// True when the children `seen` (a bit per item) complete the group.
    pub(super) fn complete(&self, seen: u64) -> bool {
        let all_required = self
            .items
            .iter()
            .enumerate()
            .all(|(i, item)| !item.required || (i < 64 && seen & (1 << i) != 0));
        all_required || (seen == 0 && self.optional)
    }
}

/// The frame of an element of declaration `decl` with `attrs`, once its attributes check.
fn open<'m, 'a>(
    model: &'m Model,
    decl: usize,
    attrs: &[Attr<'a>],
) -> Result<Frame<'m, &'a [u8]>, Miss> {
    let (d, decls, content) = parts(model, decl, &[][..]).ok_or(Miss::NotCompiled)?;
    let mut nil = false;
    let mut plain = 0usize;
    for a in attrs {
        if is_xsi(a.ns) {
            if a.local == b"nil" && a.raw == b"true" && d.nillable {
                nil = true;
            } else {
                return Err(Miss::Attribute);
            }
        } else {
            plain += 1;
        }
    }
    if plain > 0 && decls.is_empty() {
        return Err(Miss::Attribute);
    }
    let mut required = decls.iter().filter(|a| a.required).count();
    for a in attrs.iter().filter(|a| !is_xsi(a.ns)) {
        let decl = decls
            .iter()
            .find(|x| same(&x.local, a.local) && same(&x.ns, a.ns))
            .ok_or(Miss::Attribute)?;
        let value = decode(a.raw, true).ok_or(Miss::Value)?;
        let simple = model.simples.get(decl.simple).ok_or(Miss::NotCompiled)?;
        if !simple.accepts(&value) {
            return Err(Miss::Value);
        }
        required -= usize::from(decl.required);
    }
    if required > 0 {
        return Err(Miss::Attribute);
    }
    Ok(if nil { Frame::Empty } else { content })
}

/// True when the element's content, now complete, is valid.
fn complete(frame: Frame<'_, &[u8]>) -> Result<(), Miss> {
    let (ok, miss) = match frame {
        Frame::Elements { dfa, state } => (dfa.accepts(state), Miss::Structure),
        Frame::All { group, seen } => (group.complete(seen), Miss::Structure),
        Frame::Simple { simple, text } => (
            simple.accepts(&decode(text, false).ok_or(Miss::Value)?),
            Miss::Value,
        ),
        Frame::Empty => (true, Miss::Structure),
    };
    if ok {
        Ok(())
    } else {
        Err(miss)
    }
}

/// Checks the element whose start tag the scanner just read (declaration `decl`) up to and
/// including its end tag.
fn element(model: &Model, sc: &mut Scanner<'_>, decl: usize) -> Result<(), Miss> {
    let mut stack = Vec::with_capacity(8);
    stack.push(open(model, decl, sc.attrs())?);
    loop {
        match sc.next_event().ok_or(Miss::Markup)? {
            Event::Start { ns, local } => {
                let parent = stack.last_mut().ok_or(Miss::Structure)?;
                let child = child(parent, ns, local).ok_or(Miss::Structure)?;
                let frame = open(model, child, sc.attrs())?;
                stack.push(frame);
            }
            Event::Text(raw) => match stack.last_mut().ok_or(Miss::Structure)? {
                Frame::Elements { .. } | Frame::All { .. } if blank(raw) => {}
                Frame::Simple { text, .. } if text.is_empty() => *text = raw,
                _ => return Err(Miss::Text),
            },
            Event::End => {
                complete(stack.pop().ok_or(Miss::Structure)?)?;
                if stack.is_empty() {
                    return Ok(());
                }
            }
            Event::Done => return Err(Miss::Markup),
        }
    }
}

/// Reads past the content of the element whose start tag was just read (well-formedness
/// only: a `Header`'s entries are not validated).
fn skip(sc: &mut Scanner<'_>) -> Result<(), Miss> {
    let mut depth = 1usize;
    loop {
        match sc.next_event().ok_or(Miss::Markup)? {
            Event::Start { .. } => depth += 1,
            Event::Text(raw) => {
                decode(raw, false).ok_or(Miss::Markup)?;
            }
            Event::End => {
                depth -= 1;
                if depth == 0 {
                    return Ok(());
                }
            }
            Event::Done => return Err(Miss::Markup),
        }
    }
}

/// No `xsi:` attribute (the envelope's own elements take any other).
fn no_xsi(sc: &Scanner<'_>) -> Result<(), Miss> {
    if sc.attrs().iter().any(|a| is_xsi(a.ns)) {
        Err(Miss::Envelope)
    } else {
        Ok(())
    }
}

/// The next event, or [`Miss::Markup`] when the scanner declines.
fn next<'a>(sc: &mut Scanner<'a>) -> Result<Event<'a>, Miss> {
    sc.next_event().ok_or(Miss::Markup)
}

/// The end of the document must come now.
fn done(sc: &mut Scanner<'_>, or: Miss) -> Result<(), Miss> {
    match next(sc)? {
        Event::Done => Ok(()),
        _ => Err(or),
    }
}

/// See [`super::FastPath::check_envelope`].
pub fn envelope(model: &Model, message: &[u8], allowed: &[(String, String)]) -> Result<(), Miss> {
    let mut sc = Scanner::new(message).ok_or(Miss::Markup)?;
    let Event::Start { ns, local } = next(&mut sc)? else {
        return Err(Miss::Envelope);
    };
    let version = std::str::from_utf8(ns)
        .ok()
        .and_then(SoapVersion::from_envelope_ns)
        .ok_or(Miss::Envelope)?;
    if local != b"Envelope" {
        return Err(Miss::Envelope);
    }
    no_xsi(&sc)?;
    let env = version.envelope_ns().as_bytes();
    let mut children = 0;
    let mut body = false;
    loop {
        match next(&mut sc)? {
            Event::Text(raw) if blank(raw) => {}
            Event::Start { ns, local } if ns == env => {
                no_xsi(&sc)?;
                if local == b"Header" && children == 0 {
                    skip(&mut sc)?;
                } else if local == b"Body" && !body {
                    body = true;
                    body_elements(model, &mut sc, allowed)?;
                } else {
                    return Err(Miss::Envelope);
                }
                children += 1;
            }
            Event::End if body => break,
            _ => return Err(Miss::Envelope),
        }
    }
    done(&mut sc, Miss::Envelope)
}

/// The elements of a `Body` (at least one) up to its end tag.
fn body_elements(
    model: &Model,
    sc: &mut Scanner<'_>,
    allowed: &[(String, String)],
) -> Result<(), Miss> {
    let mut count = 0;
    loop {
        match next(sc)? {
            Event::Text(raw) if blank(raw) => {}
            Event::Start { ns, local } => {
                if count == 0
                    && allowed
                        .binary_search_by(|(l, n)| (l.as_bytes(), n.as_bytes()).cmp(&(local, ns)))
                        .is_err()
                {
                    return Err(Miss::Operation);
                }
                let decl = model.global(ns, local).ok_or(Miss::NotCompiled)?;
                element(model, sc, decl)?;
                count += 1;
            }
            Event::End if count > 0 => return Ok(()),
            Event::Text(_) => return Err(Miss::Text),
            _ => return Err(Miss::Envelope),
        }
    }
}

/// See [`super::FastPath::check_element`].
pub fn element_document(model: &Model, message: &[u8]) -> Result<(), Miss> {
    let mut sc = Scanner::new(message).ok_or(Miss::Markup)?;
    let Event::Start { ns, local } = next(&mut sc)? else {
        return Err(Miss::Markup);
    };
    let decl = model.global(ns, local).ok_or(Miss::NotCompiled)?;
    element(model, &mut sc, decl)?;
    done(&mut sc, Miss::Markup)
}
