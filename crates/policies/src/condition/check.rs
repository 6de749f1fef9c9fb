//! Compiles a CEL expression (parsed by the `cel` crate) into an evaluation tree, checking the
//! types of every variable, operator and function at load: `request.method == 1`,
//! `request.headers.size() && true` or an unknown variable are load errors that point into the
//! expression.

use std::collections::HashMap;
use std::sync::Arc;

use cel::common::ast::{operators as op, CallExpr, Expr, IdedExpr, LiteralValue};

use super::eval::{ArithOp, CmpOp, Func, Lit, Node, Scope, Var};

/// A static type.
#[derive(Debug, Clone, PartialEq)]
enum Ty {
    Null,
    Bool,
    Int,
    Uint,
    Double,
    Str,
    List(Box<Ty>),
    Map(Box<Ty>),
    /// Known only at run time (JWT claims).
    Dyn,
    /// A variable group such as `request`, which has fields but is not a value itself.
    Group(Group),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Group {
    Request,
    Client,
    Consumer,
    Response,
}

impl Group {
    fn name(self) -> &'static str {
        match self {
            Group::Request => "request",
            Group::Client => "client",
            Group::Consumer => "consumer",
            Group::Response => "response",
        }
    }

    fn fields(self) -> &'static [(&'static str, Var)] {
        match self {
            Group::Request => &[
                ("method", Var::Method),
                ("path", Var::Path),
                ("query", Var::Query),
                ("headers", Var::Headers),
                // Membrane's SpEL name.
                ("header", Var::Headers),
                ("host", Var::Host),
                ("scheme", Var::Scheme),
            ],
            Group::Client => &[("ip", Var::ClientIp), ("certSubject", Var::CertSubject)],
            Group::Consumer => &[("name", Var::ConsumerName), ("groups", Var::ConsumerGroups)],
            Group::Response => &[
                ("status", Var::ResponseStatus),
                ("headers", Var::ResponseHeaders),
                // Membrane's SpEL names.
                ("statusCode", Var::ResponseStatus),
                ("header", Var::ResponseHeaders),
            ],
        }
    }
}

fn var_ty(v: Var) -> Ty {
    match v {
        Var::Method
        | Var::Path
        | Var::Host
        | Var::Scheme
        | Var::ClientIp
        | Var::CertSubject
        | Var::ConsumerName
        | Var::User => Ty::Str,
        Var::Query
        | Var::Headers
        | Var::ResponseHeaders
        | Var::PathParams
        | Var::Env
        | Var::Cookies => Ty::Map(Box::new(Ty::Str)),
        Var::ConsumerGroups => Ty::List(Box::new(Ty::Str)),
        Var::Jwt | Var::Properties => Ty::Map(Box::new(Ty::Dyn)),
        Var::Scopes => Ty::List(Box::new(Ty::Str)),
        Var::ApiName | Var::Body => Ty::Str,
        Var::ResponseStatus => Ty::Int,
    }
}

impl std::fmt::Display for Ty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ty::Null => f.write_str("null"),
            Ty::Bool => f.write_str("bool"),
            Ty::Int => f.write_str("int"),
            Ty::Uint => f.write_str("uint"),
            Ty::Double => f.write_str("double"),
            Ty::Str => f.write_str("string"),
            Ty::List(t) => write!(f, "list({t})"),
            Ty::Map(t) => write!(f, "map(string, {t})"),
            Ty::Dyn => f.write_str("dyn"),
            Ty::Group(g) => write!(f, "`{}`", g.name()),
        }
    }
}

/// A checking error about the node with this id.
#[derive(Debug)]
pub(crate) struct CheckError {
    pub(crate) id: u64,
    pub(crate) message: String,
}

type R<T> = Result<T, CheckError>;

fn fail<T>(e: &IdedExpr, message: impl Into<String>) -> R<T> {
    Err(CheckError {
        id: e.id,
        message: message.into(),
    })
}

/// The variables an expression may use.
const VARIABLES: &str = "request, client, consumer, jwt, response, path, env";

/// Compiles the parsed expression `e` into a condition over `scope`.
/// Checks an expression whose value is used (any type but a group of variables).
pub(crate) fn compile_value(e: &IdedExpr, scope: &Scope) -> R<Node> {
    value(e, scope).map(|(n, _)| n)
}

