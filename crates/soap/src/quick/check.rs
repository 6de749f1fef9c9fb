//! Run time: a message checked against the [`Model`] in the [`Scanner`]'s single pass. Every
//! function answers `Some(())` only for certainly valid input and `None` otherwise.

use super::automaton::{same, Dfa};
use super::scan::{decode, is_xsi, Attr, Event, Scanner};
use super::simple::Simple;
use super::{AllGroup, AttrDecl, Content, ElemDecl, Model, TypeRef};
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
fn open<'m, 'a>(model: &'m Model, decl: usize, attrs: &[Attr<'a>]) -> Option<Frame<'m, &'a [u8]>> {
    let (d, decls, content) = parts(model, decl, &[][..])?;
    let mut nil = false;
    let mut plain = 0usize;
    for a in attrs {
        if is_xsi(a.ns) {
            if a.local == b"nil" && a.raw == b"true" && d.nillable {
                nil = true;
            } else {
                return None;
            }
        } else {
            plain += 1;
        }
    }
    if plain > 0 && decls.is_empty() {
        return None;
    }
    let mut required = decls.iter().filter(|a| a.required).count();
    for a in attrs.iter().filter(|a| !is_xsi(a.ns)) {
        let decl = decls
            .iter()
            .find(|x| same(&x.local, a.local) && same(&x.ns, a.ns))?;
        let value = decode(a.raw, true)?;
        if !model.simples.get(decl.simple)?.accepts(&value) {
            return None;
        }
        required -= usize::from(decl.required);
    }
    if required > 0 {
        return None;
    }
    Some(if nil { Frame::Empty } else { content })
}

/// True when the element's content, now complete, is valid.
fn complete(frame: Frame<'_, &[u8]>) -> Option<()> {
    let ok = match frame {
        Frame::Elements { dfa, state } => dfa.accepts(state),
        Frame::All { group, seen } => group.complete(seen),
        Frame::Simple { simple, text } => simple.accepts(&decode(text, false)?),
        Frame::Empty => true,
    };
    ok.then_some(())
}

/// Checks the element whose start tag the scanner just read (declaration `decl`) up to and
/// including its end tag.
fn element(model: &Model, sc: &mut Scanner<'_>, decl: usize) -> Option<()> {
    let mut stack = Vec::with_capacity(8);
    stack.push(open(model, decl, sc.attrs())?);
    loop {
        match sc.next_event()? {
            Event::Start { ns, local } => {
                let child = child(stack.last_mut()?, ns, local)?;
                let frame = open(model, child, sc.attrs())?;
                stack.push(frame);
            }
            Event::Text(raw) => match stack.last_mut()? {
                Frame::Elements { .. } | Frame::All { .. } if blank(raw) => {}
                Frame::Simple { text, .. } if text.is_empty() => *text = raw,
                _ => return None,
            },
            Event::End => {
                complete(stack.pop()?)?;
                if stack.is_empty() {
                    return Some(());
                }
            }
            Event::Done => return None,
        }
    }
}

/// Reads past the content of the element whose start tag was just read (well-formedness
/// only: a `Header`'s entries are not validated).
fn skip(sc: &mut Scanner<'_>) -> Option<()> {
    let mut depth = 1usize;
    loop {
        match sc.next_event()? {
            Event::Start { .. } => depth += 1,
            Event::Text(raw) => {
                decode(raw, false)?;
            }
            Event::End => {
                depth -= 1;
                if depth == 0 {
                    return Some(());
                }
            }
            Event::Done => return None,
        }
    }
}

/// No `xsi:` attribute (the envelope's own elements take any other).
fn no_xsi(sc: &Scanner<'_>) -> Option<()> {
    (!sc.attrs().iter().any(|a| is_xsi(a.ns))).then_some(())
}

/// See [`super::FastPath::check_envelope`].
pub fn envelope(model: &Model, message: &[u8], allowed: &[(String, String)]) -> Option<()> {
    let mut sc = Scanner::new(message)?;
    let Event::Start { ns, local } = sc.next_event()? else {
        return None;
    };
    let version = std::str::from_utf8(ns)
        .ok()
        .and_then(SoapVersion::from_envelope_ns)?;
    if local != b"Envelope" {
        return None;
    }
    no_xsi(&sc)?;
    let env = version.envelope_ns().as_bytes();
    let mut children = 0;
    let mut body = false;
    loop {
        match sc.next_event()? {
            Event::Text(raw) if blank(raw) => {}
            Event::Start { ns, local } if ns == env => {
                no_xsi(&sc)?;
                if local == b"Header" && children == 0 {
                    skip(&mut sc)?;
                } else if local == b"Body" && !body {
                    body = true;
                    body_elements(model, &mut sc, allowed)?;
                } else {
                    return None;
                }
                children += 1;
            }
            Event::End if body => break,
            _ => return None,
        }
    }
    matches!(sc.next_event()?, Event::Done).then_some(())
}

/// The elements of a `Body` (at least one) up to its end tag.
fn body_elements(model: &Model, sc: &mut Scanner<'_>, allowed: &[(String, String)]) -> Option<()> {
    let mut count = 0;
    loop {
        match sc.next_event()? {
            Event::Text(raw) if blank(raw) => {}
            Event::Start { ns, local } => {
                if count == 0
                    && allowed
                        .binary_search_by(|(l, n)| (l.as_bytes(), n.as_bytes()).cmp(&(local, ns)))
                        .is_err()
                {
                    return None;
                }
                let decl = model.global(ns, local)?;
                element(model, sc, decl)?;
                count += 1;
            }
            Event::End if count > 0 => return Some(()),
            _ => return None,
        }
    }
}

/// See [`super::FastPath::check_element`].
pub fn element_document(model: &Model, message: &[u8]) -> Option<()> {
    let mut sc = Scanner::new(message)?;
    let Event::Start { ns, local } = sc.next_event()? else {
        return None;
    };
    let decl = model.global(ns, local)?;
    element(model, &mut sc, decl)?;
    matches!(sc.next_event()?, Event::Done).then_some(())
}
