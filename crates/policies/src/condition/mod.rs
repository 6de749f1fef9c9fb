//! Conditions: `if` (a test, a flow, an optional `else` flow) and `choose` (the first `when`
//! whose test holds, or `otherwise`). Tests are CEL expressions, parsed by the `cel` crate,
//! then type-checked and compiled at load into an evaluation tree over the exchange
//! ([`check`], [`eval`]).
//!
//! The branch is chosen in the request phase and runs its response phase in the response phase;
//! when a test reads `response`, the tests are evaluated again in the response phase (as Membrane
//! always does). An evaluation error (a missing header or claim, a value of the wrong type at
//! run time) makes the test false.

mod check;
mod eval;
pub mod spel;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use turnpike_config::{ConfigError, ConfigErrors, Located, PolicyConfig};
use turnpike_core::settings::parse_all;
use turnpike_core::{BodyNeed, Chain, CompileContext, Exchange, Outcome, Policy};

use crate::nested::{self, Needs};

/// A compiled test.
#[derive(Debug)]
pub struct Condition {
    source: Box<str>,
    node: eval::Node,
    scope: eval::Scope,
    /// Reads `response`: evaluated in the response phase.
    reads_response: bool,
    /// Reads the request head (method, path, query, headers, host, path parameters).
    reads_request: bool,
    /// Reads the current message's body (XPath and JSONPath tests).
    reads_body: bool,
}

impl Condition {
    /// Parses the JSON bodies the test reads through `json` or `jsonPath('…')` (once per
    /// message), so that objects in them are read in place.
    pub fn prepare(&self, ex: &mut Exchange) {
        if !self.reads_body {
            return;
        }
        let (request, current, response) = self.node.reads_json();
        if request || (current && ex.response.is_none()) {
            let _ = turnpike_core::json::request_json(ex);
        }
        if response || (current && ex.response.is_some()) {
            let _ = turnpike_core::json::response_json(ex);
        }
    }

    /// Compiles `source` against the path parameters of the route and the environment; the
    /// error says where in the expression (line, column) and what.
    pub fn compile(
        source: &str,
        path_params: &[String],
        env: Arc<std::collections::HashMap<String, String>>,
    ) -> Result<Self, ExprError> {
        Self::compile_in(source, path_params, env, false)
    }

    /// Compiles `source` as CEL, or, when `language` is `spel` (or not given and `source` is
    /// not CEL), as Membrane's SpEL tests translated to CEL ([`spel::translate`]).
    pub fn compile_with_language(
        source: &str,
        language: Option<&str>,
        path_params: &[String],
        env: Arc<std::collections::HashMap<String, String>>,
    ) -> Result<Self, ExprError> {
        Self::compile_test(source, language, &[], path_params, "", env)
    }

    /// As [`Condition::compile_with_language`], and also `language: xpath` (the boolean value
    /// of an XPath 1.0 expression on the current message's body, with the `namespaces`
    /// prefixes) and `language: jsonpath` (the JSONPath selects something that is not `false` or
    /// `null` on the JSON body).
    pub fn compile_test(
        source: &str,
        language: Option<&str>,
        namespaces: &[(String, String)],
        path_params: &[String],
        api_name: &str,
        env: Arc<std::collections::HashMap<String, String>>,
    ) -> Result<Self, ExprError> {
        let language = language.map(str::to_ascii_lowercase);
        let body_test = |node: eval::Node| Condition {
            source: source.into(),
            node,
            scope: eval::Scope {
                path_params: path_params.into(),
                env: env.clone(),
                spel: false,
                api_name: api_name.into(),
                message: eval::Which::Current,
            },
            reads_response: true,
            reads_request: false,
            reads_body: true,
        };
        let at_start = |message: String| ExprError {
            line: 1,
            column: 1,
            message,
        };
        match language.as_deref() {
            Some("xpath") => {
                return turnpike_soap::xpath::XPath::compile(source, namespaces)
                    .map(|x| body_test(eval::Node::XPath(Box::new(x))))
                    .map_err(at_start)
            }
            Some("jsonpath") => {
                return turnpike_core::jsonpath::JsonPathExpr::parse(source.trim())
                    .map(|p| body_test(eval::Node::JsonPath(Box::new(p))))
                    .map_err(at_start)
            }
            _ => {}
        }
        match language.as_deref() {
            Some("cel") => Self::compile_named(source, path_params, api_name, env, false),
            Some("spel") => {
                Self::compile_named(&spel::translate(source), path_params, api_name, env, true)
                    .map_err(|e| e.in_spel())
            }
            Some(other) => Err(ExprError {
                line: 1,
                column: 1,
                message: format!(
                    "conditions are CEL, Membrane's SpEL (`language: spel`), `xpath` or `jsonpath`; `{other}` is not supported"
                ),
            }),
            None => Self::compile_named(source, path_params, api_name, env.clone(), false).or_else(|cel| {
                let spel_text = spel::translate(source);
                Self::compile_named(&spel_text, path_params, api_name, env, true)
                    .map_err(|e| pick_error(source, cel, e))
            }),
        }
    }

