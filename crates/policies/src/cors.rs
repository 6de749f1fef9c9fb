//! `cors`: answers CORS preflight requests itself and adds the CORS headers to responses for
//! allowed origins (Fetch standard, "CORS protocol").

use std::collections::HashSet;

use http::{header, HeaderValue, Method, Response, StatusCode};
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_config::units::{Duration, Flag};
use turnpike_core::problems;
use turnpike_core::{Body, Exchange, Outcome, Policy, Problem};
use turnpike_core::{CompileContext, CompileError, PolicyFactory};

use crate::err;

/// `cors`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CorsSettings {
    /// Allowed origins (`https://app.example.com`, `null` for pages opened from files), or `*`;
    /// a list, or one string separated by spaces or commas (Membrane's form).
    #[serde(default)]
    pub origins: Words,
    /// Allowed methods (default GET, HEAD, POST); a list or a separated string.
    #[serde(default)]
    pub methods: Words,
    /// Allowed request headers (default: none beyond the CORS-safelisted ones); a list or a
    /// separated string.
    #[serde(default)]
    pub headers: Words,
    /// Response headers exposed to scripts; a list or a separated string.
    #[serde(default)]
    pub expose_headers: Words,
    /// Membrane's `allowAll`: any origin (the request's is echoed), the usual methods and any
    /// requested header; instead of `origins`.
    #[serde(default)]
    pub allow_all: Flag,
    /// Allow credentials (cookies, authorization); not with origin `*`.
    #[serde(default)]
    pub credentials: Flag,
    /// How long browsers may cache a preflight answer.
    #[serde(default)]
    pub max_age: Option<Duration>,
}

/// A list of words, written as a YAML list or as one string separated by spaces or commas.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Words {
    /// `[a, b]`
    List(Vec<String>),
    /// `"a, b"` or `"a b"`
    Text(String),
    /// Nothing given.
    #[default]
    #[serde(skip)]
    None,
}

impl Words {
    fn list(&self) -> Vec<String> {
        match self {
            Words::List(l) => l.clone(),
            Words::Text(t) => t
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter(|w| !w.is_empty())
                .map(str::to_owned)
                .collect(),
            Words::None => Vec::new(),
        }
    }
}

/// The compiled policy.
pub struct Cors {
    /// Allow-all: the request's origin and requested headers are echoed.
    echo: bool,
    any_origin: bool,
    origins: HashSet<String>,
    methods: HashSet<Method>,
    allow_methods: HeaderValue,
    headers: HashSet<String>,
    allow_headers: Option<HeaderValue>,
    expose: Option<HeaderValue>,
    credentials: bool,
    max_age: Option<HeaderValue>,
}

impl PolicyFactory for Cors {
    const NAME: &'static str = "cors";
    type Settings = CorsSettings;

    /// Compiles the policy; `*` with credentials is rejected (browsers refuse it).
    fn compile(c: CorsSettings, _ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        let echo = c.allow_all.0;
        let origin_list = c.origins.list();
        if echo && !origin_list.is_empty() {
            return Err(err("allowAll", "give either `allowAll` or `origins`"));
        }
        if !echo && origin_list.is_empty() {
            return Err(err("origins", "list at least one origin, or `*`"));
        }
        let any_origin = echo || origin_list.iter().any(|o| o == "*");
        if any_origin && !echo && c.credentials.0 {
            return Err(err(
                "credentials",
                "not allowed with origin `*` (browsers reject it); list the origins",
            ));
        }
        let mut origins = HashSet::new();
        for (i, o) in origin_list.iter().enumerate() {
            if o == "*" {
                continue;
            }
            let origin_like =
                (o.starts_with("http://") || o.starts_with("https://")) && !o.ends_with('/');
            if !origin_like && o != "null" {
                return Err(err(
                    &format!("origins[{i}]"),
                    format!("`{o}` is not an origin such as https://app.example.com"),
                ));
            }
            origins.insert(o.to_ascii_lowercase());
        }
        let methods_given = c.methods.list();
        let method_names: Vec<String> = if !methods_given.is_empty() {
            methods_given
                .iter()
                .map(|m| m.to_ascii_uppercase())
                .collect()
        } else if echo {
            ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
                .map(String::from)
                .to_vec()
        } else {
            vec!["GET".into(), "HEAD".into(), "POST".into()]
        };
        let mut methods = HashSet::new();
        for (i, m) in method_names.iter().enumerate() {
            methods
                .insert(Method::from_bytes(m.as_bytes()).map_err(|_| {
                    err(&format!("methods[{i}]"), format!("`{m}` is not a method"))
                })?);
        }
        let value = |v: String, key: &str| {
            HeaderValue::from_str(&v).map_err(|_| err(key, "not a valid header value"))
        };
        let allow_methods = value(method_names.join(", "), "methods")?;
        let header_list = c.headers.list();
        let headers: HashSet<String> = header_list.iter().map(|h| h.to_ascii_lowercase()).collect();
        let allow_headers = (!header_list.is_empty())
            .then(|| value(header_list.join(", "), "headers"))
            .transpose()?;
        let expose_list = c.expose_headers.list();
        let expose = (!expose_list.is_empty())
            .then(|| value(expose_list.join(", "), "exposeHeaders"))
            .transpose()?;
        let max_age = c.max_age.map(|d| HeaderValue::from(d.0.as_secs()));
        Ok(Cors {
            echo,
            any_origin,
            origins,
            methods,
            allow_methods,
            headers,
            allow_headers,
            expose,
            credentials: c.credentials.0,
            max_age,
        })
    }
}

