//! `validator` with `schema:`: validates XML bodies (requests, and the backend's responses)
//! against a standalone XML Schema with libxml2, as Membrane's XSD validator does: no
//! `Content-Type` check, empty bodies pass, a failure is answered with every message and its
//! line (and column, where libxml2 knows it).
//!
//! At load the schema document and every document it reaches through `xs:include`,
//! `xs:import` and `xs:redefine` (files, or `http(s)://` URLs fetched then) are written to a
//! private temporary folder with their references rewritten to those copies (imports of the
//! `xml:` namespace get the gateway's own copy of its schema), and compiled once to report
//! errors. libxml2's schema contexts are not thread-safe, so each worker thread compiles its own
//! copy on first use and keeps it in a thread-local cache (no locks, no sharing on the request
//! path); entries of schemas that were dropped (after a reload) are purged when another schema
//! is compiled on that thread. Messages are parsed and validated in one streaming pass, without
//! a tree, by a parser reused per thread; documents with a DTD are refused before parsing, so
//! no entity is ever expanded, and nothing is fetched from the network.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use libxml::error::StructuredError;
use libxml::parser::{Parser, ParserOptions, XmlParseFailure};
use libxml::schemas::{SchemaParserContext, SchemaValidationContext};
use serde_json::{json, Value};
use turnpike_core::{problems, BodyNeed, Exchange, Outcome, Policy, Problem};
use turnpike_xmlstream::{NoWatch, StreamValidator, Verdict};

use crate::fetch::Location;
use crate::names::XSD_NS;
use crate::validation::{body_to_validate, failure, log_failure};
use crate::xml;
use crate::xml_input::{ascii_compatible, xml_refused_before_parsing, PARSE_PADDING};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// At most this many violations are answered (and logged) per message.
const MAX_ERRORS: usize = 50;

/// How deep `xs:include`/`xs:import` chains may nest.
const MAX_DEPTH: usize = 32;

/// A compiled standalone XML Schema, shared by every worker.
#[derive(Debug)]
pub struct XsdSchema {
    id: u64,
    /// The local copy of the schema document that libxml2 compiles.
    main: String,
    /// The local files read at load (the schema and the documents it includes or imports).
    files: Vec<PathBuf>,
    _dir: tempfile::TempDir,
}

/// One violation found in an XML message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XmlViolation {
    /// What is wrong (libxml2's words).
    pub message: String,
    /// The 1-based line, when known.
    pub line: Option<u32>,
    /// The 1-based column, when known.
    pub column: Option<u32>,
}

impl XmlViolation {
    fn new(message: impl Into<String>) -> Self {
        XmlViolation {
            message: message.into(),
            line: None,
            column: None,
        }
    }

    fn from_libxml(e: &StructuredError) -> Option<Self> {
        let message = e.message.as_deref()?.trim();
        let positive = |n: Option<i32>| n.and_then(|n| u32::try_from(n).ok()).filter(|n| *n > 0);
        Some(XmlViolation {
            message: message.to_owned(),
            line: positive(e.line),
            column: positive(e.col),
        })
    }

    /// As a member of the problem's `errors`: `{message, line, column}` (line and column
    /// only when known).
    pub fn to_json(&self) -> Value {
        let mut v = json!({ "message": self.message });
        if let Some(l) = self.line {
            v["line"] = l.into();
        }
        if let Some(c) = self.column {
            v["column"] = c.into();
        }
        v
    }

    fn to_text(&self) -> String {
        match (self.line, self.column) {
            (Some(l), Some(c)) => format!("line {l}, column {c}: {}", self.message),
            (Some(l), None) => format!("line {l}: {}", self.message),
            _ => self.message.clone(),
        }
    }
}

struct Cached {
    owner: Weak<XsdSchema>,
    ctx: SchemaValidationContext,
}

thread_local! {
    static CONTEXTS: RefCell<HashMap<u64, Cached>> = RefCell::new(HashMap::new());
    /// This thread's parser (`None`: not yet created).
    static PARSER: RefCell<Option<StreamValidator>> = const { RefCell::new(None) };
}

