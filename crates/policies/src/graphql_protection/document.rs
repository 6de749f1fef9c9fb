//! The GraphQL document of a request, parsed with `apollo-parser` and reduced to what the checks
//! look at: the operations (type, name, selections) and the fragments (name, selections). The
//! checks are Membrane's; every walk over selections uses an explicit stack, so neither a deep
//! document nor a long chain of fragments can exhaust the thread's stack.

use std::collections::{HashMap, HashSet};

use apollo_parser::cst::{self, CstNode};
use apollo_parser::SyntaxKind;

/// Deepest nesting of selection sets and values the parser accepts (its recursion limit): a
/// document nested deeper is refused before any check runs.
pub const MAX_NESTING: usize = 256;

/// Most selections the depth and recursion walk visits (fragment spreads are expanded at each
/// place they are used, so a small document can stand for a huge tree): a document that needs
/// more is refused as too complex.
pub const MAX_VISITS: usize = 100_000;

/// The type of an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperationType {
    /// `query`, or the shorthand `{ ... }`.
    Query,
    /// `mutation`.
    Mutation,
    /// `subscription`.
    Subscription,
}

/// One selection of a selection set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// A field (its name, not its alias) and its own selections.
    Field(String, Vec<Selection>),
    /// `...Name`.
    Spread(String),
    /// `... on Type { ... }` or `... { ... }`.
    Inline(Vec<Selection>),
}

/// An operation definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    /// Its type; `explicit` is false for the shorthand `{ ... }`.
    pub kind: OperationType,
    /// True when the document names the type (`query`, `mutation`, `subscription`).
    pub explicit: bool,
    /// Its name, if it has one.
    pub name: Option<String>,
    /// Its top-level selections.
    pub selections: Vec<Selection>,
}

/// A fragment definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fragment {
    /// Its name.
    pub name: String,
    /// Its selections.
    pub selections: Vec<Selection>,
}

/// An executable document: operations and fragments, in document order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Document {
    /// The operation definitions.
    pub operations: Vec<Operation>,
    /// The fragment definitions.
    pub fragments: Vec<Fragment>,
}

/// Why a query could not be parsed as an executable document (a sentence for the client).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// Not GraphQL, or not complete.
    Syntax,
    /// Nested deeper than [`MAX_NESTING`].
    TooDeep,
    /// A type system definition (schema, type, directive), which a request may not hold.
    NotExecutable,
}

/// Parses `query` as an executable GraphQL document. Returns the reduced document, or why it
/// is not one.
pub fn parse(query: &str) -> Result<Document, ParseError> {
    let tree = apollo_parser::Parser::new(query)
        .recursion_limit(MAX_NESTING)
        .parse();
    let mut errors = tree.errors().peekable();
    if errors.peek().is_some() {
        return Err(if errors.any(|e| e.is_limit()) {
            ParseError::TooDeep
        } else {
            ParseError::Syntax
        });
    }
    let mut doc = Document::default();
    for def in tree.document().definitions() {
        match def {
            cst::Definition::OperationDefinition(op) => {
                let (kind, explicit) = match op.operation_type() {
                    None => (OperationType::Query, false),
                    Some(t) if t.mutation_token().is_some() => (OperationType::Mutation, true),
                    Some(t) if t.subscription_token().is_some() => {
                        (OperationType::Subscription, true)
                    }
                    Some(_) => (OperationType::Query, true),
                };
                let name = match op.name() {
                    Some(n) => Some(name_text(&n).ok_or(ParseError::Syntax)?),
                    None => None,
                };
                doc.operations.push(Operation {
                    kind,
                    explicit,
                    name,
                    selections: selections(op.selection_set())?,
                });
            }
            cst::Definition::FragmentDefinition(f) => {
                let name = f
                    .fragment_name()
                    .and_then(|n| n.name())
                    .and_then(|n| name_text(&n))
                    .ok_or(ParseError::Syntax)?;
                doc.fragments.push(Fragment {
                    name,
                    selections: selections(f.selection_set())?,
                });
            }
            _ => return Err(ParseError::NotExecutable),
        }
    }
    if doc.operations.is_empty() && doc.fragments.is_empty() {
        return Err(ParseError::Syntax);
    }
    Ok(doc)
}

/// The text of a name token.
fn name_text(n: &cst::Name) -> Option<String> {
    n.syntax()
        .children_with_tokens()
        .filter_map(|e| e.into_token())
        .find(|t| t.kind() == SyntaxKind::IDENT)
        .map(|t| t.text().to_owned())
}

/// The selections of a selection set (recursing at most [`MAX_NESTING`] levels, which the
/// parser enforced).
fn selections(set: Option<cst::SelectionSet>) -> Result<Vec<Selection>, ParseError> {
    let Some(set) = set else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for s in set.selections() {
        out.push(match s {
            cst::Selection::Field(f) => {
                let name = f
                    .name()
                    .and_then(|n| name_text(&n))
                    .ok_or(ParseError::Syntax)?;
                Selection::Field(name, selections(f.selection_set())?)
            }
            cst::Selection::FragmentSpread(s) => Selection::Spread(
                s.fragment_name()
                    .and_then(|n| n.name())
                    .and_then(|n| name_text(&n))
                    .ok_or(ParseError::Syntax)?,
            ),
            cst::Selection::InlineFragment(i) => Selection::Inline(selections(i.selection_set())?),
        });
    }
    Ok(out)
}

impl Document {
    /// The mutation operations.
    pub fn mutations(&self) -> impl Iterator<Item = &Operation> {
        self.operations
            .iter()
            .filter(|o| o.kind == OperationType::Mutation)
    }

