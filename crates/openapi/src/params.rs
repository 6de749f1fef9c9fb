//! Parameters: where they are read from (path, query, header, cookie), how their text is split
//! (`style`, `explode`), how the pieces become JSON values of the declared types, and the
//! compiled schema they are validated against.

use std::borrow::Cow;

use percent_encoding::percent_decode_str;
use serde_json::{Map, Number, Value};

use crate::convert::Direction;
use crate::load::SpecError;
use crate::schema::{Ctx, Schema};

/// Where a parameter is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// A path template parameter.
    Path,
    /// A query parameter.
    Query,
    /// A header.
    Header,
    /// A cookie.
    Cookie,
    /// OpenAPI 3.2's `in: querystring`: the whole query string as one value.
    Querystring,
}

impl Location {
    /// The name used in violation locations (`query.limit`).
    pub fn as_str(self) -> &'static str {
        match self {
            Location::Path => "path",
            Location::Query => "query",
            Location::Header => "header",
            Location::Cookie => "cookie",
            Location::Querystring => "querystring",
        }
    }
}

/// How a parameter's text is serialized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// `a,b,c` (path and header default).
    Simple,
    /// `.a.b` (path).
    Label,
    /// `;x=a,b` (path).
    Matrix,
    /// `x=a&x=b` or `x=a,b` (query and cookie default).
    Form,
    /// `x=a%20b`.
    SpaceDelimited,
    /// `x=a|b`.
    PipeDelimited,
    /// `x[k]=v`.
    DeepObject,
}

/// The JSON type a parameter's pieces are read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prim {
    /// A string (or no declared type).
    String,
    /// An integer.
    Integer,
    /// A number.
    Number,
    /// `true` / `false`.
    Boolean,
}

impl Prim {
    fn of(t: Option<&str>) -> Prim {
        match t {
            Some("integer") => Prim::Integer,
            Some("number") => Prim::Number,
            Some("boolean") => Prim::Boolean,
            _ => Prim::String,
        }
    }

    /// Reads `s` as this type; text that is not of the type stays a string (and so fails the
    /// schema's `type` check with a clear message).
    pub fn coerce(self, s: &str) -> Value {
        match self {
            Prim::String => Value::String(s.to_owned()),
            Prim::Integer | Prim::Number => {
                if let Ok(i) = s.parse::<i64>() {
                    return Value::Number(i.into());
                }
                if !s.is_empty() && !s.starts_with(['+', '.']) && !s.ends_with('.') {
                    if let Ok(f) = s.parse::<f64>() {
                        if let Some(n) = Number::from_f64(f).filter(|_| f.is_finite()) {
                            return Value::Number(n);
                        }
                    }
                }
                Value::String(s.to_owned())
            }
            Prim::Boolean => match s {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                _ => Value::String(s.to_owned()),
            },
        }
    }
}

/// The shape of a parameter's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// One value.
    Prim(Prim),
    /// An array of values.
    Array(Prim),
    /// An object whose properties have these types (others: strings).
    Object(Vec<(String, Prim)>),
    /// `content: application/json`: the text is JSON (a form field of an object type: JSON,
    /// or a string when it is not JSON).
    Json,
    /// A query string read like an `application/x-www-form-urlencoded` body (`in:
    /// querystring`): each field read as the shape listed for it (others: strings).
    Form(Vec<(String, Shape)>),
}

/// A compiled parameter.
#[derive(Debug)]
pub struct Param {
    /// Its name (headers: lower case).
    pub name: String,
    /// Where it is.
    pub location: Location,
    /// `required`.
    pub required: bool,
    /// `style`.
    pub style: Style,
    /// `explode`.
    pub explode: bool,
    /// How to read it.
    pub shape: Shape,
    /// Its schema.
    pub schema: Option<Schema>,
    /// For path parameters: the index in the route's template.
    pub path_index: usize,
    /// Its location in violations (`query.limit`), built once.
    pub label: String,
}

