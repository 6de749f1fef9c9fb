//! XML Signature in the `wsse:Security` header. Canonicalization, digests and the signature
//! itself are libxmlsec1's (through the `xmlsec` crate); this module only builds the signature
//! template, marks the `wsu:Id`s, picks the key, and decides what a verified signature must
//! cover.
//!
//! Verification is strict before libxmlsec1 sees anything: one `ds:Signature`, no
//! `ds:Object`/`ds:Manifest`, only same-document `#id` references, canonicalization as the only
//! transform, SHA-256 or better, a signing certificate that is in the truststore (and valid
//! now), and unique ids in the whole message. After it verified, every required element, found
//! by its place in the message (not by id), must be named by a `ds:Reference` of the
//! `ds:SignedInfo` that was verified: the defence against signature wrapping.

use std::collections::HashSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use libxml::tree::{Document, Node};
use sha1::{Digest, Sha1};
use xmlsec::{XmlSecDocumentExt, XmlSecKey, XmlSecKeyFormat, XmlSecSignatureContext};

use super::dom::{self, Message, DS_NS, WSSE_NS, WSU_NS};
use super::fault::{Fault, WsseCode};
use super::keys::SigningKey;
use super::settings::By;
use super::timestamp;

/// Exclusive canonicalization.
pub const EXC_C14N: &str = "http://www.w3.org/2001/10/xml-exc-c14n#";
/// RSA with SHA-256.
pub const RSA_SHA256: &str = "http://www.w3.org/2001/04/xmldsig-more#rsa-sha256";
/// SHA-256.
pub const SHA256: &str = "http://www.w3.org/2001/04/xmlenc#sha256";

/// `ValueType` of an X.509 v3 token.
const X509_V3: &str =
    "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-x509-token-profile-1.0#X509v3";
/// `ValueType` of a SHA-1 thumbprint key identifier.
const THUMBPRINT_SHA1: &str =
    "http://docs.oasis-open.org/wss/oasis-wss-soap-message-security-1.1#ThumbprintSHA1";
/// `EncodingType` Base64.
const BASE64_BINARY: &str = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-soap-message-security-1.0#Base64Binary";

/// The canonicalizations that may be signed with.
pub const SIGN_C14N: &[&str] = &[
    EXC_C14N,
    "http://www.w3.org/2001/10/xml-exc-c14n#WithComments",
    "http://www.w3.org/TR/2001/REC-xml-c14n-20010315",
    "http://www.w3.org/TR/2001/REC-xml-c14n-20010315#WithComments",
];
/// The canonicalizations (and so the only transforms) accepted on a verified signature.
const VERIFY_C14N: &[&str] = &[
    EXC_C14N,
    "http://www.w3.org/2001/10/xml-exc-c14n#WithComments",
    "http://www.w3.org/TR/2001/REC-xml-c14n-20010315",
    "http://www.w3.org/TR/2001/REC-xml-c14n-20010315#WithComments",
    "http://www.w3.org/2006/12/xml-c14n11",
    "http://www.w3.org/2006/12/xml-c14n11#WithComments",
];
/// The signature algorithms that may be signed with (RSA-SHA1 for old peers).
pub const SIGN_ALGORITHMS: &[&str] = &[
    "http://www.w3.org/2000/09/xmldsig#rsa-sha1",
    RSA_SHA256,
    "http://www.w3.org/2001/04/xmldsig-more#rsa-sha384",
    "http://www.w3.org/2001/04/xmldsig-more#rsa-sha512",
    "http://www.w3.org/2001/04/xmldsig-more#ecdsa-sha256",
    "http://www.w3.org/2001/04/xmldsig-more#ecdsa-sha384",
    "http://www.w3.org/2001/04/xmldsig-more#ecdsa-sha512",
];
/// The signature algorithms accepted on a verified signature (no SHA-1, no HMAC).
const VERIFY_ALGORITHMS: &[&str] = &[
    RSA_SHA256,
    "http://www.w3.org/2001/04/xmldsig-more#rsa-sha384",
    "http://www.w3.org/2001/04/xmldsig-more#rsa-sha512",
    "http://www.w3.org/2001/04/xmldsig-more#ecdsa-sha256",
    "http://www.w3.org/2001/04/xmldsig-more#ecdsa-sha384",
    "http://www.w3.org/2001/04/xmldsig-more#ecdsa-sha512",
];
/// The digests that may be signed with.
pub const SIGN_DIGESTS: &[&str] = &[
    "http://www.w3.org/2000/09/xmldsig#sha1",
    SHA256,
    "http://www.w3.org/2001/04/xmldsig-more#sha384",
    "http://www.w3.org/2001/04/xmlenc#sha512",
];
/// The digests accepted on a verified signature.
const VERIFY_DIGESTS: &[&str] = &[
    SHA256,
    "http://www.w3.org/2001/04/xmldsig-more#sha384",
    "http://www.w3.org/2001/04/xmlenc#sha512",
];

