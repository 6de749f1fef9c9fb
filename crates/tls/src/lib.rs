//! Turnpike's TLS, built once per configuration load with rustls (aws-lc-rs provider):
//! [`material`] reads key material (PKCS#12, PEM), [`server`] builds a listener's config (SNI
//! certificate selection, protocol and cipher choice, client certificates) and [`client`] the
//! config used to reach a backend (roots, verification, client certificate, ALPN). [`stream`]
//! runs connections with those configs on both hops, on rustls's record layer. [`pem`] holds the
//! PEM material of the fleet's services (etcd, the trace collector).

pub mod client;
pub mod material;
pub mod pem;
pub mod server;
pub mod stream;

pub use client::client_config;
pub use pem::PemTls;
pub use server::{server_config, SiteCert};
pub use stream::{accept, connect, ClientStream, ServerStream};

/// The one crypto provider of the process, for handshakes and records alike: aws-lc-rs. With
/// an RSA-2048 certificate a full handshake costs the gateway about 0.35 ms of CPU against
/// ring's 0.6 ms (measured with `openssl s_time -new` on the benchmark machine), and it offers
/// the X25519MLKEM768 post-quantum hybrid key exchange (after X25519 in the order of
/// preference).
pub fn provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::aws_lc_rs::default_provider()
}

/// Makes [`provider`] the process's default, for the libraries that build their own rustls
/// configurations (the Redis client). Idempotent.
pub fn install_provider() {
    let _ = provider().install_default();
}

/// The subject of a DER certificate in RFC 4514 form (`CN=client,O=Example`), or `None`
/// when it cannot be parsed.
pub fn certificate_subject(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(cert.subject().to_string())
}
