//! `wsSecurity` (Membrane's WS-Security policy) through real sockets, with the configurations of
//! Membrane's web-services-security tutorials: a gateway adding a UsernameToken and a Timestamp
//! in front of an API that validates them and answers with `sampleSoapService`, signatures made
//! on one API and verified on another (a tampered body refused), XML Encryption refused at
//! load, and zeep's UsernameToken accepted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::path::Path;

use bytes::Bytes;
use common::*;
use http_body_util::Full;

const CITY_REQUEST: &str = "<s11:Envelope xmlns:s11=\"http://schemas.xmlsoap.org/soap/envelope/\" xmlns:cit=\"https://predic8.de/cities\"><s11:Body><cit:getCity><name>Bonn</name></cit:getCity></s11:Body></s11:Envelope>";

const WSSE: &str =
    "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd";
const WSU: &str =
    "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd";

async fn post_soap(addr: SocketAddr, body: &str) -> Reply {
    send(
        addr,
        req("POST", "/")
            .header("content-type", "text/xml; charset=utf-8")
            .header("soapaction", "https://predic8.de/cities")
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap(),
    )
    .await
}

/// Asserts a SOAP 1.1 fault with the WS-Security code `code`.
fn assert_fault(r: &Reply, code: &str) {
    let t = r.text();
    assert_eq!(r.status, 500, "{t}");
    assert_eq!(r.header("content-type"), Some("text/xml; charset=utf-8"));
    assert!(
        t.contains(&format!("<faultcode>wsse:{code}</faultcode>")),
        "expected wsse:{code}: {t}"
    );
}

fn assert_bonn(r: &Reply) {
    let t = r.text();
    assert_eq!(r.status, 200, "{t}");
    assert!(t.contains("<cs:getCityResponse>"), "{t}");
    assert!(t.contains("<population>327000</population>"), "{t}");
}

/// A self-signed RSA certificate and key as a PKCS#12 keystore (`secret`, alias `signer`),
/// made with the openssl CLI.
fn keystore(dir: &Path, name: &str) -> String {
    let key = dir.join(format!("{name}.key"));
    let cert = dir.join(format!("{name}.crt"));
    let p12 = dir.join(format!("{name}.p12"));
    let out = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args(["-subj", &format!("/CN={name}")])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = std::process::Command::new("openssl")
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
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    p12.to_str().unwrap().to_owned()
}

