//! Templates: strings with `${...}` placeholders resolved per request from the exchange.
//! Parsed once at load time; an unknown placeholder is a load error.
//!
//! Placeholders: `${path.NAME}` (a path parameter of the API's template), `${header.NAME}`,
//! `${query.NAME}`, `${method}`, `${client.ip}`. With the `jsonpath` language
//! ([`Template::parse_jsonpath`]) every placeholder is an RFC 9535 JSONPath expression on the
//! message's JSON body: `${$.person.firstName}`.

use std::borrow::Cow;

use http::HeaderName;

use crate::exchange::Exchange;
use crate::json;
use crate::jsonpath::{JsonPathExpr, Message};

/// What a template may refer to, known at load time.
#[derive(Debug, Clone, Default)]
pub struct TemplateScope {
    /// Names of the path parameters of the API's path template, in order.
    pub path_params: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Lit(String),
    PathParam(usize),
    Header(HeaderName),
    Query(String),
    Method,
    ClientIp,
    JsonPath(Box<JsonPathExpr>),
}

/// A compiled template.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    parts: Vec<Part>,
}

impl Template {
    /// Parses `src`; fails with a message naming the unknown or malformed placeholder.
    pub fn parse(src: &str, scope: &TemplateScope) -> Result<Self, String> {
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
            parts.push(Self::placeholder(after[..end].trim(), scope)?);
            rest = &after[end + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Lit(rest.to_owned()));
        }
        Ok(Template { parts })
    }

    /// Parses `src` whose placeholders are JSONPath expressions (`${$.a.b}`), compiled now.
    pub fn parse_jsonpath(src: &str) -> Result<Self, String> {
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
            parts.push(Part::JsonPath(Box::new(JsonPathExpr::parse(
                &after[..end],
            )?)));
            rest = &after[end + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Lit(rest.to_owned()));
        }
        Ok(Template { parts })
    }

    /// True when rendering reads the message body (JSONPath placeholders): the body must then
    /// be buffered, and [`Template::prepare`] called before rendering.
    pub fn needs_body(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, Part::JsonPath(_)))
    }

    /// Parses the body of `msg` as JSON if the template reads it and nobody parsed it yet.
    pub fn prepare(&self, ex: &mut Exchange, msg: Message) {
        if self.needs_body() {
            let _ = match msg {
                Message::Request => json::request_json(ex),
                Message::Response => json::response_json(ex),
            };
        }
    }

    fn placeholder(name: &str, scope: &TemplateScope) -> Result<Part, String> {
        if name == "method" {
            return Ok(Part::Method);
        }
        if name == "client.ip" {
            return Ok(Part::ClientIp);
        }
        if let Some(p) = name.strip_prefix("path.") {
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
            "unknown template `${{{name}}}` (known: ${{path.NAME}}, ${{header.NAME}}, ${{query.NAME}}, ${{method}}, ${{client.ip}})"
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
        for p in &self.parts {
            match p {
                Part::Lit(s) => out.push_str(s),
                Part::PathParam(i) => out.push_str(ex.param(*i)),
                Part::Header(h) => {
                    if let Some(v) = ex.request.headers.get(h) {
                        out.push_str(&String::from_utf8_lossy(v.as_bytes()));
                    }
                }
                Part::Query(q) => {
                    if let Some(v) = ex.query(q) {
                        out.push_str(&v);
                    }
                }
                Part::Method => out.push_str(ex.request.method.as_str()),
                Part::ClientIp => out.push_str(&ex.client.ip().to_string()),
                Part::JsonPath(p) => {
                    let v = match msg {
                        Message::Request => json::cached_request_json(ex),
                        Message::Response => json::cached_response_json(ex),
                    };
                    p.render_into(v, &mut out);
                }
            }
        }
        Cow::Owned(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::tests::exchange;

    #[test]
    fn renders_every_placeholder() {
        let scope = TemplateScope {
            path_params: vec!["id".into()],
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
