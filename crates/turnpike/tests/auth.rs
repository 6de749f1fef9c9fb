//! Authentication through real sockets: basic, API key and JWT (keys minted in the test), with
//! consumers, groups, scopes and `allow` lists.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use common::*;
use jsonwebtoken::{Algorithm, EncodingKey, Header};

fn basic(user: &str, pass: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_authentication_plain_bcrypt_htpasswd_and_groups() {
    let backend = Backend::start().await;
    let dir = tempfile::tempdir().unwrap();
    let bcrypt = pwhash_bcrypt("hashed-pw");
    // An htpasswd line made by a standard tool: SHA-512-crypt from `openssl passwd -6`.
    let sha512 = String::from_utf8(openssl(&["passwd", "-6", "file-pw"])).unwrap();
    std::fs::write(
        dir.path().join("users.htpasswd"),
        format!("# users\nfiled:{}\n", sha512.trim()),
    )
    .unwrap();
    let yaml = format!(
        r#"
gateway: {{ accessLog: false }}
---
consumer:
  name: acme
  groups: [partners]
  credentials: {{ basic: {{ username: acme, password: acme-pw }} }}
---
consumer:
  name: other
  credentials: {{ basic: {{ username: other, password: other-pw }} }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /open }}
  flow:
    - basicAuthentication:
        users:
          - {{ username: loadtest, password: secret }}
          - {{ username: hashed, password: "{bcrypt}" }}
        htpasswdFileProvider: {{ location: {} }}
    - request:
        - setHeader: {{ name: X-Consumer, value: "${{consumer.name}}" }}
  target: {{ host: 127.0.0.1, port: {} }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /partners }}
  flow:
    - basicAuthentication:
        allow: {{ groups: [partners] }}
  target: {{ host: 127.0.0.1, port: {} }}
"#,
        dir.path().join("users.htpasswd").display(),
        backend.port(),
        backend.port()
    );
    let gw = TestGateway::start(&yaml);
    // `--watch` reloads when the password file changes.
    assert!(gw.gw().files().contains(&dir.path().join("users.htpasswd")));
    let a = gw.addr();
    let r = get(a, "/open").await;
    assert_eq!(r.status, 401);
    assert!(r
        .header("www-authenticate")
        .unwrap()
        .starts_with("Basic realm="));
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    let auth = |u: &str, p: &str| basic(u, p);
    assert_eq!(
        get_with(a, "/open", &[("authorization", &auth("loadtest", "wrong"))])
            .await
            .status,
        401
    );
    assert_eq!(
        get_with(a, "/open", &[("authorization", &auth("nobody", "secret"))])
            .await
            .status,
        401
    );
    assert_eq!(
        get_with(
            a,
            "/open",
            &[("authorization", &auth("loadtest", "secret"))]
        )
        .await
        .status,
        200
    );
    for _ in 0..2 {
        assert_eq!(
            get_with(
                a,
                "/open",
                &[("authorization", &auth("hashed", "hashed-pw"))]
            )
            .await
            .status,
            200
        );
    }
    assert_eq!(
        get_with(a, "/open", &[("authorization", &auth("filed", "file-pw"))])
            .await
            .status,
        200
    );
    assert_eq!(
        get_with(
            a,
            "/open",
            &[("authorization", &auth("filed", "hashed-pw"))]
        )
        .await
        .status,
        401
    );
    assert_eq!(
        get_with(a, "/open", &[("authorization", &auth("acme", "acme-pw"))])
            .await
            .status,
        200
    );
    assert_eq!(backend.last().headers["x-consumer"], "acme");
    assert_eq!(
        get_with(a, "/open", &[("authorization", "Bearer x")])
            .await
            .status,
        401
    );

    assert_eq!(
        get_with(
            a,
            "/partners",
            &[("authorization", &auth("acme", "acme-pw"))]
        )
        .await
        .status,
        200
    );
    let r = get_with(
        a,
        "/partners",
        &[("authorization", &auth("other", "other-pw"))],
    )
    .await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["type"], "urn:turnpike:problem:forbidden");
}

