use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::dom::{self, WSSE_NS};
use super::fault::WsseCode;
use super::settings::WsSecuritySettings;
use super::username_token::{self, PASSWORD_DIGEST, PASSWORD_TEXT};
use super::*;

const WSU: &str = dom::WSU_NS;

fn envelope(header: &str) -> String {
    format!(
        "<s:Envelope xmlns:s=\"http://schemas.xmlsoap.org/soap/envelope/\" xmlns:wsse=\"{WSSE_NS}\" xmlns:wsu=\"{WSU}\"><s:Header>{header}</s:Header><s:Body><getCity xmlns=\"https://predic8.de/cities\"><name>Bonn</name></getCity></s:Body></s:Envelope>"
    )
}

fn security(inner: &str) -> String {
    envelope(&format!("<wsse:Security>{inner}</wsse:Security>"))
}

fn token(user: &str, password: &str, kind: &str, extra: &str) -> String {
    format!(
        "<wsse:UsernameToken><wsse:Username>{user}</wsse:Username><wsse:Password Type=\"{kind}\">{password}</wsse:Password>{extra}</wsse:UsernameToken>"
    )
}

fn digest_token(user: &str, password: &str, nonce: &[u8], created: &str) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(nonce);
    token(
        user,
        &username_token::digest(nonce, created, password),
        PASSWORD_DIGEST,
        &format!("<wsse:Nonce>{b64}</wsse:Nonce><wsu:Created>{created}</wsu:Created>"),
    )
}

fn validator() -> username_token::Validator {
    let users = HashMap::from([("alice".to_owned(), "secret".to_owned())]);
    username_token::Validator::new(users, Duration::from_secs(300))
}

fn check(v: &username_token::Validator, xml: &str, now: SystemTime) -> Result<String, Fault> {
    let msg = dom::parse(xml.as_bytes()).unwrap();
    let sec = msg.security(None).unwrap().unwrap();
    v.check(&sec, now)
}

fn code(r: Result<impl std::fmt::Debug, Fault>) -> WsseCode {
    r.unwrap_err().code.unwrap()
}

use base64::Engine;

#[test]
fn the_digest_matches_an_independently_computed_vector() {
    // Base64(SHA-1(nonce + created + password)), computed with Python's hashlib for the
    // nonce and created of the UsernameToken profile's example.
    let nonce = base64::engine::general_purpose::STANDARD
        .decode("WScqanjCEAC4mQoBE07sAQ==")
        .unwrap();
    assert_eq!(
        username_token::digest(&nonce, "2003-07-16T01:24:32Z", "IloveDogs"),
        "cywFYG+KaPMK3PCWR+m+DWtqzac="
    );
}

#[test]
fn text_and_digest_passwords_are_checked() {
    let v = validator();
    let now = SystemTime::now();
    let ok = security(&token("alice", "secret", PASSWORD_TEXT, ""));
    assert_eq!(check(&v, &ok, now).unwrap(), "alice");
    let no_type = security("<wsse:UsernameToken><wsse:Username>alice</wsse:Username><wsse:Password>secret</wsse:Password></wsse:UsernameToken>");
    assert_eq!(check(&v, &no_type, now).unwrap(), "alice");
    let wrong = security(&token("alice", "nope", PASSWORD_TEXT, ""));
    assert_eq!(code(check(&v, &wrong, now)), WsseCode::FailedAuthentication);
    let unknown = security(&token("mallory", "secret", PASSWORD_TEXT, ""));
    assert_eq!(
        code(check(&v, &unknown, now)),
        WsseCode::FailedAuthentication
    );
    let created = time::format(now);
    let d = security(&digest_token(
        "alice",
        "secret",
        b"0123456789abcdef",
        &created,
    ));
    assert_eq!(check(&v, &d, now).unwrap(), "alice");
    let bad = security(&digest_token(
        "alice",
        "wrong",
        b"0123456789abcdeX",
        &created,
    ));
    assert_eq!(code(check(&v, &bad, now)), WsseCode::FailedAuthentication);
    let no_nonce = security(&token("alice", "x", PASSWORD_DIGEST, ""));
    assert_eq!(
        code(check(&v, &no_nonce, now)),
        WsseCode::InvalidSecurityToken
    );
    let other = security(&token("alice", "secret", "urn:other", ""));
    assert_eq!(
        code(check(&v, &other, now)),
        WsseCode::UnsupportedSecurityToken
    );
}

