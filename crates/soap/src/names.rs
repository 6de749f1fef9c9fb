//! Names every part of the SOAP support shares: the namespaces of WSDL, XML Schema and
//! `xsi:`, qualified names, and the SOAP versions.

/// WSDL 1.1 namespace.
pub const WSDL_NS: &str = "http://schemas.xmlsoap.org/wsdl/";
/// WSDL SOAP 1.1 binding namespace.
pub const WSDL_SOAP11_NS: &str = "http://schemas.xmlsoap.org/wsdl/soap/";
/// WSDL SOAP 1.2 binding namespace.
pub const WSDL_SOAP12_NS: &str = "http://schemas.xmlsoap.org/wsdl/soap12/";
/// XML Schema namespace.
pub const XSD_NS: &str = "http://www.w3.org/2001/XMLSchema";

/// The namespace of `xsi:` attributes.
pub const XSI_NS: &str = "http://www.w3.org/2001/XMLSchema-instance";

/// A namespace-qualified name: (namespace URI, local name).
pub type QName = (String, String);

/// The SOAP version of a message or binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SoapVersion {
    /// SOAP 1.1 (`text/xml`, `SOAPAction` header).
    V11,
    /// SOAP 1.2 (`application/soap+xml`, `action` parameter).
    V12,
}

impl SoapVersion {
    /// The envelope namespace.
    pub fn envelope_ns(self) -> &'static str {
        match self {
            SoapVersion::V11 => "http://schemas.xmlsoap.org/soap/envelope/",
            SoapVersion::V12 => "http://www.w3.org/2003/05/soap-envelope",
        }
    }

    /// The version whose envelope namespace is `ns`.
    pub fn from_envelope_ns(ns: &str) -> Option<SoapVersion> {
        match ns {
            "http://schemas.xmlsoap.org/soap/envelope/" => Some(SoapVersion::V11),
            "http://www.w3.org/2003/05/soap-envelope" => Some(SoapVersion::V12),
            _ => None,
        }
    }

    /// The version a request's `Content-Type` announces (SOAP 1.1 unless `application/soap+xml`).
    pub fn from_content_type(ct: Option<&http::HeaderValue>) -> SoapVersion {
        match ct.and_then(|v| v.to_str().ok()) {
            Some(s)
                if s.trim_start()
                    .to_ascii_lowercase()
                    .starts_with("application/soap+xml") =>
            {
                SoapVersion::V12
            }
            _ => SoapVersion::V11,
        }
    }

    /// The media type of messages.
    pub fn media_type(self) -> &'static str {
        match self {
            SoapVersion::V11 => "text/xml",
            SoapVersion::V12 => "application/soap+xml",
        }
    }
}
