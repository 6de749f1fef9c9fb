//! `setCookies`: Membrane's policy that adds a `Set-Cookie` header to the response for each
//! cookie it lists (name, value, `Path`, `Domain`, `Max-Age`, `Expires`, `HttpOnly`,
//! `SameSite`, `Secure`). The header values are built once, at load; names and values are
//! checked there against RFC 6265's grammar.

use http::HeaderValue;
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::PolicyFactory;
use turnpike_core::{CompileContext, CompileError, Exchange, Outcome, Phases, Policy};

use crate::err;

/// `SameSite`.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
pub enum SameSite {
    /// Sent with top-level navigations from other sites.
    #[serde(rename = "LAX", alias = "Lax", alias = "lax")]
    Lax,
    /// Sent only to the site that set it.
    #[serde(rename = "STRICT", alias = "Strict", alias = "strict")]
    Strict,
    /// Sent with every request (the cookie is then `Secure`).
    #[serde(rename = "NONE", alias = "None", alias = "none")]
    None,
}

/// One cookie.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CookieSettings {
    /// The cookie's name.
    pub name: String,
    /// Its value.
    pub value: String,
    /// `Path` (default `/`).
    #[serde(default)]
    pub path: Option<String>,
    /// `Domain`.
    #[serde(default)]
    pub domain: Option<String>,
    /// `Max-Age` in seconds (a negative value, Membrane's default -1, leaves it out).
    #[serde(default)]
    pub max_age: Option<i64>,
    /// `Expires`, an HTTP date (`Wed, 21 Oct 2026 07:28:00 GMT`).
    #[serde(default)]
    pub expires: Option<String>,
    /// `Secure`.
    #[serde(default)]
    pub secure: bool,
    /// `HttpOnly`.
    #[serde(default)]
    pub http_only: bool,
    /// `SameSite` (default `LAX`).
    #[serde(default)]
    pub same_site: Option<SameSite>,
}

/// `setCookies`: the list of cookies.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct SetCookiesSettings(pub Vec<CookieSettings>);

/// The compiled `setCookies` policy: one `Set-Cookie` value per cookie.
#[derive(Debug)]
pub struct SetCookies {
    values: Vec<HeaderValue>,
}

/// RFC 6265 `token` characters (a cookie name).
fn token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// RFC 6265 `cookie-octet`s (a cookie value, unquoted).
fn cookie_value(s: &str) -> bool {
    s.bytes()
        .all(|b| matches!(b, 0x21 | 0x23..=0x2B | 0x2D..=0x3A | 0x3C..=0x5B | 0x5D..=0x7E))
}

/// An attribute value: visible ASCII and spaces, no `;`.
fn attribute(s: &str) -> bool {
    s.bytes().all(|b| (0x20..0x7F).contains(&b) && b != b';')
}

/// The `Set-Cookie` value of `c`; `at` names the cookie in errors.
fn header(c: &CookieSettings, at: &str) -> Result<HeaderValue, CompileError> {
    if !token(&c.name) {
        return Err(err(
            &format!("{at}.name"),
            format!(
                "`{}` is not a cookie name (RFC 6265: letters, digits and !#$%&'*+-.^_`|~)",
                c.name
            ),
        ));
    }
    if !cookie_value(&c.value) {
        return Err(err(
            &format!("{at}.value"),
            "a cookie value cannot hold spaces, quotes, commas, semicolons, backslashes or control characters",
        ));
    }
    let path = c.path.as_deref().unwrap_or("/");
    let mut v = format!("{}={}; Path={path}", c.name, c.value);
    for (key, value) in [
        ("path", Some(path)),
        ("domain", c.domain.as_deref()),
        ("expires", c.expires.as_deref()),
    ] {
        if value.is_some_and(|v| !attribute(v) || v.is_empty()) {
            return Err(err(
                &format!("{at}.{key}"),
                "must be visible ASCII without `;`",
            ));
        }
    }
    if let Some(d) = &c.domain {
        v.push_str(&format!("; Domain={d}"));
    }
    if let Some(age) = c.max_age.filter(|a| *a >= 0) {
        v.push_str(&format!("; Max-Age={age}"));
    }
    if let Some(e) = &c.expires {
        if httpdate::parse_http_date(e).is_err() {
            return Err(err(
                &format!("{at}.expires"),
                format!("`{e}` is not an HTTP date (as `Wed, 21 Oct 2026 07:28:00 GMT`)"),
            ));
        }
        v.push_str(&format!("; Expires={e}"));
    }
    if c.http_only {
        v.push_str("; HttpOnly");
    }
    let same_site = c.same_site.unwrap_or(SameSite::Lax);
    v.push_str(match same_site {
        SameSite::Lax => "; SameSite=Lax",
        SameSite::Strict => "; SameSite=Strict",
        SameSite::None => "; SameSite=None",
    });
    // Browsers drop `SameSite=None` without `Secure`.
    if c.secure || matches!(same_site, SameSite::None) {
        v.push_str("; Secure");
    }
    HeaderValue::from_str(&v).map_err(|_| err(at, "not a valid header value"))
}