#[test]
fn a_replayed_nonce_is_refused() {
    let v = validator();
    let now = SystemTime::now();
    let created = time::format(now);
    let d = security(&digest_token(
        "alice",
        "secret",
        b"nonce-nonce-1234",
        &created,
    ));
    assert!(check(&v, &d, now).is_ok());
    let again = check(&v, &d, now + Duration::from_secs(1));
    assert_eq!(
        again.as_ref().unwrap_err().code,
        Some(WsseCode::FailedAuthentication)
    );
    assert!(again.unwrap_err().reason.contains("replay"));
    // Another nonce passes; a wrong password does not use up the nonce.
    let other = security(&digest_token(
        "alice",
        "secret",
        b"nonce-nonce-5678",
        &created,
    ));
    assert!(check(&v, &other, now).is_ok());
    let wrong = security(&digest_token("alice", "bad", b"nonce-nonce-9999", &created));
    assert!(check(&v, &wrong, now).is_err());
    let right = security(&digest_token(
        "alice",
        "secret",
        b"nonce-nonce-9999",
        &created,
    ));
    assert!(check(&v, &right, now).is_ok());
}

#[test]
fn a_stale_or_future_created_is_refused() {
    let v = validator();
    let now = SystemTime::now();
    for t in [
        now - Duration::from_secs(301),
        now + Duration::from_secs(301),
    ] {
        let d = security(&digest_token(
            "alice",
            "secret",
            b"0123456789abcdef",
            &time::format(t),
        ));
        let e = check(&v, &d, now).unwrap_err();
        assert_eq!(e.code, Some(WsseCode::FailedAuthentication), "{e:?}");
        assert!(e.reason.contains("freshness"), "{e:?}");
    }
    let garbage = security(&token(
        "alice",
        "secret",
        PASSWORD_TEXT,
        "<wsu:Created>yesterday</wsu:Created>",
    ));
    assert_eq!(
        code(check(&v, &garbage, now)),
        WsseCode::InvalidSecurityToken
    );
}

#[test]
fn a_missing_or_ambiguous_token_is_refused() {
    let v = validator();
    let now = SystemTime::now();
    assert_eq!(
        code(check(&v, &security(""), now)),
        WsseCode::InvalidSecurityToken
    );
    let two = security(&format!(
        "{}{}",
        token("alice", "secret", PASSWORD_TEXT, ""),
        token("alice", "secret", PASSWORD_TEXT, "")
    ));
    assert_eq!(code(check(&v, &two, now)), WsseCode::InvalidSecurityToken);
    let no_password =
        security("<wsse:UsernameToken><wsse:Username>alice</wsse:Username></wsse:UsernameToken>");
    assert_eq!(
        code(check(&v, &no_password, now)),
        WsseCode::InvalidSecurityToken
    );
}

fn ts(created: SystemTime, expires: Option<SystemTime>) -> String {
    let e = expires
        .map(|e| format!("<wsu:Expires>{}</wsu:Expires>", time::format(e)))
        .unwrap_or_default();
    security(&format!(
        "<wsu:Timestamp><wsu:Created>{}</wsu:Created>{e}</wsu:Timestamp>",
        time::format(created)
    ))
}

fn check_ts(xml: &str, now: SystemTime) -> Result<(), Fault> {
    let msg = dom::parse(xml.as_bytes()).unwrap();
    let sec = msg.security(None).unwrap().unwrap();
    timestamp::check(&timestamp::single(&sec)?, now, Duration::from_secs(120))
}

