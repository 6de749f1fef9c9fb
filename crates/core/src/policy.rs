//! The contract between the engine and every policy.
//!
//! For each request the engine runs the API's compiled chain: the request phase of each step in
//! order, then (after the target answered, or after a policy answered) the response phase of
//! the steps already passed, in reverse order — Membrane's flow semantics.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use http::Response;

use crate::body::Body;
use crate::exchange::Exchange;
use crate::problem::Problem;

/// What the engine must do after a policy ran.
#[derive(Debug)]
pub enum Outcome {
    /// Go on with the next policy (or the target).
    Continue,
    /// Stop the request phase and answer with this response; the response phase of the policies
    /// already passed still runs.
    Respond(Response<Body>),
    /// Stop and answer with this problem (rendered as problem+json, or a SOAP fault on SOAP APIs).
    Reject(Problem),
    /// Wait for I/O (a key server, a shared counter store, an executor) before deciding: the
    /// engine awaits the step's future, then applies what it returns to the exchange. Policies
    /// that answer synchronously never build one, and the chain only awaits where a step asks.
    Wait(Wait),
}

/// What an asynchronous step does once its I/O is done: applied to the exchange, it gives the
/// step's outcome (which may be another [`Outcome::Wait`]).
pub type Resume = Box<dyn FnOnce(&mut Exchange) -> Outcome>;

/// The asynchronous part of a policy step (see [`Outcome::Wait`]). The future owns what it
/// needs (it does not borrow the exchange), so that the engine can race it against the step's
/// timeout and drop it when the client goes away.
pub struct Wait {
    /// The I/O; its output is applied to the exchange.
    pub future: Pin<Box<dyn Future<Output = Resume>>>,
    /// How long the step may wait.
    pub timeout: Duration,
    /// Applied instead when the future has not finished within `timeout` (the future is then
    /// dropped).
    pub on_timeout: Resume,
}

impl Wait {
    /// A step that waits for `future` at most `timeout`, then applies `on_timeout`.
    pub fn new(
        future: impl Future<Output = Resume> + 'static,
        timeout: Duration,
        on_timeout: impl FnOnce(&mut Exchange) -> Outcome + 'static,
    ) -> Self {
        Wait {
            future: Box::pin(future),
            timeout,
            on_timeout: Box::new(on_timeout),
        }
    }
}

impl Wait {
    /// This wait, followed by `next` applied to its outcome (whether the future finished or
    /// timed out): how a step that runs a nested chain (a consumer's flow) carries on with the
    /// nested chain's remaining steps after one of them waited.
    pub fn then(self, next: impl FnOnce(&mut Exchange, Outcome) -> Outcome + 'static) -> Wait {
        type Next = Box<dyn FnOnce(&mut Exchange, Outcome) -> Outcome>;
        let slot: std::rc::Rc<std::cell::Cell<Option<Next>>> =
            std::rc::Rc::new(std::cell::Cell::new(Some(Box::new(next))));
        fn apply(slot: &std::cell::Cell<Option<Next>>, ex: &mut Exchange, o: Outcome) -> Outcome {
            let Some(next) = slot.take() else {
                return o;
            };
            match o {
                Outcome::Wait(w) => Outcome::Wait(w.then(next)),
                o => next(ex, o),
            }
        }
        let (s1, s2) = (slot.clone(), slot);
        let Wait {
            future,
            timeout,
            on_timeout,
        } = self;
        Wait {
            future: Box::pin(async move {
                let resume = future.await;
                Box::new(move |ex: &mut Exchange| {
                    let o = resume(ex);
                    apply(&s1, ex, o)
                }) as Resume
            }),
            timeout,
            on_timeout: Box::new(move |ex: &mut Exchange| {
                let o = on_timeout(ex);
                apply(&s2, ex, o)
            }),
        }
    }
}

impl std::fmt::Debug for Wait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wait")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Request fields that carry secrets (see [`Policy::secret_fields`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecretFields {
    /// Header names (lower case).
    pub headers: Vec<http::HeaderName>,
    /// Query parameter names.
    pub query: Vec<String>,
}

