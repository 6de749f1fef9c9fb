//! SOAP faults the gateway answers with, in the SOAP version of the request.
//!
//! SOAP 1.1 faults are sent with status 500 (as its HTTP binding requires); SOAP 1.2 faults with
//! the status of the problem (400 for `Sender`, 500 for `Receiver` faults by default).

use http::{header, HeaderValue, Response, StatusCode};
use turnpike_core::{Body, Problem};

use crate::names::SoapVersion;
use crate::xml::escape;

/// Who is at fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultCode {
    /// The client sent something wrong (`Client` in 1.1, `Sender` in 1.2).
    Client,
    /// The server or backend failed (`Server` in 1.1, `Receiver` in 1.2).
    Server,
}

/// Builds a fault envelope.
pub fn fault_xml(
    version: SoapVersion,
    code: FaultCode,
    reason: &str,
    detail: Option<&str>,
) -> String {
    let ns = version.envelope_ns();
    let mut s = format!("<soapenv:Envelope xmlns:soapenv=\"{ns}\"><soapenv:Body><soapenv:Fault>");
    match version {
        SoapVersion::V11 => {
            let c = match code {
                FaultCode::Client => "soapenv:Client",
                FaultCode::Server => "soapenv:Server",
            };
            s.push_str(&format!(
                "<faultcode>{c}</faultcode><faultstring>{}</faultstring>",
                escape(reason)
            ));
            if let Some(d) = detail {
                s.push_str(&format!(
                    "<detail><message>{}</message></detail>",
                    escape(d)
                ));
            }
        }
        SoapVersion::V12 => {
            let c = match code {
                FaultCode::Client => "soapenv:Sender",
                FaultCode::Server => "soapenv:Receiver",
            };
            s.push_str(&format!(
                "<soapenv:Code><soapenv:Value>{c}</soapenv:Value></soapenv:Code><soapenv:Reason><soapenv:Text xml:lang=\"en\">{}</soapenv:Text></soapenv:Reason>",
                escape(reason)
            ));
            if let Some(d) = detail {
                s.push_str(&format!(
                    "<soapenv:Detail><message>{}</message></soapenv:Detail>",
                    escape(d)
                ));
            }
        }
    }
    s.push_str("</soapenv:Fault></soapenv:Body></soapenv:Envelope>");
    s
}

/// A fault response.
pub fn fault_response(
    version: SoapVersion,
    code: FaultCode,
    reason: &str,
    detail: Option<&str>,
) -> Response<Body> {
    let status = match (version, code) {
        (SoapVersion::V12, FaultCode::Client) => StatusCode::BAD_REQUEST,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    respond(version, status, fault_xml(version, code, reason, detail))
}

fn respond(version: SoapVersion, status: StatusCode, xml: String) -> Response<Body> {
    let mut res = Response::new(Body::full(xml));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(match version {
            SoapVersion::V11 => "text/xml; charset=utf-8",
            SoapVersion::V12 => "application/soap+xml; charset=utf-8",
        }),
    );
    res
}

/// Renders a problem the gateway generated (no route, backend unreachable, a policy's
/// rejection) as a SOAP fault of `version`: the title is the fault string, the detail (and the
/// problem's type) go into the fault's detail. Extra response headers of the problem are kept.
pub fn problem_to_fault(problem: Problem, version: SoapVersion) -> Response<Body> {
    let code = if problem.status.is_client_error() {
        FaultCode::Client
    } else {
        FaultCode::Server
    };
    let detail = match &problem.detail {
        Some(d) => format!("{d} (urn:turnpike:problem:{})", problem.kind()),
        None => format!("urn:turnpike:problem:{}", problem.kind()),
    };
    let status = match version {
        SoapVersion::V11 => StatusCode::INTERNAL_SERVER_ERROR,
        SoapVersion::V12 => problem.status,
    };
    let mut res = respond(
        version,
        status,
        fault_xml(version, code, problem.title(), Some(&detail)),
    );
    for (k, v) in problem.headers {
        res.headers_mut().append(k, v);
    }
    res
}

/// Writes every problem of a SOAP API as a SOAP fault, in the SOAP version of the request's
/// `Content-Type`.
#[derive(Debug)]
pub struct SoapFaults;

impl turnpike_core::RenderProblem for SoapFaults {
    fn render(&self, problem: Problem, content_type: Option<&HeaderValue>) -> Response<Body> {
        problem_to_fault(problem, SoapVersion::from_content_type(content_type))
    }
}

/// Writes the problems of an API that checks SOAP messages (`xmlProtection`, `validator` in a
/// plain `api:`) as SOAP faults for SOAP requests (`text/xml` or `application/soap+xml`), and as
/// problem+json for any other request.
#[derive(Debug)]
pub struct SoapAware;

impl turnpike_core::RenderProblem for SoapAware {
    fn render(&self, problem: Problem, content_type: Option<&HeaderValue>) -> Response<Body> {
        let soap = content_type
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                v.split(';')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_ascii_lowercase()
            })
            .is_some_and(|ct| ct == "text/xml" || ct == "application/soap+xml");
        if soap {
            problem_to_fault(problem, SoapVersion::from_content_type(content_type))
        } else {
            problem.into_response()
        }
    }
}

/// The renderer of APIs that check SOAP messages (see [`SoapAware`]).
pub fn soap_aware() -> std::sync::Arc<dyn turnpike_core::RenderProblem> {
    std::sync::Arc::new(SoapAware)
}

/// The renderer of SOAP APIs' problems (see [`SoapFaults`]).
pub fn soap_faults() -> std::sync::Arc<dyn turnpike_core::RenderProblem> {
    std::sync::Arc::new(SoapFaults)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_are_well_formed_in_both_versions() {
        for v in [SoapVersion::V11, SoapVersion::V12] {
            let x = fault_xml(v, FaultCode::Client, "a <b>", Some("x & y"));
            let root = crate::xml::parse(x.as_bytes()).unwrap();
            assert!(root.is(v.envelope_ns(), "Envelope"));
            assert!(x.contains("a &lt;b&gt;") && x.contains("x &amp; y"));
        }
        let r = fault_response(SoapVersion::V12, FaultCode::Client, "r", None);
        assert_eq!(r.status(), 400);
        let r = problem_to_fault(Problem::no_route(), SoapVersion::V11);
        assert_eq!(r.status(), 500);
        assert_eq!(r.headers()["content-type"], "text/xml; charset=utf-8");
    }
}