    /// Membrane's count of mutations: the top-level selections of all mutation operations.
    pub fn mutation_count(&self) -> usize {
        self.mutations().map(|o| o.selections.len()).sum()
    }

    /// Membrane's validation of global names: the first error, if any.
    pub fn names_error(&self) -> Option<&'static str> {
        let mut seen = HashSet::new();
        if !self
            .operations
            .iter()
            .filter_map(|o| o.name.as_deref())
            .all(|n| seen.insert(n))
        {
            return Some("Names of operationDefinitions must be unique.");
        }
        if self.operations.len() > 1 && self.operations.iter().any(|o| o.name.is_none()) {
            return Some(
                "If there is an anonymous operationDefinition, there may not be other operationDefinitions.",
            );
        }
        let mut seen = HashSet::new();
        if !self.fragments.iter().all(|f| seen.insert(f.name.as_str())) {
            return Some("Names of fragmentDefinitions must be unique.");
        }
        None
    }

    /// True when some mutation operation has a top-level field named `name`.
    pub fn has_mutation_field(&self, name: &str) -> bool {
        self.mutations().any(|o| {
            o.selections
                .iter()
                .any(|s| matches!(s, Selection::Field(n, _) if n == name))
        })
    }

    /// True when some operation selects a field whose name starts with `__` (through fields
    /// and inline fragments; fragment spreads are not followed, as in Membrane).
    pub fn has_introspection(&self) -> bool {
        let mut todo: Vec<&Selection> = self
            .operations
            .iter()
            .flat_map(|o| o.selections.iter())
            .collect();
        while let Some(s) = todo.pop() {
            match s {
                Selection::Field(name, sub) => {
                    if name.starts_with("__") {
                        return true;
                    }
                    todo.extend(sub);
                }
                Selection::Inline(sub) => todo.extend(sub),
                Selection::Spread(_) => {}
            }
        }
        false
    }

    /// True when the document has a `subscription` operation.
    pub fn has_subscription(&self) -> bool {
        self.operations
            .iter()
            .any(|o| o.kind == OperationType::Subscription)
    }

    /// The operation a request runs: the one `operation_name` names (when not empty), else the
    /// first. Returns Membrane's message when there is none or the name is not unique.
    pub fn operation(&self, operation_name: Option<&str>) -> Result<&Operation, &'static str> {
        match operation_name.filter(|n| !n.is_empty()) {
            Some(name) => {
                let mut found = self
                    .operations
                    .iter()
                    .filter(|o| o.name.as_deref() == Some(name));
                let first = found
                    .next()
                    .ok_or("The operation named by 'operationName' could not be found.")?;
                if found.next().is_some() {
                    return Err(
                        "Multiple OperationDefinitions with the same name in the GraphQL document.",
                    );
                }
                Ok(first)
            }
            None => self
                .operations
                .first()
                .ok_or("Could not find an OperationDefinition in the GraphQL document."),
        }
    }

    /// Walks the selections of `op`, fragment spreads expanded: every field pushes its name on
    /// a stack, which may hold at most `max_depth` names, and at most `max_recursion` times the
    /// same name. Returns the setting or rule broken (`maxDepth`, `maxRecursion`, `fragments`,
    /// `complexity`) and Membrane's message, for the first violation.
    pub fn depth_error(
        &self,
        op: &Operation,
        max_depth: usize,
        max_recursion: usize,
    ) -> Option<(&'static str, String)> {
        enum Step<'a> {
            Visit(&'a Selection),
            LeaveField,
            LeaveFragment(&'a str),
        }
        let fragments: HashMap<&str, &Fragment> = self
            .fragments
            .iter()
            .map(|f| (f.name.as_str(), f))
            .collect();
        let mut todo: Vec<Step<'_>> = op.selections.iter().rev().map(Step::Visit).collect();
        let mut fields: Vec<&str> = Vec::new();
        let mut expanding: HashSet<&str> = HashSet::new();
        let mut visits = 0usize;
        while let Some(step) = todo.pop() {
            let s = match step {
                Step::LeaveField => {
                    fields.pop();
                    continue;
                }
                Step::LeaveFragment(name) => {
                    expanding.remove(name);
                    continue;
                }
                Step::Visit(s) => s,
            };
            visits += 1;
            if visits > MAX_VISITS {
                return Some(("complexity", "The query is too complex to check.".into()));
            }
            match s {
                Selection::Field(name, sub) => {
                    fields.push(name);
                    if fields.len() > max_depth {
                        return Some(("maxDepth", "Max depth exceeded.".into()));
                    }
                    if fields.iter().filter(|n| **n == name).count() > max_recursion {
                        return Some(("maxRecursion", "Max recursion exceeded.".into()));
                    }
                    todo.push(Step::LeaveField);
                    todo.extend(sub.iter().rev().map(Step::Visit));
                }
                Selection::Inline(sub) => todo.extend(sub.iter().rev().map(Step::Visit)),
                Selection::Spread(name) => {
                    let Some(f) = fragments.get(name.as_str()) else {
                        return Some(("fragments", format!("Did not find fragment '{name}'.")));
                    };
                    if !expanding.insert(f.name.as_str()) {
                        return Some((
                            "fragments",
                            format!("Fragment spreads form cycle ('{name}')."),
                        ));
                    }
                    todo.push(Step::LeaveFragment(f.name.as_str()));
                    todo.extend(f.selections.iter().rev().map(Step::Visit));
                }
            }
        }
        None
    }
}
