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
    /// Check each operation's `security` requirements (and the spec's global ones) against
    /// the credentials the flow's authentication policies accepted: 401/403 otherwise
    /// (Membrane's `validateSecurity`). `yes` also validates requests; `asInOpenAPI` (the
    /// default) takes `x-membrane-validation.security` of the spec (off when absent).
    #[serde(default)]
    pub validate_security: YesNoOpenApi,
}

/// `yes`, `no` (or `true`/`false`, `on`/`off`), or `asInOpenAPI`: as the spec's
/// `x-membrane-validation` extension says (Membrane's `YesNoOpenAPIOption`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum YesNoOpenApi {
    /// On.
    Yes,
    /// Off.
    No,
    /// As the spec says.
    #[default]
    AsInOpenApi,
}

impl<'de> Deserialize<'de> for YesNoOpenApi {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = YesNoOpenApi;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("yes, no (or true/false) or asInOpenAPI")
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<YesNoOpenApi, E> {
                Ok(if v {
                    YesNoOpenApi::Yes
                } else {
                    YesNoOpenApi::No
                })
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<YesNoOpenApi, E> {
                match v.to_ascii_lowercase().as_str() {
                    "yes" | "on" | "true" | "y" => Ok(YesNoOpenApi::Yes),
                    "no" | "off" | "false" | "n" => Ok(YesNoOpenApi::No),
                    "asinopenapi" => Ok(YesNoOpenApi::AsInOpenApi),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for YesNoOpenApi {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "YesNoOpenApi".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "anyOf": [
                {"type": "boolean"},
                {"enum": ["yes", "no", "on", "off", "true", "false", "asInOpenAPI"]}
            ]
        })
    }
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
