//! `jsonRPCProtection`: Membrane's checks of JSON-RPC 2.0 requests sent with `POST`: the
//! payload's structure (a request object, or a batch array within the batch limits), ordered
//! allow/deny rules on method names, and JSON Schemas for the `params` of a method; with result
//! or error schemas, the backend's responses are checked too. A failure is answered, as in
//! Membrane, with a JSON-RPC error object (a one-element array for a batch).

#[cfg(test)]
mod tests;
pub(crate) mod validate;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use regex::Regex;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use turnpike_config::units::Flag;
use turnpike_core::{BodyNeed, Exchange, Outcome, Policy};
use turnpike_core::{CompileContext, CompileError, PolicyFactory};
use turnpike_soap::json_schema_validator::JsonSchemaValidator;

use crate::err;

/// `jsonRPCProtection`: Membrane's settings and defaults.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JsonRpcProtectionSettings {
    /// Whether batch requests are allowed, and how large they may be.
    #[serde(default)]
    pub batch: Option<BatchSettings>,
    /// Ordered allow/deny rules on method names: the first rule whose regular expression
    /// matches the whole name decides; a method no rule matches is allowed.
    #[serde(default)]
    pub methods: Option<Vec<MethodRule>>,
    /// JSON Schema files for the `params` of methods: method name → schema location.
    #[serde(default)]
    pub params: Option<BTreeMap<String, String>>,
    /// JSON Schema files for the `result` of successful responses: method name → schema
    /// location.
    #[serde(default)]
    pub result: Option<BTreeMap<String, String>>,
    /// JSON Schemas (files or inline) for params, responses and error objects.
    #[serde(default)]
    pub schema_validation: Option<SchemaValidationSettings>,
}

/// `batch`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BatchSettings {
    /// Whether batch requests (arrays) are allowed; default true.
    #[serde(default)]
    pub enabled: Option<Flag>,
    /// Most requests in one batch; default 100, at least 1.
    #[serde(default)]
    pub max_size: Option<i64>,
}

/// One rule of `methods`: exactly one of `allow` and `deny`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MethodRule {
    /// Allow methods whose whole name matches this regular expression.
    #[serde(default)]
    pub allow: Option<RulePattern>,
    /// Deny methods whose whole name matches this regular expression.
    #[serde(default)]
    pub deny: Option<RulePattern>,
}

/// A rule's regular expression, as a scalar or under `pattern`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RulePattern {
    /// `allow: '^get.*'`.
    Short(String),
    /// `allow: {pattern: '^get.*'}`.
    Long(RulePatternLong),
}

/// `allow: {pattern: ...}`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RulePatternLong {
    /// The regular expression.
    pub pattern: String,
}

/// `schemaValidation`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SchemaValidationSettings {
    /// The schema of the `error` objects of the backend's error responses.
    #[serde(default)]
    pub error: Option<SchemaSource>,
    /// Per method name (exact): the schemas of its `params` and of its responses' `result`.
    #[serde(default)]
    pub methods: Option<BTreeMap<String, MethodSchemas>>,
}

/// The schemas of one method.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MethodSchemas {
    /// The schema of the request's `params` (missing params are checked as `null`).
    #[serde(default)]
    pub params: Option<SchemaSource>,
    /// The schema of the response's `result`.
    #[serde(default)]
    pub response: Option<SchemaSource>,
}

/// A JSON Schema: exactly one of a file (`location`) and an inline schema (`schema`).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SchemaSource {
    /// The schema's file (JSON or YAML; relative to the configuration file) or URL.
    #[serde(default)]
    pub location: Option<String>,
    /// The schema itself.
    #[serde(default)]
    pub schema: Option<Value>,
}

/// A compiled JSON Schema (draft 2020-12 unless its `$schema` says otherwise).
enum Schema {
    Inline(jsonschema::Validator),
    File(JsonSchemaValidator),
}

/// At most this many schema violations are reported per message.
const MAX_ERRORS: usize = 20;

/// A violation message longer than this is cut.
const MAX_MESSAGE: usize = 300;

