//! Admission to an upstream with a concurrency limit: the request takes a free slot, or waits
//! in its client's queue (keyed by the upstream's `queue.key` template) within the queue
//! timeout, or is shed: 429 `queue-full` when its client's own queue is full, 503 `shed` when
//! it waited too long or was shed to keep the queueing delay down. Both carry `Retry-After`.

use http::header::RETRY_AFTER;
use http::HeaderValue;
use turnpike_core::{problems, Exchange, Problem};
use turnpike_snapshot::admission::{Admit, Permit, Shed};
use turnpike_snapshot::Upstream;

/// A slot of `up`'s limit for `ex` (`None` when the upstream has no limit), or the problem
/// that sheds it. The slot is given back when the permit drops.
pub(super) async fn admit(up: &Upstream, ex: &Exchange) -> Result<Option<Permit>, Problem> {
    let Some(a) = &up.admission else {
        return Ok(None);
    };
    let key = a.settings.key.render(ex);
    let ticket = match a.arrive(&key) {
        Ok(Admit::Now(p)) => return Ok(Some(p)),
        Ok(Admit::Queued(t)) => t,
        Err(why) => return Err(shed(why)),
    };
    match crate::deadline::timeout(a.settings.timeout, ticket.admitted()).await {
        Ok(Ok(p)) => Ok(Some(p)),
        Ok(Err(why)) => Err(shed(why)),
        Err(_) => {
            a.stats.shed(Shed::Timeout);
            Err(shed(Shed::Timeout))
        }
    }
}

/// The answer to a shed request.
fn shed(why: Shed) -> Problem {
    let p = match why {
        Shed::QueueFull => Problem::new(&problems::QUEUE_FULL)
            .with_detail("this client has as many requests waiting for the backend as it may"),
        Shed::Overloaded => Problem::new(&problems::SHED)
            .with_detail("requests wait too long for the backend; the busiest client's are shed"),
        Shed::Timeout => Problem::new(&problems::SHED)
            .with_detail("no slot at the backend freed within the queue timeout"),
    };
    p.with_header(RETRY_AFTER, HeaderValue::from_static("1"))
}
