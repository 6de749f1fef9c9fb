//! The JSON Schema of one configuration document, for editors (yaml-language-server) and CI.

use crate::model::Document;

/// Returns the JSON Schema (draft 2020-12) that every YAML document of a config must satisfy.
pub fn json_schema() -> serde_json::Value {
    let mut schema = schemars::schema_for!(Document);
    schema.insert(
        "title".into(),
        serde_json::Value::String("Turnpike configuration document".into()),
    );
    schema.to_value()
}

#[cfg(test)]
mod tests {
    #[test]
    fn schema_names_every_document_kind() {
        let s = super::json_schema().to_string();
        for key in [
            "\"api\"",
            "\"global\"",
            "\"include\"",
            "\"gateway\"",
            "setHeader",
            "jsonProtection",
            "validateRequests",
            "jsonpath",
        ] {
            assert!(s.contains(key), "{key} missing from schema");
        }
    }
}
