//! Load time: the global element declarations of a WSDL's schema documents compiled to the
//! fast path's [`Model`]. Every construct is whitelisted: an attribute or child the compiler
//! does not know, a type outside the supported subset or a reference it cannot resolve makes
//! the global element that needs it "not compiled" (its messages go to libxml2), never a load
//! error.

use std::collections::HashMap;

use super::automaton::{self, Particle};
use super::lexical;
use super::pattern;
use super::simple::{Bound, Builtin, Simple, WhiteSpace};
use super::{AllGroup, AllItem, AttrDecl, Complex, Content, ElemDecl, Global, Model, TypeRef};
pub use crate::names::XSI_NS;
use crate::names::{QName, XSD_NS};
use crate::xml::Element;

/// What a declaration needs from the schema document it is in.
#[derive(Debug, Clone, Copy)]
struct Doc<'a> {
    tns: &'a str,
    elements_qualified: bool,
    attributes_qualified: bool,
}

/// A global component and the document it is in (`None`: declared twice).
type Comp<'a> = Option<(&'a Element, Doc<'a>)>;

#[derive(Default)]
struct Index<'a> {
    elements: HashMap<QName, Comp<'a>>,
    complex_types: HashMap<QName, Comp<'a>>,
    simple_types: HashMap<QName, Comp<'a>>,
    attributes: HashMap<QName, Comp<'a>>,
    groups: HashMap<QName, Comp<'a>>,
    attribute_groups: HashMap<QName, Comp<'a>>,
}

type R<T> = Result<T, String>;

fn unsupported<T>(what: impl std::fmt::Display) -> R<T> {
    Err(what.to_string())
}

/// Deepest nesting of references while compiling one declaration.
const MAX_DEPTH: usize = 64;

/// Compiles every global element declaration of `schemas` that is in the supported subset;
/// returns the model and, for each global element left out, why.
pub fn compile(schemas: &[Element]) -> (Model, Vec<(QName, String)>) {
    let mut model = Model::default();
    let mut skipped = Vec::new();
    let index = match build_index(schemas) {
        Ok(i) => i,
        Err(why) => {
            skipped.push(((String::new(), String::new()), why));
            return (model, skipped);
        }
    };
    let mut names: Vec<&QName> = index.elements.keys().collect();
    names.sort();
    for name in names {
        let mut c = Compiler {
            index: &index,
            model: &mut model,
            types: HashMap::new(),
            elements: HashMap::new(),
            depth: 0,
            in_loop: false,
        };
        match c.global_element(name) {
            Ok(decl) => model.globals.push(Global {
                local: name.1.as_bytes().into(),
                ns: name.0.as_bytes().into(),
                decl,
            }),
            Err(why) => skipped.push((name.clone(), why)),
        }
    }
    model
        .globals
        .sort_by(|a, b| (&a.local, &a.ns).cmp(&(&b.local, &b.ns)));
    (model, skipped)
}

fn flag(e: &Element, name: &str) -> R<bool> {
    match e.attr(name).map(str::trim) {
        None | Some("false" | "0") => Ok(false),
        Some("true" | "1") => Ok(true),
        Some(v) => unsupported(format!("{name}=\"{v}\"")),
    }
}

/// Fails on an unprefixed attribute of `e` that is not in `known`.
fn only_attrs(e: &Element, known: &[&str]) -> R<()> {
    for (k, _) in &e.attrs {
        if !k.contains(':') && !known.contains(&k.as_str()) {
            return unsupported(format!("attribute `{k}` of xsd:{}", e.local));
        }
    }
    Ok(())
}

/// The XSD children of `e` other than annotations; fails on a child in another namespace.
fn xsd_children(e: &Element) -> R<Vec<&Element>> {
    let mut out = Vec::new();
    for c in e.elements() {
        if c.ns != XSD_NS {
            return unsupported(format!("element {{{}}}{} in a schema", c.ns, c.local));
        }
        if c.local != "annotation" {
            out.push(c);
        }
    }
    Ok(out)
}

