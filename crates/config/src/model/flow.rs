//! The basic flow policies: `return`, `static`, `setHeader`, `removeHeader`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

use super::ExpressionLanguage;
use crate::units::Flag;

/// `return`: answers the request.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReturnPolicy {
    /// Status code (default 200).
    #[serde(default)]
    pub status: Option<u16>,
    /// Response headers; values may hold templates.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Response body; may hold templates. A preceding `static` supplies it otherwise.
    #[serde(default)]
    pub body: Option<String>,
    /// `Content-Type` of the body (default `text/plain; charset=utf-8` when there is a body).
    #[serde(default)]
    pub content_type: Option<String>,
}

/// `static`: sets the response body.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StaticPolicy {
    /// The body; may hold templates.
    pub src: String,
    /// `Content-Type` of the body (default `text/plain; charset=utf-8`).
    #[serde(default)]
    pub content_type: Option<String>,
}

/// `setHeader`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SetHeaderPolicy {
    /// Header name.
    pub name: String,
    /// Value; may hold templates such as `${path.id}` or `${header.User-Agent}`.
    pub value: String,
    /// Only set the header when the message does not have it yet.
    #[serde(default)]
    pub if_absent: Flag,
    /// The language of the value's `${...}` placeholders: absent for the built-in templates,
    /// `jsonpath` for RFC 9535 JSONPath on the JSON body (`${$.person.firstName}`).
    #[serde(default)]
    pub language: Option<ExpressionLanguage>,
}

/// `removeHeader`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RemoveHeaderPolicy {
    /// Header name.
    pub name: String,
}
