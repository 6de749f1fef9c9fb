//! Header hygiene for forwarding (RFC 9110 §7.6): hop-by-hop headers are removed in both
//! directions, and the `X-Forwarded-*` headers are added to requests ([`Forwarded`]).

use std::net::IpAddr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use smallvec::SmallVec;

static KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
static PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// The fixed hop-by-hop header names other than `Connection`; true for one of them.
pub fn is_fixed_hop_by_hop(n: &HeaderName) -> bool {
    n == header::TE
        || n == header::TRANSFER_ENCODING
        || n == header::UPGRADE
        || n == header::PROXY_AUTHORIZATION
        || n == KEEP_ALIVE
        || n == PROXY_CONNECTION
}

/// Removes `Connection`, every header it names, and the fixed hop-by-hop headers. One pass over
/// the names finds what is there; only those are removed (each removal hashes a name).
pub fn remove_hop_by_hop(h: &mut HeaderMap) {
    let mut connection = false;
    let mut fixed: SmallVec<[HeaderName; 4]> = SmallVec::new();
    for n in h.keys() {
        if n == header::CONNECTION {
            connection = true;
        } else if is_fixed_hop_by_hop(n) && !fixed.contains(n) {
            fixed.push(n.clone());
        }
    }
    if connection {
        let mut named: SmallVec<[HeaderName; 4]> = SmallVec::new();
        for value in h.get_all(header::CONNECTION) {
            for token in value.as_bytes().split(|b| *b == b',') {
                let token = token.trim_ascii();
                // The connection options themselves name no header (or one removed anyway).
                if token.is_empty()
                    || token.eq_ignore_ascii_case(b"close")
                    || token.eq_ignore_ascii_case(b"keep-alive")
                {
                    continue;
                }
                if let Ok(n) = HeaderName::from_bytes(token) {
                    named.push(n);
                }
            }
        }
        h.remove(header::CONNECTION);
        for n in named {
            h.remove(n);
        }
    }
    for n in fixed {
        h.remove(n);
    }
}

/// The client address as an `X-Forwarded-For` element (IPv4-mapped IPv6 shown as IPv4); built
/// once per connection.
pub fn client_ip_value(client: IpAddr) -> HeaderValue {
    let text = match client {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => v6.to_string(),
        },
        IpAddr::V4(v4) => v4.to_string(),
    };
    HeaderValue::from_str(&text).unwrap_or(HeaderValue::from_static("unknown"))
}

/// The `X-Forwarded-For` (the client appended to any list received), `X-Forwarded-Proto` and
/// `X-Forwarded-Host` (the `Host` the client asked for) of a forwarded request. Built by
/// [`Forwarded::of`] before the `Host` is rewritten; the HTTP/1.1 client writes the fields
/// straight into the encoded request head (no header-map inserts), other transports get them
/// with [`Forwarded::insert_into`].
#[derive(Debug, Clone)]
pub struct Forwarded {
    /// `X-Forwarded-For`.
    pub xff: HeaderValue,
    /// `X-Forwarded-Proto`.
    pub proto: HeaderValue,
    /// `X-Forwarded-Host`; `None` (request without `Host`) leaves a received one as it is.
    pub host: Option<HeaderValue>,
    /// The request id's header and value (replacing a received one).
    pub request_id: Option<(HeaderName, HeaderValue)>,
}

impl Forwarded {
    /// The fields for a request with headers `h` from `client` (see [`client_ip_value`]) over
    /// `proto` (`http` or `https`).
    pub fn of(h: &HeaderMap, client: &HeaderValue, proto: &'static str) -> Self {
        let xff = match h.get(&X_FORWARDED_FOR).map(HeaderValue::as_bytes) {
            Some(prev) if !prev.trim_ascii().is_empty() => {
                let mut s = Vec::with_capacity(prev.len() + 2 + client.len());
                s.extend_from_slice(prev);
                s.extend_from_slice(b", ");
                s.extend_from_slice(client.as_bytes());
                HeaderValue::from_bytes(&s).unwrap_or_else(|_| client.clone())
            }
            _ => client.clone(),
        };
        Forwarded {
            xff,
            proto: HeaderValue::from_static(proto),
            host: h.get(header::HOST).cloned(),
            request_id: None,
        }
    }