pub(crate) fn compile(e: &IdedExpr, scope: &Scope) -> R<Node> {
    let (node, ty) = check(e, scope)?;
    match ty {
        Ty::Bool | Ty::Dyn => Ok(node),
        t => fail(e, format!("a condition must be a bool, this is a {t}")),
    }
}

fn numeric(t: &Ty) -> bool {
    matches!(t, Ty::Int | Ty::Uint | Ty::Double | Ty::Dyn)
}

/// True when values of these types can be compared with `==`.
fn comparable(a: &Ty, b: &Ty) -> bool {
    match (a, b) {
        (Ty::Dyn, _) | (_, Ty::Dyn) | (Ty::Null, _) | (_, Ty::Null) => true,
        (Ty::List(x), Ty::List(y)) => comparable(x, y),
        (Ty::Map(_), Ty::Map(_)) => false,
        (x, y) if numeric(x) && numeric(y) => true,
        (x, y) => x == y,
    }
}

fn value(e: &IdedExpr, scope: &Scope) -> R<(Node, Ty)> {
    let (n, t) = check(e, scope)?;
    if let Ty::Group(g) = t {
        let fields: Vec<&str> = g.fields().iter().map(|(n, _)| *n).collect();
        return fail(
            e,
            format!(
                "`{}` is not a value: use one of its fields ({})",
                g.name(),
                fields.join(", ")
            ),
        );
    }
    Ok((n, t))
}

fn of_type(e: &IdedExpr, scope: &Scope, want: &Ty, what: &str) -> R<Node> {
    let (n, t) = value(e, scope)?;
    if t == *want || t == Ty::Dyn {
        Ok(n)
    } else {
        fail(e, format!("{what} needs a {want}, this is a {t}"))
    }
}

fn check(e: &IdedExpr, scope: &Scope) -> R<(Node, Ty)> {
    match &e.expr {
        Expr::Literal(l) => literal(e, l).map(|l| {
            let t = lit_ty(&l);
            (Node::Lit(l), t)
        }),
        Expr::Ident(name) if scope.spel => spel_ident(e, name, scope.message),
        Expr::Ident(name) => ident(e, name),
        Expr::Select(s) => {
            if s.test {
                // has(x.f)
                let (target, t) = value(&s.operand, scope)?;
                return match t {
                    Ty::Map(_) | Ty::Dyn => {
                        Ok((Node::Has(Box::new(target), s.field.as_str().into()), Ty::Bool))
                    }
                    t => fail(e, format!("has() needs a field of a map, this is a {t}")),
                };
            }
            let (target, t) = check(&s.operand, scope)?;
            match t {
                Ty::Group(g) => match g.fields().iter().find(|(n, _)| *n == s.field) {
                    Some((_, v)) => Ok((Node::Var(*v), var_ty(*v))),
                    None => {
                        let fields: Vec<&str> = g.fields().iter().map(|(n, _)| *n).collect();
                        fail(
                            e,
                            format!(
                                "`{}` has no field `{}` (it has: {})",
                                g.name(),
                                s.field,
                                fields.join(", ")
                            ),
                        )
                    }
                },
                Ty::Map(v) => {
                    check_key(e, &target, &s.field, scope)?;
                    Ok((Node::Field(Box::new(target), s.field.as_str().into()), *v))
                }
                Ty::Dyn => Ok((Node::Field(Box::new(target), s.field.as_str().into()), Ty::Dyn)),
                t => fail(e, format!("a {t} has no fields")),
            }
        }
        Expr::List(l) => {
            if !l.optional_indices.is_empty() {
                return fail(e, "optional list elements are not supported");
            }
            let mut nodes = Vec::new();
            let mut elem: Option<Ty> = None;
            for item in &l.elements {
                let (n, t) = value(item, scope)?;
                elem = match elem {
                    None => Some(t),
                    Some(p) if p == t => Some(p),
                    Some(_) => Some(Ty::Dyn),
                };
                nodes.push(n);
            }
            let ty = Ty::List(Box::new(elem.unwrap_or(Ty::Dyn)));
            // A list of literals stays one literal.
            let lits: Option<Vec<Lit>> = nodes
                .iter()
                .map(|n| match n {
                    Node::Lit(l) => Some(l.clone()),
                    _ => None,
                })
                .collect();
            Ok(match lits {
                Some(l) => (Node::Lit(Lit::List(l)), ty),
                None => (Node::List(nodes), ty),
            })
        }
        Expr::Call(c) => call(e, c, scope),
        Expr::Map(_) => fail(e, "map literals are not supported in conditions"),
        Expr::Struct(_) => fail(e, "messages are not supported in conditions"),
        Expr::Comprehension(_) => fail(
            e,
            "macros over lists (all, exists, map, filter) are not supported in conditions; use `in`",
        ),
        Expr::Unspecified => fail(e, "an empty expression"),
    }
}