impl PolicyFactory for SetCookies {
    const NAME: &'static str = "setCookies";
    const PHASES: Phases = Phases::RESPONSE;
    type Settings = SetCookiesSettings;

    fn compile(c: SetCookiesSettings, _: &CompileContext<'_>) -> Result<Self, CompileError> {
        if c.0.is_empty() {
            return Err(err("", "needs at least one cookie"));
        }
        let values =
            c.0.iter()
                .enumerate()
                .map(|(i, c)| header(c, &format!("[{i}]")))
                .collect::<Result<_, _>>()?;
        Ok(SetCookies { values })
    }
}

impl Policy for SetCookies {
    fn name(&self) -> &'static str {
        "setCookies"
    }

    /// Adds the `Set-Cookie` headers (after any the backend set).
    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        if let Some(r) = ex.response.as_mut() {
            for v in &self.values {
                r.headers_mut().append(http::header::SET_COOKIE, v.clone());
            }
        }
        Outcome::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{exchange, plain};

    fn compile(yaml: serde_json::Value) -> Result<SetCookies, CompileError> {
        SetCookies::compile(serde_json::from_value(yaml).unwrap(), &plain())
    }

    #[test]
    fn builds_each_cookie_with_its_attributes() {
        let p = compile(serde_json::json!([
            { "name": "SESSION", "value": "akj34" },
            { "name": "pref", "value": "dark", "path": "/app", "domain": "example.com",
              "maxAge": 3600, "expires": "Wed, 21 Oct 2026 07:28:00 GMT", "httpOnly": true,
              "sameSite": "STRICT" },
            { "name": "x", "value": "1", "sameSite": "NONE", "maxAge": -1 }
        ]))
        .unwrap();
        let mut ex = exchange("GET", "/", &[], "");
        ex.response = Some(
            http::Response::builder()
                .header("set-cookie", "b=1")
                .body(turnpike_core::Body::Empty)
                .unwrap(),
        );
        assert!(matches!(p.on_response(&mut ex), Outcome::Continue));
        let all: Vec<_> = ex
            .response
            .unwrap()
            .headers()
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            all,
            [
                "b=1",
                "SESSION=akj34; Path=/; SameSite=Lax",
                "pref=dark; Path=/app; Domain=example.com; Max-Age=3600; Expires=Wed, 21 Oct 2026 07:28:00 GMT; HttpOnly; SameSite=Strict",
                "x=1; Path=/; SameSite=None; Secure",
            ]
        );
    }

    #[test]
    fn invalid_cookies_are_load_errors() {
        let e = compile(serde_json::json!([{ "name": "a b", "value": "1" }])).unwrap_err();
        assert_eq!(e.key, "[0].name");
        let e = compile(serde_json::json!([{ "name": "a", "value": "x;y" }])).unwrap_err();
        assert_eq!(e.key, "[0].value");
        let e = compile(serde_json::json!([{ "name": "a", "value": "1", "expires": "tomorrow" }]))
            .unwrap_err();
        assert!(e.message.contains("HTTP date"), "{e:?}");
        let e = compile(serde_json::json!([{ "name": "a", "value": "1", "path": "/a;b" }]))
            .unwrap_err();
        assert_eq!(e.key, "[0].path");
        assert!(compile(serde_json::json!([])).is_err());
    }
}
