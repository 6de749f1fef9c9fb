//! `webServer`: Membrane's static file server. Answers `GET` and `HEAD` requests with the file
//! the request's path names below `docBase`: a directory's `index` file (or, with
//! `generateIndex`, a listing), 404 for what is not there. The path is checked before any file
//! is touched (no `..`, no encoded separators, no hidden names) and the file found must lie
//! inside `docBase` once links are resolved. Files are read off the event loop (tokio's file
//! I/O) and streamed; `Last-Modified` and `ETag` answer conditional requests with 304.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Response, StatusCode};
use http_body::Frame;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::{AsyncRead, ReadBuf};
use turnpike_config::units::Flag;
use turnpike_core::body::BodyError;
use turnpike_core::problems;
use turnpike_core::{Body, CompileContext, CompileError, Exchange, Outcome, Phases, Wait};
use turnpike_core::{Policy, PolicyFactory, Problem};

use crate::err;

/// `webServer`'s settings (Membrane's).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WebServerSettings {
    /// The folder served, relative to the configuration file (default `docBase`).
    #[serde(default = "doc_base")]
    pub doc_base: String,
    /// The files a directory is answered with, comma-separated, first found first
    /// (`index.html,index.htm`).
    #[serde(default)]
    pub index: Option<String>,
    /// Answer a directory without an index file with a listing of its entries.
    #[serde(default)]
    pub generate_index: Flag,
}

fn doc_base() -> String {
    "docBase".to_owned()
}

/// How long finding and opening a file may take.
const FILE_TIMEOUT: Duration = Duration::from_secs(30);

/// The compiled `webServer` policy.
#[derive(Debug)]
pub struct WebServer {
    /// The folder, canonical.
    root: Arc<PathBuf>,
    index: Arc<[String]>,
    generate_index: bool,
}

impl PolicyFactory for WebServer {
    const NAME: &'static str = "webServer";
    const PHASES: Phases = Phases::REQUEST;
    const ANSWERS: bool = true;
    type Settings = WebServerSettings;

    /// Resolves `docBase` (it must be a folder) and splits `index`.
    fn compile(s: WebServerSettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        let dir = ctx.base_dir.join(&s.doc_base);
        let root = std::fs::canonicalize(&dir)
            .map_err(|e| err("docBase", format!("cannot open {}: {e}", dir.display())))?;
        if !root.is_dir() {
            return Err(err("docBase", format!("{} is not a folder", dir.display())));
        }
        let mut index = Vec::new();
        for name in s.index.as_deref().unwrap_or("").split(',') {
            let name = name.trim();
            if name.is_empty() {
                continue;
            }
            if name.contains(['/', '\\']) || name.starts_with('.') {
                return Err(err(
                    "index",
                    format!("`{name}` is not a file name (no folders, no hidden files)"),
                ));
            }
            index.push(name.to_owned());
        }
        Ok(WebServer {
            root: Arc::new(root),
            index: index.into(),
            generate_index: s.generate_index.0,
        })
    }
}

/// Why a request path names no servable file.
#[derive(Debug, PartialEq, Eq)]
enum Refused {
    /// `..`, an encoded `/` or `\`, a NUL, or not UTF-8: 400.
    Malformed,
    /// A hidden name (starting with `.`): 404, as if absent.
    Hidden,
}

/// The segments of a request path, percent-decoded and checked.
fn segments(path: &str) -> Result<Vec<String>, Refused> {
    let mut out = Vec::new();
    for raw in path.split('/') {
        let seg = percent_encoding::percent_decode_str(raw)
            .decode_utf8()
            .map_err(|_| Refused::Malformed)?;
        if seg.is_empty() || seg == "." {
            continue;
        }
        if seg == ".." || seg.contains(['/', '\\', '\0']) {
            return Err(Refused::Malformed);
        }
        if seg.starts_with('.') {
            return Err(Refused::Hidden);
        }
        out.push(seg.into_owned());
    }
    Ok(out)
}

/// What a path resolves to.
enum Found {
    File(PathBuf, std::fs::Metadata),
    /// A directory asked for without its trailing `/`: redirect there.
    Redirect,
    Listing(Vec<(String, bool)>),
    Missing,
}

/// `path` canonical and inside `root`, with its metadata; `None` when absent or outside.
async fn inside(root: &Path, path: &Path) -> Option<(PathBuf, std::fs::Metadata)> {
    let real = tokio::fs::canonicalize(path).await.ok()?;
    if !real.starts_with(root) {
        return None;
    }
    let meta = tokio::fs::metadata(&real).await.ok()?;
    Some((real, meta))
}