/// `path.x` / `path["x"]` with a name the API's path does not bind is a load error.
fn check_key(e: &IdedExpr, target: &Node, key: &str, scope: &Scope) -> R<()> {
    if matches!(target, Node::Var(Var::PathParams)) && !scope.path_params.iter().any(|n| n == key) {
        return fail(
            e,
            if scope.path_params.is_empty() {
                format!("the path has no parameter `{key}` (it has none)")
            } else {
                format!(
                    "the path has no parameter `{key}` (it has: {})",
                    scope.path_params.join(", ")
                )
            },
        );
    }
    Ok(())
}

fn literal(e: &IdedExpr, l: &LiteralValue) -> R<Lit> {
    Ok(match l {
        LiteralValue::Boolean(b) => Lit::Bool(*b.inner()),
        LiteralValue::Int(i) => Lit::Int(*i.inner()),
        LiteralValue::UInt(u) => Lit::Uint(*u.inner()),
        LiteralValue::Double(d) => Lit::Double(*d.inner()),
        LiteralValue::String(s) => Lit::Str(s.inner().into()),
        LiteralValue::Null => Lit::Null,
        LiteralValue::Bytes(_) => return fail(e, "bytes literals are not supported in conditions"),
    })
}

fn lit_ty(l: &Lit) -> Ty {
    match l {
        Lit::Null => Ty::Null,
        Lit::Bool(_) => Ty::Bool,
        Lit::Int(_) => Ty::Int,
        Lit::Uint(_) => Ty::Uint,
        Lit::Double(_) => Ty::Double,
        Lit::Str(_) => Ty::Str,
        Lit::List(items) => {
            let mut t: Option<Ty> = None;
            for i in items {
                let it = lit_ty(i);
                t = match t {
                    None => Some(it),
                    Some(p) if p == it => Some(p),
                    Some(_) => Some(Ty::Dyn),
                };
            }
            Ty::List(Box::new(t.unwrap_or(Ty::Dyn)))
        }
    }
}

fn ident(e: &IdedExpr, name: &str) -> R<(Node, Ty)> {
    Ok(match name {
        "request" => (Node::Lit(Lit::Null), Ty::Group(Group::Request)),
        "client" => (Node::Lit(Lit::Null), Ty::Group(Group::Client)),
        "consumer" => (Node::Lit(Lit::Null), Ty::Group(Group::Consumer)),
        "response" => (Node::Lit(Lit::Null), Ty::Group(Group::Response)),
        "jwt" => (Node::Var(Var::Jwt), var_ty(Var::Jwt)),
        "path" => (Node::Var(Var::PathParams), var_ty(Var::PathParams)),
        "env" => (Node::Var(Var::Env), var_ty(Var::Env)),
        "property" | "properties" => (Node::Var(Var::Properties), var_ty(Var::Properties)),
        other => {
            return fail(
                e,
                format!("unknown variable `{other}` (the variables are {VARIABLES})"),
            )
        }
    })
}