/// Copies schema documents into the temporary folder, each once, with their references
/// rewritten to the copies.
struct Export {
    dir: PathBuf,
    copies: HashMap<Location, PathBuf>,
    read: Vec<PathBuf>,
}

impl Export {
    fn copy(&mut self, loc: &Location, depth: usize) -> Result<PathBuf, String> {
        if let Some(p) = self.copies.get(loc) {
            return Ok(p.clone());
        }
        if depth > MAX_DEPTH {
            return Err(format!("{loc}: schema includes and imports nest too deep"));
        }
        let path = self
            .dir
            .join(format!("schema-{}.xsd", self.copies.len() + 1));
        self.copies.insert(loc.clone(), path.clone());
        let bytes = loc.read()?;
        if let Location::File(p) = loc {
            self.read.push(p.clone());
        }
        let mut doc = xml::parse(&bytes).map_err(|e| format!("{loc}: {e}"))?;
        if !doc.is(XSD_NS, "schema") {
            return Err(format!(
                "{loc}: not an XML Schema document (the root element is not xs:schema)"
            ));
        }
        let mut refs: Vec<(usize, Option<Location>)> = Vec::new();
        for (i, c) in doc.children.iter().enumerate() {
            let xml::Node::Element(e) = c else { continue };
            if e.ns != XSD_NS || !matches!(e.local.as_str(), "import" | "include" | "redefine") {
                continue;
            }
            if e.local == "import" && e.attr("namespace") == Some(xml::XML_NS) {
                // The schema of `xml:lang` and friends ships with the gateway: it is named by
                // its W3C URL, which must not be fetched.
                refs.push((i, None));
            } else if let Some(at) = e.attr("schemaLocation") {
                refs.push((i, Some(loc.join(at))));
            }
        }
        for (i, target) in refs {
            let local = match target {
                Some(target) => self.copy(&target, depth + 1)?,
                None => {
                    let p = self.dir.join("xml.xsd");
                    std::fs::write(&p, crate::schema::XML_NS_SCHEMA)
                        .map_err(|e| format!("cannot write {}: {e}", p.display()))?;
                    p
                }
            };
            if let Some(xml::Node::Element(e)) = doc.children.get_mut(i) {
                e.set_attr("schemaLocation", &local.to_string_lossy());
            }
        }
        std::fs::write(&path, doc.to_standalone_xml())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(path)
    }
}

impl XsdSchema {
    /// Reads the schema at `loc` and every document it includes or imports, and compiles it
    /// once to report errors. Called at config load; returns the schema, or what is missing or
    /// wrong.
    pub fn load(loc: &Location) -> Result<XsdSchema, String> {
        let dir = tempfile::Builder::new()
            .prefix("turnpike-xsd-")
            .tempdir()
            .map_err(|e| format!("cannot create a temporary folder for the schema: {e}"))?;
        let mut export = Export {
            dir: dir.path().to_owned(),
            copies: HashMap::new(),
            read: Vec::new(),
        };
        let main = export.copy(loc, 0)?;
        let schema = XsdSchema {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            main: main.to_string_lossy().into_owned(),
            files: export.read,
            _dir: dir,
        };
        schema.compile().map_err(|m| format!("{loc}: {m}"))?;
        Ok(schema)
    }

    /// The local files read at load.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
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

    /// Runs `f` with this thread's compiled copy of the schema (compiled on first use).
    fn with_context<T>(
        self: &Arc<Self>,
        f: impl FnOnce(&mut SchemaValidationContext) -> Result<T, String>,
    ) -> Result<T, String> {
        CONTEXTS.with(|cell| {
            let mut map = cell.borrow_mut();
            if !map.contains_key(&self.id) {
                map.retain(|_, c| c.owner.strong_count() > 0);
                let ctx = self.compile()?;
                map.insert(
                    self.id,
                    Cached {
                        owner: Arc::downgrade(self),
                        ctx,
                    },
                );
            }
            let Some(cached) = map.get_mut(&self.id) else {
                return Err("the schema cache lost an entry".to_owned());
            };
            f(&mut cached.ctx)
        })
    }

