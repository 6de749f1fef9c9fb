//! The `?wsdl` endpoint of a `soapProxy`: answers `GET <path>?wsdl` with the WSDL, its SOAP
//! addresses rewritten to the gateway (`http://<Host of the request><address path>`). The WSDL
//! is split around its addresses once at load; a request only joins the pieces.
//!
//! Documents the WSDL refers to by a relative location (`wsdl:import`, `xsd:import`,
//! `xsd:include`, `xsd:redefine`, also within those documents) are served too, at
//! `GET <path>?xsd=N`, and the references are rewritten to `?xsd=N` (which a client resolves
//! against the WSDL's URL), so that a client reading `?wsdl` through the gateway finds them.

use std::collections::HashMap;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Response, StatusCode};
use turnpike_core::{Body, Exchange, Outcome, Policy};

use crate::fetch::Location;
use crate::wsdl::{Wsdl, WSDL_NS, XSD_NS};
use crate::xml::{self, Element};

#[derive(Debug)]
enum Piece {
    Text(String),
    /// `http(s)://` + the request's host goes here.
    Origin,
}

/// Serves the WSDL at `?wsdl`.
#[derive(Debug)]
pub struct WsdlPublisher {
    scheme: &'static str,
    pieces: Vec<Piece>,
    documents: Vec<Bytes>,
}

/// The documents served at `?xsd=N`, each once.
#[derive(Default)]
struct Documents {
    list: Vec<Bytes>,
    index: HashMap<Location, usize>,
}

fn collect_refs(e: &Element, out: &mut Vec<String>) {
    let attr = if e.ns == XSD_NS && matches!(e.local.as_str(), "import" | "include" | "redefine") {
        e.attr("schemaLocation")
    } else if e.is(WSDL_NS, "import") {
        e.attr("location")
    } else {
        None
    };
    if let Some(v) = attr {
        if !v.contains("://") && !out.iter().any(|o| o == v) {
            out.push(v.to_owned());
        }
    }
    for c in e.elements() {
        collect_refs(c, out);
    }
}

impl Documents {
    /// `text` (read from `at`) with its relative references replaced by `?xsd=N`.
    fn rewrite(&mut self, text: &str, at: &Location) -> String {
        let Ok(root) = xml::parse(text.as_bytes()) else {
            return text.to_owned();
        };
        let mut refs = Vec::new();
        collect_refs(&root, &mut refs);
        let mut out = text.to_owned();
        for r in refs {
            let Some(n) = self.add(at.join(&r)) else {
                continue;
            };
            for attr in ["schemaLocation", "location"] {
                for q in ['"', '\''] {
                    out = out.replace(
                        &format!("{attr}={q}{}{q}", xml::escape(&r)),
                        &format!("{attr}={q}?xsd={n}{q}"),
                    );
                }
            }
        }
        out
    }

    fn add(&mut self, loc: Location) -> Option<usize> {
        if let Some(&n) = self.index.get(&loc) {
            return Some(n);
        }
        if self.list.len() >= 256 {
            return None;
        }
        let text = String::from_utf8(loc.read().ok()?).ok()?;
        let n = self.list.len();
        self.list.push(Bytes::new());
        self.index.insert(loc.clone(), n);
        let rewritten = self.rewrite(&text, &loc);
        self.list[n] = Bytes::from(rewritten);
        Some(n)
    }
}

/// The path of an `http(s)://authority/path` address (`/` when it has none).
pub fn address_path(address: &str) -> &str {
    let rest = address.split_once("://").map_or(address, |(_, r)| r);
    match rest.find('/') {
        Some(i) => &rest[i..],
        None => "/",
    }
}

/// The address a published WSDL shows instead of the gateway's as the client reached it
/// (Membrane's `wsdlRewriter`): for a gateway behind a load balancer or TLS terminator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicAddress {
    /// `scheme://host[:port]`.
    pub origin: String,
    /// The path every SOAP address gets; `None`: the address's own path.
    pub path: Option<String>,
}

