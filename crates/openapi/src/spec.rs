//! A compiled spec: its operations with their parameters, bodies and responses, every schema
//! compiled once into a validator, and a path matcher over its paths below the base path.

use std::sync::Arc;

use http::Method;
use serde_json::Value;
use turnpike_core::exchange::PathParams;
use turnpike_core::router::PathSpec;
use turnpike_core::{RouteSpec, Router};

use crate::convert::{self, Direction, Version};
use crate::load::{LoadedSpec, SpecError};
pub use crate::media::{essence, essence_cow};
use crate::params::{Location, Param};
use crate::schema::Ctx;
pub use crate::schema::Schema;
use crate::security::{self, Schemes, Security};

/// One media type an operation accepts or a response declares.
#[derive(Debug)]
pub struct Media {
    /// `type/subtype` in lower case (`*/*` and `type/*` are ranges).
    pub range: String,
    /// The body schema, when one is declared.
    pub schema: Option<Schema>,
    /// For `application/x-www-form-urlencoded` with a schema: how each field is read (fields
    /// not listed are strings).
    pub form: Option<Vec<(String, crate::params::Shape)>>,
    /// For `multipart/form-data` with a schema: how each part is read (parts not listed are
    /// strings, or JSON when their Content-Type says so).
    pub parts: Option<Vec<crate::multipart::Field>>,
    /// For a response: its example (declared, or made from the schema), for mocking.
    pub example: Option<Value>,
}

/// A request body declaration.
#[derive(Debug)]
pub struct RequestBody {
    /// `required: true`.
    pub required: bool,
    /// The accepted media types.
    pub media: Vec<Media>,
}

/// The status codes a response declaration covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusPattern {
    /// One code (`"201"`).
    Code(u16),
    /// A class (`"4XX"`): the first digit.
    Class(u16),
    /// `default`.
    Default,
}

/// A declared response.
#[derive(Debug)]
pub struct ResponseDecl {
    /// Which statuses.
    pub status: StatusPattern,
    /// Its media types (empty: no body declared).
    pub media: Vec<Media>,
    /// Its declared headers.
    pub headers: Vec<Param>,
}

/// One operation (a method of a path).
#[derive(Debug)]
pub struct Operation {
    /// The method.
    pub method: Method,
    /// `operationId`, when given.
    pub id: Option<String>,
    /// Path-level and operation-level parameters merged.
    pub params: Vec<Param>,
    /// The request body declaration.
    pub body: Option<RequestBody>,
    /// The declared responses.
    pub responses: Vec<ResponseDecl>,
    /// True when some query parameter is declared (the query is then parsed).
    pub has_query: bool,
    /// The operation's own `security` list, when it has one.
    pub security: Option<Security>,
}

/// One path of the spec and its operations.
#[derive(Debug)]
pub struct PathItem {
    /// The path template as written in the spec (without the base path).
    pub template: String,
    /// The operations.
    pub ops: Vec<Operation>,
    /// The `Allow` header value.
    pub allow: http::HeaderValue,
}

/// A compiled OpenAPI spec.
#[derive(Debug)]
pub struct Spec {
    /// `info.title`.
    pub title: String,
    /// `info.version`.
    pub version: String,
    /// The id used in `/api-docs/<id>` (title and version in lower case, with dashes).
    pub id: String,
    /// The path of the first `servers` URL (`/shop/v2`), without trailing `/`; "" when none.
    pub base_path: String,
    /// The first `servers` URL when it is absolute (`http://host:port/...`).
    pub server_url: Option<String>,
    /// The `servers` URL the published document shows (default: `base_path`).
    pub published_url: Option<String>,
    /// The bundled document (every referenced file included).
    pub doc: Value,
    /// The original text of the root file.
    pub text: String,
    /// The paths.
    pub paths: Vec<PathItem>,
    /// The local files the spec was read from (root first).
    pub files: Vec<std::path::PathBuf>,
    /// The document's global `security` list, when it has one.
    pub security: Option<Security>,
    /// `x-membrane-validation.security` of the document, when given.
    pub membrane_security: Option<bool>,
    /// Security requirements `validateSecurity` could not check (undefined or unsupported
    /// schemes), with where they are named.
    security_problems: Vec<SpecError>,
    router: Router<usize>,
}

/// What [`Spec::find`] found.
#[derive(Debug)]
pub enum Found<'a> {
    /// The operation, its path, the ranges of the path parameters, and the indexes of the path
    /// and the operation.
    Op(&'a PathItem, &'a Operation, PathParams, (usize, usize)),
    /// No path of the spec matches.
    NoPath,
    /// The path exists but not with this method.
    NoMethod(&'a PathItem),
}