impl Param {
    /// An undeclared path parameter: a required string.
    pub(crate) fn plain_path(name: String, index: usize) -> Param {
        Param {
            location: Location::Path,
            required: true,
            style: Style::Simple,
            explode: false,
            shape: Shape::Prim(Prim::String),
            schema: None,
            path_index: index,
            label: format!("path.{name}"),
            name,
        }
    }

    /// Compiles the parameter at `ptr`; `None` for headers OpenAPI says to ignore.
    pub(crate) fn compile(
        ctx: &Ctx<'_>,
        p: &Value,
        ptr: &str,
        path_names: &[String],
    ) -> Result<Option<Param>, SpecError> {
        Self::compile_as(ctx, p, ptr, path_names, None)
    }

    /// Compiles a response header declaration (`responses.<code>.headers.<name>`): a header
    /// parameter whose schema is read in the response direction.
    pub(crate) fn compile_response_header(
        ctx: &Ctx<'_>,
        h: &Value,
        ptr: &str,
        name: &str,
    ) -> Result<Option<Param>, SpecError> {
        if name.eq_ignore_ascii_case("content-type") {
            return Ok(None); // OpenAPI: ignored.
        }
        Self::compile_as(ctx, h, ptr, &[], Some(name))
    }

    fn compile_as(
        ctx: &Ctx<'_>,
        p: &Value,
        ptr: &str,
        path_names: &[String],
        response_header: Option<&str>,
    ) -> Result<Option<Param>, SpecError> {
        let (p, ptr) = ctx.resolve(p, ptr.to_owned())?;
        let dir = if response_header.is_some() {
            Direction::Response
        } else {
            Direction::Request
        };
        let name = match response_header {
            Some(n) => n,
            None => p
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| ctx.err(&ptr, "parameter without `name`"))?,
        };
        let location = match (response_header, p.get("in").and_then(Value::as_str)) {
            (Some(_), _) => Location::Header,
            (None, Some("path")) => Location::Path,
            (None, Some("query")) => Location::Query,
            (None, Some("header")) => Location::Header,
            (None, Some("cookie")) => Location::Cookie,
            (None, Some("querystring")) => Location::Querystring,
            (None, other) => {
                return Err(ctx.err(
                    &ptr,
                    format!(
                    "parameter `{name}`: `in` must be path, query, header or cookie (or querystring in OpenAPI 3.2), not {other:?}"
                ),
                ))
            }
        };
        if location == Location::Querystring {
            return Self::compile_querystring(ctx, p, &ptr, name).map(Some);
        }
        if location == Location::Header
            && response_header.is_none()
            && ["accept", "content-type", "authorization"]
                .contains(&name.to_ascii_lowercase().as_str())
        {
            return Ok(None);
        }
        let path_index = if location == Location::Path {
            path_names.iter().position(|n| n == name).ok_or_else(|| {
                ctx.err(
                    &ptr,
                    format!("path parameter `{name}` is not in the path template"),
                )
            })?
        } else {
            0
        };
        let style = match p.get("style").and_then(Value::as_str) {
            None => match location {
                Location::Path | Location::Header => Style::Simple,
                Location::Query | Location::Cookie | Location::Querystring => Style::Form,
            },
            Some("simple") => Style::Simple,
            Some("label") => Style::Label,
            Some("matrix") => Style::Matrix,
            Some("form") => Style::Form,
            Some("spaceDelimited") => Style::SpaceDelimited,
            Some("pipeDelimited") => Style::PipeDelimited,
            Some("deepObject") => Style::DeepObject,
            Some(s) => return Err(ctx.err(&ptr, format!("unknown style `{s}`"))),
        };
        let explode = p
            .get("explode")
            .and_then(Value::as_bool)
            .unwrap_or(style == Style::Form);
        let (shape, schema) = if let Some(s) = p.get("schema") {
            let sptr = format!("{ptr}/schema");
            let shape = match ctx.schema_type(s, &sptr).as_deref() {
                Some("array") => {
                    let (s, sp) = ctx.resolve(s, sptr.clone())?;
                    let items = s
                        .get("items")
                        .and_then(|i| ctx.schema_type(i, &format!("{sp}/items")));
                    Shape::Array(Prim::of(items.as_deref()))
                }
                Some("object") => {
                    let (s, sp) = ctx.resolve(s, sptr.clone())?;
                    let mut props = Vec::new();
                    if let Some(Value::Object(m)) = s.get("properties") {
                        for (k, v) in m {
                            let t = ctx.schema_type(v, &format!("{sp}/properties/{k}"));
                            props.push((k.clone(), Prim::of(t.as_deref())));
                        }
                    }
                    Shape::Object(props)
                }
                t => Shape::Prim(Prim::of(t)),
            };
            (shape, Some(ctx.schema(&sptr, dir)?))
        } else if let Some(Value::Object(c)) = p.get("content") {
            match c.iter().next() {
                Some((mt, m)) if m.get("schema").is_some() => {
                    let sptr = format!("{ptr}/content/{}/schema", crate::convert::escape(mt));
                    (Shape::Json, Some(ctx.schema(&sptr, dir)?))
                }
                _ => (Shape::Json, None),
            }
        } else {
            (Shape::Prim(Prim::String), None)
        };
        let name = if location == Location::Header {
            name.to_ascii_lowercase()
        } else {
            name.to_owned()
        };
        Ok(Some(Param {
            label: format!("{}.{name}", location.as_str()),
            name,
            location,
            required: location == Location::Path
                || p.get("required").and_then(Value::as_bool).unwrap_or(false),
            style,
            explode,
            shape,
            schema,
            path_index,
        }))
    }

    /// An `in: querystring` parameter (OpenAPI 3.2): its `content` describes the whole query
    /// string; the media type `application/x-www-form-urlencoded` (else the first one) gives
    /// the schema, and the query string is read like a form body. Without `content`, or
    /// without a schema, nothing is checked.
    fn compile_querystring(
        ctx: &Ctx<'_>,
        p: &Value,
        ptr: &str,
        name: &str,
    ) -> Result<Param, SpecError> {
        let media = match p.get("content") {
            Some(Value::Object(c)) => c
                .iter()
                .find(|(mt, _)| crate::media::essence(mt) == "application/x-www-form-urlencoded")
                .or_else(|| c.iter().next()),
            _ => None,
        };
        let (shape, schema) = match media {
            Some((mt, m)) if m.get("schema").is_some() => {
                let sptr = format!("{ptr}/content/{}/schema", crate::convert::escape(mt));
                let fields = form_fields(ctx, &m["schema"], &sptr)?;
                (
                    Shape::Form(fields),
                    Some(ctx.schema(&sptr, Direction::Request)?),
                )
            }
            _ => (Shape::Form(Vec::new()), None),
        };
        Ok(Param {
            label: format!("querystring.{name}"),
            name: name.to_owned(),
            location: Location::Querystring,
            // An absent query string is an empty form: its schema says what is required.
            required: false,
            style: Style::Form,
            explode: true,
            shape,
            schema,
            path_index: 0,
        })
    }

    /// Reads a path, header or cookie parameter's raw text (not yet percent-decoded for paths).
    pub fn read_single(&self, raw: &str) -> Result<Value, String> {
        let decode = |s: &str| -> String {
            if self.location == Location::Path {
                percent_decode_str(s).decode_utf8_lossy().into_owned()
            } else {
                s.to_owned()
            }
        };
        let mut text: &str = raw;
        let sep = match self.style {
            Style::Label => {
                text = text.strip_prefix('.').unwrap_or(text);
                if self.explode {
                    '.'
                } else {
                    ','
                }
            }
            Style::Matrix => {
                let prefix = format!(";{}=", self.name);
                if self.explode && matches!(self.shape, Shape::Array(_)) {
                    let items: Vec<&str> = text.split(&prefix).filter(|s| !s.is_empty()).collect();
                    return Ok(self.build_list(items.into_iter().map(&decode).collect()));
                }
                text = text
                    .strip_prefix(&prefix)
                    .unwrap_or(text.strip_prefix(';').unwrap_or(text));
                if self.explode {
                    ';'
                } else {
                    ','
                }
            }
            _ => ',',
        };
        match &self.shape {
            Shape::Json => {
                serde_json::from_str(&decode(text)).map_err(|e| format!("not valid JSON: {e}"))
            }
            Shape::Form(fields) => Ok(form_value(text, fields)),
            Shape::Prim(t) => Ok(t.coerce(&decode(text))),
            Shape::Array(_) if text.is_empty() => Ok(Value::Array(Vec::new())),
            Shape::Array(_) => Ok(self.build_list(text.split(sep).map(&decode).collect())),
            Shape::Object(props) => {
                let mut m = Map::new();
                if self.explode {
                    for pair in text.split(sep) {
                        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                        let k = decode(k);
                        let t = prop_type(props, &k);
                        m.insert(k, t.coerce(&decode(v)));
                    }
                } else {
                    let parts: Vec<&str> = text.split(sep).collect();
                    for kv in parts.chunks(2) {
                        let k = decode(kv[0]);
                        let v = kv.get(1).map_or(String::new(), |v| decode(v));
                        let t = prop_type(props, &k);
                        m.insert(k, t.coerce(&v));
                    }
                }
                Ok(Value::Object(m))
            }
        }
    }

    fn build_list(&self, items: Vec<String>) -> Value {
        let t = match self.shape {
            Shape::Array(t) => t,
            _ => Prim::String,
        };
        Value::Array(items.iter().map(|s| t.coerce(s)).collect())
    }

    /// Reads a query parameter from the decoded query pairs; `None` when absent.
    pub fn read_query(
        &self,
        query: &[(Cow<'_, str>, Cow<'_, str>)],
    ) -> Option<Result<Value, String>> {
        let values = || {
            query
                .iter()
                .filter(|(k, _)| k == &self.name)
                .map(|(_, v)| v.as_ref())
        };
        match (&self.shape, self.style) {
            (Shape::Object(props), Style::DeepObject) => {
                let prefix = format!("{}[", self.name);
                let mut m = Map::new();
                for (k, v) in query {
                    if let Some(inner) = k.strip_prefix(&prefix).and_then(|r| r.strip_suffix(']')) {
                        m.insert(inner.to_owned(), prop_type(props, inner).coerce(v));
                    }
                }
                (!m.is_empty()).then_some(Ok(Value::Object(m)))
            }
            (Shape::Object(props), Style::Form) if self.explode => {
                let mut m = Map::new();
                for (k, v) in query {
                    if let Some((_, t)) = props.iter().find(|(n, _)| n == k) {
                        m.insert(k.to_string(), t.coerce(v));
                    }
                }
                (!m.is_empty()).then_some(Ok(Value::Object(m)))
            }
            (Shape::Array(t), _) => {
                let vals: Vec<&str> = values().collect();
                if vals.is_empty() {
                    return None;
                }
                let sep = match self.style {
                    Style::SpaceDelimited => Some(' '),
                    Style::PipeDelimited => Some('|'),
                    _ if self.explode => None,
                    _ => Some(','),
                };
                let items: Vec<Value> = match sep {
                    None => vals.iter().map(|v| t.coerce(v)).collect(),
                    // An empty value is an empty array (`csv=`), not one empty element.
                    Some(c) => vals
                        .iter()
                        .filter(|v| !v.is_empty())
                        .flat_map(|v| v.split(c))
                        .map(|v| t.coerce(v))
                        .collect(),
                };
                Some(Ok(Value::Array(items)))
            }
            _ => {
                let v = values().next()?;
                Some(match &self.shape {
                    Shape::Json => {
                        serde_json::from_str(v).map_err(|e| format!("not valid JSON: {e}"))
                    }
                    Shape::Prim(t) => Ok(t.coerce(v)),
                    _ => self.read_single(v),
                })
            }
        }
    }
}

