//! A YAML reader that keeps the line and column of every node, so that later errors can point at
//! the exact place in the file. Scalars are typed by the YAML 1.2 core schema; `${NAME}`
//! (upper-case names) is replaced from the environment while reading.

use std::collections::HashMap;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// A 1-based line and column in a source file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
}

impl Span {
    fn from_marker(m: Marker) -> Self {
        Span {
            line: m.line() as u32,
            column: m.col() as u32 + 1,
        }
    }
}

/// A YAML value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `~`, `null` or nothing.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A floating point number.
    Float(f64),
    /// A string (every quoted scalar, and plain scalars that are nothing else).
    Str(String),
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping; keys keep their order.
    Map(Vec<(Node, Node)>),
}

/// A YAML value with the place it starts at.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// The value.
    pub value: Value,
    /// Where it starts.
    pub span: Span,
}

/// An error found while reading YAML: where, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YamlError {
    /// Where the problem is.
    pub span: Span,
    /// Key path of the value it concerns, when known.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

/// Reads every document of `text`. `env` looks up environment variables for `${NAME}`.
pub fn parse_documents(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Node>, Vec<YamlError>> {
    let mut builder = Builder {
        stack: Vec::new(),
        docs: Vec::new(),
        anchors: HashMap::new(),
        errors: Vec::new(),
        env,
    };
    let mut parser = Parser::new_from_str(text);
    if let Err(e) = parser.load(&mut builder, true) {
        return Err(vec![YamlError {
            span: Span::from_marker(*e.marker()),
            key: String::new(),
            message: format!("invalid YAML: {}", e.info()),
        }]);
    }
    if builder.errors.is_empty() {
        Ok(builder.docs)
    } else {
        Err(builder.errors)
    }
}

enum Frame {
    Seq(Vec<Node>, Span, usize),
    Map(Vec<(Node, Node)>, Option<Node>, Span, usize),
}

struct Builder<'e> {
    stack: Vec<Frame>,
    docs: Vec<Node>,
    anchors: HashMap<usize, Node>,
    errors: Vec<YamlError>,
    env: &'e dyn Fn(&str) -> Option<String>,
}

impl Builder<'_> {
    fn push_node(&mut self, node: Node, anchor: usize) {
        if anchor > 0 {
            self.anchors.insert(anchor, node.clone());
        }
        match self.stack.last_mut() {
            None => self.docs.push(node),
            Some(Frame::Seq(items, _, _)) => items.push(node),
            Some(Frame::Map(entries, pending_key, _, _)) => match pending_key.take() {
                None => {
                    if let Value::Str(k) = &node.value {
                        if entries
                            .iter()
                            .any(|(ek, _)| matches!(&ek.value, Value::Str(s) if s == k))
                        {
                            self.errors.push(YamlError {
                                span: node.span,
                                key: k.clone(),
                                message: format!("duplicate key `{k}`"),
                            });
                        }
                    }
                    *pending_key = Some(node);
                }
                Some(k) => entries.push((k, node)),
            },
        }
    }

    fn scalar(&mut self, text: String, style: TScalarStyle, span: Span) -> Value {
        // Membrane's `#{env.NAME}` placeholders stand for the value itself, quoted or not
        // (`port: "#{env.PORT}"` is a number there).
        let membrane_env = text.contains("#{env.");
        let text = match substitute_env(&text, self.env) {
            Ok(t) => t,
            Err(msg) => {
                self.errors.push(YamlError {
                    span,
                    key: String::new(),
                    message: msg,
                });
                text
            }
        };
        if style != TScalarStyle::Plain && !membrane_env {
            return Value::Str(text);
        }
        resolve_plain(text)
    }
}

