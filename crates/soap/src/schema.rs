//! The XML Schemas of a WSDL, validated with libxml2 (a mature, complete XSD 1.0
//! implementation; the same engine as `xmllint --schema`).
//!
//! At load time every schema document (inline in `wsdl:types`, and every `xsd:import`ed,
//! `xsd:include`d or `xsd:redefine`d document, from files or `http://` URLs) is written to a
//! private temporary folder with its references rewritten to those local copies, plus:
//! one file per target namespace that includes that namespace's documents (libxml2 imports a
//! namespace only once), synthetic declarations of the wrapper elements of rpc/literal
//! operations, and a main schema that imports every namespace. The main schema is compiled once
//! at load to report errors.
//!
//! Unless a schema of the WSDL itself declares the SOAP envelope namespaces, the set also holds
//! a schema of the SOAP 1.1 and 1.2 envelopes whose `Body` demands a declared element
//! (`processContents="strict"`), so that a whole message is validated in one streaming pass,
//! without building a tree ([`SchemaSet::validate_message`], with `turnpike-xmlstream`).
//!
//! libxml2's schema and validation contexts are not thread-safe, so each worker thread compiles
//! its own copy on first use and keeps it in a thread-local cache (thread per core: no locks,
//! no sharing on the request path), next to the thread's reused parser. Entries of schema sets
//! that were dropped (after a reload) are purged when a new set is compiled on that thread.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use libxml::error::StructuredError;
use libxml::schemas::{SchemaParserContext, SchemaValidationContext};
use libxml::tree::Node;
use turnpike_xmlstream::{StreamValidator, Verdict, Watch};