fn prop_type(props: &[(String, Prim)], name: &str) -> Prim {
    props
        .iter()
        .find(|(n, _)| n == name)
        .map_or(Prim::String, |(_, t)| *t)
}

/// A form (`a=1&b=x&b=y`, a query string or an `application/x-www-form-urlencoded` body) as a
/// JSON object: each field read as its listed shape (repeated fields of array shape become
/// arrays; fields of object shape are parsed as JSON), the first of repeated other fields
/// counting; unlisted fields are strings.
pub fn form_value(text: &str, fields: &[(String, Shape)]) -> Value {
    let pairs = parse_query(text);
    let mut obj = Map::new();
    for (k, v) in &pairs {
        let shape = fields.iter().find(|(n, _)| n == k).map(|(_, s)| s);
        match shape {
            Some(Shape::Array(t)) => {
                let entry = obj
                    .entry(k.to_string())
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(a) = entry {
                    a.push(t.coerce(v));
                }
            }
            Some(Shape::Prim(t)) => {
                obj.entry(k.to_string()).or_insert_with(|| t.coerce(v));
            }
            Some(Shape::Json) => {
                obj.entry(k.to_string()).or_insert_with(|| {
                    serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_string()))
                });
            }
            _ => {
                obj.entry(k.to_string())
                    .or_insert_with(|| Value::String(v.to_string()));
            }
        }
    }
    Value::Object(obj)
}

