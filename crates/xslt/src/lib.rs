//! XSLT 1.0 transformations with libxslt, the XSLT library of the libxml2 project, for the
//! gateway's `transform` policy. The `libxslt` crate provides the bindings and links the
//! library; this crate is the small safe layer the gateway needs on top of them: compiling a
//! stylesheet with its error messages, applying it with string parameters, serializing the
//! result as `xsl:output` says, and fencing in what a stylesheet may read and write.
//!
//! A [`Stylesheet`] is not `Send`: libxslt does not document that one compiled stylesheet may
//! be applied from several threads at once, so a caller compiles one per thread and keeps it
//! there (the gateway's workers each compile on first use).
//!
//! What a transformation may touch:
//! - The input is parsed without network access, DTD loading or entity substitution, and a
//!   document with a document type declaration is refused, so no entity is ever expanded.
//! - Reading from the network, writing files or to the network and creating folders are
//!   refused (libxslt's security preferences).
//! - At run time (`document()`) only files in the stylesheet's folder or below may be read,
//!   parsed like the input (no network, no DTD, no entities). While a stylesheet is compiled,
//!   its `xsl:import`s and `xsl:include`s may name any local file, as the configuration that
//!   names the stylesheet may; they are listed by [`Stylesheet::files`].
//!
//! Errors: libxslt reports through a C-variadic callback, which a small C shim (`shim.c`)
//! formats; libxml2 (XPath, parsing) reports to a per-thread structured handler that is
//! installed for the duration of each call. Both are collected per thread and returned as
//! messages. Each `unsafe` block says why it is sound.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::ptr::{self, NonNull};
use std::sync::OnceLock;

use libxslt::bindings as ffi;

/// The most bytes of messages kept per call.
const MAX_MESSAGE_BYTES: usize = 8192;

/// The deepest nesting of templates and instructions libxslt allows (its default is 3000).
/// Each level takes C stack of the thread that transforms: measured with libxslt 1.1.35,
/// recursive named templates overflow a 2 MiB stack (a gateway worker's) from about 7,000
/// levels; 2000 keeps a margin of more than three times, and still allows several hundred
/// recursive calls (a call takes two to four levels).
const MAX_TEMPLATE_DEPTH: c_int = 2000;

const fn option(o: ffi::xmlParserOption) -> c_int {
    o as c_int
}

/// libxml2 reports are collected, not printed.
const QUIET: c_int = option(ffi::xmlParserOption_XML_PARSE_NOERROR)
    | option(ffi::xmlParserOption_XML_PARSE_NOWARNING);

/// How a stylesheet is parsed: libxslt's own options (`XSLT_PARSE_OPTIONS`: entities
/// substituted, a DTD loaded for its defaults, CDATA as text) without network access.
const STYLESHEET_OPTIONS: c_int = option(ffi::xmlParserOption_XML_PARSE_NOENT)
    | option(ffi::xmlParserOption_XML_PARSE_DTDLOAD)
    | option(ffi::xmlParserOption_XML_PARSE_DTDATTR)
    | option(ffi::xmlParserOption_XML_PARSE_NOCDATA)
    | option(ffi::xmlParserOption_XML_PARSE_NONET)
    | QUIET;

/// How the input and the documents `document()` reads are parsed: no network, no DTD loading,
/// no entity substitution; CDATA sections are text, as in the XPath data model.
const INPUT_OPTIONS: c_int = option(ffi::xmlParserOption_XML_PARSE_NONET)
    | option(ffi::xmlParserOption_XML_PARSE_NOCDATA)
    | QUIET;

