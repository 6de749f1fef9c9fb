//! Templates: strings with `${...}` placeholders resolved per request from the exchange.
//! Parsed once at load time; an unknown placeholder is a load error.
//!
//! Placeholders: `${path.NAME}` (a path parameter of the API's template), `${header.NAME}`,
//! `${query.NAME}`, `${method}`, `${client.ip}`, `${client.certSubject}` (the verified client
//! certificate's subject, with mutual TLS), `${consumer.name}` (set by an auth policy),
//! `${jwt.CLAIM}` (a claim of the verified JWT), `${env.NAME}` (read once, at load time).
//! With the `jsonpath` language
//! ([`Template::parse_jsonpath`]) every placeholder is an RFC 9535 JSONPath expression on the
//! message's JSON body: `${$.person.firstName}`. `${property.NAME}` (also `${properties['NAME']}`,
//! with `.FIELD`/`['FIELD']` into a JSON value) reads an exchange property
//! ([`crate::properties`]). Other placeholders can be supplied by the caller at parse time
//! ([`Template::parse_with`], [`Template::parse_each`]) as a [`Placeholder`].

use std::borrow::Cow;
use std::sync::Arc;

use http::HeaderName;

use crate::exchange::Exchange;
use crate::json;
use crate::jsonpath::{JsonPathExpr, Message};

/// What a template may refer to, known at load time.
#[derive(Debug, Clone, Default)]
pub struct TemplateScope {
    /// Names of the path parameters of the API's path template, in order.
    pub path_params: Vec<String>,
    /// The name of the API (Membrane's `exchange.proxy.name`).
    pub api_name: String,
}

/// A placeholder compiled outside this module (an XPath expression, an expression of another
/// language): rendered per request into the output.
pub trait Placeholder: std::fmt::Debug + Send + Sync {
    /// Appends the value for `msg` of `ex` to `out` (nothing when there is none).
    fn render(&self, ex: &Exchange, msg: Message, out: &mut String);
    /// True when the value is read from the message body (which must then be buffered).
    fn needs_body(&self) -> bool;
    /// True when the value is read from the request head.
    fn reads_request(&self) -> bool {
        false
    }
    /// Appends the value as a JSON value (a placeholder of a JSON template outside a string
    /// literal): by default the rendered text as a JSON string.
    fn render_json(&self, ex: &Exchange, msg: Message, out: &mut String) {
        let mut s = String::new();
        self.render(ex, msg, &mut s);
        push_json_string(&s, out);
    }
}

/// Appends `s` as a JSON string literal (quoted and escaped).
pub fn push_json_string(s: &str, out: &mut String) {
    out.push('"');
    push_json_escaped(s, out);
    out.push('"');
}

/// Appends `s` escaped for the inside of a JSON string literal (no quotes added).
pub fn push_json_escaped(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
}

/// Finds a placeholder this module does not know: `None` when the name is not the caller's
/// either, `Some(Err)` when it is but is malformed.
pub type PlaceholderFinder<'a> = &'a dyn Fn(&str) -> Option<Result<Arc<dyn Placeholder>, String>>;

/// Compiles every placeholder of a template written in another language.
pub type PlaceholderCompiler<'a> = &'a dyn Fn(&str) -> Result<Arc<dyn Placeholder>, String>;

#[derive(Debug, Clone)]
enum Part {
    Lit(String),
    PathParam(usize),
    Header(HeaderName),
    Query(String),
    Method,
    ClientIp,
    ClientCertSubject,
    ConsumerName,
    JwtClaim(String),
    JsonPath(Box<JsonPathExpr>),
    /// The request path.
    Path,
    /// The response status ("" before there is a response).
    Status,
    /// The message body as text.
    Body,
    /// An exchange property, and the path into its JSON value.
    Property(String, Vec<String>),
    /// A placeholder supplied by the caller.
    Ext(Arc<dyn Placeholder>),
}

