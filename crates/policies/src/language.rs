//! The expression languages a template's `${...}` placeholders can be written in.

use schemars::JsonSchema;
use serde::Deserialize;

/// The language of the `${...}` placeholders of a template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
pub enum ExpressionLanguage {
    /// RFC 9535 JSONPath evaluated on the JSON body of the message: `${$.person.firstName}`.
    #[serde(rename = "jsonpath")]
    JsonPath,
}
