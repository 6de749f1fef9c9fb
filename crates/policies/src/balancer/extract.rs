//! How a `balancer` finds the session id of a message: Membrane's `sessionIdExtractor` (an
//! expression in SpEL — the built-in placeholders, `header['X']` —, JSONPath or XPath),
//! `xmlSessionIdExtractor` (the text of the first XML element of a name) and
//! `jSessionIdExtractor` (the `JSESSIONID` cookie). An empty value is no session id.

use http::HeaderMap;
use turnpike_core::jsonpath::Message;
use turnpike_core::{CompileContext, Exchange, Template};

use crate::language::{compile_template, ExpressionLanguage};

/// A compiled session id extractor.
#[derive(Debug)]
pub(crate) enum Extractor {
    /// An expression, rendered on the message.
    Expression(Template),
    /// The `JSESSIONID` cookie of the `Cookie` header.
    JSessionId(regex::Regex),
}

impl Extractor {
    /// Runs at load time: Membrane's `sessionIdExtractor`. The whole `source` is one expression
    /// of `language` (SpEL when `None`), unless it holds `${…}` placeholders.
    pub(crate) fn expression(
        source: &str,
        language: Option<ExpressionLanguage>,
        ctx: &CompileContext<'_>,
    ) -> Result<Extractor, String> {
        let source = source.trim();
        if source.is_empty() {
            return Err("the expression is empty".into());
        }
        let template = if source.contains("${") {
            compile_template(source, language, ctx)?
        } else {
            compile_template(&format!("${{{source}}}"), language, ctx)?
        };
        Ok(Extractor::Expression(template))
    }

    /// Runs at load time: Membrane's `xmlSessionIdExtractor`, the text of the first element
    /// named `local_name` (in `namespace`, when given).
    pub(crate) fn xml_element(
        local_name: &str,
        namespace: Option<&str>,
        ctx: &CompileContext<'_>,
    ) -> Result<Extractor, (&'static str, String)> {
        let name_ok = !local_name.is_empty()
            && local_name
                .chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !name_ok {
            return Err((
                "localName",
                format!("`{local_name}` is not an XML element name"),
            ));
        }
        let xpath = match namespace {
            Some(ns) if ns.contains('\'') => {
                return Err(("namespace", "a namespace with `'` is not supported".into()))
            }
            Some(ns) => format!("//*[local-name()='{local_name}' and namespace-uri()='{ns}']"),
            None => format!("//*[local-name()='{local_name}']"),
        };
        compile_template(
            &format!("${{{xpath}}}"),
            Some(ExpressionLanguage::XPath),
            ctx,
        )
        .map(Extractor::Expression)
        .map_err(|m| ("localName", m))
    }

    /// Runs at load time: Membrane's `jSessionIdExtractor`.
    pub(crate) fn jsessionid() -> Result<Extractor, String> {
        // Membrane's pattern, matched from the start: the last `JSESSIONID=` of the cookies.
        regex::Regex::new(r"^.*JSESSIONID\s*=([^;]*)")
            .map(Extractor::JSessionId)
            .map_err(|e| e.to_string())
    }

    /// True when the extractor reads message bodies (which must then be buffered).
    pub(crate) fn needs_body(&self) -> bool {
        match self {
            Extractor::Expression(t) => t.needs_body(),
            Extractor::JSessionId(_) => false,
        }
    }

    /// True when extracting from a response reads the request (templates read the request's
    /// headers and URI in both phases).
    pub(crate) fn reads_request(&self) -> bool {
        match self {
            Extractor::Expression(t) => t.reads_request(),
            Extractor::JSessionId(_) => false,
        }
    }

    /// Runs in the request or response phase: the session id of `msg`, if it has one.
    pub(crate) fn session_id(&self, ex: &mut Exchange, msg: Message) -> Option<String> {
        let id = match self {
            Extractor::Expression(t) => {
                t.prepare(ex, msg);
                t.render_for(ex, msg).trim().to_owned()
            }
            Extractor::JSessionId(re) => {
                let headers: &HeaderMap = match msg {
                    Message::Request => &ex.request.headers,
                    // Membrane reads the response's `Cookie` header too.
                    Message::Response => ex.response.as_ref()?.headers(),
                };
                let cookie = headers.get(http::header::COOKIE)?.to_str().ok()?;
                re.captures(cookie)?.get(1)?.as_str().trim().to_owned()
            }
        };
        (!id.is_empty()).then_some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{exchange, plain};

    #[test]
    fn each_extractor_reads_its_session_id() {
        let ctx = plain();
        let json = Extractor::expression("$.id", Some(ExpressionLanguage::JsonPath), &ctx).unwrap();
        assert!(json.needs_body());
        let mut ex = exchange("POST", "/", &[], r#"{"id":"7"}"#);
        assert_eq!(
            json.session_id(&mut ex, Message::Request).as_deref(),
            Some("7")
        );
        let mut ex = exchange("POST", "/", &[], r#"{"other":1}"#);
        assert_eq!(json.session_id(&mut ex, Message::Request), None);
        let mut ex = exchange("POST", "/", &[], "<html/>");
        assert_eq!(json.session_id(&mut ex, Message::Request), None);

        let header = Extractor::expression("header['X-Session']", None, &ctx).unwrap();
        assert!(!header.needs_body());
        let mut ex = exchange("GET", "/", &[("x-session", "abc")], "");
        assert_eq!(
            header.session_id(&mut ex, Message::Request).as_deref(),
            Some("abc")
        );
        let braces = Extractor::expression("s-${header.x-session}", None, &ctx).unwrap();
        assert_eq!(
            braces.session_id(&mut ex, Message::Request).as_deref(),
            Some("s-abc")
        );

        let xpath =
            Extractor::expression("//session", Some(ExpressionLanguage::XPath), &ctx).unwrap();
        let mut ex = exchange("POST", "/", &[], "<a><session>s1</session></a>");
        assert_eq!(
            xpath.session_id(&mut ex, Message::Request).as_deref(),
            Some("s1")
        );

        let element = Extractor::xml_element("session", Some("urn:x"), &ctx).unwrap();
        let mut ex = exchange(
            "POST",
            "/",
            &[],
            r#"<a xmlns:x="urn:x"><session>no</session><x:session>yes</x:session></a>"#,
        );
        assert_eq!(
            element.session_id(&mut ex, Message::Request).as_deref(),
            Some("yes")
        );
        assert!(Extractor::xml_element("a b", None, &ctx).is_err());

        let cookie = Extractor::jsessionid().unwrap();
        let mut ex = exchange("GET", "/", &[("cookie", "a=1; JSESSIONID = x9 ; b=2")], "");
        assert_eq!(
            cookie.session_id(&mut ex, Message::Request).as_deref(),
            Some("x9")
        );
        let mut ex = exchange("GET", "/", &[("cookie", "a=1")], "");
        assert_eq!(cookie.session_id(&mut ex, Message::Request), None);

        assert!(Extractor::expression(" ", None, &ctx).is_err());
        assert!(Extractor::expression("$.[", Some(ExpressionLanguage::JsonPath), &ctx).is_err());
    }
}
