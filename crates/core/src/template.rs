//! Templates: strings with `${...}` placeholders resolved per request from the exchange.
//! Parsed once at load time; an unknown placeholder is a load error.
//!
//! Placeholders: `${path.NAME}` (a path parameter of the API's template), `${header.NAME}`,
//! `${query.NAME}`, `${method}`, `${client.ip}`, `${client.certSubject}` (the verified client
//! certificate's subject, with mutual TLS), `${consumer.name}` (set by an auth policy),
//! `${jwt.CLAIM}` (a claim of the verified JWT), `${env.NAME}` (read once, at load time).
//! With the `jsonpath` language
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
    ClientCertSubject,
    ConsumerName,
    JwtClaim(String),
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
        // `${env.X}` became text: join neighbouring literals so that a template without
        // per-request placeholders stays a literal.
        let mut merged: Vec<Part> = Vec::with_capacity(parts.len());
        for p in parts {
            match (merged.last_mut(), p) {
                (Some(Part::Lit(a)), Part::Lit(b)) => a.push_str(&b),
                (_, p) => merged.push(p),
            }
        }
        Ok(Template { parts: merged })
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

    /// True when rendering reads the request head (headers, query, method, path parameters,
    /// client): JSONPath placeholders and literal text do not.
    pub fn reads_request(&self) -> bool {
        self.parts
            .iter()
            .any(|p| !matches!(p, Part::Lit(_) | Part::JsonPath(_)))
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
            "unknown template `${{{name}}}` (known: ${{path.NAME}}, ${{header.NAME}}, ${{query.NAME}}, ${{method}}, ${{client.ip}}, ${{client.certSubject}}, ${{consumer.name}}, ${{jwt.CLAIM}}, ${{env.NAME}})"
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
                Part::ClientCertSubject => {
                    if let Some(c) = ex.extensions.get::<crate::exchange::ClientCertificate>() {
                        out.push_str(&c.subject);
                    }
                }
                Part::ConsumerName => {
                    if let Some(c) = ex.identity().and_then(|i| i.consumer.as_deref()) {
                        out.push_str(c);
                    }
                }
                Part::JwtClaim(c) => {
                    if let Some(v) = ex.identity().and_then(|i| i.claims.as_ref()?.get(c)) {
                        match v {
                            serde_json::Value::String(s) => out.push_str(s),
                            other => out.push_str(&other.to_string()),
                        }
                    }
                }
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
            let _ = Template::parse(&s, &TemplateScope { path_params: vec!["id".into()] });
        }

        #[test]
        fn text_without_placeholders_renders_as_itself(s in "[^$]{0,80}") {
            let t = Template::parse(&s, &TemplateScope::default()).unwrap();
            let ex = exchange("GET", "/", &[]);
            prop_assert_eq!(t.render(&ex), s);
        }
    }
}
