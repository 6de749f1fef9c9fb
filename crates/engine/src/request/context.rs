//! What a request is known by before its API runs: whether it asks to switch protocols, its
//! request id, and the exchange the policies see.

use http::header;
use http::{HeaderValue, Request, Version};
use hyper::body::Incoming;
use turnpike_core::exchange::{ClientCertificate, PathParams};
use turnpike_core::{Body, Exchange};
use turnpike_snapshot::Settings;

use super::observe::Observers;
use super::{RequestContext, Served};

/// True for an HTTP/1.1 request asking to switch protocols (WebSocket and others).
pub(super) fn is_upgrade(req: &Request<Incoming>) -> bool {
    req.version() == Version::HTTP_11
        && req.headers().contains_key(header::UPGRADE)
        && req
            .headers()
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// Request ids made at once by a worker: one allocation serves this many requests (each id's
/// header value is a slice of it).
const IDS_PER_BATCH: u64 = 64;
/// Hex digits of a request id.
const ID_LEN: usize = 20;

/// The request id of an exchange: the trusted one the request carries, or a new one. A new
/// id is a per-process random prefix and a per-worker counter (the worker's index in its top
/// bits), in 20 hex digits: unique in the process, and across restarts with high likelihood.
pub(super) fn request_id(req: &Request<Incoming>, settings: &Settings) -> HeaderValue {
    use std::cell::{Cell, RefCell};
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    if settings.trust_incoming_request_id {
        if let Some(v) = req.headers().get(&settings.request_id_header) {
            let ok = !v.is_empty()
                && v.len() <= 200
                && v.as_bytes().iter().all(|b| b.is_ascii_graphic());
            if ok {
                return v.clone();
            }
        }
    }
    static PREFIX: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    static WORKERS: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        static NEXT: Cell<u64> = Cell::new(WORKERS.fetch_add(1, Ordering::Relaxed) << 40);
        static BATCH: RefCell<bytes::Bytes> = const { RefCell::new(bytes::Bytes::new()) };
    }
    let n = NEXT.with(|c| {
        let n = c.get();
        c.set(n.wrapping_add(1));
        n
    });
    let slot = (n % IDS_PER_BATCH) as usize;
    let ids = BATCH.with(|b| {
        let mut b = b.borrow_mut();
        if slot == 0 || b.is_empty() {
            let prefix = *PREFIX.get_or_init(|| {
                std::collections::hash_map::RandomState::new()
                    .build_hasher()
                    .finish() as u32
            });
            let digits = b"0123456789abcdef";
            let mut text = Vec::with_capacity(ID_LEN * IDS_PER_BATCH as usize);
            for i in 0..IDS_PER_BATCH {
                let id = (n - slot as u64 + i) & 0xffff_ffff_ffff;
                let word = (u128::from(prefix) << 48) | u128::from(id);
                text.extend(
                    (0..ID_LEN).map(|d| digits[((word >> (4 * (ID_LEN - 1 - d))) & 0xf) as usize]),
                );
            }
            *b = bytes::Bytes::from(text);
        }
        b.clone()
    });
    HeaderValue::from_maybe_shared(ids.slice(slot * ID_LEN..(slot + 1) * ID_LEN))
        .unwrap_or(HeaderValue::from_static("0"))
}

/// The exchange the policies see: the request head and body, the client, the request id, the
/// client certificate's subject; the console's capture and the trace's step times when those
/// observers are on.
#[inline]
pub(super) fn exchange(
    parts: http::request::Parts,
    body: Body,
    params: PathParams,
    ctx: &RequestContext<'_>,
    served: &Served,
    observed: &Observers,
) -> Exchange {
    let mut ex = Exchange::new(parts, body, ctx.conn.peer, params);
    ex.tls = ctx.conn.tls;
    ex.request_id = served.request_id.clone();
    if observed.trace.is_some() {
        ex.step_times = Some(Vec::new());
    }
    if let Some(s) = &observed.stored {
        ex.request_body = std::mem::take(&mut ex.request_body).tee(&s.request_body);
    }
    if let Some(subject) = &ctx.conn.client_cert {
        ex.extensions.insert(ClientCertificate {
            subject: subject.to_string(),
        });
    }
    ex
}
