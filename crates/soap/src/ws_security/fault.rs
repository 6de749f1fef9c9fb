//! WS-Security faults: the fault codes of WS-Security 1.1 (table 12), with their prescribed,
//! deliberately unspecific fault strings, answered as a SOAP fault in the message's version.
//! The concrete reason goes into the fault's detail.

use http::{header, HeaderValue, Response, StatusCode};
use turnpike_core::Body;

/// WS-Security 1.0's `wsse` namespace.
pub const WSSE_NS: &str =
    "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd";

use crate::names::SoapVersion;
use crate::xml::escape;

/// A WS-Security fault code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WsseCode {
    /// The `wsse:Security` header is missing, malformed or ambiguous.
    InvalidSecurity,
    /// A token is present but malformed.
    InvalidSecurityToken,
    /// A token of a kind not processed here.
    UnsupportedSecurityToken,
    /// An algorithm not accepted here.
    UnsupportedAlgorithm,
    /// A token reference that does not resolve.
    SecurityTokenUnavailable,
    /// Wrong credentials, a stale or replayed token.
    FailedAuthentication,
    /// The timestamp's window has passed.
    MessageExpired,
    /// A signature that does not verify or does not cover what it must.
    FailedCheck,
}

impl WsseCode {
    /// The local name of the code (qualified with `wsse:`).
    pub fn local_name(self) -> &'static str {
        match self {
            WsseCode::InvalidSecurity => "InvalidSecurity",
            WsseCode::InvalidSecurityToken => "InvalidSecurityToken",
            WsseCode::UnsupportedSecurityToken => "UnsupportedSecurityToken",
            WsseCode::UnsupportedAlgorithm => "UnsupportedAlgorithm",
            WsseCode::SecurityTokenUnavailable => "SecurityTokenUnavailable",
            WsseCode::FailedAuthentication => "FailedAuthentication",
            WsseCode::MessageExpired => "MessageExpired",
            WsseCode::FailedCheck => "FailedCheck",
        }
    }

    /// The fault string WS-Security prescribes for the code.
    pub fn fault_string(self) -> &'static str {
        match self {
            WsseCode::InvalidSecurity => {
                "An error was discovered processing the <wsse:Security> header."
            }
            WsseCode::InvalidSecurityToken => "An invalid security token was provided.",
            WsseCode::UnsupportedSecurityToken => "An unsupported token was provided.",
            WsseCode::UnsupportedAlgorithm => {
                "An unsupported signature or encryption algorithm was used."
            }
            WsseCode::SecurityTokenUnavailable => {
                "Referenced security token could not be retrieved."
            }
            WsseCode::FailedAuthentication => {
                "The security token could not be authenticated or authorized."
            }
            WsseCode::MessageExpired => "The message has expired.",
            WsseCode::FailedCheck => "The signature or decryption was invalid.",
        }
    }
}

/// Why a message was refused (a WS-Security code) or could not be processed (`code: None`, the
/// gateway's own failure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// The WS-Security code; `None` for an internal failure.
    pub code: Option<WsseCode>,
    /// The concrete reason (the fault's detail).
    pub reason: String,
}

impl Fault {
    /// A fault with a WS-Security code.
    pub fn new(code: WsseCode, reason: impl Into<String>) -> Fault {
        Fault {
            code: Some(code),
            reason: reason.into(),
        }
    }

    /// The gateway's own failure (answered as a `Server`/`Receiver` fault).
    pub fn internal(reason: impl Into<String>) -> Fault {
        Fault {
            code: None,
            reason: reason.into(),
        }
    }
}

/// The fault envelope of `fault` in `version`: `wsse:<Code>` as the SOAP 1.1 `faultcode` or
/// as the SOAP 1.2 `Subcode` of `Sender`, the prescribed fault string, the reason as detail.
pub fn fault_xml(version: SoapVersion, fault: &Fault) -> String {
    let ns = version.envelope_ns();
    let (code, string) = match fault.code {
        Some(c) => (Some(c.local_name()), c.fault_string()),
        None => (None, "WS-Security could not be applied to the message."),
    };
    let mut s = format!(
        "<soapenv:Envelope xmlns:soapenv=\"{ns}\" xmlns:wsse=\"{WSSE_NS}\"><soapenv:Body><soapenv:Fault>"
    );
    match version {
        SoapVersion::V11 => {
            let c = match code {
                Some(c) => format!("wsse:{c}"),
                None => "soapenv:Server".to_owned(),
            };
            s.push_str(&format!(
                "<faultcode>{c}</faultcode><faultstring>{}</faultstring><detail><message>{}</message></detail>",
                escape(string),
                escape(&fault.reason)
            ));
        }
        SoapVersion::V12 => {
            match code {
                Some(c) => s.push_str(&format!(
                    "<soapenv:Code><soapenv:Value>soapenv:Sender</soapenv:Value><soapenv:Subcode><soapenv:Value>wsse:{c}</soapenv:Value></soapenv:Subcode></soapenv:Code>"
                )),
                None => s.push_str(
                    "<soapenv:Code><soapenv:Value>soapenv:Receiver</soapenv:Value></soapenv:Code>",
                ),
            }
            s.push_str(&format!(
                "<soapenv:Reason><soapenv:Text xml:lang=\"en\">{}</soapenv:Text></soapenv:Reason><soapenv:Detail><message>{}</message></soapenv:Detail>",
                escape(string),
                escape(&fault.reason)
            ));
        }
    }
    s.push_str("</soapenv:Fault></soapenv:Body></soapenv:Envelope>");
    s
}

/// The response carrying `fault`: status 500 for SOAP 1.1 (its HTTP binding), 400 for a SOAP
/// 1.2 `Sender` fault and 500 for a `Receiver` one.
pub fn fault_response(version: SoapVersion, fault: &Fault) -> Response<Body> {
    let status = match (version, fault.code) {
        (SoapVersion::V12, Some(_)) => StatusCode::BAD_REQUEST,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let mut res = Response::new(Body::full(fault_xml(version, fault)));
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
