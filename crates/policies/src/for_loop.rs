//! `for`: Membrane's loop. Evaluates `in` on the request (a JSONPath on its JSON body, or in
//! SpEL a property or `jsonPath('…')`) and, when that is a list, runs the request phase of its
//! own `flow` once per item, with the item in the exchange property `it` (`${it['name']}`,
//! `${toJSON(it)}`, `${property.it.id}`). The items are taken before the first run, so a
//! `call` in the flow that replaces the body does not change them. A value that is not a list
//! runs nothing.
//!
//! As in Membrane the loop acts on requests only, and the policies of its flow run their
//! request phase only. Unlike Membrane, a policy of the flow that answers (`return`, a failed
//! `call`) ends the loop and answers the request.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use turnpike_config::{ConfigErrors, Located, PolicyConfig};
use turnpike_core::jsonpath::JsonPathExpr;
use turnpike_core::properties::{property, set_property};
use turnpike_core::settings::parse_all;
use turnpike_core::{BodyNeed, Chain, CompileError, Exchange, Outcome, Policy, Step};

use crate::err;
use crate::language::ExpressionLanguage;
use crate::loop_item::{value_path, walk};
use crate::nested::{self, Needs};

/// `for`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForSettings {
    /// What to iterate: in `language`, an expression whose value is a list.
    #[serde(rename = "in")]
    pub items: String,
    /// The language of `in`: `spel` (the default: `property.NAME`, `it.FIELD`,
    /// `jsonPath('…')`) or `jsonpath` (a JSONPath on the request's JSON body).
    #[serde(default)]
    pub language: Option<ExpressionLanguage>,
    /// The policies run for each item (their request phase).
    #[serde(default)]
    pub flow: Vec<PolicyConfig>,
}

/// Where the items come from.
#[derive(Debug)]
enum Items {
    /// A JSONPath on the request's JSON body. A definite path (names and indexes only) selects
    /// the list itself; any other path's selection is the list (as Jayway's JSONPath, which
    /// Membrane uses, returns it).
    JsonPath {
        expr: Box<JsonPathExpr>,
        definite: bool,
    },
    /// A property, or a value inside one.
    Property { name: String, path: Vec<String> },
}

impl Items {
    fn compile(src: &str, language: Option<ExpressionLanguage>) -> Result<Items, String> {
        let src = src.trim();
        match language {
            Some(ExpressionLanguage::JsonPath) => json_path(src),
            Some(ExpressionLanguage::XPath) => {
                Err("`for` iterates over JSON values: use `language: jsonpath` or `spel`".into())
            }
            None | Some(ExpressionLanguage::Spel) => {
                if let Some(inner) = src
                    .strip_prefix("jsonPath(")
                    .and_then(|r| r.strip_suffix(')'))
                    .map(str::trim)
                {
                    let quoted = inner
                        .strip_prefix('\'')
                        .and_then(|r| r.strip_suffix('\''))
                        .or_else(|| inner.strip_prefix('"').and_then(|r| r.strip_suffix('"')))
                        .ok_or("the JSONPath of `jsonPath(…)` must be a quoted string")?;
                    return json_path(quoted);
                }
                match value_path(src) {
                    Some((name, path)) => Ok(Items::Property { name, path }),
                    None => Err(format!(
                        "`{src}`: in SpEL, `for` iterates over `property.NAME` (with `.FIELD` or `['FIELD']`), `it.FIELD` or `jsonPath('…')`; use `language: jsonpath` for other JSONPaths"
                    )),
                }
            }
        }
    }

    /// The items on the exchange: empty when the value is not a list.
    fn of(&self, ex: &mut Exchange) -> Vec<Value> {
        match self {
            Items::JsonPath { expr, definite } => {
                let Ok(v) = turnpike_core::json::request_json(ex) else {
                    return Vec::new();
                };
                let nodes = expr.select(&v);
                match (definite, nodes.as_slice()) {
                    (true, [Value::Array(a)]) => a.clone(),
                    (true, _) => Vec::new(),
                    (false, many) => many.iter().map(|v| (*v).clone()).collect(),
                }
            }
            Items::Property { name, path } => match property(ex, name) {
                Some(v) => match walk(&v, path) {
                    Some(Value::Array(a)) => a.clone(),
                    _ => Vec::new(),
                },
                None => Vec::new(),
            },
        }
    }

    fn needs_body(&self) -> bool {
        matches!(self, Items::JsonPath { .. })
    }
}

fn json_path(src: &str) -> Result<Items, String> {
    // Names and indexes only: `$.a.b`, `$['a'][0]`.
    let definite = !src.contains("..")
        && !src.contains('*')
        && !src.contains('?')
        && !src.contains(':')
        && !src.contains(',');
    Ok(Items::JsonPath {
        expr: Box::new(JsonPathExpr::parse(src)?),
        definite,
    })
}

/// The compiled `for` policy.
#[derive(Debug)]
pub struct ForLoop {
    items: Items,
    chain: Arc<Chain>,
    needs: Needs,
}

