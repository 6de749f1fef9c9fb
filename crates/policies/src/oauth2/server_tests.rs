use super::*;
use crate::testutil::{exchange, plain};
use serde_json::json;

fn server(settings: Value) -> AuthServer {
    let s: AuthServerSettings = serde_json::from_value(settings).unwrap();
    AuthServer::compile(s, &plain()).unwrap()
}

fn compile_error(settings: Value) -> String {
    let s: AuthServerSettings = serde_json::from_value(settings).unwrap();
    AuthServer::compile(s, &plain()).unwrap_err().to_string()
}

struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: Value,
}

fn call(s: &AuthServer, method: &str, uri: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    let mut ex = exchange(method, uri, headers, body);
    match s.on_request(&mut ex) {
        Outcome::Respond(r) => {
            let body = match r.body() {
                Body::Full(Some(b)) => serde_json::from_slice(b).unwrap_or(Value::Null),
                _ => Value::Null,
            };
            Answer {
                status: r.status().as_u16(),
                headers: r.headers().clone(),
                body,
            }
        }
        Outcome::Reject(p) => Answer {
            status: p.status.as_u16(),
            headers: p.headers.iter().cloned().collect(),
            body: json!({"problem": p.ty.kind}),
        },
        other => panic!("unexpected {other:?}"),
    }
}

const FORM: (&str, &str) = ("content-type", "application/x-www-form-urlencoded");

fn token(s: &AuthServer, form: &str) -> Answer {
    call(s, "POST", "/oauth2/token", &[FORM], form)
}

fn userinfo(s: &AuthServer, token: &str) -> Answer {
    let auth = format!("Bearer {token}");
    call(
        s,
        "GET",
        "/oauth2/userinfo",
        &[("authorization", &auth)],
        "",
    )
}

/// The verified claims of a JWT, checked with the server's published key set.
fn claims(s: &AuthServer, jwt: &str) -> Value {
    let set: jsonwebtoken::jwk::JwkSet = serde_json::from_slice(&s.jwks).unwrap();
    let kid = jsonwebtoken::decode_header(jwt).unwrap().kid.unwrap();
    let jwk = set.find(&kid).expect("the token's key is published");
    let key = jsonwebtoken::DecodingKey::from_jwk(jwk).unwrap();
    let mut v = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
    v.validate_aud = false;
    jsonwebtoken::decode::<Value>(jwt, &key, &v).unwrap().claims
}

fn basics(issuer: &str) -> Value {
    json!({
        "issuer": issuer,
        "staticClientList": {"clients": [{"clientId": "abc", "clientSecret": "def"}]},
        "bearerToken": {},
        "claims": {"value": "sub"}
    })
}

#[test]
fn client_credentials_with_opaque_tokens() {
    let s = server(basics("http://localhost:7101"));
    let a = token(
        &s,
        "grant_type=client_credentials&client_id=abc&client_secret=def",
    );
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["cache-control"], "no-store");
    assert_eq!(a.body["token_type"], "Bearer");
    assert!(
        a.body.get("expires_in").is_none(),
        "opaque tokens do not expire"
    );
    assert!(a.body.get("refresh_token").is_none());
    let t = a.body["access_token"].as_str().unwrap().to_owned();
    assert_eq!(t.len(), 43);
    let u = userinfo(&s, &t);
    assert_eq!((u.status, &u.body), (200, &json!({"sub": "abc"})));
    // HTTP Basic works too, with the id and secret form-encoded.
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("abc:def")
    );
    let a = call(
        &s,
        "POST",
        "/oauth2/token",
        &[FORM, ("authorization", &basic)],
        "grant_type=client_credentials",
    );
    assert_eq!(a.status, 200, "{}", a.body);
    assert_ne!(a.body["access_token"], t.as_str());
}

