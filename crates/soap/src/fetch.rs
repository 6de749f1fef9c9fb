//! Where WSDL and XSD documents come from: files (relative locations resolve against the
//! including document's folder) or `http://` URLs, fetched once at load time with a small
//! blocking HTTP/1.0 client (load runs off the request path).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The location of a document.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Location {
    /// A file.
    File(PathBuf),
    /// An `http://` URL.
    Url(String),
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::File(p) => write!(f, "{}", p.display()),
            Location::Url(u) => f.write_str(u),
        }
    }
}

impl Location {
    /// A location as written in a config file in folder `base`.
    pub fn from_config(s: &str, base: &Path) -> Location {
        if is_url(s) {
            Location::Url(s.to_owned())
        } else {
            Location::File(base.join(s))
        }
    }

    /// Resolves `reference` (a `schemaLocation` or `location`) against this document.
    pub fn join(&self, reference: &str) -> Location {
        if is_url(reference) {
            return Location::Url(reference.to_owned());
        }
        if let Some(p) = reference.strip_prefix("file://") {
            return Location::File(PathBuf::from(p));
        }
        match self {
            Location::File(p) => {
                let dir = p.parent().unwrap_or(Path::new(""));
                Location::File(normalize(&dir.join(reference)))
            }
            Location::Url(u) => {
                let Some(rest) = u.strip_prefix("http://").or(u.strip_prefix("https://")) else {
                    return Location::Url(reference.to_owned());
                };
                let scheme_len = u.len() - rest.len();
                let auth_end = rest.find('/').unwrap_or(rest.len());
                let origin = &u[..scheme_len + auth_end];
                let path = rest[auth_end..].split(['?', '#']).next().unwrap_or("");
                let joined = if reference.starts_with('/') {
                    reference.to_owned()
                } else {
                    let dir = path.rfind('/').map_or("/", |i| &path[..=i]);
                    format!("{dir}{reference}")
                };
                let (p, q) = match joined.split_once('?') {
                    Some((p, q)) => (p.to_owned(), format!("?{q}")),
                    None => (joined, String::new()),
                };
                let mut segs: Vec<&str> = Vec::new();
                for s in p.split('/').skip(1) {
                    match s {
                        "." => {}
                        ".." => {
                            segs.pop();
                        }
                        s => segs.push(s),
                    }
                }
                Location::Url(format!("{origin}/{}{q}", segs.join("/")))
            }
        }
    }

    /// Reads the document.
    pub fn read(&self) -> Result<Vec<u8>, String> {
        match self {
            Location::File(p) => {
                std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
            }
            Location::Url(u) => http_get(u),
        }
    }
}

fn is_url(s: &str) -> bool {
    s.starts_with("http://") || s.starts_with("https://")
}

fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// Fetches an `http://` URL (HTTP/1.0, 10 s timeouts, 50 MB at most).
pub fn http_get(url: &str) -> Result<Vec<u8>, String> {
    let fail = |m: String| format!("cannot fetch {url}: {m}");
    let Some(rest) = url.strip_prefix("http://") else {
        return Err(fail("only http:// URLs are supported".into()));
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let path = path.split('#').next().unwrap_or("/");
    let addr_str = if authority.contains(':') && !authority.ends_with(']') {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    let addr = addr_str
        .to_socket_addrs()
        .map_err(|e| fail(e.to_string()))?
        .next()
        .ok_or_else(|| fail("no address".into()))?;
    let timeout = Duration::from_secs(10);
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| fail(e.to_string()))?;
    s.set_read_timeout(Some(timeout))
        .and_then(|_| s.set_write_timeout(Some(timeout)))
        .map_err(|e| fail(e.to_string()))?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: {authority}\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| fail(e.to_string()))?;
    let mut buf = Vec::new();
    s.take(50 << 20)
        .read_to_end(&mut buf)
        .map_err(|e| fail(e.to_string()))?;
    let head_end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| fail("malformed HTTP response".into()))?;
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let status = head.split_whitespace().nth(1).unwrap_or("");
    if status != "200" {
        return Err(fail(format!("HTTP status {status}")));
    }
    let mut body = buf.split_off(head_end + 4);
    if head.lines().any(|l| {
        l.to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked")
    }) {
        body = dechunk(&body).ok_or_else(|| fail("malformed chunked body".into()))?;
    }
    Ok(body)
}

fn dechunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n")?;
        let size_str = std::str::from_utf8(&b[..eol]).ok()?;
        let size = usize::from_str_radix(size_str.split(';').next()?.trim(), 16).ok()?;
        b = &b[eol + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(b.get(..size)?);
        b = b.get(size + 2..)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_relative_locations() {
        let f = Location::File("/a/b/x.wsdl".into());
        assert_eq!(f.join("y.xsd"), Location::File("/a/b/y.xsd".into()));
        assert_eq!(f.join("../c/y.xsd"), Location::File("/a/c/y.xsd".into()));
        let u = Location::Url("http://h:1/s/svc?wsdl".into());
        assert_eq!(u.join("t.xsd"), Location::Url("http://h:1/s/t.xsd".into()));
        assert_eq!(u.join("../t.xsd"), Location::Url("http://h:1/t.xsd".into()));
        assert_eq!(
            u.join("/x?xsd=1"),
            Location::Url("http://h:1/x?xsd=1".into())
        );
        assert_eq!(
            u.join("http://o/z.xsd"),
            Location::Url("http://o/z.xsd".into())
        );
    }

    #[test]
    fn dechunks() {
        assert_eq!(
            dechunk(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").unwrap(),
            b"abcde"
        );
        assert!(dechunk(b"zz\r\n").is_none());
    }
}
