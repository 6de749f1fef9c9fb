//! The route matcher of one listener: host, then path, then method.
//!
//! Hosts are looked up in a hash map (exact names), then in the wildcard list (`*.example.com`,
//! longest suffix first), then among the APIs without a host. Within a host group, literal and
//! template paths live in one byte trie, so matching costs the length of the path, not the number
//! of APIs. The most specific path wins: more literal bytes first, then more parameters, then a
//! full template match over a prefix; ties go to the API read first. Regular-expression paths are
//! ranked by the literal text they start with (`^/re/[0-9]+` counts as the prefix `/re/`).

use std::collections::HashMap;

use http::Method;
use regex::Regex;

use crate::exchange::PathParams;

/// How an API's path is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathSpec {
    /// A prefix: `/shop/` takes `/shop/` and everything below it (string prefix, as Membrane).
    Prefix(String),
    /// A template such as `/items/{id}/reviews`: matched in full; each `{name}` binds one
    /// non-empty path segment.
    Template(String),
    /// A regular expression searched in the path; named groups become path parameters.
    Regex(String),
}

impl PathSpec {
    /// Classifies a configured `uri`: a template when it holds `{`, else a prefix.
    pub fn from_uri(uri: &str, is_regex: bool) -> Self {
        if is_regex {
            PathSpec::Regex(uri.to_owned())
        } else if uri.contains('{') {
            PathSpec::Template(uri.to_owned())
        } else {
            PathSpec::Prefix(uri.to_owned())
        }
    }

    /// The names of the path parameters this path binds, in order; an error for a malformed
    /// template or regular expression.
    pub fn param_names(&self) -> Result<Vec<String>, String> {
        match self {
            PathSpec::Prefix(_) => Ok(Vec::new()),
            PathSpec::Template(t) => Ok(parse_template(t)?
                .into_iter()
                .filter_map(|tok| match tok {
                    Token::Param(n) => Some(n),
                    Token::Lit(_) => None,
                })
                .collect()),
            PathSpec::Regex(r) => Ok(Regex::new(r)
                .map_err(|e| format!("invalid regular expression: {e}"))?
                .capture_names()
                .flatten()
                .map(str::to_owned)
                .collect()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Lit(String),
    Param(String),
}

fn parse_template(t: &str) -> Result<Vec<Token>, String> {
    if !t.starts_with('/') {
        return Err(format!("path `{t}` must start with `/`"));
    }
    let mut out = Vec::new();
    let mut rest = t;
    let mut names: Vec<String> = Vec::new();
    while let Some(open) = rest.find('{') {
        let close = rest[open..]
            .find('}')
            .map(|c| open + c)
            .ok_or_else(|| format!("unclosed `{{` in path `{t}`"))?;
        let name = &rest[open + 1..close];
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
        {
            return Err(format!("invalid parameter name `{{{name}}}` in path `{t}`"));
        }
        if !rest[..open].ends_with('/')
            || !(rest[close + 1..].is_empty() || rest[close + 1..].starts_with('/'))
        {
            return Err(format!(
                "parameter `{{{name}}}` in path `{t}` must be a whole path segment"
            ));
        }
        if names.iter().any(|n| n == name) {
            return Err(format!(
                "parameter `{{{name}}}` appears twice in path `{t}`"
            ));
        }
        names.push(name.to_owned());
        out.push(Token::Lit(rest[..open].to_owned()));
        out.push(Token::Param(name.to_owned()));
        rest = &rest[close + 1..];
    }
    if rest.contains('}') {
        return Err(format!("unmatched `}}` in path `{t}`"));
    }
    if !rest.is_empty() {
        out.push(Token::Lit(rest.to_owned()));
    }
    Ok(out)
}

/// The number of literal characters a regular expression starts with (after `^`): its
/// specificity when ranked against literal paths.
fn literal_prefix_len(re: &str) -> u32 {
    let body = re.strip_prefix('^').unwrap_or(re);
    let mut n = 0;
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        if "\\.+*?()|[]{}^$".contains(c) {
            break;
        }
        // A literal followed by a quantifier is not fixed.
        if matches!(chars.peek(), Some('*' | '?' | '{')) {
            break;
        }
        n += 1;
    }
    n
}

/// Which hosts an API answers for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// Every host.
    Any,
    /// One host name (lower case, no port).
    Exact(String),
    /// `*.example.com`: stored as `.example.com`; matches any name ending with it.
    Suffix(String),
}

impl HostPattern {
    /// Parses the space-separated `host` setting; an empty list means any host.
    pub fn parse_list(hosts: &str) -> Result<Vec<HostPattern>, String> {
        hosts
            .split_whitespace()
            .map(|h| {
                let h = h.to_ascii_lowercase();
                if h == "*" {
                    Ok(HostPattern::Any)
                } else if let Some(rest) = h.strip_prefix('*') {
                    if !rest.starts_with('.') || rest.len() < 2 || rest[1..].contains('*') {
                        return Err(format!("invalid host pattern `{h}` (use *.example.com)"));
                    }
                    Ok(HostPattern::Suffix(rest.to_owned()))
                } else if h.contains('*') {
                    Err(format!(
                        "invalid host pattern `{h}`: `*` only as the first label"
                    ))
                } else {
                    Ok(HostPattern::Exact(h.trim_end_matches('.').to_owned()))
                }
            })
            .collect()
    }
}

/// A condition on the request head that an API's route needs besides host, method and path
/// (Membrane's `test` on an API): checked at routing, in file order among the routes that match.
pub trait RouteTest: Send + Sync + std::fmt::Debug {
    /// True when the API takes the request (`ex` holds the request head, and its body when
    /// [`RouteTest::reads_body`]).
    fn matches(&self, ex: &crate::Exchange) -> bool;

