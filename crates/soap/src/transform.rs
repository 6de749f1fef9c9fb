//! `transform`: Membrane's XSLT policy. Applies an XSLT 1.0 stylesheet (libxslt, through
//! `turnpike-xslt`) to the body of the message in the phase it runs in, whatever its
//! `Content-Type`, and replaces the body with the result; the headers stay as they were, but
//! for the length. Every exchange property with a text value is passed to the stylesheet as a
//! string parameter of the same name.
//!
//! The stylesheet is read and compiled when the configuration is loaded (a stylesheet that does
//! not compile is a load error); libxslt does not document that a compiled stylesheet may be
//! applied from several threads at once, so each worker thread compiles its own copy on first
//! use and keeps it in a thread-local cache, as the XML Schemas of [`crate::schema`] are kept.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use bytes::Bytes;
use http::{header, HeaderMap, StatusCode};
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::properties::Properties;
use turnpike_core::{problems, Body, BodyNeed, Exchange, Outcome, Policy, Problem};
use turnpike_core::{CompileContext, CompileError, PolicyFactory};
use turnpike_xslt::{Error, Stylesheet};

/// `transform`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TransformSettings {
    /// The XSLT 1.0 stylesheet: a file, relative to the folder of the configuration file (or
    /// absolute, or a `file:` URL). Without it the body is copied through the identity
    /// transformation (parsed and written again).
    #[serde(default)]
    pub xslt: Option<String>,
}

/// The identity transformation, used when `xslt` is not set (as Membrane does).
const IDENTITY: &str = r#"<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform"><xsl:template match="@*|node()"><xsl:copy><xsl:apply-templates select="@*|node()"/></xsl:copy></xsl:template></xsl:stylesheet>"#;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A stylesheet as read at load: compiled again on each thread that uses it.
#[derive(Debug)]
struct Sheet {
    id: u64,
    text: Vec<u8>,
    path: PathBuf,
    /// The stylesheet's file and the files it imports or includes.
    files: Vec<PathBuf>,
}

/// A thread's compiled copy of a [`Sheet`] (or why it did not compile there).
struct Cached {
    owner: Weak<Sheet>,
    compiled: Result<Stylesheet, String>,
}

thread_local! {
    static COMPILED: RefCell<HashMap<u64, Cached>> = RefCell::new(HashMap::new());
}

impl Sheet {
    /// Runs `f` with this thread's compiled copy, compiling it on the thread's first use (and
    /// dropping the copies of stylesheets no longer loaded). The error says why the copy did
    /// not compile.
    fn with<T>(self: &Arc<Self>, f: impl FnOnce(&Stylesheet) -> T) -> Result<T, String> {
        COMPILED.with(|cell| {
            let mut map = cell
                .try_borrow_mut()
                .map_err(|_| "the stylesheet cache is in use".to_owned())?;
            if !map.contains_key(&self.id) {
                map.retain(|_, c| c.owner.strong_count() > 0);
                let compiled = Stylesheet::compile(&self.text, &self.path);
                map.insert(
                    self.id,
                    Cached {
                        owner: Arc::downgrade(self),
                        compiled,
                    },
                );
            }
            match map.get(&self.id).map(|c| &c.compiled) {
                Some(Ok(s)) => Ok(f(s)),
                Some(Err(e)) => Err(e.clone()),
                None => Err("the stylesheet is not compiled".to_owned()),
            }
        })
    }
}

/// The compiled `transform` policy.
#[derive(Debug)]
pub struct Transform {
    sheet: Arc<Sheet>,
}

/// The file a stylesheet location names, relative to `base`.
fn stylesheet_path(location: &str, base: &Path) -> Result<PathBuf, String> {
    let lower = location.to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        return Err(format!(
            "`{location}`: stylesheets are read from files; save it beside the configuration"
        ));
    }
    if lower.starts_with("classpath:") {
        return Err(format!(
            "`{location}`: there is no classpath; name the stylesheet's file"
        ));
    }
    let file = location
        .strip_prefix("file://")
        .or_else(|| location.strip_prefix("file:"))
        .unwrap_or(location);
    Ok(base.join(file))
}

impl PolicyFactory for Transform {
    const NAME: &'static str = "transform";
    type Settings = TransformSettings;

    /// Reads and compiles the stylesheet; a file that cannot be read or does not compile is a
    /// load error that names it, with libxslt's message.
    fn compile(c: TransformSettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        let err = |m: String| CompileError::new("xslt", m);
        let (text, path, mut files) = match c.xslt.as_deref().map(str::trim) {
            None | Some("") => (
                IDENTITY.as_bytes().to_vec(),
                ctx.base_dir.join("identity.xsl"),
                Vec::new(),
            ),
            Some(location) => {
                let path = stylesheet_path(location, ctx.base_dir).map_err(err)?;
                let text = std::fs::read(&path)
                    .map_err(|e| err(format!("cannot read {}: {e}", path.display())))?;
                (text, path.clone(), vec![path])
            }
        };
        let compiled = Stylesheet::compile(&text, &path)
            .map_err(|e| err(format!("{} does not compile: {e}", path.display())))?;
        files.extend(compiled.files().iter().cloned());
        Ok(Transform {
            sheet: Arc::new(Sheet {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                text,
                path,
                files,
            }),
        })
    }
}

