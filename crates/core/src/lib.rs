//! Turnpike's runtime vocabulary, shared by the policies and the engine and free of sockets:
//! the [`Exchange`] a request travels in, the [`Policy`] trait with its phases and outcomes,
//! compiled [`Template`]s, the path/host/method [`Router`], bodies and problem+json responses.

pub mod body;
pub mod chain;
pub mod exchange;
pub mod json;
pub mod jsonpath;
pub mod policy;
pub mod problem;
pub mod router;
pub mod template;

pub use body::Body;
pub use chain::{Chain, RequestEnd, Step};
pub use exchange::Exchange;
pub use policy::{BodyInspected, BodyInspector, BodyNeed, Outcome, Policy};
pub use problem::Problem;
pub use router::{Match, RouteSpec, Router};
pub use template::{Template, TemplateScope};
