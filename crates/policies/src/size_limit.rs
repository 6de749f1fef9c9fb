//! `requestSizeLimit`: a request body limit for one API (413 problem+json), checked against
//! `Content-Length` at once and counted while streaming bodies of unknown length.

use http::header;
use turnpike_config::RequestSizeLimitPolicy;
use turnpike_core::problems;
use turnpike_core::{Body, Exchange, Outcome, Policy, Problem};

use crate::{err, CompileError};

/// The compiled policy.
pub struct RequestSizeLimit {
    max: u64,
}

impl RequestSizeLimit {
    /// Compiles the policy.
    pub fn compile(c: &RequestSizeLimitPolicy) -> Result<Self, CompileError> {
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
