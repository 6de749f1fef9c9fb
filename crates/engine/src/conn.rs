//! What the data plane knows about a client connection, shared by the requests on it.

use std::net::SocketAddr;
use std::rc::Rc;

/// What a connection knows about its client, shared by its requests.
pub struct ConnInfo {
    /// The client's address.
    pub peer: SocketAddr,
    /// The client's IP as an `X-Forwarded-For` element.
    pub peer_ip: http::HeaderValue,
    /// The connection is TLS.
    pub tls: bool,
    /// Subject of the verified client certificate (mutual TLS).
    pub client_cert: Option<Rc<str>>,
}
