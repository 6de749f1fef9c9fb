//! The exchange: one request, its response, and what the gateway learned about them on the way.

use std::net::SocketAddr;

use http::request::Parts;
use http::Response;
use smallvec::SmallVec;

use crate::body::Body;

/// Byte ranges of the path parameters in the request path, in the order the route's template
/// names them (`/items/{id}` → one range).
pub type PathParams = SmallVec<[(u16, u16); 4]>;

/// Who is calling, as established by an authentication policy; stored in
/// [`Exchange::extensions`] and read by later policies, templates and the access log.
#[derive(Debug, Clone, Default)]
pub struct Identity {
    /// The consumer the credentials belong to, when they belong to a configured consumer.
    pub consumer: Option<std::sync::Arc<str>>,
    /// The consumer's groups.
    pub groups: Vec<std::sync::Arc<str>>,
    /// The user name (basic auth) or subject (JWT) presented.
    pub subject: Option<String>,
    /// Scopes granted with the credentials (API key scopes, JWT `scope`/`scp`).
    pub scopes: Vec<String>,
    /// The verified JWT claims, for JWT authentication.
    pub claims: Option<std::sync::Arc<serde_json::Map<String, serde_json::Value>>>,
}

/// Credentials an authentication policy accepted: how the caller authenticated and the scopes
/// granted with them. Every authentication policy that accepts the request's credentials adds
/// one to [`Authentications`]; the OpenAPI validator's `validateSecurity` checks an operation's
/// `security` requirements against them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authentication {
    /// How.
    pub method: AuthMethod,
    /// The scopes granted (API key scopes, JWT `scope`/`scp`).
    pub scopes: Vec<String>,
}

/// How a caller authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthMethod {
    /// An API key, read from a header (`query: false`) or a query parameter named `name`.
    ApiKey {
        /// True when the key came from the query.
        query: bool,
        /// The header or query parameter name, as configured.
        name: String,
    },
    /// HTTP Basic authentication.
    Basic,
    /// A verified JWT (an `Authorization: Bearer` token).
    Jwt,
}

/// Every set of credentials accepted for the request so far, in the order of the policies;
/// stored in [`Exchange::extensions`] (see [`Exchange::record_authentication`]).
#[derive(Debug, Clone, Default)]
pub struct Authentications(pub Vec<Authentication>);

/// The verified client certificate of a mutual-TLS connection; stored in
/// [`Exchange::extensions`] for policies.
#[derive(Debug, Clone)]
pub struct ClientCertificate {
    /// The certificate's subject, RFC 4514 form (`CN=client,O=Example`).
    pub subject: String,
}
/// The operation of an OpenAPI spec a request matched (indexes of the spec's path and of the
/// operation in it); set in [`Exchange::extensions`] by the spec's validator when the response
/// phase or an operation's own flow needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatchedOperation {
    /// Index of the path in the spec.
    pub path: usize,
    /// Index of the operation in the path.
    pub op: usize,
}

/// [`Directives::affinity`]: a policy keeps a client's requests on one node of the target's
/// pool (the `balancer`'s sticky sessions); the engine completes it when it forwards the
/// request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeAffinity {
    /// The node the request should go to (its label, `host:port`): the engine sends the
    /// request there when the pool has that node and it is usable, else it balances as usual.
    pub preferred: Option<std::sync::Arc<str>>,
    /// Set by the engine once a node of the target answered: that node's label.
    pub answered: Option<std::sync::Arc<str>>,
}

/// [`Directives::buffer_response`]: a request-phase policy needs this request's response body
/// in memory though its chain does not declare it for every response (`mcpProtection` reads the
/// answers to `tools/list` only); the engine then buffers the response, up to
/// `limits.maxBodySize`, before the response phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferResponse {
    /// Leave a `text/event-stream` response streaming: the policy reads such a response as it
    /// streams (an event stream may stay open).
    pub except_event_streams: bool,
}

/// What a policy may ask of the engine for one exchange, and what the engine tells the
/// response phase: the whole protocol between the policies and the engine besides a step's
/// [`crate::Outcome`]. Everything else in [`Exchange::extensions`] is between policies.
#[derive(Debug, Clone, Default)]
pub struct Directives {
    /// Run the internal API of this name instead of the target when the request phase ends
    /// without an answer (Membrane's `destination` with an `internal://NAME` URL).
    pub destination: Option<std::sync::Arc<str>>,
    /// Send the request to this path of the target's node instead of joining the target's base
    /// path with the request path (`wsdl2openapi`: REST in front of one SOAP endpoint); the
    /// target's own base path wins when it has one.
    pub fixed_endpoint: Option<http::uri::PathAndQuery>,
    /// Keep the request on a node of the pool (see [`NodeAffinity`]).
    pub affinity: Option<NodeAffinity>,
    /// Read the response body into memory before the response phase (see [`BufferResponse`]).
    pub buffer_response: Option<BufferResponse>,
    /// Set by the engine before the response phase when the response is a problem the gateway
    /// generated (a policy rejected the request, the backend could not be reached or answered
    /// too late): Membrane's aborted exchange, which `abort:` flows wait for.
    pub aborted: bool,
}