/// One element a signature covers: a well-known one, or the elements of an XPath.
#[derive(Debug, Clone)]
pub struct Target {
    /// What it names (`Xpath` with `xpath` set).
    pub by: By,
    /// The XPath, for `By::Xpath`.
    pub xpath: Option<String>,
    /// The `wsu:Id` to give it when signing.
    pub id: Option<String>,
}

impl Target {
    /// How a fault names the target.
    fn describe(&self) -> String {
        match &self.xpath {
            Some(x) => format!("XPATH {x}"),
            None => format!("{:?}", self.by).to_uppercase(),
        }
    }
}

/// The namespaces an XPath of a reference may use: `soap` (the message's envelope), `soap11`,
/// `soap12`, `wsse`, `wsu`, `ds`, and those of `xmlConfig`.
fn xpath_nodes(
    msg: &Message,
    xpath: &str,
    extra: &[(String, String)],
) -> Result<Vec<Node>, String> {
    let ctx = libxml::xpath::Context::new(&msg.doc)
        .map_err(|_| "the XPath context could not be created".to_owned())?;
    let builtin = [
        ("soap", msg.soap_ns()),
        ("soap11", "http://schemas.xmlsoap.org/soap/envelope/"),
        ("soap12", "http://www.w3.org/2003/05/soap-envelope"),
        ("wsse", WSSE_NS),
        ("wsu", WSU_NS),
        ("ds", DS_NS),
    ];
    for (p, u) in builtin {
        if !extra.iter().any(|(ep, _)| ep == p) {
            ctx.register_namespace(p, u)
                .map_err(|_| format!("cannot declare the prefix {p}"))?;
        }
    }
    for (p, u) in extra {
        ctx.register_namespace(p, u)
            .map_err(|_| format!("cannot declare the prefix {p}"))?;
    }
    let found = ctx
        .evaluate(xpath)
        .map_err(|_| format!("the XPath `{xpath}` cannot be evaluated"))?
        .get_nodes_as_vec();
    let elements: Vec<Node> = found.into_iter().filter(Node::is_element_node).collect();
    if elements.is_empty() {
        return Err(format!("the XPath `{xpath}` selects no element"));
    }
    Ok(elements)
}

/// The elements `target` names in `msg` whose header block is `security`.
fn resolve(
    msg: &Message,
    security: &Node,
    target: &Target,
    namespaces: &[(String, String)],
) -> Result<Vec<Node>, String> {
    let one = |n: Option<Node>, what: &str| n.map(|n| vec![n]).ok_or_else(|| format!("no {what}"));
    match target.by {
        By::Body => one(msg.body(), "soap:Body"),
        By::Timestamp => one(
            dom::child(security, WSU_NS, "Timestamp"),
            "wsu:Timestamp in wsse:Security",
        ),
        By::UsernameToken => one(
            dom::child(security, WSSE_NS, "UsernameToken"),
            "wsse:UsernameToken in wsse:Security",
        ),
        By::Bst => one(
            dom::child(security, WSSE_NS, "BinarySecurityToken"),
            "wsse:BinarySecurityToken in wsse:Security",
        ),
        By::Xpath => xpath_nodes(msg, target.xpath.as_deref().unwrap_or(""), namespaces),
        By::Header | By::EncryptedKey => Err("not supported".into()),
    }
}

