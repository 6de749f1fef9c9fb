//! A structural model of XML Schema types, built at load time from a WSDL's schemas, for the
//! JSON ↔ XML conversion of `wsdl2openapi` and its generated OpenAPI document: which child
//! elements an element has (in order), how often each may occur, in which namespace, with which
//! scalar type and attributes. Validation proper (facets, choices, ...) stays with libxml2.

use std::collections::HashMap;

use crate::wsdl::{QName, XSD_NS};
use crate::xml::Element;

/// The JSON kind of a simple type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Any text.
    String,
    /// A whole number (`xsd:int`, `long`, `integer`, ...).
    Integer,
    /// A number (`xsd:decimal`, `float`, `double`).
    Number,
    /// `xsd:boolean`.
    Boolean,
    /// `xsd:date` (a string with format `date`).
    Date,
    /// `xsd:dateTime` (a string with format `date-time`).
    DateTime,
}

/// A simple type: its JSON kind and, when restricted to a list, the allowed values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scalar {
    /// The JSON kind.
    pub kind: Kind,
    /// `xsd:enumeration` values (empty: any).
    pub enumeration: Vec<String>,
}

impl Scalar {
    fn of(kind: Kind) -> Scalar {
        Scalar {
            kind,
            enumeration: Vec::new(),
        }
    }
}

/// The type of an element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Type {
    /// Text content.
    Scalar(Scalar),
    /// Element content: index into [`Model::types`].
    Complex(usize),
    /// Anything (`xsd:anyType`, unknown types).
    Any,
}

/// A child element (or a top-level element).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Particle {
    /// Local name.
    pub name: String,
    /// Namespace (`""` when unqualified).
    pub ns: String,
    /// `minOccurs` (children of a choice count as optional).
    pub min: u32,
    /// `maxOccurs` (`u32::MAX` for unbounded).
    pub max: u32,
    /// `nillable`.
    pub nillable: bool,
    /// Its type.
    pub typ: Type,
}

impl Particle {
    /// True when the element may occur more than once (a JSON array).
    pub fn repeated(&self) -> bool {
        self.max > 1
    }
}

/// An attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attribute {
    /// Name.
    pub name: String,
    /// `use="required"`.
    pub required: bool,
    /// Its type.
    pub scalar: Scalar,
}

/// A complex type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Complex {
    /// Child elements in document order (sequences, choices and groups flattened).
    pub particles: Vec<Particle>,
    /// Attributes.
    pub attributes: Vec<Attribute>,
    /// The text type of `simpleContent`.
    pub text: Option<Scalar>,
    /// Has an `xsd:any` wildcard.
    pub any: bool,
}

/// The types of a set of schemas.
#[derive(Debug, Default)]
pub struct Model {
    /// Complex types, referred to by index.
    pub types: Vec<Complex>,
}

#[derive(Clone, Copy)]
struct SchemaInfo<'a> {
    tns: &'a str,
    qualified: bool,
}

/// Builds the model on demand from the schema documents.
pub struct Builder<'a> {
    elements: HashMap<QName, (&'a Element, SchemaInfo<'a>)>,
    complex: HashMap<QName, (&'a Element, SchemaInfo<'a>)>,
    simple: HashMap<QName, (&'a Element, SchemaInfo<'a>)>,
    groups: HashMap<QName, (&'a Element, SchemaInfo<'a>)>,
    attr_groups: HashMap<QName, (&'a Element, SchemaInfo<'a>)>,
    named: HashMap<QName, usize>,
    /// The model built so far.
    pub model: Model,
    depth: usize,
}

fn max_occurs(e: &Element) -> u32 {
    match e.attr("maxOccurs") {
        Some("unbounded") => u32::MAX,
        Some(v) => v.trim().parse().unwrap_or(1),
        None => 1,
    }
}

fn min_occurs(e: &Element) -> u32 {
    e.attr("minOccurs")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(1)
}

