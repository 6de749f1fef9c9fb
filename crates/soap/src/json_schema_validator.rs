//! `validator` with `jsonSchema:`: validates JSON bodies (requests, and the backend's
//! responses) against a JSON Schema, as Membrane's JSON Schema validator does: no
//! `Content-Type` check, empty bodies pass, a failure is answered with every violation.
//!
//! The schema (JSON or YAML) is read and compiled once at load with the `jsonschema` crate, in
//! the draft `schemaVersion` names (else the one its `$schema` names, else 2020-12). Its `$ref`s
//! resolve, at load too, to the documents `schemaMappings` maps their ids to, or to local files
//! (relative references resolve against the schema file); nothing else is fetched, and nothing
//! is read on the request path. The compiled validator is shared by every worker.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Deserializer};
use serde::Deserialize;
use serde_json::{json, Value};
use turnpike_core::{BodyNeed, CompileError, Exchange, Outcome, Policy};

use crate::fetch::Location;
use crate::validation::{body_to_validate, failure, log_failure, SchemaMapping};

/// At most this many violations are answered (and logged) per message.
const MAX_ERRORS: usize = 50;

/// A message quoting a huge value is cut to this many bytes.
const MAX_MESSAGE: usize = 300;

/// Characters escaped when a file path becomes a `file://` URI.
const PATH: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'[')
    .add(b']')
    .add(b'\\')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}');

/// `schemaVersion`: the JSON Schema draft.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaVersion {
    /// Draft 4 (`04`; Membrane's `05` too, which has no meta-schema of its own).
    Draft4,
    /// Draft 6 (`06`).
    Draft6,
    /// Draft 7 (`07`).
    Draft7,
    /// Draft 2019-09.
    Draft201909,
    /// Draft 2020-12.
    Draft202012,
}

impl SchemaVersion {
    fn parse(s: &str) -> Option<SchemaVersion> {
        let s = s.trim().trim_start_matches(['v', 'V']);
        let s = s
            .strip_prefix("draft")
            .or_else(|| s.strip_prefix("Draft"))
            .unwrap_or(s)
            .trim_start_matches(['-', '_']);
        Some(match s {
            "4" | "04" | "5" | "05" => SchemaVersion::Draft4,
            "6" | "06" => SchemaVersion::Draft6,
            "7" | "07" => SchemaVersion::Draft7,
            "2019-09" | "201909" => SchemaVersion::Draft201909,
            "2020-12" | "202012" => SchemaVersion::Draft202012,
            _ => return None,
        })
    }

    fn draft(self) -> jsonschema::Draft {
        match self {
            SchemaVersion::Draft4 => jsonschema::Draft::Draft4,
            SchemaVersion::Draft6 => jsonschema::Draft::Draft6,
            SchemaVersion::Draft7 => jsonschema::Draft::Draft7,
            SchemaVersion::Draft201909 => jsonschema::Draft::Draft201909,
            SchemaVersion::Draft202012 => jsonschema::Draft::Draft202012,
        }
    }
}

