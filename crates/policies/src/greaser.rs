//! `greaser`: Membrane's API-greasing policy, which changes messages in ways a tolerant reader
//! must accept, so that clients and services that depend on what they should not are found
//! early. In the phase it runs in it picks a share (`rate`) of the messages; for each, the first
//! strategy for the message's content type changes the body and the header `X-Grease` says how.
//!
//! The one strategy, `greaseJson`, works on JSON bodies (`application/json`, `*+json`) whose
//! root is an object: it adds `"grease": "Field added by Membrane's Grease plugin"` to every
//! object (nested ones and those in arrays too) and reorders the members of every object of two
//! or more members at random, always into an order other than the one it had. The body is
//! written compactly. Other bodies pass unchanged; the policy never rejects.

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::{Body, BodyInspected, BodyNeed, CompileContext, CompileError};
use turnpike_core::{Exchange, Outcome, Policy, PolicyFactory};

use crate::ordered_json::Json;

/// The header that says how a message was greased.
static X_GREASE: HeaderName = HeaderName::from_static("x-grease");

/// The member `greaseJson` adds to every object.
const GREASE_KEY: &str = "grease";
const GREASE_VALUE: &str = "Field added by Membrane's Grease plugin";

/// `greaser`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GreaserSettings {
    /// The share of messages greased, from 0 (none) to 1 (all); values outside are clamped.
    #[serde(default = "one")]
    pub rate: f64,
    /// The strategies, in order: the first one for the message's content type greases it.
    #[serde(default)]
    pub strategies: Vec<GreaseStrategy>,
}

fn one() -> f64 {
    1.0
}

fn yes() -> bool {
    true
}

/// One way of greasing.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub enum GreaseStrategy {
    /// Greases JSON bodies.
    #[serde(rename = "greaseJson", alias = "json")]
    GreaseJson(GreaseJsonSettings),
}

/// `greaseJson`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GreaseJsonSettings {
    /// Reorder the members of every object at random.
    #[serde(default = "yes")]
    pub shuffle_fields: bool,
    /// Add a `grease` member to every object (Membrane's older `addAdditionalFields`).
    #[serde(default = "yes", alias = "addAdditionalFields")]
    pub additional_properties: bool,
}

/// A compiled JSON strategy.
#[derive(Debug)]
struct JsonGrease {
    shuffle: bool,
    add: bool,
    /// What `X-Grease` says.
    changes: Option<HeaderValue>,
}

/// The compiled `greaser` policy.
#[derive(Debug)]
pub struct Greaser {
    rate: f64,
    strategies: Vec<JsonGrease>,
}

impl PolicyFactory for Greaser {
    const NAME: &'static str = "greaser";
    type Settings = GreaserSettings;

    /// Returns the policy (its settings cannot be wrong once parsed).
    fn compile(s: GreaserSettings, _: &CompileContext<'_>) -> Result<Self, CompileError> {
        let strategies = s
            .strategies
            .into_iter()
            .map(|GreaseStrategy::GreaseJson(j)| {
                let text = match (j.shuffle_fields, j.additional_properties) {
                    (true, true) => Some("JSON fields shuffled, Added random JSON fields"),
                    (true, false) => Some("JSON fields shuffled"),
                    (false, true) => Some("Added random JSON fields"),
                    (false, false) => None,
                };
                JsonGrease {
                    shuffle: j.shuffle_fields,
                    add: j.additional_properties,
                    changes: text.map(HeaderValue::from_static),
                }
            })
            .collect();
        Ok(Greaser {
            // NaN greases nothing, as in Membrane.
            rate: if s.rate.is_nan() {
                0.0
            } else {
                s.rate.clamp(0.0, 1.0)
            },
            strategies,
        })
    }
}

/// A small pseudo-random generator (SplitMix64) seeded from the operating system for each
/// message: greasing needs variety, not secrecy.
struct Rng(u64);

