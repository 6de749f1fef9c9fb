//! The expression languages a template's `${...}` placeholders can be written in, and the
//! compilation of a template in one of them.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::jsonpath::Message;
use turnpike_core::template::Placeholder;
use turnpike_core::{CompileContext, Exchange, Template};
use turnpike_soap::xpath::XPath;

/// The language of the `${...}` placeholders of a template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
pub enum ExpressionLanguage {
    /// Membrane's default: the built-in placeholders (`${header.X}`, `${property.NAME}`, …) and
    /// `${xpath('…')}` / `${jsonPath('…')}` on the body.
    #[serde(rename = "spel", alias = "SpEL", alias = "SPEL")]
    Spel,
    /// RFC 9535 JSONPath evaluated on the JSON body of the message: `${$.person.firstName}`.
    #[serde(rename = "jsonpath", alias = "JSONPath", alias = "jsonPath")]
    JsonPath,
    /// XPath 1.0 evaluated on the XML body of the message: `${//country}` (its string value).
    #[serde(rename = "xpath", alias = "XPath")]
    XPath,
}

/// An XPath placeholder: the string value of the expression on the message's body.
#[derive(Debug)]
pub struct XPathPart(pub XPath);

/// An XPath result as JSON, as Membrane turns them: the trimmed text as a number when it is
/// one, else as a string.
fn xpath_json(text: &str) -> serde_json::Value {
    let t = text.trim();
    match serde_json::from_str::<serde_json::Number>(t) {
        Ok(n) => serde_json::Value::Number(n),
        Err(_) => serde_json::Value::String(t.to_owned()),
    }
}

impl Placeholder for XPathPart {
    fn render(&self, ex: &Exchange, msg: Message, out: &mut String) {
        let body = match msg {
            Message::Request => ex.request_bytes(),
            Message::Response => ex.response_bytes(),
        };
        if let Some(v) = body.and_then(|b| self.0.string(b)) {
            out.push_str(&v);
        }
    }

    /// A number when the text is one (Membrane's JSON of XPath results), else a string.
    fn render_json(&self, ex: &Exchange, msg: Message, out: &mut String) {
        let mut s = String::new();
        self.render(ex, msg, &mut s);
        out.push_str(&xpath_json(&s).to_string());
    }

    fn needs_body(&self) -> bool {
        true
    }
}

/// `xpath('…')` in a built-in template: the XPath placeholder it stands for.
fn xpath_call(name: &str) -> Option<Result<Arc<dyn Placeholder>, String>> {
    let inner = name.strip_prefix("xpath(")?.strip_suffix(')')?.trim();
    let quoted = inner
        .strip_prefix('\'')
        .and_then(|r| r.strip_suffix('\''))
        .or_else(|| inner.strip_prefix('"').and_then(|r| r.strip_suffix('"')));
    Some(match quoted {
        Some(expr) => XPath::compile(expr, &[])
            .map(|x| Arc::new(XPathPart(x)) as Arc<dyn Placeholder>)
            .map_err(|e| format!("`${{{name}}}`: {e}")),
        None => Err(format!(
            "`${{{name}}}`: the XPath expression must be a quoted string"
        )),
    })
}

/// `new Date()`: the time of rendering as Java's `Date.toString()` writes it (in UTC).
#[derive(Debug)]
struct Now;

impl Placeholder for Now {
    fn render(&self, _: &Exchange, _: Message, out: &mut String) {
        let c = turnpike_core::civil::Civil::of(std::time::SystemTime::now());
        // Day of the week: 1970-01-01 was a Thursday.
        let days = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() / 86_400);
        const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
        out.push_str(&format!(
            "{} {} {:02} {:02}:{:02}:{:02} UTC {}",
            DAYS[(days % 7) as usize],
            c.month_name(),
            c.day,
            c.hour,
            c.minute,
            c.second,
            c.year
        ));
    }

    fn needs_body(&self) -> bool {
        false
    }
}

