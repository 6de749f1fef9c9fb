//! `limit`: Membrane's body size limit, for requests and responses, without reading bodies into
//! memory. In the phase it runs in, a message whose `Content-Length` is larger than
//! `maxBodyLength` is refused at once; any other body is counted as it streams and fails once
//! more bytes pass. A request that is too large answers 413 (`body-too-large`); a response that
//! is, 502 (`upstream-error`) when it is known before its head is sent, else the connection is
//! closed once the limit is passed.

use http::header;
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::problems;
use turnpike_core::{Body, BodyInspector, CompileContext, CompileError, Exchange, Outcome};
use turnpike_core::{Policy, PolicyFactory, Problem};

use crate::err;

/// `limit`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LimitSettings {
    /// The largest body accepted, in bytes; `-1` (the default) turns the limit off.
    #[serde(default = "off")]
    pub max_body_length: i64,
}

fn off() -> i64 {
    -1
}

/// The compiled `limit` policy.
#[derive(Debug)]
pub struct Limit {
    /// `None`: off.
    max: Option<u64>,
}

impl PolicyFactory for Limit {
    const NAME: &'static str = "limit";
    type Settings = LimitSettings;

    /// Checks the limit; returns the policy, or an error naming the setting.
    fn compile(s: LimitSettings, _: &CompileContext<'_>) -> Result<Self, CompileError> {
        match s.max_body_length {
            -1 => Ok(Limit { max: None }),
            n => u64::try_from(n)
                .map(|n| Limit { max: Some(n) })
                .map_err(|_| {
                    err(
                        "maxBodyLength",
                        "must be a number of bytes, or -1 for no limit",
                    )
                }),
        }
    }
}

/// The length a message's `Content-Length` announces.
fn announced(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
}

fn request_too_large(max: u64) -> Problem {
    Problem::new(&problems::BODY_TOO_LARGE)
        .with_detail(format!("Message bodies must be smaller than {max} bytes."))
}

fn response_too_large(max: u64) -> Problem {
    Problem::new(&problems::UPSTREAM_ERROR).with_detail(format!(
        "the backend's response body is larger than the limit of {max} bytes"
    ))
}

/// True for a problem the gateway itself answers with (a request refused while it streamed to
/// the backend, an unreachable backend): problem+json held in memory without a
/// `Content-Length`. A backend's problem+json has one, unless it came chunked and another
/// policy had it read whole (its size was then bounded by `limits.maxBodySize`). The limit
/// guards against what the backend sends, not against the gateway's own answers.
fn gateways_problem(res: &http::Response<Body>) -> bool {
    matches!(res.body(), Body::Full(_))
        && !res.headers().contains_key(header::CONTENT_LENGTH)
        && res
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes() == b"application/problem+json")
}

/// Counts the request body as the engine reads it into memory (when a policy of the chain needs
/// it whole), so that a body over the limit is refused before all of it is read.
struct Counter {
    remaining: u64,
    max: u64,
}

impl BodyInspector for Counter {
    fn chunk(&mut self, data: &[u8]) -> Result<(), Box<Problem>> {
        let n = data.len() as u64;
        if n > self.remaining {
            return Err(Box::new(request_too_large(self.max)));
        }
        self.remaining -= n;
        Ok(())
    }

    fn end(&mut self) -> Result<(), Box<Problem>> {
        Ok(())
    }
}

