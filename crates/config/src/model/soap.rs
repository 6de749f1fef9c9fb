//! The `soapProxy:` document: a SOAP API whose path and target come from a WSDL.

use std::net::IpAddr;

use schemars::JsonSchema;
use serde::Deserialize;

use super::{PolicyConfig, SslConfig, TargetConfig};
use crate::units::Flag;

/// `soapProxy.path`: a path, or Membrane's `{ uri }`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum SoapPath {
    /// The path.
    Path(String),
    /// Membrane's form.
    Uri {
        /// The path.
        uri: String,
    },
}

impl SoapPath {
    /// The path.
    pub fn as_str(&self) -> &str {
        match self {
            SoapPath::Path(p) | SoapPath::Uri { uri: p } => p,
        }
    }
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
    /// The path to listen on (default: the path of the service address): a path, or
    /// Membrane's `{ uri: /path }`.
    #[serde(default)]
    pub path: Option<SoapPath>,
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