impl<'de> Deserialize<'de> for SchemaVersion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        const EXPECTED: &str = "`04`, `05`, `06`, `07`, `2019-09` or `2020-12`";
        impl de::Visitor<'_> for V {
            type Value = SchemaVersion;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(EXPECTED)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<SchemaVersion, E> {
                SchemaVersion::parse(v)
                    .ok_or_else(|| E::invalid_value(de::Unexpected::Str(v), &EXPECTED))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<SchemaVersion, E> {
                // YAML reads an unquoted `04` as the number 4.
                SchemaVersion::parse(&v.to_string())
                    .ok_or_else(|| E::invalid_value(de::Unexpected::Unsigned(v), &EXPECTED))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<SchemaVersion, E> {
                match u64::try_from(v) {
                    Ok(u) => self.visit_u64(u),
                    Err(_) => Err(E::invalid_value(de::Unexpected::Signed(v), &EXPECTED)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for SchemaVersion {
    fn schema_name() -> Cow<'static, str> {
        "SchemaVersion".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "The JSON Schema draft.",
            "anyOf": [
                {"enum": ["04", "05", "06", "07", "2019-09", "2020-12"]},
                {"enum": [4, 5, 6, 7]}
            ]
        })
    }
}

/// Parses a JSON Schema document: JSON when it starts with `{` or `[`, else YAML.
fn parse_document(loc: &Location, bytes: &[u8]) -> Result<Value, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| format!("{loc}: not UTF-8 text"))?;
    let trimmed = text.trim_start_matches('\u{feff}').trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        return serde_json::from_str(trimmed).map_err(|e| format!("{loc}: invalid JSON: {e}"));
    }
    // Schemas are not config: `${NAME}` stays as written.
    let keep = |name: &str| Some(format!("${{{name}}}"));
    let nodes = turnpike_config::yaml::parse_documents(text, &keep).map_err(|errs| {
        let e = errs.into_iter().next();
        match e {
            Some(e) => format!(
                "{loc}:{}:{}: invalid YAML: {}",
                e.span.line, e.span.column, e.message
            ),
            None => format!("{loc}: invalid YAML"),
        }
    })?;
    let node = nodes
        .first()
        .ok_or_else(|| format!("{loc}: the file holds no document"))?;
    Ok(turnpike_config::yaml::to_json(
        node,
        &mut String::new(),
        &mut HashMap::new(),
    ))
}

/// `file://` and the absolute, percent-encoded path.
fn file_uri(path: &Path) -> String {
    format!(
        "file://{}",
        percent_encoding::utf8_percent_encode(&path.to_string_lossy(), PATH)
    )
}

/// Resolves the `$ref`s of a schema while it is compiled (at load): the ids of
/// `schemaMappings` to the documents read for them, `file://` URIs to local files.
struct Resolver {
    mapped: HashMap<String, Value>,
    /// Files read through `file://` references (for `--watch`).
    read: Arc<Mutex<Vec<PathBuf>>>,
}

impl jsonschema::Retrieve for Resolver {
    fn retrieve(
        &self,
        uri: &jsonschema::Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        let full = uri.as_str();
        let id = full.split('#').next().unwrap_or(full);
        if let Some(doc) = self.mapped.get(id) {
            return Ok(doc.clone());
        }
        if let Some(path) = id.strip_prefix("file://") {
            let path = percent_encoding::percent_decode_str(path).decode_utf8_lossy();
            let loc = Location::File(PathBuf::from(path.as_ref()));
            let doc = parse_document(&loc, &loc.read()?)?;
            if let (Location::File(p), Ok(mut read)) = (loc, self.read.lock()) {
                read.push(p);
            }
            return Ok(doc);
        }
        Err(format!(
            "`{id}` is neither an id of `schemaMappings` nor a local file (nothing is fetched from the network)"
        )
        .into())
    }
}

/// The `jsonSchema` mode of `validator`: JSON bodies against a JSON Schema.
pub struct JsonSchemaValidator {
    validator: jsonschema::Validator,
    files: Vec<PathBuf>,
    log_failures: bool,
}

impl std::fmt::Debug for JsonSchemaValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonSchemaValidator")
            .field("files", &self.files)
            .finish()
    }
}

