//! Running a chain inside a step of another chain: a consumer's own flow, the branch of an
//! `if`/`choose`, an operation's flow. A nested step that waits for I/O carries the rest of the
//! nested chain along in its [`turnpike_core::Wait`].

use std::sync::Arc;

use turnpike_core::{BodyInspected, BodyNeed, Chain, Exchange, Outcome, RequestEnd, ResponseEnd};

/// Runs the request phase of `chain` from step `from` on; a step that answers ends it with its
/// outcome.
pub(crate) fn request_from(ex: &mut Exchange, chain: Arc<Chain>, from: usize) -> Outcome {
    if from == 0 && chain.body_need() == BodyNeed::Buffer {
        // The engine's inspectors checked the body for the outer chain's policies only: nested
        // ones check it themselves.
        ex.extensions.remove::<BodyInspected>();
    }
    match chain.run_request_from(ex, from) {
        RequestEnd::Forward => Outcome::Continue,
        RequestEnd::Answered { outcome, .. } => outcome,
        RequestEnd::Wait { at, wait } => {
            Outcome::Wait(wait.then(move |ex, outcome| match outcome {
                Outcome::Continue => request_from(ex, chain, at + 1),
                other => other,
            }))
        }
    }
}

/// Runs the response phase of `chain` on the steps below `end` (`usize::MAX`: all of them).
pub(crate) fn response_below(ex: &mut Exchange, chain: Arc<Chain>, end: usize) -> Outcome {
    match chain.run_response_from(ex, end) {
        ResponseEnd::Done => Outcome::Continue,
        ResponseEnd::Reject(p) => Outcome::Reject(p),
        ResponseEnd::Wait { at, wait } => {
            Outcome::Wait(wait.then(move |ex, outcome| match outcome {
                Outcome::Continue => response_below(ex, chain, at),
                Outcome::Respond(r) => {
                    ex.response = Some(r);
                    response_below(ex, chain, at)
                }
                other => other,
            }))
        }
    }
}

/// What a step holding nested chains declares for all of them together.
#[derive(Debug, Default, Clone)]
pub(crate) struct Needs {
    pub(crate) body: BodyNeed,
    pub(crate) response_body: BodyNeed,
    pub(crate) request: bool,
    pub(crate) response: bool,
    /// Some response step reads the request head.
    pub(crate) response_needs_request: bool,
    pub(crate) files: Vec<std::path::PathBuf>,
    pub(crate) secrets: turnpike_core::policy::SecretFields,
}

impl Needs {
    /// The needs of every chain in `chains`.
    pub(crate) fn of<'a>(chains: impl IntoIterator<Item = &'a Chain>) -> Self {
        let mut n = Needs::default();
        for c in chains {
            n.body = n.body.max(c.body_need());
            n.response_body = n.response_body.max(c.response_body_need());
            n.request |= c.steps().iter().any(|s| s.request);
            n.response |= c.has_response_steps();
            n.response_needs_request |= c.response_needs_request();
            n.files.extend(c.files());
            let s = c.secret_fields();
            n.secrets.headers.extend(s.headers.iter().cloned());
            n.secrets.query.extend(s.query.iter().cloned());
        }
        n
    }
}