    fn compile_in(
        source: &str,
        path_params: &[String],
        env: Arc<std::collections::HashMap<String, String>>,
        spel: bool,
    ) -> Result<Self, ExprError> {
        Self::compile_named(source, path_params, "", env, spel)
    }

    fn compile_named(
        source: &str,
        path_params: &[String],
        api_name: &str,
        env: Arc<std::collections::HashMap<String, String>>,
        spel: bool,
    ) -> Result<Self, ExprError> {
        let program = cel::Env::stdlib().compile(source).map_err(|es| {
            let e = es.errors.first();
            ExprError {
                line: e.map_or(1, |e| e.pos.0.max(1) as u32),
                column: e.map_or(1, |e| e.pos.1.max(0) as u32 + 1),
                message: e.map_or_else(|| "invalid expression".to_owned(), |e| e.msg.clone()),
            }
        })?;
        let scope = eval::Scope {
            path_params: path_params.into(),
            env,
            spel,
            api_name: api_name.into(),
            message: eval::Which::Current,
        };
        let node = check::compile(program.expression(), &scope).map_err(|e| {
            let start = program
                .source_info()
                .offset_for(e.id)
                .map_or(0, |(s, _)| s as usize);
            let (line, column) = line_column(source, start);
            ExprError {
                line,
                column,
                message: e.message,
            }
        })?;
        let (mut reads_response, mut reads_request) = (false, false);
        node.visit_vars(&mut |v| match v {
            // Properties change as the flow runs: tested again in the response phase.
            eval::Var::ResponseStatus | eval::Var::ResponseHeaders | eval::Var::Properties => {
                reads_response = true
            }
            eval::Var::Method
            | eval::Var::Path
            | eval::Var::Query
            | eval::Var::Headers
            | eval::Var::Host
            | eval::Var::PathParams => reads_request = true,
            _ => {}
        });
        // `isXML()` reads whichever message is current: evaluated again for the response.
        reads_response |= node.reads_message();
        let reads_body = node.reads_body();
        Ok(Condition {
            source: source.into(),
            node,
            scope,
            reads_response,
            reads_request,
            reads_body,
        })
    }

    /// Evaluates the test on the exchange: true only when it evaluates to `true` (an
    /// evaluation error is false, and logged at debug level).
    pub fn holds(&self, ex: &Exchange) -> bool {
        match eval::test(&self.node, ex, &self.scope) {
            Ok(b) => b,
            Err(e) => {
                tracing::debug!(test = %self.source, reason = e.0, "condition is false: evaluation failed");
                false
            }
        }
    }
}

/// The error to report for `source`, which is neither CEL nor SpEL: SpEL's when the text is
/// written in SpEL's words (`and`, `gt`, `matches '…'`, `?.`: ), else
/// CEL's.
fn pick_error(source: &str, cel: ExprError, spel: ExprError) -> ExprError {
    if spel::uses_spel_syntax(source) {
        spel.in_spel()
    } else {
        cel
    }
}

