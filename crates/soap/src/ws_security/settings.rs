//! The settings of `wsSecurity` as written in YAML, in Membrane's shapes: `validate` and
//! `secure` lists of single-key maps (`- usernameToken: {...}`), `keystore`, `truststore` and
//! `xmlConfig` beside them.

use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_config::units::{Duration, Flag};

/// `wsSecurity`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WsSecuritySettings {
    /// The SOAP actor (1.1) or role (1.2) whose `wsse:Security` header this policy owns;
    /// default: the header without `actor`/`role` (the ultimate receiver's).
    #[serde(default)]
    pub actor: Option<String>,
    /// Whether the `wsse:Security` header `secure` creates carries `mustUnderstand` (default
    /// true).
    #[serde(default)]
    pub must_understand: Option<Flag>,
    /// This gateway's private key and certificate (PKCS#12): `secure` signs with it.
    #[serde(default)]
    pub keystore: Option<KeystoreSettings>,
    /// The certificates a `validate` signature is trusted with (PKCS#12 or a PEM bundle).
    #[serde(default)]
    pub truststore: Option<TruststoreSettings>,
    /// Namespace prefixes for the `xpath` of signature references.
    #[serde(default)]
    pub xml_config: Option<XmlConfig>,
    /// The checks of the inbound `wsse:Security` header, in order.
    #[serde(default)]
    pub validate: Vec<ValidatePart>,
    /// What is added to the outbound message, in order.
    #[serde(default)]
    pub secure: Vec<SecurePart>,
}

/// `keystore`: a PKCS#12 file with the private key and its certificate.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KeystoreSettings {
    /// The `.p12`/`.pfx` file, relative to the config file.
    pub location: String,
    /// The keystore password.
    #[serde(default)]
    pub password: Option<String>,
    /// The key password (PKCS#12 protects key and store with one password: when given, it
    /// must equal `password`).
    #[serde(default)]
    pub key_password: Option<String>,
    /// The key entry to sign with (default: the only one).
    #[serde(default, alias = "alias")]
    pub key_alias: Option<String>,
}

/// `truststore`: trusted certificates.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TruststoreSettings {
    /// A PKCS#12 file, or a PEM bundle, relative to the config file.
    pub location: String,
    /// The PKCS#12 password.
    #[serde(default)]
    pub password: Option<String>,
}

/// `xmlConfig`: Membrane's namespace declarations for XPath expressions.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct XmlConfig {
    /// Prefix and URI pairs.
    #[serde(default)]
    pub namespaces: Vec<NamespaceDecl>,
}

/// One namespace of `xmlConfig`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NamespaceDecl {
    /// The prefix used in XPath expressions.
    pub prefix: String,
    /// The namespace URI.
    pub uri: String,
}

/// One check of `validate`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub enum ValidatePart {
    /// Requires a `wsse:UsernameToken` of a known user.
    UsernameToken(ValidateUsernameToken),
    /// Requires a fresh `wsu:Timestamp`.
    Timestamp(ValidateTimestamp),
    /// Requires an XML Signature covering the listed elements.
    Signature(ValidateSignature),
    /// XML Encryption: not supported (a load error).
    #[schemars(with = "serde_json::Value")]
    Decrypt(serde_json::Value),
}

/// One step of `secure`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub enum SecurePart {
    /// Adds a `wsse:UsernameToken`.
    UsernameToken(SecureUsernameToken),
    /// Adds a `wsu:Timestamp`.
    Timestamp(SecureTimestamp),
    /// Signs the listed elements.
    Signature(SecureSignature),
    /// XML Encryption: not supported (a load error).
    #[schemars(with = "serde_json::Value")]
    Encrypt(serde_json::Value),
}

/// `validate: - usernameToken`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ValidateUsernameToken {
    /// Membrane's static user list.
    #[serde(default)]
    pub static_user_data_provider: Option<StaticUsers>,
    /// The one expected user name (with `password`), instead of a user list.
    #[serde(default)]
    pub username: Option<String>,
    /// The expected password of `username`.
    #[serde(default)]
    pub password: Option<String>,
    /// How far `wsu:Created` may be from now, and how long a nonce is remembered (default
    /// `PT5M`).
    #[serde(default)]
    pub freshness_window: Option<Duration>,
}