impl WsdlPublisher {
    /// Prepares the WSDL text of `wsdl` with every SOAP address made relative to the gateway
    /// (`https` when the gateway's listener has TLS).
    pub fn new(wsdl: &Wsdl, https: bool) -> Self {
        Self::with_address(wsdl, https, None, None)
    }

    /// As [`WsdlPublisher::new`], with every SOAP address's path set to `path` (the path the
    /// proxy serves) when given, and the whole address to `public` when given (its path first).
    /// Runs at load time.
    pub fn with_address(
        wsdl: &Wsdl,
        https: bool,
        public: Option<&PublicAddress>,
        path: Option<&str>,
    ) -> Self {
        let mut addresses: Vec<&str> = wsdl
            .services
            .iter()
            .flat_map(|s| s.ports.iter())
            .map(|p| p.address.as_str())
            .filter(|a| !a.is_empty())
            .collect();
        addresses.sort_by_key(|a| std::cmp::Reverse(a.len()));
        addresses.dedup();
        let mut docs = Documents::default();
        let text = docs.rewrite(&wsdl.text, &wsdl.location);
        let mut pieces = Vec::new();
        let mut rest = text.as_str();
        'outer: while !rest.is_empty() {
            // The earliest `location="<address>"` (either quote) still ahead.
            let mut best: Option<(usize, usize, &str)> = None;
            for a in &addresses {
                for q in ['"', '\''] {
                    let needle = format!("location={q}{a}{q}");
                    if let Some(i) = rest.find(&needle) {
                        if best.is_none_or(|(b, _, _)| i < b) {
                            best = Some((i, needle.len(), a));
                        }
                    }
                }
            }
            let Some((i, len, addr)) = best else {
                pieces.push(Piece::Text(rest.to_owned()));
                break 'outer;
            };
            let quote = &rest[i + 9..i + 10];
            pieces.push(Piece::Text(format!("{}location={quote}", &rest[..i])));
            let own_path = path.unwrap_or(address_path(addr));
            match public {
                Some(p) => {
                    let path = p.path.as_deref().unwrap_or(own_path);
                    pieces.push(Piece::Text(format!(
                        "{}{quote}",
                        crate::xml::escape(&format!("{}{path}", p.origin))
                    )));
                }
                None => {
                    pieces.push(Piece::Origin);
                    pieces.push(Piece::Text(format!(
                        "{}{quote}",
                        crate::xml::escape(own_path)
                    )));
                }
            }
            rest = &rest[i + len..];
        }
        WsdlPublisher {
            scheme: if https { "https://" } else { "http://" },
            pieces,
            documents: docs.list,
        }
    }

    /// The WSDL as served to a client that reached the gateway as `host`.
    pub fn render(&self, host: &str) -> String {
        let mut s = String::new();
        for p in &self.pieces {
            match p {
                Piece::Text(t) => s.push_str(t),
                Piece::Origin => {
                    s.push_str(self.scheme);
                    crate::xml::escape_into(&mut s, host, true);
                }
            }
        }
        s
    }
}

