//! The request body: taken on with its announced size checked and its pauses bounded
//! ([`read`]), and read into memory for chains that need it: up to a limit (413 past it, 400
//! when the peer breaks off, 408 when it is too slow), feeding the chain's body inspectors as
//! it arrives.

use http::header;
use http::HeaderValue;
use hyper::body::Incoming;
use turnpike_core::body::BodyTooLarge;
use turnpike_core::{problems, Body, BodyInspected, BodyInspector, Chain, Exchange, Problem};
use turnpike_snapshot::Settings;

use crate::slow::{BodyTimeout, TimedBody};

/// Read body: the request body as it goes on, with its announced size checked and its
/// pauses bounded; a chunked body on GET or HEAD is read whole (`parts` gets its length).
/// `None` (a body routing already read) is an empty body.
pub(crate) async fn read(
    settings: &Settings,
    parts: &mut http::request::Parts,
    body: Option<Incoming>,
) -> Result<Body, Problem> {
    let Some(body) = body else {
        return Ok(Body::Empty);
    };
    // Request body limit: announced sizes are checked now, streamed ones as they arrive.
    let limit = settings.max_body_size;
    let announced = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let body = match announced {
        Some(n) if n > limit => {
            return Err(Problem::new(&problems::BODY_TOO_LARGE)
                .with_detail(format!("the body has {n} bytes; the limit is {limit}")));
        }
        Some(_) => Body::Incoming(body),
        None if http_body::Body::is_end_stream(&body) => Body::Empty,
        None => Body::Limited {
            inner: body,
            remaining: limit,
        },
    };
    let body = TimedBody::wrap(body, settings.body_read_timeout);
    let may_trail = announced.is_none() || parts.version == http::Version::HTTP_2;
    let body = turnpike_core::body::Trailers::filter(body, may_trail, settings.forward_trailers);
    // A streamed (chunked) body on GET or HEAD would not be sent on by the HTTP/1.1 client
    // (those methods get no implicit body framing), so such a body is read in full first: it is
    // forwarded with a Content-Length, and malformed chunked framing is refused here instead of
    // being silently dropped.
    if matches!(parts.method, http::Method::GET | http::Method::HEAD)
        && parts.headers.contains_key(header::TRANSFER_ENCODING)
    {
        let bytes = Box::pin(buffer(body, limit)).await?;
        parts.headers.remove(header::TRANSFER_ENCODING);
        parts
            .headers
            .insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
        return Ok(Body::Full(Some(bytes)));
    }
    Ok(body)
}

/// Reads the request body into memory for a chain that needs it, feeding the chain's body
/// inspectors as it arrives (the first inspector's error is the answer).
pub(crate) async fn buffer_body(
    chain: &Chain,
    ex: &mut Exchange,
    limit: u64,
) -> Result<(), Problem> {
    // A coded body or one in another charset is decoded by the policies once it is in memory.
    let mut inspectors = if turnpike_core::decode::is_identity(&ex.request.headers) {
        chain.body_inspectors()
    } else {
        Vec::new()
    };
    let body = std::mem::take(&mut ex.request_body);
    let bytes = if inspectors.is_empty() {
        Box::pin(buffer(body, limit)).await?
    } else {
        Box::pin(buffer_inspected(body, limit, &mut inspectors)).await?
    };
    ex.request_body = Body::Full(Some(bytes));
    if !inspectors.is_empty() {
        ex.extensions.insert(BodyInspected);
    }
    Ok(())
}

/// Reads a whole body into memory, failing with 413 past `limit` bytes and 400 when the peer
/// breaks off.
pub(crate) async fn buffer(body: Body, limit: u64) -> Result<bytes::Bytes, Problem> {
    use http_body_util::BodyExt;
    match body.capped(limit).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) => Err(read_error(&e, limit)),
    }
}

fn read_error(e: &turnpike_core::body::BodyError, limit: u64) -> Problem {
    if e.downcast_ref::<BodyTimeout>().is_some() {
        Problem::new(&problems::BODY_TIMEOUT)
            .with_header(header::CONNECTION, HeaderValue::from_static("close"))
    } else if e.downcast_ref::<BodyTooLarge>().is_some() {
        Problem::new(&problems::BODY_TOO_LARGE)
            .with_detail(format!("the body exceeds the limit of {limit} bytes"))
    } else {
        tracing::debug!("request body: {e}");
        Problem::new(&problems::BAD_BODY)
            .with_detail("the body broke off or its chunked framing is invalid")
    }
}

/// Like [`buffer`], feeding every chunk to the chain's body inspectors as it arrives; the first
/// inspector's error stops reading.
async fn buffer_inspected(
    body: Body,
    limit: u64,
    inspectors: &mut [Box<dyn BodyInspector>],
) -> Result<bytes::Bytes, Problem> {
    use http_body_util::BodyExt;
    let mut body = body.capped(limit);
    let mut first: Option<bytes::Bytes> = None;
    let mut rest = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| read_error(&e, limit))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        for i in inspectors.iter_mut() {
            i.chunk(&data).map_err(|p| *p)?;
        }
        // A body in one chunk (the usual case) is kept without copying.
        match &first {
            None if rest.is_empty() => first = Some(data),
            _ => {
                if let Some(f) = first.take() {
                    rest.extend_from_slice(&f);
                }
                rest.extend_from_slice(&data);
            }
        }
    }
    for i in inspectors.iter_mut() {
        i.end().map_err(|p| *p)?;
    }
    Ok(match first {
        Some(f) => f,
        None => rest.freeze(),
    })
}