impl ForLoop {
    fn new(s: &ForSettings, chain: Chain) -> Result<ForLoop, CompileError> {
        let items = Items::compile(&s.items, s.language).map_err(|m| err("in", m))?;
        let needs = Needs::of([&chain]);
        Ok(ForLoop {
            items,
            chain: Arc::new(chain),
            needs,
        })
    }
}

/// Runs at load time: compiles the `for:` entry at key `at` of `owner` into its step, its
/// `flow` with `compile` (request phases only); `None` after pushing its errors.
pub(crate) fn compile_step<T>(
    p: &PolicyConfig,
    owner: &Located<T>,
    at: &str,
    in_response_flow: bool,
    errors: &mut ConfigErrors,
    compile: impl FnOnce(&[PolicyConfig], &str, &mut ConfigErrors) -> Chain,
) -> Option<Step> {
    if in_response_flow {
        errors.push(owner.error_at_key(
            at,
            "`for` acts on requests only: it cannot stand in a `response:` flow",
        ));
        return None;
    }
    let s: ForSettings = match parse_all(p.settings.clone()) {
        Ok(s) => s,
        Err(es) => {
            crate::settings_errors::push_errors(owner, at, es, errors);
            return None;
        }
    };
    let before = errors.0.len();
    let chain = compile(&s.flow, &format!("{at}.flow"), errors);
    match ForLoop::new(&s, chain) {
        Ok(f) if errors.0.len() == before => Some(Step {
            policy: Box::new(f),
            request: true,
            response: false,
        }),
        Ok(_) => None,
        Err(e) => {
            crate::settings_errors::push_errors(owner, at, vec![e], errors);
            None
        }
    }
}

/// Runs the flow for `items[i..]`, carrying on after a step of it waited.
fn run_from(ex: &mut Exchange, chain: Arc<Chain>, items: Arc<Vec<Value>>, mut i: usize) -> Outcome {
    while let Some(item) = items.get(i) {
        set_property(ex, "it", item.clone());
        match nested::request_from(ex, Arc::clone(&chain), 0) {
            Outcome::Continue => i += 1,
            Outcome::Wait(w) => {
                return Outcome::Wait(w.then(move |ex, outcome| match outcome {
                    Outcome::Continue => run_from(ex, chain, items, i + 1),
                    other => other,
                }))
            }
            answered => return answered,
        }
    }
    Outcome::Continue
}

