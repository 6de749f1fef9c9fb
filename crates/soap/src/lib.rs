//! Turnpike's SOAP and XML support: `xmlProtection` (one streaming pass, entities never
//! expanded), WSDL loading with its XML Schemas compiled by libxml2, the `validator` (SOAP
//! 1.1/1.2 messages against a WSDL, XML against an XML Schema, JSON against a JSON Schema),
//! SOAP faults, what a `soapProxy` needs (the WSDL publisher),
//! `wsdl2openapi` (REST/JSON in front of SOAP, with an XSD type model in [`xsd`]),
//! Membrane's demo CityService (`sampleSoapService`), and `transform` (XSLT 1.0 with libxslt,
//! through `turnpike-xslt`).
//!
//! Everything here is compiled once when a configuration is loaded; libxml2 objects, which are
//! not thread-safe, live in per-worker thread-local caches (see [`schema`]).

pub mod fault;
pub mod fetch;
pub mod json_schema_validator;
pub mod names;
pub mod protection;
pub mod publish;
pub mod quick;
pub mod sample_service;
pub mod schema;
pub mod service;
pub mod transform;
pub mod validation;
pub mod validator;
pub mod ws_security;
pub mod wsdl;
pub mod wsdl2openapi;
pub mod wsdl_publisher;
pub mod xml;
mod xml_input;
pub mod xpath;
pub mod xsd;
pub mod xsd_validator;

pub use fault::{fault_response, problem_to_fault, FaultCode};
pub use fetch::Location;
pub use protection::XmlProtection;
pub use publish::{PublicAddress, WsdlPublisher};
pub use sample_service::SampleSoapService;
pub use transform::Transform;
pub use validator::{Validator, WsdlValidator};
pub use ws_security::WsSecurity;
pub use wsdl::{SoapVersion, Wsdl};
pub use wsdl2openapi::Wsdl2OpenApi;
pub use wsdl_publisher::PublishWsdl;
