//! `wsSecurity`: Membrane's WS-Security policy for SOAP messages. It owns the `wsse:Security`
//! header (of its `actor`): the `validate` parts check what the peer sent, in order, and the
//! header is then removed; without `validate`, the peer's tokens are dropped (only a
//! `wsu:Timestamp` stays). The `secure` parts then add fresh security, in order.
//!
//! Parts: `usernameToken` (UsernameToken Profile: text or digest passwords, nonce replay and
//! `wsu:Created` freshness), `timestamp`, and `signature` (XML Signature through libxmlsec1).
//! XML Encryption (`encrypt`, `decrypt`) is not available and is a load error.
//!
//! A failed check answers a SOAP fault with the WS-Security code (`wsse:FailedAuthentication`,
//! `wsse:InvalidSecurity`, …) in the message's SOAP version; a body that is not SOAP is
//! refused with a problem (`bad-xml`). The user of an accepted UsernameToken becomes the
//! exchange's identity (`${user()}`).

pub mod dom;
pub mod fault;
pub mod keys;
pub mod settings;
pub mod signature;
pub mod time;
pub mod timestamp;
pub mod username_token;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue};
use turnpike_core::exchange::Identity;
use turnpike_core::jsonpath::Message as Which;
use turnpike_core::{problems, Body, BodyNeed, Exchange, Outcome, Policy, Problem, Template};
use turnpike_core::{CompileContext, CompileError, PolicyFactory};

use self::dom::{Message, WSU_NS};
use self::fault::{fault_response, Fault};
use self::settings::{By, Reference, SecurePart, ValidatePart, WsSecuritySettings};
use self::signature::{KeyInfoMode, Signer, Target, Verifier};

/// The load error for XML Encryption.
const NO_ENCRYPTION: &str = "XML Encryption is not supported: the xmlsec binding Turnpike uses (libxmlsec1) signs and verifies but offers no encryption; use TLS to the backend for confidentiality, or terminate WS-Security encryption in the backend";

/// One check of `validate`.
#[derive(Debug)]
enum Check {
    UsernameToken(username_token::Validator),
    Timestamp(Duration),
    Signature(Box<Verifier>),
}

/// One step of `secure`.
#[derive(Debug)]
enum Step {
    UsernameToken {
        username: Template,
        password: Template,
        digest: bool,
    },
    Timestamp(Duration),
    Signature(Box<Signer>),
}

/// The compiled policy.
#[derive(Debug)]
pub struct WsSecurity {
    actor: Option<String>,
    must_understand: bool,
    validate: Vec<Check>,
    secure: Vec<Step>,
    files: Vec<PathBuf>,
}

fn err(key: impl Into<String>, message: impl Into<String>) -> CompileError {
    CompileError::new(key, message)
}

/// The targets of `references` (or `requiredReferences`) at `key`, checked.
fn targets(refs: &[Reference], key: &str, signing: bool) -> Result<Vec<Target>, CompileError> {
    if refs.is_empty() {
        return Err(err(
            key,
            "list at least one element to sign (e.g. `by: BODY`)",
        ));
    }
    refs.iter()
        .enumerate()
        .map(|(i, r)| {
            let k = format!("{key}[{i}]");
            let by = match (&r.xpath, r.by) {
                (Some(_), Some(_)) => {
                    return Err(err(&k, "give `by` or `xpath`, not both (`xpath` means XPATH)"))
                }
                (Some(x), None) if x.trim().is_empty() => return Err(err(format!("{k}.xpath"), "is empty")),
                (Some(_), None) => By::Xpath,
                (None, Some(By::Xpath)) => return Err(err(&k, "`by: XPATH` needs an `xpath`")),
                (None, Some(By::Header)) => {
                    return Err(err(
                        format!("{k}.by"),
                        "HEADER cannot be signed: the signature is inside the header it would cover; sign BODY, TIMESTAMP, USERNAME_TOKEN or an XPath instead",
                    ))
                }
                (None, Some(By::EncryptedKey)) => return Err(err(format!("{k}.by"), NO_ENCRYPTION)),
                (None, b) => b.unwrap_or(By::Body),
            };
            if !signing && r.id.is_some() {
                return Err(err(format!("{k}.id"), "only applies when signing"));
            }
            if let Some(id) = &r.id {
                let ok = !id.is_empty()
                    && id
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
                if !ok || id.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '.') {
                    return Err(err(format!("{k}.id"), "must be an XML name (letters, digits, `-`, `_`, `.`)"));
                }
            }
            Ok(Target {
                by,
                xpath: r.xpath.clone(),
                id: r.id.clone(),
            })
        })
        .collect()
}