impl Cors {
    fn allowed_origin(&self, origin: &str) -> bool {
        self.any_origin || self.origins.contains(&origin.to_ascii_lowercase())
    }

    fn origin_value(&self, origin: &HeaderValue) -> HeaderValue {
        if self.any_origin && !self.echo {
            HeaderValue::from_static("*")
        } else {
            origin.clone()
        }
    }
}

impl Policy for Cors {
    fn name(&self) -> &'static str {
        "cors"
    }

    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let Some(origin) = ex.request.headers.get(header::ORIGIN).cloned() else {
            return Outcome::Continue;
        };
        let preflight = ex.request.method == Method::OPTIONS
            && ex
                .request
                .headers
                .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
        if !preflight {
            return Outcome::Continue;
        }
        let deny =
            |why: String| Outcome::Reject(Problem::new(&problems::CORS_DENIED).with_detail(why));
        let origin_text = origin.to_str().unwrap_or("");
        if !self.allowed_origin(origin_text) {
            return deny(format!("origin `{origin_text}` is not allowed"));
        }
        let method = ex.request.headers[header::ACCESS_CONTROL_REQUEST_METHOD].as_bytes();
        if !Method::from_bytes(method).is_ok_and(|m| self.methods.contains(&m)) {
            return deny(format!(
                "method `{}` is not allowed",
                String::from_utf8_lossy(method)
            ));
        }
        if let Some(req_headers) = ex
            .request
            .headers
            .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
            .and_then(|v| v.to_str().ok())
        {
            for h in req_headers
                .split(',')
                .map(|h| h.trim().to_ascii_lowercase())
                .filter(|h| !h.is_empty())
            {
                if !self.echo && !self.headers.contains(&h) {
                    return deny(format!("header `{h}` is not allowed"));
                }
            }
        }
        let mut res = Response::new(Body::Empty);
        *res.status_mut() = StatusCode::NO_CONTENT;
        let h = res.headers_mut();
        h.insert(
            header::ACCESS_CONTROL_ALLOW_ORIGIN,
            self.origin_value(&origin),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            self.allow_methods.clone(),
        );
        if let Some(v) = &self.allow_headers {
            h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, v.clone());
        } else if self.echo {
            if let Some(v) = ex
                .request
                .headers
                .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
                .cloned()
            {
                h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, v);
            }
        }
        if self.credentials {
            h.insert(
                header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
                HeaderValue::from_static("true"),
            );
        }
        if let Some(v) = &self.max_age {
            h.insert(header::ACCESS_CONTROL_MAX_AGE, v.clone());
        }
        h.insert(
            header::VARY,
            HeaderValue::from_static(
                "Origin, Access-Control-Request-Method, Access-Control-Request-Headers",
            ),
        );
        Outcome::Respond(res)
    }

    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        let Some(origin) = ex.request.headers.get(header::ORIGIN).cloned() else {
            return Outcome::Continue;
        };
        let allowed = self.allowed_origin(origin.to_str().unwrap_or(""));
        let Some(res) = ex.response.as_mut() else {
            return Outcome::Continue;
        };
        let h = res.headers_mut();
        if h.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN) {
            return Outcome::Continue; // a preflight answer, or the backend did CORS itself
        }
        if !self.any_origin || self.echo {
            h.append(header::VARY, HeaderValue::from_static("Origin"));
        }
        if !allowed {
            return Outcome::Continue;
        }
        h.insert(
            header::ACCESS_CONTROL_ALLOW_ORIGIN,
            self.origin_value(&origin),
        );
        if self.credentials {
            h.insert(
                header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
                HeaderValue::from_static("true"),
            );
        }
        if let Some(v) = &self.expose {
            h.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, v.clone());
        }
        Outcome::Continue
    }
}
