//! The store of recent exchanges (Membrane's "exchanges" view in the console): each worker
//! keeps the last `size` exchanges in a ring of its own (no lock shared between workers on
//! the request path); the admin API merges the rings, newest first. An exchange keeps its
//! method, URI, status, timing, node, headers and the first bytes of both bodies, captured as
//! they stream. Secrets are redacted when the exchange is recorded: `Authorization`,
//! `Proxy-Authorization`, `Cookie`, `Set-Cookie`, and the headers and query parameters the
//! API's policies read keys from.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use http::{HeaderMap, HeaderName};
use turnpike_core::body::Capture;
use turnpike_core::policy::SecretFields;

/// What redacted values read as.
pub const REDACTED: &str = "<redacted>";

/// One recorded exchange.
#[derive(Debug)]
pub struct Record {
    /// The request id.
    pub id: String,
    /// When the request arrived (milliseconds since the Unix epoch).
    pub time_ms: u64,
    /// The API that took it.
    pub api: Option<Arc<str>>,
    /// The method.
    pub method: String,
    /// Path and query (secret parameters redacted).
    pub uri: String,
    /// The status sent.
    pub status: u16,
    /// Time to the response head, in microseconds.
    pub duration_us: u64,
    /// The node that answered.
    pub node: Option<Arc<str>>,
    /// The client's address.
    pub client: IpAddr,
    /// Request headers (secrets redacted).
    pub request_headers: Vec<(String, String)>,
    /// Response headers (secrets redacted).
    pub response_headers: Vec<(String, String)>,
    /// The start of the request body.
    pub request_body: Capture,
    /// The start of the response body.
    pub response_body: Capture,
    /// The gateway's own error, if it answered with one.
    pub error: Option<&'static str>,
}

struct Ring {
    items: Mutex<VecDeque<Arc<Record>>>,
}

static RINGS: Mutex<Vec<Arc<Ring>>> = Mutex::new(Vec::new());

thread_local! {
    static MINE: RefCell<Option<Arc<Ring>>> = const { RefCell::new(None) };
}

/// Records an exchange in this thread's ring, keeping the last `size`.
pub fn push(size: usize, record: Record) {
    MINE.with(|m| {
        let mut m = m.borrow_mut();
        let ring = m.get_or_insert_with(|| {
            let ring = Arc::new(Ring {
                items: Mutex::new(VecDeque::new()),
            });
            RINGS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Arc::clone(&ring));
            ring
        });
        let mut items = ring.items.lock().unwrap_or_else(|e| e.into_inner());
        while items.len() >= size.max(1) {
            items.pop_front();
        }
        items.push_back(Arc::new(record));
    });
}

/// The most recent exchanges that pass `keep`, newest first, at most `limit`.
pub fn recent(limit: usize, keep: impl Fn(&Record) -> bool) -> Vec<Arc<Record>> {
    let rings = RINGS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut all: Vec<Arc<Record>> = Vec::new();
    for r in rings {
        let items = r.items.lock().unwrap_or_else(|e| e.into_inner());
        // Newest first within a ring, so that exchanges of the same millisecond keep their
        // order through the stable sort below.
        all.extend(items.iter().rev().filter(|x| keep(x)).cloned());
    }
    all.sort_by_key(|r| std::cmp::Reverse(r.time_ms));
    all.truncate(limit);
    all
}

/// The exchange with request id `id`, while it is still kept.
pub fn find(id: &str) -> Option<Arc<Record>> {
    let rings = RINGS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    rings.iter().find_map(|r| {
        r.items
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|x| x.id == id)
            .cloned()
    })
}

/// Forgets every exchange (when the store is turned off).
pub fn clear() {
    for r in RINGS.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        r.items.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

const ALWAYS_SECRET: [HeaderName; 4] = [
    http::header::AUTHORIZATION,
    http::header::PROXY_AUTHORIZATION,
    http::header::COOKIE,
    http::header::SET_COOKIE,
];

/// Headers as name/value text, with secret ones redacted.
pub fn redacted_headers(headers: &HeaderMap, secrets: &SecretFields) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(name, value)| {
            let secret = ALWAYS_SECRET.contains(name) || secrets.headers.contains(name);
            let v = if secret {
                REDACTED.to_owned()
            } else {
                String::from_utf8_lossy(value.as_bytes()).into_owned()
            };
            (name.as_str().to_owned(), v)
        })
        .collect()
}

/// A path and query with the values of secret parameters redacted.
pub fn redacted_uri(pq: &str, secrets: &SecretFields) -> String {
    let Some((path, query)) = pq.split_once('?') else {
        return pq.to_owned();
    };
    if secrets.query.is_empty() {
        return pq.to_owned();
    }
    let parts: Vec<String> = query
        .split('&')
        .map(|pair| {
            let name = pair.split('=').next().unwrap_or("");
            let decoded = percent_encoding::percent_decode_str(name).decode_utf8_lossy();
            if secrets.query.iter().any(|q| *q == decoded) {
                format!("{name}={REDACTED}")
            } else {
                pair.to_owned()
            }
        })
        .collect();
    format!("{path}?{}", parts.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_redacted() {
        let secrets = SecretFields {
            headers: vec![HeaderName::from_static("x-api-key")],
            query: vec!["key".into()],
        };
        let mut h = HeaderMap::new();
        h.insert("authorization", "Bearer s3cret".parse().unwrap());
        h.insert("x-api-key", "k-1".parse().unwrap());
        h.insert("accept", "*/*".parse().unwrap());
        let r = redacted_headers(&h, &secrets);
        assert!(r.contains(&("authorization".into(), REDACTED.into())));
        assert!(r.contains(&("x-api-key".into(), REDACTED.into())));
        assert!(r.contains(&("accept".into(), "*/*".into())));
        assert_eq!(
            redacted_uri("/a?x=1&key=k-1&k%65y=k-2", &secrets),
            "/a?x=1&key=<redacted>&k%65y=<redacted>"
        );
        assert_eq!(redacted_uri("/a", &secrets), "/a");
    }

    #[test]
    fn rings_keep_the_last_and_merge_newest_first() {
        let rec = |id: &str, t: u64| Record {
            id: id.into(),
            time_ms: t,
            api: None,
            method: "GET".into(),
            uri: "/".into(),
            status: 200,
            duration_us: 1,
            node: None,
            client: IpAddr::from([127, 0, 0, 1]),
            request_headers: Vec::new(),
            response_headers: Vec::new(),
            request_body: Capture::default(),
            response_body: Capture::default(),
            error: None,
        };
        std::thread::spawn(move || {
            for i in 0..5 {
                push(3, rec(&format!("ring-test-{i}"), 1_000 + i));
            }
        })
        .join()
        .unwrap();
        let ids: Vec<String> = recent(10, |r| r.id.starts_with("ring-test-"))
            .iter()
            .map(|r| r.id.clone())
            .collect();
        assert_eq!(ids, vec!["ring-test-4", "ring-test-3", "ring-test-2"]);
        assert!(find("ring-test-3").is_some());
        assert!(find("ring-test-0").is_none());
    }
}