fn build_index(schemas: &[Element]) -> R<Index<'_>> {
    let mut index = Index::default();
    let any_include = schemas
        .iter()
        .any(|s| s.elements().any(|c| c.ns == XSD_NS && c.local == "include"));
    for s in schemas {
        if s.ns != XSD_NS || s.local != "schema" {
            return unsupported("a schema document that is not xsd:schema");
        }
        let tns = s.attr("targetNamespace");
        if tns.is_none() && any_include {
            return unsupported("a schema without target namespace next to xsd:include");
        }
        let form = |name: &str| match s.attr(name).map(str::trim) {
            None | Some("unqualified") => Ok(false),
            Some("qualified") => Ok(true),
            Some(v) => unsupported(format!("{name}=\"{v}\"")),
        };
        let doc = Doc {
            tns: tns.unwrap_or(""),
            elements_qualified: form("elementFormDefault")?,
            attributes_qualified: form("attributeFormDefault")?,
        };
        for c in s.elements() {
            if c.ns != XSD_NS {
                continue;
            }
            let map = match c.local.as_str() {
                "element" => &mut index.elements,
                "complexType" => &mut index.complex_types,
                "simpleType" => &mut index.simple_types,
                "attribute" => &mut index.attributes,
                "group" => &mut index.groups,
                "attributeGroup" => &mut index.attribute_groups,
                "redefine" | "override" => return unsupported("xsd:redefine"),
                _ => continue,
            };
            let Some(name) = c.attr("name") else { continue };
            let key = (doc.tns.to_owned(), name.to_owned());
            map.entry(key)
                .and_modify(|e| *e = None)
                .or_insert(Some((c, doc)));
        }
    }
    // libxml2 imports a namespace once: of two documents of one namespace it may see only
    // one, so the components of such namespaces are left to it.
    let mut docs: HashMap<&str, usize> = HashMap::new();
    for s in schemas {
        *docs
            .entry(s.attr("targetNamespace").unwrap_or(""))
            .or_default() += 1;
    }
    for map in [
        &mut index.elements,
        &mut index.complex_types,
        &mut index.simple_types,
        &mut index.attributes,
        &mut index.groups,
        &mut index.attribute_groups,
    ] {
        for (q, c) in map.iter_mut() {
            if docs.get(q.0.as_str()).is_some_and(|n| *n > 1) {
                *c = None;
            }
        }
    }
    Ok(index)
}

fn lookup<'a>(map: &HashMap<QName, Comp<'a>>, q: &QName, what: &str) -> R<(&'a Element, Doc<'a>)> {
    match map.get(q) {
        Some(Some(c)) => Ok(*c),
        Some(None) => unsupported(format!("{what} {{{}}}{} is declared twice", q.0, q.1)),
        None => unsupported(format!("unknown {what} {{{}}}{}", q.0, q.1)),
    }
}

fn occurs(e: &Element) -> R<(u32, Option<u32>)> {
    let num = |v: &str| -> R<u32> {
        v.trim()
            .parse::<u32>()
            .ok()
            .filter(|n| *n <= 10_000)
            .map_or_else(|| unsupported(format!("occurrence `{v}`")), Ok)
    };
    let min = e.attr("minOccurs").map_or(Ok(1), num)?;
    let max = match e.attr("maxOccurs").map(str::trim) {
        None => Some(1),
        Some("unbounded") => None,
        Some(v) => Some(num(v)?),
    };
    if max.is_some_and(|m| m < min) {
        return unsupported("maxOccurs below minOccurs");
    }
    Ok((min, max))
}

fn repeat(p: Particle, (min, max): (u32, Option<u32>)) -> Particle {
    if (min, max) == (1, Some(1)) {
        p
    } else {
        Particle::Repeat(Box::new(p), min, max)
    }
}

struct Compiler<'i, 'a> {
    index: &'i Index<'a>,
    model: &'i mut Model,
    /// Named types compiled for the current global element.
    types: HashMap<QName, TypeRef>,
    /// Global elements compiled for the current global element (for recursion).
    elements: HashMap<QName, usize>,
    depth: usize,
    /// Inside a repeated group: libxml2 counts repetitions with counters that it resets
    /// per iteration; only uncounted occurrences (optional, any number) are taken there.
    in_loop: bool,
}