/// A real `$2y$` bcrypt hash (cost 4 keeps the test fast).
fn pwhash_bcrypt(pw: &str) -> String {
    let setup = pwhash::bcrypt::BcryptSetup {
        cost: Some(4),
        variant: Some(pwhash::bcrypt::BcryptVariant::V2y),
        ..Default::default()
    };
    pwhash::bcrypt::hash_with(setup, pw).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_from_header_query_and_consumers_with_scopes() {
    let backend = Backend::start().await;
    let yaml = format!(
        r#"
gateway: {{ accessLog: false }}
---
consumer: {{ name: c1, groups: [gold], credentials: {{ apiKey: key-of-c1 }} }}
---
consumer: {{ name: c2, credentials: {{ apiKey: key-of-c2 }} }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /keys }}
  flow:
    - apiKey:
        stores:
          - simple:
              - secret: {{ value: abc123, scopes: [read] }}
          - consumers: {{}}
        extractors:
          - header: X-Key
          - query: api-key
  target: {{ host: 127.0.0.1, port: {p} }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /scoped }}
  flow:
    - apiKey:
        stores:
          - simple:
              - secret: {{ value: reader, scopes: [read] }}
              - secret: {{ value: writer, scopes: [read, write] }}
        requiredScopes: [write]
  target: {{ host: 127.0.0.1, port: {p} }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /gold }}
  flow:
    - apiKey:
        stores: [ {{ consumers: {{}} }} ]
        allow: {{ groups: [gold] }}
  target: {{ host: 127.0.0.1, port: {p} }}