impl Policy for Limit {
    fn name(&self) -> &'static str {
        "limit"
    }

    fn body_inspector(&self) -> Option<Box<dyn BodyInspector>> {
        self.max.map(|max| {
            Box::new(Counter {
                remaining: max,
                max,
            }) as Box<dyn BodyInspector>
        })
    }

    /// Refuses a request whose announced or buffered body is over the limit (413); else caps
    /// its stream at the limit and continues.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let Some(max) = self.max else {
            return Outcome::Continue;
        };
        if announced(&ex.request.headers).is_some_and(|n| n > max) {
            return Outcome::Reject(request_too_large(max));
        }
        match std::mem::take(&mut ex.request_body) {
            Body::Full(Some(b)) if b.len() as u64 > max => {
                return Outcome::Reject(request_too_large(max))
            }
            other => ex.request_body = other.capped(max),
        }
        Outcome::Continue
    }

    /// Refuses a response whose announced or buffered body is over the limit (502); else caps
    /// its stream at the limit (the connection is closed when it is passed) and continues.
    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        let Some(max) = self.max else {
            return Outcome::Continue;
        };
        // A response to HEAD, a 204 or a 304 announces a length it does not carry.
        let head = ex.request.method == http::Method::HEAD;
        let Some(res) = ex.response.as_mut() else {
            return Outcome::Continue;
        };
        let bodiless = head
            || res.status() == http::StatusCode::NO_CONTENT
            || res.status() == http::StatusCode::NOT_MODIFIED;
        if !bodiless && announced(res.headers()).is_some_and(|n| n > max) {
            return Outcome::Reject(response_too_large(max));
        }
        if gateways_problem(res) {
            return Outcome::Continue;
        }
        match std::mem::take(res.body_mut()) {
            Body::Full(Some(b)) if b.len() as u64 > max => {
                return Outcome::Reject(response_too_large(max))
            }
            other => *res.body_mut() = other.capped(max),
        }
        Outcome::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{exchange, plain};
    use http_body_util::BodyExt;

    fn limit(n: i64) -> Limit {
        Limit::compile(LimitSettings { max_body_length: n }, &plain()).unwrap()
    }

    fn rejected(o: Outcome) -> Problem {
        match o {
            Outcome::Reject(p) => p,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn content_length_over_the_limit_is_refused() {
        let l = limit(10);
        let mut ex = exchange("POST", "/", &[("content-length", "11")], "");
        let p = rejected(l.on_request(&mut ex));
        assert_eq!(p.status, 413);
        assert_eq!(p.kind(), "body-too-large");
        assert_eq!(
            p.detail.as_deref(),
            Some("Message bodies must be smaller than 10 bytes.")
        );
        let mut ex = exchange("POST", "/", &[("content-length", "10")], "");
        assert!(matches!(l.on_request(&mut ex), Outcome::Continue));
    }

    #[test]
    fn a_body_in_memory_is_measured() {
        let l = limit(3);
        let mut ex = exchange("POST", "/", &[], "four");
        assert_eq!(rejected(l.on_request(&mut ex)).status, 413);
        let mut ex = exchange("POST", "/", &[], "abc");
        assert!(matches!(l.on_request(&mut ex), Outcome::Continue));
        assert_eq!(ex.request_bytes().unwrap().as_ref(), b"abc");
    }

    /// A body streamed in the given chunks.
    struct Chunks(std::collections::VecDeque<bytes::Bytes>);

    impl http_body::Body for Chunks {
        type Data = bytes::Bytes;
        type Error = turnpike_core::body::BodyError;

        fn poll_frame(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
            std::task::Poll::Ready(
                self.get_mut()
                    .0
                    .pop_front()
                    .map(|b| Ok(http_body::Frame::data(b))),
            )
        }
    }

    fn stream(chunks: &[&'static str]) -> Body {
        Body::stream(Chunks(
            chunks
                .iter()
                .map(|c| bytes::Bytes::from_static(c.as_bytes()))
                .collect(),
        ))
    }

    #[tokio::test]
    async fn a_streamed_body_fails_past_the_limit_and_passes_under_it() {
        let l = limit(5);
        let mut ex = exchange("POST", "/", &[], "");
        ex.request_body = stream(&["abc", "def"]);
        assert!(matches!(l.on_request(&mut ex), Outcome::Continue));
        let e = std::mem::take(&mut ex.request_body)
            .collect()
            .await
            .unwrap_err();
        assert!(e
            .downcast_ref::<turnpike_core::body::BodyTooLarge>()
            .is_some());
        let mut ex = exchange("POST", "/", &[], "");
        ex.request_body = stream(&["ab", "cde"]);
        assert!(matches!(l.on_request(&mut ex), Outcome::Continue));
        let b = std::mem::take(&mut ex.request_body)
            .collect()
            .await
            .unwrap()
            .to_bytes();
        assert_eq!(b.as_ref(), b"abcde");
    }

    #[test]
    fn the_inspector_counts_chunks() {
        let mut i = limit(5).body_inspector().unwrap();
        assert!(i.chunk(b"abc").is_ok());
        assert!(i.chunk(b"de").is_ok());
        assert_eq!(i.chunk(b"f").unwrap_err().status, 413);
        assert!(limit(-1).body_inspector().is_none());
    }

    #[test]
    fn responses_over_the_limit_are_bad_gateway() {
        let l = limit(4);
        let mut ex = exchange("GET", "/", &[], "");
        ex.response = Some(
            http::Response::builder()
                .header("content-length", "5")
                .body(Body::Empty)
                .unwrap(),
        );
        let p = rejected(l.on_response(&mut ex));
        assert_eq!(p.status, 502);
        assert_eq!(p.kind(), "upstream-error");
        ex.response = Some(http::Response::new(Body::full("12345")));
        assert_eq!(rejected(l.on_response(&mut ex)).status, 502);
        ex.response = Some(http::Response::new(Body::full("1234")));
        assert!(matches!(l.on_response(&mut ex), Outcome::Continue));
        // The gateway's own problem answers pass.
        ex.response = Some(
            turnpike_core::Problem::new(&problems::BODY_TOO_LARGE)
                .with_detail("x".repeat(100))
                .into_response(),
        );
        assert!(matches!(l.on_response(&mut ex), Outcome::Continue));
        // HEAD announces a length without a body.
        let mut ex = exchange("HEAD", "/", &[], "");
        ex.response = Some(
            http::Response::builder()
                .header("content-length", "500")
                .body(Body::Empty)
                .unwrap(),
        );
        assert!(matches!(l.on_response(&mut ex), Outcome::Continue));
    }

    #[test]
    fn off_and_settings() {
        let l = limit(-1);
        let mut ex = exchange("POST", "/", &[("content-length", "999999")], "");
        assert!(matches!(l.on_request(&mut ex), Outcome::Continue));
        let zero = limit(0);
        let mut ex = exchange("POST", "/", &[], "x");
        assert_eq!(rejected(zero.on_request(&mut ex)).status, 413);
        assert!(Limit::compile(
            LimitSettings {
                max_body_length: -2
            },
            &plain()
        )
        .is_err());
        assert!(serde_json::from_value::<LimitSettings>(serde_json::json!({"max": 1})).is_err());
        assert_eq!(
            serde_json::from_value::<LimitSettings>(serde_json::json!({}))
                .unwrap()
                .max_body_length,
            -1
        );
    }
}