    /// True when the test reads the request's body (which is then read before routing).
    fn reads_body(&self) -> bool {
        false
    }
}

/// What one API matches.
#[derive(Debug, Clone)]
pub struct RouteSpec {
    /// Host patterns (empty: any host).
    pub hosts: Vec<HostPattern>,
    /// Method (None: any).
    pub method: Option<Method>,
    /// Path.
    pub path: PathSpec,
}

/// A successful match.
#[derive(Debug)]
pub struct Match<'r, T> {
    /// The matched route's value.
    pub value: &'r T,
    /// Index of the route in the order given to [`Router::build`].
    pub index: usize,
    /// Path parameter ranges in the path.
    pub params: PathParams,
}

#[derive(Debug, Default)]
struct Node {
    children: Vec<(u8, u32)>,
    param: Option<u32>,
    prefix: Vec<u32>,
    exact: Vec<u32>,
}

#[derive(Debug)]
struct Table {
    nodes: Vec<Node>,
    /// Regular expressions with the length of their literal prefix (their specificity).
    regexes: Vec<(Regex, u32, u32)>,
}

impl Default for Table {
    fn default() -> Self {
        Table {
            nodes: vec![Node::default()],
            regexes: Vec::new(),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Score {
    literal: u32,
    params: u32,
    exact: bool,
}

struct Best {
    route: u32,
    score: Score,
    params: PathParams,
}

impl Table {
    fn child(&mut self, node: u32, b: u8) -> u32 {
        if let Some(&(_, c)) = self.nodes[node as usize]
            .children
            .iter()
            .find(|(k, _)| *k == b)
        {
            return c;
        }
        let id = self.nodes.len() as u32;
        self.nodes.push(Node::default());
        let children = &mut self.nodes[node as usize].children;
        children.push((b, id));
        children.sort_unstable_by_key(|(k, _)| *k);
        id
    }

    fn param_child(&mut self, node: u32) -> u32 {
        if let Some(p) = self.nodes[node as usize].param {
            return p;
        }
        let id = self.nodes.len() as u32;
        self.nodes.push(Node::default());
        self.nodes[node as usize].param = Some(id);
        id
    }

    fn insert_literal(&mut self, mut node: u32, lit: &str) -> u32 {
        for &b in lit.as_bytes() {
            node = self.child(node, b);
        }
        node
    }

    fn insert(&mut self, path: &PathSpec, route: u32) -> Result<(), String> {
        match path {
            PathSpec::Prefix(p) => {
                let n = self.insert_literal(0, p);
                self.nodes[n as usize].prefix.push(route);
            }
            PathSpec::Template(t) => {
                let mut n = 0;
                for tok in parse_template(t)? {
                    n = match tok {
                        Token::Lit(l) => self.insert_literal(n, &l),
                        Token::Param(_) => self.param_child(n),
                    };
                }
                self.nodes[n as usize].exact.push(route);
            }
            PathSpec::Regex(r) => {
                let re = Regex::new(r).map_err(|e| format!("invalid regular expression: {e}"))?;
                self.regexes.push((re, literal_prefix_len(r), route));
            }
        }
        Ok(())
    }

    fn lookup<F: Fn(u32) -> bool>(&self, path: &str, method_ok: &F) -> Option<(u32, PathParams)> {
        let mut best: Option<Best> = None;
        let mut params = PathParams::new();
        self.walk(0, path.as_bytes(), 0, 0, &mut params, &mut best, method_ok);
        for (re, literal, route) in &self.regexes {
            if !method_ok(*route) {
                continue;
            }
            let score = Score {
                literal: *literal,
                params: 0,
                exact: false,
            };
            if best
                .as_ref()
                .is_some_and(|b| b.score > score || (b.score == score && b.route < *route))
            {
                continue;
            }
            let params = if re.captures_len() == 1 {
                if !re.is_match(path) {
                    continue;
                }
                PathParams::new()
            } else {
                let Some(caps) = re.captures(path) else {
                    continue;
                };
                re.capture_names()
                    .flatten()
                    .map(|name| {
                        let (s, e) = caps.name(name).map_or((0, 0), |m| (m.start(), m.end()));
                        (s as u16, e as u16)
                    })
                    .collect()
            };
            best = Some(Best {
                route: *route,
                score,
                params,
            });
        }
        best.map(|b| (b.route, b.params))
    }

    #[allow(clippy::too_many_arguments)]
    fn walk<F: Fn(u32) -> bool>(
        &self,
        node: u32,
        path: &[u8],
        pos: usize,
        literal: u32,
        params: &mut PathParams,
        best: &mut Option<Best>,
        method_ok: &F,
    ) {
        let n = &self.nodes[node as usize];
        let mut consider = |list: &[u32], exact: bool, params: &PathParams| {
            let score = Score {
                literal,
                params: params.len() as u32,
                exact,
            };
            if let Some(&route) = list.iter().find(|r| method_ok(**r)) {
                let better = match best {
                    None => true,
                    Some(b) => score > b.score || (score == b.score && route < b.route),
                };
                if better {
                    *best = Some(Best {
                        route,
                        score,
                        params: params.clone(),
                    });
                }
            }
        };
        if !n.prefix.is_empty() {
            consider(&n.prefix, false, params);
        }
        if pos == path.len() && !n.exact.is_empty() {
            consider(&n.exact, true, params);
        }
        if pos < path.len() {
            let b = path[pos];
            if let Ok(i) = n.children.binary_search_by_key(&b, |(k, _)| *k) {
                self.walk(
                    n.children[i].1,
                    path,
                    pos + 1,
                    literal + 1,
                    params,
                    best,
                    method_ok,
                );
            }
            if let Some(pc) = n.param {
                let end = path[pos..]
                    .iter()
                    .position(|&c| c == b'/')
                    .map_or(path.len(), |i| pos + i);
                if end > pos && end <= u16::MAX as usize {
                    params.push((pos as u16, end as u16));
                    self.walk(pc, path, end, literal, params, best, method_ok);
                    params.pop();
                }
            }
        }
    }
}

/// The compiled matcher of one listener.
#[derive(Debug)]
pub struct Router<T> {
    values: Vec<(Option<Method>, T)>,
    exact_hosts: HashMap<Box<str>, Table>,
    wildcard_hosts: Vec<(Box<str>, Table)>,
    any_host: Table,
}

impl<T> Router<T> {
    /// Builds the matcher. Routes are given in file order (which breaks ties); an error names
    /// the index of the offending route and what is wrong with it.
    pub fn build(routes: Vec<(RouteSpec, T)>) -> Result<Self, (usize, String)> {
        let mut r = Router {
            values: Vec::with_capacity(routes.len()),
            exact_hosts: HashMap::new(),
            wildcard_hosts: Vec::new(),
            any_host: Table::default(),
        };
        for (i, (spec, value)) in routes.into_iter().enumerate() {
            let id = i as u32;
            let hosts = if spec.hosts.is_empty() {
                vec![HostPattern::Any]
            } else {
                spec.hosts.clone()
            };
            for h in hosts {
                let table = match h {
                    HostPattern::Any => &mut r.any_host,
                    HostPattern::Exact(name) => r.exact_hosts.entry(name.into()).or_default(),
                    HostPattern::Suffix(s) => {
                        match r.wildcard_hosts.iter().position(|(k, _)| **k == *s) {
                            Some(p) => &mut r.wildcard_hosts[p].1,
                            None => {
                                r.wildcard_hosts.push((s.into(), Table::default()));
                                let last = r.wildcard_hosts.len() - 1;
                                &mut r.wildcard_hosts[last].1
                            }
                        }
                    }
                };
                table.insert(&spec.path, id).map_err(|e| (i, e))?;
            }
            r.values.push((spec.method, value));
        }
        r.wildcard_hosts
            .sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(&b.0)));
        Ok(r)
    }

    /// Every route's value, in the order given to [`Router::build`].
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.values.iter().map(|(_, v)| v)
    }