/// `staticUserDataProvider`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StaticUsers {
    /// The users.
    pub users: Vec<StaticUser>,
}

/// A user of `staticUserDataProvider`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StaticUser {
    /// User name.
    pub username: String,
    /// Password, in plain text.
    pub password: String,
}

/// `validate: - timestamp`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ValidateTimestamp {
    /// Tolerance for the sender's clock (default `PT5M`).
    #[serde(default)]
    pub clock_skew: Option<Duration>,
}

/// `secure: - usernameToken`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SecureUsernameToken {
    /// User name (a template: `${property.user}` works).
    pub username: String,
    /// Password (a template).
    pub password: String,
    /// `PLAIN_TEXT` (default) or `DIGEST`.
    #[serde(default)]
    pub password_type: Option<PasswordType>,
}

/// How the password is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PasswordType {
    /// `#PasswordText`: the password itself.
    PlainText,
    /// `#PasswordDigest`: Base64(SHA-1(nonce + created + password)), with a nonce and created.
    Digest,
}

/// `secure: - timestamp`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SecureTimestamp {
    /// How long the timestamp is valid: `Expires` minus `Created` (default `PT5M`).
    #[serde(default)]
    pub ttl: Option<Duration>,
}

/// `secure: - signature`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SecureSignature {
    /// The elements to sign.
    #[serde(default)]
    pub references: Vec<Reference>,
    /// `ds:SignatureMethod` (default RSA-SHA256).
    #[serde(default)]
    pub signature_algorithm: Option<String>,
    /// `ds:DigestMethod` (default SHA-256).
    #[serde(default)]
    pub digest_algorithm: Option<String>,
    /// Canonicalization of `ds:SignedInfo` and of each reference (default exclusive c14n).
    #[serde(default)]
    pub canonicalization_algorithm: Option<String>,
    /// `ds:KeyInfo` as a `wsse:SecurityTokenReference` to a `wsse:BinarySecurityToken`.
    #[serde(default)]
    #[schemars(with = "Option<serde_json::Map<String, serde_json::Value>>")]
    pub security_token_reference: Option<EmptyMap>,
    /// `ds:KeyInfo` as `ds:X509Data` with the certificate (the default).
    #[serde(default)]
    #[schemars(with = "Option<serde_json::Map<String, serde_json::Value>>")]
    pub x509_data: Option<EmptyMap>,
    /// `ds:KeyInfo` as a thumbprint `wsse:KeyIdentifier`: not supported (a load error).
    #[serde(default)]
    pub key_identifier: Option<serde_json::Value>,
}

/// A setting written as `{}`.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmptyMap {}

/// `validate: - signature`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ValidateSignature {
    /// The elements the signature must cover.
    #[serde(default)]
    pub required_references: Vec<Reference>,
    /// Tolerance for a required `TIMESTAMP`'s window (default `PT5M`).
    #[serde(default)]
    pub clock_skew: Option<Duration>,
}

/// One signed element: by a well-known name, or by `xpath`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Reference {
    /// `BODY` (default), `HEADER`, `TIMESTAMP`, `USERNAME_TOKEN` or `BST`.
    #[serde(default)]
    pub by: Option<By>,
    /// An XPath selecting the element(s) instead.
    #[serde(default)]
    pub xpath: Option<String>,
    /// The `wsu:Id` to give the element when signing.
    #[serde(default)]
    pub id: Option<String>,
}

/// What a reference names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum By {
    /// The SOAP Body.
    Body,
    /// The SOAP Header.
    Header,
    /// The `wsu:Timestamp` of the `wsse:Security` header.
    Timestamp,
    /// The `wsse:UsernameToken` of the `wsse:Security` header.
    UsernameToken,
    /// The `wsse:BinarySecurityToken` of the `wsse:Security` header.
    Bst,
    /// The elements of `xpath`.
    Xpath,
    /// An `xenc:EncryptedKey`: not supported.
    EncryptedKey,
}
