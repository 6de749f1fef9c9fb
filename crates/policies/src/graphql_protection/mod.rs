//! `graphQLProtection`: Membrane's checks of GraphQL-over-HTTP requests. The request's
//! `query`, `operationName`, `variables` and `extensions` come from the query string (`GET`) or
//! the body (`POST`, `application/json` or `application/graphql`); the query is parsed with
//! `apollo-parser` ([`document`]) and checked against the limits (depth, recursion of a field
//! name, mutations) and the `disallow` list (named mutations, all mutations, introspection,
//! subscriptions). The first failed check answers; a request that passes is forwarded unchanged.

pub mod document;
#[cfg(test)]
mod tests;

use std::collections::HashMap;

use http::{header, HeaderValue, Method, StatusCode};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use turnpike_config::units::Flag;
use turnpike_core::problems;
use turnpike_core::{BodyNeed, Exchange, Outcome, Policy, Problem};
use turnpike_core::{CompileContext, CompileError, Phases, PolicyFactory};

use crate::err;
use document::{OperationType, ParseError};

/// `graphQLProtection`: Membrane's settings and defaults.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GraphQlProtectionSettings {
    /// Whether requests may carry GraphQL `extensions`; default false.
    #[serde(default)]
    pub allow_extensions: Option<Flag>,
    /// The HTTP methods GraphQL requests may use, comma-separated: `GET`, `POST` or both
    /// (the default).
    #[serde(default)]
    pub allowed_methods: Option<String>,
    /// How often one field name may repeat along a path of nested fields; default 3.
    #[serde(default)]
    pub max_recursion: Option<u32>,
    /// How deep fields may nest; default 7.
    #[serde(default)]
    pub max_depth: Option<u32>,
    /// Most mutations (top-level fields of the mutation operations) in one document;
    /// default 5.
    #[serde(default)]
    pub max_mutations: Option<u32>,
    /// GraphQL features refused outright.
    #[serde(default)]
    pub disallow: Option<Vec<Disallow>>,
}

/// One entry of `disallow`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub enum Disallow {
    /// The mutation of this name (a top-level field of a mutation operation):
    /// `mutation: updateCategory` or `mutation: {name: updateCategory}`.
    Mutation(MutationName),
    /// Every mutation (`mutations: {}`).
    Mutations(Option<Nothing>),
    /// Introspection: any field whose name starts with `__` (`introspection: {}`).
    Introspection(Option<Nothing>),
    /// Subscription operations (`subscription: {}`).
    Subscription(Option<Nothing>),
}

/// The name of a disallowed mutation, as a scalar or under `name`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum MutationName {
    /// `mutation: updateCategory`.
    Short(String),
    /// `mutation: {name: updateCategory}`.
    Long(MutationNameLong),
}

/// `mutation: {name: ...}`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MutationNameLong {
    /// The mutation's name.
    pub name: String,
}

/// An entry without settings (`{}`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Nothing {}

/// A compiled `disallow` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Filter {
    Mutation(String),
    Mutations,
    Introspection,
    Subscription,
}

/// The compiled `graphQLProtection` policy.
#[derive(Debug)]
pub struct GraphQlProtection {
    allow_extensions: bool,
    allow_get: bool,
    allow_post: bool,
    max_recursion: usize,
    max_depth: usize,
    max_mutations: usize,
    filters: Vec<Filter>,
}

impl PolicyFactory for GraphQlProtection {
    const NAME: &'static str = "graphQLProtection";
    const PHASES: Phases = Phases::REQUEST;
    type Settings = GraphQlProtectionSettings;