/// The plain password of a configured user; a hash cannot be checked against a digest.
fn plain_password(p: &str, key: &str) -> Result<String, CompileError> {
    if p.starts_with('$') || p.starts_with("{SHA}") {
        return Err(err(
            key,
            "hashed passwords cannot be checked here (a PasswordDigest is computed from the plain password): give the password in plain text",
        ));
    }
    Ok(p.to_owned())
}

impl PolicyFactory for WsSecurity {
    const NAME: &'static str = "wsSecurity";
    const SOAP: bool = true;
    type Settings = WsSecuritySettings;

    /// Compiles the policy: reads the keystore and truststore, checks every part and that a
    /// signature follows the parts that create what it covers.
    fn compile(c: WsSecuritySettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        if c.validate.is_empty() && c.secure.is_empty() {
            return Err(err("", "give at least one `validate` or `secure` part"));
        }
        let namespaces: Vec<(String, String)> = c
            .xml_config
            .iter()
            .flat_map(|x| x.namespaces.iter())
            .map(|n| (n.prefix.clone(), n.uri.clone()))
            .collect();
        let mut files = Vec::new();
        let mut trusted: Option<Vec<Vec<u8>>> = None;
        let mut truststore = || -> Result<Vec<Vec<u8>>, CompileError> {
            if let Some(t) = &trusted {
                return Ok(t.clone());
            }
            let ts = c.truststore.as_ref().ok_or_else(|| {
                err(
                    "truststore",
                    "a `validate` signature needs a `truststore` with the signers' certificates",
                )
            })?;
            let (certs, path) =
                keys::trusted(ctx.base_dir, ts).map_err(|m| err("truststore.location", m))?;
            files.push(path);
            trusted = Some(certs.clone());
            Ok(certs)
        };
        let mut validate = Vec::new();
        for (i, part) in c.validate.iter().enumerate() {
            let key = format!("validate[{i}]");
            validate.push(match part {
                ValidatePart::UsernameToken(u) => {
                    let mut users = HashMap::new();
                    if let Some(s) = &u.static_user_data_provider {
                        if s.users.is_empty() {
                            return Err(err(format!("{key}.usernameToken.staticUserDataProvider.users"), "list at least one user"));
                        }
                        for (j, user) in s.users.iter().enumerate() {
                            let k = format!("{key}.usernameToken.staticUserDataProvider.users[{j}]");
                            let p = plain_password(&user.password, &format!("{k}.password"))?;
                            if users.insert(user.username.clone(), p).is_some() {
                                return Err(err(format!("{k}.username"), format!("user `{}` is listed twice", user.username)));
                            }
                        }
                    }
                    match (&u.username, &u.password) {
                        (Some(name), Some(p)) => {
                            let p = plain_password(p, &format!("{key}.usernameToken.password"))?;
                            users.insert(name.clone(), p);
                        }
                        (None, None) => {}
                        _ => return Err(err(format!("{key}.usernameToken"), "give `username` and `password` together")),
                    }
                    if users.is_empty() {
                        return Err(err(
                            format!("{key}.usernameToken"),
                            "no users: give a `staticUserDataProvider` with `users`, or `username` and `password`",
                        ));
                    }
                    let window = u.freshness_window.map_or(timestamp::DEFAULT_WINDOW, |d| d.0);
                    if window.is_zero() {
                        return Err(err(format!("{key}.usernameToken.freshnessWindow"), "must be positive"));
                    }
                    Check::UsernameToken(username_token::Validator::new(users, window))
                }
                ValidatePart::Timestamp(t) => {
                    Check::Timestamp(t.clock_skew.map_or(timestamp::DEFAULT_WINDOW, |d| d.0))
                }
                ValidatePart::Signature(s) => {
                    let required = targets(
                        &s.required_references,
                        &format!("{key}.signature.requiredReferences"),
                        false,
                    )?;
                    Check::Signature(Box::new(Verifier {
                        trusted: truststore()?,
                        required,
                        clock_skew: s.clock_skew.map_or(timestamp::DEFAULT_WINDOW, |d| d.0),
                        namespaces: namespaces.clone(),
                    }))
                }
                ValidatePart::Decrypt(_) => return Err(err(format!("{key}.decrypt"), NO_ENCRYPTION)),
            });
        }
        let mut secure = Vec::new();
        let mut signing_key = None;
        for (i, part) in c.secure.iter().enumerate() {
            let key = format!("secure[{i}]");
            secure.push(match part {
                SecurePart::UsernameToken(u) => {
                    let parse = |src: &str, k: &str| {
                        Template::parse(src, ctx.scope).map_err(|m| err(format!("{key}.usernameToken.{k}"), m))
                    };
                    Step::UsernameToken {
                        username: parse(&u.username, "username")?,
                        password: parse(&u.password, "password")?,
                        digest: u.password_type == Some(settings::PasswordType::Digest),
                    }
                }
                SecurePart::Timestamp(t) => {
                    let ttl = t.ttl.map_or(timestamp::DEFAULT_WINDOW, |d| d.0);
                    if ttl.is_zero() {
                        return Err(err(format!("{key}.timestamp.ttl"), "must be positive"));
                    }
                    Step::Timestamp(ttl)
                }
                SecurePart::Signature(s) => {
                    let k = format!("{key}.signature");
                    if s.key_identifier.is_some() {
                        return Err(err(
                            format!("{k}.keyIdentifier"),
                            "a thumbprint key identifier is not supported: use `securityTokenReference: {}` or `x509Data: {}`",
                        ));
                    }
                    if s.security_token_reference.is_some() && s.x509_data.is_some() {
                        return Err(err(&k, "give one of `securityTokenReference` and `x509Data`"));
                    }
                    let key_info = if s.security_token_reference.is_some() {
                        KeyInfoMode::SecurityTokenReference
                    } else {
                        KeyInfoMode::X509Data
                    };
                    let refs = targets(&s.references, &format!("{k}.references"), true)?;
                    if key_info != KeyInfoMode::SecurityTokenReference && refs.iter().any(|t| t.by == By::Bst) {
                        return Err(err(
                            format!("{k}.references"),
                            "`by: BST` needs `securityTokenReference: {}` (the token it signs)",
                        ));
                    }
                    for (creator, by, what) in [
                        ("timestamp", By::Timestamp, "TIMESTAMP"),
                        ("usernameToken", By::UsernameToken, "USERNAME_TOKEN"),
                    ] {
                        let created_later = c.secure[i + 1..].iter().any(|p| match p {
                            SecurePart::Timestamp(_) => creator == "timestamp",
                            SecurePart::UsernameToken(_) => creator == "usernameToken",
                            _ => false,
                        });
                        if created_later && refs.iter().any(|t| t.by == by) {
                            return Err(err(
                                format!("{k}.references"),
                                format!("a signature covering {what} must be listed after the `{creator}` part that creates it"),
                            ));
                        }
                    }
                    let pick = |v: &Option<String>, default: &str, list: &[&str], name: &str| {
                        let v = v.clone().unwrap_or_else(|| default.to_owned());
                        if list.contains(&v.as_str()) {
                            Ok(v)
                        } else {
                            Err(err(format!("{k}.{name}"), format!("`{v}` is not supported; use one of {}", list.join(", "))))
                        }
                    };
                    let algorithm = pick(&s.signature_algorithm, signature::RSA_SHA256, signature::SIGN_ALGORITHMS, "signatureAlgorithm")?;
                    let digest = pick(&s.digest_algorithm, signature::SHA256, signature::SIGN_DIGESTS, "digestAlgorithm")?;
                    let c14n = pick(&s.canonicalization_algorithm, signature::EXC_C14N, signature::SIGN_C14N, "canonicalizationAlgorithm")?;
                    let sk = match &signing_key {
                        Some(sk) => Clone::clone(sk),
                        None => {
                            let ks = c.keystore.as_ref().ok_or_else(|| {
                                err("keystore", "a `secure` signature needs a `keystore` with the signing key")
                            })?;
                            let (sk, path) = keys::signing_key(ctx.base_dir, ks).map_err(|m| err("keystore.location", m))?;
                            files.push(path);
                            signing_key = Some(sk.clone());
                            sk
                        }
                    };
                    let signer = Signer {
                        key: sk,
                        targets: refs,
                        algorithm,
                        digest,
                        c14n,
                        key_info,
                        namespaces: namespaces.clone(),
                    };
                    probe_sign(&signer).map_err(|m| err(&k, m))?;
                    Step::Signature(Box::new(signer))
                }
                SecurePart::Encrypt(_) => return Err(err(format!("{key}.encrypt"), NO_ENCRYPTION)),
            });
        }
        Ok(WsSecurity {
            actor: c.actor.clone(),
            must_understand: c.must_understand.is_none_or(|f| f.0),
            validate,
            secure,
            files,
        })
    }
}