#[test]
fn token_request_errors_are_rfc_6749() {
    let s = server(basics("http://localhost:7102"));
    for (form, status, error) in [
        (
            "grant_type=client_credentials&client_id=abc&client_secret=wrong",
            401,
            "invalid_client",
        ),
        (
            "grant_type=client_credentials&client_id=nobody&client_secret=def",
            401,
            "invalid_client",
        ),
        (
            "grant_type=client_credentials&client_id=abc",
            401,
            "invalid_client",
        ),
        ("grant_type=client_credentials", 401, "invalid_client"),
        ("client_id=abc&client_secret=def", 400, "invalid_request"),
        (
            "grant_type=client_credentials&grant_type=password&client_id=abc&client_secret=def",
            400,
            "invalid_request",
        ),
        (
            "grant_type=authorization_code&code=x&client_id=abc&client_secret=def",
            400,
            "unsupported_grant_type",
        ),
        (
            "grant_type=urn:x&client_id=abc&client_secret=def",
            400,
            "unsupported_grant_type",
        ),
        (
            "grant_type=password&username=a&password=b&client_id=abc&client_secret=def",
            400,
            "unsupported_grant_type",
        ),
        (
            "grant_type=refresh_token&refresh_token=nope&client_id=abc&client_secret=def",
            400,
            "invalid_grant",
        ),
        (
            "grant_type=client_credentials&client_id=abc&client_secret=def&scope=admin",
            400,
            "invalid_scope",
        ),
        (
            "grant_type=client_credentials&client_id=abc&client_secret=def&resource=x",
            400,
            "invalid_target",
        ),
    ] {
        let a = token(&s, form);
        assert_eq!(
            (a.status, a.body["error"].as_str()),
            (status, Some(error)),
            "{form}"
        );
        assert!(a.body["error_description"].is_string());
        if status == 401 {
            assert_eq!(a.headers["www-authenticate"], "Basic realm=\"oauth2\"");
        }
    }
    let a = call(
        &s,
        "POST",
        "/oauth2/token",
        &[("content-type", "application/json")],
        "{}",
    );
    assert_eq!(a.body["error"], "invalid_request");
    let a = call(
        &s,
        "GET",
        "/oauth2/token?grant_type=client_credentials",
        &[],
        "",
    );
    assert_eq!(
        (a.status, &a.body["problem"]),
        (405, &json!("method-not-allowed"))
    );
    assert_eq!(a.headers["allow"], "POST");
    let a = call(&s, "GET", "/nope", &[], "");
    assert_eq!((a.status, &a.body["problem"]), (404, &json!("not-found")));
    let a = call(
        &s,
        "GET",
        "/oauth2/auth?response_type=code&client_id=abc",
        &[],
        "",
    );
    assert_eq!(a.body["error"], "unsupported_response_type");
}

#[test]
fn clients_are_held_to_their_grant_types() {
    let s = server(json!({
        "issuer": "http://localhost:7103",
        "staticUserDataProvider": {"users": [{"username": "john", "password": "password"}]},
        "staticClientList": {"clients": [
            {"clientId": "svc", "clientSecret": "s", "grantTypes": "client_credentials"},
            {"clientId": "app", "clientSecret": "a", "grantTypes": "password"}
        ]}
    }));
    let a = token(
        &s,
        "grant_type=password&username=john&password=password&client_id=svc&client_secret=s",
    );
    assert_eq!(
        (a.status, &a.body["error"]),
        (400, &json!("unauthorized_client"))
    );
    let a = token(
        &s,
        "grant_type=password&username=john&password=password&client_id=app&client_secret=a",
    );
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.body.get("refresh_token").is_none(), "app may not refresh");
    let a = token(
        &s,
        "grant_type=password&username=john&password=wrong&client_id=app&client_secret=a",
    );
    assert_eq!((a.status, &a.body["error"]), (400, &json!("invalid_grant")));
    let a = token(
        &s,
        "grant_type=password&username=john&client_id=app&client_secret=a",
    );
    assert_eq!(
        (a.status, &a.body["error"]),
        (400, &json!("invalid_request"))
    );
}

