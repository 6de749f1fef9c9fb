//! Key material of `wsSecurity`, read when the configuration is loaded: the signing key and its
//! certificate from a PKCS#12 keystore, and trusted certificates from a PKCS#12 truststore or a
//! PEM bundle. Paths are relative to the config file.

use std::path::{Path, PathBuf};

use p12_keystore::{KeyStore, KeyStoreEntry, Pkcs12ImportPolicy};

use super::settings::{KeystoreSettings, TruststoreSettings};

/// A signing key (PKCS#8 DER) with its certificate (DER).
#[derive(Clone)]
pub struct SigningKey {
    /// The private key, PKCS#8 DER.
    pub key: Vec<u8>,
    /// The certificate, DER.
    pub cert: Vec<u8>,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey").finish_non_exhaustive()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// Reads the key entry (the only one, or `keyAlias`) of the keystore. Runs once per load;
/// returns the key and the file read.
pub fn signing_key(base: &Path, ks: &KeystoreSettings) -> Result<(SigningKey, PathBuf), String> {
    let password = ks.password.as_deref().unwrap_or("");
    if ks.key_password.as_deref().is_some_and(|k| k != password) {
        return Err(
            "keyPassword differs from password: PKCS#12 protects key and store with one password here"
                .into(),
        );
    }
    let path = base.join(&ks.location);
    let (certs, key) = turnpike_tls::material::pkcs12_key(
        &read(&path)?,
        password,
        &ks.location,
        ks.key_alias.as_deref(),
        "keyAlias",
    )?;
    let cert = certs
        .into_iter()
        .next()
        .ok_or_else(|| format!("{}: the key has no certificate", ks.location))?;
    Ok((SigningKey { key, cert }, path))
}

/// Reads the trusted certificates (DER) of a PKCS#12 truststore or a PEM bundle. Runs once
/// per load; returns them and the file read.
pub fn trusted(base: &Path, ts: &TruststoreSettings) -> Result<(Vec<Vec<u8>>, PathBuf), String> {
    let path = base.join(&ts.location);
    let data = read(&path)?;
    let mut out = Vec::new();
    let looks_pem = data.windows(11).any(|w| w == b"-----BEGIN ");
    if looks_pem {
        for pem in x509_parser::pem::Pem::iter_from_buffer(&data) {
            let pem = pem.map_err(|e| format!("{}: bad PEM: {e}", ts.location))?;
            if pem.label == "CERTIFICATE" {
                out.push(pem.contents);
            }
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
            match e {
                KeyStoreEntry::Certificate(c) => out.push(c.as_der().to_vec()),
                KeyStoreEntry::PrivateKeyChain(c) => {
                    out.extend(c.certs().iter().map(|c| c.as_der().to_vec()))
                }
                KeyStoreEntry::Secret(_) => {}
            }
        }
    }
    if out.is_empty() {
        return Err(format!("{}: no certificate in the truststore", ts.location));
    }
    for (i, c) in out.iter().enumerate() {
        x509_parser::parse_x509_certificate(c)
            .map_err(|e| format!("{}: certificate {} is not X.509: {e}", ts.location, i + 1))?;
    }
    Ok((out, path))
}