/// How much of the request body a policy needs before its request phase can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum BodyNeed {
    /// The policy never looks at the body: it is streamed to the target untouched.
    #[default]
    None,
    /// The policy inspects the body as it streams.
    Stream,
    /// The policy needs the whole body in memory (up to the size limit).
    Buffer,
}

/// A compiled policy. Built once when a config is loaded; shared by every worker and request.
///
/// Implementations must not block: they run on the data plane's event loop.
///
/// A step talks to the engine through what it returns ([`Outcome`]: go on, answer, refuse, or
/// wait for I/O) and through [`crate::exchange::Directives`] on the exchange: an internal API
/// to run instead of the target, a fixed endpoint path, a preferred node, the response body
/// wanted in memory; the engine tells the response phase there whether the response is the
/// gateway's own problem. [`Exchange::extensions`](crate::Exchange::extensions) carries what
/// policies tell each other; the engine never reads it.
pub trait Policy: Send + Sync + 'static {
    /// The policy's name as written in YAML, for logs and errors.
    fn name(&self) -> &'static str;

    /// The body the request phase needs; the engine buffers the body only when a policy of the
    /// chain returns [`BodyNeed::Buffer`]. Called once, when the chain is compiled.
    fn body_need(&self) -> BodyNeed {
        BodyNeed::None
    }

    /// The response body the response phase needs; the engine buffers the backend's response
    /// body only when a policy of the chain returns [`BodyNeed::Buffer`]. Called once.
    fn response_body_need(&self) -> BodyNeed {
        BodyNeed::None
    }

    /// True when the response phase reads the request (its headers, method or URI). When no
    /// response step of a chain does, the engine hands the request head to the backend without
    /// keeping a copy. Called once; the safe default is `true`.
    fn response_needs_request(&self) -> bool {
        true
    }

    /// A checker fed with each chunk of the request body while the engine reads it into memory
    /// (only when the chain buffers the body). Its first error stops reading and answers the
    /// request with that problem before the request phase runs: a policy such as
    /// `jsonProtection` rejects a huge or deeply nested body without reading all of it. Called
    /// once per request (and once when the chain is compiled, to learn whether it inspects).
    fn body_inspector(&self) -> Option<Box<dyn BodyInspector>> {
        None
    }

    /// The local files the policy read when it was compiled (WSDLs and their schemas, key
    /// sets, password files), so that `--watch` reloads when one changes. Called once per load.
    fn files(&self) -> Vec<std::path::PathBuf> {
        Vec::new()
    }

    /// The request headers and query parameters that carry secrets this policy reads (an API
    /// key's header or parameter), which the store of recent exchanges redacts. Called once,
    /// when the chain is compiled.
    fn secret_fields(&self) -> SecretFields {
        SecretFields::default()
    }

    /// Runs on the request before it goes to the target; may change it, answer it, reject it,
    /// or ask the engine to wait for I/O first ([`Outcome::Wait`]).
    fn on_request(&self, _ex: &mut Exchange) -> Outcome {
        Outcome::Continue
    }

    /// Runs on the response (`ex.response` is set) before it goes to the client; may change it
    /// or replace it. `Respond` replaces the response; `Reject` replaces it with a problem.
    fn on_response(&self, _ex: &mut Exchange) -> Outcome {
        Outcome::Continue
    }
}

/// Checks a request body chunk by chunk as it arrives (see [`Policy::body_inspector`]).
pub trait BodyInspector: Send {
    /// The next chunk of the body; an error stops reading and is the answer.
    fn chunk(&mut self, data: &[u8]) -> Result<(), Box<Problem>>;

    /// The body ended (possibly empty).
    fn end(&mut self) -> Result<(), Box<Problem>>;
}

/// Put into the exchange's extensions by the engine when every inspector of the chain accepted
/// the whole request body; a policy that replaces the body removes it.
#[derive(Debug, Clone, Copy)]
pub struct BodyInspected;