impl JsonSchemaValidator {
    /// Reads the schema at `location` and the documents of `mappings` (relative to
    /// `base_dir`, or `http(s)://` URLs) and compiles it. Called at config load; returns the
    /// validator, or a load error at the key of what is missing or broken.
    pub fn load(
        location: &str,
        version: Option<SchemaVersion>,
        mappings: &[SchemaMapping],
        base_dir: &Path,
    ) -> Result<JsonSchemaValidator, CompileError> {
        let mut files = Vec::new();
        let mut mapped = HashMap::new();
        for (i, m) in mappings.iter().enumerate() {
            let at = |k: &str| format!("schemaMappings.schemas[{i}].{k}");
            let id = m.id.trim().trim_end_matches('#');
            if id.is_empty() {
                return Err(CompileError::new(at("id"), "the id must not be empty"));
            }
            let loc = Location::from_config(&m.location, base_dir);
            let doc = loc
                .read()
                .and_then(|bytes| parse_document(&loc, &bytes))
                .map_err(|e| CompileError::new(at("location"), e))?;
            if let Location::File(p) = &loc {
                files.push(p.clone());
            }
            mapped.insert(id.to_owned(), doc);
        }
        let loc = Location::from_config(location, base_dir);
        let bad = |m: String| CompileError::new("jsonSchema", m);
        let schema = loc
            .read()
            .and_then(|bytes| parse_document(&loc, &bytes))
            .map_err(bad)?;
        let read = Arc::new(Mutex::new(Vec::new()));
        let mut options = jsonschema::options()
            .should_validate_formats(true)
            .with_retriever(Resolver {
                mapped,
                read: Arc::clone(&read),
            });
        if let Some(v) = version {
            options = options.with_draft(v.draft());
        }
        if let Location::File(p) = &loc {
            // Relative `$ref`s of a schema without an `$id` resolve against its file.
            if let Ok(abs) = std::fs::canonicalize(p) {
                options = options.with_base_uri(file_uri(&abs));
            }
            files.push(p.clone());
        }
        let validator = options
            .build(&schema)
            .map_err(|e| bad(format!("{loc}: invalid JSON Schema: {e}")))?;
        if let Ok(mut r) = read.lock() {
            files.append(&mut r);
        }
        Ok(JsonSchemaValidator {
            validator,
            files,
            log_failures: false,
        })
    }

    /// The same validator, which also logs each failure (`failureHandler: log`).
    pub fn with_failure_log(mut self, log: bool) -> Self {
        self.log_failures = log;
        self
    }

    /// Validates one message body. Returns the violations (at most 50, each `{message,
    /// pointer, keyword}`, `pointer` being the JSON pointer of the offending value) when it is
    /// not JSON or not valid.
    pub fn check(&self, bytes: &[u8]) -> Result<(), Vec<Value>> {
        let value: Value = serde_json::from_slice(bytes).map_err(|e| {
            vec![json!({
                "message": format!("the body is not JSON: {e}"),
                "pointer": "",
            })]
        })?;
        if self.validator.is_valid(&value) {
            return Ok(());
        }
        let errors: Vec<Value> = self
            .validator
            .iter_errors(&value)
            .take(MAX_ERRORS)
            .map(|e| {
                json!({
                    "message": shorten(e.to_string()),
                    "pointer": e.instance_path().as_str(),
                    "keyword": e.kind().keyword(),
                })
            })
            .collect();
        Err(errors)
    }

    fn run(&self, ex: &Exchange, response: bool) -> Outcome {
        let errors = match body_to_validate(ex, response) {
            Ok(None) => return Outcome::Continue,
            Ok(Some(body)) => match self.check(body) {
                Ok(()) => return Outcome::Continue,
                Err(errors) => errors,
            },
            Err(m) => vec![json!({ "message": m, "pointer": "" })],
        };
        if self.log_failures {
            let texts: Vec<String> = errors
                .iter()
                .map(|e| {
                    format!(
                        "{}: {}",
                        e["pointer"]
                            .as_str()
                            .filter(|p| !p.is_empty())
                            .unwrap_or("/"),
                        e["message"].as_str().unwrap_or("")
                    )
                })
                .collect();
            log_failure(response, "jsonSchema", &texts);
        }
        let n = errors.len();
        let detail = format!(
            "{n} violation{} of the JSON Schema{}",
            if n == 1 { "" } else { "s" },
            if response {
                " in the backend's response"
            } else {
                ""
            }
        );
        Outcome::Reject(failure(response, detail, errors))
    }
}

/// Messages quote the offending value; a huge value is cut so that the answer stays small.
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

