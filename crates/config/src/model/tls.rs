//! TLS settings: `api.ssl` (the gateway's certificates, protocols, client certificates) and
//! `target.ssl` (how the gateway speaks TLS to a backend).

use schemars::JsonSchema;
use serde::Deserialize;

use crate::units::Flag;

/// `ssl:` on an API: its listener speaks TLS.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SslConfig {
    /// The certificate and key as a PKCS#12 keystore.
    #[serde(default)]
    pub keystore: Option<Keystore>,
    /// The certificate chain as a PEM file (leaf first), with `key`.
    #[serde(default)]
    pub certificate: Option<String>,
    /// The private key as a PEM file (PKCS#8, PKCS#1 or SEC1), with `certificate`.
    #[serde(default)]
    pub key: Option<String>,
    /// TLS versions offered: `TLSv1.2`, `TLSv1.3` (default both).
    #[serde(default)]
    pub protocols: Vec<String>,
    /// Cipher suites offered, by IANA name (default: rustls' modern suites).
    #[serde(default)]
    pub ciphers: Vec<String>,
    /// Ask clients for a certificate (mutual TLS).
    #[serde(default)]
    pub client_auth: Option<ClientAuth>,
}

/// A PKCS#12 keystore holding a private key and its certificate chain.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Keystore {
    /// The `.p12` / `.pfx` file, relative to the config file.
    pub location: String,
    /// The keystore password.
    #[serde(default)]
    pub password: Option<String>,
    /// The key password (PKCS#12 files protect key and store with one password: when given it
    /// must equal `password`).
    #[serde(default)]
    pub key_password: Option<String>,
    /// Which key entry to use (default: the only one).
    #[serde(default)]
    pub alias: Option<String>,
}

/// Trusted certificates: a PKCS#12 truststore or a PEM bundle.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Truststore {
    /// A PKCS#12 file with trusted certificates, or a PEM bundle (`.pem`, `.crt`).
    pub location: String,
    /// The PKCS#12 password.
    #[serde(default)]
    pub password: Option<String>,
}

/// Client certificate verification (mutual TLS).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClientAuth {
    /// The CAs that client certificates must chain to.
    pub truststore: Truststore,
    /// Refuse clients without a certificate (default true); `false` verifies certificates
    /// that are presented and lets others through.
    #[serde(default)]
    pub required: Option<Flag>,
}

/// `ssl:` on a target: TLS to the backend.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TargetSsl {
    /// Trust these CAs instead of the system roots.
    #[serde(default)]
    pub truststore: Option<Truststore>,
    /// Present this client certificate (mutual TLS to the backend).
    #[serde(default)]
    pub keystore: Option<Keystore>,
    /// Client certificate as PEM, with `key`.
    #[serde(default)]
    pub certificate: Option<String>,
    /// Client key as PEM, with `certificate`.
    #[serde(default)]
    pub key: Option<String>,
    /// The name sent as SNI and verified in the certificate (default: the target host).
    #[serde(default)]
    pub server_name: Option<String>,
    /// Do not verify the backend's certificate. Never in production; logged as a warning.
    #[serde(default)]
    pub insecure_skip_verify: Flag,
}