/// Declares every `wsu:Id` and `Id` of the document an XML ID, so that `#id` resolves; an id
/// used twice is a fault.
fn mark_ids(msg: &Message) -> Result<(), Fault> {
    let ids = dom::all_ids(&msg.envelope);
    if let Some((id, _)) = ids.iter().find(|(_, n)| **n > 1) {
        return Err(Fault::new(
            WsseCode::FailedCheck,
            format!("the id `{id}` is used more than once"),
        ));
    }
    if ids.is_empty() {
        return Ok(());
    }
    msg.doc
        .specify_idattr("//*[@*[local-name()='Id']]", "Id", None)
        .map_err(|e| Fault::new(WsseCode::FailedCheck, format!("ids cannot be marked: {e}")))
}

/// How the signer names its key in `ds:KeyInfo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyInfoMode {
    /// `ds:X509Data` with the certificate.
    X509Data,
    /// A `wsse:SecurityTokenReference` to a `wsse:BinarySecurityToken` with the certificate.
    SecurityTokenReference,
}

/// The `secure` signature: signs the targets with the keystore's key.
#[derive(Debug)]
pub struct Signer {
    /// The key and certificate.
    pub key: SigningKey,
    /// What to sign.
    pub targets: Vec<Target>,
    /// `ds:SignatureMethod`.
    pub algorithm: String,
    /// `ds:DigestMethod`.
    pub digest: String,
    /// Canonicalization of `ds:SignedInfo` and each reference.
    pub c14n: String,
    /// How the key is named.
    pub key_info: KeyInfoMode,
    /// `xmlConfig`'s namespaces.
    pub namespaces: Vec<(String, String)>,
}

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

fn set_alg(n: &mut Node, alg: &str) -> Result<(), Fault> {
    n.set_attribute("Algorithm", alg)
        .map_err(|_| dom::internal())
}

impl Signer {
    /// Signs `msg` into its header block `security`: adds a `wsse:BinarySecurityToken` when
    /// the key is named by reference, gives every target a `wsu:Id`, appends the
    /// `ds:Signature` template and lets libxmlsec1 compute digests and signature. Runs per
    /// message; an unresolvable target is `wsse:InvalidSecurity`, a signing failure an
    /// internal fault.
    pub fn sign(&self, msg: &Message, security: &mut Node) -> Result<(), Fault> {
        let doc = &msg.doc;
        let bst_id = match self.key_info {
            KeyInfoMode::SecurityTokenReference => Some(self.binary_security_token(doc, security)?),
            KeyInfoMode::X509Data => None,
        };
        let mut ids = Vec::new();
        for t in &self.targets {
            let found = resolve(msg, security, t, &self.namespaces).map_err(|e| {
                Fault::new(
                    WsseCode::InvalidSecurity,
                    format!("signature reference {}: {e}", t.describe()),
                )
            })?;
            if t.id.is_some() && found.len() > 1 {
                return Err(Fault::new(
                    WsseCode::InvalidSecurity,
                    format!(
                        "signature reference {} has an id but selects {} elements",
                        t.describe(),
                        found.len()
                    ),
                ));
            }
            for mut el in found {
                let id = match (&t.id, dom::id_of(&el)) {
                    (None, Some(existing)) => existing,
                    (explicit, _) => {
                        let id = match explicit {
                            Some(i) => i.clone(),
                            None => dom::new_id("id")?,
                        };
                        let wsu = dom::namespace_for(&mut el, WSU_NS, "wsu")?;
                        el.set_attribute_ns("Id", &id, &wsu)
                            .map_err(|_| dom::internal())?;
                        id
                    }
                };
                ids.push(id);
            }
        }
        let signature = self.template(doc, security, &ids, bst_id.as_deref())?;
        mark_ids(msg)?;
        let mut ctx = XmlSecSignatureContext::new();
        let key = XmlSecKey::from_memory(&self.key.key, XmlSecKeyFormat::Der, None)
            .map_err(|e| Fault::internal(format!("the signing key cannot be used: {e}")))?;
        key.load_cert_from_memory(&self.key.cert, XmlSecKeyFormat::CertDer)
            .map_err(|e| Fault::internal(format!("the signing certificate cannot be used: {e}")))?;
        ctx.insert_key(key);
        ctx.sign_node(&signature)
            .map_err(|e| Fault::internal(format!("the message could not be signed: {e}")))
    }

