//! Membrane's `abort:` flow: policies that act on a response only when the gateway answered with
//! a problem of its own — a policy rejected the request, or the backend could not be reached or
//! answered too late (Membrane's aborted exchange) — to shape the error the client gets. Compiled
//! by the flow compiler like `request:`/`response:`; its policies run their response phase, in
//! reverse order as every response phase does, at the place the `abort:` entry stands.

use std::sync::Arc;

use turnpike_core::{BodyNeed, Chain, Exchange, Outcome, Policy};

use crate::nested::{self, Needs};

/// The compiled `abort:` flow.
pub(crate) struct AbortFlow {
    chain: Arc<Chain>,
    needs: Needs,
}

impl AbortFlow {
    /// Runs at load time: the flow of response-phase steps `chain`.
    pub(crate) fn new(chain: Chain) -> Self {
        let needs = Needs::of([&chain]);
        AbortFlow {
            chain: Arc::new(chain),
            needs,
        }
    }
}

impl Policy for AbortFlow {
    fn name(&self) -> &'static str {
        "abort"
    }

    fn response_body_need(&self) -> BodyNeed {
        self.needs.response_body
    }

    fn response_needs_request(&self) -> bool {
        self.needs.response_needs_request
    }

    fn files(&self) -> Vec<std::path::PathBuf> {
        self.needs.files.clone()
    }

    fn secret_fields(&self) -> turnpike_core::policy::SecretFields {
        self.needs.secrets.clone()
    }

    /// Runs the flow's response phase when the response is the gateway's own problem; else
    /// does nothing.
    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        if !ex.directives.aborted {
            return Outcome::Continue;
        }
        nested::response_below(ex, self.chain.clone(), usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::exchange;
    use turnpike_core::chain::Step;

    /// A response step that marks the response.
    struct Mark;

    impl Policy for Mark {
        fn name(&self) -> &'static str {
            "mark"
        }

        fn on_response(&self, ex: &mut Exchange) -> Outcome {
            if let Some(r) = ex.response.as_mut() {
                r.headers_mut()
                    .insert("x-mark", http::HeaderValue::from_static("1"));
            }
            Outcome::Continue
        }
    }

    fn flow() -> AbortFlow {
        AbortFlow::new(Chain::new(vec![Step {
            policy: Box::new(Mark),
            request: false,
            response: true,
        }]))
    }

    fn marked(aborted: bool) -> bool {
        let mut ex = exchange("GET", "/", &[], "");
        ex.response = Some(http::Response::new(turnpike_core::Body::Empty));
        if aborted {
            ex.directives.aborted = true;
        }
        assert!(matches!(flow().on_response(&mut ex), Outcome::Continue));
        ex.response
            .as_ref()
            .is_some_and(|r| r.headers().contains_key("x-mark"))
    }

    #[test]
    fn runs_on_aborted_exchanges_only() {
        assert!(marked(true));
        assert!(!marked(false));
    }
}
