//! Content models (`sequence`, `choice` and occurrence ranges of elements) compiled to
//! deterministic automata over element names: a regular expression of particles becomes a
//! Thompson NFA and that a DFA by subset construction, so matching is exact whatever the shape
//! of the model (no greedy shortcuts). A model in which one name could stand for two different
//! declarations is refused, as is one that grows past the size limits.

use std::collections::{BTreeMap, HashMap};

/// Most NFA nodes of one content model.
const MAX_NFA: usize = 4096;
/// Most DFA states of one content model.
const MAX_DFA: usize = 512;

/// A content model as a regular expression over element particles.
#[derive(Debug, Clone)]
pub enum Particle {
    /// One element: its namespace, local name and declaration.
    Element {
        /// Namespace (`""`: none).
        ns: String,
        /// Local name.
        local: String,
        /// Index of its declaration.
        decl: usize,
    },
    /// The parts in order.
    Sequence(Vec<Particle>),
    /// One of the parts (at least one).
    Choice(Vec<Particle>),
    /// `min` to `max` (`None`: unbounded) repetitions.
    Repeat(Box<Particle>, u32, Option<u32>),
}

/// One transition of a [`Dfa`] state.
#[derive(Debug, Clone)]
pub struct Edge {
    /// Namespace of the element.
    pub ns: Box<[u8]>,
    /// Local name of the element.
    pub local: Box<[u8]>,
    /// The next state.
    pub to: u32,
    /// The element's declaration.
    pub decl: usize,
}

/// A state of a [`Dfa`].
#[derive(Debug, Clone, Default)]
pub struct State {
    /// The children seen so far are a complete content.
    pub accept: bool,
    /// Transitions by element name.
    pub edges: Vec<Edge>,
}

/// A deterministic automaton over child element names; state 0 is the start.
#[derive(Debug, Clone)]
pub struct Dfa {
    /// The states.
    pub states: Vec<State>,
}

impl Dfa {
    /// The state after the element `{ns}local` in `state`, with its declaration.
    pub fn step(&self, state: u32, ns: &[u8], local: &[u8]) -> Option<(u32, usize)> {
        self.states
            .get(state as usize)?
            .edges
            .iter()
            .find(|e| same(&e.local, local) && same(&e.ns, ns))
            .map(|e| (e.to, e.decl))
    }

    /// True when `state` ends a complete content.
    pub fn accepts(&self, state: u32) -> bool {
        self.states.get(state as usize).is_some_and(|s| s.accept)
    }

    /// True when the model admits no child element at all (only the empty content).
    pub fn is_empty_only(&self) -> bool {
        self.states.first().is_some_and(|s| s.edges.is_empty())
    }
}

/// Byte-wise equality of short names, inline (a library `bcmp` call per comparison costs
/// more than the comparison).
#[inline]
pub fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

#[derive(Default)]
struct Nfa {
    eps: Vec<Vec<usize>>,
    /// (label, declaration, target) of a node's one labelled edge.
    edge: Vec<Option<(usize, usize, usize)>>,
    labels: Vec<(String, String)>,
    label_ids: HashMap<(String, String), usize>,
}

impl Nfa {
    fn node(&mut self) -> Result<usize, String> {
        if self.eps.len() >= MAX_NFA {
            return Err("the content model is too large".into());
        }
        self.eps.push(Vec::new());
        self.edge.push(None);
        Ok(self.eps.len() - 1)
    }

    /// Adds `p` starting at `start`; returns its end node.
    fn add(&mut self, p: &Particle, start: usize) -> Result<usize, String> {
        match p {
            Particle::Element { ns, local, decl } => {
                let key = (ns.clone(), local.clone());
                let label = match self.label_ids.get(&key) {
                    Some(&l) => l,
                    None => {
                        self.labels.push(key.clone());
                        self.label_ids.insert(key, self.labels.len() - 1);
                        self.labels.len() - 1
                    }
                };
                // A node has at most one labelled edge: give it a fresh source.
                let from = self.node()?;
                self.eps[start].push(from);
                let end = self.node()?;
                self.edge[from] = Some((label, *decl, end));
                Ok(end)
            }
            Particle::Sequence(parts) => {
                let mut cur = start;
                for part in parts {
                    cur = self.add(part, cur)?;
                }
                Ok(cur)
            }
            Particle::Choice(parts) => {
                if parts.is_empty() {
                    return Err("an empty choice".into());
                }
                let end = self.node()?;
                for part in parts {
                    let s = self.node()?;
                    self.eps[start].push(s);
                    let e = self.add(part, s)?;
                    self.eps[e].push(end);
                }
                Ok(end)
            }
            Particle::Repeat(inner, min, max) => {
                let mut cur = start;
                for _ in 0..*min {
                    cur = self.add(inner, cur)?;
                }
                match max {
                    None => {
                        let hub = self.node()?;
                        self.eps[cur].push(hub);
                        let e = self.add(inner, hub)?;
                        self.eps[e].push(hub);
                        Ok(hub)
                    }
                    Some(max) => {
                        for _ in *min..*max {
                            let next = self.node()?;
                            self.eps[cur].push(next);
                            let e = self.add(inner, cur)?;
                            self.eps[e].push(next);
                            cur = next;
                        }
                        Ok(cur)
                    }
                }
            }
        }
    }