/// The JSON kind of a built-in XML Schema type.
pub fn builtin(local: &str) -> Option<Kind> {
    Some(match local {
        "int" | "integer" | "long" | "short" | "byte" | "unsignedInt" | "unsignedLong"
        | "unsignedShort" | "unsignedByte" | "positiveInteger" | "negativeInteger"
        | "nonNegativeInteger" | "nonPositiveInteger" => Kind::Integer,
        "decimal" | "float" | "double" => Kind::Number,
        "boolean" => Kind::Boolean,
        "date" => Kind::Date,
        "dateTime" => Kind::DateTime,
        "anyType" => return None,
        _ => Kind::String,
    })
}

impl<'a> Builder<'a> {
    /// Indexes the global declarations of `schemas`.
    pub fn new(schemas: &'a [Element]) -> Self {
        let mut b = Builder {
            elements: HashMap::new(),
            complex: HashMap::new(),
            simple: HashMap::new(),
            groups: HashMap::new(),
            attr_groups: HashMap::new(),
            named: HashMap::new(),
            model: Model::default(),
            depth: 0,
        };
        for s in schemas {
            let info = SchemaInfo {
                tns: s.attr("targetNamespace").unwrap_or(""),
                qualified: s.attr("elementFormDefault") == Some("qualified"),
            };
            for d in s.elements().filter(|e| e.ns == XSD_NS) {
                let Some(name) = d.attr("name") else { continue };
                let q = (info.tns.to_owned(), name.to_owned());
                let map = match d.local.as_str() {
                    "element" => &mut b.elements,
                    "complexType" => &mut b.complex,
                    "simpleType" => &mut b.simple,
                    "group" => &mut b.groups,
                    "attributeGroup" => &mut b.attr_groups,
                    _ => continue,
                };
                map.entry(q).or_insert((d, info));
            }
        }
        b
    }

    /// The particle of the global element `q`.
    pub fn global_element(&mut self, q: &QName) -> Result<Particle, String> {
        let (decl, info) = *self
            .elements
            .get(q)
            .ok_or_else(|| format!("the schemas declare no element {{{}}}{}", q.0, q.1))?;
        let mut p = self.element(decl, info, true)?;
        p.min = 1;
        p.max = 1;
        Ok(p)
    }

    /// A synthetic wrapper (rpc style) named `{ns}name` with one unqualified child per part.
    pub fn wrapper(
        &mut self,
        ns: &str,
        name: &str,
        parts: &[crate::wsdl::Part],
    ) -> Result<Particle, String> {
        let mut c = Complex::default();
        for part in parts {
            if let Some(e) = &part.element {
                let mut p = self.global_element(e)?;
                p.min = 1;
                c.particles.push(p);
            } else {
                let typ = match &part.type_name {
                    Some(t) => self.type_named(t)?,
                    None => Type::Any,
                };
                c.particles.push(Particle {
                    name: part.name.clone(),
                    ns: String::new(),
                    min: 1,
                    max: 1,
                    nillable: false,
                    typ,
                });
            }
        }
        self.model.types.push(c);
        Ok(Particle {
            name: name.to_owned(),
            ns: ns.to_owned(),
            min: 1,
            max: 1,
            nillable: false,
            typ: Type::Complex(self.model.types.len() - 1),
        })
    }

    fn element(
        &mut self,
        decl: &'a Element,
        info: SchemaInfo<'a>,
        global: bool,
    ) -> Result<Particle, String> {
        if let Some(r) = decl.attr("ref") {
            let q = decl.resolve_qname(r)?;
            let mut p = self.global_element(&q)?;
            p.min = min_occurs(decl);
            p.max = max_occurs(decl);
            return Ok(p);
        }
        let name = decl.attr("name").unwrap_or("").to_owned();
        let qualified = global
            || match decl.attr("form") {
                Some(f) => f == "qualified",
                None => info.qualified,
            };
        self.depth += 1;
        if self.depth > 64 {
            self.depth -= 1;
            return Err("the schema's types nest too deep".into());
        }
        let typ = if let Some(t) = decl.attr("type") {
            let q = decl.resolve_qname(t)?;
            self.type_named(&q)
        } else if let Some(ct) = decl.element(XSD_NS, "complexType") {
            self.complex_type(ct, info).map(Type::Complex)
        } else if let Some(st) = decl.element(XSD_NS, "simpleType") {
            self.simple_type(st).map(Type::Scalar)
        } else {
            Ok(Type::Any)
        };
        self.depth -= 1;
        Ok(Particle {
            name,
            ns: if qualified {
                info.tns.to_owned()
            } else {
                String::new()
            },
            min: min_occurs(decl),
            max: max_occurs(decl),
            nillable: decl.attr("nillable") == Some("true"),
            typ: typ?,
        })
    }