    /// Validates one XML message on this thread's compiled copy. Returns `Ok(Ok(()))` when it
    /// is valid, `Ok(Err(violations))` when it is not (not well-formed XML included, with the
    /// parser's first error), and `Err` when libxml2 could not run at all (for the log).
    pub fn check(self: &Arc<Self>, bytes: &[u8]) -> Result<Result<(), Vec<XmlViolation>>, String> {
        if let Some(m) = xml_refused_before_parsing(bytes) {
            return Ok(Err(vec![XmlViolation::new(m)]));
        }
        let verdict = if ascii_compatible(bytes) {
            let mut padded = Vec::with_capacity(bytes.len() + PARSE_PADDING);
            padded.extend_from_slice(bytes);
            padded.resize(bytes.len() + PARSE_PADDING, b' ');
            self.stream(&padded)
        } else {
            self.stream(bytes)
        }?;
        match verdict {
            Verdict::Valid => Ok(Ok(())),
            Verdict::Invalid(errors) => {
                let mut v: Vec<XmlViolation> = errors
                    .iter()
                    .filter_map(XmlViolation::from_libxml)
                    .collect();
                if v.is_empty() {
                    v.push(XmlViolation::new(
                        "the message does not match the XML Schema",
                    ));
                }
                Ok(Err(v))
            }
            Verdict::NotWellFormed => Ok(Err(vec![not_well_formed(bytes)])),
            Verdict::Failed(why) => Err(why.to_owned()),
        }
    }

    fn stream(self: &Arc<Self>, message: &[u8]) -> Result<Verdict, String> {
        self.with_context(|ctx| {
            PARSER.with(|cell| {
                let mut parser = cell.borrow_mut();
                if parser.is_none() {
                    *parser = StreamValidator::new();
                }
                let Some(parser) = parser.as_mut() else {
                    return Err("libxml2 could not create a parser".to_owned());
                };
                Ok(parser.validate(ctx, message, &mut NoWatch))
            })
        })
    }
}

/// The first error libxml2's parser reports for a message that is not well-formed, with its
/// line and column (parsed again, without a schema: only on this error path).
fn not_well_formed(bytes: &[u8]) -> XmlViolation {
    let options = ParserOptions {
        recover: false,
        no_net: true,
        no_error: true,
        no_warning: true,
        ..ParserOptions::default()
    };
    let first = match Parser::default().parse_string_with_diagnostics(bytes, options) {
        Err(XmlParseFailure::ParseFailed(errors)) => {
            errors.iter().find_map(XmlViolation::from_libxml)
        }
        Ok((_, errors)) => errors.iter().find_map(XmlViolation::from_libxml),
        Err(_) => None,
    };
    let mut v = first.unwrap_or_else(|| XmlViolation::new("the message is not well-formed XML"));
    if !v.message.contains("well-formed") && !v.message.is_empty() {
        v.message = format!("the message is not well-formed XML: {}", v.message);
    }
    v
}

/// The `schema` mode of `validator`: XML bodies against a standalone XML Schema.
#[derive(Debug)]
pub struct XsdValidator {
    schema: Arc<XsdSchema>,
    log_failures: bool,
}

impl XsdValidator {
    /// Loads and compiles the schema at `location` (relative to `base_dir`, or an `http(s)://`
    /// URL). Called at config load; returns the validator, or what is missing or wrong.
    pub fn load(location: &str, base_dir: &Path) -> Result<XsdValidator, String> {
        let schema = XsdSchema::load(&Location::from_config(location, base_dir))?;
        Ok(XsdValidator {
            schema: Arc::new(schema),
            log_failures: false,
        })
    }

    /// The same validator, which also logs each failure (`failureHandler: log`).
    pub fn with_failure_log(mut self, log: bool) -> Self {
        self.log_failures = log;
        self
    }

    /// Validates one message body. Returns the violations (at most 50) when it is not valid;
    /// `Err` when libxml2 could not run at all.
    pub fn check(&self, bytes: &[u8]) -> Result<Result<(), Vec<XmlViolation>>, String> {
        let mut checked = self.schema.check(bytes)?;
        if let Err(v) = &mut checked {
            v.truncate(MAX_ERRORS);
        }
        Ok(checked)
    }

