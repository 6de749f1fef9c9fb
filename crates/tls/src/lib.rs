//! Turnpike's TLS, built once per configuration load with rustls (ring provider):
//! [`material`] reads key material (PKCS#12, PEM), [`server`] builds a listener's config (SNI
//! certificate selection, protocol and cipher choice, client certificates) and [`client`] the
//! config used to reach a backend (roots, verification, client certificate, ALPN).

pub mod client;
pub mod material;
pub mod server;

pub use client::client_config;
pub use server::{server_config, SiteCert};

/// The crypto provider every config uses.
pub fn provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// The subject of a DER certificate in RFC 4514 form (`CN=client,O=Example`), or `None`
/// when it cannot be parsed.
pub fn certificate_subject(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(cert.subject().to_string())
}