extern "C" {
    /// Sets the function the shim hands each formatted report to (`shim.c`).
    fn turnpike_xslt_set_report(f: Option<unsafe extern "C" fn(text: *const c_char)>);
    /// The generic error handler given to libxslt (`shim.c`).
    fn turnpike_xslt_generic_error(ctx: *mut c_void, msg: *const c_char, ...);
    /// libxml2's `xmlSetStructuredErrorFunc`, declared with the handler's error parameter as
    /// `const xmlError *` (libxml2 2.12 and later); older versions declare it `xmlError *`,
    /// the same in the ABI.
    #[link_name = "xmlSetStructuredErrorFunc"]
    fn set_structured_error_func(
        ctx: *mut c_void,
        handler: Option<unsafe extern "C" fn(data: *mut c_void, error: *const ffi::xmlError)>,
    );
}

/// What the current call of this thread collects and allows.
#[derive(Default)]
struct Scope {
    /// What libxslt and libxml2 reported, up to [`MAX_MESSAGE_BYTES`].
    text: String,
    /// A stylesheet is being compiled: local files may be read, and are recorded.
    compiling: bool,
    /// The files read while compiling (canonical paths).
    read: Vec<PathBuf>,
    /// A transformation runs: the folder (canonical) whose files it may read.
    root: Option<PathBuf>,
}

impl Scope {
    fn note(&mut self, text: &str) {
        let room = MAX_MESSAGE_BYTES.saturating_sub(self.text.len());
        let mut end = text.len().min(room);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        self.text.push_str(&text[..end]);
    }

    fn may_read(&mut self, path: &Path) -> bool {
        let Ok(real) = std::fs::canonicalize(path) else {
            return false;
        };
        if self.compiling {
            if !self.read.contains(&real) {
                self.read.push(real);
            }
            return true;
        }
        self.root
            .as_ref()
            .is_some_and(|root| real.starts_with(root))
    }
}

thread_local! {
    static SCOPE: RefCell<Scope> = RefCell::new(Scope::default());
}

/// Runs `f` on this thread's scope; does nothing when the scope is not available (while the
/// thread ends, or re-entered from a callback).
fn with_scope<T>(f: impl FnOnce(&mut Scope) -> T) -> Option<T> {
    SCOPE
        .try_with(|s| s.try_borrow_mut().ok().map(|mut s| f(&mut s)))
        .ok()
        .flatten()
}

/// Receives libxslt's formatted reports from the shim.
///
/// # Safety
/// `text` is null or a NUL-terminated string valid for the call.
unsafe extern "C" fn report(text: *const c_char) {
    if text.is_null() {
        return;
    }
    // SAFETY: non-null and NUL-terminated by the contract above; only read during the call.
    let text = unsafe { CStr::from_ptr(text) }.to_string_lossy();
    with_scope(|s| s.note(&text));
}

/// Receives libxml2's errors (XPath, parsing) while a call of this crate runs.
///
/// # Safety
/// `error` is null or points to an error that is valid for the call.
unsafe extern "C" fn structured(_data: *mut c_void, error: *const ffi::xmlError) {
    if error.is_null() {
        return;
    }
    // SAFETY: non-null, and valid for the call by the contract above.
    let e = unsafe { &*error };
    if e.message.is_null() {
        return;
    }
    // SAFETY: libxml2's messages are NUL-terminated strings owned by the error.
    let message = unsafe { CStr::from_ptr(e.message) }.to_string_lossy();
    let line = if e.line > 0 {
        format!("line {}: ", e.line)
    } else {
        String::new()
    };
    with_scope(|s| s.note(&format!("{line}{}\n", message.trim_end())));
}

/// libxslt's check for reading a local file (`document()`, `xsl:import`, `xsl:include`):
/// 1 allows it, 0 refuses it.
///
/// # Safety
/// `value` is null or a NUL-terminated path valid for the call.
unsafe extern "C" fn check_read(
    _sec: ffi::xsltSecurityPrefsPtr,
    _ctxt: ffi::xsltTransformContextPtr,
    value: *const c_char,
) -> c_int {
    if value.is_null() {
        return 0;
    }
    // SAFETY: non-null and NUL-terminated by the contract above; only read during the call.
    let Some(path) = path_of(unsafe { CStr::from_ptr(value) }) else {
        return 0;
    };
    c_int::from(with_scope(|s| s.may_read(&path)).unwrap_or(false))
}

