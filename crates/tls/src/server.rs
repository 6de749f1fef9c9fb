//! A listener's TLS config: one certificate per site chosen by SNI (exact names, then
//! `*.example.com` wildcards, then the default for clients without SNI or unknown names),
//! TLS 1.2 and 1.3 with rustls' modern suites unless configured otherwise, ALPN `h2` and
//! `http/1.1`, and optional client certificate verification.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{ServerConfig, SupportedProtocolVersion};
use turnpike_config::SslConfig;

use crate::material;

/// One site of a listener: the API's host patterns (empty = default) and its `ssl:` settings.
pub struct SiteCert<'a> {
    /// Host names (`*.example.com` allowed); empty for the default certificate.
    pub hosts: Vec<String>,
    /// The `ssl:` settings.
    pub ssl: &'a SslConfig,
    /// The folder key files are relative to.
    pub base: &'a Path,
}

#[derive(Debug)]
struct SniResolver {
    exact: HashMap<String, Arc<CertifiedKey>>,
    wildcard: Vec<(String, Arc<CertifiedKey>)>,
    default: Option<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let Some(name) = hello.server_name().map(|n| n.to_ascii_lowercase()) else {
            return self.default.clone();
        };
        if let Some(k) = self.exact.get(&name) {
            return Some(k.clone());
        }
        self.wildcard
            .iter()
            .find(|(suffix, _)| name.ends_with(suffix.as_str()) && name.len() > suffix.len())
            .map(|(_, k)| k.clone())
            .or_else(|| self.default.clone())
    }
}

fn versions(names: &[String]) -> Result<Vec<&'static SupportedProtocolVersion>, String> {
    if names.is_empty() {
        return Ok(vec![&rustls::version::TLS13, &rustls::version::TLS12]);
    }
    names
        .iter()
        .map(|n| match n.as_str() {
            "TLSv1.3" | "TLSv1_3" => Ok(&rustls::version::TLS13),
            "TLSv1.2" | "TLSv1_2" => Ok(&rustls::version::TLS12),
            "TLSv1" | "TLSv1.0" | "TLSv1.1" | "SSLv3" => {
                Err(format!("{n} is insecure and not supported"))
            }
            other => Err(format!("unknown protocol `{other}` (use TLSv1.2, TLSv1.3)")),
        })
        .collect()
}

/// A crypto provider limited to the named cipher suites (all of rustls' when empty).
pub(crate) fn provider_with(ciphers: &[String]) -> Result<rustls::crypto::CryptoProvider, String> {
    let mut p = crate::provider();
    if ciphers.is_empty() {
        return Ok(p);
    }
    let all = p.cipher_suites.clone();
    let mut chosen = Vec::new();
    for c in ciphers {
        let suite = all
            .iter()
            .find(|s| format!("{:?}", s.suite()) == *c)
            .ok_or_else(|| {
                let known: Vec<String> = all.iter().map(|s| format!("{:?}", s.suite())).collect();
                format!("unknown cipher suite `{c}` (known: {})", known.join(", "))
            })?;
        chosen.push(*suite);
    }
    p.cipher_suites = chosen;
    Ok(p)
}

fn certified(
    site: &SiteCert<'_>,
    provider: &rustls::crypto::CryptoProvider,
) -> Result<Arc<CertifiedKey>, String> {
    let ssl = site.ssl;
    let (chain, key) = match (&ssl.keystore, &ssl.certificate, &ssl.key) {
        (Some(ks), None, None) => material::pkcs12_identity(site.base, ks)?,
        (None, Some(c), Some(k)) => material::pem_identity(site.base, c, k)?,
        (None, None, None) => return Err("needs a `keystore`, or `certificate` and `key`".into()),
        _ => return Err("give either `keystore` or `certificate` + `key`".into()),
    };
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("unusable private key: {e}"))?;
    let ck = CertifiedKey::new(chain, signing);
    ck.keys_match()
        .map_err(|e| format!("the private key does not belong to the certificate: {e}"))?;
    Ok(Arc::new(ck))
}

/// Builds the TLS config of a listener from its sites. Settings other than the certificate
/// (protocols, ciphers, client auth) must be the same for every site of the listener. An error
/// names the site index and what is wrong.
pub fn server_config(sites: &[SiteCert<'_>]) -> Result<Arc<ServerConfig>, (usize, String)> {
    let first = sites.first().ok_or((0, "no TLS site".to_string()))?;
    let shared = |s: &SslConfig| {
        (
            s.protocols.clone(),
            s.ciphers.clone(),
            s.client_auth
                .as_ref()
                .map(|c| (c.truststore.location.clone(), c.required.map(|f| f.0))),
        )
    };
    for (i, s) in sites.iter().enumerate().skip(1) {
        if shared(s.ssl) != shared(first.ssl) {
            return Err((
                i,
                "protocols, ciphers and clientAuth must be the same for all APIs of a port".into(),
            ));
        }
    }
    let provider = provider_with(&first.ssl.ciphers).map_err(|m| (0, m))?;
    let mut resolver = SniResolver {
        exact: HashMap::new(),
        wildcard: Vec::new(),
        default: None,
    };
    for (i, site) in sites.iter().enumerate() {
        let key = certified(site, &provider).map_err(|m| (i, m))?;
        if site.hosts.is_empty() {
            if resolver.default.is_none() {
                resolver.default = Some(key.clone());
            }
            continue;
        }
        for h in &site.hosts {
            let h = h.to_ascii_lowercase();
            if h == "*" {
                resolver.default.get_or_insert_with(|| key.clone());
            } else if let Some(suffix) = h.strip_prefix('*') {
                resolver.wildcard.push((suffix.to_owned(), key.clone()));
            } else {
                resolver.exact.entry(h).or_insert_with(|| key.clone());
            }
        }
        // The first certificate also serves clients without SNI unless a host-less API has one.
        if resolver.default.is_none() {
            resolver.default = Some(key);
        }
    }
    resolver
        .wildcard
        .sort_by_key(|w| std::cmp::Reverse(w.0.len()));
    let versions = versions(&first.ssl.protocols).map_err(|m| (0, m))?;
    let builder = ServerConfig::builder_with_provider(Arc::new(provider.clone()))
        .with_protocol_versions(&versions)
        .map_err(|e| {
            (
                0,
                format!("these protocols and ciphers do not fit together: {e}"),
            )
        })?;
    let builder = match &first.ssl.client_auth {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let roots = material::roots(first.base, &ca.truststore).map_err(|m| (0, m))?;
            let v =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::new(provider));
            let v = if ca.required.is_none_or(|f| f.0) {
                v
            } else {
                v.allow_unauthenticated()
            };
            builder.with_client_cert_verifier(
                v.build()
                    .map_err(|e| (0, format!("client certificate verifier: {e}")))?,
            )
        }
    };
    let mut cfg = builder.with_cert_resolver(Arc::new(resolver));
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    // The server's order of cipher suites (strongest first) wins over the client's.
    cfg.ignore_client_order = true;
    Ok(Arc::new(cfg))
}