/// An expression whose value is used as text (Membrane's `additionalPatternList` of
/// `accessLog`): CEL, or SpEL (`language: spel`, also tried when the text is not CEL).
#[derive(Debug)]
pub struct ValueExpr {
    source: Box<str>,
    node: eval::Node,
    scope: eval::Scope,
    reads_body: bool,
}

impl ValueExpr {
    /// Compiles `source`; `jsonPath('…')` in it reads the request's body when `request_body`
    /// is set (Membrane evaluates these on the request), else the current message's.
    pub fn compile(
        source: &str,
        language: Option<&str>,
        ctx: &CompileContext<'_>,
        request_body: bool,
    ) -> Result<Self, ExprError> {
        let message = if request_body {
            eval::Which::Request
        } else {
            eval::Which::Current
        };
        let build = |src: &str, spel: bool| -> Result<Self, ExprError> {
            let program = cel::Env::stdlib().compile(src).map_err(|es| {
                let e = es.errors.first();
                ExprError {
                    line: e.map_or(1, |e| e.pos.0.max(1) as u32),
                    column: e.map_or(1, |e| e.pos.1.max(0) as u32 + 1),
                    message: e.map_or_else(|| "invalid expression".to_owned(), |e| e.msg.clone()),
                }
            })?;
            let scope = eval::Scope {
                path_params: ctx.scope.path_params.clone().into(),
                env: check::environment(),
                spel,
                api_name: ctx.scope.api_name.as_str().into(),
                message,
            };
            let node = check::compile_value(program.expression(), &scope).map_err(|e| {
                let start = program
                    .source_info()
                    .offset_for(e.id)
                    .map_or(0, |(s, _)| s as usize);
                let (line, column) = line_column(src, start);
                ExprError {
                    line,
                    column,
                    message: e.message,
                }
            })?;
            Ok(ValueExpr {
                source: source.into(),
                reads_body: node.reads_body(),
                node,
                scope,
            })
        };
        match language.map(str::to_ascii_lowercase).as_deref() {
            Some("cel") => build(source, false),
            Some("spel") => build(&spel::translate(source), true).map_err(|e| e.in_spel()),
            Some(other) => Err(ExprError {
                line: 1,
                column: 1,
                message: format!("expressions are CEL or Membrane's SpEL (`language: spel`); `{other}` is not supported"),
            }),
            None => build(source, false).or_else(|cel| {
                let spel_text = spel::translate(source);
                build(&spel_text, true).map_err(|e| pick_error(source, cel, e))
            }),
        }
    }

    /// The value on `ex` as text, `Some(None)` when it is `null` (a missing header in SpEL);
    /// `None` when the evaluation fails (no response yet, a type mismatch).
    pub fn text(&self, ex: &Exchange) -> Option<Option<String>> {
        match eval::text_unless_null(&self.node, ex, &self.scope) {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::debug!(expression = %self.source, reason = e.0, "expression has no value");
                None
            }
        }
    }

    /// True when the value is read from a message body (which must then be buffered).
    pub fn reads_body(&self) -> bool {
        self.reads_body
    }
}

impl turnpike_core::template::Placeholder for ValueExpr {
    fn render(&self, ex: &Exchange, _: turnpike_core::jsonpath::Message, out: &mut String) {
        if let Some(t) = self.text(ex).flatten() {
            out.push_str(&t);
        }
    }

    /// The value as JSON: a string quoted, a number or list as it is, `null` when the
    /// evaluation fails.
    fn render_json(&self, ex: &Exchange, _: turnpike_core::jsonpath::Message, out: &mut String) {
        match eval::value_json(&self.node, ex, &self.scope) {
            Ok(v) => out.push_str(&v.to_string()),
            Err(e) => {
                tracing::debug!(expression = %self.source, reason = e.0, "expression has no value");
                out.push_str("null");
            }
        }
    }

    fn needs_body(&self) -> bool {
        self.reads_body
    }

    fn reads_request(&self) -> bool {
        true
    }
}

impl turnpike_core::RouteTest for Condition {
    fn matches(&self, ex: &Exchange) -> bool {
        self.holds(ex)
    }

    fn reads_body(&self) -> bool {
        self.reads_body
    }
}

