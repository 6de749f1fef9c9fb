//! RFC 9457 problem details: the machine-readable body of every response the gateway itself
//! generates for an error.

use std::borrow::Cow;

use http::{header, HeaderValue, Response, StatusCode};

use crate::body::Body;

/// A problem the gateway answers with instead of forwarding.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// HTTP status.
    pub status: StatusCode,
    /// Short machine-readable kind (`not-found`, `bad-gateway`, ...); the `type` member is
    /// `urn:turnpike:problem:<kind>`.
    pub kind: &'static str,
    /// Human-readable summary of the kind.
    pub title: Cow<'static, str>,
    /// What happened in this occurrence.
    pub detail: Option<String>,
    /// Extra members to add to the JSON object.
    pub extra: Option<serde_json::Map<String, serde_json::Value>>,
    /// Extra response headers (e.g. `WWW-Authenticate`, `Retry-After`).
    pub headers: Vec<(header::HeaderName, HeaderValue)>,
}

impl Problem {
    /// A problem with a status, kind and title.
    pub fn new(
        status: StatusCode,
        kind: &'static str,
        title: impl Into<Cow<'static, str>>,
    ) -> Self {
        Problem {
            status,
            kind,
            title: title.into(),
            detail: None,
            extra: None,
            headers: Vec::new(),
        }
    }

    /// Adds the detail text.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// Adds an extra member.
    pub fn with_member(mut self, key: &str, value: serde_json::Value) -> Self {
        self.extra
            .get_or_insert_with(serde_json::Map::new)
            .insert(key.to_owned(), value);
        self
    }

    /// Adds a response header.
    pub fn with_header(mut self, name: header::HeaderName, value: HeaderValue) -> Self {
        self.headers.push((name, value));
        self
    }

    /// 404: no API matches the request.
    pub fn no_route() -> Self {
        Problem::new(
            StatusCode::NOT_FOUND,
            "not-found",
            "No API matches this request",
        )
    }

    /// The problem as a JSON object.
    pub fn to_json(&self) -> serde_json::Value {
        let mut obj = serde_json::Map::new();
        obj.insert(
            "type".into(),
            format!("urn:turnpike:problem:{}", self.kind).into(),
        );
        obj.insert("title".into(), self.title.as_ref().into());
        obj.insert("status".into(), self.status.as_u16().into());
        if let Some(d) = &self.detail {
            obj.insert("detail".into(), d.as_str().into());
        }
        if let Some(extra) = &self.extra {
            for (k, v) in extra {
                obj.insert(k.clone(), v.clone());
            }
        }
        serde_json::Value::Object(obj)
    }

    /// Renders the `application/problem+json` response.
    pub fn into_response(self) -> Response<Body> {
        let body = self.to_json().to_string();
        let mut res = Response::new(Body::full(body));
        *res.status_mut() = self.status;
        let h = res.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        for (k, v) in self.headers {
            h.append(k, v);
        }
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_rfc9457() {
        let p = Problem::no_route()
            .with_detail("GET /x")
            .with_member("path", "/x".into());
        let j = p.to_json();
        assert_eq!(j["status"], 404);
        assert_eq!(j["type"], "urn:turnpike:problem:not-found");
        assert_eq!(j["path"], "/x");
        let r = p.into_response();
        assert_eq!(r.status(), 404);
        assert_eq!(r.headers()["content-type"], "application/problem+json");
    }
}
