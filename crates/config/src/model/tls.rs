//! TLS settings: `api.ssl` (the gateway's certificates, protocols, client certificates) and
//! `target.ssl` (how the gateway speaks TLS to a backend).

use schemars::JsonSchema;
use serde::Deserialize;

use crate::units::Flag;

/// `ssl:` on an API: its listener speaks TLS.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(try_from = "SslInput")]
pub struct SslConfig {
    /// The certificate and key as a PKCS#12 keystore.
    pub keystore: Option<Keystore>,
    /// The certificate chain as a PEM file (leaf first), with `key`.
    pub certificate: Option<String>,
    /// The private key as a PEM file (PKCS#8, PKCS#1 or SEC1), with `certificate`.
    pub key: Option<String>,
    /// TLS versions offered: `TLSv1.2`, `TLSv1.3` (default both).
    pub protocols: Vec<String>,
    /// Cipher suites offered, by IANA name (default: rustls' modern suites).
    pub ciphers: Vec<String>,
    /// Ask clients for a certificate (mutual TLS).
    pub client_auth: Option<ClientAuth>,
    /// Log failed TLS handshakes as warnings (default); `false` logs them at debug level.
    pub show_ssl_exceptions: bool,
}

/// `ssl:` on an API as written: `key` is a PEM file, or Membrane's
/// `{ private: { location }, certificates: [ { location } ] }`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SslInput {
    /// The certificate and key as a PKCS#12 keystore.
    #[serde(default)]
    pub keystore: Option<Keystore>,
    /// The certificate chain as a PEM file (leaf first), with `key`.
    #[serde(default)]
    pub certificate: Option<String>,
    /// The private key as a PEM file (PKCS#8, PKCS#1 or SEC1), with `certificate`; or
    /// Membrane's form with the key and the certificate chain.
    #[serde(default)]
    pub key: Option<KeyInput>,
    /// TLS versions offered: `TLSv1.2`, `TLSv1.3` (default both).
    #[serde(default)]
    pub protocols: Vec<String>,
    /// Cipher suites offered, by IANA name (default: rustls' modern suites).
    #[serde(default)]
    pub ciphers: Vec<String>,
    /// Ask clients for a certificate (mutual TLS): `{ truststore, required }`, or Membrane's
    /// `need` / `want` with `truststore` beside it.
    #[serde(default)]
    pub client_auth: Option<ClientAuthInput>,
    /// Membrane's place for the CAs of client certificates, used with `clientAuth: need` or
    /// `want` (without `clientAuth`, as in Membrane, it asks clients for nothing).
    #[serde(default)]
    pub truststore: Option<Truststore>,
    /// Log failed TLS handshakes as warnings (default true, Membrane's `showSSLExceptions`);
    /// `false` logs them at debug level.
    #[serde(default, rename = "showSSLExceptions")]
    pub show_ssl_exceptions: Option<Flag>,
}

/// `ssl.key`: a PEM file, or Membrane's key with its certificates.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum KeyInput {
    /// The private key's PEM file.
    File(String),
    /// Membrane's form.
    Membrane(MembraneKey),
}

/// Membrane's `key: { private: { location }, certificates: [ { location } ] }`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MembraneKey {
    /// The private key's PEM file.
    pub private: PemFile,
    /// The certificate chain's PEM file (one file, leaf first).
    pub certificates: Vec<PemFile>,
}

/// A PEM file.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PemFile {
    /// The file, relative to the config file.
    pub location: String,
}

impl TryFrom<SslInput> for SslConfig {
    type Error = String;

    fn try_from(i: SslInput) -> Result<Self, String> {
        let (certificate, key) = match i.key {
            None => (i.certificate, None),
            Some(KeyInput::File(k)) => (i.certificate, Some(k)),
            Some(KeyInput::Membrane(m)) => {
                if i.certificate.is_some() {
                    return Err(
                        "`key.certificates` and `certificate` both give the chain: keep one".into(),
                    );
                }
                match m.certificates.as_slice() {
                    [one] => (Some(one.location.clone()), Some(m.private.location)),
                    _ => {
                        return Err(
                            "`key.certificates` needs exactly one PEM file with the whole chain, leaf first".into(),
                        )
                    }
                }
            }
        };
        let client_auth = match (i.client_auth, i.truststore) {
            (None, _) => None,
            (Some(ClientAuthInput::Full(c)), None) => Some(c),
            (Some(ClientAuthInput::Full(_)), Some(_)) => {
                return Err(
                    "`truststore` beside `clientAuth: { truststore }`: give the CAs once".into(),
                )
            }
            (Some(ClientAuthInput::Mode(m)), t) => {
                let required = match m.to_ascii_lowercase().as_str() {
                    "need" | "true" => true,
                    "want" => false,
                    other => {
                        return Err(format!(
                            "`clientAuth: {other}`: `need`, `want`, or `{{ truststore, required }}`"
                        ))
                    }
                };
                let Some(truststore) = t else {
                    return Err(format!(
                        "`clientAuth: {m}` needs `truststore`: the CAs client certificates chain to"
                    ));
                };
                Some(ClientAuth {
                    truststore,
                    required: Some(Flag(required)),
                })
            }
        };
        Ok(SslConfig {
            keystore: i.keystore,
            certificate,
            key,
            protocols: i.protocols,
            ciphers: i.ciphers,
            client_auth,
            show_ssl_exceptions: i.show_ssl_exceptions.is_none_or(|f| f.0),
        })
    }
}

impl JsonSchema for SslConfig {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        SslInput::schema_name()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        SslInput::json_schema(generator)
    }
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

/// `clientAuth` as written.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ClientAuthInput {
    /// Membrane's `need` (a certificate is required) or `want` (verified when presented).
    Mode(String),
    /// `{ truststore, required }`.
    Full(ClientAuth),
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
    /// Log failed TLS handshakes with the backend as warnings (default true, Membrane's
    /// `showSSLExceptions`); `false` logs them at debug level.
    #[serde(default, rename = "showSSLExceptions")]
    pub show_ssl_exceptions: Option<Flag>,
}
