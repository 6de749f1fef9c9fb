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
    /// For a path of member names only (`$.person.address.city`): the names, walked directly
    /// (at most one node, no allocation) instead of through the general query engine.
    members: Option<Vec<String>>,
}

/// The member names of `$.a.b.c` (ASCII shorthand names only); `None` for anything else.
fn member_names(src: &str) -> Option<Vec<String>> {
    let rest = src.strip_prefix('$')?;
    let mut names = Vec::new();
    for seg in rest.split('.').skip(1) {
        let mut bytes = seg.bytes();
        let first = bytes.next()?;
        if !(first.is_ascii_alphabetic() || first == b'_')
            || !bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            return None;
        }
        names.push(seg.to_owned());
    }
    // `$` alone, or text before the first `.`: the general engine.
    if names.is_empty() || !rest.starts_with('.') {
        return None;
    }
    Some(names)
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
            members: member_names(src.trim()),
        })
    }

    /// The expression as written.
    pub fn as_str(&self) -> &str {
        &self.src
    }

    /// The nodes the expression selects in `v`.
    pub fn select<'v>(&self, v: &'v Value) -> Vec<&'v Value> {
        match &self.members {
            Some(names) => Self::walk(names, v).into_iter().collect(),
            None => self.path.query(v).all(),
        }
    }

    /// Where the nodes the expression selects in `v` are, as JSON Pointers (RFC 6901, `""` for
    /// the root), in the order the query yields them: for policies that change the selected
    /// nodes (`v.pointer_mut(..)`).
    pub fn locations(&self, v: &Value) -> Vec<String> {
        self.path
            .query_located(v)
            .locations()
            .map(|p| p.to_json_pointer())
            .collect()
    }

    /// The node that member names select (RFC 9535: a name selector selects the member of an
    /// object, nothing in any other value).
    fn walk<'v>(names: &[String], v: &'v Value) -> Option<&'v Value> {
        names
            .iter()
            .try_fold(v, |node, name| node.get(name.as_str()))
    }

    /// The selection as one JSON value: `None` for no node, the node for one, an array for
    /// several.
    pub fn value<'v>(&self, v: &'v Value) -> Option<std::borrow::Cow<'v, Value>> {
        use std::borrow::Cow;
        if let Some(names) = &self.members {
            return Self::walk(names, v).map(Cow::Borrowed);
        }
        let nodes = self.select(v);
        match nodes.as_slice() {
            [] => None,
            [one] => Some(Cow::Borrowed(*one)),
            many => Some(Cow::Owned(Value::Array(
                many.iter().map(|v| (*v).clone()).collect(),
            ))),
        }
    }

    /// Renders the selection as text: nothing for no node, a string's text or a value's JSON
    /// for one node, a JSON array for several.
    pub fn render_into(&self, v: Option<&Value>, out: &mut String) {
        let Some(v) = v else { return };
        if let Some(names) = &self.members {
            match Self::walk(names, v) {
                None => {}
                Some(Value::String(s)) => out.push_str(s),
                Some(one) => out.push_str(&one.to_string()),
            }
            return;
        }
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

    #[test]
    fn locations_are_json_pointers() {
        let doc: Value = serde_json::from_str(r#"{"a":[{"b/c":1},{"b/c":2}],"d~":{}}"#).unwrap();
        let e = |s: &str| JsonPathExpr::parse(s).unwrap().locations(&doc);
        assert_eq!(e("$.a[*]['b/c']"), ["/a/0/b~1c", "/a/1/b~1c"]);
        assert_eq!(e("$['d~']"), ["/d~0"]);
        assert_eq!(e("$"), [""]);
        assert!(e("$.x.y").is_empty());
    }

    #[test]
    fn member_paths_take_the_short_way() {
        assert_eq!(
            member_names("$.person.address.city").unwrap(),
            ["person", "address", "city"]
        );
        for general in [
            "$", "$..a", "$.a[0]", "$.a.*", "$['a']", "$.a .b", "$.é", "$.1a", "$x.a",
        ] {
            assert!(member_names(general).is_none(), "{general}");
        }
    }

    proptest::proptest! {
        /// Member paths select what the general engine selects.
        #[test]
        fn member_paths_agree_with_the_engine(
            path in proptest::collection::vec(proptest::sample::select(vec!["a", "b", "_c1"]), 1..4),
            doc in json(),
        ) {
            let src = format!("$.{}", path.join("."));
            let e = JsonPathExpr::parse(&src).unwrap();
            proptest::prop_assert!(e.members.is_some());
            proptest::prop_assert_eq!(e.select(&doc), e.path.query(&doc).all());
            let (mut fast, mut general) = (String::new(), String::new());
            e.render_into(Some(&doc), &mut fast);
            JsonPathExpr { members: None, ..e.clone() }.render_into(Some(&doc), &mut general);
            proptest::prop_assert_eq!(fast, general);
        }
    }

    fn json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i32>().prop_map(Value::from),
            "[a-c]{0,3}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(
                    proptest::sample::select(vec!["a", "b", "_c1", "d"]).prop_map(String::from),
                    inner,
                    0..4
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
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