/// Compiles an API's `test` (Membrane's routing condition) in `language` (CEL, or SpEL as for
/// `if`, or XPath/JSONPath on the request's body, with `namespaces` for XPath): checked when a
/// request is routed. A test of the response is an error.
pub fn route_test(
    source: &str,
    language: Option<&str>,
    namespaces: &[(String, String)],
) -> Result<Arc<dyn turnpike_core::RouteTest>, String> {
    let c = Condition::compile_test(source, language, namespaces, &[], "", check::environment())
        .map_err(|e| format!("{} (line {}, column {})", e.message, e.line, e.column))?;
    // XPath and JSONPath tests read the current message, the request when routing.
    if c.reads_response && !c.reads_body && !c.node.reads_message() {
        return Err("a routing test reads the request only: `response` is not known yet".into());
    }
    Ok(Arc::new(c))
}

/// Where a byte offset of `source` is (1-based line and column, in characters).
fn line_column(source: &str, offset: usize) -> (u32, u32) {
    let before = source.get(..offset).unwrap_or(source);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line as u32, column as u32)
}

/// An error in an expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExprError {
    /// 1-based line in the expression.
    pub line: u32,
    /// 1-based column in the expression.
    pub column: u32,
    /// What is wrong.
    pub message: String,
}

impl ExprError {
    /// The place is in the translation, not in what was written: only the message counts.
    fn in_spel(self) -> Self {
        ExprError {
            line: 1,
            column: 1,
            message: format!("{} (in the expression translated from SpEL)", self.message),
        }
    }
}

/// `if` and `choose` compiled: the branches in order, the last one without a test when there is
/// an `else`/`otherwise`.
///
/// The branch is chosen in the request phase, and its response phase runs in the response phase;
/// when a test reads `response`, every test is evaluated again in the response phase (as in
/// Membrane) to choose the branch whose response phase runs.
#[derive(Debug)]
pub struct Choose {
    name: &'static str,
    /// Tells this step's choice apart from others' in [`Chosen`].
    id: u32,
    branches: Vec<(Option<Condition>, Arc<Chain>)>,
    needs: Needs,
    /// Some test reads `response`.
    response_tests: bool,
    /// Some test reads the request head.
    request_tests: bool,
}

/// The branches chosen in the request phase, by step id (for the response phase).
#[derive(Debug, Clone, Default)]
struct Chosen(smallvec::SmallVec<[(u32, u16); 4]>);

static NEXT_ID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

impl Choose {
    /// The phases the step takes part in (those of its branches).
    pub fn phases(&self) -> (bool, bool) {
        (self.needs.request, self.needs.response)
    }

    fn prepare(&self, ex: &mut Exchange) {
        for c in self.branches.iter().filter_map(|(c, _)| c.as_ref()) {
            c.prepare(ex);
        }
    }

    fn pick(&self, ex: &Exchange) -> Option<usize> {
        self.branches
            .iter()
            .position(|(c, _)| c.as_ref().is_none_or(|c| c.holds(ex)))
    }
}

impl Policy for Choose {
    fn name(&self) -> &'static str {
        self.name
    }

    fn body_need(&self) -> BodyNeed {
        self.needs.body
    }

    fn response_body_need(&self) -> BodyNeed {
        self.needs.response_body
    }

    fn response_needs_request(&self) -> bool {
        (self.response_tests && self.request_tests) || self.needs.response_needs_request
    }

    fn files(&self) -> Vec<std::path::PathBuf> {
        self.needs.files.clone()
    }

    fn secret_fields(&self) -> turnpike_core::policy::SecretFields {
        self.needs.secrets.clone()
    }

    /// Runs the request phase of the first branch whose test holds.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        self.prepare(ex);
        let Some(i) = self.pick(ex) else {
            return Outcome::Continue;
        };
        if self.needs.response && !self.response_tests {
            let entry = (self.id, i as u16);
            match ex.extensions.get_mut::<Chosen>() {
                Some(c) => c.0.push(entry),
                None => {
                    let mut c = Chosen::default();
                    c.0.push(entry);
                    ex.extensions.insert(c);
                }
            }
        }
        match self.branches.get(i) {
            Some((_, chain)) => nested::request_from(ex, chain.clone(), 0),
            None => Outcome::Continue,
        }
    }

    /// Runs the response phase of the branch chosen (again, when a test reads `response`).
    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        let i = if self.response_tests {
            self.prepare(ex);
            self.pick(ex)
        } else {
            ex.extensions
                .get::<Chosen>()
                .and_then(|c| c.0.iter().rev().find(|(id, _)| *id == self.id))
                .map(|(_, i)| usize::from(*i))
        };
        match i.and_then(|i| self.branches.get(i)) {
            Some((_, chain)) => nested::response_below(ex, chain.clone(), usize::MAX),
            None => Outcome::Continue,
        }
    }
}