#[cfg(unix)]
fn path_of(s: &CStr) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(s.to_bytes())))
}

#[cfg(not(unix))]
fn path_of(s: &CStr) -> Option<PathBuf> {
    s.to_str().ok().map(PathBuf::from)
}

#[cfg(unix)]
fn c_path(p: &Path) -> Option<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(p.as_os_str().as_bytes()).ok()
}

#[cfg(not(unix))]
fn c_path(p: &Path) -> Option<CString> {
    CString::new(p.to_str()?).ok()
}

/// libxslt's security preferences, created once.
struct Prefs(NonNull<ffi::xsltSecurityPrefs>);

// SAFETY: the preferences are written only in `init`, before the value is published through
// the `OnceLock`; afterwards libxslt only reads them, from any thread.
unsafe impl Send for Prefs {}
// SAFETY: as above: shared read-only after initialisation.
unsafe impl Sync for Prefs {}

static PREFS: OnceLock<Option<Prefs>> = OnceLock::new();

/// The security preferences, after the process-wide set-up (once): libxml2 and libxslt
/// initialised, EXSLT registered, the error handler and the security preferences installed.
/// `None` when libxslt could not allocate them.
fn prefs() -> Option<ffi::xsltSecurityPrefsPtr> {
    PREFS.get_or_init(init).as_ref().map(|p| p.0.as_ptr())
}

fn init() -> Option<Prefs> {
    // SAFETY: process-wide initialisation, idempotent in both libraries; run once (the
    // `OnceLock`) before this crate makes any other libxslt call.
    unsafe {
        ffi::xmlInitParser();
        ffi::xsltInit();
    }
    libxslt::register_exslt();
    // SAFETY: `report` has the signature the shim calls; the shim's pointer is set before the
    // handler is installed, and both are set once, under the `OnceLock`.
    unsafe {
        turnpike_xslt_set_report(Some(report));
        ffi::xsltSetGenericErrorFunc(ptr::null_mut(), Some(turnpike_xslt_generic_error));
    }
    // SAFETY: writes libxslt's global maximum template depth once, before any transformation
    // context (which copies it) is created by this crate.
    unsafe {
        ffi::xsltMaxDepth = MAX_TEMPLATE_DEPTH;
    }
    // SAFETY: allocates the preferences; null on failure.
    let sec = NonNull::new(unsafe { ffi::xsltNewSecurityPrefs() })?;
    let forbid: ffi::xsltSecurityCheck = Some(ffi::xsltSecurityForbid);
    let checks = [
        (
            ffi::xsltSecurityOption_XSLT_SECPREF_READ_FILE,
            Some(check_read as _),
        ),
        (ffi::xsltSecurityOption_XSLT_SECPREF_WRITE_FILE, forbid),
        (
            ffi::xsltSecurityOption_XSLT_SECPREF_CREATE_DIRECTORY,
            forbid,
        ),
        (ffi::xsltSecurityOption_XSLT_SECPREF_READ_NETWORK, forbid),
        (ffi::xsltSecurityOption_XSLT_SECPREF_WRITE_NETWORK, forbid),
    ];
    for (option, check) in checks {
        // SAFETY: `sec` is valid; the checks are functions with libxslt's signature that live
        // for the whole process.
        if unsafe { ffi::xsltSetSecurityPrefs(sec.as_ptr(), option, check) } != 0 {
            return None;
        }
    }
    // SAFETY: the preferences stay alive for the rest of the process (never freed). The
    // default applies to the files a stylesheet imports and includes while it is compiled.
    unsafe { ffi::xsltSetDefaultSecurityPrefs(sec.as_ptr()) };
    Some(Prefs(sec))
}

/// One compilation or transformation on this thread: the thread's scope is set for it, and
/// libxml2's structured error handler of the thread replaced until it ends. Calls do not nest.
struct Call {
    saved_handler: ffi::xmlStructuredErrorFunc,
    saved_data: *mut c_void,
}

