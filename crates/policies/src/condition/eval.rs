//! Evaluation of a checked condition over an exchange. Values borrow from the exchange (header
//! values, the method, the path, JWT claims), so that comparing a header or the method with a
//! literal allocates nothing.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use turnpike_core::Exchange;

/// A literal of the expression.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Lit {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Double(f64),
    Str(Box<str>),
    /// A list of literals (`["GET", "HEAD"]`), kept whole so that `in` allocates nothing.
    List(Vec<Lit>),
}

/// A variable of the exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Var {
    Method,
    Path,
    Query,
    Headers,
    Host,
    Scheme,
    ClientIp,
    CertSubject,
    ConsumerName,
    /// Membrane's `user()`: the consumer's name, else the authenticated user name (basic
    /// authentication, a WS-Security UsernameToken) or subject.
    User,
    ConsumerGroups,
    Jwt,
    ResponseStatus,
    ResponseHeaders,
    PathParams,
    Env,
    /// Membrane's exchange properties (`property.NAME`).
    Properties,
    /// The API's name.
    ApiName,
    /// The scopes the credentials grant (Membrane's `scopes()`).
    Scopes,
    /// The current message's body as text (Membrane's `body`).
    Body,
    /// The request's cookies by name (Membrane's `cookie`).
    Cookies,
}

/// A comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CmpOp {
    Lt,
    Le,
    Gt,
    Ge,
}

/// An arithmetic operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArithOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
}

/// A function (receiver first for the member functions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Func {
    Size,
    StartsWith,
    EndsWith,
    Contains,
    LowerAscii,
    UpperAscii,
    /// A string without leading and trailing whitespace and control characters (Java's
    /// `String.trim()`: everything up to U+0020).
    Trim,
    Int,
    Uint,
    Double,
    String,
    /// The keys of a map (Membrane's `keySet()`).
    Keys,
    /// Java's `String.substring(begin[, end])`, in characters.
    Substring,
}

/// A checked expression.
#[derive(Debug)]
pub(crate) enum Node {
    Lit(Lit),
    Var(Var),
    Index(Box<Node>, Box<Node>),
    Field(Box<Node>, Box<str>),
    Has(Box<Node>, Box<str>),
    Not(Box<Node>),
    Neg(Box<Node>),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Cond(Box<Node>, Box<Node>, Box<Node>),
    Eq(Box<Node>, Box<Node>, bool),
    Cmp(CmpOp, Box<Node>, Box<Node>),
    Arith(ArithOp, Box<Node>, Box<Node>),
    In(Box<Node>, Box<Node>),
    List(Vec<Node>),
    Call(Func, Vec<Node>),
    Matches(Box<Node>, regex::Regex),
    /// `hasScope('x')`: the credentials grant scope `x`.
    HasScope(Box<str>),
    /// `isXML()` / `isJSON()`: the current message's `Content-Type` (the response's once there
    /// is one) says XML / JSON.
    IsXml(Which),
    IsJson(Which),
    /// A test written in XPath (`language: xpath`): the boolean value of the expression on
    /// the current message's body.
    XPath(Box<turnpike_soap::xpath::XPath>),
    /// A test written in JSONPath (`language: jsonpath`): true when it selects something that
    /// is not `false` or `null` on the current message's JSON body.
    JsonPath(Box<turnpike_core::jsonpath::JsonPathExpr>),
    /// `jsonPath('$.a')`: what the JSONPath selects on a message's JSON body (one node, or a
    /// list of several).
    JsonPathValue(Box<turnpike_core::jsonpath::JsonPathExpr>, Which),
}

impl Node {
    /// True when evaluating reads a message body (`jsonPath('…')`).
    pub(crate) fn reads_body(&self) -> bool {
        let mut found = false;
        self.visit(&mut |n| {
            found |= matches!(
                n,
                Node::XPath(_) | Node::JsonPath(_) | Node::JsonPathValue(..) | Node::Var(Var::Body)
            )
        });
        found
    }

    /// The messages whose JSON body `jsonPath('…')` or `json` read: (request, current,
    /// response).
    pub(crate) fn reads_json(&self) -> (bool, bool, bool) {
        let mut found = (false, false, false);
        self.visit(&mut |n| {
            if let Node::JsonPathValue(_, w) = n {
                match w {
                    Which::Request => found.0 = true,
                    Which::Current => found.1 = true,
                    Which::Response => found.2 = true,
                }
            }
        });
        found
    }