    /// The id of the header's `wsse:BinarySecurityToken` with the certificate, added when it
    /// has none.
    fn binary_security_token(&self, doc: &Document, security: &mut Node) -> Result<String, Fault> {
        if let Some(mut existing) = dom::child(security, WSSE_NS, "BinarySecurityToken") {
            if let Some(id) = dom::id_of(&existing) {
                return Ok(id);
            }
            let id = dom::new_id("X509")?;
            let wsu = dom::namespace_for(&mut existing, WSU_NS, "wsu")?;
            existing
                .set_attribute_ns("Id", &id, &wsu)
                .map_err(|_| dom::internal())?;
            return Ok(id);
        }
        let wsse = dom::namespace_for(security, WSSE_NS, "wsse")?;
        let mut bst =
            Node::new("BinarySecurityToken", Some(wsse), doc).map_err(|_| dom::internal())?;
        security.add_child(&mut bst).map_err(|_| dom::internal())?;
        let id = dom::new_id("X509")?;
        let wsu = dom::namespace_for(&mut bst, WSU_NS, "wsu")?;
        bst.set_attribute("EncodingType", BASE64_BINARY)
            .map_err(|_| dom::internal())?;
        bst.set_attribute("ValueType", X509_V3)
            .map_err(|_| dom::internal())?;
        bst.set_attribute_ns("Id", &id, &wsu)
            .map_err(|_| dom::internal())?;
        bst.append_text(&b64(&self.key.cert))
            .map_err(|_| dom::internal())?;
        Ok(id)
    }

    /// Appends the `ds:Signature` template (empty digest and signature values) to `security`.
    fn template(
        &self,
        doc: &Document,
        security: &mut Node,
        ids: &[String],
        bst_id: Option<&str>,
    ) -> Result<Node, Fault> {
        let mut sig = Node::new("Signature", None, doc).map_err(|_| dom::internal())?;
        security.add_child(&mut sig).map_err(|_| dom::internal())?;
        let ds = dom::declare(&mut sig, "ds", DS_NS)?;
        sig.set_namespace(&ds).map_err(|_| dom::internal())?;
        sig.set_attribute("Id", &dom::new_id("SIG")?)
            .map_err(|_| dom::internal())?;
        let mut info = dom::add_element(&mut sig, &ds, "SignedInfo")?;
        set_alg(
            &mut dom::add_element(&mut info, &ds, "CanonicalizationMethod")?,
            &self.c14n,
        )?;
        set_alg(
            &mut dom::add_element(&mut info, &ds, "SignatureMethod")?,
            &self.algorithm,
        )?;
        for id in ids {
            let mut r = dom::add_element(&mut info, &ds, "Reference")?;
            r.set_attribute("URI", &format!("#{id}"))
                .map_err(|_| dom::internal())?;
            let mut transforms = dom::add_element(&mut r, &ds, "Transforms")?;
            set_alg(
                &mut dom::add_element(&mut transforms, &ds, "Transform")?,
                &self.c14n,
            )?;
            set_alg(
                &mut dom::add_element(&mut r, &ds, "DigestMethod")?,
                &self.digest,
            )?;
            dom::add_element(&mut r, &ds, "DigestValue")?;
        }
        dom::add_element(&mut sig, &ds, "SignatureValue")?;
        let mut key_info = dom::add_element(&mut sig, &ds, "KeyInfo")?;
        match bst_id {
            Some(bst) => {
                let wsse = dom::namespace_for(&mut key_info, WSSE_NS, "wsse")?;
                let mut str_ = dom::add_element(&mut key_info, &wsse, "SecurityTokenReference")?;
                let mut r = dom::add_element(&mut str_, &wsse, "Reference")?;
                r.set_attribute("URI", &format!("#{bst}"))
                    .map_err(|_| dom::internal())?;
                r.set_attribute("ValueType", X509_V3)
                    .map_err(|_| dom::internal())?;
            }
            None => {
                let mut data = dom::add_element(&mut key_info, &ds, "X509Data")?;
                dom::add_text(&mut data, &ds, "X509Certificate", &b64(&self.key.cert))?;
            }
        }
        Ok(sig)
    }
}

