//! `sseDemoStream`: Membrane's demo event source. Answers the request with a
//! `text/event-stream` of `totalEvents` events, the first at once and the next one every
//! `interval`, then ends the stream: a server to try event streaming through the gateway with
//! (a flow in front of it must pass events on as they come, not buffer them).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{header, HeaderValue, Response};
use http_body::Frame;
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::body::BodyError;
use turnpike_core::{Body, CompileContext, CompileError, Exchange, Outcome, Phases};
use turnpike_core::{Policy, PolicyFactory};

use crate::err;

/// `sseDemoStream`'s settings.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SseDemoStreamSettings {
    /// How many events the stream sends before it ends (1 to 100,000; default 10).
    #[serde(default = "ten")]
    pub total_events: u32,
    /// The time between two events (default 1s; at least 10ms).
    #[serde(default)]
    pub interval: Option<turnpike_config::units::Duration>,
}

fn ten() -> u32 {
    10
}

/// The compiled `sseDemoStream` policy.
#[derive(Debug)]
pub struct SseDemoStream {
    total: u32,
    interval: Duration,
}

impl PolicyFactory for SseDemoStream {
    const NAME: &'static str = "sseDemoStream";
    const PHASES: Phases = Phases::REQUEST;
    const ANSWERS: bool = true;
    type Settings = SseDemoStreamSettings;

    /// Checks the count and the interval.
    fn compile(s: SseDemoStreamSettings, _: &CompileContext<'_>) -> Result<Self, CompileError> {
        if !(1..=100_000).contains(&s.total_events) {
            return Err(err("totalEvents", "must be 1 to 100000"));
        }
        let interval = s.interval.map_or(Duration::from_secs(1), |d| d.0);
        if interval < Duration::from_millis(10) {
            return Err(err("interval", "must be at least 10ms"));
        }
        Ok(SseDemoStream {
            total: s.total_events,
            interval,
        })
    }
}

/// The stream of events: event `next` is sent when `wait` (if any) has passed.
struct Events {
    next: u32,
    total: u32,
    interval: Duration,
    wait: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// One event: its number as `id`, and JSON data with the number, the total and the time.
fn event(n: u32, total: u32) -> Bytes {
    let time = httpdate::fmt_http_date(SystemTime::now());
    Bytes::from(format!(
        "id: {n}\nevent: demo\ndata: {{\"event\":{n},\"of\":{total},\"time\":\"{time}\"}}\n\n"
    ))
}

impl http_body::Body for Events {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        if this.next > this.total {
            return Poll::Ready(None);
        }
        if this.next > 1 {
            let wait = this
                .wait
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(this.interval)));
            if wait.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.wait = None;
        }
        let e = event(this.next, this.total);
        this.next += 1;
        Poll::Ready(Some(Ok(Frame::data(e))))
    }

    fn is_end_stream(&self) -> bool {
        self.next > self.total
    }
}

impl Policy for SseDemoStream {
    fn name(&self) -> &'static str {
        "sseDemoStream"
    }

    /// Answers with the event stream.
    fn on_request(&self, _: &mut Exchange) -> Outcome {
        let mut r = Response::new(Body::stream(Events {
            next: 1,
            total: self.total,
            interval: self.interval,
            wait: None,
        }));
        let h = r.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        Outcome::Respond(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{exchange, plain};
    use http_body_util::BodyExt;

    fn policy(v: serde_json::Value) -> SseDemoStream {
        let s: SseDemoStreamSettings = serde_json::from_value(v).unwrap();
        SseDemoStream::compile(s, &plain()).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn sends_the_events_one_interval_apart_then_ends() {
        let p = policy(serde_json::json!({"totalEvents": 3, "interval": "2s"}));
        let mut ex = exchange("GET", "/stream", &[], "");
        let Outcome::Respond(r) = p.on_request(&mut ex) else {
            panic!("no answer")
        };
        assert_eq!(r.headers()["content-type"], "text/event-stream");
        let mut body = r.into_body();
        let start = tokio::time::Instant::now();
        let mut texts = Vec::new();
        while let Some(f) = body.frame().await {
            let data = f.unwrap().into_data().unwrap();
            texts.push((
                start.elapsed().as_secs(),
                String::from_utf8(data.to_vec()).unwrap(),
            ));
        }
        assert_eq!(texts.len(), 3);
        assert_eq!(texts.iter().map(|(t, _)| *t).collect::<Vec<_>>(), [0, 2, 4]);
        assert!(texts[0]
            .1
            .starts_with("id: 1\nevent: demo\ndata: {\"event\":1,\"of\":3,"));
        assert!(texts[2].1.ends_with("\"}\n\n"));
    }

    #[test]
    fn settings_errors() {
        let compile = |v: serde_json::Value| {
            SseDemoStream::compile(serde_json::from_value(v).unwrap(), &plain())
                .map(|_| ())
                .map_err(|e| e.key)
        };
        assert_eq!(
            compile(serde_json::json!({"totalEvents": 0})),
            Err("totalEvents".into())
        );
        assert_eq!(
            compile(serde_json::json!({"interval": "1ms"})),
            Err("interval".into())
        );
        assert!(compile(serde_json::json!({})).is_ok());
        assert!(
            serde_json::from_value::<SseDemoStreamSettings>(serde_json::json!({"rate": 1}))
                .is_err()
        );
    }
}