/// Signs a small message with `signer` when the configuration is loaded, so that a key that
/// cannot sign with the chosen algorithm is a load error rather than a fault per message.
fn probe_sign(signer: &Signer) -> Result<(), String> {
    const PROBE: &[u8] = b"<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\"><soapenv:Body><probe/></soapenv:Body></soapenv:Envelope>";
    let mut msg = dom::parse(PROBE).map_err(|e| e.0)?;
    let mut security = msg.create_security(None, false).map_err(|f| f.reason)?;
    let probe = Signer {
        key: signer.key.clone(),
        targets: vec![Target {
            by: By::Body,
            xpath: None,
            id: None,
        }],
        algorithm: signer.algorithm.clone(),
        digest: signer.digest.clone(),
        c14n: signer.c14n.clone(),
        key_info: signer.key_info,
        namespaces: Vec::new(),
    };
    probe.sign(&msg, &mut security).map_err(|f| {
        format!(
            "the keystore's key cannot sign with {}: {}",
            signer.algorithm, f.reason
        )
    })
}

/// The message after the parts ran (serialized again) and the user a UsernameToken
/// authenticated.
type Applied = (Vec<u8>, Option<String>);

/// Which message a phase works on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Request,
    Response,
}

/// True when the body is compressed (`Content-Encoding` other than `identity`).
fn compressed(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| !v.trim().eq_ignore_ascii_case("identity") && !v.trim().is_empty())
}