/// The `validate` signature: verifies against the truststore and checks what is covered.
#[derive(Debug)]
pub struct Verifier {
    /// Trusted certificates, DER.
    pub trusted: Vec<Vec<u8>>,
    /// What the signature must cover.
    pub required: Vec<Target>,
    /// Tolerance for a required timestamp's window.
    pub clock_skew: Duration,
    /// `xmlConfig`'s namespaces.
    pub namespaces: Vec<(String, String)>,
}

fn failed(reason: impl Into<String>) -> Fault {
    Fault::new(WsseCode::FailedCheck, reason)
}

fn algorithm_of(parent: &Node, local: &str) -> String {
    dom::child(parent, DS_NS, local)
        .and_then(|n| n.get_attribute_no_ns("Algorithm"))
        .unwrap_or_default()
}

fn allowed(what: &str, alg: &str, list: &[&str]) -> Result<(), Fault> {
    if list.contains(&alg) {
        Ok(())
    } else {
        Err(Fault::new(
            WsseCode::UnsupportedAlgorithm,
            format!("{what} `{alg}` is not accepted"),
        ))
    }
}

fn decode_b64(text: &str) -> Result<Vec<u8>, Fault> {
    let clean: String = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    base64::engine::general_purpose::STANDARD
        .decode(clean)
        .map_err(|_| {
            Fault::new(
                WsseCode::InvalidSecurityToken,
                "malformed Base64 in wsse:Security",
            )
        })
}