fn shorten(mut m: String) -> String {
    if m.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE;
        while !m.is_char_boundary(end) {
            end -= 1;
        }
        m.truncate(end);
        m.push('…');
    }
    m
}

impl Schema {
    /// Loads the schema of `src` at load time; `key` is where it stands in the settings (`flat`
    /// for the map form of `params`/`result`, where the key holds the location itself).
    fn load(
        src: &SchemaSource,
        key: &str,
        flat: bool,
        base_dir: &std::path::Path,
    ) -> Result<Self, CompileError> {
        let at = |what: &str| {
            if flat {
                key.to_owned()
            } else {
                format!("{key}.{what}")
            }
        };
        let location = src
            .location
            .as_deref()
            .map(str::trim)
            .filter(|l| !l.is_empty());
        match (location, &src.schema) {
            (Some(l), None) => JsonSchemaValidator::load(l, None, &[], base_dir)
                .map(Schema::File)
                .map_err(|e| err(&at("location"), e.message)),
            (None, Some(s)) => {
                if s.as_object().is_some_and(|o| o.is_empty()) {
                    return Err(err(&at("schema"), "the schema must not be empty"));
                }
                jsonschema::options()
                    .with_draft(jsonschema::Draft::Draft202012)
                    .should_validate_formats(true)
                    .build(s)
                    .map(Schema::Inline)
                    .map_err(|e| err(&at("schema"), format!("invalid JSON Schema: {e}")))
            }
            _ => Err(err(key, "needs exactly one of `location` and `schema`")),
        }
    }

    /// The violations of `v` (none when it is valid).
    fn errors(&self, v: &Value) -> Vec<String> {
        match self {
            Schema::Inline(s) => s
                .iter_errors(v)
                .take(MAX_ERRORS)
                .map(|e| shorten(e.to_string()))
                .collect(),
            Schema::File(s) => match serde_json::to_vec(v) {
                Ok(bytes) => match s.check(&bytes) {
                    Ok(()) => Vec::new(),
                    Err(es) => es
                        .iter()
                        .take(MAX_ERRORS)
                        .map(|e| e["message"].as_str().unwrap_or("invalid").to_owned())
                        .collect(),
                },
                Err(_) => vec!["the value cannot be checked".to_owned()],
            },
        }
    }
}

/// The compiled `jsonRPCProtection` policy.
pub struct JsonRpcProtection {
    batch_enabled: bool,
    batch_max: usize,
    /// (whole-name pattern, allows).
    rules: Vec<(Regex, bool)>,
    params: HashMap<String, Schema>,
    results: HashMap<String, Schema>,
    error: Option<Schema>,
    files: Vec<PathBuf>,
}

impl PolicyFactory for JsonRpcProtection {
    const NAME: &'static str = "jsonRPCProtection";
    type Settings = JsonRpcProtectionSettings;