/// Types a plain scalar by the YAML 1.2 core schema.
fn resolve_plain(text: String) -> Value {
    match text.as_str() {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        _ => {}
    }
    if let Ok(i) = text.parse::<i64>() {
        return Value::Int(i);
    }
    if let Some(hex) = text.strip_prefix("0x") {
        if let Ok(i) = i64::from_str_radix(hex, 16) {
            return Value::Int(i);
        }
    }
    if let Some(oct) = text.strip_prefix("0o") {
        if let Ok(i) = i64::from_str_radix(oct, 8) {
            return Value::Int(i);
        }
    }
    let looks_numeric = text
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'));
    if looks_numeric && text.bytes().any(|b| b.is_ascii_digit()) {
        if let Ok(f) = text.parse::<f64>() {
            return Value::Float(f);
        }
    }
    match text.as_str() {
        ".inf" | ".Inf" | ".INF" | "+.inf" => Value::Float(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => Value::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => Value::Float(f64::NAN),
        _ => Value::Str(text),
    }
}

/// Replaces `${NAME}` where NAME is an environment variable name in upper case
/// (`[A-Z_][A-Z0-9_]*`), and Membrane's `#{env.NAME}` (any letters, digits and `_`). Other
/// `${...}` forms (templates such as `${path.id}`) are left alone.
pub fn substitute_env(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let owned = substitute_membrane_env(text, env)?;
    let text: &str = &owned;
    if !text.contains("${") {
        return Ok(text.to_owned());
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find('}') {
            Some(end) if is_env_name(&after[..end]) => {
                let name = &after[..end];
                match env(name) {
                    Some(v) => out.push_str(&v),
                    None => return Err(format!("environment variable `{name}` is not set")),
                }
                rest = &after[end + 1..];
            }
            _ => {
                out.push_str("${");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Replaces Membrane's `#{env.NAME}` placeholders; other `#{…}` text stays as it is.
fn substitute_membrane_env(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, String> {
    if !text.contains("#{") {
        return Ok(text.to_owned());
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("#{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let name = after.find('}').and_then(|end| {
            let inner = after[..end].trim();
            inner
                .strip_prefix("env.")
                .filter(|n| {
                    !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                })
                .map(|n| (n, end))
        });
        match name {
            Some((name, end)) => {
                match env(name) {
                    Some(v) => out.push_str(&v),
                    None => return Err(format!("environment variable `{name}` is not set")),
                }
                rest = &after[end + 1..];
            }
            None => {
                out.push_str("#{");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

fn is_env_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b'A'..=b'Z' | b'_'))
        && bytes.all(|b| matches!(b, b'A'..=b'Z' | b'0'..=b'9' | b'_'))
}

impl MarkedEventReceiver for Builder<'_> {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        let span = Span::from_marker(mark);
        match ev {
            Event::Scalar(text, style, anchor, _tag) => {
                let value = self.scalar(text, style, span);
                self.push_node(Node { value, span }, anchor);
            }
            Event::SequenceStart(anchor, _) => {
                self.stack.push(Frame::Seq(Vec::new(), span, anchor))
            }
            Event::MappingStart(anchor, _) => {
                self.stack.push(Frame::Map(Vec::new(), None, span, anchor))
            }
            Event::SequenceEnd | Event::MappingEnd => match self.stack.pop() {
                Some(Frame::Seq(items, span, anchor)) => {
                    self.push_node(
                        Node {
                            value: Value::Seq(items),
                            span,
                        },
                        anchor,
                    );
                }
                Some(Frame::Map(entries, _, span, anchor)) => {
                    self.push_node(
                        Node {
                            value: Value::Map(entries),
                            span,
                        },
                        anchor,
                    );
                }
                None => {}
            },
            Event::Alias(id) => {
                let node = self.anchors.get(&id).cloned().unwrap_or(Node {
                    value: Value::Null,
                    span,
                });
                self.push_node(Node { span, ..node }, 0);
            }
            Event::DocumentEnd => {
                // An empty document (`---` followed by nothing) yields no node; keep counts right.
            }
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentStart => {}
        }
    }
}

/// Converts a node into JSON, recording the span of every value under its key path
/// (`api.flow[0].return.status`) so that model errors can be mapped back to the file.
pub fn to_json(
    node: &Node,
    path: &mut String,
    spans: &mut HashMap<String, Span>,
) -> serde_json::Value {
    spans.insert(path.clone(), node.span);
    match &node.value {
        Value::Null => serde_json::Value::Null,
        Value::Bool(b) => serde_json::Value::Bool(*b),
        Value::Int(i) => serde_json::Value::from(*i),
        Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(serde_json::Value::Number)
            .unwrap_or(serde_json::Value::Null),
        Value::Str(s) => serde_json::Value::String(s.clone()),
        Value::Seq(items) => {
            let len = path.len();
            let out = items
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    path.push_str(&format!("[{i}]"));
                    let v = to_json(item, path, spans);
                    path.truncate(len);
                    v
                })
                .collect();
            serde_json::Value::Array(out)
        }
        Value::Map(entries) => {
            let len = path.len();
            let mut out = serde_json::Map::new();
            for (k, v) in entries {
                let key = scalar_key(k);
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(&key);
                // The key's own position, for "unknown field" errors.
                spans.insert(format!("{path}#key"), k.span);
                let jv = to_json(v, path, spans);
                path.truncate(len);
                out.insert(key, jv);
            }
            serde_json::Value::Object(out)
        }
    }
}

fn scalar_key(k: &Node) -> String {
    match &k.value {
        Value::Str(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => "null".into(),
        Value::Seq(_) | Value::Map(_) => "<complex key>".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn positions_are_one_based() {
        let docs = parse_documents("api:\n  port: 2000\n", &no_env).unwrap();
        let Value::Map(entries) = &docs[0].value else {
            panic!("map expected")
        };
        let Value::Map(inner) = &entries[0].1.value else {
            panic!("map expected")
        };
        assert_eq!(inner[0].1.span, Span { line: 2, column: 9 });
        assert_eq!(inner[0].1.value, Value::Int(2000));
    }

    #[test]
    fn several_documents() {
        let docs = parse_documents("a: 1\n---\nb: 2\n---\nc: 3\n", &no_env).unwrap();
        assert_eq!(docs.len(), 3);
        assert_eq!(docs[2].span.line, 5);
    }

    #[test]
    fn core_schema_scalars() {
        assert_eq!(resolve_plain("yes".into()), Value::Str("yes".into()));
        assert_eq!(resolve_plain("1.5".into()), Value::Float(1.5));
        assert_eq!(resolve_plain("0x10".into()), Value::Int(16));
        assert_eq!(resolve_plain("~".into()), Value::Null);
        assert_eq!(resolve_plain("1.2.3".into()), Value::Str("1.2.3".into()));
        let docs = parse_documents("a: \"12\"\n", &no_env).unwrap();
        let Value::Map(e) = &docs[0].value else {
            panic!()
        };
        assert_eq!(e[0].1.value, Value::Str("12".into()));
    }

    #[test]
    fn membrane_env_placeholders() {
        let env = |n: &str| (n == "PORT").then(|| "2001".to_owned());
        assert_eq!(
            substitute_env("http://h:#{env.PORT}/", &env).unwrap(),
            "http://h:2001/"
        );
        assert_eq!(substitute_env("#{ env.PORT }", &env).unwrap(), "2001");
        assert!(substitute_env("#{env.NOPE}", &env)
            .unwrap_err()
            .contains("NOPE"));
        assert_eq!(substitute_env("#{1 + 2}", &env).unwrap(), "#{1 + 2}");
        assert_eq!(substitute_env("a # {b}", &env).unwrap(), "a # {b}");
    }

    #[test]
    fn env_substitution() {
        let env = |n: &str| (n == "PORT").then(|| "2042".to_string());
        let docs = parse_documents("port: ${PORT}\nv: ${path.id}-${PORT}\n", &env).unwrap();
        let Value::Map(e) = &docs[0].value else {
            panic!()
        };
        assert_eq!(e[0].1.value, Value::Int(2042));
        assert_eq!(e[1].1.value, Value::Str("${path.id}-2042".into()));
        let err = parse_documents("x: ${MISSING_ONE}\n", &env).unwrap_err();
        assert_eq!(err[0].span.line, 1);
        assert!(err[0].message.contains("MISSING_ONE"));
    }

    #[test]
    fn duplicate_keys_are_errors() {
        let err = parse_documents("a: 1\na: 2\n", &no_env).unwrap_err();
        assert_eq!(err[0].span.line, 2);
    }

    #[test]
    fn syntax_error_has_position() {
        let err = parse_documents("a: [1, 2\nb: 3\n", &no_env).unwrap_err();
        assert!(err[0].span.line >= 1);
        assert!(err[0].message.starts_with("invalid YAML"));
    }

    #[test]
    fn aliases_resolve() {
        let docs = parse_documents("a: &x {p: 1}\nb: *x\n", &no_env).unwrap();
        let Value::Map(e) = &docs[0].value else {
            panic!()
        };
        assert!(matches!(e[1].1.value, Value::Map(_)));
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn reading_never_panics(text in "\\PC{0,200}") {
            let _ = parse_documents(&text, &|_| Some("v".into()));
        }

        #[test]
        fn yaml_like_input_never_panics(text in "([a-z]{1,5}: ?(\\[|\\{|\\]|\\}|-|'|\"|\\$\\{[A-Z]{1,3}\\}|[0-9]{1,3}|\\n {0,4})){0,30}") {
            let _ = parse_documents(&text, &|_| Some("v".into()));
        }

        #[test]
        fn text_without_placeholders_is_unchanged(text in "[^$]{0,100}") {
            prop_assert_eq!(substitute_env(&text, &|_| None).unwrap(), text);
        }

        #[test]
        fn every_env_placeholder_is_replaced(name in "[A-Z_][A-Z0-9_]{0,10}", pre in "[a-z ]{0,10}") {
            let text = format!("{pre}${{{name}}}{pre}");
            let out = substitute_env(&text, &|n| Some(format!("<{n}>"))).unwrap();
            prop_assert_eq!(out, format!("{pre}<{name}>{pre}"));
        }
    }
}