impl Verifier {
    /// Verifies the one `ds:Signature` of `security` in `msg` at `now` and checks that it
    /// covers every required element. Runs per message; returns nothing on success, else the
    /// WS-Security fault (`wsse:FailedCheck` for a signature that does not verify or does not
    /// cover what it must).
    pub fn verify(&self, msg: &Message, security: &Node, now: SystemTime) -> Result<(), Fault> {
        let mut sigs = dom::children(security, DS_NS, "Signature");
        let sig = match sigs.len() {
            0 => {
                return Err(Fault::new(
                    WsseCode::InvalidSecurity,
                    "wsse:Security carries no ds:Signature",
                ))
            }
            1 => sigs.pop().ok_or_else(dom::internal)?,
            _ => {
                return Err(Fault::new(
                    WsseCode::InvalidSecurity,
                    "more than one ds:Signature",
                ))
            }
        };
        for c in sig.get_child_elements() {
            if dom::is(&c, DS_NS, "Object") || dom::is(&c, DS_NS, "Manifest") {
                return Err(failed(format!(
                    "ds:Signature carries unsigned ds:{} content",
                    c.get_name()
                )));
            }
        }
        let info = dom::child(&sig, DS_NS, "SignedInfo").ok_or_else(|| {
            Fault::new(
                WsseCode::InvalidSecurity,
                "ds:Signature has no ds:SignedInfo",
            )
        })?;
        allowed(
            "ds:CanonicalizationMethod",
            &algorithm_of(&info, "CanonicalizationMethod"),
            VERIFY_C14N,
        )?;
        allowed(
            "ds:SignatureMethod",
            &algorithm_of(&info, "SignatureMethod"),
            VERIFY_ALGORITHMS,
        )?;
        let references = dom::children(&info, DS_NS, "Reference");
        if references.is_empty() {
            return Err(Fault::new(
                WsseCode::InvalidSecurity,
                "ds:SignedInfo has no ds:Reference",
            ));
        }
        let mut covered = HashSet::new();
        for r in &references {
            let uri = r.get_attribute_no_ns("URI").unwrap_or_default();
            let id = uri
                .strip_prefix('#')
                .filter(|i| !i.is_empty() && !i.starts_with("xpointer("))
                .ok_or_else(|| {
                    failed(format!(
                        "ds:Reference URI `{uri}` is not a same-document #id"
                    ))
                })?;
            covered.insert(id.to_owned());
            allowed(
                "ds:DigestMethod",
                &algorithm_of(r, "DigestMethod"),
                VERIFY_DIGESTS,
            )?;
            if let Some(ts) = dom::child(r, DS_NS, "Transforms") {
                for t in dom::children(&ts, DS_NS, "Transform") {
                    allowed(
                        "ds:Transform",
                        &t.get_attribute_no_ns("Algorithm").unwrap_or_default(),
                        VERIFY_C14N,
                    )?;
                }
            }
        }
        let cert = self.certificate(msg, &sig)?;
        self.check_trusted(&cert, now)?;
        mark_ids(msg)?;
        let key = XmlSecKey::from_memory(&cert, XmlSecKeyFormat::CertDer, None)
            .map_err(|_| failed("the signing certificate's key cannot be used"))?;
        let mut ctx = XmlSecSignatureContext::new();
        ctx.insert_key(key);
        match ctx.verify_node(&sig) {
            Ok(true) => {}
            Ok(false) | Err(_) => return Err(failed("the signature is not valid")),
        }
        let position = |n: &Node| -> Option<usize> {
            security
                .get_child_elements()
                .iter()
                .position(|c| c.node_ptr() == n.node_ptr())
        };
        let sig_at = position(&sig);
        for t in &self.required {
            let found = resolve(msg, security, t, &self.namespaces)
                .map_err(|e| failed(format!("[{}] {e}", t.describe())))?;
            for el in found {
                let id = dom::id_of(&el).ok_or_else(|| {
                    failed(format!(
                        "[{}] the element has no wsu:Id, so nothing signed it",
                        t.describe()
                    ))
                })?;
                if matches!(t.by, By::Timestamp | By::UsernameToken) && position(&el) > sig_at {
                    return Err(failed(format!(
                        "[{}] must precede the ds:Signature that covers it",
                        t.describe()
                    )));
                }
                if !covered.contains(&id) {
                    return Err(failed(format!(
                        "[{}] is not covered by the signature",
                        t.describe()
                    )));
                }
                if t.by == By::Timestamp {
                    timestamp::check(&el, now, self.clock_skew)?;
                }
            }
        }
        Ok(())
    }

