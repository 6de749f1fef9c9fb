//! `requestSizeLimit`: a request body limit for one API (413 problem+json), checked against
//! `Content-Length` at once and counted while streaming bodies of unknown length.

use http::header;
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_config::units::ByteSize;
use turnpike_core::problems;
use turnpike_core::{Body, Exchange, Outcome, Policy, Problem};
use turnpike_core::{CompileContext, CompileError, Phases, PolicyFactory};

use crate::err;

/// `requestSizeLimit`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RequestSizeLimitSettings {
    /// Largest request body accepted; larger gets 413.
    pub max_size: ByteSize,
}

/// The compiled policy.
pub struct RequestSizeLimit {
    max: u64,
}

impl PolicyFactory for RequestSizeLimit {
    const NAME: &'static str = "requestSizeLimit";
    const PHASES: Phases = Phases::REQUEST;
    type Settings = RequestSizeLimitSettings;

    /// Compiles the policy.
    fn compile(
        c: RequestSizeLimitSettings,
        _ctx: &CompileContext<'_>,
    ) -> Result<Self, CompileError> {
        if c.max_size.0 == 0 {
            return Err(err("maxSize", "must be larger than zero"));
        }
        Ok(RequestSizeLimit { max: c.max_size.0 })
    }
}

impl Policy for RequestSizeLimit {
    fn name(&self) -> &'static str {
        "requestSizeLimit"
    }

    fn response_needs_request(&self) -> bool {
        false
    }

    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let too_large = || {
            Outcome::Reject(Problem::new(&problems::BODY_TOO_LARGE).with_detail(format!(
                "this API accepts bodies of at most {} bytes",
                self.max
            )))
        };
        let announced = ex
            .request
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if announced.is_some_and(|n| n > self.max) {
            return too_large();
        }
        match std::mem::take(&mut ex.request_body) {
            Body::Full(Some(b)) if b.len() as u64 > self.max => return too_large(),
            other => ex.request_body = other.capped(self.max),
        }
        Outcome::Continue
    }
}