    fn type_named(&mut self, q: &QName) -> Result<Type, String> {
        if q.0 == XSD_NS {
            return Ok(builtin(&q.1).map_or(Type::Any, |k| Type::Scalar(Scalar::of(k))));
        }
        if let Some(&i) = self.named.get(q) {
            return Ok(Type::Complex(i));
        }
        if let Some(&(ct, info)) = self.complex.get(q) {
            // Reserve the index first: recursive types refer to themselves.
            let i = self.model.types.len();
            self.model.types.push(Complex::default());
            self.named.insert(q.clone(), i);
            let c = self.complex_body(ct, info)?;
            self.model.types[i] = c;
            return Ok(Type::Complex(i));
        }
        if let Some(&(st, _)) = self.simple.get(q) {
            return self.simple_type(st).map(Type::Scalar);
        }
        Err(format!("the schemas declare no type {{{}}}{}", q.0, q.1))
    }

    fn complex_type(&mut self, ct: &'a Element, info: SchemaInfo<'a>) -> Result<usize, String> {
        let c = self.complex_body(ct, info)?;
        self.model.types.push(c);
        Ok(self.model.types.len() - 1)
    }

    fn complex_body(&mut self, ct: &'a Element, info: SchemaInfo<'a>) -> Result<Complex, String> {
        let mut c = Complex::default();
        self.content(ct, info, &mut c, false)?;
        Ok(c)
    }

