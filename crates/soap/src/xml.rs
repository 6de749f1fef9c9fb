//! A small namespace-aware XML tree for load-time work (WSDL and XSD documents): built with
//! quick-xml, never used on the request path. Entity references other than the five predefined
//! ones and character references are errors; a DTD is skipped, never interpreted.

use std::collections::BTreeMap;
use std::sync::Arc;

use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;

/// The namespace of `xml:` attributes, bound without declaration.
pub const XML_NS: &str = "http://www.w3.org/XML/1998/namespace";

/// In-scope namespace bindings: prefix (`""` for the default namespace) → URI.
pub type Scope = Arc<BTreeMap<String, String>>;

/// An element with its resolved name, attributes, namespace scope and children.
#[derive(Debug, Clone)]
pub struct Element {
    /// The prefix as written (`""` when none).
    pub prefix: String,
    /// The local name.
    pub local: String,
    /// The namespace URI (`""` when none).
    pub ns: String,
    /// Attributes other than namespace declarations: name as written → unescaped value.
    pub attrs: Vec<(String, String)>,
    /// Namespace declarations written on this element: prefix (`""` = default) → URI.
    pub decls: Vec<(String, String)>,
    /// Every binding in scope at this element (its own declarations included).
    pub scope: Scope,
    /// Child nodes in document order.
    pub children: Vec<Node>,
}

/// A child of an element.
#[derive(Debug, Clone)]
pub enum Node {
    /// An element.
    Element(Element),
    /// Character data (text, resolved references and CDATA).
    Text(String),
}

impl Element {
    /// The value of the unprefixed attribute `name`.
    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The child elements.
    pub fn elements(&self) -> impl Iterator<Item = &Element> {
        self.children.iter().filter_map(|n| match n {
            Node::Element(e) => Some(e),
            Node::Text(_) => None,
        })
    }

    /// The child elements named `{ns}local`.
    pub fn elements_named<'a>(
        &'a self,
        ns: &'a str,
        local: &'a str,
    ) -> impl Iterator<Item = &'a Element> + 'a {
        self.elements()
            .filter(move |e| e.ns == ns && e.local == local)
    }

    /// The first child element named `{ns}local`.
    pub fn element(&self, ns: &str, local: &str) -> Option<&Element> {
        self.elements().find(|e| e.ns == ns && e.local == local)
    }

    /// The first child element with local name `local` in any of `namespaces`.
    pub fn element_in(&self, namespaces: &[&str], local: &str) -> Option<&Element> {
        self.elements()
            .find(|e| e.local == local && namespaces.contains(&e.ns.as_str()))
    }

    /// True when the element is `{ns}local`.
    pub fn is(&self, ns: &str, local: &str) -> bool {
        self.ns == ns && self.local == local
    }

    /// The concatenated text of the element's direct text children.
    pub fn text(&self) -> String {
        let mut s = String::new();
        for c in &self.children {
            if let Node::Text(t) = c {
                s.push_str(t);
            }
        }
        s
    }

    /// Resolves a QName written in an attribute value (`tns:City`) against this element's
    /// scope: `(namespace, local)`. An unprefixed name takes the default namespace.
    pub fn resolve_qname(&self, qname: &str) -> Result<(String, String), String> {
        let qname = qname.trim();
        let (prefix, local) = qname.split_once(':').unwrap_or(("", qname));
        if prefix == "xml" {
            return Ok((XML_NS.to_owned(), local.to_owned()));
        }
        match self.scope.get(prefix) {
            Some(ns) => Ok((ns.clone(), local.to_owned())),
            None if prefix.is_empty() => Ok((String::new(), local.to_owned())),
            None => Err(format!(
                "`{qname}`: the prefix `{prefix}` is not bound to a namespace"
            )),
        }
    }

    /// Serializes the element as a standalone document fragment: every binding in scope is
    /// declared on it, so the fragment means the same outside its parent.
    pub fn to_standalone_xml(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, true);
        out
    }

    fn write(&self, out: &mut String, root: bool) {
        let name = self.qualified_name();
        out.push('<');
        out.push_str(&name);
        let decls: Vec<(&String, &String)> = if root {
            self.scope.iter().collect()
        } else {
            self.decls.iter().map(|(k, v)| (k, v)).collect()
        };
        for (p, uri) in decls {
            if p.is_empty() {
                out.push_str(" xmlns=\"");
            } else {
                out.push_str(" xmlns:");
                out.push_str(p);
                out.push_str("=\"");
            }
            escape_into(out, uri, true);
            out.push('"');
        }
        for (k, v) in &self.attrs {
            out.push(' ');
            out.push_str(k);
            out.push_str("=\"");
            escape_into(out, v, true);
            out.push('"');
        }
        if self.children.is_empty() {
            out.push_str("/>");
            return;
        }
        out.push('>');
        for c in &self.children {
            match c {
                Node::Element(e) => e.write(out, false),
                Node::Text(t) => escape_into(out, t, false),
            }
        }
        out.push_str("</");
        out.push_str(&name);
        out.push('>');
    }

    /// The name as written (`prefix:local` or `local`).
    pub fn qualified_name(&self) -> String {
        if self.prefix.is_empty() {
            self.local.clone()
        } else {
            format!("{}:{}", self.prefix, self.local)
        }
    }

    /// Sets an unprefixed attribute (replacing an existing value).
    pub fn set_attr(&mut self, name: &str, value: &str) {
        match self.attrs.iter_mut().find(|(k, _)| k == name) {
            Some((_, v)) => *v = value.to_owned(),
            None => self.attrs.push((name.to_owned(), value.to_owned())),
        }
    }

    /// Visits this element and all elements below it, depth first, mutably.
    pub fn walk_mut(&mut self, f: &mut dyn FnMut(&mut Element)) {
        f(self);
        for c in &mut self.children {
            if let Node::Element(e) = c {
                e.walk_mut(f);
            }
        }
    }
}