/// Splits and decodes a query string (`+` is a space).
pub fn parse_query(q: &str) -> Vec<(Cow<'_, str>, Cow<'_, str>)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (dec(k), dec(v))
        })
        .collect()
}

fn dec(s: &str) -> Cow<'_, str> {
    if !s.contains(['%', '+']) {
        return Cow::Borrowed(s);
    }
    let s = s.replace('+', " ");
    Cow::Owned(percent_decode_str(&s).decode_utf8_lossy().into_owned())
}

/// The value of cookie `name` in a `Cookie` header.
pub fn cookie<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|c| {
        let (k, v) = c.trim().split_once('=')?;
        (k == name).then_some(v)
    })
}

/// How the fields of a form body (or of an `in: querystring` parameter) are read: the types of
/// the schema's properties; runs at load time.
pub(crate) fn form_fields(
    ctx: &Ctx<'_>,
    schema: &Value,
    ptr: &str,
) -> Result<Vec<(String, Shape)>, SpecError> {
    let prim = |t: Option<String>| match t.as_deref() {
        Some("integer") => Prim::Integer,
        Some("number") => Prim::Number,
        Some("boolean") => Prim::Boolean,
        _ => Prim::String,
    };
    let (s, sptr) = ctx.resolve(schema, ptr.to_owned())?;
    let mut out = Vec::new();
    if let Some(Value::Object(props)) = s.get("properties") {
        for (name, p) in props {
            let pptr = format!("{sptr}/properties/{}", crate::convert::escape(name));
            let shape = match ctx.schema_type(p, &pptr).as_deref() {
                Some("array") => {
                    let (ps, pp) = ctx.resolve(p, pptr.clone())?;
                    let items = ps
                        .get("items")
                        .and_then(|i| ctx.schema_type(i, &format!("{pp}/items")));
                    Shape::Array(prim(items))
                }
                Some("object") => Shape::Json,
                t => Shape::Prim(prim(t.map(str::to_owned))),
            };
            out.push((name.clone(), shape));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(location: Location, style: Style, explode: bool, shape: Shape) -> Param {
        Param {
            name: "x".into(),
            location,
            required: false,
            style,
            explode,
            shape,
            schema: None,
            path_index: 0,
            label: String::new(),
        }
    }

    #[test]
    fn coerces_types() {
        assert_eq!(Prim::Integer.coerce("12"), Value::from(12));
        assert_eq!(Prim::Number.coerce("2.5"), Value::from(2.5));
        assert_eq!(Prim::Integer.coerce("abc"), Value::from("abc"));
        assert_eq!(Prim::Number.coerce("NaN"), Value::from("NaN"));
        assert_eq!(Prim::Boolean.coerce("true"), Value::from(true));
        assert_eq!(Prim::Boolean.coerce("yes"), Value::from("yes"));
    }

    #[test]
    fn path_styles() {
        let p = param(
            Location::Path,
            Style::Simple,
            false,
            Shape::Array(Prim::Integer),
        );
        assert_eq!(
            p.read_single("1,2,3").unwrap(),
            serde_json::json!([1, 2, 3])
        );
        let p = param(
            Location::Path,
            Style::Label,
            true,
            Shape::Array(Prim::String),
        );
        assert_eq!(
            p.read_single(".a.b").unwrap(),
            serde_json::json!(["a", "b"])
        );
        let p = param(
            Location::Path,
            Style::Matrix,
            false,
            Shape::Prim(Prim::Integer),
        );
        assert_eq!(p.read_single(";x=5").unwrap(), serde_json::json!(5));
        let p = param(
            Location::Path,
            Style::Matrix,
            true,
            Shape::Array(Prim::Integer),
        );
        assert_eq!(
            p.read_single(";x=1;x=2").unwrap(),
            serde_json::json!([1, 2])
        );
        let p = param(
            Location::Path,
            Style::Simple,
            true,
            Shape::Object(vec![("n".into(), Prim::Integer)]),
        );
        assert_eq!(
            p.read_single("n=1,s=a%20b").unwrap(),
            serde_json::json!({"n": 1, "s": "a b"})
        );
        let p = param(Location::Path, Style::Simple, false, Shape::Object(vec![]));
        assert_eq!(
            p.read_single("a,1,b,2").unwrap(),
            serde_json::json!({"a": "1", "b": "2"})
        );
    }

    #[test]
    fn query_styles() {
        let q = parse_query("x=1&x=2&y=a+b&z=1%7C2&d[a]=1&d[b]=x&n=3");
        let p = param(
            Location::Query,
            Style::Form,
            true,
            Shape::Array(Prim::Integer),
        );
        assert_eq!(
            p.read_query(&q).unwrap().unwrap(),
            serde_json::json!([1, 2])
        );
        let mut p = param(
            Location::Query,
            Style::Form,
            false,
            Shape::Prim(Prim::String),
        );
        p.name = "y".into();
        assert_eq!(p.read_query(&q).unwrap().unwrap(), serde_json::json!("a b"));
        let mut p = param(
            Location::Query,
            Style::PipeDelimited,
            false,
            Shape::Array(Prim::Integer),
        );
        p.name = "z".into();
        assert_eq!(
            p.read_query(&q).unwrap().unwrap(),
            serde_json::json!([1, 2])
        );
        let mut p = param(
            Location::Query,
            Style::DeepObject,
            true,
            Shape::Object(vec![("a".into(), Prim::Integer)]),
        );
        p.name = "d".into();
        assert_eq!(
            p.read_query(&q).unwrap().unwrap(),
            serde_json::json!({"a": 1, "b": "x"})
        );
        let p = param(
            Location::Query,
            Style::Form,
            true,
            Shape::Object(vec![("n".into(), Prim::Integer)]),
        );
        assert_eq!(
            p.read_query(&q).unwrap().unwrap(),
            serde_json::json!({"n": 3})
        );
        let mut p = param(
            Location::Query,
            Style::Form,
            true,
            Shape::Prim(Prim::String),
        );
        p.name = "absent".into();
        assert!(p.read_query(&q).is_none());
        assert_eq!(cookie("a=1; sid=xyz", "sid"), Some("xyz"));
        // An empty delimited value is an empty array, not one empty element.
        let mut p = param(
            Location::Query,
            Style::Form,
            false,
            Shape::Array(Prim::Integer),
        );
        p.name = "e".into();
        let q2 = parse_query("e=");
        assert_eq!(p.read_query(&q2).unwrap().unwrap(), serde_json::json!([]));
        let p2 = param(
            Location::Header,
            Style::Simple,
            false,
            Shape::Array(Prim::Integer),
        );
        assert_eq!(p2.read_single("").unwrap(), serde_json::json!([]));
    }
}
