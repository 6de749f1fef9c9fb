//! The `?wsdl` endpoint of a `soapProxy`: answers `GET <path>?wsdl` with the WSDL, its SOAP
//! addresses rewritten to the gateway (`http://<Host of the request><address path>`). The WSDL
//! is split around its addresses once at load; a request only joins the pieces.

use http::{header, HeaderValue, Method, Response, StatusCode};
use turnpike_core::{Body, Exchange, Outcome, Policy};

use crate::wsdl::Wsdl;

#[derive(Debug)]
enum Piece {
    Text(String),
    /// `http://` + the request's host goes here.
    Origin,
}

/// Serves the WSDL at `?wsdl`.
#[derive(Debug)]
pub struct WsdlPublisher {
    pieces: Vec<Piece>,
}

/// The path of an `http(s)://authority/path` address (`/` when it has none).
pub fn address_path(address: &str) -> &str {
    let rest = address.split_once("://").map_or(address, |(_, r)| r);
    match rest.find('/') {
        Some(i) => &rest[i..],
        None => "/",
    }
}

impl WsdlPublisher {
    /// Prepares the WSDL text of `wsdl` with every SOAP address made relative to the gateway.
    pub fn new(wsdl: &Wsdl) -> Self {
        let mut addresses: Vec<&str> = wsdl
            .services
            .iter()
            .flat_map(|s| s.ports.iter())
            .map(|p| p.address.as_str())
            .filter(|a| !a.is_empty())
            .collect();
        addresses.sort_by_key(|a| std::cmp::Reverse(a.len()));
        addresses.dedup();
        let mut pieces = Vec::new();
        let mut rest = wsdl.text.as_str();
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
            pieces.push(Piece::Origin);
            pieces.push(Piece::Text(format!("{}{quote}", address_path(addr))));
            rest = &rest[i + len..];
        }
        WsdlPublisher { pieces }
    }

    /// The WSDL as served to a client that reached the gateway as `host`.
    pub fn render(&self, host: &str) -> String {
        let mut s = String::new();
        for p in &self.pieces {
            match p {
                Piece::Text(t) => s.push_str(t),
                Piece::Origin => {
                    s.push_str("http://");
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
        if !q.eq_ignore_ascii_case("wsdl") {
            return Outcome::Continue;
        }
        let host = ex
            .request
            .headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
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
        let w = Wsdl::load(&Location::File(
            format!(
                "{}/../../../shared/data/wsdl/cities.wsdl",
                env!("CARGO_MANIFEST_DIR")
            )
            .into(),
        ))
        .unwrap();
        let p = WsdlPublisher::new(&w);
        let out = p.render("gw.example:8080");
        assert!(out.contains("location=\"http://gw.example:8080/city-service\""));
        assert!(!out.contains("localhost:2001"));
        assert_eq!(
            out.len(),
            w.text.len() - "localhost:2001".len() + "gw.example:8080".len()
        );
        assert_eq!(address_path("http://h:1/a/b"), "/a/b");
        assert_eq!(address_path("http://h:1"), "/");
    }
}
