//! `beautifier`: Membrane's policy that re-indents the body of the message in the phase it runs
//! in: JSON (`application/json`, `*+json`) by two spaces, keeping the order of members and the
//! text of every value; XML (`text/xml`, `application/xml`, `*+xml`) by two spaces through
//! quick-xml, keeping declarations, comments, CDATA and processing instructions. A body that is
//! not valid in its content type, or of another type, is passed on unchanged.

use bytes::Bytes;
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::PolicyFactory;
use turnpike_core::{Body, BodyNeed, CompileContext, CompileError, Exchange, Outcome, Policy};

/// `beautifier` (no settings).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BeautifierSettings {}

/// The compiled `beautifier` policy.
#[derive(Debug)]
pub struct Beautifier;

impl PolicyFactory for Beautifier {
    const NAME: &'static str = "beautifier";
    type Settings = BeautifierSettings;

    fn compile(_: BeautifierSettings, _: &CompileContext<'_>) -> Result<Self, CompileError> {
        Ok(Beautifier)
    }
}

/// What a `Content-Type` says the body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Json,
    Xml,
}

fn kind(headers: &http::HeaderMap) -> Option<Kind> {
    let ct = headers.get(http::header::CONTENT_TYPE)?.to_str().ok()?;
    let mime = ct.split(';').next()?.trim().to_ascii_lowercase();
    if mime == "application/json" || mime.ends_with("+json") {
        Some(Kind::Json)
    } else if mime == "text/xml" || mime == "application/xml" || mime.ends_with("+xml") {
        Some(Kind::Xml)
    } else {
        None
    }
}

/// The re-indented body, or `None` to leave it as it is.
fn beautify(kind: Kind, body: &[u8]) -> Option<Vec<u8>> {
    match kind {
        Kind::Json => {
            let text = std::str::from_utf8(body).ok()?;
            serde_json::from_str::<serde::de::IgnoredAny>(text).ok()?;
            Some(crate::pretty::reindent(text).into_bytes())
        }
        Kind::Xml => crate::pretty::xml(body),
    }
}

impl Policy for Beautifier {
    fn name(&self) -> &'static str {
        "beautifier"
    }

    fn body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    fn response_body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    /// Re-indents the request's JSON or XML body.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let Some(k) = kind(&ex.request.headers) else {
            return Outcome::Continue;
        };
        if let Some(pretty) = ex.request_bytes().and_then(|b| beautify(k, b)) {
            ex.request_body = Body::full(Bytes::from(pretty));
            turnpike_core::json::forget_request_json(ex);
            ex.extensions.remove::<turnpike_core::BodyInspected>();
        }
        Outcome::Continue
    }

    /// Re-indents the response's JSON or XML body.
    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        let Some(k) = ex.response.as_ref().and_then(|r| kind(r.headers())) else {
            return Outcome::Continue;
        };
        if let Some(pretty) = ex.response_bytes().and_then(|b| beautify(k, b)) {
            if let Some(res) = ex.response.as_mut() {
                *res.body_mut() = Body::full(Bytes::from(pretty));
            }
            turnpike_core::json::forget_response_json(ex);
        }
        Outcome::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_reindented_keeping_order_and_values() {
        let out = beautify(Kind::Json, br#"{"b":1.50,"a":["x",{}],"c":"1e3"}"#).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\n  \"b\": 1.50,\n  \"a\": [\n    \"x\",\n    {}\n  ],\n  \"c\": \"1e3\"\n}"
        );
        assert!(
            beautify(Kind::Json, b"{\"a\":").is_none(),
            "invalid JSON stays"
        );
    }

    #[test]
    fn xml_is_reindented_keeping_its_parts() {
        let src = br#"<?xml version="1.0"?><a x="1"><!-- c --><b>t &amp; u</b><c/><d><![CDATA[<x>]]></d></a>"#;
        let out = String::from_utf8(beautify(Kind::Xml, src).unwrap()).unwrap();
        assert_eq!(
            out,
            "<?xml version=\"1.0\"?>\n<a x=\"1\">\n  <!-- c -->\n  <b>t &amp; u</b>\n  <c/>\n  <d><![CDATA[<x>]]></d>\n</a>\n"
        );
        for bad in [
            &b"<a><b></a>"[..],
            b"<a>",
            b"<a/><b/>",
            b"text",
            b"<a/>trailing",
        ] {
            assert!(beautify(Kind::Xml, bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn content_types() {
        let mut h = http::HeaderMap::new();
        assert_eq!(kind(&h), None);
        for (ct, k) in [
            ("application/json; charset=utf-8", Some(Kind::Json)),
            ("application/problem+json", Some(Kind::Json)),
            ("text/xml", Some(Kind::Xml)),
            ("application/soap+xml; charset=utf-8", Some(Kind::Xml)),
            ("text/plain", None),
        ] {
            h.insert(http::header::CONTENT_TYPE, ct.parse().unwrap());
            assert_eq!(kind(&h), k, "{ct}");
        }
    }
}