/// Membrane's SpEL variables.
fn spel_ident(e: &IdedExpr, name: &str, message: super::eval::Which) -> R<(Node, Ty)> {
    let var = match name {
        "method" => Var::Method,
        "path" => Var::Path,
        "statusCode" => Var::ResponseStatus,
        "header" | "headers" => Var::Headers,
        "params" | "param" => Var::Query,
        "pathParam" => Var::PathParams,
        "property" | "properties" => Var::Properties,
        "body" => Var::Body,
        "exchange_proxy_name" => Var::ApiName,
        "cookie" | "cookies" => Var::Cookies,
        // Membrane's `json`: the message's body parsed as JSON.
        "json" => {
            let root = turnpike_core::jsonpath::JsonPathExpr::parse("$")
                .map_err(|m| CheckError { id: e.id, message: m })?;
            return Ok((Node::JsonPathValue(Box::new(root), message), Ty::Dyn));
        }
        "response" => return Ok((Node::Lit(Lit::Null), Ty::Group(Group::Response))),
        "request" => return Ok((Node::Lit(Lit::Null), Ty::Group(Group::Request))),
        other => {
            return fail(
                e,
                format!(
                    "`{other}` is not supported in Membrane's expressions here (method, path, statusCode, header, params, pathParam, property, cookie, json, body are)"
                ),
            )
        }
    };
    Ok((Node::Var(var), var_ty(var)))
}

/// SpEL's `m[k] == null` / `m[k] != null` (and `m.k`): whether the map has the key, since a
/// missing key is null there (and an error in CEL).
fn null_test(a: &Node, b: &Node, negate: bool) -> Option<Node> {
    let (probe, Node::Lit(Lit::Null)) = (a, b) else {
        return None;
    };
    let (map, key) = match probe {
        Node::Index(m, k) => (m, clone_key(k)?),
        Node::Field(m, name) => (
            m,
            Box::new(Node::Lit(Lit::Str(name.to_ascii_lowercase().into()))),
        ),
        _ => return None,
    };
    let has = Node::In(key, Box::new(clone_map(map)?));
    Some(if negate {
        has
    } else {
        Node::Not(Box::new(has))
    })
}

fn clone_key(k: &Node) -> Option<Box<Node>> {
    match k {
        Node::Lit(l) => Some(Box::new(Node::Lit(l.clone()))),
        _ => None,
    }
}

fn clone_map(m: &Node) -> Option<Node> {
    match m {
        Node::Var(v) => Some(Node::Var(*v)),
        _ => None,
    }
}

fn binary<'a>(e: &IdedExpr, c: &'a CallExpr) -> R<(&'a IdedExpr, &'a IdedExpr)> {
    match c.args.as_slice() {
        [a, b] => Ok((a, b)),
        _ => fail(e, format!("`{}` takes two operands", c.func_name)),
    }
}