impl PartialEq for Part {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Part::Lit(a), Part::Lit(b)) => a == b,
            (Part::PathParam(a), Part::PathParam(b)) => a == b,
            (Part::Header(a), Part::Header(b)) => a == b,
            (Part::Query(a), Part::Query(b)) => a == b,
            (Part::JwtClaim(a), Part::JwtClaim(b)) => a == b,
            (Part::JsonPath(a), Part::JsonPath(b)) => a == b,
            (Part::Property(a, x), Part::Property(b, y)) => a == b && x == y,
            (Part::Ext(a), Part::Ext(b)) => Arc::ptr_eq(a, b),
            (a, b) => {
                std::mem::discriminant(a) == std::mem::discriminant(b)
                    && matches!(
                        a,
                        Part::Method
                            | Part::ClientIp
                            | Part::ClientCertSubject
                            | Part::ConsumerName
                            | Part::Path
                            | Part::Status
                            | Part::Body
                    )
            }
        }
    }
}

/// `property.a.b`, `properties['a']['b']`, `property.a.get("b")` → ("a", ["b"]).
fn property_path(name: &str) -> Option<Result<(String, Vec<String>), String>> {
    let rest = name
        .strip_prefix("properties")
        .or_else(|| name.strip_prefix("property"))?;
    if !(rest.starts_with('.') || rest.starts_with('[')) {
        return None;
    }
    let mut segs = Vec::new();
    let mut r = rest;
    while !r.is_empty() {
        if let Some(after) = r.strip_prefix(".get(") {
            let Some(end) = after.find(')') else {
                return Some(Err(format!("`${{{name}}}`: unclosed `get(`")));
            };
            segs.push(after[..end].trim().trim_matches(['\'', '"']).to_owned());
            r = &after[end + 1..];
        } else if let Some(after) = r.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let seg = &after[..end];
            if seg.is_empty()
                || !seg
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                return Some(Err(format!(
                    "`${{{name}}}`: a property is read as `property.NAME`, `property['NAME']`, and `.FIELD` or `['FIELD']` into its value"
                )));
            }
            segs.push(seg.to_owned());
            r = &after[end..];
        } else if let Some(after) = r.strip_prefix('[') {
            let Some(end) = after.find(']') else {
                return Some(Err(format!("`${{{name}}}`: unclosed `[`")));
            };
            segs.push(after[..end].trim().trim_matches(['\'', '"']).to_owned());
            r = &after[end + 1..];
        } else {
            return Some(Err(format!(
                "`${{{name}}}`: a property is read as `property.NAME`, `property['NAME']`, and `.FIELD` or `['FIELD']` into its value"
            )));
        }
    }
    if segs.is_empty() {
        return Some(Err(format!("`${{{name}}}`: missing property name")));
    }
    let first = segs.remove(0);
    Some(Ok((first, segs)))
}

/// A compiled template.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    parts: Vec<Part>,
    /// Set by [`Template::json`]: for each part, whether it stands inside a JSON string
    /// literal of the text around it.
    json: Option<Box<[bool]>>,
}

impl Template {
    /// Parses `src`; fails with a message naming the unknown or malformed placeholder.
    pub fn parse(src: &str, scope: &TemplateScope) -> Result<Self, String> {
        Self::parse_with(src, scope, &|_| None)
    }