    /// The signing certificate (DER) named by `ds:KeyInfo`: `ds:X509Data`, or a
    /// `wsse:SecurityTokenReference` to a `wsse:BinarySecurityToken`, an X.509 key identifier,
    /// or a SHA-1 thumbprint of a truststore certificate.
    fn certificate(&self, msg: &Message, sig: &Node) -> Result<Vec<u8>, Fault> {
        let key_info = dom::child(sig, DS_NS, "KeyInfo").ok_or_else(|| {
            Fault::new(WsseCode::InvalidSecurity, "ds:Signature has no ds:KeyInfo")
        })?;
        if let Some(data) = dom::child(&key_info, DS_NS, "X509Data") {
            let c = dom::child(&data, DS_NS, "X509Certificate").ok_or_else(|| {
                Fault::new(
                    WsseCode::InvalidSecurityToken,
                    "ds:X509Data has no ds:X509Certificate",
                )
            })?;
            return decode_b64(&c.get_content());
        }
        let str_ = dom::child(&key_info, WSSE_NS, "SecurityTokenReference").ok_or_else(|| {
            Fault::new(
                WsseCode::UnsupportedSecurityToken,
                "ds:KeyInfo holds neither ds:X509Data nor wsse:SecurityTokenReference",
            )
        })?;
        if let Some(ki) = dom::child(&str_, WSSE_NS, "KeyIdentifier") {
            let value_type = ki.get_attribute_no_ns("ValueType").unwrap_or_default();
            let raw = decode_b64(&ki.get_content())?;
            return match value_type.as_str() {
                THUMBPRINT_SHA1 => self
                    .trusted
                    .iter()
                    .find(|c| Sha1::digest(c)[..] == raw[..])
                    .cloned()
                    .ok_or_else(|| {
                        Fault::new(
                            WsseCode::SecurityTokenUnavailable,
                            "no truststore certificate has this thumbprint",
                        )
                    }),
                X509_V3 => Ok(raw),
                other => Err(Fault::new(
                    WsseCode::UnsupportedSecurityToken,
                    format!("unsupported wsse:KeyIdentifier ValueType `{other}`"),
                )),
            };
        }
        let r = dom::child(&str_, WSSE_NS, "Reference").ok_or_else(|| {
            Fault::new(
                WsseCode::InvalidSecurityToken,
                "wsse:SecurityTokenReference has no wsse:Reference or wsse:KeyIdentifier",
            )
        })?;
        let uri = r.get_attribute_no_ns("URI").unwrap_or_default();
        let id = uri
            .strip_prefix('#')
            .filter(|i| !i.is_empty())
            .ok_or_else(|| {
                Fault::new(
                    WsseCode::SecurityTokenUnavailable,
                    "wsse:Reference must be a same-document #id",
                )
            })?;
        let mut tokens = Vec::new();
        let mut stack = vec![msg.envelope.clone()];
        while let Some(n) = stack.pop() {
            if dom::id_of(&n).as_deref() == Some(id) {
                tokens.push(n.clone());
            }
            stack.extend(n.get_child_elements());
        }
        match tokens.as_slice() {
            [t] if dom::is(t, WSSE_NS, "BinarySecurityToken") => decode_b64(&t.get_content()),
            [_] => Err(Fault::new(
                WsseCode::SecurityTokenUnavailable,
                "wsse:Reference does not name a wsse:BinarySecurityToken",
            )),
            [] => Err(Fault::new(
                WsseCode::SecurityTokenUnavailable,
                format!("no token with the id `{id}`"),
            )),
            _ => Err(failed(format!("the id `{id}` is used more than once"))),
        }
    }

    /// The certificate must be one of the truststore's, valid now, and (when it says what its
    /// key is for) allowed to sign.
    fn check_trusted(&self, cert: &[u8], now: SystemTime) -> Result<(), Fault> {
        if !self.trusted.iter().any(|t| t.as_slice() == cert) {
            return Err(failed("the signing certificate is not in the truststore"));
        }
        let (_, parsed) = x509_parser::parse_x509_certificate(cert).map_err(|_| {
            Fault::new(
                WsseCode::InvalidSecurityToken,
                "the signing certificate is not X.509",
            )
        })?;
        let secs = now
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        let at =
            x509_parser::time::ASN1Time::from_timestamp(i64::try_from(secs).unwrap_or(i64::MAX))
                .map_err(|_| dom::internal())?;
        if !parsed.validity().is_valid_at(at) {
            return Err(failed("the signing certificate is not valid at this time"));
        }
        if let Ok(Some(ku)) = parsed.key_usage() {
            if !ku.value.digital_signature() && !ku.value.non_repudiation() {
                return Err(failed(
                    "the signing certificate's key usage does not allow signing",
                ));
            }
        }
        Ok(())
    }
}
