//! `api.openapi:` — APIs deployed from OpenAPI documents.

use schemars::JsonSchema;
use serde::Deserialize;

use crate::units::Flag;

/// One OpenAPI source of an API (`api.openapi[i]`): a file, a folder of files, or a URL.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OpenApiSource {
    /// A spec file (YAML or JSON) relative to this config file, or an `http://` URL fetched at
    /// load time. Exactly one of `location` and `dir` must be given.
    #[serde(default)]
    pub location: Option<String>,
    /// A folder relative to this config file: each `*.yaml`, `*.yml` and `*.json` file in it is
    /// deployed as one spec.
    #[serde(default)]
    pub dir: Option<String>,
    /// Validate requests (path, method, parameters, content type, body) against the spec:
    /// violations answer 400 (404/405/415 for unknown paths, methods and media types).
    #[serde(default)]
    pub validate_requests: Flag,
    /// Validate the backend's responses (status declared, content type, body): violations
    /// answer 502.
    #[serde(default)]
    pub validate_responses: Flag,
    /// Answer from the spec instead of a backend: each operation's first success status, with
    /// the declared example of the media type the request accepts (or a value made from its
    /// schema).
    #[serde(default)]
    pub mock: Flag,
    /// Include the violations in a rejection's body (default yes); `no`: only the title and
    /// the status (Membrane's `validationDetails`).
    #[serde(default)]
    pub validation_details: Option<Flag>,
    /// How the API is published (Membrane's `rewrite`): the base path it is served under, and
    /// the address its published document names.
    #[serde(default)]
    pub rewrite: Option<OpenApiRewrite>,
}

/// `openapi[].rewrite`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OpenApiRewrite {
    /// The path the operations are served under, instead of the first `servers` URL's path.
    #[serde(default)]
    pub base_path: Option<String>,
    /// The host the published document's `servers` URL names.
    #[serde(default)]
    pub host: Option<String>,
    /// Its port (default: the protocol's).
    #[serde(default)]
    pub port: Option<u16>,
    /// Its scheme: `http` or `https` (default `https` for port 443, else `http`).
    #[serde(default)]
    pub protocol: Option<String>,
}
