//! The policy chain's phases: the request steps in order (awaiting the steps that wait for
//! I/O), and the response steps last first, with the response body read into memory first when
//! a step needs it.

use http::header;
use http::{HeaderValue, Response, StatusCode};
use turnpike_core::{
    problems, Body, BodyNeed, Chain, Exchange, Outcome, Problem, RequestEnd, ResponseEnd, Wait,
};
use turnpike_snapshot::Settings;

use super::body::buffer;
use super::Served;

/// Request phase: the chain's request steps in order, awaiting the steps that wait for I/O.
pub(super) async fn request_phase(chain: &Chain, ex: &mut Exchange) -> RequestEnd {
    let mut from = 0;
    loop {
        match chain.run_request_from(ex, from) {
            // Boxed: a step that waits is rare, and the request's future stays small.
            RequestEnd::Wait { at, wait } => match Box::pin(settle(wait, ex)).await {
                Outcome::Continue => from = at + 1,
                outcome => return RequestEnd::Answered { at, outcome },
            },
            end => return end,
        }
    }
}

/// Awaits a waiting step within its timeout and applies its result (or its timeout answer) to
/// the exchange. Dropping the request (the client went away) drops the wait with it.
async fn settle(mut wait: Wait, ex: &mut Exchange) -> Outcome {
    loop {
        let outcome = match crate::deadline::timeout(wait.timeout, wait.future).await {
            Ok(resume) => resume(ex),
            Err(_) => (wait.on_timeout)(ex),
        };
        match outcome {
            Outcome::Wait(next) => wait = next,
            outcome => return outcome,
        }
    }
}

/// True when the response is a `text/event-stream`.
fn is_event_stream(response: &Response<Body>) -> bool {
    response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("text/event-stream"))
}

/// Response phase: the response steps of the steps before `end`, last first (Membrane's
/// semantics), with the response body buffered first when a step needs it (or a request-phase
/// step asked for it with [`turnpike_core::exchange::Directives::buffer_response`]); gateway
/// problems are marked [`turnpike_core::exchange::Directives::aborted`] for `abort:` flows.
pub(super) async fn response_phase(
    chain: &Chain,
    ex: &mut Exchange,
    response: Response<Body>,
    end: usize,
    settings: &Settings,
    served: &mut Served,
) -> Response<Body> {
    if !chain.has_response_steps() {
        return response;
    }
    let buffer_asked = chain.response_body_need() == BodyNeed::Buffer
        || ex
            .directives
            .buffer_response
            .is_some_and(|b| !(b.except_event_streams && is_event_stream(&response)));
    let response = if buffer_asked && response.status() != StatusCode::SWITCHING_PROTOCOLS {
        let (parts, body) = response.into_parts();
        match Box::pin(buffer(body, settings.max_body_size)).await {
            Ok(bytes) => Response::from_parts(parts, Body::Full(Some(bytes))),
            Err(_) => served.reject(
                Problem::new(&problems::UPSTREAM_ERROR)
                    .with_detail("the backend's response could not be read"),
            ),
        }
    } else {
        response
    };
    if served.error.is_some() {
        ex.directives.aborted = true;
    }
    ex.response = Some(response);
    let mut end = end;
    loop {
        match chain.run_response_from(ex, end) {
            ResponseEnd::Done => break,
            ResponseEnd::Reject(p) => return served.reject(p),
            ResponseEnd::Wait { at, wait } => {
                match Box::pin(settle(wait, ex)).await {
                    // `settle` never ends with another wait.
                    Outcome::Continue | Outcome::Wait(_) => {}
                    Outcome::Respond(r) => ex.response = Some(r),
                    Outcome::Reject(p) => return served.reject(p),
                }
                end = at;
            }
        }
    }
    match ex.response.take() {
        Some(mut r) => {
            // A policy that set the body in memory may have left the backend's length: the
            // length sent is the body's own.
            let bodiless = ex.request.method == http::Method::HEAD
                || r.status() == StatusCode::NO_CONTENT
                || r.status() == StatusCode::NOT_MODIFIED;
            if let (Body::Full(Some(b)), false) = (r.body(), bodiless) {
                let n = b.len();
                let h = r.headers_mut();
                h.remove(header::TRANSFER_ENCODING);
                if n > 0 || h.contains_key(header::CONTENT_LENGTH) {
                    h.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
                }
            }
            r
        }
        None => served.reject(Problem::new(&problems::INTERNAL)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::local;
    use http::Request;
    use std::time::{Duration, Instant};
    use turnpike_core::exchange::PathParams;
    use turnpike_core::{Policy, Step};

    /// Waits `delay` (forever when `None`), then answers with `status`.
    struct Slow {
        delay: Option<Duration>,
        status: u16,
    }

    impl Policy for Slow {
        fn name(&self) -> &'static str {
            "slow"
        }

        fn on_request(&self, _: &mut Exchange) -> Outcome {
            let (delay, status) = (self.delay, self.status);
            Outcome::Wait(Wait::new(
                async move {
                    match delay {
                        Some(d) => tokio::time::sleep(d).await,
                        None => std::future::pending::<()>().await,
                    }
                    Box::new(move |ex: &mut Exchange| {
                        ex.request
                            .headers
                            .insert("x-waited", HeaderValue::from(status));
                        Outcome::Continue
                    }) as turnpike_core::Resume
                },
                Duration::from_millis(100),
                |_| Outcome::Reject(Problem::new(&problems::POLICY_TIMEOUT)),
            ))
        }
    }

    fn chain(delay: Option<Duration>) -> Chain {
        let step = |d, status| Step {
            policy: Box::new(Slow { delay: d, status }) as Box<dyn Policy>,
            request: true,
            response: false,
        };
        Chain::new(vec![step(Some(Duration::ZERO), 1), step(delay, 2)])
    }

    fn exchange() -> Exchange {
        let (parts, _) = Request::new(()).into_parts();
        Exchange::new(
            parts,
            Body::Empty,
            "192.0.2.1:1".parse().unwrap(),
            PathParams::new(),
        )
    }

    #[test]
    fn waiting_steps_resume_the_chain_in_order() {
        local(async {
            let mut ex = exchange();
            let end = request_phase(&chain(Some(Duration::from_millis(5))), &mut ex).await;
            assert!(matches!(end, RequestEnd::Forward), "{end:?}");
            assert_eq!(ex.request.headers["x-waited"], "2");
        });
    }

    #[test]
    fn a_step_that_waits_too_long_gets_its_timeout_answer() {
        local(async {
            let mut ex = exchange();
            let started = Instant::now();
            let end = request_phase(&chain(None), &mut ex).await;
            let RequestEnd::Answered {
                at: 1,
                outcome: Outcome::Reject(p),
            } = end
            else {
                panic!("{end:?}")
            };
            assert_eq!(p.status, 504);
            assert!(started.elapsed() >= Duration::from_millis(100));
            assert_eq!(ex.request.headers["x-waited"], "1");
        });
    }
}
