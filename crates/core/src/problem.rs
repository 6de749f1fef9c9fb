//! RFC 9457 problem details: the machine-readable body of every response the gateway itself
//! generates for an error. Every problem is of one [`ProblemType`] of the closed catalogue in
//! [`types`], which fixes its `type` URI, default status, title and access-log label; a
//! problem adds what happened in this occurrence (`detail`, extra members, headers).

use http::{header, HeaderValue, Response, StatusCode};

use crate::body::Body;

/// One kind of problem the gateway answers with. The catalogue ([`types::ALL`]) is closed:
/// `docs/problems.md` lists every entry, and a test checks that the two agree.
#[derive(Debug, PartialEq, Eq)]
pub struct ProblemType {
    /// Short machine-readable kind: the `type` member is `urn:turnpike:problem:<kind>`.
    pub kind: &'static str,
    /// The status answered unless the occurrence sets another (see [`Problem::with_status`]).
    pub status: StatusCode,
    /// Human-readable summary of the kind (the `title` member).
    pub title: &'static str,
    /// What the access log's `error` field says.
    pub log: &'static str,
}

/// The catalogue of problem types, one constant each.
pub mod types {
    use super::ProblemType;
    use http::StatusCode;

    macro_rules! catalogue {
        ($($(#[$doc:meta])* $name:ident = ($kind:literal, $status:ident, $title:literal, $log:literal);)*) => {
            $(
                $(#[$doc])*
                pub static $name: ProblemType = ProblemType {
                    kind: $kind,
                    status: StatusCode::$status,
                    title: $title,
                    log: $log,
                };
            )*
            /// Every problem type, in catalogue order.
            pub static ALL: &[&ProblemType] = &[$(&$name),*];
        };
    }

    catalogue! {
        /// No API on this port matches the request, or a published document does not exist.
        NOT_FOUND = ("not-found", NOT_FOUND, "Not found", "no route");
        /// The API (or the OpenAPI operation) does not take this method.
        METHOD_NOT_ALLOWED = ("method-not-allowed", METHOD_NOT_ALLOWED, "Method not allowed", "method not allowed");
        /// The request could not be forwarded as received (an invalid URI after rewriting).
        BAD_REQUEST = ("bad-request", BAD_REQUEST, "Bad request", "bad request");
        /// The request body broke off or its framing is invalid.
        BAD_BODY = ("bad-body", BAD_REQUEST, "The request body could not be read", "bad body");
        /// The request target is longer than `limits.maxUriLength`.
        URI_TOO_LONG = ("uri-too-long", URI_TOO_LONG, "Request target too long", "uri too long");
        /// The client paused longer than `timeouts.bodyRead` while sending the request body.
        BODY_TIMEOUT = ("body-timeout", REQUEST_TIMEOUT, "The request body did not arrive in time", "body timeout");
        /// The request line and header fields are larger than `limits.maxHeaderSize`.
        HEADERS_TOO_LARGE = ("headers-too-large", REQUEST_HEADER_FIELDS_TOO_LARGE, "Request header fields too large", "headers too large");
        /// The request body is larger than `limits.maxBodySize` or a `requestSizeLimit`.
        BODY_TOO_LARGE = ("body-too-large", PAYLOAD_TOO_LARGE, "Request body too large", "body too large");
        /// A `rewriter` produced a path that is not a valid URI path.
        BAD_REWRITE = ("bad-rewrite", BAD_REQUEST, "The rewritten path is not valid", "bad rewrite");
        /// A `setHeader` computed a value that is not a valid header value (400 on requests,
        /// 502 on responses).
        INVALID_HEADER = ("invalid-header", BAD_REQUEST, "A header could not be set", "invalid header");
        /// Credentials are missing or invalid (or, with `validateSecurity`, of another kind than
        /// an OpenAPI operation's `security` asks for).
        UNAUTHORIZED = ("unauthorized", UNAUTHORIZED, "Authentication required", "unauthorized");
        /// The caller is authenticated but not allowed (consumer, group or scope, or an
        /// OpenAPI operation's `security` with `validateSecurity`).
        FORBIDDEN = ("forbidden", FORBIDDEN, "Access denied", "forbidden");
        /// `accessControl` denies the client's IP.
        IP_DENIED = ("ip-denied", FORBIDDEN, "Access denied", "ip denied");
        /// A CORS preflight asks for an origin, method or header that is not allowed.
        CORS_DENIED = ("cors-denied", FORBIDDEN, "CORS preflight denied", "cors denied");
        /// A `rateLimiter` limit is reached.
        RATE_LIMITED = ("rate-limited", TOO_MANY_REQUESTS, "Too many requests", "rate limited");
        /// `jsonProtection` refused the body.
        JSON_PROTECTION = ("json-protection", BAD_REQUEST, "The JSON body was rejected", "json protection");
        /// `xmlProtection` refused the body (413 when it is larger than `maxSize`).
        XML_PROTECTION = ("xml-protection", BAD_REQUEST, "The request is not acceptable XML", "xml protection");
        /// `sqlInjectionProtection` found SQL injection in a parameter, field, header or cookie.
        SQL_INJECTION = ("sql-injection", BAD_REQUEST, "The request looks like SQL injection", "sql injection");
        /// A JSON body was expected and could not be parsed (`wsdl2openapi`), or could not be
        /// converted (`json2Xml`; 502 on responses).
        BAD_JSON = ("bad-json", BAD_REQUEST, "The body is not JSON", "bad json");
        /// An XML body could not be parsed or converted (`xml2Json`, `transform`; 502 on
        /// responses).
        BAD_XML = ("bad-xml", BAD_REQUEST, "The body is not XML", "bad xml");
        /// The request does not match its OpenAPI operation or WSDL operation, or the XML
        /// Schema or JSON Schema of a `validator`.
        VALIDATION = ("validation", BAD_REQUEST, "The request is not valid", "validation");
        /// The request's `Content-Type` is not one the OpenAPI operation accepts.
        UNSUPPORTED_MEDIA_TYPE = ("unsupported-media-type", UNSUPPORTED_MEDIA_TYPE, "Unsupported media type", "unsupported media type");
        /// The backend's response does not match the OpenAPI spec, or the XML Schema or JSON
        /// Schema of a `validator`.
        RESPONSE_VALIDATION = ("response-validation", BAD_GATEWAY, "The backend's response is not valid", "response validation");
        /// The SOAP backend answered with a fault (`wsdl2openapi`; 400 for client faults).
        SOAP_FAULT = ("soap-fault", BAD_GATEWAY, "The SOAP service answered with a fault", "soap fault");
        /// The SOAP backend's answer could not be read as the WSDL's response.
        SOAP_RESPONSE = ("soap-response", BAD_GATEWAY, "The SOAP backend's answer could not be read", "soap response");
        /// No connection to the backend could be made.
        UPSTREAM_UNREACHABLE = ("upstream-unreachable", BAD_GATEWAY, "Upstream unreachable", "upstream unreachable");
        /// The TLS handshake with the backend failed.
        UPSTREAM_TLS = ("upstream-tls", BAD_GATEWAY, "TLS to the backend failed", "upstream tls");
        /// The backend broke the exchange off or answered something that is not HTTP.
        UPSTREAM_ERROR = ("upstream-error", BAD_GATEWAY, "The backend failed", "upstream error");
        /// Health checks took every node of the upstream out.
        NO_HEALTHY_UPSTREAM = ("no-healthy-upstream", SERVICE_UNAVAILABLE, "No healthy upstream", "no healthy upstream");
        /// The upstream's circuit breaker refuses more requests (`Retry-After` says when to
        /// try again).
        UPSTREAM_OVERLOADED = ("upstream-overloaded", SERVICE_UNAVAILABLE, "The upstream is overloaded", "upstream overloaded");
        /// The client has `queue.maxPerKey` requests waiting for a slot of the upstream's
        /// concurrency limit already (`Retry-After: 1`).
        QUEUE_FULL = ("queue-full", TOO_MANY_REQUESTS, "Too many requests of this client are waiting", "queue full");
        /// A request waiting for a slot of the upstream's concurrency limit was shed: it waited
        /// past `queue.timeout`, or the queueing delay stayed over `queue.targetDelay` and its
        /// client's queue was the largest (`Retry-After: 1`).
        SHED = ("shed", SERVICE_UNAVAILABLE, "The backend is at capacity", "shed");
        /// A rate limiter's shared store (Redis) failed or was late and its `onError` is
        /// `deny`.
        RATE_LIMIT_UNAVAILABLE = ("rate-limit-unavailable", SERVICE_UNAVAILABLE, "The rate limit cannot be checked", "rate limit unavailable");
        /// A `throttle` has `maxThreads` requests in progress and no slot freed within its
        /// `busyDelay` (`Retry-After: 1`).
        THROTTLED = ("throttled", SERVICE_UNAVAILABLE, "Too many requests in progress", "throttled");
        /// No response head from the backend within `timeouts.upstream`.
        UPSTREAM_TIMEOUT = ("upstream-timeout", GATEWAY_TIMEOUT, "The backend did not answer in time", "upstream timeout");
        /// A policy waited on an outside service (a key server) longer than it allows.
        POLICY_TIMEOUT = ("policy-timeout", GATEWAY_TIMEOUT, "A policy did not finish in time", "policy timeout");
        /// A policy failed: a Python policy raised, or its executor went away, or the stylesheet
        /// of a `transform` failed on the message (502 on responses).
        POLICY_FAILED = ("policy-failed", INTERNAL_SERVER_ERROR, "A policy failed", "policy failed");
        /// Admin API: the document, or the configuration it would make, has errors (listed in
        /// `errors`, each with `file`, `line`, `column`, `key` and `message`).
        INVALID_DOCUMENT = ("invalid-document", UNPROCESSABLE_ENTITY, "The configuration would not be valid", "invalid document");
        /// Admin API: `If-Match` or `If-None-Match` does not hold (the document changed).
        PRECONDITION_FAILED = ("precondition-failed", PRECONDITION_FAILED, "The document changed since it was read", "precondition failed");
        /// Admin API: the document comes from a configuration file (or no store is
        /// configured), so the API does not change it.
        READ_ONLY = ("read-only", METHOD_NOT_ALLOWED, "The document cannot be changed through the API", "read only");
        /// Admin API: the change conflicts with the running gateway or its files (a name
        /// defined in a file and in the store, a port that cannot be opened).
        CONFLICT = ("conflict", CONFLICT, "The change conflicts with the running configuration", "conflict");
        /// Admin API: the document store (its folder, or etcd) failed.
        STORE_UNAVAILABLE = ("store-unavailable", SERVICE_UNAVAILABLE, "The document store is unavailable", "store unavailable");
        /// Admin API: `Host` names neither this machine, the listen address nor one of
        /// `admin.hosts` (a DNS-rebinding page).
        MISDIRECTED = ("misdirected", MISDIRECTED_REQUEST, "This server does not answer to that host name", "misdirected");
        /// Admin API: a browser request from another origin (`Origin`, `Sec-Fetch-Site`).
        CROSS_ORIGIN = ("cross-origin", FORBIDDEN, "Cross-origin requests are refused", "cross origin");
        /// The gateway failed in a way the request did not cause.
        INTERNAL = ("internal", INTERNAL_SERVER_ERROR, "Internal error", "internal");
        /// The API's flow did not answer and it has no target.
        NO_TARGET = ("no-target", INTERNAL_SERVER_ERROR, "This API has no target", "no target");
    }
}

/// A problem the gateway answers with instead of forwarding.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// Its type in the catalogue.
    pub ty: &'static ProblemType,
    /// HTTP status (the type's, unless set with [`Problem::with_status`]).
    pub status: StatusCode,
    /// What happened in this occurrence, in words that help the client; never internals such
    /// as backend addresses, OS errors or library messages (those go to the log).
    pub detail: Option<String>,
    /// Extra members to add to the JSON object.
    pub extra: Option<serde_json::Map<String, serde_json::Value>>,
    /// Extra response headers (e.g. `WWW-Authenticate`, `Retry-After`).
    pub headers: Vec<(header::HeaderName, HeaderValue)>,
}

impl Problem {
    /// A problem of type `ty`, with its status and title.
    pub fn new(ty: &'static ProblemType) -> Self {
        Problem {
            ty,
            status: ty.status,
            detail: None,
            extra: None,
            headers: Vec::new(),
        }
    }

    /// The short kind (`not-found`, ...).
    pub fn kind(&self) -> &'static str {
        self.ty.kind
    }

    /// The title of the problem's type.
    pub fn title(&self) -> &'static str {
        self.ty.title
    }

