//! TLS to the fleet's services that take their key material as PEM (etcd, the OpenTelemetry
//! collector): read and checked at load time, kept as bytes so a reload can tell whether it
//! changed.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};
use turnpike_config::TargetSsl;

/// A service's TLS settings as PEM read at load time.
#[derive(Clone, PartialEq, Eq)]
pub struct PemTls {
    /// The CAs trusted for the service's certificate (`None`: the system's roots).
    pub ca: Option<Vec<u8>>,
    /// The client certificate chain and its key (mutual TLS).
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    /// The name checked in the service's certificate instead of the endpoint's host.
    pub server_name: Option<String>,
}

/// Says what is set, never the key.
impl std::fmt::Debug for PemTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PemTls")
            .field("ca", &self.ca.is_some())
            .field("identity", &self.identity.is_some())
            .field("server_name", &self.server_name)
            .finish()
    }
}

impl PemTls {
    /// Reads the PEM files of `ssl` (relative to `base`) at load time, with the same checks as a
    /// target's TLS (files present, certificates and key parse and match). `service` names the
    /// service in messages. `Err((key below ssl, message))`.
    pub fn read(
        ssl: Option<&TargetSsl>,
        base: &Path,
        service: &str,
    ) -> Result<PemTls, (String, String)> {
        let Some(ssl) = ssl else {
            return Ok(PemTls {
                ca: None,
                identity: None,
                server_name: None,
            });
        };
        if ssl.insecure_skip_verify.0 {
            return Err((
                ".insecureSkipVerify".into(),
                format!("is not supported for {service}: give its CA as `truststore`"),
            ));
        }
        if ssl.keystore.is_some() {
            return Err((
                ".keystore".into(),
                format!(
                    "{service} takes the client certificate as PEM: use `certificate` and `key`"
                ),
            ));
        }
        crate::client_config(Some(ssl), base, true, service).map_err(|m| (String::new(), m))?;
        if let Some(name) = &ssl.server_name {
            if rustls::pki_types::ServerName::try_from(name.as_str()).is_err() {
                return Err((
                    ".serverName".into(),
                    format!("`{name}` is not a server name"),
                ));
            }
        }
        let read = |key: &str, file: &str| -> Result<Vec<u8>, (String, String)> {
            let path = base.join(file);
            let bytes = std::fs::read(&path).map_err(|e| {
                (
                    key.to_owned(),
                    format!("cannot read {}: {e}", path.display()),
                )
            })?;
            if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
                return Err((
                    key.to_owned(),
                    format!("{} is not PEM: {service} takes PEM files", path.display()),
                ));
            }
            Ok(bytes)
        };
        let ca = match &ssl.truststore {
            Some(ts) => Some(read(".truststore.location", &ts.location)?),
            None => None,
        };
        let identity = match (&ssl.certificate, &ssl.key) {
            (Some(c), Some(k)) => Some((read(".certificate", c)?, read(".key", k)?)),
            _ => None,
        };
        Ok(PemTls {
            ca,
            identity,
            server_name: ssl.server_name.clone(),
        })
    }

    /// A rustls client configuration trusting [`PemTls::ca`] (else the system's roots) and
    /// presenting [`PemTls::identity`], offering `alpn` (none: let the HTTP client set it). Called when a client for the service
    /// is built; the material was checked by [`PemTls::read`].
    pub fn client_config(&self, alpn: &[&[u8]]) -> Result<Arc<ClientConfig>, String> {
        let roots = match &self.ca {
            Some(pem) => {
                let mut store = RootCertStore::empty();
                for cert in CertificateDer::pem_slice_iter(pem) {
                    let cert = cert.map_err(|e| format!("CA bundle: {e}"))?;
                    store.add(cert).map_err(|e| format!("CA bundle: {e}"))?;
                }
                Arc::new(store)
            }
            None => crate::client::system_roots()?,
        };
        let builder = ClientConfig::builder_with_provider(Arc::new(crate::provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots);
        let mut cfg = match &self.identity {
            None => builder.with_no_client_auth(),
            Some((chain, key)) => {
                let chain = CertificateDer::pem_slice_iter(chain)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("client certificate: {e}"))?;
                let key =
                    PrivateKeyDer::from_pem_slice(key).map_err(|e| format!("client key: {e}"))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("client certificate: {e}"))?
            }
        };
        cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(Arc::new(cfg))
    }
}
