//! The last request step of an API whose target URL reads the request's body (Membrane's
//! `target.language: jsonpath`/`xpath`): it makes the engine read the body into memory and parses
//! it for the URL's expressions, after every policy of the flow had its say on the body.

use turnpike_core::jsonpath::Message;
use turnpike_core::{BodyNeed, Exchange, Outcome, Policy, Template};

/// Reads the request body for the target URL's template.
#[derive(Debug)]
pub struct TargetBody(pub Template);

impl Policy for TargetBody {
    fn name(&self) -> &'static str {
        "target"
    }

    fn body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    /// Parses the body for the URL's expressions.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        self.0.prepare(ex, Message::Request);
        Outcome::Continue
    }
}