impl Policy for ForLoop {
    fn name(&self) -> &'static str {
        "for"
    }

    fn body_need(&self) -> BodyNeed {
        if self.items.needs_body() {
            BodyNeed::Buffer
        } else {
            self.needs.body
        }
    }

    fn response_needs_request(&self) -> bool {
        false
    }

    fn files(&self) -> Vec<std::path::PathBuf> {
        self.needs.files.clone()
    }

    fn secret_fields(&self) -> turnpike_core::policy::SecretFields {
        self.needs.secrets.clone()
    }

    /// Runs the flow once per item of `in`, with the item in the property `it`.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let items = self.items.of(ex);
        if items.is_empty() {
            return Outcome::Continue;
        }
        run_from(ex, Arc::clone(&self.chain), Arc::new(items), 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loop_item::placeholder;
    use crate::testutil::{exchange, plain};
    use turnpike_core::CompileContext;

    /// A loop outside a configured flow: its policies are plain ones, from the registry.
    fn compile_standalone(
        s: ForSettings,
        ctx: &CompileContext<'_>,
    ) -> Result<ForLoop, CompileError> {
        let mut steps = Vec::with_capacity(s.flow.len());
        for (i, p) in s.flow.iter().enumerate() {
            let at = format!("flow[{i}].{}", p.name);
            let kind = crate::registry::find(&p.name).ok_or_else(|| {
                err(
                    &at,
                    format!("`{}` can stand in a `for` of an API's flow only", p.name),
                )
            })?;
            if !kind.phases.request {
                return Err(err(
                    &at,
                    format!("`{}` acts on responses only: a `for` runs requests", p.name),
                ));
            }
            let policy = (kind.compile)(p.settings.clone(), ctx).map_err(|es| {
                let first = es.into_iter().next();
                first.map_or_else(
                    || err(&at, "invalid settings"),
                    |e| err(&crate::settings_errors::join(&at, &e.key), e.message),
                )
            })?;
            steps.push(Step {
                policy,
                request: true,
                response: false,
            });
        }
        ForLoop::new(&s, Chain::new(steps))
    }

    fn compile(v: serde_json::Value) -> Result<ForLoop, CompileError> {
        compile_standalone(serde_json::from_value(v).unwrap(), &plain())
    }

    fn prop(ex: &Exchange, name: &str) -> Option<Value> {
        property(ex, name).map(|v| v.into_owned())
    }

    #[test]
    fn runs_the_flow_per_item_with_it() {
        let f = compile(serde_json::json!({
            "in": "$.fruits",
            "language": "jsonpath",
            "flow": [
                {"setProperty": {"name": "names", "value": "${property.names}${it['name']},"}},
                {"setProperty": {"name": "json", "value": "${toJSON(it)}"}}
            ]
        }))
        .unwrap();
        assert_eq!(f.body_need(), BodyNeed::Buffer);
        let mut ex = exchange(
            "POST",
            "/",
            &[],
            r#"{"fruits":[{"name":"Apple","id":1},{"name":"Pear","id":2}]}"#,
        );
        assert!(matches!(f.on_request(&mut ex), Outcome::Continue));
        assert_eq!(prop(&ex, "names"), Some(serde_json::json!("Apple,Pear,")));
        assert_eq!(
            prop(&ex, "json"),
            // Members in name order: properties hold `serde_json` values.
            Some(serde_json::json!(r#"{"id":2,"name":"Pear"}"#))
        );
        assert_eq!(
            prop(&ex, "it"),
            Some(serde_json::json!({"name": "Pear", "id": 2}))
        );
    }

    #[test]
    fn what_is_not_a_list_runs_nothing() {
        let f = compile(serde_json::json!({
            "in": "$.a",
            "language": "jsonpath",
            "flow": [{"setProperty": {"name": "ran", "value": "yes"}}]
        }))
        .unwrap();
        for body in [r#"{"a":{"b":1}}"#, r#"{"a":[]}"#, "not json", ""] {
            let mut ex = exchange("POST", "/", &[], body);
            f.on_request(&mut ex);
            assert_eq!(prop(&ex, "ran"), None, "{body}");
        }
        // An indefinite path's selection is the list.
        let f = compile(serde_json::json!({
            "in": "$.items[*].id",
            "language": "jsonpath",
            "flow": [{"setProperty": {"name": "ids", "value": "${property.ids}${it}"}}]
        }))
        .unwrap();
        let mut ex = exchange("POST", "/", &[], r#"{"items":[{"id":1},{"id":2}]}"#);
        f.on_request(&mut ex);
        assert_eq!(prop(&ex, "ids"), Some(serde_json::json!("12")));
    }

    #[test]
    fn spel_forms() {
        let f = compile(serde_json::json!({
            "in": "property.order['lines']",
            "flow": [{"setProperty": {"name": "sum", "value": "${property.sum}${it.qty}"}}]
        }))
        .unwrap();
        assert_eq!(f.body_need(), BodyNeed::None);
        let mut ex = exchange("GET", "/", &[], "");
        set_property(
            &mut ex,
            "order",
            serde_json::json!({"lines": [{"qty": 1}, {"qty": 3}]}),
        );
        f.on_request(&mut ex);
        assert_eq!(prop(&ex, "sum"), Some(serde_json::json!("13")));
        let f = compile(serde_json::json!({"in": "jsonPath('$.xs')", "flow": []})).unwrap();
        assert_eq!(f.body_need(), BodyNeed::Buffer);
        for bad in [
            serde_json::json!({"in": "header.keySet()"}),
            serde_json::json!({"in": "$.a[", "language": "jsonpath"}),
            serde_json::json!({"in": "//a", "language": "xpath"}),
            serde_json::json!({"in": "$.a", "language": "jsonpath", "flow": [{"nope": {}}]}),
            serde_json::json!({"in": "$.a", "language": "jsonpath", "flow": [{"if": {"test": "true"}}]}),
        ] {
            assert!(compile(bad.clone()).is_err(), "{bad}");
        }
        let e: Result<ForSettings, _> =
            serde_json::from_value(serde_json::json!({"in": "$.a", "language": "groovy"}));
        assert!(e.is_err());
    }

    #[test]
    fn a_step_that_answers_ends_the_loop() {
        let f = compile(serde_json::json!({
            "in": "$",
            "language": "jsonpath",
            "flow": [
                {"setProperty": {"name": "seen", "value": "${property.seen}${it}"}},
                {"return": {"status": 418}}
            ]
        }))
        .unwrap();
        let mut ex = exchange("POST", "/", &[], "[1,2,3]");
        match f.on_request(&mut ex) {
            Outcome::Respond(r) => assert_eq!(r.status(), 418),
            o => panic!("{o:?}"),
        }
        assert_eq!(prop(&ex, "seen"), Some(serde_json::json!("1")));
    }

    #[test]
    fn placeholders_and_paths() {
        assert_eq!(
            value_path("it['a'][0].b"),
            Some(("it".to_owned(), vec!["a".into(), "0".into(), "b".into()]))
        );
        assert_eq!(
            value_path("properties[\"x\"]"),
            Some(("x".to_owned(), vec![]))
        );
        assert_eq!(value_path("item.a"), None);
        assert_eq!(value_path("it.a b"), None);
        assert!(placeholder("header.x").is_none());
        assert!(placeholder("iterations").is_none());
        assert!(placeholder("toJSON(header.x)").unwrap().is_err());
        let ctx = plain();
        let t = crate::language::compile_template(
            "${it[\"name\"]}|${it.n}|${toJSON(it.name)}|${toJSON(property.none)}|${it}",
            None,
            &ctx,
        )
        .unwrap();
        let mut ex = exchange("GET", "/", &[], "");
        set_property(&mut ex, "it", serde_json::json!({"name": "A\"b", "n": 2}));
        assert_eq!(t.render(&ex), r#"A"b|2|"A\"b"|null|{"n":2,"name":"A\"b"}"#);
    }
}
