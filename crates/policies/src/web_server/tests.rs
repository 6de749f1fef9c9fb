use super::*;
use crate::testutil::{ctx, exchange};
use http_body_util::BodyExt;
use turnpike_core::TemplateScope;

/// A site: `index.html`, `css/site.css`, `docs/` without an index, `.env`, and a link that
/// leads out of it.
fn site() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("site");
    std::fs::create_dir_all(root.join("css")).unwrap();
    std::fs::create_dir_all(root.join("docs/a b")).unwrap();
    std::fs::write(root.join("index.html"), "<h1>home</h1>").unwrap();
    std::fs::write(root.join("css/site.css"), "body{}").unwrap();
    std::fs::write(root.join("docs/<x>.txt"), "x").unwrap();
    std::fs::write(root.join(".env"), "SECRET=1").unwrap();
    std::fs::write(dir.path().join("outside.txt"), "outside").unwrap();
    std::os::unix::fs::symlink(dir.path().join("outside.txt"), root.join("escape.txt")).unwrap();
    (dir, root)
}

fn policy(base: &Path, v: serde_json::Value) -> Result<WebServer, CompileError> {
    let scope = TemplateScope::default();
    let mut c = ctx(&scope);
    c.base_dir = base;
    WebServer::compile(serde_json::from_value(v).unwrap(), &c)
}

struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: String,
}

