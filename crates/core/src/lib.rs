//! Turnpike's runtime vocabulary, shared by the policies and the engine and free of sockets:
//! the [`Exchange`] a request travels in, the [`Policy`] trait with its phases and outcomes,
//! compiled [`Template`]s, the path/host/method [`Router`], bodies and problem+json responses.

pub mod admin_hook;
pub mod body;
pub mod chain;
pub mod civil;
pub mod decode;
pub mod error_format;
pub mod exchange;
pub mod json;
pub mod json_strict;
pub mod jsonpath;
pub mod policy;
pub mod problem;
pub mod properties;
pub mod registry;
pub mod router;
pub mod settings;
pub mod template;

pub use body::Body;
pub use chain::{Chain, RequestEnd, ResponseEnd, Step};
pub use error_format::{ErrorFormat, RenderProblem};
pub use exchange::{Directives, Exchange, StepTime};
pub use policy::{BodyInspected, BodyInspector, BodyNeed, Outcome, Policy, Resume, Wait};
pub use problem::{types as problems, Problem, ProblemType};
pub use registry::{CompileContext, CompileError, Phases, PolicyFactory, PolicyKind};
pub use router::{Match, RouteSpec, RouteTest, Router};
pub use template::{Template, TemplateScope};
