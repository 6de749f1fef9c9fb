//! SOAP and XML: `xmlProtection`, `validator` (with `wsdl:`), `wsdl2openapi` and the
//! `soapProxy:` document.

use std::collections::BTreeMap;
use std::net::IpAddr;

use schemars::JsonSchema;
use serde::Deserialize;

use super::{PolicyConfig, SslConfig, TargetConfig};
use crate::units::{ByteSize, Flag};

/// `xmlProtection`: checks XML bodies in one streaming pass; entities are never expanded.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct XmlProtectionPolicy {
    /// Most attributes (namespace declarations included) on one element (default 1000).
    #[serde(default)]
    pub max_attribute_count: Option<u64>,
    /// Longest element name, prefix included, in bytes (default 1000).
    #[serde(default)]
    pub max_element_name_length: Option<u64>,
    /// Deepest element nesting (default 512).
    #[serde(default)]
    pub max_depth: Option<u64>,
    /// Largest message (default: the gateway's `limits.maxBodySize`); larger → 413.
    #[serde(default)]
    pub max_size: Option<ByteSize>,
    /// Longest run of character data in an element (default: no limit beyond `maxSize`).
    #[serde(default)]
    pub max_text_length: Option<ByteSize>,
    /// Remove a document type declaration from the message (default true); `false` rejects
    /// messages that carry one.
    #[serde(default, rename = "removeDTD")]
    pub remove_dtd: Option<Flag>,
}

/// `validator`: validates messages. Today: SOAP messages against a WSDL.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ValidatorPolicy {
    /// The WSDL (a file relative to this config file, or an `http(s)://` URL fetched at load).
    /// Inside a `soapProxy`, defaults to the proxy's WSDL.
    #[serde(default)]
    pub wsdl: Option<String>,
    /// Which service of the WSDL to validate against, when it has several (default: all
    /// operations of all its SOAP bindings).
    #[serde(default)]
    pub service_name: Option<String>,
}

/// `wsdl2openapi`: offers the operations of a WSDL as a REST/JSON API and talks SOAP to the
/// target.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Wsdl2OpenApiPolicy {
    /// The WSDL (a file relative to this config file, or an `http(s)://` URL fetched at load).
    pub wsdl: String,
    /// Which service of the WSDL to offer, when it has several.
    #[serde(default)]
    pub service_name: Option<String>,
    /// Which port of the service to use, when it has several (default: the first SOAP port).
    #[serde(default)]
    pub port_name: Option<String>,
    /// Per-operation REST mapping (default: `POST <api path>/<operation in kebab-case>`).
    #[serde(default)]
    pub operations: BTreeMap<String, RestOperation>,
}

/// How one WSDL operation is offered over REST.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RestOperation {
    /// HTTP method (default POST).
    #[serde(default)]
    pub method: Option<String>,
    /// Path below the API's path; `{name}` segments fill the request element's child `name`
    /// (default `/<operation in kebab-case>`). Query parameters fill children of the same name.
    #[serde(default)]
    pub path: Option<String>,
}

/// A SOAP API (`soapProxy:` document): path and target come from the WSDL's service address.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SoapProxyConfig {
    /// A name for logs (default: the WSDL's service name).
    #[serde(default)]
    pub name: Option<String>,
    /// Free text.
    #[serde(default)]
    pub description: Option<String>,
    /// The port to listen on.
    pub port: u16,
    /// The address to bind; all addresses when absent.
    #[serde(default)]
    pub ip: Option<IpAddr>,
    /// Space-separated host names this API answers for.
    #[serde(default)]
    pub host: Option<String>,
    /// The WSDL: a file relative to this config file, or an `http(s)://` URL fetched at load.
    pub wsdl: String,
    /// Which service of the WSDL to proxy, when it has several.
    #[serde(default)]
    pub service_name: Option<String>,
    /// Which port of the service to use, when it has several (default: the first SOAP port).
    #[serde(default)]
    pub port_name: Option<String>,
    /// The path to listen on (default: the path of the service address).
    #[serde(default)]
    pub path: Option<String>,
    /// The policies run for each request (and, in reverse, each response).
    #[serde(default)]
    pub flow: Vec<PolicyConfig>,
    /// Where requests go (default: the service address of the WSDL).
    #[serde(default)]
    pub target: Option<TargetConfig>,
    /// TLS to clients, as for `api` (the published WSDL then names `https://` addresses).
    #[serde(default)]
    pub ssl: Option<SslConfig>,
    /// Accept cleartext HTTP/2 with prior knowledge, as for `api`.
    #[serde(default)]
    pub h2c: Flag,
}
