//! `jsonProtection`: rejects JSON request bodies that are invalid, have duplicate keys, or exceed
//! the limits, while the body is read ([`Scanner`], byte by byte, after a [`quick`] pass that
//! accepts everyday bodies about ten times faster).

mod limits;
mod quick;
mod scanner;
#[cfg(test)]
mod tests;

use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_config::units::{ByteSize, Flag};
use turnpike_core::decode::{self, TextKind};
use turnpike_core::problems;
use turnpike_core::{BodyInspected, BodyInspector, BodyNeed, Exchange, Outcome, Policy, Problem};
use turnpike_core::{CompileContext, CompileError, Phases, PolicyFactory};

/// `jsonProtection`: rejects JSON request bodies that are invalid, have duplicate keys, or exceed
/// the limits (Membrane's settings and defaults).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JsonProtectionSettings {
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

pub use limits::{Limits, Violation};
pub(crate) use quick::acceptable as quick_pass;
pub use scanner::Scanner;

/// The compiled `jsonProtection` policy.
#[derive(Debug)]
pub struct JsonProtection {
    limits: Limits,
    report_error: bool,
}

fn problem(v: Violation, report_error: bool) -> Problem {
    let p = Problem::new(&problems::JSON_PROTECTION);
    if report_error {
        p.with_detail(v.message)
            .with_member("violation", v.kind.into())
            .with_member("offset", v.offset.into())
    } else {
        p
    }
}

/// Checks the body while the engine reads it, stopping at the first violation.
struct Inspector {
    scanner: Scanner,
    report_error: bool,
}

impl BodyInspector for Inspector {
    fn chunk(&mut self, data: &[u8]) -> Result<(), Box<Problem>> {
        self.scanner
            .feed(data)
            .map_err(|v| Box::new(problem(v, self.report_error)))
    }

    fn end(&mut self) -> Result<(), Box<Problem>> {
        if self.scanner.offset == 0 {
            return Ok(()); // An empty body passes.
        }
        self.scanner
            .finish()
            .map_err(|v| Box::new(problem(v, self.report_error)))
    }
}

impl PolicyFactory for JsonProtection {
    const NAME: &'static str = "jsonProtection";
    const PHASES: Phases = Phases::REQUEST;
    type Settings = JsonProtectionSettings;

    /// Compiles the policy; every limit must be at least 1.
    fn compile(c: JsonProtectionSettings, _ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        let d = Limits::default();
        let pick = |v: Option<u64>, def: u64, key: &str| -> Result<u64, CompileError> {
            match v {
                Some(0) => Err(crate::err(key, "must be at least 1")),
                Some(n) => Ok(n),
                None => Ok(def),
            }
        };
        let max_string_length = pick(c.max_string_length, d.max_string_length, "maxStringLength")?;
        Ok(JsonProtection {
            limits: Limits {
                max_tokens: pick(c.max_tokens, d.max_tokens, "maxTokens")?,
                max_size: pick(c.max_size.map(|s| s.0), d.max_size, "maxSize")?,
                max_depth: pick(c.max_depth, d.max_depth, "maxDepth")?,
                max_string_length,
                // Keys are strings too: the stricter limit applies (as in Membrane).
                max_key_length: pick(c.max_key_length, d.max_key_length, "maxKeyLength")?
                    .min(max_string_length),
                max_object_size: pick(c.max_object_size, d.max_object_size, "maxObjectSize")?,
                max_array_size: pick(c.max_array_size, d.max_array_size, "maxArraySize")?,
                block_proto: c.block_proto.is_none_or(|f| f.0),
            },
            report_error: c.report_error.is_none_or(|f| f.0),
        })
    }
}

impl Policy for JsonProtection {
    fn name(&self) -> &'static str {
        "jsonProtection"
    }

    fn body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    fn response_needs_request(&self) -> bool {
        false
    }

    fn body_inspector(&self) -> Option<Box<dyn BodyInspector>> {
        Some(Box::new(Inspector {
            scanner: Scanner::new(self.limits),
            report_error: self.report_error,
        }))
    }

    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        // Checked already while the engine read it (and not replaced since).
        if ex.extensions.get::<BodyInspected>().is_some() {
            return Outcome::Continue;
        }
        let Some(body) = ex.request_bytes() else {
            return Outcome::Continue;
        };
        if body.is_empty() {
            return Outcome::Continue;
        }
        // Content codings and charsets undone: the backend reads the decoded text.
        let body = match decode::body(&ex.request.headers, TextKind::Json, body) {
            Ok(b) => b,
            Err(e) => return Outcome::Reject(e.problem()),
        };
        match Scanner::check(self.limits, &body) {
            Ok(()) => Outcome::Continue,
            Err(v) => Outcome::Reject(problem(v, self.report_error)),
        }
    }
}
