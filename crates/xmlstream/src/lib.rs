//! Streaming XML Schema validation of in-memory messages with libxml2.
//!
//! The `libxml` crate validates a parsed tree: libxml2 builds a document (a node per element,
//! attribute and text), the crate wraps it, the validator walks it and everything is freed
//! again — with a new parser context (and its name dictionary) for every message. For the
//! gateway's per-message validation that is most of the cost. [`StreamValidator`] instead
//! plugs the schema validator into the SAX event stream of one parser context that is reused
//! for every message of a thread (libxml2's `xmlSchemaSAXPlug`, the mechanism behind its own
//! `xmlSchemaValidateStream`), so no tree is built and nothing is set up per message but the
//! input. A [`Watch`] sees the elements near the root as they are read, for the structural
//! checks a caller makes beside the schema (a SOAP envelope's parts and body elements).
//!
//! This is the one crate of the workspace that calls C directly; each `unsafe` block says why
//! it is sound. The documents are parsed without DTD loading, entity substitution or network
//! access (libxml2's defaults plus `XML_PARSE_NONET`); callers reject `<!DOCTYPE` before.

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void, CStr};
use std::ptr;

use libxml::bindings as ffi;
use libxml::error::StructuredError;
use libxml::schemas::SchemaValidationContext;

/// A parser context is replaced once its name dictionary holds this many names: libxml2 keeps
/// every element and attribute name a reused context has read, so a stream of messages with
/// ever new names would otherwise grow it without bound.
const MAX_DICTIONARY_NAMES: c_int = 10_000;

/// Sees the start of every element up to a depth while a document is validated.
pub trait Watch {
    /// Elements at depths below this are reported (0: none; 1: the root; 2: the root and
    /// its children; ...).
    fn max_depth(&self) -> u32;

    /// Called for each element at `depth` (the root is at 0) below [`Watch::max_depth`], in
    /// document order, with its namespace name (empty when it has none) and local name. It
    /// is called from C and must not panic.
    fn start(&mut self, depth: u32, ns: &[u8], local: &[u8]);
}

/// A [`Watch`] that looks at nothing.
pub struct NoWatch;

impl Watch for NoWatch {
    fn max_depth(&self) -> u32 {
        0
    }

    fn start(&mut self, _depth: u32, _ns: &[u8], _local: &[u8]) {}
}

/// The result of validating one document.
#[derive(Debug)]
pub enum Verdict {
    /// Well-formed and valid.
    Valid,
    /// Well-formed but invalid: the validator's errors, in document order.
    Invalid(Vec<StructuredError>),
    /// Not well-formed XML (any schema errors found before the fault are dropped).
    NotWellFormed,
    /// libxml2 could not run (out of memory, a document over 2 GiB).
    Failed(&'static str),
}

/// What the SAX callbacks read and write while a document is parsed.
struct Progress<'w> {
    depth: u32,
    max_depth: u32,
    watch: &'w mut dyn Watch,
}

