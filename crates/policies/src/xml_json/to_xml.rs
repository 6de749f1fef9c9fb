//! JSON to XML, by the rules of Membrane's `json2Xml` (org.json's `XML.toString`), keeping the
//! document order of the members and always giving one well-formed document.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use super::text::{element_name, json_string, push_text};

/// The XML declaration every converted body starts with.
const DECLARATION: &str = r#"<?xml version="1.0" encoding="UTF-8"?>"#;

/// The name of the element an array's items are written as when the array is the document.
const ITEM: &str = "item";

/// A JSON value with the members of objects in document order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    Null,
    Bool(bool),
    /// A number, as its text.
    Num(String),
    Str(String),
    Arr(Vec<Node>),
    Obj(Vec<(String, Node)>),
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Node, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

/// The marker of the error an object with a repeated key gives, to tell it from syntax errors.
const DUPLICATE_KEY: &str = "duplicate key";

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Num(v.to_string()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Num(v.to_string()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Node, E> {
        // serde_json's own spelling of the number (shortest round-trip form); the parser never
        // hands over a number that is not finite.
        match serde_json::Number::from_f64(v) {
            Some(n) => Ok(Node::Num(n.to_string())),
            None => Err(E::custom("number out of range")),
        }
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Str(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Node, E> {
        Ok(Node::Str(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Node>()? {
            items.push(item);
        }
        Ok(Node::Arr(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut members: Vec<(String, Node)> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(DUPLICATE_KEY));
            }
            let value = map.next_value::<Node>()?;
            members.push((key, value));
        }
        Ok(Node::Obj(members))
    }
}

/// Why a body could not be converted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum JsonError {
    /// Not JSON (or nested deeper than serde_json's limit of 128): the parser's message, and
    /// where it stopped.
    Invalid {
        message: String,
        line: usize,
        column: usize,
    },
    /// An object has the same key twice (org.json refuses such documents too).
    DuplicateKey,
    /// A JSON document that is a scalar: its kind (`string`, `number`, `boolean`, `null`).
    Scalar(&'static str),
}

/// The XML document for the JSON document `body` (UTF-8, an optional byte order mark first),
/// with `root` as the name of the root element where Membrane's rules use one: the converted
/// body, or why the body cannot be converted.
pub(crate) fn convert(body: &[u8], root: Option<&str>) -> Result<String, JsonError> {
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    let doc: Node = serde_json::from_slice(body).map_err(|e| {
        if e.is_data() && e.to_string().starts_with(DUPLICATE_KEY) {
            JsonError::DuplicateKey
        } else {
            JsonError::Invalid {
                message: e.to_string(),
                line: e.line(),
                column: e.column(),
            }
        }
    })?;
    let mut out = String::with_capacity(body.len() * 2 + DECLARATION.len());
    out.push_str(DECLARATION);
    match doc {
        Node::Obj(members) => match (root, members.as_slice()) {
            (Some(r), _) => write_object(&mut out, r, &members),
            // One member that gives one element: that element is the document.
            (None, [(key, value)]) if key != "content" && !matches!(value, Node::Arr(_)) => {
                let name = element_name(key);
                write_element(&mut out, &name, value);
            }
            (None, _) => write_object(&mut out, "root", &members),
        },
        Node::Arr(items) => {
            let r = root.unwrap_or("array");
            open(&mut out, r);
            write_member(&mut out, ITEM, &Node::Arr(items));
            close(&mut out, r);
        }
        Node::Str(_) => return Err(JsonError::Scalar("string")),
        Node::Num(_) => return Err(JsonError::Scalar("number")),
        Node::Bool(_) => return Err(JsonError::Scalar("boolean")),
        Node::Null => return Err(JsonError::Scalar("null")),
    }
    Ok(out)
}

fn open(out: &mut String, name: &str) {
    out.push('<');
    out.push_str(name);
    out.push('>');
}

fn close(out: &mut String, name: &str) {
    out.push_str("</");
    out.push_str(name);
    out.push('>');
}

fn write_object(out: &mut String, name: &str, members: &[(String, Node)]) {
    open(out, name);
    write_members(out, members);
    close(out, name);
}

/// The members of an object, in order: `content` as text, every other as its elements.
fn write_members(out: &mut String, members: &[(String, Node)]) {
    for (key, value) in members {
        if key == "content" {
            write_content(out, value);
        } else {
            write_member(out, &element_name(key), value);
        }
    }
}

/// One member: an element, or one per item for an array (none for an empty one).
fn write_member(out: &mut String, name: &str, value: &Node) {
    match value {
        Node::Arr(items) => {
            for item in items {
                write_element(out, name, item);
            }
        }
        other => write_element(out, name, other),
    }
}

/// The element `name` holding `value`; an array inside an array is an element whose items are
/// `<array>` elements.
fn write_element(out: &mut String, name: &str, value: &Node) {
    match value {
        Node::Obj(members) => write_object(out, name, members),
        Node::Arr(items) => {
            open(out, name);
            for item in items {
                write_element(out, "array", item);
            }
            close(out, name);
        }
        Node::Str(s) if s.is_empty() => {
            out.push('<');
            out.push_str(name);
            out.push_str("/>");
        }
        scalar => {
            open(out, name);
            push_scalar(out, scalar);
            close(out, name);
        }
    }
}

/// A `content` member: its value as text, an array's items one a line.
fn write_content(out: &mut String, value: &Node) {
    match value {
        Node::Arr(items) => {
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push('\n');
                }
                push_scalar(out, item);
            }
        }
        other => push_scalar(out, other),
    }
}

/// The text of a value, escaped: objects and arrays (only in `content`) as compact JSON.
fn push_scalar(out: &mut String, value: &Node) {
    match value {
        Node::Null => out.push_str("null"),
        Node::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Node::Num(n) => out.push_str(n),
        Node::Str(s) => push_text(out, s),
        Node::Arr(_) | Node::Obj(_) => {
            let mut json = String::new();
            json_text(&mut json, value);
            push_text(out, &json);
        }
    }
}

/// Compact JSON for a value, members in order.
fn json_text(out: &mut String, value: &Node) {
    match value {
        Node::Null => out.push_str("null"),
        Node::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Node::Num(n) => out.push_str(n),
        Node::Str(s) => json_string(out, s),
        Node::Arr(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json_text(out, item);
            }
            out.push(']');
        }
        Node::Obj(members) => {
            out.push('{');
            for (i, (k, v)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json_string(out, k);
                out.push(':');
                json_text(out, v);
            }
            out.push('}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = DECLARATION;

    fn xml(json: &str) -> String {
        convert(json.as_bytes(), None).unwrap()
    }

    fn body(json: &str) -> String {
        xml(json).strip_prefix(D).unwrap().to_owned()
    }

    #[test]
    fn one_member_is_the_root_else_root_wraps() {
        assert_eq!(
            xml(r#"{"person":{"name":"Mike","age":42}}"#),
            format!("{D}<person><name>Mike</name><age>42</age></person>")
        );
        assert_eq!(body(r#"{"place":"Berlin"}"#), "<place>Berlin</place>");
        assert_eq!(body(r#"{"a":1,"b":2}"#), "<root><a>1</a><b>2</b></root>");
        assert_eq!(body("{}"), "<root></root>");
        assert_eq!(
            convert(br#"{"a":1,"b":2}"#, Some("top")).unwrap(),
            format!("{D}<top><a>1</a><b>2</b></top>")
        );
        assert_eq!(
            convert(br#"{"place":"Berlin"}"#, Some("zoo")).unwrap(),
            format!("{D}<zoo><place>Berlin</place></zoo>")
        );
        // A lone array member would give several roots: wrapped instead.
        assert_eq!(
            body(r#"{"items":[1,2]}"#),
            "<root><items>1</items><items>2</items></root>"
        );
        assert_eq!(body(r#"{"content":"x"}"#), "<root>x</root>");
    }

    #[test]
    fn members_keep_their_document_order() {
        assert_eq!(
            body(r#"{"z":1,"a":2,"m":{"y":true,"b":false}}"#),
            "<root><z>1</z><a>2</a><m><y>true</y><b>false</b></m></root>"
        );
    }

    #[test]
    fn arrays_repeat_their_key() {
        assert_eq!(
            xml("[1,2,3]"),
            format!("{D}<array><item>1</item><item>2</item><item>3</item></array>")
        );
        assert_eq!(
            convert(b"[1,2]", Some("myRoot")).unwrap(),
            format!("{D}<myRoot><item>1</item><item>2</item></myRoot>")
        );
        assert_eq!(body("[]"), "<array></array>");
        assert_eq!(
            body(r#"{"a":[{"b":1},{"b":2}],"c":[]}"#),
            "<root><a><b>1</b></a><a><b>2</b></a></root>"
        );
        assert_eq!(
            body(r#"{"k":[[1,2],[]],"x":0}"#),
            "<root><k><array>1</array><array>2</array></k><k></k><x>0</x></root>"
        );
        assert_eq!(
            body("[[1,[2]]]"),
            "<array><item><array>1</array><array><array>2</array></array></item></array>"
        );
    }

    #[test]
    fn scalars_numbers_booleans_and_null() {
        assert_eq!(
            body(r#"{"i":-7,"u":18446744073709551615,"f":1.50,"e":1e3,"t":true,"n":null,"s":"","o":{}}"#),
            "<root><i>-7</i><u>18446744073709551615</u><f>1.5</f><e>1000.0</e><t>true</t><n>null</n><s/><o></o></root>"
        );
    }

    #[test]
    fn text_is_escaped_and_names_are_made_valid() {
        assert_eq!(
            body(r#"{"a":"<&>\"' \r\n\t\u0001\uFFFF"}"#),
            "<a>&lt;&amp;&gt;&quot;&apos; &#13;\n\t\u{FFFD}\u{FFFD}</a>"
        );
        assert_eq!(
            body(r#"{"first name":1,"1st":2,"":3,"ns:item":4,"a:b:c":5,":x":6,"ü-ok.1":7}"#),
            "<root><first_name>1</first_name><_1st>2</_1st><_>3</_><ns:item>4</ns:item><a_b_c>5</a_b_c><_x>6</_x><ü-ok.1>7</ü-ok.1></root>"
        );
    }

    #[test]
    fn content_is_text_between_the_elements() {
        assert_eq!(
            body(r#"{"p":{"b":"x","content":"Hello","i":"y"}}"#),
            "<p><b>x</b>Hello<i>y</i></p>"
        );
        assert_eq!(
            body(r#"{"p":{"content":["a",1,null,{"k":"v"}]}}"#),
            "<p>a\n1\nnull\n{&quot;k&quot;:&quot;v&quot;}</p>"
        );
    }

    #[test]
    fn what_cannot_be_converted() {
        for (json, kind) in [
            ("\"1\"", "string"),
            ("1", "number"),
            ("true", "boolean"),
            ("null", "null"),
        ] {
            assert_eq!(
                convert(json.as_bytes(), None),
                Err(JsonError::Scalar(kind)),
                "{json}"
            );
        }
        for bad in ["$", "{ invalid", "", "{'a':1}", "[1,]", "{\"a\":1} x"] {
            assert!(
                matches!(
                    convert(bad.as_bytes(), None),
                    Err(JsonError::Invalid { .. })
                ),
                "{bad}"
            );
        }
        assert_eq!(
            convert(br#"{"a":{"b":1,"b":2}}"#, None),
            Err(JsonError::DuplicateKey)
        );
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(matches!(
            convert(deep.as_bytes(), None),
            Err(JsonError::Invalid { .. })
        ));
    }

    #[test]
    fn a_byte_order_mark_is_skipped() {
        assert_eq!(
            convert(b"\xEF\xBB\xBF{\"a\":1}", None).unwrap(),
            format!("{D}<a>1</a>")
        );
    }
}