impl Call {
    fn begin(compiling: bool, root: Option<PathBuf>) -> Call {
        with_scope(|s| {
            *s = Scope {
                compiling,
                root,
                ..Scope::default()
            }
        });
        // SAFETY: reads this thread's handler and its data (libxml2 keeps them per thread)
        // to restore them in `drop`; `structured` has libxml2's handler signature and needs
        // no data.
        unsafe {
            let saved = Call {
                saved_handler: *ffi::__xmlStructuredError(),
                saved_data: *ffi::__xmlStructuredErrorContext(),
            };
            set_structured_error_func(ptr::null_mut(), Some(structured));
            saved
        }
    }

    /// The reports collected so far, a line each.
    fn messages(&self) -> Vec<String> {
        with_scope(|s| {
            s.text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
    }

    /// The reports joined with `; `, or `otherwise` when there are none.
    fn summary(&self, otherwise: &str) -> String {
        let m = self.messages();
        if m.is_empty() {
            otherwise.to_owned()
        } else {
            m.join("; ")
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        // SAFETY: puts back the handler and data this thread had when the call began.
        unsafe { ffi::xmlSetStructuredErrorFunc(self.saved_data, self.saved_handler) };
        with_scope(|s| *s = Scope::default());
    }
}

/// A parsed document, freed when dropped.
struct Doc(NonNull<ffi::xmlDoc>);

impl Drop for Doc {
    fn drop(&mut self) {
        // SAFETY: the document is owned by this value and no longer referenced.
        unsafe { ffi::xmlFreeDoc(self.0.as_ptr()) };
    }
}

/// A transformation context, freed when dropped.
struct Context(NonNull<ffi::xsltTransformContext>);

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the context is owned by this value; it is dropped before the input document
        // it refers to (declared after it).
        unsafe { ffi::xsltFreeTransformContext(self.0.as_ptr()) };
    }
}

/// Parses `text` (located at `url`, which relative references resolve against) with libxml2
/// options `options`; the error names the line of the first fatal error.
fn parse(text: &[u8], url: Option<&CStr>, options: c_int) -> Result<Doc, String> {
    let len =
        c_int::try_from(text.len()).map_err(|_| "the document is larger than 2 GiB".to_owned())?;
    // SAFETY: a constructor without arguments; null when out of memory.
    let ctxt = NonNull::new(unsafe { ffi::xmlNewParserCtxt() })
        .ok_or_else(|| "out of memory".to_owned())?;
    // SAFETY: `ctxt` is valid; `text` is `len` bytes that outlive the call (libxml2 copies
    // what it keeps); `url` is null or NUL-terminated; a null encoding means detection.
    let doc = unsafe {
        ffi::xmlCtxtReadMemory(
            ctxt.as_ptr(),
            text.as_ptr().cast(),
            len,
            url.map_or(ptr::null(), CStr::as_ptr),
            ptr::null(),
            options,
        )
    };
    let result = match NonNull::new(doc) {
        Some(d) => Ok(Doc(d)),
        None => Err(last_error(ctxt)),
    };
    // SAFETY: the context is ours and no longer used; a document it built keeps its own
    // reference to the context's dictionary.
    unsafe { ffi::xmlFreeParserCtxt(ctxt.as_ptr()) };
    result
}

/// The last error of a parser context, `line N: message`.
fn last_error(ctxt: NonNull<ffi::xmlParserCtxt>) -> String {
    // SAFETY: `ctxt` is a valid parser context; the error it returns belongs to it and is read
    // before the context is freed.
    let e = unsafe { ffi::xmlCtxtGetLastError(ctxt.as_ptr().cast()) };
    if e.is_null() {
        return "not well-formed XML".to_owned();
    }
    // SAFETY: non-null, owned by the context, which is alive.
    let e = unsafe { &*e };
    if e.message.is_null() {
        return "not well-formed XML".to_owned();
    }
    // SAFETY: libxml2's messages are NUL-terminated strings owned by the error.
    let message = unsafe { CStr::from_ptr(e.message) }.to_string_lossy();
    if e.line > 0 {
        format!("line {}: {}", e.line, message.trim_end())
    } else {
        message.trim_end().to_owned()
    }
}

/// Why a transformation did not produce a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The input is not well-formed XML, or has a document type declaration: where and why.
    NotXml(String),
    /// The stylesheet failed on the input: a run-time error, `xsl:message terminate="yes"`,
    /// a refused read or write. libxslt's messages, joined with `; `.
    Failed(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::NotXml(m) => write!(f, "the input is not XML: {m}"),
            Error::Failed(m) => write!(f, "the transformation failed: {m}"),
        }
    }
}