impl WsSecurity {
    /// Applies the parts to `body` at `now`: returns the new body and the authenticated user,
    /// or the fault and the SOAP version to answer in (`None`: the body is not SOAP).
    fn apply(
        &self,
        ex: &Exchange,
        which: Which,
        body: &[u8],
        now: SystemTime,
    ) -> Result<Applied, (Fault, Option<crate::names::SoapVersion>)> {
        let mut msg = dom::parse(body).map_err(|e| (Fault::internal(e.0), None))?;
        let version = msg.version;
        let user = self
            .run(ex, which, &mut msg, now)
            .map_err(|f| (f, Some(version)))?;
        Ok((msg.to_bytes(), user))
    }

    fn run(
        &self,
        ex: &Exchange,
        which: Which,
        msg: &mut Message,
        now: SystemTime,
    ) -> Result<Option<String>, Fault> {
        let actor = self.actor.as_deref();
        let inbound = msg.security(actor)?;
        let mut user = None;
        if !self.validate.is_empty() {
            let mut security = inbound.ok_or_else(|| {
                Fault::new(
                    fault::WsseCode::InvalidSecurity,
                    match actor {
                        None => "the message has no wsse:Security header".to_owned(),
                        Some(a) => {
                            format!("the message has no wsse:Security header for the actor `{a}`")
                        }
                    },
                )
            })?;
            for check in &self.validate {
                match check {
                    Check::UsernameToken(v) => user = Some(v.check(&security, now)?),
                    Check::Timestamp(skew) => {
                        timestamp::check(&timestamp::single(&security)?, now, *skew)?
                    }
                    Check::Signature(v) => v.verify(msg, &security, now)?,
                }
            }
            // Understood, so not forwarded.
            security.unlink();
        } else if let Some(mut security) = inbound {
            // Unchecked claims of the peer are not passed on; a timestamp asserts nothing alone.
            for mut c in security.get_child_elements() {
                if !dom::is(&c, WSU_NS, "Timestamp") {
                    c.unlink();
                }
            }
            if security.get_child_elements().is_empty() {
                security.unlink();
            }
        }
        if !self.secure.is_empty() {
            let mut security = match msg.security(actor)? {
                Some(mut s) => {
                    if self.must_understand {
                        let soap = dom::namespace_for(&mut s, msg.soap_ns(), "soapenv")?;
                        let v = match msg.version {
                            crate::names::SoapVersion::V11 => "1",
                            crate::names::SoapVersion::V12 => "true",
                        };
                        if s.get_attribute_ns("mustUnderstand", msg.soap_ns())
                            .is_none()
                        {
                            s.set_attribute_ns("mustUnderstand", v, &soap)
                                .map_err(|_| dom::internal())?;
                        }
                    }
                    s
                }
                None => msg.create_security(actor, self.must_understand)?,
            };
            for step in &self.secure {
                match step {
                    Step::UsernameToken {
                        username,
                        password,
                        digest,
                    } => {
                        let u = username.render_for(ex, which);
                        let p = password.render_for(ex, which);
                        username_token::add(&msg.doc, &mut security, &u, &p, *digest, now)?;
                    }
                    Step::Timestamp(ttl) => {
                        timestamp::add(&msg.doc, &mut security, now, *ttl)?;
                    }
                    Step::Signature(s) => s.sign(msg, &mut security)?,
                }
            }
        }
        Ok(user)
    }

