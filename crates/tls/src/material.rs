//! Key material: certificate chains and private keys from PEM files or PKCS#12 keystores, and
//! trusted roots from PEM bundles or PKCS#12 truststores. Paths are relative to the config file.

use std::path::Path;

use p12_keystore::{KeyStore, KeyStoreEntry, Pkcs12ImportPolicy};
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use turnpike_config::{Keystore, Truststore};

/// A certificate chain (leaf first) and its private key.
pub type Identity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

fn read(base: &Path, file: &str) -> Result<Vec<u8>, String> {
    let path = base.join(file);
    std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// Reads a PEM certificate chain and a PEM private key.
pub fn pem_identity(base: &Path, certificate: &str, key: &str) -> Result<Identity, String> {
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(&read(base, certificate)?)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{certificate}: not a PEM certificate chain: {e}"))?;
    if chain.is_empty() {
        return Err(format!("{certificate}: no certificate in the file"));
    }
    let key = PrivateKeyDer::from_pem_slice(&read(base, key)?)
        .map_err(|e| format!("{key}: no usable private key (PKCS#8, PKCS#1 or SEC1 PEM): {e}"))?;
    Ok((chain, key))
}

/// Reads the key entry (the only one, or `alias`) of a PKCS#12 keystore.
pub fn pkcs12_identity(base: &Path, ks: &Keystore) -> Result<Identity, String> {
    let password = ks.password.as_deref().unwrap_or("");
    if let Some(kp) = &ks.key_password {
        if kp != password {
            return Err("keyPassword differs from password: PKCS#12 stores protect key and store with one password here".into());
        }
    }
    let data = read(base, &ks.location)?;
    let (certs, key) = pkcs12_key(&data, password, &ks.location, ks.alias.as_deref(), "alias")?;
    let certs: Vec<CertificateDer<'static>> = certs.into_iter().map(CertificateDer::from).collect();
    if certs.is_empty() {
        return Err(format!("{}: the key has no certificate", ks.location));
    }
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key));
    Ok((certs, key))
}

/// The private key entry of a PKCS#12 keystore (`data`, read from `location`): the one named
/// `alias`, or the only one; its certificate chain (DER, leaf first) and its PKCS#8 key (DER).
/// `alias_key` is the setting's name in errors. Runs at load time.
pub fn pkcs12_key(
    data: &[u8],
    password: &str,
    location: &str,
    alias: Option<&str>,
    alias_key: &str,
) -> Result<(Vec<Vec<u8>>, Vec<u8>), String> {
    let store =
        KeyStore::from_pkcs12(data, password, Pkcs12ImportPolicy::Relaxed).map_err(|e| {
            format!("{location}: cannot open the PKCS#12 keystore (wrong password?): {e}")
        })?;
    let chain = match alias {
        Some(alias) => match store.entry(alias) {
            Some(KeyStoreEntry::PrivateKeyChain(c)) => c,
            Some(_) => return Err(format!("{location}: entry `{alias}` holds no private key")),
            None => return Err(format!("{location}: no entry `{alias}`")),
        },
        None => {
            let keys: Vec<_> = store
                .entries()
                .filter_map(|(a, e)| match e {
                    KeyStoreEntry::PrivateKeyChain(c) => Some((a, c)),
                    _ => None,
                })
                .collect();
            match keys.as_slice() {
                [(_, c)] => *c,
                [] => return Err(format!("{location}: the keystore holds no private key")),
                many => {
                    let names: Vec<&str> = many.iter().map(|(a, _)| a.as_str()).collect();
                    return Err(format!(
                        "{location}: several keys ({}); choose one with `{alias_key}`",
                        names.join(", ")
                    ));
                }
            }
        }
    };
    let certs = chain.certs().iter().map(|c| c.as_der().to_vec()).collect();
    Ok((certs, chain.key().as_der().to_vec()))
}

/// Reads trusted certificates: a PEM bundle (`.pem`, `.crt`, `.cer`) or a PKCS#12 truststore.
pub fn roots(base: &Path, ts: &Truststore) -> Result<RootCertStore, String> {
    let data = read(base, &ts.location)?;
    let mut store = RootCertStore::empty();
    let looks_pem = data.starts_with(b"-----") || data.windows(11).any(|w| w == b"-----BEGIN ");
    if looks_pem {
        for c in CertificateDer::pem_slice_iter(&data) {
            let c = c.map_err(|e| format!("{}: bad PEM: {e}", ts.location))?;
            store
                .add(c)
                .map_err(|e| format!("{}: unusable CA certificate: {e}", ts.location))?;
        }
    } else {
        let ks = KeyStore::from_pkcs12(
            &data,
            ts.password.as_deref().unwrap_or(""),
            Pkcs12ImportPolicy::Raw,
        )
        .map_err(|e| {
            format!(
                "{}: cannot open the PKCS#12 truststore (wrong password?): {e}",
                ts.location
            )
        })?;
        for (_, e) in ks.entries() {
            let certs: Vec<&p12_keystore::Certificate> = match e {
                KeyStoreEntry::Certificate(c) => vec![c],
                KeyStoreEntry::PrivateKeyChain(c) => c.certs().iter().collect(),
                KeyStoreEntry::Secret(_) => Vec::new(),
            };
            for c in certs {
                store
                    .add(CertificateDer::from(c.as_der().to_vec()))
                    .map_err(|e| format!("{}: unusable CA certificate: {e}", ts.location))?;
            }
        }
    }
    if store.is_empty() {
        return Err(format!("{}: no certificate in the truststore", ts.location));
    }
    Ok(store)
}