    fn run(&self, ex: &Exchange, response: bool) -> Outcome {
        let violations = match body_to_validate(ex, response) {
            Ok(None) => return Outcome::Continue,
            Ok(Some(body)) => match self.check(body) {
                Ok(Ok(())) => return Outcome::Continue,
                Ok(Err(v)) => v,
                Err(why) => {
                    tracing::error!("validator: libxml2 could not validate a message: {why}");
                    return Outcome::Reject(Problem::new(&problems::INTERNAL));
                }
            },
            Err(m) => vec![XmlViolation::new(m)],
        };
        if self.log_failures {
            let texts: Vec<String> = violations.iter().map(XmlViolation::to_text).collect();
            log_failure(response, "schema", &texts);
        }
        let detail = if response {
            "the backend's response does not match the XML Schema"
        } else {
            "the request does not match the XML Schema"
        };
        Outcome::Reject(failure(
            response,
            detail.to_owned(),
            violations.iter().map(XmlViolation::to_json).collect(),
        ))
    }
}

impl Policy for XsdValidator {
    fn name(&self) -> &'static str {
        "validator"
    }

    fn files(&self) -> Vec<PathBuf> {
        self.schema.files().to_vec()
    }

    fn body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    fn response_body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    fn response_needs_request(&self) -> bool {
        false
    }

    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        self.run(ex, false)
    }

    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        self.run(ex, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOOKS: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema" elementFormDefault="qualified">
  <xs:element name="books" type="BooksType"/>
  <xs:complexType name="BooksType">
    <xs:sequence>
      <xs:element name="book" type="BookType" minOccurs="0" maxOccurs="unbounded"/>
    </xs:sequence>
  </xs:complexType>
  <xs:complexType name="BookType">
    <xs:sequence>
      <xs:element name="title" type="xs:string"/>
      <xs:element name="year" type="xs:gYear" minOccurs="0"/>
    </xs:sequence>
    <xs:attribute name="id" type="xs:positiveInteger" use="required"/>
  </xs:complexType>
</xs:schema>"#;

    fn books() -> (tempfile::TempDir, XsdValidator) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("books.xsd"), BOOKS).unwrap();
        let v = XsdValidator::load("books.xsd", dir.path()).unwrap();
        (dir, v)
    }

    #[test]
    fn valid_and_invalid_messages_with_lines() {
        let (_dir, v) = books();
        v.check(b"<books><book id=\"1\"><title>T</title><year>2001</year></book></books>")
            .unwrap()
            .unwrap();
        let bad = "<books>\n  <book id=\"1\">\n    <title>T</title>\n    <year>twenty</year>\n  </book>\n</books>";
        let errs = v.check(bad.as_bytes()).unwrap().unwrap_err();
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].message.contains("year"), "{errs:?}");
        assert_eq!(errs[0].line, Some(4), "{errs:?}");
        let json = errs[0].to_json();
        assert_eq!(json["line"], 4);
        assert!(json["message"].as_str().unwrap().contains("twenty"));
        // Two violations are both reported.
        let two = "<books>\n<book><title>T</title></book>\n<book id=\"x\"><title>T</title></book>\n</books>";
        let errs = v.check(two.as_bytes()).unwrap().unwrap_err();
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert_eq!((errs[0].line, errs[1].line), (Some(2), Some(3)), "{errs:?}");
        // Another root element.
        let errs = v.check(b"<other/>").unwrap().unwrap_err();
        assert!(errs[0].message.contains("other"), "{errs:?}");
    }

    #[test]
    fn not_xml_has_line_and_column() {
        let (_dir, v) = books();
        let errs = v
            .check(b"<books>\n  <book id=\"1\"><title>T</titel></book></books>")
            .unwrap()
            .unwrap_err();
        assert_eq!(errs.len(), 1);
        assert!(errs[0]
            .message
            .starts_with("the message is not well-formed XML"));
        assert_eq!(errs[0].line, Some(2), "{errs:?}");
        assert!(errs[0].column.is_some(), "{errs:?}");
        let errs = v.check(b"{\"json\": true}").unwrap().unwrap_err();
        assert_eq!(errs[0].line, Some(1), "{errs:?}");
        assert_eq!(errs[0].to_json()["column"], 1, "{errs:?}");
    }

    #[test]
    fn dtds_and_entities_are_refused_before_parsing() {
        let (_dir, v) = books();
        let bomb =
            "<?xml version=\"1.0\"?><!DOCTYPE books [<!ENTITY a \"aaaa\">]><books>&a;</books>";
        let errs = v.check(bomb.as_bytes()).unwrap().unwrap_err();
        assert!(errs[0].message.contains("DTD"), "{errs:?}");
        let errs = v
            .check(b"<books>&undeclared;</books>")
            .unwrap()
            .unwrap_err();
        assert!(errs[0].message.contains("well-formed"), "{errs:?}");
    }

    #[test]
    fn includes_imports_and_the_xml_namespace_resolve_locally() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("types")).unwrap();
        std::fs::write(
            dir.path().join("types/amount.xsd"),
            r#"<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema" targetNamespace="urn:t" xmlns="urn:t">
  <xs:simpleType name="Amount"><xs:restriction base="xs:integer"><xs:maxInclusive value="100"/></xs:restriction></xs:simpleType>
</xs:schema>"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join("main.xsd"),
            r#"<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:t="urn:t">
  <xs:import namespace="urn:t" schemaLocation="types/amount.xsd"/>
  <xs:import namespace="http://www.w3.org/XML/1998/namespace" schemaLocation="http://www.w3.org/2001/xml.xsd"/>
  <xs:element name="amount"><xs:complexType><xs:simpleContent><xs:extension base="t:Amount">
    <xs:attribute ref="xml:lang"/>
  </xs:extension></xs:simpleContent></xs:complexType></xs:element>
</xs:schema>"#,
        )
        .unwrap();
        let v = XsdValidator::load("main.xsd", dir.path()).unwrap();
        v.check(b"<amount xml:lang=\"en\">100</amount>")
            .unwrap()
            .unwrap();
        assert!(v.check(b"<amount>101</amount>").unwrap().is_err());
        assert_eq!(v.schema.files().len(), 2);
    }

    #[test]
    fn load_errors_name_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let e = XsdValidator::load("missing.xsd", dir.path()).unwrap_err();
        assert!(e.contains("cannot read"), "{e}");
        std::fs::write(dir.path().join("broken.xsd"), "<xs:schema").unwrap();
        let e = XsdValidator::load("broken.xsd", dir.path()).unwrap_err();
        assert!(e.contains("broken.xsd"), "{e}");
        std::fs::write(dir.path().join("notxsd.xsd"), "<a/>").unwrap();
        let e = XsdValidator::load("notxsd.xsd", dir.path()).unwrap_err();
        assert!(e.contains("not an XML Schema"), "{e}");
        std::fs::write(
            dir.path().join("bad-type.xsd"),
            r#"<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema"><xs:element name="a" type="nope"/></xs:schema>"#,
        )
        .unwrap();
        let e = XsdValidator::load("bad-type.xsd", dir.path()).unwrap_err();
        assert!(e.contains("invalid XML Schema"), "{e}");
    }

    #[test]
    fn each_thread_compiles_once_and_forgets_dropped_schemas() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("books.xsd"), BOOKS).unwrap();
        let path = dir.path().to_owned();
        std::thread::spawn(move || {
            let cached = || CONTEXTS.with(|c| c.borrow().len());
            let a = XsdValidator::load("books.xsd", &path).unwrap();
            assert_eq!(cached(), 0);
            a.check(b"<books/>").unwrap().unwrap();
            a.check(b"<books/>").unwrap().unwrap();
            assert_eq!(cached(), 1);
            let b = XsdValidator::load("books.xsd", &path).unwrap();
            drop(a);
            b.check(b"<books/>").unwrap().unwrap();
            assert_eq!(cached(), 1, "the dropped schema's context is purged");
        })
        .join()
        .unwrap();
    }
}
