//! Membrane's OAuth2 policies through sockets, in the shapes of Membrane's OAuth2 tutorials and
//! examples: `oauth2authserver` issuing tokens, `tokenValidator` asking it about them, and
//! `jwtAuth` verifying its JWTs through its JSON Web Key Set.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;

use bytes::Bytes;
use common::*;
use http_body_util::Full;

/// A 2048-bit RSA key made for these tests only.
const TEST_JWK: &str = r#"{"kty": "RSA", "kid": "turnpike-test", "use": "sig", "alg": "RS256", "n": "sME6DZINKi2tgjQeWqZnUDPGdv_bpnY8i0o2HSaAZZlhaRPcmXURkjYloAarJMEXxq4veXg14hPQlN8f1YCfhCi3_TDHu_itmIo6XsQH3sHjM8vfu2A7lWWXoGqZgbrE_U02jX5Xv3S7vIQRyv-fGHBy9AMSt13PgUpOIhDjxYV7-B_A3tdUq2BKWtze3GJFfYlmSVOiXDqSA4Cdexfc9xVYfis_togF2EC31U4TeyZEjGhm76T2ZkPq7g3r5a2fOa8R4zFNGZyGqJ70Dio4UCWcN4J4964CHr6I0U6ZgNgIAcBguyBgJ9cjYFsKJ48HPMUvKQLVUI4Phmeq5lV8dQ", "e": "AQAB", "d": "EYAFbWkzyySb9Ijl0HfVQXLpiB1WSVQ_iP2fVKIxPYiYGmflrtPmb3bToX_HhhYQHT21uZhrTVJE6S3GNcShsTC5jA8-V0q3H_k075kHu8hajxBKZdTl-_6uVSr4vogYD4mLiIAlKUbiJ4yz7kisydCoW6cfkplufWXhTSzQQF1dgvZ4mv9J7N6qEY96TarzOyrIR53Jhn75Eg0CLvHfjg1u2m9MiT6nE9gfvn4zI0XOw1Li-GXRb-IcynU3No1p0wqGpRn5gOpZ7Awt4LmEcmqaAFELRNWCAGd1EQDSSFIh-G7f8wLc-8Ve0s6OeTp7SjQY8mfHRrgtUb-UqJtEqQ", "p": "2Ly_GNYFDUcIHdbZ-6QVSGMgtiAYSeIyPo44C0CU6zkbWvEw4vJP2kORuQIf94Qko0x4tJfnr-cWXRNHVwZfX7UtXhZqSRxB1NHzKTw7Zu4jt1a10DINwoedrgjh2mjrG8-RIV-pwVRiXc0_vGsTU_mgIUcxwpQWbxBmzCkIAaM", "q": "0MZH0VmZj6NXZoDYuvwf0Yq-0taI6yc9V5mNGw4IOXioSUD8FhjdpsLSrXKZszlG71liamGz_0gympa0hlzSWXx_N0y2qHLuYAyPd7jJFJ0y4PL8VdiBtG2ygtzQP_Swu0cdNyERCo-2vZ_VyfGuarhK_UP5dbEnD7j1s6zd2wc", "dp": "CscgDaEe8TEWEz3K6zuWn1nml4fzDUGFVB0IZm7YuPXHCXezAaYhGG6BwZx8cHeOxtwXqIthRxsLvqclxgsYFQ9SaTpeILKaB3ZFTEilf5HaDtTuB6NlkcXirnPcn1rWTjS9N9ak_2st1RJO2BTPCj8AmocKz21DzFQZeI-VyVc", "dq": "l6WvPQ4MUR2gusAUrZ29rwNNIPDce5MBJ8RNjr1elABknPErKxHczujtBzgbFOgh8nHG3uchS-kxeMDHWGHMGVwpPA3pD-qL5BC7lYcP6H1XG7bkO6cMb_bOl-e1DP-78Azz17uZGUbSwmJ7dDitLK-5KMZbSXXona8IKf8DF7k", "qi": "qRS9KlirpTa-GjmehPUgc3zF8hbr1UwPyq1mGWvHsTjdAqKYebfWZedpuM6m1mPEF-W2Nhp6POTI-xtb-vxyJcEuE2zuIN1LSgJ9GUCppA_oKb8aW2cw68sc98Bo83Ok3aXoRjoc7sbp3UHcLe67wqEOTy0Vf6s3VTw4kjfZ1xk"}"#;

/// The address of a port the gateway listens on (on every interface, as Membrane's configs
/// say nothing of `ip`).
fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