/// A random (version 4) UUID, from the operating system's random source.
pub fn uuid_v4() -> String {
    let mut b = [0u8; 16];
    if getrandom::fill(&mut b).is_err() {
        // No OS randomness: time and process make a value unique enough for an id.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        b.copy_from_slice(&(t ^ (u128::from(std::process::id()) << 64)).to_le_bytes());
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// Java calls Membrane's examples use in templates: a random UUID, today's date.
#[derive(Debug, Clone, Copy)]
enum JavaCall {
    RandomUuid,
    Today,
}

impl Placeholder for JavaCall {
    fn render(&self, _: &Exchange, _: Message, out: &mut String) {
        match self {
            JavaCall::RandomUuid => out.push_str(&uuid_v4()),
            JavaCall::Today => {
                let c = turnpike_core::civil::Civil::of(std::time::SystemTime::now());
                out.push_str(&format!("{}-{:02}-{:02}", c.year, c.month, c.day));
            }
        }
    }

    fn needs_body(&self) -> bool {
        false
    }
}

/// `T(java.util.UUID).randomUUID()` and `T(java.time.LocalDate).now()` (with `.toString()`).
fn java_call(name: &str) -> Option<JavaCall> {
    let n: String = name.chars().filter(|c| !c.is_whitespace()).collect();
    let n = n.strip_suffix(".toString()").unwrap_or(&n);
    match n {
        "T(java.util.UUID).randomUUID()" => Some(JavaCall::RandomUuid),
        "T(java.time.LocalDate).now()" => Some(JavaCall::Today),
        _ => None,
    }
}

/// A placeholder of Membrane's default language that is not a built-in one: `xpath('…')`,
/// `new Date()`, `T(java.util.UUID).randomUUID()`, or an expression (SpEL forms translated to CEL: `header.keySet()`, `user()`,
/// `scopes()`, `property.x + 1`); `None` when it is none of these.
fn spel_placeholder(
    name: &str,
    ctx: &CompileContext<'_>,
) -> Option<Result<Arc<dyn Placeholder>, String>> {
    if let Some(x) = xpath_call(name) {
        return Some(x);
    }
    if name.replace(' ', "") == "newDate()" {
        return Some(Ok(Arc::new(Now)));
    }
    if let Some(call) = java_call(name) {
        return Some(Ok(Arc::new(call)));
    }
    // `${it['name']}`, `${toJSON(it)}`: the item of a `for` loop.
    if let Some(p) = crate::loop_item::placeholder(name) {
        return Some(p);
    }
    if name.starts_with("exc.") || name.starts_with("exchange.") {
        return Some(Err(format!(
            "`${{{name}}}`: Membrane's Java objects (`exc`, `exchange`) are not available: use `${{statusCode}}`, `${{header.NAME}}`, `${{property.NAME}}`, `${{path}}` or `${{method}}`"
        )));
    }
    crate::condition::ValueExpr::compile(name, Some("spel"), ctx, false)
        .ok()
        .map(|e| Ok(Arc::new(e) as Arc<dyn Placeholder>))
}

/// Refuses Groovy template code (`<% … %>`), which cannot run here.
pub fn no_groovy(text: &str) -> Result<(), String> {
    if text.contains("<%") {
        return Err(
            "Groovy template code (`<% … %>`) cannot run here: use `${…}` placeholders, `for`, or a `python` policy".into(),
        );
    }
    Ok(())
}

/// Compiles the template `src` with the placeholders of `language` (the built-in ones when
/// `None`).
pub fn compile_template(
    src: &str,
    language: Option<ExpressionLanguage>,
    ctx: &CompileContext<'_>,
) -> Result<Template, String> {
    match language {
        None | Some(ExpressionLanguage::Spel) => {
            Template::parse_with(src, ctx.scope, &|name| spel_placeholder(name, ctx))
        }
        Some(ExpressionLanguage::JsonPath) => Template::parse_jsonpath(src),
        Some(ExpressionLanguage::XPath) => Template::parse_each(src, &|e| {
            XPath::compile(e, &[]).map(|x| Arc::new(XPathPart(x)) as Arc<dyn Placeholder>)
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{exchange, plain};

    #[test]
    fn each_language_reads_its_placeholders() {
        let ctx = plain();
        let body = "<a><country>Germany</country></a>";
        let ex = exchange("POST", "/", &[("x-a", "b")], body);
        let t = compile_template("${header.x-a} ${xpath('//country')}", None, &ctx).unwrap();
        assert!(t.needs_body());
        assert_eq!(t.render(&ex), "b Germany");
        let t = compile_template("${//country}!", Some(ExpressionLanguage::XPath), &ctx).unwrap();
        assert_eq!(t.render(&ex), "Germany!");
        let ex = exchange("POST", "/", &[], r#"{"city":"Bonn"}"#);
        let mut ex = ex;
        let t =
            compile_template("City: ${$.city}", Some(ExpressionLanguage::JsonPath), &ctx).unwrap();
        t.prepare(&mut ex, Message::Request);
        assert_eq!(t.render(&ex), "City: Bonn");
        assert!(compile_template("${xpath(//x)}", None, &ctx).is_err());
        let ex = exchange("GET", "/", &[("x-a", "b"), ("x-b", "c")], "");
        let t = compile_template("${header.keySet()} ${new Date()}", None, &ctx).unwrap();
        let out = t.render(&ex).into_owned();
        assert!(out.starts_with(r#"["x-a","x-b"] "#), "{out}");
        assert!(out.contains(" UTC 20"), "{out}");
        assert!(compile_template("${nope nope}", None, &ctx).is_err());
        let t = compile_template("req-${T(java.util.UUID).randomUUID()}", None, &ctx).unwrap();
        let (a, b) = (t.render(&ex).into_owned(), t.render(&ex).into_owned());
        assert_eq!(a.len(), 40, "{a}");
        assert_ne!(a, b);
        assert_eq!(&a[18..19], "4", "version 4: {a}");
        let t = compile_template("${T(java.time.LocalDate).now().toString()}", None, &ctx).unwrap();
        assert_eq!(t.render(&ex).len(), 10);
        assert!(compile_template("${//[}", Some(ExpressionLanguage::XPath), &ctx).is_err());
        let l: ExpressionLanguage = serde_json::from_str("\"SpEL\"").unwrap();
        assert_eq!(l, ExpressionLanguage::Spel);
    }
}