    /// True when evaluating depends on which message is current (the body or content type).
    pub(crate) fn reads_message(&self) -> bool {
        let mut found = false;
        self.visit(&mut |n| {
            found |= matches!(
                n,
                Node::IsXml(Which::Current)
                    | Node::IsJson(Which::Current)
                    | Node::XPath(_)
                    | Node::JsonPath(_)
                    | Node::JsonPathValue(_, Which::Current)
                    | Node::Var(Var::Body)
            )
        });
        found
    }

    fn visit(&self, f: &mut dyn FnMut(&Node)) {
        f(self);
        match self {
            Node::Index(a, b)
            | Node::And(a, b)
            | Node::Or(a, b)
            | Node::Eq(a, b, _)
            | Node::Cmp(_, a, b)
            | Node::Arith(_, a, b)
            | Node::In(a, b) => {
                a.visit(f);
                b.visit(f);
            }
            Node::Field(a, _)
            | Node::Has(a, _)
            | Node::Not(a)
            | Node::Neg(a)
            | Node::Matches(a, _) => a.visit(f),
            Node::Cond(a, b, c) => {
                a.visit(f);
                b.visit(f);
                c.visit(f);
            }
            Node::List(items) | Node::Call(_, items) => items.iter().for_each(|i| i.visit(f)),
            _ => {}
        }
    }
}

/// Which message a function reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Which {
    /// The response once there is one, else the request.
    Current,
    Request,
    Response,
}

/// The body of the current message: the response's once there is one.
fn current_body(ex: &Exchange) -> Option<&bytes::Bytes> {
    body_of(ex, Which::Current)
}

fn body_of(ex: &Exchange, which: Which) -> Option<&bytes::Bytes> {
    match (&ex.response, which) {
        (_, Which::Request) | (None, Which::Current) => ex.request_bytes(),
        (Some(_), _) => ex.response_bytes(),
        (None, Which::Response) => None,
    }
}

/// A JSON value taken out of a parsed body, as an evaluation value (an object as its JSON
/// text: maps of owned values do not exist here).
fn owned_json(v: serde_json::Value) -> V<'static> {
    match v {
        serde_json::Value::Null => V::Null,
        serde_json::Value::Bool(b) => V::Bool(b),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                V::Int(i)
            } else if let Some(u) = n.as_u64() {
                V::Uint(u)
            } else {
                V::Double(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        serde_json::Value::String(s) => V::Str(Cow::Owned(s)),
        serde_json::Value::Array(a) => V::List(L::Owned(a.into_iter().map(owned_json).collect())),
        o @ serde_json::Value::Object(_) => V::Str(Cow::Owned(o.to_string())),
    }
}

/// The value of `node` on `ex` as text: a string as it is, numbers and booleans as written,
/// lists and maps as JSON; `None` for `null`.
pub(crate) fn text_unless_null(node: &Node, ex: &Exchange, scope: &Scope) -> R<Option<String>> {
    Ok(match eval(node, ex, scope)? {
        V::Null => None,
        V::Str(s) => Some(s.into_owned()),
        other => Some(to_json(&other).to_string()),
    })
}

/// The value of `node` on `ex` as JSON.
pub(crate) fn value_json(node: &Node, ex: &Exchange, scope: &Scope) -> R<serde_json::Value> {
    eval(node, ex, scope).map(|v| to_json(&v))
}

fn to_json(v: &V<'_>) -> serde_json::Value {
    match v {
        V::Null => serde_json::Value::Null,
        V::Bool(b) => (*b).into(),
        V::Int(i) => (*i).into(),
        V::Uint(u) => (*u).into(),
        V::Double(d) => (*d).into(),
        V::Str(s) => s.as_ref().into(),
        V::List(l) => (0..l.len())
            .filter_map(|i| l.get(i))
            .map(|v| to_json(&v))
            .collect::<Vec<_>>()
            .into(),
        V::Map(m) => match m {
            M::Json(o) => serde_json::Value::Object((*o).clone()),
            M::Headers(h) => h
                .iter()
                .map(|(k, v)| (k.to_string(), String::from_utf8_lossy(v.as_bytes()).into()))
                .collect::<serde_json::Map<_, _>>()
                .into(),
            _ => serde_json::Value::String(format!("{m:?}")),
        },
    }
}

/// The `Content-Type` of a message, lower case, without parameters ("" when there is none).
fn content_type(ex: &Exchange, which: Which) -> String {
    let h = match (&ex.response, which) {
        (_, Which::Request) | (None, Which::Current) => &ex.request.headers,
        (Some(r), _) => r.headers(),
        (None, Which::Response) => return String::new(),
    };
    h.get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default()
}