async fn get(p: &WebServer, method: &str, uri: &str, headers: &[(&str, &str)]) -> Answer {
    let mut ex = exchange(method, uri, headers, "");
    let mut outcome = p.on_request(&mut ex);
    if let Outcome::Wait(w) = outcome {
        let resume = w.future.await;
        outcome = resume(&mut ex);
    }
    match outcome {
        Outcome::Respond(r) => {
            let status = r.status().as_u16();
            let headers = r.headers().clone();
            let body = r.into_body().collect().await.unwrap().to_bytes();
            Answer {
                status,
                headers,
                body: String::from_utf8_lossy(&body).into_owned(),
            }
        }
        Outcome::Reject(pr) => Answer {
            status: pr.status.as_u16(),
            headers: http::HeaderMap::new(),
            body: pr.kind().to_owned(),
        },
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn files_and_index_files_are_served_with_their_types() {
    let (dir, _) = site();
    let p = policy(
        dir.path(),
        serde_json::json!({"docBase": "site", "index": "index.html"}),
    )
    .unwrap();
    let a = get(&p, "GET", "/", &[]).await;
    assert_eq!((a.status, a.body.as_str()), (200, "<h1>home</h1>"));
    assert_eq!(a.headers["content-type"], "text/html; charset=utf-8");
    assert_eq!(a.headers["content-length"], "13");
    let a = get(&p, "GET", "/css/site.css?v=2", &[]).await;
    assert_eq!((a.status, a.body.as_str()), (200, "body{}"));
    assert_eq!(a.headers["content-type"], "text/css; charset=utf-8");
    // A folder without its `/` is redirected, keeping the query.
    let a = get(&p, "GET", "/css?x=1", &[]).await;
    assert_eq!(
        (a.status, a.headers["location"].to_str().unwrap()),
        (301, "/css/?x=1")
    );
    // A folder reached through `//name` is redirected below this site, not to `//name/`
    // (which a browser reads as another host).
    std::fs::create_dir_all(dir.path().join("site/evil.com")).unwrap();
    for uri in ["//evil.com", "///evil.com"] {
        let a = get(&p, "GET", uri, &[]).await;
        assert_eq!(
            (a.status, a.headers["location"].to_str().unwrap()),
            (301, "/evil.com/"),
            "{uri}"
        );
    }

    // A folder without an index file is not listed unless asked.
    assert_eq!(get(&p, "GET", "/docs/", &[]).await.status, 404);
    assert_eq!(get(&p, "GET", "/nothing.html", &[]).await.status, 404);
    // HEAD: the head only.
    let a = get(&p, "HEAD", "/index.html", &[]).await;
    assert_eq!((a.status, a.body.as_str()), (200, ""));
    assert_eq!(a.headers["content-length"], "13");
    let a = get(&p, "POST", "/index.html", &[]).await;
    assert_eq!((a.status, a.body.as_str()), (405, "method-not-allowed"));
}

#[tokio::test]
async fn paths_cannot_leave_the_folder_or_show_hidden_files() {
    let (dir, _) = site();
    let p = policy(dir.path(), serde_json::json!({"docBase": "site"})).unwrap();
    for bad in [
        "/../outside.txt",
        "/css/../../outside.txt",
        "/%2e%2e/outside.txt",
        "/css/..%2f..%2foutside.txt",
        "/..%5coutside.txt",
        "/index.html%00.txt",
        "/%ff",
    ] {
        assert_eq!(get(&p, "GET", bad, &[]).await.status, 400, "{bad}");
    }
    // Hidden names, and a link that leads out, are as if absent.
    assert_eq!(get(&p, "GET", "/.env", &[]).await.status, 404);
    assert_eq!(get(&p, "GET", "/%2eenv", &[]).await.status, 404);
    assert_eq!(get(&p, "GET", "/escape.txt", &[]).await.status, 404);
    // `.` segments and doubled slashes are harmless.
    assert_eq!(get(&p, "GET", "/./css//site.css", &[]).await.status, 200);
}

#[tokio::test]
async fn listings_escape_names() {
    let (dir, _) = site();
    let p = policy(
        dir.path(),
        serde_json::json!({"docBase": "site", "generateIndex": true}),
    )
    .unwrap();
    let a = get(&p, "GET", "/docs/", &[]).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.headers["content-type"], "text/html; charset=utf-8");
    assert!(
        a.body
            .contains("<a href=\"%3Cx%3E%2Etxt\">&lt;x&gt;.txt</a>"),
        "{}",
        a.body
    );
    assert!(a.body.contains("<a href=\"a%20b/\">a b/</a>"), "{}", a.body);
    let root = get(&p, "GET", "/", &[]).await;
    assert!(!root.body.contains(".env"), "{}", root.body);
}

#[tokio::test]
async fn conditional_requests_get_304() {
    let (dir, _) = site();
    let p = policy(dir.path(), serde_json::json!({"docBase": "site"})).unwrap();
    let a = get(&p, "GET", "/css/site.css", &[]).await;
    let etag = a.headers["etag"].to_str().unwrap().to_owned();
    let modified = a.headers["last-modified"].to_str().unwrap().to_owned();
    let b = get(&p, "GET", "/css/site.css", &[("if-none-match", &etag)]).await;
    assert_eq!((b.status, b.body.as_str()), (304, ""));
    let b = get(
        &p,
        "GET",
        "/css/site.css",
        &[("if-modified-since", &modified)],
    )
    .await;
    assert_eq!(b.status, 304);
    let b = get(
        &p,
        "GET",
        "/css/site.css",
        &[("if-none-match", "\"other\"")],
    )
    .await;
    assert_eq!(b.status, 200);
    let b = get(
        &p,
        "GET",
        "/css/site.css",
        &[("if-modified-since", "Mon, 01 Jan 2001 00:00:00 GMT")],
    )
    .await;
    assert_eq!(b.status, 200);
}

#[test]
fn segments_are_checked() {
    assert_eq!(segments("/a/./b//c/").unwrap(), ["a", "b", "c"]);
    assert_eq!(segments("/a%20b").unwrap(), ["a b"]);
    assert_eq!(segments("/a/../b"), Err(Refused::Malformed));
    assert_eq!(segments("/a%2fb"), Err(Refused::Malformed));
    assert_eq!(segments("/.git/config"), Err(Refused::Hidden));
}

proptest::proptest! {
    /// Whatever the path, its segments never climb and never hold a separator.
    #[test]
    fn no_path_escapes(path in "(/|[a-z.%2fF5cC0-9])*") {
        if let Ok(segs) = segments(&path) {
            for s in segs {
                proptest::prop_assert!(s != ".." && !s.contains('/') && !s.contains('\\') && !s.starts_with('.'));
            }
        }
    }
}

#[test]
fn settings_errors() {
    let (dir, _) = site();
    let key = |v| policy(dir.path(), v).map(|_| ()).map_err(|e| e.key);
    assert_eq!(
        key(serde_json::json!({"docBase": "missing"})),
        Err("docBase".into())
    );
    assert_eq!(
        key(serde_json::json!({"docBase": "site/index.html"})),
        Err("docBase".into())
    );
    assert_eq!(
        key(serde_json::json!({"docBase": "site", "index": "a/b.html"})),
        Err("index".into())
    );
    assert!(key(serde_json::json!({"docBase": "site", "index": "index.html, index.htm"})).is_ok());
    assert!(serde_json::from_value::<WebServerSettings>(
        serde_json::json!({"docBase": "x", "cache": 1})
    )
    .is_err());
}