/// Tutorials 10, 20 and 30 in one: an API adds a UsernameToken and a Timestamp, another
/// validates both, shows `${user()}` and answers with the sample service.
fn username_token_config(adder: u16, validator: u16, echo: u16, password_type: &str) -> String {
    format!(
        r#"gateway:
  accessLog: false
---
api:
  name: Adder
  port: {adder}
  ip: 127.0.0.1
  flow:
    - request:
        - wsSecurity:
            secure:
              - usernameToken:
                  username: alice
                  password: secret
                  passwordType: {password_type}
              - timestamp: {{}}
        - log: {{}}
  target:
    url: http://127.0.0.1:{validator}
---
api:
  name: Echo
  port: {echo}
  ip: 127.0.0.1
  flow:
    - request:
        - wsSecurity:
            secure:
              - usernameToken:
                  username: alice
                  password: secret
                  passwordType: {password_type}
              - timestamp: {{}}
        - return:
            status: 200
---
api:
  name: Validator
  port: {validator}
  ip: 127.0.0.1
  flow:
    - request:
        - wsSecurity:
            validate:
              - timestamp: {{}}
              - usernameToken:
                  staticUserDataProvider:
                    users:
                      - username: alice
                        password: secret
        - beautifier: {{}}
        - log:
            message: |
              *** After WS-Security ***
              User: ${{user()}}
              ${{body}}
    - response:
        - setHeader:
            name: X-User
            value: ${{user()}}
    - sampleSoapService: {{}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_username_token_added_by_one_api_is_validated_by_another() {
    for password_type in ["PLAIN_TEXT", "DIGEST"] {
        let (adder, validator, echo) = (free_port(), free_port(), free_port());
        let gw = TestGateway::start(&username_token_config(
            adder,
            validator,
            echo,
            password_type,
        ));

        let r = post_soap(gw.addr_of(adder), CITY_REQUEST).await;
        assert_bonn(&r);
        assert_eq!(r.header("x-user"), Some("alice"), "{password_type}");

        // What the adder sends on: the header, with the token and the timestamp.
        let r = post_soap(gw.addr_of(echo), CITY_REQUEST).await;
        assert_eq!(r.status, 200);
        let secured = r.text();
        assert!(secured.contains(WSSE) && secured.contains(WSU), "{secured}");
        assert!(
            secured.contains("<wsse:Username>alice</wsse:Username>"),
            "{secured}"
        );
        assert!(
            secured.contains("<wsu:Timestamp") && secured.contains("mustUnderstand=\"1\""),
            "{secured}"
        );
        match password_type {
            "DIGEST" => {
                assert!(
                    secured.contains("#PasswordDigest") && !secured.contains(">secret<"),
                    "{secured}"
                );
                // Sent straight to the validator, it passes once; the second time it is a replay.
                assert_bonn(&post_soap(gw.addr_of(validator), &secured).await);
                let r = post_soap(gw.addr_of(validator), &secured).await;
                assert_fault(&r, "FailedAuthentication");
                assert!(r.text().contains("replay"), "{}", r.text());
            }
            _ => assert!(secured.contains("#PasswordText\">secret<"), "{secured}"),
        }

        // A wrong password, and no header at all.
        let wrong = secured.replace(">secret<", ">guess<");
        if wrong != secured {
            assert_fault(
                &post_soap(gw.addr_of(validator), &wrong).await,
                "FailedAuthentication",
            );
        }
        let r = post_soap(gw.addr_of(validator), CITY_REQUEST).await;
        assert_fault(&r, "InvalidSecurity");
        assert!(r.text().contains("no wsse:Security header"), "{}", r.text());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tutorial_30_adds_and_validates_a_timestamp_and_refuses_an_expired_one() {
    let (adder, validator) = (free_port(), free_port());
    let gw = TestGateway::start(&format!(
        r#"gateway:
  accessLog: false
---
api:
  name: Adder
  port: {adder}
  ip: 127.0.0.1
  flow:
    - request:
        - wsSecurity:
            secure:
              - timestamp: {{}}
        - beautifier: {{}}
        - log: {{}}
  target:
    url: http://localhost:{validator}
---
api:
  name: Validator
  port: {validator}
  ip: 127.0.0.1
  flow:
    - request:
        - wsSecurity:
            validate:
              - timestamp: {{}}
    - sampleSoapService: {{}}
"#
    ));
    assert_bonn(&post_soap(gw.addr_of(adder), CITY_REQUEST).await);

    let expired = format!(
        "<s:Envelope xmlns:s=\"http://schemas.xmlsoap.org/soap/envelope/\"><s:Header><wsse:Security xmlns:wsse=\"{WSSE}\" xmlns:wsu=\"{WSU}\"><wsu:Timestamp><wsu:Created>2020-01-01T00:00:00Z</wsu:Created><wsu:Expires>2020-01-01T00:05:00Z</wsu:Expires></wsu:Timestamp></wsse:Security></s:Header><s:Body><getCity xmlns=\"https://predic8.de/cities\"><name>Bonn</name></getCity></s:Body></s:Envelope>"
    );
    let r = post_soap(gw.addr_of(validator), &expired).await;
    assert_fault(&r, "MessageExpired");
    assert!(
        r.text().contains("The message has expired."),
        "{}",
        r.text()
    );

    // SOAP 1.2: the fault is a 1.2 fault with the code as the Sender's subcode, status 400.
    let soap12 = "<e:Envelope xmlns:e=\"http://www.w3.org/2003/05/soap-envelope\"><e:Body><getCity xmlns=\"https://predic8.de/cities\"><name>Bonn</name></getCity></e:Body></e:Envelope>";
    let r = send(
        gw.addr_of(validator),
        req("POST", "/")
            .header("content-type", "application/soap+xml; charset=utf-8")
            .body(Full::new(Bytes::from_static(soap12.as_bytes())))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text()
            .contains("<soapenv:Value>wsse:InvalidSecurity</soapenv:Value>"),
        "{}",
        r.text()
    );

    // Not SOAP at all: a problem, not a fault.
    let r = send(
        gw.addr_of(validator),
        req("POST", "/")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(b"{\"name\":\"Bonn\"}")))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("not a SOAP message"), "{}", r.text());
}

/// Tutorials 50 and 60: one API signs, another verifies (with the same keystore as its
/// truststore); an echo API shows what was signed.
fn signature_config(dir: &Path, signer: u16, validator: u16, echo: u16, trust: &str) -> String {
    let p12 = keystore(dir, "signer");
    format!(
        r#"gateway:
  accessLog: false
---
api:
  name: Signer
  port: {signer}
  ip: 127.0.0.1
  flow:
    - request:
        - wsSecurity:
            mustUnderstand: false
            keystore:
              location: {p12}
              password: secret
              keyAlias: signer
            xmlConfig:
              namespaces:
                - prefix: cit
                  uri: https://predic8.de/cities
            secure:
              - timestamp:
                  ttl: PT10M
              - usernameToken:
                  username: alice
                  password: secret
              - signature:
                  securityTokenReference: {{}}
                  references:
                    - by: BODY
                    - by: TIMESTAMP
                    - by: USERNAME_TOKEN
                    - by: BST
                    - xpath: //cit:getCity
        - log: {{}}
  target:
    url: http://localhost:{validator}
---
api:
  name: Echo
  port: {echo}
  ip: 127.0.0.1
  flow:
    - request:
        - wsSecurity:
            keystore:
              location: {p12}
              password: secret
              keyAlias: signer
            secure:
              - timestamp: {{}}
              - signature:
                  references:
                    - by: BODY
                    - by: TIMESTAMP
        - return:
            status: 200
---
api:
  name: Validator
  port: {validator}
  ip: 127.0.0.1
  flow:
    - request:
        - wsSecurity:
            truststore:
              location: {trust}
              password: secret
            xmlConfig:
              namespaces:
                - prefix: cit
                  uri: https://predic8.de/cities
            validate:
              - timestamp:
                  clockSkew: PT2M
              - signature:
                  requiredReferences:
                    - by: BODY
                    - by: TIMESTAMP
        - log:
            message: |
              Notice that the wsSecurity header was removed after validation.
              ${{body}}
    - sampleSoapService: {{}}
"#,
        trust = if trust.is_empty() { &p12 } else { trust }
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_signed_by_one_api_is_verified_by_another_and_tampering_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (signer, validator, echo) = (free_port(), free_port(), free_port());
    let gw = TestGateway::start(&signature_config(dir.path(), signer, validator, echo, ""));

    // Tutorial 60's full signature, verified on the other API.
    assert_bonn(&post_soap(gw.addr_of(signer), CITY_REQUEST).await);

    // Tutorial 50's body (and timestamp) signature, as the echo API sends it.
    let r = post_soap(gw.addr_of(echo), CITY_REQUEST).await;
    assert_eq!(r.status, 200);
    let signed = r.text();
    assert!(
        signed.contains("<ds:SignatureValue>") && signed.contains("<ds:X509Certificate>"),
        "{signed}"
    );
    assert_bonn(&post_soap(gw.addr_of(validator), &signed).await);

    // The body changed on the way.
    let tampered = signed.replace("<name>Bonn</name>", "<name>Berlin</name>");
    assert_ne!(tampered, signed);
    let r = post_soap(gw.addr_of(validator), &tampered).await;
    assert_fault(&r, "FailedCheck");
    assert!(
        r.text()
            .contains("The signature or decryption was invalid."),
        "{}",
        r.text()
    );

    // The signature removed: the header has only the timestamp.
    let start = signed.find("<ds:Signature").unwrap();
    let end = signed.find("</ds:Signature>").unwrap() + "</ds:Signature>".len();
    let unsigned = format!("{}{}", &signed[..start], &signed[end..]);
    assert_fault(
        &post_soap(gw.addr_of(validator), &unsigned).await,
        "InvalidSecurity",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signature_by_an_untrusted_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let other = keystore(dir.path(), "other");
    let (signer, validator, echo) = (free_port(), free_port(), free_port());
    let gw = TestGateway::start(&signature_config(
        dir.path(),
        signer,
        validator,
        echo,
        &other,
    ));
    let r = post_soap(gw.addr_of(signer), CITY_REQUEST).await;
    assert_fault(&r, "FailedCheck");
    assert!(r.text().contains("not in the truststore"), "{}", r.text());
}

#[test]
fn tutorial_70s_encryption_is_a_load_error_that_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let p12 = keystore(dir.path(), "signer");
    let file = dir.path().join("gateway.yaml");
    std::fs::write(
        &file,
        format!(
            r#"api:
  name: Encryptor
  port: 0
  flow:
    - request:
        - wsSecurity:
            truststore:
              location: {p12}
              password: secret
            secure:
              - encrypt:
                  recipientAlias: signer
                  references:
                    - by: BODY
        - log: {{}}
  target:
    url: http://localhost:2001
"#
        ),
    )
    .unwrap();
    let e = match turnpike::start(vec![file]) {
        Ok(_) => panic!("an encrypting wsSecurity loaded"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("XML Encryption is not supported"), "{e}");
    assert!(
        e.contains("terminate WS-Security encryption in the backend"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zeeps_username_token_is_accepted() {
    if !python_has(&["zeep"]) {
        return;
    }
    let (wsdl, secured) = (free_port(), free_port());
    let gw = TestGateway::start(&format!(
        r#"gateway:
  accessLog: false
---
api:
  port: {wsdl}
  ip: 127.0.0.1
  flow:
    - sampleSoapService: {{}}
---
api:
  port: {secured}
  ip: 127.0.0.1
  flow:
    - request:
        - wsSecurity:
            validate:
              - usernameToken:
                  staticUserDataProvider:
                    users:
                      - username: alice
                        password: secret
    - response:
        - setHeader:
            name: X-User
            value: ${{user()}}
    - sampleSoapService: {{}}
"#
    ));
    let (wsdl_addr, secured_addr) = (gw.addr_of(wsdl), gw.addr_of(secured));
    let script = r#"
import json, sys
import zeep
from zeep.wsse.username import UsernameToken
from zeep.exceptions import Fault
out = {}
for name, digest, password in [("text", False, "secret"), ("digest", True, "secret"), ("wrong", True, "guess")]:
    client = zeep.Client(sys.argv[1], wsse=UsernameToken("alice", password, use_digest=digest))
    service = client.create_service("{https://predic8.de/cities}CitySoapBinding", sys.argv[2])
    try:
        city = service.getCity("Bonn")
        out[name] = {"country": city.country}
    except Fault as f:
        out[name] = {"fault": f.message, "code": str(f.code)}
print(json.dumps(out), flush=True)
"#;
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .args([
                "-c",
                script,
                &format!("http://{wsdl_addr}/?wsdl"),
                &format!("http://{secured_addr}/"),
            ])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "zeep failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["text"], serde_json::json!({"country": "Germany"}), "{v}");
    assert_eq!(
        v["digest"],
        serde_json::json!({"country": "Germany"}),
        "{v}"
    );
    assert_eq!(
        v["wrong"]["fault"], "The security token could not be authenticated or authorized.",
        "{v}"
    );
}
