//! The `admin:` document: the control plane's REST API, where the documents it manages are
//! stored, and who may use it.

use schemars::JsonSchema;
use serde::Deserialize;

use super::SslConfig;

/// The admin REST API (`admin:` document). Without this document there is no admin listener.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AdminConfig {
    /// `ip:port` to listen on (default `127.0.0.1:9901`).
    #[serde(default)]
    pub listen: Option<String>,
    /// The bearer token every admin request must carry (`Authorization: Bearer ...`); required
    /// when `listen` is not a loopback address, and with a `store` (a writable API) unless
    /// `auth: none`. At least 16 visible ASCII characters.
    #[serde(default)]
    pub token: Option<String>,
    /// A file holding the token (its first line; relative to this file), instead of `token`:
    /// keeps the secret out of the configuration. It must not be readable by other users.
    #[serde(default)]
    pub token_file: Option<String>,
    /// `token` (the default): requests carry the token. `none`: no token, even with a `store`,
    /// on a loopback `listen` only; for a developer's laptop (`turnpike validate` warns).
    #[serde(default)]
    pub auth: Option<AdminAuth>,
    /// Host names (beyond loopback names and addresses and the listen address) requests may
    /// name in `Host`; `*.example.com` matches every name below `example.com`. Other names are
    /// refused with 421, which stops DNS-rebinding pages.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Folders that `webServer` policies of documents written through the API may serve
    /// (`docBase` inside one of them; relative to this file). Default: none.
    #[serde(default)]
    pub allowed_doc_bases: Vec<String>,
    /// TLS for the admin listener, with the settings of an API's `ssl` (mutual TLS with
    /// `clientAuth`).
    #[serde(default)]
    pub ssl: Option<SslConfig>,
    /// Where documents created through the API are kept (default: nowhere; the API then only
    /// reads).
    #[serde(default)]
    pub store: Option<StoreConfig>,
}

/// How admin requests are authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum AdminAuth {
    /// Every request but the probes carries the token.
    Token,
    /// No authentication (loopback only): any local process may change the gateway.
    None,
}

/// Where the admin API keeps the documents it manages.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StoreConfig {
    /// A folder of YAML files, one per document (relative to this file). With `etcd`, the
    /// local copy of the last configuration that compiled, served when etcd cannot be reached
    /// at start.
    #[serde(default)]
    pub dir: Option<String>,
    /// Keep the documents in etcd, shared by every gateway that watches the same prefix.
    #[serde(default)]
    pub etcd: Option<EtcdConfig>,
}

/// An etcd cluster holding the documents.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EtcdConfig {
    /// Client URLs of the cluster's members (`http://127.0.0.1:2379`).
    pub endpoints: Vec<String>,
    /// The key prefix under which documents live (default `/turnpike`).
    #[serde(default)]
    pub prefix: Option<String>,
    /// User name, with `password`, for etcd's authentication.
    #[serde(default)]
    pub username: Option<String>,
    /// Password of `username`.
    #[serde(default)]
    pub password: Option<String>,
    /// Time to connect to a member and for each request (default 2s).
    #[serde(default)]
    pub timeout: Option<crate::units::Duration>,
    /// TLS to `https://` endpoints: `truststore` (a PEM bundle of the CAs to trust instead of
    /// the system's), `certificate` + `key` (PEM, a client certificate for etcd's
    /// `--client-cert-auth`), `serverName` (the name checked in the members' certificates
    /// instead of the endpoint's host).
    #[serde(default)]
    pub ssl: Option<crate::TargetSsl>,
}
