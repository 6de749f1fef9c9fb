//! Where WSDL and XSD documents come from: files (relative locations resolve against the
//! including document's folder) or `http(s)://` URLs, fetched once at load time with a blocking
//! client (load runs off the request path).

use std::path::{Path, PathBuf};

use turnpike_config::fetch::Wanted;

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
                let joined = if reference.starts_with('?') {
                    // Only a query: the same document path (RFC 3986, 5.2.2).
                    format!("{path}{reference}")
                } else if reference.starts_with('/') {
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

/// Fetches an `http://` or `https://` URL (a WSDL or a schema, 50 MB at most).
pub fn http_get(url: &str) -> Result<Vec<u8>, String> {
    turnpike_config::fetch::http_get(
        url,
        Wanted {
            accept: "application/wsdl+xml, application/xml, text/xml, */*",
            max_bytes: 50 << 20,
        },
    )
    .map_err(|e| e.to_string())
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
            u.join("?xsd=2"),
            Location::Url("http://h:1/s/svc?xsd=2".into())
        );
        assert_eq!(
            u.join("http://o/z.xsd"),
            Location::Url("http://o/z.xsd".into())
        );
    }
}
