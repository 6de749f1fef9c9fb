//! The flows of single operations of an API deployed from an OpenAPI spec (`api.operations`):
//! one step after the API's flow that runs the flow of the operation the spec's validator
//! matched ([`MatchedOperation`]). Operations without a flow of their own cost one lookup.

use std::sync::Arc;

use turnpike_core::exchange::MatchedOperation;
use turnpike_core::{BodyNeed, Chain, Exchange, Outcome, Policy};

use crate::nested::{self, Needs};

/// The flows of a spec's operations, indexed by the spec's path and operation indexes.
#[derive(Debug)]
pub struct OperationFlows {
    flows: Vec<Vec<Option<Arc<Chain>>>>,
    needs: Needs,
}

impl OperationFlows {
    /// The flows: `flows[path][op]` is the flow of operation `op` of the spec's path `path`.
    pub fn new(flows: Vec<Vec<Option<Arc<Chain>>>>) -> Self {
        let needs = Needs::of(flows.iter().flatten().flatten().map(|c| &**c));
        OperationFlows { flows, needs }
    }

    /// The phases the step takes part in (those of the operations' flows).
    pub fn phases(&self) -> (bool, bool) {
        (self.needs.request, self.needs.response)
    }

    fn flow(&self, ex: &Exchange) -> Option<Arc<Chain>> {
        let m = ex.extensions.get::<MatchedOperation>()?;
        self.flows.get(m.path)?.get(m.op)?.clone()
    }
}

impl Policy for OperationFlows {
    fn name(&self) -> &'static str {
        "operations"
    }

    fn body_need(&self) -> BodyNeed {
        self.needs.body
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

    /// Runs the request phase of the matched operation's flow.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        match self.flow(ex) {
            Some(chain) => nested::request_from(ex, chain, 0),
            None => Outcome::Continue,
        }
    }

    /// Runs the response phase of the matched operation's flow.
    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        match self.flow(ex) {
            Some(chain) => nested::response_below(ex, chain, usize::MAX),
            None => Outcome::Continue,
        }
    }
}