#[test]
fn jwt_tokens_carry_audience_and_scope() {
    // Membrane's tutorial 20.
    let s = server(json!({
        "issuer": "http://localhost:7104",
        "staticClientList": {"clients": [{
            "clientId": "order-service", "clientSecret": "secret",
            "grantTypes": "client_credentials", "resources": "order-api", "scopes": "read write"
        }]},
        "bearerJwtToken": {"expiration": 600},
        "claims": {"value": "sub iss aud"}
    }));
    let a = token(
        &s,
        "grant_type=client_credentials&client_id=order-service&client_secret=secret",
    );
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["expires_in"], 600);
    assert_eq!(a.body["scope"], "read write");
    let jwt = a.body["access_token"].as_str().unwrap();
    let c = claims(&s, jwt);
    assert_eq!(c["sub"], "order-service");
    assert_eq!(c["clientId"], "order-service");
    assert_eq!(c["iss"], "http://localhost:7104");
    assert_eq!(c["aud"], "order-api");
    assert_eq!(c["scope"], "read write");
    assert_eq!(c["jti"].as_str().unwrap().len(), 43);
    let exp = c["exp"].as_u64().unwrap();
    assert!((exp as i64 - now_secs() as i64 - 600).abs() <= 2);
    // A narrower scope, and the audience asked for.
    let a = token(&s, "grant_type=client_credentials&client_id=order-service&client_secret=secret&scope=read&resource=order-api");
    assert_eq!(a.body["scope"], "read");
    assert_eq!(
        claims(&s, a.body["access_token"].as_str().unwrap())["scope"],
        "read"
    );
    let a = token(
        &s,
        "grant_type=client_credentials&client_id=order-service&client_secret=secret&scope=admin",
    );
    assert_eq!(
        a.body,
        json!({"error": "invalid_scope", "error_description": "the scope `admin` is not allowed"})
    );
    // JWT access tokens are known to the userinfo endpoint too.
    assert_eq!(userinfo(&s, jwt).status, 200);
    let certs = call(&s, "GET", "/oauth2/certs", &[], "");
    assert_eq!(certs.body["keys"][0]["alg"], "RS256");
    assert!(certs.body["keys"][0].get("d").is_none(), "no private part");
}

#[test]
fn password_grant_with_refresh_tokens() {
    // Membrane's tutorial 30.
    let s = server(json!({
        "issuer": "http://localhost:7105",
        "staticUserDataProvider": {"users": [{
            "username": "john", "password": "password", "aud": "order-api", "scopes": "read write"
        }]},
        "staticClientList": {"clients": [{
            "clientId": "abc", "clientSecret": "def", "grantTypes": "password,refresh_token"
        }]},
        "bearerJwtToken": {"expiration": 600},
        "refresh": {"bearerJwtToken": {"expiration": 3600}},
        "claims": {"value": "sub iss aud"}
    }));
    let a = token(
        &s,
        "grant_type=password&username=john&password=password&client_id=abc&client_secret=def",
    );
    assert_eq!(a.status, 200, "{}", a.body);
    let c = claims(&s, a.body["access_token"].as_str().unwrap());
    assert_eq!((&c["sub"], &c["clientId"]), (&json!("john"), &json!("abc")));
    assert_eq!(
        (&c["aud"], &c["scope"]),
        (&json!("order-api"), &json!("read write"))
    );
    assert!(c.get("scopes").is_none() && c.get("password").is_none());
    let refresh = a.body["refresh_token"].as_str().unwrap().to_owned();
    // The refresh token is a JWT whose key is not published: resource servers cannot take it
    // for an access token.
    let kid = jsonwebtoken::decode_header(&refresh).unwrap().kid.unwrap();
    let set: jsonwebtoken::jwk::JwkSet = serde_json::from_slice(&s.jwks).unwrap();
    assert!(set.find(&kid).is_none());
    assert_eq!(userinfo(&s, &refresh).status, 401, "not an access token");

    let form =
        format!("grant_type=refresh_token&refresh_token={refresh}&client_id=abc&client_secret=def");
    let b = token(&s, &form);
    assert_eq!(b.status, 200, "{}", b.body);
    let c = claims(&s, b.body["access_token"].as_str().unwrap());
    assert_eq!(
        (&c["sub"], &c["aud"], &c["scope"]),
        (&json!("john"), &json!("order-api"), &json!("read write"))
    );
    assert_eq!(
        token(&s, &form).body["error"],
        "invalid_grant",
        "a refresh token is used once"
    );
    let next = b.body["refresh_token"].as_str().unwrap();
    let narrower = token(&s, &format!("grant_type=refresh_token&refresh_token={next}&scope=read&client_id=abc&client_secret=def"));
    assert_eq!(narrower.body["scope"], "read");
    let next = narrower.body["refresh_token"].as_str().unwrap();
    let wider = token(&s, &format!("grant_type=refresh_token&refresh_token={next}&scope=read+write&client_id=abc&client_secret=def"));
    assert_eq!(wider.body["error"], "invalid_scope");
    let a = token(&s, "grant_type=password&username=john&password=password&client_id=abc&client_secret=def&scope=admin");
    assert_eq!(a.body["error"], "invalid_scope", "beyond the user's scopes");
}

