//! The TLS side of listeners: one rustls server config per listening address, from its APIs'
//! `ssl:` settings (certificates chosen by SNI), and the key files to watch.

use std::net::SocketAddr;
use std::sync::Arc;

use turnpike_config::{ApiConfig, ConfigErrors, Located};

use crate::base_dir;

/// Builds the TLS config of one listening address from its APIs' `ssl:` settings.
pub(crate) fn listener_tls(
    addr: SocketAddr,
    apis: &[&Located<ApiConfig>],
    errors: &mut ConfigErrors,
) -> Option<Arc<rustls::ServerConfig>> {
    let with: Vec<(&Located<ApiConfig>, &turnpike_config::SslConfig)> = apis
        .iter()
        .filter_map(|a| a.value.ssl.as_ref().map(|ssl| (*a, ssl)))
        .collect();
    if with.is_empty() {
        return None;
    }
    if let Some(plain) = apis.iter().find(|a| a.value.ssl.is_none()) {
        errors.push(plain.error(
            "",
            format!(
                "port {} mixes TLS and plain APIs: give this API `ssl:` too, or use another port",
                addr.port()
            ),
        ));
        return None;
    }
    let sites: Vec<turnpike_tls::SiteCert<'_>> = with
        .iter()
        .map(|(a, ssl)| turnpike_tls::SiteCert {
            hosts: a
                .value
                .host
                .as_deref()
                .map(|h| h.split_whitespace().map(str::to_owned).collect())
                .unwrap_or_default(),
            ssl,
            base: base_dir(a),
        })
        .collect();
    match turnpike_tls::server_config(&sites) {
        Ok(cfg) => Some(cfg),
        Err((i, msg)) => {
            errors.push(with[i.min(with.len() - 1)].0.error("ssl", msg));
            None
        }
    }
}

/// The TLS key material files an API reads (listener and target), resolved like the loader does.
pub(crate) fn tls_files(api: &Located<ApiConfig>) -> Vec<std::path::PathBuf> {
    let dir = base_dir(api);
    let mut names: Vec<&str> = Vec::new();
    if let Some(ssl) = &api.value.ssl {
        names.extend(ssl.keystore.as_ref().map(|k| k.location.as_str()));
        names.extend(ssl.certificate.as_deref());
        names.extend(ssl.key.as_deref());
        names.extend(
            ssl.client_auth
                .as_ref()
                .map(|c| c.truststore.location.as_str()),
        );
    }
    if let Some(ssl) = api.value.target.as_ref().and_then(|t| t.ssl.as_ref()) {
        names.extend(ssl.truststore.as_ref().map(|t| t.location.as_str()));
        names.extend(ssl.keystore.as_ref().map(|k| k.location.as_str()));
        names.extend(ssl.certificate.as_deref());
        names.extend(ssl.key.as_deref());
    }
    names.into_iter().map(|n| dir.join(n)).collect()
}