    /// Number of routes.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// True when there is no route.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Finds the route for a request. `host` is the `Host` header value (port and case are
    /// ignored), `path` the request path without query.
    pub fn lookup(&self, host: Option<&str>, method: &Method, path: &str) -> Option<Match<'_, T>> {
        self.lookup_if(host, method, path, |_| true)
    }

    /// [`Router::lookup`] among the routes whose value `accept` takes (a route that matches
    /// but is not accepted lets the next candidate, in file order, have the request).
    pub fn lookup_if(
        &self,
        host: Option<&str>,
        method: &Method,
        path: &str,
        accept: impl Fn(&T) -> bool,
    ) -> Option<Match<'_, T>> {
        let method_ok = |r: u32| {
            let (m, value) = &self.values[r as usize];
            m.as_ref().is_none_or(|m| m == method) && accept(value)
        };
        let found = host
            .map(normalize_host)
            .and_then(|h| {
                if self.exact_hosts.is_empty() && self.wildcard_hosts.is_empty() {
                    return None;
                }
                let h = h.to_ascii_lowercase();
                if let Some(t) = self.exact_hosts.get(h.as_str()) {
                    if let Some(m) = t.lookup(path, &method_ok) {
                        return Some(m);
                    }
                }
                self.wildcard_hosts
                    .iter()
                    .filter(|(suffix, _)| h.ends_with(&**suffix) && h.len() > suffix.len())
                    .find_map(|(_, t)| t.lookup(path, &method_ok))
            })
            .or_else(|| self.any_host.lookup(path, &method_ok))?;
        let (route, params) = found;
        Some(Match {
            value: &self.values[route as usize].1,
            index: route as usize,
            params,
        })
    }
}