#[test]
fn userinfo_answers_the_claims_of_the_granted_scopes() {
    // Membrane's examples/security/oauth2/api.
    let s = server(json!({
        "issuer": "http://localhost:7106",
        "staticUserDataProvider": {"users": [{"username": "john", "password": "password", "email": "john@predic8.de"}]},
        "staticClientList": {"clients": [{"clientId": "abc", "clientSecret": "def", "callbackUrl": "http://localhost:2000/oauth2callback"}]},
        "bearerToken": {},
        "claims": {"value": "aud email iss sub username", "scopes": [
            {"id": "username", "claims": "username"},
            {"id": "profile", "claims": "username email"}
        ]}
    }));
    let form =
        "grant_type=password&username=john&password=password&client_id=abc&client_secret=def";
    let a = token(&s, form);
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.body["refresh_token"].is_string());
    let u = userinfo(&s, a.body["access_token"].as_str().unwrap());
    assert_eq!(u.body, json!({"sub": "john"}));
    let a = token(&s, &format!("{form}&scope=profile"));
    let u = userinfo(&s, a.body["access_token"].as_str().unwrap());
    assert_eq!(
        u.body,
        json!({"sub": "john", "username": "john", "email": "john@predic8.de"})
    );
    let a = token(&s, &format!("{form}&scope=nope"));
    assert_eq!(a.body["error"], "invalid_scope");

    let none = call(&s, "GET", "/oauth2/userinfo", &[], "");
    assert_eq!(
        (none.status, &none.headers["www-authenticate"]),
        (401, &HeaderValue::from_static("Bearer realm=\"oauth2\""))
    );
    let bad = userinfo(&s, "nope");
    assert_eq!(bad.status, 401);
    assert_eq!(
        bad.headers["www-authenticate"],
        "Bearer realm=\"oauth2\", error=\"invalid_token\""
    );
    assert_eq!(bad.body["error"], "invalid_token");
}