#[test]
fn timestamps_are_checked_against_the_clock() {
    let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let m = Duration::from_secs(60);
    assert!(check_ts(&ts(now - m, Some(now + 4 * m)), now).is_ok());
    assert!(check_ts(&ts(now, None), now).is_ok());
    // Expired (beyond the skew), stale Created, Created in the future.
    let expired = check_ts(&ts(now - m, Some(now - 3 * m)), now).unwrap_err();
    assert_eq!(expired.code, Some(WsseCode::MessageExpired));
    assert!(expired.reason.contains("expired"));
    assert_eq!(
        code(check_ts(&ts(now - 3 * m, None), now)),
        WsseCode::MessageExpired
    );
    assert_eq!(
        code(check_ts(&ts(now + 3 * m, None), now)),
        WsseCode::FailedCheck
    );
    // Within the skew either way.
    assert!(check_ts(&ts(now + m, Some(now - m)), now).is_ok());
    assert_eq!(
        code(check_ts(&security(""), now)),
        WsseCode::InvalidSecurity
    );
    let two =
        security("<wsu:Timestamp><wsu:Created>x</wsu:Created></wsu:Timestamp><wsu:Timestamp/>");
    assert_eq!(code(check_ts(&two, now)), WsseCode::InvalidSecurity);
    let bad = security("<wsu:Timestamp><wsu:Created>x</wsu:Created></wsu:Timestamp>");
    assert_eq!(code(check_ts(&bad, now)), WsseCode::FailedCheck);
}

fn compile(yaml: serde_json::Value) -> Result<WsSecurity, CompileError> {
    let s: WsSecuritySettings = serde_json::from_value(yaml).map_err(|e| err("", e.to_string()))?;
    WsSecurity::compile(s, &CompileContext::standalone())
}

fn policy(yaml: serde_json::Value) -> WsSecurity {
    compile(yaml).unwrap_or_else(|e| panic!("{e}"))
}

fn exchange(body: &str) -> Exchange {
    let (parts, _) = http::Request::builder()
        .method("POST")
        .uri("/")
        .header("content-type", "text/xml; charset=iso-8859-1")
        .body(())
        .unwrap()
        .into_parts();
    Exchange::new(
        parts,
        Body::full(body.to_owned()),
        "192.0.2.1:5000".parse().unwrap(),
        Default::default(),
    )
}

fn apply(p: &WsSecurity, xml: &str) -> Result<(String, Option<String>), Fault> {
    let ex = exchange("");
    p.apply(&ex, Which::Request, xml.as_bytes(), SystemTime::now())
        .map(|(b, u)| (String::from_utf8(b).unwrap(), u))
        .map_err(|(f, _)| f)
}

#[test]
fn secure_then_validate_round_trips_and_removes_the_header() {
    let adder = policy(serde_json::json!({"secure": [
        {"usernameToken": {"username": "alice", "password": "secret", "passwordType": "DIGEST"}},
        {"timestamp": {"ttl": "PT10M"}}
    ]}));
    let plain = "<s:Envelope xmlns:s=\"http://schemas.xmlsoap.org/soap/envelope/\"><s:Body><x/></s:Body></s:Envelope>";
    let (secured, user) = apply(&adder, plain).unwrap();
    assert_eq!(user, None);
    assert!(
        secured.contains("wsse:Security") && secured.contains("s:mustUnderstand=\"1\""),
        "{secured}"
    );
    assert!(
        secured.contains(PASSWORD_DIGEST) && secured.contains("wsse:Nonce"),
        "{secured}"
    );
    let checker = policy(serde_json::json!({"validate": [
        {"timestamp": {"clockSkew": "PT1M"}},
        {"usernameToken": {"staticUserDataProvider": {"users": [{"username": "alice", "password": "secret"}]}}}
    ]}));
    let (checked, user) = apply(&checker, &secured).unwrap();
    assert_eq!(user.as_deref(), Some("alice"));
    assert!(!checked.contains("Security"), "{checked}");
    assert!(checked.contains("<s:Body><x/></s:Body>"), "{checked}");
    // The same message again is a replay.
    let e = apply(&checker, &secured).unwrap_err();
    assert_eq!(e.code, Some(WsseCode::FailedAuthentication));
    // No header at all.
    let e = apply(&checker, plain).unwrap_err();
    assert_eq!(e.code, Some(WsseCode::InvalidSecurity));
}

#[test]
fn without_validate_the_peers_tokens_are_dropped() {
    let adder = policy(serde_json::json!({"mustUnderstand": false, "secure": [{"timestamp": {}}]}));
    let inbound = security(&token("mallory", "x", PASSWORD_TEXT, ""));
    let (out, _) = apply(&adder, &inbound).unwrap();
    assert!(!out.contains("mallory"), "{out}");
    assert!(
        out.contains("wsu:Timestamp") && !out.contains("mustUnderstand"),
        "{out}"
    );
    assert_eq!(
        out.matches("Security ").count() + out.matches("Security>").count(),
        2,
        "{out}"
    );
}

