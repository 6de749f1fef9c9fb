//! `replace`: Membrane's policy that sets every node a JSONPath or XPath expression selects in
//! the body to a fixed text, in the phase it runs in. JSON bodies (`application/json`, `*+json`)
//! get the JSON string `with` in place of each selected value and are written compactly, member
//! order kept; XML bodies (`text/xml`, `application/xml`, `*+xml`) get `with` as the text of each
//! selected element, attribute, text node, comment or processing instruction, parsed and written
//! by libxml2 (no network access, entities not expanded). A body that selects nothing, is not
//! valid in its content type or is of another type passes unchanged: the policy never rejects.

use bytes::Bytes;
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::jsonpath::JsonPathExpr;
use turnpike_core::{Body, BodyNeed, CompileContext, CompileError, Exchange, Outcome, Policy};
use turnpike_core::{BodyInspected, PolicyFactory};

use crate::err;
use crate::language::ExpressionLanguage;
use crate::ordered_json::Json;

/// `replace`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReplaceSettings {
    /// A JSONPath expression selecting the values to replace (Membrane's older spelling of
    /// `expression` with `language: jsonpath`).
    #[serde(default)]
    pub json_path: Option<String>,
    /// The expression selecting the nodes to replace, in `language`.
    #[serde(default)]
    pub expression: Option<String>,
    /// The language of `expression`: `jsonpath` or `xpath`.
    #[serde(default)]
    pub language: Option<ExpressionLanguage>,
    /// The text every selected node gets (in JSON always a string).
    pub with: String,
}

/// What selects the nodes to replace.
#[derive(Debug)]
enum Selector {
    Json(JsonPathExpr),
    /// A checked XPath 1.0 expression (without NUL characters).
    XPath(String),
}

/// The compiled `replace` policy.
#[derive(Debug)]
pub struct Replace {
    selector: Selector,
    with: String,
}

impl PolicyFactory for Replace {
    const NAME: &'static str = "replace";
    type Settings = ReplaceSettings;

    /// Checks the expression once; returns the policy, or an error naming the setting.
    fn compile(s: ReplaceSettings, _: &CompileContext<'_>) -> Result<Self, CompileError> {
        let selector = match (s.json_path, s.expression) {
            (Some(_), Some(_)) => {
                return Err(err(
                    "expression",
                    "give either `jsonPath` or `expression`, not both",
                ))
            }
            (Some(path), None) => match s.language {
                None | Some(ExpressionLanguage::JsonPath) => Selector::Json(
                    JsonPathExpr::parse(&path).map_err(|e| err("jsonPath", e))?,
                ),
                Some(_) => {
                    return Err(err(
                        "language",
                        "`jsonPath` is a JSONPath expression: leave `language` out or set it to `jsonpath`",
                    ))
                }
            },
            (None, Some(expr)) => match s.language {
                Some(ExpressionLanguage::JsonPath) => Selector::Json(
                    JsonPathExpr::parse(&expr).map_err(|e| err("expression", e))?,
                ),
                Some(ExpressionLanguage::XPath) => {
                    if expr.contains('\0') {
                        return Err(err("expression", "must not contain a NUL character"));
                    }
                    let x = turnpike_soap::xpath::XPath::compile(&expr, &[])
                        .map_err(|e| err("expression", e))?;
                    Selector::XPath(x.source().to_owned())
                }
                None | Some(ExpressionLanguage::Spel) => {
                    return Err(err(
                        "language",
                        "must be `jsonpath` or `xpath`: the expression selects the nodes to replace",
                    ))
                }
            },
            (None, None) => {
                return Err(err(
                    "expression",
                    "give the nodes to replace in `jsonPath`, or in `expression` with `language`",
                ))
            }
        };
        if matches!(selector, Selector::XPath(_)) && s.with.contains('\0') {
            return Err(err("with", "must not contain a NUL character"));
        }
        Ok(Replace {
            selector,
            with: s.with,
        })
    }
}

/// What a `Content-Type` says the body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Json,
    Xml,
}

