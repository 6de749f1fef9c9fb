//! `soapBody`: Membrane's policy that sets the body of the message in the phase it runs in to a
//! SOAP envelope whose `Body` holds a template (`src`), with the SOAP version's content type; as
//! [`static`](crate::static_body) does for any body.

use http::HeaderValue;
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_config::units::Flag;
use turnpike_core::PolicyFactory;
use turnpike_core::{BodyNeed, CompileContext, CompileError, Exchange, Outcome, Policy};

use crate::err;
use crate::static_body::Static;

/// `soapBody`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SoapBodySettings {
    /// The content of the envelope's `Body`; may hold templates.
    pub src: String,
    /// The SOAP version: `1.1` (default) or `1.2`.
    #[serde(default)]
    pub version: Option<String>,
    /// Re-indent the envelope.
    #[serde(default)]
    pub pretty: Flag,
}

/// The compiled `soapBody` policy.
#[derive(Debug)]
pub struct SoapBody(Static);

impl PolicyFactory for SoapBody {
    const NAME: &'static str = "soapBody";
    type Settings = SoapBodySettings;

    fn compile(c: SoapBodySettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        let (envelope, content_type) = match c.version.as_deref().map(str::trim) {
            None | Some("1.1") => (
                ("s11", "http://schemas.xmlsoap.org/soap/envelope/"),
                "text/xml; charset=utf-8",
            ),
            Some("1.2") => (
                ("s12", "http://www.w3.org/2003/05/soap-envelope"),
                "application/soap+xml; charset=utf-8",
            ),
            Some(other) => {
                return Err(err(
                    "version",
                    format!("`{other}` is not a SOAP version: `1.1` or `1.2`"),
                ))
            }
        };
        Ok(SoapBody(Static {
            name: "soapBody",
            src: crate::language::no_groovy(&c.src)
                .and_then(|()| crate::language::compile_template(&c.src, None, ctx))
                .map_err(|m| err("src", m))?,
            content_type: HeaderValue::from_static(content_type),
            delay: None,
            pretty: c.pretty.0,
            envelope: Some(envelope),
        }))
    }
}

impl Policy for SoapBody {
    fn name(&self) -> &'static str {
        "soapBody"
    }

    fn body_need(&self) -> BodyNeed {
        self.0.body_need()
    }

    fn response_body_need(&self) -> BodyNeed {
        self.0.response_body_need()
    }

    /// Sets the request's body to the envelope.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        self.0.on_request(ex)
    }

    /// Sets the response's body to the envelope.
    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        self.0.on_response(ex)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{exchange, plain};

    #[test]
    fn the_template_goes_in_the_versions_envelope() {
        let p = SoapBody::compile(
            serde_json::from_value(serde_json::json!({
                "src": "<a xmlns=\"urn:x\">${header.X-City}</a>", "version": "1.2", "pretty": true
            }))
            .unwrap(),
            &plain(),
        )
        .unwrap();
        let mut ex = exchange("POST", "/", &[("x-city", "Bonn")], "");
        assert!(matches!(p.on_request(&mut ex), Outcome::Continue));
        let body = String::from_utf8(ex.request_bytes().unwrap().to_vec()).unwrap();
        assert_eq!(
            body,
            "<s12:Envelope xmlns:s12=\"http://www.w3.org/2003/05/soap-envelope\">\n  <s12:Body>\n    <a xmlns=\"urn:x\">Bonn</a>\n  </s12:Body>\n</s12:Envelope>\n"
        );
        assert_eq!(
            ex.request.headers["content-type"],
            "application/soap+xml; charset=utf-8"
        );
        let e = SoapBody::compile(
            serde_json::from_value(serde_json::json!({"src": "x", "version": "2"})).unwrap(),
            &plain(),
        )
        .err()
        .unwrap();
        assert!(format!("{e:?}").contains("not a SOAP version"), "{e:?}");
    }
}