/// Which message the policy works on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Request,
    Response,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Request => "request",
            Phase::Response => "response",
        }
    }
}

/// True when the body is compressed (`Content-Encoding` other than `identity`).
fn compressed(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CONTENT_ENCODING)
        .iter()
        .any(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"))
}

/// The exchange properties with a text value, the parameters Membrane passes.
fn parameters(ex: &Exchange) -> Vec<(String, String)> {
    let Some(props) = ex.extensions.get::<Properties>() else {
        return Vec::new();
    };
    props
        .names()
        .filter_map(|n| match props.get(n) {
            Some(serde_json::Value::String(v)) => Some((n.to_owned(), v.clone())),
            _ => None,
        })
        .collect()
}

/// Logs why the message was refused (libxslt's and libxml2's words stay in the log) and
/// answers with `problem`: the client's body is its mistake (400) where the problem says so,
/// anything on a response is the backend's side (502).
fn refuse(ex: &Exchange, phase: Phase, problem: Problem, why: &str) -> Outcome {
    let request_id = ex.request_id.to_str().unwrap_or("");
    let phase_name = phase.name();
    match phase {
        Phase::Request if problem.kind() == problems::BAD_XML.kind => {
            tracing::info!(
                policy = "transform",
                request_id,
                phase = phase_name,
                "refused the body: {why}"
            );
        }
        _ => {
            tracing::warn!(
                policy = "transform",
                request_id,
                phase = phase_name,
                "the transformation failed: {why}"
            );
        }
    }
    let problem = match phase {
        Phase::Request => problem,
        Phase::Response => problem.with_status(StatusCode::BAD_GATEWAY),
    };
    Outcome::Reject(problem)
}

impl Transform {
    /// Transforms the body of the message `phase` names; a message without a body passes.
    fn run(&self, ex: &mut Exchange, phase: Phase) -> Outcome {
        let (headers, body) = match phase {
            Phase::Request => (&ex.request.headers, ex.request_bytes()),
            Phase::Response => match ex.response.as_ref() {
                Some(r) => (r.headers(), ex.response_bytes()),
                None => return Outcome::Continue,
            },
        };
        let Some(body) = body.filter(|b| !b.is_empty()).cloned() else {
            return Outcome::Continue;
        };
        if compressed(headers) {
            let problem = Problem::new(&problems::BAD_XML).with_detail(
                "the body is compressed (Content-Encoding); transform reads uncompressed XML",
            );
            return refuse(ex, phase, problem, "compressed body");
        }
        if let Some(why) = crate::xml_input::xml_refused_before_parsing(&body) {
            let problem = Problem::new(&problems::BAD_XML).with_detail(why);
            return refuse(ex, phase, problem, why);
        }
        let owned = parameters(ex);
        let params: Vec<(&str, &str)> = owned
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        let out = match self.sheet.with(|s| s.transform(&body, &params)) {
            Ok(Ok(out)) => out,
            Ok(Err(Error::NotXml(why))) => {
                let problem =
                    Problem::new(&problems::BAD_XML).with_detail("the body is not well-formed XML");
                return refuse(ex, phase, problem, &why);
            }
            Ok(Err(Error::Failed(why))) => {
                let problem = Problem::new(&problems::POLICY_FAILED)
                    .with_detail("the XSLT transformation failed");
                return refuse(ex, phase, problem, &why);
            }
            Err(why) => {
                let problem = Problem::new(&problems::POLICY_FAILED)
                    .with_detail("the XSLT stylesheet could not be compiled");
                return refuse(
                    ex,
                    phase,
                    problem,
                    &format!("{}: {why}", self.sheet.path.display()),
                );
            }
        };
        if !out.messages.is_empty() {
            let request_id = ex.request_id.to_str().unwrap_or("");
            for m in &out.messages {
                tracing::info!(
                    policy = "transform",
                    request_id,
                    phase = phase.name(),
                    "stylesheet: {m}"
                );
            }
        }
        let body = Bytes::from(out.body);
        let headers = match phase {
            Phase::Request => {
                ex.request_body = Body::full(body);
                turnpike_core::json::forget_request_json(ex);
                ex.extensions.remove::<turnpike_core::BodyInspected>();
                &mut ex.request.headers
            }
            Phase::Response => {
                turnpike_core::json::forget_response_json(ex);
                let Some(res) = ex.response.as_mut() else {
                    return Outcome::Continue;
                };
                *res.body_mut() = Body::full(body);
                res.headers_mut()
            }
        };
        headers.remove(header::CONTENT_LENGTH);
        headers.remove(header::TRANSFER_ENCODING);
        Outcome::Continue
    }
}

impl Policy for Transform {
    fn name(&self) -> &'static str {
        "transform"
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

    fn files(&self) -> Vec<PathBuf> {
        self.sheet.files.clone()
    }

    /// Transforms the request body; answers 400 `bad-xml` when it is not XML, 500
    /// `policy-failed` when the stylesheet fails on it.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        self.run(ex, Phase::Request)
    }

    /// Transforms the response body; answers 502 (`bad-xml` when it is not XML,
    /// `policy-failed` when the stylesheet fails on it).
    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        self.run(ex, Phase::Response)
    }
}

#[cfg(test)]
mod tests;
