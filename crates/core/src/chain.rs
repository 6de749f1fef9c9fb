//! A compiled flow: the ordered policies of an API (global ones first), each marked with the
//! phases it runs in, and the body need of the whole chain computed once at compile time.

use crate::exchange::Exchange;
use crate::policy::{BodyNeed, Outcome, Policy, Wait};

/// One policy of a chain and the phases it takes part in.
pub struct Step {
    /// The policy.
    pub policy: Box<dyn Policy>,
    /// Runs in the request phase.
    pub request: bool,
    /// Runs in the response phase.
    pub response: bool,
}

impl std::fmt::Debug for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}({}{})",
            self.policy.name(),
            if self.request { "req" } else { "" },
            if self.response { "res" } else { "" }
        )
    }
}

/// What the request phase of a chain ended with.
#[derive(Debug)]
pub enum RequestEnd {
    /// Every request step continued: forward to the target.
    Forward,
    /// A policy answered or rejected; the response phase runs from step `at` backwards.
    Answered {
        /// Index of the step that answered; steps before it get the response phase.
        at: usize,
        /// Its outcome (`Respond` or `Reject`).
        outcome: Outcome,
    },
    /// Step `at` waits for I/O: the engine awaits it, applies its result, and (when that
    /// continues) goes on with [`Chain::run_request_from`] at `at + 1`.
    Wait {
        /// Index of the waiting step.
        at: usize,
        /// What it waits for.
        wait: Wait,
    },
}

/// What the response phase of a chain ended with.
#[derive(Debug)]
pub enum ResponseEnd {
    /// Every response step ran (a `Respond` replaced `ex.response`).
    Done,
    /// A step rejected the response with this problem.
    Reject(crate::Problem),
    /// Step `at` waits for I/O: the engine awaits it, applies its result, and goes on with
    /// [`Chain::run_response_from`] below `at`.
    Wait {
        /// Index of the waiting step.
        at: usize,
        /// What it waits for.
        wait: Wait,
    },
}

/// An API's compiled policy chain.
#[derive(Debug, Default)]
pub struct Chain {
    steps: Vec<Step>,
    body_need: BodyNeed,
    response_body_need: BodyNeed,
    has_response_steps: bool,
    response_needs_request: bool,
    /// Indexes of the request steps that inspect the body while it is read.
    inspecting: Vec<usize>,
    /// The request fields the chain's policies read secrets from.
    secrets: crate::policy::SecretFields,
}

impl Chain {
    /// Builds a chain; the body need is the largest need of its request steps.
    pub fn new(steps: Vec<Step>) -> Self {
        let body_need = steps
            .iter()
            .filter(|s| s.request)
            .map(|s| s.policy.body_need())
            .max()
            .unwrap_or_default();
        let response_body_need = steps
            .iter()
            .filter(|s| s.response)
            .map(|s| s.policy.response_body_need())
            .max()
            .unwrap_or_default();
        let has_response_steps = steps.iter().any(|s| s.response);
        let mut secrets = crate::policy::SecretFields::default();
        for s in &steps {
            let f = s.policy.secret_fields();
            secrets.headers.extend(f.headers);
            secrets.query.extend(f.query);
        }
        let response_needs_request = steps
            .iter()
            .any(|s| s.response && s.policy.response_needs_request());
        let inspecting = if body_need == BodyNeed::Buffer {
            steps
                .iter()
                .enumerate()
                .filter(|(_, s)| s.request && s.policy.body_inspector().is_some())
                .map(|(i, _)| i)
                .collect()
        } else {
            Vec::new()
        };
        Chain {
            steps,
            body_need,
            response_body_need,
            has_response_steps,
            response_needs_request,
            inspecting,
            secrets,
        }
    }

    /// The body inspectors for one request (empty for most chains: no allocation then).
    pub fn body_inspectors(&self) -> Vec<Box<dyn crate::policy::BodyInspector>> {
        self.inspecting
            .iter()
            .filter_map(|&i| self.steps.get(i).and_then(|s| s.policy.body_inspector()))
            .collect()
    }

    /// The request headers and query parameters the chain's policies read secrets from.
    pub fn secret_fields(&self) -> &crate::policy::SecretFields {
        &self.secrets
    }

    /// The name of the policy of step `at` (`gateway` past the last step).
    pub fn step_name(&self, at: usize) -> &'static str {
        self.steps.get(at).map_or("gateway", |s| s.policy.name())
    }

    /// The steps, in flow order.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Every local file the chain's policies read (see [`Policy::files`]).
    pub fn files(&self) -> Vec<std::path::PathBuf> {
        self.steps.iter().flat_map(|s| s.policy.files()).collect()
    }

    /// What the request phase needs of the body (computed once).
    pub fn body_need(&self) -> BodyNeed {
        self.body_need
    }

    /// What the response phase needs of the response body (computed once).
    pub fn response_body_need(&self) -> BodyNeed {
        self.response_body_need
    }

    /// True when a response step reads the request (see [`Policy::response_needs_request`]).
    pub fn response_needs_request(&self) -> bool {
        self.response_needs_request
    }

    /// True when no step has a response phase (the engine then skips it).
    pub fn has_response_steps(&self) -> bool {
        self.has_response_steps
    }

    /// Runs the request phase in order until a policy answers or waits.
    pub fn run_request(&self, ex: &mut Exchange) -> RequestEnd {
        self.run_request_from(ex, 0)
    }

    /// Runs the request phase from step `from` on (after a step that waited).
    pub fn run_request_from(&self, ex: &mut Exchange, from: usize) -> RequestEnd {
        for (i, step) in self.steps.iter().enumerate().skip(from) {
            if !step.request {
                continue;
            }
            let start = ex.step_times.is_some().then(std::time::Instant::now);
            let outcome = step.policy.on_request(ex);
            if let (Some(start), Some(times)) = (start, ex.step_times.as_mut()) {
                times.push(crate::exchange::StepTime {
                    at: i,
                    response: false,
                    start,
                    end: std::time::Instant::now(),
                });
            }
            match outcome {
                Outcome::Continue => {}
                Outcome::Wait(wait) => return RequestEnd::Wait { at: i, wait },
                outcome => return RequestEnd::Answered { at: i, outcome },
            }
        }
        RequestEnd::Forward
    }

    /// Runs the response phase of the steps before `end` (all steps: `usize::MAX`), last first.
    /// A policy that answers replaces `ex.response`; the phase continues with the earlier steps.
    pub fn run_response_from(&self, ex: &mut Exchange, end: usize) -> ResponseEnd {
        let end = end.min(self.steps.len());
        for (i, step) in self.steps[..end].iter().enumerate().rev() {
            if !step.response {
                continue;
            }
            let start = ex.step_times.is_some().then(std::time::Instant::now);
            let outcome = step.policy.on_response(ex);
            if let (Some(start), Some(times)) = (start, ex.step_times.as_mut()) {
                times.push(crate::exchange::StepTime {
                    at: i,
                    response: true,
                    start,
                    end: std::time::Instant::now(),
                });
            }
            match outcome {
                Outcome::Continue => {}
                Outcome::Respond(r) => ex.response = Some(r),
                Outcome::Reject(p) => return ResponseEnd::Reject(p),
                Outcome::Wait(wait) => return ResponseEnd::Wait { at: i, wait },
            }
        }
        ResponseEnd::Done
    }
}