impl Node {
    /// Calls `f` on every variable the expression reads.
    pub(crate) fn visit_vars(&self, f: &mut dyn FnMut(Var)) {
        match self {
            Node::Lit(_)
            | Node::HasScope(_)
            | Node::IsXml(_)
            | Node::IsJson(_)
            | Node::XPath(_)
            | Node::JsonPath(_)
            | Node::JsonPathValue(..) => {}
            Node::Var(v) => f(*v),
            Node::Field(a, _) | Node::Has(a, _) | Node::Not(a) | Node::Neg(a) => a.visit_vars(f),
            Node::Matches(a, _) => a.visit_vars(f),
            Node::Index(a, b)
            | Node::And(a, b)
            | Node::Or(a, b)
            | Node::Eq(a, b, _)
            | Node::Cmp(_, a, b)
            | Node::Arith(_, a, b)
            | Node::In(a, b) => {
                a.visit_vars(f);
                b.visit_vars(f);
            }
            Node::Cond(a, b, c) => {
                a.visit_vars(f);
                b.visit_vars(f);
                c.visit_vars(f);
            }
            Node::List(items) | Node::Call(_, items) => {
                for i in items {
                    i.visit_vars(f);
                }
            }
        }
    }
}

/// Why an evaluation failed (a missing key, a type that does not fit at run time, an
/// overflow): the condition then counts as false.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EvalError(pub(crate) &'static str);

type R<T> = Result<T, EvalError>;

/// What an expression reads besides the exchange: the names of the path parameters and the
/// environment captured at load.
#[derive(Debug)]
pub(crate) struct Scope {
    pub(crate) path_params: Arc<[String]>,
    pub(crate) env: Arc<HashMap<String, String>>,
    /// Membrane's SpEL names (`method`, `path`, `header`, `statusCode`, …) instead of CEL's.
    pub(crate) spel: bool,
    /// The name of the API the expression belongs to (`exchange.proxy.name` in SpEL).
    pub(crate) api_name: Arc<str>,
    /// The message whose body `jsonPath('…')` reads.
    pub(crate) message: Which,
}

