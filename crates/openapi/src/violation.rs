//! One way a message does not match its spec.

use serde_json::Value;

/// One violation of the spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Where (`query.limit`, `#/body/price`).
    pub location: String,
    /// What is wrong.
    pub message: String,
}

impl Violation {
    pub(crate) fn new(location: impl Into<String>, message: impl Into<String>) -> Self {
        Violation {
            location: location.into(),
            message: message.into(),
        }
    }

    /// As a JSON object for problem details.
    pub fn to_json(&self) -> Value {
        serde_json::json!({"location": self.location, "message": self.message})
    }
}