#[test]
fn revocation() {
    let s = server(json!({
        "issuer": "http://localhost:7107",
        "staticClientList": {"clients": [
            {"clientId": "abc", "clientSecret": "def"},
            {"clientId": "other", "clientSecret": "o"}
        ]}
    }));
    let t = token(
        &s,
        "grant_type=client_credentials&client_id=abc&client_secret=def",
    )
    .body["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let revoke = |form: &str| call(&s, "POST", "/oauth2/revoke", &[FORM], form);
    assert_eq!(
        revoke(&format!("token={t}&client_id=abc&client_secret=x")).body["error"],
        "invalid_client"
    );
    assert_eq!(
        revoke(&format!("token={t}&client_id=other&client_secret=o")).body["error"],
        "invalid_grant"
    );
    assert_eq!(
        revoke("client_id=abc&client_secret=def").body["error"],
        "invalid_request"
    );
    assert_eq!(userinfo(&s, &t).status, 200);
    assert_eq!(
        revoke(&format!("token={t}&client_id=abc&client_secret=def")).status,
        200
    );
    assert_eq!(userinfo(&s, &t).status, 401);
    assert_eq!(
        revoke(&format!("token={t}&client_id=abc&client_secret=def")).status,
        200,
        "unknown tokens too"
    );
    assert_eq!(call(&s, "GET", "/oauth2/revoke", &[], "").status, 405);
}

#[test]
fn discovery_document() {
    let s = server(basics("http://localhost:7108/"));
    let d = call(&s, "GET", "/.well-known/openid-configuration", &[], "");
    assert_eq!(d.status, 200);
    assert_eq!(d.body["issuer"], "http://localhost:7108");
    assert_eq!(
        d.body["token_endpoint"],
        "http://localhost:7108/oauth2/token"
    );
    assert_eq!(d.body["jwks_uri"], "http://localhost:7108/oauth2/certs");
    assert_eq!(
        d.body["grant_types_supported"],
        json!(["client_credentials", "refresh_token"]),
        "no password grant without users"
    );
    assert_eq!(
        call(&s, "GET", "/oauth2/certs", &[], "").body,
        json!({"keys": []})
    );
}

#[test]
fn endpoints_are_below_the_apis_path() {
    let s: AuthServerSettings =
        serde_json::from_value(basics("http://localhost:7109/auth")).unwrap();
    let ctx = CompileContext {
        path_prefix: "/auth/",
        ..plain()
    };
    let s = AuthServer::compile(s, &ctx).unwrap();
    let a = call(
        &s,
        "POST",
        "/auth/oauth2/token",
        &[FORM],
        "grant_type=client_credentials&client_id=abc&client_secret=def",
    );
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(call(&s, "POST", "/oauth2/token", &[FORM], "").status, 404);
}

#[test]
fn tokens_and_generated_keys_outlive_a_reload() {
    let settings = json!({
        "issuer": "http://localhost:7110",
        "staticClientList": {"clients": [{"clientId": "abc", "clientSecret": "def"}]},
        "bearerJwtToken": {"expiration": 60}
    });
    let first = server(settings.clone());
    let t = token(
        &first,
        "grant_type=client_credentials&client_id=abc&client_secret=def",
    )
    .body["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let second = server(settings);
    assert_eq!(first.jwks, second.jwks);
    assert_eq!(userinfo(&second, &t).status, 200);
}

#[test]
fn load_errors() {
    for (settings, expect) in [
        (
            json!({"issuer": "localhost:7007", "staticClientList": {"clients": [{"clientId": "a", "clientSecret": "b"}]}}),
            "http(s) URL",
        ),
        (
            json!({"issuer": "http://x", "staticClientList": {"clients": []}}),
            "at least one client",
        ),
        (
            json!({"issuer": "http://x", "issueNonSpecIdTokens": true, "staticClientList": {"clients": [{"clientId": "a", "clientSecret": "b"}]}}),
            "ID tokens",
        ),
        (
            json!({"issuer": "http://x", "bearerToken": {}, "bearerJwtToken": {}, "staticClientList": {"clients": [{"clientId": "a", "clientSecret": "b"}]}}),
            "one of",
        ),
        (
            json!({"issuer": "http://x", "bearerJwtToken": {"jwk": {"location": "/nonexistent/jwk.json"}}, "staticClientList": {"clients": [{"clientId": "a", "clientSecret": "b"}]}}),
            "cannot read",
        ),
        (
            json!({"issuer": "http://x", "staticClientList": {"clients": [{"clientId": "a", "clientSecret": "b", "grantTypes": "authorization_code"}]}}),
            "login dialog",
        ),
        (
            json!({"issuer": "http://x", "claims": {"scopes": [{"id": "a b"}]}, "staticClientList": {"clients": [{"clientId": "a", "clientSecret": "b"}]}}),
            "one word",
        ),
    ] {
        let e = compile_error(settings.clone());
        assert!(e.contains(expect), "{settings}: {e}");
    }
}