fn kind(headers: &http::HeaderMap) -> Option<Kind> {
    let ct = headers.get(http::header::CONTENT_TYPE)?.to_str().ok()?;
    let mime = ct.split(';').next()?.trim().to_ascii_lowercase();
    if mime == "application/json" || mime.ends_with("+json") {
        Some(Kind::Json)
    } else if mime == "text/xml" || mime == "application/xml" || mime.ends_with("+xml") {
        Some(Kind::Xml)
    } else {
        None
    }
}

impl Replace {
    /// The changed body, or `None` to leave it as it is.
    fn apply(&self, kind: Kind, body: &[u8]) -> Option<Vec<u8>> {
        if body.is_empty() {
            return None;
        }
        match (&self.selector, kind) {
            (Selector::Json(path), Kind::Json) => replace_json(path, &self.with, body),
            (Selector::XPath(path), Kind::Xml) => replace_xml(path, &self.with, body),
            _ => None,
        }
    }
}

/// Sets every value `path` selects in the JSON `body` to the string `with`.
fn replace_json(path: &JsonPathExpr, with: &str, body: &[u8]) -> Option<Vec<u8>> {
    let mut doc = Json::parse(body)?;
    let locations = path.locations(&doc.to_value());
    let mut changed = false;
    for at in &locations {
        if let Some(node) = doc.pointer_mut(at) {
            *node = Json::String(with.to_owned());
            changed = true;
        }
    }
    if changed {
        doc.to_vec()
    } else {
        None
    }
}

/// Sets the text of every node `path` selects in the XML `body` to `with`.
fn replace_xml(path: &str, with: &str, body: &[u8]) -> Option<Vec<u8>> {
    use libxml::parser::{Parser, ParserOptions};
    use libxml::tree::{NodeType, SaveOptions};
    use libxml::xpath::Context;

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
    let found = ctx.evaluate(path).ok()?;
    // Only node kinds that hold text; the type is read before anything else (a namespace node
    // of a node set is not a tree node).
    let nodes: Vec<(libxml::tree::Node, NodeType)> = found
        .get_nodes_as_vec()
        .into_iter()
        .filter_map(|n| {
            let t = n.get_type()?;
            matches!(
                t,
                NodeType::ElementNode
                    | NodeType::AttributeNode
                    | NodeType::TextNode
                    | NodeType::CDataSectionNode
                    | NodeType::CommentNode
                    | NodeType::PiNode
            )
            .then_some((n, t))
        })
        .collect();
    if nodes.is_empty() {
        return None;
    }
    // Setting an element's text frees what it contained: a selected node inside another
    // selected element (or inside the element that owns a selected attribute's parent) is
    // skipped, as its text is gone with it.
    let replaced: std::collections::HashSet<usize> = nodes
        .iter()
        .filter(|(_, t)| *t == NodeType::ElementNode)
        .map(|(n, _)| n.node_ptr() as usize)
        .collect();
    let inside_replaced = |n: &libxml::tree::Node, t: &NodeType| {
        let mut up = n.get_parent();
        if *t == NodeType::AttributeNode {
            up = up.and_then(|owner| owner.get_parent());
        }
        while let Some(p) = up {
            if replaced.contains(&(p.node_ptr() as usize)) {
                return true;
            }
            up = p.get_parent();
        }
        false
    };
    let keep: Vec<bool> = nodes.iter().map(|(n, t)| !inside_replaced(n, t)).collect();
    // libxml2 reads entity references in the new text of elements and attributes: `&` is
    // escaped so that `with` stays literal. Text, comments and instructions take it as it is.
    let markup = with.replace('&', "&amp;");
    for ((mut n, t), keep) in nodes.into_iter().zip(keep) {
        if !keep {
            continue;
        }
        let text = match t {
            NodeType::ElementNode | NodeType::AttributeNode => &markup,
            _ => with,
        };
        n.set_content(text).ok()?;
    }
    Some(
        doc.to_string_with_options(SaveOptions::default())
            .into_bytes(),
    )
}