    /// Parses `src`, asking `find` for the placeholders this module does not know.
    pub fn parse_with(
        src: &str,
        scope: &TemplateScope,
        find: PlaceholderFinder<'_>,
    ) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut rest = src;
        while let Some(start) = rest.find("${") {
            if start > 0 {
                parts.push(Part::Lit(rest[..start].to_owned()));
            }
            let after = &rest[start + 2..];
            let end = after
                .find('}')
                .ok_or_else(|| format!("unclosed `${{` in `{src}`"))?;
            let name = after[..end].trim();
            let part = match Self::placeholder(name, scope) {
                Ok(p) => p,
                Err(e) => match find(name) {
                    Some(found) => Part::Ext(found?),
                    None => return Err(e),
                },
            };
            parts.push(part);
            rest = &after[end + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Lit(rest.to_owned()));
        }
        // `${env.X}` became text: join neighbouring literals so that a template without
        // per-request placeholders stays a literal.
        let mut merged: Vec<Part> = Vec::with_capacity(parts.len());
        for p in parts {
            match (merged.last_mut(), p) {
                (Some(Part::Lit(a)), Part::Lit(b)) => a.push_str(&b),
                (_, p) => merged.push(p),
            }
        }
        Ok(Template {
            parts: merged,
            json: None,
        })
    }

    /// Parses `src` whose placeholders are JSONPath expressions (`${$.a.b}`), compiled now.
    pub fn parse_jsonpath(src: &str) -> Result<Self, String> {
        Self::parse_placeholders(src, &|e| {
            JsonPathExpr::parse(e).map(|p| Part::JsonPath(Box::new(p)))
        })
    }

    /// Parses `src` whose every placeholder is compiled by `compile` (an XPath expression, …).
    pub fn parse_each(src: &str, compile: PlaceholderCompiler<'_>) -> Result<Self, String> {
        Self::parse_placeholders(src, &|e| compile(e).map(Part::Ext))
    }

    fn parse_placeholders(
        src: &str,
        compile: &dyn Fn(&str) -> Result<Part, String>,
    ) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut rest = src;
        while let Some(start) = rest.find("${") {
            if start > 0 {
                parts.push(Part::Lit(rest[..start].to_owned()));
            }
            let after = &rest[start + 2..];
            // The expression may hold braces of its own: find the `}` that closes this one.
            let mut depth = 0usize;
            let end = after
                .char_indices()
                .find(|&(_, c)| match c {
                    '{' => {
                        depth += 1;
                        false
                    }
                    '}' if depth == 0 => true,
                    '}' => {
                        depth -= 1;
                        false
                    }
                    _ => false,
                })
                .map(|(i, _)| i)
                .ok_or_else(|| format!("unclosed `${{` in `{src}`"))?;
            parts.push(compile(&after[..end])?);
            rest = &after[end + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Lit(rest.to_owned()));
        }
        Ok(Template { parts, json: None })
    }

    /// True when rendering reads the message body (JSONPath placeholders): the body must then
    /// be buffered, and [`Template::prepare`] called before rendering.
    pub fn needs_body(&self) -> bool {
        self.parts.iter().any(|p| match p {
            Part::JsonPath(_) | Part::Body => true,
            Part::Ext(e) => e.needs_body(),
            _ => false,
        })
    }

    /// True when rendering reads the request head (headers, query, method, path parameters,
    /// client): JSONPath placeholders and literal text do not.
    pub fn reads_request(&self) -> bool {
        self.parts.iter().any(|p| match p {
            Part::Ext(e) => e.reads_request(),
            p => !matches!(
                p,
                Part::Lit(_) | Part::JsonPath(_) | Part::Body | Part::Status | Part::Property(..)
            ),
        })
    }

    /// Parses the body of `msg` as JSON if the template reads it and nobody parsed it yet.
    pub fn prepare(&self, ex: &mut Exchange, msg: Message) {
        if self
            .parts
            .iter()
            .any(|p| matches!(p, Part::JsonPath(_) | Part::Body))
        {
            let _ = match msg {
                Message::Request => json::request_json(ex),
                Message::Response => json::response_json(ex),
            };
        }
    }

    fn placeholder(name: &str, scope: &TemplateScope) -> Result<Part, String> {
        match name {
            "method" => return Ok(Part::Method),
            "path" => return Ok(Part::Path),
            "statusCode" | "status" => return Ok(Part::Status),
            "body" => return Ok(Part::Body),
            _ => {}
        }
        // Membrane's spellings: `header['X']`, `params.q`, `json.a.b`, `jsonPath('$.a')`.
        if let Some(h) = name
            .strip_prefix("header[")
            .and_then(|r| r.strip_suffix(']'))
            .map(|r| r.trim_matches(|c| c == '\'' || c == '"'))
        {
            return HeaderName::from_bytes(h.as_bytes())
                .map(Part::Header)
                .map_err(|_| format!("`${{{name}}}`: `{h}` is not a valid header name"));
        }
        if let Some(q) = ["params.", "param.", "params?.", "param?."]
            .iter()
            .find_map(|p| name.strip_prefix(p))
        {
            // `${param.name[0]}`, `${params.name?[0]}`: the first value, which is what a
            // query placeholder gives.
            let q = q.strip_suffix("[0]").unwrap_or(q);
            let q = q
                .strip_suffix("?.")
                .or_else(|| q.strip_suffix('?'))
                .unwrap_or(q);
            return Ok(Part::Query(q.to_owned()));
        }
        if let Some(p) = name.strip_prefix("json.") {
            return JsonPathExpr::parse(&format!("$.{p}")).map(|e| Part::JsonPath(Box::new(e)));
        }
        if let Some(p) = name
            .strip_prefix("jsonPath(")
            .and_then(|r| r.strip_suffix(')'))
            .map(|r| r.trim_matches(|c| c == '\'' || c == '"'))
        {
            return JsonPathExpr::parse(p).map(|e| Part::JsonPath(Box::new(e)));
        }
        if let Some(p) = property_path(name) {
            let (first, rest) = p?;
            return Ok(Part::Property(first, rest));
        }
        if name == "client.ip" {
            return Ok(Part::ClientIp);
        }
        if name == "client.certSubject" {
            return Ok(Part::ClientCertSubject);
        }
        if name == "consumer.name" {
            return Ok(Part::ConsumerName);
        }
        if let Some(c) = name.strip_prefix("jwt.") {
            if c.is_empty() {
                return Err(format!("`${{{name}}}`: missing claim name"));
            }
            return Ok(Part::JwtClaim(c.to_owned()));
        }
        if let Some(e) = name.strip_prefix("env.") {
            return std::env::var(e)
                .map(Part::Lit)
                .map_err(|_| format!("`${{{name}}}`: environment variable `{e}` is not set"));
        }
        // `pathParam.X` is Membrane's spelling.
        if let Some(p) = name
            .strip_prefix("path.")
            .or_else(|| name.strip_prefix("pathParam."))
        {
            return scope
                .path_params
                .iter()
                .position(|n| n == p)
                .map(Part::PathParam)
                .ok_or_else(|| {
                    if scope.path_params.is_empty() {
                        format!("`${{{name}}}`: the API's path has no parameters")
                    } else {
                        format!(
                            "`${{{name}}}`: the API's path has no parameter `{p}` (it has: {})",
                            scope.path_params.join(", ")
                        )
                    }
                });
        }
        if let Some(h) = name.strip_prefix("header.") {
            return HeaderName::from_bytes(h.as_bytes())
                .map(Part::Header)
                .map_err(|_| format!("`${{{name}}}`: `{h}` is not a valid header name"));
        }
        if let Some(q) = name.strip_prefix("query.") {
            if q.is_empty() {
                return Err(format!("`${{{name}}}`: missing query parameter name"));
            }
            return Ok(Part::Query(q.to_owned()));
        }
        Err(format!(
            "unknown template `${{{name}}}` (known: ${{path.NAME}}, ${{header.NAME}}, ${{query.NAME}}, ${{method}}, ${{path}}, ${{statusCode}}, ${{body}}, ${{json.FIELD}}, ${{client.ip}}, ${{client.certSubject}}, ${{consumer.name}}, ${{jwt.CLAIM}}, ${{property.NAME}}, ${{env.NAME}})"
        ))
    }

    /// The text when the template has no placeholder.
    pub fn as_literal(&self) -> Option<&str> {
        match self.parts.as_slice() {
            [] => Some(""),
            [Part::Lit(s)] => Some(s),
            _ => None,
        }
    }

    /// Renders the template for the request of `ex`. Missing headers and parameters render as "".
    pub fn render<'a>(&'a self, ex: &'a Exchange) -> Cow<'a, str> {
        self.render_for(ex, Message::Request)
    }

    /// Renders the template; JSONPath placeholders read the body of `msg` (parsed by
    /// [`Template::prepare`]; an unparsed or non-JSON body renders as "").
    pub fn render_for<'a>(&'a self, ex: &'a Exchange, msg: Message) -> Cow<'a, str> {
        if let Some(l) = self.as_literal() {
            return Cow::Borrowed(l);
        }
        let mut out = String::new();
        if let Some(inside) = &self.json {
            self.render_json_into(ex, msg, inside, &mut out);
            return Cow::Owned(out);
        }
        self.render_into(ex, msg, false, &mut out, &mut |out, v| out.push_str(v));
        Cow::Owned(out)
    }

    /// Renders the template as the path and query of a URL: the text as written, each value
    /// percent-encoded as one segment (or query value): everything but letters, digits and
    /// `-._~` is encoded, a path parameter is decoded first (it is taken raw from the request),
    /// and a value that is `.` or `..` has its dots encoded, so that no value adds segments.
    pub fn render_uri(&self, ex: &Exchange) -> String {
        const KEEP: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
            .remove(b'-')
            .remove(b'.')
            .remove(b'_')
            .remove(b'~');
        let mut out = String::new();
        self.render_into(ex, Message::Request, true, &mut out, &mut |out, v| {
            if v == "." || v == ".." {
                out.push_str(&v.replace('.', "%2E"));
            } else {
                out.extend(percent_encoding::utf8_percent_encode(v, KEEP));
            }
        });
        out
    }

    fn render_into(
        &self,
        ex: &Exchange,
        msg: Message,
        // Rendering a URI: path parameters decoded first, every value through `put`.
        decode_params: bool,
        out: &mut String,
        put: &mut dyn FnMut(&mut String, &str),
    ) {
        for p in &self.parts {
            Self::render_part(p, ex, msg, decode_params, out, put);
        }
    }

    fn render_part(
        p: &Part,
        ex: &Exchange,
        msg: Message,
        decode_params: bool,
        out: &mut String,
        put: &mut dyn FnMut(&mut String, &str),
    ) {
        match p {
            Part::Lit(s) => out.push_str(s),
            Part::PathParam(i) if decode_params => put(
                out,
                &percent_encoding::percent_decode_str(ex.param(*i)).decode_utf8_lossy(),
            ),
            Part::PathParam(i) => put(out, ex.param(*i)),
            Part::Header(h) => {
                if let Some(v) = ex.request.headers.get(h) {
                    put(out, &String::from_utf8_lossy(v.as_bytes()));
                }
            }
            Part::Query(q) => {
                if let Some(v) = ex.query(q) {
                    put(out, &v);
                }
            }
            Part::Method => put(out, ex.request.method.as_str()),
            Part::ClientIp => put(out, &ex.client.ip().to_string()),
            Part::ClientCertSubject => {
                if let Some(c) = ex.extensions.get::<crate::exchange::ClientCertificate>() {
                    put(out, &c.subject);
                }
            }
            Part::ConsumerName => {
                if let Some(c) = ex.identity().and_then(|i| i.consumer.as_deref()) {
                    put(out, c);
                }
            }
            Part::JwtClaim(c) => {
                if let Some(v) = ex.identity().and_then(|i| i.claims.as_ref()?.get(c)) {
                    match v {
                        serde_json::Value::String(s) => put(out, s),
                        other => put(out, &other.to_string()),
                    }
                }
            }
            Part::JsonPath(p) => {
                let v = match msg {
                    Message::Request => json::cached_request_json(ex),
                    Message::Response => json::cached_response_json(ex),
                };
                if decode_params {
                    let mut s = String::new();
                    p.render_into(v, &mut s);
                    put(out, &s);
                } else {
                    // As written: straight into the output, no copy.
                    p.render_into(v, out);
                }
            }
            Part::Path => put(out, ex.request.uri.path()),
            Part::Status => {
                if let Some(r) = &ex.response {
                    put(out, r.status().as_str());
                }
            }
            Part::Body => {
                let b = match msg {
                    Message::Request => ex.request_bytes(),
                    Message::Response => ex.response_bytes(),
                };
                if let Some(b) = b {
                    put(out, &String::from_utf8_lossy(b));
                }
            }
            Part::Property(name, path) => {
                if let Some(v) = crate::properties::property(ex, name) {
                    if let Some(v) = crate::properties::value_at(&v, path) {
                        let mut s = String::new();
                        crate::properties::value_text(v, &mut s);
                        put(out, &s);
                    }
                }
            }
            Part::Ext(e) => {
                let mut s = String::new();
                e.render(ex, msg, &mut s);
                put(out, &s);
            }
        }
    }

    /// This template as the text of a JSON document (Membrane's templates with a JSON content
    /// type): a placeholder outside a string literal of the text renders as a JSON value (a
    /// string quoted and escaped, a number or a JSON value as it is, a missing value `null`);
    /// one inside a string literal renders as the string's escaped content. Runs at load.
    pub fn json(mut self) -> Self {
        let mut inside = false;
        let mut marks = Vec::with_capacity(self.parts.len());
        for p in &self.parts {
            marks.push(inside);
            if let Part::Lit(s) = p {
                let mut escaped = false;
                for c in s.chars() {
                    if !inside {
                        inside = c == '"';
                    } else if escaped {
                        escaped = false;
                    } else if c == '\\' {
                        escaped = true;
                    } else if c == '"' {
                        inside = false;
                    }
                }
            }
        }
        self.json = Some(marks.into());
        self
    }

    fn render_json_into(&self, ex: &Exchange, msg: Message, inside: &[bool], out: &mut String) {
        for (p, &quoted) in self.parts.iter().zip(inside) {
            match p {
                Part::Lit(s) => out.push_str(s),
                _ if quoted => {
                    let mut s = String::new();
                    Self::render_part(p, ex, msg, false, &mut s, &mut |o, v| o.push_str(v));
                    push_json_escaped(&s, out);
                }
                _ => Self::part_json(p, ex, msg, out),
            }
        }
    }

    /// Appends the value of `p` as a JSON value (`null` when it has none).
    fn part_json(p: &Part, ex: &Exchange, msg: Message, out: &mut String) {
        let json = |v: Option<&serde_json::Value>, out: &mut String| match v {
            Some(v) => out.push_str(&v.to_string()),
            None => out.push_str("null"),
        };
        let text = |v: Option<&str>, out: &mut String| match v {
            Some(v) => push_json_string(v, out),
            None => out.push_str("null"),
        };
        match p {
            Part::Status => match &ex.response {
                Some(r) => out.push_str(r.status().as_str()),
                None => out.push_str("null"),
            },
            Part::Header(h) => text(
                ex.request
                    .headers
                    .get(h)
                    .map(|v| String::from_utf8_lossy(v.as_bytes()))
                    .as_deref(),
                out,
            ),
            Part::Query(q) => text(ex.query(q).as_deref(), out),
            Part::ConsumerName => text(ex.identity().and_then(|i| i.consumer.as_deref()), out),
            Part::ClientCertSubject => text(
                ex.extensions
                    .get::<crate::exchange::ClientCertificate>()
                    .map(|c| c.subject.as_str()),
                out,
            ),
            Part::JwtClaim(c) => json(ex.identity().and_then(|i| i.claims.as_ref()?.get(c)), out),
            Part::JsonPath(p) => {
                let v = match msg {
                    Message::Request => json::cached_request_json(ex),
                    Message::Response => json::cached_response_json(ex),
                };
                json(v.and_then(|v| p.value(v)).as_deref(), out);
            }
            Part::Property(name, path) => {
                let v = crate::properties::property(ex, name);
                json(
                    v.as_deref()
                        .and_then(|v| crate::properties::value_at(v, path)),
                    out,
                );
            }
            Part::Ext(e) => e.render_json(ex, msg, out),
            p => {
                let mut s = String::new();
                Self::render_part(p, ex, msg, false, &mut s, &mut |o, v| o.push_str(v));
                push_json_string(&s, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::tests::exchange;

    #[test]
    fn properties_and_found_placeholders() {
        #[derive(Debug)]
        struct Shout;
        impl Placeholder for Shout {
            fn render(&self, ex: &Exchange, _: Message, out: &mut String) {
                out.push_str(&ex.request.method.as_str().to_uppercase());
                out.push('!');
            }
            fn needs_body(&self) -> bool {
                false
            }
        }
        let find =
            |name: &str| (name == "shout()").then(|| Ok(Arc::new(Shout) as Arc<dyn Placeholder>));
        let t = Template::parse_with(
            "${property.a}|${properties['b']['c']}|${property.b.get(\"c\")}|${property.b.d.1}|${shout()}|${property.none}",
            &TemplateScope::default(),
            &find,
        )
        .unwrap();
        let mut ex = exchange("GET", "/", &[]);
        crate::properties::set_property(&mut ex, "a", "x".into());
        crate::properties::set_property(&mut ex, "b", serde_json::json!({"c": 3, "d": [0, "y"]}));
        assert_eq!(t.render(&ex), "x|3|3|y|GET!|");
        assert!(Template::parse("${shout()}", &TemplateScope::default()).is_err());
        assert!(Template::parse("${property.a b}", &TemplateScope::default()).is_err());
        let each = Template::parse_each("<${a}${b}>", &|_| {
            Ok(Arc::new(Shout) as Arc<dyn Placeholder>)
        })
        .unwrap();
        assert_eq!(each.render(&ex), "<GET!GET!>");
    }

    #[test]
    fn renders_every_placeholder() {
        let scope = TemplateScope {
            path_params: vec!["id".into()],
            ..Default::default()
        };
        let t = Template::parse(
            "${method} ${path.id} ${header.x-a} ${query.q} ${client.ip}!",
            &scope,
        )
        .unwrap();
        let mut ex = exchange("POST", "/items/42?q=z", &[("X-A", "b")]);
        ex.params.push((7, 9));
        assert_eq!(t.render(&ex), "POST 42 b z 192.0.2.1!");
    }

    proptest::proptest! {
        /// Whatever a header holds, the rendered path and query is a valid request target whose
        /// segments are the template's own.
        #[test]
        fn uri_rendering_of_any_value_stays_in_its_segment(v in "\\PC{0,30}") {
            let t = Template::parse("/a/${header.x-v}/b?q=${header.x-v}", &TemplateScope::default()).unwrap();
            let Ok(value) = http::HeaderValue::from_str(&v) else {
                return Ok(());
            };
            let mut ex = exchange("GET", "/", &[]);
            ex.request.headers.insert("x-v", value);
            let out = t.render_uri(&ex);
            proptest::prop_assert!(http::uri::PathAndQuery::try_from(out.as_str()).is_ok(), "{}", out);
            let path = out.split('?').next().unwrap_or("");
            proptest::prop_assert_eq!(path.split('/').count(), 4, "{}", out);
            proptest::prop_assert!(!path.split('/').any(|s| s == ".." || s == "."), "{}", out);
        }
    }

    #[test]
    fn uri_rendering_keeps_each_value_in_its_segment() {
        let scope = TemplateScope {
            path_params: vec!["id".into()],
            ..Default::default()
        };
        let t = Template::parse("/shop/products/${pathParam.id}?h=${header.x-a}", &scope).unwrap();
        let mut ex = exchange("GET", "/p/a%20b", &[("X-A", "1&2/../x")]);
        ex.params.push((3, 8));
        assert_eq!(t.render_uri(&ex), "/shop/products/a%20b?h=1%262%2F..%2Fx");
        let mut ex = exchange("GET", "/p/..", &[]);
        ex.params.push((3, 5));
        assert_eq!(t.render_uri(&ex), "/shop/products/%2E%2E?h=");
        // Elsewhere a path parameter stays as received.
        let mut ex = exchange("GET", "/p/a%20b", &[]);
        ex.params.push((3, 8));
        assert_eq!(
            Template::parse("${path.id}", &scope).unwrap().render(&ex),
            "a%20b"
        );
    }

    #[test]
    fn jsonpath_placeholders() {
        let t = Template::parse_jsonpath("Hi ${$.person.firstName}, ${$.n[?@ > 1]}!").unwrap();
        assert!(t.needs_body());
        let mut ex = exchange("POST", "/", &[]);
        ex.request_body = crate::Body::full(r#"{"person":{"firstName":"Ada"},"n":[1,2]}"#);
        assert_eq!(t.render(&ex), "Hi , !", "not prepared: renders empty");
        t.prepare(&mut ex, Message::Request);
        assert_eq!(t.render(&ex), "Hi Ada, 2!");
        assert!(Template::parse_jsonpath("${$.a[}").is_err());
        assert!(Template::parse_jsonpath("${$.a").is_err());
        assert!(!Template::parse_jsonpath("plain").unwrap().needs_body());
    }

    #[test]
    fn identity_and_env() {
        std::env::set_var("TURNPIKE_TEMPLATE_TEST", "prod");
        let t = Template::parse(
            "${env.TURNPIKE_TEMPLATE_TEST}/${consumer.name}/${jwt.sub}/${jwt.n}",
            &TemplateScope::default(),
        )
        .unwrap();
        let mut ex = exchange("GET", "/", &[]);
        assert_eq!(t.render(&ex), "prod///");
        let claims: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(r#"{"sub":"alice","n":3}"#).unwrap();
        ex.extensions.insert(crate::exchange::Identity {
            consumer: Some("acme".into()),
            claims: Some(std::sync::Arc::new(claims)),
            ..Default::default()
        });
        assert_eq!(t.render(&ex), "prod/acme/alice/3");
        let lit = Template::parse("a${env.TURNPIKE_TEMPLATE_TEST}b", &TemplateScope::default());
        assert_eq!(lit.unwrap().as_literal(), Some("aprodb"));
        assert!(
            Template::parse("${env.TURNPIKE_SURELY_UNSET}", &TemplateScope::default()).is_err()
        );
    }

    #[test]
    fn literal_fast_path() {
        let t = Template::parse("plain", &TemplateScope::default()).unwrap();
        assert_eq!(t.as_literal(), Some("plain"));
    }

    #[test]
    fn unknown_names_fail_at_parse() {
        let s = TemplateScope::default();
        assert!(Template::parse("${nope}", &s)
            .unwrap_err()
            .contains("unknown template"));
        assert!(Template::parse("${path.id}", &s)
            .unwrap_err()
            .contains("no parameters"));
        assert!(Template::parse("${header.a b}", &s).is_err());
        assert!(Template::parse("${method", &s)
            .unwrap_err()
            .contains("unclosed"));
    }
}
#[cfg(test)]
mod properties {
    use super::*;
    use crate::exchange::tests::exchange;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn parsing_never_panics(s in "\\PC{0,80}") {
            let _ = Template::parse(&s, &TemplateScope { path_params: vec!["id".into()], ..Default::default() });
        }

        #[test]
        fn text_without_placeholders_renders_as_itself(s in "[^$]{0,80}") {
            let t = Template::parse(&s, &TemplateScope::default()).unwrap();
            let ex = exchange("GET", "/", &[]);
            prop_assert_eq!(t.render(&ex), s);
        }
    }
}