/// The bytes of a C string that libxml2 passes to a callback (empty for null).
///
/// # Safety
/// `p` is null or points to a NUL-terminated string that outlives the returned slice.
unsafe fn bytes<'a>(p: *const ffi::xmlChar) -> &'a [u8] {
    if p.is_null() {
        return &[];
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    unsafe { CStr::from_ptr(p.cast::<c_char>()) }.to_bytes()
}

/// SAX2 start of an element: reports it to the watch and goes one level deeper.
unsafe extern "C" fn on_start(
    ctx: *mut c_void,
    localname: *const ffi::xmlChar,
    _prefix: *const ffi::xmlChar,
    uri: *const ffi::xmlChar,
    _nb_namespaces: c_int,
    _namespaces: *mut *const ffi::xmlChar,
    _nb_attributes: c_int,
    _nb_defaulted: c_int,
    _attributes: *mut *const ffi::xmlChar,
) {
    if ctx.is_null() {
        return;
    }
    // SAFETY: the parser's user data is the `Progress` that `validate` set for the duration of
    // the parse (the schema plug hands the callbacks the user data it found when plugged);
    // nothing else refers to it while libxml2 runs.
    let progress = unsafe { &mut *ctx.cast::<Progress<'_>>() };
    if progress.depth < progress.max_depth {
        // SAFETY: libxml2 passes NUL-terminated names from its dictionary, alive during the call.
        let (ns, local) = unsafe { (bytes(uri), bytes(localname)) };
        progress.watch.start(progress.depth, ns, local);
    }
    progress.depth = progress.depth.saturating_add(1);
}

/// SAX2 end of an element: one level up.
unsafe extern "C" fn on_end(
    ctx: *mut c_void,
    _localname: *const ffi::xmlChar,
    _prefix: *const ffi::xmlChar,
    _uri: *const ffi::xmlChar,
) {
    if ctx.is_null() {
        return;
    }
    // SAFETY: as in `on_start`.
    let progress = unsafe { &mut *ctx.cast::<Progress<'_>>() };
    progress.depth = progress.depth.saturating_sub(1);
}

/// Tells the validator the line the parser is at, for the line numbers of its errors.
unsafe extern "C" fn locate(
    ctx: *mut c_void,
    file: *mut *const c_char,
    line: *mut c_ulong,
) -> c_int {
    let ctxt = ctx.cast::<ffi::xmlParserCtxt>();
    if ctxt.is_null() {
        return -1;
    }
    // SAFETY: `ctx` is the parser context `validate` registered for the duration of the parse;
    // libxml2 calls the locator only then, with out-pointers that are null or writable.
    unsafe {
        let input = (*ctxt).input;
        if !file.is_null() {
            *file = ptr::null();
        }
        if input.is_null() {
            if !line.is_null() {
                *line = 0;
            }
            return -1;
        }
        if !line.is_null() {
            *line = c_ulong::try_from((*input).line).unwrap_or(0);
        }
    }
    0
}

/// A libxml2 parser context, reused for the documents that one thread validates.
pub struct StreamValidator {
    ctxt: ffi::xmlParserCtxtPtr,
}

impl std::fmt::Debug for StreamValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StreamValidator")
    }
}

impl StreamValidator {
    /// A parser context whose SAX handler reports element starts and ends only (no tree).
    /// `None` when libxml2 cannot allocate it.
    pub fn new() -> Option<StreamValidator> {
        // SAFETY: plain constructor; the result is checked for null.
        let ctxt = unsafe { ffi::xmlNewParserCtxt() };
        if ctxt.is_null() {
            return None;
        }
        // SAFETY: `ctxt` is a valid, exclusively owned context; its `sax` handler was
        // allocated with it (freed by `xmlFreeParserCtxt`) and is replaced field by field.
        unsafe {
            let sax = (*ctxt).sax;
            if sax.is_null() {
                ffi::xmlFreeParserCtxt(ctxt);
                return None;
            }
            // All callbacks null (no tree, no DTD handling, no error printing) but these.
            ptr::write_bytes(sax, 0, 1);
            (*sax).initialized = ffi::XML_SAX2_MAGIC as c_uint;
            (*sax).startElementNs = Some(on_start);
            (*sax).endElementNs = Some(on_end);
            (*ctxt).userData = ptr::null_mut();
        }
        Some(StreamValidator { ctxt })
    }

    /// Parses `document` and validates it against `schema` in the same pass, reporting the
    /// elements near the root to `watch`. Returns the verdict; the errors of an invalid
    /// document are taken out of `schema`'s log (its warnings are dropped).
    pub fn validate(
        &mut self,
        schema: &mut SchemaValidationContext,
        document: &[u8],
        watch: &mut dyn Watch,
    ) -> Verdict {
        let Ok(len) = c_int::try_from(document.len()) else {
            return Verdict::Failed("the document is larger than libxml2 can read");
        };
        let vctxt = schema.as_ptr();
        let mut progress = Progress {
            depth: 0,
            max_depth: watch.max_depth(),
            watch,
        };
        let ctxt = self.ctxt;
        // SAFETY: `ctxt` is this validator's own live context and `vctxt` the schema context's
        // (borrowed mutably, so unused elsewhere). The user data points at `progress`, which
        // outlives the parse and is unset again before returning; the plug is undone before
        // returning, and the locator removed. `document` outlives the read, which copies it.
        let (well_formed, valid) = unsafe {
            (*ctxt).userData = (&raw mut progress).cast::<c_void>();
            let plug =
                ffi::xmlSchemaSAXPlug(vctxt, &raw mut (*ctxt).sax, &raw mut (*ctxt).userData);
            if plug.is_null() {
                (*ctxt).userData = ptr::null_mut();
                return Verdict::Failed("libxml2 could not plug the schema validator in");
            }
            ffi::xmlSchemaValidateSetLocator(vctxt, Some(locate), ctxt.cast::<c_void>());
            let doc = ffi::xmlCtxtReadMemory(
                ctxt,
                document.as_ptr().cast::<c_char>(),
                len,
                ptr::null(),
                ptr::null(),
                ffi::xmlParserOption_XML_PARSE_NONET as c_int,
            );
            if !doc.is_null() {
                // Not expected: no callback builds a tree.
                ffi::xmlFreeDoc(doc);
            }
            let well_formed = (*ctxt).wellFormed != 0;
            let valid = ffi::xmlSchemaIsValid(vctxt) == 1;
            ffi::xmlSchemaSAXUnplug(plug);
            ffi::xmlSchemaValidateSetLocator(vctxt, None, ptr::null_mut());
            (*ctxt).userData = ptr::null_mut();
            // Frees the input (the copy of the document) now rather than at the next read.
            ffi::xmlCtxtReset(ctxt);
            (well_formed, valid)
        };
        self.renew_if_grown();
        let errors = schema.drain_errors();
        if !well_formed {
            return Verdict::NotWellFormed;
        }
        if valid {
            return Verdict::Valid;
        }
        let errors: Vec<StructuredError> = errors
            .into_iter()
            .filter(|e| !matches!(e.level, libxml::error::XmlErrorLevel::Warning))
            .collect();
        Verdict::Invalid(errors)
    }

    /// Replaces the context when its name dictionary has grown past [`MAX_DICTIONARY_NAMES`].
    fn renew_if_grown(&mut self) {
        // SAFETY: `self.ctxt` is live; its dictionary pointer is null or valid.
        let names = unsafe {
            let dict = (*self.ctxt).dict;
            if dict.is_null() {
                0
            } else {
                ffi::xmlDictSize(dict)
            }
        };
        if names > MAX_DICTIONARY_NAMES {
            if let Some(fresh) = StreamValidator::new() {
                *self = fresh; // the old context is freed by its drop
            }
        }
    }
}

impl Drop for StreamValidator {
    fn drop(&mut self) {
        // SAFETY: the context is exclusively owned, not in use (no parse is running: `validate`
        // borrows `self` mutably) and freed once.
        unsafe { ffi::xmlFreeParserCtxt(self.ctxt) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libxml::schemas::SchemaParserContext;

    const XSD: &str = r#"<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema" targetNamespace="urn:t" xmlns:t="urn:t">
  <xs:element name="person">
    <xs:complexType>
      <xs:sequence>
        <xs:element name="name" type="xs:string"/>
        <xs:element name="age" type="xs:int" minOccurs="0"/>
        <xs:element ref="t:tag" minOccurs="0" maxOccurs="unbounded"/>
      </xs:sequence>
    </xs:complexType>
  </xs:element>
  <xs:element name="tag" type="xs:string"/>
</xs:schema>"#;

    fn schema() -> SchemaValidationContext {
        let mut parser = SchemaParserContext::from_buffer(XSD);
        SchemaValidationContext::from_parser(&mut parser).unwrap()
    }

    #[derive(Default)]
    struct Seen(Vec<(u32, String, String)>);

    impl Watch for Seen {
        fn max_depth(&self) -> u32 {
            2
        }
        fn start(&mut self, depth: u32, ns: &[u8], local: &[u8]) {
            self.0.push((
                depth,
                String::from_utf8_lossy(ns).into_owned(),
                String::from_utf8_lossy(local).into_owned(),
            ));
        }
    }

    #[test]
    fn verdicts_errors_lines_and_watched_elements() {
        let mut schema = schema();
        let mut v = StreamValidator::new().unwrap();
        let ok = r#"<t:person xmlns:t="urn:t"><name>Jane</name><age>41</age><t:tag><x/></t:tag></t:person>"#;
        let ok = ok.replace("<x/>", "");
        let mut seen = Seen::default();
        assert!(matches!(
            v.validate(&mut schema, ok.as_bytes(), &mut seen),
            Verdict::Valid
        ));
        assert_eq!(
            seen.0,
            vec![
                (0, "urn:t".into(), "person".into()),
                (1, "".into(), "name".into()),
                (1, "".into(), "age".into()),
                (1, "urn:t".into(), "tag".into()),
            ]
        );
        // The same context validates the next documents from a clean state.
        let bad = "<t:person xmlns:t=\"urn:t\">\n<name>Jane</name>\n<age>old</age></t:person>";
        match v.validate(&mut schema, bad.as_bytes(), &mut NoWatch) {
            Verdict::Invalid(errors) => {
                assert_eq!(errors.len(), 1, "{errors:?}");
                assert_eq!(errors[0].line, Some(3));
                assert!(errors[0].message.as_deref().unwrap().contains("'old'"));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            v.validate(&mut schema, ok.as_bytes(), &mut NoWatch),
            Verdict::Valid
        ));
        assert!(matches!(
            v.validate(
                &mut schema,
                b"<t:person xmlns:t=\"urn:t\"><name>",
                &mut NoWatch
            ),
            Verdict::NotWellFormed
        ));
        assert!(matches!(
            v.validate(&mut schema, b"", &mut NoWatch),
            Verdict::NotWellFormed
        ));
        assert!(matches!(
            v.validate(&mut schema, b"<other/>", &mut NoWatch),
            Verdict::Invalid(_)
        ));
        // Undeclared entities are errors, never expanded.
        assert!(matches!(
            v.validate(
                &mut schema,
                b"<t:person xmlns:t=\"urn:t\"><name>&x;</name></t:person>",
                &mut NoWatch
            ),
            Verdict::NotWellFormed
        ));
        assert!(matches!(
            v.validate(&mut schema, ok.as_bytes(), &mut NoWatch),
            Verdict::Valid
        ));
    }

    #[test]
    fn the_context_is_renewed_when_its_dictionary_grows() {
        let mut schema = schema();
        let mut v = StreamValidator::new().unwrap();
        for i in 0..300 {
            let names: String = (0..50).map(|j| format!("<n{i}x{j}/>")).collect();
            let doc = format!("<t:person xmlns:t=\"urn:t\"><name>a</name>{names}</t:person>");
            assert!(matches!(
                v.validate(&mut schema, doc.as_bytes(), &mut NoWatch),
                Verdict::Invalid(_)
            ));
        }
        // SAFETY: test inspection of the live context's dictionary size.
        let names = unsafe { ffi::xmlDictSize((*v.ctxt).dict) };
        assert!(names <= MAX_DICTIONARY_NAMES, "{names}");
        let ok = r#"<t:person xmlns:t="urn:t"><name>Jane</name></t:person>"#;
        assert!(matches!(
            v.validate(&mut schema, ok.as_bytes(), &mut NoWatch),
            Verdict::Valid
        ));
    }
}