impl Policy for WsdlPublisher {
    fn name(&self) -> &'static str {
        "soapProxy"
    }

    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        if ex.request.method != Method::GET {
            return Outcome::Continue;
        }
        let Some(q) = ex.request.uri.query() else {
            return Outcome::Continue;
        };
        if let Some(n) = q.strip_prefix("xsd=") {
            let Some(doc) = n.parse::<usize>().ok().and_then(|n| self.documents.get(n)) else {
                return Outcome::Continue;
            };
            let mut res = Response::new(Body::full(doc.clone()));
            res.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/xml; charset=utf-8"),
            );
            return Outcome::Respond(res);
        }
        if !q.eq_ignore_ascii_case("wsdl") {
            return Outcome::Continue;
        }
        // HTTP/2 clients send the authority in the URI instead of a `Host` header.
        let host = ex
            .request
            .headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .or_else(|| ex.request.uri.authority().map(|a| a.as_str()))
            .unwrap_or("localhost");
        let mut res = Response::new(Body::full(self.render(host)));
        *res.status_mut() = StatusCode::OK;
        res.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/xml; charset=utf-8"),
        );
        Outcome::Respond(res)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fetch::Location;

    #[test]
    fn addresses_point_to_the_gateway() {
        let w = Wsdl::load(&crate::wsdl::tests::shared("cities.wsdl")).unwrap();
        let p = WsdlPublisher::new(&w, false);
        let out = p.render("gw.example:8080");
        assert!(out.contains("location=\"http://gw.example:8080/city-service\""));
        assert!(!out.contains("localhost:2001"));
        assert_eq!(
            out.len(),
            w.text.len() - "localhost:2001".len() + "gw.example:8080".len()
        );
        let tls = WsdlPublisher::new(&w, true).render("gw.example");
        assert!(tls.contains("location=\"https://gw.example/city-service\""));
        assert_eq!(address_path("http://h:1/a/b"), "/a/b");
        assert_eq!(address_path("http://h:1"), "/");
    }

    #[test]
    fn a_public_address_replaces_the_gateways() {
        let w = Wsdl::load(&crate::wsdl::tests::shared("cities.wsdl")).unwrap();
        let public = PublicAddress {
            origin: "https://my.host.example.com".into(),
            path: None,
        };
        let out = WsdlPublisher::with_address(&w, false, Some(&public), None).render("gw:1");
        assert!(out.contains("location=\"https://my.host.example.com/city-service\""));
        assert!(!out.contains("gw:1"));
        let public = PublicAddress {
            origin: "http://lb:8080".into(),
            path: Some("/my-service".into()),
        };
        let out = WsdlPublisher::with_address(&w, false, Some(&public), None).render("gw:1");
        assert!(
            out.contains("location=\"http://lb:8080/my-service\""),
            "{out}"
        );
        // The path a proxy serves, without a public address.
        let out = WsdlPublisher::with_address(&w, false, None, Some("/proxied")).render("gw:1");
        assert!(out.contains("location=\"http://gw:1/proxied\""), "{out}");
    }

    #[test]
    fn relative_documents_are_served_at_xsd() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("x")).unwrap();
        std::fs::write(
            dir.path().join("x/a.xsd"),
            format!("<xsd:schema xmlns:xsd=\"{XSD_NS}\" targetNamespace=\"urn:a\"><xsd:include schemaLocation=\"b.xsd\"/></xsd:schema>"),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("x/b.xsd"),
            format!("<xsd:schema xmlns:xsd=\"{XSD_NS}\" targetNamespace=\"urn:a\"><xsd:element name=\"e\" type=\"xsd:int\"/></xsd:schema>"),
        )
        .unwrap();
        let cities = std::fs::read_to_string(format!(
            "{}/../../../shared/data/wsdl/cities.wsdl",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let wsdl_text = cities.replace(
            "<xsd:schema targetNamespace=\"https://predic8.de/cities\">",
            "<xsd:schema targetNamespace=\"https://predic8.de/cities\"><xsd:import namespace=\"urn:a\" schemaLocation=\"x/a.xsd\"/>",
        );
        let path = dir.path().join("c.wsdl");
        std::fs::write(&path, wsdl_text).unwrap();
        let w = Wsdl::load(&Location::File(path)).unwrap();
        let p = WsdlPublisher::new(&w, false);
        let out = p.render("gw");
        assert!(out.contains("schemaLocation=\"?xsd=0\""), "{out}");
        assert_eq!(p.documents.len(), 2);
        let a = String::from_utf8(p.documents[0].to_vec()).unwrap();
        assert!(a.contains("schemaLocation=\"?xsd=1\""), "{a}");
        assert!(String::from_utf8(p.documents[1].to_vec())
            .unwrap()
            .contains("name=\"e\""));
    }
}
