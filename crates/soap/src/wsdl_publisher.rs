//! `wsdlPublisher`: Membrane's publication of a WSDL in a plain API. Answers `GET <path>?wsdl`
//! with the WSDL — every SOAP address rewritten to the gateway as the client reached it
//! (`http(s)://<Host><path>`, the API's path) — and `GET <path>?xsd=N` with the documents it
//! refers to, as a `soapProxy` publishes its own; other requests go on through the flow.

use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::{CompileContext, CompileError, Exchange, Outcome, Phases};
use turnpike_core::{Policy, PolicyFactory};

use crate::fetch::Location;
use crate::publish::WsdlPublisher;
use crate::wsdl::Wsdl;

/// `wsdlPublisher`'s settings.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WsdlPublisherSettings {
    /// The WSDL: a file (relative to the configuration file) or an `http(s)://` URL, read at
    /// load with the documents it imports.
    pub wsdl: String,
}

/// The compiled `wsdlPublisher` policy: the WSDL prepared for `http://` and `https://`
/// clients.
pub struct PublishWsdl {
    http: WsdlPublisher,
    https: WsdlPublisher,
}

impl PolicyFactory for PublishWsdl {
    const NAME: &'static str = "wsdlPublisher";
    const PHASES: Phases = Phases::REQUEST;
    type Settings = WsdlPublisherSettings;

    /// Reads the WSDL and the documents it refers to; the published addresses get the API's
    /// path (the address's own path when the API has none).
    fn compile(c: WsdlPublisherSettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        let wsdl = Wsdl::load(&Location::from_config(&c.wsdl, ctx.base_dir))
            .map_err(|m| CompileError::new("wsdl", m))?;
        let path = Some(ctx.path_prefix).filter(|p| !p.is_empty());
        Ok(PublishWsdl {
            http: WsdlPublisher::with_address(&wsdl, false, None, path),
            https: WsdlPublisher::with_address(&wsdl, true, None, path),
        })
    }
}

impl Policy for PublishWsdl {
    fn name(&self) -> &'static str {
        "wsdlPublisher"
    }

    /// Answers `?wsdl` and `?xsd=N` (`GET`); continues for every other request.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let publisher = if ex.tls { &self.https } else { &self.http };
        publisher.on_request(ex)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use turnpike_core::Body;

    fn exchange(uri: &str, tls: bool) -> Exchange {
        let (parts, _) = http::Request::builder()
            .method("GET")
            .uri(uri)
            .header("host", "gw.example")
            .body(())
            .unwrap()
            .into_parts();
        let mut ex = Exchange::new(
            parts,
            Body::Empty,
            "127.0.0.1:1".parse().unwrap(),
            Default::default(),
        );
        ex.tls = tls;
        ex
    }

    fn body(o: Outcome) -> String {
        match o {
            Outcome::Respond(r) => match r.into_body() {
                Body::Full(Some(b)) => String::from_utf8(b.to_vec()).unwrap(),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn publishes_with_the_apis_path_and_the_clients_scheme() {
        let mut ctx = CompileContext::standalone();
        ctx.path_prefix = "/my-service";
        let c = WsdlPublisherSettings {
            wsdl: format!(
                "{}/../../../shared/data/wsdl/cities.wsdl",
                env!("CARGO_MANIFEST_DIR")
            ),
        };
        let p = PublishWsdl::compile(c.clone(), &ctx).unwrap();
        let out = body(p.on_request(&mut exchange("/my-service?wsdl", false)));
        assert!(
            out.contains("location=\"http://gw.example/my-service\""),
            "{out}"
        );
        let out = body(p.on_request(&mut exchange("/my-service?WSDL", true)));
        assert!(
            out.contains("location=\"https://gw.example/my-service\""),
            "{out}"
        );
        assert!(matches!(
            p.on_request(&mut exchange("/my-service", false)),
            Outcome::Continue
        ));
        let bad = WsdlPublisherSettings {
            wsdl: "missing.wsdl".into(),
        };
        assert_eq!(PublishWsdl::compile(bad, &ctx).err().unwrap().key, "wsdl");
    }
}