    /// Compiles the settings; `allowedMethods` may name only `GET` and `POST`, and a named
    /// mutation must not be empty.
    fn compile(
        c: GraphQlProtectionSettings,
        _ctx: &CompileContext<'_>,
    ) -> Result<Self, CompileError> {
        let (mut allow_get, mut allow_post) = (true, true);
        if let Some(methods) = &c.allowed_methods {
            (allow_get, allow_post) = (false, false);
            for m in methods.split(',').map(str::trim) {
                match m {
                    "GET" => allow_get = true,
                    "POST" => allow_post = true,
                    other => {
                        return Err(err(
                            "allowedMethods",
                            format!("may only allow GET or POST, not `{other}`"),
                        ))
                    }
                }
            }
        }
        let mut filters = Vec::new();
        for (i, d) in c.disallow.unwrap_or_default().into_iter().enumerate() {
            filters.push(match d {
                Disallow::Mutation(n) => {
                    let name = match n {
                        MutationName::Short(s) => s,
                        MutationName::Long(l) => l.name,
                    };
                    let name = name.trim();
                    if name.is_empty() {
                        return Err(err(
                            &format!("disallow[{i}].mutation"),
                            "the mutation's name must not be empty",
                        ));
                    }
                    Filter::Mutation(name.to_owned())
                }
                Disallow::Mutations(_) => Filter::Mutations,
                Disallow::Introspection(_) => Filter::Introspection,
                Disallow::Subscription(_) => Filter::Subscription,
            });
        }
        Ok(GraphQlProtection {
            allow_extensions: c.allow_extensions.is_some_and(|f| f.0),
            allow_get,
            allow_post,
            max_recursion: c.max_recursion.unwrap_or(3) as usize,
            max_depth: c.max_depth.unwrap_or(7) as usize,
            max_mutations: c.max_mutations.unwrap_or(5) as usize,
            filters,
        })
    }
}

/// A failed check: the status, the setting or rule it concerns, and Membrane's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rejection {
    pub status: StatusCode,
    pub violation: &'static str,
    pub detail: String,
}

fn reject(status: StatusCode, violation: &'static str, detail: impl Into<String>) -> Rejection {
    Rejection {
        status,
        violation,
        detail: detail.into(),
    }
}

fn bad(violation: &'static str, detail: impl Into<String>) -> Rejection {
    reject(StatusCode::BAD_REQUEST, violation, detail)
}

/// The members of a GraphQL-over-HTTP request (JSON values, as a `POST` body holds them).
#[derive(Debug, Default)]
struct Data {
    query: Option<Value>,
    operation_name: Option<Value>,
    variables: Option<Value>,
    extensions: Option<Value>,
}

const QUERY: &str = "query";
const OPERATION_NAME: &str = "operationName";
const VARIABLES: &str = "variables";
const EXTENSIONS: &str = "extensions";

/// Decodes a query string as `application/x-www-form-urlencoded`; `None` when an escape is
/// malformed, a name or value is not UTF-8, or a name is given twice (Membrane refuses those).
fn form_pairs(raw: &str) -> Option<HashMap<String, String>> {
    fn decode(s: &str) -> Option<String> {
        let b = s.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'%' {
                let hex = b.get(i + 1..i + 3)?;
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                i += 3;
            } else {
                i += 1;
            }
        }
        let plus = s.replace('+', " ");
        percent_encoding::percent_decode_str(&plus)
            .decode_utf8()
            .ok()
            .map(|c| c.into_owned())
    }
    let mut out = HashMap::new();
    for pair in raw.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if out.insert(decode(k)?, decode(v)?).is_some() {
            return None;
        }
    }
    Some(out)
}

/// Parses a JSON text with Membrane's strictness: valid, and no key twice in one object.
fn strict_json(bytes: &[u8]) -> Option<Value> {
    crate::json_protection::Scanner::check(crate::json_protection::Limits::unlimited(), bytes)
        .ok()?;
    serde_json::from_slice(bytes).ok()
}