#[test]
fn soap_12_and_actor_are_honoured() {
    let adder = policy(
        serde_json::json!({"actor": "urn:gw", "secure": [{"usernameToken": {"username": "u", "password": "p"}}]}),
    );
    let xml =
        "<e:Envelope xmlns:e=\"http://www.w3.org/2003/05/soap-envelope\"><e:Body/></e:Envelope>";
    let (out, _) = apply(&adder, xml).unwrap();
    assert!(
        out.contains("e:role=\"urn:gw\"") && out.contains("e:mustUnderstand=\"true\""),
        "{out}"
    );
    assert!(out.contains("<e:Header>"), "{out}");
    let checker = policy(
        serde_json::json!({"validate": [{"usernameToken": {"username": "u", "password": "p"}}]}),
    );
    let e = apply(&checker, &out).unwrap_err();
    assert_eq!(
        e.code,
        Some(WsseCode::InvalidSecurity),
        "the header is for another actor"
    );
    let for_gw = policy(
        serde_json::json!({"actor": "urn:gw", "validate": [{"usernameToken": {"username": "u", "password": "p"}}]}),
    );
    assert_eq!(apply(&for_gw, &out).unwrap().1.as_deref(), Some("u"));
}

#[test]
fn faults_carry_the_wsse_code_in_both_versions() {
    let f = Fault::new(WsseCode::FailedAuthentication, "a <b>");
    let r = fault::fault_response(crate::names::SoapVersion::V11, &f);
    assert_eq!(r.status(), 500);
    let x = fault::fault_xml(crate::names::SoapVersion::V11, &f);
    assert!(
        x.contains("<faultcode>wsse:FailedAuthentication</faultcode>") && x.contains("a &lt;b&gt;"),
        "{x}"
    );
    let x = fault::fault_xml(crate::names::SoapVersion::V12, &f);
    assert!(
        x.contains("<soapenv:Value>wsse:FailedAuthentication</soapenv:Value>"),
        "{x}"
    );
    assert_eq!(
        fault::fault_response(crate::names::SoapVersion::V12, &f).status(),
        400
    );
    for v in [
        crate::names::SoapVersion::V11,
        crate::names::SoapVersion::V12,
    ] {
        crate::xml::parse(fault::fault_xml(v, &f).as_bytes()).unwrap();
    }
}

#[test]
fn unsupported_settings_are_load_errors() {
    for (yaml, needle) in [
        (serde_json::json!({}), "at least one"),
        (
            serde_json::json!({"secure": [{"encrypt": {"recipientAlias": "x"}}]}),
            "XML Encryption",
        ),
        (
            serde_json::json!({"validate": [{"decrypt": {}}]}),
            "XML Encryption",
        ),
        (
            serde_json::json!({"validate": [{"usernameToken": {}}]}),
            "no users",
        ),
        (
            serde_json::json!({"validate": [{"usernameToken": {"username": "a", "password": "$2y$10$abc"}}]}),
            "hashed",
        ),
        (
            serde_json::json!({"validate": [{"signature": {"requiredReferences": [{"by": "BODY"}]}}]}),
            "truststore",
        ),
        (
            serde_json::json!({"secure": [{"signature": {"references": [{"by": "BODY"}]}}]}),
            "keystore",
        ),
        (
            serde_json::json!({"secure": [{"signature": {"references": []}}]}),
            "at least one",
        ),
        (
            serde_json::json!({"secure": [{"signature": {"references": [{"by": "HEADER"}]}}]}),
            "HEADER",
        ),
        (
            serde_json::json!({"secure": [{"signature": {"references": [{"by": "TIMESTAMP"}]}}, {"timestamp": {}}]}),
            "after",
        ),
    ] {
        let e = compile(yaml.clone())
            .err()
            .unwrap_or_else(|| panic!("{yaml} compiled"));
        assert!(e.to_string().contains(needle), "{yaml}: {e}");
    }
    let unknown: Result<WsSecuritySettings, _> = serde_json::from_value(
        serde_json::json!({"validate": [{"usernameToken": {"jdbcUserDataProvider": {}}}]}),
    );
    assert!(unknown.is_err());
}