/// The fields of a path item that hold operations, and their methods' names.
const METHODS: &[(&str, &str)] = &[
    ("get", "GET"),
    ("put", "PUT"),
    ("post", "POST"),
    ("delete", "DELETE"),
    ("options", "OPTIONS"),
    ("head", "HEAD"),
    ("patch", "PATCH"),
    ("trace", "TRACE"),
    // OpenAPI 3.2: a safe read that carries a request body.
    ("query", "QUERY"),
];

impl Spec {
    /// Compiles a loaded spec; errors say where in which file.
    pub fn compile(loaded: LoadedSpec) -> Result<Spec, SpecError> {
        Spec::compile_at(loaded, None)
    }

    /// [`Spec::compile`], with the operations under `base_path` instead of the path of the
    /// first `servers` URL (Membrane's `rewrite.basePath`; `""` or `/` for the root).
    pub fn compile_at(loaded: LoadedSpec, at: Option<&str>) -> Result<Spec, SpecError> {
        let doc = &loaded.doc;
        let top = |msg: &str| SpecError {
            at: loaded.locate(""),
            message: msg.to_owned(),
        };
        let version = match doc.get("openapi").and_then(Value::as_str) {
            Some(v) if v.starts_with("3.0") => Version::V30,
            Some(v) if v.starts_with("3.1") => Version::V31,
            // 3.2 keeps 3.1's schemas.
            Some(v) if v.starts_with("3.2") => Version::V31,
            Some(v) => {
                return Err(SpecError {
                    at: loaded.locate("/openapi"),
                    message: format!(
                        "OpenAPI version `{v}` is not supported (3.0.x, 3.1.x and 3.2.x are)"
                    ),
                })
            }
            None => return Err(top(
                "not an OpenAPI 3 document: no `openapi` version (Swagger 2.0 is not supported)",
            )),
        };
        let info = doc.get("info");
        let title = info
            .and_then(|i| i.get("title"))
            .and_then(Value::as_str)
            .unwrap_or("api")
            .to_owned();
        let spec_version = info
            .and_then(|i| i.get("version"))
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .unwrap_or_default();
        let id = slug(&format!("{title} v{spec_version}"));
        let server = doc
            .get("servers")
            .and_then(|s| s.get(0))
            .and_then(|s| s.get("url"))
            .and_then(Value::as_str)
            .unwrap_or("/");
        let (server_url, base_path) = split_server(server);
        let base_path = match at {
            Some(p) => p.trim_end_matches('/').to_owned(),
            None => base_path,
        };
        let mut req_doc = doc.clone();
        convert::convert_doc(&mut req_doc, version, Direction::Request);
        let mut res_doc = doc.clone();
        convert::convert_doc(&mut res_doc, version, Direction::Response);
        let ctx = Ctx {
            loaded: &loaded,
            req_doc: Arc::new(req_doc),
            res_doc: Arc::new(res_doc),
        };
        let mut paths = Vec::new();
        let mut routes = Vec::new();
        let schemes = Schemes::compile(&ctx)?;
        let mut security_problems = Vec::new();
        let global_security = security::compile(&ctx, &schemes, doc, "", &mut security_problems);
        if let Some(Value::Object(ps)) = doc.get("paths") {
            for (template, item) in ps {
                let ptr = format!("/paths/{}", convert::escape(template));
                let (item, item_ptr) = ctx.resolve(item, ptr.clone())?;
                let full = format!("{base_path}{template}");
                let spec = PathSpec::Template(full.clone());
                let names = spec
                    .param_names()
                    .map_err(|m| ctx.err(&ptr, format!("unsupported path template: {m}")))?;
                let mut declared: Vec<(Method, &Value, String)> = Vec::new();
                for (field, name) in METHODS {
                    let Some(op) = item.get(*field) else { continue };
                    let op_ptr = format!("{item_ptr}/{field}");
                    let method = Method::from_bytes(name.as_bytes())
                        .map_err(|_| ctx.err(&op_ptr, "invalid method"))?;
                    declared.push((method, op, op_ptr));
                }
                // OpenAPI 3.2: operations of other methods, keyed by the method as sent.
                match item.get("additionalOperations") {
                    None => {}
                    Some(Value::Object(more)) => {
                        for (name, op) in more {
                            let op_ptr = format!(
                                "{item_ptr}/additionalOperations/{}",
                                convert::escape(name)
                            );
                            if METHODS.iter().any(|(_, m)| m.eq_ignore_ascii_case(name)) {
                                return Err(ctx.err(
                                    &op_ptr,
                                    format!("`{name}` has a field of its own in a path item (`{}`): `additionalOperations` is for other methods", name.to_ascii_lowercase()),
                                ));
                            }
                            let method = Method::from_bytes(name.as_bytes()).map_err(|_| {
                                ctx.err(&op_ptr, format!("`{name}` is not an HTTP method"))
                            })?;
                            declared.push((method, op, op_ptr));
                        }
                    }
                    Some(_) => {
                        return Err(ctx.err(
                            &format!("{item_ptr}/additionalOperations"),
                            "`additionalOperations` must be a map of methods to operations",
                        ))
                    }
                }
                let mut ops = Vec::new();
                for (method, op, op_ptr) in declared {
                    let (op, op_ptr) = ctx.resolve(op, op_ptr)?;
                    ops.push(compile_op(
                        &ctx,
                        method,
                        item,
                        &item_ptr,
                        op,
                        &op_ptr,
                        &names,
                        &schemes,
                        &mut security_problems,
                    )?);
                }
                let allow = ops
                    .iter()
                    .map(|o| o.method.as_str())
                    .collect::<Vec<_>>()
                    .join(", ");
                let allow = http::HeaderValue::from_str(&allow)
                    .map_err(|_| ctx.err(&ptr, "invalid methods"))?;
                routes.push((
                    RouteSpec {
                        hosts: Vec::new(),
                        method: None,
                        path: spec,
                    },
                    paths.len(),
                ));
                paths.push(PathItem {
                    template: template.clone(),
                    ops,
                    allow,
                });
            }
        } else if version == Version::V30 {
            return Err(top("the spec has no `paths`"));
        }
        let router = Router::build(routes).map_err(|(i, m)| {
            let t = paths.get(i).map_or("", |p| p.template.as_str());
            ctx.err(&format!("/paths/{}", convert::escape(t)), m)
        })?;
        drop(ctx);
        let files = loaded.local_files();
        let membrane_security = ["/x-membrane-validation", "/info/x-membrane-validation"]
            .iter()
            .find_map(|p| loaded.doc.pointer(p))
            .and_then(|v| v.get("security"))
            .and_then(|v| match v {
                Value::Bool(b) => Some(*b),
                Value::String(s) => match s.to_ascii_lowercase().as_str() {
                    "yes" | "true" | "on" => Some(true),
                    "no" | "false" | "off" => Some(false),
                    _ => None,
                },
                _ => None,
            });
        Ok(Spec {
            files,
            security: global_security,
            membrane_security,
            security_problems,
            title,
            version: spec_version,
            id,
            base_path,
            server_url,
            published_url: None,
            doc: loaded.doc,
            text: loaded.text,
            paths,
            router,
        })
    }