/// Membrane's `xmlConfig: { namespaces: [ { prefix, uri } ] }`.
#[derive(serde::Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
struct XmlConfig {
    #[serde(default)]
    namespaces: Vec<Namespace>,
}

#[derive(serde::Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct Namespace {
    prefix: String,
    uri: String,
}

impl XmlConfig {
    fn pairs(c: Option<&XmlConfig>) -> Vec<(String, String)> {
        c.map(|c| {
            c.namespaces
                .iter()
                .map(|n| (n.prefix.clone(), n.uri.clone()))
                .collect()
        })
        .unwrap_or_default()
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct IfSettings {
    test: String,
    #[serde(default)]
    language: Option<String>,
    /// Namespace prefixes for an XPath test (Membrane's `xmlConfig`).
    #[serde(default)]
    xml_config: Option<XmlConfig>,
    #[serde(default)]
    flow: Vec<PolicyConfig>,
    #[serde(default, rename = "else")]
    otherwise: Option<Vec<PolicyConfig>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct WhenSettings {
    when: Option<String>,
    #[serde(default)]
    language: Option<String>,
    /// Namespace prefixes for an XPath test (Membrane's `xmlConfig`).
    #[serde(default)]
    xml_config: Option<XmlConfig>,
    #[serde(default)]
    flow: Vec<PolicyConfig>,
    otherwise: Option<Vec<PolicyConfig>>,
    /// Membrane's form of an entry: `case: { test, language, flow }`.
    case: Option<CaseSettings>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CaseSettings {
    test: String,
    #[serde(default)]
    language: Option<String>,
    /// Namespace prefixes for an XPath test (Membrane's `xmlConfig`).
    #[serde(default)]
    xml_config: Option<XmlConfig>,
    #[serde(default)]
    flow: Vec<PolicyConfig>,
}

/// Compiles the `if:` or `choose:` entry at key `at` of `owner`; `compile` compiles a nested
/// flow (at its key) into a chain.
pub(crate) fn compile<T>(
    p: &PolicyConfig,
    owner: &Located<T>,
    at: &str,
    ctx: &CompileContext<'_>,
    errors: &mut ConfigErrors,
    mut compile: impl FnMut(&[PolicyConfig], &str, &mut ConfigErrors) -> Chain,
) -> Option<Choose> {
    let before = errors.0.len();
    let env = check::environment();
    let params = &ctx.scope.path_params;
    let test = |source: &str,
                language: Option<&str>,
                xml: Option<&XmlConfig>,
                key: &str,
                errors: &mut ConfigErrors| {
        let namespaces = XmlConfig::pairs(xml);
        match Condition::compile_test(
            source,
            language,
            &namespaces,
            params,
            &ctx.scope.api_name,
            env.clone(),
        ) {
            Ok(c) => Some(c),
            Err(e) => {
                errors.push(expression_error(owner, key, source, &e));
                None
            }
        }
    };
    let mut branches = Vec::new();
    let name = match p.name.as_str() {
        "if" => {
            let s: IfSettings = match parse_all(p.settings.clone()) {
                Ok(s) => s,
                Err(es) => return settings_errors(owner, at, es, errors),
            };
            let cond = test(
                &s.test,
                s.language.as_deref(),
                s.xml_config.as_ref(),
                &format!("{at}.test"),
                errors,
            );
            let chain = compile(&s.flow, &format!("{at}.flow"), errors);
            branches.push((cond, Arc::new(chain)));
            if let Some(e) = &s.otherwise {
                branches.push((None, Arc::new(compile(e, &format!("{at}.else"), errors))));
            }
            "if"
        }
        _ => {
            let list: Vec<WhenSettings> = match parse_all(p.settings.clone()) {
                Ok(s) => s,
                Err(es) => return settings_errors(owner, at, es, errors),
            };
            let n = list.len();
            for (i, w) in list.iter().enumerate() {
                let key = format!("{at}[{i}]");
                if let Some(c) = &w.case {
                    if w.when.is_some() || w.otherwise.is_some() || !w.flow.is_empty() {
                        errors.push(owner.error(
                            &key,
                            "an entry of `choose` is `case`, `when` or `otherwise`, not several",
                        ));
                        continue;
                    }
                    let cond = test(
                        &c.test,
                        c.language.as_deref().or(w.language.as_deref()),
                        c.xml_config.as_ref().or(w.xml_config.as_ref()),
                        &format!("{key}.case.test"),
                        errors,
                    );
                    let chain = compile(&c.flow, &format!("{key}.case.flow"), errors);
                    branches.push((cond, Arc::new(chain)));
                    continue;
                }
                match (&w.when, &w.otherwise) {
                    (Some(source), None) => {
                        let cond = test(
                            source,
                            w.language.as_deref(),
                            w.xml_config.as_ref(),
                            &format!("{key}.when"),
                            errors,
                        );
                        let chain = compile(&w.flow, &format!("{key}.flow"), errors);
                        branches.push((cond, Arc::new(chain)));
                    }
                    (None, Some(flow)) if w.flow.is_empty() => {
                        if i + 1 != n {
                            errors.push(owner.error(&key, "`otherwise` must be the last entry"));
                        }
                        let chain = compile(flow, &format!("{key}.otherwise"), errors);
                        branches.push((None, Arc::new(chain)));
                    }
                    _ => errors.push(owner.error(
                        &key,
                        "each entry of `choose` is `when` with a `flow`, `case` (`test`, `flow`), or `otherwise`",
                    )),
                }
            }
            "choose"
        }
    };
    if errors.0.len() > before {
        return None;
    }
    let mut needs = Needs::of(branches.iter().map(|(_, c)| &**c));
    let tests = || branches.iter().filter_map(|(c, _)| c.as_ref());
    if tests().any(|c| c.reads_body) {
        needs.body = BodyNeed::Buffer;
        needs.response_body = BodyNeed::Buffer;
    }
    let response_tests = tests().any(|c| c.reads_response);
    let request_tests = tests().any(|c| c.reads_request);
    Some(Choose {
        name,
        id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        branches,
        needs,
        response_tests,
        request_tests,
    })
}

fn settings_errors<T, R>(
    owner: &Located<T>,
    at: &str,
    es: Vec<turnpike_core::CompileError>,
    errors: &mut ConfigErrors,
) -> Option<R> {
    crate::settings_errors::push_errors(owner, at, es, errors);
    None
}

/// An error in the expression at `key`: the location is the expression's own, moved to the
/// offending character when the expression is written on one line.
fn expression_error<T>(owner: &Located<T>, key: &str, source: &str, e: &ExprError) -> ConfigError {
    let full = owner.join(key);
    let loc = owner.origin.at(&full);
    let mut location = loc;
    if !source.contains('\n') && e.line == 1 && location.line > 0 {
        // A quoted scalar starts one column before its text.
        let quoted = std::fs::read_to_string(&location.file)
            .ok()
            .and_then(|t| {
                t.lines()
                    .nth(location.line as usize - 1)
                    .and_then(|l| l.chars().nth(location.column as usize - 1))
            })
            .is_some_and(|c| c == '"' || c == '\'');
        location.column += e.column - 1 + u32::from(quoted);
    }
    ConfigError::new(
        location,
        format!(
            "{} (line {}, column {} of the expression)",
            e.message, e.line, e.column
        ),
    )
}
