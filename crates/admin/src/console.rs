//! The web console: a page, a script and a style sheet built into the binary (nothing is
//! fetched from elsewhere, so it works offline), reading the admin API's `stats` and
//! `exchanges` resources. Without the token the page answers 401 with a login form that keeps
//! the token in a cookie (which only reading requests accept).

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::Full;

const INDEX: &str = include_str!("console/index.html");
const LOGIN: &str = include_str!("console/login.html");
const SCRIPT: &str = include_str!("console/app.js");
const STYLE: &str = include_str!("console/style.css");

fn answer(
    status: StatusCode,
    body: &'static str,
    content_type: &'static str,
) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

/// The console page.
pub fn page() -> Response<Full<Bytes>> {
    answer(StatusCode::OK, INDEX, "text/html; charset=utf-8")
}

/// 401 with the login form.
pub fn login() -> Response<Full<Bytes>> {
    let mut r = answer(StatusCode::UNAUTHORIZED, LOGIN, "text/html; charset=utf-8");
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"turnpike-admin\""),
    );
    r
}

/// The console's script or style sheet at `path`, if it is one.
pub fn asset(path: &str) -> Option<Response<Full<Bytes>>> {
    match path {
        "/console/app.js" => Some(answer(
            StatusCode::OK,
            SCRIPT,
            "text/javascript; charset=utf-8",
        )),
        "/console/style.css" => Some(answer(StatusCode::OK, STYLE, "text/css; charset=utf-8")),
        _ => None,
    }
}