    /// Finds the operation for a request path (with the base path) and method (`HEAD` falls back
    /// to the path's `GET`).
    pub fn find(&self, method: &Method, path: &str) -> Found<'_> {
        let Some(m) = self.router.lookup(None, method, path) else {
            return Found::NoPath;
        };
        let item = &self.paths[*m.value];
        let pos = item
            .ops
            .iter()
            .position(|o| o.method == method)
            .or_else(|| {
                // HEAD is GET without the body (RFC 9110): a path with GET answers HEAD too.
                (*method == Method::HEAD)
                    .then(|| item.ops.iter().position(|o| o.method == Method::GET))
                    .flatten()
            });
        match pos {
            Some(i) => Found::Op(item, &item.ops[i], m.params, (*m.value, i)),
            None => Found::NoMethod(item),
        }
    }

    /// Runs at load time when `validateSecurity` is on: an error for the first `security`
    /// requirement naming a scheme that is not defined or cannot be checked (`mutualTLS`, HTTP
    /// schemes other than basic and bearer).
    pub fn check_security(&self) -> Result<(), SpecError> {
        match self.security_problems.first() {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// True when some operation declares a request body with a schema.
    pub fn has_body_schemas(&self) -> bool {
        self.paths.iter().flat_map(|p| &p.ops).any(|o| {
            o.body
                .as_ref()
                .is_some_and(|b| b.media.iter().any(|m| m.schema.is_some()))
        })
    }
}

#[allow(clippy::too_many_arguments)]
fn compile_op(
    ctx: &Ctx<'_>,
    method: Method,
    item: &Value,
    item_ptr: &str,
    op: &Value,
    op_ptr: &str,
    path_names: &[String],
    schemes: &Schemes,
    security_problems: &mut Vec<SpecError>,
) -> Result<Operation, SpecError> {
    let mut params: Vec<Param> = Vec::new();
    for (owner, owner_ptr) in [(item, item_ptr), (op, op_ptr)] {
        if let Some(Value::Array(ps)) = owner.get("parameters") {
            for (i, p) in ps.iter().enumerate() {
                let p = Param::compile(ctx, p, &format!("{owner_ptr}/parameters/{i}"), path_names)?;
                let Some(p) = p else { continue };
                // Operation-level parameters override path-level ones of the same name and place.
                params.retain(|q| !(q.name == p.name && q.location == p.location));
                params.push(p);
            }
        }
    }
    for (i, name) in path_names.iter().enumerate() {
        if !params
            .iter()
            .any(|p| p.location == Location::Path && &p.name == name)
        {
            // Undeclared path parameters are taken as strings.
            params.push(Param::plain_path(name.clone(), i));
        }
    }
    let body = match op.get("requestBody") {
        None => None,
        Some(b) => {
            let (b, bptr) = ctx.resolve(b, format!("{op_ptr}/requestBody"))?;
            Some(RequestBody {
                required: b.get("required").and_then(Value::as_bool).unwrap_or(false),
                media: compile_media(ctx, b, &bptr, Direction::Request)?,
            })
        }
    };
    let mut responses = Vec::new();
    if let Some(Value::Object(rs)) = op.get("responses") {
        for (code, r) in rs {
            let rptr = format!("{op_ptr}/responses/{}", convert::escape(code));
            let status = parse_status(code).ok_or_else(|| {
                ctx.err(
                    &rptr,
                    format!("`{code}` is not a status code, `4XX` or `default`"),
                )
            })?;
            let (r, rptr) = ctx.resolve(r, rptr)?;
            let mut headers = Vec::new();
            if let Some(Value::Object(hs)) = r.get("headers") {
                for (name, h) in hs {
                    let hptr = format!("{rptr}/headers/{}", convert::escape(name));
                    if let Some(p) = Param::compile_response_header(ctx, h, &hptr, name)? {
                        headers.push(p);
                    }
                }
            }
            responses.push(ResponseDecl {
                status,
                media: compile_media(ctx, r, &rptr, Direction::Response)?,
                headers,
            });
        }
    }
    let has_query = params.iter().any(|p| p.location == Location::Query);
    let security = security::compile(ctx, schemes, op, op_ptr, security_problems);
    Ok(Operation {
        security,
        method,
        id: op
            .get("operationId")
            .and_then(Value::as_str)
            .map(str::to_owned),
        params,
        body,
        responses,
        has_query,
    })
}

fn compile_media(
    ctx: &Ctx<'_>,
    owner: &Value,
    ptr: &str,
    dir: Direction,
) -> Result<Vec<Media>, SpecError> {
    let mut out = Vec::new();
    if let Some(Value::Object(content)) = owner.get("content") {
        for (range, m) in content {
            let mptr = format!("{ptr}/content/{}", convert::escape(range));
            let schema = match m.get("schema") {
                Some(_) => Some(ctx.schema(&format!("{mptr}/schema"), dir)?),
                None => None,
            };
            let range = essence(range);
            let form = match (range.as_str(), m.get("schema")) {
                ("application/x-www-form-urlencoded", Some(sv)) => Some(
                    crate::params::form_fields(ctx, sv, &format!("{mptr}/schema"))?,
                ),
                _ => None,
            };
            let parts = match (range.as_str(), m.get("schema")) {
                ("multipart/form-data", Some(sv)) => Some(multipart_fields(
                    ctx,
                    sv,
                    &format!("{mptr}/schema"),
                    m.get("encoding"),
                )?),
                _ => None,
            };
            let example = match dir {
                Direction::Response => crate::example::media_example(m, &ctx.loaded.doc),
                Direction::Request => None,
            };
            out.push(Media {
                range,
                schema,
                form,
                parts,
                example,
            });
        }
    }
    Ok(out)
}

/// The properties of a schema (following `$ref`s, and through `allOf`): name, schema and pointer.
fn properties<'v>(
    ctx: &'v Ctx<'_>,
    schema: &'v Value,
    ptr: &str,
    out: &mut Vec<(String, &'v Value, String)>,
    depth: usize,
) -> Result<(), SpecError> {
    if depth > 16 {
        return Ok(());
    }
    let (s, sptr) = ctx.resolve(schema, ptr.to_owned())?;
    if let Some(Value::Object(props)) = s.get("properties") {
        for (name, p) in props {
            if !out.iter().any(|(n, _, _)| n == name) {
                let pptr = format!("{sptr}/properties/{}", convert::escape(name));
                out.push((name.clone(), p, pptr));
            }
        }
    }
    if let Some(Value::Array(all)) = s.get("allOf") {
        for (i, sub) in all.iter().enumerate() {
            properties(ctx, sub, &format!("{sptr}/allOf/{i}"), out, depth + 1)?;
        }
    }
    Ok(())
}

/// How the parts of a `multipart/form-data` body are read: the types of the schema's
/// properties, and the `contentType` of the media type's `encoding` entries.
fn multipart_fields(
    ctx: &Ctx<'_>,
    schema: &Value,
    ptr: &str,
    encoding: Option<&Value>,
) -> Result<Vec<crate::multipart::Field>, SpecError> {
    use crate::params::Prim;
    let prim = |t: Option<&str>| match t {
        Some("integer") => Some(Prim::Integer),
        Some("number") => Some(Prim::Number),
        Some("boolean") => Some(Prim::Boolean),
        Some("string") => Some(Prim::String),
        _ => None,
    };
    let mut props = Vec::new();
    properties(ctx, schema, ptr, &mut props, 0)?;
    let mut out = Vec::new();
    for (name, p, pptr) in props {
        let t = ctx.schema_type(p, &pptr);
        let (array, item) = match t.as_deref() {
            Some("array") => {
                let (ps, pp) = ctx.resolve(p, pptr.clone())?;
                let items = ps
                    .get("items")
                    .and_then(|i| ctx.schema_type(i, &format!("{pp}/items")));
                (true, items)
            }
            _ => (false, t),
        };
        let content_types: Vec<String> = encoding
            .and_then(|e| e.get(&name))
            .and_then(|e| e.get("contentType"))
            .and_then(Value::as_str)
            .map(|c| {
                c.split(',')
                    .map(essence)
                    .filter(|c| !c.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        let json = matches!(item.as_deref(), Some("object" | "array"))
            || content_types.iter().any(|c| crate::media::is_json(c));
        out.push(crate::multipart::Field {
            label: format!("#/body/{}", convert::escape(&name)),
            prim: prim(item.as_deref()),
            array,
            json,
            content_types,
            name,
        });
    }
    Ok(out)
}

fn parse_status(code: &str) -> Option<StatusPattern> {
    if code == "default" {
        return Some(StatusPattern::Default);
    }
    let b = code.as_bytes();
    if b.len() == 3 && (b'1'..=b'5').contains(&b[0]) {
        if b[1..].eq_ignore_ascii_case(b"XX") {
            return Some(StatusPattern::Class(u16::from(b[0] - b'0')));
        }
        return code.parse().ok().map(StatusPattern::Code);
    }
    None
}

/// Splits a `servers` URL into the absolute URL (if any) and the base path.
fn split_server(url: &str) -> (Option<String>, String) {
    let (abs, path) = match url.find("://") {
        Some(i) => {
            let rest = &url[i + 3..];
            let path = rest.find('/').map_or("", |p| &rest[p..]);
            (Some(url.to_owned()), path)
        }
        None => (None, url),
    };
    let path = path.split(['?', '#']).next().unwrap_or("");
    (abs, path.trim_end_matches('/').to_owned())
}

/// Lower-case letters and digits joined by single dashes.
pub fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_and_slugs() {
        assert_eq!(
            split_server("https://api.predic8.de/shop/v2/"),
            (
                Some("https://api.predic8.de/shop/v2/".into()),
                "/shop/v2".into()
            )
        );
        assert_eq!(split_server("/"), (None, String::new()));
        assert_eq!(
            split_server("http://h:1"),
            (Some("http://h:1".into()), String::new())
        );
        assert_eq!(slug("Fruit Shop API v2.2.0"), "fruit-shop-api-v2-2-0");
        assert_eq!(parse_status("4XX"), Some(StatusPattern::Class(4)));
        assert_eq!(parse_status("201"), Some(StatusPattern::Code(201)));
        assert_eq!(parse_status("abc"), None);
        assert_eq!(
            essence("Application/JSON; charset=utf-8"),
            "application/json"
        );
    }
}
