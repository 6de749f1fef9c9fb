//! JSON policies: `jsonProtection`, and the expression languages of templates.

use schemars::JsonSchema;
use serde::Deserialize;

use crate::units::{ByteSize, Flag};

/// `jsonProtection`: rejects JSON request bodies that are invalid, have duplicate keys, or exceed
/// the limits (Membrane's settings and defaults).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JsonProtectionPolicy {
    /// Most JSON tokens (braces, brackets and values each count one; keys do not, as in
    /// Membrane: `{"a":"b"}` has 3); default 10000.
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// Largest body; default 50MB.
    #[serde(default)]
    pub max_size: Option<ByteSize>,
    /// Deepest nesting of objects and arrays; default 50.
    #[serde(default)]
    pub max_depth: Option<u64>,
    /// Longest string (values and keys), in characters; default 262144.
    #[serde(default)]
    pub max_string_length: Option<u64>,
    /// Longest object key, in characters; default 256 (the stricter of this and
    /// `maxStringLength` applies).
    #[serde(default)]
    pub max_key_length: Option<u64>,
    /// Most keys in one object; default 1000.
    #[serde(default)]
    pub max_object_size: Option<u64>,
    /// Most elements in one array; default 1000.
    #[serde(default)]
    pub max_array_size: Option<u64>,
    /// Reject the key `__proto__` (prototype pollution in JavaScript backends); default true.
    #[serde(default)]
    pub block_proto: Option<Flag>,
    /// Describe the violation in the problem details (default true); `false` answers a bare 400
    /// problem without saying what was found.
    #[serde(default)]
    pub report_error: Option<Flag>,
}

/// The language of the `${...}` placeholders of a template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
pub enum ExpressionLanguage {
    /// RFC 9535 JSONPath evaluated on the JSON body of the message: `${$.person.firstName}`.
    #[serde(rename = "jsonpath")]
    JsonPath,
}