/// A self-signed RSA key and certificate as `signer.p12` (password `secret`, alias `signer`),
/// made with the openssl CLI in `dir`.
fn signer_p12(dir: &std::path::Path, name: &str) -> String {
    let key = dir.join(format!("{name}.key"));
    let cert = dir.join(format!("{name}.crt"));
    let p12 = dir.join(format!("{name}.p12"));
    let ok = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
        ])
        .arg(format!("/CN={name}"))
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let ok = std::process::Command::new("openssl")
        .args(["pkcs12", "-export", "-in"])
        .arg(&cert)
        .arg("-inkey")
        .arg(&key)
        .arg("-out")
        .arg(&p12)
        .args(["-passout", "pass:secret", "-name", "signer"])
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    p12.to_str().unwrap().to_owned()
}

const CITY: &str = "<s:Envelope xmlns:s=\"http://schemas.xmlsoap.org/soap/envelope/\"><s:Body><cit:getCity xmlns:cit=\"https://predic8.de/cities\"><name>Bonn</name></cit:getCity></s:Body></s:Envelope>";

fn full_signer(p12: &str) -> WsSecurity {
    policy(serde_json::json!({
        "keystore": {"location": p12, "password": "secret", "keyAlias": "signer"},
        "xmlConfig": {"namespaces": [{"prefix": "cit", "uri": "https://predic8.de/cities"}]},
        "secure": [
            {"timestamp": {"ttl": "PT10M"}},
            {"usernameToken": {"username": "alice", "password": "secret"}},
            {"signature": {"securityTokenReference": {}, "references": [
                {"by": "BODY"}, {"by": "TIMESTAMP"}, {"by": "USERNAME_TOKEN"}, {"by": "BST"},
                {"xpath": "//cit:getCity"}
            ]}}
        ]
    }))
}

fn full_verifier(truststore: &str) -> WsSecurity {
    policy(serde_json::json!({
        "truststore": {"location": truststore, "password": "secret"},
        "xmlConfig": {"namespaces": [{"prefix": "cit", "uri": "https://predic8.de/cities"}]},
        "validate": [
            {"timestamp": {"clockSkew": "PT2M"}},
            {"usernameToken": {"staticUserDataProvider": {"users": [{"username": "alice", "password": "secret"}]}, "freshnessWindow": "PT2M"}},
            {"signature": {"requiredReferences": [
                {"by": "BODY"}, {"by": "TIMESTAMP"}, {"by": "USERNAME_TOKEN"}, {"by": "BST"},
                {"xpath": "//cit:getCity"}
            ]}}
        ]
    }))
}

#[test]
fn a_signed_message_verifies_and_a_tampered_one_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let p12 = signer_p12(dir.path(), "signer");
    let (signed, _) = apply(&full_signer(&p12), CITY).unwrap();
    assert!(
        signed.contains("ds:SignatureValue") && signed.contains("wsse:BinarySecurityToken"),
        "{signed}"
    );
    assert_eq!(signed.matches("<ds:Reference ").count(), 5, "{signed}");
    let verifier = full_verifier(&p12);
    let (clean, user) = apply(&verifier, &signed).unwrap();
    assert_eq!(user.as_deref(), Some("alice"));
    assert!(
        !clean.contains("Security") && clean.contains("<name>Bonn</name>"),
        "{clean}"
    );

    // The body changed after signing.
    let tampered = signed.replace("<name>Bonn</name>", "<name>Paris</name>");
    let e = apply(&full_verifier(&p12), &tampered).unwrap_err();
    assert_eq!(e.code, Some(WsseCode::FailedCheck), "{e:?}");
    // The timestamp changed after signing.
    let e = apply(
        &full_verifier(&p12),
        &signed.replacen("<wsu:Expires>2", "<wsu:Expires>3", 1),
    )
    .unwrap_err();
    assert_eq!(e.code, Some(WsseCode::FailedCheck), "{e:?}");
}