impl std::error::Error for Error {}

/// The result of a transformation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// The result, serialized as the stylesheet's `xsl:output` says (method, encoding, XML
    /// declaration, indentation).
    pub body: Vec<u8>,
    /// What the stylesheet reported on the way (`xsl:message`, warnings), a line each.
    pub messages: Vec<String>,
}

/// A compiled XSLT stylesheet, for use on the thread that compiled it.
pub struct Stylesheet {
    ptr: NonNull<ffi::xsltStylesheet>,
    /// The folder (canonical) whose files `document()` may read.
    root: PathBuf,
    /// The local files read while compiling (imports and includes), canonical.
    files: Vec<PathBuf>,
}

impl std::fmt::Debug for Stylesheet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stylesheet")
            .field("root", &self.root)
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl Drop for Stylesheet {
    fn drop(&mut self) {
        // SAFETY: the stylesheet (and the document it took over) is owned by this value.
        unsafe { ffi::xsltFreeStylesheet(self.ptr.as_ptr()) };
    }
}

impl Stylesheet {
    /// Compiles the stylesheet `text`, read from the file at `path`: relative imports,
    /// includes and `document()` references resolve against it, and its folder is the one
    /// `document()` may read. Called when a configuration is loaded (to report errors) and on
    /// each thread's first use. Returns the stylesheet, or libxslt's messages (naming the file,
    /// line and element) when it is not well-formed or not a valid XSLT stylesheet.
    pub fn compile(text: &[u8], path: &Path) -> Result<Stylesheet, String> {
        prefs().ok_or_else(|| "libxslt could not be initialised".to_owned())?;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let root = std::fs::canonicalize(dir)
            .map_err(|e| format!("the folder {} cannot be read: {e}", dir.display()))?;
        let url = c_path(path).ok_or_else(|| format!("{}: not a usable path", path.display()))?;
        let call = Call::begin(true, None);
        let doc = parse(text, Some(&url), STYLESHEET_OPTIONS)?;
        // SAFETY: `doc` is a valid document. On success libxslt takes it over (freed with the
        // stylesheet); on failure it stays ours and `doc` frees it.
        let style = unsafe { ffi::xsltParseStylesheetDoc(doc.0.as_ptr()) };
        match NonNull::new(style) {
            Some(ptr) => {
                std::mem::forget(doc);
                let files = with_scope(|s| std::mem::take(&mut s.read)).unwrap_or_default();
                Ok(Stylesheet { ptr, root, files })
            }
            None => Err(call.summary("not an XSLT stylesheet")),
        }
    }