/// True for an occurrence range that needs a counter (`minOccurs` > 1 or a bounded
/// `maxOccurs` > 1).
fn counted((min, max): (u32, Option<u32>)) -> bool {
    min > 1 || max.is_some_and(|m| m > 1)
}

impl<'a> Compiler<'_, 'a> {
    fn enter(&mut self) -> R<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return unsupported("references nest too deep");
        }
        Ok(())
    }

    fn global_element(&mut self, q: &QName) -> R<usize> {
        if let Some(&id) = self.elements.get(q) {
            return Ok(id);
        }
        let (e, doc) = lookup(&self.index.elements, q, "element")?;
        only_attrs(
            e,
            &[
                "name", "type", "nillable", "id", "block", "final", "abstract",
            ],
        )?;
        if flag(e, "abstract")? {
            return unsupported("an abstract element");
        }
        let id = self.model.elems.len();
        self.model.elems.push(ElemDecl {
            nillable: flag(e, "nillable")?,
            typ: TypeRef::Complex(usize::MAX),
        });
        self.elements.insert(q.clone(), id);
        self.enter()?;
        let typ = self.element_type(e, doc)?;
        self.depth -= 1;
        self.model.elems[id].typ = typ;
        Ok(id)
    }

    /// The type of an element declaration (`type=` or an anonymous type): its content is a
    /// model of its own, outside any loop of the model the element is in.
    fn element_type(&mut self, e: &Element, doc: Doc<'a>) -> R<TypeRef> {
        let outer = std::mem::replace(&mut self.in_loop, false);
        let t = self.element_type_of(e, doc);
        self.in_loop = outer;
        t
    }

    fn element_type_of(&mut self, e: &Element, doc: Doc<'a>) -> R<TypeRef> {
        let children = xsd_children(e)?;
        match (e.attr("type"), children.as_slice()) {
            (Some(t), []) => {
                let q = e.resolve_qname(t)?;
                self.named_type(&q)
            }
            (None, [c]) if c.local == "complexType" => {
                self.complex_type(c, doc).map(TypeRef::Complex)
            }
            (None, [c]) if c.local == "simpleType" => {
                let s = self.simple_type(c, 0)?;
                Ok(TypeRef::Simple(self.add_simple(s)))
            }
            (None, []) => unsupported("an element of xsd:anyType"),
            _ => unsupported("an element with identity constraints or odd children"),
        }
    }

    fn add_simple(&mut self, s: Simple) -> usize {
        self.model.simples.push(s);
        self.model.simples.len() - 1
    }

    fn named_type(&mut self, q: &QName) -> R<TypeRef> {
        if let Some(t) = self.types.get(q) {
            return Ok(*t);
        }
        if q.0 == XSD_NS {
            let b = Builtin::named(&q.1)
                .map_or_else(|| unsupported(format!("the built-in type xsd:{}", q.1)), Ok)?;
            let t = TypeRef::Simple(self.add_simple(Simple::builtin(b)));
            self.types.insert(q.clone(), t);
            return Ok(t);
        }
        if self.index.complex_types.contains_key(q) {
            let (c, doc) = lookup(&self.index.complex_types, q, "complex type")?;
            // Reserve the id first: recursive types refer to themselves.
            let id = self.model.complexes.len();
            self.model.complexes.push(Complex {
                attrs: Vec::new(),
                content: Content::Empty,
            });
            self.types.insert(q.clone(), TypeRef::Complex(id));
            self.enter()?;
            let compiled = self.complex_body(c, doc)?;
            self.depth -= 1;
            self.model.complexes[id] = compiled;
            return Ok(TypeRef::Complex(id));
        }
        let s = self.named_simple(q, 0)?;
        let t = TypeRef::Simple(self.add_simple(s));
        self.types.insert(q.clone(), t);
        Ok(t)
    }

    fn complex_type(&mut self, c: &Element, doc: Doc<'a>) -> R<usize> {
        let compiled = self.complex_body(c, doc)?;
        self.model.complexes.push(compiled);
        Ok(self.model.complexes.len() - 1)
    }

    fn complex_body(&mut self, c: &Element, doc: Doc<'a>) -> R<Complex> {
        only_attrs(c, &["name", "mixed", "abstract", "block", "final", "id"])?;
        if flag(c, "mixed")? || flag(c, "abstract")? {
            return unsupported("mixed or abstract complex type");
        }
        let children = xsd_children(c)?;
        let mut attrs = Vec::new();
        let mut content = Content::Empty;
        for (i, child) in children.iter().enumerate() {
            match child.local.as_str() {
                "sequence" | "choice" | "group" if i == 0 => {
                    let p = self.particle(child, doc)?;
                    let dfa = automaton::compile(&p)?;
                    content = if dfa.is_empty_only() {
                        Content::Empty
                    } else {
                        Content::Elements(dfa)
                    };
                }
                "all" if i == 0 => content = self.all(child, doc)?,
                "simpleContent" if i == 0 => {
                    let (simple, a) = self.simple_content(child, doc)?;
                    content = Content::Simple(simple);
                    attrs = a;
                }
                "attribute" | "attributeGroup" => self.attribute_use(child, doc, &mut attrs)?,
                other => return unsupported(format!("xsd:{other} in a complex type")),
            }
        }
        Ok(Complex { attrs, content })
    }

    /// `sequence`, `choice`, `element` or `group ref` as a particle.
    fn particle(&mut self, p: &Element, doc: Doc<'a>) -> R<Particle> {
        match p.local.as_str() {
            "element" => self.local_element(p, doc),
            "sequence" | "choice" => {
                only_attrs(p, &["minOccurs", "maxOccurs", "id"])?;
                let occ = occurs(p)?;
                // libxml2 counts repeated groups with its own counters; only the plain forms
                // (once, optional, any number) are taken.
                if counted(occ) {
                    return unsupported("a group with a counted repetition");
                }
                let outer = self.in_loop;
                self.in_loop |= occ.1.is_none();
                let mut parts = Vec::new();
                for c in xsd_children(p)? {
                    match c.local.as_str() {
                        "element" | "sequence" | "choice" | "group" => {
                            parts.push(self.particle(c, doc)?)
                        }
                        other => return unsupported(format!("xsd:{other} in a model group")),
                    }
                }
                self.in_loop = outer;
                let group = if p.local == "sequence" {
                    Particle::Sequence(parts)
                } else {
                    Particle::Choice(parts)
                };
                Ok(repeat(group, occ))
            }
            "group" => {
                only_attrs(p, &["ref", "minOccurs", "maxOccurs", "id"])?;
                let occ = occurs(p)?;
                if counted(occ) {
                    return unsupported("a group with a counted repetition");
                }
                let r = p
                    .attr("ref")
                    .map_or_else(|| unsupported("a group without ref"), Ok)?;
                let q = p.resolve_qname(r)?;
                let (g, gdoc) = lookup(&self.index.groups, &q, "group")?;
                only_attrs(g, &["name", "id"])?;
                let inner = xsd_children(g)?;
                let [body] = inner.as_slice() else {
                    return unsupported("a group that is not one sequence or choice");
                };
                if !matches!(body.local.as_str(), "sequence" | "choice")
                    || body.attr("minOccurs").is_some()
                    || body.attr("maxOccurs").is_some()
                {
                    return unsupported("a group that is not one plain sequence or choice");
                }
                self.enter()?;
                let outer = self.in_loop;
                self.in_loop |= occ.1.is_none();
                let inner = self.particle(body, gdoc);
                self.in_loop = outer;
                self.depth -= 1;
                Ok(repeat(inner?, occ))
            }
            other => unsupported(format!("xsd:{other} as a particle")),
        }
    }

    fn local_element(&mut self, e: &Element, doc: Doc<'a>) -> R<Particle> {
        let occ = occurs(e)?;
        if self.in_loop && counted(occ) {
            return unsupported("a counted element inside a repeated group");
        }
        if let Some(r) = e.attr("ref") {
            only_attrs(e, &["ref", "minOccurs", "maxOccurs", "id"])?;
            if !xsd_children(e)?.is_empty() {
                return unsupported("an element ref with children");
            }
            let q = e.resolve_qname(r)?;
            self.enter()?;
            let decl = self.global_element(&q)?;
            self.depth -= 1;
            return Ok(repeat(
                Particle::Element {
                    ns: q.0,
                    local: q.1,
                    decl,
                },
                occ,
            ));
        }
        only_attrs(
            e,
            &[
                "name",
                "type",
                "minOccurs",
                "maxOccurs",
                "nillable",
                "form",
                "id",
                "block",
            ],
        )?;
        let name = e
            .attr("name")
            .map_or_else(|| unsupported("an element without name"), Ok)?;
        let qualified = match e.attr("form").map(str::trim) {
            None => doc.elements_qualified,
            Some("qualified") => true,
            Some("unqualified") => false,
            Some(v) => return unsupported(format!("form=\"{v}\"")),
        };
        let id = self.model.elems.len();
        self.model.elems.push(ElemDecl {
            nillable: flag(e, "nillable")?,
            typ: TypeRef::Complex(usize::MAX),
        });
        self.enter()?;
        let typ = self.element_type(e, doc)?;
        self.depth -= 1;
        self.model.elems[id].typ = typ;
        Ok(repeat(
            Particle::Element {
                ns: if qualified { doc.tns } else { "" }.to_owned(),
                local: name.to_owned(),
                decl: id,
            },
            occ,
        ))
    }

    fn all(&mut self, a: &Element, doc: Doc<'a>) -> R<Content> {
        only_attrs(a, &["minOccurs", "maxOccurs", "id"])?;
        let (min, max) = occurs(a)?;
        if min > 1 || max != Some(1) {
            return unsupported("xsd:all with odd occurrences");
        }
        let mut items = Vec::new();
        for c in xsd_children(a)? {
            if c.local != "element" {
                return unsupported("xsd:all with a non-element child");
            }
            let (emin, emax) = occurs(c)?;
            if emin > 1 || emax != Some(1) {
                return unsupported("an element of xsd:all with odd occurrences");
            }
            let Particle::Element { ns, local, decl } =
                self.local_element(c, doc).map(|p| match p {
                    Particle::Repeat(inner, _, _) => *inner,
                    p => p,
                })?
            else {
                return unsupported("xsd:all");
            };
            if items
                .iter()
                .any(|i: &AllItem| *i.ns == *ns.as_bytes() && *i.local == *local.as_bytes())
            {
                return unsupported("a name twice in xsd:all");
            }
            items.push(AllItem {
                ns: ns.as_bytes().into(),
                local: local.as_bytes().into(),
                decl,
                required: emin == 1,
            });
        }
        if items.len() > 64 {
            return unsupported("xsd:all with more than 64 elements");
        }
        if items.is_empty() {
            return Ok(Content::Empty);
        }
        Ok(Content::All(AllGroup {
            items,
            optional: min == 0,
        }))
    }

    fn simple_content(&mut self, sc: &Element, doc: Doc<'a>) -> R<(usize, Vec<AttrDecl>)> {
        only_attrs(sc, &["id"])?;
        let children = xsd_children(sc)?;
        let [ext] = children.as_slice() else {
            return unsupported("odd xsd:simpleContent");
        };
        if ext.local != "extension" {
            return unsupported("xsd:simpleContent with a restriction");
        }
        only_attrs(ext, &["base", "id"])?;
        let base = ext
            .attr("base")
            .map_or_else(|| unsupported("an extension without base"), Ok)?;
        let q = ext.resolve_qname(base)?;
        if self.index.complex_types.contains_key(&q) {
            return unsupported("simple content extending a complex type");
        }
        let simple = if q.0 == XSD_NS {
            Simple::builtin(
                Builtin::named(&q.1).map_or_else(|| unsupported(format!("xsd:{}", q.1)), Ok)?,
            )
        } else {
            self.named_simple(&q, 0)?
        };
        let id = self.add_simple(simple);
        let mut attrs = Vec::new();
        for c in xsd_children(ext)? {
            match c.local.as_str() {
                "attribute" | "attributeGroup" => self.attribute_use(c, doc, &mut attrs)?,
                other => return unsupported(format!("xsd:{other} in an extension")),
            }
        }
        Ok((id, attrs))
    }

    /// Adds the attributes of an `attribute` or `attributeGroup ref` to `attrs`.
    fn attribute_use(&mut self, a: &Element, doc: Doc<'a>, attrs: &mut Vec<AttrDecl>) -> R<()> {
        if a.local == "attributeGroup" {
            only_attrs(a, &["ref", "id"])?;
            let r = a
                .attr("ref")
                .map_or_else(|| unsupported("an attributeGroup without ref"), Ok)?;
            let q = a.resolve_qname(r)?;
            let (g, gdoc) = lookup(&self.index.attribute_groups, &q, "attribute group")?;
            only_attrs(g, &["name", "id"])?;
            self.enter()?;
            for c in xsd_children(g)? {
                match c.local.as_str() {
                    "attribute" | "attributeGroup" => self.attribute_use(c, gdoc, attrs)?,
                    other => return unsupported(format!("xsd:{other} in an attribute group")),
                }
            }
            self.depth -= 1;
            return Ok(());
        }
        let required = match a.attr("use").map(str::trim) {
            None | Some("optional") => false,
            Some("required") => true,
            // Not declared: its presence is left to libxml2.
            Some("prohibited") => return Ok(()),
            Some(v) => return unsupported(format!("use=\"{v}\"")),
        };
        if a.attr("fixed").is_some() {
            return unsupported("a fixed attribute value");
        }
        let (ns, local, decl) = if let Some(r) = a.attr("ref") {
            only_attrs(a, &["ref", "use", "id", "default"])?;
            let q = a.resolve_qname(r)?;
            let (g, _) = lookup(&self.index.attributes, &q, "attribute")?;
            only_attrs(g, &["name", "type", "id", "default"])?;
            (q.0, q.1, g)
        } else {
            only_attrs(a, &["name", "type", "use", "form", "id", "default"])?;
            let name = a
                .attr("name")
                .map_or_else(|| unsupported("an attribute without name"), Ok)?;
            let qualified = match a.attr("form").map(str::trim) {
                None => doc.attributes_qualified,
                Some("qualified") => true,
                Some("unqualified") => false,
                Some(v) => return unsupported(format!("form=\"{v}\"")),
            };
            let ns = if qualified { doc.tns } else { "" };
            (ns.to_owned(), name.to_owned(), a)
        };
        if ns == crate::xml::XML_NS || ns == XSI_NS {
            return unsupported("an attribute in the xml or xsi namespace");
        }
        let children = xsd_children(decl)?;
        let simple = match (decl.attr("type"), children.as_slice()) {
            (Some(t), []) => {
                let q = decl.resolve_qname(t)?;
                match self.named_type(&q)? {
                    TypeRef::Simple(s) => s,
                    TypeRef::Complex(_) => return unsupported("an attribute of complex type"),
                }
            }
            (None, [s]) if s.local == "simpleType" => {
                let s = self.simple_type(s, 0)?;
                self.add_simple(s)
            }
            _ => return unsupported("an attribute of xsd:anySimpleType"),
        };
        if attrs
            .iter()
            .any(|x: &AttrDecl| *x.ns == *ns.as_bytes() && *x.local == *local.as_bytes())
        {
            return unsupported("an attribute declared twice");
        }
        attrs.push(AttrDecl {
            ns: ns.as_bytes().into(),
            local: local.as_bytes().into(),
            required,
            simple,
        });
        Ok(())
    }

    fn named_simple(&mut self, q: &QName, depth: usize) -> R<Simple> {
        if q.0 == XSD_NS {
            return Builtin::named(&q.1)
                .map(Simple::builtin)
                .map_or_else(|| unsupported(format!("the built-in type xsd:{}", q.1)), Ok);
        }
        let (s, _) = lookup(&self.index.simple_types, q, "simple type")?;
        self.simple_type(s, depth + 1)
    }

    /// An `xsd:simpleType` (a restriction of a supported type with supported facets).
    fn simple_type(&mut self, s: &Element, depth: usize) -> R<Simple> {
        if depth > MAX_DEPTH {
            return unsupported("simple types derive too deep");
        }
        only_attrs(s, &["name", "id", "final"])?;
        let children = xsd_children(s)?;
        let [r] = children.as_slice() else {
            return unsupported("odd xsd:simpleType");
        };
        if r.local != "restriction" {
            return unsupported(format!("xsd:{} (list or union)", r.local));
        }
        only_attrs(r, &["base", "id"])?;
        let facets = xsd_children(r)?;
        let (mut t, facets) = match (r.attr("base"), facets.split_first()) {
            (Some(b), _) => (self.named_simple(&r.resolve_qname(b)?, depth)?, &facets[..]),
            (None, Some((first, rest))) if first.local == "simpleType" => {
                (self.simple_type(first, depth + 1)?, rest)
            }
            _ => return unsupported("a restriction without base"),
        };
        let mut enumeration = Vec::new();
        let mut patterns = Vec::new();
        for f in facets {
            only_attrs(f, &["value", "fixed", "id"])?;
            if !xsd_children(f)?.is_empty() {
                return unsupported("a facet with children");
            }
            let value = f
                .attr("value")
                .map_or_else(|| unsupported("a facet without value"), Ok)?;
            let string = t.base.is_string();
            let numeric = t.base.is_numeric();
            let count = || {
                value
                    .trim()
                    .parse::<usize>()
                    .map_or_else(|_| unsupported(format!("facet value `{value}`")), Ok)
            };
            let bound = |inclusive: bool| -> R<Bound> {
                let d = lexical::decimal(value.trim(), false)
                    .map_or_else(|| unsupported(format!("bound `{value}`")), Ok)?;
                Ok(Bound {
                    value: d.scaled(),
                    inclusive,
                })
            };
            match f.local.as_str() {
                "enumeration" if string => {
                    if value.bytes().any(|b| matches!(b, b'\t' | b'\n' | b'\r')) {
                        return unsupported("an enumeration value with tabs or line ends");
                    }
                    enumeration.push(value.to_owned());
                }
                "pattern" if string => patterns.push(
                    pattern::translate(value)
                        .map_or_else(|| unsupported(format!("the pattern `{value}`")), Ok)?,
                ),
                "length" if string => {
                    let n = count()?;
                    t.length = (t.length.0.max(n), t.length.1.min(n));
                }
                "minLength" if string => t.length.0 = t.length.0.max(count()?),
                "maxLength" if string => t.length.1 = t.length.1.min(count()?),
                "whiteSpace" if string && t.base == Builtin::String => {
                    let ws = match value.trim() {
                        "preserve" => WhiteSpace::Preserve,
                        "replace" => WhiteSpace::Replace,
                        "collapse" => WhiteSpace::Collapse,
                        v => return unsupported(format!("whiteSpace=\"{v}\"")),
                    };
                    t.white_space = t.white_space.max(ws);
                }
                "whiteSpace" if !string && value.trim() == "collapse" => {}
                "minInclusive" if numeric => t.min.push(bound(true)?),
                "minExclusive" if numeric => t.min.push(bound(false)?),
                "maxInclusive" if numeric => t.max.push(bound(true)?),
                "maxExclusive" if numeric => t.max.push(bound(false)?),
                "totalDigits" if numeric => {
                    let n = u32::try_from(count()?).map_err(|e| e.to_string())?;
                    t.total_digits = Some(t.total_digits.map_or(n, |o| o.min(n)));
                }
                "fractionDigits" if numeric => {
                    let n = u32::try_from(count()?).map_err(|e| e.to_string())?;
                    t.fraction_digits = Some(t.fraction_digits.map_or(n, |o| o.min(n)));
                }
                other => {
                    return unsupported(format!("the facet {other} on {:?}", t.base));
                }
            }
        }
        if !enumeration.is_empty() {
            if t.white_space != WhiteSpace::Preserve
                && enumeration
                    .iter()
                    .any(|v| !Simple::builtin(Builtin::Token).accepts(v) || v.is_empty())
            {
                return unsupported("an enumeration value that whitespace handling changes");
            }
            t.enumerations.push(enumeration);
        }
        if !patterns.is_empty() {
            let joined = patterns
                .iter()
                .map(|p| format!("(?:{p})"))
                .collect::<Vec<_>>()
                .join("|");
            let re = regex::Regex::new(&joined).map_err(|e| e.to_string())?;
            t.patterns.push(re);
        }
        Ok(t)
    }
}