    /// Answers with another status than the type's default.
    pub fn with_status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
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
        Problem::new(&types::NOT_FOUND)
    }

    /// The problem as a JSON object.
    pub fn to_json(&self) -> serde_json::Value {
        let mut obj = serde_json::Map::new();
        obj.insert(
            "type".into(),
            format!("urn:turnpike:problem:{}", self.ty.kind).into(),
        );
        obj.insert("title".into(), self.ty.title.into());
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
        assert_eq!(j["title"], "Not found");
        assert_eq!(j["path"], "/x");
        let r = p.into_response();
        assert_eq!(r.status(), 404);
        assert_eq!(r.headers()["content-type"], "application/problem+json");
    }

    #[test]
    fn catalogue_kinds_are_unique() {
        let mut kinds: Vec<&str> = types::ALL.iter().map(|t| t.kind).collect();
        kinds.sort_unstable();
        let n = kinds.len();
        kinds.dedup();
        assert_eq!(kinds.len(), n);
    }

    #[test]
    fn status_can_differ_from_the_type() {
        let p = Problem::new(&types::INVALID_HEADER).with_status(StatusCode::BAD_GATEWAY);
        assert_eq!(p.into_response().status(), 502);
    }
}

#[cfg(test)]
mod docs_tests {
    use super::types;

    /// `docs/problems.md` lists every problem type of the catalogue, and no other.
    #[test]
    fn the_docs_table_is_the_catalogue() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/problems.md");
        let doc = std::fs::read_to_string(path).unwrap();
        for t in types::ALL {
            let urn = format!("`urn:turnpike:problem:{}`", t.kind);
            let row = doc.lines().find(|l| l.starts_with('|') && l.contains(&urn));
            let row = row.unwrap_or_else(|| panic!("{urn} is not in docs/problems.md"));
            assert!(
                row.contains(&t.status.as_u16().to_string()) && row.contains(t.title),
                "{urn}: the row must give status {} and title `{}`: {row}",
                t.status.as_u16(),
                t.title
            );
        }
        for word in doc
            .split('`')
            .filter(|w| w.starts_with("urn:turnpike:problem:"))
        {
            let kind = word.trim_start_matches("urn:turnpike:problem:");
            assert!(
                kind.is_empty() || kind == "<kind>" || types::ALL.iter().any(|t| t.kind == kind),
                "docs/problems.md names `{word}`, which is not in the catalogue"
            );
        }
    }
}