/// One request travelling through the gateway. Policies read and change it; the engine forwards
/// `request` + `request_body` to the target and fills `response` with the answer.
#[derive(Debug)]
pub struct Exchange {
    /// Request head as received (then as changed by request-phase policies).
    pub request: Parts,
    /// Request body; streamed unless a policy asked for it buffered.
    pub request_body: Body,
    /// The client's address as seen on the socket.
    pub client: SocketAddr,
    /// True when the request came over TLS (set by the engine).
    pub tls: bool,
    /// The request's id (set by the engine; empty outside it), for logs.
    pub request_id: http::HeaderValue,
    /// Path parameters bound by the route's template.
    pub params: PathParams,
    /// The URI as it was received, before any policy rewrote `request.uri` (path parameters
    /// index into its path). Cloning a URI shares its bytes.
    pub original_uri: http::Uri,
    /// The response: set by a policy that answers (`return`), or by the engine from the target.
    pub response: Option<Response<Body>>,
    /// What policies learned and want to share with later policies (verified claims, the
    /// consumer, a parsed body, ...), keyed by type.
    pub extensions: http::Extensions,
    /// What the policies ask of the engine, and the engine tells them.
    pub directives: Directives,
    /// When the request is traced: how long each policy step took, in order.
    pub step_times: Option<Vec<StepTime>>,
}

/// How long one policy step took (recorded for traced requests).
#[derive(Debug, Clone, Copy)]
pub struct StepTime {
    /// The step's index in the chain.
    pub at: usize,
    /// True for the response phase.
    pub response: bool,
    /// When it started.
    pub start: std::time::Instant,
    /// When it returned.
    pub end: std::time::Instant,
}

impl Exchange {
    /// Starts an exchange for a request received from `client`.
    pub fn new(request: Parts, request_body: Body, client: SocketAddr, params: PathParams) -> Self {
        let original_uri = request.uri.clone();
        Exchange {
            request,
            request_body,
            client,
            tls: false,
            request_id: http::HeaderValue::from_static(""),
            params,
            original_uri,
            response: None,
            extensions: http::Extensions::new(),
            directives: Directives::default(),
            step_times: None,
        }
    }

    /// The value of the `i`-th path parameter (raw, not percent-decoded), or "" when unbound.
    pub fn param(&self, i: usize) -> &str {
        match self.params.get(i) {
            Some(&(s, e)) => self
                .original_uri
                .path()
                .get(s as usize..e as usize)
                .unwrap_or(""),
            None => "",
        }
    }

    /// The caller's identity, once an authentication policy established it.
    pub fn identity(&self) -> Option<&Identity> {
        self.extensions.get::<Identity>()
    }

    /// Adds `a` to the exchange's [`Authentications`]; called by an authentication policy in
    /// its request phase once it accepted the credentials.
    pub fn record_authentication(&mut self, a: Authentication) {
        match self.extensions.get_mut::<Authentications>() {
            Some(all) => all.0.push(a),
            None => {
                self.extensions.insert(Authentications(vec![a]));
            }
        }
    }

    /// The credentials accepted so far (empty when no authentication policy accepted any).
    pub fn authentications(&self) -> &[Authentication] {
        self.extensions
            .get::<Authentications>()
            .map_or(&[], |a| a.0.as_slice())
    }

    /// The request body when it is held in memory (the engine buffers it before the request
    /// phase when a policy of the chain declared [`crate::BodyNeed::Buffer`]).
    pub fn request_bytes(&self) -> Option<&bytes::Bytes> {
        match &self.request_body {
            Body::Full(b) => b.as_ref(),
            _ => None,
        }
    }

    /// The response body when it is held in memory (buffered for the response phase when a
    /// policy declared a response [`crate::BodyNeed::Buffer`], or set by a policy).
    pub fn response_bytes(&self) -> Option<&bytes::Bytes> {
        match self.response.as_ref().map(|r| r.body()) {
            Some(Body::Full(b)) => b.as_ref(),
            _ => None,
        }
    }

    /// The first value of query parameter `name`, percent-decoded.
    pub fn query(&self, name: &str) -> Option<std::borrow::Cow<'_, str>> {
        let q = self.request.uri.query()?;
        q.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let k = percent_encoding::percent_decode_str(k).decode_utf8_lossy();
            (k == name).then(|| {
                let v = v.replace('+', " ");
                std::borrow::Cow::Owned(
                    percent_encoding::percent_decode_str(&v)
                        .decode_utf8_lossy()
                        .into_owned(),
                )
            })
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An exchange for `uri` from 192.0.2.1 with the given headers (test helper).
    pub fn exchange(method: &str, uri: &str, headers: &[(&str, &str)]) -> Exchange {
        let mut b = http::Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let (parts, _) = b.body(()).unwrap().into_parts();
        Exchange::new(
            parts,
            Body::Empty,
            "192.0.2.1:5000".parse().unwrap(),
            PathParams::new(),
        )
    }

    #[test]
    fn query_values_are_decoded() {
        let ex = exchange("GET", "/a?x=1&name=J%C3%BCrgen+M&flag", &[]);
        assert_eq!(ex.query("name").unwrap(), "Jürgen M");
        assert_eq!(ex.query("flag").unwrap(), "");
        assert!(ex.query("nope").is_none());
    }
}