    /// True for a received field these fields replace (left out when the request is encoded).
    pub fn replaces(&self, name: &HeaderName) -> bool {
        name == X_FORWARDED_FOR
            || name == X_FORWARDED_PROTO
            || (self.host.is_some() && name == X_FORWARDED_HOST)
            || self.request_id.as_ref().is_some_and(|(n, _)| n == name)
    }

    /// The fields as (name, value) pairs, in the order they are written.
    pub fn fields(&self) -> impl Iterator<Item = (&HeaderName, &HeaderValue)> {
        [
            (&X_FORWARDED_FOR, Some(&self.xff)),
            (&X_FORWARDED_PROTO, Some(&self.proto)),
            (&X_FORWARDED_HOST, self.host.as_ref()),
        ]
        .into_iter()
        .filter_map(|(n, v)| v.map(|v| (n, v)))
        .chain(self.request_id.as_ref().map(|(n, v)| (n, v)))
    }

    /// Puts the fields into `h`, replacing received ones.
    pub fn insert_into(self, h: &mut HeaderMap) {
        h.insert(&X_FORWARDED_FOR, self.xff);
        h.insert(&X_FORWARDED_PROTO, self.proto);
        if let Some(host) = self.host {
            h.insert(&X_FORWARDED_HOST, host);
        }
        if let Some((name, value)) = self.request_id {
            h.insert(name, value);
        }
    }
}

/// Refuses a request head larger than `limit` bytes (`limits.maxHeaderSize`) with 431: the
/// request line and every field as HTTP/1.1 writes them (`name: value\r\n`), and the closing
/// empty line. hyper's read buffer stops heads well beyond the limit; this makes the limit
/// exact whatever the buffer held when the head was parsed.
pub fn check_head_size(
    head: &http::request::Parts,
    limit: usize,
) -> Result<(), turnpike_core::problem::Problem> {
    let line = head.method.as_str().len()
        + head.uri.path_and_query().map_or(1, |p| p.as_str().len())
        + " ".len()
        + " HTTP/1.1\r\n".len();
    let mut size = line + 2;
    for (name, value) in &head.headers {
        size += name.as_str().len() + value.len() + 4;
        if size > limit {
            break;
        }
    }
    if size > limit {
        return Err(turnpike_core::problem::Problem::new(
            &turnpike_core::problem::types::HEADERS_TOO_LARGE,
        )
        .with_detail(format!("the request head is larger than {limit} bytes")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_hop_by_hop_and_connection_listed() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("close, X-Secret"),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h.insert("x-keep", HeaderValue::from_static("1"));
        remove_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("x-keep"));
    }

    #[test]
    fn forwarded_headers() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("api.example.com"));
        h.insert("x-forwarded-for", HeaderValue::from_static("203.0.113.9"));
        h.insert("x-forwarded-proto", HeaderValue::from_static("gopher"));
        let f = Forwarded::of(
            &h,
            &client_ip_value("::ffff:10.1.2.3".parse().unwrap()),
            "http",
        );
        assert!(f.replaces(&HeaderName::from_static("x-forwarded-proto")));
        assert!(f.replaces(&HeaderName::from_static("x-forwarded-host")));
        assert!(!f.replaces(&header::HOST));
        let listed: Vec<(&str, &str)> = f
            .fields()
            .map(|(n, v)| (n.as_str(), v.to_str().unwrap()))
            .collect();
        assert_eq!(
            listed,
            [
                ("x-forwarded-for", "203.0.113.9, 10.1.2.3"),
                ("x-forwarded-proto", "http"),
                ("x-forwarded-host", "api.example.com")
            ]
        );
        f.insert_into(&mut h);
        assert_eq!(h["x-forwarded-for"], "203.0.113.9, 10.1.2.3");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-host"], "api.example.com");
    }

    #[test]
    fn without_host_a_received_forwarded_host_stays() {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-host", HeaderValue::from_static("edge.example"));
        let f = Forwarded::of(&h, &client_ip_value("192.0.2.1".parse().unwrap()), "https");
        assert!(!f.replaces(&HeaderName::from_static("x-forwarded-host")));
        assert_eq!(f.fields().count(), 2);
        f.insert_into(&mut h);
        assert_eq!(h["x-forwarded-host"], "edge.example");
        assert_eq!(h["x-forwarded-for"], "192.0.2.1");
        assert_eq!(h["x-forwarded-proto"], "https");
    }
}