    /// The local files the stylesheet imported or included when it was compiled.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// Applies the stylesheet to the XML document `input`, with `params` as string values of
    /// the stylesheet's top-level `xsl:param`s (a name that is not an XML name, a name given
    /// twice, or a value with a NUL character is left out; a parameter the stylesheet does not
    /// declare is ignored). Called per message; returns the serialized result, or why there is
    /// none.
    pub fn transform(&self, input: &[u8], params: &[(&str, &str)]) -> Result<Output, Error> {
        let sec =
            prefs().ok_or_else(|| Error::Failed("libxslt could not be initialised".into()))?;
        let call = Call::begin(false, Some(self.root.clone()));
        let doc = parse(input, None, INPUT_OPTIONS).map_err(Error::NotXml)?;
        // SAFETY: `doc` is a valid document.
        if !unsafe { ffi::xmlGetIntSubset(doc.0.as_ptr()) }.is_null() {
            return Err(Error::NotXml(
                "the document has a document type declaration".into(),
            ));
        }
        // SAFETY: the stylesheet and the document are valid; null when out of memory.
        let ctxt = unsafe { ffi::xsltNewTransformContext(self.ptr.as_ptr(), doc.0.as_ptr()) };
        let ctxt =
            Context(NonNull::new(ctxt).ok_or_else(|| Error::Failed("out of memory".into()))?);
        // SAFETY: the context is valid; the preferences live for the rest of the process.
        unsafe {
            ffi::xsltSetCtxtSecurityPrefs(sec, ctxt.0.as_ptr());
            ffi::xsltSetCtxtParseOptions(ctxt.0.as_ptr(), INPUT_OPTIONS);
        }
        let mut strings: Vec<CString> = Vec::with_capacity(params.len() * 2);
        let mut names: Vec<&str> = Vec::with_capacity(params.len());
        for (name, value) in params {
            if !is_ncname(name) || names.contains(name) {
                continue;
            }
            let (Ok(n), Ok(v)) = (CString::new(*name), CString::new(*value)) else {
                continue;
            };
            names.push(name);
            strings.push(n);
            strings.push(v);
        }
        let mut pointers: Vec<*const c_char> = strings.iter().map(|s| s.as_ptr()).collect();
        pointers.push(ptr::null());
        // SAFETY: the context is valid; `pointers` is a NULL-terminated list of name/value
        // pairs of NUL-terminated strings (`strings`) that outlive the call; libxslt copies
        // the values it keeps.
        if unsafe { ffi::xsltQuoteUserParams(ctxt.0.as_ptr(), pointers.as_mut_ptr()) } != 0 {
            return Err(Error::Failed(call.summary("the parameters were refused")));
        }
        // SAFETY: stylesheet, document and context are valid and belong together (the context
        // was made for them); no output file or profile.
        let result = unsafe {
            ffi::xsltApplyStylesheetUser(
                self.ptr.as_ptr(),
                doc.0.as_ptr(),
                ptr::null_mut(),
                ptr::null(),
                ptr::null_mut(),
                ctxt.0.as_ptr(),
            )
        };
        let result = Doc(NonNull::new(result)
            .ok_or_else(|| Error::Failed(call.summary("the transformation failed")))?);
        let mut text: *mut ffi::xmlChar = ptr::null_mut();
        let mut len: c_int = 0;
        // SAFETY: the result document and the stylesheet are valid; libxslt allocates the
        // text, which is copied and freed below.
        let rc = unsafe {
            ffi::xsltSaveResultToString(&mut text, &mut len, result.0.as_ptr(), self.ptr.as_ptr())
        };
        let body = if text.is_null() {
            Vec::new()
        } else {
            let n = usize::try_from(len).unwrap_or(0);
            // SAFETY: libxslt wrote `len` bytes at `text`.
            let bytes = unsafe { std::slice::from_raw_parts(text.cast_const(), n) }.to_vec();
            // SAFETY: reads libxml2's deallocator, set when the library was initialised.
            let free = unsafe { ffi::xmlFree };
            if let Some(free) = free {
                // SAFETY: `text` was allocated by libxml2's allocator and is not used again.
                unsafe { free(text.cast()) };
            }
            bytes
        };
        if rc != 0 {
            return Err(Error::Failed(
                call.summary("the result could not be serialized"),
            ));
        }
        Ok(Output {
            body,
            messages: call.messages(),
        })
    }
}

/// True for an XML name without a prefix (`NCName`): the names a parameter may have.
fn is_ncname(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '\u{B7}'))
}

#[cfg(test)]
mod tests;