"#,
        p = backend.port()
    );
    let gw = TestGateway::start(&yaml);
    let a = gw.addr();
    assert_eq!(get(a, "/keys").await.status, 401);
    assert_eq!(get_with(a, "/keys", &[("x-key", "nope")]).await.status, 403);
    assert_eq!(
        get_with(a, "/keys", &[("x-key", "abc123")]).await.status,
        200
    );
    assert_eq!(get(a, "/keys?api-key=abc123").await.status, 200);
    assert_eq!(get(a, "/keys?api-key=key-of-c2").await.status, 200);
    assert_eq!(
        get_with(a, "/scoped", &[("x-api-key", "reader")])
            .await
            .status,
        403
    );
    assert_eq!(
        get_with(a, "/scoped", &[("x-api-key", "writer")])
            .await
            .status,
        200
    );
    assert_eq!(
        get_with(a, "/gold", &[("x-api-key", "key-of-c1")])
            .await
            .status,
        200
    );
    assert_eq!(
        get_with(a, "/gold", &[("x-api-key", "key-of-c2")])
            .await
            .status,
        403
    );
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn openssl(args: &[&str]) -> Vec<u8> {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("openssl CLI");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

struct Keys {
    rsa_private: Vec<u8>,
    rsa_public: Vec<u8>,
    ec_private: Vec<u8>,
}

fn keys() -> Keys {
    let rsa_private = openssl(&[
        "genpkey",
        "-algorithm",
        "RSA",
        "-pkeyopt",
        "rsa_keygen_bits:2048",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("rsa.pem");
    std::fs::write(&p, &rsa_private).unwrap();
    let rsa_public = openssl(&["pkey", "-in", p.to_str().unwrap(), "-pubout"]);
    let ec_private = openssl(&[
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
    ]);
    Keys {
        rsa_private,
        rsa_public,
        ec_private,
    }
}

fn jwk(key: &EncodingKey, alg: Algorithm, kid: &str) -> serde_json::Value {
    let mut j =
        serde_json::to_value(jsonwebtoken::jwk::Jwk::from_encoding_key(key, alg).unwrap()).unwrap();
    j["kid"] = kid.into();
    j
}

fn token(alg: Algorithm, kid: &str, key: &EncodingKey, claims: serde_json::Value) -> String {
    let mut h = Header::new(alg);
    h.kid = Some(kid.into());
    jsonwebtoken::encode(&h, &claims, key).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_rs256_from_url_es256_and_hs256_from_files_and_every_rejection() {
    let k = keys();
    let rsa = EncodingKey::from_rsa_pem(&k.rsa_private).unwrap();
    let ec = EncodingKey::from_ec_pem(&k.ec_private).unwrap();
    let hs = EncodingKey::from_secret(b"a-shared-secret-of-32-bytes-long");
    let jwks_server = StaticServer::start(
        &serde_json::json!({ "keys": [jwk(&rsa, Algorithm::RS256, "rsa-1")] }).to_string(),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ec.json"),
        serde_json::json!({ "keys": [jwk(&ec, Algorithm::ES256, "ec-1")] }).to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("hs.json"),
        serde_json::json!({ "keys": [{ "kty": "oct", "kid": "hs-1", "alg": "HS256",
            "k": base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b"a-shared-secret-of-32-bytes-long") }] })
        .to_string(),
    )
    .unwrap();
    let backend = Backend::start().await;
    let yaml = format!(
        r#"
gateway: {{ accessLog: false }}
---
consumer: {{ name: alice-co, credentials: {{ jwt: {{ subject: alice }} }} }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /rs }}
  flow:
    - jwtAuth:
        jwks: [ {{ url: "http://{jwks}/jwks" }} ]
        expectedAud: orders
        expectedIss: https://idp.example
    - request:
        - setHeader: {{ name: X-Sub, value: "${{jwt.sub}}/${{consumer.name}}" }}
  target: {{ host: 127.0.0.1, port: {p} }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /es }}
  flow:
    - jwtAuth:
        jwks: [ {{ location: {ec} }} ]
  target: {{ host: 127.0.0.1, port: {p} }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /hs }}
  flow:
    - jwtAuth:
        jwks: [ {{ location: {hs} }}, {{ url: "http://{jwks}/jwks" }} ]
        algorithms: [HS256, RS256]
  target: {{ host: 127.0.0.1, port: {p} }}
"#,
        jwks = jwks_server.addr,
        p = backend.port(),
        ec = dir.path().join("ec.json").display(),
        hs = dir.path().join("hs.json").display(),
    );
    let gw = TestGateway::start(&yaml);
    // `--watch` reloads when a key set file changes.
    let watched = gw.gw().files();
    assert!(
        watched.contains(&dir.path().join("ec.json"))
            && watched.contains(&dir.path().join("hs.json"))
    );
    let a = gw.addr();
    let bearer = |t: &str| format!("Bearer {t}");
    let good = serde_json::json!({ "sub": "alice", "aud": "orders", "iss": "https://idp.example", "exp": now() + 300 });
    let t = token(Algorithm::RS256, "rsa-1", &rsa, good.clone());
    let r = get_with(a, "/rs", &[("authorization", &bearer(&t))]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(backend.last().headers["x-sub"], "alice/alice-co");

    let r = get(a, "/rs").await;
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));

    let mut expired = good.clone();
    expired["exp"] = (now() - 3600).into();
    let mut wrong_aud = good.clone();
    wrong_aud["aud"] = "billing".into();
    let mut wrong_iss = good.clone();
    wrong_iss["iss"] = "https://evil.example".into();
    for (what, claims, says) in [
        ("expired", expired, "invalid token: the token has expired"),
        (
            "audience",
            wrong_aud,
            "invalid token: the token's audience is not accepted",
        ),
        (
            "issuer",
            wrong_iss,
            "invalid token: the token's issuer is not accepted",
        ),
    ] {
        let t = token(Algorithm::RS256, "rsa-1", &rsa, claims);
        let r = get_with(a, "/rs", &[("authorization", &bearer(&t))]).await;
        assert_eq!(r.status, 401, "{what} must be rejected");
        assert!(r
            .header("www-authenticate")
            .unwrap()
            .contains("invalid_token"));
        // Which check failed, in the gateway's words; never the JWT library's.
        assert_eq!(r.json()["detail"], says, "{what}");
    }
    let r = get_with(a, "/rs", &[("authorization", "Bearer not.a.token")]).await;
    assert_eq!(r.json()["detail"], "invalid token: the token is malformed");
    // alg: none
    let enc = |v: serde_json::Value| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    };
    let none = format!(
        "{}.{}.",
        enc(serde_json::json!({"alg": "none", "typ": "JWT"})),
        enc(good.clone())
    );
    assert_eq!(
        get_with(a, "/rs", &[("authorization", &bearer(&none))])
            .await
            .status,
        401
    );
    // HS256 "signed" with the RSA public key (algorithm confusion), on an API that accepts both.
    let confused = token(
        Algorithm::HS256,
        "rsa-1",
        &EncodingKey::from_secret(&k.rsa_public),
        good.clone(),
    );
    assert_eq!(
        get_with(a, "/rs", &[("authorization", &bearer(&confused))])
            .await
            .status,
        401
    );
    assert_eq!(
        get_with(a, "/hs", &[("authorization", &bearer(&confused))])
            .await
            .status,
        401
    );
    // A token signed by another RSA key with the same kid.
    let other = keys();
    let forged = token(
        Algorithm::RS256,
        "rsa-1",
        &EncodingKey::from_rsa_pem(&other.rsa_private).unwrap(),
        good.clone(),
    );
    assert_eq!(
        get_with(a, "/rs", &[("authorization", &bearer(&forged))])
            .await
            .status,
        401
    );

    let plain = serde_json::json!({ "sub": "bob", "exp": now() + 300 });
    let t = token(Algorithm::ES256, "ec-1", &ec, plain.clone());
    assert_eq!(
        get_with(a, "/es", &[("authorization", &bearer(&t))])
            .await
            .status,
        200
    );
    // ES256 is accepted by default, RS256 tokens don't verify with the EC key set.
    let t = token(Algorithm::RS256, "rsa-1", &rsa, plain.clone());
    assert_eq!(
        get_with(a, "/es", &[("authorization", &bearer(&t))])
            .await
            .status,
        401
    );
    let t = token(Algorithm::HS256, "hs-1", &hs, plain.clone());
    assert_eq!(
        get_with(a, "/hs", &[("authorization", &bearer(&t))])
            .await
            .status,
        200
    );
    // HS256 is not accepted unless listed.
    assert_eq!(
        get_with(a, "/es", &[("authorization", &bearer(&t))])
            .await
            .status,
        401
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_kid_waits_for_one_refetch_and_a_flood_costs_one_fetch_per_interval() {
    use std::sync::atomic::Ordering::SeqCst;
    let k1 = keys();
    let k2 = keys();
    let rsa1 = EncodingKey::from_rsa_pem(&k1.rsa_private).unwrap();
    let rsa2 = EncodingKey::from_rsa_pem(&k2.rsa_private).unwrap();
    let jwks = StaticServer::start(
        &serde_json::json!({ "keys": [jwk(&rsa1, Algorithm::RS256, "k1")] }).to_string(),
    )
    .await;
    let backend = Backend::start().await;
    let yaml = format!(
        "gateway: {{ accessLog: false }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  flow:\n    - jwtAuth:\n        jwks: [ {{ url: \"http://{}/\", refresh: 1h, refetchInterval: 1s }} ]\n  target: {{ host: 127.0.0.1, port: {} }}\n",
        jwks.addr,
        backend.port()
    );
    let gw = TestGateway::start(&yaml);
    let claims = serde_json::json!({ "sub": "x", "exp": now() + 300 });
    let addr = gw.addr();
    let status = move |t: String| async move {
        get_with(addr, "/", &[("authorization", &format!("Bearer {t}"))])
            .await
            .status
    };
    let t1 = token(Algorithm::RS256, "k1", &rsa1, claims.clone());
    assert_eq!(status(t1).await, 200);
    let fetches = jwks.hits.load(SeqCst);
    // The identity provider rotates to k2: the first token signed with it waits while the key
    // set is fetched again, and passes.
    jwks.set(&serde_json::json!({ "keys": [jwk(&rsa2, Algorithm::RS256, "k2")] }).to_string());
    let t2 = token(Algorithm::RS256, "k2", &rsa2, claims.clone());
    assert_eq!(status(t2.clone()).await, 200);
    assert_eq!(jwks.hits.load(SeqCst), fetches + 1);
    assert_eq!(status(t2).await, 200);
    assert_eq!(
        jwks.hits.load(SeqCst),
        fetches + 1,
        "a known key needs no fetch"
    );
    // A flood of tokens naming a key nobody has, for 2.5 s: every one is refused, and the key
    // set is fetched at most once per refetchInterval (1 s).
    let t3 = token(Algorithm::RS256, "k3", &rsa2, claims);
    let before = jwks.hits.load(SeqCst);
    let start = std::time::Instant::now();
    let mut refused = 0;
    while start.elapsed() < Duration::from_millis(2500) {
        let mut tasks = Vec::new();
        for _ in 0..20 {
            tasks.push(tokio::spawn(status(t3.clone())));
        }
        let mut replies = Vec::new();
        for t in tasks {
            replies.push(t.await.unwrap());
        }
        assert!(replies.iter().all(|s| *s == 401), "{replies:?}");
        refused += replies.len();
    }
    let flood_fetches = jwks.hits.load(SeqCst) - before;
    assert!(refused > 100, "only {refused} requests");
    assert!(
        (1..=3).contains(&flood_fetches),
        "{flood_fetches} fetches for {refused} requests with an unknown kid over 2.5 s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membranes_jwks_map_and_optional_api_keys_with_scopes() {
    let k = keys();
    let rsa = EncodingKey::from_rsa_pem(&k.rsa_private).unwrap();
    let ec = EncodingKey::from_ec_pem(&k.ec_private).unwrap();
    let jwks_server = StaticServer::start(
        &serde_json::json!({ "keys": [jwk(&rsa, Algorithm::RS256, "rsa-1")] }).to_string(),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ec.json"),
        serde_json::json!({ "keys": [jwk(&ec, Algorithm::ES256, "ec-1")] }).to_string(),
    )
    .unwrap();
    let yaml = format!(
        r#"
gateway: {{ accessLog: false }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /jwt }}
  flow:
    - jwtAuth:
        jwks:
          jwks: [ {{ location: {ec} }} ]
          jwksUris: "http://{jwks}/jwks"
    - return: {{ status: 200 }}
---
api:
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /key }}
  flow:
    - apiKey:
        required: false
        stores: [ {{ simple: [ {{ secret: {{ value: key-admin, scopes: [admin] }} }}, {{ secret: {{ value: key-other }} }} ] }} ]
    - if:
        test: hasScope('admin')
        flow: [ {{ static: {{ src: admin }} }} ]
        else: [ {{ static: {{ src: guest }} }} ]
    - return: {{ status: 200 }}
"#,
        jwks = jwks_server.addr,
        ec = dir.path().join("ec.json").display(),
    );
    let gw = TestGateway::start(&yaml);
    let a = gw.addr();
    let claims = serde_json::json!({ "sub": "alice", "exp": now() + 300 });
    for t in [
        token(Algorithm::RS256, "rsa-1", &rsa, claims.clone()),
        token(Algorithm::ES256, "ec-1", &ec, claims.clone()),
    ] {
        let r = get_with(a, "/jwt", &[("authorization", &format!("Bearer {t}"))]).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert_eq!(get(a, "/jwt").await.status, 401);
    assert_eq!(
        get(a, "/key").await.text(),
        "guest",
        "no key: through, without scopes"
    );
    assert_eq!(
        get_with(a, "/key", &[("x-api-key", "key-admin")])
            .await
            .text(),
        "admin"
    );
    assert_eq!(
        get_with(a, "/key", &[("x-api-key", "key-other")])
            .await
            .text(),
        "guest"
    );
    assert_eq!(
        get_with(a, "/key", &[("x-api-key", "wrong")]).await.status,
        403,
        "a key that is given must be valid"
    );
}