    /// Compiles the rules and loads every schema (files are read once, here). Errors: a
    /// `maxSize` below 1, a rule without exactly one of `allow`/`deny` or with an empty or
    /// invalid pattern, a schema that cannot be read or compiled, an empty method name, or a
    /// method given schemas twice.
    fn compile(
        c: JsonRpcProtectionSettings,
        ctx: &CompileContext<'_>,
    ) -> Result<Self, CompileError> {
        let batch = c.batch.unwrap_or_default();
        let batch_max = match batch.max_size {
            None => 100,
            Some(n) if n < 1 => {
                return Err(err("batch.maxSize", "batch maxSize must be greater than 0"))
            }
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        };
        let rules = compile_rules(c.methods.unwrap_or_default(), "methods")?;
        let mut params = HashMap::new();
        let mut results = HashMap::new();
        let mut files = Vec::new();
        let mut add = |table: &mut HashMap<String, Schema>,
                       method: &str,
                       src: &SchemaSource,
                       key: String,
                       flat: bool|
         -> Result<(), CompileError> {
            let method = method.trim();
            if method.is_empty() {
                return Err(err(&key, "the method name must not be empty"));
            }
            if table.contains_key(method) {
                return Err(err(&key, format!("method `{method}` has a schema already")));
            }
            let s = Schema::load(src, &key, flat, ctx.base_dir)?;
            if let Schema::File(f) = &s {
                files.extend(Policy::files(f));
            }
            table.insert(method.to_owned(), s);
            Ok(())
        };
        for (method, location) in c.params.unwrap_or_default() {
            let src = SchemaSource {
                location: Some(location),
                schema: None,
            };
            add(&mut params, &method, &src, format!("params.{method}"), true)?;
        }
        for (method, location) in c.result.unwrap_or_default() {
            let src = SchemaSource {
                location: Some(location),
                schema: None,
            };
            add(
                &mut results,
                &method,
                &src,
                format!("result.{method}"),
                true,
            )?;
        }
        let mut error = None;
        if let Some(sv) = c.schema_validation {
            for (method, m) in sv.methods.unwrap_or_default() {
                let key = format!("schemaValidation.methods.{method}");
                if let Some(p) = &m.params {
                    add(&mut params, &method, p, format!("{key}.params"), false)?;
                }
                if let Some(r) = &m.response {
                    add(&mut results, &method, r, format!("{key}.response"), false)?;
                }
            }
            if let Some(e) = &sv.error {
                let s = Schema::load(e, "schemaValidation.error", false, ctx.base_dir)?;
                if let Schema::File(f) = &s {
                    files.extend(Policy::files(f));
                }
                error = Some(s);
            }
        }
        Ok(JsonRpcProtection {
            batch_enabled: batch.enabled.is_none_or(|f| f.0),
            batch_max,
            rules,
            params,
            results,
            error,
            files,
        })
    }
}

/// Compiles ordered allow/deny rules (at settings key `key`) into whole-name patterns and
/// whether each allows. Errors: a rule without exactly one of `allow`/`deny`, an empty or
/// invalid pattern. Runs at load time; shared with `mcpProtection`'s tool rules.
pub(crate) fn compile_rules(
    rules: Vec<MethodRule>,
    key: &str,
) -> Result<Vec<(Regex, bool)>, CompileError> {
    let mut out = Vec::new();
    for (i, r) in rules.into_iter().enumerate() {
        let (p, allows, which) = match (r.allow, r.deny) {
            (Some(p), None) => (p, true, "allow"),
            (None, Some(p)) => (p, false, "deny"),
            _ => {
                return Err(err(
                    &format!("{key}[{i}]"),
                    "a rule has exactly one of `allow` and `deny`",
                ))
            }
        };
        let at = format!("{key}[{i}].{which}");
        let p = match p {
            RulePattern::Short(s) => s,
            RulePattern::Long(l) => l.pattern,
        };
        let p = p.trim();
        if p.is_empty() {
            return Err(err(&at, "the pattern must not be empty"));
        }
        let re = Regex::new(&format!("^(?:{p})$"))
            .map_err(|e| err(&at, format!("not a regular expression: {e}")))?;
        out.push((re, allows));
    }
    Ok(out)
}

impl JsonRpcProtection {
    /// True when responses are checked (a result or an error schema is configured).
    fn checks_responses(&self) -> bool {
        !self.results.is_empty() || self.error.is_some()
    }
}

impl Policy for JsonRpcProtection {
    fn name(&self) -> &'static str {
        "jsonRPCProtection"
    }

    /// Requests are checked in memory.
    fn body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    /// Responses are read into memory only when a result or error schema checks them.
    fn response_body_need(&self) -> BodyNeed {
        if self.checks_responses() {
            BodyNeed::Buffer
        } else {
            BodyNeed::None
        }
    }

    fn response_needs_request(&self) -> bool {
        false
    }

    fn files(&self) -> Vec<PathBuf> {
        self.files.clone()
    }

    /// Checks a `POST` request with a body (other requests pass); returns `Continue`, or
    /// `Respond` with a JSON-RPC error.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        self.request(ex)
    }

    /// Checks the backend's answer to a request that passed, when a result or error schema
    /// is configured; returns `Continue`, or `Respond` with a JSON-RPC error (500).
    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        if !self.checks_responses() {
            return Outcome::Continue;
        }
        self.response(ex)
    }
}