fn normalize_host(h: &str) -> &str {
    let h = if h.starts_with('[') {
        h.split_once(']').map_or(h, |(a, _)| &h[..a.len() + 1])
    } else {
        h.rsplit_once(':').map_or(h, |(a, _)| a)
    };
    h.trim_end_matches('.')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(hosts: &str, method: Option<&str>, path: PathSpec) -> RouteSpec {
        RouteSpec {
            hosts: HostPattern::parse_list(hosts).unwrap(),
            method: method.map(|m| m.parse().unwrap()),
            path,
        }
    }

    fn p(s: &str) -> PathSpec {
        PathSpec::from_uri(s, false)
    }

    fn find(r: &Router<&'static str>, host: &str, m: &str, path: &str) -> Option<&'static str> {
        r.lookup(Some(host), &m.parse().unwrap(), path)
            .map(|m| *m.value)
    }

    #[test]
    fn most_specific_path_wins() {
        let r = Router::build(vec![
            (spec("", None, p("/")), "root"),
            (spec("", None, p("/items/")), "items"),
            (spec("", None, p("/items/{id}")), "item"),
            (spec("", None, p("/items/special")), "special"),
            (spec("", None, p("/items/{id}/reviews")), "reviews"),
        ])
        .unwrap();
        assert_eq!(find(&r, "x", "GET", "/other"), Some("root"));
        assert_eq!(find(&r, "x", "GET", "/items/"), Some("items"));
        assert_eq!(find(&r, "x", "GET", "/items/5"), Some("item"));
        assert_eq!(find(&r, "x", "GET", "/items/5/x"), Some("items"));
        assert_eq!(find(&r, "x", "GET", "/items/special"), Some("special"));
        assert_eq!(find(&r, "x", "GET", "/items/specialx"), Some("special"));
        assert_eq!(find(&r, "x", "GET", "/items/5/reviews"), Some("reviews"));
        let m = r.lookup(None, &Method::GET, "/items/77/reviews").unwrap();
        assert_eq!(m.params.as_slice(), &[(7, 9)]);
    }

    #[test]
    fn file_order_breaks_ties_and_method_filters() {
        let r = Router::build(vec![
            (spec("", Some("POST"), p("/a")), "post"),
            (spec("", None, p("/a")), "any1"),
            (spec("", None, p("/a")), "any2"),
        ])
        .unwrap();
        assert_eq!(find(&r, "x", "POST", "/a"), Some("post"));
        assert_eq!(find(&r, "x", "GET", "/a"), Some("any1"));
        let r = Router::build(vec![(spec("", Some("GET"), p("/a/b")), "get")]).unwrap();
        assert_eq!(find(&r, "x", "POST", "/a/b"), None);
    }

    #[test]
    fn hosts_exact_wildcard_any() {
        let r = Router::build(vec![
            (spec("", None, p("/")), "any"),
            (spec("*.example.com", None, p("/")), "wild"),
            (spec("api.example.com other.org", None, p("/")), "exact"),
            (spec("*.eu.example.com", None, p("/x")), "deeper"),
        ])
        .unwrap();
        assert_eq!(find(&r, "api.example.com:8080", "GET", "/"), Some("exact"));
        assert_eq!(find(&r, "OTHER.org", "GET", "/"), Some("exact"));
        assert_eq!(find(&r, "www.example.com", "GET", "/"), Some("wild"));
        assert_eq!(find(&r, "a.eu.example.com", "GET", "/x"), Some("deeper"));
        assert_eq!(find(&r, "a.eu.example.com", "GET", "/y"), Some("wild"));
        assert_eq!(find(&r, "example.com", "GET", "/"), Some("any"));
        assert_eq!(find(&r, "[::1]:80", "GET", "/"), Some("any"));
    }

    #[test]
    fn regex_paths_with_named_groups() {
        let r = Router::build(vec![
            (
                spec("", None, PathSpec::Regex("^/r/(?P<n>[0-9]+)$".into())),
                "re",
            ),
            (spec("", None, p("/lit")), "lit"),
        ])
        .unwrap();
        let m = r.lookup(None, &Method::GET, "/r/123").unwrap();
        assert_eq!(*m.value, "re");
        assert_eq!(m.params.as_slice(), &[(3, 6)]);
        assert!(r.lookup(None, &Method::GET, "/r/x").is_none());
        assert_eq!(literal_prefix_len("^/r/(?P<n>[0-9]+)$"), 3);
        assert_eq!(literal_prefix_len("/ab?"), 2);
        assert_eq!(literal_prefix_len(".*"), 0);
    }

    #[test]
    fn bad_templates_are_rejected() {
        for bad in [
            "/a/{",
            "/a/{}/b",
            "/a/x{id}",
            "/a/{id}x",
            "/a/{id}/{id}",
            "a/{x}",
        ] {
            assert!(
                PathSpec::from_uri(bad, false).param_names().is_err(),
                "{bad}"
            );
        }
        assert!(PathSpec::Regex("(".into()).param_names().is_err());
        assert!(HostPattern::parse_list("a.*.com").is_err());
    }

    #[test]
    fn ten_thousand_routes() {
        let routes: Vec<_> = (0..10_000)
            .map(|i| (spec("", None, p(&format!("/svc{i:05}/"))), i))
            .collect();
        let r = Router::build(routes).unwrap();
        let m = r.lookup(None, &Method::GET, "/svc04242/x").unwrap();
        assert_eq!(*m.value, 4242);
        assert!(r.lookup(None, &Method::GET, "/svc1/").is_none());
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn lookup_never_panics(path in "\\PC{0,60}", host in "\\PC{0,20}") {
            let r = Router::build(vec![
                (RouteSpec { hosts: vec![], method: None, path: PathSpec::Template("/a/{x}/b".into()) }, 0),
                (RouteSpec { hosts: vec![], method: None, path: PathSpec::Prefix("/a".into()) }, 1),
                (RouteSpec { hosts: vec![], method: None, path: PathSpec::Regex("^/r/(?P<n>.*)".into()) }, 2),
            ]).unwrap();
            let _ = r.lookup(Some(&host), &Method::GET, &path);
        }

        /// Among prefix routes, the longest prefix of the path wins, whatever the order.
        #[test]
        fn longest_prefix_wins(prefixes in proptest::collection::vec("/[a-c]{0,4}", 1..8), path in "/[a-c]{0,8}") {
            let routes: Vec<_> = prefixes
                .iter()
                .map(|p| (RouteSpec { hosts: vec![], method: None, path: PathSpec::Prefix(p.clone()) }, p.clone()))
                .collect();
            let r = Router::build(routes).unwrap();
            let expected = prefixes.iter().filter(|p| path.starts_with(p.as_str())).map(|p| p.len()).max();
            let got = r.lookup(None, &Method::GET, &path).map(|m| m.value.len());
            prop_assert_eq!(got, expected);
        }

        #[test]
        fn template_parameters_are_bound(seg in "[a-z0-9]{1,10}", tail in "[a-z]{1,5}") {
            let r = Router::build(vec![(RouteSpec { hosts: vec![], method: None, path: PathSpec::Template("/items/{id}/x".into()) }, ())]).unwrap();
            let path = format!("/items/{seg}/x");
            let m = r.lookup(None, &Method::GET, &path).unwrap();
            let (s, e) = m.params[0];
            prop_assert_eq!(&path[s as usize..e as usize], seg.as_str());
            let other = format!("/items/{seg}/{tail}y");
            prop_assert!(r.lookup(None, &Method::GET, &other).is_none());
        }
    }
}