use crate::fetch::Location;
use crate::names::{SoapVersion, XSD_NS};
use crate::quick::FastPath;
use crate::service::{Service, Style};
use crate::xml::{self, escape, Element};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The schema of the `xml:` attributes (after the W3C's `xml.xsd`), used for imports of the
/// XML namespace instead of fetching it.
pub(crate) const XML_NS_SCHEMA: &str = r#"<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema" targetNamespace="http://www.w3.org/XML/1998/namespace" xml:lang="en">
  <xs:attribute name="lang"><xs:simpleType><xs:union memberTypes="xs:language"><xs:simpleType><xs:restriction base="xs:string"><xs:enumeration value=""/></xs:restriction></xs:simpleType></xs:union></xs:simpleType></xs:attribute>
  <xs:attribute name="space"><xs:simpleType><xs:restriction base="xs:NCName"><xs:enumeration value="default"/><xs:enumeration value="preserve"/></xs:restriction></xs:simpleType></xs:attribute>
  <xs:attribute name="base" type="xs:anyURI"/>
  <xs:attribute name="id" type="xs:ID"/>
  <xs:attributeGroup name="specialAttrs"><xs:attribute ref="xml:base"/><xs:attribute ref="xml:lang"/><xs:attribute ref="xml:space"/><xs:attribute ref="xml:id"/></xs:attributeGroup>
</xs:schema>"#;

/// The schema of a SOAP envelope (`{ns}` is replaced by its namespace) as the validator sees
/// it: an optional `Header` whose entries are not validated, a `Body` whose elements must be
/// declared by the WSDL's schemas and valid, and a `Fault` (answered by the backend) whose
/// content is not validated. Everything else the envelope may carry is let through here; the
/// `validator` policy checks the envelope's structure itself.
const ENVELOPE_SCHEMA: &str = r#"<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:e="{ns}" targetNamespace="{ns}" elementFormDefault="qualified">
  <xs:element name="Envelope"><xs:complexType mixed="true"><xs:sequence>
    <xs:element ref="e:Header" minOccurs="0"/>
    <xs:element ref="e:Body"/>
    <xs:any processContents="skip" minOccurs="0" maxOccurs="unbounded"/>
  </xs:sequence><xs:anyAttribute processContents="skip"/></xs:complexType></xs:element>
  <xs:element name="Header"><xs:complexType mixed="true"><xs:sequence>
    <xs:any processContents="skip" minOccurs="0" maxOccurs="unbounded"/>
  </xs:sequence><xs:anyAttribute processContents="skip"/></xs:complexType></xs:element>
  <xs:element name="Body"><xs:complexType mixed="true"><xs:sequence>
    <xs:any processContents="strict" minOccurs="0" maxOccurs="unbounded"/>
  </xs:sequence><xs:anyAttribute processContents="skip"/></xs:complexType></xs:element>
  <xs:element name="Fault"><xs:complexType mixed="true"><xs:sequence>
    <xs:any processContents="skip" minOccurs="0" maxOccurs="unbounded"/>
  </xs:sequence><xs:anyAttribute processContents="skip"/></xs:complexType></xs:element>
</xs:schema>"#;

/// A compiled set of schemas, shared by every worker.
#[derive(Debug)]
pub struct SchemaSet {
    id: u64,
    main: String,
    /// The set declares the SOAP 1.1 and 1.2 envelopes ([`ENVELOPE_SCHEMA`]).
    envelopes: bool,
    /// The fast path in front of libxml2 for the everyday message.
    fast: FastPath,
    _dir: tempfile::TempDir,
}

/// What [`SchemaSet::validate_message`] found.
#[derive(Debug)]
pub enum Checked {
    /// Well-formed and valid.
    Valid,
    /// Well-formed but invalid: the validator's messages (`line N: ...`).
    Invalid(Vec<String>),
    /// Not well-formed XML.
    NotWellFormed,
}

struct Cached {
    owner: Weak<SchemaSet>,
    ctx: SchemaValidationContext,
}

thread_local! {
    static CONTEXTS: RefCell<HashMap<u64, Cached>> = RefCell::new(HashMap::new());
    /// This thread's parser for [`SchemaSet::validate_message`] (`None`: not yet created).
    static PARSER: RefCell<Option<StreamValidator>> = const { RefCell::new(None) };
}

/// `line N: message` for each error with a message.
fn messages(errors: &[StructuredError]) -> Vec<String> {
    errors
        .iter()
        .filter_map(|e| {
            let m = e.message.as_deref()?.trim();
            Some(match e.line {
                Some(l) if l > 0 => format!("line {l}: {m}"),
                _ => m.to_owned(),
            })
        })
        .collect()
}

/// Writes schema documents into the temporary folder, each once.
struct Exporter {
    dir: PathBuf,
    files: HashMap<Location, PathBuf>,
    count: usize,
    all: Vec<Element>,
    /// Target namespace → the file that includes all of its inline documents.
    groups: BTreeMap<String, PathBuf>,
    depth: usize,
}

impl Exporter {
    fn next_path(&mut self, kind: &str) -> PathBuf {
        self.count += 1;
        self.dir.join(format!("{kind}-{}.xsd", self.count))
    }

    /// Rewrites the references of `schema` (read from `base`) and writes it to `path`.
    fn export(
        &mut self,
        mut schema: Element,
        base: &Location,
        path: &PathBuf,
    ) -> Result<(), String> {
        let mut refs: Vec<(usize, Location)> = Vec::new();
        let mut xml_ns_imports = Vec::new();
        for (i, c) in schema.children.iter().enumerate() {
            if let xml::Node::Element(e) = c {
                if e.is(XSD_NS, "import") && e.attr("namespace") == Some(xml::XML_NS) {
                    // The schema of `xml:lang` and friends ships with the gateway: WSDLs name
                    // it by its W3C URL, which must not be fetched at every load.
                    xml_ns_imports.push(i);
                } else if e.ns == XSD_NS
                    && matches!(e.local.as_str(), "import" | "include" | "redefine")
                {
                    if let Some(loc) = e.attr("schemaLocation") {
                        refs.push((i, base.join(loc)));
                    }
                }
            }
        }
        if !xml_ns_imports.is_empty() {
            let local = self.dir.join("xml.xsd");
            std::fs::write(&local, XML_NS_SCHEMA)
                .map_err(|e| format!("cannot write {}: {e}", local.display()))?;
            for i in xml_ns_imports {
                if let Some(xml::Node::Element(e)) = schema.children.get_mut(i) {
                    e.set_attr("schemaLocation", &local.to_string_lossy());
                }
            }
        }
        for (i, loc) in refs {
            let local = self.external(&loc)?;
            if let Some(xml::Node::Element(e)) = schema.children.get_mut(i) {
                e.set_attr("schemaLocation", &local.to_string_lossy());
            }
        }
        // Imports without a location of namespaces defined inline in the WSDL.
        let groups = self.groups.clone();
        for c in schema.children.iter_mut() {
            if let xml::Node::Element(e) = c {
                if e.is(XSD_NS, "import") && e.attr("schemaLocation").is_none() {
                    let ns = e.attr("namespace").unwrap_or("").to_owned();
                    if let Some(g) = groups.get(&ns) {
                        e.set_attr("schemaLocation", &g.to_string_lossy());
                    }
                }
            }
        }
        std::fs::write(path, schema.to_standalone_xml())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        self.all.push(schema);
        Ok(())
    }

    fn external(&mut self, loc: &Location) -> Result<PathBuf, String> {
        if let Some(p) = self.files.get(loc) {
            return Ok(p.clone());
        }
        if self.depth > 32 {
            return Err(format!("{loc}: schema imports nest too deep"));
        }
        let path = self.next_path("ext");
        self.files.insert(loc.clone(), path.clone());
        let bytes = loc.read()?;
        let doc = xml::parse(&bytes).map_err(|e| format!("{loc}: {e}"))?;
        if !doc.is(XSD_NS, "schema") {
            return Err(format!("{loc}: not an XML Schema document"));
        }
        self.depth += 1;
        let r = self.export(doc, loc, &path);
        self.depth -= 1;
        r?;
        Ok(path)
    }
}

impl SchemaSet {
    /// Exports and compiles the schemas of a WSDL; returns the set, every schema document (for
    /// type information) and the locations of the external schema documents read.
    pub fn build(
        inline: &[(Element, Location)],
        services: &[Service],
    ) -> Result<(SchemaSet, Vec<Element>, Vec<Location>), String> {
        let dir = tempfile::Builder::new()
            .prefix("turnpike-wsdl-")
            .tempdir()
            .map_err(|e| format!("cannot create a temporary folder for the schemas: {e}"))?;
        let mut ex = Exporter {
            dir: dir.path().to_owned(),
            files: HashMap::new(),
            count: 0,
            all: Vec::new(),
            groups: BTreeMap::new(),
            depth: 0,
        };
        let mut members: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
        let mut planned = Vec::new();
        for (schema, _) in inline {
            let ns = schema.attr("targetNamespace").unwrap_or("").to_owned();
            let path = ex.next_path("inline");
            members.entry(ns).or_default().push(path.clone());
            planned.push(path);
        }
        let rpc_paths: Vec<(String, PathBuf)> = rpc_namespaces(services)
            .into_iter()
            .map(|ns| (ns, ex.next_path("rpc")))
            .collect();
        for (ns, path) in &rpc_paths {
            members.entry(ns.clone()).or_default().push(path.clone());
        }
        for ns in members.keys() {
            let g = ex.next_path("ns");
            ex.groups.insert(ns.clone(), g);
        }
        let rpc = rpc_declarations(services, inline, &ex.groups);
        for (ns, path) in &rpc_paths {
            let text = rpc.get(ns).cloned().unwrap_or_else(|| {
                let mut s = format!("<xsd:schema xmlns:xsd=\"{XSD_NS}\"");
                if !ns.is_empty() {
                    s.push_str(&format!(" targetNamespace=\"{}\"", escape(ns)));
                }
                s.push_str("/>");
                s
            });
            std::fs::write(path, text).map_err(|e| format!("cannot write schema: {e}"))?;
        }
        for ((schema, base), path) in inline.iter().zip(&planned) {
            ex.export(schema.clone(), base, path)?;
        }
        let mut main = format!(
            "<xsd:schema xmlns:xsd=\"{XSD_NS}\" targetNamespace=\"urn:turnpike:wsdl-types\">"
        );
        for (ns, files) in &members {
            let Some(g) = ex.groups.get(ns) else { continue };
            let mut group = format!("<xsd:schema xmlns:xsd=\"{XSD_NS}\"");
            if !ns.is_empty() {
                group.push_str(&format!(" targetNamespace=\"{}\"", escape(ns)));
            }
            group.push('>');
            for f in files {
                group.push_str(&format!(
                    "<xsd:include schemaLocation=\"{}\"/>",
                    escape(&f.to_string_lossy())
                ));
            }
            group.push_str("</xsd:schema>");
            std::fs::write(g, group).map_err(|e| format!("cannot write schema: {e}"))?;
            if ns.is_empty() {
                main.push_str(&format!(
                    "<xsd:import schemaLocation=\"{}\"/>",
                    escape(&g.to_string_lossy())
                ));
            } else {
                main.push_str(&format!(
                    "<xsd:import namespace=\"{}\" schemaLocation=\"{}\"/>",
                    escape(ns),
                    escape(&g.to_string_lossy())
                ));
            }
        }
        // The envelopes, unless the WSDL's own schemas declare their namespaces (then messages
        // are validated element by element on a tree instead).
        let envelope_namespaces =
            [SoapVersion::V11, SoapVersion::V12].map(SoapVersion::envelope_ns);
        let envelopes = !ex.all.iter().chain(inline.iter().map(|(s, _)| s)).any(|s| {
            s.attr("targetNamespace")
                .is_some_and(|ns| envelope_namespaces.contains(&ns))
        }) && !members
            .keys()
            .any(|ns| envelope_namespaces.contains(&ns.as_str()));
        if envelopes {
            for (i, ns) in envelope_namespaces.iter().enumerate() {
                let path = dir.path().join(format!("envelope-{i}.xsd"));
                std::fs::write(&path, ENVELOPE_SCHEMA.replace("{ns}", ns))
                    .map_err(|e| format!("cannot write schema: {e}"))?;
                main.push_str(&format!(
                    "<xsd:import namespace=\"{}\" schemaLocation=\"{}\"/>",
                    escape(ns),
                    escape(&path.to_string_lossy())
                ));
            }
        }
        main.push_str("</xsd:schema>");
        let main_path = dir.path().join("main.xsd");
        std::fs::write(&main_path, main).map_err(|e| format!("cannot write schema: {e}"))?;
        let set = SchemaSet {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            main: main_path.to_string_lossy().into_owned(),
            envelopes,
            fast: FastPath::compile(&ex.all),
            _dir: dir,
        };
        set.compile()?;
        let read = ex.files.into_keys().collect();
        Ok((set, ex.all, read))
    }

    fn compile(&self) -> Result<SchemaValidationContext, String> {
        let mut parser = SchemaParserContext::from_file(&self.main);
        SchemaValidationContext::from_parser(&mut parser).map_err(|errs| {
            let msgs: Vec<String> = errs
                .iter()
                .filter_map(|e| e.message.as_deref().map(|m| m.trim().to_owned()))
                .collect();
            format!("invalid XML Schema: {}", msgs.join("; "))
        })
    }

    /// True when whole SOAP messages can be validated with [`SchemaSet::validate_message`]
    /// (the set declares the envelopes).
    pub fn validates_envelopes(&self) -> bool {
        self.envelopes
    }

    /// The fast path compiled from the same schema documents.
    pub fn fast(&self) -> &FastPath {
        &self.fast
    }

    /// Runs `f` with this thread's compiled copy of the set (compiled on first use).
    fn with_context<T>(
        self: &Arc<Self>,
        f: impl FnOnce(&mut SchemaValidationContext) -> Result<T, Vec<String>>,
    ) -> Result<T, Vec<String>> {
        CONTEXTS.with(|cell| {
            let mut map = cell.borrow_mut();
            if !map.contains_key(&self.id) {
                map.retain(|_, c| c.owner.strong_count() > 0);
                let ctx = self.compile().map_err(|e| vec![e])?;
                map.insert(
                    self.id,
                    Cached {
                        owner: Arc::downgrade(self),
                        ctx,
                    },
                );
            }
            let Some(cached) = map.get_mut(&self.id) else {
                return Err(vec!["internal: schema cache".to_owned()]);
            };
            f(&mut cached.ctx)
        })
    }

    /// Validates `element` (and everything below it) against the schemas, on this thread's
    /// compiled copy. Returns the validator's messages on failure.
    pub fn validate(self: &Arc<Self>, element: &Node) -> Result<(), Vec<String>> {
        self.with_context(|ctx| {
            let result = ctx.validate_node(element);
            // Warnings of a successful validation stay in the context's log: drop them.
            if result.is_ok() {
                ctx.drain_errors();
            }
            result.map_err(|errs| messages(&errs))
        })
    }

    /// Parses `message` and validates it in the same pass, without building a tree: a SOAP
    /// envelope (when [`SchemaSet::validates_envelopes`]) or an element the schemas declare.
    /// `watch` sees the elements near the root. `Err` when libxml2 could not run at all.
    /// The caller rejects documents with a DTD before.
    pub fn validate_message(
        self: &Arc<Self>,
        message: &[u8],
        watch: &mut dyn Watch,
    ) -> Result<Checked, Vec<String>> {
        self.with_context(|ctx| {
            PARSER.with(|cell| {
                let mut parser = cell.borrow_mut();
                if parser.is_none() {
                    *parser = StreamValidator::new();
                }
                let Some(parser) = parser.as_mut() else {
                    return Err(vec!["libxml2 could not create a parser".to_owned()]);
                };
                match parser.validate(ctx, message, watch) {
                    Verdict::Valid => Ok(Checked::Valid),
                    Verdict::Invalid(errors) => Ok(Checked::Invalid(messages(&errors))),
                    Verdict::NotWellFormed => Ok(Checked::NotWellFormed),
                    Verdict::Failed(why) => Err(vec![why.to_owned()]),
                }
            })
        })
    }
}

/// The namespaces of the wrapper elements of rpc operations.
fn rpc_namespaces(services: &[Service]) -> Vec<String> {
    let mut v: Vec<String> = services
        .iter()
        .flat_map(|s| s.ports.iter())
        .flat_map(|p| p.operations.iter())
        .filter(|o| o.style == Style::Rpc)
        .flat_map(|o| [o.body_element(false), o.body_element(true)])
        .flatten()
        .map(|(ns, _)| ns)
        .collect();
    v.sort();
    v.dedup();
    v
}

/// Synthetic schema documents that declare the wrapper elements of rpc/literal operations
/// (`{namespace}op` and `{namespace}opResponse`, one unqualified child per part), grouped by
/// namespace. Wrappers that a schema already declares are left out.
fn rpc_declarations(
    services: &[Service],
    inline: &[(Element, Location)],
    groups: &BTreeMap<String, PathBuf>,
) -> BTreeMap<String, String> {
    let declared = |ns: &str, name: &str| {
        inline.iter().any(|(s, _)| {
            s.attr("targetNamespace").unwrap_or("") == ns
                && s.elements_named(XSD_NS, "element")
                    .any(|e| e.attr("name") == Some(name))
        })
    };
    let mut by_ns: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut prefixes: BTreeMap<String, String> = BTreeMap::new();
    let mut prefix_of = |ns: &str| -> String {
        let n = prefixes.len();
        prefixes
            .entry(ns.to_owned())
            .or_insert_with(|| format!("p{n}"))
            .clone()
    };
    let mut imports: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for op in services
        .iter()
        .flat_map(|s| s.ports.iter())
        .flat_map(|p| p.operations.iter())
        .filter(|o| o.style == Style::Rpc)
    {
        for output in [false, true] {
            let spec = if output { &op.output } else { &op.input };
            let (Some(spec), Some((ns, name))) = (spec, op.body_element(output)) else {
                continue;
            };
            if declared(&ns, &name) {
                continue;
            }
            let mut decl = format!(
                "<xsd:element name=\"{}\"><xsd:complexType><xsd:sequence>",
                escape(&name)
            );
            for p in &spec.parts {
                if let Some((tns, tlocal)) = &p.type_name {
                    let typ = if tns == XSD_NS {
                        format!("xsd:{tlocal}")
                    } else {
                        let pre = prefix_of(tns);
                        imports.entry(ns.clone()).or_default().push(tns.clone());
                        format!("{pre}:{tlocal}")
                    };
                    decl.push_str(&format!(
                        "<xsd:element name=\"{}\" type=\"{}\" form=\"unqualified\"/>",
                        escape(&p.name),
                        escape(&typ)
                    ));
                } else if let Some((ens, elocal)) = &p.element {
                    let pre = prefix_of(ens);
                    imports.entry(ns.clone()).or_default().push(ens.clone());
                    decl.push_str(&format!("<xsd:element ref=\"{pre}:{}\"/>", escape(elocal)));
                }
            }
            decl.push_str("</xsd:sequence></xsd:complexType></xsd:element>");
            by_ns.entry(ns).or_default().insert(name, decl);
        }
    }
    by_ns
        .into_iter()
        .map(|(ns, decls)| {
            let mut s = format!("<xsd:schema xmlns:xsd=\"{XSD_NS}\"");
            for (uri, pre) in &prefixes {
                s.push_str(&format!(" xmlns:{pre}=\"{}\"", escape(uri)));
            }
            if !ns.is_empty() {
                s.push_str(&format!(" targetNamespace=\"{}\"", escape(&ns)));
            }
            s.push('>');
            let mut done = Vec::new();
            for i in imports.get(&ns).into_iter().flatten() {
                if *i != ns && !done.contains(i) {
                    match groups.get(i) {
                        Some(g) => s.push_str(&format!(
                            "<xsd:import namespace=\"{}\" schemaLocation=\"{}\"/>",
                            escape(i),
                            escape(&g.to_string_lossy())
                        )),
                        None => s.push_str(&format!("<xsd:import namespace=\"{}\"/>", escape(i))),
                    }
                    done.push(i.clone());
                }
            }
            for d in decls.values() {
                s.push_str(d);
            }
            s.push_str("</xsd:schema>");
            (ns, s)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wsdl::Wsdl;

    fn cached() -> usize {
        CONTEXTS.with(|c| c.borrow().len())
    }

    #[test]
    fn each_thread_compiles_once_and_forgets_dropped_sets() {
        let loc = crate::wsdl::tests::shared("cities.wsdl");
        std::thread::spawn(move || {
            let doc = libxml::parser::Parser::default()
                .parse_string(
                    "<c:getCity xmlns:c=\"https://predic8.de/cities\"><name>x</name></c:getCity>",
                )
                .unwrap();
            let root = doc.get_root_element().unwrap();
            let a = Wsdl::load(&loc).unwrap().schema_set;
            assert_eq!(cached(), 0);
            a.validate(&root).unwrap();
            a.validate(&root).unwrap();
            assert_eq!(cached(), 1);
            let b = Wsdl::load(&loc).unwrap().schema_set;
            drop(a); // a reload drops the old snapshot
            b.validate(&root).unwrap();
            assert_eq!(cached(), 1, "the dropped set's context is purged");
        })
        .join()
        .unwrap();
    }
}