/// Escapes text (`attr`: also quotes) for XML output.
pub fn escape_into(out: &mut String, s: &str, attr: bool) {
    if !s
        .bytes()
        .any(|b| matches!(b, b'&' | b'<' | b'>' | b'"' | b'\r' | b'\n' | b'\t'))
    {
        out.push_str(s);
        return;
    }
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' if attr => out.push_str("&quot;"),
            '\r' if attr => out.push_str("&#13;"),
            '\n' if attr => out.push_str("&#10;"),
            '\t' if attr => out.push_str("&#9;"),
            c => out.push(c),
        }
    }
}

/// Escapes text for XML output into a new string.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    escape_into(&mut out, s, true);
    out
}

/// Resolves one of the five predefined entities or a character reference.
pub fn resolve_reference(name: &str) -> Option<char> {
    match name {
        "amp" => Some('&'),
        "lt" => Some('<'),
        "gt" => Some('>'),
        "quot" => Some('"'),
        "apos" => Some('\''),
        _ => {
            let num = name.strip_prefix('#')?;
            let code = match num.strip_prefix('x') {
                Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                None => num.parse::<u32>().ok()?,
            };
            char::from_u32(code).filter(|c| *c != '\0')
        }
    }
}

/// Parses a document into its root element.
pub fn parse(text: &[u8]) -> Result<Element, String> {
    let mut reader = Reader::from_reader(text);
    reader.config_mut().enable_all_checks(true);
    let mut stack: Vec<Element> = Vec::new();
    let mut root: Option<Element> = None;
    let err = |r: &Reader<&[u8]>, m: String| format!("at byte {}: {m}", r.buffer_position());
    loop {
        let ev = reader
            .read_event()
            .map_err(|e| err(&reader, e.to_string()))?;
        match ev {
            Event::Start(s) => {
                let parent = stack.last().map(|p| &p.scope);
                let el = open(&s, parent).map_err(|m| err(&reader, m))?;
                stack.push(el);
            }
            Event::Empty(s) => {
                let parent = stack.last().map(|p| &p.scope);
                let el = open(&s, parent).map_err(|m| err(&reader, m))?;
                close(el, &mut stack, &mut root).map_err(|m| err(&reader, m))?;
            }
            Event::End(_) => match stack.pop() {
                Some(el) => close(el, &mut stack, &mut root).map_err(|m| err(&reader, m))?,
                None => return Err(err(&reader, "unexpected end tag".into())),
            },
            Event::Text(t) => {
                let s = t.decode().map_err(|e| err(&reader, e.to_string()))?;
                push_text(&mut stack, &s);
            }
            Event::CData(t) => {
                let s = t.decode().map_err(|e| err(&reader, e.to_string()))?;
                push_text(&mut stack, &s);
            }
            Event::GeneralRef(r) => {
                let name = r.decode().map_err(|e| err(&reader, e.to_string()))?;
                match resolve_reference(&name) {
                    Some(c) => push_text(&mut stack, c.encode_utf8(&mut [0; 4])),
                    None => {
                        return Err(err(
                            &reader,
                            format!("entity reference `&{name};` is not allowed"),
                        ))
                    }
                }
            }
            Event::Eof => break,
            Event::Comment(_) | Event::Decl(_) | Event::PI(_) | Event::DocType(_) => {}
        }
    }
    if !stack.is_empty() {
        return Err("unexpected end of document: unclosed elements".into());
    }
    root.ok_or_else(|| "the document has no root element".into())
}

