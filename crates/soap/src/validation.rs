//! What the `validator` policy's modes share: the settings of schema mappings and failure
//! handling, the body a phase validates, and the problem a failed validation answers.

use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::problem::{types as problems, Problem};
use turnpike_core::Exchange;

/// `schemaMappings`: the documents that `$ref` ids stand for.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SchemaMappings {
    /// One entry per id.
    #[serde(default)]
    pub schemas: Vec<SchemaMapping>,
}

/// One `$ref` id and the document it stands for.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SchemaMapping {
    /// The id as `$ref`s name it (`urn:app:base_def`; a fragment after `#` selects inside).
    pub id: String,
    /// The document (JSON or YAML; a file relative to this config file, or an `http(s)://`
    /// URL fetched at load).
    pub location: String,
}

/// What a validation failure does besides being answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FailureHandler {
    /// Answer it (default).
    #[default]
    Response,
    /// Answer it and log it (with the messages) as a warning.
    Log,
}

/// Logs a validation failure as a warning (`failureHandler: log`). Called on the request path,
/// once per failure.
pub(crate) fn log_failure(response: bool, mode: &str, messages: &[String]) {
    tracing::warn!(
        direction = if response { "response" } else { "request" },
        mode,
        "validator: the {} is not valid: {}",
        if response { "response" } else { "request" },
        messages.join("; ")
    );
}

/// The problem of a failed `schema` or `jsonSchema` validation: `validation` (400) for a
/// request, `response-validation` (502) for a response, with `detail`, every violation in
/// `errors` and `X-Validation-Error-Source: REQUEST` (or `RESPONSE`), as Membrane sends it.
pub(crate) fn failure(response: bool, detail: String, errors: Vec<serde_json::Value>) -> Problem {
    let (ty, source) = if response {
        (&problems::RESPONSE_VALIDATION, "RESPONSE")
    } else {
        (&problems::VALIDATION, "REQUEST")
    };
    Problem::new(ty)
        .with_detail(detail)
        .with_member("errors", serde_json::Value::Array(errors))
        .with_header(
            http::HeaderName::from_static("x-validation-error-source"),
            http::HeaderValue::from_static(source),
        )
}

/// The body of the message a phase validates, or why it passes unvalidated: `None` when it is
/// empty (Membrane skips empty bodies) or the gateway's own problem+json answer. `Err` when it
/// is compressed, which the validator cannot read.
pub(crate) fn body_to_validate(ex: &Exchange, response: bool) -> Result<Option<&[u8]>, String> {
    let (headers, body) = if response {
        let Some(res) = ex.response.as_ref() else {
            return Ok(None);
        };
        let ct = res.headers().get(http::header::CONTENT_TYPE);
        if ct.is_some_and(|v| v.as_bytes().starts_with(b"application/problem+json")) {
            return Ok(None);
        }
        (res.headers(), ex.response_bytes())
    } else {
        (&ex.request.headers, ex.request_bytes())
    };
    let Some(body) = body.filter(|b| !b.is_empty()) else {
        return Ok(None);
    };
    if let Some(enc) = headers
        .get_all(http::header::CONTENT_ENCODING)
        .iter()
        .find(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"))
    {
        return Err(format!(
            "the body is compressed (Content-Encoding: {}) and cannot be validated",
            String::from_utf8_lossy(enc.as_bytes())
        ));
    }
    Ok(Some(body))
}