fn call(e: &IdedExpr, c: &CallExpr, scope: &Scope) -> R<(Node, Ty)> {
    let name = c.func_name.as_str();
    match name {
        op::LOGICAL_AND | op::LOGICAL_OR => {
            let (a, b) = binary(e, c)?;
            let a = of_type(a, scope, &Ty::Bool, "`&&` and `||`")?;
            let b = of_type(b, scope, &Ty::Bool, "`&&` and `||`")?;
            let n = if name == op::LOGICAL_AND {
                Node::And(Box::new(a), Box::new(b))
            } else {
                Node::Or(Box::new(a), Box::new(b))
            };
            Ok((n, Ty::Bool))
        }
        op::LOGICAL_NOT => match c.args.as_slice() {
            [a] => Ok((
                Node::Not(Box::new(of_type(a, scope, &Ty::Bool, "`!`")?)),
                Ty::Bool,
            )),
            _ => fail(e, "`!` takes one operand"),
        },
        op::NEGATE => match c.args.as_slice() {
            [a] => {
                let (n, t) = value(a, scope)?;
                if !matches!(t, Ty::Int | Ty::Double | Ty::Dyn) {
                    return fail(a, format!("`-` needs an int or a double, this is a {t}"));
                }
                Ok((Node::Neg(Box::new(n)), t))
            }
            _ => fail(e, "`-` takes one operand"),
        },
        op::CONDITIONAL => match c.args.as_slice() {
            [cond, a, b] => {
                let cond = of_type(cond, scope, &Ty::Bool, "the condition of `?:`")?;
                let (an, at) = value(a, scope)?;
                let (bn, bt) = value(b, scope)?;
                let t = if at == bt { at } else { Ty::Dyn };
                Ok((Node::Cond(Box::new(cond), Box::new(an), Box::new(bn)), t))
            }
            _ => fail(e, "`?:` takes three operands"),
        },
        op::EQUALS | op::NOT_EQUALS => {
            let (a, b) = binary(e, c)?;
            let (an, at) = value(a, scope)?;
            let (bn, bt) = value(b, scope)?;
            if !comparable(&at, &bt) {
                return fail(e, format!("a {at} is never equal to a {bt}"));
            }
            if scope.spel {
                let negate = name == op::NOT_EQUALS;
                if let Some(n) = null_test(&an, &bn, negate).or_else(|| null_test(&bn, &an, negate))
                {
                    return Ok((n, Ty::Bool));
                }
            }
            Ok((
                Node::Eq(Box::new(an), Box::new(bn), name == op::NOT_EQUALS),
                Ty::Bool,
            ))
        }
        op::LESS | op::LESS_EQUALS | op::GREATER | op::GREATER_EQUALS => {
            let (a, b) = binary(e, c)?;
            let (an, at) = value(a, scope)?;
            let (bn, bt) = value(b, scope)?;
            let ordered = match (&at, &bt) {
                (Ty::Dyn, _) | (_, Ty::Dyn) => true,
                (x, y) if numeric(x) && numeric(y) => true,
                (Ty::Str, Ty::Str) | (Ty::Bool, Ty::Bool) => true,
                _ => false,
            };
            if !ordered {
                return fail(e, format!("a {at} and a {bt} cannot be ordered"));
            }
            let o = match name {
                op::LESS => CmpOp::Lt,
                op::LESS_EQUALS => CmpOp::Le,
                op::GREATER => CmpOp::Gt,
                _ => CmpOp::Ge,
            };
            Ok((Node::Cmp(o, Box::new(an), Box::new(bn)), Ty::Bool))
        }
        op::ADD | op::SUBSTRACT | op::MULTIPLY | op::DIVIDE | op::MODULO => {
            let (a, b) = binary(e, c)?;
            let (an, at) = value(a, scope)?;
            let (bn, bt) = value(b, scope)?;
            let o = match name {
                op::ADD => ArithOp::Add,
                op::SUBSTRACT => ArithOp::Sub,
                op::MULTIPLY => ArithOp::Mul,
                op::DIVIDE => ArithOp::Div,
                _ => ArithOp::Mod,
            };
            let t = match (&at, &bt) {
                (Ty::Dyn, t) | (t, Ty::Dyn) => t.clone(),
                (x, y) if x == y && numeric(x) => x.clone(),
                (Ty::Str, Ty::Str) | (Ty::List(_), Ty::List(_)) if o == ArithOp::Add => at.clone(),
                _ => return fail(e, format!("no `{}` of a {at} and a {bt}", op_symbol(o))),
            };
            Ok((Node::Arith(o, Box::new(an), Box::new(bn)), t))
        }
        op::INDEX => {
            let (a, b) = binary(e, c)?;
            let (an, at) = value(a, scope)?;
            let (bn, bt) = value(b, scope)?;
            match at {
                Ty::Map(v) => {
                    if !matches!(bt, Ty::Str | Ty::Dyn) {
                        return fail(b, format!("a map's key is a string, this is a {bt}"));
                    }
                    let bn = match bn {
                        // Header names are lower case.
                        Node::Lit(Lit::Str(k))
                            if matches!(an, Node::Var(Var::Headers | Var::ResponseHeaders)) =>
                        {
                            Node::Lit(Lit::Str(k.to_ascii_lowercase().into()))
                        }
                        n => n,
                    };
                    if let Node::Lit(Lit::Str(k)) = &bn {
                        check_key(e, &an, k, scope)?;
                    }
                    Ok((Node::Index(Box::new(an), Box::new(bn)), *v))
                }
                Ty::List(v) => {
                    if !matches!(bt, Ty::Int | Ty::Uint | Ty::Dyn) {
                        return fail(b, format!("a list's index is an int, this is a {bt}"));
                    }
                    Ok((Node::Index(Box::new(an), Box::new(bn)), *v))
                }
                Ty::Dyn => Ok((Node::Index(Box::new(an), Box::new(bn)), Ty::Dyn)),
                t => fail(a, format!("a {t} cannot be indexed")),
            }
        }
        op::IN => {
            let (a, b) = binary(e, c)?;
            let (an, at) = value(a, scope)?;
            let (bn, bt) = value(b, scope)?;
            match &bt {
                Ty::List(el) if !comparable(&at, el) => {
                    return fail(e, format!("a {at} is never in a {bt}"))
                }
                Ty::Map(_) if !matches!(at, Ty::Str | Ty::Dyn) => {
                    return fail(e, format!("a map's keys are strings, this is a {at}"))
                }
                Ty::List(_) | Ty::Map(_) | Ty::Dyn => {}
                t => return fail(b, format!("`in` needs a list or a map, this is a {t}")),
            }
            Ok((Node::In(Box::new(an), Box::new(bn)), Ty::Bool))
        }
        _ => function(e, c, scope),
    }
}