impl GraphQlProtection {
    fn allowed(&self) -> &'static str {
        match (self.allow_get, self.allow_post) {
            (true, true) => "GET, POST",
            (true, false) => "GET",
            _ => "POST",
        }
    }

    /// The members of a `GET` request, from its query string.
    fn data_get(ex: &Exchange) -> Result<Data, Rejection> {
        let Some(raw) = ex.request.uri.query() else {
            return Err(bad("request", "No query parameters found."));
        };
        let mut params =
            form_pairs(raw).ok_or_else(|| bad("request", "Error decoding query string."))?;
        let json = |v: String| -> Result<Value, Rejection> {
            match strict_json(v.as_bytes()) {
                Some(v @ (Value::Object(_) | Value::Null)) => Ok(v),
                _ => Err(reject(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "request",
                    "Error parsing variables or extensions from request JSON.",
                )),
            }
        };
        Ok(Data {
            query: params.remove(QUERY).map(Value::String),
            operation_name: params.remove(OPERATION_NAME).map(Value::String),
            variables: params.remove(VARIABLES).map(json).transpose()?,
            extensions: params.remove(EXTENSIONS).map(json).transpose()?,
        })
    }

    /// The members of a `POST` request, from its body.
    fn data_post(ex: &Exchange) -> Result<Data, Rejection> {
        if let Some(raw) = ex.request.uri.query() {
            let params =
                form_pairs(raw).ok_or_else(|| bad("request", "Error decoding query string."))?;
            for key in [QUERY, OPERATION_NAME, VARIABLES, EXTENSIONS] {
                if params.contains_key(key) {
                    return Err(bad(
                        "request",
                        format!("'{key}' is not allowed as query parameter while using POST."),
                    ));
                }
            }
        }
        let mut types = ex.request.headers.get_all(header::CONTENT_TYPE).iter();
        let ct = match (types.next(), types.next()) {
            (None, _) => return Err(bad("request", "No 'Content-Type' found.")),
            (Some(_), Some(_)) => {
                return Err(bad("request", "Found multiple 'Content-Type' headers."))
            }
            (Some(ct), None) => ct
                .to_str()
                .map_err(|_| bad("request", "Could not parse 'Content-Type' header."))?,
        };
        let mut parts = ct.split(';');
        let essence = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        if essence.split('/').filter(|p| !p.is_empty()).count() != 2 {
            return Err(bad("request", "Could not parse 'Content-Type' header."));
        }
        if let Some(enc) = ex
            .request
            .headers
            .get_all(header::CONTENT_ENCODING)
            .iter()
            .find(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"))
        {
            return Err(bad(
                "request",
                format!(
                    "The body is compressed (Content-Encoding: {}) and cannot be checked.",
                    String::from_utf8_lossy(enc.as_bytes())
                ),
            ));
        }
        let body: &[u8] = ex.request_bytes().map_or(&[], |b| b.as_ref());
        match essence.as_str() {
            "application/graphql" => Ok(Data {
                query: Some(Value::String(String::from_utf8_lossy(body).into_owned())),
                ..Data::default()
            }),
            "application/json" => {
                let charset = parts.find_map(|p| {
                    let (k, v) = p.split_once('=')?;
                    k.trim()
                        .eq_ignore_ascii_case("charset")
                        .then(|| v.trim().trim_matches('"').to_owned())
                });
                if charset.is_some_and(|c| !c.eq_ignore_ascii_case("utf-8")) {
                    return Err(bad(
                        "request",
                        "Invalid charset in 'Content-Type': Expected 'utf-8'.",
                    ));
                }
                let Some(Value::Object(mut m)) = strict_json(body) else {
                    return Err(bad("request", "Error decoding JSON object."));
                };
                Ok(Data {
                    query: m.remove(QUERY),
                    operation_name: m.remove(OPERATION_NAME),
                    variables: m.remove(VARIABLES),
                    extensions: m.remove(EXTENSIONS),
                })
            }
            _ => Err(bad(
                "request",
                "Expected 'Content-Type: application/json' or 'Content-Type: application/graphql'.",
            )),
        }
    }

    /// Runs every check on the request, in Membrane's order. Returns the first failure.
    pub(crate) fn check(&self, ex: &Exchange) -> Result<(), Rejection> {
        let get = ex.request.method == Method::GET;
        let post = ex.request.method == Method::POST;
        if !(get && self.allow_get || post && self.allow_post) {
            return Err(reject(
                StatusCode::METHOD_NOT_ALLOWED,
                "allowedMethods",
                "Invalid method.",
            ));
        }
        let data = if get {
            Self::data_get(ex)?
        } else {
            Self::data_post(ex)?
        };
        let present = |v: &Option<Value>| v.as_ref().is_some_and(|v| !v.is_null());
        if present(&data.extensions) && !self.allow_extensions {
            return Err(bad(
                "allowExtensions",
                "GraphQL 'extensions' are forbidden.",
            ));
        }
        if present(&data.variables) && !matches!(data.variables, Some(Value::Object(_))) {
            return Err(bad("request", "Expected 'variables' to be a JSON Object."));
        }
        if present(&data.extensions) && !matches!(data.extensions, Some(Value::Object(_))) {
            return Err(bad("request", "Expected 'extensions' to be a JSON Object."));
        }
        let query = match &data.query {
            None | Some(Value::Null) => {
                return Err(bad("request", "Parameter 'query' is missing."))
            }
            Some(Value::String(q)) => q,
            Some(_) => return Err(bad("request", "Expected 'query' to be of type 'String'.")),
        };
        let doc = document::parse(query).map_err(|e| match e {
            ParseError::Syntax => reject(
                StatusCode::UNPROCESSABLE_ENTITY,
                "syntax",
                "Error parsing GraphQL request.",
            ),
            ParseError::NotExecutable => reject(
                StatusCode::UNPROCESSABLE_ENTITY,
                "syntax",
                "Error parsing GraphQL request: only operations and fragments are allowed.",
            ),
            ParseError::TooDeep => bad(
                "maxDepth",
                format!(
                    "The document is nested more than {} levels deep.",
                    document::MAX_NESTING
                ),
            ),
        })?;
        for f in &self.filters {
            match f {
                Filter::Mutation(name) if doc.has_mutation_field(name) => {
                    return Err(bad(
                        "disallow",
                        format!("Mutation \"{name}\" not permitted."),
                    ));
                }
                Filter::Mutations if doc.mutations().next().is_some() => {
                    return Err(bad("disallow", "No mutations are permitted."));
                }
                Filter::Introspection if doc.has_introspection() => {
                    return Err(bad("disallow", "Introspection is not permitted."));
                }
                Filter::Subscription if doc.has_subscription() => {
                    return Err(bad("disallow", "Subscriptions are not permitted."));
                }
                _ => {}
            }
        }
        if doc.mutation_count() > self.max_mutations {
            return Err(bad(
                "maxMutations",
                "Too many mutations defined in document.",
            ));
        }
        if let Some(e) = doc.names_error() {
            return Err(bad("names", e));
        }
        if get
            && doc
                .operations
                .iter()
                .any(|o| o.explicit && o.kind != OperationType::Query)
        {
            return Err(reject(
                StatusCode::METHOD_NOT_ALLOWED,
                "allowedMethods",
                "'GET' may only be used for GraphQL 'query's.",
            ));
        }
        let operation_name = match &data.operation_name {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.as_str()),
            Some(_) => return Err(bad("request", "Expected 'operationName' to be a String.")),
        };
        let op = doc
            .operation(operation_name)
            .map_err(|e| bad("operationName", e))?;
        if let Some((violation, detail)) = doc.depth_error(op, self.max_depth, self.max_recursion) {
            return Err(bad(violation, detail));
        }
        Ok(())
    }

    /// The problem answered for a failed check: `method-not-allowed` (405, with `Allow`) for
    /// a method the settings or the operation do not allow, else `validation` with Membrane's
    /// status (400, or 422 for a query or JSON that cannot be parsed).
    fn problem(&self, r: Rejection, get_only_queries: bool) -> Problem {
        let p = if r.status == StatusCode::METHOD_NOT_ALLOWED {
            let allow = if get_only_queries {
                "POST"
            } else {
                self.allowed()
            };
            Problem::new(&problems::METHOD_NOT_ALLOWED)
                .with_header(header::ALLOW, HeaderValue::from_static(allow))
        } else {
            Problem::new(&problems::VALIDATION).with_status(r.status)
        };
        p.with_detail(r.detail)
            .with_member("violation", r.violation.into())
    }
}

impl Policy for GraphQlProtection {
    fn name(&self) -> &'static str {
        "graphQLProtection"
    }

    /// The body is read into memory when `POST` requests are allowed (they carry the query in
    /// it).
    fn body_need(&self) -> BodyNeed {
        if self.allow_post {
            BodyNeed::Buffer
        } else {
            BodyNeed::None
        }
    }

    fn response_needs_request(&self) -> bool {
        false
    }

    /// Checks the request; returns `Continue` when every check passes, else the problem of the
    /// first that failed.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        match self.check(ex) {
            Ok(()) => Outcome::Continue,
            Err(r) => {
                tracing::info!("graphQLProtection: {}", r.detail);
                let get_only = r.status == StatusCode::METHOD_NOT_ALLOWED
                    && ex.request.method == Method::GET
                    && self.allow_get;
                Outcome::Reject(self.problem(r, get_only))
            }
        }
    }
}