/// A value during evaluation.
#[derive(Debug, Clone)]
pub(crate) enum V<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Double(f64),
    Str(Cow<'a, str>),
    List(L<'a>),
    Map(M<'a>),
}

/// A list value.
#[derive(Debug, Clone)]
pub(crate) enum L<'a> {
    Lits(&'a [Lit]),
    Groups(&'a [Arc<str>]),
    Json(&'a [serde_json::Value]),
    Owned(Vec<V<'a>>),
}

/// A map value (string keys).
#[derive(Debug, Clone, Copy)]
pub(crate) enum M<'a> {
    Headers(&'a http::HeaderMap),
    Query(&'a Exchange),
    PathParams(&'a Exchange, &'a [String]),
    Env(&'a HashMap<String, String>),
    Json(&'a serde_json::Map<String, serde_json::Value>),
    /// The exchange's properties (`jwt`: the verified claims, unless set otherwise).
    Properties(&'a Exchange),
    /// The request's cookies (`Cookie` headers).
    Cookies(&'a http::HeaderMap),
}

/// The `name=value` pairs of the `Cookie` headers in `h` (a quoted value without its quotes).
fn cookies(h: &http::HeaderMap) -> impl Iterator<Item = (&str, &str)> {
    h.get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| {
            let (name, value) = pair.split_once('=')?;
            let value = value.trim();
            let value = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(value);
            Some((name.trim(), value))
        })
}

impl<'a> L<'a> {
    fn len(&self) -> usize {
        match self {
            L::Lits(l) => l.len(),
            L::Groups(l) => l.len(),
            L::Json(l) => l.len(),
            L::Owned(l) => l.len(),
        }
    }

    fn get(&self, i: usize) -> Option<V<'a>> {
        match self {
            L::Lits(l) => l.get(i).map(lit),
            L::Groups(l) => l.get(i).map(|g| V::Str(Cow::Borrowed(&**g))),
            L::Json(l) => l.get(i).map(json),
            L::Owned(l) => l.get(i).cloned(),
        }
    }
}

impl<'a> M<'a> {
    fn get(self, key: &str) -> Option<V<'a>> {
        match self {
            M::Headers(h) => h
                .get(key)
                .and_then(|v| v.to_str().ok())
                .map(|s| V::Str(Cow::Borrowed(s))),
            M::Query(ex) => ex.query(key).map(|v| V::Str(Cow::Owned(v.into_owned()))),
            M::PathParams(ex, names) => names
                .iter()
                .position(|n| n == key)
                .map(|i| V::Str(Cow::Borrowed(ex.param(i)))),
            M::Env(e) => e.get(key).map(|v| V::Str(Cow::Borrowed(v.as_str()))),
            M::Json(o) => o.get(key).map(json),
            M::Cookies(h) => cookies(h)
                .find(|(n, _)| *n == key)
                .map(|(_, v)| V::Str(Cow::Borrowed(v))),
            M::Properties(ex) => {
                let set = ex
                    .extensions
                    .get::<turnpike_core::properties::Properties>()
                    .and_then(|p| p.get(key));
                match set {
                    Some(v) => Some(json(v)),
                    None if key == "jwt" => ex
                        .identity()
                        .and_then(|i| i.claims.as_deref())
                        .map(|c| V::Map(M::Json(c))),
                    None => None,
                }
            }
        }
    }

    /// The keys, in the map's order.
    fn keys(self) -> Vec<V<'a>> {
        let owned = |k: &str| V::Str(Cow::Owned(k.to_owned()));
        match self {
            M::Headers(h) => h
                .keys()
                .map(|k| V::Str(Cow::Borrowed(k.as_str())))
                .collect(),
            M::Query(ex) => ex
                .request
                .uri
                .query()
                .map(|q| {
                    q.split('&')
                        .filter(|p| !p.is_empty())
                        .map(|p| owned(p.split('=').next().unwrap_or("")))
                        .collect()
                })
                .unwrap_or_default(),
            M::PathParams(_, names) => names
                .iter()
                .map(|n| V::Str(Cow::Borrowed(n.as_str())))
                .collect(),
            M::Env(e) => e
                .keys()
                .map(|k| V::Str(Cow::Borrowed(k.as_str())))
                .collect(),
            M::Json(o) => o
                .keys()
                .map(|k| V::Str(Cow::Borrowed(k.as_str())))
                .collect(),
            M::Cookies(h) => cookies(h).map(|(n, _)| V::Str(Cow::Borrowed(n))).collect(),
            M::Properties(ex) => ex
                .extensions
                .get::<turnpike_core::properties::Properties>()
                .map(|p| p.names().map(|n| V::Str(Cow::Borrowed(n))).collect())
                .unwrap_or_default(),
        }
    }

    fn len(self) -> usize {
        match self {
            M::Headers(h) => h.keys_len(),
            M::Query(ex) => ex
                .request
                .uri
                .query()
                .map_or(0, |q| q.split('&').filter(|p| !p.is_empty()).count()),
            M::PathParams(_, names) => names.len(),
            M::Env(e) => e.len(),
            M::Json(o) => o.len(),
            M::Cookies(h) => cookies(h).count(),
            M::Properties(ex) => ex
                .extensions
                .get::<turnpike_core::properties::Properties>()
                .map_or(0, |p| p.names().count()),
        }
    }
}

fn lit(l: &Lit) -> V<'_> {
    match l {
        Lit::Null => V::Null,
        Lit::Bool(b) => V::Bool(*b),
        Lit::Int(i) => V::Int(*i),
        Lit::Uint(u) => V::Uint(*u),
        Lit::Double(d) => V::Double(*d),
        Lit::Str(s) => V::Str(Cow::Borrowed(s)),
        Lit::List(l) => V::List(L::Lits(l)),
    }
}

fn json(v: &serde_json::Value) -> V<'_> {
    match v {
        serde_json::Value::Null => V::Null,
        serde_json::Value::Bool(b) => V::Bool(*b),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                V::Int(i)
            } else if let Some(u) = n.as_u64() {
                V::Uint(u)
            } else {
                V::Double(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        serde_json::Value::String(s) => V::Str(Cow::Borrowed(s)),
        serde_json::Value::Array(a) => V::List(L::Json(a)),
        serde_json::Value::Object(o) => V::Map(M::Json(o)),
    }
}

/// Evaluates `node` as a condition: true only when it evaluates to `true`.
pub(crate) fn test(node: &Node, ex: &Exchange, scope: &Scope) -> R<bool> {
    match eval(node, ex, scope)? {
        V::Bool(b) => Ok(b),
        _ => Err(EvalError("the condition is not a bool")),
    }
}

fn boolean(node: &Node, ex: &Exchange, scope: &Scope) -> R<bool> {
    match eval(node, ex, scope)? {
        V::Bool(b) => Ok(b),
        _ => Err(EvalError("a bool was expected")),
    }
}

fn var<'a>(v: Var, ex: &'a Exchange, scope: &'a Scope) -> R<V<'a>> {
    let borrowed = |s: &'a str| Ok(V::Str(Cow::Borrowed(s)));
    match v {
        Var::Method => borrowed(ex.request.method.as_str()),
        Var::Path => borrowed(ex.request.uri.path()),
        Var::Query => Ok(V::Map(M::Query(ex))),
        Var::Headers => Ok(V::Map(M::Headers(&ex.request.headers))),
        Var::Host => {
            let host = ex.request.uri.host().or_else(|| {
                ex.request
                    .headers
                    .get(http::header::HOST)
                    .and_then(|h| h.to_str().ok())
                    .map(strip_port)
            });
            borrowed(host.unwrap_or(""))
        }
        Var::Scheme => borrowed(if ex.tls { "https" } else { "http" }),
        Var::ClientIp => Ok(V::Str(Cow::Owned(ex.client.ip().to_string()))),
        Var::CertSubject => borrowed(
            ex.extensions
                .get::<turnpike_core::exchange::ClientCertificate>()
                .map_or("", |c| c.subject.as_str()),
        ),
        Var::ConsumerName => borrowed(
            ex.identity()
                .and_then(|i| i.consumer.as_deref())
                .unwrap_or(""),
        ),
        Var::User => borrowed(
            ex.identity()
                .and_then(|i| i.consumer.as_deref().or(i.subject.as_deref()))
                .unwrap_or(""),
        ),
        Var::ConsumerGroups => Ok(V::List(L::Groups(
            ex.identity().map_or(&[][..], |i| i.groups.as_slice()),
        ))),
        Var::Jwt => match ex.identity().and_then(|i| i.claims.as_deref()) {
            Some(c) => Ok(V::Map(M::Json(c))),
            None => Err(EvalError("no verified JWT")),
        },
        Var::ResponseStatus => match &ex.response {
            Some(r) => Ok(V::Int(i64::from(r.status().as_u16()))),
            None => Err(EvalError("no response yet")),
        },
        Var::ResponseHeaders => match &ex.response {
            Some(r) => Ok(V::Map(M::Headers(r.headers()))),
            None => Err(EvalError("no response yet")),
        },
        Var::PathParams => Ok(V::Map(M::PathParams(ex, &scope.path_params))),
        Var::Env => Ok(V::Map(M::Env(&scope.env))),
        Var::Properties => Ok(V::Map(M::Properties(ex))),
        Var::Cookies => Ok(V::Map(M::Cookies(&ex.request.headers))),
        Var::ApiName => borrowed(&scope.api_name),
        Var::Body => Ok(V::Str(
            current_body(ex).map_or(Cow::Borrowed(""), |b| String::from_utf8_lossy(b)),
        )),
        Var::Scopes => Ok(V::List(L::Owned(
            ex.identity()
                .map(|i| {
                    i.scopes
                        .iter()
                        .map(|s| V::Str(Cow::Borrowed(s.as_str())))
                        .collect()
                })
                .unwrap_or_default(),
        ))),
    }
}

/// `host:port` → `host` (an IPv6 literal keeps its brackets).
fn strip_port(h: &str) -> &str {
    if h.starts_with('[') {
        return h.find(']').map_or(h, |i| &h[..=i]);
    }
    h.rsplit_once(':').map_or(h, |(host, _)| host)
}

fn eval<'a>(node: &'a Node, ex: &'a Exchange, scope: &'a Scope) -> R<V<'a>> {
    match node {
        Node::Lit(l) => Ok(lit(l)),
        Node::Var(v) => var(*v, ex, scope),
        Node::Index(target, key) => {
            let t = eval(target, ex, scope)?;
            let k = eval(key, ex, scope)?;
            match (t, &k) {
                // SpEL reads a missing key of a map as null (`cookie.X != 'a'` holds without
                // the cookie); CEL's missing key is an error.
                (V::Map(m), V::Str(k)) if scope.spel => Ok(m.get(k).unwrap_or(V::Null)),
                (t, k) => index(t, k),
            }
        }
        Node::Field(target, name) => match eval(target, ex, scope)? {
            V::Map(m) if scope.spel => Ok(m.get(name).unwrap_or(V::Null)),
            V::Map(m) => m.get(name).ok_or(EvalError("no such key")),
            _ => Err(EvalError("a field of a value that is not a map")),
        },
        Node::Has(target, name) => match eval(target, ex, scope)? {
            V::Map(m) => Ok(V::Bool(m.get(name).is_some())),
            _ => Err(EvalError("has() of a value that is not a map")),
        },
        Node::Not(e) => Ok(V::Bool(!boolean(e, ex, scope)?)),
        Node::Neg(e) => match eval(e, ex, scope)? {
            V::Int(i) => i.checked_neg().map(V::Int).ok_or(EvalError("overflow")),
            V::Double(d) => Ok(V::Double(-d)),
            _ => Err(EvalError("- of a value that is not a number")),
        },
        // CEL's commutative logic: `false && error` and `error && false` are both false.
        Node::And(a, b) => match boolean(a, ex, scope) {
            Ok(false) => Ok(V::Bool(false)),
            first => match boolean(b, ex, scope) {
                Ok(false) => Ok(V::Bool(false)),
                Ok(true) => first.map(V::Bool),
                Err(e) => Err(e),
            },
        },
        Node::Or(a, b) => match boolean(a, ex, scope) {
            Ok(true) => Ok(V::Bool(true)),
            first => match boolean(b, ex, scope) {
                Ok(true) => Ok(V::Bool(true)),
                Ok(false) => first.map(V::Bool),
                Err(e) => Err(e),
            },
        },
        Node::Cond(c, a, b) => {
            if boolean(c, ex, scope)? {
                eval(a, ex, scope)
            } else {
                eval(b, ex, scope)
            }
        }
        Node::Eq(a, b, negate) => {
            let (a, b) = (eval(a, ex, scope)?, eval(b, ex, scope)?);
            Ok(V::Bool(equal(&a, &b)? != *negate))
        }
        Node::Cmp(op, a, b) => {
            let o = compare(&eval(a, ex, scope)?, &eval(b, ex, scope)?)?;
            Ok(V::Bool(match op {
                CmpOp::Lt => o.is_lt(),
                CmpOp::Le => o.is_le(),
                CmpOp::Gt => o.is_gt(),
                CmpOp::Ge => o.is_ge(),
            }))
        }
        Node::Arith(op, a, b) => arith(*op, eval(a, ex, scope)?, eval(b, ex, scope)?),
        Node::In(e, container) => {
            let e = eval(e, ex, scope)?;
            match eval(container, ex, scope)? {
                V::List(l) => {
                    for i in 0..l.len() {
                        if let Some(x) = l.get(i) {
                            if equal(&e, &x)? {
                                return Ok(V::Bool(true));
                            }
                        }
                    }
                    Ok(V::Bool(false))
                }
                V::Map(m) => match e {
                    V::Str(k) => Ok(V::Bool(m.get(&k).is_some())),
                    _ => Err(EvalError("a map key must be a string")),
                },
                _ => Err(EvalError("`in` needs a list or a map")),
            }
        }
        Node::List(items) => Ok(V::List(L::Owned(
            items
                .iter()
                .map(|i| eval(i, ex, scope))
                .collect::<R<Vec<_>>>()?,
        ))),
        Node::Call(f, args) => {
            let mut vals = args.iter().map(|a| eval(a, ex, scope));
            let first = vals.next().ok_or(EvalError("missing argument"))??;
            let second = vals.next().transpose()?;
            let third = vals.next().transpose()?;
            call(*f, first, second, third)
        }
        Node::Matches(s, re) => match eval(s, ex, scope)? {
            V::Str(s) => Ok(V::Bool(re.is_match(&s))),
            _ => Err(EvalError("matches() of a value that is not a string")),
        },
        Node::HasScope(want) => Ok(V::Bool(
            ex.identity()
                .is_some_and(|i| i.scopes.iter().any(|s| **s == **want)),
        )),
        Node::IsXml(which) => {
            let t = content_type(ex, *which);
            Ok(V::Bool(t.ends_with("/xml") || t.ends_with("+xml")))
        }
        Node::IsJson(which) => {
            let t = content_type(ex, *which);
            Ok(V::Bool(t.ends_with("/json") || t.ends_with("+json")))
        }
        Node::XPath(x) => Ok(V::Bool(current_body(ex).is_some_and(|b| x.boolean(b)))),
        Node::JsonPathValue(p, which) => {
            // A body parsed earlier (see `Node::reads_json`) is read in place, objects included.
            let cached = match (which, &ex.response) {
                (Which::Request, _) | (Which::Current, None) => {
                    turnpike_core::json::cached_request_json(ex)
                }
                _ => turnpike_core::json::cached_response_json(ex),
            };
            if let Some(v) = cached {
                return Ok(match p.value(v) {
                    None => V::Null,
                    Some(Cow::Borrowed(b)) => json(b),
                    Some(Cow::Owned(o)) => owned_json(o),
                });
            }
            let Some(v) = body_of(ex, *which).and_then(|b| serde_json::from_slice(b).ok()) else {
                return Ok(V::Null);
            };
            let mut nodes = p.select(&v).into_iter().cloned().collect::<Vec<_>>();
            Ok(match nodes.len() {
                0 => V::Null,
                1 => owned_json(nodes.remove(0)),
                _ => owned_json(serde_json::Value::Array(nodes)),
            })
        }
        Node::JsonPath(p) => {
            let Some(v) = current_body(ex).and_then(|b| serde_json::from_slice(b).ok()) else {
                return Ok(V::Bool(false));
            };
            let nodes = p.select(&v);
            Ok(V::Bool(match nodes.as_slice() {
                [] => false,
                [serde_json::Value::Bool(b)] => *b,
                [serde_json::Value::Null] => false,
                _ => true,
            }))
        }
    }
}

fn index<'a>(t: V<'a>, k: &V<'_>) -> R<V<'a>> {
    match (t, k) {
        (V::Map(m), V::Str(k)) => m.get(k).ok_or(EvalError("no such key")),
        (V::List(l), V::Int(i)) => usize::try_from(*i)
            .ok()
            .and_then(|i| l.get(i))
            .ok_or(EvalError("index out of bounds")),
        (V::List(l), V::Uint(i)) => usize::try_from(*i)
            .ok()
            .and_then(|i| l.get(i))
            .ok_or(EvalError("index out of bounds")),
        _ => Err(EvalError("this value cannot be indexed so")),
    }
}

fn number(v: &V<'_>) -> Option<f64> {
    match v {
        V::Int(i) => Some(*i as f64),
        V::Uint(u) => Some(*u as f64),
        V::Double(d) => Some(*d),
        _ => None,
    }
}

fn equal(a: &V<'_>, b: &V<'_>) -> R<bool> {
    Ok(match (a, b) {
        (V::Null, V::Null) => true,
        (V::Bool(x), V::Bool(y)) => x == y,
        (V::Str(x), V::Str(y)) => x == y,
        (V::Int(x), V::Int(y)) => x == y,
        (V::Uint(x), V::Uint(y)) => x == y,
        (V::Int(x), V::Uint(y)) | (V::Uint(y), V::Int(x)) => {
            u64::try_from(*x).is_ok_and(|x| x == *y)
        }
        (V::List(x), V::List(y)) => {
            if x.len() != y.len() {
                return Ok(false);
            }
            for i in 0..x.len() {
                match (x.get(i), y.get(i)) {
                    (Some(p), Some(q)) if equal(&p, &q)? => {}
                    _ => return Ok(false),
                }
            }
            true
        }
        (V::Map(_), V::Map(_)) => return Err(EvalError("maps are not compared")),
        (x, y) => match (number(x), number(y)) {
            (Some(p), Some(q)) => p == q,
            _ => false,
        },
    })
}

fn compare(a: &V<'_>, b: &V<'_>) -> R<std::cmp::Ordering> {
    match (a, b) {
        (V::Str(x), V::Str(y)) => Ok(x.cmp(y)),
        (V::Bool(x), V::Bool(y)) => Ok(x.cmp(y)),
        (V::Int(x), V::Int(y)) => Ok(x.cmp(y)),
        (V::Uint(x), V::Uint(y)) => Ok(x.cmp(y)),
        (x, y) => match (number(x), number(y)) {
            (Some(p), Some(q)) => p.partial_cmp(&q).ok_or(EvalError("NaN is not ordered")),
            _ => Err(EvalError("these values are not ordered")),
        },
    }
}

fn arith<'a>(op: ArithOp, a: V<'a>, b: V<'a>) -> R<V<'a>> {
    const OVERFLOW: EvalError = EvalError("overflow or division by zero");
    Ok(match (op, a, b) {
        (ArithOp::Add, V::Str(x), V::Str(y)) => V::Str(Cow::Owned(format!("{x}{y}"))),
        (ArithOp::Add, V::List(x), V::List(y)) => {
            let mut all: Vec<V<'a>> = (0..x.len()).filter_map(|i| x.get(i)).collect();
            all.extend((0..y.len()).filter_map(|i| y.get(i)));
            V::List(L::Owned(all))
        }
        (op, V::Int(x), V::Int(y)) => V::Int(
            match op {
                ArithOp::Add => x.checked_add(y),
                ArithOp::Sub => x.checked_sub(y),
                ArithOp::Mul => x.checked_mul(y),
                ArithOp::Div => x.checked_div(y),
                ArithOp::Mod => x.checked_rem(y),
            }
            .ok_or(OVERFLOW)?,
        ),
        (op, V::Uint(x), V::Uint(y)) => V::Uint(
            match op {
                ArithOp::Add => x.checked_add(y),
                ArithOp::Sub => x.checked_sub(y),
                ArithOp::Mul => x.checked_mul(y),
                ArithOp::Div => x.checked_div(y),
                ArithOp::Mod => x.checked_rem(y),
            }
            .ok_or(OVERFLOW)?,
        ),
        (op, V::Double(x), V::Double(y)) => V::Double(match op {
            ArithOp::Add => x + y,
            ArithOp::Sub => x - y,
            ArithOp::Mul => x * y,
            ArithOp::Div => x / y,
            ArithOp::Mod => return Err(EvalError("% of doubles")),
        }),
        _ => return Err(EvalError("no such arithmetic on these values")),
    })
}

fn call<'a>(f: Func, a: V<'a>, b: Option<V<'a>>, c: Option<V<'a>>) -> R<V<'a>> {
    let strs = |b: Option<V<'a>>| match b {
        Some(V::Str(s)) => Ok(s),
        _ => Err(EvalError("a string argument was expected")),
    };
    Ok(match (f, a) {
        (Func::Size, V::Str(s)) => V::Int(s.chars().count() as i64),
        (Func::Size, V::List(l)) => V::Int(l.len() as i64),
        (Func::Size, V::Map(m)) => V::Int(m.len() as i64),
        (Func::StartsWith, V::Str(s)) => V::Bool(s.starts_with(&*strs(b)?)),
        (Func::EndsWith, V::Str(s)) => V::Bool(s.ends_with(&*strs(b)?)),
        (Func::Contains, V::Str(s)) => V::Bool(s.contains(&*strs(b)?)),
        (Func::LowerAscii, V::Str(s)) => V::Str(Cow::Owned(s.to_ascii_lowercase())),
        (Func::UpperAscii, V::Str(s)) => V::Str(Cow::Owned(s.to_ascii_uppercase())),
        (Func::Trim, V::Str(s)) => {
            let blank = |c: char| c <= ' ';
            V::Str(match s {
                Cow::Borrowed(b) => Cow::Borrowed(b.trim_matches(blank)),
                Cow::Owned(o) => Cow::Owned(o.trim_matches(blank).to_owned()),
            })
        }
        (Func::Int, V::Str(s)) => V::Int(s.trim().parse().map_err(|_| EvalError("not an int"))?),
        (Func::Int, V::Int(i)) => V::Int(i),
        (Func::Int, V::Uint(u)) => V::Int(i64::try_from(u).map_err(|_| EvalError("overflow"))?),
        (Func::Int, V::Double(d)) if d.is_finite() && d.abs() < 9.2e18 => V::Int(d.trunc() as i64),
        (Func::Uint, V::Str(s)) => V::Uint(s.trim().parse().map_err(|_| EvalError("not a uint"))?),
        (Func::Uint, V::Uint(u)) => V::Uint(u),
        (Func::Uint, V::Int(i)) => V::Uint(u64::try_from(i).map_err(|_| EvalError("overflow"))?),
        (Func::Double, V::Str(s)) => {
            V::Double(s.trim().parse().map_err(|_| EvalError("not a double"))?)
        }
        (Func::Double, v) => V::Double(number(&v).ok_or(EvalError("not a number"))?),
        (Func::String, V::Str(s)) => V::Str(s),
        (Func::String, V::Int(i)) => V::Str(Cow::Owned(i.to_string())),
        (Func::String, V::Uint(u)) => V::Str(Cow::Owned(u.to_string())),
        (Func::String, V::Double(d)) => V::Str(Cow::Owned(d.to_string())),
        (Func::String, V::Bool(b)) => V::Str(Cow::Borrowed(if b { "true" } else { "false" })),
        (Func::Keys, V::Map(m)) => V::List(L::Owned(m.keys())),
        (Func::Substring, V::Str(s)) => {
            let index = |v: Option<V<'a>>| match v {
                Some(V::Int(i)) => usize::try_from(i).map_err(|_| EvalError("negative index")),
                Some(V::Uint(u)) => usize::try_from(u).map_err(|_| EvalError("index too large")),
                _ => Err(EvalError("an int index was expected")),
            };
            let len = s.chars().count();
            let begin = index(b)?;
            let end = match c {
                None => len,
                c => index(c)?,
            };
            if begin > end || end > len {
                return Err(EvalError("substring index out of range"));
            }
            V::Str(Cow::Owned(
                s.chars().skip(begin).take(end - begin).collect(),
            ))
        }
        _ => return Err(EvalError("no such function for this value")),
    })
}
