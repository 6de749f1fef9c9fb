//! TLS to a backend: verification against the system roots (loaded once) or a configured
//! truststore, SNI, an optional client certificate, ALPN for HTTP/2 or HTTP/1.1. Turning
//! verification off takes an explicit `insecureSkipVerify: true` and logs a warning.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use turnpike_config::TargetSsl;

use crate::material;

/// The system's CA certificates, loaded once.
pub(crate) fn system_roots() -> Result<Arc<RootCertStore>, String> {
    static ROOTS: OnceLock<Result<Arc<RootCertStore>, String>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            let mut store = RootCertStore::empty();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err("no system CA certificates found (install ca-certificates, or configure a truststore)".into());
            }
            Ok(Arc::new(store))
        })
        .clone()
}

#[derive(Debug)]
struct AcceptAnything(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAnything {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Builds the client config for a target. `label` names the target in the warning logged for
/// `insecureSkipVerify`.
pub fn client_config(
    ssl: Option<&TargetSsl>,
    base: &Path,
    http2: bool,
    label: &str,
) -> Result<Arc<ClientConfig>, String> {
    let default = TargetSsl::default();
    let ssl = ssl.unwrap_or(&default);
    let provider = Arc::new(crate::provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = if ssl.insecure_skip_verify.0 {
        if ssl.truststore.is_some() {
            return Err("`insecureSkipVerify` and `truststore` exclude each other".into());
        }
        tracing::warn!(
            target = label,
            "TLS certificate verification of this backend is OFF (insecureSkipVerify)"
        );
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnything(provider)))
    } else {
        let roots = match &ssl.truststore {
            Some(ts) => Arc::new(material::roots(base, ts)?),
            None => system_roots()?,
        };
        builder.with_root_certificates(roots)
    };
    let mut cfg = match (&ssl.keystore, &ssl.certificate, &ssl.key) {
        (None, None, None) => builder.with_no_client_auth(),
        (Some(ks), None, None) => {
            let (chain, key) = material::pkcs12_identity(base, ks)?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("client certificate: {e}"))?
        }
        (None, Some(c), Some(k)) => {
            let (chain, key) = material::pem_identity(base, c, k)?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("client certificate: {e}"))?
        }
        _ => {
            return Err(
                "give either `keystore` or `certificate` + `key` for the client certificate".into(),
            )
        }
    };
    cfg.alpn_protocols = if http2 {
        vec![b"h2".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    // After the handshake the stream protects records itself (`crate::stream`).
    Ok(Arc::new(cfg))
}
