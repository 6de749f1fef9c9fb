//! The fast path for XML the gateway writes itself (`wsdl2openapi`'s request element): the
//! writer reports each element, attribute and text as it writes them, with their values
//! before escaping, and [`WriteCheck`] checks them against the [`Model`] as
//! [`super::check`] checks a scanned message — so the written bytes need not be scanned
//! again. The values are normalized as a parser would see them (line ends, and whitespace in
//! attribute values); a character XML does not allow makes the verdict unsure, as does
//! anything the model does not cover.

use std::borrow::Cow;

use super::automaton::same;
use super::check::{child, parts, Frame};
use super::{Fast, Miss, Model};

/// Checks an element while it is written. Every call after a failure is a no-op; the verdict
/// is [`Fast::Valid`] only when the root element was completed and everything checked.
pub struct WriteCheck<'m> {
    model: &'m Model,
    stack: smallvec::SmallVec<[Frame<'m, bool>; 8]>,
    /// Why the check gave up, once it has.
    failed: Option<Miss>,
    done: bool,
}

/// True when `c` is a character XML 1.0 allows in text.
fn xml_char(c: char) -> bool {
    !matches!(c, '\u{0}'..='\u{8}' | '\u{B}' | '\u{C}' | '\u{E}'..='\u{1F}' | '\u{FFFE}' | '\u{FFFF}')
}

/// The text as a parser reports it: CR LF and a lone CR become LF (`attribute`: every
/// tab, line feed and carriage return then becomes a space). `None` for a character XML does
/// not allow.
fn as_parsed(value: &str, attribute: bool) -> Option<Cow<'_, str>> {
    // The everyday value: printable ASCII, read as it is.
    if value.bytes().all(|b| (0x20..0x7F).contains(&b)) {
        return Some(Cow::Borrowed(value));
    }
    if !value.chars().all(xml_char) {
        return None;
    }
    let special = |b: u8| b == b'\r' || (attribute && (b == b'\t' || b == b'\n'));
    if !value.bytes().any(special) {
        return Some(Cow::Borrowed(value));
    }
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars().peekable();
    while let Some(c) = chars.next() {
        let c = if c == '\r' {
            if chars.peek() == Some(&'\n') {
                chars.next();
            }
            '\n'
        } else {
            c
        };
        out.push(if attribute && matches!(c, '\t' | '\n') {
            ' '
        } else {
            c
        });
    }
    Some(Cow::Owned(out))
}

impl<'m> WriteCheck<'m> {
    /// A check of one element of `model`, from its start.
    pub(super) fn new(model: &'m Model) -> WriteCheck<'m> {
        WriteCheck {
            model,
            stack: smallvec::SmallVec::new(),
            failed: None,
            done: false,
        }
    }

    /// Gives up (the writer met a value it cannot report): the verdict will be unsure.
    pub fn fail(&mut self) {
        self.failed.get_or_insert(Miss::Value);
    }

    /// An element `{ns}local` starts, with `xsi:nil="true"` when `nil`, and its unprefixed
    /// attributes (name, value before escaping).
    pub fn start(&mut self, ns: &str, local: &str, nil: bool, attrs: &[(&str, Cow<'_, str>)]) {
        if self.failed.is_some() {
            return;
        }
        if let Err(miss) = self.start_checked(ns.as_bytes(), local.as_bytes(), nil, attrs) {
            self.failed = Some(miss);
        }
    }

    fn start_checked(
        &mut self,
        ns: &[u8],
        local: &[u8],
        nil: bool,
        attrs: &[(&str, Cow<'_, str>)],
    ) -> Result<(), Miss> {
        let model = self.model;
        let decl = match self.stack.last_mut() {
            None if self.done => return Err(Miss::Structure), // a second root
            None => model.global(ns, local).ok_or(Miss::NotCompiled)?,
            Some(frame) => child(frame, ns, local).ok_or(Miss::Structure)?,
        };
        let (d, decls, frame) = parts(model, decl, false).ok_or(Miss::NotCompiled)?;
        if nil && !d.nillable {
            return Err(Miss::Attribute);
        }
        let mut required = decls.iter().filter(|a| a.required).count();
        for (name, value) in attrs {
            // Unprefixed attributes have no namespace.
            let decl = decls
                .iter()
                .find(|x| same(&x.local, name.as_bytes()) && x.ns.is_empty())
                .ok_or(Miss::Attribute)?;
            let simple = model.simples.get(decl.simple).ok_or(Miss::NotCompiled)?;
            if !simple.accepts(&as_parsed(value, true).ok_or(Miss::Value)?) {
                return Err(Miss::Value);
            }
            required = required
                .checked_sub(usize::from(decl.required))
                .ok_or(Miss::Attribute)?;
        }
        if required > 0 {
            return Err(Miss::Attribute);
        }
        self.stack.push(if nil { Frame::Empty } else { frame });
        Ok(())
    }

    /// The text content of the element being written (its value before escaping); at most
    /// once per element.
    pub fn text(&mut self, value: &str) {
        if self.failed.is_some() {
            return;
        }
        let failed = match self.stack.last_mut() {
            Some(Frame::Simple { simple, text }) if !*text => {
                *text = true;
                (!as_parsed(value, false).is_some_and(|v| simple.accepts(&v)))
                    .then_some(Miss::Value)
            }
            // Whitespace between elements is not written; anything else is not expected.
            _ => Some(Miss::Text),
        };
        self.failed = failed;
    }

    /// The element being written ends.
    pub fn end(&mut self) {
        if self.failed.is_some() {
            return;
        }
        let (ok, miss) = match self.stack.pop() {
            Some(Frame::Elements { dfa, state }) => (dfa.accepts(state), Miss::Structure),
            Some(Frame::All { group, seen }) => (group.complete(seen), Miss::Structure),
            // No text at all is the empty string.
            Some(Frame::Simple { simple, text }) => (text || simple.accepts(""), Miss::Value),
            Some(Frame::Empty) => (true, Miss::Structure),
            None => (false, Miss::Structure),
        };
        if !ok {
            self.failed = Some(miss);
        }
        if self.stack.is_empty() {
            self.done = true;
        }
    }

    /// The verdict on what was written.
    pub fn verdict(&self) -> Fast {
        Fast::of(match self.failed {
            Some(miss) => Err(miss),
            None if self.done && self.stack.is_empty() => Ok(()),
            None => Err(Miss::Structure),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::as_parsed;

    #[test]
    fn values_read_as_a_parser_reads_them() {
        assert_eq!(as_parsed("plain text", false).unwrap(), "plain text");
        assert_eq!(as_parsed("a\r\nb\rc\nd", false).unwrap(), "a\nb\nc\nd");
        assert_eq!(as_parsed("a\r\nb\tc\nd", true).unwrap(), "a b c d");
        assert_eq!(as_parsed("Grüße\t", false).unwrap(), "Grüße\t");
        assert!(as_parsed("a\u{1}", false).is_none());
        assert!(as_parsed("\u{FFFE}", true).is_none());
        assert_eq!(as_parsed("\u{7F}", false).unwrap(), "\u{7F}");
    }
}