async fn find(
    root: Arc<PathBuf>,
    segs: Vec<String>,
    slash: bool,
    index: Arc<[String]>,
    generate_index: bool,
) -> Found {
    let mut path = (*root).clone();
    path.extend(&segs);
    let Some((real, meta)) = inside(&root, &path).await else {
        return Found::Missing;
    };
    if meta.is_file() {
        return Found::File(real, meta);
    }
    if !meta.is_dir() {
        return Found::Missing;
    }
    if !slash && !segs.is_empty() {
        return Found::Redirect;
    }
    for name in index.iter() {
        if let Some((f, m)) = inside(&root, &real.join(name)).await {
            if m.is_file() {
                return Found::File(f, m);
            }
        }
    }
    if !generate_index {
        return Found::Missing;
    }
    let Ok(mut dir) = tokio::fs::read_dir(&real).await else {
        return Found::Missing;
    };
    let mut entries = Vec::new();
    while let Ok(Some(e)) = dir.next_entry().await {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let is_dir = e.file_type().await.is_ok_and(|t| t.is_dir());
        entries.push((name, is_dir));
    }
    entries.sort();
    Found::Listing(entries)
}

/// Membrane's content types by extension, then the registry of `mime_guess`.
fn content_type(path: &Path) -> HeaderValue {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let known = match ext.as_str() {
        "html" | "htm" => Some("text/html; charset=utf-8"),
        "css" => Some("text/css; charset=utf-8"),
        "js" | "mjs" => Some("text/javascript; charset=utf-8"),
        "json" => Some("application/json"),
        "wsdl" | "xsd" | "xml" => Some("text/xml"),
        "txt" => Some("text/plain; charset=utf-8"),
        "svg" => Some("image/svg+xml"),
        _ => None,
    };
    match known {
        Some(t) => HeaderValue::from_static(t),
        None => mime_guess::from_path(path)
            .first()
            .and_then(|m| HeaderValue::from_str(m.as_ref()).ok())
            .unwrap_or(HeaderValue::from_static("application/octet-stream")),
    }
}

/// A file streamed in chunks of 64 KiB.
struct FileBody {
    file: tokio::fs::File,
    buf: Vec<u8>,
    left: u64,
}

impl http_body::Body for FileBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        if this.left == 0 {
            return Poll::Ready(None);
        }
        let want = usize::try_from(this.left.min(64 * 1024)).unwrap_or(64 * 1024);
        this.buf.resize(want, 0);
        let mut rb = ReadBuf::new(&mut this.buf);
        match Pin::new(&mut this.file).poll_read(cx, &mut rb) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(Ok(())) => {
                let n = rb.filled().len();
                if n == 0 {
                    // The file shrank since its length was read.
                    return Poll::Ready(Some(Err("the file ended early".into())));
                }
                this.left -= n as u64;
                Poll::Ready(Some(Ok(Frame::data(Bytes::copy_from_slice(
                    &this.buf[..n],
                )))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.left)
    }
}

/// An HTML page listing `entries` (folders with a trailing `/`).
fn listing(entries: &[(String, bool)]) -> String {
    let mut page = String::from("<!DOCTYPE html>\n<html><body><ul>\n");
    for (name, is_dir) in entries {
        let slash = if *is_dir { "/" } else { "" };
        let href = percent_encoding::utf8_percent_encode(name, percent_encoding::NON_ALPHANUMERIC);
        page.push_str(&format!(
            "<li><a href=\"{href}{slash}\">{}{slash}</a></li>\n",
            turnpike_soap::xml::escape(name)
        ));
    }
    page.push_str("</ul></body></html>\n");
    page
}

/// The validators of a file: its `Last-Modified` and a weak `ETag` of its length and time.
fn validators(meta: &std::fs::Metadata) -> (Option<String>, String) {
    let modified = meta.modified().ok();
    let secs = modified
        .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    (
        modified.map(httpdate::fmt_http_date),
        format!("W/\"{:x}-{secs:x}\"", meta.len()),
    )
}