impl Policy for Replace {
    fn name(&self) -> &'static str {
        "replace"
    }

    fn body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    fn response_body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    fn response_needs_request(&self) -> bool {
        false
    }

    /// Replaces the selected nodes of the request's JSON or XML body; always continues.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let Some(k) = kind(&ex.request.headers) else {
            return Outcome::Continue;
        };
        if let Some(new) = ex.request_bytes().and_then(|b| self.apply(k, b)) {
            ex.request_body = Body::full(Bytes::from(new));
            ex.request.headers.remove(http::header::CONTENT_LENGTH);
            turnpike_core::json::forget_request_json(ex);
            ex.extensions.remove::<BodyInspected>();
        }
        Outcome::Continue
    }

    /// Replaces the selected nodes of the response's JSON or XML body; always continues.
    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        let Some(k) = ex.response.as_ref().and_then(|r| kind(r.headers())) else {
            return Outcome::Continue;
        };
        if let Some(new) = ex.response_bytes().and_then(|b| self.apply(k, b)) {
            if let Some(res) = ex.response.as_mut() {
                *res.body_mut() = Body::full(Bytes::from(new));
                res.headers_mut().remove(http::header::CONTENT_LENGTH);
            }
            turnpike_core::json::forget_response_json(ex);
        }
        Outcome::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{exchange, plain};

    fn compile(v: serde_json::Value) -> Result<Replace, String> {
        let s: ReplaceSettings = serde_json::from_value(v).map_err(|e| e.to_string())?;
        Replace::compile(s, &plain()).map_err(|e| format!("{}: {}", e.key, e.message))
    }

    fn json(path: &str, with: &str, body: &str) -> Option<String> {
        let p = compile(serde_json::json!({"jsonPath": path, "with": with})).unwrap();
        p.apply(Kind::Json, body.as_bytes())
            .map(|b| String::from_utf8(b).unwrap())
    }

    #[test]
    fn membranes_example() {
        assert_eq!(
            json(
                "$.shop.name",
                "foo",
                r#"{"shop": {"name": "MyShop", "location": "Berlin"}}"#
            )
            .unwrap(),
            r#"{"shop":{"name":"foo","location":"Berlin"}}"#
        );
    }

    #[test]
    fn every_match_is_replaced_by_a_string() {
        let body =
            r#"{"items":[{"id":1,"price":9.5},{"id":2,"price":3},{"id":3}],"z":{"price":[1]}}"#;
        assert_eq!(
            json("$..price", "42", body).unwrap(),
            r#"{"items":[{"id":1,"price":"42"},{"id":2,"price":"42"},{"id":3}],"z":{"price":"42"}}"#
        );
        assert_eq!(
            json("$.items[*].id", "x", body).unwrap(),
            r#"{"items":[{"id":"x","price":9.5},{"id":"x","price":3},{"id":"x"}],"z":{"price":[1]}}"#
        );
        // Nested matches: the outer value wins.
        assert_eq!(
            json("$..*", "v", r#"{"a":{"b":1}}"#).unwrap(),
            r#"{"a":"v"}"#
        );
    }

    #[test]
    fn a_missing_path_or_other_body_leaves_it_unchanged() {
        let body = r#"{"user":{"id":7}}"#;
        assert_eq!(json("$.user.name", "Bob", body), None);
        assert_eq!(json("$.shop.name", "Bob", body), None);
        assert_eq!(json("$.a", "Bob", "{\"a\":"), None);
        assert_eq!(json("$.a", "Bob", "not json"), None);
        assert_eq!(json("$.a", "Bob", ""), None);
        let p = compile(serde_json::json!({"jsonPath": "$.a", "with": "b"})).unwrap();
        assert_eq!(p.apply(Kind::Xml, br#"{"a":1}"#), None);
    }

    #[test]
    fn only_json_and_xml_content_types() {
        let p = compile(serde_json::json!({"jsonPath": "$.user.name", "with": "Bob"})).unwrap();
        let mut ex = exchange(
            "POST",
            "/",
            &[("content-type", "application/json; charset=utf-8")],
            r#"{"user":{"name":"Alice","age":3}}"#,
        );
        assert!(matches!(p.on_request(&mut ex), Outcome::Continue));
        assert_eq!(
            ex.request_bytes().unwrap().as_ref(),
            br#"{"user":{"name":"Bob","age":3}}"#
        );
        let mut ex = exchange(
            "POST",
            "/",
            &[("content-type", "text/plain")],
            r#"{"user":{"name":"Alice"}}"#,
        );
        p.on_request(&mut ex);
        assert_eq!(
            ex.request_bytes().unwrap().as_ref(),
            br#"{"user":{"name":"Alice"}}"#
        );
    }

    #[test]
    fn xpath_replaces_elements_attributes_and_text() {
        let p = compile(
            serde_json::json!({"expression": "//name | //@id", "language": "xpath", "with": "a & <b>"}),
        )
        .unwrap();
        let out = p
            .apply(
                Kind::Xml,
                br#"<shop id="1"><name>MyShop<x/></name><name/><city>Bonn</city></shop>"#,
            )
            .unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(
            out.ends_with(
                "<shop id=\"a &amp; &lt;b&gt;\"><name>a &amp; &lt;b&gt;</name><name>a &amp; &lt;b&gt;</name><city>Bonn</city></shop>\n"
            ),
            "{out}"
        );
        // Nodes inside a replaced element are skipped, not touched after being freed.
        let p = compile(serde_json::json!({"expression": "//*", "language": "xpath", "with": "t"}))
            .unwrap();
        let out =
            String::from_utf8(p.apply(Kind::Xml, b"<a><b c='1'><d/></b></a>").unwrap()).unwrap();
        assert!(out.ends_with("<a>t</a>\n"), "{out}");
        let p = compile(
            serde_json::json!({"expression": "//c/text()", "language": "xpath", "with": "&x;"}),
        )
        .unwrap();
        let out = String::from_utf8(p.apply(Kind::Xml, b"<a><c>old</c></a>").unwrap()).unwrap();
        assert!(out.ends_with("<a><c>&amp;x;</c></a>\n"), "{out}");
        // Nothing selected, not XML, a JSON body: unchanged.
        assert!(p.apply(Kind::Xml, b"<a/>").is_none());
        assert!(p.apply(Kind::Xml, b"<a>").is_none());
        assert!(p.apply(Kind::Json, b"{}").is_none());
    }

    #[test]
    fn xml_entities_are_not_expanded() {
        let p = compile(serde_json::json!({"expression": "//b", "language": "xpath", "with": "x"}))
            .unwrap();
        let doc = br#"<!DOCTYPE a [<!ENTITY e SYSTEM "file:///etc/passwd">]><a>&e;<b/></a>"#;
        let out = String::from_utf8(p.apply(Kind::Xml, doc).unwrap()).unwrap();
        assert!(!out.contains("root:"), "{out}");
        assert!(out.contains("<b>x</b>"), "{out}");
    }

    #[test]
    fn settings_errors() {
        let e = |v| compile(v).unwrap_err();
        assert!(e(serde_json::json!({"jsonPath": "$.a"})).contains("with"));
        assert!(e(serde_json::json!({"with": "x"})).starts_with("expression:"));
        assert!(
            e(serde_json::json!({"jsonPath": "$.a", "expression": "$.b", "with": "x"}))
                .starts_with("expression:")
        );
        assert!(e(serde_json::json!({"expression": "$.a", "with": "x"})).starts_with("language:"));
        assert!(
            e(serde_json::json!({"expression": "$.a", "language": "spel", "with": "x"}))
                .starts_with("language:")
        );
        assert!(
            e(serde_json::json!({"jsonPath": "$.a", "language": "xpath", "with": "x"}))
                .starts_with("language:")
        );
        assert!(e(serde_json::json!({"jsonPath": "$.a[", "with": "x"})).starts_with("jsonPath:"));
        assert!(
            e(serde_json::json!({"expression": "//[", "language": "xpath", "with": "x"}))
                .starts_with("expression:")
        );
        assert!(
            e(serde_json::json!({"jsonPath": "$.a", "with": "x", "replacement": "y"}))
                .contains("unknown field")
        );
        assert!(compile(
            serde_json::json!({"expression": "$.a", "language": "jsonpath", "with": "x"})
        )
        .is_ok());
    }
}
