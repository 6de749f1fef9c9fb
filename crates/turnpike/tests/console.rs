//! The web console and the store of recent exchanges: the console answers 401 without the
//! token; exchanges are listed newest first with filters, with secrets redacted (headers and
//! query parameters) and the start of both bodies; and headless Chromium (Selenium) logs in,
//! sees the APIs, finds a request among the exchanges and its redacted `Authorization`, and
//! takes a screenshot.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;

use bytes::Bytes;
use common::*;
use http_body_util::Full;
use serde_json::json;

const TOKEN: &str = "console-token-0123456789";
const SECRET: &str = "s3cret-bearer-value";

fn config(backend: u16) -> String {
    format!(
        r#"gateway: {{ threads: 1, accessLog: false }}
---
admin: {{ listen: "127.0.0.1:0", token: {TOKEN}, hosts: [test.local] }}
---
telemetry:
  exchangeStore: {{ size: 50, bodyBytes: 16 }}
---
api:
  name: shop
  port: 0
  ip: 127.0.0.1
  path: {{ uri: /shop }}
  flow:
    - apiKey:
        stores: [ {{ simple: [ {{ secret: {{ value: k-1 }} }} ] }} ]
        extractors: [ {{ header: X-Key }}, {{ query: key }} ]
  target: {{ url: "http://127.0.0.1:{backend}" }}
"#
    )
}