impl Policy for JsonSchemaValidator {
    fn name(&self) -> &'static str {
        "validator"
    }

    fn files(&self) -> Vec<PathBuf> {
        self.files.clone()
    }

    fn body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    fn response_body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    fn response_needs_request(&self) -> bool {
        false
    }

    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        self.run(ex, false)
    }

    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        self.run(ex, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The schemas of Membrane's `examples/validation/json-schema`.
    const SCHEMA2001: &str = r##"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "$id": "urn:app:schema2001",
  "type": "object",
  "required": ["params", "meta"],
  "properties": {
    "params": {"type": "array", "minItems": 2, "items": {"$ref": "urn:app:base_def#/$defs/BaseParameter"}},
    "meta": {"$ref": "urn:app:meta_def#/$defs/Meta"}
  },
  "additionalProperties": false
}"##;
    const BASE: &str = r##"{"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "urn:app:base_def",
  "$defs": {"BaseParameter": {"type": "object", "additionalProperties": true}}}"##;
    const META: &str = r##"{"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "urn:app:meta_def",
  "$defs": {"Meta": {"type": "object", "required": ["source"],
    "properties": {"source": {"type": "string", "minLength": 1}, "requestId": {"type": "string"}},
    "additionalProperties": false}}}"##;

    fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            let p = dir.path().join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        dir
    }

    fn mapping(id: &str, location: &str) -> SchemaMapping {
        SchemaMapping {
            id: id.into(),
            location: location.into(),
        }
    }

    #[test]
    fn valid_invalid_and_not_json() {
        let dir = dir_with(&[(
            "s.json",
            r#"{"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}}}"#,
        )]);
        let v = JsonSchemaValidator::load("s.json", None, &[], dir.path()).unwrap();
        v.check(br#"{"name": "a", "age": 3}"#).unwrap();
        let errs = v.check(br#"{"age": -1}"#).unwrap_err();
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(errs
            .iter()
            .any(|e| e["pointer"] == "/age" && e["keyword"] == "minimum"));
        assert!(errs
            .iter()
            .any(|e| e["pointer"] == "" && e["keyword"] == "required"));
        let errs = v.check(b"<xml/>").unwrap_err();
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0]["message"]
                .as_str()
                .unwrap()
                .starts_with("the body is not JSON"),
            "{errs:?}"
        );
        // A huge value is quoted shortened.
        let long = format!(r#"{{"name": 1, "age": "{}"}}"#, "x".repeat(5000));
        let errs = v.check(long.as_bytes()).unwrap_err();
        assert!(errs
            .iter()
            .all(|e| e["message"].as_str().unwrap().len() < 400));
    }

    #[test]
    fn schema_mappings_resolve_ref_ids_to_local_files() {
        let dir = dir_with(&[
            ("schemas/schema2001.json", SCHEMA2001),
            ("schemas/base.json", BASE),
            ("schemas/meta.json", META),
        ]);
        let maps = [
            mapping("urn:app:base_def", "schemas/base.json"),
            mapping("urn:app:meta_def", "schemas/meta.json"),
        ];
        let v =
            JsonSchemaValidator::load("schemas/schema2001.json", None, &maps, dir.path()).unwrap();
        v.check(br#"{"params": [{}, {"a": 1}], "meta": {"source": "x"}}"#)
            .unwrap();
        let errs = v
            .check(br#"{"params": [{}, 2], "meta": {"source": ""}}"#)
            .unwrap_err();
        let pointers: Vec<&str> = errs
            .iter()
            .map(|e| e["pointer"].as_str().unwrap())
            .collect();
        assert!(pointers.contains(&"/params/1"), "{errs:?}");
        assert!(pointers.contains(&"/meta/source"), "{errs:?}");
        assert_eq!(v.files.len(), 3);
        // Without the mappings the ids cannot be resolved: a load error at `jsonSchema`.
        let e = JsonSchemaValidator::load("schemas/schema2001.json", None, &maps[..1], dir.path())
            .unwrap_err();
        assert_eq!(e.key, "jsonSchema");
        assert!(e.message.contains("urn:app:meta_def"), "{}", e.message);
        // A mapping to a missing file: a load error at its location.
        let e = JsonSchemaValidator::load(
            "schemas/schema2001.json",
            None,
            &[mapping("urn:app:base_def", "schemas/nope.json")],
            dir.path(),
        )
        .unwrap_err();
        assert_eq!(e.key, "schemaMappings.schemas[0].location");
    }

    #[test]
    fn relative_refs_resolve_against_the_schema_file_and_yaml_is_read() {
        let dir = dir_with(&[
            (
                "a dir/main.yaml",
                "type: object\nproperties:\n  price:\n    $ref: defs/price.json\n",
            ),
            (
                "a dir/defs/price.json",
                r#"{"type": "number", "minimum": 0}"#,
            ),
        ]);
        let v = JsonSchemaValidator::load("a dir/main.yaml", None, &[], dir.path()).unwrap();
        v.check(br#"{"price": 3}"#).unwrap();
        let errs = v.check(br#"{"price": -3}"#).unwrap_err();
        assert_eq!(errs[0]["pointer"], "/price");
        assert_eq!(v.files.len(), 2, "{:?}", v.files);
    }

    #[test]
    fn schema_versions_select_the_draft() {
        // `exclusiveMinimum` is a boolean in draft 4 and a number from draft 6 on.
        let dir = dir_with(&[
            (
                "d4.json",
                r#"{"properties": {"n": {"minimum": 0, "exclusiveMinimum": true}}}"#,
            ),
            (
                "d6.json",
                r#"{"properties": {"n": {"exclusiveMinimum": 0}}}"#,
            ),
        ]);
        let v4 = JsonSchemaValidator::load("d4.json", Some(SchemaVersion::Draft4), &[], dir.path())
            .unwrap();
        assert!(v4.check(br#"{"n": 0}"#).is_err());
        v4.check(br#"{"n": 1}"#).unwrap();
        // The same document is not a valid draft 2020-12 schema.
        assert!(JsonSchemaValidator::load(
            "d4.json",
            Some(SchemaVersion::Draft202012),
            &[],
            dir.path()
        )
        .is_err());
        let v7 = JsonSchemaValidator::load("d6.json", Some(SchemaVersion::Draft7), &[], dir.path())
            .unwrap();
        assert!(v7.check(br#"{"n": 0}"#).is_err());
        for (text, want) in [
            ("04", SchemaVersion::Draft4),
            ("05", SchemaVersion::Draft4),
            ("06", SchemaVersion::Draft6),
            ("07", SchemaVersion::Draft7),
            ("2019-09", SchemaVersion::Draft201909),
            ("2020-12", SchemaVersion::Draft202012),
        ] {
            assert_eq!(SchemaVersion::parse(text), Some(want));
            let v: SchemaVersion = serde_json::from_value(json!(text)).unwrap();
            assert_eq!(v, want);
        }
        let v: SchemaVersion = serde_json::from_value(json!(7)).unwrap();
        assert_eq!(v, SchemaVersion::Draft7);
        assert!(serde_json::from_value::<SchemaVersion>(json!("2021-01")).is_err());
    }

    #[test]
    fn load_errors() {
        let dir = dir_with(&[
            ("broken.json", "{\"type\": "),
            ("bad.json", r#"{"type": "nothing"}"#),
            ("remote.json", r#"{"$ref": "https://example.com/s.json"}"#),
        ]);
        let e = JsonSchemaValidator::load("missing.json", None, &[], dir.path()).unwrap_err();
        assert_eq!(e.key, "jsonSchema");
        assert!(e.message.contains("cannot read"), "{}", e.message);
        let e = JsonSchemaValidator::load("broken.json", None, &[], dir.path()).unwrap_err();
        assert!(e.message.contains("invalid JSON"), "{}", e.message);
        let e = JsonSchemaValidator::load("bad.json", None, &[], dir.path()).unwrap_err();
        assert!(e.message.contains("invalid JSON Schema"), "{}", e.message);
        let e = JsonSchemaValidator::load("remote.json", None, &[], dir.path()).unwrap_err();
        assert!(e.message.contains("example.com"), "{}", e.message);
    }
}