fn op_symbol(o: ArithOp) -> &'static str {
    match o {
        ArithOp::Add => "+",
        ArithOp::Sub => "-",
        ArithOp::Mul => "*",
        ArithOp::Div => "/",
        ArithOp::Mod => "%",
    }
}

/// The functions: `size`, the string tests and conversions, `matches` with a constant pattern.
fn function(e: &IdedExpr, c: &CallExpr, scope: &Scope) -> R<(Node, Ty)> {
    let name = c.func_name.as_str();
    // Receiver first.
    let args: Vec<&IdedExpr> = c.target.as_deref().into_iter().chain(&c.args).collect();
    let member = c.target.is_some();
    let (f, arity, input, output) = match name {
        "size" => (Func::Size, 1, None, Ty::Int),
        "startsWith" if member => (Func::StartsWith, 2, Some(Ty::Str), Ty::Bool),
        "endsWith" if member => (Func::EndsWith, 2, Some(Ty::Str), Ty::Bool),
        "contains" if member => (Func::Contains, 2, Some(Ty::Str), Ty::Bool),
        "lowerAscii" if member => (Func::LowerAscii, 1, Some(Ty::Str), Ty::Str),
        "upperAscii" if member => (Func::UpperAscii, 1, Some(Ty::Str), Ty::Str),
        "trim" if member => (Func::Trim, 1, Some(Ty::Str), Ty::Str),
        // Java's `String.length()`.
        "length" if member => (Func::Size, 1, Some(Ty::Str), Ty::Int),
        "substring" if member => {
            if !(2..=3).contains(&args.len()) {
                return fail(e, "`substring` takes a begin index and an optional end index");
            }
            let mut nodes = vec![of_type(args[0], scope, &Ty::Str, "`substring`")?];
            for a in &args[1..] {
                let (n, t) = value(a, scope)?;
                if !matches!(t, Ty::Int | Ty::Uint | Ty::Dyn) {
                    return fail(a, format!("`substring` takes int indexes, this is a {t}"));
                }
                nodes.push(n);
            }
            return Ok((Node::Call(Func::Substring, nodes), Ty::Str));
        }
        // Java's `toString()`: the value as text.
        "toString" if member => (Func::String, 1, None, Ty::Str),
        "matches" => {
            let [s, pattern] = args.as_slice() else {
                return fail(e, "`matches` takes a string and a pattern");
            };
            let sn = match value(s, scope)? {
                // SpEL matches a number against the pattern as text (`statusCode matches '4\d\d'`).
                (n, Ty::Int | Ty::Uint) if scope.spel => Node::Call(Func::String, vec![n]),
                _ => of_type(s, scope, &Ty::Str, "`matches`")?,
            };
            let Expr::Literal(LiteralValue::String(p)) = &pattern.expr else {
                return fail(pattern, "the pattern of `matches` must be a string literal");
            };
            let re = regex::Regex::new(p.inner())
                .map_err(|err| CheckError {
                    id: pattern.id,
                    message: format!("invalid pattern: {err}"),
                })?;
            return Ok((Node::Matches(Box::new(sn), re), Ty::Bool));
        }
        "int" if !member => (Func::Int, 1, None, Ty::Int),
        "uint" if !member => (Func::Uint, 1, None, Ty::Uint),
        "double" if !member => (Func::Double, 1, None, Ty::Double),
        "string" if !member => (Func::String, 1, None, Ty::Str),
        "has" => return fail(e, "has() takes a field selection, as in has(jwt.email)"),
        "jsonPath" if !member => {
            let [p] = args.as_slice() else {
                return fail(e, "`jsonPath` takes one JSONPath");
            };
            let Expr::Literal(LiteralValue::String(src)) = &p.expr else {
                return fail(p, "the JSONPath of `jsonPath` must be a string literal");
            };
            let expr = turnpike_core::jsonpath::JsonPathExpr::parse(src.inner())
                .map_err(|m| CheckError { id: p.id, message: m })?;
            return Ok((Node::JsonPathValue(Box::new(expr), scope.message), Ty::Dyn));
        }
        "isXML" | "isJSON" => {
            use super::eval::Which;
            let which = match c.target.as_deref().map(|t| &t.expr) {
                None if c.args.is_empty() => Which::Current,
                Some(Expr::Ident(n)) if c.args.is_empty() && n.as_str() == "request" => {
                    Which::Request
                }
                Some(Expr::Ident(n)) if c.args.is_empty() && n.as_str() == "response" => {
                    Which::Response
                }
                _ => return fail(e, format!("`{name}()` takes no argument (or is called on `request` or `response`)")),
            };
            let node = if name == "isXML" {
                Node::IsXml(which)
            } else {
                Node::IsJson(which)
            };
            return Ok((node, Ty::Bool));
        }
        "user" if !member && args.is_empty() => {
            return Ok((Node::Var(Var::User), Ty::Str));
        }
        "scopes" if !member && args.is_empty() => {
            return Ok((Node::Var(Var::Scopes), Ty::List(Box::new(Ty::Str))));
        }
        "keySet" | "keys" if member && args.len() == 1 => {
            let (m, t) = value(args[0], scope)?;
            if !matches!(t, Ty::Map(_) | Ty::Dyn) {
                return fail(e, format!("`{name}()` takes a map, this is a {t}"));
            }
            return Ok((Node::Call(Func::Keys, vec![m]), Ty::List(Box::new(Ty::Str))));
        }
        "hasScope" if !member => {
            let [s] = args.as_slice() else {
                return fail(e, "`hasScope` takes one scope");
            };
            let Expr::Literal(LiteralValue::String(scope_name)) = &s.expr else {
                return fail(s, "the scope of `hasScope` must be a string literal");
            };
            return Ok((Node::HasScope(scope_name.inner().into()), Ty::Bool));
        }
        other => {
            return fail(
                e,
                format!(
                    "unknown function `{other}` (the functions are size, startsWith, endsWith, contains, matches, lowerAscii, upperAscii, trim, length, substring, int, uint, double, string, toString, hasScope, isXML, isJSON, jsonPath, user, scopes, keySet)"
                ),
            )
        }
    };
    if args.len() != arity {
        return fail(
            e,
            format!("`{name}` takes {} argument(s)", arity - usize::from(member)),
        );
    }
    let mut nodes = Vec::with_capacity(arity);
    for (i, a) in args.iter().enumerate() {
        let (n, t) = value(a, scope)?;
        let fits = match (f, i, &input) {
            (_, _, _) if t == Ty::Dyn => true,
            (Func::Size, _, _) => matches!(t, Ty::Str | Ty::List(_) | Ty::Map(_)),
            (Func::Int | Func::Uint | Func::Double | Func::String, _, _) => {
                matches!(t, Ty::Str | Ty::Int | Ty::Uint | Ty::Double | Ty::Bool)
                    && !(t == Ty::Bool && f != Func::String)
            }
            (_, _, Some(want)) => t == *want,
            (_, _, None) => true,
        };
        if !fits {
            return fail(a, format!("`{name}` does not take a {t}"));
        }
        nodes.push(n);
    }
    Ok((Node::Call(f, nodes), output))
}

/// The process environment, captured once per load for `env`.
pub(crate) fn environment() -> Arc<HashMap<String, String>> {
    Arc::new(std::env::vars().collect())
}