fn push_text(stack: &mut [Element], s: &str) {
    if let Some(top) = stack.last_mut() {
        if let Some(Node::Text(t)) = top.children.last_mut() {
            t.push_str(s);
        } else {
            top.children.push(Node::Text(s.to_owned()));
        }
    }
}

fn close(el: Element, stack: &mut [Element], root: &mut Option<Element>) -> Result<(), String> {
    match stack.last_mut() {
        Some(parent) => parent.children.push(Node::Element(el)),
        None => {
            if root.is_some() {
                return Err("more than one root element".into());
            }
            *root = Some(el);
        }
    }
    Ok(())
}

fn open(s: &BytesStart<'_>, parent: Option<&Scope>) -> Result<Element, String> {
    let mut attrs = Vec::new();
    let mut decls = Vec::new();
    for a in s.attributes() {
        let a = a.map_err(|e| e.to_string())?;
        let key = std::str::from_utf8(a.key.as_ref())
            .map_err(|e| e.to_string())?
            .to_owned();
        let value = a.unescape_value().map_err(|e| e.to_string())?.into_owned();
        if key == "xmlns" {
            decls.push((String::new(), value));
        } else if let Some(p) = key.strip_prefix("xmlns:") {
            decls.push((p.to_owned(), value));
        } else {
            attrs.push((key, value));
        }
    }
    let scope = match (parent, decls.is_empty()) {
        (Some(p), true) => Arc::clone(p),
        (p, _) => {
            let mut m = p.map(|p| (**p).clone()).unwrap_or_default();
            for (k, v) in &decls {
                if v.is_empty() && k.is_empty() {
                    m.remove("");
                } else {
                    m.insert(k.clone(), v.clone());
                }
            }
            Arc::new(m)
        }
    };
    let name = std::str::from_utf8(s.name().as_ref())
        .map_err(|e| e.to_string())?
        .to_owned();
    let (prefix, local) = match name.split_once(':') {
        Some((p, l)) => (p.to_owned(), l.to_owned()),
        None => (String::new(), name),
    };
    let ns = if prefix == "xml" {
        XML_NS.to_owned()
    } else {
        match scope.get(&prefix) {
            Some(ns) => ns.clone(),
            None if prefix.is_empty() => String::new(),
            None => return Err(format!("the prefix `{prefix}` is not bound to a namespace")),
        }
    };
    Ok(Element {
        prefix,
        local,
        ns,
        attrs,
        decls,
        scope,
        children: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn namespaces_and_qnames_resolve() {
        let doc =
            br#"<a:root xmlns:a="urn:a" xmlns="urn:d"><child t="a:x">1 &amp; 2</child></a:root>"#;
        let root = parse(doc).unwrap();
        assert!(root.is("urn:a", "root"));
        let child = root.element("urn:d", "child").unwrap();
        assert_eq!(child.text(), "1 & 2");
        assert_eq!(
            child.resolve_qname("a:x").unwrap(),
            ("urn:a".into(), "x".into())
        );
        assert!(child.resolve_qname("zz:x").is_err());
        let again = parse(child.to_standalone_xml().as_bytes()).unwrap();
        assert!(again.is("urn:d", "child"));
        assert_eq!(again.resolve_qname("a:x").unwrap().0, "urn:a");
    }

    #[test]
    fn entities_are_errors() {
        let doc = b"<!DOCTYPE r [<!ENTITY e \"x\">]><r>&e;</r>";
        assert!(parse(doc).unwrap_err().contains("&e;"));
        assert!(parse(b"<r><a></r>").is_err());
        assert!(parse(b"<r/><r/>").is_err());
        assert!(parse(b"").is_err());
    }

    proptest! {
        #[test]
        fn never_panics(input in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = parse(&input);
        }

        #[test]
        fn never_panics_on_xmlish(input in "[<>/a-c:=\"' &;#x0-9!\\[\\]-]{0,200}") {
            let _ = parse(input.as_bytes());
        }
    }
}