impl Rng {
    fn seeded() -> Rng {
        let mut seed = [0u8; 8];
        if getrandom::fill(&mut seed).is_err() {
            // Still varied: the clock's nanoseconds.
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            seed = u64::from(nanos).to_le_bytes();
        }
        Rng(u64::from_le_bytes(seed))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A number in `0..n` (`n` > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Reorders `members` at random into an order other than the one they have; objects of fewer
/// than two members stay as they are (Membrane loops forever on them).
fn shuffle(members: &mut Vec<(String, Json)>, rng: &mut Rng) {
    let n = members.len();
    if n < 2 {
        return;
    }
    let mut order: Vec<usize> = (0..n).collect();
    // Each shuffle is the same order again with probability 1/n! ≤ 1/2.
    for _ in 0..64 {
        for i in (1..n).rev() {
            order.swap(i, rng.below(i + 1));
        }
        if order.iter().enumerate().any(|(i, &o)| i != o) {
            break;
        }
    }
    if order.iter().enumerate().all(|(i, &o)| i == o) {
        order.swap(0, 1);
    }
    let mut slots: Vec<Option<(String, Json)>> = members.drain(..).map(Some).collect();
    members.extend(
        order
            .into_iter()
            .filter_map(|i| slots.get_mut(i).and_then(Option::take)),
    );
}

impl JsonGrease {
    /// Greases `node` and everything in it.
    fn walk(&self, node: &mut Json, rng: &mut Rng) {
        match node {
            Json::Object(members) => {
                if self.add {
                    match members.iter_mut().rev().find(|(k, _)| k == GREASE_KEY) {
                        Some((_, v)) => *v = Json::String(GREASE_VALUE.to_owned()),
                        None => members
                            .push((GREASE_KEY.to_owned(), Json::String(GREASE_VALUE.to_owned()))),
                    }
                }
                if self.shuffle {
                    shuffle(members, rng);
                }
                for (_, v) in members.iter_mut() {
                    self.walk(v, rng);
                }
            }
            Json::Array(items) => {
                for v in items {
                    self.walk(v, rng);
                }
            }
            _ => {}
        }
    }

    /// The greased body, or `None` when it is not a JSON object.
    fn apply(&self, body: &[u8], rng: &mut Rng) -> Option<Vec<u8>> {
        let mut doc = Json::parse(body)?;
        if !matches!(doc, Json::Object(_)) {
            return None;
        }
        self.walk(&mut doc, rng);
        doc.to_vec()
    }
}

fn is_json(headers: &http::HeaderMap) -> bool {
    let Some(ct) = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let mime = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    mime == "application/json" || mime.ends_with("+json")
}

impl Greaser {
    /// The greased body and what `X-Grease` says, or `None` to leave the message as it is.
    fn grease(
        &self,
        headers: &http::HeaderMap,
        body: Option<&Bytes>,
        rng: &mut Rng,
    ) -> Option<(Vec<u8>, Option<HeaderValue>)> {
        if self.rate <= rng.unit() {
            return None;
        }
        let strategy = self.strategies.first().filter(|_| is_json(headers))?;
        let out = strategy.apply(body?, rng)?;
        Some((out, strategy.changes.clone()))
    }
}

impl Policy for Greaser {
    fn name(&self) -> &'static str {
        "greaser"
    }

    fn body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    fn response_body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    fn response_needs_request(&self) -> bool {
        false
    }

    /// Greases the request (at the configured rate); always continues.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let mut rng = Rng::seeded();
        let Some((body, changes)) = self.grease(&ex.request.headers, ex.request_bytes(), &mut rng)
        else {
            return Outcome::Continue;
        };
        ex.request_body = Body::full(Bytes::from(body));
        ex.request.headers.remove(http::header::CONTENT_LENGTH);
        if let Some(v) = changes {
            ex.request.headers.append(X_GREASE.clone(), v);
        }
        turnpike_core::json::forget_request_json(ex);
        ex.extensions.remove::<BodyInspected>();
        Outcome::Continue
    }

    /// Greases the response (at the configured rate); always continues.
    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        let mut rng = Rng::seeded();
        let greased = match ex.response.as_ref() {
            Some(res) => self.grease(res.headers(), ex.response_bytes(), &mut rng),
            None => None,
        };
        let (Some((body, changes)), Some(res)) = (greased, ex.response.as_mut()) else {
            return Outcome::Continue;
        };
        *res.body_mut() = Body::full(Bytes::from(body));
        res.headers_mut().remove(http::header::CONTENT_LENGTH);
        if let Some(v) = changes {
            res.headers_mut().append(X_GREASE.clone(), v);
        }
        turnpike_core::json::forget_response_json(ex);
        Outcome::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{exchange, plain};

    fn greaser(v: serde_json::Value) -> Greaser {
        let s: GreaserSettings = serde_json::from_value(v).unwrap();
        Greaser::compile(s, &plain()).unwrap()
    }

    fn both() -> Greaser {
        greaser(serde_json::json!({"strategies": [{"greaseJson": {}}]}))
    }

    fn run(g: &Greaser, body: &str) -> Option<Json> {
        let mut h = http::HeaderMap::new();
        h.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let (out, _) = g.grease(&h, Some(&Bytes::from(body.to_owned())), &mut Rng::seeded())?;
        Json::parse(&out)
    }

    fn keys(j: &Json) -> Vec<&str> {
        match j {
            Json::Object(m) => m.iter().map(|(k, _)| k.as_str()).collect(),
            _ => Vec::new(),
        }
    }

    #[test]
    fn grease_goes_into_every_object_nested_and_in_arrays() {
        let g =
            greaser(serde_json::json!({"strategies": [{"greaseJson": {"shuffleFields": false}}]}));
        let out = run(
            &g,
            r#"{"a":{"b":{}},"list":[{"x":1},[{"y":2}],3],"s":"t","grease":0}"#,
        )
        .unwrap();
        let v = out.to_value();
        assert_eq!(v["grease"], GREASE_VALUE);
        assert_eq!(v["a"]["grease"], GREASE_VALUE);
        assert_eq!(v["a"]["b"]["grease"], GREASE_VALUE);
        assert_eq!(v["list"][0]["grease"], GREASE_VALUE);
        assert_eq!(v["list"][1][0]["grease"], GREASE_VALUE);
        assert_eq!(v["list"][2], 3);
        // Without shuffling the order stays; an existing `grease` member is overwritten.
        assert_eq!(keys(&out), ["a", "list", "s", "grease"]);
    }

    #[test]
    fn the_order_of_members_always_changes() {
        let g = greaser(
            serde_json::json!({"strategies": [{"greaseJson": {"additionalProperties": false}}]}),
        );
        for _ in 0..100 {
            let out = run(&g, r#"{"a":1,"b":2,"c":{"d":1,"e":2}}"#).unwrap();
            assert_ne!(keys(&out), ["a", "b", "c"]);
            let mut sorted = keys(&out);
            sorted.sort_unstable();
            assert_eq!(sorted, ["a", "b", "c"]);
            let c = match &out {
                Json::Object(m) => m.iter().find(|(k, _)| k == "c").map(|(_, v)| v).unwrap(),
                _ => unreachable!(),
            };
            assert_eq!(keys(c), ["e", "d"]);
        }
    }

    #[test]
    fn objects_of_zero_or_one_member_end() {
        let g = greaser(
            serde_json::json!({"strategies": [{"greaseJson": {"additionalProperties": false}}]}),
        );
        let out = run(&g, r#"{"only":{},"x":[{}]}"#).unwrap();
        assert_eq!(out.to_value(), serde_json::json!({"only": {}, "x": [{}]}));
        assert_eq!(run(&g, "{}").unwrap(), Json::Object(Vec::new()));
        assert_eq!(keys(&run(&g, r#"{"a":1}"#).unwrap()), ["a"]);
        // With the grease member an empty object has one member, and ends too.
        assert_eq!(
            run(&both(), "{}").unwrap().to_value(),
            serde_json::json!({"grease": GREASE_VALUE})
        );
    }

    #[test]
    fn rate_zero_never_greases_and_other_bodies_pass() {
        let g = greaser(serde_json::json!({"rate": 0, "strategies": [{"greaseJson": {}}]}));
        for _ in 0..100 {
            assert!(run(&g, r#"{"a":1,"b":2}"#).is_none());
        }
        let g = greaser(serde_json::json!({"rate": -3, "strategies": [{"json": {}}]}));
        assert!(run(&g, r#"{"a":1,"b":2}"#).is_none());
        let g = greaser(serde_json::json!({"rate": 7, "strategies": [{"greaseJson": {}}]}));
        assert!(run(&g, r#"{"a":1,"b":2}"#).is_some());
        // A rate of one half greases some and leaves some.
        let g = greaser(serde_json::json!({"rate": 0.5, "strategies": [{"greaseJson": {}}]}));
        let greased = (0..400).filter(|_| run(&g, r#"{"a":1}"#).is_some()).count();
        assert!((100..300).contains(&greased), "{greased}");
        // Not an object, not JSON, no strategy.
        assert!(run(&both(), "[{\"a\":1}]").is_none());
        assert!(run(&both(), "{\"a\":").is_none());
        assert!(run(&greaser(serde_json::json!({})), r#"{"a":1}"#).is_none());
    }

    #[test]
    fn the_header_says_what_changed_and_only_json_is_greased() {
        let g = both();
        let mut ex = exchange(
            "POST",
            "/",
            &[("content-type", "application/vnd.x+json; charset=utf-8")],
            r#"{"a":1,"b":2}"#,
        );
        g.on_request(&mut ex);
        assert_eq!(
            ex.request.headers.get("x-grease").unwrap(),
            "JSON fields shuffled, Added random JSON fields"
        );
        let v: serde_json::Value = serde_json::from_slice(ex.request_bytes().unwrap()).unwrap();
        assert_eq!(v["grease"], GREASE_VALUE);
        let mut ex = exchange("POST", "/", &[("content-type", "text/plain")], r#"{"a":1}"#);
        g.on_request(&mut ex);
        assert!(ex.request.headers.get("x-grease").is_none());
        assert_eq!(ex.request_bytes().unwrap().as_ref(), br#"{"a":1}"#);
        let only_add =
            greaser(serde_json::json!({"strategies": [{"greaseJson": {"shuffleFields": false}}]}));
        let mut ex = exchange("POST", "/", &[("content-type", "application/json")], "{}");
        ex.response = Some(
            http::Response::builder()
                .header("content-type", "application/json")
                .body(Body::full(r#"{"z":1}"#))
                .unwrap(),
        );
        only_add.on_response(&mut ex);
        let res = ex.response.as_ref().unwrap();
        assert_eq!(
            res.headers().get("x-grease").unwrap(),
            "Added random JSON fields"
        );
        assert_eq!(
            ex.response_bytes().unwrap().as_ref(),
            br#"{"z":1,"grease":"Field added by Membrane's Grease plugin"}"#
        );
    }

    #[test]
    fn unknown_settings_are_refused() {
        for bad in [
            serde_json::json!({"rate": 1, "strategy": []}),
            serde_json::json!({"strategies": [{"greaseXml": {}}]}),
            serde_json::json!({"strategies": [{"greaseJson": {"shuffle": true}}]}),
        ] {
            assert!(serde_json::from_value::<GreaserSettings>(bad).is_err());
        }
    }
}
