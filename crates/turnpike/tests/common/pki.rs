//! Test certificates made at test time (never committed): a CA, server certificates for
//! `localhost`, an expired one, one for another name, and a client certificate.

use std::path::{Path, PathBuf};
use std::process::Command;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};

/// Files of one certificate: PEM chain and key.
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A CA and certificates it signed, written into `dir`.
pub struct Pki {
    pub dir: PathBuf,
    pub ca: PathBuf,
    pub server: CertFiles,
    pub other_name: CertFiles,
    pub expired: CertFiles,
    pub client: CertFiles,
    pub alt_host: CertFiles,
}

fn leaf(
    dir: &Path,
    name: &str,
    sans: &[&str],
    cn: &str,
    ca: &CertifiedIssuer<'_, KeyPair>,
    expired: bool,
    client: bool,
) -> CertFiles {
    let mut p =
        CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    p.distinguished_name.push(DnType::CommonName, cn);
    p.distinguished_name
        .push(DnType::OrganizationName, "Turnpike Tests");
    if expired {
        p.not_before = rcgen::date_time_ymd(2020, 1, 1);
        p.not_after = rcgen::date_time_ymd(2021, 1, 1);
    }
    if client {
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    }
    let key = KeyPair::generate().unwrap();
    let cert = p.signed_by(&key, ca).unwrap();
    let files = CertFiles {
        cert: dir.join(format!("{name}.pem")),
        key: dir.join(format!("{name}.key")),
    };
    std::fs::write(&files.cert, cert.pem()).unwrap();
    std::fs::write(&files.key, key.serialize_pem()).unwrap();
    files
}

impl Pki {
    pub fn new(dir: &Path) -> Pki {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(DnType::CommonName, "Turnpike Test CA");
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap();
        let ca_path = dir.join("ca.pem");
        std::fs::write(&ca_path, ca.pem()).unwrap();
        Pki {
            dir: dir.to_owned(),
            server: leaf(
                dir,
                "server",
                &["localhost", "127.0.0.1"],
                "localhost",
                &ca,
                false,
                false,
            ),
            other_name: leaf(
                dir,
                "other",
                &["other.example"],
                "other.example",
                &ca,
                false,
                false,
            ),
            expired: leaf(
                dir,
                "expired",
                &["localhost", "127.0.0.1"],
                "localhost",
                &ca,
                true,
                false,
            ),
            client: leaf(dir, "client", &["client"], "client-one", &ca, false, true),
            alt_host: leaf(
                dir,
                "alt",
                &["alt.localhost"],
                "alt.localhost",
                &ca,
                false,
                false,
            ),
            ca: ca_path,
        }
    }

    /// Packs a certificate and key into a PKCS#12 keystore with the openssl CLI.
    pub fn pkcs12(&self, files: &CertFiles, name: &str, password: &str) -> PathBuf {
        let out = self.dir.join(format!("{name}.p12"));
        let status = Command::new("openssl")
            .args(["pkcs12", "-export", "-in"])
            .arg(&files.cert)
            .arg("-inkey")
            .arg(&files.key)
            .arg("-out")
            .arg(&out)
            .args(["-passout", &format!("pass:{password}"), "-name", "gateway"])
            .status()
            .unwrap();
        assert!(status.success());
        out
    }

    /// A PKCS#12 truststore holding the CA, made with the openssl CLI.
    pub fn truststore(&self, password: &str) -> PathBuf {
        let out = self.dir.join("truststore.p12");
        let status = Command::new("openssl")
            .args(["pkcs12", "-export", "-nokeys", "-in"])
            .arg(&self.ca)
            .arg("-out")
            .arg(&out)
            .args(["-passout", &format!("pass:{password}")])
            .status()
            .unwrap();
        assert!(status.success());
        out
    }
}

/// Runs curl and returns (status code, HTTP version, body, stderr); `args` come after the
/// common options.
pub fn curl(args: &[&str]) -> (u16, String, String, String) {
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "10",
            "-o",
            "-",
            "-w",
            "\n%{http_code} %{http_version}",
        ])
        .args(args)
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, tail) = text.rsplit_once('\n').unwrap_or(("", &text));
    let mut it = tail.split_whitespace();
    let code = it.next().and_then(|c| c.parse().ok()).unwrap_or(0);
    let version = it.next().unwrap_or("").to_owned();
    (
        code,
        version,
        body.to_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
