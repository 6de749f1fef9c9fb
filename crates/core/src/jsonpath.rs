//! RFC 9535 JSONPath expressions, compiled once at load time (with `serde_json_path`, which is
//! tested against the JSONPath compliance test suite) and evaluated on the message's JSON body,
//! which is parsed at most once per exchange (see [`crate::json`]).
//!
//! Used by templates with `language: jsonpath` (`${$.person.firstName}`), and meant for any
//! policy that takes an expression (such as a rate limiter's key).

use serde_json::Value;
use serde_json_path::JsonPath;

use crate::exchange::Exchange;
use crate::json;

/// A compiled JSONPath expression.
#[derive(Debug, Clone)]
pub struct JsonPathExpr {
    src: String,
    path: JsonPath,
}

impl PartialEq for JsonPathExpr {
    fn eq(&self, other: &Self) -> bool {
        self.src == other.src
    }
}

/// Which message's body an expression reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message {
    /// The request.
    Request,
    /// The response.
    Response,
}

impl JsonPathExpr {
    /// Compiles `src`; the error says what is wrong with it.
    pub fn parse(src: &str) -> Result<Self, String> {
        let path = JsonPath::parse(src.trim())
            .map_err(|e| format!("`{src}` is not a JSONPath expression: {e}"))?;
        Ok(JsonPathExpr {
            src: src.to_owned(),
            path,
        })
    }

    /// The expression as written.
    pub fn as_str(&self) -> &str {
        &self.src
    }

    /// The nodes the expression selects in `v`.
    pub fn select<'v>(&self, v: &'v Value) -> Vec<&'v Value> {
        self.path.query(v).all()
    }

    /// Renders the selection as text: nothing for no node, a string's text or a value's JSON
    /// for one node, a JSON array for several.
    pub fn render_into(&self, v: Option<&Value>, out: &mut String) {
        let Some(v) = v else { return };
        let nodes = self.select(v);
        match nodes.as_slice() {
            [] => {}
            [Value::String(s)] => out.push_str(s),
            [one] => out.push_str(&one.to_string()),
            many => {
                out.push_str(&Value::Array(many.iter().map(|v| (*v).clone()).collect()).to_string())
            }
        }
    }

    /// Evaluates on the exchange's request or response body (parsing it if nobody did yet) and
    /// renders the result as text ("" when the body is absent or not JSON).
    pub fn eval(&self, ex: &mut Exchange, msg: Message) -> String {
        let v = match msg {
            Message::Request => json::request_json(ex),
            Message::Response => json::response_json(ex),
        };
        let mut out = String::new();
        self.render_into(v.ok().as_deref(), &mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::tests::exchange;
    use crate::Body;

    #[test]
    fn selects_and_renders() {
        let mut ex = exchange("POST", "/", &[]);
        ex.request_body = Body::full(r#"{"person":{"firstName":"Ada","age":36,"tags":["a","b"]}}"#);
        let e = |s: &str| JsonPathExpr::parse(s).unwrap();
        assert_eq!(
            e("$.person.firstName").eval(&mut ex, Message::Request),
            "Ada"
        );
        assert_eq!(e("$.person.age").eval(&mut ex, Message::Request), "36");
        assert_eq!(
            e("$.person.tags[*]").eval(&mut ex, Message::Request),
            r#"["a","b"]"#
        );
        assert_eq!(
            e("$.person[?@ == 36]").eval(&mut ex, Message::Request),
            "36"
        );
        assert_eq!(e("$.nobody").eval(&mut ex, Message::Request), "");
        assert_eq!(e("$.x").eval(&mut ex, Message::Response), "");
        assert!(JsonPathExpr::parse("$.a[").is_err());
        assert!(JsonPathExpr::parse("person").is_err());
    }

    /// The examples of RFC 9535, section 1.5 (the crate itself runs the JSONPath compliance
    /// test suite).
    #[test]
    fn rfc9535_examples() {
        let doc: Value = serde_json::from_str(
            r#"{ "store": {
                "book": [
                  { "category": "reference", "author": "Nigel Rees", "title": "Sayings of the Century", "price": 8.95 },
                  { "category": "fiction", "author": "Evelyn Waugh", "title": "Sword of Honour", "price": 12.99 },
                  { "category": "fiction", "author": "Herman Melville", "title": "Moby Dick", "isbn": "0-553-21311-3", "price": 8.99 },
                  { "category": "fiction", "author": "J. R. R. Tolkien", "title": "The Lord of the Rings", "isbn": "0-395-19395-8", "price": 22.99 }
                ],
                "bicycle": { "color": "red", "price": 399 } } }"#,
        )
        .unwrap();
        let n = |q: &str| JsonPathExpr::parse(q).unwrap().select(&doc).len();
        let authors = |q: &str| -> Vec<String> {
            JsonPathExpr::parse(q)
                .unwrap()
                .select(&doc)
                .iter()
                .map(|v| v.as_str().unwrap_or_default().to_owned())
                .collect()
        };
        assert_eq!(
            authors("$.store.book[*].author"),
            [
                "Nigel Rees",
                "Evelyn Waugh",
                "Herman Melville",
                "J. R. R. Tolkien"
            ]
        );
        assert_eq!(n("$..author"), 4);
        assert_eq!(n("$.store.*"), 2);
        assert_eq!(n("$.store..price"), 5);
        assert_eq!(authors("$..book[2].author"), ["Herman Melville"]);
        assert_eq!(authors("$..book[-1].author"), ["J. R. R. Tolkien"]);
        assert_eq!(n("$..book[0,1]"), 2);
        assert_eq!(n("$..book[:2]"), 2);
        assert_eq!(n("$..book[?@.isbn]"), 2);
        assert_eq!(n("$..book[?@.price<10]"), 2);
        assert_eq!(n("$..*"), 27);
    }
}