    /// Adds the particles and attributes found directly in `parent` (a complexType, a model
    /// group or an extension) to `c`. `optional`: inside a choice.
    fn content(
        &mut self,
        parent: &'a Element,
        info: SchemaInfo<'a>,
        c: &mut Complex,
        optional: bool,
    ) -> Result<(), String> {
        for e in parent.elements().filter(|e| e.ns == XSD_NS) {
            match e.local.as_str() {
                "sequence" | "all" => {
                    let opt = optional || min_occurs(e) == 0;
                    let repeated = max_occurs(e) > 1;
                    let start = c.particles.len();
                    self.content(e, info, c, opt)?;
                    if repeated {
                        for p in &mut c.particles[start..] {
                            p.max = u32::MAX;
                        }
                    }
                }
                "choice" => {
                    let repeated = max_occurs(e) > 1;
                    let start = c.particles.len();
                    self.content(e, info, c, true)?;
                    if repeated {
                        for p in &mut c.particles[start..] {
                            p.max = u32::MAX;
                        }
                    }
                }
                "element" => {
                    let mut p = self.element(e, info, false)?;
                    if optional {
                        p.min = 0;
                    }
                    c.particles.push(p);
                }
                "group" => {
                    if let Some(r) = e.attr("ref") {
                        let q = e.resolve_qname(r)?;
                        let &(g, ginfo) = self
                            .groups
                            .get(&q)
                            .ok_or_else(|| format!("the schemas declare no group `{}`", q.1))?;
                        self.content(g, ginfo, c, optional || min_occurs(e) == 0)?;
                    }
                }
                "any" => c.any = true,
                "attribute" => {
                    if let Some(a) = self.attribute(e)? {
                        c.attributes.push(a);
                    }
                }
                "attributeGroup" => {
                    if let Some(r) = e.attr("ref") {
                        let q = e.resolve_qname(r)?;
                        if let Some(&(g, ginfo)) = self.attr_groups.get(&q) {
                            self.content(g, ginfo, c, optional)?;
                        }
                    }
                }
                "complexContent" => {
                    for d in e.elements().filter(|d| d.ns == XSD_NS) {
                        if d.local == "extension" {
                            if let Some(base) = d.attr("base") {
                                let q = d.resolve_qname(base)?;
                                if let Type::Complex(i) = self.type_named(&q)? {
                                    let b = self.model.types[i].clone();
                                    c.particles.extend(b.particles);
                                    c.attributes.extend(b.attributes);
                                    c.any |= b.any;
                                }
                            }
                        }
                        // A restriction repeats the content it keeps.
                        self.content(d, info, c, optional)?;
                    }
                }
                "simpleContent" => {
                    for d in e.elements().filter(|d| d.ns == XSD_NS) {
                        if let Some(base) = d.attr("base") {
                            let q = d.resolve_qname(base)?;
                            match self.type_named(&q)? {
                                Type::Scalar(s) => c.text = Some(s),
                                Type::Complex(i) => {
                                    let b = self.model.types[i].clone();
                                    c.text = b.text;
                                    c.attributes.extend(b.attributes);
                                }
                                Type::Any => c.text = Some(Scalar::of(Kind::String)),
                            }
                        }
                        self.content(d, info, c, optional)?;
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn attribute(&mut self, a: &'a Element) -> Result<Option<Attribute>, String> {
        if a.attr("use") == Some("prohibited") {
            return Ok(None);
        }
        let (name, scalar) = if let Some(r) = a.attr("ref") {
            let q = a.resolve_qname(r)?;
            (q.1, Scalar::of(Kind::String))
        } else {
            let scalar = if let Some(t) = a.attr("type") {
                match self.type_named(&a.resolve_qname(t)?)? {
                    Type::Scalar(s) => s,
                    _ => Scalar::of(Kind::String),
                }
            } else if let Some(st) = a.element(XSD_NS, "simpleType") {
                self.simple_type(st)?
            } else {
                Scalar::of(Kind::String)
            };
            (a.attr("name").unwrap_or("").to_owned(), scalar)
        };
        Ok(Some(Attribute {
            name,
            required: a.attr("use") == Some("required"),
            scalar,
        }))
    }

    fn simple_type(&mut self, st: &'a Element) -> Result<Scalar, String> {
        if let Some(r) = st.element(XSD_NS, "restriction") {
            let mut base = match r.attr("base") {
                Some(b) => match self.type_named(&r.resolve_qname(b)?)? {
                    Type::Scalar(s) => s,
                    _ => Scalar::of(Kind::String),
                },
                None => match r.element(XSD_NS, "simpleType") {
                    Some(inner) => self.simple_type(inner)?,
                    None => Scalar::of(Kind::String),
                },
            };
            let values: Vec<String> = r
                .elements_named(XSD_NS, "enumeration")
                .filter_map(|e| e.attr("value").map(str::to_owned))
                .collect();
            if !values.is_empty() {
                base.enumeration = values;
            }
            return Ok(base);
        }
        Ok(Scalar::of(Kind::String))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wsdl::Wsdl;

    #[test]
    fn partner_types() {
        let w = Wsdl::load(&crate::wsdl::tests::shared("partner.wsdl")).unwrap();
        let mut b = Builder::new(&w.schemas);
        let ns = "http://example.com/partner".to_owned();
        let p = b
            .global_element(&(ns.clone(), "getPartnersResponse".into()))
            .unwrap();
        let Type::Complex(i) = p.typ else { panic!() };
        let partners = &b.model.types[i].particles[0];
        assert_eq!(partners.name, "partners");
        assert!(partners.repeated());
        assert_eq!(partners.ns, "");
        let p = b
            .global_element(&(ns, "getPartnerResponse".into()))
            .unwrap();
        let Type::Complex(i) = p.typ else { panic!() };
        let Type::Complex(j) = b.model.types[i].particles[0].typ else {
            panic!()
        };
        let partner = &b.model.types[j];
        let kinds: Vec<_> = partner
            .particles
            .iter()
            .map(|p| match &p.typ {
                Type::Scalar(s) => format!("{}:{:?}", p.name, s.kind),
                _ => format!("{}:complex", p.name),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "id:Integer",
                "name:String",
                "birthDate:Date",
                "phoneNumber:String",
                "kind:String",
                "active:Boolean",
                "creditLimit:Number",
                "address:complex"
            ]
        );
        let Type::Scalar(kind) = &partner.particles[4].typ else {
            panic!()
        };
        assert_eq!(kind.enumeration, ["PERSON", "COMPANY", "PUBLIC_AUTHORITY"]);
    }
}