/// True when the request's `If-None-Match` (or, without it, `If-Modified-Since`) says the
/// client's copy is current.
fn not_modified(req: &http::HeaderMap, etag: &str, meta: &std::fs::Metadata) -> bool {
    if let Some(inm) = req.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()) {
        let bare = etag.trim_start_matches("W/");
        return inm.trim() == "*"
            || inm
                .split(',')
                .any(|t| t.trim().trim_start_matches("W/") == bare);
    }
    let since = req
        .get(header::IF_MODIFIED_SINCE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| httpdate::parse_http_date(v).ok());
    match (since, meta.modified().ok()) {
        (Some(since), Some(m)) => {
            let secs = |t: std::time::SystemTime| {
                t.duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs())
            };
            secs(m) <= secs(since)
        }
        _ => false,
    }
}

fn not_found() -> Outcome {
    Outcome::Reject(Problem::new(&problems::NOT_FOUND).with_detail("no such file"))
}

impl Policy for WebServer {
    fn name(&self) -> &'static str {
        "webServer"
    }

    /// Checks the path, then finds and opens the file off the event loop; answers with it, a
    /// listing, a redirect to a folder's `/`, 304, or a problem (400, 404, 405).
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let head = ex.request.method == Method::HEAD;
        if ex.request.method != Method::GET && !head {
            return Outcome::Reject(
                Problem::new(&problems::METHOD_NOT_ALLOWED)
                    .with_detail("files are read with GET or HEAD")
                    .with_header(header::ALLOW, HeaderValue::from_static("GET, HEAD")),
            );
        }
        let path = ex.request.uri.path().to_owned();
        let segs = match segments(&path) {
            Ok(s) => s,
            Err(Refused::Hidden) => return not_found(),
            Err(Refused::Malformed) => {
                return Outcome::Reject(
                    Problem::new(&problems::BAD_REQUEST)
                        .with_detail("the path is not a file's path"),
                )
            }
        };
        let slash = path.ends_with('/');
        let query = ex.request.uri.query().map(str::to_owned);
        let conditions = ex.request.headers.clone();
        let found = find(
            self.root.clone(),
            segs,
            slash,
            self.index.clone(),
            self.generate_index,
        );
        let future = async move {
            let outcome = match found.await {
                Found::Missing => not_found(),
                Found::Redirect => {
                    // Never `//host` or `\host`: a browser reads those as another site.
                    let path = format!("/{}", path.trim_start_matches(['/', '\\']));
                    let to = match query {
                        Some(q) => format!("{path}/?{q}"),
                        None => format!("{path}/"),
                    };
                    let mut r = Response::new(Body::Empty);
                    *r.status_mut() = StatusCode::MOVED_PERMANENTLY;
                    match HeaderValue::from_str(&to) {
                        Ok(v) => {
                            r.headers_mut().insert(header::LOCATION, v);
                            Outcome::Respond(r)
                        }
                        Err(_) => not_found(),
                    }
                }
                Found::Listing(entries) => {
                    let mut r = Response::new(if head {
                        Body::Empty
                    } else {
                        Body::full(listing(&entries))
                    });
                    r.headers_mut().insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("text/html; charset=utf-8"),
                    );
                    Outcome::Respond(r)
                }
                Found::File(file, meta) => serve(&file, &meta, &conditions, head).await,
            };
            Box::new(move |_: &mut Exchange| outcome) as turnpike_core::policy::Resume
        };
        Outcome::Wait(Wait::new(future, FILE_TIMEOUT, |_| {
            Outcome::Reject(
                Problem::new(&problems::POLICY_TIMEOUT)
                    .with_detail("the file could not be read in time"),
            )
        }))
    }
}

/// The answer with the file (or 304, or only the head for `HEAD`).
async fn serve(
    file: &Path,
    meta: &std::fs::Metadata,
    conditions: &http::HeaderMap,
    head: bool,
) -> Outcome {
    let (modified, etag) = validators(meta);
    let mut r = Response::new(Body::Empty);
    let h = r.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    if let Some(v) = modified.and_then(|m| HeaderValue::from_str(&m).ok()) {
        h.insert(header::LAST_MODIFIED, v);
    }
    if not_modified(conditions, &etag, meta) {
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        return Outcome::Respond(r);
    }
    r.headers_mut()
        .insert(header::CONTENT_TYPE, content_type(file));
    r.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(meta.len()));
    if head {
        return Outcome::Respond(r);
    }
    match tokio::fs::File::open(file).await {
        Ok(f) => {
            *r.body_mut() = Body::stream(FileBody {
                file: f,
                buf: Vec::new(),
                left: meta.len(),
            });
            Outcome::Respond(r)
        }
        Err(e) => {
            tracing::warn!(file = %file.display(), "webServer: cannot open: {e}");
            not_found()
        }
    }
}

#[cfg(test)]
mod tests;