#[test]
fn the_signer_must_be_trusted_and_cover_what_is_required() {
    let dir = tempfile::tempdir().unwrap();
    let p12 = signer_p12(dir.path(), "signer");
    let other = signer_p12(dir.path(), "other");
    let (signed, _) = apply(&full_signer(&p12), CITY).unwrap();
    let e = apply(&full_verifier(&other), &signed).unwrap_err();
    assert_eq!(e.code, Some(WsseCode::FailedCheck));
    assert!(e.reason.contains("truststore"), "{e:?}");

    // Only the body signed (X509Data key info), but the timestamp is required.
    let body_only = policy(serde_json::json!({
        "keystore": {"location": p12, "password": "secret"},
        "secure": [{"timestamp": {}}, {"signature": {"references": [{"by": "BODY"}]}}]
    }));
    let (signed, _) = apply(&body_only, CITY).unwrap();
    assert!(signed.contains("ds:X509Certificate"), "{signed}");
    let needs_ts = policy(serde_json::json!({
        "truststore": {"location": p12, "password": "secret"},
        "validate": [{"signature": {"requiredReferences": [{"by": "BODY"}, {"by": "TIMESTAMP"}]}}]
    }));
    let e = apply(&needs_ts, &signed).unwrap_err();
    assert_eq!(e.code, Some(WsseCode::FailedCheck));
    assert!(
        e.reason.contains("TIMESTAMP") && e.reason.contains("not covered"),
        "{e:?}"
    );
    let body = policy(serde_json::json!({
        "truststore": {"location": p12, "password": "secret"},
        "validate": [{"signature": {"requiredReferences": [{"by": "BODY"}]}}]
    }));
    assert!(apply(&body, &signed).is_ok());
    // No signature at all.
    let e = apply(&body, &security("")).unwrap_err();
    assert_eq!(e.code, Some(WsseCode::InvalidSecurity));
}

#[test]
fn wrapped_and_weak_signatures_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p12 = signer_p12(dir.path(), "signer");
    let signer = policy(serde_json::json!({
        "keystore": {"location": p12, "password": "secret"},
        "secure": [{"signature": {"references": [{"by": "BODY", "id": "the-body"}]}}]
    }));
    let (signed, _) = apply(&signer, CITY).unwrap();
    assert!(signed.contains("wsu:Id=\"the-body\""), "{signed}");
    let verifier = policy(serde_json::json!({
        "truststore": {"location": p12, "password": "secret"},
        "validate": [{"signature": {"requiredReferences": [{"by": "BODY"}]}}]
    }));
    // The signed body parked in the header under its id, a new body in its place.
    let start = signed.find("<s:Body").unwrap();
    let end = signed.find("</s:Body>").unwrap() + "</s:Body>".len();
    let original = &signed[start..end];
    let parked = original
        .replacen("<s:Body", "<s:Parked", 1)
        .replace("</s:Body>", "</s:Parked>");
    let wrapped = signed
        .replace(original, "<s:Body><evil/></s:Body>")
        .replacen("<s:Header>", &format!("<s:Header>{parked}"), 1);
    let e = apply(&verifier, &wrapped).unwrap_err();
    assert_eq!(e.code, Some(WsseCode::FailedCheck), "{e:?}");
    // The same, with the new body wearing the signed body's id.
    let wrapped = signed.replace(original, "<s:Body xmlns:wsu=\"http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd\" wsu:Id=\"the-body\"><evil/></s:Body>").replacen("<s:Header>", &format!("<s:Header>{parked}"), 1);
    let e = apply(&verifier, &wrapped).unwrap_err();
    assert_eq!(e.code, Some(WsseCode::FailedCheck), "{e:?}");
    assert!(e.reason.contains("more than once"), "{e:?}");

    // SHA-1 is refused when verifying, before any cryptography.
    let sha1 = policy(serde_json::json!({
        "keystore": {"location": p12, "password": "secret"},
        "secure": [{"signature": {
            "signatureAlgorithm": "http://www.w3.org/2000/09/xmldsig#rsa-sha1",
            "digestAlgorithm": "http://www.w3.org/2000/09/xmldsig#sha1",
            "references": [{"by": "BODY"}]}}]
    }));
    let (signed, _) = apply(&sha1, CITY).unwrap();
    let e = apply(&verifier, &signed).unwrap_err();
    assert_eq!(e.code, Some(WsseCode::UnsupportedAlgorithm), "{e:?}");
}