async fn post_form(addr: SocketAddr, path: &str, form: &str) -> Reply {
    send(
        addr,
        req("POST", path)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Full::new(Bytes::from(form.to_owned())))
            .unwrap(),
    )
    .await
}

async fn token(addr: SocketAddr, form: &str) -> String {
    let r = post_form(addr, "/oauth2/token", form).await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["access_token"].as_str().unwrap().to_owned()
}

async fn with_token(addr: SocketAddr, path: &str, token: &str) -> Reply {
    get_with(addr, path, &[("authorization", &format!("Bearer {token}"))]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_credentials_token_opens_the_api_behind_a_token_validator() {
    // Membrane's tutorial 10 (OAuth2 Basics).
    let (auth, api) = (free_port(), free_port());
    let gw = TestGateway::start(&format!(
        r#"api:
  name: Authorization Server
  port: {auth}
  flow:
    - beautifier: {{}}
    - oauth2authserver:
        issuer: http://127.0.0.1:{auth}
        staticClientList:
          clients:
            - clientId: abc
              clientSecret: def
        bearerToken: {{}}
        claims:
          value: sub
---
api:
  name: Protected API
  port: {api}
  flow:
    - tokenValidator:
        endpoint: http://127.0.0.1:{auth}/oauth2/userinfo
    - static:
        src: Protected resource accessed!
    - return:
        status: 200
"#
    ));
    let (auth, api) = (local(auth), local(api));
    let _gw = gw;
    let r = post_form(
        auth,
        "/oauth2/token",
        "grant_type=client_credentials&client_id=abc&client_secret=def",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("cache-control"), Some("no-store"));
    // Membrane's client scripts split the answer at its quotes: the token is the 4th piece,
    // its type the 8th.
    let text = r.text();
    let pieces: Vec<&str> = text.split('"').collect();
    assert_eq!(
        (pieces[1], pieces[5], pieces[7]),
        ("access_token", "token_type", "Bearer")
    );
    let t = pieces[3].to_owned();

    let ok = with_token(api, "/", &t).await;
    assert_eq!(
        (ok.status.as_u16(), ok.text().as_str()),
        (200, "Protected resource accessed!")
    );
    let bad = with_token(api, "/", "not-a-token").await;
    assert_eq!(bad.status, 401, "{}", bad.text());
    assert_eq!(
        bad.header("www-authenticate"),
        Some("Bearer error=\"invalid_token\"")
    );
    assert_eq!(bad.json()["type"], "urn:turnpike:problem:unauthorized");
    let none = get(api, "/").await;
    assert_eq!(
        (none.status.as_u16(), none.header("www-authenticate")),
        (401, Some("Bearer"))
    );

    // A wrong secret is RFC 6749's invalid_client.
    let r = post_form(
        auth,
        "/oauth2/token",
        "grant_type=client_credentials&client_id=abc&client_secret=wrong",
    )
    .await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"], "invalid_client");
    assert_eq!(r.header("www-authenticate"), Some("Basic realm=\"oauth2\""));

    // Revoked tokens are refused from then on.
    let r = post_form(
        auth,
        "/oauth2/revoke",
        &format!("token={t}&client_id=abc&client_secret=def"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(with_token(api, "/", &t).await.status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_tokens_are_verified_by_jwt_auth_through_the_servers_key_set() {
    // Membrane's tutorial 20 (client credentials with JWTs).
    let (auth, api) = (free_port(), free_port());
    let gw = TestGateway::start(&format!(
        r#"api:
  name: Authorization Server
  port: {auth}
  flow:
    - beautifier: {{}}
    - oauth2authserver:
        issuer: http://127.0.0.1:{auth}
        staticClientList:
          clients:
            - clientId: order-service
              clientSecret: secret
              grantTypes: client_credentials
              resources: order-api
              scopes: read write
        bearerJwtToken:
          expiration: 600
        claims:
          value: sub iss aud
---
api:
  name: Order API
  port: {api}
  flow:
    - jwtAuth:
        expectedAud: order-api
        expectedIss: http://127.0.0.1:{auth}
        jwks:
          jwksUris: http://127.0.0.1:{auth}/oauth2/certs
    - template:
        contentType: application/json
        src: |
          {{ "client": "${{property.jwt.sub}}", "scope": "${{property.jwt.scope}}", "aud": "${{property.jwt.aud}}" }}
    - return:
        status: 200
"#
    ));
    let (auth, api) = (local(auth), local(api));
    let _gw = gw;
    let t = token(
        auth,
        "grant_type=client_credentials&client_id=order-service&client_secret=secret",
    )
    .await;
    let r = with_token(api, "/", &t).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json(),
        serde_json::json!({"client": "order-service", "scope": "read write", "aud": "order-api"})
    );
    // A token signed with another key is refused.
    let forged = {
        let key = jsonwebtoken::EncodingKey::from_secret(b"guess");
        let claims =
            serde_json::json!({"sub": "order-service", "aud": "order-api", "exp": 4102444800u64});
        jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &key).unwrap()
    };
    assert_eq!(with_token(api, "/", &forged).await.status, 401);
    let mut tampered = t.clone();
    tampered.insert(t.len() - 5, 'x');
    assert_eq!(with_token(api, "/", &tampered).await.status, 401);

    let r = post_form(
        auth,
        "/oauth2/token",
        "grant_type=client_credentials&client_id=order-service&client_secret=secret&scope=admin",
    )
    .await;
    assert_eq!(
        (r.status.as_u16(), r.json()["error"].as_str()),
        (400, Some("invalid_scope"))
    );
    let jwks = get(auth, "/oauth2/certs").await.json();
    assert_eq!(jwks["keys"][0]["kty"], "RSA");
    let discovery = get(auth, "/.well-known/openid-configuration").await.json();
    assert_eq!(
        discovery["jwks_uri"],
        format!("http://127.0.0.1:{}/oauth2/certs", auth.port())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_grant_and_refresh_tokens() {
    // Membrane's tutorial 30 (password flow).
    let (auth, api) = (free_port(), free_port());
    let gw = TestGateway::start(&format!(
        r#"api:
  name: Authorization Server
  port: {auth}
  flow:
    - oauth2authserver:
        issuer: http://127.0.0.1:{auth}
        staticUserDataProvider:
          users:
            - username: john
              password: password
              aud: order-api
              scopes: read write
        staticClientList:
          clients:
            - clientId: abc
              clientSecret: def
              grantTypes: password,refresh_token
        bearerJwtToken:
          expiration: 600
        refresh:
          bearerJwtToken:
            expiration: 3600
        claims:
          value: sub iss aud
---
api:
  name: Order API
  port: {api}
  flow:
    - jwtAuth:
        expectedAud: order-api
        expectedIss: http://127.0.0.1:{auth}
        jwks:
          jwksUris: http://127.0.0.1:{auth}/oauth2/certs
    - template:
        contentType: application/json
        src: '{{"user": "${{property.jwt.sub}}", "scope": "${{property.jwt.scope}}"}}'
    - return:
        status: 200
"#
    ));
    let (auth, api) = (local(auth), local(api));
    let _gw = gw;
    let r = post_form(
        auth,
        "/oauth2/token",
        "grant_type=password&username=john&password=password&client_id=abc&client_secret=def",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let body = r.json();
    assert_eq!(body["expires_in"], 600);
    let t = body["access_token"].as_str().unwrap();
    let refresh = body["refresh_token"].as_str().unwrap();
    let r = with_token(api, "/", t).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json(),
        serde_json::json!({"user": "john", "scope": "read write"})
    );
    // The refresh token is no access token.
    assert_eq!(with_token(api, "/", refresh).await.status, 401);

    let form =
        format!("grant_type=refresh_token&refresh_token={refresh}&client_id=abc&client_secret=def");
    let t2 = token(auth, &form).await;
    let r = with_token(api, "/", &t2).await;
    assert_eq!(
        r.json(),
        serde_json::json!({"user": "john", "scope": "read write"})
    );
    let again = post_form(auth, "/oauth2/token", &form).await;
    assert_eq!(
        again.json()["error"],
        "invalid_grant",
        "a refresh token is spent once used"
    );

    let wrong = post_form(
        auth,
        "/oauth2/token",
        "grant_type=password&username=john&password=nope&client_id=abc&client_secret=def",
    )
    .await;
    assert_eq!(
        (wrong.status.as_u16(), wrong.json()["error"].as_str()),
        (400, Some("invalid_grant"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_distributed_issuer_and_validator_share_the_key_set() {
    // Membrane's tutorials 50a and 50b: the issuer reads its key from a JWK file; another
    // gateway validates its tokens through its JWKS endpoint.
    let auth = free_port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("jwk.json"), TEST_JWK).unwrap();
    let file = dir.path().join("gateway.yaml");
    std::fs::write(
        &file,
        format!(
            r#"api:
  name: Authorization Server
  port: {auth}
  flow:
    - oauth2authserver:
        issuer: http://127.0.0.1:{auth}
        staticUserDataProvider:
          users:
            - username: john
              password: password
        staticClientList:
          clients:
            - clientId: abc
              clientSecret: def
              grantTypes: password
        bearerJwtToken:
          expiration: 300
          jwk:
            location: jwk.json
        claims:
          value: sub iss
"#
        ),
    )
    .unwrap();
    let _issuer = turnpike::start(vec![file]).unwrap();
    let auth_addr = local(auth);
    let api = free_port();
    let _validator = TestGateway::start(&format!(
        r#"api:
  name: Protected API
  port: {api}
  flow:
    - jwtAuth:
        jwks:
          jwksUris: http://127.0.0.1:{auth}/oauth2/certs
    - setBody:
        language: SpEL
        contentType: text/plain
        value: "Hello, ${{properties['jwt']['sub']}}!"
    - return:
        status: 200
"#
    ));
    let api = local(api);
    let jwks = get(auth_addr, "/oauth2/certs").await.json();
    assert_eq!(
        jwks["keys"][0]["kid"], "turnpike-test",
        "the key of the file"
    );
    let t = token(
        auth_addr,
        "grant_type=password&username=john&password=password&client_id=abc&client_secret=def",
    )
    .await;
    let r = with_token(api, "/", &t).await;
    assert_eq!(
        (r.status.as_u16(), r.text().as_str()),
        (200, "Hello, john!")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_validator_tells_the_servers_answers_apart() {
    let userinfo = Backend::start().await;
    let closed = free_port();
    let (forbidden, failing, unreachable) = (free_port(), free_port(), free_port());
    let b = userinfo.port();
    let gw = TestGateway::start(&format!(
        r#"api:
  port: {forbidden}
  flow:
    - tokenValidator:
        endpoint: http://127.0.0.1:{b}/status/403
    - return: {{}}
---
api:
  port: {failing}
  flow:
    - tokenValidator:
        endpoint: http://127.0.0.1:{b}/status/500
    - return: {{}}
---
api:
  port: {unreachable}
  flow:
    - tokenValidator:
        endpoint: http://127.0.0.1:{closed}/oauth2/userinfo
    - return: {{}}
"#
    ));
    let _gw = gw;
    let r = with_token(local(forbidden), "/", "t0k3n").await;
    assert_eq!(r.status, 403, "{}", r.text());
    let seen = userinfo.last();
    assert_eq!(seen.method, "GET");
    assert_eq!(seen.headers["authorization"], "Bearer t0k3n");
    let r = with_token(local(failing), "/", "t0k3n").await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(r.json()["type"], "urn:turnpike:problem:upstream-error");
    let r = with_token(local(unreachable), "/", "t0k3n").await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(
        r.json()["type"],
        "urn:turnpike:problem:upstream-unreachable"
    );
    assert_eq!(userinfo.count(), 2, "no token, no question");
    let r = get(local(forbidden), "/").await;
    assert_eq!(r.status, 401);
    assert_eq!(userinfo.count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_fetches_a_token_and_keeps_it() {
    // Membrane's tutorial 40 (client token renewal): the gateway gets a token from the
    // authorization server and calls the protected API with it.
    let backend = Backend::start().await;
    let (auth, gateway, protected, wrong) = (free_port(), free_port(), free_port(), free_port());
    let b = backend.port();
    let gw = TestGateway::start(&format!(
        r#"api:
  name: Authorization Server
  port: {auth}
  flow:
    - oauth2authserver:
        issuer: http://127.0.0.1:{auth}
        staticUserDataProvider:
          users:
            - username: john
              password: password
        staticClientList:
          clients:
            - clientId: abc
              clientSecret: def
              callbackUrl: http://localhost:2000/oauth2callback
        bearerJwtToken:
          expiration: 60
        claims:
          value: sub
          scopes:
            - id: read
              claims: sub
---
api:
  name: Gateway
  port: {gateway}
  flow:
    - oauth2Client:
        tokenUrl: http://127.0.0.1:{auth}/oauth2/token
        clientId: abc
        clientSecret: def
  target:
    url: http://127.0.0.1:{protected}
---
api:
  name: Protected API
  port: {protected}
  flow:
    - tokenValidator:
        endpoint: http://127.0.0.1:{auth}/oauth2/userinfo
  target:
    url: http://127.0.0.1:{b}
---
api:
  name: Misconfigured Gateway
  port: {wrong}
  flow:
    - oauth2Client:
        tokenUrl: http://127.0.0.1:{auth}/oauth2/token
        clientId: abc
        clientSecret: wrong
  target:
    url: http://127.0.0.1:{protected}
"#
    ));
    let _gw = gw;
    let (first, second) = futures_util::join!(
        get(local(gateway), "/orders"),
        get(local(gateway), "/orders")
    );
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(second.status, 200, "{}", second.text());
    let third = get(local(gateway), "/orders").await;
    assert_eq!(third.status, 200, "{}", third.text());
    let seen = backend.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3);
    let tokens: Vec<&str> = seen
        .iter()
        .map(|s| s.headers["authorization"].to_str().unwrap())
        .collect();
    assert!(tokens[0].starts_with("Bearer ey"), "{}", tokens[0]);
    assert!(
        tokens.iter().all(|t| *t == tokens[0]),
        "one token for all: {tokens:?}"
    );
    let refused = get(local(wrong), "/orders").await;
    assert_eq!(refused.status, 502, "{}", refused.text());
    assert_eq!(
        refused.json()["type"],
        "urn:turnpike:problem:upstream-error"
    );
    assert_eq!(backend.count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membranes_jwt_signing_tutorial_issues_tokens_its_resource_accepts() {
    // Membrane's tutorial jwt/20-JWT-Signing: a token server (basic authentication, a JSON
    // template, `jwtSign` into a property) and a resource that verifies the token.
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("jwk.json"), TEST_JWK).unwrap();
    let private: serde_json::Value = serde_json::from_str(TEST_JWK).unwrap();
    let public = serde_json::json!({ "keys": [{
        "kty": "RSA", "kid": private["kid"], "n": private["n"], "e": private["e"]
    }]});
    std::fs::write(dir.path().join("jwk-public.json"), public.to_string()).unwrap();
    let file = dir.path().join("gateway.yaml");
    std::fs::write(
        &file,
        format!(
            r#"api:
  port: {port}
  name: Token Server
  path:
    uri: /token
  flow:
    - basicAuthentication:
        users:
          - username: alice
            password: alice-secret
    - request:
        - template:
            contentType: application/json
            src: |
              {{
                "sub": ${{user()}},
                "aud": "demo-resource",
                "scope": "read write"
              }}
        - jwtSign:
            property: token
            jwk:
              location: jwk.json
        - template:
            contentType: application/json
            src: |
              {{
                "access_token": ${{property.token}},
                "token_type": "bearer",
                "expires_in": 300
              }}
    - return:
        status: 200
---
api:
  port: {port}
  name: Protected Resource
  path:
    uri: /resource
  flow:
    - jwtAuth:
        expectedAud: demo-resource
        jwks:
          jwks:
            - location: jwk-public.json
    - template:
        contentType: application/json
        src: |
          {{
            "client": ${{property.jwt.sub}},
            "scope": ${{property.jwt.scope}}
          }}
    - return:
        status: 200
"#
        ),
    )
    .unwrap();
    let _gw = turnpike::start(vec![file]).unwrap();
    let addr = local(port);
    assert_eq!(get(addr, "/token").await.status, 401);
    use base64::Engine;
    let basic = base64::engine::general_purpose::STANDARD.encode("alice:alice-secret");
    let r = get_with(
        addr,
        "/token",
        &[("authorization", &format!("Basic {basic}"))],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let answer = r.json();
    assert_eq!(
        (answer["token_type"].as_str(), answer["expires_in"].as_u64()),
        (Some("bearer"), Some(300))
    );
    let token = answer["access_token"].as_str().unwrap();
    let key = jsonwebtoken::DecodingKey::from_rsa_components(
        private["n"].as_str().unwrap(),
        private["e"].as_str().unwrap(),
    )
    .unwrap();
    let mut v = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
    v.set_audience(&["demo-resource"]);
    let claims = jsonwebtoken::decode::<serde_json::Value>(token, &key, &v)
        .unwrap()
        .claims;
    assert_eq!(
        (claims["sub"].as_str(), claims["scope"].as_str()),
        (Some("alice"), Some("read write"))
    );
    let iat = claims["iat"].as_u64().unwrap();
    assert_eq!(claims["exp"].as_u64(), Some(iat + 300));
    assert_eq!(claims["nbf"].as_u64(), Some(iat - 120));

    let r = with_token(addr, "/resource", token).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json(),
        serde_json::json!({ "client": "alice", "scope": "read write" })
    );
    // A token whose signature does not match is refused.
    let mut forged = token.to_owned();
    forged.truncate(forged.len() - 4);
    forged.push_str("AAAA");
    assert_eq!(with_token(addr, "/resource", &forged).await.status, 401);
}
