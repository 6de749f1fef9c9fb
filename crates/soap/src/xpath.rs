//! XPath 1.0 expressions on a message's XML body, evaluated by libxml2: the `xpath` language of
//! templates (`${//country}`), `setProperty` values and `if` tests. The expression is checked
//! when the configuration is loaded; each evaluation parses the body (without network access or
//! entity expansion) and evaluates the expression against it with the namespace prefixes given.

use libxml::parser::{Parser, ParserOptions};
use libxml::xpath::Context;

/// A checked XPath expression with the namespace prefixes it may use.
#[derive(Debug, Clone)]
pub struct XPath {
    source: String,
    namespaces: Vec<(String, String)>,
}

impl XPath {
    /// Checks `source`; `namespaces` binds prefixes (`s11` → the SOAP 1.1 envelope namespace).
    /// The error names the expression.
    pub fn compile(source: &str, namespaces: &[(String, String)]) -> Result<Self, String> {
        let source = source.trim();
        if source.is_empty() || libxml::xpath::Expression::compile(source).is_err() {
            return Err(format!("`{source}` is not a valid XPath 1.0 expression"));
        }
        Ok(XPath {
            source: source.to_owned(),
            namespaces: namespaces.to_vec(),
        })
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    fn evaluate<T>(
        &self,
        body: &[u8],
        wrap: &str,
        f: impl FnOnce(&libxml::xpath::Object) -> T,
    ) -> Option<T> {
        let options = ParserOptions {
            recover: false,
            no_net: true,
            no_error: true,
            no_warning: true,
            ..ParserOptions::default()
        };
        let doc = Parser::default()
            .parse_string_with_options(body, options)
            .ok()?;
        let ctx = Context::new(&doc).ok()?;
        for (prefix, uri) in &self.namespaces {
            ctx.register_namespace(prefix, uri).ok()?;
        }
        let expr = if wrap.is_empty() {
            self.source.clone()
        } else {
            format!("{wrap}({})", self.source)
        };
        let obj = ctx.evaluate(&expr).ok()?;
        Some(f(&obj))
    }

    /// The string value of the result on `body` (XPath's `string()`: the text of the first
    /// node of a node set); `None` when the body is not XML or the evaluation fails.
    pub fn string(&self, body: &[u8]) -> Option<String> {
        self.evaluate(body, "string", |o| o.to_string())
    }

    /// The boolean value of the result on `body` (XPath's `boolean()`: a non-empty node set,
    /// a non-empty string, a non-zero number); false when the body is not XML.
    pub fn boolean(&self, body: &[u8]) -> bool {
        self.evaluate(body, "boolean", |o| o.to_string() == "true")
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &[u8] = br#"<s11:Envelope xmlns:s11="http://schemas.xmlsoap.org/soap/envelope/"><s11:Body><getCityResponse xmlns="https://predic8.de/cities"><country>Germany</country><population>327000</population></getCityResponse><order express="yes"/></s11:Body></s11:Envelope>"#;

    #[test]
    fn strings_and_booleans() {
        let x = XPath::compile("//*[local-name()='country']", &[]).unwrap();
        assert_eq!(x.string(DOC).as_deref(), Some("Germany"));
        let ns = [(
            "s11".to_owned(),
            "http://schemas.xmlsoap.org/soap/envelope/".to_owned(),
        )];
        assert!(XPath::compile("/s11:Envelope", &ns).unwrap().boolean(DOC));
        assert!(!XPath::compile("not(/s11:Envelope)", &ns)
            .unwrap()
            .boolean(DOC));
        assert!(XPath::compile("//order[@express='yes']", &[])
            .unwrap()
            .boolean(DOC));
        assert!(!XPath::compile("//order[@express='no']", &[])
            .unwrap()
            .boolean(DOC));
        assert!(!XPath::compile("//order", &[]).unwrap().boolean(b"not xml"));
        assert_eq!(
            XPath::compile("//nothing", &[])
                .unwrap()
                .string(DOC)
                .as_deref(),
            Some("")
        );
        assert!(XPath::compile("//[", &[]).is_err());
        assert!(XPath::compile("", &[]).is_err());
    }

    #[test]
    fn entities_are_not_expanded() {
        let doc = br#"<!DOCTYPE a [<!ENTITY e SYSTEM "file:///etc/passwd">]><a>&e;</a>"#;
        let x = XPath::compile("string(/a)", &[]).unwrap();
        assert!(!x.string(doc).unwrap_or_default().contains("root:"));
    }
}