    fn closure(&self, seeds: impl IntoIterator<Item = usize>) -> Vec<usize> {
        let mut seen = vec![false; self.eps.len()];
        let mut stack: Vec<usize> = seeds.into_iter().collect();
        let mut out = Vec::new();
        while let Some(n) = stack.pop() {
            if std::mem::replace(&mut seen[n], true) {
                continue;
            }
            out.push(n);
            stack.extend(self.eps[n].iter().copied());
        }
        out.sort_unstable();
        out
    }
}

/// Compiles a content model.
pub fn compile(model: &Particle) -> Result<Dfa, String> {
    let mut nfa = Nfa::default();
    let start = nfa.node()?;
    let end = nfa.add(model, start)?;
    let first = nfa.closure([start]);
    let mut ids: HashMap<Vec<usize>, u32> = HashMap::new();
    ids.insert(first.clone(), 0);
    let mut sets = vec![first];
    let mut states = Vec::new();
    let mut i = 0;
    while i < sets.len() {
        let set = sets[i].clone();
        i += 1;
        let mut by_label: BTreeMap<usize, (usize, Vec<usize>)> = BTreeMap::new();
        for &n in &set {
            if let Some((label, decl, to)) = nfa.edge[n] {
                let entry = by_label.entry(label).or_insert((decl, Vec::new()));
                if entry.0 != decl {
                    return Err(format!(
                        "`{}` stands for two declarations in one content model",
                        nfa.labels[label].1
                    ));
                }
                entry.1.push(to);
            }
        }
        let mut state = State {
            accept: set.binary_search(&end).is_ok(),
            edges: Vec::new(),
        };
        for (label, (decl, targets)) in by_label {
            let target = nfa.closure(targets);
            let to = match ids.get(&target) {
                Some(&id) => id,
                None => {
                    if sets.len() >= MAX_DFA {
                        return Err("the content model is too large".into());
                    }
                    let id = sets.len() as u32;
                    ids.insert(target.clone(), id);
                    sets.push(target);
                    id
                }
            };
            let (ns, local) = &nfa.labels[label];
            state.edges.push(Edge {
                ns: ns.as_bytes().into(),
                local: local.as_bytes().into(),
                to,
                decl,
            });
        }
        states.push(state);
    }
    Ok(Dfa { states })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn el(name: &str, decl: usize) -> Particle {
        Particle::Element {
            ns: String::new(),
            local: name.into(),
            decl,
        }
    }

    fn run(dfa: &Dfa, names: &str) -> bool {
        let mut s = 0;
        for n in names.split_whitespace() {
            match dfa.step(s, b"", n.as_bytes()) {
                Some((to, _)) => s = to,
                None => return false,
            }
        }
        dfa.accepts(s)
    }

    #[test]
    fn sequences_choices_and_occurrences() {
        // a, b?, c{0,3}, (d | e)+
        let m = Particle::Sequence(vec![
            el("a", 0),
            Particle::Repeat(Box::new(el("b", 1)), 0, Some(1)),
            Particle::Repeat(Box::new(el("c", 2)), 0, Some(3)),
            Particle::Repeat(
                Box::new(Particle::Choice(vec![el("d", 3), el("e", 4)])),
                1,
                None,
            ),
        ]);
        let d = compile(&m).unwrap();
        assert!(run(&d, "a d"));
        assert!(run(&d, "a b c c c e d e"));
        assert!(!run(&d, "a"));
        assert!(!run(&d, "a c c c c d"));
        assert!(!run(&d, "b a d"));
        assert!(!run(&d, "a b b d"));
        assert!(!run(&d, "a d c"));
        assert!(!run(&d, ""));
    }

    #[test]
    fn non_greedy_models_match_exactly() {
        // (a, b?){1,2}, a? would trip a greedy matcher on "a a": it is valid.
        let m = Particle::Sequence(vec![
            Particle::Repeat(
                Box::new(Particle::Sequence(vec![
                    el("a", 0),
                    Particle::Repeat(Box::new(el("b", 1)), 0, Some(1)),
                ])),
                1,
                Some(2),
            ),
            Particle::Repeat(Box::new(el("c", 2)), 0, Some(1)),
        ]);
        let d = compile(&m).unwrap();
        assert!(run(&d, "a a"));
        assert!(run(&d, "a b a b c"));
        assert!(!run(&d, "a a a"));
        let empty = compile(&Particle::Sequence(vec![])).unwrap();
        assert!(empty.is_empty_only() && run(&empty, ""));
    }

    #[test]
    fn refusals() {
        let two = Particle::Choice(vec![el("a", 0), el("a", 1)]);
        assert!(compile(&two).is_err());
        assert!(compile(&Particle::Choice(vec![])).is_err());
        let huge = Particle::Repeat(Box::new(el("a", 0)), 0, Some(100_000));
        assert!(compile(&huge).is_err());
        // the same declaration under one name twice is fine
        assert!(compile(&Particle::Choice(vec![el("a", 0), el("a", 0)])).is_ok());
    }
}