    fn handle(&self, ex: &mut Exchange, phase: Phase) -> Outcome {
        let (headers, body) = match phase {
            Phase::Request => (&ex.request.headers, ex.request_bytes()),
            Phase::Response => match ex.response.as_ref() {
                Some(r) => (r.headers(), ex.response_bytes()),
                None => return Outcome::Continue,
            },
        };
        let which = match phase {
            Phase::Request => Which::Request,
            Phase::Response => Which::Response,
        };
        let not_soap = |why: &str| {
            let p = Problem::new(&problems::BAD_XML)
                .with_detail(format!("WS-Security could not be applied: {why}"));
            match phase {
                Phase::Request => Outcome::Reject(p),
                Phase::Response => Outcome::Reject(p.with_status(http::StatusCode::BAD_GATEWAY)),
            }
        };
        if compressed(headers) {
            return not_soap("the body is compressed (Content-Encoding)");
        }
        let body: Bytes = body.cloned().unwrap_or_default();
        let result = self.apply(ex, which, &body, SystemTime::now());
        let request_id = ex.request_id.to_str().unwrap_or("").to_owned();
        let (out, user) = match result {
            Ok(x) => x,
            Err((f, None)) => {
                tracing::info!(
                    policy = "wsSecurity",
                    request_id,
                    "not a SOAP message: {}",
                    f.reason
                );
                return not_soap(&format!("the body is not a SOAP message ({})", f.reason));
            }
            Err((f, Some(version))) => {
                match f.code {
                    Some(c) => tracing::info!(
                        policy = "wsSecurity",
                        request_id,
                        "WS-Security check failed: wsse:{}: {}",
                        c.local_name(),
                        f.reason
                    ),
                    None => tracing::warn!(
                        policy = "wsSecurity",
                        request_id,
                        "WS-Security could not be applied: {}",
                        f.reason
                    ),
                }
                return Outcome::Respond(fault_response(version, &f));
            }
        };
        let body = Bytes::from(out);
        let headers = match phase {
            Phase::Request => {
                ex.request_body = Body::full(body);
                turnpike_core::json::forget_request_json(ex);
                ex.extensions.remove::<turnpike_core::BodyInspected>();
                if let Some(u) = user {
                    match ex.extensions.get_mut::<Identity>() {
                        Some(id) => id.subject = Some(u),
                        None => {
                            ex.extensions.insert(Identity {
                                subject: Some(u),
                                ..Default::default()
                            });
                        }
                    }
                }
                &mut ex.request.headers
            }
            Phase::Response => {
                turnpike_core::json::forget_response_json(ex);
                let Some(res) = ex.response.as_mut() else {
                    return Outcome::Continue;
                };
                *res.body_mut() = Body::full(body);
                res.headers_mut()
            }
        };
        headers.remove(header::CONTENT_LENGTH);
        headers.remove(header::TRANSFER_ENCODING);
        utf8_content_type(headers);
        Outcome::Continue
    }
}

/// The body is written in UTF-8 again: a `charset` of another encoding is replaced.
fn utf8_content_type(headers: &mut HeaderMap) {
    let Some(ct) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return;
    };
    let mut parts = ct.split(';');
    let media = parts.next().unwrap_or("").trim().to_owned();
    let mut changed = false;
    let mut rest = Vec::new();
    for p in parts {
        let p = p.trim();
        match p.split_once('=') {
            Some((k, v)) if k.trim().eq_ignore_ascii_case("charset") => {
                let v = v.trim().trim_matches('"');
                if !v.eq_ignore_ascii_case("utf-8") {
                    changed = true;
                }
                rest.push("charset=utf-8".to_owned());
            }
            _ => rest.push(p.to_owned()),
        }
    }
    if changed {
        let mut s = media;
        for r in rest {
            s.push_str("; ");
            s.push_str(&r);
        }
        if let Ok(v) = HeaderValue::from_str(&s) {
            headers.insert(header::CONTENT_TYPE, v);
        }
    }
}

impl Policy for WsSecurity {
    fn name(&self) -> &'static str {
        "wsSecurity"
    }

    fn body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    fn response_body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    fn response_needs_request(&self) -> bool {
        self.secure
            .iter()
            .any(|s| matches!(s, Step::UsernameToken { username, password, .. } if username.reads_request() || password.reads_request()))
    }

    fn files(&self) -> Vec<PathBuf> {
        self.files.clone()
    }

    /// Validates and secures the request (see the module's documentation); answers a SOAP
    /// fault when a check fails, `bad-xml` when the body is not SOAP.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        self.handle(ex, Phase::Request)
    }

    /// Validates and secures the response; a failed check replaces it with a SOAP fault, a
    /// body that is not SOAP with a 502 `bad-xml` problem.
    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        self.handle(ex, Phase::Response)
    }
}