async fn admin_get(addr: SocketAddr, path: &str) -> Reply {
    get_with(addr, path, &[("authorization", &format!("Bearer {TOKEN}"))]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recent_exchanges_are_kept_redacted_and_shown_in_the_console() {
    let backend = Backend::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gw.yaml");
    std::fs::write(&file, config(backend.port())).unwrap();
    let control = turnpike::Control::start(vec![file]).unwrap();
    let t = control.gateway().listeners()[0].1;
    let a = control.admin_addr().unwrap();

    // Without the token: the console's login page, with a 401.
    let login = get(a, "/console").await;
    assert_eq!(login.status, 401);
    assert!(login.text().contains("id=\"token\""), "{}", login.text());
    assert_eq!(get(a, "/console/app.js").await.status, 200);
    assert_eq!(admin_get(a, "/console").await.status, 200);
    // The cookie the login page sets works for reading, not for changing.
    let cookie = format!("turnpike_admin={TOKEN}");
    assert_eq!(
        get_with(a, "/admin/v1/stats", &[("cookie", &cookie)])
            .await
            .status,
        200
    );
    let put = send(
        a,
        req("PUT", "/admin/v1/apis/x")
            .header("cookie", &cookie)
            .header("content-type", "application/yaml")
            .body(Full::new(Bytes::from("api: {name: x, port: 1}")))
            .unwrap(),
    )
    .await;
    assert_eq!(put.status, 401);

    // Traffic: a POST with a body longer than the 16 bytes kept, its key in the query.
    let r = send(
        t,
        req("POST", "/shop/items?key=k-1&page=2")
            .header("authorization", format!("Bearer {SECRET}"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(
                r#"{"name":"apple","count":12345678}"#,
            )))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200);
    let id = r.header("x-request-id").unwrap().to_owned();
    let r = get_with(t, "/shop/x", &[("x-key", "k-1")]).await;
    assert_eq!(r.status, 200);
    assert_eq!(get(t, "/shop/denied").await.status, 401);

    let list = admin_get(a, "/admin/v1/exchanges").await.json();
    assert_eq!(
        (&list["enabled"], &list["size"]),
        (&json!(true), &json!(50))
    );
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    assert_eq!(items[2]["id"], id.as_str(), "newest first");
    assert_eq!(items[2]["uri"], "/shop/items?key=<redacted>&page=2");
    let errors = admin_get(a, "/admin/v1/exchanges?status=4xx&api=shop")
        .await
        .json();
    assert_eq!(errors["items"].as_array().unwrap().len(), 1);
    let one = admin_get(a, &format!("/admin/v1/exchanges/{id}")).await;
    let text = one.text();
    assert!(!text.contains(SECRET), "{text}");
    let one = one.json();
    // (The echo backend repeats the request in its answer; what the client sent is redacted.)
    assert!(!one["uri"].as_str().unwrap().contains("k-1"));
    assert!(!one["requestHeaders"].to_string().contains("k-1"));
    let header = |list: &serde_json::Value, name: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|h| h[0] == name)
            .map(|h| h[1].as_str().unwrap().to_owned())
    };
    assert_eq!(
        header(&one["requestHeaders"], "authorization").as_deref(),
        Some("<redacted>")
    );
    assert_eq!(
        header(&one["requestHeaders"], "content-type").as_deref(),
        Some("application/json")
    );
    assert_eq!(one["requestBody"], r#"{"name":"apple","#);
    assert_eq!(one["requestBodyTruncated"], true);
    assert_eq!(one["status"], 200);
    assert!(one["node"]
        .as_str()
        .unwrap()
        .ends_with(&backend.port().to_string()));
    let x = items[1]["id"].as_str().unwrap();
    let other = admin_get(a, &format!("/admin/v1/exchanges/{x}"))
        .await
        .json();
    assert_eq!(
        header(&other["requestHeaders"], "x-key").as_deref(),
        Some("<redacted>")
    );
    assert_eq!(admin_get(a, "/admin/v1/exchanges/nope").await.status, 404);
    let stats = admin_get(a, "/admin/v1/stats").await.json();
    assert!(
        stats["apis"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["name"] == "shop"),
        "{stats}"
    );

    // The console in a real browser.
    if python_has(&["selenium"]) && std::path::Path::new("/usr/bin/chromium").exists() {
        let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("console.png");
        let _ = std::fs::remove_file(&shot);
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/console_check.py");
        let base = format!("http://{a}");
        let (shot2, id2) = (shot.clone(), id.clone());
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new("python3")
                .args([
                    script,
                    &base,
                    TOKEN,
                    &shot2.display().to_string(),
                    &id2,
                    "shop",
                ])
                .env("SECRET", SECRET)
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "console check failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("OK"), "{stdout}");
        assert!(shot.exists(), "no screenshot at {}", shot.display());
        eprintln!("console screenshot: {}", shot.display());
    } else {
        assert!(
            std::env::var_os("CI").is_none(),
            "selenium or chromium is missing under CI"
        );
        eprintln!("SKIPPED: the browser part needs selenium and chromium");
    }
    control.shutdown();
}

/// Without a `telemetry.exchangeStore` the store is off (it costs CPU per request and keeps
/// request data): the API and the console say so, with the line that turns it on, instead of
/// showing an empty list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_exchange_store_the_console_says_how_to_turn_it_on() {
    let backend = Backend::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gw.yaml");
    std::fs::write(
        &file,
        format!(
            "gateway: {{ threads: 1, accessLog: false }}\n---\nadmin: {{ listen: \"127.0.0.1:0\", token: {TOKEN}, hosts: [test.local] }}\n---\napi:\n  port: 0\n  ip: 127.0.0.1\n  target: {{ url: \"http://127.0.0.1:{}\" }}\n",
            backend.port()
        ),
    )
    .unwrap();
    let control = turnpike::Control::start(vec![file]).unwrap();
    let t = control.gateway().listeners()[0].1;
    let a = control.admin_addr().unwrap();
    assert_eq!(get(t, "/x").await.status, 200);
    let list = admin_get(a, "/admin/v1/exchanges").await.json();
    assert_eq!(list["enabled"], false, "{list}");
    assert_eq!(list["count"], 0);
    let hint = list["hint"].as_str().unwrap();
    assert!(hint.contains("exchangeStore: { size: 1000 }"), "{hint}");
    let page = admin_get(a, "/console").await.text();
    assert!(page.contains("id=\"exchanges-off\""), "{page}");
    control.shutdown();
}
